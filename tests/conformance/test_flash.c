/*
 * The flash variant's own parts, against the reference (the shapes, masks, dtypes and layouts
 * every fused variant must serve are in test_fused.c, test_sparse.c and test_bias.c): the
 * subgroup path (emulated where the device has no subgroups, as PoCL and oclgrind have none),
 * tunings that change the kernel's shape, tiles shrunk to a small device, tuning values it
 * refuses, the tile lists cached per context, K and V read in place, and the tiles it counts.
 */
#include <criterion/criterion.h>

#include "kernels/tile_cache.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static clattn_context *first_context(void) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    return ctxs[0];
}

static void expect_mask_cases_pass(const char *what) {
    attn_case cases[MASK_KINDS];
    size_t n = mask_kind_cases(cases, 301);
    cr_expect_eq(check_cases(cases, n, CLATTN_PATH_FUSED, CLATTN_VARIANT_FLASH), 0,
                 "%s: failing cases are listed above", what);
}

/* ---------------------------------------------------------------- reductions */

/* The subgroup path, its built-ins emulated over local memory with subgroups that are the
 * teams; then subgroups that are not (3 wide), where the kernel must take the local path. */
Test(flash, subgroup_path_emulated) {
    setenv("CLATTN_TEST_FLASH_SUBGROUPS", "emulate", 1);
    case_result r;
    attn_case c;
    case_init(&c, 1, 2, 2, 50, 70, 32, 32);
    case_run(first_context(), &c, CLATTN_PATH_FUSED, CLATTN_VARIANT_FLASH, &r);
    cr_assert_eq(r.status, CLATTN_SUCCESS, "%s", r.message);
    cr_expect(strstr(r.stats.kernel, " sg2 ") != NULL, "not the emulated path: %s", r.stats.kernel);
    expect_mask_cases_pass("emulated subgroups");
    setenv("CLATTN_TEST_FLASH_SUBGROUPS", "emulate:3", 1);
    expect_mask_cases_pass("subgroups that are not the teams");
    unsetenv("CLATTN_TEST_FLASH_SUBGROUPS");
}

/* ---------------------------------------------------------------- tunings */

static clattn_tuning flash_tuning(unsigned bm, unsigned bn, unsigned tm, unsigned tn, unsigned vec,
                                  unsigned stages) {
    clattn_tuning t;
    clattn_tuning_init(&t);
    t.block_m = bm, t.block_n = bn, t.tile_m = tm, t.tile_n = tn, t.vector = vec;
    t.stages = stages;
    return t;
}

/* Micro-tiles from 1x1 to 8x8, teams of 1 to 32 lanes, single and double buffering, every
 * vector width: the kernel takes the shape it is given and stays right. */
Test(flash, tunings_shape_the_kernel) {
    const clattn_tuning tunings[] = {
        flash_tuning(8, 8, 1, 1, 1, 1),   flash_tuning(16, 64, 2, 8, 2, 2),
        flash_tuning(64, 16, 8, 2, 8, 1), flash_tuning(4, 32, 4, 1, 4, 2),
        flash_tuning(32, 8, 4, 8, 16, 2),
    };
    clattn_context **ctxs;
    test_contexts(&ctxs);
    for (size_t i = 0; i < COUNT(tunings); i++) {
        set_tuning_everywhere(CLATTN_VARIANT_FLASH, &tunings[i]);
        case_result r;
        attn_case c;
        case_init(&c, 1, 2, 1, 45, 61, 32, 32);
        case_run(ctxs[0], &c, CLATTN_PATH_FUSED, CLATTN_VARIANT_FLASH, &r);
        cr_assert_eq(r.status, CLATTN_SUCCESS, "%s", r.message);
        cr_expect_eq(r.stats.block_m, tunings[i].block_m, "%s", r.stats.kernel);
        cr_expect_eq(r.stats.block_n, tunings[i].block_n, "%s", r.stats.kernel);
        expect_mask_cases_pass(r.stats.kernel);
    }
    set_tuning_everywhere(CLATTN_VARIANT_FLASH, NULL);
}

Test(flash, tuning_values_it_cannot_take_are_named) {
    clattn_context *ctx = first_context();
    const struct {
        clattn_tuning t;
        const char *field;
    } bad[] = {{flash_tuning(30, 32, 4, 4, 4, 2), "block_m"},
               {flash_tuning(32, 32, 4, 0, 4, 2), "tile_n"},
               {flash_tuning(32, 32, 4, 4, 3, 2), "vector"},
               {flash_tuning(32, 32, 4, 4, 4, 3), "stages"}};
    for (size_t i = 0; i < COUNT(bad); i++)
        expect_tuning_refused(ctx, CLATTN_VARIANT_FLASH, &bad[i].t, bad[i].field);
}

/* ---------------------------------------------------------------- fitting a device */

Test(flash, tiles_shrink_to_fit_a_small_device) {
    clattn_context *ctx = small_device(32768, 64); /* oclgrind's local memory */
    const size_t dims[] = {64, 256};
    for (size_t i = 0; i < COUNT(dims); i++) {
        attn_case c;
        case_init(&c, 1, 2, 1, 70, 90, dims[i], dims[i]);
        c.causal = 1;
        case_result r;
        case_run(ctx, &c, CLATTN_PATH_FUSED, CLATTN_VARIANT_FLASH, &r);
        cr_expect_eq(r.status, CLATTN_SUCCESS, "D=%zu: %s", dims[i], r.message);
        cr_expect_eq(r.mismatches, 0, "D=%zu: %s", dims[i], r.message);
        /* Q [block_m][256] float32 and K, V [block_n][256] each: within 32 KiB */
        if (dims[i] == 256)
            cr_expect_leq((r.stats.block_m + 2 * r.stats.block_n) * 256 * 4, 32768, "%s",
                          r.stats.kernel);
    }
    clattn_context_destroy(ctx);

    ctx = small_device(2048, 64); /* no key tile of D=256 fits: the call goes to gpu or gemm */
    attn_case c;
    case_init(&c, 1, 1, 1, 10, 10, 256, 256);
    expect_case_refused(ctx, &c, CLATTN_VARIANT_FLASH, CLATTN_ERR_UNSUPPORTED, "no tile fits");
    clattn_context_destroy(ctx);
}

/* ---------------------------------------------------------------- lists and memory */

/* Runs B=1 Hq=4 Hkv=2 N=200 D=32 on flash with the given layout and globals, counting tiles. */
static clattn_stats run_masked(clattn_context *ctx, const uint8_t *layout, const int64_t *globals,
                               size_t num_globals) {
    static float q[200 * 4 * 32], k[200 * 2 * 32], v[200 * 2 * 32], o[200 * 4 * 32];
    fill_uniform(q, COUNT(q), 1), fill_uniform(k, COUNT(k), 2), fill_uniform(v, COUNT(v), 3);
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 4, 2, 200, 200, 32, 32);
    d.variant = CLATTN_VARIANT_FLASH;
    d.count_tiles = 1;
    d.block_layout = layout, d.block_q = d.block_k = 40, d.block_layout_per_head = 1;
    d.global_tokens = globals, d.num_global_tokens = num_globals;
    d.window_left = d.window_right = globals ? 20 : -1;
    ASSERT_OK(ctx, clattn_attention_host(ctx, &d, q, k, v, o, NULL));
    clattn_stats s;
    clattn_stats_init(&s);
    ASSERT_OK(ctx, clattn_context_last_stats(ctx, &s));
    return s;
}

/* A repeated pattern reuses its device lists; a changed layout byte or global token does not
 * (the entry is compared in full, not trusted on its hash). Each run counts the tiles it
 * visits, which must be what the (cached) lists say. */
Test(flash, tile_lists_are_built_once_per_pattern) {
    static uint8_t layout[4 * 5 * 5];
    for (size_t i = 0; i < sizeof layout; i++) layout[i] = (uint8_t)(i % 3 != 1);
    static const int64_t globals[] = {3, 150}, other_globals[] = {3, 151};
    clattn_context *ctx = NULL;
    cr_assert_eq(clattn_context_create(&ctx, 0), CLATTN_SUCCESS);
    unsigned hits, built;
    clattn_stats runs[6];
    runs[0] = run_masked(ctx, layout, NULL, 0);
    runs[1] = run_masked(ctx, layout, NULL, 0);
    tile_cache_counts(ctx, &hits, &built);
    cr_expect(built == 1 && hits == 1, "built %u, hits %u", built, hits);
    layout[77] ^= 1;
    runs[2] = run_masked(ctx, layout, NULL, 0);
    runs[3] = run_masked(ctx, NULL, globals, 2);
    runs[4] = run_masked(ctx, NULL, other_globals, 2);
    runs[5] = run_masked(ctx, NULL, globals, 2);
    tile_cache_counts(ctx, &hits, &built);
    cr_expect(built == 4 && hits == 2, "built %u, hits %u", built, hits);
    for (size_t i = 0; i < COUNT(runs); i++)
        cr_expect_eq(runs[i].tiles_counted, runs[i].tiles_visited,
                     "run %zu: the kernel visited %llu tiles, the lists say %llu", i,
                     (unsigned long long)runs[i].tiles_counted,
                     (unsigned long long)runs[i].tiles_visited);
    cr_expect_neq(runs[1].tiles_counted, runs[2].tiles_counted, "the changed layout's walk");
    clattn_context_destroy(ctx);
}

/* K and V are read in place: no packed copy, so a call allocates almost nothing. */
Test(flash, reads_k_and_v_in_place) {
    clattn_context *ctx = first_context();
    clattn_stats s[2];
    const clattn_variant variants[] = {CLATTN_VARIANT_FLASH, CLATTN_VARIANT_ROWWISE};
    size_t n = 2048, count = 2 * n * 64;
    float *x = calloc(count, sizeof(float)), *o = calloc(count, sizeof(float));
    for (int v = 0; v < 2; v++) {
        clattn_attention_desc d;
        clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 2, 2, n, n, 64, 64);
        d.variant = variants[v];
        d.window_left = d.window_right = 16; /* cheap on PoCL */
        ASSERT_OK(ctx, clattn_attention_host(ctx, &d, x, x, x, o, NULL));
        clattn_stats_init(&s[v]);
        ASSERT_OK(ctx, clattn_context_last_stats(ctx, &s[v]));
    }
    cr_expect_lt(s[0].device_bytes, 4096, "flash allocated %llu bytes",
                 (unsigned long long)s[0].device_bytes);
    cr_expect_geq(s[1].device_bytes, 2 * n * 2 * 64 * sizeof(float), "gpu packs K and V");
    free(x);
    free(o);
}
