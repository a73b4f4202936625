/*
 * Shards of a call (the desc's q_start, k_start, full_len_q and full_len_k): the queries and keys
 * of a call are cut into uneven pieces, every (query piece, key piece) pair runs as a shard on
 * every variant, and the partials of each row, merged through their LSE in double on the host,
 * must give the whole call's reference rows, O and LSE, within the contract's tolerances. Every mask
 * kind is cut: causal with Nq != Nk, windows, dilation, global tokens (whose rows see keys of
 * other shards), shared and per-head block layouts cut off their block edges, a bias, GQA,
 * BHSD and 16-bit storage. Shards that see no key give LSE = -inf and add nothing.
 */
#include <criterion/criterion.h>

#include "util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct shard_case {
    const char *name;
    size_t b, hq, hkv, nq, nk, d;
    clattn_layout layout;
    clattn_dtype dtype;
    int causal;
    int64_t left, right, dilation;
    int64_t globals[4];
    size_t num_globals;
    int block_layout; /* 0 none, 1 shared, 2 per head */
    size_t bq, bk;
    int bias;  /* 0 none, 1 random with -inf, 2 padding: -FLT_MAX on padded keys and rows */
    int parts; /* the shards' LSE as (max, log sum) parts (desc->lse_parts), merged as such */
} shard_case;

/* The whole call's inputs, in storage type, and its reference. */
typedef struct whole_call {
    clattn_attention_desc desc;
    void *q, *k, *v;
    float *bias;
    uint8_t *layout;
    float *o_ref, *lse_ref;
    size_t rows; /* B * Hq * Nq */
} whole_call;

static uint64_t next_random(uint64_t *state) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return *state >> 33;
}

static void *stored(const float *x, size_t n, clattn_dtype dtype) {
    size_t size = dtype == CLATTN_F32 ? 4 : 2;
    void *out = malloc(n * size);
    cr_assert(out);
    cr_assert_eq(clattn_convert(CLATTN_F32, x, dtype, out, n), CLATTN_SUCCESS);
    return out;
}

static void *random_tensor(size_t n, clattn_dtype dtype, uint64_t seed) {
    float *x = malloc(n * sizeof *x);
    cr_assert(x);
    fill_uniform(x, n, seed);
    void *out = stored(x, n, dtype);
    free(x);
    return out;
}

static void setup_mask(const shard_case *c, whole_call *w) {
    clattn_attention_desc *d = &w->desc;
    uint64_t state = 7;
    d->causal = c->causal;
    d->window_left = c->left, d->window_right = c->right;
    d->dilation = c->dilation ? c->dilation : 1;
    d->global_tokens = c->num_globals ? c->globals : NULL;
    d->num_global_tokens = c->num_globals;
    if (c->block_layout) {
        size_t heads = c->block_layout == 2 ? c->hq : 1;
        size_t cells = heads * ((c->nq + c->bq - 1) / c->bq) * ((c->nk + c->bk - 1) / c->bk);
        w->layout = malloc(cells);
        cr_assert(w->layout);
        for (size_t i = 0; i < cells; i++) w->layout[i] = next_random(&state) % 5 < 3;
        d->block_layout = w->layout;
        d->block_q = c->bq, d->block_k = c->bk;
        d->block_layout_per_head = c->block_layout == 2;
    }
    if (c->bias) {
        size_t n = c->b * c->hq * c->nq * c->nk;
        w->bias = malloc(n * sizeof *w->bias);
        cr_assert(w->bias);
        fill_uniform(w->bias, n, 9);
        for (size_t i = 0; i < n; i++) {
            size_t row = i / c->nk % c->nq, key = i % c->nk;
            if (c->bias == 1 && next_random(&state) % 7 == 0) w->bias[i] = -INFINITY;
            if (c->bias == 2) /* Hugging Face's padding: the last keys, and every key of the
                                 last rows, at torch.finfo(float32).min */
                w->bias[i] = key >= c->nk - 5 || row >= c->nq - 4 ? -FLT_MAX : 0.0f;
        }
        d->bias_host = w->bias;
        d->bias_strides = (clattn_tensor){0, c->hq * c->nq * c->nk, c->nq * c->nk, c->nk};
    }
}

static void whole_setup(const shard_case *c, whole_call *w) {
    memset(w, 0, sizeof *w);
    clattn_attention_desc *d = &w->desc;
    cr_assert_eq(
        clattn_attention_desc_init(d, c->layout, c->b, c->hq, c->hkv, c->nq, c->nk, c->d, c->d),
        CLATTN_SUCCESS);
    d->dtype = c->dtype;
    d->out_dtype = CLATTN_F32; /* partials are float32; the merge rounds once */
    w->q = random_tensor(c->b * c->hq * c->nq * c->d, c->dtype, 1);
    w->k = random_tensor(c->b * c->hkv * c->nk * c->d, c->dtype, 2);
    w->v = random_tensor(c->b * c->hkv * c->nk * c->d, c->dtype, 3);
    setup_mask(c, w);
    w->rows = c->b * c->hq * c->nq;
    w->o_ref = malloc(w->rows * c->d * sizeof *w->o_ref);
    w->lse_ref = malloc(w->rows * sizeof *w->lse_ref);
    cr_assert(w->o_ref && w->lse_ref);
    cr_assert_eq(clattn_attention_reference(d, w->q, w->k, w->v, w->o_ref, w->lse_ref),
                 CLATTN_SUCCESS, "%s: the whole call's reference", c->name);
}

static void whole_free(whole_call *w) {
    free(w->q), free(w->k), free(w->v), free(w->bias), free(w->layout);
    free(w->o_ref), free(w->lse_ref);
}

/* Running merge of a row's partials, in double: the largest LSE so far and the sums scaled by
 * exp(-max). */
typedef struct row_merge {
    double *max, *sum, *acc; /* [rows], [rows], [rows * d] */
} row_merge;

/* A partial's LSE as its parts (top, log_sum): a plain LSE is (LSE, 0). */
static void merge_partial(row_merge *m, size_t row, const float *o, float top, float log_sum,
                          size_t d) {
    if (top == -INFINITY) return; /* a shard that sees no key adds nothing */
    if (top > m->max[row]) {
        double rescale = m->max[row] == -INFINITY ? 0.0 : exp(m->max[row] - top);
        m->sum[row] *= rescale;
        for (size_t x = 0; x < d; x++) m->acc[row * d + x] *= rescale;
        m->max[row] = top;
    }
    double weight = exp((double)top - m->max[row] + log_sum);
    m->sum[row] += weight;
    for (size_t x = 0; x < d; x++) m->acc[row * d + x] += weight * o[x];
}

/* One shard: query rows [q0, q0 + lq) against keys [k0, k0 + lk), merged into m. Q, K, V and the
 * bias are the whole call's arrays with offsets; O and LSE the shard's own dense arrays. */
static void run_shard(clattn_context *ctx, const shard_case *c, const whole_call *w,
                      clattn_variant variant, size_t q0, size_t lq, size_t k0, size_t lk,
                      row_merge *m) {
    clattn_attention_desc d = w->desc;
    d.len_q = lq, d.len_k = lk;
    d.q_start = q0, d.k_start = k0, d.full_len_q = c->nq, d.full_len_k = c->nk;
    d.q.offset = q0 * d.q.stride_seq;
    d.k.offset = k0 * d.k.stride_seq;
    d.v.offset = k0 * d.v.stride_seq;
    cr_assert_eq(clattn_tensor_dense(&d.o, CLATTN_LAYOUT_BSHD, c->hq, lq, c->d, 0), CLATTN_SUCCESS);
    if (w->bias) d.bias_strides.offset = q0 * d.bias_strides.stride_seq + k0;
    d.variant = variant;
    d.lse_parts = c->parts;
    float *o = malloc(c->b * lq * c->hq * c->d * sizeof *o), *lse = malloc(c->b * c->hq * lq * 8);
    cr_assert(o && lse);
    ASSERT_OK(ctx, clattn_attention_host(ctx, &d, w->q, w->k, w->v, o, lse));
    for (size_t b = 0; b < c->b; b++)
        for (size_t h = 0; h < c->hq; h++)
            for (size_t i = 0; i < lq; i++) {
                size_t row = (b * c->hq + h) * c->nq + q0 + i;
                const float *oi = o + ((b * lq + i) * c->hq + h) * c->d;
                size_t at = (b * c->hq + h) * lq + i;
                if (c->parts)
                    merge_partial(m, row, oi, lse[2 * at], lse[2 * at + 1], c->d);
                else
                    merge_partial(m, row, oi, lse[at], 0.0f, c->d);
            }
    free(o), free(lse);
}

/* The merged rows against the whole call's reference. @return the mismatches. */
static size_t compare_merged(const shard_case *c, const whole_call *w, const row_merge *m,
                             const char *label) {
    size_t d = c->d, mismatches = 0;
    double *ref = malloc(w->rows * d * sizeof *ref), *ref_lse = malloc(w->rows * sizeof *ref_lse);
    float *got = malloc(w->rows * d * sizeof *got), *got_lse = malloc(w->rows * sizeof *got_lse);
    cr_assert(ref && ref_lse && got && got_lse);
    for (size_t b = 0; b < c->b; b++)
        for (size_t h = 0; h < c->hq; h++)
            for (size_t i = 0; i < c->nq; i++) {
                size_t row = (b * c->hq + h) * c->nq + i;
                const float *o_ref = w->o_ref + b * w->desc.o.stride_batch +
                                     h * w->desc.o.stride_head + i * w->desc.o.stride_seq;
                for (size_t x = 0; x < d; x++) {
                    ref[row * d + x] = o_ref[x];
                    got[row * d + x] =
                        m->sum[row] > 0 ? (float)(m->acc[row * d + x] / m->sum[row]) : 0.0f;
                }
                ref_lse[row] = w->lse_ref[row];
                got_lse[row] =
                    m->sum[row] > 0 ? (float)(m->max[row] + log(m->sum[row])) : -INFINITY;
            }
    double atol, rtol;
    tolerance_for(c->dtype, CLATTN_F32, &atol, &rtol);
    mismatches += compare_outputs(label, got, ref, w->rows * d, atol, rtol);
    for (size_t r = 0; r < w->rows; r++) {
        int ok = isinf(ref_lse[r]) ? got_lse[r] == ref_lse[r]
                                   : fabs(got_lse[r] - ref_lse[r]) <=
                                         1e-4 * (fabs(ref_lse[r]) > 1 ? fabs(ref_lse[r]) : 1);
        if (!ok && mismatches++ < 3)
            fprintf(stderr, "%s: LSE[%zu] = %g, reference %g\n", label, r, (double)got_lse[r],
                    ref_lse[r]);
    }
    free(ref), free(ref_lse), free(got), free(got_lse);
    return mismatches;
}

/* Cuts of a length into three uneven pieces (a piece may not be empty). */
static void cuts_of(size_t n, size_t a_num, size_t b_num, size_t cuts[4]) {
    cuts[0] = 0, cuts[1] = n * a_num / 10, cuts[2] = n * b_num / 10, cuts[3] = n;
    cr_assert(cuts[1] > 0 && cuts[2] > cuts[1] && n > cuts[2], "pieces of %zu", n);
}

/* Every piece pair on one variant; @return the mismatches of the merge. */
static size_t check_variant(clattn_context *ctx, const shard_case *c, const whole_call *w,
                            clattn_variant variant) {
    size_t qc[4], kc[4];
    cuts_of(c->nq, 3, 7, qc);
    cuts_of(c->nk, 2, 6, kc);
    row_merge m;
    m.max = malloc(w->rows * sizeof *m.max);
    m.sum = calloc(w->rows, sizeof *m.sum);
    m.acc = calloc(w->rows * c->d, sizeof *m.acc);
    cr_assert(m.max && m.sum && m.acc);
    for (size_t r = 0; r < w->rows; r++) m.max[r] = -INFINITY;
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            run_shard(ctx, c, w, variant, qc[a], qc[a + 1] - qc[a], kc[b], kc[b + 1] - kc[b], &m);
    char label[160];
    snprintf(label, sizeof label, "%s on %s", c->name, clattn_variant_name(variant));
    size_t mismatches = compare_merged(c, w, &m, label);
    free(m.max), free(m.sum), free(m.acc);
    return mismatches;
}

/* Every variant the device supports, on every device. */
static void check_case(const shard_case *c) {
    clattn_context **ctxs;
    size_t n = test_contexts(&ctxs);
    whole_call w;
    whole_setup(c, &w);
    for (size_t i = 0; i < n; i++) {
        size_t ran = 0;
        for (int v = 1;; v++) {
            clattn_variant_info info;
            clattn_variant_info_init(&info);
            if (clattn_variant_describe(ctxs[i], (clattn_variant)v, &info) != CLATTN_SUCCESS) break;
            if (!info.supported) continue;
            cr_expect_eq(check_variant(ctxs[i], c, &w, (clattn_variant)v), 0,
                         "%s on %s: mismatches above", c->name, info.name);
            ran++;
        }
        cr_assert_geq(ran, 4, "%s: only %zu variants ran", c->name, ran);
    }
    whole_free(&w);
}

static shard_case base(const char *name, size_t nq, size_t nk) {
    shard_case c = {name, 2, 2, 2, nq, nk, 16, CLATTN_LAYOUT_BSHD, CLATTN_F32, 0, -1, -1, 1,
                    {0},  0, 0, 0, 0,  0,  0};
    return c;
}

Test(shard, no_mask_and_causal) {
    shard_case c = base("no mask", 37, 37);
    check_case(&c);
    c = base("causal", 37, 37), c.causal = 1;
    check_case(&c);
    c = base("causal, Nq < Nk", 29, 45), c.causal = 1;
    check_case(&c);
    c = base("causal, Nq > Nk", 45, 29), c.causal = 1;
    check_case(&c);
}

Test(shard, windows_and_dilation) {
    shard_case c = base("window (7, 2)", 37, 41);
    c.left = 7, c.right = 2;
    check_case(&c);
    c = base("causal window 5, dilation 3", 40, 40);
    c.causal = 1, c.left = 5, c.dilation = 3;
    check_case(&c);
    c = base("window (6, 6), dilation 2", 33, 47);
    c.left = 6, c.right = 6, c.dilation = 2;
    check_case(&c);
}

Test(shard, global_tokens) {
    shard_case c = base("globals in a window", 37, 37);
    c.left = 3, c.right = 3, c.num_globals = 3;
    c.globals[0] = 0, c.globals[1] = 20, c.globals[2] = 36;
    check_case(&c);
    c = base("globals, causal window, Nq < Nk", 30, 44);
    c.causal = 1, c.left = 4, c.num_globals = 2;
    c.globals[0] = 16, c.globals[1] = 40;
    check_case(&c);
    c = base("globals, dilated window", 41, 41);
    c.left = 8, c.right = 8, c.dilation = 4, c.num_globals = 2;
    c.globals[0] = 5, c.globals[1] = 33;
    check_case(&c);
}

Test(shard, block_layouts) {
    shard_case c = base("shared layout 8x4", 37, 43);
    c.block_layout = 1, c.bq = 8, c.bk = 4;
    check_case(&c);
    c = base("per-head layout 5x7, causal", 41, 41);
    c.block_layout = 2, c.bq = 5, c.bk = 7, c.causal = 1;
    check_case(&c);
}

Test(shard, bias_gqa_layouts_and_storage) {
    shard_case c = base("bias with -inf", 31, 39);
    c.bias = 1;
    check_case(&c);
    c = base("GQA 4/2, BHSD, causal", 38, 38);
    c.hq = 4, c.layout = CLATTN_LAYOUT_BHSD, c.causal = 1;
    check_case(&c);
    c = base("float16, causal", 36, 36);
    c.dtype = CLATTN_F16, c.causal = 1;
    check_case(&c);
    c = base("bfloat16, window", 36, 42);
    c.dtype = CLATTN_BF16, c.left = 9, c.right = 1;
    check_case(&c);
}

/* The checks a shard adds, and the calls that take none. */
Test(shard, refusals) {
    clattn_attention_desc d;
    char message[256];
    cr_assert_eq(clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, 8, 8, 16, 16),
                 CLATTN_SUCCESS);
    d.full_len_q = 10, d.q_start = 3;
    cr_expect_eq(clattn_attention_desc_check(&d, NULL, message, sizeof message),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(message, "query shard [3, 11)"), "%s", message);
    d.q_start = 2;
    cr_expect_eq(clattn_attention_desc_check(&d, NULL, message, sizeof message), CLATTN_SUCCESS,
                 "%s", message);
    d.k_start = 1; /* full_len_k = 0 means len_k: no room */
    cr_expect_eq(clattn_attention_desc_check(&d, NULL, message, sizeof message),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(message, "key shard [1, 9)"), "%s", message);
    d.full_len_k = 20;
    int64_t global = 15; /* a whole-sequence key position past this shard's keys */
    d.global_tokens = &global, d.num_global_tokens = 1;
    cr_expect_eq(clattn_attention_desc_check(&d, NULL, message, sizeof message), CLATTN_SUCCESS,
                 "%s", message);
    global = 20;
    cr_expect_eq(clattn_attention_desc_check(&d, NULL, message, sizeof message),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(message, "[0, 20)"), "%s", message);

    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_kv_cache_desc cd;
    clattn_kv_cache *cache = NULL;
    cr_assert_eq(clattn_kv_cache_desc_init(&cd, 1, 1, 16, 16, 8), CLATTN_SUCCESS);
    ASSERT_OK(ctxs[0], clattn_kv_cache_create(ctxs[0], &cd, &cache));
    clattn_attention_desc call;
    cr_assert_eq(clattn_attention_desc_init(&call, CLATTN_LAYOUT_BSHD, 1, 1, 1, 1, 8, 16, 16),
                 CLATTN_SUCCESS);
    call.full_len_q = 4;
    float q[16], o[16];
    fill_uniform(q, 16, 1);
    cr_expect_eq(clattn_kv_cache_attention_host(cache, &call, q, NULL, o, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(ctxs[0]), "no shard"), "%s",
              clattn_context_last_error(ctxs[0]));
    clattn_kv_cache_destroy(cache);
}

/* A shard whose keys all come after its queries' causal limit: O = 0 and LSE = -inf on every
 * variant, and the pair count is 0. */
Test(shard, a_shard_that_sees_no_key) {
    clattn_context **ctxs;
    size_t n = test_contexts(&ctxs);
    enum { NQ = 6, NK = 9, D = 16 };
    clattn_attention_desc d;
    cr_assert_eq(clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 2, 1, NQ, NK, D, D),
                 CLATTN_SUCCESS);
    d.causal = 1, d.q_start = 0, d.k_start = 20, d.full_len_q = 40, d.full_len_k = 40;
    uint64_t pairs = 1;
    cr_assert_eq(clattn_attention_pairs(&d, &pairs), CLATTN_SUCCESS);
    cr_expect_eq(pairs, 0);
    float q[NQ * 2 * D], k[NK * D], v[NK * D], o[NQ * 2 * D], lse[2 * NQ];
    fill_uniform(q, NQ * 2 * D, 1), fill_uniform(k, NK * D, 2), fill_uniform(v, NK * D, 3);
    for (size_t i = 0; i < n; i++)
        for (int var = 1; var <= CLATTN_VARIANT_FLASH; var++) {
            if (clattn_variant_supported(ctxs[i], (clattn_variant)var, &d, NULL, 0)) continue;
            d.variant = (clattn_variant)var;
            memset(o, 0x7f, sizeof o);
            ASSERT_OK(ctxs[i], clattn_attention_host(ctxs[i], &d, q, k, v, o, lse));
            for (size_t x = 0; x < NQ * 2 * D; x++)
                cr_expect_eq(o[x], 0.0f, "%s: O[%zu] = %g", clattn_variant_name(d.variant), x,
                             (double)o[x]);
            for (size_t r = 0; r < 2 * NQ; r++)
                cr_expect(lse[r] == -INFINITY, "%s: LSE[%zu] = %g", clattn_variant_name(d.variant),
                          r, (double)lse[r]);
        }
}

/* LSE parts (desc->lse_parts): the same calls with their LSE as (max, log sum), merged as such,
 * for the cases above that a plain LSE also merges; and rows whose every key has a bias of
 * -FLT_MAX (Hugging Face's padded rows), whose LSE is -FLT_MAX in float32 whatever their key
 * count: their shards' LSEs would weigh every shard alike, their parts weigh them by their keys. */
Test(shard, lse_parts) {
    shard_case c = base("parts: causal, Nq < Nk", 29, 45);
    c.causal = 1, c.parts = 1;
    check_case(&c);
    c = base("parts: globals, window, per-head layout", 37, 37);
    c.left = c.right = 3, c.num_globals = 2, c.globals[0] = 3, c.globals[1] = 20;
    c.block_layout = 2, c.bq = 4, c.bk = 6, c.parts = 1;
    check_case(&c);
    c = base("parts: padded rows and keys", 33, 41);
    c.bias = 2, c.parts = 1;
    check_case(&c);
    c = base("parts: padded rows, float16, causal", 36, 36);
    c.bias = 2, c.parts = 1, c.dtype = CLATTN_F16, c.causal = 1;
    check_case(&c);
}
