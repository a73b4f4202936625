/*
 * The multi-head attention layer (clattn_mha_*) on every device against its CPU reference:
 * self- and cross-attention (d_kv != d_model), GQA and MQA, each weight type with and without
 * biases, 16-bit X and Y, weights in buffers, masks, every attention path; head pruning (GQA
 * kept, kv heads duplicated, kv heads dropped), and the identity that defines it: a pruned layer
 * equals the unpruned one with the pruned heads' columns of W_o zeroed; a KV cache over several
 * decode steps equal to one causal call, and a q8_0 cache holding the layer's K/V rows
 * quantised; and refused calls that change nothing.
 *
 * Inputs: X uniform in [-1, 1]; weights and biases uniform in [-1/sqrt(in), 1/sqrt(in)], as
 * nn.Linear initialises them. Tolerance (docs/layer.md): docs/semantics.md section 4's for Y's
 * storage type, its absolute term scaled by the largest |Y| of the reference.
 */
#include <criterion/criterion.h>

#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* One layer and one call of it. */
typedef struct layer_case {
    size_t d_model, d_kv, hq, hkv, dqk, dv; /* d_kv 0: d_model */
    clattn_dtype wtype;
    int biases;      /* 0: none; 1: all four; 2: b_q and b_v only (Whisper's k_proj has none) */
    size_t b, n, nk; /* nk 0: self-attention */
    clattn_dtype x_dtype, y_dtype;
    int causal;
    uint64_t seed;
} layer_case;

/* The eight parameters as host arrays of the case's weight type. */
typedef struct layer_weights {
    void *p[8];
} layer_weights;

static size_t elem(clattn_dtype t) {
    return t == CLATTN_F32 ? 4 : 2;
}

/* n values uniform in [-scale, scale], stored as `dtype`. */
static void *random_values(size_t n, double scale, clattn_dtype dtype, uint64_t seed) {
    float *x = malloc(n * sizeof *x);
    void *out = malloc(n * 4);
    fill_uniform(x, n, seed);
    for (size_t i = 0; i < n; i++) x[i] = (float)(x[i] * scale);
    clattn_convert(CLATTN_F32, x, dtype, out, n);
    free(x);
    return out;
}

static size_t d_kv_of(const layer_case *lc) {
    return lc->d_kv ? lc->d_kv : lc->d_model;
}

/* [rows, cols] of parameter p in W_q, W_k, W_v, W_o, b_q, b_k, b_v, b_o order. */
static void param_shape(const layer_case *lc, int p, size_t *rows, size_t *cols) {
    size_t r[8] = {lc->hq * lc->dqk, lc->hkv * lc->dqk, lc->hkv * lc->dv, lc->d_model,
                   lc->hq * lc->dqk, lc->hkv * lc->dqk, lc->hkv * lc->dv, lc->d_model};
    size_t c[8] = {lc->d_model, d_kv_of(lc), d_kv_of(lc), lc->hq * lc->dv, 1, 1, 1, 1};
    *rows = r[p], *cols = c[p];
}

static void weights_make(const layer_case *lc, layer_weights *w) {
    static const int bias_sets[3][4] = {{0, 0, 0, 0}, {1, 1, 1, 1}, {1, 0, 1, 0}};
    memset(w, 0, sizeof *w);
    for (int p = 0; p < 8; p++) {
        size_t rows, cols, in;
        param_shape(lc, p, &rows, &cols);
        in = p < 4 ? cols : (p == 7 ? lc->hq * lc->dv : p == 4 ? lc->d_model : d_kv_of(lc));
        if (p < 4 || bias_sets[lc->biases][p - 4])
            w->p[p] = random_values(rows * cols, 1.0 / sqrt((double)in), lc->wtype,
                                    lc->seed * 16 + (uint64_t)p);
    }
}

static void weights_free(layer_weights *w) {
    for (int p = 0; p < 8; p++) free(w->p[p]);
}

static void layer_desc(const layer_case *lc, const layer_weights *w, clattn_mha_desc *d) {
    cr_assert_eq(clattn_mha_desc_init(d, lc->d_model, lc->hq, lc->hkv, lc->dqk, lc->dv),
                 CLATTN_SUCCESS);
    d->d_kv = lc->d_kv;
    d->weight_dtype = lc->wtype;
    clattn_mha_param *params[8] = {&d->w_q, &d->w_k, &d->w_v, &d->w_o,
                                   &d->b_q, &d->b_k, &d->b_v, &d->b_o};
    for (int p = 0; p < 8; p++) params[p]->host = w->p[p];
}

static void call_desc(const layer_case *lc, clattn_attention_desc *call) {
    cr_assert_eq(clattn_attention_desc_init(call, CLATTN_LAYOUT_BSHD, lc->b, lc->hq, lc->hkv, lc->n,
                                            lc->nk ? lc->nk : lc->n, lc->dqk, lc->dv),
                 CLATTN_SUCCESS);
    call->dtype = lc->x_dtype, call->out_dtype = lc->y_dtype;
    call->causal = lc->causal;
}

/* X and X_kv (NULL for self-attention) of a case. */
typedef struct layer_inputs {
    void *x, *x_kv;
    size_t y_count;
} layer_inputs;

static void inputs_make(const layer_case *lc, layer_inputs *in) {
    in->x = random_values(lc->b * lc->n * lc->d_model, 1.0, lc->x_dtype, lc->seed * 16 + 9);
    in->x_kv =
        lc->nk ? random_values(lc->b * lc->nk * d_kv_of(lc), 1.0, lc->x_dtype, lc->seed * 16 + 10)
               : NULL;
    in->y_count = lc->b * lc->n * lc->d_model;
}

static void inputs_free(layer_inputs *in) {
    free(in->x);
    free(in->x_kv);
}

/* A layer of case lc: its seeded weights and inputs, the layer's desc d and a call's desc `call`
 * (layer_open). A test may change d or call before layer_create makes the layer; layer_close
 * destroys it and frees the rest. */
typedef struct layer_setup {
    layer_case lc;
    layer_weights w;
    layer_inputs in;
    clattn_mha_desc d;
    clattn_attention_desc call;
    clattn_mha *mha;
} layer_setup;

static void layer_open(const layer_case *lc, layer_setup *s) {
    s->lc = *lc;
    weights_make(&s->lc, &s->w);
    inputs_make(&s->lc, &s->in);
    layer_desc(&s->lc, &s->w, &s->d);
    call_desc(&s->lc, &s->call);
    s->mha = NULL;
}

static void layer_create(clattn_context *ctx, layer_setup *s) {
    ASSERT_OK(ctx, clattn_mha_create(ctx, &s->d, &s->mha));
}

static void layer_close(layer_setup *s) {
    clattn_mha_destroy(s->mha);
    inputs_free(&s->in);
    weights_free(&s->w);
}

/* Y stored in `dtype` as floats (a new array). */
static float *as_floats(const void *y, size_t n, clattn_dtype dtype) {
    float *out = malloc(n * sizeof *out);
    clattn_convert(dtype, y, CLATTN_F32, out, n);
    return out;
}

/* The layer's tolerance (docs/layer.md): the contract's for Y's storage, atol scaled by max |ref|.
 * Returns how many values of got lie outside it. */
static size_t compare_layer(const char *label, const float *got, const float *ref, size_t n,
                            clattn_dtype y_dtype) {
    double *ref64 = malloc(n * sizeof *ref64), atol, rtol;
    for (size_t i = 0; i < n; i++) ref64[i] = ref[i];
    layer_tolerance(y_dtype, ref64, n, &atol, &rtol);
    size_t bad = compare_outputs(label, got, ref64, n, atol, rtol);
    free(ref64);
    return bad;
}

/* The GEMM row check_layer expects to have run (AUTO: any). */
static clattn_gemm expected_gemm = CLATTN_GEMM_AUTO;

/* Runs the layer (head mask `keep`) on ctx and the reference; compares them. */
static void check_layer(clattn_context *ctx, const layer_case *lc, const uint8_t *keep,
                        const clattn_attention_desc *call_given) {
    layer_setup s;
    layer_open(lc, &s);
    s.d.head_mask = keep;
    if (call_given) s.call = *call_given;
    const size_t count = s.in.y_count;
    void *y = malloc(count * 4), *ref = malloc(count * 4);
    layer_create(ctx, &s);
    ASSERT_OK(ctx, clattn_mha_forward_host(s.mha, &s.call, s.in.x, s.in.x_kv, y));
    cr_assert_eq(clattn_mha_reference(&s.d, &s.call, s.in.x, s.in.x_kv, ref), CLATTN_SUCCESS);
    if (expected_gemm != CLATTN_GEMM_AUTO) {
        clattn_mha_stats stats;
        clattn_mha_stats_init(&stats);
        cr_assert_eq(clattn_mha_last_stats(s.mha, &stats), CLATTN_SUCCESS);
        cr_expect(stats.projection_gemm == expected_gemm && stats.output_gemm == expected_gemm,
                  "GEMMs %s and %s ran, chose %s (%s)", clattn_gemm_name(stats.projection_gemm),
                  clattn_gemm_name(stats.output_gemm), clattn_gemm_name(expected_gemm),
                  stats.gemm_kernel);
    }
    float *got = as_floats(y, count, lc->y_dtype), *want = as_floats(ref, count, lc->y_dtype);
    char label[160];
    snprintf(label, sizeof label, "Y (d=%zu Hq=%zu Hkv=%zu w=%d x=%d y=%d bias=%d N=%zu Nk=%zu)",
             lc->d_model, lc->hq, lc->hkv, (int)lc->wtype, (int)lc->x_dtype, (int)lc->y_dtype,
             lc->biases, lc->n, lc->nk);
    cr_expect_eq(compare_layer(label, got, want, count, lc->y_dtype), 0, "%s", label);
    free(got), free(want), free(y), free(ref);
    layer_close(&s);
}

static const layer_case self_gqa = {32, 0,  4, 2,          8,          12, CLATTN_F32, 0,
                                    2,  11, 0, CLATTN_F32, CLATTN_F32, 1,  1};

Test(mha, self_attention_gqa_against_the_reference) {
    clattn_context **ctxs;
    size_t n = test_contexts(&ctxs);
    for (size_t i = 0; i < n; i++) check_layer(ctxs[i], &self_gqa, NULL, NULL);
}

Test(mha, cross_attention_mqa_with_biases) {
    clattn_context **ctxs;
    size_t n = test_contexts(&ctxs);
    layer_case lc = {32, 24, 4, 1, 16, 16, CLATTN_F32, 1, 2, 9, 17, CLATTN_F32, CLATTN_F32, 0, 2};
    clattn_attention_desc call;
    call_desc(&lc, &call);
    call.window_left = 5, call.window_right = 3; /* cross-attention with a window */
    for (size_t i = 0; i < n; i++) check_layer(ctxs[i], &lc, NULL, &call);
}

/* f16 and bf16 weights, with and without biases; 16-bit X and Y as well. */
Test(mha, weight_and_io_types) {
    clattn_context **ctxs;
    size_t n = test_contexts(&ctxs);
    const clattn_dtype types[] = {CLATTN_F32, CLATTN_F16, CLATTN_BF16};
    for (size_t i = 0; i < n; i++)
        for (size_t t = 1; t < COUNT(types); t++)
            for (int biases = 0; biases <= 2; biases++) {
                layer_case lc = self_gqa;
                lc.wtype = types[t], lc.biases = biases, lc.seed = 10 + t * 3 + (size_t)biases;
                lc.x_dtype = types[(t + (size_t)biases) % 3];
                lc.y_dtype = types[(t + 2 * (size_t)biases) % 3];
                check_layer(ctxs[i], &lc, NULL, NULL);
            }
}

/* One case on the context's GEMM row; check_layer expects the statistics to name the row. */
static void check_layer_on_gemm_row(clattn_context *ctx, clattn_gemm row, const void *one_case) {
    expected_gemm = row;
    check_layer(ctx, one_case, NULL, NULL);
    expected_gemm = CLATTN_GEMM_AUTO;
}

/* Each row of the GEMM table (runtime/gemm/) runs the projections and the output: self- and
 * cross-attention, every weight type, sizes off the panels' tiles; the statistics name it. */
Test(mha, every_gemm_row_against_the_reference) {
    const layer_case cases[] = {
        self_gqa,
        {32, 24, 4, 1, 16, 16, CLATTN_F32, 1, 2, 9, 17, CLATTN_F32, CLATTN_F32, 0, 21},
        {96, 0, 6, 2, 16, 16, CLATTN_F16, 2, 1, 70, 0, CLATTN_F32, CLATTN_F32, 1, 22},
        {80, 0, 5, 5, 16, 24, CLATTN_BF16, 1, 1, 37, 0, CLATTN_BF16, CLATTN_F16, 1, 23},
    };
    for_each_gemm_row(check_layer_on_gemm_row, cases, sizeof cases[0], COUNT(cases));
}

/* ---------------------------------------------------------------- weights in buffers */

/* A device buffer holding `bytes` of host. */
static cl_mem device_copy(clattn_context *ctx, const void *host, size_t bytes) {
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(clattn_context_cl_context(ctx),
                              CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0), bytes,
                              (void *)host, &err);
    cr_assert_eq(err, CL_SUCCESS);
    return m;
}

static void read_back(clattn_context *ctx, cl_mem m, void *host, size_t bytes) {
    cr_assert_eq(
        clEnqueueReadBuffer(clattn_context_queue(ctx), m, CL_TRUE, 0, bytes, host, 0, NULL, NULL),
        CL_SUCCESS);
}

/* W_q, W_k, W_v in one buffer after 5 unused elements (nn.MultiheadAttention's in_proj_weight
 * with an offset), W_o and the biases in buffers of their own: the layer computes exactly what
 * the same weights as host arrays give, through clattn_mha_forward as through _host. */
Test(mha, weights_in_buffers) {
    clattn_context **ctxs;
    size_t n = test_contexts(&ctxs);
    layer_case lc = self_gqa;
    lc.wtype = CLATTN_F16, lc.biases = 1;
    layer_weights w;
    layer_inputs in;
    weights_make(&lc, &w);
    inputs_make(&lc, &in);
    size_t e = elem(lc.wtype), count[8], offset = 5, total = offset;
    for (int p = 0; p < 8; p++) {
        size_t rows, cols;
        param_shape(&lc, p, &rows, &cols);
        count[p] = rows * cols;
    }
    unsigned char *packed = calloc(offset + count[0] + count[1] + count[2], e);
    for (int p = 0; p < 3; total += count[p], p++) memcpy(packed + total * e, w.p[p], count[p] * e);
    for (size_t i = 0; i < n; i++) {
        clattn_context *ctx = ctxs[i];
        clattn_mha_desc host_desc, buf_desc;
        layer_desc(&lc, &w, &host_desc);
        layer_desc(&lc, &w, &buf_desc);
        cl_mem in_proj = device_copy(ctx, packed, total * e), own[5];
        clattn_mha_param *params[8] = {&buf_desc.w_q, &buf_desc.w_k, &buf_desc.w_v, &buf_desc.w_o,
                                       &buf_desc.b_q, &buf_desc.b_k, &buf_desc.b_v, &buf_desc.b_o};
        for (int p = 0; p < 3; p++) {
            clattn_mha_param param = {NULL, in_proj,
                                      offset + (p > 0 ? count[0] : 0) + (p > 1 ? count[1] : 0)};
            *params[p] = param;
        }
        for (int p = 3; p < 8; p++) {
            own[p - 3] = device_copy(ctx, w.p[p], count[p] * e);
            clattn_mha_param param = {NULL, own[p - 3], 0};
            *params[p] = param;
        }
        clattn_mha *from_host = NULL, *from_buffers = NULL;
        ASSERT_OK(ctx, clattn_mha_create(ctx, &host_desc, &from_host));
        ASSERT_OK(ctx, clattn_mha_create(ctx, &buf_desc, &from_buffers));
        clattn_attention_desc call;
        call_desc(&lc, &call);
        float *a = malloc(in.y_count * 4), *b = malloc(in.y_count * 4);
        ASSERT_OK(ctx, clattn_mha_forward_host(from_host, &call, in.x, NULL, a));
        cl_mem x = device_copy(ctx, in.x, in.y_count * 4),
               y = device_copy(ctx, NULL, in.y_count * 4);
        cl_event done = NULL;
        ASSERT_OK(ctx, clattn_mha_forward(from_buffers, &call, x, NULL, y, &done));
        cr_assert_eq(clWaitForEvents(1, &done), CL_SUCCESS);
        clReleaseEvent(done);
        read_back(ctx, y, b, in.y_count * 4);
        cr_expect(memcmp(a, b, in.y_count * 4) == 0, "weights in buffers computed something else");
        clattn_mha_destroy(from_host);
        clattn_mha_destroy(from_buffers);
        for (int p = 0; p < 5; p++) clReleaseMemObject(own[p]);
        clReleaseMemObject(in_proj), clReleaseMemObject(x), clReleaseMemObject(y);
        free(a), free(b);
    }
    free(packed);
    inputs_free(&in);
    weights_free(&w);
}

/* ---------------------------------------------------------------- pruning */

typedef struct prune_case {
    uint8_t keep[4];
    size_t kept, kv; /* what clattn_mha_info must say */
    int duplicated;
} prune_case;

/* Hq = 4, Hkv = 2 (heads 0, 1 read kv head 0; heads 2, 3 kv head 1). */
static const prune_case prunes[] = {
    {{1, 0, 1, 0}, 2, 2, 0}, /* one query head a kv head: GQA kept */
    {{1, 1, 0, 0}, 2, 1, 0}, /* kv head 1 has no kept head: dropped */
    {{0, 0, 0, 1}, 1, 1, 0}, /* one head left */
    {{1, 1, 1, 0}, 3, 3, 1}, /* 2 and 1 query heads: K/V rows duplicated per query head */
};

static void expect_info(const clattn_mha *mha, const prune_case *pc) {
    clattn_mha_info info;
    clattn_mha_info_init(&info);
    cr_assert_eq(clattn_mha_get_info(mha, &info), CLATTN_SUCCESS);
    cr_expect(info.heads_kept == pc->kept && info.attention_heads_kv == pc->kv &&
                  info.kv_duplicated == pc->duplicated,
              "mask %d%d%d%d: kept %zu kv %zu duplicated %d, expected %zu %zu %d", pc->keep[0],
              pc->keep[1], pc->keep[2], pc->keep[3], info.heads_kept, info.attention_heads_kv,
              info.kv_duplicated, pc->kept, pc->kv, pc->duplicated);
}

/* Y of the layer of `w` with head mask `keep` (NULL: all heads). */
static float *layer_output(clattn_context *ctx, const layer_case *lc, const layer_weights *w,
                           const layer_inputs *in, const uint8_t *keep) {
    clattn_mha_desc d;
    clattn_attention_desc call;
    layer_desc(lc, w, &d);
    d.head_mask = keep;
    call_desc(lc, &call);
    clattn_mha *mha = NULL;
    float *y = malloc(in->y_count * 4);
    ASSERT_OK(ctx, clattn_mha_create(ctx, &d, &mha));
    ASSERT_OK(ctx, clattn_mha_forward_host(mha, &call, in->x, in->x_kv, y));
    clattn_mha_destroy(mha);
    return y;
}

/* The identity that defines pruning: the pruned layer equals the unpruned layer with the pruned
 * heads' columns of W_o (the weights their O meets) set to zero. */
static void expect_pruning_identity(clattn_context *ctx, const layer_case *lc,
                                    const prune_case *pc) {
    layer_weights w;
    layer_inputs in;
    weights_make(lc, &w);
    inputs_make(lc, &in);
    float *pruned = layer_output(ctx, lc, &w, &in, pc->keep);
    float *wo = w.p[3]; /* float32 W_o [d_model][Hq*Dv] */
    for (size_t r = 0; r < lc->d_model; r++)
        for (size_t h = 0; h < lc->hq; h++)
            if (!pc->keep[h]) memset(wo + r * lc->hq * lc->dv + h * lc->dv, 0, lc->dv * 4);
    float *zeroed = layer_output(ctx, lc, &w, &in, NULL);
    char label[64];
    snprintf(label, sizeof label, "pruned %d%d%d%d vs W_o zeroed", pc->keep[0], pc->keep[1],
             pc->keep[2], pc->keep[3]);
    cr_expect_eq(compare_layer(label, pruned, zeroed, in.y_count, CLATTN_F32), 0, "%s", label);
    free(pruned), free(zeroed);
    inputs_free(&in);
    weights_free(&w);
}

Test(mha, pruned_heads_against_the_reference_and_the_zeroed_layer) {
    clattn_context **ctxs;
    size_t n = test_contexts(&ctxs);
    for (size_t i = 0; i < n; i++)
        for (size_t p = 0; p < COUNT(prunes); p++) {
            layer_case lc = self_gqa;
            lc.biases = 1, lc.seed = 20 + p;
            check_layer(ctxs[i], &lc, prunes[p].keep, NULL);
            expect_pruning_identity(ctxs[i], &lc, &prunes[p]);
            layer_weights w;
            clattn_mha_desc d;
            weights_make(&lc, &w);
            layer_desc(&lc, &w, &d);
            d.head_mask = prunes[p].keep;
            clattn_mha *mha = NULL;
            ASSERT_OK(ctxs[i], clattn_mha_create(ctxs[i], &d, &mha));
            expect_info(mha, &prunes[p]);
            clattn_mha_destroy(mha);
            weights_free(&w);
        }
}

/* A new mask repacks; setting every head back gives exactly the unpruned layer's Y. */
Test(mha, set_head_mask_repacks) {
    clattn_context **ctxs;
    size_t n = test_contexts(&ctxs);
    layer_setup s; /* its layer made on each context in turn */
    layer_open(&self_gqa, &s);
    const layer_inputs in = s.in;
    const clattn_attention_desc call = s.call;
    for (size_t i = 0; i < n; i++) {
        clattn_context *ctx = ctxs[i];
        float *all = layer_output(ctx, &s.lc, &s.w, &in, NULL);
        float *pruned = layer_output(ctx, &s.lc, &s.w, &in, prunes[3].keep);
        float *y = malloc(in.y_count * 4);
        clattn_mha *mha = NULL;
        ASSERT_OK(ctx, clattn_mha_create(ctx, &s.d, &mha));
        ASSERT_OK(ctx, clattn_mha_set_head_mask(mha, prunes[3].keep));
        expect_info(mha, &prunes[3]);
        ASSERT_OK(ctx, clattn_mha_forward_host(mha, &call, in.x, NULL, y));
        cr_expect(memcmp(y, pruned, in.y_count * 4) == 0, "set_head_mask differs from creation");
        ASSERT_OK(ctx, clattn_mha_set_head_mask(mha, NULL));
        ASSERT_OK(ctx, clattn_mha_forward_host(mha, &call, in.x, NULL, y));
        cr_expect(memcmp(y, all, in.y_count * 4) == 0, "every head back is not the full layer");
        clattn_mha_destroy(mha);
        free(all), free(pruned), free(y);
    }
    layer_close(&s);
}

/* ---------------------------------------------------------------- masks and paths */

/* Per-head block layouts and biases are indexed by the layer's heads, and a pruned layer reads
 * only its kept heads' (the bias reduced on the device: dense, broadcast over the batch and the
 * rows, and with rows that overlap); every path of the attention. */
Test(mha, per_head_masks_with_pruning_on_every_path) {
    clattn_context **ctxs;
    size_t n = test_contexts(&ctxs);
    layer_case lc = self_gqa;
    lc.causal = 0, lc.biases = 2;
    size_t N = lc.n, blocks = (N + 3) / 4, plane = N * N;
    uint8_t layout[4 * 3 * 3];
    for (size_t i = 0; i < COUNT(layout); i++) layout[i] = (uint8_t)((i * 7 + 3) % 5 != 0);
    float *bias = malloc(lc.b * lc.hq * plane * sizeof *bias);
    fill_uniform(bias, lc.b * lc.hq * plane, 77);
    bias[plane + 5] = -INFINITY;                                   /* head 1, row 0, key 5 masked */
    const clattn_tensor strides[] = {{0, lc.hq * plane, plane, N}, /* [B, H, N, N] */
                                     {1, 0, N, 0},                 /* [1, H, 1, N] at offset 1 */
                                     {0, lc.hq * plane, plane, 1}}; /* rows overlapping */
    const clattn_path paths[] = {CLATTN_PATH_AUTO, CLATTN_PATH_GEMM, CLATTN_PATH_REFERENCE};
    const uint8_t gaps[2][4] = {{1, 0, 1, 1}, {0, 1, 0, 1}}; /* duplicated; GQA kept */
    for (size_t i = 0; i < n; i++)
        for (size_t s = 0; s < COUNT(strides); s++) {
            clattn_attention_desc call;
            call_desc(&lc, &call);
            cr_assert_eq(blocks, 3);
            call.block_layout = layout, call.block_q = call.block_k = 4;
            call.block_layout_per_head = 1;
            call.bias_host = bias, call.bias_strides = strides[s];
            call.window_left = 6, call.window_right = 2;
            int64_t globals[] = {3};
            call.global_tokens = globals, call.num_global_tokens = 1;
            call.path = paths[s];
            check_layer(ctxs[i], &lc, gaps[s % 2], &call);
            check_layer(ctxs[i], &lc, NULL, &call);
        }
    free(bias);
}

/* ---------------------------------------------------------------- KV cache */

enum { PREFILL = 5 };

/* A prefill of PREFILL tokens, then one token a step to lc->n, through
 * clattn_mha_forward_cache on `cache`: each step's Y against the same rows of `full` (one causal
 * call over the whole sequence), within atol * max|full| + rtol * |full| (max over the step's
 * rows); then the cache holds lc->n rows a sequence. */
static void decode_against(clattn_context *ctx, clattn_mha *mha, clattn_kv_cache *cache,
                           const layer_case *lc, const layer_inputs *in, const float *full,
                           double atol, double rtol, const char *what) {
    size_t row = lc->d_model * 4, seq = lc->n * row; /* bytes of a token, of a sequence */
    cl_mem x = device_copy(ctx, NULL, lc->b * PREFILL * row);
    cl_mem y = device_copy(ctx, NULL, lc->b * PREFILL * row);
    float *step = malloc(lc->b * PREFILL * row);
    double *ref = malloc(lc->b * PREFILL * lc->d_model * sizeof *ref);
    for (size_t t0 = 0; t0 < lc->n;) {
        size_t len = t0 == 0 ? PREFILL : 1; /* tokens [t0, t0 + len) of each sequence */
        size_t count = lc->b * len * lc->d_model;
        double top = 0;
        for (size_t b = 0; b < lc->b; b++) {
            cr_assert_eq(clEnqueueWriteBuffer(clattn_context_queue(ctx), x, CL_TRUE, b * len * row,
                                              len * row, (char *)in->x + b * seq + t0 * row, 0,
                                              NULL, NULL),
                         CL_SUCCESS);
            for (size_t k = 0; k < len * lc->d_model; k++)
                ref[b * len * lc->d_model + k] = full[(b * lc->n + t0) * lc->d_model + k];
        }
        for (size_t k = 0; k < count; k++) top = fmax(top, fabs(ref[k]));
        clattn_attention_desc call;
        clattn_attention_desc_init(&call, CLATTN_LAYOUT_BSHD, lc->b, lc->hq, lc->hkv, len, len,
                                   lc->dqk, lc->dv);
        call.causal = 1;
        ASSERT_OK(ctx, clattn_mha_forward_cache(mha, cache, &call, x, NULL, y, NULL));
        read_back(ctx, y, step, count * 4);
        char label[96];
        snprintf(label, sizeof label, "%s, tokens %zu..%zu", what, t0, t0 + len - 1);
        cr_expect_eq(compare_outputs(label, step, ref, count, atol * top, rtol), 0, "%s", label);
        t0 += len;
    }
    int32_t lengths[8];
    cr_assert(lc->b <= COUNT(lengths));
    clattn_kv_cache_lengths(cache, lengths);
    for (size_t b = 0; b < lc->b; b++)
        cr_expect_eq(lengths[b], (int32_t)lc->n, "%s: sequence %zu has %d rows", what, b,
                     lengths[b]);
    clReleaseMemObject(x), clReleaseMemObject(y);
    free(step), free(ref);
}

/* A cache for lc's layer (`kv` heads: clattn_mha_info.attention_heads_kv) in `dtype`. */
static clattn_kv_cache *layer_cache(clattn_context *ctx, const layer_case *lc, size_t kv,
                                    clattn_dtype dtype) {
    clattn_kv_cache_desc cd;
    clattn_kv_cache_desc_init(&cd, lc->b, kv, lc->dqk, lc->dv, 16);
    cd.dtype = dtype;
    clattn_kv_cache *cache = NULL;
    ASSERT_OK(ctx, clattn_kv_cache_create(ctx, &cd, &cache));
    return cache;
}

/* Each step's Y equals that row of one causal call over the whole sequence; for a pruned layer
 * whose K/V rows are duplicated, and each float cache storage type (16-bit caches hold K and V
 * rounded, so their tolerance is that type's). */
Test(mha, kv_cache_decoding_equals_one_causal_call) {
    clattn_context **ctxs;
    size_t n = test_contexts(&ctxs);
    layer_case lc = self_gqa;
    lc.biases = 1, lc.n = 12;
    const clattn_dtype types[] = {CLATTN_F32, CLATTN_F16, CLATTN_BF16};
    layer_weights w;
    layer_inputs in;
    weights_make(&lc, &w);
    inputs_make(&lc, &in);
    for (size_t i = 0; i < n; i++)
        for (size_t t = 0; t < COUNT(types); t++) {
            clattn_context *ctx = ctxs[i];
            const uint8_t *keep = t == 0 ? NULL : prunes[3].keep;
            float *full = layer_output(ctx, &lc, &w, &in, keep); /* causal over all tokens */
            clattn_mha_desc d;
            layer_desc(&lc, &w, &d);
            d.head_mask = keep;
            clattn_mha *mha = NULL;
            clattn_mha_info info;
            clattn_mha_info_init(&info);
            ASSERT_OK(ctx, clattn_mha_create(ctx, &d, &mha));
            clattn_mha_get_info(mha, &info);
            clattn_kv_cache *cache = layer_cache(ctx, &lc, info.attention_heads_kv, types[t]);
            double atol, rtol;
            tolerance_for(types[t], CLATTN_F32, &atol, &rtol);
            char what[32];
            snprintf(what, sizeof what, "cache dtype %d", (int)types[t]);
            decode_against(ctx, mha, cache, &lc, &in, full, atol, rtol, what);
            clattn_kv_cache_destroy(cache);
            clattn_mha_destroy(mha);
            free(full);
        }
    inputs_free(&in);
    weights_free(&w);
}

/* Every value of the float32 storage `ref` within half a step of the q8_0 storage `q8` (the
 * same rows, blocks of 32 values: a float16 scale d = max|x| / 127, then 32 int8), and the
 * scale's float16 rounding: q is taken with the float32 d (ggml's rule), up to 127 d / 2048. */
static void expect_q8_storage(const float *ref, const uint8_t *q8, size_t n, const char *what) {
    float *back = malloc(n * sizeof *back);
    cr_assert_eq(clattn_convert(CLATTN_Q8_0, q8, CLATTN_F32, back, n), CLATTN_SUCCESS);
    size_t bad = 0;
    for (size_t blk = 0; blk < n / 32; blk++) {
        uint16_t bits = (uint16_t)(q8[blk * 34] | q8[blk * 34 + 1] << 8);
        float d, max = 0.0f;
        clattn_convert(CLATTN_F16, &bits, CLATTN_F32, &d, 1);
        for (size_t i = 0; i < 32; i++) max = fmaxf(max, fabsf(ref[blk * 32 + i]));
        bad += fabsf(d - max / 127.0f) > max / 127.0f / 1024.0f;
        for (size_t i = 0; i < 32; i++)
            bad += fabsf(back[blk * 32 + i] - ref[blk * 32 + i]) >
                   d * (0.5f + 127.0f / 2048.0f) * 1.0001f;
    }
    cr_expect_eq(bad, 0, "%s: %zu scales or values off the float32 cache's rows", what, bad);
    free(back);
}

/* A q8_0 cache (issue 16: 8-bit K/V is a storage type of the cache): the layer appends its
 * float32 K/V rows, which the cache quantises on the device. The cache then holds, within half
 * a step, the rows a float32 cache fed the same tokens holds, and each step's Y stays within
 * 2e-2 * max|Y| + 4e-3 * |Y| of one causal float32 call: K and V's rounding (half a step, up to
 * 0.4% of a block's largest value) costs about 0.5% of max|Y| here. */
#define TOL_MHA_Q8_ATOL 2e-2
#define TOL_MHA_Q8_RTOL 4e-3
Test(mha, kv_cache_q8_0_quantises_the_layers_rows) {
    clattn_context **ctxs;
    size_t n = test_contexts(&ctxs);
    const layer_case lc = {64, 0,  4, 2,          32,         32, CLATTN_F32, 1,
                           2,  12, 0, CLATTN_F32, CLATTN_F32, 1,  5};
    layer_setup s; /* its layer made on each context in turn */
    layer_open(&lc, &s);
    size_t values = lc.b * 16 * lc.hkv * lc.dqk; /* K's and V's (Dqk = Dv), capacity 16 */
    float *kf = malloc(values * 4), *vf = malloc(values * 4);
    uint8_t *kq = malloc(values / 32 * 34), *vq = malloc(values / 32 * 34);
    for (size_t i = 0; i < n; i++) {
        clattn_context *ctx = ctxs[i];
        float *full = layer_output(ctx, &lc, &s.w, &s.in, NULL);
        clattn_mha *mha = NULL;
        ASSERT_OK(ctx, clattn_mha_create(ctx, &s.d, &mha));
        clattn_kv_cache *f32 = layer_cache(ctx, &lc, lc.hkv, CLATTN_F32);
        clattn_kv_cache *q8 = layer_cache(ctx, &lc, lc.hkv, CLATTN_Q8_0);
        decode_against(ctx, mha, f32, &lc, &s.in, full, TOL_F32_ATOL, TOL_F32_RTOL, "f32 cache");
        decode_against(ctx, mha, q8, &lc, &s.in, full, TOL_MHA_Q8_ATOL, TOL_MHA_Q8_RTOL,
                       "q8_0 cache");
        ASSERT_OK(ctx, clattn_kv_cache_read_host(f32, kf, vf));
        ASSERT_OK(ctx, clattn_kv_cache_read_host(q8, kq, vq));
        expect_q8_storage(kf, kq, values, "K");
        expect_q8_storage(vf, vq, values, "V");
        clattn_kv_cache_destroy(f32), clattn_kv_cache_destroy(q8);
        clattn_mha_destroy(mha);
        free(full);
    }
    free(kf), free(vf), free(kq), free(vq);
    layer_close(&s);
}

/* ---------------------------------------------------------------- refusals */

/* Creation refuses a mask without a head, missing, doubled and too small weights, naming them. */
Test(mha, bad_layers_are_refused) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_context *ctx = ctxs[0];
    layer_case lc = self_gqa;
    layer_weights w;
    weights_make(&lc, &w);
    const uint8_t none[4] = {0, 0, 0, 0};
    cl_mem small = device_copy(ctx, NULL, 64);
    for (int bad = 0; bad < 5; bad++) {
        clattn_mha_desc d;
        layer_desc(&lc, &w, &d);
        const char *want[] = {"keeps none", "W_o is missing", "given twice", "W_k [16, 32]",
                              "multiple"};
        if (bad == 0) d.head_mask = none;
        if (bad == 1) d.w_o.host = NULL;
        if (bad == 2) d.b_q.buffer = small, d.b_q.host = w.p[0];
        if (bad == 3) d.w_k.host = NULL, d.w_k.buffer = small;
        if (bad == 4) d.heads_kv = 3;
        clattn_mha *mha = (clattn_mha *)&d; /* must come back NULL */
        cr_expect_eq(clattn_mha_create(ctx, &d, &mha), CLATTN_ERR_INVALID_ARGUMENT, "case %d", bad);
        cr_expect_null(mha);
        cr_expect(strstr(clattn_context_last_error(ctx), want[bad]), "case %d: '%s' lacks '%s'",
                  bad, clattn_context_last_error(ctx), want[bad]);
    }
    clReleaseMemObject(small);
    weights_free(&w);
}

/* A head count whose head plan (a size_t a query head) overflows size_t is refused, not
 * allocated short: the reference used to write past 8 bytes (heads_q = 2^61 + 1). */
Test(mha, a_head_count_past_memory_is_refused) {
    static float dummy[64];
    const size_t hq = ((size_t)1 << 61) + 1;
    clattn_mha_desc d;
    cr_assert_eq(clattn_mha_desc_init(&d, 1, hq, 1, 1, 1), CLATTN_SUCCESS);
    d.w_q.host = d.w_k.host = d.w_v.host = d.w_o.host = dummy;
    clattn_attention_desc call;
    clattn_attention_desc_init(&call, CLATTN_LAYOUT_BSHD, 1, hq, 1, 1, 1, 1, 1);
    float x[1] = {0}, y[1] = {0};
    cr_expect_eq(clattn_mha_reference(&d, &call, x, NULL, y), CLATTN_ERR_INVALID_ARGUMENT);
}

/* A cache call naming a variant or a path that does not serve caches is refused before its
 * append: rows kept in storage past a rollback (which set_lengths may bring back) stay as they
 * were. `cache` (made from cd, float32) is empty; `good` a call that runs. */
static void expect_cache_rows_kept(clattn_context *ctx, clattn_mha *mha, clattn_kv_cache *cache,
                                   const clattn_kv_cache_desc *cd,
                                   const clattn_attention_desc *good, cl_mem x, cl_mem y) {
    size_t k_count = cd->batch * cd->capacity * cd->heads_kv * cd->dim_qk;
    size_t v_count = cd->batch * cd->capacity * cd->heads_kv * cd->dim_v;
    float *k = malloc(2 * (k_count + v_count) * sizeof *k), *v = k + k_count;
    float *k_after = v + v_count, *v_after = k_after + k_count;
    ASSERT_OK(ctx, clattn_mha_forward_cache(mha, cache, good, x, NULL, y, NULL));
    const int32_t two[2] = {2, 2};
    ASSERT_OK(ctx, clattn_kv_cache_set_lengths(cache, two)); /* rows 2.. kept in storage */
    ASSERT_OK(ctx, clattn_kv_cache_read_host(cache, k, v));
    for (int bad = 0; bad < 2; bad++) {
        clattn_attention_desc call = *good;
        if (bad == 0) call.variant = CLATTN_VARIANT_LANES;
        if (bad == 1) call.path = CLATTN_PATH_GEMM;
        cr_expect_eq(clattn_mha_forward_cache(mha, cache, &call, x, NULL, y, NULL),
                     CLATTN_ERR_UNSUPPORTED, "case %d", bad);
        cr_expect(strstr(clattn_context_last_error(ctx), "KV cache") != NULL, "case %d: '%s'", bad,
                  clattn_context_last_error(ctx));
        int32_t lengths[2] = {-1, -1};
        clattn_kv_cache_lengths(cache, lengths);
        cr_expect(lengths[0] == 2 && lengths[1] == 2, "case %d: lengths %d %d", bad, lengths[0],
                  lengths[1]);
        ASSERT_OK(ctx, clattn_kv_cache_read_host(cache, k_after, v_after));
        cr_expect(memcmp(k, k_after, k_count * sizeof *k) == 0 &&
                      memcmp(v, v_after, v_count * sizeof *v) == 0,
                  "case %d: a refused call changed the cache's rows", bad);
    }
    free(k);
}

/* Refused calls write nothing: Y keeps its bytes, a refused head mask keeps the layer's, and a
 * refused cache call keeps the cache's lengths and rows. */
Test(mha, bad_calls_change_nothing) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_context *ctx = ctxs[0];
    layer_setup s;
    layer_open(&self_gqa, &s);
    layer_create(ctx, &s);
    const layer_case *lc = &s.lc;
    clattn_mha *mha = s.mha;
    const clattn_attention_desc good = s.call;
    const layer_inputs in = s.in;
    size_t bytes = in.y_count * 4;
    float *sentinel = malloc(bytes), *after = malloc(bytes), *before = malloc(bytes);
    for (size_t i = 0; i < in.y_count; i++) sentinel[i] = 12345.0f;
    cl_mem x = device_copy(ctx, in.x, bytes), y = device_copy(ctx, sentinel, bytes);
    cl_mem short_x = device_copy(ctx, in.x, bytes - 4);
    clattn_attention_desc call;
    ASSERT_OK(ctx, clattn_mha_forward_host(mha, &good, in.x, NULL, before));
    cl_buffer_region all_of_x = {0, bytes};
    cl_int err = CL_SUCCESS;
    cl_mem x_again = clCreateSubBuffer(x, 0, CL_BUFFER_CREATE_TYPE_REGION, &all_of_x, &err);
    cr_assert_eq(err, CL_SUCCESS, "a sub-buffer of X: %d", err);
    cl_mem read_only =
        clCreateBuffer(clattn_context_cl_context(ctx), CL_MEM_READ_ONLY, bytes, NULL, &err);
    cr_assert_eq(err, CL_SUCCESS, "a read-only Y: %d", err);
    static const float sinks[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    for (int bad = 0; bad < 9; bad++) {
        const char *want[] = {
            "the layer Hq=4",  "len_k = len_q", "X needs", "Y shares memory with X",
            "window",          "q8_0 or q4_0",  "sinks",   "Y shares memory with X",
            "CL_MEM_READ_ONLY"};
        call = good;
        cl_mem xb = x, yb = y;
        if (bad == 0) call.heads_q = 2, call.heads_kv = 1;
        if (bad == 1) call.len_k = lc->n + 1;
        if (bad == 2) xb = short_x;
        if (bad == 3) yb = x;
        if (bad == 4) call.window_left = -2;
        if (bad == 5) call.kv_q8_0 = 1;   /* the layer's K and V are float32 */
        if (bad == 6) call.sinks = sinks; /* not offered by the layer yet */
        if (bad == 7) yb = x_again;       /* the same memory through another handle */
        if (bad == 8) yb = read_only;
        cr_expect_eq(clattn_mha_forward(mha, &call, xb, NULL, yb, NULL),
                     CLATTN_ERR_INVALID_ARGUMENT, "case %d", bad);
        cr_expect(strstr(clattn_context_last_error(ctx), want[bad]), "case %d: '%s' lacks '%s'",
                  bad, clattn_context_last_error(ctx), want[bad]);
        read_back(ctx, y, after, bytes);
        cr_expect(memcmp(after, sentinel, bytes) == 0, "case %d wrote Y", bad);
    }
    const uint8_t none[4] = {0, 0, 0, 0};
    cr_expect_eq(clattn_mha_set_head_mask(mha, none), CLATTN_ERR_INVALID_ARGUMENT);
    ASSERT_OK(ctx, clattn_mha_forward_host(mha, &good, in.x, NULL, after));
    cr_expect(memcmp(after, before, bytes) == 0, "a refused head mask changed the layer");
    /* a cache of other heads, and new_len past N: refused before the append */
    clattn_kv_cache_desc cd;
    clattn_kv_cache_desc_init(&cd, lc->b, lc->hkv + 1, lc->dqk, lc->dv, 32);
    clattn_kv_cache *wrong = NULL, *right = NULL;
    ASSERT_OK(ctx, clattn_kv_cache_create(ctx, &cd, &wrong));
    cd.heads_kv = lc->hkv;
    ASSERT_OK(ctx, clattn_kv_cache_create(ctx, &cd, &right));
    int32_t too_many[2] = {1, (int32_t)lc->n + 1}, lengths[2] = {-1, -1};
    cr_expect_eq(clattn_mha_forward_cache(mha, wrong, &good, x, NULL, y, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(ctx), "the cache has B=2 Hkv=3"), "%s",
              clattn_context_last_error(ctx));
    cr_expect_eq(clattn_mha_forward_cache(mha, right, &good, x, too_many, y, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT);
    clattn_kv_cache_lengths(right, lengths);
    cr_expect(lengths[0] == 0 && lengths[1] == 0, "lengths %d %d", lengths[0], lengths[1]);
    read_back(ctx, y, after, bytes);
    cr_expect(memcmp(after, sentinel, bytes) == 0, "a refused cache call wrote Y");
    expect_cache_rows_kept(ctx, mha, right, &cd, &good, x, y);
    clattn_kv_cache_destroy(wrong), clattn_kv_cache_destroy(right);
    layer_close(&s);
    clReleaseMemObject(x), clReleaseMemObject(y), clReleaseMemObject(short_x);
    clReleaseMemObject(x_again), clReleaseMemObject(read_only);
    free(sentinel), free(after), free(before);
}

/* Y in the cache's storage, which the call appends to, is refused before the append (it
 * was taken, and the output GEMM wrote Y over the appended rows). */
Test(mha, y_in_the_caches_storage_is_refused) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_context *ctx = ctxs[0];
    layer_setup s;
    layer_open(&self_gqa, &s);
    layer_create(ctx, &s);
    const layer_case *lc = &s.lc;
    clattn_kv_cache_desc cd;
    clattn_kv_cache_desc_init(&cd, lc->b, lc->hkv, lc->dqk, lc->dv, 32);
    size_t y_bytes = s.in.y_count * 4, k_bytes = lc->b * 32 * lc->hkv * lc->dqk * 4;
    size_t v_bytes = lc->b * 32 * lc->hkv * lc->dv * 4;
    cl_mem x = device_copy(ctx, s.in.x, y_bytes);
    cl_mem k = device_copy(ctx, NULL, y_bytes > k_bytes ? y_bytes : k_bytes);
    cl_mem v = device_copy(ctx, NULL, y_bytes > v_bytes ? y_bytes : v_bytes);
    clattn_kv_cache *cache = NULL;
    ASSERT_OK(ctx, clattn_kv_cache_wrap(ctx, &cd, k, v, NULL, &cache));
    for (int which = 0; which < 2; which++) {
        cr_expect_eq(clattn_mha_forward_cache(s.mha, cache, &s.call, x, NULL, which ? v : k, NULL),
                     CLATTN_ERR_INVALID_ARGUMENT);
        const char *want = which ? "Y shares memory with the cache's V storage"
                                 : "Y shares memory with the cache's K storage";
        cr_expect(strstr(clattn_context_last_error(ctx), want) != NULL, "'%s'",
                  clattn_context_last_error(ctx));
    }
    int32_t lengths[2] = {-1, -1};
    clattn_kv_cache_lengths(cache, lengths);
    cr_expect(lengths[0] == 0 && lengths[1] == 0, "lengths %d %d", lengths[0], lengths[1]);
    clattn_kv_cache_destroy(cache);
    layer_close(&s);
    clReleaseMemObject(x), clReleaseMemObject(k), clReleaseMemObject(v);
}

/* ---------------------------------------------------------------- statistics, rollback */

/* The last call's statistics name the attention's variant and kernel and its heads, and, while
 * the context times, each phase's time and the GEMMs' FLOP counts. */
Test(mha, stats_describe_the_last_call) {
    clattn_context *ctx = NULL;
    cr_assert_eq(clattn_context_create(&ctx, 0), CLATTN_SUCCESS);
    ASSERT_OK(ctx, clattn_context_set_timing(ctx, 1));
    layer_setup s;
    layer_open(&self_gqa, &s);
    s.d.head_mask = prunes[0].keep; /* heads 0 and 2 */
    s.call.path = CLATTN_PATH_GEMM;
    clattn_mha_stats stats;
    clattn_mha_stats_init(&stats);
    layer_create(ctx, &s);
    cr_expect_eq(clattn_mha_last_stats(s.mha, &stats), CLATTN_ERR_INVALID_ARGUMENT, "no call yet");
    float *y = malloc(s.in.y_count * 4);
    ASSERT_OK(ctx, clattn_mha_forward_host(s.mha, &s.call, s.in.x, NULL, y));
    cr_assert_eq(clattn_mha_last_stats(s.mha, &stats), CLATTN_SUCCESS);
    cr_expect_eq(stats.variant, CLATTN_VARIANT_GEMM);
    cr_expect(strstr(stats.kernel, "gemm") != NULL, "kernel '%s'", stats.kernel);
    cr_expect(stats.attention_heads_q == 2 && stats.attention_heads_kv == 2);
    cr_expect(stats.projection_ms > 0 && stats.attention_ms > 0 && stats.output_ms > 0,
              "phases %g %g %g ms", stats.projection_ms, stats.attention_ms, stats.output_ms);
    size_t m = s.lc.b * s.lc.n; /* 2 kept heads of Dqk 8 and 2 kv heads of Dqk 8 + Dv 12 */
    cr_expect_eq(stats.projection_flops, 2 * m * s.lc.d_model * (2 * 8 + 2 * (8 + 12)));
    cr_expect_eq(stats.output_flops, 2 * m * 2 * 12 * s.lc.d_model);
    layer_close(&s);
    clattn_context_destroy(ctx);
    free(y);
}

/* One cache call failing after its append (a build failed by the test hook: `failing`), with Y
 * stored as out_dtype: the cache's lengths are set back, the call's own message kept, and the
 * next call appends once. */
static void expect_rolled_back(const char *failing, clattn_dtype out_dtype) {
    clattn_context *ctx = NULL;
    cr_assert_eq(clattn_context_create(&ctx, 0), CLATTN_SUCCESS);
    layer_setup s;
    layer_open(&self_gqa, &s);
    s.call.out_dtype = out_dtype;
    layer_create(ctx, &s);
    const layer_case *lc = &s.lc;
    clattn_kv_cache_desc cd;
    clattn_kv_cache_desc_init(&cd, lc->b, lc->hkv, lc->dqk, lc->dv, 32);
    clattn_kv_cache *cache = NULL;
    ASSERT_OK(ctx, clattn_kv_cache_create(ctx, &cd, &cache));
    size_t bytes = s.in.y_count * 4;
    cl_mem x = device_copy(ctx, s.in.x, bytes), y = device_copy(ctx, NULL, bytes);
    setenv("CLATTN_TEST_FAIL_BUILD", failing, 1);
    clattn_status status = clattn_mha_forward_cache(s.mha, cache, &s.call, x, NULL, y, NULL);
    unsetenv("CLATTN_TEST_FAIL_BUILD");
    cr_expect_neq(status, CLATTN_SUCCESS, "%s", failing);
    cr_expect(strstr(clattn_context_last_error(ctx), "CLATTN_TEST_FAIL_BUILD") != NULL, "'%s'",
              clattn_context_last_error(ctx));
    int32_t lengths[2] = {-1, -1};
    clattn_kv_cache_lengths(cache, lengths);
    cr_expect(lengths[0] == 0 && lengths[1] == 0, "%s: lengths %d %d after the failed call",
              failing, lengths[0], lengths[1]);
    ASSERT_OK(ctx, clattn_mha_forward_cache(s.mha, cache, &s.call, x, NULL, y, NULL));
    clattn_kv_cache_lengths(cache, lengths);
    cr_expect(lengths[0] == (int32_t)lc->n && lengths[1] == (int32_t)lc->n, "%s: lengths %d %d",
              failing, lengths[0], lengths[1]);
    clattn_kv_cache_destroy(cache);
    layer_close(&s);
    clReleaseMemObject(x), clReleaseMemObject(y);
    clattn_context_destroy(ctx);
}

/* The attention (split serves caches) or the output phase after it (Y narrowed to float16 by
 * convert.cl) failing. */
Test(mha, failed_cache_attention_rolls_the_append_back) {
    expect_rolled_back("split.cl", CLATTN_F32);
    expect_rolled_back("convert.cl", CLATTN_F16);
}

/* A layer whose K/V weights read another width (d_kv != d_model) is cross-attention only: without
 * X_kv, and over a KV cache (whose new rows come from X), its calls are refused. */
Test(mha, a_cross_attention_layer_needs_x_kv) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_context *ctx = ctxs[0];
    const layer_case lc = {32, 24, 4, 2,          8,          8, CLATTN_F32, 0,
                           2,  5,  7, CLATTN_F32, CLATTN_F32, 0, 3};
    layer_setup s;
    layer_open(&lc, &s);
    s.call.len_k = lc.n; /* a self-attention call */
    layer_create(ctx, &s);
    const size_t bytes = s.in.y_count * 4;
    float *y = malloc(bytes);
    cr_expect_eq(clattn_mha_forward_host(s.mha, &s.call, s.in.x, NULL, y),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(ctx), "give X_kv") != NULL, "'%s'",
              clattn_context_last_error(ctx));
    clattn_kv_cache_desc cd;
    clattn_kv_cache_desc_init(&cd, lc.b, lc.hkv, lc.dqk, lc.dv, 16);
    clattn_kv_cache *cache = NULL;
    ASSERT_OK(ctx, clattn_kv_cache_create(ctx, &cd, &cache));
    cl_mem x = device_copy(ctx, s.in.x, bytes), yb = device_copy(ctx, NULL, bytes);
    cr_expect_eq(clattn_mha_forward_cache(s.mha, cache, &s.call, x, NULL, yb, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(ctx), "projects K and V from X") != NULL, "'%s'",
              clattn_context_last_error(ctx));
    clattn_kv_cache_destroy(cache);
    layer_close(&s);
    clReleaseMemObject(x), clReleaseMemObject(yb);
    free(y);
}
