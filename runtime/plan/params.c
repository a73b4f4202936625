/* The kernels' parameter block (params.h) filled from a problem. */
#include "plan/params.h"

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
}
