/* The attention desc: its defaults, and the checks every path runs before touching a buffer. */
#include "desc.h"
#include "kernel_params.h"

#include <math.h>
#include <string.h>

clattn_status clattn_tensor_dense(clattn_tensor *t, clattn_layout layout, size_t heads, size_t len,
                                  size_t dim, size_t offset) {
    size_t row = 0, plane = 0;
    if (!t || heads == 0 || len == 0 || dim == 0) return CLATTN_ERR_INVALID_ARGUMENT;
    if (layout != CLATTN_LAYOUT_BSHD && layout != CLATTN_LAYOUT_BHSD)
        return CLATTN_ERR_INVALID_ARGUMENT;
    if (size_mul(heads, dim, &row) || size_mul(row, len, &plane))
        return CLATTN_ERR_INVALID_ARGUMENT;
    t->offset = offset;
    t->stride_batch = plane;
    if (layout == CLATTN_LAYOUT_BSHD) { /* [B, N, H, D] */
        t->stride_seq = row;
        t->stride_head = dim;
    } else { /* [B, H, N, D] */
        t->stride_head = len * dim;
        t->stride_seq = dim;
    }
    return CLATTN_SUCCESS;
}

clattn_status clattn_attention_desc_init(clattn_attention_desc *d, clattn_layout layout,
                                         size_t batch, size_t heads_q, size_t heads_kv,
                                         size_t len_q, size_t len_k, size_t dim_qk, size_t dim_v) {
    if (!d) return CLATTN_ERR_INVALID_ARGUMENT;
    memset(d, 0, sizeof *d);
    if (batch == 0) return CLATTN_ERR_INVALID_ARGUMENT;
    d->batch = batch;
    d->heads_q = heads_q;
    d->heads_kv = heads_kv;
    d->len_q = len_q;
    d->len_k = len_k;
    d->dim_qk = dim_qk;
    d->dim_v = dim_v;
    d->window_left = -1;
    d->window_right = -1;
    d->dilation = 1;
    if (clattn_tensor_dense(&d->q, layout, heads_q, len_q, dim_qk, 0) ||
        clattn_tensor_dense(&d->k, layout, heads_kv, len_k, dim_qk, 0) ||
        clattn_tensor_dense(&d->v, layout, heads_kv, len_k, dim_v, 0) ||
        clattn_tensor_dense(&d->o, layout, heads_q, len_q, dim_v, 0))
        return CLATTN_ERR_INVALID_ARGUMENT;
    return CLATTN_SUCCESS;
}

int64_t desc_window_side(const clattn_attention_desc *d, int64_t side) {
    int64_t reach = (int64_t)d->len_q + (int64_t)d->len_k; /* both < 2^31 after desc_check */
    return side > reach ? reach : side;
}

int64_t desc_dilation(const clattn_attention_desc *d) {
    int64_t widest = (int64_t)(d->len_q > d->len_k ? d->len_q : d->len_k);
    return d->dilation > widest ? widest : d->dilation < 1 ? 1 : d->dilation;
}

float desc_scale(const clattn_attention_desc *d) {
    return d->scale != 0.0f ? d->scale : (float)(1.0 / sqrt((double)d->dim_qk));
}

/* Elements from a tensor's offset to its last element + 1; 1 on overflow. */
static int tensor_span(const clattn_tensor *t, size_t batch, size_t heads, size_t len, size_t dim,
                       size_t elem_size, size_t *bytes) {
    size_t a, b, c, total;
    if (size_mul(batch - 1, t->stride_batch, &a) || size_mul(heads - 1, t->stride_head, &b) ||
        size_mul(len - 1, t->stride_seq, &c) || size_add(a, b, &total) ||
        size_add(total, c, &total) || size_add(total, dim, &total) ||
        size_add(total, t->offset, &total))
        return 1;
    return size_mul(total, elem_size, bytes);
}

/* O must not have two elements in one place: each stride (of a dimension longer than 1), taken
 * from the smallest, must step over everything the smaller dimensions span. */
static int output_overlaps(const clattn_tensor *t, size_t batch, size_t heads, size_t len,
                           size_t dim) {
    size_t stride[3] = {t->stride_seq, t->stride_head, t->stride_batch};
    size_t count[3] = {len, heads, batch};
    for (int a = 0; a < 3; a++) /* sort by stride, ascending */
        for (int b = a + 1; b < 3; b++)
            if (stride[b] < stride[a]) {
                size_t s = stride[a], c = count[a];
                stride[a] = stride[b], count[a] = count[b];
                stride[b] = s, count[b] = c;
            }
    size_t span = dim; /* elements covered by the dimensions checked so far */
    for (int a = 0; a < 3; a++) {
        if (count[a] == 1) continue;
        if (stride[a] < span) return 1;
        span = stride[a] * (count[a] - 1) + span;
    }
    return 0;
}

static clattn_status check_sizes(clattn_context *ctx, const clattn_attention_desc *d) {
    if (d->batch == 0 || d->heads_q == 0 || d->heads_kv == 0 || d->len_q == 0 || d->len_k == 0 ||
        d->dim_qk == 0 || d->dim_v == 0)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "every size must be >= 1 (B=%zu Hq=%zu Hkv=%zu Nq=%zu Nk=%zu Dqk=%zu "
                         "Dv=%zu)",
                         d->batch, d->heads_q, d->heads_kv, d->len_q, d->len_k, d->dim_qk,
                         d->dim_v);
    if (d->heads_q % d->heads_kv != 0)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "query heads (%zu) must be a multiple of key/value heads (%zu)",
                         d->heads_q, d->heads_kv);
    if (d->len_q > INT32_MAX || d->len_k > INT32_MAX)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "sequence lengths above 2^31-1 are not supported (Nq=%zu Nk=%zu)",
                         d->len_q, d->len_k);
    if ((d->dtype != CLATTN_F32 && d->dtype != CLATTN_F16) ||
        (d->out_dtype != CLATTN_F32 && d->out_dtype != CLATTN_F16))
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "dtype must be CLATTN_F32 or "
                         "CLATTN_F16");
    if (!isfinite(d->scale))
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "scale must be finite (got %g)",
                         (double)d->scale);
    return CLATTN_SUCCESS;
}

static clattn_status check_mask(clattn_context *ctx, const clattn_attention_desc *d) {
    if (d->window_left < -1 || d->window_right < -1)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "window (%lld,%lld): each side must be >= 0, or -1 for unbounded",
                         (long long)d->window_left, (long long)d->window_right);
    if (d->dilation < 1)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "dilation must be >= 1 (got %lld)",
                         (long long)d->dilation);
    if (d->num_global_tokens > 0 && !d->global_tokens)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "num_global_tokens is %zu but global_tokens is NULL",
                         d->num_global_tokens);
    for (size_t g = 0; g < d->num_global_tokens; g++)
        if (d->global_tokens[g] < 0 || (uint64_t)d->global_tokens[g] >= d->len_k)
            return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                             "global token %lld is outside the keys [0, %zu)",
                             (long long)d->global_tokens[g], d->len_k);
    if (d->block_layout &&
        (d->block_q == 0 || d->block_k == 0 || d->block_q > INT32_MAX || d->block_k > INT32_MAX))
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "a block layout needs block sizes from 1 to 2^31-1 (got %zu,%zu)",
                         d->block_q, d->block_k);
    return CLATTN_SUCCESS;
}

static clattn_status check_extents(clattn_context *ctx, const clattn_attention_desc *d,
                                   int has_bias, tensor_extents *ext) {
    size_t in = dtype_size(d->dtype), out = dtype_size(d->out_dtype);
    memset(ext, 0, sizeof *ext);
    if (tensor_span(&d->q, d->batch, d->heads_q, d->len_q, d->dim_qk, in, &ext->q) ||
        tensor_span(&d->k, d->batch, d->heads_kv, d->len_k, d->dim_qk, in, &ext->k) ||
        tensor_span(&d->v, d->batch, d->heads_kv, d->len_k, d->dim_v, in, &ext->v) ||
        tensor_span(&d->o, d->batch, d->heads_q, d->len_q, d->dim_v, out, &ext->o) ||
        size_mul(d->batch, d->heads_q, &ext->lse) || size_mul(ext->lse, d->len_q, &ext->lse) ||
        size_mul(ext->lse, sizeof(float), &ext->lse) ||
        (has_bias && tensor_span(&d->bias_strides, d->batch, d->heads_q, d->len_q, d->len_k,
                                 sizeof(float), &ext->bias)))
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "tensor sizes overflow (B=%zu Hq=%zu Hkv=%zu Nq=%zu Nk=%zu Dqk=%zu "
                         "Dv=%zu)",
                         d->batch, d->heads_q, d->heads_kv, d->len_q, d->len_k, d->dim_qk,
                         d->dim_v);
    if (output_overlaps(&d->o, d->batch, d->heads_q, d->len_q, d->dim_v))
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "O's strides (batch %zu, head %zu, seq %zu) make rows overlap "
                         "(Dv=%zu)",
                         d->o.stride_batch, d->o.stride_head, d->o.stride_seq, d->dim_v);
    return CLATTN_SUCCESS;
}

clattn_status desc_check(clattn_context *ctx, const clattn_attention_desc *d, int has_bias,
                         tensor_extents *ext) {
    if (!d) return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "desc is NULL");
    clattn_status status = check_sizes(ctx, d);
    if (status == CLATTN_SUCCESS) status = check_mask(ctx, d);
    if (status == CLATTN_SUCCESS) status = check_extents(ctx, d, has_bias, ext);
    return status;
}

static void put_tensor(const clattn_tensor *t, cl_long *offset, cl_long *stride_b,
                       cl_long *stride_h, cl_long *stride_s) {
    *offset = (cl_long)t->offset;
    *stride_b = (cl_long)t->stride_batch;
    *stride_h = (cl_long)t->stride_head;
    *stride_s = (cl_long)t->stride_seq;
}

void params_from_desc(const clattn_attention_desc *d, int write_lse, attn_params *p) {
    memset(p, 0, sizeof *p);
    p->batch = (cl_long)d->batch;
    p->heads_q = (cl_long)d->heads_q;
    p->heads_kv = (cl_long)d->heads_kv;
    p->len_q = (cl_long)d->len_q;
    p->len_k = (cl_long)d->len_k;
    p->dim_qk = (cl_long)d->dim_qk;
    p->dim_v = (cl_long)d->dim_v;
    p->offset = p->len_k - p->len_q;
    put_tensor(&d->q, &p->q_offset, &p->q_stride_b, &p->q_stride_h, &p->q_stride_s);
    put_tensor(&d->k, &p->k_offset, &p->k_stride_b, &p->k_stride_h, &p->k_stride_s);
    put_tensor(&d->v, &p->v_offset, &p->v_stride_b, &p->v_stride_h, &p->v_stride_s);
    put_tensor(&d->o, &p->o_offset, &p->o_stride_b, &p->o_stride_h, &p->o_stride_s);
    put_tensor(&d->bias_strides, &p->bias_offset, &p->bias_stride_b, &p->bias_stride_h,
               &p->bias_stride_s);
    p->has_bias = d->bias != NULL || d->bias_host != NULL;
    p->causal = d->causal != 0;
    p->left = desc_window_side(d, d->window_left);
    p->right = desc_window_side(d, d->window_right);
    p->dilation = desc_dilation(d);
    p->classes = p->dilation; /* the fused planner may group by fewer */
    p->has_layout = d->block_layout != NULL;
    if (p->has_layout) {
        p->layout_per_head = d->block_layout_per_head != 0;
        p->block_q = (cl_long)d->block_q;
        p->block_k = (cl_long)d->block_k;
        p->blocks_q = (p->len_q + p->block_q - 1) / p->block_q;
        p->blocks_k = (p->len_k + p->block_k - 1) / p->block_k;
    }
    p->write_lse = write_lse != 0;
}
