/*
 * q4_0 K/V storage (ggml's block of 32: a float16 scale d and 32 4-bit codes q, value (q - 8) d)
 * beside q8_0 (test_q8.c). Attention over q4_0 K and V (a plain call and a KV cache, contiguous
 * and paged) matches the reference computed from the dequantised values within the q4_0 row of
 * clattn_tolerance on every device, auto picking the split variant; the variants that stage
 * float K/V refuse it by name and write nothing; a cache's device quantiser writes the bytes
 * clattn_convert writes (which are ggml's: tests/unit/test_quant.c).
 */
#include <criterion/criterion.h>

#include "util.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define COUNT(a)         (sizeof(a) / sizeof((a)[0]))
#define q4_bytes(values) ((values) / 32 * 18)

static void expect_close(const char *what, const float *o, const float *ref, size_t n) {
    double *ref64 = malloc(n * sizeof *ref64), atol, rtol;
    clattn_tolerance(CLATTN_Q4_0, CLATTN_F32, &atol, &rtol, NULL);
    for (size_t i = 0; i < n; i++) ref64[i] = ref[i];
    cr_expect_eq(compare_outputs(what, o, ref64, n, atol, rtol), 0, "%s", what);
    free(ref64);
}

/* B=2, Hq 4, Hkv 2, Nq, Nk 77, D 64: auto (split) against the reference. */
static void check_call(clattn_context *ctx, size_t nq_rows, int causal) {
    enum { B = 2, HQ = 4, HKV = 2, NK = 77, D = 64 };
    clattn_attention_desc d;
    ASSERT_OK(ctx,
              clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, B, HQ, HKV, nq_rows, NK, D, D));
    d.kv_q4_0 = 1, d.causal = causal;
    size_t nq = B * HQ * nq_rows, nk = B * HKV * NK;
    float *q = malloc(nq * D * sizeof *q), *o = malloc(nq * D * 4), *ref = malloc(nq * D * 4);
    fill_uniform(q, nq * D, 1);
    uint8_t *k = random_quantised(CLATTN_Q4_0, nk * D, 2.0f, 2),
            *v = random_quantised(CLATTN_Q4_0, nk * D, 1.0f, 3);
    ASSERT_OK(ctx, clattn_attention_host(ctx, &d, q, k, v, o, NULL));
    clattn_stats s;
    clattn_stats_init(&s);
    clattn_context_last_stats(ctx, &s);
    cr_expect_eq(s.variant, CLATTN_VARIANT_SPLIT, "auto ran %s", clattn_variant_name(s.variant));
    d.path = CLATTN_PATH_REFERENCE;
    ASSERT_OK(ctx, clattn_attention_host(ctx, &d, q, k, v, ref, NULL));
    expect_close("q4_0 call", o, ref, nq * D);
    free(q), free(o), free(ref), free(k), free(v);
}

Test(q4, attention_matches_the_reference_of_the_dequantised_values) {
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs);
    for (size_t dev = 0; dev < devices; dev++)
        check_call(ctxs[dev], 1, 0), check_call(ctxs[dev], 9, 1);
}

Test(q4, variants_without_q4_0_refuse_it_by_name) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    static const clattn_variant refusing[] = {CLATTN_VARIANT_LANES, CLATTN_VARIANT_FLASH};
    float q[4 * 64] = {0}, o[4 * 64];
    uint8_t kv[q4_bytes(4 * 64)] = {0};
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, 4, 4, 64, 64);
    d.kv_q4_0 = 1;
    for (size_t i = 0; i <= COUNT(refusing); i++) {
        if (i < COUNT(refusing))
            d.variant = refusing[i];
        else
            d.variant = CLATTN_VARIANT_AUTO, d.path = CLATTN_PATH_GEMM;
        memset(o, 0x5a, sizeof o);
        cr_expect_eq(clattn_attention_host(ctxs[0], &d, q, kv, kv, o, NULL),
                     CLATTN_ERR_UNSUPPORTED);
        const char *msg = clattn_context_last_error(ctxs[0]);
        cr_expect(strstr(msg, "not q4_0") != NULL, "message: %s", msg);
        for (size_t x = 0; x < sizeof o; x++) cr_assert_eq(((uint8_t *)o)[x], 0x5a, "O written");
    }
    d.path = CLATTN_PATH_AUTO, d.kv_q8_0 = 1;
    cr_expect_eq(clattn_attention_host(ctxs[0], &d, q, kv, kv, o, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT, "kv_q8_0 and kv_q4_0 together");
}

/* A q4_0 cache (paged and contiguous) appended from float32 on the device: its bytes are
 * clattn_convert's, the paged call equals the contiguous one bit for bit, both match the
 * reference of the cache. */
static void check_cache(clattn_context *ctx) {
    enum { B = 2, HQ = 4, HKV = 2, D = 64, CAP = 64, PAGE = 16, NEW = 40, NQ = 3 };
    static float k[B * NEW * HKV * D], v[B * NEW * HKV * D];
    static uint8_t want[q4_bytes(B * NEW * HKV * D)], got[q4_bytes(B * CAP * HKV * D)];
    fill_uniform(k, COUNT(k), 11);
    fill_uniform(v, COUNT(v), 12);
    for (size_t i = 0; i < COUNT(k); i++) k[i] = ldexpf(k[i], (int)(i / 32 % 40) - 20);
    clattn_kv_cache *caches[2];
    for (int paged = 0; paged < 2; paged++) {
        clattn_kv_cache_desc cd;
        clattn_kv_cache_desc_init(&cd, B, HKV, D, D, CAP);
        cd.dtype = CLATTN_Q4_0;
        if (paged) cd.page_size = PAGE, cd.num_pages = 8;
        ASSERT_OK(ctx, clattn_kv_cache_create(ctx, &cd, &caches[paged]));
        int32_t table[8] = {7, 6, 5, 4, 3, 2, 1, 0};
        if (paged) ASSERT_OK(ctx, clattn_kv_cache_set_block_table(caches[paged], table));
        ASSERT_OK(ctx, clattn_kv_cache_append_host(caches[paged], k, v, NEW, NULL));
    }
    ASSERT_OK(ctx, clattn_kv_cache_read_host(caches[0], got, NULL));
    cr_assert_eq(clattn_convert(CLATTN_F32, k, CLATTN_Q4_0, want, COUNT(k)), CLATTN_SUCCESS);
    size_t row = q4_bytes(NEW * HKV * D);
    cr_expect(memcmp(got, want, row) == 0 &&
                  memcmp(got + q4_bytes(CAP * HKV * D), want + row, row) == 0,
              "the device's q4_0 blocks differ from clattn_convert's");
    float q[B * NQ * HQ * D], o[2][B * NQ * HQ * D], ref[B * NQ * HQ * D];
    fill_uniform(q, COUNT(q), 13);
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, B, HQ, HKV, NQ, 1, D, D);
    d.causal = 1;
    for (int i = 0; i < 2; i++)
        ASSERT_OK(ctx, clattn_kv_cache_attention_host(caches[i], &d, q, NULL, o[i], NULL));
    ASSERT_OK(ctx, clattn_kv_cache_reference(caches[1], &d, q, NULL, ref, NULL));
    cr_expect(memcmp(o[0], o[1], sizeof o[0]) == 0, "paged q4_0 differs from contiguous");
    expect_close("q4_0 cache", o[1], ref, COUNT(ref));
    for (int i = 0; i < 2; i++) clattn_kv_cache_destroy(caches[i]);
}

Test(q4, kv_cache_quantises_as_convert_and_attention_matches_the_reference) {
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs);
    for (size_t dev = 0; dev < devices; dev++) check_cache(ctxs[dev]);
}
