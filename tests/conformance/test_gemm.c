/*
 * The gemm path (CLBlast GEMM, masked softmax, CLBlast GEMM) on every device against the CPU
 * reference (docs/semantics.md section 4 tolerances): the fused kernel's sweep, every mask kind of
 * docs/semantics.md section 2, the chunk boundaries of the score budget (and results that do not
 * depend on them), NaN and inf in V reaching only the rows that see them (docs/semantics.md section
 * 1), AUTO falling back to it (head dims beyond the fused kernel, a fused build failure), CLBlast
 * errors and budgets too small as clear statuses, statistics, timing and events, and a long
 * sequence in bounded memory.
 *
 * CLBlast compiles its GEMM kernels on first use in every process (about 30 s on PoCL when its
 * kernel cache is cold) and Criterion runs each Test in a process of its own, so the cases are
 * grouped into a few tests.
 */
#include <criterion/criterion.h>

#include "reference/reference.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static void expect_all_pass(const attn_case *cases, size_t n) {
    cr_expect_eq(check_cases(cases, n, CLATTN_PATH_GEMM, CLATTN_VARIANT_AUTO), 0,
                 "failing cases are listed above");
}

static clattn_context *first_context(void) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    return ctxs[0];
}

/* Runs one case on one device and expects it to pass; returns what the call recorded. */
static clattn_stats expect_case(clattn_context *ctx, const attn_case *c, clattn_path path,
                                clattn_variant variant) {
    case_result r;
    char what[640];
    case_run(ctx, c, path, variant, &r);
    case_describe(c, what, sizeof what);
    cr_expect(r.status == CLATTN_SUCCESS && r.mismatches == 0, "%s\n  %s (%zu of %zu values off)",
              what, r.message, r.mismatches, r.checked);
    return r.stats;
}

/* ---------------------------------------------------------------- the fused kernel's sweep */

Test(gemm, fused_sweep_lengths_head_dims_and_heads) {
    static const size_t lengths[] = {1, 7, 113, 203, 1023, 1025};
    static const size_t dims[][2] = {{1, 1},     {3, 3},     {59, 59},   {64, 64},   {80, 80},
                                     {111, 111}, {128, 128}, {256, 256}, {192, 128}, {64, 17}};
    static const size_t heads[][2] = {{4, 4}, {4, 2}, {6, 3}, {8, 1}, {3, 1}};
    static const size_t shapes[][2] = {{1, 50}, {17, 100}, {64, 64}, {100, 17}, {203, 113}};
    attn_case cases[2 * COUNT(lengths) + COUNT(dims) + COUNT(heads) + COUNT(shapes)];
    size_t n = 0;
    for (size_t i = 0; i < COUNT(lengths); i++) {
        case_init(&cases[n++], 1, 2, 2, lengths[i], lengths[i], 64, 64);
        case_init(&cases[n], 1, 2, 1, lengths[i], lengths[(i + 2) % COUNT(lengths)], 32, 32);
        cases[n++].causal = 1;
    }
    for (size_t i = 0; i < COUNT(dims); i++, n++) {
        case_init(&cases[n], 1, 2, 2, 70, 93, dims[i][0], dims[i][1]);
        cases[n].causal = i % 2;
        cases[n].seed = 10 + i;
    }
    for (size_t i = 0; i < COUNT(heads); i++, n++) { /* MHA, GQA, MQA */
        case_init(&cases[n], 2, heads[i][0], heads[i][1], 45, 61, 64, 64);
        cases[n].seed = 20 + i;
    }
    for (size_t i = 0; i < COUNT(shapes); i++, n++) { /* Nq > Nk: the first rows are empty */
        case_init(&cases[n], 1, 2, 2, shapes[i][0], shapes[i][1], 64, 64);
        cases[n].causal = 1;
        cases[n].seed = 30 + i;
    }
    expect_all_pass(cases, n);
}

Test(gemm, fused_sweep_windows_storage_layouts_and_nan) {
    static const int64_t windows[][3] = {{0, 0, 0},  {-1, 5, 0},  {9, -1, 0}, {9, 0, 0},
                                         {3, 40, 0}, {20, 20, 1}, {0, 0, 1},  {33, 0, 1}};
    attn_case cases[2 * COUNT(windows) + 4 + 3 + 4 + 2];
    size_t n = 0;
    for (size_t i = 0; i < COUNT(windows); i++)
        for (int cross = 0; cross < 2; cross++, n++) {
            case_init(&cases[n], 1, 2, 1, cross ? 77 : 130, cross ? 150 : 130, 64, 64);
            cases[n].left = windows[i][0];
            cases[n].right = windows[i][1];
            cases[n].causal = (int)windows[i][2];
            cases[n].seed = 40 + n;
        }
    for (size_t i = 0; i < 4; i++, n++) { /* float16 in and/or out */
        case_init(&cases[n], 2, 4, 2, 97, 131, i == 0 ? 111 : 64, i == 0 ? 59 : 64);
        cases[n].dtype = i & 1 || i == 0 ? CLATTN_F16 : CLATTN_F32;
        cases[n].out_dtype = i & 2 ? CLATTN_F16 : CLATTN_F32;
        cases[n].causal = i == 3;
        cases[n].seed = 50 + i;
    }
    for (size_t i = 0; i < 3; i++, n++) { /* bfloat16 in and/or out, widened and narrowed */
        case_init(&cases[n], 2, 4, 2, 97, 131, i == 0 ? 111 : 64, i == 0 ? 59 : 64);
        cases[n].dtype = i != 1 ? CLATTN_BF16 : CLATTN_F32;
        cases[n].out_dtype = i != 0 ? CLATTN_BF16 : CLATTN_F16;
        cases[n].causal = i == 2, cases[n].bad_value = i == 2 ? 2 : 0; /* an inf in V */
        cases[n].seed = 70 + i;
    }
    for (size_t i = 0; i < 4; i++, n++) { /* both layouts, offsets, scales */
        case_init(&cases[n], 2, 4, 2, 60, 75, 32, 48);
        cases[n].layout = i & 1 ? CLATTN_LAYOUT_BHSD : CLATTN_LAYOUT_BSHD;
        cases[n].offset = 5 * i;
        cases[n].scale = i == 2 ? 0.3f : i == 3 ? -1.5f : 0.0f;
        cases[n].causal = i == 3;
        cases[n].dtype = cases[n].out_dtype = i == 1 ? CLATTN_F16 : CLATTN_F32;
        cases[n].seed = 60 + i;
    }
    /* A NaN in key 0 of kv head 0: NaN exactly where that key is allowed, the rest untouched
     * (the GEMM computes the NaN score everywhere; the softmax must drop it where masked). */
    case_init(&cases[n], 1, 2, 1, 40, 40, 64, 64);
    cases[n++].nan_key = 1;
    cases[n] = cases[n - 1];
    cases[n].causal = 1, cases[n].left = 5, cases[n].right = 0; /* most rows miss key 0 */
    n++;
    expect_all_pass(cases, n);
}

/* ---------------------------------------------------------------- docs/semantics.md section 2 */

static attn_case mask_case(size_t hq, size_t hkv, size_t nq, size_t nk, uint64_t seed) {
    attn_case c;
    case_init(&c, 2, hq, hkv, nq, nk, 48, 40);
    c.seed = seed;
    return c;
}

Test(gemm, every_mask_kind_and_combinations) {
    attn_case cases[32];
    size_t n = 0;
    /* dilation: (left, right, dilation, causal), with Nq != Nk */
    static const int64_t dilated[][4] = {
        {8, 8, 2, 0}, {-1, 0, 3, 1}, {-1, -1, 2, 0}, {20, 5, 4, 0}, {16, 0, 5, 1}};
    for (size_t i = 0; i < COUNT(dilated); i++, n++) {
        cases[n] = mask_case(2, 1, 90, 120 - 20 * (i % 2), 100 + n);
        cases[n].left = dilated[i][0], cases[n].right = dilated[i][1];
        cases[n].dilation = dilated[i][2], cases[n].causal = (int)dilated[i][3];
    }
    /* global tokens: with a window, with causality, alone, and on query positions (Nq < Nk) */
    static const int64_t globals[] = {0, 5, 77, 119};
    for (size_t i = 0; i < 4; i++, n++) {
        cases[n] = mask_case(4, 2, i == 3 ? 60 : 120, 120, 100 + n);
        memcpy(cases[n].globals, globals, sizeof globals);
        cases[n].num_globals = 4;
        cases[n].left = i == 2 ? -1 : 4, cases[n].right = i == 2 ? -1 : (i == 1 ? 0 : 4);
        cases[n].causal = i == 1 || i == 3;
        cases[n].dilation = i == 3 ? 2 : 1;
    }
    /* block layouts: shared, per head (GQA), all ones, odd block sizes, causal, Nq > Nk */
    static const case_layout layouts[] = {LAYOUT_SHARED,   LAYOUT_PER_HEAD, LAYOUT_ALL_ONES,
                                          LAYOUT_PER_HEAD, LAYOUT_SHARED,   LAYOUT_PER_HEAD};
    for (size_t i = 0; i < COUNT(layouts); i++, n++) {
        cases[n] = mask_case(4, i % 2 ? 1 : 4, i == 5 ? 150 : 100, i == 5 ? 90 : 130, 100 + n);
        cases[n].block_layout = layouts[i];
        cases[n].bq = i == 3 ? 7 : 16, cases[n].bk = i == 3 ? 13 : 32;
        cases[n].causal = i >= 4;
    }
    /* bias: full and broadcast (with -inf entries), with causality, GQA, Nq != Nk */
    for (size_t i = 0; i < 4; i++, n++) {
        cases[n] = mask_case(4, i < 2 ? 4 : 2, 70 + 30 * (i % 2), 100, 100 + n);
        cases[n].bias = i % 2 ? BIAS_BROADCAST : BIAS_FULL;
        cases[n].causal = i >= 2;
    }
    /* everything at once, in both storage types and layouts */
    for (size_t i = 0; i < 4; i++, n++) {
        cases[n] = mask_case(6, 2, i % 2 ? 150 : 80, 110, 100 + n);
        cases[n].causal = 1, cases[n].left = 30, cases[n].right = 10, cases[n].dilation = 2;
        cases[n].globals[0] = 3, cases[n].globals[1] = 64, cases[n].num_globals = 2;
        cases[n].block_layout = i < 2 ? LAYOUT_PER_HEAD : LAYOUT_SHARED;
        cases[n].bq = 8, cases[n].bk = 16;
        cases[n].bias = i < 2 ? BIAS_FULL : BIAS_BROADCAST;
        cases[n].dtype = cases[n].out_dtype = i == 1 ? CLATTN_F16 : CLATTN_F32;
        cases[n].layout = i == 2 ? CLATTN_LAYOUT_BHSD : CLATTN_LAYOUT_BSHD;
        cases[n].offset = 3 * i;
    }
    cr_assert_leq(n, COUNT(cases));
    expect_all_pass(cases, n);
}

/* ---------------------------------------------------------------- chunks of the budget */

/* A case and the chunks its budget implies: a chunk holds whole (b, h) groups when
 * fit = budget / (4 * Nk) score rows reach Nq (ceil(B*Hq / (fit / Nq)) chunks), else
 * ceil(Nq / fit) chunks per group. */
typedef struct chunk_case {
    attn_case c;
    unsigned chunks;
} chunk_case;

static void chunk_cases(chunk_case *cc, size_t *count) {
    size_t n = 0;
    /* masks that depend on the head and the row, so a chunk placed wrongly shows */
    attn_case base = mask_case(2, 1, 203, 203, 7);
    base.b = 1, base.causal = 1, base.block_layout = LAYOUT_PER_HEAD, base.bq = 16;
    base.bk = 32, base.bias = BIAS_FULL, base.globals[0] = 150, base.num_globals = 1;
    size_t row = 203 * 4, both = 2 * 203 * row;
    size_t budgets[] = {0, both, both - 1, 203 * row};
    unsigned expected[] = {1, 1, 2, 2};
    for (size_t i = 0; i < COUNT(budgets); i++, n++) {
        cc[n].c = base;
        cc[n].c.gemm_budget_bytes = budgets[i];
        cc[n].chunks = expected[i];
    }
    /* 5 groups, 2 per chunk: 3 chunks, the last one group */
    cc[n].c = mask_case(5, 1, 61, 90, 8);
    cc[n].c.b = 1, cc[n].c.bias = BIAS_BROADCAST, cc[n].c.left = 10, cc[n].c.right = 3;
    cc[n].c.gemm_budget_bytes = 2 * 61 * 90 * 4, cc[n++].chunks = 3;
    /* rows of one group: 41 fit, 5 chunks of 41 rows (the last 39); Nq > Nk, so the first
       chunk's rows see no key; global tokens reach outside the window of a chunk's rows */
    cc[n].c = mask_case(1, 1, 203, 150, 9);
    cc[n].c.b = 1, cc[n].c.causal = 1, cc[n].c.left = 40, cc[n].c.right = 0;
    cc[n].c.globals[0] = 5, cc[n].c.globals[1] = 120, cc[n].c.num_globals = 2;
    cc[n].c.gemm_budget_bytes = 41 * 150 * 4, cc[n++].chunks = 5;
    /* one row a chunk, float16 in and out, GQA, causal Nq < Nk: 2*2 groups * 7 rows */
    cc[n].c = mask_case(2, 1, 7, 300, 10);
    cc[n].c.causal = 1, cc[n].c.bias = BIAS_BROADCAST;
    cc[n].c.dtype = cc[n].c.out_dtype = CLATTN_F16;
    cc[n].c.gemm_budget_bytes = 300 * 4 + 3, cc[n++].chunks = 28;
    /* 4 rows fit: 3 chunks of 3 rows per group, BHSD with offsets, dilated window */
    cc[n].c = mask_case(3, 3, 9, 40, 11);
    cc[n].c.layout = CLATTN_LAYOUT_BHSD, cc[n].c.offset = 7, cc[n].c.left = 6;
    cc[n].c.dilation = 2, cc[n].c.gemm_budget_bytes = 4 * 40 * 4, cc[n++].chunks = 18;
    *count = n;
}

Test(gemm, chunk_boundaries) {
    chunk_case cc[16];
    size_t n = 0;
    chunk_cases(cc, &n);
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs);
    for (size_t dev = 0; dev < devices; dev++)
        for (size_t i = 0; i < n; i++) {
            clattn_stats s =
                expect_case(ctxs[dev], &cc[i].c, CLATTN_PATH_GEMM, CLATTN_VARIANT_AUTO);
            cr_expect_eq(s.path, CLATTN_PATH_GEMM);
            cr_expect_eq(s.chunks, cc[i].chunks, "case %zu on device %zu: %u chunks, expected %u",
                         i, dev, s.chunks, cc[i].chunks);
            if (cc[i].c.gemm_budget_bytes)
                cr_expect_leq((size_t)s.block_m * cc[i].c.nk * 4, cc[i].c.gemm_budget_bytes,
                              "case %zu: %u score rows of %zu keys exceed the budget", i, s.block_m,
                              cc[i].c.nk);
        }
}

/* O and LSE of one call with a given budget (host arrays, float32). */
static void run_with_budget(clattn_context *ctx, clattn_attention_desc *d, const float *q,
                            const float *k, const float *v, float *o, float *lse, size_t budget) {
    d->gemm_budget_bytes = budget;
    ASSERT_OK(ctx, clattn_attention_host(ctx, d, q, k, v, o, lse));
}

/* The same call in 1, 2, 3 and one-row chunks gives the same bits: every score row and every
 * output row is computed the same way whatever chunk it falls in. */
Test(gemm, results_do_not_depend_on_chunking) {
    const size_t nq = 150, nk = 180, heads = 3, d64 = 64, rows = heads * nq;
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, heads, 1, nq, nk, d64, d64);
    d.path = CLATTN_PATH_GEMM;
    d.causal = 1;
    d.window_left = 70;
    float *q = malloc(rows * d64 * 4), *k = malloc(nk * d64 * 4), *v = malloc(nk * d64 * 4);
    float *o[2] = {calloc(rows * d64, 4), calloc(rows * d64, 4)};
    float *lse[2] = {malloc(rows * 4), malloc(rows * 4)};
    fill_uniform(q, rows * d64, 1), fill_uniform(k, nk * d64, 2), fill_uniform(v, nk * d64, 3);
    size_t budgets[] = {heads * nq * nk * 4, nq * nk * 4, 50 * nk * 4, nk * 4};
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs);
    for (size_t dev = 0; dev < devices; dev++) {
        run_with_budget(ctxs[dev], &d, q, k, v, o[0], lse[0], 0);
        for (size_t b = 0; b < COUNT(budgets); b++) {
            run_with_budget(ctxs[dev], &d, q, k, v, o[1], lse[1], budgets[b]);
            cr_expect(memcmp(o[0], o[1], rows * d64 * 4) == 0 &&
                          memcmp(lse[0], lse[1], rows * 4) == 0,
                      "device %zu: a budget of %zu bytes changes the result", dev, budgets[b]);
        }
    }
    free(q), free(k), free(v), free(o[0]), free(o[1]), free(lse[0]), free(lse[1]);
}

/* ---------------------------------------------------------------- NaN and inf in V */

/* bad_value poisons V[b=0, kvh=0, key 1, dim 0] with NaN (1) or +inf (2). The reference then
 * has NaN or inf in dim 0 of exactly the rows of kv head 0's query heads that see key 1 with
 * P > 0, and finite values everywhere else; check_cases wants the same positions. A GEMM
 * alone (0 * NaN = NaN) would spread the value to every row of those heads. The cases below
 * leave many rows without key 1: causal with Nq > Nk (empty rows too), windows, and chunks
 * whose key range starts after key 1. */
static size_t bad_value_cases(attn_case *cases) {
    size_t n = 0;
    /* every row sees key 1; batch entry 1 and kv head 1 stay finite */
    cases[n] = mask_case(4, 2, 30, 45, 200);
    /* causal, Nq > Nk: rows 0..19 see no key (O = 0), row 20 only key 0, the rest key 1 */
    cases[++n] = mask_case(2, 1, 60, 40, 201);
    cases[n].causal = 1;
    /* causal window (GQA: kv head 0 serves 4 query heads): only rows 1..6 see key 1 */
    cases[++n] = mask_case(4, 1, 70, 70, 202);
    cases[n].causal = 1, cases[n].left = 5;
    /* a window around the diagonal, BHSD with an offset, Dqk != Dv */
    cases[++n] = mask_case(3, 1, 50, 50, 203);
    cases[n].left = 3, cases[n].right = 2, cases[n].layout = CLATTN_LAYOUT_BHSD;
    cases[n].offset = 7;
    /* float16 in and out, in only, out only: causal window, GQA */
    for (int i = 0; i < 3; i++) {
        cases[++n] = mask_case(4, 2, 64, 80, 204 + i);
        cases[n].causal = 1, cases[n].left = 20;
        cases[n].dtype = i != 2 ? CLATTN_F16 : CLATTN_F32;
        cases[n].out_dtype = i != 1 ? CLATTN_F16 : CLATTN_F32;
    }
    /* rows of one group per chunk (25 rows of 100 keys): the window puts key 1 outside the key
       range of the later chunks */
    cases[++n] = mask_case(2, 1, 100, 100, 207);
    cases[n].causal = 1, cases[n].left = 10, cases[n].gemm_budget_bytes = 25 * 100 * 4;
    /* the same with float16 O, and with whole groups per chunk (GQA, B = 2: groups of kv head
       0 in the first chunk only) */
    cases[n + 1] = cases[n], cases[n + 1].out_dtype = CLATTN_F16, n++;
    cases[++n] = mask_case(4, 2, 40, 50, 208);
    cases[n].causal = 1, cases[n].right = 0, cases[n].left = 8;
    cases[n].gemm_budget_bytes = 3 * 40 * 50 * 4;
    /* a global token at key 1 (seen by all), a block layout, a bias with -inf entries */
    cases[++n] = mask_case(2, 1, 40, 60, 209);
    cases[n].left = 2, cases[n].right = 2, cases[n].globals[0] = 1, cases[n].num_globals = 1;
    cases[++n] = mask_case(4, 2, 50, 70, 210);
    cases[n].block_layout = LAYOUT_PER_HEAD, cases[n].bq = 8, cases[n].bk = 8;
    cases[++n] = mask_case(2, 2, 50, 50, 211);
    cases[n].bias = BIAS_FULL, cases[n].causal = 1;
    return n + 1;
}

Test(gemm, nan_and_inf_in_v_reach_only_the_rows_that_see_them) {
    attn_case cases[2 * 16];
    size_t n = bad_value_cases(cases);
    cr_assert_leq(2 * n, COUNT(cases));
    for (size_t i = 0; i < n; i++) {
        cases[n + i] = cases[i];
        cases[i].bad_value = 1;     /* NaN */
        cases[n + i].bad_value = 2; /* +inf */
    }
    expect_all_pass(cases, 2 * n);
}

/* The normal case pays one pass over V and B*Hkv*Nk flag bytes: only a call whose V holds NaN
 * or inf allocates the bad keys' list, their rows and, for float32 V, a float32 copy of V
 * without them (float16 V is zeroed in its widened scratch). device_bytes shows which ran. */
Test(gemm, finite_v_takes_the_fast_path) {
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs);
    for (size_t dev = 0; dev < devices; dev++)
        for (int f16 = 0; f16 < 2; f16++) {
            attn_case c = mask_case(2, 1, 64, 64, 220); /* V: 64 keys * 40 dims */
            c.b = 1, c.causal = 1;
            c.dtype = f16 ? CLATTN_F16 : CLATTN_F32;
            uint64_t v_bytes = 64 * 40 * 4, scores = 2 * 64 * 64 * 4;
            uint64_t widened = f16 ? 64 * (48 + 40) * 4 + 2 * 64 * 48 * 4 : 0; /* K, V, Q */
            clattn_stats clean = expect_case(ctxs[dev], &c, CLATTN_PATH_GEMM, CLATTN_VARIANT_AUTO);
            c.bad_value = 2;
            clattn_stats bad = expect_case(ctxs[dev], &c, CLATTN_PATH_GEMM, CLATTN_VARIANT_AUTO);
            cr_expect_lt(clean.device_bytes, scores + widened + 64 + 1024, "%s: %llu bytes",
                         f16 ? "f16" : "f32", (unsigned long long)clean.device_bytes);
            /* list starts (B*Hkv + 1 words), one key, its row of 40 floats, the copy of V */
            uint64_t extra = 2 * 4 + 4 + 40 * 4 + (f16 ? 0 : v_bytes);
            cr_expect_eq(bad.device_bytes, clean.device_bytes + extra, "%s: %llu vs %llu bytes",
                         f16 ? "f16" : "f32", (unsigned long long)bad.device_bytes,
                         (unsigned long long)clean.device_bytes);
        }
}

/* ---------------------------------------------------------------- AUTO falls back */

/* With a fused kernel's build failing (the test hook of program.c), AUTO hands the call to the
 * next row of the variant table that auto uses on the device (on PoCL lanes, gemm; on GPUs
 * flash, rowwise, gemm; on rusticl's llvmpipe rowwise, gemm), and is right. Naming the failing
 * variant reports the build failure, which shows that the hook took effect. Every fused variant, on
 * every device. */
static void expect_fallback_on_build_failure(clattn_context *ctx, const attn_case *c) {
    static const struct {
        clattn_variant variant;
        const char *file;
    } variants[] = {{CLATTN_VARIANT_LANES, "lanes.cl"},
                    {CLATTN_VARIANT_ROWWISE, "rowwise.cl"},
                    {CLATTN_VARIANT_FLASH, "flash.cl"}};
    /* auto's order on this device: the rows it uses, in the table's order */
    static const clattn_variant table_order[] = {CLATTN_VARIANT_LANES, CLATTN_VARIANT_FLASH,
                                                 CLATTN_VARIANT_ROWWISE, CLATTN_VARIANT_GEMM};
    clattn_variant order[COUNT(table_order)];
    size_t used = 0;
    for (size_t i = 0; i < COUNT(table_order); i++) {
        clattn_variant_info vi;
        clattn_variant_info_init(&vi);
        cr_assert_eq(clattn_variant_describe(ctx, table_order[i], &vi), CLATTN_SUCCESS);
        if (vi.used_by_auto) order[used++] = table_order[i];
    }
    cr_assert_geq(used, 2, "auto uses fewer than two rows here: nothing to fall back to");
    for (size_t i = 0; i < COUNT(variants); i++) {
        clattn_variant_info vi;
        clattn_variant_info_init(&vi);
        cr_assert_eq(clattn_variant_describe(ctx, variants[i].variant, &vi), CLATTN_SUCCESS);
        if (!vi.supported) continue; /* refused on this device (rusticl): it is never built */
        setenv("CLATTN_TEST_FAIL_BUILD", variants[i].file, 1);
        case_result r;
        case_run(ctx, c, CLATTN_PATH_FUSED, variants[i].variant, &r);
        cr_expect_eq(r.status, CLATTN_ERR_BUILD, "%s did not fail to build: %s", variants[i].file,
                     r.message);
        clattn_stats s = expect_case(ctx, c, CLATTN_PATH_AUTO, CLATTN_VARIANT_AUTO);
        clattn_variant expected = order[0] == variants[i].variant ? order[1] : order[0];
        cr_expect_eq(s.path, expected == CLATTN_VARIANT_GEMM ? CLATTN_PATH_GEMM : CLATTN_PATH_FUSED,
                     "%s failing: AUTO ran path %d", variants[i].file, (int)s.path);
        cr_expect_eq(s.variant, expected, "%s failing: AUTO ran variant %s", variants[i].file,
                     clattn_variant_name(s.variant));
        unsetenv("CLATTN_TEST_FAIL_BUILD");
    }
}

Test(gemm, auto_falls_back_to_gemm) {
    attn_case c = mask_case(4, 2, 77, 90, 12);
    c.causal = 1, c.bias = BIAS_BROADCAST;
    /* head dims beyond the tiled kernels' 256 (lanes and split take them up to 576), and past
       576; 65 query rows a head, 130 a kv head */
    static const size_t dims[][2] = {{512, 512}, {320, 64}, {64, 300}, {640, 64}};
    attn_case big[COUNT(dims)];
    for (size_t i = 0; i < COUNT(dims); i++) {
        case_init(&big[i], 1, 2, 1, 65, 97, dims[i][0], dims[i][1]);
        big[i].causal = i != 1;
        big[i].dtype = i == 2 ? CLATTN_F16 : CLATTN_F32;
        big[i].seed = 70 + i;
    }
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs);
    for (size_t dev = 0; dev < devices; dev++) {
        expect_fallback_on_build_failure(ctxs[dev], &c); /* before any fused build is cached */
        /* the table's order, verdicts aside: which rows another test verified does not matter */
        cr_assert_eq(clattn_context_set_verify(ctxs[dev], CLATTN_VERIFY_TRUST, 0), CLATTN_SUCCESS);
        for (size_t i = 0; i < COUNT(big); i++) {
            clattn_variant want = dims[i][0] <= 576 && dims[i][1] <= 576
                                      ? auto_row_for_wide(ctxs[dev], 65)
                                      : CLATTN_VARIANT_GEMM;
            clattn_stats s = expect_case(ctxs[dev], &big[i], CLATTN_PATH_AUTO, CLATTN_VARIANT_AUTO);
            cr_expect_eq(s.variant, want, "Dqk=%zu Dv=%zu: AUTO ran %s, not %s", dims[i][0],
                         dims[i][1], clattn_variant_name(s.variant), clattn_variant_name(want));
        }
        cr_assert_eq(clattn_context_set_verify(ctxs[dev], CLATTN_VERIFY_FROM_ENV, 0),
                     CLATTN_SUCCESS);
        clattn_stats s = expect_case(ctxs[dev], &c, CLATTN_PATH_AUTO, CLATTN_VARIANT_AUTO);
        cr_expect_eq(s.path, CLATTN_PATH_FUSED, "without the failure AUTO is fused again");
    }
}

/* ---------------------------------------------------------------- errors */

/* A call of `n` queries and keys (float32, 1 head, D=16) on host arrays; returns its status. */
static clattn_status small_call(clattn_context *ctx, size_t n, size_t budget, int causal) {
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, n, n, 16, 16);
    d.path = CLATTN_PATH_GEMM;
    d.gemm_budget_bytes = budget;
    d.causal = causal;
    float *x = calloc(n * 16, sizeof(float)), *o = calloc(n * 16, sizeof(float));
    clattn_status status = clattn_attention_host(ctx, &d, x, x, x, o, NULL);
    free(x);
    free(o);
    return status;
}

static void expect_message(clattn_context *ctx, const char *part) {
    cr_expect(strstr(clattn_context_last_error(ctx), part) != NULL, "'%s' lacks '%s'",
              clattn_context_last_error(ctx), part);
}

Test(gemm, errors_are_clear_statuses) {
    clattn_context *ctx = first_context();
    /* CLBlast rejecting an argument (ldc = 0, by the test-only switch) */
    setenv("CLATTN_TEST_FAIL_GEMM", "1", 1);
    cr_expect_eq(small_call(ctx, 64, 0, 0), CLATTN_ERR_BLAS);
    expect_message(ctx, "CLBlast");
    expect_message(ctx, "CLBlastInvalidLeadDimC (-1014)");
    expect_message(ctx, "Q*K^T");
    unsetenv("CLATTN_TEST_FAIL_GEMM");
    ASSERT_OK(ctx, small_call(ctx, 64, 0, 0)); /* nothing left behind */

    /* a budget below one row of scores (300 keys: 1200 bytes) */
    cr_expect_eq(small_call(ctx, 300, 1199, 0), CLATTN_ERR_OUT_OF_MEMORY);
    expect_message(ctx, "1199 bytes");
    expect_message(ctx, "Nk=300 keys need 1200 bytes");
    ASSERT_OK(ctx, small_call(ctx, 300, 1200, 1));

    /* the environment's budget: malformed, then 1 MiB = 256 rows of 1024 keys = 4 chunks,
       and desc->gemm_budget_bytes over it */
    setenv("CLATTN_GEMM_BUDGET_MB", "12x", 1);
    cr_expect_eq(small_call(ctx, 1024, 0, 0), CLATTN_ERR_INVALID_ARGUMENT);
    expect_message(ctx, "CLATTN_GEMM_BUDGET_MB=12x");
    setenv("CLATTN_GEMM_BUDGET_MB", "1", 1);
    clattn_stats s;
    clattn_stats_init(&s);
    ASSERT_OK(ctx, small_call(ctx, 1024, 0, 1));
    ASSERT_OK(ctx, clattn_context_last_stats(ctx, &s));
    cr_expect_eq(s.chunks, 4);
    ASSERT_OK(ctx, small_call(ctx, 1024, 1024 * 1024 * 4, 1));
    ASSERT_OK(ctx, clattn_context_last_stats(ctx, &s));
    cr_expect_eq(s.chunks, 1);
    unsetenv("CLATTN_GEMM_BUDGET_MB");
}

/* ---------------------------------------------------------------- statistics, timing, events */

Test(gemm, stats_timing_and_events_on_device_buffers) {
    clattn_context *ctx = first_context();
    const size_t n = 256, heads = 2, dim = 32, count = heads * n * dim;
    cl_context cl = clattn_context_cl_context(ctx);
    float *host = malloc(count * sizeof(float));
    fill_uniform(host, count, 5);
    cl_mem x = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, count * 4, host, NULL);
    cl_mem o = clCreateBuffer(cl, CL_MEM_READ_WRITE, count * 4, NULL, NULL);
    cl_mem lse = clCreateBuffer(cl, CL_MEM_READ_WRITE, heads * n * 4, NULL, NULL);
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BHSD, 1, heads, heads, n, n, dim, dim);
    d.path = CLATTN_PATH_GEMM;
    d.causal = 1;
    d.gemm_budget_bytes = 64 * n * 4; /* 64 rows: 8 chunks */
    ASSERT_OK(ctx, clattn_context_set_timing(ctx, 1));
    cl_event done = NULL;
    ASSERT_OK(ctx, clattn_attention(ctx, &d, x, x, x, o, lse, &done));
    cr_assert_not_null(done);
    cr_expect_eq(clWaitForEvents(1, &done), CL_SUCCESS);
    clReleaseEvent(done);
    clattn_stats s;
    clattn_stats_init(&s);
    ASSERT_OK(ctx, clattn_context_last_stats(ctx, &s));
    ASSERT_OK(ctx, clattn_context_set_timing(ctx, 0));
    cr_expect_eq(s.path, CLATTN_PATH_GEMM);
    cr_expect_eq(s.chunks, 8);
    cr_expect_eq(s.block_m, 64);
    cr_expect_eq(s.pairs, heads * n * (n + 1) / 2);
    cr_expect(fabs(s.density - (double)(n + 1) / (2.0 * n)) < 1e-12);
    cr_expect_geq(s.device_bytes, 64 * n * 4);
    cr_expect_lt(s.device_bytes, 64 * n * 4 + 4096);
    cr_expect_gt(s.kernel_ms, 0.0);
    cr_expect(strstr(s.kernel, "gemm") != NULL, "%s", s.kernel);
    float last = 0;
    cr_expect_eq(clEnqueueReadBuffer(clattn_context_queue(ctx), lse, CL_TRUE, 4 * (n - 1), 4, &last,
                                     0, NULL, NULL),
                 CL_SUCCESS);
    cr_expect(isfinite(last), "LSE of the last row: %g", (double)last);
    clReleaseMemObject(x), clReleaseMemObject(o), clReleaseMemObject(lse);
    free(host);
}

/* CLBlast caches its programs process-wide, each holding its cl_context: destroying the last
 * context that used the gemm path lets them go, so a wrapped cl_context is left with the
 * caller's reference only. */
Test(gemm, destroying_the_last_context_releases_clblast_programs) {
    caller_objects mine;
    cr_assert_eq(caller_objects_create(&mine, 0), CL_SUCCESS);
    cl_context cl = mine.context;
    clattn_context *ctx = NULL;
    cr_assert_eq(clattn_context_wrap(&ctx, cl, mine.device, mine.queue), CLATTN_SUCCESS);
    ASSERT_OK(ctx, small_call(ctx, 64, 0, 0));
    clattn_context_destroy(ctx);
    clFinish(mine.queue);
    clReleaseCommandQueue(mine.queue);
    /* PoCL frees finished commands, which hold the context too, on a thread of its own: allow
     * it up to 10 s (CLBlast's cache, when kept, holds its references for good) */
    cl_uint refs = 0;
    for (int wait = 0; wait < 1000; wait++) {
        cr_assert_eq(clGetContextInfo(cl, CL_CONTEXT_REFERENCE_COUNT, sizeof refs, &refs, NULL),
                     CL_SUCCESS);
        if (refs == 1) break;
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    cr_expect_eq(refs, 1, "%u references to the caller's cl_context remain", refs);
    clReleaseContext(cl);
}

/* ---------------------------------------------------------------- a long sequence */

/* Row i of causal attention over N keys is attention of that one query over the keys [0, i]:
 * the reference for a few rows without the N^2 reference of them all. */
static void expect_row(const float *q, const float *k, const float *v, const float *o,
                       const float *lse, size_t i, size_t dim) {
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, 1, i + 1, dim, dim);
    d.causal = 1;
    double ref[256], ref_lse = 0;
    cr_assert_leq(dim, COUNT(ref));
    attn_problem pb;
    cr_assert_eq(problem_build(&d, BIAS_FROM_HOST, NULL, &pb), CLATTN_SUCCESS);
    cr_assert_eq(reference_attention(&pb, q + i * dim, k, v, NULL, ref, &ref_lse), 0);
    problem_release(&pb);
    char label[64];
    snprintf(label, sizeof label, "O row %zu", i);
    cr_expect_eq(compare_outputs(label, o + i * dim, ref, dim, TOL_F32_ATOL, TOL_F32_RTOL), 0);
    case_result r;
    memset(&r, 0, sizeof r);
    compare_lse_values(&lse[i], &ref_lse, 1, &r);
    cr_expect_eq(r.mismatches, 0, "LSE row %zu: %s", i, r.message);
}

Test(gemm, long_sequence_in_bounded_memory) {
    const size_t n = 32768, dim = 64, budget = 64u << 20;
    clattn_context *ctx = first_context();
    float *q = malloc(n * dim * 4), *k = malloc(n * dim * 4), *v = malloc(n * dim * 4);
    float *o = calloc(n * dim, 4), *lse = malloc(n * 4);
    cr_assert(q && k && v && o && lse);
    fill_uniform(q, n * dim, 21), fill_uniform(k, n * dim, 22), fill_uniform(v, n * dim, 23);
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, n, n, dim, dim);
    d.path = CLATTN_PATH_GEMM;
    d.causal = 1;
    d.gemm_budget_bytes = budget;
    ASSERT_OK(ctx, clattn_attention_host(ctx, &d, q, k, v, o, lse));
    clattn_stats s;
    clattn_stats_init(&s);
    ASSERT_OK(ctx, clattn_context_last_stats(ctx, &s));
    cr_expect_eq(s.chunks, n / (budget / (n * 4)), "%u chunks", s.chunks); /* 512 rows each */
    /* the scores, one flag byte per key (rows of V with NaN or inf) and the parameters */
    cr_expect_leq(s.device_bytes, budget + n + 4096, "%llu bytes",
                  (unsigned long long)s.device_bytes);
    cr_expect_lt(s.device_bytes, (uint64_t)n * n * 4 / 32); /* N^2 floats: 4 GiB */
    static const size_t rows[] = {0, 1, 511, 512, 513, 16385, 32766, 32767};
    for (size_t i = 0; i < COUNT(rows); i++) expect_row(q, k, v, o, lse, rows[i], dim);
    free(q), free(k), free(v), free(o), free(lse);
}

/* ---------------------------------------------------------------- every GEMM row */

/* One case through the GEMM path on the context's row; the statistics name the row. */
static void check_on_gemm_row(clattn_context *ctx, clattn_gemm row, const void *one_case) {
    char want[32];
    snprintf(want, sizeof want, "gemm-%s ", clattn_gemm_name(row));
    clattn_stats s = expect_case(ctx, one_case, CLATTN_PATH_GEMM, CLATTN_VARIANT_AUTO);
    cr_expect(strncmp(s.kernel, want, strlen(want)) == 0, "kernel '%s', want %s", s.kernel, want);
}

/* The path on each row of the GEMM table (runtime/gemm/): MHA, GQA and MQA, both layouts with
 * offsets, 16-bit storage, masks, Nq > Nk, a NaN key; the statistics name the row that ran. */
Test(gemm, every_gemm_row_against_the_reference) {
    attn_case cases[7];
    case_init(&cases[0], 2, 4, 4, 67, 67, 64, 64);
    cases[0].causal = 1;
    case_init(&cases[1], 1, 6, 2, 45, 130, 48, 40); /* GQA, cross, Dqk != Dv */
    case_init(&cases[2], 2, 4, 1, 33, 17, 32, 32);  /* MQA, Nq > Nk */
    cases[2].causal = 1;
    case_init(&cases[3], 2, 4, 2, 60, 75, 32, 48);
    cases[3].layout = CLATTN_LAYOUT_BHSD, cases[3].offset = 7;
    case_init(&cases[4], 2, 4, 2, 97, 131, 111, 59);
    cases[4].dtype = CLATTN_F16, cases[4].out_dtype = CLATTN_BF16;
    case_init(&cases[5], 1, 2, 1, 130, 130, 64, 64);
    cases[5].left = 9, cases[5].right = 0;
    case_init(&cases[6], 1, 2, 1, 40, 40, 64, 64);
    cases[6].nan_key = 1;
    for (size_t i = 0; i < COUNT(cases); i++) cases[i].seed = 200 + i;
    for_each_gemm_row(check_on_gemm_row, cases, sizeof cases[0], COUNT(cases));
}
