/*
 * Sparse attention in the fused path (every fused variant and device) and the gemm path, against
 * the reference: dilation, global tokens, block layouts (shared, per head, not dividing the
 * sequence), bias, alone and with causal, GQA and Nq != Nk; equivalences that must hold bit
 * for bit; the pairs and tiles a pattern costs; bad patterns rejected.
 */
#include <criterion/criterion.h>

#include "util.h"

#include <stdlib.h>
#include <string.h>

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Each feature alone, then with causal, GQA and Nq != Nk. */
static size_t feature_cases(attn_case *cases) {
    size_t n = 0;
    for (int with = 0; with < 4; with++)
        for (int feature = 0; feature < 7; feature++) {
            attn_case *c = &cases[n++];
            case_init(c, 1, with >= 2 ? 4 : 2, with >= 2 ? 2 : 2, 67, with == 3 ? 101 : 67, 32, 32);
            c->causal = with >= 1;
            c->seed = 100 + n;
            switch (feature) {
            case 0:
                c->left = 9, c->right = 9, c->dilation = 3;
                break;
            case 1:
                c->left = 3, c->right = 3, c->num_globals = 2, c->globals[0] = 0,
                c->globals[1] = 40;
                break;
            case 2:
                c->block_layout = LAYOUT_SHARED, c->bq = 16, c->bk = 16;
                break;
            case 3:
                c->block_layout = LAYOUT_PER_HEAD, c->bq = 10, c->bk = 24;
                break;
            case 4:
                c->bias = BIAS_FULL;
                break;
            case 5:
                c->bias = BIAS_BROADCAST, c->left = 20, c->right = 0;
                break;
            case 6: /* 34 keys a class: grouped by class (case 0's 23 are tested pair by pair) */
                c->left = 40, c->right = 40, c->dilation = 2;
                break;
            }
        }
    return n;
}

Test(sparse, each_feature_alone_and_combined_fused) {
    attn_case cases[28];
    size_t n = feature_cases(cases);
    cr_expect_eq(check_cases(cases, n, CLATTN_PATH_FUSED, CLATTN_VARIANT_AUTO), 0);
}

Test(sparse, every_feature_at_once_and_empty_rows) {
    attn_case cases[3];
    case_init(&cases[0], 2, 4, 1, 129, 257, 64, 64);
    cases[0].left = 20, cases[0].right = 3, cases[0].dilation = 2, cases[0].causal = 1;
    cases[0].num_globals = 3, cases[0].globals[0] = 5, cases[0].globals[1] = 200;
    cases[0].globals[2] = 256;
    cases[0].block_layout = LAYOUT_PER_HEAD, cases[0].bq = 32, cases[0].bk = 48;
    cases[0].bias = BIAS_BROADCAST;
    case_init(&cases[1], 1, 2, 2, 90, 30, 32, 32); /* causal, Nq > Nk: 60 empty rows */
    cases[1].causal = 1, cases[1].left = 4, cases[1].right = 4, cases[1].dilation = 2;
    cases[1].num_globals = 1, cases[1].globals[0] = 3;
    case_init(&cases[2], 1, 2, 2, 64, 64, 32, 32); /* random layouts leave some rows empty */
    cases[2].block_layout = LAYOUT_PER_HEAD, cases[2].bq = 8, cases[2].bk = 64;
    cases[2].dtype = CLATTN_F16;
    cr_expect_eq(check_cases(cases, COUNT(cases), CLATTN_PATH_FUSED, CLATTN_VARIANT_AUTO), 0);
    cr_expect_eq(check_cases(cases, COUNT(cases), CLATTN_PATH_GEMM, CLATTN_VARIANT_AUTO), 0);
}

/* ---------------------------------------------------------------- exact equivalences */

typedef struct dense_run {
    float *o, *lse;
    clattn_stats stats;
} dense_run;

/* Runs B=1 Hq=4 Hkv=2 N=200 D=64 with `setup` applied to the desc. */
static dense_run run_fused(clattn_variant variant, void (*setup)(clattn_attention_desc *)) {
    static float q[200 * 4 * 64], k[200 * 2 * 64], v[200 * 2 * 64];
    fill_uniform(q, COUNT(q), 1), fill_uniform(k, COUNT(k), 2), fill_uniform(v, COUNT(v), 3);
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 4, 2, 200, 200, 64, 64);
    d.path = CLATTN_PATH_FUSED;
    d.variant = variant;
    d.count_tiles = 1;
    setup(&d);
    dense_run r = {calloc(200 * 4 * 64, sizeof(float)), calloc(4 * 200, sizeof(float)), {0}};
    clattn_stats_init(&r.stats);
    ASSERT_OK(ctxs[0], clattn_attention_host(ctxs[0], &d, q, k, v, r.o, r.lse));
    ASSERT_OK(ctxs[0], clattn_context_last_stats(ctxs[0], &r.stats));
    return r;
}

static void no_mask(clattn_attention_desc *d) {
    (void)d;
}

static uint8_t ones_layout[4 * 7 * 5];
static void all_ones_layout(clattn_attention_desc *d) {
    memset(ones_layout, 1, sizeof ones_layout);
    d->block_layout = ones_layout, d->block_q = 32, d->block_k = 48; /* 7 x 5 blocks */
    d->block_layout_per_head = 1;
}

static void all_ones_small_blocks(clattn_attention_desc *d) {
    memset(ones_layout, 1, sizeof ones_layout);
    d->block_layout = ones_layout, d->block_q = 29, d->block_k = 40; /* not tile multiples */
}

static void window_covering_everything(clattn_attention_desc *d) {
    d->window_left = d->window_right = 200;
}

/* Every fused variant gives bit-identical O and LSE, and the same pair count, for two setups. */
static void expect_same(void (*setup_a)(clattn_attention_desc *),
                        void (*setup)(clattn_attention_desc *), const char *what) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_variant variants[16];
    size_t count = variants_on_path(ctxs[0], CLATTN_PATH_FUSED, variants, COUNT(variants));
    for (size_t v = 0; v < count; v++) {
        dense_run a = run_fused(variants[v], setup_a), b = run_fused(variants[v], setup);
        cr_expect_eq(memcmp(a.o, b.o, 200 * 4 * 64 * sizeof(float)), 0, "%s: O differs", what);
        cr_expect_eq(memcmp(a.lse, b.lse, 4 * 200 * sizeof(float)), 0, "%s: LSE differs", what);
        cr_expect_eq(a.stats.pairs, b.stats.pairs);
        free(a.o), free(a.lse), free(b.o), free(b.lse);
    }
}

static void expect_identical(void (*setup)(clattn_attention_desc *), const char *what) {
    expect_same(no_mask, setup, what);
}

Test(sparse, all_ones_layout_equals_full_attention_bit_for_bit) {
    expect_identical(all_ones_layout, "all-ones layout");
    expect_identical(all_ones_small_blocks, "all-ones layout, odd blocks");
}

Test(sparse, window_covering_everything_equals_full_attention_bit_for_bit) {
    expect_identical(window_covering_everything, "window (200,200)");
}

/* Window (0,0) with global tokens G: a row sees itself and the global keys; a global row sees
 * every key. Checked through the pair count and against the reference. */
static const int64_t globals[] = {0, 17, 150};
static void globals_with_zero_window(clattn_attention_desc *d) {
    d->window_left = d->window_right = 0;
    d->global_tokens = globals;
    d->num_global_tokens = COUNT(globals);
}

Test(sparse, global_tokens_with_a_zero_window_see_only_globals_and_themselves) {
    dense_run r = run_fused(CLATTN_VARIANT_LANES, globals_with_zero_window);
    /* 197 ordinary rows: themselves + 3 globals; 3 global rows: all 200 keys */
    uint64_t expected = 4ull * (197 * 4 + 3 * 200);
    cr_expect_eq(r.stats.pairs, expected, "pairs %llu, expected %llu",
                 (unsigned long long)r.stats.pairs, (unsigned long long)expected);
    free(r.o), free(r.lse);
    attn_case c;
    case_init(&c, 1, 4, 2, 200, 200, 64, 64);
    c.left = c.right = 0, c.num_globals = 3;
    memcpy(c.globals, globals, sizeof globals);
    cr_expect_eq(check_cases(&c, 1, CLATTN_PATH_FUSED, CLATTN_VARIANT_AUTO), 0);
}

/* |p - j| < 200 here, so a dilation of 200 or more keeps only j == p: any larger one, up to
 * INT64_MAX and with a per-head layout, must plan as cheaply and give the same result. */
static void dilation_200(clattn_attention_desc *d) {
    d->dilation = 200;
}

static void dilation_int64_max(clattn_attention_desc *d) {
    all_ones_layout(d);
    d->dilation = INT64_MAX;
}

Test(sparse, a_dilation_beyond_every_distance_keeps_only_the_diagonal) {
    expect_same(dilation_200, dilation_int64_max, "dilation INT64_MAX");
    dense_run r = run_fused(CLATTN_VARIANT_LANES, dilation_int64_max);
    cr_expect_eq(r.stats.pairs, 4ull * 200, "pairs %llu", (unsigned long long)r.stats.pairs);
    free(r.o), free(r.lse);
}

/* Classes shorter than a key tile are not worth their padding: such a dilation costs the
 * memory and tiles of the undilated pattern, no more. */
Test(sparse, a_large_dilation_costs_no_more_than_no_dilation) {
    dense_run full = run_fused(CLATTN_VARIANT_LANES, no_mask);
    dense_run dilated = run_fused(CLATTN_VARIANT_LANES, dilation_200);
    cr_expect_leq(dilated.stats.device_bytes, full.stats.device_bytes, "%llu bytes against %llu",
                  (unsigned long long)dilated.stats.device_bytes,
                  (unsigned long long)full.stats.device_bytes);
    cr_expect_leq(dilated.stats.tiles_visited, full.stats.tiles_visited);
    free(full.o), free(full.lse), free(dilated.o), free(dilated.lse);
}

/* ---------------------------------------------------------------- cost follows the pairs */

static void window_16(clattn_attention_desc *d) {
    d->window_left = d->window_right = 16;
}

static uint8_t diagonal_layout[7 * 7];
static void block_diagonal(clattn_attention_desc *d) {
    memset(diagonal_layout, 0, sizeof diagonal_layout);
    for (int a = 0; a < 7; a++) diagonal_layout[a * 7 + a] = 1;
    d->block_layout = diagonal_layout, d->block_q = d->block_k = 32;
}

/* The kernels count the key tiles they visit themselves; the count must be what the planner
 * listed, and follow the allowed pairs. */
static void expect_counted_as_planned(const dense_run *r, const char *what) {
    cr_expect_eq(r->stats.tiles_counted, r->stats.tiles_visited,
                 "%s (%s): the kernels visited %llu key tiles, the planner listed %llu", what,
                 clattn_variant_name(r->stats.variant), (unsigned long long)r->stats.tiles_counted,
                 (unsigned long long)r->stats.tiles_visited);
}

/* Key tiles of block_n keys that the 32x32 diagonal blocks of 200 rows and keys put in front of
 * query tiles of block_m rows: a tile's rows span blocks a0..a1, which see keys
 * [32 a0, 32 (a1 + 1)). */
static uint64_t diagonal_tiles(unsigned block_m, unsigned block_n) {
    uint64_t tiles = 0;
    for (unsigned i0 = 0; i0 < 200; i0 += block_m) {
        unsigned i1 = i0 + block_m < 200 ? i0 + block_m - 1 : 199;
        unsigned j0 = i0 / 32 * 32, j1 = (i1 / 32 + 1) * 32 < 200 ? (i1 / 32 + 1) * 32 - 1 : 199;
        tiles += j1 / block_n - j0 / block_n + 1;
    }
    return tiles;
}

Test(sparse, tiles_visited_follow_the_allowed_pairs) {
    dense_run full = run_fused(CLATTN_VARIANT_LANES, no_mask);
    dense_run band = run_fused(CLATTN_VARIANT_LANES, window_16);
    dense_run diag = run_fused(CLATTN_VARIANT_LANES, block_diagonal);
    expect_counted_as_planned(&full, "no mask");
    expect_counted_as_planned(&band, "window 16");
    expect_counted_as_planned(&diag, "block diagonal");
    cr_expect_eq(full.stats.tiles_counted, full.stats.tiles_total);
    /* a 33-key band touches 2-3 key tiles of 16 per query tile of 16, of 13 */
    cr_expect_lt(band.stats.tiles_counted * 4, band.stats.tiles_total);
    /* 32x32 diagonal blocks: a query tile meets the key tiles of its rows' blocks only */
    uint64_t expected = 4 * diagonal_tiles(diag.stats.block_m, diag.stats.block_n);
    cr_expect_eq(diag.stats.tiles_counted, expected, "visited %llu, expected %llu (tiles %ux%u)",
                 (unsigned long long)diag.stats.tiles_counted, (unsigned long long)expected,
                 diag.stats.block_m, diag.stats.block_n);
    cr_expect_lt(diag.stats.tiles_counted * 3, full.stats.tiles_counted);
    cr_expect_eq(diag.stats.pairs, 4ull * (6 * 32 * 32 + 8 * 8));
    free(full.o), free(full.lse), free(band.o), free(band.lse), free(diag.o), free(diag.lse);
}

static void causal_window_8(clattn_attention_desc *d) {
    d->causal = 1, d->window_left = 8, d->window_right = 0;
}
static void dilated_window(clattn_attention_desc *d) {
    d->window_left = d->window_right = 40, d->dilation = 3;
}
static const int64_t some_globals[3] = {0, 77, 150};
static void window_and_globals(clattn_attention_desc *d) {
    d->window_left = d->window_right = 10;
    d->global_tokens = some_globals, d->num_global_tokens = 3;
}
static void causal_window_and_globals(clattn_attention_desc *d) {
    window_and_globals(d);
    d->causal = 1;
}
static uint8_t per_head_layout[4 * 7 * 7];
static void per_head_blocks(clattn_attention_desc *d) {
    for (size_t i = 0; i < sizeof per_head_layout; i++)
        per_head_layout[i] = (uint8_t)((i * 7 + i / 49) % 3 != 0);
    d->block_layout = per_head_layout, d->block_q = d->block_k = 32;
    d->block_layout_per_head = 1, d->causal = 1;
}

/* Every pass and kind of walk, every fused variant that walks key tiles (it reports the tiles
 * a dense walk would take; split walks key chunks instead): counted = listed. */
Test(sparse, kernels_count_the_tiles_the_planner_lists) {
    static void (*const setups[])(clattn_attention_desc *) = {
        causal_window_8,           dilated_window, dilation_200,   window_and_globals,
        causal_window_and_globals, block_diagonal, per_head_blocks};
    static const char *const names[] = {"causal window",  "dilated window", "dilation 200",
                                        "globals",        "causal globals", "block diagonal",
                                        "per-head layout"};
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_variant variants[16];
    size_t count = variants_on_path(ctxs[0], CLATTN_PATH_FUSED, variants, COUNT(variants));
    size_t walkers = 0;
    for (size_t v = 0; v < count; v++) {
        dense_run probe = run_fused(variants[v], setups[0]);
        int walks_tiles = probe.stats.tiles_total > 0;
        free(probe.o), free(probe.lse);
        if (!walks_tiles) continue;
        walkers++;
        for (size_t i = 0; i < COUNT(setups); i++) {
            dense_run r = run_fused(variants[v], setups[i]);
            expect_counted_as_planned(&r, names[i]);
            cr_expect_gt(r.stats.tiles_counted, 0, "%s: no tile visited", names[i]);
            free(r.o), free(r.lse);
        }
    }
    cr_expect_geq(walkers, 3, "only %zu fused variants walk key tiles (lanes, rowwise, flash do)",
                  walkers);
}

/* ---------------------------------------------------------------- bad patterns */

Test(sparse, bad_patterns_are_rejected_with_a_message) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_context *ctx = ctxs[0];
    float x[4 * 8] = {0};
    uint8_t layout[4] = {1, 1, 1, 1};
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, 4, 4, 8, 8);
    d.block_layout = layout;
    cr_expect_eq(clattn_attention_host(ctx, &d, x, x, x, x, NULL), CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(ctx), "block sizes") != NULL);
    int64_t far[] = {4};
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, 4, 4, 8, 8);
    d.global_tokens = far, d.num_global_tokens = 1;
    cr_expect_eq(clattn_attention_host(ctx, &d, x, x, x, x, NULL), CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(ctx), "global token 4") != NULL);
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, 4, 4, 8, 8);
    d.dilation = 0;
    cr_expect_eq(clattn_attention_host(ctx, &d, x, x, x, x, NULL), CLATTN_ERR_INVALID_ARGUMENT);
    d.dilation = 1, d.window_left = -2;
    cr_expect_eq(clattn_attention_host(ctx, &d, x, x, x, x, NULL), CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(ctx), "window") != NULL);
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, 4, 4, 8, 8);
    d.bias_host = (const float *)x;
    d.bias_strides.stride_seq = SIZE_MAX / 2; /* a bias whose extent overflows */
    cr_expect_eq(clattn_attention_host(ctx, &d, x, x, x, x, NULL), CLATTN_ERR_INVALID_ARGUMENT);
}
