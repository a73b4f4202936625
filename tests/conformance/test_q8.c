/*
 * q8_0 K/V storage: blocks of 32 values, a float16 scale d and 32 int8 q (value d * q).
 * clattn_convert quantises as ggml does (bit for bit: tests/unit/test_quant.c), so within half a
 * step and the float16 rounding of the scale; attention over q8_0 K and V (a plain call or
 * a KV cache, contiguous or paged) matches the reference computed from the dequantised values
 * within |o - ref| <= 2e-3 + 4e-3 |ref| on every device; the paths that lack q8_0 say so and
 * write nothing. A block whose float16 scale would overflow is refused, naming it, by
 * clattn_convert and by KV cache appends (host arrays and device buffers), writing nothing.
 */
#include <criterion/criterion.h>

#include "util.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

#define TOL_Q8_ATOL 2e-3
#define Q8_ERROR    (0.5f + 127.0f / 2048.0f) /* steps a value may move: see expect_quantised */
#define TOL_Q8_RTOL 4e-3

enum { BLOCK = 32, BLOCK_BYTES = 34 };

/* Bytes of `values` q8_0 values (whole blocks). */
#define q8_bytes(values) ((values) / BLOCK * BLOCK_BYTES)

static float block_scale(const uint8_t *block) {
    uint16_t bits = (uint16_t)(block[0] | block[1] << 8);
    float scale;
    clattn_convert(CLATTN_F16, &bits, CLATTN_F32, &scale, 1);
    return scale;
}

/* Each value of x within half a step of its dequantised block, d being max|x| / 127 to float16
 * precision: q = round(x / d) is taken with the float32 d (ggml's rule), and the value is q
 * times d rounded to float16, up to 127 * d / 2048 further. */
static void expect_quantised(const float *x, const uint8_t *blocks, size_t n, const char *what) {
    float *back = malloc(n * sizeof *back);
    cr_assert_eq(clattn_convert(CLATTN_Q8_0, blocks, CLATTN_F32, back, n), CLATTN_SUCCESS);
    for (size_t b = 0; b < n / BLOCK; b++) {
        float max = 0.0f, d = block_scale(blocks + b * BLOCK_BYTES);
        for (size_t i = 0; i < BLOCK; i++) max = fmaxf(max, fabsf(x[b * BLOCK + i]));
        cr_expect(fabsf(d - max / 127.0f) <= max / 127.0f / 1024.0f, "%s block %zu: d %g, max %g",
                  what, b, d, max);
        for (size_t i = 0; i < BLOCK; i++)
            cr_expect(fabsf(back[b * BLOCK + i] - x[b * BLOCK + i]) <= Q8_ERROR * d * 1.0001f,
                      "%s value %zu: %g became %g (d %g)", what, b * BLOCK + i, x[b * BLOCK + i],
                      back[b * BLOCK + i], d);
    }
    free(back);
}

Test(q8, convert_quantises_within_half_a_step) {
    enum { N = 8 * BLOCK };
    float x[N];
    uint8_t q[q8_bytes(N)];
    fill_uniform(x, N, 7);
    for (size_t i = 0; i < N; i++) x[i] *= (float)(1 << (i / BLOCK * 3)) / 64.0f; /* 2^-6..2^15 */
    cr_assert_eq(clattn_convert(CLATTN_F32, x, CLATTN_Q8_0, q, N), CLATTN_SUCCESS);
    expect_quantised(x, q, N, "f32");
    for (size_t i = 0; i < BLOCK; i++) x[i] = 0.0f; /* a zero block */
    x[BLOCK] = NAN;                                 /* NaN stores 0 */
    cr_assert_eq(clattn_convert(CLATTN_F32, x, CLATTN_Q8_0, q, N), CLATTN_SUCCESS);
    float back[N];
    clattn_convert(CLATTN_Q8_0, q, CLATTN_F32, back, N);
    for (size_t i = 0; i < BLOCK; i++) cr_expect_eq(back[i], 0.0f, "zero block: %g", back[i]);
    cr_expect_eq(back[BLOCK], 0.0f, "NaN became %g", back[BLOCK]);
    cr_expect_eq(clattn_convert(CLATTN_F32, x, CLATTN_Q8_0, q, BLOCK + 1),
                 CLATTN_ERR_INVALID_ARGUMENT, "33 values are not whole blocks");
}

/* ---------------------------------------------------------------- attention */

typedef struct q8_case {
    const char *name;
    clattn_dtype q_dtype;
    clattn_layout layout;
    size_t hq, hkv, nq, nk, dqk, dv;
    int causal;
    int64_t window_left;
    int bias;
} q8_case;

/* The case's call on ctx with auto, against its reference path, both from the same q8_0 K/V. */
static void check_case(clattn_context *ctx, const q8_case *c) {
    enum { B = 2 };
    clattn_attention_desc d;
    ASSERT_OK(ctx, clattn_attention_desc_init(&d, c->layout, B, c->hq, c->hkv, c->nq, c->nk, c->dqk,
                                              c->dv));
    d.dtype = c->q_dtype, d.kv_q8_0 = 1, d.causal = c->causal;
    d.window_left = c->window_left, d.window_right = c->window_left >= 0 ? 0 : -1;
    size_t nq = B * c->hq * c->nq, nk = B * c->hkv * c->nk;
    float *qf = malloc(nq * c->dqk * sizeof *qf), *bias = NULL;
    void *q = malloc(nq * c->dqk * 4);
    fill_uniform(qf, nq * c->dqk, 1);
    clattn_convert(CLATTN_F32, qf, c->q_dtype, q, nq * c->dqk);
    uint8_t *k = random_quantised(CLATTN_Q8_0, nk * c->dqk, 2.0f, 2),
            *v = random_quantised(CLATTN_Q8_0, nk * c->dv, 1.0f, 3);
    if (c->bias) {
        bias = malloc(nq * c->nk * sizeof *bias);
        fill_uniform(bias, nq * c->nk, 4);
        d.bias_host = bias;
        d.bias_strides = (clattn_tensor){0, c->hq * c->nq * c->nk, c->nq * c->nk, c->nk};
    }
    float *o = malloc(nq * c->dv * sizeof *o), *ref = malloc(nq * c->dv * sizeof *ref);
    double *ref64 = malloc(nq * c->dv * sizeof *ref64);
    ASSERT_OK(ctx, clattn_attention_host(ctx, &d, q, k, v, o, NULL));
    clattn_stats s;
    clattn_stats_init(&s);
    clattn_context_last_stats(ctx, &s);
    cr_expect_eq(s.variant, CLATTN_VARIANT_SPLIT, "%s: auto ran %s", c->name,
                 clattn_variant_name(s.variant));
    d.path = CLATTN_PATH_REFERENCE;
    ASSERT_OK(ctx, clattn_attention_host(ctx, &d, q, k, v, ref, NULL));
    for (size_t i = 0; i < nq * c->dv; i++) ref64[i] = ref[i];
    cr_expect_eq(compare_outputs(c->name, o, ref64, nq * c->dv, TOL_Q8_ATOL, TOL_Q8_RTOL), 0, "%s",
                 c->name);
    free(qf), free(q), free(k), free(v), free(bias), free(o), free(ref), free(ref64);
}

Test(q8, attention_matches_the_reference_of_the_dequantised_values) {
    static const q8_case cases[] = {
        {"decode GQA", CLATTN_F32, CLATTN_LAYOUT_BSHD, 4, 2, 1, 77, 64, 64, 0, -1, 0},
        {"causal f16 Q", CLATTN_F16, CLATTN_LAYOUT_BHSD, 4, 1, 9, 50, 32, 64, 1, -1, 0},
        {"window bf16 Q", CLATTN_BF16, CLATTN_LAYOUT_BSHD, 2, 2, 3, 100, 96, 32, 1, 16, 0},
        {"prefill bias", CLATTN_F32, CLATTN_LAYOUT_BHSD, 2, 2, 40, 40, 32, 32, 0, -1, 1},
    };
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs);
    for (size_t dev = 0; dev < devices; dev++)
        for (size_t i = 0; i < COUNT(cases); i++) check_case(ctxs[dev], &cases[i]);
}

/* A refused call names the problem and leaves O as it was. */
static void expect_refused(clattn_context *ctx, const clattn_attention_desc *d, const void *k,
                           clattn_status want, const char *needle) {
    float q[64 * 4] = {0}, o[64 * 4];
    memset(o, 0x5a, sizeof o);
    uint8_t v[q8_bytes(64 * 4)] = {0};
    clattn_status got = clattn_attention_host(ctx, d, q, k, v, o, NULL);
    const char *msg = clattn_context_last_error(ctx);
    cr_expect_eq(got, want, "%s: %s", clattn_status_name(got), msg);
    cr_expect(strstr(msg, needle) != NULL, "message \"%s\" lacks \"%s\"", msg, needle);
    for (size_t i = 0; i < sizeof o; i++)
        cr_assert_eq(((unsigned char *)o)[i], 0x5a, "O byte %zu was written", i);
}

Test(q8, paths_and_shapes_without_q8_0_are_refused) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    uint8_t k[q8_bytes(64 * 4)] = {0};
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, 4, 4, 64, 64);
    d.kv_q8_0 = 1, d.path = CLATTN_PATH_GEMM;
    expect_refused(ctxs[0], &d, k, CLATTN_ERR_UNSUPPORTED, "not q8_0");
    d.path = CLATTN_PATH_AUTO, d.variant = CLATTN_VARIANT_LANES;
    expect_refused(ctxs[0], &d, k, CLATTN_ERR_UNSUPPORTED, "not q8_0");
    d.variant = CLATTN_VARIANT_FLASH;
    expect_refused(ctxs[0], &d, k, CLATTN_ERR_UNSUPPORTED, "not q8_0");
    d.variant = CLATTN_VARIANT_AUTO, d.dtype = CLATTN_Q8_0, d.kv_q8_0 = 0;
    expect_refused(ctxs[0], &d, k, CLATTN_ERR_INVALID_ARGUMENT, "K and V only");
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, 4, 4, 48, 64);
    d.kv_q8_0 = 1;
    expect_refused(ctxs[0], &d, k, CLATTN_ERR_INVALID_ARGUMENT, "multiples of 32");
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, 4, 4, 64, 64);
    d.kv_q8_0 = 1, d.k.offset = 16;
    expect_refused(ctxs[0], &d, k, CLATTN_ERR_INVALID_ARGUMENT, "multiples of 32");
}

/* ---------------------------------------------------------------- KV caches */

enum { B = 2, HQ = 4, HKV = 2, D = 64, CAP = 64, PAGE = 16, PAGES = 8, NEW = 40 };

static clattn_kv_cache *q8_cache(clattn_context *ctx, int paged) {
    clattn_kv_cache_desc cd;
    clattn_kv_cache_desc_init(&cd, B, HKV, D, D, CAP);
    cd.dtype = CLATTN_Q8_0;
    if (paged) cd.page_size = PAGE, cd.num_pages = PAGES;
    clattn_kv_cache *cache = NULL;
    ASSERT_OK(ctx, clattn_kv_cache_create(ctx, &cd, &cache));
    if (paged) { /* sequence b's page p is 7 - (2p + b): reversed, interleaved */
        int32_t table[B * (CAP / PAGE)];
        for (int b = 0; b < B; b++)
            for (int p = 0; p < CAP / PAGE; p++) table[b * (CAP / PAGE) + p] = 7 - (2 * p + b);
        ASSERT_OK(ctx, clattn_kv_cache_set_block_table(cache, table));
    }
    return cache;
}

/* Float32 rows appended (quantised on the device) then a call over the cache: the contiguous
 * cache's blocks hold the rows to within half a step (and the scale's rounding), the paged cache
 * gives the same output bit for bit, and both match the reference of the dequantised cache. */
static void check_cache(clattn_context *ctx) {
    static const int32_t new_len[B] = {NEW, 23};
    float *k = malloc(B * NEW * HKV * D * sizeof *k), *v = malloc(B * NEW * HKV * D * sizeof *v);
    fill_uniform(k, B * NEW * HKV * D, 11);
    fill_uniform(v, B * NEW * HKV * D, 12);
    clattn_kv_cache *caches[2] = {q8_cache(ctx, 0), q8_cache(ctx, 1)};
    for (int i = 0; i < 2; i++)
        ASSERT_OK(ctx, clattn_kv_cache_append_host(caches[i], k, v, NEW, new_len));
    uint8_t *stored = malloc(q8_bytes(B * CAP * HKV * D));
    ASSERT_OK(ctx, clattn_kv_cache_read_host(caches[0], stored, NULL));
    for (size_t b = 0; b < B; b++) /* [B][CAP][HKV][D] storage, [B][NEW][HKV][D] rows */
        expect_quantised(k + b * NEW * HKV * D, stored + q8_bytes(b * CAP * HKV * D),
                         (size_t)new_len[b] * HKV * D, "appended K");
    enum { NQ = 3 };
    float q[B * NQ * HQ * D], o[2][B * NQ * HQ * D], ref[B * NQ * HQ * D];
    double ref64[COUNT(ref)];
    fill_uniform(q, COUNT(q), 13);
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, B, HQ, HKV, NQ, 1, D, D);
    d.causal = 1;
    for (int i = 0; i < 2; i++)
        ASSERT_OK(ctx, clattn_kv_cache_attention_host(caches[i], &d, q, NULL, o[i], NULL));
    ASSERT_OK(ctx, clattn_kv_cache_reference(caches[1], &d, q, NULL, ref, NULL));
    cr_expect(memcmp(o[0], o[1], sizeof o[0]) == 0, "paged q8_0 differs from contiguous");
    for (size_t x = 0; x < COUNT(ref); x++) ref64[x] = ref[x];
    cr_expect_eq(compare_outputs("q8_0 cache", o[1], ref64, COUNT(ref), TOL_Q8_ATOL, TOL_Q8_RTOL),
                 0);
    for (int i = 0; i < 2; i++) clattn_kv_cache_destroy(caches[i]);
    free(k), free(v), free(stored);
}

Test(q8, kv_cache_appends_quantise_and_attention_matches_the_reference) {
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs);
    for (size_t dev = 0; dev < devices; dev++) check_cache(ctxs[dev]);
    clattn_kv_cache_desc cd;
    clattn_kv_cache_desc_init(&cd, B, HKV, 48, D, CAP);
    cd.dtype = CLATTN_Q8_0;
    clattn_kv_cache *cache = NULL;
    cr_expect_eq(clattn_kv_cache_create(ctxs[0], &cd, &cache), CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(ctxs[0]), "multiples of 32") != NULL, "%s",
              clattn_context_last_error(ctxs[0]));
    cr_expect_null(cache);
}

/* ---- a block whose float16 scale overflows (issue 29): max|x| / 127 rounds to infinity from
 * |x| = 8321040 up, and the whole block would dequantise to NaN. It is refused, naming the
 * block, and nothing is written; 8321039.5 (the float32 below) still fits. */

#define Q8_FIRST_OVERFLOW 8321040.0f

Test(q8, convert_refuses_a_block_whose_scale_overflows) {
    enum { N = 4 * BLOCK };
    float x[N];
    uint8_t q[q8_bytes(N)], untouched[q8_bytes(N)];
    fill_uniform(x, N, 29);
    x[2 * BLOCK + 5] = nextafterf(Q8_FIRST_OVERFLOW, 0.0f); /* block 2 at the largest that fits */
    cr_assert_eq(clattn_convert(CLATTN_F32, x, CLATTN_Q8_0, q, N), CLATTN_SUCCESS);
    float back[N];
    clattn_convert(CLATTN_Q8_0, q, CLATTN_F32, back, N);
    for (size_t i = 0; i < N; i++) cr_assert(isfinite(back[i]), "value %zu: %g", i, back[i]);
    x[2 * BLOCK + 5] = -1e7f; /* the kind of value, in block 2 */
    x[3 * BLOCK] = Q8_FIRST_OVERFLOW;
    memset(q, 0xab, sizeof q);
    memcpy(untouched, q, sizeof q);
    cr_expect_eq(clattn_convert(CLATTN_F32, x, CLATTN_Q8_0, q, N), CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect_eq(memcmp(q, untouched, sizeof q), 0, "a refused conversion wrote its output");
    size_t block = 0;
    cr_expect_eq(clattn_convert_check(CLATTN_F32, x, CLATTN_Q8_0, N, &block),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect_eq(block, 2, "the first block that overflows is 2, not %zu", block);
    uint16_t h[N]; /* float16 holds at most 65504: never too large; bfloat16 can be */
    clattn_convert(CLATTN_F32, x, CLATTN_BF16, h, N);
    cr_expect_eq(clattn_convert_check(CLATTN_BF16, h, CLATTN_Q8_0, N, &block),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect_eq(block, 2, "bfloat16: block %zu", block);
    cr_expect_eq(clattn_convert_check(CLATTN_F32, x, CLATTN_F16, N, &block), CLATTN_SUCCESS);
    cr_expect_eq(block, SIZE_MAX, "to float16 no block is refused");
}

/* Infinities and NaN have no say in a block's scale: the finite values keep theirs, NaN stores
 * 0 and an infinity +-127 steps, on the host and in a cache's append alike. */
Test(q8, infinities_do_not_set_the_scale) {
    float x[BLOCK], back[BLOCK];
    uint8_t q[BLOCK_BYTES];
    for (int i = 0; i < BLOCK; i++) x[i] = (float)(i - 16) / 16.0f; /* max |x| = 1 */
    x[3] = INFINITY, x[4] = -INFINITY, x[5] = NAN;
    cr_assert_eq(clattn_convert(CLATTN_F32, x, CLATTN_Q8_0, q, BLOCK), CLATTN_SUCCESS);
    clattn_convert(CLATTN_Q8_0, q, CLATTN_F32, back, BLOCK);
    float d = block_scale(q);
    cr_expect(fabsf(d - 1.0f / 127.0f) < 1e-5f, "scale %g, expected about 1/127", d);
    cr_expect(back[3] == 127 * d && back[4] == -127 * d && back[5] == 0.0f, "%g %g %g", back[3],
              back[4], back[5]);
    cr_expect(fabsf(back[0] + 1.0f) <= d / 2, "-1 became %g", back[0]);
}

/* A q8_0 cache of 2 sequences, Hkv 2, Dqk = Dv = 64 (2 blocks a row), 8 rows. */
enum { OB = 2, OH = 2, OD = 64, OCAP = 8, OROW = OH * OD };

static clattn_kv_cache *overflow_cache(clattn_context *ctx, const float *k, const float *v) {
    clattn_kv_cache_desc cd;
    clattn_kv_cache_desc_init(&cd, OB, OH, OD, OD, OCAP);
    cd.dtype = CLATTN_Q8_0;
    clattn_kv_cache *cache = NULL;
    ASSERT_OK(ctx, clattn_kv_cache_create(ctx, &cd, &cache));
    int32_t two[OB] = {2, 2};
    ASSERT_OK(ctx, clattn_kv_cache_append_host(cache, k, v, 2, two)); /* finite first rows */
    return cache;
}

/* The refused append left the cache as it was: lengths and storage. */
static void expect_unchanged(clattn_context *ctx, clattn_kv_cache *cache, const uint8_t *before,
                             const char *what) {
    enum { BYTES = OB * OCAP * OH * OD / BLOCK * BLOCK_BYTES };
    static uint8_t k[BYTES], v[BYTES];
    int32_t lengths[OB];
    ASSERT_OK(ctx, clattn_kv_cache_lengths(cache, lengths));
    cr_expect(lengths[0] == 2 && lengths[1] == 2, "%s: lengths became %d, %d", what, lengths[0],
              lengths[1]);
    ASSERT_OK(ctx, clattn_kv_cache_read_host(cache, k, v));
    cr_expect_eq(memcmp(k, before, BYTES), 0, "%s: K was written", what);
    cr_expect_eq(memcmp(v, before + BYTES, BYTES), 0, "%s: V was written", what);
}

/* Sequence 1, new row 1, kv head 0, V's block 1 (dims 32..63) holds 1e7; new_len (1, 2). */
static void expect_append_refused(clattn_context *ctx, int on_device) {
    enum { BYTES = OB * OCAP * OH * OD / BLOCK * BLOCK_BYTES };
    static float k[OB * 2 * OROW], v[OB * 2 * OROW];
    static uint8_t before[2 * BYTES];
    fill_uniform(k, COUNT(k), 3);
    fill_uniform(v, COUNT(v), 4);
    clattn_kv_cache *cache = overflow_cache(ctx, k, v);
    ASSERT_OK(ctx, clattn_kv_cache_read_host(cache, before, before + BYTES));
    v[(1 * 2 + 1) * OROW + 0 * OD + 40] = 1e7f; /* [b=1][t=1][kvh=0][d=40] */
    int32_t new_len[OB] = {1, 2};
    clattn_status status;
    if (on_device) {
        cl_int err = CL_SUCCESS;
        cl_context cl = clattn_context_cl_context(ctx);
        clattn_kv_rows rows = {NULL, NULL, {0}, {0}, CLATTN_F32, 2, new_len};
        rows.k = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof k, k, &err);
        rows.v = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof v, v, &err);
        clattn_tensor_dense(&rows.k_tensor, CLATTN_LAYOUT_BSHD, OH, 2, OD, 0);
        clattn_tensor_dense(&rows.v_tensor, CLATTN_LAYOUT_BSHD, OH, 2, OD, 0);
        status = clattn_kv_cache_append(cache, &rows);
        clReleaseMemObject(rows.k), clReleaseMemObject(rows.v);
    } else {
        status = clattn_kv_cache_append_host(cache, k, v, 2, new_len);
    }
    const char *what = on_device ? "append from device buffers" : "append from host arrays";
    const char *message = clattn_context_last_error(ctx);
    cr_expect_eq(status, CLATTN_ERR_INVALID_ARGUMENT, "%s: %s", what, message);
    cr_expect(strstr(message, "sequence 1, new row 1, kv head 0: V block 1 (dims 32..63)"),
              "%s: the message does not name the block: %s", what, message);
    expect_unchanged(ctx, cache, before, what);
    v[(1 * 2 + 1) * OROW + 0 * OD + 40] = nextafterf(Q8_FIRST_OVERFLOW, 0.0f); /* fits */
    if (!on_device) ASSERT_OK(ctx, clattn_kv_cache_append_host(cache, k, v, 2, new_len));
    clattn_kv_cache_destroy(cache);
}

Test(q8, kv_cache_append_refuses_a_block_whose_scale_overflows) {
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs);
    for (size_t dev = 0; dev < devices; dev++) {
        expect_append_refused(ctxs[dev], 0);
        expect_append_refused(ctxs[dev], 1);
    }
}

/* The device's quantiser (a cache's append) writes the bytes clattn_convert writes, which are
 * ggml's (tests/unit/test_quant.c): blocks of every magnitude from 2^-30 to 2^22, with
 * reciprocals of a float32 scale that differ from those of its float16 rounding. */
static void check_device_blocks(clattn_context *ctx) {
    enum { SEQ = 64, DIM = 256, VALUES = SEQ * DIM };
    float *x = malloc(VALUES * sizeof *x);
    uint8_t *want = malloc(q8_bytes(VALUES)), *k = malloc(q8_bytes(VALUES));
    uint64_t state = 5;
    for (size_t i = 0; i < VALUES; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(state >> 11) * 0x1.0p-53 * 2.0 - 1.0;
        x[i] = (float)ldexp(u, (int)(i / BLOCK % 53) - 30);
    }
    cr_assert_eq(clattn_convert(CLATTN_F32, x, CLATTN_Q8_0, want, VALUES), CLATTN_SUCCESS);
    clattn_kv_cache_desc cd;
    clattn_kv_cache_desc_init(&cd, 1, 1, DIM, DIM, SEQ);
    cd.dtype = CLATTN_Q8_0;
    clattn_kv_cache *cache = NULL;
    ASSERT_OK(ctx, clattn_kv_cache_create(ctx, &cd, &cache));
    ASSERT_OK(ctx, clattn_kv_cache_append_host(cache, x, x, SEQ, NULL));
    ASSERT_OK(ctx, clattn_kv_cache_read_host(cache, k, NULL));
    size_t bad = 0;
    for (size_t b = 0; b < VALUES / BLOCK; b++)
        if (memcmp(k + b * BLOCK_BYTES, want + b * BLOCK_BYTES, BLOCK_BYTES) != 0 && bad++ < 3)
            cr_log_error("block %zu differs from clattn_convert's", b);
    cr_expect_eq(bad, 0, "%zu of %d blocks the device quantised differ", bad, VALUES / BLOCK);
    clattn_kv_cache_destroy(cache);
    free(x), free(want), free(k);
}

Test(q8, kv_cache_append_quantises_as_convert_bit_for_bit) {
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs);
    for (size_t dev = 0; dev < devices; dev++) check_device_blocks(ctxs[dev]);
}
