/*
 * The attention desc's defaults, and the one check every entry point runs before anything
 * else: the desc is validated here and turned into the problem that everything below reads.
 */
#include "plan/problem.h"

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

clattn_status clattn_attention_desc_init_sized(clattn_attention_desc *desc, size_t struct_size,
                                               clattn_layout layout, size_t batch, size_t heads_q,
                                               size_t heads_kv, size_t len_q, size_t len_k,
                                               size_t dim_qk, size_t dim_v) {
    clattn_attention_desc d;
    memset(&d, 0, sizeof d);
    d.batch = batch;
    d.heads_q = heads_q;
    d.heads_kv = heads_kv;
    d.len_q = len_q;
    d.len_k = len_k;
    d.dim_qk = dim_qk;
    d.dim_v = dim_v;
    d.window_left = -1;
    d.window_right = -1;
    d.dilation = 1;
    int bad = batch == 0 || clattn_tensor_dense(&d.q, layout, heads_q, len_q, dim_qk, 0) ||
              clattn_tensor_dense(&d.k, layout, heads_kv, len_k, dim_qk, 0) ||
              clattn_tensor_dense(&d.v, layout, heads_kv, len_k, dim_v, 0) ||
              clattn_tensor_dense(&d.o, layout, heads_q, len_q, dim_v, 0);
    if (struct_init(desc, struct_size, &d, sizeof d, CLATTN_ATTENTION_DESC_BASE_SIZE))
        return CLATTN_ERR_INVALID_ARGUMENT;
    return bad ? CLATTN_ERR_INVALID_ARGUMENT : CLATTN_SUCCESS;
}

/* Bytes from a tensor's start (offset 0) to its last element + 1; 1 on overflow. */
static int tensor_span(const clattn_tensor *t, size_t batch, size_t heads, size_t len, size_t dim,
                       clattn_dtype dtype, size_t *bytes) {
    size_t a, b, c, total;
    if (size_mul(batch - 1, t->stride_batch, &a) || size_mul(heads - 1, t->stride_head, &b) ||
        size_mul(len - 1, t->stride_seq, &c) || size_add(a, b, &total) ||
        size_add(total, c, &total) || size_add(total, dim, &total) ||
        size_add(total, t->offset, &total) || size_mul(total, dtype_size(dtype), bytes))
        return 1;
    *bytes = dtype_bytes(dtype, total); /* quantised: total is whole blocks (check_blocks) */
    return 0;
}

/* Each stride (of a dimension longer than 1), taken from the smallest, must step over
 * everything the smaller dimensions span. */
int tensor_rows_overlap(const clattn_tensor *t, size_t batch, size_t heads, size_t len,
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

/* The path and the variant a desc names: values of their enums. */
static clattn_status check_choices(error_record *err, const clattn_attention_desc *d) {
    if ((unsigned)d->path > CLATTN_PATH_REFERENCE)
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "path %d is none of CLATTN_PATH_AUTO (0), FUSED, GEMM and REFERENCE (3)",
                         (int)d->path);
    if ((unsigned)d->variant > CLATTN_VARIANT_NV_MMA)
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "variant %d is no variant (CLATTN_VARIANT_AUTO 0 to NV_MMA %d; "
                         "clattn_variant_from_name gives them by name)",
                         (int)d->variant, (int)CLATTN_VARIANT_NV_MMA);
    return CLATTN_SUCCESS;
}

static clattn_status check_sizes(error_record *err, const clattn_attention_desc *d) {
    if (d->batch == 0 || d->heads_q == 0 || d->heads_kv == 0 || d->len_q == 0 || d->len_k == 0 ||
        d->dim_qk == 0 || d->dim_v == 0)
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "every size must be >= 1 (B=%zu Hq=%zu Hkv=%zu Nq=%zu Nk=%zu Dqk=%zu "
                         "Dv=%zu)",
                         d->batch, d->heads_q, d->heads_kv, d->len_q, d->len_k, d->dim_qk,
                         d->dim_v);
    if (d->heads_q % d->heads_kv != 0)
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "query heads (%zu) must be a multiple of key/value heads (%zu)",
                         d->heads_q, d->heads_kv);
    if (d->len_q > INT32_MAX || d->len_k > INT32_MAX)
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "sequence lengths above 2^31-1 are not supported (Nq=%zu Nk=%zu)",
                         d->len_q, d->len_k);
    if (!dtype_known(d->dtype) || !dtype_known(d->out_dtype))
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "dtype %d / out_dtype %d: each must be CLATTN_F32, CLATTN_F16 or "
                         "CLATTN_BF16%s",
                         (int)d->dtype, (int)d->out_dtype,
                         dtype_is_quantised(d->dtype) || dtype_is_quantised(d->out_dtype)
                             ? " (q8_0 and q4_0 are for K and V only: set desc->kv_q8_0 or "
                               "kv_q4_0)"
                             : "");
    if (!isfinite(d->scale))
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT, "scale must be finite (got %g)",
                         (double)d->scale);
    return CLATTN_SUCCESS;
}

/* A shard (the 0.3 fields): its rows and keys inside the whole sequences, whose lengths stay
 * below 2^31 as a call's do. */
static clattn_status check_shard(error_record *err, const clattn_attention_desc *d) {
    const size_t full_q = mask_full_len_q(d), full_k = mask_full_len_k(d);
    if (full_q > INT32_MAX || full_k > INT32_MAX)
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "whole-sequence lengths above 2^31-1 are not supported (full_len_q=%zu "
                         "full_len_k=%zu)",
                         full_q, full_k);
    if (d->q_start > full_q || full_q - d->q_start < d->len_q)
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "query shard [%zu, %zu) is outside the whole sequence [0, %zu) "
                         "(q_start, len_q, full_len_q%s)",
                         d->q_start, d->q_start + d->len_q, full_q,
                         d->full_len_q ? "" : " = 0: len_q");
    if (d->k_start > full_k || full_k - d->k_start < d->len_k)
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "key shard [%zu, %zu) is outside the whole sequence [0, %zu) "
                         "(k_start, len_k, full_len_k%s)",
                         d->k_start, d->k_start + d->len_k, full_k,
                         d->full_len_k ? "" : " = 0: len_k");
    return CLATTN_SUCCESS;
}

static clattn_status check_mask(error_record *err, const clattn_attention_desc *d) {
    if (d->window_left < -1 || d->window_right < -1)
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "window (%lld,%lld): each side must be >= 0, or -1 for unbounded",
                         (long long)d->window_left, (long long)d->window_right);
    if (d->dilation < 1)
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT, "dilation must be >= 1 (got %lld)",
                         (long long)d->dilation);
    if (d->num_global_tokens > 0 && !d->global_tokens)
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "num_global_tokens is %zu but global_tokens is NULL",
                         d->num_global_tokens);
    for (size_t g = 0; g < d->num_global_tokens; g++)
        if (d->global_tokens[g] < 0 || (uint64_t)d->global_tokens[g] >= mask_full_len_k(d))
            return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                             "global token %lld is outside the keys [0, %zu)",
                             (long long)d->global_tokens[g], mask_full_len_k(d));
    if (d->block_layout &&
        (d->block_q == 0 || d->block_k == 0 || d->block_q > INT32_MAX || d->block_k > INT32_MAX))
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "a block layout needs block sizes from 1 to 2^31-1 (got %zu,%zu)",
                         d->block_q, d->block_k);
    return CLATTN_SUCCESS;
}

/* Soft-capping, ALiBi and sinks (docs/semantics.md section 8): finite values, and not with
 * the partial results of shards, whose merge would count a sink once a shard. */
static clattn_status check_modifiers(error_record *err, const clattn_attention_desc *d) {
    size_t slopes = d->alibi_per_batch ? d->batch * d->heads_q : d->heads_q;
    if (!isfinite(d->softcap) || d->softcap < 0.0f)
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "softcap must be finite and >= 0 (0: off; got %g)", (double)d->softcap);
    for (size_t h = 0; d->alibi_slopes && h < slopes; h++)
        if (!isfinite(d->alibi_slopes[h]))
            return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                             "alibi_slopes[%zu] is %g: slopes must be finite", h,
                             (double)d->alibi_slopes[h]);
    for (size_t h = 0; d->sinks && h < d->heads_q; h++)
        if (isnan(d->sinks[h]) || d->sinks[h] == INFINITY)
            return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                             "sinks[%zu] is %g: a sink is finite (or -inf: none)", h,
                             (double)d->sinks[h]);
    int modifies = d->softcap > 0.0f || d->alibi_slopes || d->sinks;
    if (modifies && (mask_desc_is_shard(d) || d->lse_parts))
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "softcap, alibi_slopes and sinks are not combined with shard positions "
                         "(q_start, k_start, full_len_*) or lse_parts");
    return CLATTN_SUCCESS;
}

/* Quantised K/V (q8_0, q4_0): one type, and every row starts a block, so a row is whole
 * 32-value blocks. */
static clattn_status check_blocks(error_record *err, const clattn_attention_desc *d) {
    const clattn_tensor *t[2] = {&d->k, &d->v};
    const size_t dim[2] = {d->dim_qk, d->dim_v};
    const char *name = d->kv_q4_0 ? "q4_0" : "q8_0";
    if (d->kv_q8_0 && d->kv_q4_0)
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "kv_q8_0 and kv_q4_0 are both set: K and V have one storage type");
    for (int i = 0; i < 2; i++) {
        size_t stride_batch = d->batch > 1 ? t[i]->stride_batch : 0;
        size_t stride_head = d->heads_kv > 1 ? t[i]->stride_head : 0;
        size_t stride_seq = d->len_k > 1 ? t[i]->stride_seq : 0;
        if ((dim[i] | t[i]->offset | stride_batch | stride_head | stride_seq) % Q8_BLOCK)
            return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                             "%s %s: head dim %zu, offset %zu and strides (%zu, %zu, %zu) must "
                             "be multiples of %d values (whole blocks)",
                             name, i ? "V" : "K", dim[i], t[i]->offset, t[i]->stride_batch,
                             t[i]->stride_head, t[i]->stride_seq, Q8_BLOCK);
    }
    return CLATTN_SUCCESS;
}

/* K and V's storage type: the desc's, or a quantised one. */
static clattn_dtype kv_dtype_of(const clattn_attention_desc *d) {
    return d->kv_q4_0 ? CLATTN_Q4_0 : d->kv_q8_0 ? CLATTN_Q8_0 : d->dtype;
}

static clattn_status check_extents(error_record *err, const clattn_attention_desc *d, int has_bias,
                                   clattn_attention_extents *ext) {
    clattn_dtype kv = kv_dtype_of(d);
    memset(ext, 0, sizeof *ext);
    if (tensor_span(&d->q, d->batch, d->heads_q, d->len_q, d->dim_qk, d->dtype, &ext->q) ||
        tensor_span(&d->k, d->batch, d->heads_kv, d->len_k, d->dim_qk, kv, &ext->k) ||
        tensor_span(&d->v, d->batch, d->heads_kv, d->len_k, d->dim_v, kv, &ext->v) ||
        tensor_span(&d->o, d->batch, d->heads_q, d->len_q, d->dim_v, d->out_dtype, &ext->o) ||
        size_mul(d->batch, d->heads_q, &ext->lse) || size_mul(ext->lse, d->len_q, &ext->lse) ||
        size_mul(ext->lse, d->lse_parts ? 2 * sizeof(float) : sizeof(float), &ext->lse) ||
        (has_bias && tensor_span(&d->bias_strides, d->batch, d->heads_q, d->len_q, d->len_k,
                                 CLATTN_F32, &ext->bias)))
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "tensor sizes overflow (B=%zu Hq=%zu Hkv=%zu Nq=%zu Nk=%zu Dqk=%zu "
                         "Dv=%zu)",
                         d->batch, d->heads_q, d->heads_kv, d->len_q, d->len_k, d->dim_qk,
                         d->dim_v);
    if (tensor_rows_overlap(&d->o, d->batch, d->heads_q, d->len_q, d->dim_v))
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "O's strides (batch %zu, head %zu, seq %zu) make rows overlap "
                         "(Dv=%zu)",
                         d->o.stride_batch, d->o.stride_head, d->o.stride_seq, d->dim_v);
    return CLATTN_SUCCESS;
}

/* The caller's desc in our layout: fields its struct_size lacks take their defaults. */
static clattn_status read_desc(error_record *err, const clattn_attention_desc *given,
                               clattn_attention_desc *d) {
    if (!given) return error_set(err, CLATTN_ERR_INVALID_ARGUMENT, "desc is NULL");
    if (struct_read(d, sizeof *d, given, given->struct_size, CLATTN_ATTENTION_DESC_BASE_SIZE))
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "desc->struct_size is %zu: start from clattn_attention_desc_init (this "
                         "library reads %zu to %zu bytes; a larger desc must have zeros past "
                         "those)",
                         given->struct_size, (size_t)CLATTN_ATTENTION_DESC_BASE_SIZE, sizeof *d);
    return CLATTN_SUCCESS;
}

static int has_bias_from(const clattn_attention_desc *d, bias_source source) {
    switch (source) {
    case BIAS_FROM_BUFFER:
        return d->bias != NULL;
    case BIAS_FROM_HOST:
        return d->bias_host != NULL;
    case BIAS_FROM_EITHER:
        break;
    }
    return d->bias != NULL || d->bias_host != NULL;
}

clattn_status problem_build(const clattn_attention_desc *given, bias_source bias, error_record *err,
                            attn_problem *pb) {
    clattn_attention_desc d;
    memset(pb, 0, sizeof *pb);
    clattn_status status = read_desc(err, given, &d);
    int has_bias = status == CLATTN_SUCCESS && has_bias_from(&d, bias);
    if (status == CLATTN_SUCCESS) status = check_sizes(err, &d);
    if (status == CLATTN_SUCCESS) status = check_choices(err, &d);
    if (status == CLATTN_SUCCESS) status = check_shard(err, &d);
    if (status == CLATTN_SUCCESS) status = check_mask(err, &d);
    if (status == CLATTN_SUCCESS) status = check_modifiers(err, &d);
    if (status == CLATTN_SUCCESS && (d.kv_q8_0 || d.kv_q4_0)) status = check_blocks(err, &d);
    if (status == CLATTN_SUCCESS) status = check_extents(err, &d, has_bias, &pb->extents);
    if (status != CLATTN_SUCCESS) return status;
    pb->batch = d.batch, pb->heads_q = d.heads_q, pb->heads_kv = d.heads_kv;
    pb->len_q = d.len_q, pb->len_k = d.len_k, pb->dim_qk = d.dim_qk, pb->dim_v = d.dim_v;
    pb->group = d.heads_q / d.heads_kv;
    pb->dtype = d.dtype, pb->out_dtype = d.out_dtype;
    pb->q = d.q, pb->k = d.k, pb->v = d.v, pb->o = d.o;
    pb->scale = d.scale != 0.0f ? d.scale : (float)(1.0 / sqrt((double)d.dim_qk));
    pb->has_bias = has_bias;
    pb->bias = has_bias ? d.bias_strides : (clattn_tensor){0, 0, 0, 0};
    pb->bias_host = has_bias ? d.bias_host : NULL;
    pb->path = d.path, pb->variant = d.variant;
    pb->gemm_budget_bytes = d.gemm_budget_bytes;
    pb->count_tiles = d.count_tiles != 0;
    pb->lse_parts = d.lse_parts != 0;
    pb->kv.dtype = kv_dtype_of(&d);
    pb->softcap = d.softcap;
    pb->alibi_slopes = d.alibi_slopes, pb->alibi_per_batch = d.alibi_slopes && d.alibi_per_batch;
    pb->sinks = d.sinks;
    status = mask_from_desc(&d, &pb->mask);
    if (status != CLATTN_SUCCESS)
        return error_set(err, status, "the mask's global token flags (%zu tokens) or shard layout",
                         d.num_global_tokens);
    return CLATTN_SUCCESS;
}

void problem_release(attn_problem *pb) {
    mask_release(&pb->mask);
}
