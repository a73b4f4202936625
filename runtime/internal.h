/*
 * What the runtime's files share and the public header does not show: the context's insides,
 * error recording, logging, checked size arithmetic and the program cache's entry points.
 */
#ifndef CLATTN_INTERNAL_H
#define CLATTN_INTERNAL_H

#include "clattn.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#if defined(__GNUC__)
#define PRINTF_LIKE(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define PRINTF_LIKE(fmt, args)
#endif

struct program_entry; /* program.c: one built program and its kernels */

/* Workspace slots: the fused path's packed K, V and V flags, reused from call to call. */
enum { WORKSPACE_PACKED_K, WORKSPACE_PACKED_V, WORKSPACE_V_FLAGS, WORKSPACE_SLOTS };

struct clattn_context {
    clattn_device_info device;
    cl_context cl_ctx;
    cl_command_queue queue;
    int wrapped;   /* cl_ctx and queue belong to the caller; we hold one reference each */
    int profiling; /* the queue records event timestamps */
    struct program_entry *programs; /* in-memory program cache, newest first */
    unsigned programs_built;        /* from source, in this context */
    unsigned programs_loaded;       /* from the disk cache, in this context */
    char *build_log;                /* of the last failed build, or NULL */
    char last_error[1024];
    clattn_stats stats;
    int has_stats;
    int timing;         /* sum kernel times into stats.kernel_ms (waits for each call) */
    int in_attention;   /* inside clattn_attention: the events timing keeps */
    cl_event timed[32]; /* the current call's kernels while timing */
    unsigned num_timed;
    double timed_ms; /* kernel time of events already summed (the list was full) */
    cl_mem workspace[WORKSPACE_SLOTS]; /* buffers kept between calls (workspace_get) */
    size_t workspace_bytes[WORKSPACE_SLOTS];
    int blas_user; /* has called CLBlast: counted until destroyed (gemm_context_release) */
};

/* ---- errors and logging (context.c) */

/* Records a one-line detail on ctx (ctx may be NULL) and returns `status`, so that error
 * paths read `return ctx_error(ctx, CLATTN_ERR_..., "Q has %zu heads", n);`. */
clattn_status ctx_error(clattn_context *ctx, clattn_status status, const char *fmt, ...)
    PRINTF_LIKE(3, 4);
/* For OpenCL failures: "<what>: CL_<NAME> (<code>)". Returns the OpenCL code as status. */
clattn_status ctx_cl_error(clattn_context *ctx, cl_int err, const char *what);
void ctx_clear_error(clattn_context *ctx);

/* CLATTN_VERBOSE=1 turns logging on; messages go to stderr prefixed "clattn: ". */
int log_enabled(void);
void log_msg(const char *fmt, ...) PRINTF_LIKE(1, 2);

/* ---- checked size arithmetic: return 1 on overflow */

static inline int size_mul(size_t a, size_t b, size_t *out) {
    return __builtin_mul_overflow(a, b, out);
}
static inline int size_add(size_t a, size_t b, size_t *out) {
    return __builtin_add_overflow(a, b, out);
}

/* ---- devices (device.c) */

clattn_status device_describe(cl_platform_id platform, cl_device_id device,
                              clattn_device_info *info);

/* ---- programs and kernels (program.c) */

/* A program is built from the concatenation of `files` (names in cl/, e.g. "common.cl") with
 * `defines` ("-DHEAD_DIM=64 ..."). -cl-std follows the device. Programs live in the context's
 * memory cache and in the disk cache; kernels are created once per program and name. */
clattn_status kernel_get(clattn_context *ctx, const char *const *files, size_t num_files,
                         const char *defines, const char *kernel_name, cl_kernel *kernel);
void program_cache_release(clattn_context *ctx);
/* The cache folder in use, or NULL when disabled ($CLATTN_CACHE_DIR=off). Writes into buf. */
const char *program_cache_dir(char *buf, size_t size);

/* Sets kernel arguments in order and keeps the first error. */
typedef struct kernel_args {
    cl_kernel kernel;
    cl_uint next;
    cl_int err;
} kernel_args;
void kernel_arg(kernel_args *args, size_t size, const void *value);
#define KARG(args, value) kernel_arg(&(args), sizeof(value), &(value))

/* Enqueues a kernel; records the failure on ctx. While timing, the kernel's event is kept for
 * timing_finish. */
clattn_status kernel_launch(clattn_context *ctx, cl_kernel kernel, cl_uint dims,
                            const size_t *global, const size_t *local, cl_event *event,
                            const char *what);

/* Keeps an event of the current attention call for timing_finish (no-op unless timing, and
 * outside clattn_attention: clattn_softmax's kernels are not an attention call's); a full list is
 * waited for and summed first, so a call may launch any number of kernels. */
void timing_track(clattn_context *ctx, cl_event event);
/* Waits for the call's kernels and returns their summed execution time in ms (0 when not
 * timing); releases the kept events. */
double timing_finish(clattn_context *ctx);

/* ---- buffers (context.c) */

/* A buffer of at least `bytes` that the context keeps between calls (allocated, or grown, on
 * demand), so that repeated calls do not allocate and first-touch their scratch memory each
 * time. *out is a new reference the caller releases; the queue is in-order, so the next call's
 * writes wait for this call's kernels. */
clattn_status workspace_get(clattn_context *ctx, int slot, size_t bytes, cl_mem *out,
                            const char *what);

/* Size of a buffer in bytes, or 0 for an invalid one. */
size_t buffer_size(cl_mem buffer);
/* Creates a buffer and records failures as "allocating <what> (<bytes> bytes)". */
clattn_status buffer_create(clattn_context *ctx, cl_mem_flags flags, size_t bytes, void *host,
                            cl_mem *out, const char *what);

#endif /* CLATTN_INTERNAL_H */
