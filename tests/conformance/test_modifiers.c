/*
 * Soft-capping, ALiBi and attention sinks (docs/semantics.md section 8) on every fused variant,
 * the gemm path and auto, on every device, against the reference, alone and composed with
 * causal masks, windows, block layouts, a bias, GQA, 16-bit storage and empty rows. Also:
 * the standard slopes are BLOOM's, an empty row with a sink has O = 0 and LSE = sink, and
 * values the contract refuses are refused by name.
 */
#include <criterion/criterion.h>

#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

Test(modifiers, each_alone_and_composed_matches_the_reference) {
    attn_case cases[10];
    size_t n = 0;
    attn_case *c = &cases[n++]; /* soft-capping, with a scale that pushes scores past the cap */
    case_init(c, 2, 4, 2, 33, 47, 64, 64);
    c->softcap = 2.0f, c->scale = 1.0f;
    c = &cases[n++]; /* soft-capping of finite scores near 1e30, far past where tanh is 1 */
    case_init(c, 1, 2, 2, 40, 64, 32, 32);
    c->softcap = 4.0f, c->scale = 1e30f;
    c = &cases[n++]; /* ALiBi, causal, GQA */
    case_init(c, 1, 8, 2, 40, 40, 32, 32);
    c->alibi = 1, c->causal = 1;
    c = &cases[n++]; /* sinks alone, decode-like */
    case_init(c, 2, 4, 4, 3, 77, 64, 32);
    c->sinks = 1;
    c = &cases[n++]; /* all three, with a bias and a window, BHSD */
    case_init(c, 2, 4, 2, 29, 45, 48, 40);
    c->softcap = 1.5f, c->alibi = 2, c->sinks = 1, c->bias = BIAS_FULL, c->left = 9, c->right = 3;
    c->layout = CLATTN_LAYOUT_BHSD;
    c = &cases[n++]; /* causal with more queries than keys: empty rows, with sinks */
    case_init(c, 1, 2, 1, 20, 12, 32, 32);
    c->causal = 1, c->sinks = 1, c->alibi = 1;
    c = &cases[n++]; /* block-sparse layout, dilated window, global tokens, f16 */
    case_init(c, 1, 4, 4, 64, 64, 64, 64);
    c->block_layout = LAYOUT_PER_HEAD, c->bq = c->bk = 16, c->softcap = 5.0f, c->alibi = 1;
    c->sinks = 1, c->dtype = c->out_dtype = CLATTN_F16;
    c = &cases[n++];
    case_init(c, 1, 2, 2, 50, 70, 32, 32);
    c->left = 20, c->right = 0, c->dilation = 2, c->globals[0] = 3, c->num_globals = 1;
    c->softcap = 3.0f, c->alibi = 2, c->sinks = 1, c->dtype = CLATTN_BF16;
    expect_every_path_passes(cases, n);
}

Test(modifiers, standard_alibi_slopes_are_bloom_s) {
    float s[12];
    cr_assert_eq(clattn_pattern_alibi_slopes(8, s), CLATTN_SUCCESS);
    for (int h = 0; h < 8; h++)
        cr_expect_eq(s[h], ldexpf(1.0f, -(h + 1)), "H=8 head %d: %g", h, (double)s[h]);
    cr_assert_eq(clattn_pattern_alibi_slopes(12, s), CLATTN_SUCCESS); /* 8 + 4 of the 16-ladder */
    for (int h = 0; h < 4; h++)
        cr_expect_eq(s[8 + h], (float)exp2(-0.5 * (2 * h + 1)), "H=12 head %d: %g", 8 + h,
                     (double)s[8 + h]);
    cr_expect_eq(clattn_pattern_alibi_slopes(0, s), CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect_eq(clattn_pattern_alibi_slopes(4, NULL), CLATTN_ERR_INVALID_ARGUMENT);
}

/* A row whose every key is masked by the bias: O = 0 and LSE = the head's sink, on every variant
 * (auto on each path), where without a sink LSE is -inf. */
Test(modifiers, an_empty_row_with_a_sink_has_zero_output_and_the_sink_as_lse) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    enum { NQ = 2, NK = 16, D = 32 };
    float q[NQ * D], k[NK * D], v[NK * D], o[NQ * D], lse[NQ], bias[NQ * NK], sinks[1] = {0.75f};
    fill_uniform(q, COUNT(q), 1), fill_uniform(k, COUNT(k), 2), fill_uniform(v, COUNT(v), 3);
    for (size_t j = 0; j < COUNT(bias); j++) bias[j] = j < NK ? -INFINITY : 0.0f; /* row 0 empty */
    static const clattn_path paths[] = {CLATTN_PATH_FUSED, CLATTN_PATH_GEMM, CLATTN_PATH_REFERENCE};
    for (size_t p = 0; p < COUNT(paths); p++) {
        clattn_attention_desc d;
        clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, NQ, NK, D, D);
        d.bias_host = bias, d.bias_strides = (clattn_tensor){0, 0, 0, NK};
        d.sinks = sinks, d.path = paths[p];
        ASSERT_OK(ctxs[0], clattn_attention_host(ctxs[0], &d, q, k, v, o, lse));
        for (int x = 0; x < D; x++)
            cr_expect_eq(o[x], 0.0f, "path %d: O[0][%d] = %g", d.path, x, o[x]);
        cr_expect_eq(lse[0], 0.75f, "path %d: the empty row's LSE is %g", d.path, lse[0]);
        cr_expect(lse[1] > 0.75f && isfinite(lse[1]), "path %d: row 1's LSE %g", d.path, lse[1]);
    }
}

static void expect_refused(clattn_attention_desc *d, const char *needle) {
    char message[512];
    clattn_attention_extents ext;
    cr_expect_eq(clattn_attention_desc_check(d, &ext, message, sizeof message),
                 CLATTN_ERR_INVALID_ARGUMENT, "%s accepted", needle);
    cr_expect(strstr(message, needle) != NULL, "message \"%s\" lacks \"%s\"", message, needle);
}

Test(modifiers, values_outside_the_contract_are_refused_by_name) {
    float bad[2] = {NAN, 1.0f}, fine[2] = {0.5f, 0.25f};
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 2, 2, 4, 4, 32, 32);
    d.softcap = -1.0f;
    expect_refused(&d, "softcap");
    d.softcap = 0.0f, d.alibi_slopes = bad;
    expect_refused(&d, "alibi_slopes[0]");
    d.alibi_slopes = NULL, d.sinks = bad;
    expect_refused(&d, "sinks[0]");
    d.sinks = fine, d.full_len_k = 8;
    expect_refused(&d, "shard");
}
