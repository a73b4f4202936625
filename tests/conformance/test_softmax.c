/* clattn_softmax on every device against the reference: row lengths around and far beyond the
 * work-group size, float32 and float16, in place, offsets and strides, LSE, empty and NaN rows,
 * its events kept out of attention timings, and argument checks. */
#include <criterion/criterion.h>

#include "core/half.h"
#include "reference/reference.h"
#include "core/core.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct softmax_case {
    size_t rows, cols, offset, stride; /* stride >= cols; the same for in and out */
    clattn_dtype dtype;
    int in_place;
    float scale;
} softmax_case;

/* Runs one case on one context; returns the number of mismatches. */
static size_t run_case(clattn_context *ctx, const softmax_case *c, uint64_t seed) {
    size_t total = c->offset + (c->rows - 1) * c->stride + c->cols, elem = c->dtype ? 2 : 4;
    float *x = malloc(total * sizeof(float)), *got = malloc(total * sizeof(float));
    float *dense = malloc(c->rows * c->cols * sizeof(float)), *lse = malloc(c->rows * 4);
    double *ref = malloc(c->rows * c->cols * sizeof(double)), *ref_lse = malloc(c->rows * 8);
    uint16_t *xh = malloc(total * 2);
    fill_uniform(x, total, seed);
    for (size_t i = 0; i < total; i++) { /* the reference reads what the device reads */
        xh[i] = float_to_half(x[i] * 4);
        x[i] = c->dtype == CLATTN_F16 ? half_to_float(xh[i]) : x[i] * 4;
    }
    for (size_t r = 0; r < c->rows; r++)
        memcpy(dense + r * c->cols, x + c->offset + r * c->stride, c->cols * sizeof(float));
    reference_softmax(dense, c->rows, c->cols, c->scale, ref, ref_lse);

    void *host_in = c->dtype == CLATTN_F16 ? (void *)xh : (void *)x;
    cl_mem in = clCreateBuffer(clattn_context_cl_context(ctx), CL_MEM_COPY_HOST_PTR, total * elem,
                               host_in, NULL);
    cl_mem out = c->in_place ? in
                             : clCreateBuffer(clattn_context_cl_context(ctx), CL_MEM_READ_WRITE,
                                              total * elem, NULL, NULL);
    cl_mem lse_buf =
        clCreateBuffer(clattn_context_cl_context(ctx), CL_MEM_READ_WRITE, c->rows * 4, NULL, NULL);
    clattn_softmax_desc d = {sizeof(clattn_softmax_desc),
                             c->rows,
                             c->cols,
                             c->dtype,
                             c->scale,
                             c->offset,
                             c->stride,
                             c->offset,
                             c->stride};
    ASSERT_OK(ctx, clattn_softmax(ctx, &d, in, out, lse_buf, NULL));
    cl_command_queue q = clattn_context_queue(ctx);
    clEnqueueReadBuffer(q, out, CL_TRUE, 0, total * elem, host_in, 0, NULL, NULL);
    clEnqueueReadBuffer(q, lse_buf, CL_TRUE, 0, c->rows * 4, lse, 0, NULL, NULL);
    for (size_t r = 0; r < c->rows; r++)
        for (size_t j = 0; j < c->cols; j++) {
            size_t at = c->offset + r * c->stride + j;
            got[r * c->cols + j] = c->dtype == CLATTN_F16 ? half_to_float(xh[at]) : x[at];
        }
    char label[128];
    snprintf(label, sizeof label, "softmax %zux%zu %s%s", c->rows, c->cols,
             c->dtype ? "f16" : "f32", c->in_place ? " in place" : "");
    size_t bad =
        compare_outputs(label, got, ref, c->rows * c->cols, c->dtype ? TOL_F16_ATOL : TOL_F32_ATOL,
                        c->dtype ? TOL_F16_RTOL : TOL_F32_RTOL);
    case_result lse_result;
    memset(&lse_result, 0, sizeof lse_result);
    compare_lse_values(lse, ref_lse, c->rows, &lse_result);
    if (lse_result.mismatches) fprintf(stderr, "%s: %s\n", label, lse_result.message);
    bad += lse_result.mismatches;
    if (!c->in_place) clReleaseMemObject(out);
    clReleaseMemObject(in);
    clReleaseMemObject(lse_buf);
    free(x), free(got), free(dense), free(lse), free(ref), free(ref_lse), free(xh);
    return bad;
}

Test(softmax, matches_the_reference_on_every_device) {
    const softmax_case cases[] = {
        {1, 1, 0, 1, CLATTN_F32, 0, 1.0f},         {3, 1, 0, 1, CLATTN_F32, 0, 0.5f},
        {2, 3, 0, 3, CLATTN_F32, 0, 1.0f},         {5, 255, 0, 255, CLATTN_F32, 0, 0.125f},
        {7, 256, 3, 300, CLATTN_F32, 0, 1.0f},     {4, 257, 0, 257, CLATTN_F32, 1, 2.0f},
        {3, 1000, 5, 1001, CLATTN_F32, 1, 1.0f},   {2, 5000, 0, 5000, CLATTN_F32, 0, 0.3f},
        {1, 70001, 0, 70001, CLATTN_F32, 0, 1.0f}, {2, 3, 1, 4, CLATTN_F16, 0, 1.0f},
        {5, 300, 0, 300, CLATTN_F16, 1, 0.5f},     {3, 4097, 2, 4100, CLATTN_F16, 0, 1.0f},
    };
    clattn_context **ctxs;
    size_t n = test_contexts(&ctxs);
    for (size_t dev = 0; dev < n; dev++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            cr_expect_eq(run_case(ctxs[dev], &cases[i], 100 + i), 0, "device %zu case %zu", dev, i);
}

/* -inf everywhere: zeros and LSE -inf. A NaN: that row is NaN, the others are untouched. */
Test(softmax, empty_and_nan_rows) {
    clattn_context **ctxs;
    size_t n = test_contexts(&ctxs);
    for (size_t dev = 0; dev < n; dev++) {
        clattn_context *ctx = ctxs[dev];
        float x[9] = {-INFINITY, -INFINITY, -INFINITY, 1, NAN, 2, 0, 0, 0}, y[9], lse[3];
        cl_mem buf =
            clCreateBuffer(clattn_context_cl_context(ctx), CL_MEM_COPY_HOST_PTR, sizeof x, x, NULL);
        cl_mem l = clCreateBuffer(clattn_context_cl_context(ctx), CL_MEM_READ_WRITE, sizeof lse,
                                  NULL, NULL);
        clattn_softmax_desc d = {sizeof(clattn_softmax_desc), 3, 3, CLATTN_F32, 1.0f, 0, 3, 0, 3};
        ASSERT_OK(ctx, clattn_softmax(ctx, &d, buf, buf, l, NULL));
        clEnqueueReadBuffer(clattn_context_queue(ctx), buf, CL_TRUE, 0, sizeof y, y, 0, NULL, NULL);
        clEnqueueReadBuffer(clattn_context_queue(ctx), l, CL_TRUE, 0, sizeof lse, lse, 0, NULL,
                            NULL);
        for (int j = 0; j < 3; j++) {
            cr_expect_eq(y[j], 0.0f);
            cr_expect(isnan(y[3 + j]), "row with a NaN: element %d is %g", j, y[3 + j]);
            cr_expect_float_eq(y[6 + j], 1.0f / 3, 1e-6);
        }
        cr_expect(isinf(lse[0]) && lse[0] < 0);
        cr_expect(isnan(lse[1]));
        cr_expect_float_eq(lse[2], logf(3.0f), 1e-6);
        clReleaseMemObject(buf);
        clReleaseMemObject(l);
    }
}

/* With timing on, an attention call's kernel time is its own: a softmax enqueued before it
 * (a large one, 16 MiB) is not charged to it. */
/* With timing on, an attention call's kernel time counts its own kernels only: a softmax run
 * before it keeps no event for it. Asserted on the events counted, never on times (a tiny call
 * may well take longer than a big one on a GPU). */
static unsigned attention_events(clattn_context *ctx) {
    float x[4 * 8] = {0}, o[4 * 8];
    clattn_attention_desc a;
    clattn_attention_desc_init(&a, CLATTN_LAYOUT_BSHD, 1, 1, 1, 4, 4, 8, 8);
    ASSERT_OK(ctx, clattn_attention_host(ctx, &a, x, x, x, o, NULL));
    return ctx->timed_events;
}

Test(softmax, is_not_charged_to_the_next_attention_call) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_context *ctx = ctxs[0];
    ASSERT_OK(ctx, clattn_context_set_timing(ctx, 1));
    unsigned alone = attention_events(ctx);
    cr_assert_geq(alone, 1, "the attention call's own kernels are counted");
    const size_t rows = 64, cols = 256;
    cl_mem buf = clCreateBuffer(clattn_context_cl_context(ctx), CL_MEM_READ_WRITE, rows * cols * 4,
                                NULL, NULL);
    float zero = 0.0f;
    cr_assert_eq(clEnqueueFillBuffer(clattn_context_queue(ctx), buf, &zero, 4, 0, rows * cols * 4,
                                     0, NULL, NULL),
                 CL_SUCCESS);
    clattn_softmax_desc d;
    clattn_softmax_desc_init(&d, rows, cols);
    ASSERT_OK(ctx, clattn_softmax(ctx, &d, buf, buf, NULL, NULL));
    cr_expect_eq(ctx->num_timed, 0, "the softmax kept %u events for the next call", ctx->num_timed);
    cr_expect_eq(attention_events(ctx), alone, "the softmax was counted with the attention call");
    ASSERT_OK(ctx, clattn_context_set_timing(ctx, 0));
    clReleaseMemObject(buf);
}

Test(softmax, bad_arguments_are_named) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_context *ctx = ctxs[0];
    cl_mem small =
        clCreateBuffer(clattn_context_cl_context(ctx), CL_MEM_READ_WRITE, 16, NULL, NULL);
    clattn_softmax_desc d = {
        sizeof(clattn_softmax_desc), 2, 3, CLATTN_F32, 1.0f, 0, 3, 0, 3}; /* needs 24 bytes */
    cr_assert_eq(clattn_softmax(ctx, &d, small, small, NULL, NULL), CLATTN_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(clattn_context_last_error(ctx), "24") != NULL, "%s",
              clattn_context_last_error(ctx));
    clattn_softmax_desc zero = {sizeof(clattn_softmax_desc), 0, 3, CLATTN_F32, 1.0f, 0, 3, 0, 3};
    cr_assert_eq(clattn_softmax(ctx, &zero, small, small, NULL, NULL), CLATTN_ERR_INVALID_ARGUMENT);
    clattn_softmax_desc stride = {sizeof(clattn_softmax_desc), 2, 3, CLATTN_F32, 1.0f, 0, 2, 0, 3};
    cr_assert_eq(clattn_softmax(ctx, &stride, small, small, NULL, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT);
    clattn_softmax_desc overflow = {
        sizeof(clattn_softmax_desc), SIZE_MAX / 2, 3, CLATTN_F32, 1.0f, 0, SIZE_MAX / 4, 0, 3};
    cr_assert_eq(clattn_softmax(ctx, &overflow, small, small, NULL, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT);
    clattn_softmax_desc one = {sizeof(clattn_softmax_desc), 1, 4, CLATTN_F32, 1.0f, 0, 4, 0, 4};
    cr_assert_eq(clattn_softmax(ctx, NULL, small, small, NULL, NULL), CLATTN_ERR_INVALID_ARGUMENT);
    cr_assert_eq(clattn_softmax(ctx, &one, NULL, small, NULL, NULL), CLATTN_ERR_INVALID_ARGUMENT);
    cr_assert_eq(clattn_softmax(NULL, &one, small, small, NULL, NULL), CLATTN_ERR_INVALID_ARGUMENT);
    cl_mem tiny_lse =
        clCreateBuffer(clattn_context_cl_context(ctx), CL_MEM_READ_WRITE, 4, NULL, NULL);
    clattn_softmax_desc two = {sizeof(clattn_softmax_desc), 2, 2, CLATTN_F32, 1.0f, 0, 2, 0, 2};
    cr_assert_eq(clattn_softmax(ctx, &two, small, small, tiny_lse, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT);
    clattn_softmax_desc nan_scale = {
        sizeof(clattn_softmax_desc), 1, 4, CLATTN_F32, NAN, 0, 4, 0, 4};
    cr_assert_eq(clattn_softmax(ctx, &nan_scale, small, small, NULL, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT, "a NaN scale made every row NaN");
    cr_assert(strstr(clattn_context_last_error(ctx), "scale must be finite") != NULL, "%s",
              clattn_context_last_error(ctx));
    clReleaseMemObject(small);
    clReleaseMemObject(tiny_lse);
}

/* An output that shares bytes with the input other than exactly in place, or an LSE that shares
 * bytes with either, is refused: rows would be read after other rows' results were written over
 * them (found by the fuzzer, tests/fuzz/fuzz_softmax.c: an in-place call with the output 3
 * elements after the input ran, and gave wrong rows). Exactly in place still runs. */
Test(softmax, overlapping_outputs_are_refused) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_context *ctx = ctxs[0];
    cl_context cl = clattn_context_cl_context(ctx);
    cl_mem buf = clCreateBuffer(cl, CL_MEM_READ_WRITE, 64 * sizeof(float), NULL, NULL);
    cl_buffer_region tail = {32 * sizeof(float), 32 * sizeof(float)};
    cl_mem sub =
        clCreateSubBuffer(buf, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &tail, NULL);
    cr_assert_not_null(sub);
    /* 3 rows of 5, 7 apart: in from element 1, out from 4 (overlapping) or 24 (disjoint) */
    clattn_softmax_desc shifted = {sizeof(clattn_softmax_desc), 3, 5, CLATTN_F32, 1.0f, 1, 7, 4, 7};
    cr_expect_eq(clattn_softmax(ctx, &shifted, buf, buf, NULL, NULL), CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(ctx), "overlap the input") != NULL, "%s",
              clattn_context_last_error(ctx));
    clattn_softmax_desc strided = {sizeof(clattn_softmax_desc), 3, 5, CLATTN_F32, 1.0f, 1, 7, 1, 8};
    cr_expect_eq(clattn_softmax(ctx, &strided, buf, buf, NULL, NULL), CLATTN_ERR_INVALID_ARGUMENT,
                 "the same offset, another row stride");
    clattn_softmax_desc into_sub = {
        sizeof(clattn_softmax_desc), 3, 5, CLATTN_F32, 1.0f, 30, 7, 0, 7};
    cr_expect_eq(clattn_softmax(ctx, &into_sub, buf, sub, NULL, NULL), CLATTN_ERR_INVALID_ARGUMENT,
                 "an output in a sub-buffer over the input's bytes");
    clattn_softmax_desc exact = {sizeof(clattn_softmax_desc), 3, 5, CLATTN_F32, 1.0f, 1, 7, 1, 7};
    ASSERT_OK(ctx, clattn_softmax(ctx, &exact, buf, buf, NULL, NULL));
    clattn_softmax_desc apart = {sizeof(clattn_softmax_desc), 3, 5, CLATTN_F32, 1.0f, 1, 7, 24, 7};
    ASSERT_OK(ctx, clattn_softmax(ctx, &apart, buf, buf, NULL, NULL));
    cr_expect_eq(clattn_softmax(ctx, &exact, buf, buf, buf, NULL), CLATTN_ERR_INVALID_ARGUMENT,
                 "LSE over the input");
    cr_expect(strstr(clattn_context_last_error(ctx), "LSE") != NULL, "%s",
              clattn_context_last_error(ctx));
    clattn_softmax_desc late = {sizeof(clattn_softmax_desc), 3, 5, CLATTN_F32, 1.0f, 8, 7, 8, 7};
    ASSERT_OK(ctx, clattn_softmax(ctx, &late, buf, buf, buf, NULL)); /* LSE in bytes [0, 12) */
    clFinish(clattn_context_queue(ctx));
    clReleaseMemObject(sub);
    clReleaseMemObject(buf);
}
