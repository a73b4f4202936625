/*
 * Every row of the GEMM table (runtime/gemm/) on every device against a host GEMM in double
 * precision: single GEMMs with B read transposed or not, row strides wider than the rows and
 * offsets, alpha and accumulation; batches addressed as the gemm attention path addresses them
 * (batch and head strides, GQA through `group`, a first entry past 0, scratch entries);
 * weights prepared once in float32, float16 and bfloat16; shapes off every tile and block
 * boundary. Values of C outside the product (row padding, other entries) must be left as they
 * were. Also: the row that ran is the one chosen, a row that cannot run a call says why,
 * $CLATTN_GEMM naming no row is refused, the table is described, and the FMA peak is measured.
 *
 * Tolerance: the float32 error bound of a dot product of k terms, 2 k eps sum |a_p b_p| (times
 * |alpha|), plus eps |C| when accumulating; the reference reads 16-bit weights widened exactly.
 */
#include <criterion/criterion.h>

#include "gemm/gemm.h"
#include "util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* One GEMM or batch: sizes, padding of each operand's rows, and how a batch is laid out. */
typedef struct gemm_case {
    size_t m, n, k;
    size_t count, heads, group, first; /* count 1: a single GEMM */
    int transpose_b, accumulate;
    float alpha;
    size_t pad;    /* extra elements at the end of every row, and before the first */
    int c_scratch; /* C entries back to back (s_item), as the path's score scratch */
    int weights;   /* 1: B is weights W [n][k] prepared for the row, in w_dtype */
    clattn_dtype w_dtype;
    uint64_t seed;
} gemm_case;

/* An operand of rows x cols per (batch, head) with ld = cols + pad, heads_here heads. */
static gemm_operand layout(const gemm_case *gc, size_t rows, size_t cols, size_t heads_here) {
    gemm_operand op = {.offset = gc->pad, .ld = cols + gc->pad};
    if (gc->count > 1) op.s_head = rows * op.ld, op.s_batch = heads_here * rows * op.ld;
    return op;
}

static size_t entry_at(const gemm_operand *op, const gemm_case *gc, size_t i, size_t group) {
    size_t g = gc->first + i;
    return op->offset + g / gc->heads * op->s_batch + g % gc->heads / group * op->s_head +
           i * op->s_item;
}

/* Elements an operand spans over the batch. */
static size_t span(const gemm_operand *op, const gemm_case *gc, size_t rows, size_t group) {
    size_t last = 0;
    for (size_t i = 0; i < gc->count; i++) {
        size_t end = entry_at(op, gc, i, group) + rows * op->ld;
        last = end > last ? end : last;
    }
    return last + gc->pad;
}

static cl_mem device_copy(clattn_context *ctx, const float *host, size_t count) {
    cl_int err = CL_SUCCESS;
    cl_mem m =
        clCreateBuffer(clattn_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                       count * sizeof *host, (void *)host, &err);
    cr_assert_eq(err, CL_SUCCESS);
    return m;
}

static float *random_floats(size_t n, uint64_t seed) {
    float *x = malloc(n * sizeof *x);
    fill_uniform(x, n, seed);
    return x;
}

/* The case's operands on the host and the device. */
typedef struct gemm_data {
    gemm_desc g;
    size_t span_a, span_b, span_c;
    float *a, *b, *c, *w_wide; /* w_wide: the weights as the reference reads them */
    void *w_stored;
    gemm_weights w;
    cl_mem da, db, dc;
} gemm_data;

static void data_make(clattn_context *ctx, const gemm_case *gc, gemm_data *d) {
    memset(d, 0, sizeof *d);
    d->g = gemm_desc_single(gc->m, gc->n, gc->k, "test GEMM");
    gemm_desc *g = &d->g;
    g->count = gc->count, g->heads = gc->heads, g->group = gc->group, g->first = gc->first;
    g->alpha = gc->alpha, g->accumulate = gc->accumulate, g->transpose_b = gc->transpose_b;
    size_t b_rows = gc->transpose_b ? gc->n : gc->k, b_cols = gc->transpose_b ? gc->k : gc->n;
    g->a = layout(gc, gc->m, gc->k, gc->heads);
    g->b = layout(gc, b_rows, b_cols, gc->heads / gc->group);
    g->c = layout(gc, gc->m, gc->n, gc->heads);
    if (gc->c_scratch) g->c.s_batch = g->c.s_head = 0, g->c.s_item = gc->m * g->c.ld;
    d->span_a = span(&g->a, gc, gc->m, 1), d->span_b = span(&g->b, gc, b_rows, gc->group);
    d->span_c = span(&g->c, gc, gc->m, 1);
    d->a = random_floats(d->span_a, gc->seed * 4),
    d->b = random_floats(d->span_b, gc->seed * 4 + 1);
    d->c = random_floats(d->span_c, gc->seed * 4 + 2);
    d->da = device_copy(ctx, d->a, d->span_a), d->dc = device_copy(ctx, d->c, d->span_c);
    g->a.buffer = d->da, g->c.buffer = d->dc;
    if (!gc->weights) {
        d->db = device_copy(ctx, d->b, d->span_b);
        g->b.buffer = d->db;
        return;
    }
    /* W [n][k] in its storage type; the reference reads it widened */
    size_t wn = gc->n * gc->k;
    float *w = random_floats(wn, gc->seed * 4 + 3);
    d->w_stored = malloc(wn * 4), d->w_wide = malloc(wn * sizeof(float));
    clattn_convert(CLATTN_F32, w, gc->w_dtype, d->w_stored, wn);
    clattn_convert(gc->w_dtype, d->w_stored, CLATTN_F32, d->w_wide, wn);
    free(w);
    ASSERT_OK(ctx, gemm_weights_make(ctx, d->w_stored, gc->w_dtype, gc->n, gc->k, &d->w));
    g->weights = &d->w;
}

static void data_free(gemm_data *d) {
    free(d->a), free(d->b), free(d->c), free(d->w_wide), free(d->w_stored);
    gemm_weights_release(&d->w);
    if (d->da) clReleaseMemObject(d->da);
    if (d->db) clReleaseMemObject(d->db);
    if (d->dc) clReleaseMemObject(d->dc);
}

/* op(B)[p][j] of entry i. */
static double b_at(const gemm_case *gc, const gemm_data *d, size_t i, size_t p, size_t j) {
    if (gc->weights) return d->w_wide[j * gc->k + p];
    size_t base = entry_at(&d->g.b, gc, i, gc->group);
    return gc->transpose_b ? d->b[base + j * d->g.b.ld + p] : d->b[base + p * d->g.b.ld + j];
}

/* The expected C over its whole span (untouched values included) and each value's bound. */
static void reference(const gemm_case *gc, const gemm_data *d, double *want, double *bound) {
    for (size_t x = 0; x < d->span_c; x++) want[x] = d->c[x], bound[x] = 0;
    for (size_t i = 0; i < gc->count; i++) {
        size_t a0 = entry_at(&d->g.a, gc, i, 1), c0 = entry_at(&d->g.c, gc, i, 1);
        for (size_t r = 0; r < gc->m; r++)
            for (size_t j = 0; j < gc->n; j++) {
                double sum = 0, mag = 0;
                for (size_t p = 0; p < gc->k; p++) {
                    double t = d->a[a0 + r * d->g.a.ld + p] * b_at(gc, d, i, p, j);
                    sum += t, mag += fabs(t);
                }
                size_t at = c0 + r * d->g.c.ld + j;
                double before = d->c[at];
                want[at] = gc->alpha * sum + (gc->accumulate ? before : 0.0);
                bound[at] = 2.0 * (double)gc->k * FLT_EPSILON * fabs(gc->alpha) * mag +
                            (gc->accumulate ? FLT_EPSILON * fabs(before) : 0.0) + 1e-30;
            }
    }
}

/* Runs the case on `row`; expects that row to have run and C to match. */
static void check_case(clattn_context *ctx, clattn_gemm row, const gemm_case *gc) {
    ASSERT_OK(ctx, clattn_context_set_gemm(ctx, row));
    gemm_data d;
    data_make(ctx, gc, &d);
    gemm_ran ran;
    memset(&ran, 0, sizeof ran);
    ASSERT_OK(ctx, gemm_run(ctx, &d.g, &ran));
    cr_expect_eq(ran.gemm, row, "ran %s, chose %s", clattn_gemm_name(ran.gemm),
                 clattn_gemm_name(row));
    float *got = malloc(d.span_c * sizeof *got);
    cr_assert_eq(clEnqueueReadBuffer(clattn_context_queue(ctx), d.dc, CL_TRUE, 0,
                                     d.span_c * sizeof *got, got, 0, NULL, NULL),
                 CL_SUCCESS);
    double *want = malloc(d.span_c * sizeof *want), *bound = malloc(d.span_c * sizeof *bound);
    reference(gc, &d, want, bound);
    size_t bad = 0, first = 0;
    for (size_t x = 0; x < d.span_c; x++)
        if (!(fabs(got[x] - want[x]) <= bound[x]) && bad++ == 0) first = x;
    cr_expect_eq(bad, 0,
                 "%s (%s): %zux%zux%zu count %zu tb %d acc %d weights %d/%d: %zu of %zu values "
                 "off, first at %zu: %.9g, want %.9g (bound %.3g)",
                 clattn_gemm_name(row), ran.kernel, gc->m, gc->n, gc->k, gc->count, gc->transpose_b,
                 gc->accumulate, gc->weights, (int)gc->w_dtype, bad, d.span_c, first,
                 bad ? got[first] : 0.0, bad ? want[first] : 0.0, bad ? bound[first] : 0.0);
    free(got), free(want), free(bound);
    data_free(&d);
    ASSERT_OK(ctx, clattn_context_set_gemm(ctx, CLATTN_GEMM_AUTO));
}

static void check_on_row(clattn_context *ctx, clattn_gemm row, const void *one_case) {
    check_case(ctx, row, one_case);
}

/* Every case on every row of every device. */
static void check_all(const gemm_case *cases, size_t n) {
    for_each_gemm_row(check_on_row, cases, sizeof cases[0], n);
}

/* ---------------------------------------------------------------- the tests */

Test(gemm_rows, single_gemms_off_the_tiles) {
    static const size_t shapes[][3] = {{1, 1, 1},     {7, 13, 5},     {37, 53, 29},
                                       {65, 129, 64}, {130, 33, 200}, {9, 300, 17}};
    gemm_case cases[2 * COUNT(shapes) + 3];
    size_t n = 0;
    for (size_t s = 0; s < COUNT(shapes); s++)
        for (int tb = 0; tb < 2; tb++, n++) {
            gemm_case gc = {shapes[s][0],
                            shapes[s][1],
                            shapes[s][2],
                            1,
                            1,
                            1,
                            0,
                            tb,
                            0,
                            1.0f,
                            (size_t)(s % 3) * 3,
                            0,
                            0,
                            CLATTN_F32,
                            10 + n};
            cases[n] = gc;
        }
    gemm_case alpha = {40, 70, 33, 1, 1, 1, 0, 1, 0, -0.37f, 2, 0, 0, CLATTN_F32, 40};
    gemm_case acc = {40, 70, 33, 1, 1, 1, 0, 0, 1, 1.0f, 1, 0, 0, CLATTN_F32, 41};
    gemm_case both = {19, 48, 64, 1, 1, 1, 0, 1, 1, 0.5f, 0, 0, 0, CLATTN_F32, 42};
    cases[n++] = alpha, cases[n++] = acc, cases[n++] = both;
    check_all(cases, n);
}

/* Batches as the gemm attention path makes them: (b, h) entries from `first`, GQA. */
Test(gemm_rows, batches_with_heads_groups_and_scratch) {
    gemm_case cases[] = {
        {23, 31, 16, 6, 3, 1, 0, 1, 0, 0.125f, 0, 0, 0, CLATTN_F32, 50}, /* S = Q K^T, MHA */
        {23, 31, 16, 5, 4, 2, 3, 1, 0, 0.3f, 2, 0, 0, CLATTN_F32, 51},   /* GQA, from entry 3 */
        {23, 24, 31, 8, 4, 4, 0, 0, 0, 1.0f, 1, 1, 0, CLATTN_F32, 52}, /* O = P V, MQA, scratch P */
        {70, 40, 90, 3, 3, 3, 1, 0, 0, 1.0f, 0, 0, 0, CLATTN_F32, 53},
    };
    check_all(cases, COUNT(cases));
}

/* Weights prepared once for the row, in each storage type (the layer's projections). */
Test(gemm_rows, weights_in_every_storage_type) {
    const clattn_dtype types[] = {CLATTN_F32, CLATTN_F16, CLATTN_BF16};
    gemm_case cases[2 * COUNT(types)];
    size_t n = 0;
    for (size_t t = 0; t < COUNT(types); t++) {
        gemm_case small = {11, 24, 32, 1, 1, 1, 0, 1, 0, 1.0f, 0, 0, 1, types[t], 60 + t};
        gemm_case big = {77, 150, 96, 1, 1, 1, 0, 1, t == 1, 1.0f, 3, 0, 1, types[t], 70 + t};
        cases[n++] = small, cases[n++] = big;
    }
    check_all(cases, n);
}

/* A row that cannot run a call fails it with why and leaves C as it was. */
Test(gemm_rows, a_refused_call_says_why_and_writes_nothing) {
    clattn_context **ctxs;
    size_t num = test_contexts(&ctxs);
    gemm_case gc = {9, 17, 5, 1, 1, 1, 0, 1, 0, 1.0f, 0, 0, 0, CLATTN_F32, 80};
    for (size_t i = 0; i < num; i++) {
        clattn_gemm rows[8];
        size_t num_rows = gemm_rows_on(ctxs[i], rows, COUNT(rows));
        for (size_t r = 0; r < num_rows; r++) {
            clattn_context *ctx = ctxs[i];
            ASSERT_OK(ctx, clattn_context_set_gemm(ctx, rows[r]));
            gemm_data d;
            data_make(ctx, &gc, &d);
            d.g.test_fail = 1;
            clattn_status s = gemm_run(ctx, &d.g, NULL);
            cr_expect_neq(s, CLATTN_SUCCESS, "%s ran a call it must refuse",
                          clattn_gemm_name(rows[r]));
            cr_expect(strlen(clattn_context_last_error(ctx)) > 0, "no message");
            float *got = malloc(d.span_c * sizeof *got);
            cr_assert_eq(clEnqueueReadBuffer(clattn_context_queue(ctx), d.dc, CL_TRUE, 0,
                                             d.span_c * sizeof *got, got, 0, NULL, NULL),
                         CL_SUCCESS);
            cr_expect_eq(memcmp(got, d.c, d.span_c * sizeof *got), 0, "C changed");
            free(got);
            data_free(&d);
            ASSERT_OK(ctx, clattn_context_set_gemm(ctx, CLATTN_GEMM_AUTO));
        }
    }
}

Test(gemm_rows, a_gemm_named_by_the_environment_must_exist) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    setenv("CLATTN_GEMM", "no-such-gemm", 1);
    gemm_case gc = {4, 4, 4, 1, 1, 1, 0, 1, 0, 1.0f, 0, 0, 0, CLATTN_F32, 81};
    gemm_data d;
    data_make(ctxs[0], &gc, &d);
    cr_expect_eq(gemm_run(ctxs[0], &d.g, NULL), CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(ctxs[0]), "no-such-gemm") != NULL, "message: %s",
              clattn_context_last_error(ctxs[0]));
    setenv("CLATTN_GEMM", "panels", 1);
    gemm_ran ran;
    ASSERT_OK(ctxs[0], gemm_run(ctxs[0], &d.g, &ran));
    cr_expect_eq(ran.gemm, CLATTN_GEMM_PANELS);
    unsetenv("CLATTN_GEMM");
    data_free(&d);
}

/* The table as clattn devices --variants shows it; auto's row on a CPU is panels. */
Test(gemm_rows, the_table_is_described) {
    clattn_context **ctxs;
    size_t num = test_contexts(&ctxs);
    for (size_t i = 0; i < num; i++) {
        clattn_device_info dev;
        clattn_device_info_init(&dev);
        ASSERT_OK(ctxs[i], clattn_context_device_info(ctxs[i], &dev));
        size_t described = 0;
        for (int g = 1;; g++) {
            clattn_gemm_info info;
            clattn_gemm_info_init(&info);
            if (clattn_gemm_describe(ctxs[i], (clattn_gemm)g, &info) != CLATTN_SUCCESS) break;
            described++;
            cr_expect(info.supported, "%s: %s", info.name, info.reason);
            cr_expect(info.num_axes > 0, "%s has no tuning axes", info.name);
            if (info.gemm == CLATTN_GEMM_PANELS)
                cr_expect_eq(info.used_by_auto, (dev.type & CL_DEVICE_TYPE_CPU) != 0);
        }
        cr_expect_geq(described, 2, "clblast and panels at least");
    }
    clattn_gemm g;
    cr_expect_eq(clattn_gemm_from_name("panels", &g), CLATTN_SUCCESS);
    cr_expect_eq(g, CLATTN_GEMM_PANELS);
    cr_expect_eq(clattn_gemm_from_name("sgemm", &g), CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect_eq(clattn_context_set_gemm(ctxs[0], (clattn_gemm)99), CLATTN_ERR_INVALID_ARGUMENT);
}

Test(gemm_rows, the_fma_peak_is_measured) {
    clattn_context **ctxs;
    size_t num = test_contexts(&ctxs);
    for (size_t i = 0; i < num; i++) {
        double peak = 0;
        ASSERT_OK(ctxs[i], clattn_context_fma_peak(ctxs[i], &peak));
        cr_expect(peak > 0.1 && peak < 1e6, "peak %g GFLOP/s", peak);
    }
    cr_expect_eq(clattn_context_fma_peak(ctxs[0], NULL), CLATTN_ERR_INVALID_ARGUMENT);
}

/* The panels row under parameters other than its defaults (what clattn tune tries). */
Test(gemm_rows, panels_under_other_tunings) {
    static const unsigned tunings[][4] = {
        {4, 16, 32, 64}, {6, 48, 36, 96}, {12, 16, 24, 32}, {1, 64, 1, 64}};
    gemm_case cases[] = {
        {37, 101, 29, 1, 1, 1, 0, 1, 0, 1.0f, 1, 0, 0, CLATTN_F32, 90},
        {23, 31, 16, 5, 4, 2, 3, 1, 0, 0.3f, 2, 0, 0, CLATTN_F32, 91},
        {45, 70, 33, 1, 1, 1, 0, 1, 1, 1.0f, 0, 0, 1, CLATTN_BF16, 92},
    };
    clattn_context **ctxs;
    size_t num = test_contexts(&ctxs);
    for (size_t i = 0; i < num; i++)
        for (size_t t = 0; t < COUNT(tunings); t++) {
            clattn_tuning params;
            clattn_tuning_init(&params);
            params.tile_m = tunings[t][0], params.tile_n = tunings[t][1];
            params.block_m = tunings[t][2], params.block_n = tunings[t][3];
            ASSERT_OK(ctxs[i],
                      clattn_context_set_gemm_tuning(ctxs[i], CLATTN_GEMM_PANELS, &params));
            for (size_t c = 0; c < COUNT(cases); c++)
                check_case(ctxs[i], CLATTN_GEMM_PANELS, &cases[c]);
            ASSERT_OK(ctxs[i], clattn_context_set_gemm_tuning(ctxs[i], CLATTN_GEMM_PANELS, NULL));
        }
}
