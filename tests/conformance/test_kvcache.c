/*
 * The KV cache (docs/semantics.md section 6) on every device: appending token by token and
 * attending at each step equals one causal call over the whole sequence; paged storage with
 * scrambled pages is bit-identical to contiguous storage; sequences of different lengths (0 and
 * capacity among them) and query lengths; every chunk count of the split variant in both its
 * forms (a work-item or a work-group a chunk), chunks without an allowed key included; masks over
 * a cache; and refused calls that leave the cache byte for byte as it was.
 */
#include <criterion/criterion.h>

#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

enum { B = 2, HQ = 4, HKV = 2, D = 32, T = 40, CAP = 64, PAGE = 8, PAGES = 20 };

typedef struct cache_case {
    clattn_dtype dtype;
    clattn_layout layout;
    int paged;
} cache_case;

/* A cache of the case on ctx; paged ones get a scrambled block table (pages in reverse-ish
 * order, interleaved between the sequences). */
static clattn_kv_cache *make_cache(clattn_context *ctx, const cache_case *cc) {
    clattn_kv_cache_desc d;
    cr_assert_eq(clattn_kv_cache_desc_init(&d, B, HKV, D, D, CAP), CLATTN_SUCCESS);
    d.dtype = cc->dtype;
    d.layout = cc->layout;
    if (cc->paged) d.page_size = PAGE, d.num_pages = PAGES;
    clattn_kv_cache *cache = NULL;
    ASSERT_OK(ctx, clattn_kv_cache_create(ctx, &d, &cache));
    if (cc->paged) {
        int32_t table[B * (CAP / PAGE)];
        for (int b = 0; b < B; b++)
            for (int p = 0; p < CAP / PAGE; p++) table[b * (CAP / PAGE) + p] = 19 - (2 * p + b);
        ASSERT_OK(ctx, clattn_kv_cache_set_block_table(cache, table));
    }
    return cache;
}

/* Uniform values in [-1, 1] stored as `dtype`. */
static void *random_tensor(size_t n, clattn_dtype dtype, uint64_t seed) {
    float *x = malloc(n * sizeof *x);
    void *out = malloc(n * 4);
    fill_uniform(x, n, seed);
    clattn_convert(CLATTN_F32, x, dtype, out, n);
    free(x);
    return out;
}

static size_t elem(clattn_dtype dtype) {
    return dtype == CLATTN_F32 ? 4 : 2;
}

/* Row t of a dense [B][N][H][D] (BSHD) or [B][H][N][D] (BHSD) tensor, for every b and h,
 * copied into a dense [B][1][H][D] (or [B][H][1][D]) block: one token of each sequence. */
static void take_token(const void *all, void *one, clattn_layout layout, size_t n, size_t h,
                       size_t t, size_t e) {
    for (size_t b = 0; b < B; b++)
        for (size_t k = 0; k < h; k++) {
            size_t from = layout == CLATTN_LAYOUT_BSHD ? ((b * n + t) * h + k) * D
                                                       : ((b * h + k) * n + t) * D;
            memcpy((char *)one + ((b * h + k) * D) * e, (const char *)all + from * e, D * e);
        }
}

/* O of one decode step of every sequence, compared with row t of the full causal call. */
static void expect_step(const float *step, const float *full, clattn_layout layout, size_t t,
                        double atol, double rtol) {
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < HQ; h++)
            for (size_t x = 0; x < D; x++) {
                size_t at = layout == CLATTN_LAYOUT_BSHD ? ((b * T + t) * HQ + h) * D + x
                                                         : ((b * HQ + h) * T + t) * D + x;
                double want = full[at], got = step[(b * HQ + h) * D + x];
                cr_assert(fabs(got - want) <= atol + rtol * fabs(want),
                          "step %zu b %zu h %zu x %zu: %g, the causal call %g", t, b, h, x, got,
                          want);
            }
}

/* Appends one token at a time and attends with its query; each step equals that row of one
 * causal call over the whole sequence (queries at the end: the last key is the new one). */
static void token_by_token(clattn_context *ctx, const cache_case *cc) {
    void *q = random_tensor(B * T * HQ * D, cc->dtype, 1),
         *k = random_tensor(B * T * HKV * D, cc->dtype, 2);
    void *v = random_tensor(B * T * HKV * D, cc->dtype, 3);
    float *full = calloc(B * T * HQ * D, sizeof *full);
    clattn_attention_desc all;
    clattn_attention_desc_init(&all, cc->layout, B, HQ, HKV, T, T, D, D);
    all.dtype = cc->dtype, all.causal = 1, all.path = CLATTN_PATH_REFERENCE;
    ASSERT_OK(ctx, clattn_attention_host(ctx, &all, q, k, v, full, NULL)); /* float32 out */
    clattn_kv_cache *cache = make_cache(ctx, cc);
    size_t e = elem(cc->dtype);
    void *qt = malloc(B * HQ * D * e), *kt = malloc(B * HKV * D * e), *vt = malloc(B * HKV * D * e);
    float step[B * HQ * D];
    clattn_attention_desc one;
    clattn_attention_desc_init(&one, cc->layout, B, HQ, HKV, 1, 1, D, D);
    one.dtype = cc->dtype, one.causal = 1;
    double atol = tolerance_atol(cc->dtype), rtol = tolerance_rtol(cc->dtype);
    for (size_t t = 0; t < T; t++) {
        take_token(q, qt, cc->layout, T, HQ, t, e);
        take_token(k, kt, cc->layout, T, HKV, t, e);
        take_token(v, vt, cc->layout, T, HKV, t, e);
        ASSERT_OK(ctx, clattn_kv_cache_append_host(cache, kt, vt, 1, NULL));
        ASSERT_OK(ctx, clattn_kv_cache_attention_host(cache, &one, qt, NULL, step, NULL));
        expect_step(step, full, cc->layout, t, atol, rtol);
    }
    int32_t lengths[B];
    clattn_kv_cache_lengths(cache, lengths);
    cr_expect(lengths[0] == T && lengths[1] == T, "lengths %d %d", lengths[0], lengths[1]);
    clattn_kv_cache_destroy(cache);
    free(q), free(k), free(v), free(full), free(qt), free(kt), free(vt);
}

Test(kvcache, token_by_token_equals_one_causal_call) {
    static const cache_case cases[] = {{CLATTN_F32, CLATTN_LAYOUT_BSHD, 0},
                                       {CLATTN_F32, CLATTN_LAYOUT_BSHD, 1},
                                       {CLATTN_F16, CLATTN_LAYOUT_BHSD, 1},
                                       {CLATTN_BF16, CLATTN_LAYOUT_BSHD, 0},
                                       {CLATTN_BF16, CLATTN_LAYOUT_BHSD, 1}};
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs);
    for (size_t dev = 0; dev < devices; dev++)
        for (size_t i = 0; i < COUNT(cases); i++) token_by_token(ctxs[dev], &cases[i]);
}

/* ---------------------------------------------------------------- lengths and pages */

/* Fills both caches with the same rows: sequence lengths {0, 17} then {CAP}. */
static void fill_same(clattn_kv_cache *a, clattn_kv_cache *b, const int32_t *new_len, size_t len,
                      uint64_t seed) {
    void *k = random_tensor(B * len * HKV * D, CLATTN_F32, seed);
    void *v = random_tensor(B * len * HKV * D, CLATTN_F32, seed + 1);
    clattn_status sa = clattn_kv_cache_append_host(a, k, v, len, new_len);
    clattn_status sb = clattn_kv_cache_append_host(b, k, v, len, new_len);
    cr_assert(sa == CLATTN_SUCCESS && sb == CLATTN_SUCCESS, "append: %s, %s",
              clattn_status_name(sa), clattn_status_name(sb));
    free(k), free(v);
}

Test(kvcache, paged_is_bit_identical_to_contiguous_and_lengths_differ) {
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs);
    const cache_case flat = {CLATTN_F32, CLATTN_LAYOUT_BSHD, 0},
                     paged = {CLATTN_F32, CLATTN_LAYOUT_BSHD, 1};
    for (size_t dev = 0; dev < devices; dev++) {
        clattn_context *ctx = ctxs[dev];
        clattn_kv_cache *a = make_cache(ctx, &flat), *p = make_cache(ctx, &paged);
        const int32_t first[B] = {0, 17}, second[B] = {CAP, 5};
        fill_same(a, p, first, 17, 10);
        /* sequence 0 of length 0 sees nothing; then it fills to capacity */
        enum { NQ = 3 };
        const int32_t q_len[B] = {2, 3};
        void *q = random_tensor(B * NQ * HQ * D, CLATTN_F32, 20);
        float oa[B * NQ * HQ * D], op[B * NQ * HQ * D], ref[B * NQ * HQ * D];
        float la[B * HQ * NQ], lp[B * HQ * NQ], lref[B * HQ * NQ];
        clattn_attention_desc d;
        clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, B, HQ, HKV, NQ, 1, D, D);
        d.causal = 1;
        for (int round = 0; round < 2; round++) {
            ASSERT_OK(ctx, clattn_kv_cache_attention_host(a, &d, q, q_len, oa, la));
            ASSERT_OK(ctx, clattn_kv_cache_attention_host(p, &d, q, q_len, op, lp));
            ASSERT_OK(ctx, clattn_kv_cache_reference(a, &d, q, q_len, ref, lref));
            cr_expect_eq(memcmp(oa, op, sizeof oa), 0, "round %d: paged O differs", round);
            cr_expect_eq(memcmp(la, lp, sizeof la), 0, "round %d: paged LSE differs", round);
            double ref64[B * NQ * HQ * D];
            for (size_t x = 0; x < COUNT(ref); x++) ref64[x] = ref[x];
            cr_expect_eq(compare_outputs("O", oa, ref64, COUNT(ref), TOL_F32_ATOL, TOL_F32_RTOL), 0,
                         "round %d", round);
            if (round == 0) {
                for (size_t h = 0; h < HQ; h++) /* sequence 0 is empty */
                    cr_expect(isinf(la[h * NQ]) && la[h * NQ] < 0, "LSE of an empty sequence");
                for (size_t h = 0; h < HQ; h++) /* row 2 of sequence 0 is past its q_len */
                    cr_expect(isinf(la[h * NQ + 2]) && la[h * NQ + 2] < 0);
            }
            if (round == 0) fill_same(a, p, second, CAP, 30); /* sequence 0 to capacity, 1 + 5 */
        }
        clattn_kv_cache_destroy(a), clattn_kv_cache_destroy(p);
        free(q);
    }
}

/* ---------------------------------------------------------------- chunks and masks */

static char tuning_dir[64];

/* A tuning.json (in a scratch cache folder) that makes the split variant use `chunks`, in
 * work-groups of `group` work-items (1: the work-item form). */
static void force_chunks(const clattn_device_info *info, unsigned chunks, unsigned group) {
    char text[1024];
    snprintf(text, sizeof text,
             "{\"entries\": [{\"device\": \"%s\", \"variant\": \"split\", \"block_n\": 16, "
             "\"split\": %u, \"wg_size\": %u}]}",
             info->name, chunks, group);
    write_tuning_json(tuning_dir, text);
}

static void make_tuning_dir(void) {
    fresh_cache_dir(tuning_dir, sizeof tuning_dir, "kv");
}

static void remove_tuning_dir(void) {
    remove_cache_dir(tuning_dir);
}

static float the_bias[B * HQ * 4 * CAP]; /* [B][Hq][Nq][capacity], for with_bias */

/* One call over a cache of B sequences of CAP rows (lengths CAP and CAP - 9), checked against
 * the reference, in work-groups of `group` work-items; returns how many chunks ran. */
static unsigned check_masked_call(clattn_context *ctx, clattn_kv_cache *cache,
                                  void (*mask)(clattn_attention_desc *), const char *what,
                                  unsigned group) {
    enum { NQ = 4 };
    void *q = random_tensor(B * NQ * HQ * D, CLATTN_F32, 40);
    float o[B * NQ * HQ * D], ref[B * NQ * HQ * D], lse[B * HQ * NQ], lref[B * HQ * NQ];
    fill_uniform(the_bias, COUNT(the_bias), 41);
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, B, HQ, HKV, NQ, 1, D, D);
    d.bias_strides = (clattn_tensor){0, HQ * NQ * CAP, NQ * CAP, CAP};
    mask(&d);
    ASSERT_OK(ctx, clattn_kv_cache_attention_host(cache, &d, q, NULL, o, lse));
    clattn_stats s;
    clattn_stats_init(&s);
    ASSERT_OK(ctx, clattn_context_last_stats(ctx, &s));
    char form[16];
    snprintf(form, sizeof form, " g%u ", group);
    cr_expect(strstr(s.kernel, form) != NULL, "%s: ran %s, expected work-groups of %u", what,
              s.kernel, group);
    ASSERT_OK(ctx, clattn_kv_cache_reference(cache, &d, q, NULL, ref, lref));
    double ref64[COUNT(ref)], lref64[COUNT(lref)];
    for (size_t x = 0; x < COUNT(ref); x++) ref64[x] = ref[x];
    for (size_t x = 0; x < COUNT(lref); x++) lref64[x] = lref[x];
    cr_expect_eq(compare_outputs(what, o, ref64, COUNT(ref), TOL_F32_ATOL, TOL_F32_RTOL), 0,
                 "%s with %u chunks", what, s.chunks);
    case_result r;
    memset(&r, 0, sizeof r);
    compare_lse_values(lse, lref64, COUNT(lref), &r);
    cr_expect_eq(r.mismatches, 0, "%s LSE with %u chunks: %s", what, s.chunks, r.message);
    free(q);
    return s.chunks;
}

static void no_mask(clattn_attention_desc *d) {
    d->causal = 1;
}
static void window_8(clattn_attention_desc *d) { /* far chunks have no allowed key */
    d->window_left = 8, d->window_right = 0;
}
static const int64_t globals[] = {3, 40};
static void window_and_globals(clattn_attention_desc *d) {
    d->window_left = d->window_right = 4, d->causal = 1;
    d->global_tokens = globals, d->num_global_tokens = COUNT(globals);
}
static void with_bias(clattn_attention_desc *d) {
    d->bias_host = the_bias, d->dilation = 3, d->window_left = 20, d->window_right = 20;
}
static uint8_t layout[1 * (CAP / 16)];
static void block_layout(clattn_attention_desc *d) {
    for (size_t i = 0; i < COUNT(layout); i++) layout[i] = i % 2 == 0;
    d->block_layout = layout, d->block_q = 4, d->block_k = 16;
}

Test(kvcache, every_chunk_count_and_mask_agrees_with_the_reference, .init = make_tuning_dir,
     .fini = remove_tuning_dir) {
    static void (*const masks[])(clattn_attention_desc *) = {no_mask, window_8, window_and_globals,
                                                             with_bias, block_layout};
    static const char *const names[] = {"causal", "window 8", "globals", "bias", "layout"};
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs);
    const cache_case paged = {CLATTN_F32, CLATTN_LAYOUT_BSHD, 1};
    for (size_t dev = 0; dev < devices; dev++) {
        clattn_device_info info;
        clattn_device_info_init(&info);
        clattn_context_device_info(ctxs[dev], &info);
        clattn_kv_cache *cache = make_cache(ctxs[dev], &paged);
        const int32_t fill[B] = {CAP, CAP - 9};
        void *k = random_tensor(B * CAP * HKV * D, CLATTN_F32, 50);
        void *v = random_tensor(B * CAP * HKV * D, CLATTN_F32, 51);
        ASSERT_OK(ctxs[dev], clattn_kv_cache_append_host(cache, k, v, CAP, fill));
        const unsigned groups[] = {1, 32}; /* both forms of the kernel: work-items, work-groups */
        for (size_t g = 0; g < COUNT(groups); g++)
            for (unsigned chunks = 1; chunks <= CAP / 16; chunks++) {
                force_chunks(&info, chunks, groups[g]);
                for (size_t m = 0; m < COUNT(masks); m++)
                    cr_expect_eq(check_masked_call(ctxs[dev], cache, masks[m], names[m], groups[g]),
                                 chunks);
            }
        clattn_kv_cache_destroy(cache);
        free(k), free(v);
    }
}

/* split's work-group form on plain calls: float16, q8_0 and q4_0 K/V, head dims of 6 and 8
 * blocks of 16 (spare work-items past the key lanes, and none), work-groups of 32 and 128 and a
 * tuned 2 (raised to a work-item for each 16 columns), 3 chunks, NaN and +inf in V under a
 * causal mask that hides them from some rows: the key lanes' partial sums add up to the
 * reference, and every case ran the work-group form. */
static void set_split_tuning(unsigned group) {
    clattn_tuning t;
    clattn_tuning_init(&t);
    t.block_m = 8, t.block_n = 16, t.wg_size = group, t.split = 3;
    set_tuning_everywhere(CLATTN_VARIANT_SPLIT, group ? &t : NULL);
}

Test(kvcache, work_group_form_matches_the_reference_for_every_storage) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    static const unsigned groups[] = {32, 128, 2};
    static const clattn_dtype quant[] = {CLATTN_F32, CLATTN_Q8_0, CLATTN_Q4_0};
    attn_case cases[2 * COUNT(quant) + 2];
    size_t n = 0;
    for (size_t q = 0; q < COUNT(quant); q++)
        for (size_t dim = 96; dim <= 128; dim += 32) {
            case_init(&cases[n], 2, 4, 1, 3, 150, dim, dim);
            cases[n].dtype = CLATTN_F16, cases[n].kv_quant = quant[q];
            cases[n++].causal = 1;
        }
    for (int bad = 1; bad <= 2; bad++) { /* rows 0 of each head do not see key 1 */
        case_init(&cases[n], 1, 4, 2, 5, 5, 96, 96);
        cases[n].dtype = CLATTN_F16, cases[n].causal = 1;
        cases[n++].bad_value = bad;
    }
    for (size_t g = 0; g < COUNT(groups); g++) {
        set_split_tuning(groups[g]);
        cr_expect_eq(check_cases(cases, n, CLATTN_PATH_FUSED, CLATTN_VARIANT_SPLIT), 0,
                     "work-groups of %u: failing cases are listed above", groups[g]);
        char form[16];
        /* 2 becomes 8: head dims 96 and 128 have 6 and 8 blocks of 16 */
        snprintf(form, sizeof form, " g%u ", groups[g] == 2 ? 8 : groups[g]);
        for (size_t i = 0; i < n; i++) {
            case_result r;
            case_run(ctxs[0], &cases[i], CLATTN_PATH_FUSED, CLATTN_VARIANT_SPLIT, &r);
            cr_expect(strstr(r.stats.kernel, form) != NULL, "case %zu ran %s, expected%s", i,
                      r.stats.kernel, form);
        }
    }
    set_split_tuning(0);
}

/* ---------------------------------------------------------------- refusals */

/* The whole storage and the lengths, to compare before and after a refused call. */
typedef struct snapshot { /* of a paged cache: its pool */
    unsigned char k[PAGES * PAGE * HKV * D * 4], v[PAGES * PAGE * HKV * D * 4];
    int32_t lengths[B];
} snapshot;

static void take(clattn_kv_cache *cache, snapshot *s) {
    cr_assert_eq(clattn_kv_cache_read_host(cache, s->k, s->v), CLATTN_SUCCESS);
    clattn_kv_cache_lengths(cache, s->lengths);
}

/* The storage and the lengths are byte for byte those of `before`. */
static void expect_unchanged(clattn_kv_cache *cache, const snapshot *before) {
    static snapshot after;
    take(cache, &after);
    cr_expect_eq(memcmp(before->k, after.k, sizeof after.k), 0, "K changed");
    cr_expect_eq(memcmp(before->v, after.v, sizeof after.v), 0, "V changed");
    cr_expect_eq(memcmp(before->lengths, after.lengths, sizeof after.lengths), 0,
                 "lengths changed");
}

static void expect_refused(clattn_context *ctx, clattn_kv_cache *cache, clattn_status status,
                           const char *words, const char *what) {
    cr_expect_eq(status, CLATTN_ERR_INVALID_ARGUMENT, "%s: %s", what, clattn_status_name(status));
    cr_expect(strstr(clattn_context_last_error(ctx), words) != NULL, "%s: message '%s' lacks '%s'",
              what, clattn_context_last_error(ctx), words);
    (void)cache;
}

Test(kvcache, refused_calls_leave_the_cache_as_it_was) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_context *ctx = ctxs[0];
    const cache_case paged = {CLATTN_F32, CLATTN_LAYOUT_BSHD, 1};
    clattn_kv_cache *cache = make_cache(ctx, &paged);
    const int32_t some[B] = {10, 30};
    void *k = random_tensor(B * CAP * HKV * D, CLATTN_F32, 60);
    void *v = random_tensor(B * CAP * HKV * D, CLATTN_F32, 61);
    ASSERT_OK(ctx, clattn_kv_cache_append_host(cache, k, v, 30, some));
    static snapshot before;
    take(cache, &before);

    const int32_t too_many[B] = {1, CAP - 29}; /* sequence 1 passes the capacity */
    expect_refused(ctx, cache, clattn_kv_cache_append_host(cache, k, v, CAP, too_many),
                   "sequence 1", "append past capacity");
    const int32_t negative[B] = {-1, 0};
    expect_refused(ctx, cache, clattn_kv_cache_append_host(cache, k, v, 1, negative), "new_len[0]",
                   "a negative new length");
    expect_refused(ctx, cache, clattn_kv_cache_set_lengths(cache, negative), "sequence 0",
                   "a negative length");
    const int32_t overflowing[B] = {0, CAP + 1};
    expect_refused(ctx, cache, clattn_kv_cache_set_lengths(cache, overflowing), "sequence 1",
                   "a length past capacity");
    int32_t table[B * (CAP / PAGE)];
    for (size_t i = 0; i < COUNT(table); i++) table[i] = (int32_t)i % PAGES;
    table[3] = PAGES; /* not a page */
    expect_refused(ctx, cache, clattn_kv_cache_set_block_table(cache, table), "[0][3]",
                   "a block table entry out of range");
    table[3] = -1; /* sequence 0 holds 10 rows: pages 0 and 1 must stay */
    table[1] = -1;
    expect_refused(ctx, cache, clattn_kv_cache_set_block_table(cache, table), "sequence 0",
                   "a table that drops a page in use");
    float q[B * HQ * D], o[B * HQ * D];
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, B, HQ, HQ, 1, 1, D, D);
    expect_refused(ctx, cache, clattn_kv_cache_attention_host(cache, &d, q, NULL, o, NULL), "Hkv",
                   "mismatched kv heads");
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, B, HQ, HKV, 1, 1, D + 1, D);
    expect_refused(ctx, cache, clattn_kv_cache_attention_host(cache, &d, q, NULL, o, NULL), "Dqk",
                   "mismatched head dims");
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, B, HQ, HKV, 1, 1, D, D);
    d.variant = CLATTN_VARIANT_FLASH; /* reads a call's own K and V tensors only */
    clattn_status status = clattn_kv_cache_attention_host(cache, &d, q, NULL, o, NULL);
    cr_expect_eq(status, CLATTN_ERR_UNSUPPORTED, "flash over a cache: %s",
                 clattn_status_name(status));
    cr_expect(strstr(clattn_context_last_error(ctx), "not a KV cache") != NULL, "%s",
              clattn_context_last_error(ctx));

    expect_unchanged(cache, &before);
    clattn_kv_cache_destroy(cache);
    free(k), free(v);
}

/* ---------------------------------------------------------------- storage values */

/* Every float16 and bfloat16 bit pattern read back exactly: one key a sequence (so O = V),
 * 256 sequences of 256 values, on every variant that runs a plain call. */
static void expect_every_pattern(clattn_context *ctx, clattn_dtype dtype, clattn_variant variant) {
    enum { N = 256 };
    static uint16_t v[N * N], q[N * 16];
    static float o[N * N];
    for (uint32_t i = 0; i < N * N; i++) v[i] = (uint16_t)i;
    memset(q, 0, sizeof q);
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, N, 1, 1, 1, 1, 16, N);
    d.dtype = dtype, d.out_dtype = CLATTN_F32, d.variant = variant;
    ASSERT_OK(ctx, clattn_attention_host(ctx, &d, q, q, v, o, NULL));
    size_t wrong = 0;
    for (uint32_t i = 0; i < N * N; i++) {
        float want;
        clattn_convert(dtype, &v[i], CLATTN_F32, &want, 1);
        int same = isnan(want) ? isnan(o[i]) : o[i] == want;
        if (!same && wrong++ == 0)
            cr_expect(same, "%s %s: pattern %04x read as %a, is %a", clattn_variant_name(variant),
                      dtype == CLATTN_F16 ? "f16" : "bf16", i, (double)o[i], (double)want);
    }
    cr_expect_eq(wrong, 0, "%zu patterns read wrongly", wrong);
}

Test(kvcache, every_16_bit_pattern_is_read_exactly) {
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs);
    clattn_variant variants[16];
    size_t count = variants_on_path(ctxs[0], CLATTN_PATH_FUSED, variants, COUNT(variants) - 1);
    variants[count++] = CLATTN_VARIANT_GEMM;
    for (size_t dev = 0; dev < devices; dev++)
        for (size_t i = 0; i < count; i++) {
            expect_every_pattern(ctxs[dev], CLATTN_F16, variants[i]);
            expect_every_pattern(ctxs[dev], CLATTN_BF16, variants[i]);
        }
}

/* An append that starts inside a page and runs into a missing one is refused before anything
 * is written (it used to check only the page of its first row, and wrote past the pool). */
Test(kvcache, an_append_into_a_missing_page_is_refused) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_context *ctx = ctxs[0];
    const cache_case paged = {CLATTN_F32, CLATTN_LAYOUT_BSHD, 1};
    clattn_kv_cache *cache = make_cache(ctx, &paged);
    int32_t table[B * (CAP / PAGE)];
    for (size_t i = 0; i < COUNT(table); i++) table[i] = -1;
    table[0] = 5, table[CAP / PAGE] = 6; /* one page a sequence: rows 0..7 */
    ASSERT_OK(ctx, clattn_kv_cache_set_block_table(cache, table));
    void *k = random_tensor(B * CAP * HKV * D, CLATTN_F32, 62);
    void *v = random_tensor(B * CAP * HKV * D, CLATTN_F32, 63);
    const int32_t seven[B] = {7, 0}, two[B] = {2, 0}, far[B] = {0, 20};
    ASSERT_OK(ctx, clattn_kv_cache_append_host(cache, k, v, 7, seven));
    static snapshot before;
    take(cache, &before);
    expect_refused(ctx, cache, clattn_kv_cache_append_host(cache, k, v, 2, two), "row 8",
                   "an append from row 7 into the missing page of row 8");
    expect_refused(ctx, cache, clattn_kv_cache_append_host(cache, k, v, 20, far), "row 8",
                   "an append over two missing pages");
    const int32_t nine[B] = {9, 0};
    expect_refused(ctx, cache, clattn_kv_cache_set_lengths(cache, nine), "row 8",
                   "a length into a missing page");
    expect_unchanged(cache, &before);
    const int32_t one[B] = {1, 8}; /* exactly to the ends of the pages: allowed */
    ASSERT_OK(ctx, clattn_kv_cache_append_host(cache, k, v, 8, one));
    clattn_kv_cache_destroy(cache);
    free(k), free(v);
}

/* clattn_kv_cache_wrap's initial lengths: a contiguous cache starts at them; a paged one starts
 * empty, so it takes zeros as it takes NULL (zeros were refused with a message that allowed
 * them) and refuses any other length, saying why. */
Test(kvcache, a_wrapped_cache_starts_at_its_lengths_and_a_paged_one_empty) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_context *ctx = ctxs[0];
    const size_t bytes = (size_t)PAGES * PAGE * HKV * D * sizeof(float); /* >= B * CAP rows */
    cl_int err = CL_SUCCESS;
    cl_mem k = clCreateBuffer(clattn_context_cl_context(ctx), CL_MEM_READ_WRITE, bytes, NULL, &err);
    cl_mem v = clCreateBuffer(clattn_context_cl_context(ctx), CL_MEM_READ_WRITE, bytes, NULL, &err);
    cr_assert(k && v, "buffers: %d", err);
    const int32_t zeros[B] = {0, 0}, some[B] = {5, 0};
    int32_t got[B] = {-1, -1};
    for (int paged = 0; paged < 2; paged++) {
        clattn_kv_cache_desc d;
        cr_assert_eq(clattn_kv_cache_desc_init(&d, B, HKV, D, D, CAP), CLATTN_SUCCESS);
        if (paged) d.page_size = PAGE, d.num_pages = PAGES;
        clattn_kv_cache *cache = NULL;
        ASSERT_OK(ctx, clattn_kv_cache_wrap(ctx, &d, k, v, zeros, &cache));
        clattn_kv_cache_destroy(cache);
        clattn_status status = clattn_kv_cache_wrap(ctx, &d, k, v, some, &cache);
        if (paged) {
            cr_expect_eq(status, CLATTN_ERR_INVALID_ARGUMENT);
            cr_expect(strstr(clattn_context_last_error(ctx), "a paged cache starts empty") != NULL,
                      "'%s'", clattn_context_last_error(ctx));
            cr_expect_null(cache);
        } else {
            cr_expect_eq(status, CLATTN_SUCCESS, "%s", clattn_context_last_error(ctx));
            ASSERT_OK(ctx, clattn_kv_cache_lengths(cache, got));
            cr_expect(got[0] == 5 && got[1] == 0, "lengths %d %d", got[0], got[1]);
            clattn_kv_cache_destroy(cache);
        }
    }
    clReleaseMemObject(k), clReleaseMemObject(v);
}

/* The storage is what an append writes: new rows read from it, and K and V storage sharing
 * memory, are refused (an append read rows it was overwriting, or wrote V over K). */
Test(kvcache, storage_an_append_would_read_or_write_twice_is_refused) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_context *ctx = ctxs[0];
    clattn_kv_cache_desc d;
    cr_assert_eq(clattn_kv_cache_desc_init(&d, 1, 1, 16, 16, 8), CLATTN_SUCCESS);
    clattn_kv_cache *cache = NULL;
    ASSERT_OK(ctx, clattn_kv_cache_create(ctx, &d, &cache));
    cl_mem k = NULL, v = NULL;
    ASSERT_OK(ctx, clattn_kv_cache_buffers(cache, &k, &v));
    clattn_kv_rows rows = {k, v, {0}, {0}, CLATTN_F32, 4, NULL}; /* rows 2..5 into rows 0..3 */
    clattn_tensor_dense(&rows.k_tensor, CLATTN_LAYOUT_BSHD, 1, 4, 16, 2 * 16);
    clattn_tensor_dense(&rows.v_tensor, CLATTN_LAYOUT_BSHD, 1, 4, 16, 2 * 16);
    cr_expect_eq(clattn_kv_cache_append(cache, &rows), CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(ctx), "share memory with the cache's K storage"),
              "'%s'", clattn_context_last_error(ctx));
    int32_t lengths[1] = {-1};
    ASSERT_OK(ctx, clattn_kv_cache_lengths(cache, lengths));
    cr_expect_eq(lengths[0], 0);
    clattn_kv_cache_destroy(cache);

    cl_int err = CL_SUCCESS;
    cl_mem one = clCreateBuffer(clattn_context_cl_context(ctx), CL_MEM_READ_WRITE,
                                8 * 16 * sizeof(float), NULL, &err);
    cr_assert_eq(err, CL_SUCCESS);
    cache = NULL;
    cr_expect_eq(clattn_kv_cache_wrap(ctx, &d, one, one, NULL, &cache),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(ctx), "the K and V storage share memory"), "'%s'",
              clattn_context_last_error(ctx));
    cr_expect_null(cache);
    clReleaseMemObject(one);
}

/* A paged cache's batch does not enter its storage size, but its lengths [B] and block table
 * [B][max_pages] do: a batch that overflows them is refused as such (found by the fuzzer,
 * tests/fuzz/fuzz_kv_cache.c: it was left to calloc to fail, as CLATTN_ERR_OUT_OF_MEMORY). */
Test(kvcache, a_batch_whose_bookkeeping_overflows_is_refused) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_context *ctx = ctxs[0];
    const size_t batches[] = {SIZE_MAX / 2 + 1, SIZE_MAX / 8 + 1, SIZE_MAX};
    for (size_t i = 0; i < COUNT(batches); i++) {
        clattn_kv_cache_desc d;
        cr_assert_eq(clattn_kv_cache_desc_init(&d, batches[i], HKV, D, D, CAP), CLATTN_SUCCESS);
        d.page_size = PAGE, d.num_pages = PAGES;
        clattn_kv_cache *cache = NULL;
        clattn_status status = clattn_kv_cache_create(ctx, &d, &cache);
        cr_expect_eq(status, CLATTN_ERR_INVALID_ARGUMENT, "batch %zu: %s", batches[i],
                     clattn_status_name(status));
        cr_expect(strstr(clattn_context_last_error(ctx), "overflows") != NULL, "batch %zu: '%s'",
                  batches[i], clattn_context_last_error(ctx));
        cr_expect_null(cache);
    }
}

/* A sequence shorter than its queries, with a global token past its length (found by the
 * fuzzer: the reference read the call's global flags as if laid out for the sequence, and gave
 * the first row, which sits before the keys, every key). Sequence 0 holds 3 rows and has 4
 * queries at positions -1..2, window (-1, 0), global token 3: row 0 sees no key (O = 0, LSE =
 * -inf), row 1 sees key 0 only (O = V[0]). Both the reference and the device say so. */
Test(kvcache, a_global_token_past_a_short_sequence_gives_no_key) {
    enum { NQ = 4, LEN = 3 };
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_context *ctx = ctxs[0];
    const cache_case dense = {CLATTN_F32, CLATTN_LAYOUT_BSHD, 0};
    clattn_kv_cache *cache = make_cache(ctx, &dense);
    float *k = random_tensor(B * LEN * HKV * D, CLATTN_F32, 70);
    float *v = random_tensor(B * LEN * HKV * D, CLATTN_F32, 71);
    float *q = random_tensor(B * NQ * HQ * D, CLATTN_F32, 72);
    const int32_t lengths[B] = {LEN, LEN};
    ASSERT_OK(ctx, clattn_kv_cache_append_host(cache, k, v, LEN, lengths));
    const int64_t global[] = {3};
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, B, HQ, HKV, NQ, 1, D, D);
    d.window_left = -1, d.window_right = 0;
    d.global_tokens = global, d.num_global_tokens = 1;
    static float o[2][B * NQ * HQ * D], lse[2][B * HQ * NQ];
    ASSERT_OK(ctx, clattn_kv_cache_reference(cache, &d, q, NULL, o[0], lse[0]));
    ASSERT_OK(ctx, clattn_kv_cache_attention_host(cache, &d, q, NULL, o[1], lse[1]));
    const char *who[] = {"the reference", "the device"};
    for (int w = 0; w < 2; w++)
        for (size_t b = 0; b < B; b++)
            for (size_t h = 0; h < HQ; h++) {
                const float *row0 = o[w] + ((b * NQ + 0) * HQ + h) * D;
                const float *row1 = o[w] + ((b * NQ + 1) * HQ + h) * D;
                const float *v0 = v + (b * LEN * HKV + h / (HQ / HKV)) * D; /* V[b, 0, kvh] */
                cr_expect(isinf(lse[w][(b * HQ + h) * NQ]), "%s: b %zu h %zu row 0 LSE %g", who[w],
                          b, h, (double)lse[w][(b * HQ + h) * NQ]);
                for (size_t x = 0; x < D; x++) {
                    cr_expect_eq(row0[x], 0.0f, "%s: b %zu h %zu row 0 [%zu] = %g", who[w], b, h, x,
                                 (double)row0[x]);
                    cr_expect_float_eq(row1[x], v0[x], 1e-6, "%s: b %zu h %zu row 1 [%zu]", who[w],
                                       b, h, x);
                }
            }
    clattn_kv_cache_destroy(cache);
    free(k), free(v), free(q);
}

/* ---------------------------------------------------------------- pages shared, buffers */

/* A block table that names one page twice in a sequence's row is refused (two places of the
 * sequence would be one row of storage). Sequences may share a page (a prefix both hold,
 * vLLM's prefix caching): each reads it, and an append that would write into a shared page is
 * refused, naming the other sequence, before anything is written (it used to be taken, and
 * changed the other sequence's rows). */
Test(kvcache, pages_twice_in_a_sequence_are_refused_and_shared_ones_take_no_appends) {
    enum { SLOTS = CAP / PAGE, NQ = 2 };
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_context *ctx = ctxs[0];
    const cache_case paged = {CLATTN_F32, CLATTN_LAYOUT_BSHD, 1};
    clattn_kv_cache *cache = make_cache(ctx, &paged);
    int32_t table[B * SLOTS];
    for (size_t i = 0; i < COUNT(table); i++) table[i] = -1;
    table[0] = 4, table[2] = 4;
    expect_refused(ctx, cache, clattn_kv_cache_set_block_table(cache, table),
                   "entries [0][0] and [0][2] name the same page 4", "a page twice in a row");

    /* sequence 0 fills page 0; sequence 1 then shares it as its prefix */
    float *k = random_tensor(B * PAGE * HKV * D, CLATTN_F32, 80);
    float *v = random_tensor(B * PAGE * HKV * D, CLATTN_F32, 81);
    table[0] = 0, table[1] = 1, table[2] = -1, table[SLOTS] = 2, table[SLOTS + 1] = 3;
    ASSERT_OK(ctx, clattn_kv_cache_set_block_table(cache, table));
    const int32_t first[B] = {PAGE, 0}, full[B] = {PAGE, PAGE}, one[B] = {1, 1};
    ASSERT_OK(ctx, clattn_kv_cache_append_host(cache, k, v, PAGE, first));
    table[SLOTS] = 0;
    ASSERT_OK(ctx, clattn_kv_cache_set_block_table(cache, table));
    ASSERT_OK(ctx, clattn_kv_cache_set_lengths(cache, full));
    for (size_t b = 1; b < B; b++) /* the same next row for both: into private pages 1 and 3 */
        memcpy(k + b * HKV * D, k, HKV * D * sizeof *k), memcpy(v + b * HKV * D, v, HKV * D * 4);
    ASSERT_OK(ctx, clattn_kv_cache_append_host(cache, k, v, 1, one));
    float *q = random_tensor(NQ * HQ * D, CLATTN_F32, 82);
    static float qq[B * NQ * HQ * D], o[B * NQ * HQ * D];
    for (size_t b = 0; b < B; b++) memcpy(qq + b * NQ * HQ * D, q, NQ * HQ * D * sizeof *q);
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, B, HQ, HKV, NQ, 1, D, D);
    d.causal = 1;
    ASSERT_OK(ctx, clattn_kv_cache_attention_host(cache, &d, qq, NULL, o, NULL));
    cr_expect_eq(memcmp(o, o + NQ * HQ * D, NQ * HQ * D * sizeof *o), 0,
                 "sequence 1 reads its shared prefix as sequence 0 does");

    /* sequence 1 shares sequence 0's page 1 too: sequence 0's next row would land there */
    table[SLOTS + 1] = 1;
    ASSERT_OK(ctx, clattn_kv_cache_set_block_table(cache, table));
    static snapshot before;
    take(cache, &before);
    const int32_t only_0[B] = {1, 0};
    expect_refused(ctx, cache, clattn_kv_cache_append_host(cache, k, v, 1, only_0),
                   "sequence 0: row 9 is in page 1, which sequence 1's block table names too",
                   "an append into a shared page");
    expect_unchanged(cache, &before);
    clattn_kv_cache_destroy(cache);
    free(k), free(v), free(q);
}

/* An append of zero rows reads no row, so its buffers may hold none (it was refused unless
 * they held one); it changes nothing. */
Test(kvcache, an_append_of_no_rows_needs_no_bytes) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_context *ctx = ctxs[0];
    const cache_case dense = {CLATTN_F32, CLATTN_LAYOUT_BSHD, 0};
    clattn_kv_cache *cache = make_cache(ctx, &dense);
    cl_int err = CL_SUCCESS;
    cl_mem tiny = clCreateBuffer(clattn_context_cl_context(ctx), CL_MEM_READ_WRITE, 4, NULL, &err);
    cr_assert_eq(err, CL_SUCCESS);
    clattn_kv_rows rows = {tiny, tiny, {0}, {0}, CLATTN_F32, 0, NULL};
    ASSERT_OK(ctx, clattn_kv_cache_append(cache, &rows));
    int32_t lengths[B] = {-1, -1};
    ASSERT_OK(ctx, clattn_kv_cache_lengths(cache, lengths));
    cr_expect(lengths[0] == 0 && lengths[1] == 0, "lengths %d %d", lengths[0], lengths[1]);
    clReleaseMemObject(tiny);
    clattn_kv_cache_destroy(cache);
}

/* The cache's dtype says how K and V are stored: a desc whose kv_q8_0 or kv_q4_0 says
 * otherwise is refused (it was honoured, and a float32 cache's call refused or checked as
 * quantised); one that agrees is taken. */
Test(kvcache, the_caches_dtype_governs_k_and_v) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_context *ctx = ctxs[0];
    float *q = random_tensor(B * HQ * D, CLATTN_F32, 90);
    static float o[B * HQ * D];
    for (int quantised = 0; quantised < 2; quantised++) {
        const cache_case cc = {quantised ? CLATTN_Q8_0 : CLATTN_F32, CLATTN_LAYOUT_BSHD, 0};
        clattn_kv_cache *cache = make_cache(ctx, &cc);
        clattn_attention_desc d;
        clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, B, HQ, HKV, 1, 1, D, D);
        d.kv_q8_0 = 1;
        clattn_status status = clattn_kv_cache_attention_host(cache, &d, q, NULL, o, NULL);
        if (quantised) {
            cr_expect_eq(status, CLATTN_SUCCESS, "kv_q8_0 over a q8_0 cache: %s",
                         clattn_context_last_error(ctx));
        } else {
            expect_refused(ctx, cache, status, "the cache stores them as f32",
                           "kv_q8_0 over a float32 cache");
        }
        d.kv_q8_0 = 0, d.kv_q4_0 = 1;
        expect_refused(ctx, cache, clattn_kv_cache_attention_host(cache, &d, q, NULL, o, NULL),
                       "K and V are q4_0", "kv_q4_0 over another cache");
        clattn_kv_cache_destroy(cache);
    }
    free(q);
}

/* Storage and outputs the device may not write (CL_MEM_READ_ONLY) are refused by name. */
Test(kvcache, read_only_storage_and_outputs_are_refused) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_context *ctx = ctxs[0];
    cl_context cl = clattn_context_cl_context(ctx);
    const size_t bytes = (size_t)B * CAP * HKV * D * sizeof(float);
    cl_int err = CL_SUCCESS;
    cl_mem writable = clCreateBuffer(cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
    cl_mem read_only = clCreateBuffer(cl, CL_MEM_READ_ONLY, bytes, NULL, &err);
    cr_assert(writable && read_only, "buffers: %d", err);
    clattn_kv_cache_desc cd;
    cr_assert_eq(clattn_kv_cache_desc_init(&cd, B, HKV, D, D, CAP), CLATTN_SUCCESS);
    clattn_kv_cache *cache = NULL;
    cr_expect_eq(clattn_kv_cache_wrap(ctx, &cd, writable, read_only, NULL, &cache),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(ctx), "the V storage was created CL_MEM_READ_ONLY"),
              "'%s'", clattn_context_last_error(ctx));
    cr_expect_null(cache);
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, B, HQ, HKV, 1, CAP, D, D);
    cr_expect_eq(clattn_attention(ctx, &d, writable, writable, writable, read_only, NULL, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(ctx), "O was created CL_MEM_READ_ONLY"), "'%s'",
              clattn_context_last_error(ctx));
    clReleaseMemObject(writable), clReleaseMemObject(read_only);
}
