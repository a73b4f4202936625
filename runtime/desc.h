/* Checking an attention desc before anything runs, and the extents its tensors need. */
#ifndef CLATTN_DESC_H
#define CLATTN_DESC_H

#include "internal.h"

/* Bytes each tensor spans in its buffer, from its offset to its last element. */
typedef struct tensor_extents {
    size_t q, k, v, o, lse, bias; /* bias is 0 when the desc has none */
} tensor_extents;

static inline size_t dtype_size(clattn_dtype t) {
    return t == CLATTN_F16 ? 2 : 4;
}

/* Validates sizes, heads, dtypes, scale, mask fields and strides, and computes the extents
 * without overflow. `has_bias` says whether the call carries a bias. Records a message on ctx.
 * @return CLATTN_SUCCESS or CLATTN_ERR_INVALID_ARGUMENT. */
clattn_status desc_check(clattn_context *ctx, const clattn_attention_desc *d, int has_bias,
                         tensor_extents *ext);

/* A window side as the masks use it: a side wider than every distance (len_q + len_k) is the
 * same as unbounded, and clamping it keeps p - left and p + right from overflowing. */
int64_t desc_window_side(const clattn_attention_desc *d, int64_t side);

/* The dilation as the masks use it: |p - j| < max(len_q, len_k), so any larger dilation keeps
 * only j == p, as max(len_q, len_k) does; clamping keeps the planner's per-class loops and
 * buffers bounded by the lengths. */
int64_t desc_dilation(const clattn_attention_desc *d);

/* The scale the call uses: desc->scale, or 1/sqrt(dim_qk) when it is 0. */
float desc_scale(const clattn_attention_desc *d);

#endif
