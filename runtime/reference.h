/*
 * The CPU reference: SPEC sections 1 and 2 in plain C with double accumulation. It is the
 * specification in code; every device and path is compared against it.
 */
#ifndef CLATTN_REFERENCE_H
#define CLATTN_REFERENCE_H

#include "clattn.h"

/* Computes attention in double precision.
 * q, k, v: host arrays laid out as desc->q/k/v say (offsets, strides, desc->dtype; float16 is
 *          read as uint16_t bits and widened exactly).
 * bias:    NULL, or float32 at desc->bias_strides (zero strides broadcast).
 * o:       dense double [B][Hq][Nq][Dv]; lse: dense double [B][Hq][Nq] (may be NULL).
 * A row with no allowed key gets O = 0 and LSE = -inf.
 * @return CLATTN_SUCCESS, CLATTN_ERR_INVALID_ARGUMENT (desc_check fails) or
 *         CLATTN_ERR_OUT_OF_MEMORY. */
clattn_status reference_attention(const clattn_attention_desc *desc, const void *q, const void *k,
                                  const void *v, const float *bias, double *o, double *lse);

/* clattn_attention_reference recording why it failed on ctx (NULL records nothing): the
 * reference path of clattn_attention. */
clattn_status reference_attention_on_host(clattn_context *ctx, const clattn_attention_desc *desc,
                                          const void *q, const void *k, const void *v, void *o,
                                          float *lse);

/* clattn_attention_reference that also says why it failed: a one-line message naming the sizes
 * or field (as clattn_context_last_error would) into err, "" on success. For callers without a
 * context: the CLI's --path reference. */
clattn_status reference_attention_host(const clattn_attention_desc *desc, const void *q,
                                       const void *k, const void *v, void *o, float *lse, char *err,
                                       size_t err_size);

/* Row softmax reference for clattn_softmax: out = softmax(scale * in) row by row (dense
 * [rows][cols], double), lse[r] = log(sum exp(scale * in[r][c])). */
void reference_softmax(const float *in, size_t rows, size_t cols, float scale, double *out,
                       double *lse);

#endif
