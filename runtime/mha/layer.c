/*
 * Creating a multi-head attention layer and pruning its heads: the desc is checked once, the
 * weights are copied to the host as given (read back once from buffers), and the rows and
 * columns of the kept heads are packed in their storage type and prepared for the GEMM row that
 * will multiply by them (mha.h shows the layout). A new head mask packs again from the host copies;
 * the old weights stay until the new ones are on the device, so a failure changes nothing.
 */
#include "mha/mha.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the weights as given */

/* Copies parameter p (its host array, or its buffer read back) into m->source[p]. */
static clattn_status copy_source(clattn_mha *m, int p) {
    const mha_shape *s = &m->shape;
    const clattn_mha_param *param = &s->params[p];
    size_t elem = dtype_size(s->dtype), bytes = mha_param_count(s, p) * elem;
    if (!s->given[p]) return CLATTN_SUCCESS;
    if (!(m->source[p] = malloc(bytes)))
        return ctx_error(m->ctx, CLATTN_ERR_OUT_OF_MEMORY, "mha: a host copy of %s (%zu bytes)",
                         mha_param_name(p), bytes);
    if (param->host) {
        memcpy(m->source[p], (const unsigned char *)param->host + param->offset * elem, bytes);
        return CLATTN_SUCCESS;
    }
    char what[96];
    snprintf(what, sizeof what, "mha: reading %s from its buffer", mha_param_name(p));
    return buffer_read(m->ctx, param->buffer, param->offset * elem, bytes, m->source[p], what);
}

/* The host copies replace the caller's arrays and buffers in the shape. */
static clattn_status copy_sources(clattn_mha *m) {
    clattn_status status = CLATTN_SUCCESS;
    for (int p = 0; status == CLATTN_SUCCESS && p < MHA_PARAMS; p++) status = copy_source(m, p);
    for (int p = 0; status == CLATTN_SUCCESS && p < MHA_PARAMS; p++) {
        clattn_mha_param copy = {m->source[p], NULL, 0};
        m->shape.params[p] = copy;
    }
    return status;
}

/* ---------------------------------------------------------------- packing */

/* Rows [row0, row0 + count) of parameter p ([rows][cols] in the weights' type), widened into
 * dst [count][cols] float32; zeros when p is not given (an absent bias). */
static void take_rows(const clattn_mha *m, int p, size_t row0, size_t count, float *dst) {
    const mha_shape *s = &m->shape;
    size_t cols = s->cols[p];
    if (!m->source[p]) {
        memset(dst, 0, count * cols * sizeof *dst);
        return;
    }
    const unsigned char *src = (const unsigned char *)m->source[p];
    clattn_convert(s->dtype, src + row0 * cols * dtype_size(s->dtype), CLATTN_F32, dst,
                   count * cols);
}

/* The rows of `heads` heads (head[i] * dim, dim rows each) of parameter p, in its storage
 * type, one head after the other into dst; returns the end of what was written. */
static unsigned char *copy_heads(const clattn_mha *m, int p, const size_t *head, size_t heads,
                                 size_t dim, unsigned char *dst) {
    size_t row = m->shape.cols[p] * dtype_size(m->shape.dtype) * dim;
    for (size_t i = 0; i < heads; i++, dst += row)
        memcpy(dst, (const unsigned char *)m->source[p] + head[i] * row, row);
    return dst;
}

/* b_q, b_k, b_v of the attention's heads, float32, one after the other: [rows_q + rows_k +
 * rows_v] as mha.h lays out b_in. */
static void pack_bias_in(const clattn_mha *m, const mha_heads *h, float *dst) {
    const mha_shape *s = &m->shape;
    size_t dq = s->dim_qk, dv = s->dim_v;
    for (size_t i = 0; i < h->kept; i++, dst += dq)
        take_rows(m, MHA_BQ, h->q_head[i] * dq, dq, dst);
    for (size_t g = 0; g < h->kv; g++, dst += dq) take_rows(m, MHA_BK, h->kv_head[g] * dq, dq, dst);
    for (size_t g = 0; g < h->kv; g++, dst += dv) take_rows(m, MHA_BV, h->kv_head[g] * dv, dv, dst);
}

/* W_o's columns of the kept heads, in the weights' type: dst [d_model][kept*Dv]. */
static void pack_out(const clattn_mha *m, const mha_heads *h, unsigned char *dst) {
    const mha_shape *s = &m->shape;
    size_t cols = s->cols[MHA_WO], elem = dtype_size(s->dtype), head = s->dim_v * elem;
    const unsigned char *src = (const unsigned char *)m->source[MHA_WO];
    for (size_t r = 0; r < s->d_model; r++)
        for (size_t i = 0; i < h->kept; i++, dst += head)
            memcpy(dst, src + (r * cols + h->q_head[i] * s->dim_v) * elem, head);
}

/* Uploads `count` floats of host into a new read-only buffer counted in w->bytes. */
static clattn_status upload(clattn_context *ctx, const float *host, size_t count, mha_weights *w,
                            cl_mem *out, const char *what) {
    clattn_status status = buffer_create(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                         count * sizeof *host, (void *)host, out, what);
    if (status == CLATTN_SUCCESS) w->bytes += count * sizeof *host;
    return status;
}

static void weights_release(mha_weights *w) {
    cl_mem all[] = {w->b_in, w->b_o};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        if (all[i]) clReleaseMemObject(all[i]);
    gemm_weights_release(&w->w_q), gemm_weights_release(&w->w_kv), gemm_weights_release(&w->w_o);
    memset(w, 0, sizeof *w);
}

/* Stages a weight matrix [n][k] of the weights' type and prepares it for the GEMM row. */
static clattn_status prepare(clattn_mha *m, const unsigned char *stage, size_t n, size_t k,
                             mha_weights *w, gemm_weights *out) {
    clattn_status status = gemm_weights_make(m->ctx, stage, m->shape.dtype, n, k, out);
    if (status == CLATTN_SUCCESS) w->bytes += out->bytes;
    return status;
}

/* Packs the weights of heads h into w (host staging in the weights' type, then each matrix
 * prepared for the GEMM row). */
static clattn_status pack_weights(clattn_mha *m, const mha_heads *h, mha_weights *w) {
    const mha_shape *s = &m->shape;
    memset(w, 0, sizeof *w);
    w->rows_q = h->kept * s->dim_qk, w->rows_k = h->kv * s->dim_qk, w->rows_v = h->kv * s->dim_v;
    size_t in_rows = w->rows_q + w->rows_k + w->rows_v, elem = dtype_size(s->dtype);
    size_t q = w->rows_q * s->d_model, kv = (w->rows_k + w->rows_v) * s->d_kv;
    size_t out = s->d_model * h->kept * s->dim_v, most = q > kv ? q : kv;
    int in_bias = s->given[MHA_BQ] || s->given[MHA_BK] || s->given[MHA_BV];
    most = most > out ? most : out;
    unsigned char *stage = malloc((most > in_rows ? most : in_rows) * (elem > 4 ? elem : 4));
    if (!stage) return ctx_error(m->ctx, CLATTN_ERR_OUT_OF_MEMORY, "mha: packing the weights");
    copy_heads(m, MHA_WQ, h->q_head, h->kept, s->dim_qk, stage);
    clattn_status st = prepare(m, stage, w->rows_q, s->d_model, w, &w->w_q);
    if (!st) {
        unsigned char *end = copy_heads(m, MHA_WK, h->kv_head, h->kv, s->dim_qk, stage);
        copy_heads(m, MHA_WV, h->kv_head, h->kv, s->dim_v, end);
        st = prepare(m, stage, w->rows_k + w->rows_v, s->d_kv, w, &w->w_kv);
    }
    if (!st && in_bias) {
        pack_bias_in(m, h, (float *)stage);
        st = upload(m->ctx, (float *)stage, in_rows, w, &w->b_in, "mha: packed b_q, b_k, b_v");
    }
    if (!st) {
        pack_out(m, h, stage);
        st = prepare(m, stage, s->d_model, h->kept * s->dim_v, w, &w->w_o);
    }
    if (!st && s->given[MHA_BO]) {
        take_rows(m, MHA_BO, 0, s->d_model, (float *)stage);
        st = upload(m->ctx, (float *)stage, s->d_model, w, &w->b_o, "mha: b_o");
    }
    free(stage);
    if (st) weights_release(w);
    return st;
}

/* Plans and packs the heads `keep` keeps; only on success do they replace the layer's. */
static clattn_status apply_mask(clattn_mha *m, const uint8_t *keep) {
    mha_heads heads;
    mha_weights weights;
    clattn_status status = mha_heads_plan(&m->shape, keep, &heads, &m->ctx->error);
    if (status != CLATTN_SUCCESS) return status;
    status = pack_weights(m, &heads, &weights);
    if (status != CLATTN_SUCCESS) {
        mha_heads_release(&heads);
        return status;
    }
    mha_heads_release(&m->heads);
    weights_release(&m->weights);
    m->heads = heads, m->weights = weights;
    for (size_t q = 0; q < m->shape.heads_q; q++) m->keep[q] = !keep || keep[q];
    log_msg("mha: %zu of %zu query heads kept, attention over %zu kv heads%s; %llu bytes of "
            "packed weights",
            heads.kept, m->shape.heads_q, heads.kv, heads.duplicated ? " (duplicated)" : "",
            (unsigned long long)weights.bytes);
    return CLATTN_SUCCESS;
}

/* ---------------------------------------------------------------- entry points */

static clattn_status create_in_call(clattn_context *ctx, const clattn_mha_desc *desc,
                                    clattn_mha **out) {
    if (!out) return CLATTN_ERR_INVALID_ARGUMENT;
    ctx_clear_error(ctx);
    *out = NULL;
    clattn_mha *m = calloc(1, sizeof *m);
    if (!m) return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "mha: the layer");
    m->ctx = ctx;
    const uint8_t *keep = NULL;
    clattn_status status = mha_shape_check(desc, &m->shape, &keep, &ctx->error);
    if (status == CLATTN_SUCCESS && !(m->keep = malloc(m->shape.heads_q)))
        status = ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "mha: the head mask");
    if (status == CLATTN_SUCCESS) status = copy_sources(m);
    if (status == CLATTN_SUCCESS) status = apply_mask(m, keep);
    if (status != CLATTN_SUCCESS) {
        clattn_mha_destroy(m);
        return status;
    }
    *out = m;
    return CLATTN_SUCCESS;
}

clattn_status clattn_mha_create(clattn_context *ctx, const clattn_mha_desc *desc,
                                clattn_mha **out) {
    return IN_CONTEXT(ctx, create_in_call(ctx, desc, out));
}

void clattn_mha_destroy(clattn_mha *m) {
    if (!m) return;
    weights_release(&m->weights);
    for (int i = 0; i < MHA_SCRATCH; i++)
        if (m->scratch[i]) clReleaseMemObject(m->scratch[i]);
    for (int p = 0; p < MHA_PARAMS; p++) free(m->source[p]);
    mha_heads_release(&m->heads);
    free(m->keep);
    free(m);
}

static clattn_status set_head_mask_in_call(clattn_mha *m, const uint8_t *head_mask) {
    ctx_clear_error(m->ctx);
    return apply_mask(m, head_mask);
}

clattn_status clattn_mha_set_head_mask(clattn_mha *m, const uint8_t *head_mask) {
    return m ? IN_CONTEXT(m->ctx, set_head_mask_in_call(m, head_mask))
             : CLATTN_ERR_INVALID_ARGUMENT;
}

clattn_status clattn_mha_info_init_sized(clattn_mha_info *info, size_t struct_size) {
    return struct_init_zeroed(info, struct_size, sizeof *info);
}

static clattn_status get_info_in_call(const clattn_mha *m, clattn_mha_info *info) {
    const mha_shape *s = &m->shape;
    clattn_mha_info d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.d_model = s->d_model, d.d_kv = s->d_kv, d.heads_q = s->heads_q, d.heads_kv = s->heads_kv;
    d.dim_qk = s->dim_qk, d.dim_v = s->dim_v, d.weight_dtype = s->dtype;
    d.heads_kept = d.attention_heads_q = m->heads.kept;
    d.attention_heads_kv = m->heads.kv;
    d.kv_duplicated = m->heads.duplicated;
    for (int p = MHA_BQ; p < MHA_PARAMS; p++) d.has_bias |= s->given[p];
    d.weight_bytes = m->weights.bytes;
    struct_write(info, &d, sizeof d, sizeof d);
    return CLATTN_SUCCESS;
}

clattn_status clattn_mha_get_info(const clattn_mha *m, clattn_mha_info *info) {
    if (!m || !info || info->struct_size < sizeof *info) return CLATTN_ERR_INVALID_ARGUMENT;
    return IN_CONTEXT(m->ctx, get_info_in_call(m, info)); /* a mask may be changing it */
}
