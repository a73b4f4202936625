/*
 * The CPU reference: docs/semantics.md sections 1 and 2 in plain C with double accumulation. It is
 * the specification in code; every device and path is compared against it.
 */
#ifndef CLATTN_REFERENCE_H
#define CLATTN_REFERENCE_H

#include "plan/problem.h"

/* Computes attention: scores rounded to float32 at each step as the kernels round them
 * (t = scale * q.k, then t + bias), the softmax and O in double.
 * q, k, v: host arrays laid out as pb->q/k/v say (offsets, strides, pb->dtype; float16 is
 *          read as uint16_t bits and widened exactly).
 * bias:    float32 at pb->bias (zero strides broadcast), when pb->has_bias.
 * o:       dense double [B][Hq][Nq][Dv]; lse: dense double [B][Hq][Nq] (may be NULL), or
 *          [B][Hq][Nq][2] (max, log sum) with pb->lse_parts (dense calls only).
 * A row with no allowed key gets O = 0 and LSE = -inf.
 * @return CLATTN_SUCCESS, CLATTN_ERR_INVALID_ARGUMENT (NULL arrays) or
 *         CLATTN_ERR_OUT_OF_MEMORY. */
clattn_status reference_attention(const attn_problem *pb, const void *q, const void *k,
                                  const void *v, const float *bias, double *o, double *lse);

/* The same, stored like a device's result: O at pb->o in pb->out_dtype (float16 rounds to
 * nearest even from the float32 value), LSE float32 [B][Hq][Nq] (may be NULL). Messages go to
 * err. */
clattn_status reference_attention_store(const attn_problem *pb, const void *q, const void *k,
                                        const void *v, const float *bias, void *o, float *lse,
                                        error_record *err);

/* Row softmax reference for clattn_softmax: out = softmax(scale * in) row by row (dense
 * [rows][cols], double), lse[r] = log(sum exp(scale * in[r][c])). */
void reference_softmax(const float *in, size_t rows, size_t cols, float scale, double *out,
                       double *lse);

#endif
