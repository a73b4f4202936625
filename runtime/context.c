/*
 * The context: one device, one OpenCL context and in-order queue (ours, or the caller's for
 * interop), the program cache, the last error and build log, the last call's statistics.
 * Also the error recording and logging every other runtime file uses.
 */
#include "internal.h"
#include "paths.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- errors and logging */

clattn_status ctx_error(clattn_context *ctx, clattn_status status, const char *fmt, ...) {
    if (ctx) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->last_error, sizeof ctx->last_error, fmt, ap);
        va_end(ap);
        log_msg("error: %s (%s)", ctx->last_error, clattn_status_name(status));
    }
    return status;
}

clattn_status ctx_cl_error(clattn_context *ctx, cl_int err, const char *what) {
    clattn_status status = (clattn_status)err;
    return ctx_error(ctx, status, "%s: %s (%d)", what, clattn_status_name(status), (int)err);
}

void ctx_clear_error(clattn_context *ctx) {
    if (ctx) ctx->last_error[0] = '\0';
}

int log_enabled(void) {
    const char *v = getenv("CLATTN_VERBOSE");
    return v && *v && strcmp(v, "0") != 0;
}

void log_msg(const char *fmt, ...) {
    if (!log_enabled()) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("clattn: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ---------------------------------------------------------------- buffers and kernels */

size_t buffer_size(cl_mem buffer) {
    size_t size = 0;
    if (!buffer || clGetMemObjectInfo(buffer, CL_MEM_SIZE, sizeof size, &size, NULL) != CL_SUCCESS)
        return 0;
    return size;
}

clattn_status buffer_create(clattn_context *ctx, cl_mem_flags flags, size_t bytes, void *host,
                            cl_mem *out, const char *what) {
    *out = NULL;
    if (bytes == 0) bytes = 4; /* OpenCL rejects empty buffers; keep a placeholder */
    if (bytes > ctx->device.max_alloc_bytes)
        return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY,
                         "allocating %s: %zu bytes exceed the device's largest allocation "
                         "(%llu bytes)",
                         what, bytes, (unsigned long long)ctx->device.max_alloc_bytes);
    cl_int err = CL_SUCCESS;
    *out = clCreateBuffer(ctx->cl_ctx, flags, bytes, host, &err);
    if (err != CL_SUCCESS) {
        *out = NULL;
        char detail[160];
        snprintf(detail, sizeof detail, "allocating %s (%zu bytes)", what, bytes);
        return ctx_cl_error(ctx, err, detail);
    }
    return CLATTN_SUCCESS;
}

clattn_status workspace_get(clattn_context *ctx, int slot, size_t bytes, cl_mem *out,
                            const char *what) {
    *out = NULL;
    if (ctx->workspace[slot] && ctx->workspace_bytes[slot] < bytes) {
        clReleaseMemObject(ctx->workspace[slot]);
        ctx->workspace[slot] = NULL;
    }
    if (!ctx->workspace[slot]) {
        clattn_status status =
            buffer_create(ctx, CL_MEM_READ_WRITE, bytes, NULL, &ctx->workspace[slot], what);
        if (status != CLATTN_SUCCESS) return status;
        ctx->workspace_bytes[slot] = bytes;
    }
    clRetainMemObject(ctx->workspace[slot]);
    *out = ctx->workspace[slot];
    return CLATTN_SUCCESS;
}

void kernel_arg(kernel_args *args, size_t size, const void *value) {
    if (args->err != CL_SUCCESS) return;
    args->err = clSetKernelArg(args->kernel, args->next, size, value);
    args->next++;
}

clattn_status kernel_launch(clattn_context *ctx, cl_kernel kernel, cl_uint dims,
                            const size_t *global, const size_t *local, cl_event *event,
                            const char *what) {
    cl_event done = NULL;
    cl_int err = clEnqueueNDRangeKernel(ctx->queue, kernel, dims, NULL, global, local, 0, NULL,
                                        event || ctx->timing ? &done : NULL);
    if (event) *event = NULL;
    if (err != CL_SUCCESS) return ctx_cl_error(ctx, err, what);
    timing_track(ctx, done);
    if (event)
        *event = done;
    else if (done)
        clReleaseEvent(done);
    return CLATTN_SUCCESS;
}

/* Waits for the kept events, sums their execution times (ms) and releases them. */
static double timing_sum(clattn_context *ctx) {
    double total_ns = 0;
    if (ctx->num_timed > 0) clWaitForEvents(ctx->num_timed, ctx->timed);
    for (unsigned i = 0; i < ctx->num_timed; i++) {
        cl_ulong start = 0, end = 0;
        if (clGetEventProfilingInfo(ctx->timed[i], CL_PROFILING_COMMAND_START, sizeof start, &start,
                                    NULL) == CL_SUCCESS &&
            clGetEventProfilingInfo(ctx->timed[i], CL_PROFILING_COMMAND_END, sizeof end, &end,
                                    NULL) == CL_SUCCESS &&
            end > start)
            total_ns += (double)(end - start);
        clReleaseEvent(ctx->timed[i]);
    }
    ctx->num_timed = 0;
    return total_ns * 1e-6;
}

void timing_track(clattn_context *ctx, cl_event event) {
    if (!ctx->timing || !ctx->in_attention || !event) return;
    if (ctx->num_timed == ARRAY_LEN(ctx->timed)) ctx->timed_ms += timing_sum(ctx);
    clRetainEvent(event);
    ctx->timed[ctx->num_timed++] = event;
}

double timing_finish(clattn_context *ctx) {
    double total = ctx->timed_ms + timing_sum(ctx);
    ctx->timed_ms = 0;
    return total;
}

/* ---------------------------------------------------------------- lifetime */

static clattn_status context_alloc(clattn_context **out) {
    *out = calloc(1, sizeof **out);
    return *out ? CLATTN_SUCCESS : CLATTN_ERR_OUT_OF_MEMORY;
}

clattn_status clattn_context_create(clattn_context **out, size_t device_index) {
    if (!out) return CLATTN_ERR_INVALID_ARGUMENT;
    *out = NULL;
    clattn_context *ctx = NULL;
    clattn_status status = context_alloc(&ctx);
    if (status != CLATTN_SUCCESS) return status;
    status = clattn_device_get_info(device_index, &ctx->device);
    if (status != CLATTN_SUCCESS) goto fail;

    cl_int err = CL_SUCCESS;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM,
                                     (cl_context_properties)ctx->device.platform, 0};
    ctx->cl_ctx = clCreateContext(props, 1, &ctx->device.device, NULL, NULL, &err);
    if (err != CL_SUCCESS) {
        status = (clattn_status)err;
        goto fail;
    }
    ctx->queue =
        clCreateCommandQueue(ctx->cl_ctx, ctx->device.device, CL_QUEUE_PROFILING_ENABLE, &err);
    if (err != CL_SUCCESS) {
        status = (clattn_status)err;
        goto fail;
    }
    ctx->profiling = 1;
    log_msg("context on device %zu: %s (%s)", device_index, ctx->device.name,
            ctx->device.platform_name);
    *out = ctx;
    return CLATTN_SUCCESS;

fail:
    clattn_context_destroy(ctx);
    return status;
}

clattn_status clattn_context_wrap(clattn_context **out, cl_context cl_ctx, cl_device_id device,
                                  cl_command_queue queue) {
    if (!out) return CLATTN_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (!cl_ctx || !device || !queue) return CLATTN_ERR_INVALID_ARGUMENT;
    cl_device_id queue_device = NULL;
    cl_context queue_context = NULL;
    cl_command_queue_properties props = 0;
    cl_platform_id platform = NULL;
    if (clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof queue_device, &queue_device, NULL) !=
            CL_SUCCESS ||
        queue_device != device ||
        clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof queue_context, &queue_context,
                              NULL) != CL_SUCCESS ||
        queue_context != cl_ctx ||
        clGetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL) !=
            CL_SUCCESS ||
        clGetDeviceInfo(device, CL_DEVICE_PLATFORM, sizeof platform, &platform, NULL) != CL_SUCCESS)
        return CLATTN_ERR_INVALID_ARGUMENT;
    if (props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE) /* our launches rely on queue order */
        return CLATTN_ERR_UNSUPPORTED;

    clattn_context *ctx = NULL;
    clattn_status status = context_alloc(&ctx);
    if (status != CLATTN_SUCCESS) return status;
    status = device_describe(platform, device, &ctx->device);
    if (status != CLATTN_SUCCESS) {
        free(ctx);
        return status;
    }
    clRetainContext(cl_ctx);
    clRetainCommandQueue(queue);
    ctx->cl_ctx = cl_ctx;
    ctx->queue = queue;
    ctx->wrapped = 1;
    ctx->profiling = (props & CL_QUEUE_PROFILING_ENABLE) != 0;
    *out = ctx;
    return CLATTN_SUCCESS;
}

void clattn_context_destroy(clattn_context *ctx) {
    if (!ctx) return;
    timing_finish(ctx);
    for (int i = 0; i < WORKSPACE_SLOTS; i++)
        if (ctx->workspace[i]) clReleaseMemObject(ctx->workspace[i]);
    program_cache_release(ctx);
    gemm_context_release(ctx);
    if (ctx->queue) clReleaseCommandQueue(ctx->queue);
    if (ctx->cl_ctx) clReleaseContext(ctx->cl_ctx);
    free(ctx->build_log);
    free(ctx);
}

/* ---------------------------------------------------------------- getters */

clattn_status clattn_context_device_info(const clattn_context *ctx, clattn_device_info *info) {
    if (!ctx || !info) return CLATTN_ERR_INVALID_ARGUMENT;
    *info = ctx->device;
    return CLATTN_SUCCESS;
}

cl_context clattn_context_cl_context(const clattn_context *ctx) {
    return ctx ? ctx->cl_ctx : NULL;
}

cl_command_queue clattn_context_queue(const clattn_context *ctx) {
    return ctx ? ctx->queue : NULL;
}

const char *clattn_context_build_log(const clattn_context *ctx) {
    return ctx && ctx->build_log ? ctx->build_log : "";
}

const char *clattn_context_last_error(const clattn_context *ctx) {
    return ctx ? ctx->last_error : "";
}

clattn_status clattn_context_set_timing(clattn_context *ctx, int enabled) {
    if (!ctx) return CLATTN_ERR_INVALID_ARGUMENT;
    if (enabled && !ctx->profiling)
        return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED,
                         "timing needs a queue created with CL_QUEUE_PROFILING_ENABLE");
    ctx->timing = enabled != 0;
    return CLATTN_SUCCESS;
}

clattn_status clattn_context_last_stats(const clattn_context *ctx, clattn_stats *stats) {
    if (!ctx || !stats || !ctx->has_stats) return CLATTN_ERR_INVALID_ARGUMENT;
    *stats = ctx->stats;
    return CLATTN_SUCCESS;
}
