/*
 * The CPU reference of the multi-head attention layer (clattn_mha_reference): clattn.h's
 * definition in plain C. The projections and the output accumulate in double; Q, K and V are
 * stored as float32, as the layer defines them; the attention is the attention reference over
 * every head; a pruned head's O is set to zero before W_o, which is what pruning means. It
 * never packs weights, so it checks the layer's packing rather than sharing it.
 */
#include "mha/shapes.h"
#include "reference/reference.h"

#include "core/half.h"

#include <stdlib.h>
#include <string.h>

/* Element i of a float32, float16 or bfloat16 array, as double (16-bit types exactly). */
static double load(clattn_dtype dtype, const void *base, size_t i) {
    if (dtype == CLATTN_F16) return half_to_float(((const uint16_t *)base)[i]);
    if (dtype == CLATTN_BF16) return bf16_to_float(((const uint16_t *)base)[i]);
    return ((const float *)base)[i];
}

/* A parameter's host array from its offset on, or NULL when it is not given. */
static const void *param_data(const mha_shape *s, int p) {
    const clattn_mha_param *param = &s->params[p];
    if (!param->host) return NULL;
    return (const unsigned char *)param->host + param->offset * dtype_size(s->dtype);
}

/* One projection: out[m][r] = sum_c x[m][c] * w[r][c] + bias[r] for m < rows_in, in double, then
 * stored as float32. x: dense [rows_in][width] of x_dtype; w: [out_rows][width], bias
 * [out_rows] (may be NULL), both of the weights' dtype. */
typedef struct projection {
    const void *x;
    clattn_dtype x_dtype;
    size_t rows_in, width;
    const void *w, *bias;
    size_t out_rows;
} projection;

static void project(const mha_shape *s, const projection *p, float *out) {
    for (size_t m = 0; m < p->rows_in; m++)
        for (size_t r = 0; r < p->out_rows; r++) {
            double sum = p->bias ? load(s->dtype, p->bias, r) : 0.0;
            for (size_t c = 0; c < p->width; c++)
                sum += load(p->x_dtype, p->x, m * p->width + c) *
                       load(s->dtype, p->w, r * p->width + c);
            out[m * p->out_rows + r] = (float)sum;
        }
}

/* Y[m][r] = sum over kept heads h and e of O[b][h][i][e] * W_o[r][h*Dv + e] + b_o[r], m = b*N + i;
 * O is dense double [B][Hq][N][Dv] as the attention reference writes it. */
static void output(const mha_shape *s, const mha_call *c, const uint8_t *keep, const double *o,
                   void *y) {
    const void *w = param_data(s, MHA_WO), *bias = param_data(s, MHA_BO);
    size_t hd = s->heads_q * s->dim_v;
    for (size_t b = 0; b < c->batch; b++)
        for (size_t i = 0; i < c->len_q; i++)
            for (size_t r = 0; r < s->d_model; r++) {
                double sum = bias ? load(s->dtype, bias, r) : 0.0;
                for (size_t h = 0; h < s->heads_q; h++) {
                    if (keep && !keep[h]) continue; /* a pruned head's O is zero */
                    const double *row = o + ((b * s->heads_q + h) * c->len_q + i) * s->dim_v;
                    for (size_t e = 0; e < s->dim_v; e++)
                        sum += row[e] * load(s->dtype, w, r * hd + h * s->dim_v + e);
                }
                float value = (float)sum;
                clattn_convert(CLATTN_F32, &value, c->y_dtype,
                               (unsigned char *)y +
                                   ((b * c->len_q + i) * s->d_model + r) * dtype_size(c->y_dtype),
                               1);
            }
}

/* Q, K, V (float32, dense BSHD), then the attention reference into o (double BHSD). */
static clattn_status attend(const mha_shape *s, const mha_call *c, const void *x, const void *x_kv,
                            double *o) {
    size_t mq = c->batch * c->len_q, mk = c->batch * c->attn.len_k;
    size_t rq = s->rows[MHA_WQ], rk = s->rows[MHA_WK], rv = s->rows[MHA_WV];
    float *q = malloc(mq * rq * sizeof *q + 1), *k = malloc(mk * rk * sizeof *k + 1);
    float *v = malloc(mk * rv * sizeof *v + 1);
    attn_problem pb;
    clattn_status status = problem_build(&c->attn, BIAS_FROM_HOST, NULL, &pb);
    if (status == CLATTN_SUCCESS && (!q || !k || !v)) status = CLATTN_ERR_OUT_OF_MEMORY;
    if (status == CLATTN_SUCCESS) {
        const void *kv_in = c->cross ? x_kv : x;
        projection pq = {
            x, c->x_dtype, mq, s->d_model, param_data(s, MHA_WQ), param_data(s, MHA_BQ), rq};
        projection pk = {
            kv_in, c->x_dtype, mk, s->d_kv, param_data(s, MHA_WK), param_data(s, MHA_BK), rk};
        projection pv = {
            kv_in, c->x_dtype, mk, s->d_kv, param_data(s, MHA_WV), param_data(s, MHA_BV), rv};
        project(s, &pq, q), project(s, &pk, k), project(s, &pv, v);
        status = reference_attention(&pb, q, k, v, pb.bias_host, o, NULL);
    }
    problem_release(&pb);
    free(q), free(k), free(v);
    return status;
}

clattn_status clattn_mha_reference(const clattn_mha_desc *layer, const clattn_attention_desc *call,
                                   const void *x, const void *x_kv, void *y) {
    mha_shape s;
    mha_heads heads;
    mha_call c;
    const uint8_t *keep = NULL;
    clattn_status status = mha_shape_check(layer, &s, &keep, NULL);
    for (int p = 0; status == CLATTN_SUCCESS && p < MHA_PARAMS; p++)
        if (s.params[p].buffer) status = CLATTN_ERR_INVALID_ARGUMENT; /* host arrays only */
    if (status == CLATTN_SUCCESS) status = mha_heads_plan(&s, keep, &heads, NULL);
    if (status != CLATTN_SUCCESS) return status;
    mha_heads_release(&heads); /* the mask keeps a head: the reference needs no more of it */
    status = mha_call_check(&s, call, x_kv != NULL, 0, MHA_BIAS_HOST, &c, NULL);
    if (status == CLATTN_SUCCESS && (!x || !y)) status = CLATTN_ERR_INVALID_ARGUMENT;
    if (status != CLATTN_SUCCESS) return status;
    size_t rows = c.batch * s.heads_q * c.len_q;
    double *o = malloc(rows * s.dim_v * sizeof *o);
    if (!o) return CLATTN_ERR_OUT_OF_MEMORY;
    status = attend(&s, &c, x, x_kv, o);
    if (status == CLATTN_SUCCESS) output(&s, &c, keep, o, y);
    free(o);
    return status;
}
