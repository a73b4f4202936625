/*
 * The multi-head attention layer, the runtime's top layer: it stands on the public entry points
 * of runtime/api (clattn_attention, the KV cache) and on the GEMM table (gemm/gemm.h), and nothing
 * below includes it. layer.c creates a layer and packs its weights; forward.c runs it.
 */
#ifndef CLATTN_MHA_H
#define CLATTN_MHA_H

#include "gemm/gemm.h"
#include "mha/shapes.h"

/* The kept heads' weights on the device, prepared for the GEMM row that multiplies by them
 * (gemm/gemm.h: packed panels in the weights' storage type, or float32 rows), as [out][in]:
 *
 *   w_q   [rows_q][d_model]: W_q's rows of the kept heads
 *   w_kv  [rows_k + rows_v][d_kv]: W_k's and W_v's rows of the kv heads the attention reads
 *   b_in  float32 [rows_q + rows_k + rows_v] (zeros for a bias not given), or NULL without
 *         input biases
 *   w_o   [d_model][kept*Dv]: W_o's columns of the kept heads
 *   b_o   float32 [d_model], or NULL
 *
 * Self-attention writes Q, K and V side by side into rows [B, N, kept*Dqk + kv*Dqk + kv*Dv]
 * (two GEMMs, one per weight matrix, into their columns). */
typedef struct mha_weights {
    gemm_weights w_q, w_kv, w_o;
    cl_mem b_in, b_o;
    size_t rows_q, rows_k, rows_v; /* kept*Dqk, kv*Dqk, kv*Dv */
    uint64_t bytes;
} mha_weights;

/* Scratch a layer keeps from call to call, grown on demand. */
enum {
    MHA_X32,    /* X widened to float32 [B*N][d_model] (16-bit X only) */
    MHA_XKV32,  /* X_kv widened [B*Nk][d_kv] */
    MHA_PROJ,   /* self-attention: [B*N][rows_q + rows_k + rows_v]; cross: Q [B*N][rows_q] */
    MHA_PROJKV, /* cross-attention: K and V [B*Nk][rows_k + rows_v] */
    MHA_O,      /* the attention's O [B*N][kept*Dv] (BSHD) */
    MHA_Y32,    /* Y before narrowing [B*N][d_model] (16-bit Y only) */
    MHA_BIAS,   /* a per-head bias reduced to the kept heads */
    MHA_SCRATCH
};

struct clattn_mha {
    clattn_context *ctx;
    mha_shape shape;          /* its params point at `source`, not at the caller's memory */
    void *source[MHA_PARAMS]; /* host copies of the weights as given (shape.dtype); NULL:
                                 a bias not given */
    uint8_t *keep;            /* [heads_q] the current head mask */
    mha_heads heads;          /* what the mask keeps */
    mha_weights weights;      /* packed for `heads` */
    cl_mem scratch[MHA_SCRATCH];
    size_t scratch_bytes[MHA_SCRATCH];
    clattn_mha_stats stats; /* of the last successful call */
    int has_stats;
};

#endif
