/*
 * The fused path on every device, every kernel variant (cpu, gpu, flash), against the CPU
 * reference (docs/semantics.md section 4 tolerances): lengths that are not tile multiples, head
 * dims, MHA/GQA/MQA, causal alignment with Nq != Nk, windows, float16, layouts, offsets, special
 * values; argument checks; memory that does not grow with Nq*Nk; causal and windowed calls skipping
 * tiles.
 */
#include <criterion/criterion.h>

#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static void expect_all_pass(const attn_case *cases, size_t n) {
    cr_expect_eq(check_cases(cases, n, CLATTN_PATH_FUSED, CLATTN_VARIANT_AUTO), 0,
                 "failing cases are listed above");
}

Test(fused, lengths_that_are_not_tile_multiples) {
    static const size_t lengths[] = {1, 7, 113, 203, 1023, 1025};
    attn_case cases[2 * COUNT(lengths)];
    size_t n = 0;
    for (size_t i = 0; i < COUNT(lengths); i++) {
        case_init(&cases[n++], 1, 2, 2, lengths[i], lengths[i], 64, 64);
        case_init(&cases[n], 1, 2, 1, lengths[i], lengths[(i + 2) % COUNT(lengths)], 32, 32);
        cases[n++].causal = 1;
    }
    expect_all_pass(cases, n);
}

Test(fused, head_dims_common_and_odd) {
    static const size_t dims[][2] = {{1, 1},     {3, 3},     {32, 32},   {59, 59},
                                     {64, 64},   {80, 80},   {96, 96},   {111, 111},
                                     {128, 128}, {256, 256}, {192, 128}, {64, 17}};
    attn_case cases[COUNT(dims)];
    for (size_t i = 0; i < COUNT(dims); i++) {
        case_init(&cases[i], 1, 2, 2, 70, 93, dims[i][0], dims[i][1]);
        cases[i].causal = i % 2;
        cases[i].seed = 10 + i;
    }
    expect_all_pass(cases, COUNT(dims));
}

Test(fused, mha_gqa_mqa) {
    static const size_t heads[][2] = {{4, 4}, {4, 2}, {6, 3}, {8, 1}, {3, 1}};
    attn_case cases[COUNT(heads)];
    for (size_t i = 0; i < COUNT(heads); i++) {
        case_init(&cases[i], 2, heads[i][0], heads[i][1], 45, 61, 64, 64);
        cases[i].seed = 20 + i;
    }
    expect_all_pass(cases, COUNT(heads));
}

/* Bottom-right alignment: with Nq > Nk the first Nq - Nk rows see nothing (O = 0, LSE = -inf). */
Test(fused, causal_with_more_or_fewer_queries_than_keys) {
    static const size_t shapes[][2] = {{1, 50}, {17, 100}, {64, 64}, {100, 17}, {203, 113}};
    attn_case cases[COUNT(shapes)];
    for (size_t i = 0; i < COUNT(shapes); i++) {
        case_init(&cases[i], 1, 2, 2, shapes[i][0], shapes[i][1], 64, 64);
        cases[i].causal = 1;
        cases[i].seed = 30 + i;
    }
    expect_all_pass(cases, COUNT(cases));
}

Test(fused, windows) {
    static const int64_t windows[][3] = {{0, 0, 0},  {-1, 5, 0},  {9, -1, 0}, {9, 0, 0},
                                         {3, 40, 0}, {20, 20, 1}, {0, 0, 1},  {33, 0, 1}};
    attn_case cases[2 * COUNT(windows)];
    size_t n = 0;
    for (size_t i = 0; i < COUNT(windows); i++)
        for (int cross = 0; cross < 2; cross++) {
            attn_case *c = &cases[n++];
            case_init(c, 1, 2, 1, cross ? 77 : 130, cross ? 150 : 130, 64, 64);
            c->left = windows[i][0];
            c->right = windows[i][1];
            c->causal = (int)windows[i][2];
            c->seed = 40 + n;
        }
    expect_all_pass(cases, n);
}

Test(fused, float16_storage) {
    attn_case cases[4];
    for (size_t i = 0; i < COUNT(cases); i++) {
        case_init(&cases[i], 2, 4, 2, 97, 131, 64, 64);
        cases[i].dtype = i & 1 ? CLATTN_F16 : CLATTN_F32;
        cases[i].out_dtype = i & 2 ? CLATTN_F16 : CLATTN_F32;
        cases[i].causal = i == 3;
        cases[i].seed = 50 + i;
    }
    cases[0].dtype = CLATTN_F16, cases[0].dqk = 111, cases[0].dv = 59; /* odd dims, f16 in */
    expect_all_pass(cases, COUNT(cases));
}

Test(fused, bfloat16_storage) {
    attn_case cases[4];
    for (size_t i = 0; i < COUNT(cases); i++) {
        case_init(&cases[i], 2, 4, 2, 97, 131, 64, 64);
        cases[i].dtype = i & 1 ? CLATTN_BF16 : CLATTN_F32;
        cases[i].out_dtype = i & 2 ? CLATTN_BF16 : CLATTN_F16;
        cases[i].causal = i == 3;
        cases[i].seed = 55 + i;
    }
    cases[1].dqk = 111, cases[1].dv = 59; /* odd dims: partial vectors at storage width */
    expect_all_pass(cases, COUNT(cases));
}

Test(fused, layouts_offsets_and_scale) {
    attn_case cases[4];
    for (size_t i = 0; i < COUNT(cases); i++) {
        case_init(&cases[i], 2, 4, 2, 60, 75, 32, 48);
        cases[i].layout = i & 1 ? CLATTN_LAYOUT_BHSD : CLATTN_LAYOUT_BSHD;
        cases[i].offset = 5 * i;
        cases[i].seed = 60 + i;
    }
    cases[2].scale = 0.3f;
    cases[3].scale = -1.5f;
    cases[3].causal = 1;
    expect_all_pass(cases, COUNT(cases));
}

/* A NaN in K, or a NaN or an infinity in V: NaN or Inf exactly where that key is allowed, the
 * rest untouched (no 0 * NaN from keys a row does not see, nor from a -inf bias). */
Test(fused, nan_and_inf_inputs_stay_where_they_belong) {
    attn_case cases[8];
    case_init(&cases[0], 1, 2, 1, 40, 40, 64, 64);
    cases[0].nan_key = 1;
    cases[1] = cases[0];
    cases[1].causal = 1, cases[1].left = 5, cases[1].right = 0; /* most rows do not see key 0 */
    for (int i = 2; i < 8; i++) {
        case_init(&cases[i], 2, 4, 2, 70, 90, 64, 64);
        cases[i].bad_value = 1 + i % 2; /* NaN, +inf in V row 1 */
        cases[i].seed = 70 + i;
    }
    cases[2].causal = 1;
    cases[3].left = cases[3].right = 3;
    cases[4].dtype = cases[4].out_dtype = CLATTN_F16, cases[4].causal = 1;
    cases[5].left = cases[5].right = 2, cases[5].num_globals = 2, cases[5].globals[0] = 1;
    cases[5].globals[1] = 50, cases[5].bias = BIAS_BROADCAST; /* -inf bias at some (i, 1) */
    cases[6].block_layout = LAYOUT_SHARED, cases[6].bq = cases[6].bk = 16;
    cases[7].bias = BIAS_FULL, cases[7].dilation = 2, cases[7].left = 8, cases[7].right = 8;
    expect_all_pass(cases, COUNT(cases));
}

/* Global keys against windows bounded on one side, causal rows, more queries than keys and the
 * score modifiers: the global-key pass masks its tiles on whole vectors (lanes) where there is
 * no block layout or dilation. */
Test(fused, global_keys_outside_one_sided_windows) {
    attn_case cases[5];
    for (size_t i = 0; i < COUNT(cases); i++) {
        case_init(&cases[i], 1, 2, 1, 203, 203, 64, 64);
        cases[i].num_globals = 2, cases[i].globals[0] = 2, cases[i].globals[1] = 150;
        cases[i].seed = 140 + i;
    }
    cases[0].left = -1, cases[0].right = 3;
    cases[1].left = 5, cases[1].right = -1;
    cases[2].causal = 1, cases[2].left = 5, cases[2].nq = 70, cases[2].num_globals = 3;
    cases[2].globals[2] = 190;
    cases[3].left = cases[3].right = 4, cases[3].nq = 300, cases[3].nk = 100;
    cases[3].globals[1] = 60;
    cases[4].left = cases[4].right = 6, cases[4].softcap = 15.0f, cases[4].alibi = 1;
    cases[4].layout = CLATTN_LAYOUT_BHSD;
    expect_all_pass(cases, COUNT(cases));
}

/* V values near FLT_MAX: softmax averages them, so O stays finite and matches the reference
 * (the CPU variant keeps its accumulator a combination of V rows with weights summing to at
 * most 1). 70 keys span three key tiles; the scores differ, so the maximum moves. */
Test(fused, values_near_the_float_maximum_stay_finite) {
    enum { NQ = 5, NK = 70, D = 8 };
    float q[NQ * D], k[NK * D], v[NK * D], o[NQ * D], ref[NQ * D];
    fill_uniform(q, NQ * D, 11);
    fill_uniform(k, NK * D, 12);
    for (int j = 0; j < NK * D; j++) v[j] = (j % 3 ? 3.0e38f : -2.9e38f) * (j % 2 ? 1.0f : 0.98f);
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs);
    for (size_t dev = 0; dev < devices; dev++) {
        clattn_attention_desc d;
        cr_assert_eq(clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, NQ, NK, D, D),
                     CLATTN_SUCCESS);
        d.path = CLATTN_PATH_REFERENCE;
        ASSERT_OK(ctxs[dev], clattn_attention_host(ctxs[dev], &d, q, k, v, ref, NULL));
        d.path = CLATTN_PATH_FUSED;
        d.variant = CLATTN_VARIANT_LANES;
        ASSERT_OK(ctxs[dev], clattn_attention_host(ctxs[dev], &d, q, k, v, o, NULL));
        for (int x = 0; x < NQ * D; x++)
            cr_expect(isfinite(o[x]) && fabsf(o[x] - ref[x]) <= TOL_F32_RTOL * fabsf(ref[x]),
                      "device %zu: O[%d] = %g, the reference %g", dev, x, (double)o[x],
                      (double)ref[x]);
    }
}

/* ---------------------------------------------------------------- checks before launch */

static clattn_context *first_context(void) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    return ctxs[0];
}

Test(fused, bad_calls_are_named_before_any_launch) {
    clattn_context *ctx = first_context();
    cl_context cl = clattn_context_cl_context(ctx);
    cl_mem buf = clCreateBuffer(cl, CL_MEM_READ_WRITE, 4096, NULL, NULL);
    cl_mem out = clCreateBuffer(cl, CL_MEM_READ_WRITE, 4096, NULL, NULL);
    clattn_attention_desc d;
    ASSERT_OK(ctx, clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 3, 2, 4, 4, 8, 8));
    char message[256];
    clattn_attention_desc good, named; /* d's heads do not divide: the checks would stop there */
    ASSERT_OK(ctx, clattn_attention_desc_init(&good, CLATTN_LAYOUT_BSHD, 1, 2, 1, 4, 4, 8, 8));
    named = good, named.path = (clattn_path)7;
    cr_expect_eq(clattn_attention_desc_check(&named, NULL, message, sizeof message),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(message, "path 7 is none of") != NULL, "'%s'", message);
    named = good, named.variant = (clattn_variant)99;
    cr_expect_eq(clattn_attention_desc_check(&named, NULL, message, sizeof message),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(message, "variant 99 is no variant") != NULL, "'%s'", message);
    d.path = CLATTN_PATH_FUSED;
    cr_assert_eq(clattn_attention(ctx, &d, buf, buf, buf, out, NULL, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(clattn_context_last_error(ctx), "multiple") != NULL, "%s",
              clattn_context_last_error(ctx));

    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 2, 2, 64, 64, 16, 16);
    d.path = CLATTN_PATH_FUSED; /* Q needs 64*2*16*4 = 8192 bytes: more than the buffer */
    cr_assert_eq(clattn_attention(ctx, &d, buf, buf, buf, out, NULL, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(clattn_context_last_error(ctx), "Q needs 8192") != NULL, "%s",
              clattn_context_last_error(ctx));

    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, 1, 1, 600, 8);
    d.path = CLATTN_PATH_FUSED; /* above the split variant's 576 (the tiled ones stop at 256) */
    cr_assert_eq(clattn_attention(ctx, &d, buf, buf, buf, out, NULL, NULL), CLATTN_ERR_UNSUPPORTED);
    cr_assert(strstr(clattn_context_last_error(ctx), "576") != NULL, "%s",
              clattn_context_last_error(ctx));

    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, 2, 2, 8, 8);
    d.q.stride_seq = SIZE_MAX / 2; /* the extent overflows */
    cr_assert_eq(clattn_attention(ctx, &d, buf, buf, buf, out, NULL, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(clattn_context_last_error(ctx), "overflow") != NULL);

    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, 2, 2, 8, 8);
    cr_assert_eq(clattn_attention(ctx, &d, buf, buf, buf, buf, NULL, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT, "O aliasing an input");
    cr_assert_eq(clattn_attention(ctx, &d, buf, buf, buf, out, buf, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT, "LSE aliasing an input");
    cr_assert(strstr(clattn_context_last_error(ctx), "LSE overlaps Q") != NULL, "%s",
              clattn_context_last_error(ctx));
    d.bias = out;
    cr_assert_eq(clattn_attention(ctx, &d, buf, buf, buf, out, NULL, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT, "O aliasing the bias");
    d.bias = NULL;
    unsigned char layout = 1;
    d.block_layout = &layout;
    d.block_q = (size_t)INT32_MAX + 1;
    d.block_k = 1;
    cr_assert_eq(clattn_attention(ctx, &d, buf, buf, buf, out, NULL, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(clattn_context_last_error(ctx), "block sizes") != NULL);
    d.block_layout = NULL;
    cr_assert_eq(clattn_attention(ctx, &d, NULL, buf, buf, out, NULL, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_assert_eq(clattn_attention(ctx, NULL, buf, buf, buf, out, NULL, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_assert_eq(clattn_attention(NULL, &d, buf, buf, buf, out, NULL, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT);
    d.o.stride_seq = 4; /* rows of 8 values 4 apart overlap */
    cr_assert_eq(clattn_attention(ctx, &d, buf, buf, buf, out, NULL, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(clattn_context_last_error(ctx), "overlap") != NULL);
    clReleaseMemObject(buf);
    clReleaseMemObject(out);
}

Test(fused, zero_sizes_are_rejected) {
    clattn_attention_desc d;
    cr_assert_eq(clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 0, 1, 4, 4, 8, 8),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_assert_eq(clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 0, 1, 1, 4, 4, 8, 8),
                 CLATTN_ERR_INVALID_ARGUMENT);
    clattn_context *ctx = first_context();
    float x[64] = {0};
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, 4, 4, 8, 8);
    d.len_k = 0;
    cr_assert_eq(clattn_attention_host(ctx, &d, x, x, x, x, NULL), CLATTN_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(clattn_context_last_error(ctx), ">= 1") != NULL);
}

/* ---------------------------------------------------------------- cost and memory */

static int count_tiles; /* run_for_stats asks the kernels to count their tiles */

static clattn_stats run_for_stats(size_t n, int causal, int64_t window) {
    clattn_context *ctx = first_context();
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 2, 2, n, n, 64, 64);
    d.path = CLATTN_PATH_FUSED;
    d.causal = causal;
    d.window_left = d.window_right = window;
    d.count_tiles = count_tiles;
    size_t count = 2 * n * 64;
    float *x = calloc(count, sizeof(float)), *o = calloc(count, sizeof(float));
    ASSERT_OK(ctx, clattn_attention_host(ctx, &d, x, x, x, o, NULL));
    clattn_stats stats;
    clattn_stats_init(&stats);
    ASSERT_OK(ctx, clattn_context_last_stats(ctx, &stats));
    free(x);
    free(o);
    return stats;
}

/* Device memory grows with N, not N^2: 4x the length may at most quadruple (plus a constant)
 * what the call allocates. */
Test(fused, device_memory_does_not_grow_with_nq_times_nk) {
    clattn_stats small = run_for_stats(512, 0, -1), large = run_for_stats(2048, 0, -1);
    cr_assert_eq(small.path, CLATTN_PATH_FUSED);
    cr_assert_gt(small.device_bytes, 0);
    cr_assert_leq(large.device_bytes, 4 * small.device_bytes + 4096, "%llu vs %llu bytes",
                  (unsigned long long)large.device_bytes, (unsigned long long)small.device_bytes);
    cr_assert_lt(large.device_bytes, 2048ull * 2048 * 2 * sizeof(float) / 4);
}

/* The variant follows the device type unless desc.variant or $CLATTN_KERNEL says otherwise. */
Test(fused, variant_choice_and_its_override) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_device_info info;
    clattn_device_info_init(&info);
    clattn_context_device_info(ctxs[0], &info);
    clattn_variant by_type =
        info.type & CL_DEVICE_TYPE_CPU ? CLATTN_VARIANT_LANES : CLATTN_VARIANT_FLASH;
    unsetenv("CLATTN_KERNEL");
    cr_expect_eq(run_for_stats(64, 0, -1).variant, by_type);
    setenv("CLATTN_KERNEL", "rowwise", 1);
    cr_expect_eq(run_for_stats(64, 0, -1).variant, CLATTN_VARIANT_ROWWISE);
    setenv("CLATTN_KERNEL", "lanes", 1);
    cr_expect_eq(run_for_stats(64, 0, -1).variant, CLATTN_VARIANT_LANES);
    setenv("CLATTN_KERNEL", "gpu", 1); /* the names of 0.2, read until 0.4 */
    cr_expect_eq(run_for_stats(64, 0, -1).variant, CLATTN_VARIANT_ROWWISE);
    setenv("CLATTN_KERNEL", "cpu", 1);
    cr_expect_eq(run_for_stats(64, 0, -1).variant, CLATTN_VARIANT_LANES);
    setenv("CLATTN_KERNEL", "flash", 1);
    cr_expect_eq(run_for_stats(64, 0, -1).variant, CLATTN_VARIANT_FLASH);
    setenv("CLATTN_KERNEL", "auto", 1);
    cr_expect_eq(run_for_stats(64, 0, -1).variant, by_type);

    setenv("CLATTN_KERNEL", "cuda", 1); /* a typo is named, not ignored */
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, 4, 4, 8, 8);
    d.path = CLATTN_PATH_FUSED;
    float x[32] = {0}, o[32];
    cr_expect_eq(clattn_attention_host(ctxs[0], &d, x, x, x, o, NULL), CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(ctxs[0]), "CLATTN_KERNEL=cuda") != NULL, "%s",
              clattn_context_last_error(ctxs[0]));
    unsetenv("CLATTN_KERNEL");
}

/* Causal visits about half of the key tiles, a window O(N * window) of them: counted by the
 * kernels themselves (desc.count_tiles), and equal to what the planner listed. */
Test(fused, causal_and_windows_skip_tiles) {
    count_tiles = 1;
    clattn_stats full = run_for_stats(1024, 0, -1), causal = run_for_stats(1024, 1, -1);
    clattn_stats window = run_for_stats(1024, 0, 64);
    count_tiles = 0;
    const clattn_stats *all[] = {&full, &causal, &window};
    for (size_t i = 0; i < COUNT(all); i++)
        cr_expect_eq(all[i]->tiles_counted, all[i]->tiles_visited,
                     "run %zu: the kernels visited %llu tiles, the planner listed %llu", i,
                     (unsigned long long)all[i]->tiles_counted,
                     (unsigned long long)all[i]->tiles_visited);
    cr_assert_eq(full.tiles_counted, full.tiles_total);
    double half = (double)causal.tiles_counted / (double)full.tiles_counted;
    cr_assert(half > 0.45 && half < 0.6, "causal visits %.2f of the tiles", half);
    double band = (double)window.tiles_counted / (double)window.tiles_total; /* its own tiles */
    cr_assert(band < 0.2, "a (64,64) window at N=1024 visits %.2f of the tiles", band);
    cr_assert_eq(causal.pairs, 2ull * 1024 * 1025 / 2);
}

/* The CPU variant's planner splits the rows finer when a call has few of them, so that every
 * compute unit gets work: 16-row tiles (one vector of rows) for 64 rows of one head; the
 * table's taller tiles once there are 8 work-items a compute unit at that size. */
static clattn_stats run_cpu_variant(size_t heads, size_t n, int64_t window) {
    clattn_context *ctx = first_context();
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, heads, heads, n, n, 64, 64);
    d.window_left = d.window_right = window;
    d.path = CLATTN_PATH_FUSED;
    d.variant = CLATTN_VARIANT_LANES;
    size_t count = heads * n * 64;
    float *x = calloc(count, sizeof(float)), *o = calloc(count, sizeof(float));
    ASSERT_OK(ctx, clattn_attention_host(ctx, &d, x, x, x, o, NULL));
    clattn_stats stats;
    clattn_stats_init(&stats);
    ASSERT_OK(ctx, clattn_context_last_stats(ctx, &stats));
    free(x);
    free(o);
    return stats;
}

Test(fused, cpu_tiles_split_rows_finer_for_small_calls) {
    clattn_device_info info;
    clattn_device_info_init(&info);
    clattn_context_device_info(first_context(), &info);
    clattn_stats tiny = run_cpu_variant(1, 64, -1), large = run_cpu_variant(8, 2048, -1);
    cr_expect_eq(tiny.block_m, 16, "64 rows in tiles of %u", tiny.block_m);
    cr_expect_eq(tiny.tiles_visited, 4ull * 64 / tiny.block_n);
    cr_expect_eq(large.block_m % 16, 0);
    uint64_t items = 8ull * ((2048 + large.block_m - 1) / large.block_m);
    if (large.block_m > 16)
        cr_expect_geq(items, 8ull * info.compute_units, "%llu work-items for %u units",
                      (unsigned long long)items, info.compute_units);
    if (info.compute_units <= 8) cr_expect_gt(large.block_m, 16);
}

/* Rows that a window keeps short (here 65 keys of 2048) take 16 x 16 tiles, which walk fewer
 * keys outside the band; rows of 129 keys, and a window that covers the keys, compute as full
 * attention does. */
Test(fused, cpu_tiles_shrink_for_short_window_rows) {
    clattn_stats band = run_cpu_variant(8, 2048, 32), longer = run_cpu_variant(8, 2048, 64);
    clattn_stats wide = run_cpu_variant(8, 2048, 2048), full = run_cpu_variant(8, 2048, -1);
    cr_expect(band.block_m == 16 && band.block_n == 16, "a (32, 32) window ran %ux%u tiles",
              band.block_m, band.block_n);
    cr_expect(longer.block_m == full.block_m && longer.block_n == full.block_n,
              "a (64, 64) window ran %ux%u tiles, full attention %ux%u", longer.block_m,
              longer.block_n, full.block_m, full.block_n);
    cr_expect(wide.block_m == full.block_m && wide.block_n == full.block_n,
              "a window over every key ran %ux%u tiles, full attention %ux%u", wide.block_m,
              wide.block_n, full.block_m, full.block_n);
}

/* Rows whose keys span 4 MiB of K and V or more (8192 keys of 512 bytes) take 48-row tiles,
 * which stream the keys a third less often than 32 rows; half as many keys, or a window of 257
 * of them, keep 32 rows. */
Test(fused, cpu_tiles_grow_for_rows_that_see_many_keys) {
    clattn_device_info info;
    clattn_device_info_init(&info);
    clattn_context_device_info(first_context(), &info);
    clattn_stats many = run_cpu_variant(1, 8192, -1), half = run_cpu_variant(1, 4096, -1);
    clattn_stats band = run_cpu_variant(1, 8192, 128);
    cr_expect_geq(many.block_m, band.block_m, "the same rows, unbounded: never shorter tiles");
    if (info.compute_units <= 16) { /* enough tiles of each height to keep them all busy */
        cr_expect_eq(many.block_m, 48, "8192 keys a row ran %u-row tiles", many.block_m);
        cr_expect_eq(half.block_m, 32, "4096 keys a row ran %u-row tiles", half.block_m);
        cr_expect_eq(band.block_m, 32, "257 keys a row ran %u-row tiles", band.block_m);
    }
}

/* Those 48-row tiles, which no other test's calls are long enough to take, forced through each
 * context's tuning: every mask kind, float32 read in place and float16 storage over [B, H, N, D],
 * the score modifiers with sinks, and a NaN in V, over rows that fill two tiles and part of a
 * third. */
Test(fused, cpu_tiles_of_48_rows_pass_every_kind_of_call) {
    clattn_context **ctxs;
    size_t contexts = test_contexts(&ctxs);
    for (size_t i = 0; i < contexts; i++) {
        clattn_device_info info;
        clattn_device_info_init(&info);
        clattn_context_device_info(ctxs[i], &info);
        clattn_tuning t;
        clattn_tuning_init(&t);
        ASSERT_OK(ctxs[i], clattn_device_tuning(info.index, CLATTN_VARIANT_LANES, &t, NULL));
        t.block_m = 48;
        ASSERT_OK(ctxs[i], clattn_context_set_tuning(ctxs[i], CLATTN_VARIANT_LANES, &t));
    }
    attn_case cases[MASK_KINDS + 4];
    size_t n = mask_kind_cases(cases, 300);
    for (size_t i = n; i < COUNT(cases); i++) {
        case_init(&cases[i], 1, 4, 2, 130, 170, 64, 64);
        cases[i].layout = CLATTN_LAYOUT_BHSD;
        cases[i].seed = 310 + i;
    }
    cases[n].causal = 1;             /* read in place */
    cases[n + 1].dtype = CLATTN_F16; /* packed from float16 */
    cases[n + 1].left = cases[n + 1].right = 40;
    cases[n + 2].softcap = 20.0f, cases[n + 2].alibi = 1, cases[n + 2].sinks = 1;
    cases[n + 3].bad_value = 1, cases[n + 3].left = 50, cases[n + 3].right = 0;
    cr_expect_eq(check_cases(cases, COUNT(cases), CLATTN_PATH_FUSED, CLATTN_VARIANT_LANES), 0,
                 "failing cases are listed above");
    clattn_stats stats;
    clattn_stats_init(&stats);
    ASSERT_OK(ctxs[0], clattn_context_last_stats(ctxs[0], &stats));
    cr_expect_eq(stats.block_m, 48, "the tuning ran %s", stats.kernel);
    for (size_t i = 0; i < contexts; i++) /* back to the database for the process's next test */
        ASSERT_OK(ctxs[i], clattn_context_set_tuning(ctxs[i], CLATTN_VARIANT_LANES, NULL));
}

/* float32 K and V whose rows of a head lie one after another ([B, H, N, D]) at a padded head dim
 * are read in place by the lanes variant, with only each head's last partial key tile packed:
 * every case passes and says "in place". The cases cover a last partial tile, NaN and
 * infinities in V (no pass flags them: the kernel checks the rows of a tile with a -inf score,
 * from a window's edge or from a bias over a tile the mask keeps whole), a NaN key, global tokens,
 * a block layout, GQA, offsets, the score modifiers and dilated windows (a class's keys every
 * dilation-th row, each class with its own last partial tile); strided [B, N, H, D] rows are read
 * in place where a key tile's rows span at most 16 KiB (2 kv heads of 64), and packed where they
 * span more (8 kv heads of 64 in tiles of 32 keys). */
Test(fused, keys_read_in_place) {
    attn_case cases[13];
    for (size_t i = 0; i < COUNT(cases); i++) {
        case_init(&cases[i], 2, 4, 2, 70, 203, 64, 64);
        cases[i].layout = CLATTN_LAYOUT_BHSD;
        cases[i].seed = 90 + i;
    }
    cases[0].causal = 1;
    cases[1].bad_value = 1, cases[1].left = cases[1].right = 3, cases[1].nq = 203;
    cases[2].bad_value = 2, cases[2].causal = 1, cases[2].left = 5, cases[2].nq = 203;
    cases[3].nan_key = 1, cases[3].nk = 64, cases[3].offset = 5; /* no partial tile */
    cases[4].left = cases[4].right = 9, cases[4].num_globals = 2, cases[4].globals[0] = 1;
    cases[4].globals[1] = 150, cases[4].bias = BIAS_BROADCAST;
    cases[5].block_layout = LAYOUT_SHARED, cases[5].bq = cases[5].bk = 16;
    cases[6].softcap = 20.0f, cases[6].alibi = 1, cases[6].sinks = 1;
    cases[7].dqk = 32, cases[7].dv = 96, cases[7].nq = 300;
    cases[8].layout = CLATTN_LAYOUT_BSHD, cases[8].hq = cases[8].hkv = 8; /* packed */
    cases[9].layout = CLATTN_LAYOUT_BSHD, cases[9].left = cases[9].right = 20;
    cases[10].dilation = 2, cases[10].left = cases[10].right = 40, cases[10].nq = 203;
    cases[10].bad_value = 1;
    cases[11].dilation = 3, cases[11].causal = 1, cases[11].left = 60, cases[11].num_globals = 1;
    cases[11].globals[0] = 7, cases[11].nan_key = 1;
    cases[12].bad_value = 1, cases[12].bias = BIAS_FULL; /* -inf in a tile that masks nothing */
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs);
    for (size_t dev = 0; dev < devices; dev++)
        for (size_t i = 0; i < COUNT(cases); i++) {
            case_result r;
            clattn_status s =
                case_run(ctxs[dev], &cases[i], CLATTN_PATH_FUSED, CLATTN_VARIANT_LANES, &r);
            if (s == CLATTN_ERR_UNSUPPORTED) continue; /* a compiler that lanes avoids */
            cr_expect_eq(s, CLATTN_SUCCESS, "device %zu case %zu: %s", dev, i, r.message);
            cr_expect_eq(r.mismatches, 0, "device %zu case %zu: %s", dev, i, r.message);
            int in_place = strstr(r.stats.kernel, " in place") != NULL;
            cr_expect_eq(in_place, i != 8, "device %zu case %zu ran %s", dev, i, r.stats.kernel);
        }
}

/* A huge scale over ordinary values (3e38 x q.k) overflows a pre-scaled q's sums on the way:
 * those scores are summed again, and must keep float32's precision there (summed with both
 * operands scaled down they fell among the subnormals, and the LSE came out a thousandth off). */
Test(fused, scores_summed_again_keep_their_precision) {
    static const float scales[] = {3e38f, 1.5e38f, 6e37f};
    attn_case cases[2 * COUNT(scales)];
    for (size_t i = 0; i < COUNT(cases); i++) {
        case_init(&cases[i], 1, 4, 2, 100, i % 2 ? 6 : 12, 64, 64);
        cases[i].scale = scales[i / 2];
        cases[i].layout = i % 2 ? CLATTN_LAYOUT_BHSD : CLATTN_LAYOUT_BSHD;
        cases[i].seed = 130 + i;
    }
    expect_all_pass(cases, COUNT(cases));
    cr_expect_eq(check_cases(cases, COUNT(cases), CLATTN_PATH_GEMM, CLATTN_VARIANT_AUTO), 0);
}

/* A row whose later keys add nothing to its sum (41 keys score 30, the rest 0, so each later
 * tile adds below half an ulp) keeps O = 1 exactly with V = 1, however many key tiles it walks:
 * the normalised outputs were rescaled by kept * (1 / sum), 1 - 2^-24 for many sums, and such
 * rows lost 5e-4 at 131072 keys. Every fused variant with 4 query rows, and lanes' global row
 * (a few-row tile) among 131072 rows of a (0, 0) window. */
static void expect_ones(clattn_context *ctx, clattn_attention_desc *d, const float *q,
                        const float *k, const float *v, size_t rows, const char *what) {
    float *o = malloc(rows * 16 * sizeof *o);
    cr_assert(o);
    ASSERT_OK(ctx, clattn_attention_host(ctx, d, q, k, v, o, NULL));
    size_t off = 0;
    for (size_t e = 0; e < rows * 16; e++) off += fabsf(o[e] - 1.0f) > 1e-5f;
    cr_expect_eq(off, 0, "%s: %zu of %zu values off 1 by more than 1e-5 (row 0: %.9g)", what, off,
                 rows * 16, (double)o[0]);
    free(o);
}

Test(fused, long_rows_whose_sum_stops_growing_keep_their_output) {
    enum { NK = 131072, D = 16, GLOBAL = 100000 };
    float *q = calloc((size_t)NK * D, sizeof *q), *k = calloc((size_t)NK * D, sizeof *k);
    float *v = malloc((size_t)NK * D * sizeof *v);
    cr_assert(q && k && v);
    for (size_t j = 0; j < (size_t)NK * D; j++) v[j] = 1.0f;
    for (size_t j = 0; j < 41; j++) k[j * D] = 30.0f;
    for (size_t i = 0; i < NK; i++) q[i * D] = 1.0f;
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_variant variants[16];
    size_t count = variants_on_path(ctxs[0], CLATTN_PATH_FUSED, variants, COUNT(variants));
    clattn_attention_desc d;
    for (size_t i = 0; i < count; i++) {
        clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, 4, NK, D, D);
        d.path = CLATTN_PATH_FUSED, d.variant = variants[i], d.scale = 1.0f;
        expect_ones(ctxs[0], &d, q, k, v, 4, clattn_variant_name(variants[i]));
    }
    const int64_t global = GLOBAL;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, NK, NK, D, D);
    d.path = CLATTN_PATH_FUSED, d.variant = CLATTN_VARIANT_LANES, d.scale = 1.0f;
    d.window_left = d.window_right = 0, d.global_tokens = &global, d.num_global_tokens = 1;
    expect_ones(ctxs[0], &d, q, k, v, NK, "lanes, a global row");
    free(q), free(k), free(v);
}

/* Lanes computes at most 4 global rows with the keys in the lanes (cl/lanes.cl, "few rows"):
 * folded into the window tiles, each over its own keys, and merged, where one class of keys
 * (no dilation that the tiles separate) and no bias, block layout or score modifiers; else in
 * the global-row pass. More rows, or rows with a bias or score modifiers, run in that pass with
 * the rows in the lanes. Each case against the reference, read in place and packed, with NaN and
 * +inf in V, a NaN key, scores that overflow float32 on the way (scale 3e38), float16 Q and O,
 * sinks, causal with Nq != Nk, rows past the keys, dilation, GQA, head dims that differ, and
 * tiles of 16 and 32 rows; and each case folds its rows exactly when it should. */
Test(fused, global_rows_with_keys_or_rows_in_the_lanes) {
    attn_case cases[12];
    for (size_t i = 0; i < COUNT(cases); i++) {
        case_init(&cases[i], 2, 4, 2, 150, 150, 64, 64);
        cases[i].layout = i % 2 ? CLATTN_LAYOUT_BSHD : CLATTN_LAYOUT_BHSD;
        cases[i].left = cases[i].right = 6;
        cases[i].num_globals = i % 3 == 2 ? 6 : 4; /* 6: rows in the lanes */
        for (size_t g = 0; g < cases[i].num_globals; g++) cases[i].globals[g] = 1 + 29 * g;
        cases[i].seed = 140 + i;
    }
    cases[0].bad_value = 1; /* NaN V at key 1, which row 0 does not see: */
    cases[0].causal = 1, cases[0].globals[0] = 0;
    cases[1].bad_value = 2, cases[1].causal = 1;
    cases[2].bad_value = 1;
    cases[3].nan_key = 1, cases[3].dilation = 2, cases[3].left = cases[3].right = 20;
    cases[4].scale = 3e38f;
    cases[5].scale = 3e38f;
    cases[6].dtype = cases[6].out_dtype = CLATTN_F16, cases[6].sinks = 1;
    cases[7].causal = 1, cases[7].nq = 100, cases[7].dqk = 32, cases[7].dv = 80;
    cases[8].causal = 1, cases[8].nk = 100, cases[8].hkv = 1; /* rows past the keys: empty */
    cases[8].num_globals = 4;
    cases[9].softcap = 30.0f, cases[9].num_globals = 2; /* modifiers: rows in the lanes */
    cases[10].bad_value = 1, cases[10].causal = 1, cases[10].dilation = 3; /* the row pass */
    cases[10].left = cases[10].right = 30, cases[10].num_globals = 2;
    cases[11].left = cases[11].right = 60, cases[11].nk = 190; /* 32-row tiles, offset 40 */
    static const int folded[COUNT(cases)] = {1, 1, 0, 0, 1, 0, 1, 1, 1, 0, 0, 1};
    cr_expect_eq(check_cases(cases, COUNT(cases), CLATTN_PATH_FUSED, CLATTN_VARIANT_LANES), 0,
                 "failing cases are listed above");
    for (size_t i = 0; i < COUNT(cases); i++) {
        case_result r;
        case_run(first_context(), &cases[i], CLATTN_PATH_FUSED, CLATTN_VARIANT_LANES, &r);
        cr_expect_eq(strstr(r.stats.kernel, " folded rows") != NULL, folded[i], "case %zu ran %s",
                     i, r.stats.kernel);
    }
}

/* The packed variants build a plain program (without the code of bias, block layouts, global
 * tokens and non-float32 storage) for calls that use none of them, and the general one for
 * calls that use any: each case matches the reference and says "plain" exactly when it has no
 * such feature. Non-finite V rows and rescored keys (cases 1 and 2), soft-capping (6), ALiBi
 * and sinks (7) stay in the plain program. On lanes, global tokens (9) get a program of their
 * own, which has a plain build too. */
Test(fused, plain_programs_serve_calls_without_features) {
    attn_case cases[10];
    for (size_t i = 0; i < COUNT(cases); i++) {
        case_init(&cases[i], 2, 4, 2, 77, 150, 64, 64);
        cases[i].causal = i % 2;
        cases[i].seed = 120 + i;
    }
    cases[1].bad_value = 1, cases[2].nan_key = 1, cases[2].left = cases[2].right = 9;
    cases[3].dtype = CLATTN_F16;
    cases[4].out_dtype = CLATTN_BF16;
    cases[5].bias = BIAS_BROADCAST;
    cases[6].softcap = 20.0f;
    cases[7].alibi = 1, cases[7].sinks = 1;
    cases[8].block_layout = LAYOUT_SHARED, cases[8].bq = cases[8].bk = 16;
    cases[9].left = cases[9].right = 9, cases[9].num_globals = 1, cases[9].globals[0] = 40;
    const clattn_variant packed[] = {CLATTN_VARIANT_LANES, CLATTN_VARIANT_ROWWISE};
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs);
    for (size_t dev = 0; dev < devices; dev++)
        for (size_t v = 0; v < COUNT(packed); v++)
            for (size_t i = 0; i < COUNT(cases); i++) {
                case_result r;
                clattn_status s = case_run(ctxs[dev], &cases[i], CLATTN_PATH_FUSED, packed[v], &r);
                if (s == CLATTN_ERR_UNSUPPORTED) continue; /* a device the variant avoids */
                cr_expect_eq(s, CLATTN_SUCCESS, "device %zu variant %zu case %zu: %s", dev, v, i,
                             r.message);
                cr_expect_eq(r.mismatches, 0, "device %zu variant %zu case %zu: %s", dev, v, i,
                             r.message);
                int plain = strstr(r.stats.kernel, " plain") != NULL;
                /* plain: float32 and nothing but score modifiers and sinks (cases 6 and 7), or
                   on lanes global tokens (case 9), whose own program has a plain build */
                int lanes = packed[v] == CLATTN_VARIANT_LANES;
                cr_expect_eq(plain, i < 3 || i == 6 || i == 7 || (lanes && i == 9),
                             "device %zu case %zu ran %s", dev, i, r.stats.kernel);
                /* lanes builds a program of its own for global tokens (case 9) */
                int globals = strstr(r.stats.kernel, " global tokens") != NULL;
                cr_expect_eq(globals, lanes && i == 9, "device %zu case %zu ran %s", dev, i,
                             r.stats.kernel);
            }
}
