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
/* Lets CLBlast drop its programs of the context's cl_context once no context uses them
 * (clattn_context_destroy). */
void gemm_context_release(clattn_context *ctx);

/* Starts the statistics of a call that ran: path, variant, allowed pairs of the pattern and
 * their density, device bytes; the path fills in the rest. */
struct mask_spec;
void stats_start(clattn_context *ctx, clattn_path path, clattn_variant variant,
                 const clattn_attention_desc *d, const struct mask_spec *m, uint64_t bytes);

#endif
