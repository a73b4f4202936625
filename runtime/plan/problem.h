/*
 * One attention call as everything below the API sees it. The public desc is checked once, at
 * the API boundary, and turned into a problem: sizes, tensors, dtypes, the resolved scale and
 * mask, the bytes each tensor spans. Planners, kernels and the reference read the problem,
 * never the desc.
 */
#ifndef CLATTN_PROBLEM_H
#define CLATTN_PROBLEM_H

#include "core/core.h"
#include "plan/mask.h"

/* Where K and V are, for kernels that read them in place: the call's own tensors, or a KV
 * cache's storage (contiguous or paged) with a length per sequence (docs/semantics.md section 6).
 */
typedef struct kv_view {
    clattn_dtype dtype;         /* storage of K and V (the problem's dtype is Q's) */
    const int32_t *seq_len;     /* host [B]: keys of sequence b; NULL: len_k each */
    const int32_t *q_len;       /* host [B]: valid query rows of sequence b; NULL: len_q each */
    size_t page_size;           /* 0: [B, len_k, ...] tensors; else page pools */
    size_t max_pages;           /* block table entries a sequence */
    const int32_t *block_table; /* host [B][max_pages] page indices, paged only */
} kv_view;

typedef struct attn_problem {
    /* docs/semantics.md section 1; all >= 1, lengths < 2^31, heads_q a multiple of heads_kv */
    size_t batch, heads_q, heads_kv, len_q, len_k, dim_qk, dim_v;
    size_t group; /* heads_q / heads_kv: query heads that share a kv head */
    clattn_dtype dtype, out_dtype;
    clattn_tensor q, k, v, o;         /* element offsets and strides (batch, head, sequence) */
    float scale;                      /* desc->scale, or 1/sqrt(dim_qk) */
    int has_bias;                     /* the entry point has a bias (a cl_mem or a host array) */
    clattn_tensor bias;               /* its offset and strides; zero strides broadcast */
    const float *bias_host;           /* clattn_attention_host and the reference read this one */
    mask_spec mask;                   /* docs/semantics.md section 2, resolved */
    clattn_attention_extents extents; /* bytes each tensor spans */
    clattn_path path;
    clattn_variant variant;
    size_t gemm_budget_bytes;
    int count_tiles;
    int lse_parts; /* LSE as (max, log sum) pairs: [B, Hq, Nq, 2] */
    kv_view kv;    /* for a plain call: dtype, no lengths, not paged */
    /* docs/semantics.md section 8: score modifiers and sinks (host arrays of the caller's) */
    float softcap;             /* 0: off */
    const float *alibi_slopes; /* NULL, or [Hq] (alibi_per_batch 0) or [B][Hq] */
    int alibi_per_batch;
    const float *sinks; /* NULL, or [Hq] */
} attn_problem;

/* Whether a call modifies its scores (soft-capping or ALiBi) or has sinks. */
static inline int problem_has_modifiers(const attn_problem *pb) {
    return pb->softcap > 0.0f || pb->alibi_slopes != NULL || pb->sinks != NULL;
}

/* ALiBi's slope of query head h in sequence b (the call has slopes). */
static inline float problem_alibi_slope(const attn_problem *pb, size_t b, size_t h) {
    return pb->alibi_slopes[(pb->alibi_per_batch ? b * pb->heads_q : 0) + h];
}

/* Whether the call reads K/V with lengths per sequence or from pages (a KV cache). */
static inline int problem_is_cache(const attn_problem *pb) {
    return pb->kv.seq_len != NULL || pb->kv.page_size != 0;
}

/* Keys and valid query rows of sequence b. */
static inline size_t problem_keys(const attn_problem *pb, size_t b) {
    return pb->kv.seq_len ? (size_t)pb->kv.seq_len[b] : pb->len_k;
}
static inline size_t problem_queries(const attn_problem *pb, size_t b) {
    return pb->kv.q_len ? (size_t)pb->kv.q_len[b] : pb->len_q;
}

/* Which bias a check counts: the device buffer's (clattn_attention) or the host array's. */
typedef enum bias_source { BIAS_FROM_BUFFER, BIAS_FROM_HOST, BIAS_FROM_EITHER } bias_source;

/* Validates the desc (struct_size, sizes, heads, dtypes, scale, masks, strides, overflow) and
 * builds the problem from it; the message goes to `err`. Release with problem_release.
 * @return CLATTN_SUCCESS, CLATTN_ERR_INVALID_ARGUMENT or CLATTN_ERR_OUT_OF_MEMORY. */
clattn_status problem_build(const clattn_attention_desc *desc, bias_source bias, error_record *err,
                            attn_problem *pb);
void problem_release(attn_problem *pb);

/* Whether two elements of an output tensor [batch, heads, len, dim] (strides in elements, dim
 * contiguous) fall in one place; the strides' products must not overflow (checked first). */
int tensor_rows_overlap(const clattn_tensor *t, size_t batch, size_t heads, size_t len, size_t dim);

#endif
