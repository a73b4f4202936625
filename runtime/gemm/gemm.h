/*
 * The GEMM layer: every matrix product of the runtime (the attention layer's projections,
 * runtime/mha/, and the gemm attention path, kernels/gemm.c) goes through it. Like the
 * attention variants, each way to compute a GEMM is a row of one table (table.c), in the order
 * `auto` prefers them; a row owns its defaults, tuning axes and checks:
 *
 *     {name, supports(call, device) -> yes | reason, suits(device), weights_make, run}
 *
 * It is its own table, not an attention variant: a GEMM row serves many variants' products.
 *
 *     C[m][n] = alpha * A[m][k] op(B)  (+ C when accumulating)
 *
 * A, B and C are float32 and row-major with a row stride (ld); op(B) is B [n][k] read
 * transposed or B [k][n]. A batch of `count` entries addresses each operand of entry i as
 * offset + (g / heads) * s_batch + ((g % heads) / group) * s_head + i * s_item, g = first + i:
 * the attention's (b, h) groups, B's kv heads through `group` (1 for A and C). A weight matrix
 * W [n][k] (op(B) = W^T) is prepared once (gemm_weights_make) in the form of the row that will
 * multiply by it: packed panels in W's storage type for clattn's own kernel, float32 rows for
 * CLBlast.
 */
#ifndef CLATTN_GEMM_H
#define CLATTN_GEMM_H

#include "plan/tuning.h"

/* One operand's buffer and addressing, in elements. */
typedef struct gemm_operand {
    cl_mem buffer;
    size_t offset, ld;
    size_t s_batch, s_head, s_item; /* batch addressing (all 0 for a single GEMM) */
} gemm_operand;

struct gemm_row;

/* A weight matrix W [n][k] prepared for one row (gemm_weights_make). */
typedef struct gemm_weights {
    const struct gemm_row *row; /* the row it was prepared for, which multiplies by it */
    cl_mem buffer;
    size_t n, k;
    clattn_dtype dtype;   /* as stored on the device */
    tuning_params tuning; /* the row's parameters when it was prepared (panel widths) */
    uint64_t bytes;
} gemm_weights;

/* One GEMM or batch of GEMMs (see the top of this file). */
typedef struct gemm_desc {
    size_t m, n, k;
    size_t count, first, heads, group; /* batch entries (count >= 1; heads, group >= 1) */
    float alpha;
    int accumulate;  /* C += ..., else C = ... */
    int transpose_b; /* B is [n][k] (else [k][n]) */
    gemm_operand a, b, c;
    const gemm_weights *weights; /* instead of b: op(B) = W^T, one W for every entry */
    const char *what;            /* for messages: "mha: Y = O W_o^T" */
    int test_fail;               /* test-only ($CLATTN_TEST_FAIL_GEMM): a call the row rejects */
} gemm_desc;

/* A single GEMM's desc: count 1, heads 1, group 1, alpha 1. */
gemm_desc gemm_desc_single(size_t m, size_t n, size_t k, const char *what);

/* Loop iterations one k step of a panels micro-tile (cl/gemm_panels.cl) costs a work-item where
 * the compiler unrolls none of its loops (Mesa's llvmpipe, core.h's device_loop_budget):
 * tile_m * (NV + 1) + NV + 1 with NV = tile_n / 16; 27 at the default 8 x 32 (21 to 32
 * measured there). */
#define PANELS_LOOP_STEP(tile_m, tile_n) ((tile_m) * ((tile_n) / 16 + 1) + (tile_n) / 16 + 1)
/* What one k step costs a work-item of the smallest block at the default 8 x 32 micro-tile
 * (16 micro-tiles a work-item: twice the step), where a tuning.json tile is not known. */
#define PANELS_SMALLEST_BLOCK_STEP (2 * PANELS_LOOP_STEP(8, 32))

typedef struct gemm_row {
    clattn_gemm id;
    const char *name;    /* "clblast", "panels": $CLATTN_GEMM, --gemm, tuning.json */
    const char *summary; /* one line for listings */
    const tuning_default *defaults;
    size_t num_defaults;
    const clattn_tuning_axis *axes;
    size_t num_axes;
    int (*tuning_valid)(const tuning_params *t, const clattn_device_info *device, char *why,
                        size_t size);
    /* Whether it can run the call (NULL: any call) on ctx's device: CLATTN_SUCCESS, else
     * CLATTN_ERR_UNSUPPORTED or CLATTN_ERR_OUT_OF_MEMORY with why. Host-only and cheap. */
    clattn_status (*check)(const clattn_context *ctx, const gemm_desc *g, char *why, size_t size);
    /* Whether `auto` should pick it on this device; writes why not. */
    int (*suits)(const clattn_device_info *device, char *why, size_t size);
    /* W [n][k] of `dtype` on the host into out->buffer in the row's form. */
    clattn_status (*weights_make)(clattn_context *ctx, const tuning_params *t, const void *w,
                                  clattn_dtype dtype, size_t n, size_t k, gemm_weights *out);
    /* Enqueues the call. */
    clattn_status (*run)(clattn_context *ctx, const tuning_params *t, const gemm_desc *g);
    /* One line of what ran (kernel and parameters), for statistics. */
    void (*describe)(const tuning_params *t, const gemm_desc *g, char *out, size_t size);
} gemm_row;

/* The table in `auto`'s order; *count rows. */
const gemm_row *const *gemm_table(size_t *count);
const gemm_row *gemm_find(clattn_gemm id);
const gemm_row *gemm_named(const char *name);

/* The row's parameters on ctx's device (the context's own, tuning.json's, the row's
 * defaults), and where they came from; without a context, on a device. */
tuning_source gemm_tuning(clattn_context *ctx, const gemm_row *row, tuning_params *out);
tuning_source gemm_tuning_on(const clattn_device_info *device, const gemm_row *row,
                             tuning_params *out);

/* The row a call would run: the context's choice (clattn_context_set_gemm), else
 * $CLATTN_GEMM, else the first row that supports it and suits the device. A row named but
 * unable to run the call is an error (CLATTN_ERR_UNSUPPORTED, with why), never a silent
 * fallback. g may be NULL (weights: any call of the row). */
clattn_status gemm_choose(clattn_context *ctx, const gemm_desc *g, const gemm_row **row);

/* Prepares W [n][k] (host, `dtype`) for the row gemm_choose picks. */
clattn_status gemm_weights_make(clattn_context *ctx, const void *w, clattn_dtype dtype, size_t n,
                                size_t k, gemm_weights *out);
void gemm_weights_release(gemm_weights *w);

/* Whether the call can run as given (its row's checks), before anything is enqueued. */
clattn_status gemm_check(clattn_context *ctx, const gemm_desc *g);

/* Runs the call (with weights: on their row) and, when `ran` is not NULL, says which row ran
 * and its kernel (gemm_ran). */
typedef struct gemm_ran {
    clattn_gemm gemm;
    char kernel[96];
} gemm_ran;
clattn_status gemm_run(clattn_context *ctx, const gemm_desc *g, gemm_ran *ran);

/* The device's float32 FMA peak in GFLOP/s, measured now (peak.c, cl/fma_peak.cl). */
clattn_status gemm_fma_peak(clattn_context *ctx, double *gflops);

/* The context's choice (CLATTN_GEMM_AUTO: the table's). */
clattn_status gemm_set_choice(clattn_context *ctx, clattn_gemm gemm);

#endif
