/*
 * The CPU reference: docs/semantics.md section 1 in plain C with double accumulation, asking mask.h
 * which keys a query may see (docs/semantics.md section 2). Scores are float32, rounded step by
 * step where the kernels round them; the softmax and O are summed in double. Every device and path
 * is compared against it, so it favours being obviously right over being fast: one query row at a
 * time, two passes over its allowed keys, no online softmax.
 */
#include "reference/reference.h"

#include "core/half.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Everything one reference call reads, shared by its rows. */
typedef struct reference_call {
    const attn_problem *pb;
    const void *q, *k, *v; /* pb->dtype (q) and pb->kv.dtype (k, v) storage at pb->q/k/v */
    const float *bias;     /* NULL or float32 at pb->bias */
    const mask_spec *mask;
    double scale;
    double *scores; /* [len_k] scratch: scores of the allowed keys of the current row */
    int64_t *keys;  /* [len_k] scratch: the allowed keys themselves */
} reference_call;

/* Element `index` of a Q/K/V array, widened to double (float16 exactly, via float32; q8_0 as
 * its block's scale times its int8, q4_0 as its scale times its 4-bit code less 8). */
static double load(const void *base, clattn_dtype dtype, size_t index) {
    if (dtype_is_quantised(dtype)) {
        const uint8_t *block = (const uint8_t *)base + index / Q8_BLOCK * quant_block_bytes(dtype);
        float scale = half_to_float((uint16_t)(block[0] | block[1] << 8));
        size_t e = index % Q8_BLOCK;
        if (dtype == CLATTN_Q4_0)
            return scale * (float)((block[2 + e % 16] >> (e / 16 * 4) & 15) - 8);
        return scale * (float)(int8_t)block[2 + e];
    }
    if (dtype == CLATTN_F16) return half_to_float(((const uint16_t *)base)[index]);
    if (dtype == CLATTN_BF16) return bf16_to_float(((const uint16_t *)base)[index]);
    return ((const float *)base)[index];
}

/* Element index of row `row` of head `head` in batch `b` (the head-dim stride is 1). */
static size_t row_start(const clattn_tensor *t, size_t b, size_t head, size_t row) {
    return t->offset + b * t->stride_batch + head * t->stride_head + row * t->stride_seq;
}

/* One allowed pair (b, h, i, j) of a row, with the K/V head kvh that h reads. */
typedef struct score_pair {
    size_t b, h, kvh, i, j;
} score_pair;

/* t = float32(scale * dot(Q[b,h,i,:], K[b,kvh,j,:])). The dot product is summed in double and
 * rounded once: the kernels sum in float32, in orders of their own, and the tolerance covers
 * that difference; what it cannot cover is a rounding step that only one side takes. A
 * product beyond the float32 range rounds to an infinity, as in the kernels (enormous
 * inputs: Inf in, Inf out). */
static float scaled_dot(const reference_call *c, const score_pair *p) {
    const attn_problem *d = c->pb;
    size_t qi = row_start(&d->q, p->b, p->h, p->i), kj = row_start(&d->k, p->b, p->kvh, p->j);
    double dot = 0.0;
    for (size_t x = 0; x < d->dim_qk; x++)
        dot += load(c->q, d->dtype, qi + x) * load(c->k, d->kv.dtype, kj + x);
    return (float)(c->scale * dot);
}

/* s = float32(t + bias[b,h,i,j]), as the kernels add it (common.cl, add_saturating): a finite
 * sum beyond the float32 range saturates at +-FLT_MAX, so that only -inf masks. */
static float add_bias(const reference_call *c, const score_pair *p, float t) {
    float bias = c->bias[row_start(&c->pb->bias, p->b, p->h, p->i) + p->j];
    float s = t + bias;
    return isfinite(t) && isfinite(bias) && isinf(s) ? copysignf(FLT_MAX, s) : s;
}

/* docs/semantics.md section 8, in float32 steps as common.cl's modified_score takes them:
 * t = softcap * tanh(t / softcap), then t + (-(slope * |p - j|)) (saturating, as add_bias). */
static float modified(const reference_call *c, const score_pair *p, float t) {
    const attn_problem *d = c->pb;
    if (d->softcap > 0.0f) {
        float ratio = t / d->softcap, capped = tanhf(ratio);
        t = d->softcap * capped;
    }
    if (d->alibi_slopes) {
        int64_t position = (int64_t)p->i + c->mask->offset, j = (int64_t)p->j;
        float distance = (float)(position > j ? position - j : j - position);
        float term = -(problem_alibi_slope(d, p->b, p->h) * distance), sum = t + term;
        t = isfinite(t) && isfinite(term) && isinf(sum) ? copysignf(FLT_MAX, sum) : sum;
    }
    return t;
}

/* The score of an allowed pair, one float32 step at a time, in the order the kernels take
 * them (docs/semantics.md section 9: scores are float32, and the reference rounds where the kernels
 * do). A modifier of t (soft-capping, then ALiBi) is one more step between the two. */
static float score(const reference_call *c, const score_pair *p) {
    float t = modified(c, p, scaled_dot(c, p));
    return c->bias ? add_bias(c, p, t) : t;
}

/* Pass 1: the scores of the allowed keys of row (b, h, i) into c->scores / c->keys, and their
 * maximum. A NaN score makes the maximum NaN (a plain `>` would skip it), so that it reaches
 * every output of the row. @return how many keys are allowed. */
static size_t score_row(const reference_call *c, size_t b, size_t h, size_t i, double *max) {
    const attn_problem *d = c->pb;
    score_pair p = {b, h, h / (d->heads_q / d->heads_kv), i, 0};
    size_t n = 0;
    double m = -INFINITY;
    for (p.j = 0; p.j < d->len_k; p.j++) {
        if (!mask_allowed(c->mask, (int64_t)h, (int64_t)i, (int64_t)p.j)) continue;
        double s = score(c, &p);
        if (s > m || isnan(s)) m = isnan(m) ? m : s;
        c->scores[n] = s;
        c->keys[n] = (int64_t)p.j;
        n++;
    }
    *max = m;
    return n;
}

/* One query row: o_row is [dim_v] doubles; lse may be NULL, else its LSE, or with
 * pb->lse_parts its two parts (max, log sum). */
static void attend_row(const reference_call *c, size_t b, size_t h, size_t i, double *o_row,
                       double *lse) {
    const attn_problem *d = c->pb;
    size_t kvh = h / (d->heads_q / d->heads_kv);
    double m;
    size_t n = score_row(c, b, h, i, &m);
    double sink = d->sinks && !isnan(m) ? d->sinks[h] : -INFINITY;
    memset(o_row, 0, d->dim_v * sizeof *o_row);
    if (n == 0 || m == -INFINITY) { /* no key, or every allowed score is -inf: empty row */
        if (lse) lse[0] = sink;     /* log(exp(sink)), -inf without one */
        if (lse && d->lse_parts) lse[1] = -INFINITY;
        return;
    }
    if (sink > m) m = sink; /* the sink joins the softmax as one more score without a value */
    /* pass 2: P = exp(s - m) / sum, O = sum of P * V (divided once at the end) */
    double sum = 0.0;
    for (size_t t = 0; t < n; t++) {
        if (c->scores[t] == -INFINITY) continue; /* masked by the bias: adds nothing, not 0*V */
        double p = exp(c->scores[t] - m);
        size_t vj = row_start(&d->v, b, kvh, (size_t)c->keys[t]);
        sum += p;
        for (size_t x = 0; x < d->dim_v; x++) o_row[x] += p * load(c->v, d->kv.dtype, vj + x);
    }
    sum += exp(sink - m);
    for (size_t x = 0; x < d->dim_v; x++) o_row[x] /= sum;
    if (lse && d->lse_parts)
        lse[0] = m, lse[1] = log(sum);
    else if (lse)
        lse[0] = m + log(sum); /* = log(sum of exp(s)), without overflow */
}

static clattn_status reference_dense(const attn_problem *pb, const void *q, const void *k,
                                     const void *v, const float *bias, double *o, double *lse) {
    clattn_status status = CLATTN_SUCCESS;
    reference_call c = {pb,   q,   k, v, pb->has_bias ? bias : NULL, &pb->mask, (double)pb->scale,
                        NULL, NULL};
    c.scores = malloc((pb->len_k + 1) * sizeof *c.scores); /* + 1: a sequence may be empty */
    c.keys = malloc((pb->len_k + 1) * sizeof *c.keys);
    if (!c.scores || !c.keys) {
        status = CLATTN_ERR_OUT_OF_MEMORY;
        goto done;
    }
    size_t row = 0; /* (b, h, i) in dense [B][Hq][Nq] order */
    for (size_t b = 0; b < pb->batch; b++)
        for (size_t h = 0; h < pb->heads_q; h++)
            for (size_t i = 0; i < pb->len_q; i++, row++)
                attend_row(&c, b, h, i, o + row * pb->dim_v,
                           lse ? lse + row * (pb->lse_parts ? 2 : 1) : NULL);
done:
    free(c.keys);
    free(c.scores);
    return status;
}

/* ---------------------------------------------------------------- KV caches (docs/semantics.md
 * section 6) */

/* Row j of sequence b, kv head kvh, of a cache's K or V storage: the tensor's row, or through
 * the block table (pages are the tensor's batch entries). */
static size_t cache_row(const attn_problem *pb, const clattn_tensor *t, size_t b, size_t kvh,
                        size_t j) {
    const kv_view *kv = &pb->kv;
    if (!kv->page_size) return row_start(t, b, kvh, j);
    size_t page = (size_t)kv->block_table[b * kv->max_pages + j / kv->page_size];
    return row_start(t, page, kvh, j % kv->page_size);
}

/* Sequence b's first `keys` rows of K or V, gathered dense [keys][Hkv][dim] in their storage. */
static void *gather_rows(const attn_problem *pb, const void *storage, const clattn_tensor *t,
                         size_t dim, size_t b, size_t keys) {
    size_t row_bytes = dtype_bytes(pb->kv.dtype, dim); /* rows start whole q8_0 blocks */
    unsigned char *dense = malloc(keys * pb->heads_kv * row_bytes + 1);
    for (size_t j = 0; dense && j < keys; j++)
        for (size_t kvh = 0; kvh < pb->heads_kv; kvh++)
            memcpy(dense + (j * pb->heads_kv + kvh) * row_bytes,
                   (const unsigned char *)storage +
                       dtype_bytes(pb->kv.dtype, cache_row(pb, t, b, kvh, j)),
                   row_bytes);
    return dense;
}

/* Sequence b as a call of its own (docs/semantics.md section 6: section 1 on its first L_b rows,
 * with its q_b queries the last positions): batch 1, Nq = q_b, Nk = L_b, K and V dense. */
static attn_problem sequence_problem(const attn_problem *pb, size_t b) {
    attn_problem sp = *pb;
    size_t keys = problem_keys(pb, b), queries = problem_queries(pb, b);
    sp.batch = 1, sp.len_q = queries, sp.len_k = keys;
    sp.q.offset += b * pb->q.stride_batch;
    sp.bias.offset += b * pb->bias.stride_batch;
    sp.k =
        (clattn_tensor){0, keys * pb->heads_kv * pb->dim_qk, pb->dim_qk, pb->heads_kv * pb->dim_qk};
    sp.v = (clattn_tensor){0, keys * pb->heads_kv * pb->dim_v, pb->dim_v, pb->heads_kv * pb->dim_v};
    sp.mask.len_q = (int64_t)queries, sp.mask.len_k = (int64_t)keys;
    sp.mask.offset = (int64_t)keys - (int64_t)queries;
    memset(&sp.kv, 0, sizeof sp.kv);
    sp.kv.dtype = pb->kv.dtype;
    if (pb->alibi_per_batch) sp.alibi_slopes += b * pb->heads_q; /* sequence b's, as b = 0 */
    return sp;
}

/* Each sequence on its own; rows past its queries are empty. */
static clattn_status reference_sequences(const attn_problem *pb, const void *q, const void *k,
                                         const void *v, const float *bias, double *o, double *lse) {
    size_t rows = pb->batch * pb->heads_q * pb->len_q;
    memset(o, 0, rows * pb->dim_v * sizeof *o);
    for (size_t r = 0; lse && r < rows; r++) lse[r] = -INFINITY;
    clattn_status status = CLATTN_SUCCESS;
    for (size_t b = 0; status == CLATTN_SUCCESS && b < pb->batch; b++) {
        attn_problem sp = sequence_problem(pb, b);
        if (sp.len_q == 0) continue;
        void *kb = gather_rows(pb, k, &pb->k, pb->dim_qk, b, sp.len_k);
        void *vb = gather_rows(pb, v, &pb->v, pb->dim_v, b, sp.len_k);
        double *ob = malloc(pb->heads_q * sp.len_q * pb->dim_v * sizeof *ob);
        double *lb = malloc(pb->heads_q * sp.len_q * sizeof *lb);
        status = kb && vb && ob && lb ? reference_dense(&sp, q, kb, vb, bias, ob, lb)
                                      : CLATTN_ERR_OUT_OF_MEMORY;
        for (size_t h = 0; status == CLATTN_SUCCESS && h < pb->heads_q; h++)
            for (size_t i = 0; i < sp.len_q; i++) {
                size_t at = (b * pb->heads_q + h) * pb->len_q + i, from = h * sp.len_q + i;
                memcpy(o + at * pb->dim_v, ob + from * pb->dim_v, pb->dim_v * sizeof *o);
                if (lse) lse[at] = lb[from];
            }
        free(kb), free(vb), free(ob), free(lb);
    }
    return status;
}

clattn_status reference_attention(const attn_problem *pb, const void *q, const void *k,
                                  const void *v, const float *bias, double *o, double *lse) {
    if (!q || !k || !v || !o || (pb->has_bias && !bias)) return CLATTN_ERR_INVALID_ARGUMENT;
    if (problem_is_cache(pb) && pb->lse_parts) return CLATTN_ERR_INVALID_ARGUMENT; /* refused */
    return problem_is_cache(pb) ? reference_sequences(pb, q, k, v, bias, o, lse)
                                : reference_dense(pb, q, k, v, bias, o, lse);
}

/* Writes the dense double O [B][Hq][Nq][Dv] into `o` at pb->o in pb->out_dtype (the 16-bit
 * types round to nearest even from the float32 value). */
static void store_output(const attn_problem *d, const double *ref, void *o) {
    size_t row = 0, elem = dtype_size(d->out_dtype);
    for (size_t b = 0; b < d->batch; b++)
        for (size_t h = 0; h < d->heads_q; h++)
            for (size_t i = 0; i < d->len_q; i++, row++) {
                size_t at = row_start(&d->o, b, h, i);
                const double *src = ref + row * d->dim_v;
                for (size_t x = 0; x < d->dim_v; x++) {
                    float value = (float)src[x];
                    clattn_convert(CLATTN_F32, &value, d->out_dtype, (char *)o + (at + x) * elem,
                                   1);
                }
            }
}

clattn_status reference_attention_store(const attn_problem *pb, const void *q, const void *k,
                                        const void *v, const float *bias, void *o, float *lse,
                                        error_record *err) {
    if (!q || !k || !v || !o)
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT, "a host pointer (q, k, v or o) is NULL");
    size_t rows = pb->batch * pb->heads_q * pb->len_q, o_bytes = 0;
    if (size_mul(rows * pb->dim_v, sizeof(double), &o_bytes))
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT, "O's size overflows");
    double *o_ref = malloc(o_bytes);
    size_t lse_values = rows * (pb->lse_parts ? 2 : 1);
    double *lse_ref = lse ? malloc(lse_values * sizeof *lse_ref) : NULL;
    clattn_status status = CLATTN_SUCCESS;
    if (!o_ref || (lse && !lse_ref))
        status = error_set(err, CLATTN_ERR_OUT_OF_MEMORY,
                           "reference: %zu bytes of double-precision outputs", o_bytes);
    if (status == CLATTN_SUCCESS) status = reference_attention(pb, q, k, v, bias, o_ref, lse_ref);
    if (status == CLATTN_SUCCESS) {
        store_output(pb, o_ref, o);
        for (size_t r = 0; lse && r < lse_values; r++) lse[r] = (float)lse_ref[r];
    }
    free(lse_ref);
    free(o_ref);
    return status;
}

/* ---------------------------------------------------------------- softmax */

/* scale * x as clattn_softmax computes it: one float32 product (exact in double, then rounded
 * once), where a finite product saturates at +-FLT_MAX. */
static double scaled(double scale, float x) {
    float s = (float)(scale * x);
    return isfinite(x) && isinf(s) ? copysignf(FLT_MAX, s) : s;
}

/* One row: out = exp(scale*x - m) / sum, lse = m + log(sum); a row whose maximum is -inf
 * (everything masked) gets zeros and -inf, as cl/softmax.cl does. NaN propagates. */
static void softmax_row(const float *x, size_t cols, double scale, double *out, double *lse) {
    /* pass 1: the maximum of the scaled row, keeping NaN */
    double m = -INFINITY;
    for (size_t c = 0; c < cols; c++) {
        double s = scaled(scale, x[c]);
        if (s > m || isnan(s)) m = isnan(m) ? m : s;
    }
    if (m == -INFINITY) {
        for (size_t c = 0; c < cols; c++) out[c] = 0.0;
        if (lse) *lse = -INFINITY;
        return;
    }
    /* pass 2: exponentials, their sum, and the normalisation */
    double sum = 0.0;
    for (size_t c = 0; c < cols; c++) {
        out[c] = exp(scaled(scale, x[c]) - m);
        sum += out[c];
    }
    for (size_t c = 0; c < cols; c++) out[c] /= sum;
    if (lse) *lse = m + log(sum);
}

void reference_softmax(const float *in, size_t rows, size_t cols, float scale, double *out,
                       double *lse) {
    for (size_t r = 0; r < rows; r++)
        softmax_row(in + r * cols, cols, (double)scale, out + r * cols, lse ? lse + r : NULL);
}
