/*
 * Head dims past the fused tiles' 256, up to DeepSeek's MLA (Dqk 576, Dv 512), on the fused
 * path: the split, lanes and flash variants serve them (rowwise refuses them by name, and auto
 * finds split, lanes or flash), with float32, float16 and bfloat16 storage, with masks and the
 * score modifiers, and (split) with q8_0 and q4_0 K/V, against the reference on every device.
 */
#include <criterion/criterion.h>

#include "util.h"

#include <stdlib.h>
#include <string.h>

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

Test(wide, head_dims_576_512_on_the_fused_path_match_the_reference) {
    attn_case cases[4];
    size_t n = 0;
    attn_case *c = &cases[n++]; /* decode, MQA */
    case_init(c, 1, 8, 1, 1, 130, 576, 512);
    c = &cases[n++]; /* prefill, causal, float16 */
    case_init(c, 1, 2, 1, 33, 47, 576, 512);
    c->causal = 1, c->dtype = c->out_dtype = CLATTN_F16;
    c = &cases[n++]; /* bfloat16, a window, the modifiers */
    case_init(c, 2, 2, 2, 9, 40, 320, 288);
    c->dtype = CLATTN_BF16, c->left = 10, c->right = 0, c->softcap = 4.0f, c->alibi = 1;
    c->sinks = 1;
    c = &cases[n++]; /* a bias */
    case_init(c, 1, 4, 2, 17, 23, 576, 512);
    c->bias = BIAS_FULL;
    cr_expect_eq(check_cases(cases, n, CLATTN_PATH_FUSED, CLATTN_VARIANT_SPLIT), 0,
                 "split: failing cases are listed above");
    cr_expect_eq(check_cases(cases, n, CLATTN_PATH_AUTO, CLATTN_VARIANT_AUTO), 0,
                 "auto: failing cases are listed above");
}

Test(wide, rowwise_refuses_them_by_name) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, 4, 4, 576, 512);
    d.variant = CLATTN_VARIANT_ROWWISE;
    char message[256];
    clattn_attention_extents ext;
    cr_assert_eq(clattn_attention_desc_check(&d, &ext, message, sizeof message), CLATTN_SUCCESS);
    float *buf = calloc(4 * 576, sizeof *buf), *o = calloc(4 * 512, sizeof *o);
    cr_expect_eq(clattn_attention_host(ctxs[0], &d, buf, buf, buf, o, NULL), CLATTN_ERR_UNSUPPORTED,
                 "rowwise served Dqk 576");
    cr_expect(strstr(clattn_context_last_error(ctxs[0]), "head dims") != NULL, "%s",
              clattn_context_last_error(ctxs[0]));
    free(buf), free(o);
}

/* Head dims past 256 (DeepSeek's MLA is 576/512), up to 6 cases into cases: masks, GQA, 16-bit
 * storage, strided layouts, globals, NaN in V and modifiers. @return how many. */
static size_t tiled_cases(attn_case cases[6]) {
    case_init(&cases[0], 1, 4, 1, 70, 93, 576, 512);
    cases[0].causal = 1;
    case_init(&cases[1], 1, 2, 2, 45, 61, 320, 64);
    cases[1].left = 8, cases[1].right = 3, cases[1].layout = CLATTN_LAYOUT_BHSD;
    case_init(&cases[2], 2, 2, 1, 33, 40, 64, 300);
    cases[2].dtype = CLATTN_F16, cases[2].out_dtype = CLATTN_F16;
    case_init(&cases[3], 1, 2, 1, 50, 80, 576, 512);
    cases[3].dtype = CLATTN_BF16, cases[3].dilation = 2, cases[3].left = cases[3].right = 12;
    cases[3].bad_value = 1; /* NaN in a V row: only the rows that see its key are NaN */
    case_init(&cases[4], 1, 2, 2, 60, 60, 448, 448);
    cases[4].num_globals = 2, cases[4].globals[0] = 3, cases[4].globals[1] = 41;
    cases[4].left = cases[4].right = 5, cases[4].offset = 7;
    case_init(&cases[5], 1, 2, 1, 40, 70, 576, 512);
    cases[5].causal = 1, cases[5].softcap = 20.0f, cases[5].alibi = 1, cases[5].sinks = 1;
    cases[5].bias = BIAS_BROADCAST;
    for (size_t i = 0; i < 6; i++) cases[i].seed = 60 + i;
    return 6;
}

/* Runs the cases on ctx through `variant`: each matches the reference there, or is refused
 * where the variant does not serve the device. */
static void expect_served(clattn_context *ctx, clattn_variant variant, const attn_case *cases,
                          size_t count) {
    clattn_variant_info vi;
    clattn_variant_info_init(&vi);
    cr_assert_eq(clattn_variant_describe(ctx, variant, &vi), CLATTN_SUCCESS);
    for (size_t i = 0; i < count; i++) {
        case_result r;
        case_run(ctx, &cases[i], CLATTN_PATH_FUSED, variant, &r);
        if (!vi.supported) {
            cr_expect_eq(r.status, CLATTN_ERR_UNSUPPORTED, "case %zu: %s", i, r.message);
            continue;
        }
        cr_expect(r.status == CLATTN_SUCCESS && r.mismatches == 0,
                  "%s, case %zu (Dqk=%zu Dv=%zu): %s (%zu of %zu values off)",
                  clattn_variant_name(variant), i, cases[i].dqk, cases[i].dv, r.message,
                  r.mismatches, r.checked);
        cr_expect_eq(r.stats.variant, variant);
    }
}

/* The lanes variant holds a tile's rows in private memory. */
Test(wide, lanes_serves_them) {
    attn_case cases[6];
    const size_t count = tiled_cases(cases);
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs);
    for (size_t dev = 0; dev < devices; dev++) {
        expect_served(ctxs[dev], CLATTN_VARIANT_LANES, cases, count);
        /* auto, in the table's order (verdicts aside): split for a few query rows a head
           (decoding), lanes (or flash) from 12 on where it serves the device */
        cr_assert_eq(clattn_context_set_verify(ctxs[dev], CLATTN_VERIFY_TRUST, 0), CLATTN_SUCCESS);
        attn_case few = cases[0], many = cases[0];
        few.nq = 4, many.nq = 12;
        const attn_case *calls[] = {&few, &many};
        const clattn_variant wanted[] = {auto_row_for_wide(ctxs[dev], few.nq),
                                         auto_row_for_wide(ctxs[dev], many.nq)};
        for (size_t i = 0; i < COUNT(calls); i++) {
            case_result r;
            case_run(ctxs[dev], calls[i], CLATTN_PATH_AUTO, CLATTN_VARIANT_AUTO, &r);
            cr_expect(r.status == CLATTN_SUCCESS && r.mismatches == 0, "auto, Nq=%zu: %s",
                      calls[i]->nq, r.message);
            cr_expect_eq(r.stats.variant, wanted[i], "auto, Nq=%zu: ran %s (%s)", calls[i]->nq,
                         clattn_variant_name(r.stats.variant), r.stats.fallback);
        }
        cr_assert_eq(clattn_context_set_verify(ctxs[dev], CLATTN_VERIFY_FROM_ENV, 0),
                     CLATTN_SUCCESS);
    }
}

/* The flash variant streams the head dimension through local memory in pieces of 64 columns:
 * the same cases on every device, and on a device of 16 KiB of local memory, where the tuned
 * tiles shrink until their pieces fit (rusticl's and oclgrind's 32 KiB hold them as tuned). */
Test(wide, flash_serves_them_in_pieces) {
    attn_case cases[6];
    const size_t count = tiled_cases(cases);
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs);
    for (size_t dev = 0; dev < devices; dev++)
        expect_served(ctxs[dev], CLATTN_VARIANT_FLASH, cases, count);
    clattn_context *small = small_device(16384, 0);
    case_result r;
    case_run(small, &cases[0], CLATTN_PATH_FUSED, CLATTN_VARIANT_FLASH, &r);
    cr_expect(r.status == CLATTN_SUCCESS && r.mismatches == 0, "16 KiB: %s", r.message);
    cr_expect(strstr(r.stats.kernel, "dc64") != NULL, "not in pieces: %s", r.stats.kernel);
    /* Q [block_m][64] float32 and K, V [block_n][64] each: within 16 KiB */
    cr_expect_leq((r.stats.block_m + 2 * r.stats.block_n) * 64 * 4, 16384, "%s", r.stats.kernel);
    clattn_context_destroy(small);
}

/* Scores that overflow float32 on the way (scale 3e38) are summed again key by key, and only
 * for slots that hold a key: a tile's empty slots past the last key (Nk = 40) and past the
 * global keys read nothing (an empty global slot read past the key list and crashed). flash at
 * 576/512 in pieces and at 64 whole, with and without global tokens, against the reference. */
static void check_overflowing_scores(clattn_context *ctx, size_t d, int globals) {
    enum { NQ = 8, NK = 40 };
    const size_t dv = d > 512 ? 512 : d;
    clattn_attention_desc desc;
    ASSERT_OK(ctx, clattn_attention_desc_init(&desc, CLATTN_LAYOUT_BSHD, 1, 1, 1, NQ, NK, d, dv));
    desc.variant = CLATTN_VARIANT_FLASH;
    desc.path = CLATTN_PATH_FUSED;
    desc.scale = 3e38f;
    int64_t g[3] = {1, 5, 9};
    if (globals) desc.global_tokens = g, desc.num_global_tokens = 3, desc.window_left = 4;
    desc.causal = 1;
    float *q = malloc(NQ * d * 4), *k = malloc(NK * d * 4), *v = malloc(NK * dv * 4);
    float *o = malloc(NQ * dv * 4), *ref = malloc(NQ * dv * 4);
    double *ref64 = malloc(NQ * dv * sizeof *ref64), atol, rtol;
    for (size_t i = 0; i < NQ * d; i++) q[i] = i % 2 ? -2.0f : 2.0f;
    for (size_t i = 0; i < NK * d; i++) k[i] = 1.0f;
    for (size_t i = 0; i < NK * dv; i++) v[i] = (float)(i % 7);
    ASSERT_OK(ctx, clattn_attention_host(ctx, &desc, q, k, v, o, NULL));
    desc.path = CLATTN_PATH_REFERENCE, desc.variant = CLATTN_VARIANT_AUTO;
    ASSERT_OK(ctx, clattn_attention_host(ctx, &desc, q, k, v, ref, NULL));
    clattn_tolerance(CLATTN_F32, CLATTN_F32, &atol, &rtol, NULL);
    for (size_t i = 0; i < NQ * dv; i++) ref64[i] = ref[i];
    cr_expect_eq(compare_outputs(globals ? "scale 3e38, globals" : "scale 3e38", o, ref64, NQ * dv,
                                 atol, rtol),
                 0, "D=%zu", d);
    free(q), free(k), free(v), free(o), free(ref), free(ref64);
}

Test(wide, flash_rescores_only_the_slots_that_hold_keys) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    static const size_t dims[] = {576, 64};
    for (size_t i = 0; i < COUNT(dims); i++)
        for (int globals = 0; globals < 2; globals++)
            check_overflowing_scores(ctxs[0], dims[i], globals);
}

/* q8_0 and q4_0 K/V at 576/512: DeepSeek with a quantised cache. */
static void check_quantised(clattn_context *ctx, clattn_dtype kv) {
    enum { HQ = 4, NQ = 2, NK = 64, DQK = 576, DV = 512 };
    clattn_attention_desc d;
    ASSERT_OK(ctx, clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, HQ, 1, NQ, NK, DQK, DV));
    d.kv_q8_0 = kv == CLATTN_Q8_0, d.kv_q4_0 = kv == CLATTN_Q4_0, d.causal = 1;
    float *q = malloc(HQ * NQ * DQK * 4), *k = malloc(NK * DQK * 4), *v = malloc(NK * DV * 4);
    uint8_t *kq = malloc(NK * DQK / 32 * 34), *vq = malloc(NK * DV / 32 * 34); /* q8_0 the larger */
    fill_uniform(q, HQ * NQ * DQK, 1), fill_uniform(k, NK * DQK, 2), fill_uniform(v, NK * DV, 3);
    cr_assert_eq(clattn_convert(CLATTN_F32, k, kv, kq, NK * DQK), CLATTN_SUCCESS);
    cr_assert_eq(clattn_convert(CLATTN_F32, v, kv, vq, NK * DV), CLATTN_SUCCESS);
    float *o = malloc(HQ * NQ * DV * 4), *ref = malloc(HQ * NQ * DV * 4);
    double *ref64 = malloc(HQ * NQ * DV * sizeof *ref64), atol, rtol;
    ASSERT_OK(ctx, clattn_attention_host(ctx, &d, q, kq, vq, o, NULL));
    d.path = CLATTN_PATH_REFERENCE;
    ASSERT_OK(ctx, clattn_attention_host(ctx, &d, q, kq, vq, ref, NULL));
    clattn_tolerance(kv, CLATTN_F32, &atol, &rtol, NULL);
    for (size_t i = 0; i < HQ * NQ * DV; i++) ref64[i] = ref[i];
    cr_expect_eq(compare_outputs(kv == CLATTN_Q8_0 ? "q8_0 576/512" : "q4_0 576/512", o, ref64,
                                 HQ * NQ * DV, atol, rtol),
                 0);
    free(q), free(k), free(v), free(kq), free(vq), free(o), free(ref), free(ref64);
}

Test(wide, quantised_k_v_at_576_512_match_the_reference) {
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs);
    for (size_t dev = 0; dev < devices; dev++) {
        check_quantised(ctxs[dev], CLATTN_Q8_0);
        check_quantised(ctxs[dev], CLATTN_Q4_0);
    }
}
