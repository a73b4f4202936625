/*
 * Ring attention in one process: clattn_attention_merge against a merge in double,
 * clattn_attention_shards' rows, clattn_ring parts run one after the other (each part's rows
 * of O and LSE must be the whole call's reference rows, for every mask kind, GQA, both layouts
 * and 16-bit storage), and clattn_attention_multi over two contexts (two PoCL devices where
 * POCL_DEVICES names two, else two contexts on one device), with what it refuses.
 */
#include <criterion/criterion.h>

#include "util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- merge */

static cl_mem buffer_of(clattn_context *ctx, const float *host, size_t n) {
    cl_int err = CL_SUCCESS;
    cl_mem b =
        clCreateBuffer(clattn_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                       n * sizeof(float), (void *)host, &err);
    cr_assert_eq(err, CL_SUCCESS);
    return b;
}

static void read_back(clattn_context *ctx, cl_mem b, float *host, size_t n) {
    cr_assert_eq(clEnqueueReadBuffer(clattn_context_queue(ctx), b, CL_TRUE, 0, n * sizeof(float),
                                     host, 0, NULL, NULL),
                 CL_SUCCESS);
}

Test(ring, merge_matches_a_merge_in_double) {
    enum { B = 2, H = 3, N = 7, D = 5, ROWS = B * H * N };
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_context *ctx = ctxs[0];
    float o[ROWS * D], part[ROWS * D], lse[ROWS], lse_part[ROWS], got[ROWS * D], got_lse[ROWS];
    fill_uniform(o, ROWS * D, 1), fill_uniform(part, ROWS * D, 2);
    fill_uniform(lse, ROWS, 3), fill_uniform(lse_part, ROWS, 4);
    for (int r = 0; r < ROWS; r++) lse[r] *= 30.0f, lse_part[r] *= 30.0f;
    lse[0] = -INFINITY;      /* an empty accumulator row takes the part */
    lse_part[1] = -INFINITY; /* a part that saw no key adds nothing */
    lse[2] = lse_part[2] = -INFINITY;
    lse_part[3] = NAN; /* NaN stays NaN */
    for (int x = 0; x < D; x++) o[x] = 0.0f, o[2 * D + x] = 0.0f;
    double ref[ROWS * D];
    double ref_lse[ROWS];
    for (int r = 0; r < ROWS; r++) {
        double a = lse[r], p = lse_part[r], top = fmax(a, p);
        double wa = a == -INFINITY ? 0 : exp(a - top), wp = p == -INFINITY ? 0 : exp(p - top);
        if (isnan(p)) wa = wp = NAN;
        ref_lse[r] = wa + wp > 0 || isnan(wp) ? top + log(wa + wp) : -INFINITY;
        for (int x = 0; x < D; x++)
            ref[r * D + x] = p == -INFINITY
                                 ? o[r * D + x]
                                 : (wa * o[r * D + x] + wp * part[r * D + x]) / (wa + wp);
    }
    clattn_merge_desc m;
    cr_assert_eq(clattn_merge_desc_init(&m, CLATTN_LAYOUT_BHSD, B, H, N, D), CLATTN_SUCCESS);
    cl_mem ob = buffer_of(ctx, o, ROWS * D), lb = buffer_of(ctx, lse, ROWS);
    cl_mem pb = buffer_of(ctx, part, ROWS * D), plb = buffer_of(ctx, lse_part, ROWS);
    ASSERT_OK(ctx, clattn_attention_merge(ctx, &m, ob, lb, pb, plb, NULL));
    read_back(ctx, ob, got, ROWS * D), read_back(ctx, lb, got_lse, ROWS);
    cr_expect_eq(compare_outputs("merged O", got, ref, ROWS * D, 1e-6, 1e-5), 0);
    cr_expect_eq(compare_outputs("merged LSE", got_lse, ref_lse, ROWS, 1e-6, 1e-6), 0);

    m.o_part = m.o; /* the part's O in the accumulator's place */
    cr_expect_eq(clattn_attention_merge(ctx, &m, ob, lb, ob, plb, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(ctx), "O overlaps O_part"), "%s",
              clattn_context_last_error(ctx));
    m.o_part = m.o, m.len = N + 1; /* larger than the buffers */
    cr_expect_eq(clattn_attention_merge(ctx, &m, ob, lb, pb, plb, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(ctx), "its buffer holds"), "%s",
              clattn_context_last_error(ctx));
    clReleaseMemObject(ob), clReleaseMemObject(lb), clReleaseMemObject(pb), clReleaseMemObject(plb);
}

/* With LSE parts, rows whose scores are all -FLT_MAX merge by their keys' sums, which their
 * plain LSE (-FLT_MAX) has lost: 3 keys and 7 keys give weights 3/10 and 7/10. */
Test(ring, merge_of_lse_parts_keeps_the_sums) {
    enum { B = 1, H = 1, N = 2, D = 4, ROWS = B * H * N };
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_context *ctx = ctxs[0];
    float o[ROWS * D], part[ROWS * D], got[ROWS * D];
    float lse[2 * ROWS] = {-FLT_MAX, logf(3.0f), 0.5f, logf(2.0f)};
    float lse_part[2 * ROWS] = {-FLT_MAX, logf(7.0f), 1.5f, logf(4.0f)};
    fill_uniform(o, ROWS * D, 5), fill_uniform(part, ROWS * D, 6);
    double ref[ROWS * D], w1 = 2.0 * exp(0.5 - 1.5), w2 = 4.0;
    for (int x = 0; x < D; x++) {
        ref[x] = (3.0 * o[x] + 7.0 * part[x]) / 10.0;
        ref[D + x] = (w1 * o[D + x] + w2 * part[D + x]) / (w1 + w2);
    }
    clattn_merge_desc m;
    cr_assert_eq(clattn_merge_desc_init(&m, CLATTN_LAYOUT_BSHD, B, H, N, D), CLATTN_SUCCESS);
    m.lse_parts = 1;
    cl_mem ob = buffer_of(ctx, o, ROWS * D), lb = buffer_of(ctx, lse, 2 * ROWS);
    cl_mem pb = buffer_of(ctx, part, ROWS * D), plb = buffer_of(ctx, lse_part, 2 * ROWS);
    ASSERT_OK(ctx, clattn_attention_merge(ctx, &m, ob, lb, pb, plb, NULL));
    read_back(ctx, ob, got, ROWS * D), read_back(ctx, lb, lse, 2 * ROWS);
    cr_expect_eq(compare_outputs("merged O", got, ref, ROWS * D, 1e-6, 1e-5), 0);
    cr_expect(lse[0] == -FLT_MAX && fabs(lse[1] - log(10.0)) < 1e-6, "(%g, %g)", lse[0], lse[1]);
    cr_expect(lse[2] == 1.5f && fabs(lse[3] - log(w1 + w2)) < 1e-6, "(%g, %g)", lse[2], lse[3]);
    clReleaseMemObject(ob), clReleaseMemObject(lb), clReleaseMemObject(pb), clReleaseMemObject(plb);
}

/* Refused before the kernel runs: LSE pairs whose span overflows once doubled (it wrapped to a
 * few bytes, passed the size check and crashed the kernel), an LSE inside O's memory through a
 * sub-buffer, and O's rows on one another. */
Test(ring, merge_refuses_outputs_that_overflow_or_overlap) {
    enum { B = 2, H = 2, N = 1, D = 8, ROWS = B * H * N };
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_context *ctx = ctxs[0];
    float zeros[2 * ROWS * D] = {0};
    cl_mem ob = buffer_of(ctx, zeros, 2 * ROWS * D), lb = buffer_of(ctx, zeros, 2 * ROWS);
    cl_mem pb = buffer_of(ctx, zeros, ROWS * D), plb = buffer_of(ctx, zeros, 2 * ROWS);
    clattn_merge_desc m;
    cr_assert_eq(clattn_merge_desc_init(&m, CLATTN_LAYOUT_BHSD, B, H, N, D), CLATTN_SUCCESS);
    m.lse_parts = 1;
    m.lse.stride_batch = m.lse.stride_head = (size_t)1 << 60; /* 2^63 bytes and more, doubled */
    cr_expect_eq(clattn_attention_merge(ctx, &m, ob, lb, pb, plb, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(ctx), "LSE is too large"), "%s",
              clattn_context_last_error(ctx));

    cr_assert_eq(clattn_merge_desc_init(&m, CLATTN_LAYOUT_BHSD, B, H, N, D), CLATTN_SUCCESS);
    cl_buffer_region tail = {ROWS * D * sizeof(float), ROWS * sizeof(float)}; /* in O's buffer */
    cl_mem in_o =
        clCreateSubBuffer(ob, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &tail, NULL);
    cr_assert(in_o != NULL);
    m.o.stride_batch = 2 * H * N * D; /* O spans the whole buffer, its second half unused */
    cr_expect_eq(clattn_attention_merge(ctx, &m, ob, in_o, pb, plb, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(ctx), "O overlaps LSE"), "%s",
              clattn_context_last_error(ctx));

    cr_assert_eq(clattn_merge_desc_init(&m, CLATTN_LAYOUT_BHSD, B, H, N, D), CLATTN_SUCCESS);
    m.o.stride_head = 0; /* the heads' rows in one place */
    cr_expect_eq(clattn_attention_merge(ctx, &m, ob, lb, pb, plb, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(ctx), "O's strides"), "%s",
              clattn_context_last_error(ctx));
    clReleaseMemObject(in_o);
    clReleaseMemObject(ob), clReleaseMemObject(lb), clReleaseMemObject(pb), clReleaseMemObject(plb);
}

/* ---------------------------------------------------------------- shards */

static clattn_attention_desc desc_of(size_t nq, size_t nk, int causal) {
    clattn_attention_desc d;
    cr_assert_eq(clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, nq, nk, 16, 16),
                 CLATTN_SUCCESS);
    d.causal = causal;
    return d;
}

/* Every row of [0, n) is held by exactly one part. */
static void expect_cover(const clattn_attention_desc *d, clattn_sharding sharding, size_t parts,
                         size_t n, int keys) {
    unsigned char *seen = calloc(n, 1);
    cr_assert_not_null(seen);
    for (size_t p = 0; p < parts; p++) {
        clattn_shard s;
        cr_assert_eq(
            clattn_attention_shards(d, sharding, parts, p, keys ? NULL : &s, keys ? &s : NULL),
            CLATTN_SUCCESS);
        cr_expect_eq(s.rows, s.len[0] + s.len[1]);
        for (int k = 0; k < 2; k++)
            for (size_t i = 0; i < s.len[k]; i++) {
                size_t row = s.start[k] + i;
                cr_assert_lt(row, n, "part %zu holds row %zu of %zu", p, row, n);
                seen[row]++;
            }
    }
    for (size_t i = 0; i < n; i++)
        cr_expect_eq(seen[i], 1, "row %zu of %zu held %d times (%zu parts)", i, n, seen[i], parts);
    free(seen);
}

/* Counts past 64 bits: a part count past 2^32 (whose chunk edges overflowed into rows past N)
 * and a pair count past 2^64 (which wrapped) for a call the checks otherwise accept. */
Test(ring, shards_and_pairs_of_huge_counts) {
    clattn_attention_desc d = desc_of(((size_t)1 << 31) - 1, ((size_t)1 << 31) - 1, 0);
    const size_t parts = (size_t)1 << 40, n = d.len_q;
    for (size_t part = 0; part < parts; part += parts / 7 + 12345) {
        clattn_shard q;
        cr_assert_eq(clattn_attention_shards(&d, CLATTN_SHARDING_CONTIGUOUS, parts, part, &q, NULL),
                     CLATTN_SUCCESS);
        cr_expect(q.start[0] <= n && q.len[0] <= n - q.start[0], "part %zu: [%zu, +%zu) of %zu",
                  part, q.start[0], q.len[0], n);
    }
    clattn_attention_desc wide;
    cr_assert_eq(clattn_attention_desc_init(&wide, CLATTN_LAYOUT_BSHD, (size_t)1 << 40, 1, 1, 1,
                                            ((size_t)1 << 31) - 1, 1, 1),
                 CLATTN_SUCCESS);
    wide.k.stride_batch = wide.v.stride_batch = 0; /* one K and V for every sequence */
    uint64_t pairs = 0;
    cr_expect_eq(clattn_attention_pairs(&wide, &pairs), CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect_eq(pairs, UINT64_MAX);
}

Test(ring, shards_cover_every_row_once) {
    clattn_attention_desc d = desc_of(100, 37, 1);
    clattn_shard q, k;
    cr_assert_eq(clattn_attention_shards(&d, CLATTN_SHARDING_AUTO, 2, 0, &q, &k), CLATTN_SUCCESS);
    cr_expect(q.start[0] == 0 && q.len[0] == 25 && q.start[1] == 75 && q.len[1] == 25,
              "causal AUTO is zigzag: chunks 0 and 3 of 4: [%zu,+%zu) [%zu,+%zu)", q.start[0],
              q.len[0], q.start[1], q.len[1]);
    cr_assert_eq(clattn_attention_shards(&d, CLATTN_SHARDING_ZIGZAG, 3, 1, &q, NULL),
                 CLATTN_SUCCESS);
    cr_expect(q.start[0] == 16 && q.len[0] == 17 && q.start[1] == 66 && q.len[1] == 17,
              "chunks 1 and 4 of 6: [%zu,+%zu) [%zu,+%zu)", q.start[0], q.len[0], q.start[1],
              q.len[1]);
    d.causal = 0;
    cr_assert_eq(clattn_attention_shards(&d, CLATTN_SHARDING_AUTO, 3, 2, &q, NULL), CLATTN_SUCCESS);
    cr_expect(q.start[0] == 66 && q.len[0] == 34 && q.len[1] == 0, "contiguous: [%zu,+%zu)",
              q.start[0], q.len[0]);
    for (size_t parts = 1; parts <= 5; parts++)
        for (int z = 1; z <= 2; z++) {
            expect_cover(&d, (clattn_sharding)z, parts, 100, 0);
            expect_cover(&d, (clattn_sharding)z, parts, 37, 1);
        }
    clattn_attention_desc tiny = desc_of(3, 3, 1); /* fewer rows than chunks: empty ones */
    expect_cover(&tiny, CLATTN_SHARDING_ZIGZAG, 3, 3, 0);
    uint8_t layout[16 * 16] = {0};
    d.block_layout = layout, d.block_q = 16, d.block_k = 8;
    cr_assert_eq(clattn_attention_shards(&d, CLATTN_SHARDING_ZIGZAG, 3, 1, &q, &k), CLATTN_SUCCESS);
    cr_expect(q.start[0] % 16 == 0 && q.start[1] % 16 == 0 && k.start[0] % 8 == 0 &&
                  k.start[1] % 8 == 0,
              "a block layout puts shards on block edges: %zu %zu / %zu %zu", q.start[0],
              q.start[1], k.start[0], k.start[1]);
    expect_cover(&d, CLATTN_SHARDING_ZIGZAG, 3, 100, 0);
    cr_expect_eq(clattn_attention_shards(&d, CLATTN_SHARDING_ZIGZAG, 3, 3, &q, &k),
                 CLATTN_ERR_INVALID_ARGUMENT);
    d.q_start = 1, d.full_len_q = 101;
    cr_expect_eq(clattn_attention_shards(&d, CLATTN_SHARDING_ZIGZAG, 3, 0, &q, &k),
                 CLATTN_ERR_INVALID_ARGUMENT, "a shard is no whole call");
}

/* ---------------------------------------------------------------- rings */

typedef struct ring_case {
    const char *name;
    size_t b, hq, hkv, nq, nk, d;
    clattn_layout layout;
    clattn_dtype dtype, out_dtype;
    int causal;
    int64_t left, right, dilation;
    int64_t globals[3];
    size_t num_globals;
    int block_layout; /* 0 none, 1 shared, 2 per head */
    size_t bq, bk;
    int bias; /* 0 none, 1 [B, Hq, Nq, Nk], 2 broadcast [Nq, Nk], 3 Hugging Face's padding
                 [B, 1, Nq, Nk]: -FLT_MAX on the last keys and on every key of the last rows */
} ring_case;

/* A whole call with its inputs and its reference. */
typedef struct whole_call {
    clattn_attention_desc desc;
    void *q, *k, *v;
    float *bias;
    uint8_t *layout;
    float *o_ref, *lse_ref; /* float32 O in the desc's layout, LSE [B, Hq, Nq] */
} whole_call;

static uint64_t next_random(uint64_t *state) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return *state >> 33;
}

static void *random_tensor(size_t n, clattn_dtype dtype, uint64_t seed) {
    float *x = malloc(n * sizeof *x);
    void *out = malloc(n * 4);
    cr_assert(x && out);
    fill_uniform(x, n, seed);
    cr_assert_eq(clattn_convert(CLATTN_F32, x, dtype, out, n), CLATTN_SUCCESS);
    free(x);
    return out;
}

static void whole_mask(const ring_case *c, whole_call *w) {
    clattn_attention_desc *d = &w->desc;
    uint64_t state = 11;
    d->causal = c->causal, d->window_left = c->left, d->window_right = c->right;
    d->dilation = c->dilation ? c->dilation : 1;
    d->global_tokens = c->num_globals ? c->globals : NULL, d->num_global_tokens = c->num_globals;
    if (c->block_layout) {
        size_t heads = c->block_layout == 2 ? c->hq : 1;
        size_t cells = heads * ((c->nq + c->bq - 1) / c->bq) * ((c->nk + c->bk - 1) / c->bk);
        w->layout = malloc(cells);
        for (size_t i = 0; i < cells; i++) w->layout[i] = next_random(&state) % 4 != 0;
        d->block_layout = w->layout, d->block_q = c->bq, d->block_k = c->bk;
        d->block_layout_per_head = c->block_layout == 2;
    }
    if (c->bias) {
        size_t n = (c->bias == 1 ? c->b * c->hq : c->bias == 3 ? c->b : 1) * c->nq * c->nk;
        w->bias = malloc(n * sizeof *w->bias);
        fill_uniform(w->bias, n, 12);
        for (size_t i = 0; i < n; i++) {
            size_t row = i / c->nk % c->nq, key = i % c->nk;
            if (c->bias < 3 && next_random(&state) % 6 == 0) w->bias[i] = -INFINITY;
            if (c->bias == 3)
                w->bias[i] =
                    key + 4 + i / (c->nq * c->nk) >= c->nk || row + 3 >= c->nq ? -FLT_MAX : 0.0f;
        }
        d->bias_host = w->bias;
        d->bias_strides = c->bias == 1
                              ? (clattn_tensor){0, c->hq * c->nq * c->nk, c->nq * c->nk, c->nk}
                          : c->bias == 3 ? (clattn_tensor){0, c->nq * c->nk, 0, c->nk}
                                         : (clattn_tensor){0, 0, 0, c->nk};
    }
}

static void whole_setup(const ring_case *c, whole_call *w) {
    memset(w, 0, sizeof *w);
    clattn_attention_desc *d = &w->desc;
    cr_assert_eq(
        clattn_attention_desc_init(d, c->layout, c->b, c->hq, c->hkv, c->nq, c->nk, c->d, c->d),
        CLATTN_SUCCESS);
    d->dtype = c->dtype, d->out_dtype = c->out_dtype;
    w->q = random_tensor(c->b * c->hq * c->nq * c->d, c->dtype, 1);
    w->k = random_tensor(c->b * c->hkv * c->nk * c->d, c->dtype, 2);
    w->v = random_tensor(c->b * c->hkv * c->nk * c->d, c->dtype, 3);
    whole_mask(c, w);
    clattn_attention_desc ref = *d;
    ref.out_dtype = CLATTN_F32;
    w->o_ref = malloc(c->b * c->hq * c->nq * c->d * sizeof *w->o_ref);
    w->lse_ref = malloc(c->b * c->hq * c->nq * sizeof *w->lse_ref);
    cr_assert_eq(clattn_attention_reference(&ref, w->q, w->k, w->v, w->o_ref, w->lse_ref),
                 CLATTN_SUCCESS, "%s: reference", c->name);
}

static void whole_free(whole_call *w) {
    free(w->q), free(w->k), free(w->v), free(w->bias), free(w->layout), free(w->o_ref),
        free(w->lse_ref);
}

/* Rows of a tensor dense in `layout` ([B, N, H, D] or [B, H, N, D], N rows) to or from a shard
 * dense in the same layout. */
static void shard_copy(clattn_layout layout, size_t b, size_t h, size_t n, size_t d, size_t elem,
                       const clattn_shard *s, char *whole, char *shard, int to_shard) {
    clattn_tensor tw, ts;
    clattn_tensor_dense(&tw, layout, h, n, d, 0);
    clattn_tensor_dense(&ts, layout, h, s->rows ? s->rows : 1, d, 0);
    for (size_t bi = 0; bi < b; bi++)
        for (size_t hi = 0; hi < h; hi++) {
            size_t row = 0;
            for (int k = 0; k < 2; k++)
                for (size_t i = 0; i < s->len[k]; i++, row++) {
                    char *x = whole + (bi * tw.stride_batch + hi * tw.stride_head +
                                       (s->start[k] + i) * tw.stride_seq) *
                                          elem;
                    char *y =
                        shard +
                        (bi * ts.stride_batch + hi * ts.stride_head + row * ts.stride_seq) * elem;
                    memcpy(to_shard ? y : x, to_shard ? x : y, d * elem);
                }
        }
}

/* the contract's LSE tolerance: |lse - ref| <= 1e-4 * max(1, |ref|); -inf exactly. */
static size_t lse_mismatches(const char *label, const float *got, const double *ref, size_t n) {
    size_t bad = 0;
    for (size_t r = 0; r < n; r++) {
        int ok = isinf(ref[r])
                     ? got[r] == ref[r]
                     : fabs(got[r] - ref[r]) <= 1e-4 * (fabs(ref[r]) > 1 ? fabs(ref[r]) : 1);
        if (!ok && bad++ < 3)
            fprintf(stderr, "%s[%zu] = %g, reference %g\n", label, r, (double)got[r], ref[r]);
    }
    return bad;
}

/* Compares O (float32, all * D values) and LSE (all rows) of a call with the whole call's
 * reference, within the tolerance of the case's input and output types. */
static void expect_whole_result(const ring_case *c, const whole_call *w, size_t all, const float *o,
                                const float *lse, const char *o_label, const char *lse_label) {
    double *ref = malloc(all * c->d * sizeof *ref), *ref_lse = malloc(all * sizeof *ref_lse);
    for (size_t i = 0; i < all * c->d; i++) ref[i] = w->o_ref[i];
    for (size_t i = 0; i < all; i++) ref_lse[i] = w->lse_ref[i];
    double atol, rtol;
    tolerance_for(c->dtype, c->out_dtype, &atol, &rtol);
    cr_expect_eq(compare_outputs(o_label, o, ref, all * c->d, atol, rtol), 0);
    cr_expect_eq(lse_mismatches(lse_label, lse, ref_lse, all), 0);
    free(ref), free(ref_lse);
}

static size_t elem_of(clattn_dtype t) {
    return t == CLATTN_F32 ? 4 : 2;
}

/* Every part of an R-part ring, one after the other on ctx; their rows must be the reference's. */
static void check_ring(clattn_context *ctx, const ring_case *c, size_t parts) {
    whole_call w;
    whole_setup(c, &w);
    const clattn_attention_desc *d = &w.desc;
    size_t es = elem_of(c->dtype), eo = elem_of(c->out_dtype), all = c->b * c->hq * c->nq;
    float *o = malloc(all * c->d * 4), *lse = malloc(all * 4);
    void *o_stored = malloc(all * c->d * eo);
    for (size_t r = 0; r < parts; r++) {
        clattn_shard qs, ks;
        cr_assert_eq(clattn_attention_shards(d, CLATTN_SHARDING_AUTO, parts, r, &qs, NULL),
                     CLATTN_SUCCESS);
        char *q = malloc(c->b * c->hq * (qs.rows + 1) * c->d * es);
        char *os = malloc(c->b * c->hq * (qs.rows + 1) * c->d * eo);
        float *ls = malloc(c->b * c->hq * (qs.rows + 1) * 4);
        shard_copy(c->layout, c->b, c->hq, c->nq, c->d, es, &qs, w.q, q, 1);
        clattn_ring *ring = NULL;
        ASSERT_OK(ctx,
                  clattn_ring_create(ctx, d, c->layout, CLATTN_SHARDING_AUTO, parts, r, q, &ring));
        for (size_t step = 0; step < parts; step++) {
            size_t p = (r + parts - step) % parts; /* as a ring passes them: from the left */
            cr_assert_eq(clattn_attention_shards(d, CLATTN_SHARDING_AUTO, parts, p, NULL, &ks),
                         CLATTN_SUCCESS);
            char *k = malloc(c->b * c->hkv * (ks.rows + 1) * c->d * es);
            char *v = malloc(c->b * c->hkv * (ks.rows + 1) * c->d * es);
            shard_copy(c->layout, c->b, c->hkv, c->nk, c->d, es, &ks, w.k, k, 1);
            shard_copy(c->layout, c->b, c->hkv, c->nk, c->d, es, &ks, w.v, v, 1);
            cl_event done = NULL;
            ASSERT_OK(ctx, clattn_ring_attend(ring, p, k, v, step % 2 ? &done : NULL));
            if (done) clWaitForEvents(1, &done), clReleaseEvent(done);
            free(k), free(v);
        }
        ASSERT_OK(ctx, clattn_ring_finish(ring, os, ls));
        clattn_ring_destroy(ring);
        shard_copy(c->layout, c->b, c->hq, c->nq, c->d, eo, &qs, o_stored, os, 0);
        for (size_t g = 0; g < c->b * c->hq; g++)
            for (size_t row = 0, k = 0; k < 2; k++)
                for (size_t i = 0; i < qs.len[k]; i++, row++)
                    lse[g * c->nq + qs.start[k] + i] = ls[g * qs.rows + row];
        free(q), free(os), free(ls);
    }
    cr_assert_eq(clattn_convert(c->out_dtype, o_stored, CLATTN_F32, o, all * c->d), CLATTN_SUCCESS);
    char o_label[128], lse_label[128];
    snprintf(o_label, sizeof o_label, "%s, %zu parts: O", c->name, parts);
    snprintf(lse_label, sizeof lse_label, "%s, %zu parts: LSE", c->name, parts);
    expect_whole_result(c, &w, all, o, lse, o_label, lse_label);
    free(o), free(lse), free(o_stored);
    whole_free(&w);
}

static ring_case ring_base(const char *name, size_t nq, size_t nk) {
    ring_case c = {name,       2,          2, 2,  nq, nk, 16,  CLATTN_LAYOUT_BSHD,
                   CLATTN_F32, CLATTN_F32, 0, -1, -1, 1,  {0}, 0,
                   0,          0,          0, 0};
    return c;
}

static void check_parts(const ring_case *c) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    for (size_t parts = 1; parts <= 3; parts++) check_ring(ctxs[0], c, parts);
}

Test(ring, every_mask_kind_over_one_two_and_three_parts) {
    ring_case c = ring_base("no mask", 45, 45);
    check_parts(&c);
    c = ring_base("causal", 45, 45), c.causal = 1;
    check_parts(&c);
    c = ring_base("causal, Nq < Nk", 23, 50), c.causal = 1;
    check_parts(&c);
    c = ring_base("window, dilation", 44, 44), c.left = 9, c.right = 4, c.dilation = 2;
    check_parts(&c);
    c = ring_base("globals, causal window", 45, 45), c.causal = 1, c.left = 5;
    c.num_globals = 3, c.globals[0] = 0, c.globals[1] = 17, c.globals[2] = 40;
    check_parts(&c);
    c = ring_base("shared layout 4x4, causal", 45, 45), c.causal = 1;
    c.block_layout = 1, c.bq = 4, c.bk = 4;
    check_parts(&c);
    c = ring_base("per-head layout 6x5", 41, 47), c.block_layout = 2, c.bq = 6, c.bk = 5;
    check_parts(&c);
    c = ring_base("bias", 33, 39), c.bias = 1;
    check_parts(&c);
    c = ring_base("broadcast bias, causal", 40, 40), c.bias = 2, c.causal = 1;
    check_parts(&c);
    c = ring_base("padding bias: rows of -FLT_MAX", 37, 37), c.bias = 3;
    check_parts(&c);
}

Test(ring, gqa_bhsd_and_16_bit_storage) {
    ring_case c = ring_base("GQA 4/1, BHSD, causal", 42, 42);
    c.hq = 4, c.hkv = 1, c.layout = CLATTN_LAYOUT_BHSD, c.causal = 1;
    check_parts(&c);
    c = ring_base("float16 in and out, causal", 40, 40);
    c.dtype = c.out_dtype = CLATTN_F16, c.causal = 1;
    check_parts(&c);
    c = ring_base("bfloat16 in, float32 out, window", 40, 40);
    c.dtype = CLATTN_BF16, c.left = 6, c.right = 6;
    check_parts(&c);
}

/* ---------------------------------------------------------------- several devices */

/* Two contexts: on two devices when there are two (POCL_DEVICES="pthread pthread"), else two
 * on the first device. */
static void two_contexts(clattn_context *pair[2], int *own) {
    clattn_context **ctxs;
    size_t n = test_contexts(&ctxs);
    *own = n < 2;
    if (!*own) {
        pair[0] = ctxs[0], pair[1] = ctxs[1];
        return;
    }
    clattn_device_info info;
    clattn_device_info_init(&info);
    cr_assert_eq(clattn_context_device_info(ctxs[0], &info), CLATTN_SUCCESS);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(clattn_context_create(&pair[i], info.index), CLATTN_SUCCESS);
}

static void check_multi(clattn_context *const pair[2], const ring_case *c,
                        clattn_sharding sharding) {
    whole_call w;
    whole_setup(c, &w);
    size_t all = c->b * c->hq * c->nq, eo = elem_of(c->out_dtype);
    void *o = malloc(all * c->d * eo);
    float *of = malloc(all * c->d * 4), *lse = malloc(all * 4);
    ASSERT_OK(pair[0], clattn_attention_multi(pair, 2, &w.desc, sharding, w.q, w.k, w.v, o, lse));
    cr_assert_eq(clattn_convert(c->out_dtype, o, CLATTN_F32, of, all * c->d), CLATTN_SUCCESS);
    expect_whole_result(c, &w, all, of, lse, c->name, c->name);
    free(o), free(of), free(lse);
    whole_free(&w);
}

Test(ring, multi_on_two_contexts) {
    clattn_context *pair[2];
    int own;
    two_contexts(pair, &own);
    ring_case c = ring_base("multi: causal, zigzag", 45, 45);
    c.causal = 1;
    check_multi(pair, &c, CLATTN_SHARDING_AUTO);
    c = ring_base("multi: globals and a window, contiguous", 37, 44);
    c.left = c.right = 3, c.num_globals = 2, c.globals[0] = 2, c.globals[1] = 30;
    check_multi(pair, &c, CLATTN_SHARDING_CONTIGUOUS);
    c = ring_base("multi: per-head layout, bias, BHSD, float16", 40, 40);
    c.block_layout = 2, c.bq = 4, c.bk = 8, c.bias = 1, c.layout = CLATTN_LAYOUT_BHSD;
    c.dtype = c.out_dtype = CLATTN_F16;
    check_multi(pair, &c, CLATTN_SHARDING_ZIGZAG);
    if (own) clattn_context_destroy(pair[0]), clattn_context_destroy(pair[1]);
}

Test(ring, multi_refuses_before_any_device_starts) {
    clattn_context *pair[2];
    int own;
    two_contexts(pair, &own);
    enum { N = 8, D = 16 };
    float q[N * D], k[N * D], v[N * D], o[N * D], lse[N];
    fill_uniform(q, N * D, 1), fill_uniform(k, N * D, 2), fill_uniform(v, N * D, 3);
    for (int i = 0; i < N * D; i++) o[i] = 42.0f;
    clattn_attention_desc d;
    cr_assert_eq(clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, N, N, D, D),
                 CLATTN_SUCCESS);
    clattn_context *same[2] = {pair[0], pair[0]};
    cr_expect_eq(clattn_attention_multi(same, 2, &d, CLATTN_SHARDING_AUTO, q, k, v, o, lse),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(pair[0]), "ctxs[1] is ctxs[0]"), "%s",
              clattn_context_last_error(pair[0]));
    d.window_left = -5;
    cr_expect_eq(clattn_attention_multi(pair, 2, &d, CLATTN_SHARDING_AUTO, q, k, v, o, lse),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(pair[0]), "window"), "%s",
              clattn_context_last_error(pair[0]));
    d.window_left = -1;
    /* what a part's call cannot take is named before any part starts (it was refused in the
     * parts, with an empty message) */
    float slope = 0.5f;
    for (int what = 0; what < 4; what++) {
        clattn_attention_desc m = d;
        if (what == 0) m.softcap = 10.0f;
        if (what == 1) m.alibi_slopes = &slope;
        if (what == 2) m.sinks = &slope;
        if (what == 3) m.lse_parts = 1;
        const char *expected = what == 3 ? "multi: lse_parts is not supported"
                                         : "multi: softcap, alibi_slopes and sinks are not";
        cr_expect_eq(clattn_attention_multi(pair, 2, &m, CLATTN_SHARDING_AUTO, q, k, v, o, lse),
                     CLATTN_ERR_INVALID_ARGUMENT);
        cr_expect(strstr(clattn_context_last_error(pair[0]), expected), "%s",
                  clattn_context_last_error(pair[0]));
        clattn_ring *ring = NULL;
        cr_expect_eq(clattn_ring_create(pair[0], &m, CLATTN_LAYOUT_BSHD, CLATTN_SHARDING_AUTO, 2, 0,
                                        q, &ring),
                     CLATTN_ERR_INVALID_ARGUMENT);
        cr_expect_null(ring);
    }
    cr_expect_eq(clattn_ring_counts(NULL, NULL, NULL), CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect_eq(clattn_attention_multi(pair, 2, &d, (clattn_sharding)7, q, k, v, o, lse),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect_eq(clattn_attention_multi(pair, 2, &d, CLATTN_SHARDING_AUTO, q, k, NULL, o, lse),
                 CLATTN_ERR_INVALID_ARGUMENT);
    d.variant = CLATTN_VARIANT_SPLIT, d.dim_qk = d.dim_v = 600; /* no part can run it */
    clattn_tensor_dense(&d.q, CLATTN_LAYOUT_BSHD, 1, N, 600, 0);
    d.k = d.v = d.o = d.q;
    float *big = calloc(N * 600, sizeof *big), *out = calloc(N * 600, sizeof *out);
    cr_expect_eq(clattn_attention_multi(pair, 2, &d, CLATTN_SHARDING_AUTO, big, big, big, out, lse),
                 CLATTN_ERR_UNSUPPORTED);
    /* every part fails; the first to fail stops the other, so either may be the one named */
    cr_expect(strstr(clattn_context_last_error(pair[0]), "multi: part ") &&
                  strstr(clattn_context_last_error(pair[0]), "head dims up to 576"),
              "%s", clattn_context_last_error(pair[0]));
    for (int i = 0; i < N * 600; i++) cr_assert_eq(out[i], 0.0f, "O was written after a failure");
    for (int i = 0; i < N * D; i++) cr_assert_eq(o[i], 42.0f, "O was written after a refusal");
    free(big), free(out);
    if (own) clattn_context_destroy(pair[0]), clattn_context_destroy(pair[1]);
}
