/*
 * The shapes `clattn tune --gemm` measures a GEMM row on (tune_layer.c): attention layers
 * (clattn_mha) whose projections and output run on the row, checked against the layer's CPU
 * reference, timed by their GEMM phases.
 */
#ifndef CLATTN_CLI_TUNE_LAYER_H
#define CLATTN_CLI_TUNE_LAYER_H

#include "clattn.h"

/* The most timed runs `clattn tune --repeat` takes a candidate and shape. */
#define TUNE_REPEAT_MAX 64

typedef struct tune_layer {
    char name[96];
    clattn_mha_desc layer;
    clattn_attention_desc call;
    void *w[4]; /* W_q, W_k, W_v, W_o on the host, in the layer's weight type */
    void *x;    /* X [1, N, d_model] float32 on the host */
    cl_mem x_dev, y_dev;
    size_t y_count;
    double *ref; /* the reference's Y */
} tune_layer;

/* A causal self-attention layer of d_model = hq * d, N rows, weights stored as wtype, with its
 * reference computed. @return 0, or 1 (out of memory, or the reference failed). */
int tune_layer_setup(clattn_context *ctx, tune_layer *l, size_t hq, size_t hkv, size_t d, size_t n,
                     clattn_dtype wtype);
void tune_layer_free(tune_layer *l);

/* Makes the layer on ctx (its weights prepared for the context's GEMM row and tuning, as set
 * now), runs it once and checks Y, then `repeat` (at most TUNE_REPEAT_MAX) more: *ms receives the
 * median of the GEMMs' time (projections plus output, clattn_mha_stats; the context must time) and
 * `kernel` the GEMM's description. @return 0, or 1 with why. */
int tune_layer_measure(clattn_context *ctx, tune_layer *l, size_t repeat, double *ms, char *kernel,
                       size_t kernel_size, char *why, size_t why_size);

#endif
