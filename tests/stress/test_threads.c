/*
 * Threads, as docs/reliability.md's rules allow them: any number of threads, each with contexts of
 * its own. Before device discovery ran once per process under a lock, two threads creating their
 * first contexts at once crashed inside PoCL 3.1 (a start-up race of its clGetDeviceInfo); before
 * CLBlast's calls were serialised, two threads on the gemm path used memory CLBlast 1.5 had freed
 * (its database code; fixed upstream in 1.6.1). Built a second time with -fsanitize=thread by
 * scripts/test.sh. Sharing one context between threads at once is not allowed, and every build
 * detects it.
 */
#include <criterion/criterion.h>

#include "core/core.h"
#include "util.h"

#include "threads_work.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Test(threads, contexts_of_their_own_on_both_paths) {
    char first[512];
    size_t failed = threads_mixed_paths(first, sizeof first);
    cr_expect_eq(failed, 0, "%zu of %d calls failed; first: %s", failed, THREADS * CALLS, first);
}

/* Device queries from many threads at once, before anything else in the process. */
Test(threads, device_queries_at_once) {
    size_t count = 0, wrong = threads_device_queries(&count);
    cr_expect_eq(wrong, 0, "%zu threads did not describe all %zu devices", wrong, count);
}

/* One context used by two threads at once: the second call is refused, touching nothing. The
 * first thread is simulated (white-box): the context is marked as inside a call, as
 * context_enter leaves it while a call runs. */
Test(threads, a_context_shared_at_once_is_refused) {
    clattn_context *ctx = NULL;
    cr_assert_eq(clattn_context_create(&ctx, 0), CLATTN_SUCCESS);
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, 4, 4, 8, 8);
    cr_assert_eq(clattn_attention(ctx, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT);
    char before[1024];
    snprintf(before, sizeof before, "%s", clattn_context_last_error(ctx));
    atomic_store(&ctx->in_call, 1); /* another thread is inside a call */
    float host[32] = {0};
    cr_expect_eq(clattn_attention_host(ctx, &d, host, host, host, host, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect_eq(clattn_context_set_timing(ctx, 1), CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect_str_eq(clattn_context_last_error(ctx), before, "the refused call wrote the error");
    cr_expect_eq(ctx->timing, 0, "the refused call changed the context");
    atomic_store(&ctx->in_call, 0); /* that call returned */
    cr_expect_eq(clattn_attention_host(ctx, &d, host, host, host, host, NULL), CLATTN_SUCCESS, "%s",
                 clattn_context_last_error(ctx));
    clattn_context_destroy(ctx);
}

/* The same for the attention layer's calls, which work on the layer's context (inside, its
 * attention step does not enter it again). */
Test(threads, a_layer_context_shared_at_once_is_refused) {
    clattn_context *ctx = NULL;
    cr_assert_eq(clattn_context_create(&ctx, 0), CLATTN_SUCCESS);
    float w[16 * 16], x[4 * 16], y[4 * 16];
    for (int i = 0; i < 16 * 16; i++) w[i] = (float)((i * 7) % 5 - 2) / 8.0f;
    for (int i = 0; i < 4 * 16; i++) x[i] = (float)(i % 3) - 1.0f;
    clattn_mha_desc desc;
    cr_assert_eq(clattn_mha_desc_init(&desc, 16, 2, 2, 8, 8), CLATTN_SUCCESS);
    desc.w_q.host = desc.w_k.host = desc.w_v.host = desc.w_o.host = w;
    clattn_mha *mha = NULL, *second = NULL;
    cr_assert_eq(clattn_mha_create(ctx, &desc, &mha), CLATTN_SUCCESS, "%s",
                 clattn_context_last_error(ctx));
    clattn_attention_desc call;
    clattn_attention_desc_init(&call, CLATTN_LAYOUT_BSHD, 1, 2, 2, 4, 4, 8, 8);
    call.causal = 1;
    clattn_mha_stats stats;
    clattn_mha_stats_init(&stats);
    clattn_mha_info info;
    clattn_mha_info_init(&info);
    atomic_store(&ctx->in_call, 1); /* another thread is inside a call */
    cr_expect_eq(clattn_mha_create(ctx, &desc, &second), CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect_eq(clattn_mha_forward_host(mha, &call, x, NULL, y), CLATTN_ERR_INVALID_ARGUMENT);
    atomic_store(&ctx->in_call, 0); /* that call returned */
    cr_expect_eq(clattn_mha_forward_host(mha, &call, x, NULL, y), CLATTN_SUCCESS, "%s",
                 clattn_context_last_error(ctx));
    /* the getters too: a head mask or a call may be rewriting what they read */
    atomic_store(&ctx->in_call, 1);
    cr_expect_eq(clattn_mha_get_info(mha, &info), CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect_eq(info.heads_q, 0, "a refused clattn_mha_get_info wrote its output");
    cr_expect_eq(clattn_mha_last_stats(mha, &stats), CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect_eq(stats.kernel[0], '\0', "a refused clattn_mha_last_stats wrote its output");
    atomic_store(&ctx->in_call, 0);
    cr_expect_eq(clattn_mha_get_info(mha, &info), CLATTN_SUCCESS);
    cr_expect_eq(info.heads_q, 2);
    cr_expect_eq(clattn_mha_last_stats(mha, &stats), CLATTN_SUCCESS);
    cr_expect(stats.kernel[0] != '\0', "the layer's statistics lack the attention's kernel");
    clattn_mha_destroy(mha);
    clattn_context_destroy(ctx);
}

/* The same for a KV cache's calls, which work on the cache's context. */
Test(threads, a_cache_context_shared_at_once_is_refused) {
    clattn_context *ctx = NULL;
    cr_assert_eq(clattn_context_create(&ctx, 0), CLATTN_SUCCESS);
    clattn_kv_cache_desc cd;
    clattn_kv_cache_desc_init(&cd, 1, 1, 8, 8, 16);
    clattn_kv_cache *cache = NULL, *second = NULL;
    cr_assert_eq(clattn_kv_cache_create(ctx, &cd, &cache), CLATTN_SUCCESS, "%s",
                 clattn_context_last_error(ctx));
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, 1, 16, 8, 8);
    float rows[32] = {0}, q[8] = {0}, o[8];
    int32_t one = 1, lengths = -1;
    atomic_store(&ctx->in_call, 1); /* another thread is inside a call */
    cr_expect_eq(clattn_kv_cache_create(ctx, &cd, &second), CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect_eq(clattn_kv_cache_append_host(cache, rows, rows, 1, &one),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect_eq(clattn_kv_cache_set_lengths(cache, &one), CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect_eq(clattn_kv_cache_attention_host(cache, &d, q, NULL, o, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect_eq(clattn_kv_cache_read_host(cache, rows, rows), CLATTN_ERR_INVALID_ARGUMENT);
    /* a copy of the lengths too: taken during another thread's append it could be torn */
    cr_expect_eq(clattn_kv_cache_lengths(cache, &lengths), CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect_eq(lengths, -1, "a refused clattn_kv_cache_lengths wrote its output");
    atomic_store(&ctx->in_call, 0); /* that call returned */
    cr_expect_eq(clattn_kv_cache_lengths(cache, &lengths), CLATTN_SUCCESS);
    cr_expect_eq(lengths, 0, "a refused append or set_lengths changed the cache");
    cr_expect_eq(clattn_kv_cache_append_host(cache, rows, rows, 1, &one), CLATTN_SUCCESS, "%s",
                 clattn_context_last_error(ctx));
    cr_expect_eq(clattn_kv_cache_attention_host(cache, &d, q, NULL, o, NULL), CLATTN_SUCCESS, "%s",
                 clattn_context_last_error(ctx));
    clattn_kv_cache_destroy(cache);
    clattn_context_destroy(ctx);
}

/* Enqueues a kernel of the test's own on `c`'s queue that keeps the device busy for a while (a
 * chain of 2^28 dependent multiply-adds); *done is its event. */
static void keep_device_busy(caller_objects *c, cl_mem *cell, cl_kernel *kernel, cl_event *done) {
    static const char *source = "__kernel void spin(__global float *x, int n) {\n"
                                "    float a = x[0];\n"
                                "    for (int i = 0; i < n; i++) a = fma(a, 0.999f, 1.0f);\n"
                                "    x[0] = a;\n"
                                "}\n";
    cl_int err = CL_SUCCESS;
    cl_program program = clCreateProgramWithSource(c->context, 1, &source, NULL, &err);
    cr_assert_eq(err, CL_SUCCESS);
    cr_assert_eq(clBuildProgram(program, 1, &c->device, "", NULL, NULL), CL_SUCCESS);
    *kernel = clCreateKernel(program, "spin", &err);
    cr_assert_eq(err, CL_SUCCESS);
    clReleaseProgram(program);
    *cell = clCreateBuffer(c->context, CL_MEM_READ_WRITE, sizeof(float), NULL, &err);
    cr_assert_eq(err, CL_SUCCESS);
    const cl_int n = 1 << 28;
    clSetKernelArg(*kernel, 0, sizeof *cell, cell);
    clSetKernelArg(*kernel, 1, sizeof n, &n);
    const size_t one = 1;
    cr_assert_eq(clEnqueueNDRangeKernel(c->queue, *kernel, 1, NULL, &one, &one, 0, NULL, done),
                 CL_SUCCESS);
    clFlush(c->queue);
}

/* A call that fails after it enqueued work (lanes packs the keys past the last whole tile,
 * then its attention launch fails) returns only once that work is done, so that the caller may
 * free its arrays at once. The caller's queue is kept busy by a long kernel beforehand: when
 * the failing call returns, that kernel, and the pack queued behind it, must be done. */
Test(threads, a_call_failing_after_a_launch_waits_for_its_work) {
    caller_objects mine;
    cr_assert_eq(caller_objects_create(&mine, 0), CL_SUCCESS);
    clattn_context *ctx = NULL;
    cr_assert_eq(clattn_context_wrap(&ctx, mine.context, mine.device, mine.queue), CLATTN_SUCCESS);
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 2, 2, 72, 72, 16, 16);
    d.causal = 1;
    d.variant = CLATTN_VARIANT_LANES;
    enum { VALUES = 2 * 72 * 16 };
    float *q = calloc(VALUES, sizeof(float)), *o = calloc(VALUES, sizeof(float));
    cr_assert(q && o);
    cr_assert_eq(clattn_attention_host(ctx, &d, q, q, q, o, NULL), CLATTN_SUCCESS, "%s",
                 clattn_context_last_error(ctx)); /* builds what the call needs, beforehand */

    cl_mem cell;
    cl_kernel spin;
    cl_event busy;
    keep_device_busy(&mine, &cell, &spin, &busy);
    setenv("CLATTN_TEST_FAIL_LAUNCH", "attention_lanes", 1);
    const clattn_status status = clattn_attention_host(ctx, &d, q, q, q, o, NULL);
    cl_int busy_status = CL_QUEUED;
    clGetEventInfo(busy, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof busy_status, &busy_status, NULL);
    unsetenv("CLATTN_TEST_FAIL_LAUNCH");
    cr_expect_neq(status, CLATTN_SUCCESS);
    cr_expect(strstr(clattn_context_last_error(ctx), "CLATTN_TEST_FAIL_LAUNCH") != NULL, "'%s'",
              clattn_context_last_error(ctx));
    cr_expect_eq(busy_status, CL_COMPLETE,
                 "the failed call returned while the pack it enqueued could still run");

    clWaitForEvents(1, &busy);
    clReleaseEvent(busy);
    clReleaseKernel(spin);
    clReleaseMemObject(cell);
    free(q);
    free(o);
    clattn_context_destroy(ctx);
    caller_objects_release(&mine);
}
