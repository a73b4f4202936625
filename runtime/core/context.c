/*
 * The context: one device, one OpenCL context and in-order queue (ours, or the caller's for
 * interop), the program cache, the last error and build log, the last call's statistics, and
 * what layers above keep per context (released through context_on_destroy's list).
 */
#include "core.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- cleanups */

int context_on_destroy(clattn_context *ctx, context_cleanup cleanup) {
    for (unsigned i = 0; i < ctx->num_cleanups; i++)
        if (ctx->cleanups[i] == cleanup) return 0;
    if (ctx->num_cleanups == MAX_CONTEXT_CLEANUPS) return -1;
    ctx->cleanup_data[ctx->num_cleanups] = NULL;
    ctx->cleanups[ctx->num_cleanups++] = cleanup;
    return 1;
}

void **context_data(clattn_context *ctx, context_cleanup cleanup) {
    if (context_on_destroy(ctx, cleanup) < 0) return NULL;
    for (unsigned i = 0; i < ctx->num_cleanups; i++)
        if (ctx->cleanups[i] == cleanup) return &ctx->cleanup_data[i];
    return NULL;
}

void *context_data_find(const clattn_context *ctx, context_cleanup cleanup) {
    for (unsigned i = 0; i < ctx->num_cleanups; i++)
        if (ctx->cleanups[i] == cleanup) return ctx->cleanup_data[i];
    return NULL;
}

/* ---------------------------------------------------------------- kernels and timing */

static pthread_mutex_t launches = PTHREAD_MUTEX_INITIALIZER;

void launch_lock(const clattn_context *ctx) {
    if (ctx->serialize_launches) pthread_mutex_lock(&launches);
}

void launch_unlock(const clattn_context *ctx) {
    if (ctx->serialize_launches) pthread_mutex_unlock(&launches);
}

/* Whether the device runs kernels in the enqueuing thread (PoCL's "basic" device). */
static int runs_kernels_in_caller(const clattn_device_info *device) {
    return strncmp(device->name, "basic", 5) == 0 &&
           strstr(device->platform_name, "Portable Computing Language") != NULL;
}

void kernel_arg(kernel_args *args, size_t size, const void *value) {
    if (args->err != CL_SUCCESS) return;
    args->err = clSetKernelArg(args->kernel, args->next, size, value);
    args->next++;
}

/* Whether a kernel with limits k can run work-groups of `local` on the device; else says why
 * on ctx. The planners fit their tiles to these limits first (launch_limits_narrow), so this
 * refuses only what a planner let through, before the driver fails the launch. */
static clattn_status limits_allow(clattn_context *ctx, const kernel_limits *k, cl_uint dims,
                                  const size_t *local, const char *what) {
    size_t group = 1;
    for (cl_uint d = 0; local && d < dims; d++) group *= local[d];
    if (group > k->work_group_size)
        return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED,
                         "%s: work-groups of %zu work-items exceed this kernel's limit of %zu on "
                         "the device (CL_KERNEL_WORK_GROUP_SIZE; it uses %llu bytes of private "
                         "memory a work-item)",
                         what, group, k->work_group_size, (unsigned long long)k->private_mem_bytes);
    if (k->local_mem_bytes > ctx->device.local_mem_bytes)
        return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED,
                         "%s: the kernel uses %llu bytes of local memory, the device has %llu "
                         "(CL_KERNEL_LOCAL_MEM_SIZE)",
                         what, (unsigned long long)k->local_mem_bytes,
                         (unsigned long long)ctx->device.local_mem_bytes);
    return CLATTN_SUCCESS;
}

/* A test hook, compiled into test builds only (CLATTN_TEST_HOOKS): $CLATTN_TEST_FAIL_LAUNCH=<kernel
 * function name> makes every launch of that kernel fail before it is enqueued. */
static int simulated_launch_failure(cl_kernel kernel) {
#ifdef CLATTN_TEST_HOOKS
    const char *fail = getenv("CLATTN_TEST_FAIL_LAUNCH");
    char name[128] = "";
    return fail && *fail &&
           clGetKernelInfo(kernel, CL_KERNEL_FUNCTION_NAME, sizeof name, name, NULL) ==
               CL_SUCCESS &&
           strcmp(name, fail) == 0;
#else
    (void)kernel;
    return 0;
#endif
}

/* kernel_launch once the kernel's limits k are known (read once a launch). */
static clattn_status launch_within(clattn_context *ctx, const kernel_limits *k, cl_kernel kernel,
                                   cl_uint dims, const size_t *global, const size_t *local,
                                   cl_event *event, const char *what) {
    if (event) *event = NULL;
    clattn_status status = limits_allow(ctx, k, dims, local, what);
    if (status != CLATTN_SUCCESS) return status;
    if (simulated_launch_failure(kernel))
        return ctx_error(ctx, (clattn_status)CL_OUT_OF_RESOURCES,
                         "%s: launch failed: simulated by CLATTN_TEST_FAIL_LAUNCH", what);
    cl_event done = NULL;
    launch_lock(ctx);
    cl_int err = clEnqueueNDRangeKernel(ctx->queue, kernel, dims, NULL, global, local, 0, NULL,
                                        event || ctx->timing ? &done : NULL);
    launch_unlock(ctx);
    if (err != CL_SUCCESS) return ctx_cl_error(ctx, err, what);
    ctx->launched_in_call = 1;
    timing_track(ctx, done);
    if (event)
        *event = done;
    else if (done)
        clReleaseEvent(done);
    return CLATTN_SUCCESS;
}

clattn_status kernel_launch(clattn_context *ctx, cl_kernel kernel, cl_uint dims,
                            const size_t *global, const size_t *local, cl_event *event,
                            const char *what) {
    kernel_limits k;
    kernel_limits_get(ctx, kernel, &k);
    return launch_within(ctx, &k, kernel, dims, global, local, event, what);
}

clattn_status kernel_launch_padded(clattn_context *ctx, cl_kernel kernel, cl_uint dims,
                                   const size_t *global, cl_event *event, const char *what) {
    kernel_limits k;
    kernel_limits_get(ctx, kernel, &k);
    if (k.work_group_size < LAUNCH_GROUP_X)
        return launch_within(ctx, &k, kernel, dims, global, NULL, event, what);
    size_t padded[3] = {1, 1, 1}, local[3] = {LAUNCH_GROUP_X, 1, 1};
    for (cl_uint d = 0; d < dims && d < 3; d++) padded[d] = global[d];
    padded[0] = (global[0] + LAUNCH_GROUP_X - 1) / LAUNCH_GROUP_X * LAUNCH_GROUP_X;
    return launch_within(ctx, &k, kernel, dims, padded, local, event, what);
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
    ctx->summed += ctx->num_timed;
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
    ctx->timed_events = ctx->summed;
    ctx->timed_ms = 0;
    ctx->summed = 0;
    return total;
}

/* ---------------------------------------------------------------- one thread at a time */

/* In every build: an atomic exchange a call is nothing beside an OpenCL call, and it turns a
 * caller's race on the context's state into a status. */
int context_enter(clattn_context *ctx) {
    if (!atomic_exchange(&ctx->in_call, 1)) {
        ctx->launched_in_call = 0;
        return 0;
    }
    static atomic_int warned;
    if (!atomic_exchange(&warned, 1))
        fprintf(stderr,
                "clattn: two threads called into one context (%p) at once; a context "
                "serves one thread at a time (docs/reliability.md): the second call "
                "fails with CLATTN_ERR_INVALID_ARGUMENT\n",
                (void *)ctx);
    return 1;
}

void context_leave(clattn_context *ctx) {
    atomic_store(&ctx->in_call, 0);
}

clattn_status context_left(clattn_context *ctx, clattn_status status) {
    if (status != CLATTN_SUCCESS && ctx->launched_in_call) clFinish(ctx->queue);
    context_leave(ctx);
    return status;
}

/* ---------------------------------------------------------------- lifetime */

/* Whether the device works in host memory (CPUs, integrated GPUs), so that host arrays are best
 * mapped than copied: there a copy can cost more than the kernel. A query that fails
 * (the property is deprecated from OpenCL 2.0, though still answered) means no. */
static int shares_host_memory(cl_device_id device) {
    cl_bool unified = CL_FALSE;
    if (clGetDeviceInfo(device, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL) !=
        CL_SUCCESS)
        return 0;
    return unified == CL_TRUE;
}

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
    clattn_device_info_init(&ctx->device);
    status = clattn_device_get_info(device_index, &ctx->device);
    if (status != CLATTN_SUCCESS) goto fail;
    ctx->serialize_launches = runs_kernels_in_caller(&ctx->device);
    ctx->host_unified_memory = shares_host_memory(ctx->device.device);

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
    device_place(&ctx->device);
    clRetainContext(cl_ctx);
    clRetainCommandQueue(queue);
    ctx->cl_ctx = cl_ctx;
    ctx->queue = queue;
    ctx->wrapped = 1;
    ctx->serialize_launches = runs_kernels_in_caller(&ctx->device);
    ctx->host_unified_memory = shares_host_memory(device);
    ctx->profiling = (props & CL_QUEUE_PROFILING_ENABLE) != 0;
    *out = ctx;
    return CLATTN_SUCCESS;
}

void clattn_context_destroy(clattn_context *ctx) {
    if (!ctx) return;
    timing_finish(ctx);
    for (int i = 0; i < WORKSPACE_SLOTS; i++)
        if (ctx->workspace[i]) clReleaseMemObject(ctx->workspace[i]);
    for (unsigned i = ctx->num_cleanups; i-- > 0;) ctx->cleanups[i](ctx); /* newest first */
    program_cache_release(ctx);
    if (ctx->queue) clReleaseCommandQueue(ctx->queue);
    if (ctx->cl_ctx) clReleaseContext(ctx->cl_ctx);
    free(ctx->build_log);
    free(ctx);
}

/* ---------------------------------------------------------------- getters */

clattn_status clattn_context_device_info(const clattn_context *ctx, clattn_device_info *info) {
    if (!ctx || !info) return CLATTN_ERR_INVALID_ARGUMENT;
    return struct_write(info, &ctx->device, sizeof ctx->device, sizeof ctx->device)
               ? CLATTN_ERR_INVALID_ARGUMENT
               : CLATTN_SUCCESS;
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
    return ctx ? ctx->error.text : "";
}

static clattn_status context_set_timing_in_call(clattn_context *ctx, int enabled) {
    if (!ctx) return CLATTN_ERR_INVALID_ARGUMENT;
    if (enabled && !ctx->profiling)
        return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED,
                         "timing needs a queue created with CL_QUEUE_PROFILING_ENABLE");
    ctx->timing = enabled != 0;
    return CLATTN_SUCCESS;
}

clattn_status clattn_context_set_timing(clattn_context *ctx, int enabled) {
    return IN_CONTEXT(ctx, context_set_timing_in_call(ctx, enabled));
}

clattn_status clattn_stats_init_sized(clattn_stats *stats, size_t struct_size) {
    return struct_init_zeroed(stats, struct_size, offsetof(clattn_stats, tiles_counted));
}

static clattn_status context_last_stats_in_call(clattn_context *ctx, clattn_stats *stats) {
    if (!ctx) return CLATTN_ERR_INVALID_ARGUMENT;
    ctx_clear_error(ctx);
    if (!stats) return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "stats is NULL");
    if (!ctx->has_stats)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "no attention call has succeeded on this context yet");
    if (struct_write(stats, &ctx->stats, sizeof ctx->stats, offsetof(clattn_stats, tiles_counted)))
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "stats->struct_size is %zu: set it with clattn_stats_init",
                         stats->struct_size);
    return CLATTN_SUCCESS;
}

clattn_status clattn_context_last_stats(clattn_context *ctx, clattn_stats *stats) {
    return IN_CONTEXT(ctx, context_last_stats_in_call(ctx, stats));
}
