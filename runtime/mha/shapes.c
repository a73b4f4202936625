/*
 * The multi-head attention layer's checks, once at its entry points: the layer's desc into a
 * shape, a head mask into the heads the attention runs, and a call's desc against the layer.
 */
#include "mha/shapes.h"
#include "plan/problem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first layout of clattn_mha_desc: every field of 0.2. */
#define MHA_DESC_BASE_SIZE sizeof(clattn_mha_desc)

static const char *const param_names[MHA_PARAMS] = {"W_q", "W_k", "W_v", "W_o",
                                                    "b_q", "b_k", "b_v", "b_o"};

const char *mha_param_name(int param) {
    return param >= 0 && param < MHA_PARAMS ? param_names[param] : "?";
}

clattn_status clattn_mha_desc_init_sized(clattn_mha_desc *desc, size_t struct_size, size_t d_model,
                                         size_t heads_q, size_t heads_kv, size_t dim_qk,
                                         size_t dim_v) {
    clattn_mha_desc d;
    memset(&d, 0, sizeof d);
    d.d_model = d_model, d.heads_q = heads_q, d.heads_kv = heads_kv;
    d.dim_qk = dim_qk, d.dim_v = dim_v;
    return struct_init(desc, struct_size, &d, sizeof d, MHA_DESC_BASE_SIZE)
               ? CLATTN_ERR_INVALID_ARGUMENT
               : CLATTN_SUCCESS;
}

/* Rows and columns of every parameter ([out, in]; a bias is [out, 1]); 1 on overflow. */
static int param_shapes(mha_shape *s) {
    size_t q = 0, k = 0, v = 0, o = 0, plan = 0; /* plan: the head plan's arrays (size_t) */
    if (size_mul(s->heads_q, s->dim_qk, &q) || size_mul(s->heads_kv, s->dim_qk, &k) ||
        size_mul(s->heads_kv, s->dim_v, &v) || size_mul(s->heads_q, s->dim_v, &o) ||
        size_mul(s->heads_q, sizeof(size_t), &plan))
        return 1;
    const size_t rows[MHA_PARAMS] = {q, k, v, s->d_model, q, k, v, s->d_model};
    const size_t cols[MHA_PARAMS] = {s->d_model, s->d_kv, s->d_kv, o, 1, 1, 1, 1};
    size_t all = 0;
    for (int p = 0; p < MHA_PARAMS; p++) {
        s->rows[p] = rows[p], s->cols[p] = cols[p];
        if (size_mul(rows[p], cols[p], &all) || size_mul(all, 4, &all)) return 1;
    }
    return 0;
}

static clattn_status check_sizes(const mha_shape *s, error_record *err) {
    if (!s->d_model || !s->heads_q || !s->heads_kv || !s->dim_qk || !s->dim_v)
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "mha: every size must be >= 1 (d_model=%zu Hq=%zu Hkv=%zu Dqk=%zu "
                         "Dv=%zu)",
                         s->d_model, s->heads_q, s->heads_kv, s->dim_qk, s->dim_v);
    if (s->heads_q % s->heads_kv != 0)
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "mha: query heads (%zu) must be a multiple of key/value heads (%zu)",
                         s->heads_q, s->heads_kv);
    if (!dtype_known(s->dtype))
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "mha: weight_dtype %d must be CLATTN_F32, CLATTN_F16 or CLATTN_BF16",
                         (int)s->dtype);
    return CLATTN_SUCCESS;
}

/* A parameter given once at most (weights: exactly once), and a buffer that holds its tensor
 * from its offset on. */
static clattn_status check_param(mha_shape *s, int p, error_record *err) {
    const clattn_mha_param *param = &s->params[p];
    const char *name = param_names[p];
    s->given[p] = param->host || param->buffer;
    if (param->host && param->buffer)
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "mha: %s is given twice, as a host array and as a buffer", name);
    if (!s->given[p] && p <= MHA_WO)
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT, "mha: %s is missing", name);
    size_t need = 0, elem = dtype_size(s->dtype);
    if (size_add(param->offset, mha_param_count(s, p), &need) || size_mul(need, elem, &need))
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT, "mha: %s's offset overflows", name);
    if (param->buffer && buffer_size(param->buffer) < need)
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "mha: %s [%zu, %zu] %s at offset %zu needs %zu bytes; its buffer holds "
                         "%zu",
                         name, s->rows[p], s->cols[p], dtype_name(s->dtype), param->offset, need,
                         buffer_size(param->buffer));
    return CLATTN_SUCCESS;
}

clattn_status mha_shape_check(const clattn_mha_desc *given, mha_shape *s, const uint8_t **head_mask,
                              error_record *err) {
    clattn_mha_desc d;
    memset(s, 0, sizeof *s);
    if (!given || struct_read(&d, sizeof d, given, given->struct_size, MHA_DESC_BASE_SIZE))
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "mha: desc is NULL or its struct_size is wrong: start from "
                         "clattn_mha_desc_init");
    s->d_model = d.d_model, s->d_kv = d.d_kv ? d.d_kv : d.d_model;
    s->heads_q = d.heads_q, s->heads_kv = d.heads_kv, s->dim_qk = d.dim_qk, s->dim_v = d.dim_v;
    s->dtype = d.weight_dtype;
    const clattn_mha_param params[MHA_PARAMS] = {d.w_q, d.w_k, d.w_v, d.w_o,
                                                 d.b_q, d.b_k, d.b_v, d.b_o};
    memcpy(s->params, params, sizeof params);
    clattn_status status = check_sizes(s, err);
    if (status == CLATTN_SUCCESS && param_shapes(s))
        status = error_set(err, CLATTN_ERR_INVALID_ARGUMENT, "mha: the weights' sizes overflow");
    for (int p = 0; status == CLATTN_SUCCESS && p < MHA_PARAMS; p++)
        status = check_param(s, p, err);
    *head_mask = d.head_mask;
    return status;
}

/* ---------------------------------------------------------------- heads */

void mha_heads_release(mha_heads *h) {
    free(h->q_head);
    free(h->kv_head);
    memset(h, 0, sizeof *h);
}

/* Kept query heads per kv head into count[Hkv]; the kept kv heads and whether they all have the
 * same number of kept query heads (GQA can stay). */
static int gqa_keeps(const mha_shape *s, const size_t *count, size_t *kv_kept) {
    size_t same = 0;
    int equal = 1;
    *kv_kept = 0;
    for (size_t g = 0; g < s->heads_kv; g++) {
        if (!count[g]) continue;
        (*kv_kept)++;
        if (same && count[g] != same) equal = 0;
        same = count[g];
    }
    return equal;
}

clattn_status mha_heads_plan(const mha_shape *s, const uint8_t *keep, mha_heads *h,
                             error_record *err) {
    size_t group = s->heads_q / s->heads_kv, kv_kept = 0;
    memset(h, 0, sizeof *h);
    size_t *count = calloc(s->heads_kv, sizeof *count);
    h->q_head = malloc(s->heads_q * sizeof *h->q_head);
    h->kv_head = malloc(s->heads_q * sizeof *h->kv_head); /* at most one a kept query head */
    if (!count || !h->q_head || !h->kv_head) {
        free(count);
        mha_heads_release(h);
        return error_set(err, CLATTN_ERR_OUT_OF_MEMORY, "mha: the head plan");
    }
    for (size_t q = 0; q < s->heads_q; q++)
        if (!keep || keep[q]) h->q_head[h->kept++] = q, count[q / group]++;
    h->duplicated = !gqa_keeps(s, count, &kv_kept);
    if (h->duplicated) /* one kv head a kept query head: its own kv head's rows */
        for (size_t i = 0; i < h->kept; i++) h->kv_head[h->kv++] = h->q_head[i] / group;
    else
        for (size_t g = 0; g < s->heads_kv; g++)
            if (count[g]) h->kv_head[h->kv++] = g;
    free(count);
    if (h->kept == 0) {
        mha_heads_release(h);
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "mha: the head mask keeps none of the %zu heads", s->heads_q);
    }
    return CLATTN_SUCCESS;
}

/* ---------------------------------------------------------------- calls */

/* X [B, N, width] of `dtype`, dense: its bytes; 1 on overflow. */
static int dense_bytes(size_t b, size_t n, size_t width, clattn_dtype dtype, size_t *bytes) {
    return size_mul(b, n, bytes) || size_mul(*bytes, width, bytes) ||
           size_mul(*bytes, dtype_size(dtype), bytes);
}

/* The caller's desc read (struct_size) with the heads and dims checked against the layer, and
 * kv_q8_0 unset: it describes a caller's K and V, which the layer does not take. */
static clattn_status read_call(const mha_shape *s, const clattn_attention_desc *given,
                               clattn_attention_desc *d, error_record *err) {
    if (!given ||
        struct_read(d, sizeof *d, given, given->struct_size, CLATTN_ATTENTION_DESC_BASE_SIZE))
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "mha: the call's desc is NULL or its struct_size is wrong: start from "
                         "clattn_attention_desc_init");
    if (d->heads_q != s->heads_q || d->heads_kv != s->heads_kv || d->dim_qk != s->dim_qk ||
        d->dim_v != s->dim_v)
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "mha: the call's desc has Hq=%zu Hkv=%zu Dqk=%zu Dv=%zu; the layer "
                         "Hq=%zu Hkv=%zu Dqk=%zu Dv=%zu",
                         d->heads_q, d->heads_kv, d->dim_qk, d->dim_v, s->heads_q, s->heads_kv,
                         s->dim_qk, s->dim_v);
    if (d->kv_q8_0 || d->kv_q4_0)
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "mha: the call's desc sets kv_q8_0 or kv_q4_0, but the layer's K and V "
                         "are its own float32 projections: for quantised K/V give a q8_0 or q4_0 "
                         "KV cache (clattn_mha_forward_cache)");
    if (d->softcap != 0.0f || d->alibi_slopes || d->sinks) /* per head: pruning would shift them */
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "mha: the call's desc sets softcap, alibi_slopes or sinks, which the "
                         "layer does not take yet (clattn_attention and KV cache calls do)");
    if (mask_desc_is_shard(d) || d->lse_parts)
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "mha: a layer's call is no shard and has no LSE parts (q_start=%zu "
                         "k_start=%zu full_len_q=%zu full_len_k=%zu lse_parts=%d must be 0)",
                         d->q_start, d->k_start, d->full_len_q, d->full_len_k, d->lse_parts);
    return CLATTN_SUCCESS;
}

/* Self-attention (and a KV cache's new rows) reads K and V from X: then d_kv must be the
 * model's width, and without a cache Nk must be N. */
static clattn_status check_self(const mha_shape *s, const clattn_attention_desc *d, int cross,
                                size_t capacity, error_record *err) {
    if (cross) return CLATTN_SUCCESS;
    if (!capacity && d->len_k != d->len_q)
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "mha: self-attention (no X_kv) needs len_k = len_q; the desc has Nq=%zu "
                         "Nk=%zu",
                         d->len_q, d->len_k);
    if (s->d_kv != s->d_model)
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "mha: the layer's K/V weights read d_kv=%zu columns, X has d_model=%zu: "
                         "%s",
                         s->d_kv, s->d_model,
                         capacity ? "a KV cache call projects K and V from X" : "give X_kv");
    return CLATTN_SUCCESS;
}

/* The unpruned attention over dense float32 BSHD tensors, checked by the problem's own checks,
 * so that sizes, masks and the bias are judged as clattn_attention judges them. */
static clattn_status check_attention(mha_call *call, mha_bias bias, error_record *err) {
    clattn_attention_desc *d = &call->attn;
    d->dtype = d->out_dtype = CLATTN_F32;
    if (d->batch && d->len_q && d->len_k)
        if (clattn_tensor_dense(&d->q, CLATTN_LAYOUT_BSHD, d->heads_q, d->len_q, d->dim_qk, 0) ||
            clattn_tensor_dense(&d->k, CLATTN_LAYOUT_BSHD, d->heads_kv, d->len_k, d->dim_qk, 0) ||
            clattn_tensor_dense(&d->v, CLATTN_LAYOUT_BSHD, d->heads_kv, d->len_k, d->dim_v, 0) ||
            clattn_tensor_dense(&d->o, CLATTN_LAYOUT_BSHD, d->heads_q, d->len_q, d->dim_v, 0))
            return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                             "mha: the sizes overflow (B=%zu Nq=%zu Nk=%zu)", d->batch, d->len_q,
                             d->len_k);
    if (bias == MHA_BIAS_BUFFER) d->bias_host = NULL; /* the call reads the one it names */
    if (bias == MHA_BIAS_HOST) d->bias = NULL;
    attn_problem pb;
    clattn_status status =
        problem_build(d, bias == MHA_BIAS_HOST ? BIAS_FROM_HOST : BIAS_FROM_BUFFER, err, &pb);
    if (status == CLATTN_SUCCESS) call->extents = pb.extents;
    problem_release(&pb);
    return status;
}

/* X, X_kv and Y: storage types known, dense sizes without overflow. */
static clattn_status check_io(const mha_shape *s, mha_call *call, error_record *err) {
    if (!dtype_known(call->x_dtype) || !dtype_known(call->y_dtype))
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "mha: dtype %d (X) / out_dtype %d (Y): each must be CLATTN_F32, "
                         "CLATTN_F16 or CLATTN_BF16",
                         (int)call->x_dtype, (int)call->y_dtype);
    if (dense_bytes(call->batch, call->len_q, s->d_model, call->x_dtype, &call->x_bytes) ||
        dense_bytes(call->batch, call->len_q, s->d_model, call->y_dtype, &call->y_bytes) ||
        (call->cross &&
         dense_bytes(call->batch, call->len_k, s->d_kv, call->x_dtype, &call->x_kv_bytes)))
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "mha: the sizes of X and Y overflow (B=%zu N=%zu Nk=%zu)", call->batch,
                         call->len_q, call->len_k);
    return CLATTN_SUCCESS;
}

clattn_status mha_call_check(const mha_shape *s, const clattn_attention_desc *given, int cross,
                             size_t capacity, mha_bias bias, mha_call *call, error_record *err) {
    memset(call, 0, sizeof *call);
    clattn_attention_desc *d = &call->attn;
    clattn_status status = read_call(s, given, d, err);
    if (status == CLATTN_SUCCESS) status = check_self(s, d, cross, capacity, err);
    if (status != CLATTN_SUCCESS) return status;
    call->batch = d->batch, call->len_q = d->len_q, call->len_k = capacity ? 0 : d->len_k;
    call->cross = cross, call->x_dtype = d->dtype, call->y_dtype = d->out_dtype;
    if (capacity) d->len_k = capacity; /* as the cache's attention sees the keys */
    status = check_attention(call, bias, err);
    if (status == CLATTN_SUCCESS) status = check_io(s, call, err);
    return status;
}

clattn_status mha_pruned_attention(const mha_call *call, const mha_heads *heads,
                                   clattn_attention_desc *attn, uint8_t **layout,
                                   error_record *err) {
    *attn = call->attn;
    *layout = NULL;
    attn->heads_q = heads->kept, attn->heads_kv = heads->kv;
    if (!attn->block_layout || !attn->block_layout_per_head || heads->kept == call->attn.heads_q)
        return CLATTN_SUCCESS;
    size_t plane = ((attn->len_q + attn->block_q - 1) / attn->block_q) *
                   ((attn->len_k + attn->block_k - 1) / attn->block_k);
    if (!(*layout = malloc(heads->kept * plane)))
        return error_set(err, CLATTN_ERR_OUT_OF_MEMORY, "mha: the kept heads' block layout");
    for (size_t i = 0; i < heads->kept; i++) /* [Hq][blocks] -> [kept][blocks] */
        memcpy(*layout + i * plane, attn->block_layout + heads->q_head[i] * plane, plane);
    attn->block_layout = *layout;
    return CLATTN_SUCCESS;
}
