/* CLBlast's statuses, events and process-wide program cache (blas.h). */
#include "core/blas.h"

#include <pthread.h>
#include <string.h>

/* ---------------------------------------------------------------- CLBlast, one call at a time */

/* CLBlast 1.5 is not safe to call from two threads at once, even on contexts of their own: its
 * process-wide caches and database code use memory another thread's call has freed (a
 * heap-use-after-free; fixed upstream in 1.6.1). Every CLBlast call holds this lock. */
static pthread_mutex_t blas_lock = PTHREAD_MUTEX_INITIALIZER;

void blas_enter(const clattn_context *ctx) {
    pthread_mutex_lock(&blas_lock);
    launch_lock(ctx);
}

void blas_leave(const clattn_context *ctx) {
    launch_unlock(ctx);
    pthread_mutex_unlock(&blas_lock);
}

/* ---------------------------------------------------------------- CLBlast's program cache */

/* CLBlast keeps every program it builds in one process-wide cache, which holds a reference to
 * the program's cl_context and has no per-context eviction. So the contexts that called it are
 * counted, and the cache is cleared when the last of them is destroyed: a destroyed context's
 * cl_context is then really released, at the price of CLBlast rebuilding (from the driver's
 * own binary cache, where it has one) in the next context. */
static unsigned blas_users; /* under blas_lock */

/* Runs when a context that called CLBlast is destroyed (context_on_destroy). */
static void blas_user_release(clattn_context *ctx) {
    pthread_mutex_lock(&blas_lock);
    if (--blas_users == 0) CLBlastClearCache();
    pthread_mutex_unlock(&blas_lock);
}

void blas_user_add(clattn_context *ctx) {
    if (context_on_destroy(ctx, blas_user_release) != 1) return; /* counted already */
    pthread_mutex_lock(&blas_lock);
    blas_users++;
    pthread_mutex_unlock(&blas_lock);
}

/* ---------------------------------------------------------------- CLBlast's temporaries */

int blas_gemm_copies_fit(const clattn_device_info *dev, size_t m, size_t n, size_t k) {
    const size_t dims[3][2] = {{m, k}, {n, k}, {m, n}};
    cl_ulong alloc = dev->max_alloc_bytes / sizeof(float);
    for (int i = 0; i < 3; i++) {
        size_t elements = 0;
        if (size_mul(blas_padded(dims[i][0]), blas_padded(dims[i][1]), &elements) ||
            elements > (size_t)INT32_MAX || elements > alloc)
            return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------- CLBlast status */

#define CLBLAST_CODE(name)                                                                         \
    { name, #name }
static const struct {
    CLBlastStatusCode code;
    const char *name;
} clblast_codes[] = {
    CLBLAST_CODE(CLBlastNotImplemented),
    CLBLAST_CODE(CLBlastInvalidMatrixA),
    CLBLAST_CODE(CLBlastInvalidMatrixB),
    CLBLAST_CODE(CLBlastInvalidMatrixC),
    CLBLAST_CODE(CLBlastInvalidDimension),
    CLBLAST_CODE(CLBlastInvalidLeadDimA),
    CLBLAST_CODE(CLBlastInvalidLeadDimB),
    CLBLAST_CODE(CLBlastInvalidLeadDimC),
    CLBLAST_CODE(CLBlastInsufficientMemoryA),
    CLBLAST_CODE(CLBlastInsufficientMemoryB),
    CLBLAST_CODE(CLBlastInsufficientMemoryC),
    CLBLAST_CODE(CLBlastInsufficientMemoryTemp),
    CLBLAST_CODE(CLBlastInvalidBatchCount),
    CLBLAST_CODE(CLBlastInvalidOverrideKernel),
    CLBLAST_CODE(CLBlastMissingOverrideParameter),
    CLBLAST_CODE(CLBlastInvalidLocalMemUsage),
    CLBLAST_CODE(CLBlastNoHalfPrecision),
    CLBLAST_CODE(CLBlastNoDoublePrecision),
    CLBLAST_CODE(CLBlastDatabaseError),
    CLBLAST_CODE(CLBlastUnknownError),
    CLBLAST_CODE(CLBlastUnexpectedError),
};
#undef CLBLAST_CODE

clattn_status blas_error(clattn_context *ctx, CLBlastStatusCode code, const char *what) {
    for (size_t i = 0; i < ARRAY_LEN(clblast_codes); i++)
        if (clblast_codes[i].code == code)
            return ctx_error(ctx, CLATTN_ERR_BLAS, "%s failed: %s (%d)", what,
                             clblast_codes[i].name, (int)code);
    const char *name = clattn_status_name((clattn_status)code);
    if (code < 0 && strcmp(name, "unknown status") != 0)
        return ctx_error(ctx, (clattn_status)code, "%s failed: OpenCL error %s (%d)", what, name,
                         (int)code);
    return ctx_error(ctx, CLATTN_ERR_BLAS, "%s failed: CLBlast status %d", what, (int)code);
}

clattn_status blas_done(clattn_context *ctx, CLBlastStatusCode code, cl_event event,
                        const char *what) {
    if (event) {
        if (code == CLBlastSuccess) timing_track(ctx, event);
        clReleaseEvent(event);
    }
    return code == CLBlastSuccess ? CLATTN_SUCCESS : blas_error(ctx, code, what);
}
