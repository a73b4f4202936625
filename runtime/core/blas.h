/*
 * CLBlast as the runtime uses it: its statuses turned into clattn's, its events kept for
 * timing, one call at a time in the process, and its process-wide program cache emptied when
 * the last context that called it is destroyed. The gemm variant and the multi-head attention
 * layer (runtime/mha/) call CLBlast through these.
 */
#ifndef CLATTN_BLAS_H
#define CLATTN_BLAS_H

#include "core/core.h"

#include <clblast_c.h>

/* CLBlast 1.5 is not safe to call from two threads at once, and on a device that runs
 * kernels in the enqueuing thread its launches need the launch lock too (launch_lock): every
 * CLBlast call runs between blas_enter and blas_leave. */
void blas_enter(const clattn_context *ctx);
void blas_leave(const clattn_context *ctx);

/* Counts ctx among CLBlast's users (once per context): when the last of them is destroyed,
 * CLBlast's cache, which holds a reference to every cl_context it served, is cleared. Call it
 * before a context's first CLBlast call. */
void blas_user_add(clattn_context *ctx);

/* CLBlast 1.5 may copy a GEMM operand into a temporary whose dimensions are rounded up to its
 * kernel's tile (at most 128 in its database), and aborts the process (std::terminate) when it
 * cannot allocate one: callers keep such copies, each dimension counted rounded up to BLAS_PAD,
 * within the device's largest allocation. */
#define BLAS_PAD 256

static inline size_t blas_padded(size_t n) {
    return (n + BLAS_PAD - 1) / BLAS_PAD * BLAS_PAD;
}

/* Whether the copies CLBlast could make for C[m][n] = A[m][k] B[n][k]^T each fit the device's
 * largest allocation and CLBlast's int offsets (2^31-1 elements). */
int blas_gemm_copies_fit(const clattn_device_info *dev, size_t m, size_t n, size_t k);

/* A failed CLBlast call as a status and a message naming `what`: CLBlast's own codes become
 * CLATTN_ERR_BLAS; OpenCL's codes, which CLBlast passes on unchanged, keep their value. */
clattn_status blas_error(clattn_context *ctx, CLBlastStatusCode code, const char *what);

/* Keeps a CLBlast event for timing (and releases it) and turns its status into ours. */
clattn_status blas_done(clattn_context *ctx, CLBlastStatusCode code, cl_event event,
                        const char *what);

#endif
