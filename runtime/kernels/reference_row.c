/*
 * The reference as a variant: copies the device buffers to the host, computes there with the
 * CPU reference (double accumulation) and writes O and LSE back. Never chosen by `auto`; it is
 * what `--path reference` and every comparison run.
 */
#include "kernels/variant.h"
#include "reference/reference.h"

#include <stdio.h>
#include <stdlib.h>

/* Reads `bytes` of a buffer into a new host array. */
static clattn_status read_back(clattn_context *ctx, cl_mem buffer, size_t bytes, void **out) {
    *out = malloc(bytes ? bytes : 1);
    if (!*out) return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "host copy of %zu bytes", bytes);
    return buffer_read(ctx, buffer, 0, bytes, *out, "reading a buffer back");
}

/* O and LSE from host back to the device, and the call's completion event. */
static clattn_status write_results(clattn_context *ctx, const attn_problem *pb,
                                   const attn_buffers *b, const void *o, const float *lse,
                                   cl_event *event) {
    const clattn_attention_extents *ext = &pb->extents;
    const char *what = "reference path: writing results";
    clattn_status s = buffer_write(ctx, b->o, 0, ext->o, o, what);
    if (!s && lse) s = buffer_write(ctx, b->lse, 0, ext->lse, lse, what);
    cl_int err = CL_SUCCESS;
    if (!s && event) err = clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, event);
    return err == CL_SUCCESS ? s : ctx_cl_error(ctx, err, what);
}

static clattn_status run(clattn_context *ctx, const variant_plan *plan, const attn_buffers *b,
                         cl_event *event, clattn_stats *stats) {
    const attn_problem *pb = plan->problem;
    const clattn_attention_extents *ext = &pb->extents;
    void *host[5] = {NULL}; /* q, k, v, o (its gaps kept as they are), bias */
    float *lse = NULL;
    cl_mem sources[5] = {b->q, b->k, b->v, b->o, b->bias};
    size_t sizes[5] = {ext->q, ext->k, ext->v, ext->o, ext->bias};
    clattn_status status = CLATTN_SUCCESS;
    for (int i = 0; i < 5 && status == CLATTN_SUCCESS; i++)
        if (sources[i]) status = read_back(ctx, sources[i], sizes[i], &host[i]);
    if (status == CLATTN_SUCCESS && b->lse && !(lse = malloc(ext->lse)))
        status = ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "host LSE");
    if (status == CLATTN_SUCCESS)
        status = reference_attention_store(pb, host[0], host[1], host[2], host[4], host[3], lse,
                                           &ctx->error);
    if (status == CLATTN_SUCCESS) status = write_results(ctx, pb, b, host[3], lse, event);
    for (int i = 0; i < 5; i++) free(host[i]);
    free(lse);
    if (status == CLATTN_SUCCESS) snprintf(stats->kernel, sizeof stats->kernel, "reference (host)");
    return status;
}

static int supports(const clattn_context *ctx, const attn_problem *pb, char *why, size_t size) {
    return 1;
}

static int suits(const clattn_device_info *device, const attn_problem *pb, char *why, size_t size) {
    snprintf(why, size, "the reference is run on request only");
    return 0;
}

static clattn_status plan(clattn_context *ctx, variant_plan *plan) {
    return CLATTN_SUCCESS;
}

const attn_variant variant_reference = {
    .id = CLATTN_VARIANT_REFERENCE,
    .name = "reference",
    .path = CLATTN_PATH_REFERENCE,
    .summary = "the CPU reference (double accumulation) on host copies of the buffers",
    .supports = supports,
    .suits = suits,
    .plan = plan,
    .run = run,
};
