/*
 * Ring attention in one process: clattn_attention_merge against a merge in double.
 */
#include <criterion/criterion.h>

#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- merge */

static cl_mem buffer_of(clattn_context *ctx, const float *host, size_t n) {
    cl_int err = CL_SUCCESS;
    cl_mem b =
        clCreateBuffer(clattn_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                       n * sizeof(float), (void *)host, &err);
    cr_assert_eq(err, CL_SUCCESS);
    return b;
}

static void read_back(clattn_context *ctx, cl_mem b, float *host, size_t n) {
    cr_assert_eq(clEnqueueReadBuffer(clattn_context_queue(ctx), b, CL_TRUE, 0, n * sizeof(float),
                                     host, 0, NULL, NULL),
                 CL_SUCCESS);
}

Test(ring, merge_matches_a_merge_in_double) {
    enum { B = 2, H = 3, N = 7, D = 5, ROWS = B * H * N };
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_context *ctx = ctxs[0];
    float o[ROWS * D], part[ROWS * D], lse[ROWS], lse_part[ROWS], got[ROWS * D], got_lse[ROWS];
    fill_uniform(o, ROWS * D, 1), fill_uniform(part, ROWS * D, 2);
    fill_uniform(lse, ROWS, 3), fill_uniform(lse_part, ROWS, 4);
    for (int r = 0; r < ROWS; r++) lse[r] *= 30.0f, lse_part[r] *= 30.0f;
    lse[0] = -INFINITY;      /* an empty accumulator row takes the part */
    lse_part[1] = -INFINITY; /* a part that saw no key adds nothing */
    lse[2] = lse_part[2] = -INFINITY;
    lse_part[3] = NAN; /* NaN stays NaN */
    for (int x = 0; x < D; x++) o[x] = 0.0f, o[2 * D + x] = 0.0f;
    double ref[ROWS * D];
    double ref_lse[ROWS];
    for (int r = 0; r < ROWS; r++) {
        double a = lse[r], p = lse_part[r], top = fmax(a, p);
        double wa = a == -INFINITY ? 0 : exp(a - top), wp = p == -INFINITY ? 0 : exp(p - top);
        if (isnan(p)) wa = wp = NAN;
        ref_lse[r] = wa + wp > 0 || isnan(wp) ? top + log(wa + wp) : -INFINITY;
        for (int x = 0; x < D; x++)
            ref[r * D + x] = p == -INFINITY
                                 ? o[r * D + x]
                                 : (wa * o[r * D + x] + wp * part[r * D + x]) / (wa + wp);
    }
    clattn_merge_desc m;
    cr_assert_eq(clattn_merge_desc_init(&m, CLATTN_LAYOUT_BHSD, B, H, N, D), CLATTN_SUCCESS);
    cl_mem ob = buffer_of(ctx, o, ROWS * D), lb = buffer_of(ctx, lse, ROWS);
    cl_mem pb = buffer_of(ctx, part, ROWS * D), plb = buffer_of(ctx, lse_part, ROWS);
    ASSERT_OK(ctx, clattn_attention_merge(ctx, &m, ob, lb, pb, plb, NULL));
    read_back(ctx, ob, got, ROWS * D), read_back(ctx, lb, got_lse, ROWS);
    cr_expect_eq(compare_outputs("merged O", got, ref, ROWS * D, 1e-6, 1e-5), 0);
    cr_expect_eq(compare_outputs("merged LSE", got_lse, ref_lse, ROWS, 1e-6, 1e-6), 0);

    m.o_part = m.o; /* the part's O in the accumulator's place */
    cr_expect_eq(clattn_attention_merge(ctx, &m, ob, lb, ob, plb, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(ctx), "O overlaps O_part"), "%s",
              clattn_context_last_error(ctx));
    m.o_part = m.o, m.len = N + 1; /* larger than the buffers */
    cr_expect_eq(clattn_attention_merge(ctx, &m, ob, lb, pb, plb, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(ctx), "its buffer holds"), "%s",
              clattn_context_last_error(ctx));
    clReleaseMemObject(ob), clReleaseMemObject(lb), clReleaseMemObject(pb), clReleaseMemObject(plb);
}

