/*
 * The multi-head attention layer's shapes, host-only: the layer's desc checked once into a shape
 * (sizes, which weights are given, their element counts), the heads that pruning keeps and how
 * the attention reads them, and one call's desc checked against the layer. layer.c and
 * forward.c run the layer on the device, reference.c on the host.
 */
#ifndef CLATTN_MHA_SHAPES_H
#define CLATTN_MHA_SHAPES_H

#include "core/core.h"

/* The parameters in one order: weights, then biases. */
enum { MHA_WQ, MHA_WK, MHA_WV, MHA_WO, MHA_BQ, MHA_BK, MHA_BV, MHA_BO, MHA_PARAMS };

typedef struct mha_shape {
    size_t d_model, d_kv, heads_q, heads_kv, dim_qk, dim_v;
    clattn_dtype dtype;                        /* storage of the weights and biases */
    clattn_mha_param params[MHA_PARAMS];       /* as the desc gives them */
    size_t rows[MHA_PARAMS], cols[MHA_PARAMS]; /* [out, in] of a weight; [out, 1] of a bias */
    int given[MHA_PARAMS];                     /* a host array or a buffer is there */
} mha_shape;

/* "W_q", ..., "b_o" */
const char *mha_param_name(int param);

/* Elements of a parameter: rows * cols. */
static inline size_t mha_param_count(const mha_shape *s, int param) {
    return s->rows[param] * s->cols[param];
}

/* Reads the caller's desc (struct_size), checks the sizes and which parameters are given (a
 * weight exactly once, a bias at most once; buffers large enough for their tensors at their
 * offsets) and fills the shape; *head_mask gets desc->head_mask. @return CLATTN_SUCCESS or
 * CLATTN_ERR_INVALID_ARGUMENT with the message in err. */
clattn_status mha_shape_check(const clattn_mha_desc *desc, mha_shape *shape,
                              const uint8_t **head_mask, error_record *err);

/* The heads a mask keeps and how the attention reads them. Attention query head i is the
 * layer's query head q_head[i] (ascending); attention kv head g is the layer's kv head
 * kv_head[g]. With GQA kept, attention query head i reads attention kv head i / (kept / kv);
 * duplicated, kv == kept and query head i reads kv head i (a copy of its own kv head). */
typedef struct mha_heads {
    size_t kept;     /* query heads kept, >= 1 */
    size_t *q_head;  /* [kept] */
    size_t kv;       /* kv heads the attention reads */
    size_t *kv_head; /* [kv] */
    int duplicated;
} mha_heads;

/* Plans the heads of `keep` (host [heads_q], nonzero kept; NULL keeps every head).
 * @return CLATTN_SUCCESS, CLATTN_ERR_INVALID_ARGUMENT (no head kept) or OUT_OF_MEMORY. */
clattn_status mha_heads_plan(const mha_shape *s, const uint8_t *keep, mha_heads *heads,
                             error_record *err);
void mha_heads_release(mha_heads *heads);

/* One call of the layer, checked: the caller's attention desc read into ours (its mask, scale,
 * bias, path and variant are the call's), the shapes of X, X_kv and Y, and the extents of the
 * unpruned attention (the bias's among them). */
typedef struct mha_call {
    clattn_attention_desc attn; /* the unpruned attention over dense BSHD float32 Q, K, V, O */
    size_t batch, len_q, len_k; /* X [batch, len_q, d_model]; X_kv [batch, len_k, d_kv] */
    int cross;                  /* X_kv is given */
    clattn_dtype x_dtype, y_dtype;
    size_t x_bytes, x_kv_bytes, y_bytes; /* dense X, X_kv (0 without), Y */
    clattn_attention_extents extents;    /* of attn: its bias's bytes when it has one */
} mha_call;

/* Which bias a call reads: the buffer (clattn_mha_forward) or the host array. */
typedef enum mha_bias { MHA_BIAS_BUFFER, MHA_BIAS_HOST } mha_bias;

/* Checks `given` against the layer: heads and dims the layer's, Nk = N for self-attention (and
 * then d_kv = d_model), storage types, and every mask of the unpruned attention; with a cache,
 * `capacity` stands in for Nk as the cache's attention sees it (else 0). */
clattn_status mha_call_check(const mha_shape *s, const clattn_attention_desc *given, int cross,
                             size_t capacity, mha_bias bias, mha_call *call, error_record *err);

/* The attention desc of the kept heads: call->attn with heads_q = heads->kept and heads_kv =
 * heads->kv, its block layout of one per head reduced to the kept heads (*layout, malloc'ed;
 * NULL when nothing was reduced). Tensors are set by the caller. @return CLATTN_SUCCESS or
 * CLATTN_ERR_OUT_OF_MEMORY. */
clattn_status mha_pruned_attention(const mha_call *call, const mha_heads *heads,
                                   clattn_attention_desc *attn, uint8_t **layout,
                                   error_record *err);

#endif
