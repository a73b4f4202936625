/*
 * One attention case run on a device and compared with the CPU reference, element by element
 * with docs/semantics.md section 4's tolerances. Used by `clattn check` and by the Criterion tests,
 * so both check the same way.
 */
#ifndef CLATTN_CONFORMANCE_H
#define CLATTN_CONFORMANCE_H

#include "clattn.h"

#include <stddef.h>
#include <stdint.h>

#define CASE_MAX_GLOBALS 8

typedef enum case_layout {
    LAYOUT_NONE,
    LAYOUT_SHARED,
    LAYOUT_PER_HEAD,
    LAYOUT_ALL_ONES
} case_layout;
/* FULL: random values with some -inf; BROADCAST: one [Nq, Nk] matrix of those; PADDING: a
 * Hugging Face padding mask [B, 1, Nq, Nk] of 0 and torch.finfo(float32).min (-FLT_MAX) over
 * padded keys and padded query rows; FINITE_MIN: huge finite negative values [B, Hq, Nq, Nk]
 * (rows all -FLT_MAX, rows of -1e38, -2.3e38, -2.4e38 and -FLT_MAX, rows with some -FLT_MAX). */
typedef enum case_bias {
    BIAS_NONE,
    BIAS_FULL,
    BIAS_BROADCAST,
    BIAS_PADDING,
    BIAS_FINITE_MIN
} case_bias;

typedef struct attn_case {
    size_t b, hq, hkv, nq, nk, dqk, dv;
    clattn_layout layout;
    clattn_dtype dtype, out_dtype;
    int causal;
    int64_t left, right, dilation; /* window (-1 unbounded), dilation (0 means 1) */
    int64_t globals[CASE_MAX_GLOBALS];
    size_t num_globals;
    case_layout block_layout; /* random 0/1 blocks (seeded), or all ones */
    size_t bq, bk;
    case_bias bias;
    size_t offset;            /* extra element offset of every tensor */
    float scale;              /* 0: default */
    int nan_key;              /* poison K row 0 of kv head 0 with NaN */
    int bad_value;            /* poison V row 1 of kv head 0: 1 NaN, 2 +inf (rows that do not
                                 see key 1 must stay finite) */
    size_t gemm_budget_bytes; /* desc->gemm_budget_bytes: the gemm path's score budget */
    float softcap;            /* desc->softcap (0: off) */
    int alibi;                /* 0 none, 1 the standard slopes [Hq], 2 seeded slopes [B][Hq] */
    int sinks;                /* seeded sinks [Hq] in [-2, 2] (head 0's 8: above every score) */
    clattn_dtype kv_quant;    /* CLATTN_Q8_0 or CLATTN_Q4_0: K and V are passed as ggml's blocks
                                 (desc->kv_q8_0, kv_q4_0), quantised from their seeded values
                                 in dtype (dense, no offset); CLATTN_F32 (0): as dtype */
    uint64_t seed;
} attn_case;

typedef struct case_result {
    clattn_status status;
    size_t checked, mismatches;
    double worst;      /* largest |got - ref| / tolerance (<= 1 passes) */
    double ms;         /* wall time of the call */
    char message[512]; /* the first mismatch, or the error */
    clattn_stats stats;
} case_result;

/* Fills a case with defaults: float32, BSHD, no mask, seed 1. */
void case_init(attn_case *c, size_t b, size_t hq, size_t hkv, size_t nq, size_t nk, size_t dqk,
               size_t dv);

/* Runs the case through clattn_attention_host with `path` and `variant` and compares O and LSE
 * with the reference. O and LSE start as NaN, so that an element the call leaves unwritten
 * fails. Returns the call's status (the comparison is in *result). */
clattn_status case_run(clattn_context *ctx, const attn_case *c, clattn_path path,
                       clattn_variant variant, case_result *result);

/* A one-line description that names every field needed to replay the case. */
void case_describe(const attn_case *c, char *out, size_t size);

/* Element-wise check of `got` against `ref` with |got-ref| <= atol + rtol*|ref|; NaN and inf must
 * match exactly. Adds to result->checked/mismatches/worst and describes the first mismatch. */
void compare_values(const char *what, const float *got, const double *ref, size_t n, double atol,
                    double rtol, case_result *result);

/* Writes the case's inputs as .npy files into `dir` (which must exist) and the `clattn run`
 * command that computes it from them on that path, variant ("auto": left to the planner) and
 * device into cmd. @return CLATTN_SUCCESS or the failing status with `err` naming the file. */
clattn_status case_dump(const attn_case *c, const char *dir, const char *path_name,
                        const char *variant, const char *device, char *cmd, size_t cmd_size,
                        char *err, size_t err_size);

/* docs/semantics.md section 4's tolerance for a call with these storage types: the loosest of them
 * (bfloat16, then float16, then float32). */
void tolerance_for(clattn_dtype in, clattn_dtype out, double *atol, double *rtol);

/* The attention layer's tolerance (docs/layer.md): docs/semantics.md section 4's
 * for Y's storage type, its absolute term scaled by the largest finite |ref| of the output, since
 * the layer's output has no fixed magnitude and the float32 GEMMs' error follows the output's. */
void layer_tolerance(clattn_dtype y_dtype, const double *ref, size_t n, double *atol, double *rtol);

/* The .npy dtype (npy_dtype) a storage type is written as: <f4, <f2, or <u2 for bfloat16 bit
 * patterns. */
int npy_dtype_of(clattn_dtype dtype);

/* LSE: |got - ref| <= 1e-4 * max(1, |ref|); -inf must match exactly. */
void compare_lse_values(const float *got, const double *ref, size_t n, case_result *result);

#endif
