/*
 * Finite biases and scores never mask (docs/semantics.md section 1: only -inf masks). Hugging Face
 * models write padding as torch.finfo(float32).min = -FLT_MAX; a row whose every key carries it is
 * the plain mean of V with a finite LSE, on every path and variant, on every device, as in the
 * reference. Huge finite scores (scale * q.k near -FLT_MAX) do not mask either.
 */
#include <criterion/criterion.h>

#include "util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

Test(bias, finite_minimum_on_all_or_some_keys) {
    attn_case cases[6];
    for (size_t i = 0; i < COUNT(cases); i++) {
        case_init(&cases[i], 2, 2, 1, 31 + i, 45, 32, 32);
        cases[i].bias = BIAS_FINITE_MIN;
        cases[i].seed = 100 + i;
    }
    cases[1].causal = 1;
    cases[2].left = 7, cases[2].right = 3;
    cases[3].dtype = CLATTN_F16; /* float16 Q/K/V, float32 bias */
    cases[4].dtype = cases[4].out_dtype = CLATTN_F16, cases[4].causal = 1;
    cases[5].num_globals = 2, cases[5].globals[0] = 3, cases[5].globals[1] = 40;
    cases[5].left = 4, cases[5].right = 4;
    expect_every_path_passes(cases, COUNT(cases));
}

/* A padded batch as a Hugging Face model builds it: key and query padding with the finite
 * minimum, broadcast [B, 1, N, N]; alone, with a window, causal, and in float16. */
Test(bias, hugging_face_padding_mask) {
    attn_case cases[5];
    for (size_t i = 0; i < COUNT(cases); i++) {
        case_init(&cases[i], 4, 4, 4, 57, 57, 32, 32);
        cases[i].bias = BIAS_PADDING;
        cases[i].seed = 110 + i;
    }
    cases[1].left = cases[1].right = 8;
    cases[2].causal = 1;
    cases[3].dtype = CLATTN_F16;
    cases[4].layout = CLATTN_LAYOUT_BHSD, cases[4].hkv = 2;
    expect_every_path_passes(cases, COUNT(cases));
}

/* One query row over 5 keys with one bias value on every key: the result is the mean of V
 * and LSE = bias + log(sum of exp(score)), finite. */
static void expect_mean_of_v(clattn_context *ctx, clattn_path path, clattn_variant variant,
                             float value) {
    enum { NK = 5, D = 4 };
    float q[D], k[NK * D], v[NK * D], bias[NK], o[D], lse = 0.0f;
    fill_uniform(q, D, 1);
    fill_uniform(k, NK * D, 2);
    fill_uniform(v, NK * D, 3);
    for (int j = 0; j < NK; j++) bias[j] = value;
    clattn_attention_desc desc;
    cr_assert_eq(clattn_attention_desc_init(&desc, CLATTN_LAYOUT_BSHD, 1, 1, 1, 1, NK, D, D),
                 CLATTN_SUCCESS);
    desc.bias_host = bias;
    desc.bias_strides.stride_seq = NK;
    desc.path = path;
    desc.variant = variant;
    ASSERT_OK(ctx, clattn_attention_host(ctx, &desc, q, k, v, o, &lse));
    for (int x = 0; x < D; x++) {
        double mean = 0.0;
        for (int j = 0; j < NK; j++) mean += v[j * D + x] / NK;
        cr_expect(fabs(o[x] - mean) <= TOL_F32_ATOL + TOL_F32_RTOL * fabs(mean),
                  "bias %g, path %d variant %d: O[%d] = %g, the mean of V is %g", (double)value,
                  (int)path, (int)variant, x, (double)o[x], mean);
    }
    cr_expect(isfinite(lse) && fabs(lse - value) <= 1e-4 * fabs(value),
              "bias %g, path %d variant %d: LSE = %g, expected about the bias", (double)value,
              (int)path, (int)variant, (double)lse);
}

/* The cut the issue found: -2.3e38 gave the mean and -2.4e38 an empty row (bias * log2(e)
 * overflowed); every value down to -FLT_MAX is a finite bias. */
Test(bias, one_row_means_down_to_the_float_minimum) {
    static const float values[] = {-1e38f, -2.3e38f, -2.4e38f, -FLT_MAX};
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs);
    clattn_variant fused[16];
    size_t count = variants_on_path(ctxs[0], CLATTN_PATH_FUSED, fused, COUNT(fused));
    for (size_t dev = 0; dev < devices; dev++)
        for (size_t i = 0; i < COUNT(values); i++) {
            for (size_t v = 0; v < count; v++)
                expect_mean_of_v(ctxs[dev], CLATTN_PATH_FUSED, fused[v], values[i]);
            expect_mean_of_v(ctxs[dev], CLATTN_PATH_GEMM, CLATTN_VARIANT_AUTO, values[i]);
            expect_mean_of_v(ctxs[dev], CLATTN_PATH_REFERENCE, CLATTN_VARIANT_AUTO, values[i]);
        }
}

/* Scores of about -3e38 (scale * q.k finite, but beyond -FLT_MAX / log2(e)): equal scores
 * average V, on every path. q = 2e19, k = -1.5e19 (Dqk = 1, scale 1). */
Test(bias, huge_finite_scores_do_not_mask) {
    enum { NK = 6, DV = 3 };
    float q[2] = {2e19f, 2e19f}, k[NK], v[NK * DV], o[2 * DV], lse[2];
    for (int j = 0; j < NK; j++) k[j] = -1.5e19f;
    fill_uniform(v, NK * DV, 7);
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs);
    clattn_variant variants[16];
    clattn_path paths[16];
    size_t count = variants_on_path(ctxs[0], CLATTN_PATH_FUSED, variants, COUNT(variants) - 1);
    for (size_t p = 0; p < count; p++) paths[p] = CLATTN_PATH_FUSED;
    paths[count] = CLATTN_PATH_GEMM, variants[count++] = CLATTN_VARIANT_AUTO;
    for (size_t dev = 0; dev < devices; dev++)
        for (size_t p = 0; p < count; p++) {
            clattn_attention_desc desc;
            cr_assert_eq(
                clattn_attention_desc_init(&desc, CLATTN_LAYOUT_BSHD, 1, 1, 1, 2, NK, 1, DV),
                CLATTN_SUCCESS);
            desc.scale = 1.0f;
            desc.path = paths[p];
            desc.variant = variants[p];
            ASSERT_OK(ctxs[dev], clattn_attention_host(ctxs[dev], &desc, q, k, v, o, lse));
            for (int row = 0; row < 2; row++) {
                cr_expect(isfinite(lse[row]) && lse[row] < -2.9e38f, "path %d variant %d: LSE %g",
                          (int)paths[p], (int)variants[p], (double)lse[row]);
                for (int x = 0; x < DV; x++) {
                    double mean = 0.0;
                    for (int j = 0; j < NK; j++) mean += v[j * DV + x] / NK;
                    cr_expect(fabs(o[row * DV + x] - mean) <= 1e-4,
                              "path %d variant %d: O[%d][%d] = %g, mean %g", (int)paths[p],
                              (int)variants[p], row, x, (double)o[row * DV + x], mean);
                }
            }
        }
}

/* Scores are float32 step by step, in the reference as in the kernels (docs/semantics.md,
 * section 9): s = float32(float32(scale * q.k) + bias). Under a row-wide bias of -1e5 a row's
 * scores are 2^-7 apart at best, and the reference, which summed in double, disagreed with every
 * kernel (issue 29). Each test runs every variant of the table that serves the call on the device
 * against clattn_attention_reference, for BERT's old padding -1e4, -1e5, -3e5 and float16's
 * maximum 65504. */
static const float large_biases[] = {-1e4f, -1e5f, -3e5f, 65504.0f};

/* One call's inputs; the reference's outputs are computed from them. */
typedef struct bias_call {
    clattn_attention_desc desc;
    const float *q, *k, *v;
    size_t o_count, lse_count;
    const char *what; /* names the call in messages */
} bias_call;

/* Runs one variant and compares O and LSE with the reference's. @return 1 when it ran. */
static int expect_variant_matches(clattn_context *ctx, bias_call *c, clattn_variant variant,
                                  const double *ref_o, const double *ref_lse) {
    char reason[256] = "";
    if (clattn_variant_supported(ctx, variant, &c->desc, reason, sizeof reason) != CLATTN_SUCCESS) {
        fprintf(stderr, "%s: %s does not serve the call here: %s\n", c->what,
                clattn_variant_name(variant), reason);
        return 0;
    }
    float *o = malloc(c->o_count * sizeof *o), *lse = malloc(c->lse_count * sizeof *lse);
    cr_assert(o && lse);
    c->desc.variant = variant;
    ASSERT_OK(ctx, clattn_attention_host(ctx, &c->desc, c->q, c->k, c->v, o, lse));
    case_result r;
    memset(&r, 0, sizeof r);
    compare_values("O", o, ref_o, c->o_count, TOL_F32_ATOL, TOL_F32_RTOL, &r);
    compare_lse_values(lse, ref_lse, c->lse_count, &r);
    cr_expect_eq(r.mismatches, 0,
                 "%s, variant %s: %zu values off, worst %.2f of the tolerance; "
                 "first: %s",
                 c->what, clattn_variant_name(variant), r.mismatches, r.worst, r.message);
    free(o), free(lse);
    return 1;
}

/* Every variant but the reference, on one device. @return how many ran. */
static int expect_every_variant_matches(clattn_context *ctx, bias_call *c) {
    float *o = malloc(c->o_count * sizeof *o), *lse = malloc(c->lse_count * sizeof *lse);
    double *ref_o = malloc(c->o_count * sizeof *ref_o);
    double *ref_lse = malloc(c->lse_count * sizeof *ref_lse);
    cr_assert(o && lse && ref_o && ref_lse);
    cr_assert_eq(clattn_attention_reference(&c->desc, c->q, c->k, c->v, o, lse), CLATTN_SUCCESS);
    for (size_t x = 0; x < c->o_count; x++) ref_o[x] = o[x];
    for (size_t x = 0; x < c->lse_count; x++) ref_lse[x] = lse[x];
    int ran = 0;
    for (int v = 1; strcmp(clattn_variant_name((clattn_variant)v), "unknown") != 0; v++)
        if (v != CLATTN_VARIANT_REFERENCE)
            ran += expect_variant_matches(ctx, c, (clattn_variant)v, ref_o, ref_lse);
    free(o), free(lse), free(ref_o), free(ref_lse);
    return ran;
}

/* Issue 29's reproducer: Q, K, V [1, 24, 2, 16] uniform in [0, 1), a bias [24, 24] (shared by
 * the heads) that is zero but for its row 3. Before, -1e5, -3e5 and 65504 failed on every
 * variant; -1e4 (a spacing of 2^-10) stays inside the tolerance at this size, and the next
 * test catches it. */
Test(bias, row_wide_large_finite_bias_agrees_with_the_reference) {
    enum { N = 24, H = 2, D = 16, ELEMS = N * H * D };
    static float qkv[3][ELEMS], bias[N * N];
    for (int a = 0; a < 3; a++) {
        fill_uniform(qkv[a], ELEMS, 3 + (uint64_t)a);
        for (size_t x = 0; x < ELEMS; x++) qkv[a][x] = (qkv[a][x] + 1.0f) * 0.5f;
    }
    bias_call c = {.q = qkv[0], .k = qkv[1], .v = qkv[2], .o_count = ELEMS, .lse_count = H * N};
    cr_assert_eq(clattn_attention_desc_init(&c.desc, CLATTN_LAYOUT_BSHD, 1, H, H, N, N, D, D),
                 CLATTN_SUCCESS);
    c.desc.bias_host = bias;
    c.desc.bias_strides = (clattn_tensor){0, 0, 0, N}; /* [Nq, Nk] */
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs);
    for (size_t i = 0; i < COUNT(large_biases); i++) {
        for (size_t x = 0; x < N * N; x++) bias[x] = x / N == 3 ? large_biases[i] : 0.0f;
        char what[64];
        snprintf(what, sizeof what, "row 3 biased by %g", (double)large_biases[i]);
        c.what = what;
        for (size_t dev = 0; dev < devices; dev++)
            cr_expect(expect_every_variant_matches(ctxs[dev], &c) >= 3,
                      "device %zu: fewer than 3 variants served the call", dev);
    }
}

/* Two keys whose scores differ by a quarter of the float32 spacing at the bias (q = 1,
 * k = (spacing / 4, 0), scale 1): both sums round to the bias itself, so P = (1/2, 1/2) and,
 * with v = (1, -1), O = 0 on every variant and in the reference. Summed in double they differ,
 * and the old reference gave O = tanh(spacing / 8), 1.2e-4 for -1e4: 6 times the tolerance. */
Test(bias, score_differences_below_the_bias_spacing_vanish) {
    float q[1] = {1}, k[2] = {0, 0}, v[2] = {1, -1}, bias[2];
    bias_call c = {.q = q, .k = k, .v = v, .o_count = 1, .lse_count = 1};
    cr_assert_eq(clattn_attention_desc_init(&c.desc, CLATTN_LAYOUT_BSHD, 1, 1, 1, 1, 2, 1, 1),
                 CLATTN_SUCCESS);
    c.desc.scale = 1.0f;
    c.desc.bias_host = bias;
    c.desc.bias_strides = (clattn_tensor){0, 2, 2, 2};
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs);
    for (size_t i = 0; i < COUNT(large_biases); i++) {
        float value = large_biases[i], spacing = nextafterf(fabsf(value), INFINITY) - fabsf(value);
        bias[0] = bias[1] = value;
        k[0] = spacing / 4;
        float o = 1.0f, lse = 0.0f;
        cr_assert_eq(clattn_attention_reference(&c.desc, q, k, v, &o, &lse), CLATTN_SUCCESS);
        cr_expect_eq(o, 0.0f, "bias %g: the reference's O = %g, expected 0", (double)value,
                     (double)o);
        char what[64];
        snprintf(what, sizeof what, "two keys biased by %g", (double)value);
        c.what = what;
        for (size_t dev = 0; dev < devices; dev++)
            cr_expect(expect_every_variant_matches(ctxs[dev], &c) >= 3,
                      "device %zu: fewer than 3 variants served the call", dev);
    }
}

/* clattn_softmax: scale * x beyond the float32 range saturates instead of becoming -inf. */
Test(bias, softmax_scale_keeps_finite_values_finite) {
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs);
    float in[4] = {-2e38f, -2e38f, -2e38f, -2e38f}, out[4], lse = 0;
    for (size_t dev = 0; dev < devices; dev++) {
        clattn_context *ctx = ctxs[dev];
        cl_int err = CL_SUCCESS;
        cl_context cl = clattn_context_cl_context(ctx);
        cl_mem x =
            clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof in, in, &err);
        cl_mem l = clCreateBuffer(cl, CL_MEM_READ_WRITE, sizeof(float), NULL, &err);
        clattn_softmax_desc d = {sizeof(clattn_softmax_desc), 1, 4, CLATTN_F32, 10.0f, 0, 4, 0, 4};
        ASSERT_OK(ctx, clattn_softmax(ctx, &d, x, x, l, NULL));
        clEnqueueReadBuffer(clattn_context_queue(ctx), x, CL_TRUE, 0, sizeof out, out, 0, NULL,
                            NULL);
        clEnqueueReadBuffer(clattn_context_queue(ctx), l, CL_TRUE, 0, sizeof lse, &lse, 0, NULL,
                            NULL);
        for (int c = 0; c < 4; c++)
            cr_expect(fabsf(out[c] - 0.25f) < 1e-6f, "softmax[%d] = %g, expected 0.25", c,
                      (double)out[c]);
        cr_expect(isfinite(lse) && lse <= -FLT_MAX * 0.99f, "softmax LSE %g", (double)lse);
        clReleaseMemObject(x);
        clReleaseMemObject(l);
    }
}
