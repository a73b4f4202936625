/*
 * Pattern generators (clattn_pattern_layout): every kind against its formula, recomputed here
 * cell by cell over shapes with blocks_q == blocks_k, blocks_q < blocks_k and blocks_q >
 * blocks_k, causal and not; BigBird's fixed part exactly, its random blocks by count, by
 * where they may fall, by determinism and by a pinned layout of one seed (so that a change of
 * generator is noticed), and roughly uniform; every invalid argument refused with the layout
 * left untouched.
 */
#include <criterion/criterion.h>

#include "clattn.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* (blocks_q, blocks_k): square, more keys, more queries, single rows and columns. */
static const size_t shapes[][2] = {{1, 1},  {5, 5},  {16, 16}, {7, 13}, {13, 7},
                                   {3, 20}, {20, 3}, {1, 9},   {9, 1},  {2, 2}};
#define NUM_SHAPES (sizeof shapes / sizeof shapes[0])

/* ---------------------------------------------------------------- the formulas, again */

/* Aligned block position of row a: a' = a + blocks_k - blocks_q. */
static long long aligned(const clattn_pattern_desc *p, size_t a) {
    return (long long)a + (long long)p->blocks_k - (long long)p->blocks_q;
}

/* Mathematical floor and modulo, written differently from the library's. */
static long long math_mod(long long x, long long d) {
    return ((x % d) + d) % d;
}
static long long math_floor_div(long long x, long long d) {
    return (x - math_mod(x, d)) / d;
}
static long long abs_ll(long long x) {
    return x < 0 ? -x : x;
}

static int is_global_block(const clattn_pattern_desc *p, long long position) {
    for (size_t g = 0; g < p->num_global_blocks; g++)
        if ((long long)p->global_blocks[g] == position) return 1;
    return 0;
}

/* The deterministic part of every kind (BigBird without its random blocks). */
static int expected_cell(const clattn_pattern_desc *p, size_t a, size_t b_index) {
    long long ap = aligned(p, a), b = (long long)b_index;
    long long half = (long long)p->window / 2, s = (long long)p->stride;
    int allowed = 0;
    switch (p->kind) {
    case CLATTN_PATTERN_SLIDING:
        allowed = abs_ll(ap - b) <= half;
        break;
    case CLATTN_PATTERN_BIGBIRD:
        allowed = abs_ll(ap - b) <= half || b < (long long)p->global ||
                  (ap >= 0 && ap < (long long)p->global);
        break;
    case CLATTN_PATTERN_FIXED:
        allowed = math_floor_div(ap, s) == math_floor_div(b, s) ||
                  math_mod(b, s) >= s - (long long)p->summary;
        break;
    case CLATTN_PATTERN_STRIDED:
        allowed = abs_ll(ap - b) < s || math_mod(ap - b, s) == 0;
        break;
    case CLATTN_PATTERN_LONGFORMER:
        allowed = abs_ll(ap - b) <= half || is_global_block(p, b) || is_global_block(p, ap);
        break;
    }
    return allowed && (!p->causal || b <= ap);
}

/* ---------------------------------------------------------------- helpers */

static uint8_t *generate(const clattn_pattern_desc *p) {
    uint8_t *layout = malloc(p->blocks_q * p->blocks_k);
    cr_assert_not_null(layout);
    clattn_status status = clattn_pattern_layout(p, layout);
    cr_assert_eq(status, CLATTN_SUCCESS, "kind %d, %zux%zu blocks: %s", (int)p->kind, p->blocks_q,
                 p->blocks_k, clattn_status_name(status));
    return layout;
}

static void describe(const clattn_pattern_desc *p, char *buf, size_t size) {
    snprintf(buf, size,
             "kind %d, %zux%zu blocks, window %zu, global %zu, random %zu, stride %zu, "
             "summary %zu, %zu global blocks, causal %d",
             (int)p->kind, p->blocks_q, p->blocks_k, p->window, p->global, p->random, p->stride,
             p->summary, p->num_global_blocks, p->causal);
}

/* Every cell against expected_cell; names the first mismatch. */
static void check_formula(const clattn_pattern_desc *p) {
    uint8_t *layout = generate(p);
    char what[256];
    describe(p, what, sizeof what);
    for (size_t a = 0; a < p->blocks_q; a++)
        for (size_t b = 0; b < p->blocks_k; b++) {
            int got = layout[a * p->blocks_k + b], want = expected_cell(p, a, b);
            if (got != want) {
                free(layout);
                cr_assert_fail("%s: block (%zu, %zu) is %d, expected %d", what, a, b, got, want);
            }
        }
    free(layout);
}

/* Runs check_formula on every shape, causal and not. */
static void check_all_shapes(clattn_pattern_desc p) {
    for (size_t s = 0; s < NUM_SHAPES; s++)
        for (int causal = 0; causal <= 1; causal++) {
            p.blocks_q = shapes[s][0];
            p.blocks_k = shapes[s][1];
            p.causal = causal;
            check_formula(&p);
        }
}

/* ---------------------------------------------------------------- deterministic kinds */

Test(pattern, sliding_matches_its_formula) {
    const size_t windows[] = {1, 3, 5, 7, 99};
    for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++)
        check_all_shapes((clattn_pattern_desc){.struct_size = sizeof(clattn_pattern_desc),
                                               .kind = CLATTN_PATTERN_SLIDING,
                                               .window = windows[w]});
}

Test(pattern, fixed_matches_its_formula) {
    const size_t params[][2] = {{1, 1}, {2, 1}, {4, 1}, {4, 2}, {4, 4}, {5, 3}, {30, 2}};
    for (size_t i = 0; i < sizeof params / sizeof params[0]; i++)
        check_all_shapes((clattn_pattern_desc){.struct_size = sizeof(clattn_pattern_desc),
                                               .kind = CLATTN_PATTERN_FIXED,
                                               .stride = params[i][0],
                                               .summary = params[i][1]});
}

Test(pattern, strided_matches_its_formula) {
    const size_t strides[] = {1, 2, 3, 4, 7, 40};
    for (size_t i = 0; i < sizeof strides / sizeof strides[0]; i++)
        check_all_shapes((clattn_pattern_desc){.struct_size = sizeof(clattn_pattern_desc),
                                               .kind = CLATTN_PATTERN_STRIDED,
                                               .stride = strides[i]});
}

Test(pattern, longformer_matches_its_formula) {
    for (size_t s = 0; s < NUM_SHAPES; s++) {
        size_t bk = shapes[s][1];
        /* none, the first, the last, a spread with a repeat */
        size_t lists[4][4] = {{0}, {0}, {bk - 1}, {0, bk / 2, bk - 1, bk / 2}};
        const size_t counts[4] = {0, 1, 1, 4};
        for (size_t l = 0; l < 4; l++)
            for (size_t w = 1; w <= 5; w += 2)
                for (int causal = 0; causal <= 1; causal++)
                    check_formula(&(clattn_pattern_desc){.struct_size = sizeof(clattn_pattern_desc),
                                                         .kind = CLATTN_PATTERN_LONGFORMER,
                                                         .blocks_q = shapes[s][0],
                                                         .blocks_k = bk,
                                                         .window = w,
                                                         .global_blocks = lists[l],
                                                         .num_global_blocks = counts[l],
                                                         .causal = causal});
    }
}

/* A row whose aligned position is negative (blocks_q > blocks_k) sees only what the formulas
 * give it; the hand-written layout guards against a formula and its copy agreeing wrongly. */
Test(pattern, end_alignment_by_hand) {
    /* sliding, window 3, 4 query blocks over 2 key blocks: a' = a - 2 */
    const uint8_t want[4][2] = {{0, 0}, {1, 0}, {1, 1}, {1, 1}};
    uint8_t *got = generate(&(clattn_pattern_desc){.struct_size = sizeof(clattn_pattern_desc),
                                                   .kind = CLATTN_PATTERN_SLIDING,
                                                   .blocks_q = 4,
                                                   .blocks_k = 2,
                                                   .window = 3});
    cr_assert_arr_eq(got, want, sizeof want);
    free(got);
    /* strided, stride 2, causal, 2 query blocks over 5 key blocks: a' = a + 3 */
    const uint8_t want_strided[2][5] = {{0, 1, 1, 1, 0}, {1, 0, 1, 1, 1}};
    got = generate(&(clattn_pattern_desc){.struct_size = sizeof(clattn_pattern_desc),
                                          .kind = CLATTN_PATTERN_STRIDED,
                                          .blocks_q = 2,
                                          .blocks_k = 5,
                                          .stride = 2,
                                          .causal = 1});
    cr_assert_arr_eq(got, want_strided, sizeof want_strided);
    free(got);
}

/* Fields a kind does not use are ignored (an even window for fixed, a zero stride for
 * sliding). */
Test(pattern, unused_fields_are_ignored) {
    uint8_t layout[16];
    clattn_pattern_desc p = {.struct_size = sizeof(clattn_pattern_desc),
                             .kind = CLATTN_PATTERN_FIXED,
                             .blocks_q = 4,
                             .blocks_k = 4,
                             .stride = 2,
                             .summary = 1,
                             .window = 2};
    cr_assert_eq(clattn_pattern_layout(&p, layout), CLATTN_SUCCESS);
    p = (clattn_pattern_desc){.struct_size = sizeof(clattn_pattern_desc),
                              .kind = CLATTN_PATTERN_SLIDING,
                              .blocks_q = 4,
                              .blocks_k = 4,
                              .window = 1,
                              .stride = 0,
                              .summary = 9};
    cr_assert_eq(clattn_pattern_layout(&p, layout), CLATTN_SUCCESS);
}

/* ---------------------------------------------------------------- BigBird */

/* Checks the fixed part exactly, and that row a has exactly min(random, candidates) more
 * blocks, all among its candidates (fixed part 0 and, with causal, b <= a'). */
static void check_bigbird(const clattn_pattern_desc *p) {
    uint8_t *layout = generate(p);
    char what[256];
    describe(p, what, sizeof what);
    for (size_t a = 0; a < p->blocks_q; a++) {
        size_t candidates = 0, extra = 0;
        for (size_t b = 0; b < p->blocks_k; b++) {
            int fixed = expected_cell(p, a, b), got = layout[a * p->blocks_k + b];
            int candidate = !fixed && (!p->causal || (long long)b <= aligned(p, a));
            candidates += candidate;
            extra += candidate && got;
            if ((fixed && !got) || (!fixed && !candidate && got)) {
                free(layout);
                cr_assert_fail("%s, seed %llu: block (%zu, %zu) is %d (fixed part %d)", what,
                               (unsigned long long)p->seed, a, b, got, fixed);
            }
        }
        size_t want = p->random < candidates ? p->random : candidates;
        if (extra != want) {
            free(layout);
            cr_assert_fail("%s, seed %llu: row %zu has %zu random blocks, expected %zu of %zu "
                           "candidates",
                           what, (unsigned long long)p->seed, a, extra, want, candidates);
        }
    }
    free(layout);
}

Test(pattern, bigbird_fixed_part_and_random_counts) {
    const size_t globals[] = {0, 1, 2, 30}, randoms[] = {0, 1, 3, 100};
    for (size_t s = 0; s < NUM_SHAPES; s++)
        for (size_t w = 1; w <= 3; w += 2)
            for (size_t g = 0; g < 4; g++)
                for (size_t r = 0; r < 4; r++)
                    for (int causal = 0; causal <= 1; causal++)
                        for (uint64_t seed = 0; seed < 3; seed++)
                            check_bigbird(
                                &(clattn_pattern_desc){.struct_size = sizeof(clattn_pattern_desc),
                                                       .kind = CLATTN_PATTERN_BIGBIRD,
                                                       .blocks_q = shapes[s][0],
                                                       .blocks_k = shapes[s][1],
                                                       .window = w,
                                                       .global = globals[g],
                                                       .random = randoms[r],
                                                       .seed = seed * 0x9e3779b9u,
                                                       .causal = causal});
}

/* Every row with enough room gets exactly `random` blocks: 64x64, window 3, 2 global. */
Test(pattern, bigbird_exact_random_count_with_room) {
    clattn_pattern_desc p = {.struct_size = sizeof(clattn_pattern_desc),
                             .kind = CLATTN_PATTERN_BIGBIRD,
                             .blocks_q = 64,
                             .blocks_k = 64,
                             .window = 3,
                             .global = 2,
                             .random = 3,
                             .seed = 7};
    uint8_t *layout = generate(&p);
    for (size_t a = 2; a < 64; a++) { /* rows 0, 1 are global */
        size_t ones = 0, fixed = 0;
        for (size_t b = 0; b < 64; b++) {
            ones += layout[a * 64 + b];
            fixed += (size_t)expected_cell(&p, a, b);
        }
        cr_assert_eq(ones, fixed + 3, "row %zu: %zu blocks, fixed part %zu", a, ones, fixed);
    }
    free(layout);
}

Test(pattern, bigbird_same_seed_same_layout_other_seed_other_layout) {
    clattn_pattern_desc p = {.struct_size = sizeof(clattn_pattern_desc),
                             .kind = CLATTN_PATTERN_BIGBIRD,
                             .blocks_q = 32,
                             .blocks_k = 32,
                             .window = 3,
                             .global = 1,
                             .random = 3,
                             .seed = 1234};
    uint8_t *first = generate(&p), *again = generate(&p);
    cr_assert_arr_eq(first, again, 32 * 32, "seed 1234 gave two layouts");
    for (uint64_t seed = 0; seed < 8; seed++) {
        p.seed = seed;
        uint8_t *other = generate(&p);
        cr_assert(memcmp(first, other, 32 * 32) != 0, "seeds 1234 and %llu gave one layout",
                  (unsigned long long)seed);
        free(other);
    }
    free(first);
    free(again);
}

/* The layout of one seed, pinned: splitmix64 and the selection order are part of the
 * contract (the same seed gives the same layout on every machine and in every version). The
 * rows were checked against a separate Python implementation of the same generator. Row a sits
 * at a' = a + 4: column 0 (global), column a' (window 1) and two random blocks. */
Test(pattern, bigbird_seed_42_is_pinned) {
    static const char *const want[8] = {
        "#.#.#......#", "#....#.#.#..", "#.##..#.....", "##.....#...#",
        "#....#..#.#.", "#.....#..##.", "#.##......#.", "#....#.#...#",
    };
    uint8_t *layout = generate(&(clattn_pattern_desc){.struct_size = sizeof(clattn_pattern_desc),
                                                      .kind = CLATTN_PATTERN_BIGBIRD,
                                                      .blocks_q = 8,
                                                      .blocks_k = 12,
                                                      .window = 1,
                                                      .global = 1,
                                                      .random = 2,
                                                      .seed = 42});
    for (size_t a = 0; a < 8; a++) {
        char row[13];
        for (size_t b = 0; b < 12; b++) row[b] = layout[a * 12 + b] ? '#' : '.';
        row[12] = '\0';
        cr_expect_str_eq(row, want[a], "row %zu", a);
    }
    free(layout);
}

/* Each candidate of a row is taken with probability random / candidates: one row of 10
 * candidates, 3 taken, over 4000 seeds; each count within 6 standard deviations (~174) of
 * 1200. A generator that favours the first candidates fails. */
Test(pattern, bigbird_random_blocks_are_uniform) {
    enum { SEEDS = 4000, COLS = 12 };
    size_t taken[COLS] = {0};
    clattn_pattern_desc p = {.struct_size = sizeof(clattn_pattern_desc),
                             .kind = CLATTN_PATTERN_BIGBIRD,
                             .blocks_q = 1,
                             .blocks_k = COLS,
                             .window = 3,
                             .global = 0,
                             .random = 3};
    uint8_t layout[COLS];
    for (uint64_t seed = 0; seed < SEEDS; seed++) {
        p.seed = seed;
        cr_assert_eq(clattn_pattern_layout(&p, layout), CLATTN_SUCCESS);
        for (size_t b = 0; b < COLS; b++) taken[b] += layout[b];
    }
    /* the row sits at a' = 11: the band covers 10 and 11, leaving columns 0..9 */
    cr_assert_eq(taken[10], SEEDS);
    cr_assert_eq(taken[11], SEEDS);
    for (size_t b = 0; b < 10; b++)
        cr_expect(taken[b] > 1200 - 174 && taken[b] < 1200 + 174,
                  "column %zu taken %zu times of %d, expected about 1200", b, taken[b], SEEDS);
}

/* BigBird without random blocks is Longformer with the first `global` blocks global. */
Test(pattern, bigbird_without_random_is_longformer) {
    const size_t firsts[] = {0, 1, 2};
    for (size_t s = 0; s < NUM_SHAPES; s++)
        for (int causal = 0; causal <= 1; causal++) {
            size_t global = shapes[s][1] < 3 ? shapes[s][1] : 3;
            clattn_pattern_desc big = {.struct_size = sizeof(clattn_pattern_desc),
                                       .kind = CLATTN_PATTERN_BIGBIRD,
                                       .blocks_q = shapes[s][0],
                                       .blocks_k = shapes[s][1],
                                       .window = 3,
                                       .global = global,
                                       .causal = causal};
            clattn_pattern_desc longf = big;
            longf.kind = CLATTN_PATTERN_LONGFORMER;
            longf.global_blocks = firsts;
            longf.num_global_blocks = global;
            uint8_t *x = generate(&big), *y = generate(&longf);
            cr_assert_arr_eq(x, y, big.blocks_q * big.blocks_k, "%zux%zu blocks, causal %d",
                             big.blocks_q, big.blocks_k, causal);
            free(x);
            free(y);
        }
}

/* ---------------------------------------------------------------- invalid arguments */

/* Expects CLATTN_ERR_INVALID_ARGUMENT and a layout left as it was. */
static void expect_invalid(const clattn_pattern_desc *p, const char *why) {
    uint8_t layout[64];
    memset(layout, 0xab, sizeof layout);
    clattn_status status = clattn_pattern_layout(p, layout);
    cr_expect_eq(status, CLATTN_ERR_INVALID_ARGUMENT, "%s: got %s", why,
                 clattn_status_name(status));
    for (size_t i = 0; i < sizeof layout; i++)
        if (layout[i] != 0xab) {
            cr_expect_fail("%s: the layout was written", why);
            break;
        }
}

Test(pattern, invalid_arguments_are_refused) {
    const size_t globals[] = {1, 4};
    const clattn_pattern_desc sliding = {.struct_size = sizeof(clattn_pattern_desc),
                                         .kind = CLATTN_PATTERN_SLIDING,
                                         .blocks_q = 4,
                                         .blocks_k = 4,
                                         .window = 3};
    clattn_pattern_desc p = sliding;
    uint8_t layout[16];
    cr_expect_eq(clattn_pattern_layout(NULL, layout), CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect_eq(clattn_pattern_layout(&p, NULL), CLATTN_ERR_INVALID_ARGUMENT);
    p.blocks_q = 0;
    expect_invalid(&p, "blocks_q = 0");
    p = sliding, p.blocks_k = 0;
    expect_invalid(&p, "blocks_k = 0");
    p = sliding, p.blocks_q = SIZE_MAX / 2 + 1, p.blocks_k = 3;
    expect_invalid(&p, "blocks_q * blocks_k overflows");
    p = sliding, p.blocks_q = SIZE_MAX, p.blocks_k = 1;
    expect_invalid(&p, "blocks_q = SIZE_MAX");
    for (int kind = CLATTN_PATTERN_SLIDING; kind <= CLATTN_PATTERN_LONGFORMER; kind++) {
        if (kind == CLATTN_PATTERN_FIXED || kind == CLATTN_PATTERN_STRIDED) continue;
        p = sliding, p.kind = (clattn_pattern_kind)kind;
        p.window = 0;
        expect_invalid(&p, "window 0");
        p.window = 2;
        expect_invalid(&p, "even window");
    }
    p = (clattn_pattern_desc){.struct_size = sizeof(clattn_pattern_desc),
                              .kind = CLATTN_PATTERN_FIXED,
                              .blocks_q = 4,
                              .blocks_k = 4,
                              .stride = 0,
                              .summary = 1};
    expect_invalid(&p, "fixed, stride 0");
    p.stride = 4, p.summary = 0;
    expect_invalid(&p, "fixed, summary 0");
    p.summary = 5;
    expect_invalid(&p, "fixed, summary > stride");
    p = (clattn_pattern_desc){.struct_size = sizeof(clattn_pattern_desc),
                              .kind = CLATTN_PATTERN_STRIDED,
                              .blocks_q = 4,
                              .blocks_k = 4};
    expect_invalid(&p, "strided, stride 0");
    p = sliding, p.kind = CLATTN_PATTERN_LONGFORMER;
    p.global_blocks = globals, p.num_global_blocks = 2;
    expect_invalid(&p, "longformer, global block 4 of 4");
    p.global_blocks = NULL;
    expect_invalid(&p, "longformer, NULL global_blocks with a count");
    p = sliding, p.kind = (clattn_pattern_kind)5;
    expect_invalid(&p, "kind 5");
    p.kind = (clattn_pattern_kind)-1;
    expect_invalid(&p, "kind -1");
}

/* The limits themselves are valid: window 1, summary == stride, the last block global. */
Test(pattern, boundary_arguments_are_accepted) {
    const size_t last[] = {3};
    uint8_t layout[16];
    const clattn_pattern_desc ok[] = {
        {.struct_size = sizeof(clattn_pattern_desc),
         .kind = CLATTN_PATTERN_SLIDING,
         .blocks_q = 4,
         .blocks_k = 4,
         .window = 1},
        {.struct_size = sizeof(clattn_pattern_desc),
         .kind = CLATTN_PATTERN_FIXED,
         .blocks_q = 4,
         .blocks_k = 4,
         .stride = 3,
         .summary = 3},
        {.struct_size = sizeof(clattn_pattern_desc),
         .kind = CLATTN_PATTERN_STRIDED,
         .blocks_q = 4,
         .blocks_k = 4,
         .stride = 1},
        {.struct_size = sizeof(clattn_pattern_desc),
         .kind = CLATTN_PATTERN_LONGFORMER,
         .blocks_q = 2,
         .blocks_k = 4,
         .window = 1,
         .global_blocks = last,
         .num_global_blocks = 1},
        {.struct_size = sizeof(clattn_pattern_desc),
         .kind = CLATTN_PATTERN_LONGFORMER,
         .blocks_q = 4,
         .blocks_k = 4,
         .window = 1},
        {.struct_size = sizeof(clattn_pattern_desc),
         .kind = CLATTN_PATTERN_BIGBIRD,
         .blocks_q = 4,
         .blocks_k = 4,
         .window = 1,
         .global = 100,
         .random = 100},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        cr_expect_eq(clattn_pattern_layout(&ok[i], layout), CLATTN_SUCCESS, "case %zu", i);
}
