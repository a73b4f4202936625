/*
 * The CPU reference against answers worked out by hand: every expected value here comes from
 * the arithmetic written in the comments, never from the code under test. The mask patterns
 * are checked with zero queries (every allowed score is 0, so the weights are uniform) and
 * one-hot values (V[j] = e_j), which makes O[i][j] = 1/n when key j is allowed and 0 when not.
 * The last tests check mask_count_pairs against a brute-force count over mask_allowed.
 */
#include <criterion/criterion.h>

#include "clattn.h"
#include "core/half.h"
#include "plan/mask.h"
#include "reference/reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

#define EXPECT_NEAR(got, want, ...)                                                                \
    cr_expect(fabs((double)(got) - (double)(want)) <= 1e-12 * (1.0 + fabs((double)(want))),        \
              __VA_ARGS__)

static clattn_attention_desc make_desc(clattn_layout layout, size_t batch, size_t heads_q,
                                       size_t heads_kv, size_t len_q, size_t len_k, size_t dim_qk,
                                       size_t dim_v) {
    clattn_attention_desc d;
    cr_assert_eq(clattn_attention_desc_init(&d, layout, batch, heads_q, heads_kv, len_q, len_k,
                                            dim_qk, dim_v),
                 CLATTN_SUCCESS);
    return d;
}

/* The double-precision reference of a desc (bias: the host array for desc->bias_strides). */
static clattn_status reference_of(const clattn_attention_desc *d, const void *q, const void *k,
                                  const void *v, const float *bias, double *o, double *lse) {
    clattn_attention_desc local;
    attn_problem pb;
    if (d) {
        local = *d;
        local.bias_host = bias;
    }
    clattn_status status = problem_build(d ? &local : NULL, BIAS_FROM_HOST, NULL, &pb);
    if (status == CLATTN_SUCCESS) status = reference_attention(&pb, q, k, v, bias, o, lse);
    problem_release(&pb);
    return status;
}

static void run_reference(const clattn_attention_desc *d, const void *q, const void *k,
                          const void *v, const float *bias, double *o, double *lse) {
    clattn_status status = reference_of(d, q, k, v, bias, o, lse);
    cr_assert_eq(status, CLATTN_SUCCESS, "reference_attention -> %s", clattn_status_name(status));
}

/* Reproducible inputs in [-1, 1]. */
static void fill_seeded(float *x, size_t n, uint32_t seed) {
    uint32_t state = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++) {
        state = state * 1664525u + 1013904223u;
        x[i] = (float)((state >> 8) * (2.0 / 16777216.0) - 1.0);
    }
}

/* ---------------------------------------------------------------- softmax */

Test(reference, softmax_2x3_with_scale) {
    const float in[6] = {1, 2, 3, 2, -2, 0};
    double out[6], lse[2];
    reference_softmax(in, 2, 3, 0.5f, out, lse);
    /* row 0: scaled 0.5, 1, 1.5; sum0 = e^0.5 + e^1 + e^1.5; out = e^x / sum0 */
    double sum0 = exp(0.5) + exp(1.0) + exp(1.5);
    EXPECT_NEAR(out[0], exp(0.5) / sum0, "out[0][0]");
    EXPECT_NEAR(out[1], exp(1.0) / sum0, "out[0][1]");
    EXPECT_NEAR(out[2], exp(1.5) / sum0, "out[0][2]");
    EXPECT_NEAR(lse[0], log(sum0), "lse[0]");
    /* row 1: scaled 1, -1, 0; sum1 = e + 1/e + 1 */
    double sum1 = exp(1.0) + exp(-1.0) + 1.0;
    EXPECT_NEAR(out[3], exp(1.0) / sum1, "out[1][0]");
    EXPECT_NEAR(out[4], exp(-1.0) / sum1, "out[1][1]");
    EXPECT_NEAR(out[5], 1.0 / sum1, "out[1][2]");
    EXPECT_NEAR(lse[1], log(sum1), "lse[1]");
}

Test(reference, softmax_masked_and_nan_rows) {
    const float in[6] = {-INFINITY, -INFINITY, -INFINITY, 0, NAN, 0};
    double out[6], lse[2];
    reference_softmax(in, 2, 3, 1.0f, out, lse);
    /* row 0: everything masked: zeros and -inf (as cl/softmax.cl) */
    for (int c = 0; c < 3; c++) cr_expect_eq(out[c], 0.0, "masked row, column %d", c);
    cr_expect(isinf(lse[0]) && lse[0] < 0, "masked row: lse %g", lse[0]);
    /* row 1: a NaN reaches the whole row */
    for (int c = 3; c < 6; c++) cr_expect(isnan(out[c]), "NaN row, column %d: %g", c - 3, out[c]);
    cr_expect(isnan(lse[1]), "NaN row: lse %g", lse[1]);
    reference_softmax(in, 2, 3, 1.0f, out, NULL); /* lse may be NULL */
}

/* scale * x is one float32 product, as cl/softmax.cl computes it: 3 * (1/3 in float32) =
   1 + 2^-25 rounds to 1, so row (1/3, 0) gives out = (e, 1) / (e + 1). */
Test(reference, softmax_scale_product_is_float32) {
    const float in[2] = {1.0f / 3.0f, 0};
    double out[2], lse[1];
    reference_softmax(in, 1, 2, 3.0f, out, lse);
    EXPECT_NEAR(out[0], exp(1.0) / (exp(1.0) + 1), "out[0] = %.17g", out[0]);
    EXPECT_NEAR(lse[0], log(exp(1.0) + 1), "lse = %.17g", lse[0]);
}

/* ---------------------------------------------------------------- worked examples */

/* The one_query_two_keys example (q=2, k=(1,-1), v=(3,5), scale 0.5) stored as `dtype`:
 * O = (3e + 5/e) / (e + 1/e), LSE = log(e + 1/e). */
static void expect_one_query_two_keys(clattn_dtype dtype, const void *q, const void *k,
                                      const void *v) {
    clattn_attention_desc d = make_desc(CLATTN_LAYOUT_BSHD, 1, 1, 1, 1, 2, 1, 1);
    d.dtype = dtype;
    d.scale = 0.5f;
    double o[1], lse[1];
    run_reference(&d, q, k, v, NULL, o, lse);
    double sum = exp(1.0) + exp(-1.0);
    EXPECT_NEAR(o[0], (3 * exp(1.0) + 5 * exp(-1.0)) / sum, "O = %.17g", o[0]);
    EXPECT_NEAR(lse[0], log(sum), "LSE = %.17g", lse[0]);
}

Test(reference, one_query_two_keys) {
    /* Nq=1, Nk=2, D=1, scale 0.5: q=2, k=(1,-1), v=(3,5)
       s0 = 0.5*2*1 = 1, s1 = 0.5*2*(-1) = -1
       P0 = e/(e + 1/e), P1 = (1/e)/(e + 1/e); O = 3*P0 + 5*P1; LSE = log(e + 1/e) */
    const float q[1] = {2}, k[2] = {1, -1}, v[2] = {3, 5};
    expect_one_query_two_keys(CLATTN_F32, q, k, v);
}

Test(reference, default_scale_and_dqk_not_dv) {
    /* Dqk=4 -> scale 1/sqrt(4) = 1/2. q=(1,1,1,1), k0=(1,1,1,1), k1=0: s0 = 4/2 = 2, s1 = 0.
       Dv=3: v0=(1,0,2), v1=(0,1,2): O = (P0, P1, 2) with P0 = e^2/(e^2+1); LSE = log(e^2+1) */
    clattn_attention_desc d = make_desc(CLATTN_LAYOUT_BSHD, 1, 1, 1, 1, 2, 4, 3);
    const float q[4] = {1, 1, 1, 1}, k[8] = {1, 1, 1, 1, 0, 0, 0, 0}, v[6] = {1, 0, 2, 0, 1, 2};
    double o[3], lse[1];
    run_reference(&d, q, k, v, NULL, o, lse);
    double p0 = exp(2.0) / (exp(2.0) + 1.0);
    EXPECT_NEAR(o[0], p0, "O[0] = %.17g", o[0]);
    EXPECT_NEAR(o[1], 1.0 - p0, "O[1] = %.17g", o[1]);
    EXPECT_NEAR(o[2], 2.0, "O[2] = %.17g", o[2]);
    EXPECT_NEAR(lse[0], log(exp(2.0) + 1.0), "LSE = %.17g", lse[0]);
}

Test(reference, causal_nq_above_nk_has_empty_rows) {
    /* Nq=3, Nk=1, causal: off = -2, p = i - 2. Rows 0 and 1 (p = -2, -1) see no key: O = 0,
       LSE = -inf. Row 2 (p = 0) sees key 0 only: O = v0 = 7, LSE = s = 1 * q2 * k0 = 3*2 = 6. */
    clattn_attention_desc d = make_desc(CLATTN_LAYOUT_BSHD, 1, 1, 1, 3, 1, 1, 1);
    d.scale = 1.0f;
    d.causal = 1;
    const float q[3] = {1, 2, 3}, k[1] = {2}, v[1] = {7};
    double o[3] = {-1, -1, -1}, lse[3];
    run_reference(&d, q, k, v, NULL, o, lse);
    for (int i = 0; i < 2; i++) {
        cr_expect_eq(o[i], 0.0, "empty row %d: O = %g", i, o[i]);
        cr_expect(isinf(lse[i]) && lse[i] < 0, "empty row %d: LSE = %g", i, lse[i]);
    }
    EXPECT_NEAR(o[2], 7.0, "row 2: O = %g", o[2]);
    EXPECT_NEAR(lse[2], 6.0, "row 2: LSE = %g", lse[2]);
}

Test(reference, window_0_0_sees_one_key) {
    /* window (0,0), Nq=Nk=3: query i sees key i only: O_i = v_i, LSE_i = q_i * k_i. */
    clattn_attention_desc d = make_desc(CLATTN_LAYOUT_BSHD, 1, 1, 1, 3, 3, 1, 1);
    d.scale = 1.0f;
    d.window_left = 0;
    d.window_right = 0;
    const float q[3] = {1, 2, 3}, k[3] = {0.5f, -1, 2}, v[3] = {10, 20, 30};
    double o[3], lse[3];
    run_reference(&d, q, k, v, NULL, o, lse);
    const double want_lse[3] = {1 * 0.5, 2 * -1.0, 3 * 2.0};
    for (int i = 0; i < 3; i++) {
        EXPECT_NEAR(o[i], v[i], "row %d: O = %g", i, o[i]);
        EXPECT_NEAR(lse[i], want_lse[i], "row %d: LSE = %g", i, lse[i]);
    }
}

/* ---------------------------------------------------------------- patterns, one-hot */

/* A desc for pattern checks: Dqk = 1 (Q = K = 0, so every allowed score is 0) and Dv = Nk
 * (V[j] is the one-hot vector e_j). */
static clattn_attention_desc pattern_desc(size_t heads_q, size_t heads_kv, size_t len_q,
                                          size_t len_k) {
    return make_desc(CLATTN_LAYOUT_BHSD, 1, heads_q, heads_kv, len_q, len_k, 1, len_k);
}

/* Runs d (from pattern_desc) and checks every row against rows[h * Nq + i], a string with 'x'
 * for each key the row must see and '.' for each it must not: O[j] = 1/n or 0, LSE = log(n);
 * a row without keys has O = 0 and LSE = -inf. */
static void expect_keys(const clattn_attention_desc *d, const float *bias,
                        const char *const *rows) {
    size_t hq = d->heads_q, hkv = d->heads_kv, nq = d->len_q, nk = d->len_k;
    float *q = calloc(hq * nq, sizeof *q), *k = calloc(hkv * nk, sizeof *k);
    float *v = calloc(hkv * nk * nk, sizeof *v);
    double *o = calloc(hq * nq * nk, sizeof *o), *lse = calloc(hq * nq, sizeof *lse);
    cr_assert(q && k && v && o && lse);
    for (size_t h = 0; h < hkv; h++)
        for (size_t j = 0; j < nk; j++) v[(h * nk + j) * nk + j] = 1.0f;
    run_reference(d, q, k, v, bias, o, lse);
    for (size_t r = 0; r < hq * nq; r++) {
        const char *row = rows[r];
        cr_assert_eq(strlen(row), nk, "row %zu of the expected pattern", r);
        size_t n = 0;
        for (size_t j = 0; j < nk; j++) n += row[j] == 'x';
        for (size_t j = 0; j < nk; j++) {
            double want = row[j] == 'x' ? 1.0 / (double)n : 0.0;
            EXPECT_NEAR(o[r * nk + j], want, "head %zu row %zu key %zu: O = %g, expected %g",
                        r / nq, r % nq, j, o[r * nk + j], want);
        }
        if (n == 0)
            cr_expect(isinf(lse[r]) && lse[r] < 0, "head %zu row %zu: empty, LSE = %g", r / nq,
                      r % nq, lse[r]);
        else
            EXPECT_NEAR(lse[r], log((double)n), "head %zu row %zu: LSE = %g, expected log(%zu)",
                        r / nq, r % nq, lse[r], n);
    }
    free(q), free(k), free(v), free(o), free(lse);
}

Test(reference, causal_nq_below_nk_aligns_to_the_end) {
    /* Nq=2, Nk=5: off = 3, query 0 sits at p = 3, query 1 at p = 4 */
    clattn_attention_desc d = pattern_desc(1, 1, 2, 5);
    d.causal = 1;
    const char *rows[] = {"xxxx.", "xxxxx"};
    expect_keys(&d, NULL, rows);
}

Test(reference, causal_nq_above_nk_one_hot) {
    /* Nq=4, Nk=2: off = -2, p = -2, -1, 0, 1 */
    clattn_attention_desc d = pattern_desc(1, 1, 4, 2);
    d.causal = 1;
    const char *rows[] = {"..", "..", "x.", "xx"};
    expect_keys(&d, NULL, rows);
}

/* Five queries and keys, window (0,0), the given global tokens (causal or not): each query sees
 * the keys of its row ('x'). */
static void expect_globals_on_window_0_0(int causal, const int64_t *globals, size_t num_globals,
                                         const char *const rows[5]) {
    clattn_attention_desc d = pattern_desc(1, 1, 5, 5);
    d.causal = causal;
    d.window_left = d.window_right = 0;
    d.global_tokens = globals;
    d.num_global_tokens = num_globals;
    expect_keys(&d, NULL, rows);
}

Test(reference, global_token_zero_with_window_0_0) {
    /* window (0,0) + global token 0, no causal: query p sees p and 0; query 0 is itself
       global and sees every key */
    const int64_t globals[] = {0};
    const char *rows[] = {"xxxxx", "xx...", "x.x..", "x..x.", "x...x"};
    expect_globals_on_window_0_0(0, globals, 1, rows);
}

Test(reference, global_query_stays_causal) {
    /* window (0,0) + global token 2 + causal: query 2 sees every key up to 2; the others see
       themselves and key 2 once it is not in their future */
    const int64_t globals[] = {2, 2}; /* a repeat is harmless */
    const char *rows[] = {"x....", ".x...", "xxx..", "..xx.", "..x.x"};
    expect_globals_on_window_0_0(1, globals, 2, rows);
}

Test(reference, dilated_window) {
    /* window (4,0), dilation 2: query p sees p, p-2, p-4 (those >= 0) */
    clattn_attention_desc d = pattern_desc(1, 1, 7, 7);
    d.window_left = 4;
    d.window_right = 0;
    d.dilation = 2;
    const char *rows[] = {"x......", ".x.....", "x.x....", ".x.x...",
                          "x.x.x..", ".x.x.x.", "..x.x.x"};
    expect_keys(&d, NULL, rows);
}

Test(reference, window_right_side_and_unbounded_left) {
    /* window (-1,1), Nq=Nk=4: query p sees every key up to p + 1 */
    clattn_attention_desc d = pattern_desc(1, 1, 4, 4);
    d.window_left = -1;
    d.window_right = 1;
    const char *rows[] = {"xx..", "xxx.", "xxxx", "xxxx"};
    expect_keys(&d, NULL, rows);
}

Test(reference, block_layout) {
    /* BQ=BK=2, layout [[1,0],[1,1]], Nq=Nk=4: rows 0-1 see keys 0-1, rows 2-3 see all */
    clattn_attention_desc d = pattern_desc(1, 1, 4, 4);
    const uint8_t layout[4] = {1, 0, 1, 1};
    d.block_layout = layout;
    d.block_q = d.block_k = 2;
    const char *rows[] = {"xx..", "xx..", "xxxx", "xxxx"};
    expect_keys(&d, NULL, rows);
    /* AND-ed with causal */
    d.causal = 1;
    const char *causal_rows[] = {"x...", "xx..", "xxx.", "xxxx"};
    expect_keys(&d, NULL, causal_rows);
}

Test(reference, block_layout_ragged_edges) {
    /* Nq=3, Nk=5, BQ=2, BK=2: blocks 2 x 3, layout [[0,1,1],[1,0,1]]: rows 0-1 see keys 2-4,
       row 2 sees keys 0-1 and 4 (the last key block holds key 4 only) */
    clattn_attention_desc d = pattern_desc(1, 1, 3, 5);
    const uint8_t layout[6] = {0, 1, 1, 1, 0, 1};
    d.block_layout = layout;
    d.block_q = d.block_k = 2;
    const char *rows[] = {"..xxx", "..xxx", "xx..x"};
    expect_keys(&d, NULL, rows);
}

Test(reference, block_layout_per_head) {
    /* Hq=2 (MQA: Hkv=1); head 0 [[1,0],[1,1]], head 1 [[0,1],[1,0]], BQ=BK=2, Nq=Nk=4 */
    clattn_attention_desc d = pattern_desc(2, 1, 4, 4);
    const uint8_t layout[8] = {1, 0, 1, 1, 0, 1, 1, 0};
    d.block_layout = layout;
    d.block_q = d.block_k = 2;
    d.block_layout_per_head = 1;
    const char *rows[] = {"xx..", "xx..", "xxxx", "xxxx", /* head 0 */
                          "..xx", "..xx", "xx..", "xx.."};
    expect_keys(&d, NULL, rows);
}

Test(reference, bias_minus_infinity_masks) {
    /* Nq=2, Nk=3, bias [[0,-inf,0],[-inf,-inf,-inf]]: row 0 sees keys 0 and 2, row 1 none
       (every allowed score is -inf: empty) */
    clattn_attention_desc d = pattern_desc(1, 1, 2, 3);
    const float bias[6] = {0, -INFINITY, 0, -INFINITY, -INFINITY, -INFINITY};
    d.bias_strides = (clattn_tensor){0, 6, 6, 3};
    const char *rows[] = {"x.x", "..."};
    expect_keys(&d, bias, rows);
}

Test(reference, bias_broadcast_with_zero_strides) {
    /* B=2, Hq=2, Nq=1, Nk=2, Q=0: s = bias. v = (1, 5).
       Head 0: bias (ln 3, 0) -> P = (3/4, 1/4): O = 3/4 + 5/4 = 2, LSE = log(3 + 1) = log 4.
       Head 1: bias (0, ln 3) -> P = (1/4, 3/4): O = 1/4 + 15/4 = 4, LSE = log 4.
       The bias is [Hq][Nk] with stride_batch 0 (shared by both batches), at offset 1. */
    clattn_attention_desc d = make_desc(CLATTN_LAYOUT_BHSD, 2, 2, 1, 1, 2, 1, 1);
    const float q[4] = {0}, k[4] = {0}, v[4] = {1, 5, 1, 5};
    const float ln3 = (float)log(3.0);
    const float bias[5] = {99, ln3, 0, 0, ln3};
    d.bias_strides = (clattn_tensor){1, 0, 2, 0};
    double o[4], lse[4];
    run_reference(&d, q, k, v, bias, o, lse);
    for (int r = 0; r < 4; r++) {    /* r = b * 2 + h */
        double e = exp((double)ln3); /* 3, up to the float rounding of ln 3 */
        double want = r % 2 == 0 ? (e + 5) / (e + 1) : (1 + 5 * e) / (e + 1);
        EXPECT_NEAR(o[r], want, "b %d h %d: O = %.17g", r / 2, r % 2, o[r]);
        EXPECT_NEAR(lse[r], log(e + 1), "b %d h %d: LSE = %.17g", r / 2, r % 2, lse[r]);
        cr_expect(fabs(o[r] - (r % 2 == 0 ? 2.0 : 4.0)) < 1e-6);
    }
    /* all strides 0: one [Nk] row for everything: (0, ln 3) -> O = 4 everywhere */
    d.bias_strides = (clattn_tensor){3, 0, 0, 0};
    run_reference(&d, q, k, v, bias, o, lse);
    for (int r = 0; r < 4; r++) cr_expect(fabs(o[r] - 4.0) < 1e-6, "row %d: O = %g", r, o[r]);
}

/* Scores are float32, step by step (docs/semantics.md section 9). Nq=1, Nk=2, D=1, scale 1: q=1,
   k=(2^-10, 0), v=(1, -1), bias -1e5 on both keys. t = (2^-10, 0) is exact in float32; the
   float32 sums t + bias are both -100000 (its float32 spacing is 2^-7 = 0.0078125, and
   2^-10 is less than half of it), so P = (1/2, 1/2): O = 0 exactly, LSE = -1e5 + log 2.
   Summed in double, as the reference did, s0 - s1 = 2^-10 and O = tanh(2^-11) = 4.9e-4. */
Test(reference, bias_sum_is_rounded_to_float32) {
    clattn_attention_desc d = make_desc(CLATTN_LAYOUT_BSHD, 1, 1, 1, 1, 2, 1, 1);
    d.scale = 1.0f;
    const float q[1] = {1}, k[2] = {0x1.0p-10f, 0}, v[2] = {1, -1}, bias[2] = {-1e5f, -1e5f};
    d.bias_strides = (clattn_tensor){0, 2, 2, 2};
    double o[1], lse[1];
    run_reference(&d, q, k, v, bias, o, lse);
    cr_expect_eq(o[0], 0.0, "O = %.17g, expected 0 (both scores round to -1e5)", o[0]);
    EXPECT_NEAR(lse[0], -1e5 + log(2.0), "LSE = %.17g", lse[0]);
}

/* The product scale * q.k is rounded to float32 once: q=1, k=(1/3 in float32, 0), scale 3,
   v=(1, -1). 1/3 in float32 is 11184811 * 2^-25, so scale * q.k = 1 + 2^-25 exactly, which
   float32 rounds to 1 (its spacing above 1 is 2^-23). With t = (1, 0), P0 = e / (e + 1) and
   O = (e - 1) / (e + 1) = tanh(1/2); with t0 = 1 + 2^-25, O would be 1.2e-8 larger. */
Test(reference, scaled_dot_is_rounded_to_float32) {
    clattn_attention_desc d = make_desc(CLATTN_LAYOUT_BSHD, 1, 1, 1, 1, 2, 1, 1);
    d.scale = 3.0f;
    const float q[1] = {1}, k[2] = {1.0f / 3.0f, 0}, v[2] = {1, -1};
    double o[1], lse[1];
    run_reference(&d, q, k, v, NULL, o, lse);
    EXPECT_NEAR(o[0], tanh(0.5), "O = %.17g, expected tanh(1/2) (t = float32(1 + 2^-25) = 1)",
                o[0]);
}

Test(reference, gqa_maps_query_heads_to_kv_heads) {
    /* Hq=4, Hkv=2, Nq=Nk=1, D=1, scale 1: heads 0,1 use kv head 0 (k=1, v=10), heads 2,3 use
       kv head 1 (k=2, v=20). q_h = h+1. One key: O = v, LSE = s = q_h * k:
       1*1, 2*1, 3*2, 4*2 */
    clattn_attention_desc d = make_desc(CLATTN_LAYOUT_BHSD, 1, 4, 2, 1, 1, 1, 1);
    d.scale = 1.0f;
    const float q[4] = {1, 2, 3, 4}, k[2] = {1, 2}, v[2] = {10, 20};
    double o[4], lse[4];
    run_reference(&d, q, k, v, NULL, o, lse);
    const double want_o[4] = {10, 10, 20, 20}, want_lse[4] = {1, 2, 6, 8};
    for (int h = 0; h < 4; h++) {
        EXPECT_NEAR(o[h], want_o[h], "head %d: O = %g", h, o[h]);
        EXPECT_NEAR(lse[h], want_lse[h], "head %d: LSE = %g", h, lse[h]);
    }
}

Test(reference, gqa_one_hot_per_kv_head) {
    /* Hq=4, Hkv=2, Nq=1, Nk=2, Dv=2, Q=K=0: V of kv head 0 is (1,0),(0,1); of kv head 1
       (10,0),(0,10). Uniform weights 1/2: heads 0,1 -> (0.5, 0.5), heads 2,3 -> (5, 5). */
    clattn_attention_desc d = make_desc(CLATTN_LAYOUT_BSHD, 1, 4, 2, 1, 2, 1, 2);
    const float q[4] = {0}, k[4] = {0};
    float v[8]; /* BSHD [N=2][H=2][D=2] */
    const float v_bhsd[2][2][2] = {{{1, 0}, {0, 1}}, {{10, 0}, {0, 10}}};
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 2; j++)
            for (int x = 0; x < 2; x++) v[(j * 2 + h) * 2 + x] = v_bhsd[h][j][x];
    double o[8];
    run_reference(&d, q, k, v, NULL, o, NULL);
    for (int h = 0; h < 4; h++)
        for (int x = 0; x < 2; x++)
            EXPECT_NEAR(o[h * 2 + x], h < 2 ? 0.5 : 5.0, "head %d dim %d: %g", h, x, o[h * 2 + x]);
}

/* ---------------------------------------------------------------- layouts and storage */

/* Copies a logical [B][H][N][D] tensor into t's layout. */
static void scatter(const float *logical, const clattn_tensor *t, size_t batch, size_t heads,
                    size_t len, size_t dim, float *out) {
    for (size_t b = 0; b < batch; b++)
        for (size_t h = 0; h < heads; h++)
            for (size_t n = 0; n < len; n++)
                for (size_t x = 0; x < dim; x++)
                    out[t->offset + b * t->stride_batch + h * t->stride_head + n * t->stride_seq +
                        x] = logical[((b * heads + h) * len + n) * dim + x];
}

Test(reference, bshd_and_bhsd_agree) {
    enum { B = 2, HQ = 4, HKV = 2, NQ = 3, NK = 5, DQK = 3, DV = 2 };
    float q[B * HQ * NQ * DQK], k[B * HKV * NK * DQK], v[B * HKV * NK * DV];
    fill_seeded(q, COUNT_OF(q), 1), fill_seeded(k, COUNT_OF(k), 2);
    fill_seeded(v, COUNT_OF(v), 3);
    double o[2][B * HQ * NQ * DV], lse[2][B * HQ * NQ];
    for (int l = 0; l < 2; l++) {
        clattn_layout layout = l ? CLATTN_LAYOUT_BHSD : CLATTN_LAYOUT_BSHD;
        clattn_attention_desc d = make_desc(layout, B, HQ, HKV, NQ, NK, DQK, DV);
        d.causal = 1;
        d.window_left = 3;
        float lq[COUNT_OF(q)], lk[COUNT_OF(k)], lv[COUNT_OF(v)];
        scatter(q, &d.q, B, HQ, NQ, DQK, lq);
        scatter(k, &d.k, B, HKV, NK, DQK, lk);
        scatter(v, &d.v, B, HKV, NK, DV, lv);
        run_reference(&d, lq, lk, lv, NULL, o[l], lse[l]);
    }
    for (size_t x = 0; x < COUNT_OF(o[0]); x++)
        cr_expect_eq(o[0][x], o[1][x], "O element %zu: BSHD %.17g, BHSD %.17g", x, o[0][x],
                     o[1][x]);
    for (size_t r = 0; r < COUNT_OF(lse[0]); r++)
        cr_expect_eq(lse[0][r], lse[1][r], "LSE row %zu", r);
    /* and the answer does not ignore the inputs: rows differ */
    cr_expect_neq(o[0][0], o[0][DV * NQ]);
}

Test(reference, float16_input) {
    /* The one_query_two_keys example in float16: q=2, k=(1,-1), v=(3,5), scale 0.5, all exact
       in float16: 2 = 0x4000, 1 = 0x3C00, -1 = 0xBC00, 3 = 0x4200, 5 = 0x4500 */
    const uint16_t q[1] = {0x4000}, k[2] = {0x3C00, 0xBC00}, v[2] = {0x4200, 0x4500};
    expect_one_query_two_keys(CLATTN_F16, q, k, v);
}

Test(reference, float16_reads_the_rounded_values) {
    /* float16 storage must give exactly what float32 storage of the widened values gives */
    enum { N = 4, D = 3 };
    float q32[N * D], k32[N * D], v32[N * D];
    uint16_t q16[N * D], k16[N * D], v16[N * D];
    fill_seeded(q32, N * D, 7), fill_seeded(k32, N * D, 8), fill_seeded(v32, N * D, 9);
    for (int x = 0; x < N * D; x++) {
        q16[x] = float_to_half(q32[x]), q32[x] = half_to_float(q16[x]);
        k16[x] = float_to_half(k32[x]), k32[x] = half_to_float(k16[x]);
        v16[x] = float_to_half(v32[x]), v32[x] = half_to_float(v16[x]);
    }
    clattn_attention_desc d = make_desc(CLATTN_LAYOUT_BSHD, 1, 1, 1, N, N, D, D);
    double o32[N * D], o16[N * D], lse32[N], lse16[N];
    run_reference(&d, q32, k32, v32, NULL, o32, lse32);
    d.dtype = CLATTN_F16;
    run_reference(&d, q16, k16, v16, NULL, o16, lse16);
    cr_expect(memcmp(o32, o16, sizeof o32) == 0, "O differs between f16 and f32 storage");
    cr_expect(memcmp(lse32, lse16, sizeof lse32) == 0, "LSE differs");
}

/* ---------------------------------------------------------------- NaN and Inf */

static int is_finite_row(const double *o, size_t dim_v, double lse) {
    for (size_t x = 0; x < dim_v; x++)
        if (!isfinite(o[x])) return 0;
    return isfinite(lse);
}

Test(reference, nan_key_reaches_only_rows_that_see_it) {
    /* Nq=Nk=3, D=1, K[1] = NaN. Causal: row 0 sees key 0 only (finite); rows 1 and 2 see key 1
       (NaN). Window (0,0): only row 1 sees key 1. */
    clattn_attention_desc d = make_desc(CLATTN_LAYOUT_BSHD, 1, 1, 1, 3, 3, 1, 1);
    const float q[3] = {1, 1, 1}, k[3] = {0.5f, NAN, 0.25f}, v[3] = {1, 2, 3};
    double o[3], lse[3];
    d.causal = 1;
    run_reference(&d, q, k, v, NULL, o, lse);
    cr_expect(is_finite_row(&o[0], 1, lse[0]), "row 0: O %g LSE %g", o[0], lse[0]);
    for (int i = 1; i < 3; i++)
        cr_expect(isnan(o[i]) && isnan(lse[i]), "row %d: O %g LSE %g", i, o[i], lse[i]);
    d.causal = 0;
    d.window_left = d.window_right = 0;
    run_reference(&d, q, k, v, NULL, o, lse);
    cr_expect(isnan(o[1]) && isnan(lse[1]), "row 1: O %g LSE %g", o[1], lse[1]);
    cr_expect(is_finite_row(&o[0], 1, lse[0]) && is_finite_row(&o[2], 1, lse[2]));
    EXPECT_NEAR(o[2], 3.0, "row 2 sees key 2 only");
}

Test(reference, nan_value_and_infinite_query) {
    /* Nq=Nk=3, causal. V[2] = NaN: only row 2 (the one that sees key 2) gets NaN in O; its
       LSE stays finite. Then Q[0] = +inf: row 0's score is +inf: NaN or Inf there, rows 1-2
       untouched. */
    clattn_attention_desc d = make_desc(CLATTN_LAYOUT_BSHD, 1, 1, 1, 3, 3, 1, 1);
    d.causal = 1;
    float q[3] = {1, 1, 1};
    const float k[3] = {0.5f, 1, 0.25f}, v[3] = {1, 2, NAN};
    double o[3], lse[3];
    run_reference(&d, q, k, v, NULL, o, lse);
    cr_expect(is_finite_row(&o[0], 1, lse[0]) && is_finite_row(&o[1], 1, lse[1]));
    cr_expect(isnan(o[2]) && isfinite(lse[2]), "row 2: O %g LSE %g", o[2], lse[2]);
    const float v_finite[3] = {1, 2, 3};
    q[0] = INFINITY;
    run_reference(&d, q, k, v_finite, NULL, o, lse);
    cr_expect(!isfinite(o[0]) && !isfinite(lse[0]), "row 0: O %g LSE %g", o[0], lse[0]);
    cr_expect(is_finite_row(&o[1], 1, lse[1]) && is_finite_row(&o[2], 1, lse[2]));
}

Test(reference, nan_bias_on_a_masked_key_is_ignored) {
    /* causal Nq=Nk=2: row 0 does not see key 1, so a NaN bias there must not reach it */
    clattn_attention_desc d = pattern_desc(1, 1, 2, 2);
    d.causal = 1;
    const float bias[4] = {0, NAN, 0, 0};
    d.bias_strides = (clattn_tensor){0, 4, 4, 2};
    const char *rows[] = {"x.", "xx"};
    expect_keys(&d, bias, rows);
}

/* ---------------------------------------------------------------- the public entry point */

/* Hq=2, Hkv=1, Nq=Nk=2, Dqk=1, Dv=2, causal, Q=K=0 (uniform weights), v0=(1,2), v1=(3,4):
 * row 0 sees key 0: O = (1,2), LSE = log 1 = 0; row 1 sees both: O = (2,3), LSE = log 2.
 * O is written at offset 3 with padded strides (seq 5, head 11, batch 22). */
static clattn_attention_desc public_desc(clattn_dtype out_dtype) {
    clattn_attention_desc d = make_desc(CLATTN_LAYOUT_BHSD, 1, 2, 1, 2, 2, 1, 2);
    d.causal = 1;
    d.out_dtype = out_dtype;
    d.o = (clattn_tensor){3, 22, 11, 5};
    return d;
}
static const float public_q[4] = {0}, public_k[2] = {0}, public_v[4] = {1, 2, 3, 4};
static const double public_o[2][2] = {{1, 2}, {2, 3}};

Test(reference, public_f32_output_with_strides) {
    clattn_attention_desc d = public_desc(CLATTN_F32);
    float o[24], lse[4];
    for (int x = 0; x < 24; x++) o[x] = -999.0f;
    cr_assert_eq(clattn_attention_reference(&d, public_q, public_k, public_v, o, lse),
                 CLATTN_SUCCESS);
    int written[24] = {0};
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 2; i++) {
            for (int x = 0; x < 2; x++) {
                int at = 3 + h * 11 + i * 5 + x;
                written[at] = 1;
                cr_expect(fabsf(o[at] - (float)public_o[i][x]) <= 1e-6f, "h %d i %d x %d: %g", h, i,
                          x, o[at]);
            }
            float want = i == 0 ? 0.0f : (float)log(2.0);
            cr_expect(fabsf(lse[h * 2 + i] - want) <= 1e-6f, "LSE h %d i %d: %g", h, i,
                      lse[h * 2 + i]);
        }
    for (int x = 0; x < 24; x++)
        if (!written[x]) cr_expect_eq(o[x], -999.0f, "padding element %d was written", x);
    /* lse may be NULL */
    cr_expect_eq(clattn_attention_reference(&d, public_q, public_k, public_v, o, NULL),
                 CLATTN_SUCCESS);
}

Test(reference, public_f16_output_and_bias_host) {
    /* float16 O: 1 = 0x3C00, 2 = 0x4000, 3 = 0x4200 (exact). With bias_host -inf on key 0 of
       row 1 (shared by both heads), row 1 sees key 1 only: O = (3,4) = 0x4200, 0x4400. */
    clattn_attention_desc d = public_desc(CLATTN_F16);
    uint16_t o[24];
    float lse[4];
    for (int x = 0; x < 24; x++) o[x] = 0xFFFF;
    cr_assert_eq(clattn_attention_reference(&d, public_q, public_k, public_v, o, lse),
                 CLATTN_SUCCESS);
    const uint16_t want[2][2] = {{0x3C00, 0x4000}, {0x4000, 0x4200}};
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 2; i++)
            for (int x = 0; x < 2; x++)
                cr_expect_eq(o[3 + h * 11 + i * 5 + x], want[i][x], "h %d i %d x %d: 0x%04x", h, i,
                             x, o[3 + h * 11 + i * 5 + x]);
    cr_expect_eq(o[0], 0xFFFF, "element before the offset was written");
    const float bias[4] = {0, 0, -INFINITY, 0};
    d.bias_host = bias;
    d.bias_strides = (clattn_tensor){0, 0, 0, 2};
    cr_assert_eq(clattn_attention_reference(&d, public_q, public_k, public_v, o, lse),
                 CLATTN_SUCCESS);
    for (int h = 0; h < 2; h++) {
        cr_expect_eq(o[3 + h * 11 + 5], 0x4200, "h %d row 1 x 0", h);
        cr_expect_eq(o[3 + h * 11 + 6], 0x4400, "h %d row 1 x 1", h);
        cr_expect_eq(lse[h * 2 + 1], 0.0f, "h %d row 1: one key of score 0: LSE 0", h);
    }
}

Test(reference, public_empty_rows_give_zero_and_minus_infinity) {
    /* causal, Nq=2 > Nk=1: row 0 is empty (O = 0 also in float16: 0x0000, LSE = -inf) */
    clattn_attention_desc d = make_desc(CLATTN_LAYOUT_BSHD, 1, 1, 1, 2, 1, 1, 1);
    d.causal = 1;
    d.out_dtype = CLATTN_F16;
    const float q[2] = {1, 1}, k[1] = {1}, v[1] = {2};
    uint16_t o[2] = {0xFFFF, 0xFFFF};
    float lse[2];
    cr_assert_eq(clattn_attention_reference(&d, q, k, v, o, lse), CLATTN_SUCCESS);
    cr_expect_eq(o[0], 0x0000);
    cr_expect(isinf(lse[0]) && lse[0] < 0, "LSE %g", lse[0]);
    cr_expect_eq(o[1], 0x4000, "row 1: O = v = 2");
    cr_expect_eq(lse[1], 1.0f, "row 1: LSE = s = 1/sqrt(1) * 1 * 1");
}

/* ---------------------------------------------------------------- invalid descs */

static void expect_invalid(const clattn_attention_desc *d, const char *what) {
    float in[64] = {0}, o[64];
    double od[64], lse[64];
    clattn_status status = reference_of(d, in, in, in, NULL, od, lse);
    cr_expect_eq(status, CLATTN_ERR_INVALID_ARGUMENT, "%s: reference_attention -> %s", what,
                 clattn_status_name(status));
    status = clattn_attention_reference(d, in, in, in, o, NULL);
    cr_expect_eq(status, CLATTN_ERR_INVALID_ARGUMENT, "%s: clattn_attention_reference -> %s", what,
                 clattn_status_name(status));
}

Test(reference, invalid_descs_are_rejected) {
    clattn_attention_desc d = make_desc(CLATTN_LAYOUT_BSHD, 1, 3, 2, 2, 2, 2, 2);
    expect_invalid(&d, "Hq % Hkv != 0");
    const size_t sizes = 7;
    for (size_t s = 0; s < sizes; s++) {
        d = make_desc(CLATTN_LAYOUT_BSHD, 1, 2, 1, 2, 2, 2, 2);
        size_t *field[7] = {&d.batch, &d.heads_q, &d.heads_kv, &d.len_q,
                            &d.len_k, &d.dim_qk,  &d.dim_v};
        *field[s] = 0;
        expect_invalid(&d, "a size of 0");
    }
    const int64_t globals[2] = {0, 2};
    d = make_desc(CLATTN_LAYOUT_BSHD, 1, 1, 1, 2, 2, 2, 2);
    d.global_tokens = globals;
    d.num_global_tokens = 2;
    expect_invalid(&d, "global token 2 with Nk = 2");
    const int64_t negative[1] = {-1};
    d.global_tokens = negative;
    d.num_global_tokens = 1;
    expect_invalid(&d, "global token -1");
    d = make_desc(CLATTN_LAYOUT_BSHD, 1, 1, 1, 2, 2, 2, 2);
    d.dilation = 0;
    expect_invalid(&d, "dilation 0");
    d.dilation = 1;
    d.window_left = -2;
    expect_invalid(&d, "window left -2");
    d.window_left = 0;
    d.window_right = -2;
    expect_invalid(&d, "window right -2");
    d.window_right = -1;
    d.scale = NAN;
    expect_invalid(&d, "scale NaN");
    d.scale = 0;
    float in[8] = {0};
    double od[8];
    cr_expect_eq(clattn_attention_reference(NULL, in, in, in, od, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT, "NULL desc");
    cr_expect_eq(reference_of(&d, NULL, in, in, NULL, od, NULL), CLATTN_ERR_INVALID_ARGUMENT,
                 "NULL q");
    cr_expect_eq(reference_of(&d, in, in, in, NULL, NULL, NULL), CLATTN_ERR_INVALID_ARGUMENT,
                 "NULL o");
}

/* ---------------------------------------------------------------- mask_count_pairs */

/* mask_count_pairs against counting mask_allowed over every (h, i, j), times the batch. */
static void expect_pair_count(const clattn_attention_desc *d) {
    mask_spec m;
    cr_assert_eq(mask_from_desc(d, &m), CLATTN_SUCCESS);
    uint64_t brute = 0;
    for (int64_t h = 0; h < (int64_t)d->heads_q; h++)
        for (int64_t i = 0; i < m.len_q; i++)
            for (int64_t j = 0; j < m.len_k; j++) brute += (uint64_t)mask_allowed(&m, h, i, j);
    brute *= d->batch;
    uint64_t fast = mask_count_pairs(&m, (int64_t)d->batch, (int64_t)d->heads_q);
    cr_expect_eq(fast, brute,
                 "Nq=%zu Nk=%zu Hq=%zu causal=%d window=(%lld,%lld) dilation=%lld globals=%zu "
                 "layout=%s: mask_count_pairs %llu, brute force %llu",
                 d->len_q, d->len_k, d->heads_q, d->causal, (long long)d->window_left,
                 (long long)d->window_right, (long long)d->dilation, d->num_global_tokens,
                 !d->block_layout           ? "none"
                 : d->block_layout_per_head ? "per-head"
                                            : "shared",
                 (unsigned long long)fast, (unsigned long long)brute);
    mask_release(&m);
}

/* One pattern of the sweep below: Hq=2, B=3, block size 2x3 when a layout is used. */
typedef struct pattern_case {
    size_t len_q, len_k;
    int causal;
    int64_t left, right, dilation;
    int globals;     /* use the global tokens {7, 0, 3, 0} that fall inside [0, Nk) */
    int layout_mode; /* 0: none, 1: shared, 2: per head */
} pattern_case;

static void expect_case_count(const pattern_case *pc, const uint8_t *layout) {
    static const int64_t all_globals[] = {7, 0, 3, 0}; /* unsorted, with a repeat */
    int64_t globals[COUNT_OF(all_globals)];
    size_t num_globals = 0;
    for (size_t x = 0; pc->globals && x < COUNT_OF(all_globals); x++)
        if (all_globals[x] < (int64_t)pc->len_k) globals[num_globals++] = all_globals[x];
    clattn_attention_desc d = pattern_desc(2, 1, pc->len_q, pc->len_k);
    d.batch = 3;
    d.causal = pc->causal;
    d.window_left = pc->left;
    d.window_right = pc->right;
    d.dilation = pc->dilation;
    d.global_tokens = num_globals ? globals : NULL;
    d.num_global_tokens = num_globals;
    d.block_layout = pc->layout_mode ? layout : NULL;
    d.block_q = 2;
    d.block_k = 3;
    d.block_layout_per_head = pc->layout_mode == 2;
    expect_pair_count(&d);
}

Test(reference, mask_count_pairs_matches_brute_force) {
    static const size_t lens[][2] = {{5, 11}, {11, 5}, {8, 8}, {1, 9}, {9, 1}, {7, 10}};
    static const int64_t lefts[] = {-1, 0, 2, 5}, rights[] = {-1, 0, 3}, dilations[] = {1, 2, 3};
    uint8_t layout[2 * 6 * 4]; /* up to [Hq=2][ceil(11/2)][ceil(11/3)] */
    for (size_t x = 0; x < sizeof layout; x++) layout[x] = (uint8_t)((x * 7 + 3) % 5 < 3);
    pattern_case pc;
    for (size_t n = 0; n < COUNT_OF(lens); n++)
        for (size_t c = 0; c < 2 * COUNT_OF(lefts) * COUNT_OF(rights) * COUNT_OF(dilations) * 2 * 3;
             c++) {
            size_t rest = c;
            pc.len_q = lens[n][0], pc.len_k = lens[n][1];
            pc.causal = (int)(rest % 2), rest /= 2;
            pc.left = lefts[rest % COUNT_OF(lefts)], rest /= COUNT_OF(lefts);
            pc.right = rights[rest % COUNT_OF(rights)], rest /= COUNT_OF(rights);
            pc.dilation = dilations[rest % COUNT_OF(dilations)], rest /= COUNT_OF(dilations);
            pc.globals = (int)(rest % 2), rest /= 2;
            pc.layout_mode = (int)rest;
            expect_case_count(&pc, layout);
        }
}

Test(reference, mask_count_pairs_matches_the_reference) {
    /* causal + window (3,1) + dilation 2 + globals {0, 5} + a per-head layout, Nq < Nk and
       Nq > Nk: the one-hot reference sees exactly the pairs mask_count_pairs counts */
    static const size_t lens[][2] = {{12, 17}, {17, 12}};
    const int64_t globals[2] = {5, 0};
    uint8_t layout[2 * 6 * 5];
    for (size_t x = 0; x < sizeof layout; x++) layout[x] = (uint8_t)(x % 4 != 1);
    for (size_t n = 0; n < 2; n++) {
        clattn_attention_desc d = pattern_desc(2, 1, lens[n][0], lens[n][1]);
        d.causal = 1;
        d.window_left = 3;
        d.window_right = 1;
        d.dilation = 2;
        d.global_tokens = globals;
        d.num_global_tokens = 2;
        d.block_layout = layout;
        d.block_q = 3;
        d.block_k = 4;
        d.block_layout_per_head = 1;
        expect_pair_count(&d);
        size_t nq = d.len_q, nk = d.len_k;
        float *zero = calloc(2 * (nq + nk), sizeof *zero), *v = calloc(nk * nk, sizeof *v);
        double *o = malloc(2 * nq * nk * sizeof *o);
        cr_assert(zero && v && o);
        for (size_t j = 0; j < nk; j++) v[j * nk + j] = 1.0f;
        run_reference(&d, zero, zero, v, NULL, o, NULL);
        uint64_t seen = 0;
        for (size_t x = 0; x < 2 * nq * nk; x++) seen += o[x] != 0.0;
        mask_spec m;
        cr_assert_eq(mask_from_desc(&d, &m), CLATTN_SUCCESS);
        cr_expect_eq(seen, mask_count_pairs(&m, 1, 2), "Nq=%zu Nk=%zu", nq, nk);
        mask_release(&m);
        free(zero), free(v), free(o);
    }
}

Test(reference, huge_window_means_unbounded) {
    /* a window side larger than any distance behaves as -1 (and must not overflow p -/+ it):
       Nq=4, Nk=2, window (INT64_MAX, INT64_MAX): every query sees both keys */
    clattn_attention_desc d = pattern_desc(1, 1, 4, 2);
    d.window_left = INT64_MAX;
    d.window_right = INT64_MAX;
    const char *rows[] = {"xx", "xx", "xx", "xx"};
    expect_keys(&d, NULL, rows);
    expect_pair_count(&d);
}

/* The contract's tolerances, one table that the tests and clattn check both read: a call takes
 * the loosest of its storage types. */
Test(reference, tolerances_follow_the_loosest_storage_type) {
    double atol = 0, rtol = 0, lse = 0;
    cr_assert_eq(clattn_tolerance(CLATTN_F32, CLATTN_F32, &atol, &rtol, &lse), CLATTN_SUCCESS);
    cr_expect(atol == 2e-5 && rtol == 2e-4 && lse == 1e-4, "f32: %g %g %g", atol, rtol, lse);
    cr_assert_eq(clattn_tolerance(CLATTN_F32, CLATTN_F16, &atol, &rtol, NULL), CLATTN_SUCCESS);
    cr_expect(atol == 2e-3 && rtol == 4e-3, "f32 in, f16 out: %g %g", atol, rtol);
    cr_assert_eq(clattn_tolerance(CLATTN_BF16, CLATTN_F16, &atol, &rtol, NULL), CLATTN_SUCCESS);
    cr_expect(atol == 4e-3 && rtol == 1e-2, "bf16 in, f16 out: %g %g", atol, rtol);
    cr_assert_eq(clattn_tolerance(CLATTN_Q8_0, CLATTN_F32, &atol, &rtol, NULL), CLATTN_SUCCESS);
    cr_expect(atol == 2e-3 && rtol == 4e-3, "q8_0 K/V: float16's: %g %g", atol, rtol);
    cr_expect_eq(clattn_tolerance((clattn_dtype)77, CLATTN_F32, &atol, NULL, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT);
}
