/* The ways to compute attention, as the dispatcher (attention.c) sees them. */
#ifndef CLATTN_PATHS_H
#define CLATTN_PATHS_H

#include "desc.h"

typedef struct attention_buffers {
    cl_mem q, k, v, o, lse, bias; /* lse and bias may be NULL */
} attention_buffers;

/* Whether the fused kernel can serve the call on this device; when not, records why on ctx
 * and returns CLATTN_ERR_UNSUPPORTED. */
clattn_status fused_supports(clattn_context *ctx, const clattn_attention_desc *d);
clattn_status fused_attention(clattn_context *ctx, const clattn_attention_desc *d,
                              const attention_buffers *buf, cl_event *event);

clattn_status gemm_attention(clattn_context *ctx, const clattn_attention_desc *d,
                             const attention_buffers *buf, cl_event *event);

#endif
