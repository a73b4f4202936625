/* See conformance.h. Inputs are seeded uniform in [-1, 1] (docs/semantics.md section 4). */
#include "conformance.h"

#include "common.h"
#include "npy.h"
#include "textbuf.h" /* OUTPUT_PATH_MAX */

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void tolerance_for(clattn_dtype in, clattn_dtype out, double *atol, double *rtol) {
    clattn_tolerance(in, out, atol, rtol, NULL);
}

void layer_tolerance(clattn_dtype y_dtype, const double *ref, size_t n, double *atol,
                     double *rtol) {
    double top = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(ref[i]) && fabs(ref[i]) > top) top = fabs(ref[i]);
    tolerance_for(CLATTN_F32, y_dtype, atol, rtol);
    *atol *= top;
}

/* The loosest of the case's storage types': Q, K and V's, quantised K and V's, and O's. */
static void case_tolerance(const attn_case *c, double *atol, double *rtol) {
    tolerance_for(c->dtype, c->out_dtype, atol, rtol);
    double kv_atol, kv_rtol;
    tolerance_for(c->kv_quant, c->out_dtype, &kv_atol, &kv_rtol);
    *atol = fmax(*atol, kv_atol), *rtol = fmax(*rtol, kv_rtol);
}

int npy_dtype_of(clattn_dtype dtype) {
    return dtype == CLATTN_F16 ? NPY_F16 : dtype == CLATTN_BF16 ? NPY_U16 : NPY_F32;
}

/* Everything a case allocates; released by case_free. */
typedef struct case_data {
    clattn_attention_desc desc;
    clattn_attention_extents ext;
    void *q, *k, *v, *o;
    void *k_blocks, *v_blocks; /* K and V quantised (attn_case.kv_quant), or NULL */
    float *bias, *lse;
    float *slopes, *sinks; /* ALiBi slopes, sinks (section 8) */
    uint8_t *layout;
    double *ref_o, *ref_lse; /* the reference's O [B][Hq][Nq][Dv] and LSE, widened */
} case_data;

static uint64_t next_random(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float uniform(uint64_t *state) {
    return (float)((double)(next_random(state) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

void case_init(attn_case *c, size_t b, size_t hq, size_t hkv, size_t nq, size_t nk, size_t dqk,
               size_t dv) {
    memset(c, 0, sizeof *c);
    c->b = b, c->hq = hq, c->hkv = hkv, c->nq = nq, c->nk = nk, c->dqk = dqk, c->dv = dv;
    c->left = c->right = -1;
    c->dilation = 1;
    c->seed = 1;
}

static void case_free(case_data *data) {
    free(data->q), free(data->k), free(data->v), free(data->o);
    free(data->k_blocks), free(data->v_blocks);
    free(data->bias), free(data->lse), free(data->layout);
    free(data->slopes), free(data->sinks);
    free(data->ref_o), free(data->ref_lse);
    memset(data, 0, sizeof *data);
}

static const char *dtype_text(clattn_dtype dtype) {
    static const char *const names[] = {"f32", "f16", "bf16", "q8_0", "q4_0"}; /* enum order */
    return names[dtype];
}

/* What the call reads as K and V: their blocks when the case quantises them. */
static const void *k_input(const case_data *data) {
    return data->k_blocks ? data->k_blocks : data->k;
}

static const void *v_input(const case_data *data) {
    return data->v_blocks ? data->v_blocks : data->v;
}

static size_t dtype_bytes(clattn_dtype dtype) {
    return dtype == CLATTN_F32 ? 4 : 2;
}

/* Fills `bytes` of storage with uniform values in the dtype. */
static void fill_tensor(void *data, size_t bytes, clattn_dtype dtype, uint64_t *state) {
    for (size_t i = 0; i < bytes / dtype_bytes(dtype); i++) {
        float x = uniform(state);
        clattn_convert(CLATTN_F32, &x, dtype, (char *)data + i * dtype_bytes(dtype), 1);
    }
}

/* NaN in every element of `bytes` of storage: the sentinel O and LSE start as, so that an
 * element the call never writes fails the comparison (zeros would pass for an empty row). */
static void fill_nan(void *data, size_t bytes, clattn_dtype dtype) {
    const float nan = NAN;
    for (size_t i = 0; i < bytes / dtype_bytes(dtype); i++)
        clattn_convert(CLATTN_F32, &nan, dtype, (char *)data + i * dtype_bytes(dtype), 1);
}

/* Stores one value of storage dtype at element `index`. */
static void store_value(void *data, clattn_dtype dtype, size_t index, float value) {
    clattn_convert(CLATTN_F32, &value, dtype, (char *)data + index * dtype_bytes(dtype), 1);
}

/* The reference's O and LSE, from clattn_attention_reference: O written as dense float32
 * [B][Hq][Nq][Dv] (the rounding to float32 is far below every tolerance), then widened. */
static clattn_status reference_outputs(const attn_case *c, case_data *data) {
    clattn_attention_desc ref = data->desc;
    ref.out_dtype = CLATTN_F32;
    clattn_status status = clattn_tensor_dense(&ref.o, CLATTN_LAYOUT_BHSD, c->hq, c->nq, c->dv, 0);
    size_t rows = c->b * c->hq * c->nq;
    float *o = malloc(rows * c->dv * sizeof *o), *lse = malloc(rows * sizeof *lse);
    if (status == CLATTN_SUCCESS && (!o || !lse)) status = CLATTN_ERR_OUT_OF_MEMORY;
    if (status == CLATTN_SUCCESS)
        status = clattn_attention_reference(&ref, data->q, k_input(data), v_input(data), o, lse);
    for (size_t i = 0; status == CLATTN_SUCCESS && i < rows * c->dv; i++) data->ref_o[i] = o[i];
    for (size_t r = 0; status == CLATTN_SUCCESS && r < rows; r++) data->ref_lse[r] = lse[r];
    free(o);
    free(lse);
    return status;
}

static void setup_mask(const attn_case *c, case_data *data, uint64_t *state) {
    clattn_attention_desc *d = &data->desc;
    d->causal = c->causal;
    d->window_left = c->left;
    d->window_right = c->right;
    d->dilation = c->dilation > 0 ? c->dilation : 1;
    d->global_tokens = c->num_globals ? c->globals : NULL;
    d->num_global_tokens = c->num_globals;
    if (c->block_layout == LAYOUT_NONE) return;
    size_t heads = c->block_layout == LAYOUT_PER_HEAD ? c->hq : 1;
    size_t count = heads * ((c->nq + c->bq - 1) / c->bq) * ((c->nk + c->bk - 1) / c->bk);
    data->layout = malloc(count);
    for (size_t i = 0; data->layout && i < count; i++)
        data->layout[i] = c->block_layout == LAYOUT_ALL_ONES || (next_random(state) & 3) != 0;
    d->block_layout = data->layout;
    d->block_q = c->bq;
    d->block_k = c->bk;
    d->block_layout_per_head = c->block_layout == LAYOUT_PER_HEAD;
}

/* Batch entry b's valid length of `n` positions in a padded batch: entry 0 is unpadded, the
 * others lose 1 to n/2 positions at the end. */
static size_t padded_length(size_t n, size_t b) {
    return b == 0 || n < 2 ? n : n - 1 - (b * 7 + 2) % (n / 2);
}

/* One bias value of kind c->bias at (b, i, j) (PADDING and FINITE_MIN). */
static float special_bias(const attn_case *c, size_t b, size_t i, size_t j, uint64_t *state) {
    static const float huge[4] = {-1e38f, -2.3e38f, -2.4e38f, -FLT_MAX};
    if (c->bias == BIAS_PADDING) {
        size_t keys = padded_length(c->nk, b), pad = c->nk - keys;
        size_t queries = c->nq > pad ? c->nq - pad : 0;
        return j >= keys || i >= queries ? -FLT_MAX : 0.0f;
    }
    switch (i % 3) {
    case 0:
        return -FLT_MAX; /* every key of the row: the mean of V, LSE finite */
    case 1:
        return huge[j % 4];
    default:
        return j % 5 == 0 ? -FLT_MAX : uniform(state);
    }
}

/* FULL: random values with one entry in 16 at -inf; BROADCAST shares one [Nq, Nk]; PADDING is
 * [B, 1, Nq, Nk] (broadcast over heads); FINITE_MIN is [B, Hq, Nq, Nk]. */
static void setup_bias(const attn_case *c, case_data *data, uint64_t *state) {
    clattn_attention_desc *d = &data->desc;
    if (c->bias == BIAS_NONE) return;
    int shared = c->bias == BIAS_BROADCAST, per_head = c->bias != BIAS_PADDING && !shared;
    size_t plane = c->nq * c->nk, heads = per_head ? c->hq : 1, batches = shared ? 1 : c->b;
    d->bias_strides.offset = c->offset;
    d->bias_strides.stride_seq = c->nk;
    d->bias_strides.stride_head = per_head ? plane : 0;
    d->bias_strides.stride_batch = shared ? 0 : heads * plane;
    size_t count = c->offset + batches * heads * plane;
    data->bias = malloc(count * sizeof(float));
    for (size_t at = 0; data->bias && at < count; at++) {
        size_t e = at < c->offset ? 0 : at - c->offset, i = e % plane / c->nk, j = e % c->nk;
        if (c->bias == BIAS_PADDING || c->bias == BIAS_FINITE_MIN)
            data->bias[at] = special_bias(c, e / (heads * plane), i, j, state);
        else
            data->bias[at] = (next_random(state) & 15) == 0 ? -INFINITY : 2.0f * uniform(state);
    }
    d->bias_host = data->bias;
}

/* Soft-capping, ALiBi and sinks (docs/semantics.md section 8), from a state of their own so
 * that the other inputs of a case do not change with them. */
static clattn_status setup_modifiers(const attn_case *c, case_data *data) {
    clattn_attention_desc *d = &data->desc;
    uint64_t state = c->seed ^ 0x5151;
    d->softcap = c->softcap;
    if (c->alibi) {
        size_t count = c->alibi == 2 ? c->b * c->hq : c->hq;
        data->slopes = malloc(count * sizeof *data->slopes);
        if (!data->slopes) return CLATTN_ERR_OUT_OF_MEMORY;
        clattn_pattern_alibi_slopes(c->hq, data->slopes);
        for (size_t at = c->hq; at < count; at++) /* later sequences: seeded slopes in [0, 1) */
            data->slopes[at] = 0.5f + 0.5f * uniform(&state);
        d->alibi_slopes = data->slopes, d->alibi_per_batch = c->alibi == 2;
    }
    if (c->sinks) {
        data->sinks = malloc(c->hq * sizeof *data->sinks);
        if (!data->sinks) return CLATTN_ERR_OUT_OF_MEMORY;
        for (size_t h = 0; h < c->hq; h++) data->sinks[h] = h ? 2.0f * uniform(&state) : 8.0f;
        d->sinks = data->sinks;
    }
    return CLATTN_SUCCESS;
}

/* K and V as c->kv_quant blocks of their values, which stay in data->k and data->v for the
 * dumps (`clattn run --kv-storage` quantises them alike); the desc then says so. */
static clattn_status quantise_kv(const attn_case *c, case_data *data) {
    clattn_attention_desc *d = &data->desc;
    const size_t k_values = data->ext.k / dtype_bytes(c->dtype);
    const size_t v_values = data->ext.v / dtype_bytes(c->dtype);
    d->kv_q8_0 = c->kv_quant == CLATTN_Q8_0, d->kv_q4_0 = c->kv_quant == CLATTN_Q4_0;
    clattn_attention_extents blocks;
    clattn_status status = clattn_attention_desc_check(d, &blocks, NULL, 0);
    if (status != CLATTN_SUCCESS) return status;
    data->k_blocks = malloc(blocks.k), data->v_blocks = malloc(blocks.v);
    if (!data->k_blocks || !data->v_blocks) return CLATTN_ERR_OUT_OF_MEMORY;
    status = clattn_convert(c->dtype, data->k, c->kv_quant, data->k_blocks, k_values);
    if (status == CLATTN_SUCCESS)
        status = clattn_convert(c->dtype, data->v, c->kv_quant, data->v_blocks, v_values);
    return status;
}

static clattn_status case_setup(const attn_case *c, case_data *data) {
    memset(data, 0, sizeof *data);
    clattn_attention_desc *d = &data->desc;
    clattn_status status =
        clattn_attention_desc_init(d, c->layout, c->b, c->hq, c->hkv, c->nq, c->nk, c->dqk, c->dv);
    if (status != CLATTN_SUCCESS) return status;
    d->dtype = c->dtype;
    d->out_dtype = c->out_dtype;
    d->scale = c->scale;
    d->gemm_budget_bytes = c->gemm_budget_bytes;
    d->q.offset = d->k.offset = d->v.offset = d->o.offset = c->offset;
    uint64_t state = c->seed;
    setup_mask(c, data, &state);
    setup_bias(c, data, &state);
    status = setup_modifiers(c, data);
    if (status == CLATTN_SUCCESS) status = clattn_attention_desc_check(d, &data->ext, NULL, 0);
    if (status != CLATTN_SUCCESS) return status;
    size_t rows = c->b * c->hq * c->nq;
    data->q = malloc(data->ext.q), data->k = malloc(data->ext.k), data->v = malloc(data->ext.v);
    data->o = malloc(data->ext.o), data->lse = malloc(rows * sizeof(float));
    data->ref_o = malloc(rows * c->dv * sizeof(double));
    data->ref_lse = malloc(rows * sizeof(double));
    if (!data->q || !data->k || !data->v || !data->o || !data->lse || !data->ref_o ||
        !data->ref_lse || (c->bias && !data->bias) || (c->block_layout && !data->layout))
        return CLATTN_ERR_OUT_OF_MEMORY;
    fill_nan(data->o, data->ext.o, c->out_dtype);
    fill_nan(data->lse, rows * sizeof(float), CLATTN_F32);
    fill_tensor(data->q, data->ext.q, c->dtype, &state);
    fill_tensor(data->k, data->ext.k, c->dtype, &state);
    fill_tensor(data->v, data->ext.v, c->dtype, &state);
    if (c->nan_key) store_value(data->k, c->dtype, d->k.offset, NAN); /* K[0, 0, 0, 0] */
    if (c->bad_value && c->nk > 1)                                    /* V[b=0, kvh=0, j=1, 0] */
        store_value(data->v, c->dtype, d->v.offset + d->v.stride_seq,
                    c->bad_value == 1 ? NAN : INFINITY);
    if (c->kv_quant != CLATTN_F32) status = quantise_kv(c, data);
    return status == CLATTN_SUCCESS ? reference_outputs(c, data) : status;
}

static int value_ok(double got, double ref, double tolerance) {
    if (isnan(ref)) return isnan(got);
    if (isinf(ref)) return got == ref;
    return fabs(got - ref) <= tolerance;
}

void compare_values(const char *what, const float *got, const double *ref, size_t n, double atol,
                    double rtol, case_result *result) {
    for (size_t i = 0; i < n; i++) {
        double tolerance = atol + rtol * fabs(ref[i]);
        int ok = value_ok(got[i], ref[i], tolerance);
        if (isfinite(ref[i]) && isfinite(got[i]) &&
            fabs(got[i] - ref[i]) / tolerance > result->worst)
            result->worst = fabs(got[i] - ref[i]) / tolerance;
        result->checked++;
        if (ok) continue;
        if (!isfinite(ref[i]) || !isfinite(got[i])) result->worst = INFINITY;
        if (result->mismatches++ == 0)
            snprintf(result->message, sizeof result->message,
                     "%s element %zu: got %.8g, reference %.8g (tolerance %.3g)", what, i,
                     (double)got[i], ref[i], tolerance);
    }
}

/* O as dense float [B][Hq][Nq][Dv], read through the desc's strides and dtype. */
static float *dense_output(const case_data *data) {
    const clattn_attention_desc *d = &data->desc;
    float *dense = malloc(d->batch * d->heads_q * d->len_q * d->dim_v * sizeof(float));
    size_t at = 0;
    for (size_t b = 0; dense && b < d->batch; b++)
        for (size_t h = 0; h < d->heads_q; h++)
            for (size_t i = 0; i < d->len_q; i++) {
                size_t row = d->o.offset + b * d->o.stride_batch + h * d->o.stride_head +
                             i * d->o.stride_seq;
                size_t elem = dtype_bytes(d->out_dtype);
                clattn_convert(d->out_dtype, (const char *)data->o + row * elem, CLATTN_F32,
                               dense + at, d->dim_v);
                at += d->dim_v;
            }
    return dense;
}

void compare_lse_values(const float *got, const double *ref, size_t n, case_result *result) {
    double lse = 0;
    clattn_tolerance(CLATTN_F32, CLATTN_F32, NULL, NULL, &lse);
    for (size_t r = 0; r < n; r++) {
        double tolerance = fabs(ref[r]) > 1 ? lse * fabs(ref[r]) : lse; /* lse * max(1, |ref|) */
        compare_values("LSE", &got[r], &ref[r], 1, tolerance, 0, result);
    }
}

/* The call's error for a case's message; a failed build adds its log's first error line (the
 * whole log is the context's, clattn_context_build_log, which `clattn run` prints). */
static void describe_error(const clattn_context *ctx, clattn_status status, char *out,
                           size_t size) {
    int n =
        snprintf(out, size, "%s: %s", clattn_status_name(status), clattn_context_last_error(ctx));
    const char *log = clattn_context_build_log(ctx), *error = strstr(log, "error:");
    if (status != CLATTN_ERR_BUILD || !error || n < 0 || (size_t)n >= size) return;
    while (error > log && error[-1] != '\n') error--; /* the whole line */
    snprintf(out + n, size - (size_t)n, "; the log's first error: %.*s", (int)strcspn(error, "\n"),
             error);
}

clattn_status case_run(clattn_context *ctx, const attn_case *c, clattn_path path,
                       clattn_variant variant, case_result *result) {
    case_data data;
    memset(result, 0, sizeof *result);
    clattn_status status = case_setup(c, &data);
    if (status != CLATTN_SUCCESS) {
        snprintf(result->message, sizeof result->message, "setting up the case: %s",
                 clattn_status_name(status));
    } else {
        data.desc.path = path;
        data.desc.variant = variant;
        double t0 = seconds_now();
        status = clattn_attention_host(ctx, &data.desc, data.q, k_input(&data), v_input(&data),
                                       data.o, data.lse);
        result->ms = (seconds_now() - t0) * 1e3;
        if (status != CLATTN_SUCCESS)
            describe_error(ctx, status, result->message, sizeof result->message);
    }
    if (status == CLATTN_SUCCESS) {
        double atol, rtol;
        case_tolerance(c, &atol, &rtol);
        size_t rows = c->b * c->hq * c->nq;
        float *got = dense_output(&data);
        compare_values("O", got, data.ref_o, rows * c->dv, atol, rtol, result);
        compare_lse_values(data.lse, data.ref_lse, rows, result);
        free(got);
        clattn_stats_init(&result->stats);
        clattn_context_last_stats(ctx, &result->stats);
    }
    result->status = status;
    case_free(&data);
    return status;
}

/* Appends printf-style text to a line. */
static void append(char *out, size_t size, const char *fmt, ...) PRINTF_LIKE(3, 4);
static void append(char *out, size_t size, const char *fmt, ...) {
    size_t used = strlen(out);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out + used, size > used ? size - used : 0, fmt, ap);
    va_end(ap);
}

void case_describe(const attn_case *c, char *out, size_t size) {
    static const char *const layouts[] = {"", "shared", "per-head", "ones"};
    static const char *const biases[] = {"", " bias=full", " bias=broadcast", " bias=padding",
                                         " bias=finite-min"};
    snprintf(out, size, "B=%zu Hq=%zu Hkv=%zu Nq=%zu Nk=%zu Dqk=%zu Dv=%zu %s %s->%s%s", c->b,
             c->hq, c->hkv, c->nq, c->nk, c->dqk, c->dv,
             c->layout == CLATTN_LAYOUT_BSHD ? "bshd" : "bhsd", dtype_text(c->dtype),
             dtype_text(c->out_dtype), c->causal ? " causal" : "");
    if (c->left >= 0 || c->right >= 0)
        append(out, size, " window=%lld,%lld", (long long)c->left, (long long)c->right);
    if (c->dilation > 1) append(out, size, " dilation=%lld", (long long)c->dilation);
    for (size_t g = 0; g < c->num_globals; g++)
        append(out, size, "%s%lld", g ? "," : " global=", (long long)c->globals[g]);
    if (c->block_layout != LAYOUT_NONE)
        append(out, size, " layout=%s(%zu,%zu)", layouts[c->block_layout], c->bq, c->bk);
    append(out, size, "%s", biases[c->bias]);
    if (c->offset) append(out, size, " offset=%zu", c->offset);
    if (c->scale != 0.0f) append(out, size, " scale=%g", (double)c->scale);
    if (c->nan_key) append(out, size, " nan-key");
    if (c->softcap > 0.0f) append(out, size, " softcap=%g", (double)c->softcap);
    if (c->alibi) append(out, size, c->alibi == 2 ? " alibi=per-batch" : " alibi");
    if (c->sinks) append(out, size, " sinks");
    if (c->kv_quant != CLATTN_F32) append(out, size, " kv=%s", dtype_text(c->kv_quant));
    if (c->bad_value) append(out, size, c->bad_value == 1 ? " nan-value" : " inf-value");
    if (c->gemm_budget_bytes) append(out, size, " gemm-budget=%zu", c->gemm_budget_bytes);
    append(out, size, " seed=%llu", (unsigned long long)c->seed);
}

/* ---------------------------------------------------------------- replaying a case */

/* Writes one dense tensor of the case as DIR/NAME.npy. */
static clattn_status dump_tensor(const char *dir, const char *name, npy_dtype dtype, size_t ndim,
                                 const size_t *shape, const void *data, char *err, size_t size) {
    char path[OUTPUT_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s.npy", dir, name);
    return npy_write(path, dtype, ndim, shape, data, err, size);
}

/* The inputs of the case (Q, K, V; bias and block layout when it has them). */
static clattn_status dump_inputs(const attn_case *c, const case_data *data, const char *dir,
                                 char *err, size_t size) {
    int bshd = c->layout == CLATTN_LAYOUT_BSHD;
    npy_dtype dtype = (npy_dtype)npy_dtype_of(c->dtype);
    size_t elem = dtype_bytes(c->dtype), skip = c->offset * elem;
    size_t q[4] = {c->b, bshd ? c->nq : c->hq, bshd ? c->hq : c->nq, c->dqk};
    size_t k[4] = {c->b, bshd ? c->nk : c->hkv, bshd ? c->hkv : c->nk, c->dqk};
    size_t v[4] = {c->b, bshd ? c->nk : c->hkv, bshd ? c->hkv : c->nk, c->dv};
    clattn_status s = dump_tensor(dir, "q", dtype, 4, q, (const char *)data->q + skip, err, size);
    if (!s) s = dump_tensor(dir, "k", dtype, 4, k, (const char *)data->k + skip, err, size);
    if (!s) s = dump_tensor(dir, "v", dtype, 4, v, (const char *)data->v + skip, err, size);
    if (!s && c->bias != BIAS_NONE) {
        size_t full[4] = {c->b, c->hq, c->nq, c->nk}, padding[4] = {c->b, 1, c->nq, c->nk};
        size_t shared[2] = {c->nq, c->nk};
        const float *bias = data->bias + c->offset;
        if (c->bias == BIAS_BROADCAST)
            s = dump_tensor(dir, "bias", NPY_F32, 2, shared, bias, err, size);
        else
            s = dump_tensor(dir, "bias", NPY_F32, 4, c->bias == BIAS_PADDING ? padding : full, bias,
                            err, size);
    }
    if (!s && c->alibi == 2) {
        size_t shape[2] = {c->b, c->hq};
        s = dump_tensor(dir, "alibi", NPY_F32, 2, shape, data->slopes, err, size);
    }
    if (!s && c->sinks) s = dump_tensor(dir, "sinks", NPY_F32, 1, &c->hq, data->sinks, err, size);
    if (!s && c->block_layout != LAYOUT_NONE) {
        size_t heads = c->block_layout == LAYOUT_PER_HEAD ? c->hq : 1;
        size_t shape[3] = {heads, (c->nq + c->bq - 1) / c->bq, (c->nk + c->bk - 1) / c->bk};
        s = dump_tensor(dir, "layout", NPY_U8, 3, shape, data->layout, err, size);
    }
    return s;
}

/* The `clattn run` line that computes the case from the dumped files. */
static void replay_command(const attn_case *c, const char *dir, const char *path_name,
                           const char *variant, const char *device, char *cmd, size_t size) {
    snprintf(cmd, size,
             "clattn run --q %s/q.npy --k %s/k.npy --v %s/v.npy --out %s/o.npy "
             "--lse %s/lse.npy --layout %s --out-dtype %s --path %s --device %s",
             dir, dir, dir, dir, dir, c->layout == CLATTN_LAYOUT_BSHD ? "bshd" : "bhsd",
             dtype_text(c->out_dtype), path_name, device);
    if (strcmp(path_name, "fused") == 0 && strcmp(variant, "auto") != 0)
        append(cmd, size, " --variant %s", variant); /* other paths' rows name their path */
    if (c->dtype == CLATTN_BF16) append(cmd, size, " --storage bf16");
    if (c->causal) append(cmd, size, " --causal");
    if (c->left >= 0 || c->right >= 0)
        append(cmd, size, " --window=%lld,%lld", (long long)c->left, (long long)c->right);
    if (c->dilation > 1) append(cmd, size, " --dilation %lld", (long long)c->dilation);
    for (size_t g = 0; g < c->num_globals; g++)
        append(cmd, size, "%s%lld", g ? "," : " --global ", (long long)c->globals[g]);
    if (c->block_layout != LAYOUT_NONE)
        append(cmd, size, " --block-layout %s/layout.npy --block-size %zu,%zu", dir, c->bq, c->bk);
    if (c->bias != BIAS_NONE) append(cmd, size, " --bias %s/bias.npy", dir);
    if (c->scale != 0.0f) append(cmd, size, " --scale %.9g", (double)c->scale);
    if (c->softcap > 0.0f) append(cmd, size, " --softcap %.9g", (double)c->softcap);
    if (c->alibi == 1) append(cmd, size, " --alibi");
    if (c->alibi == 2) append(cmd, size, " --alibi-slopes %s/alibi.npy", dir);
    if (c->sinks) append(cmd, size, " --sinks %s/sinks.npy", dir);
    if (c->kv_quant != CLATTN_F32) append(cmd, size, " --kv-storage %s", dtype_text(c->kv_quant));
}

clattn_status case_dump(const attn_case *c, const char *dir, const char *path_name,
                        const char *variant, const char *device, char *cmd, size_t cmd_size,
                        char *err, size_t err_size) {
    case_data data;
    clattn_status status = case_setup(c, &data);
    if (status != CLATTN_SUCCESS)
        snprintf(err, err_size, "setting up the case: %s", clattn_status_name(status));
    else
        status = dump_inputs(c, &data, dir, err, err_size);
    if (status == CLATTN_SUCCESS) replay_command(c, dir, path_name, variant, device, cmd, cmd_size);
    case_free(&data);
    return status;
}
