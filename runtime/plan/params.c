/* The kernels' parameter block (params.h) filled from a problem. */
#include "plan/params.h"

#include <stdlib.h>
#include <string.h>

static void put_tensor(const clattn_tensor *t, cl_long *offset, cl_long *stride_b,
                       cl_long *stride_h, cl_long *stride_s) {
    *offset = (cl_long)t->offset;
    *stride_b = (cl_long)t->stride_batch;
    *stride_h = (cl_long)t->stride_head;
    *stride_s = (cl_long)t->stride_seq;
}

void params_from_problem(const attn_problem *pb, int write_lse, attn_params *p) {
    const mask_spec *m = &pb->mask;
    memset(p, 0, sizeof *p);
    p->batch = (cl_long)pb->batch;
    p->heads_q = (cl_long)pb->heads_q;
    p->heads_kv = (cl_long)pb->heads_kv;
    p->len_q = (cl_long)pb->len_q;
    p->len_k = (cl_long)pb->len_k;
    p->dim_qk = (cl_long)pb->dim_qk;
    p->dim_v = (cl_long)pb->dim_v;
    p->offset = m->offset;
    put_tensor(&pb->q, &p->q_offset, &p->q_stride_b, &p->q_stride_h, &p->q_stride_s);
    put_tensor(&pb->k, &p->k_offset, &p->k_stride_b, &p->k_stride_h, &p->k_stride_s);
    put_tensor(&pb->v, &p->v_offset, &p->v_stride_b, &p->v_stride_h, &p->v_stride_s);
    put_tensor(&pb->o, &p->o_offset, &p->o_stride_b, &p->o_stride_h, &p->o_stride_s);
    put_tensor(&pb->bias, &p->bias_offset, &p->bias_stride_b, &p->bias_stride_h, &p->bias_stride_s);
    p->has_bias = pb->has_bias;
    p->causal = m->causal;
    p->left = m->left;
    p->right = m->right;
    p->dilation = m->dilation;
    p->classes = m->dilation; /* the fused planner may group by fewer */
    p->has_global = m->has_global;
    p->num_global = m->num_globals;
    p->has_layout = m->layout != NULL;
    if (p->has_layout) {
        p->layout_per_head = m->layout_per_head;
        p->block_q = m->block_q;
        p->block_k = m->block_k;
        p->blocks_q = m->blocks_q;
        p->blocks_k = m->blocks_k;
    }
    p->write_lse = write_lse ? (pb->lse_parts ? 2 : 1) : 0;
    p->per_sequence = pb->kv.seq_len != NULL;
    p->page_size = (cl_long)pb->kv.page_size;
    p->max_pages = (cl_long)pb->kv.max_pages;
    p->group = (cl_long)pb->group;
    p->chunks = 1;
    union {
        float f;
        uint32_t bits;
    } cap = {pb->softcap};
    p->softcap = pb->softcap > 0.0f ? (cl_long)cap.bits : 0;
    p->has_sinks = pb->sinks != NULL;
    p->alibi = pb->alibi_slopes ? (pb->alibi_per_batch ? 2 : 1) : 0;
    p->q_dtype = pb->dtype;
    p->kv_dtype = pb->kv.dtype;
    p->out_dtype = pb->out_dtype;
}

int params_plain(const attn_params *p) {
    return p->q_dtype == CLATTN_F32 && p->kv_dtype == CLATTN_F32 && p->out_dtype == CLATTN_F32 &&
           !p->has_bias && !p->has_layout && !p->has_global && !p->per_sequence && !p->page_size;
}

/* Floats past the struct: sinks, then slopes. */
static size_t extra_floats(const attn_problem *pb) {
    size_t slopes = pb->alibi_slopes ? (pb->alibi_per_batch ? pb->batch : 1) * pb->heads_q : 0;
    return (pb->sinks ? pb->heads_q : 0) + slopes;
}

size_t params_block_bytes(const attn_problem *pb) {
    return sizeof(attn_params) + extra_floats(pb) * sizeof(float);
}

void params_block(const attn_params *p, const attn_problem *pb, void *block) {
    float *extras = (float *)((char *)block + sizeof *p);
    memcpy(block, p, sizeof *p);
    if (pb->sinks) memcpy(extras, pb->sinks, pb->heads_q * sizeof *extras), extras += pb->heads_q;
    if (pb->alibi_slopes)
        memcpy(extras, pb->alibi_slopes,
               (pb->alibi_per_batch ? pb->batch : 1) * pb->heads_q * sizeof *extras);
}

clattn_status params_buffer_add(clattn_context *ctx, buffer_set *set, const attn_params *p,
                                const attn_problem *pb, cl_mem *out) {
    size_t bytes = params_block_bytes(pb);
    if (bytes == sizeof *p) return buffer_set_add(ctx, set, 1, sizeof *p, p, out, "parameters");
    void *block = malloc(bytes);
    if (!block) return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "the parameter block");
    params_block(p, pb, block);
    clattn_status s = buffer_set_add(ctx, set, 1, bytes, block, out, "parameters");
    free(block);
    return s;
}
