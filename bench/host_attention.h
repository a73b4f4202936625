/* The benchmarks' host baseline: OpenBLAS sgemm, a masked softmax, sgemm (host_attention.c). */
#ifndef CLATTN_BENCH_HOST_ATTENTION_H
#define CLATTN_BENCH_HOST_ATTENTION_H

#include "clattn.h"

/* 1 when OpenBLAS could be loaded (the first call tries, once per process). */
int host_attention_available(void);
/* Why the baseline is unavailable (the loader's message), or "". */
const char *host_attention_unavailable(void);

/* Attention on host memory for float32 calls without bias (every other mask works).
 * *scratch_bytes receives the size of the score buffer it used.
 * @return CLATTN_SUCCESS, CLATTN_ERR_UNSUPPORTED (float16, a bias, no OpenBLAS),
 *         CLATTN_ERR_INVALID_ARGUMENT or CLATTN_ERR_OUT_OF_MEMORY. */
clattn_status host_attention(const clattn_attention_desc *d, const float *q, const float *k,
                             const float *v, float *o, float *lse, size_t *scratch_bytes);

#endif
