/*
 * The parameter block of an attention call, field for field as cl/common.cl declares it.
 * Every field is a 64-bit integer so that host and device agree on the layout. The fused
 * kernels and the gemm path's masked softmax read it from a small constant buffer.
 */
#ifndef CLATTN_KERNEL_PARAMS_H
#define CLATTN_KERNEL_PARAMS_H

#include "clattn.h"

typedef struct attn_params {
    cl_long batch, heads_q, heads_kv, len_q, len_k, dim_qk, dim_v, offset;
    cl_long q_offset, q_stride_b, q_stride_h, q_stride_s;
    cl_long k_offset, k_stride_b, k_stride_h, k_stride_s;
    cl_long v_offset, v_stride_b, v_stride_h, v_stride_s;
    cl_long o_offset, o_stride_b, o_stride_h, o_stride_s;
    cl_long bias_offset, bias_stride_b, bias_stride_h, bias_stride_s, has_bias;
    cl_long causal, left, right, dilation;
    cl_long has_global, num_global;
    cl_long has_layout, layout_per_head, block_q, block_k, blocks_q, blocks_k;
    cl_long class_slots;
    cl_long classes;
    cl_long global_slots;
    cl_long tiles_per_class;
    cl_long row_mode;
    cl_long num_listed_rows;
    cl_long use_tile_list;
    cl_long write_lse;
} attn_params;

/* Fills the sizes, strides and mask fields of a call; the fused planner sets the rest. */
void params_from_desc(const clattn_attention_desc *d, int write_lse, attn_params *p);

#endif
