/*
 * The dispatcher: runs a checked call on its buffers with the row of the variant table that the
 * caller names (desc->variant, else $CLATTN_KERNEL) or, for `auto`, the first row that serves
 * the call on this device, handing it on when a row cannot plan it or its kernel does not
 * build. It records the call's statistics on the context, and its kernel time when timing.
 */
#ifndef CLATTN_DISPATCH_H
#define CLATTN_DISPATCH_H

#include "kernels/variant.h"

/* Whether the variant a call names (desc->variant, $CLATTN_KERNEL or its path) serves it, as
 * dispatch_call would find before running anything; `auto` passes. For callers that change
 * state before the call (the layer appends to a KV cache first). @return CLATTN_SUCCESS, or
 * the status and message dispatch_call would give. */
clattn_status dispatch_named_serves(clattn_context *ctx, const attn_problem *pb);

/* @return the call's status; the message is on ctx. */
clattn_status dispatch_call(clattn_context *ctx, const attn_problem *pb, const attn_buffers *b,
                            cl_event *event);

#endif
