/*
 * The attention entry points: validation before any launch, the choice of path (fused, gemm,
 * reference; AUTO = fused unless it cannot serve the call), and the host-memory wrapper.
 */
#include "mask.h"
#include "paths.h"
#include "reference.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every buffer present and large enough for the extent its tensor spans; O and LSE not
 * sharing a buffer with another tensor. */
static clattn_status check_buffers(clattn_context *ctx, const clattn_attention_desc *d,
                                   const attention_buffers *b, const tensor_extents *ext) {
    const struct {
        const char *name;
        cl_mem buffer;
        size_t need;
    } list[] = {{"Q", b->q, ext->q}, {"K", b->k, ext->k},       {"V", b->v, ext->v},
                {"O", b->o, ext->o}, {"LSE", b->lse, ext->lse}, {"bias", b->bias, ext->bias}};
    for (size_t i = 0; i < ARRAY_LEN(list); i++) {
        int optional = i >= 4;
        if (!list[i].buffer) {
            if (optional) continue;
            return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "%s buffer is NULL", list[i].name);
        }
        size_t have = buffer_size(list[i].buffer);
        if (have == 0)
            return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "%s is not a valid buffer",
                             list[i].name);
        if (have < list[i].need)
            return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                             "%s needs %zu bytes for B=%zu Hq=%zu Hkv=%zu Nq=%zu Nk=%zu Dqk=%zu "
                             "Dv=%zu with its offset and strides; the buffer holds %zu",
                             list[i].name, list[i].need, d->batch, d->heads_q, d->heads_kv,
                             d->len_q, d->len_k, d->dim_qk, d->dim_v, have);
    }
    /* The outputs (O at 3, LSE at 4) must not share a buffer with anything else. */
    for (size_t out = 3; out <= 4; out++)
        for (size_t i = 0; list[out].buffer && i < ARRAY_LEN(list); i++)
            if (i != out && list[i].buffer == list[out].buffer)
                return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                                 "%s must not share a buffer with %s", list[out].name,
                                 list[i].name);
    return CLATTN_SUCCESS;
}

void stats_start(clattn_context *ctx, clattn_path path, clattn_variant variant,
                 const clattn_attention_desc *d, const mask_spec *m, uint64_t bytes) {
    clattn_stats *s = &ctx->stats;
    memset(s, 0, sizeof *s);
    s->path = path;
    s->variant = variant;
    s->pairs = mask_count_pairs(m, (int64_t)d->batch, (int64_t)d->heads_q);
    s->density = (double)s->pairs / ((double)d->batch * d->heads_q * d->len_q * d->len_k);
    s->device_bytes = bytes;
    ctx->has_stats = 1;
}

/* Reads `bytes` of a buffer into a new host array. */
static clattn_status read_back(clattn_context *ctx, cl_mem buffer, size_t bytes, void **out) {
    *out = malloc(bytes ? bytes : 1);
    if (!*out) return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "host copy of %zu bytes", bytes);
    cl_int err = clEnqueueReadBuffer(ctx->queue, buffer, CL_TRUE, 0, bytes, *out, 0, NULL, NULL);
    return err == CL_SUCCESS ? CLATTN_SUCCESS : ctx_cl_error(ctx, err, "reading a buffer back");
}

/* The reference path on device buffers: copy to the host, compute, copy O and LSE back. */
static clattn_status reference_on_buffers(clattn_context *ctx, const clattn_attention_desc *d,
                                          const attention_buffers *b, const tensor_extents *ext,
                                          cl_event *event) {
    void *host[5] = {NULL}; /* q, k, v, o, bias */
    float *lse = NULL;
    cl_mem sources[5] = {b->q, b->k, b->v, b->o, b->bias};
    size_t sizes[5] = {ext->q, ext->k, ext->v, ext->o, ext->bias};
    clattn_status status = CLATTN_SUCCESS;
    for (int i = 0; i < 5 && status == CLATTN_SUCCESS; i++)
        if (sources[i]) status = read_back(ctx, sources[i], sizes[i], &host[i]);
    if (status == CLATTN_SUCCESS && b->lse && !(lse = malloc(ext->lse)))
        status = ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "host LSE");
    clattn_attention_desc local = *d;
    local.bias_host = host[4];
    if (status == CLATTN_SUCCESS)
        status = reference_attention_on_host(ctx, &local, host[0], host[1], host[2], host[3], lse);
    cl_int err = CL_SUCCESS;
    if (status == CLATTN_SUCCESS)
        err = clEnqueueWriteBuffer(ctx->queue, b->o, CL_TRUE, 0, ext->o, host[3], 0, NULL, NULL);
    if (status == CLATTN_SUCCESS && err == CL_SUCCESS && lse)
        err = clEnqueueWriteBuffer(ctx->queue, b->lse, CL_TRUE, 0, ext->lse, lse, 0, NULL, NULL);
    if (status == CLATTN_SUCCESS && err == CL_SUCCESS && event)
        err = clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, event);
    if (status == CLATTN_SUCCESS && err != CL_SUCCESS)
        status = ctx_cl_error(ctx, err, "reference path: writing results");
    for (int i = 0; i < 5; i++) free(host[i]);
    free(lse);
    if (status == CLATTN_SUCCESS) {
        memset(&ctx->stats, 0, sizeof ctx->stats);
        ctx->stats.path = CLATTN_PATH_REFERENCE;
        snprintf(ctx->stats.kernel, sizeof ctx->stats.kernel, "reference (host)");
        ctx->has_stats = 1;
    }
    return status;
}

/* AUTO: the fused kernel unless it cannot serve the call (unsupported) or fails to build,
 * then GEMM. Other failures are the caller's to see. */
static clattn_status run_auto(clattn_context *ctx, const clattn_attention_desc *d,
                              const attention_buffers *b, cl_event *event) {
    clattn_status status = fused_supports(ctx, d);
    if (status == CLATTN_SUCCESS) {
        status = fused_attention(ctx, d, b, event);
        if (status != CLATTN_ERR_BUILD) return status;
    } else if (status != CLATTN_ERR_UNSUPPORTED) {
        return status;
    }
    log_msg("auto: fused path unavailable (%s); using the gemm path", ctx->last_error);
    ctx_clear_error(ctx);
    return gemm_attention(ctx, d, b, event);
}

static clattn_status run_path(clattn_context *ctx, const clattn_attention_desc *d,
                              const attention_buffers *b, const tensor_extents *ext,
                              cl_event *event) {
    switch (d->path) {
    case CLATTN_PATH_REFERENCE:
        return reference_on_buffers(ctx, d, b, ext, event);
    case CLATTN_PATH_FUSED: {
        clattn_status status = fused_supports(ctx, d);
        return status == CLATTN_SUCCESS ? fused_attention(ctx, d, b, event) : status;
    }
    case CLATTN_PATH_GEMM:
        return gemm_attention(ctx, d, b, event);
    case CLATTN_PATH_AUTO:
        return run_auto(ctx, d, b, event);
    }
    return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "unknown path %d", (int)d->path);
}

clattn_status clattn_attention(clattn_context *ctx, const clattn_attention_desc *d, cl_mem q,
                               cl_mem k, cl_mem v, cl_mem o, cl_mem lse, cl_event *event) {
    if (!ctx) return CLATTN_ERR_INVALID_ARGUMENT;
    ctx_clear_error(ctx);
    if (event) *event = NULL;
    tensor_extents ext;
    int has_bias = d && d->bias != NULL;
    clattn_status status = desc_check(ctx, d, has_bias, &ext);
    attention_buffers b = {q, k, v, o, lse, has_bias ? d->bias : NULL};
    if (status == CLATTN_SUCCESS) status = check_buffers(ctx, d, &b, &ext);
    if (status != CLATTN_SUCCESS) return status;
    ctx->in_attention = 1; /* timing keeps this call's events only */
    status = run_path(ctx, d, &b, &ext, event);
    double kernel_ms = timing_finish(ctx); /* releases the kept events on failure too */
    ctx->in_attention = 0;
    if (status == CLATTN_SUCCESS) ctx->stats.kernel_ms = kernel_ms;
    return status;
}

/* ---------------------------------------------------------------- host memory */

static void release_buffers(attention_buffers *b) {
    cl_mem all[6] = {b->q, b->k, b->v, b->o, b->lse, b->bias};
    for (int i = 0; i < 6; i++)
        if (all[i]) clReleaseMemObject(all[i]);
}

/* Device copies of the host arrays; O starts as the caller's O so gaps between strided rows
 * come back unchanged. */
static clattn_status upload(clattn_context *ctx, const clattn_attention_desc *d,
                            const tensor_extents *ext, const void *q, const void *k, const void *v,
                            void *o, attention_buffers *b) {
    const cl_mem_flags in = CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR;
    clattn_status status = buffer_create(ctx, in, ext->q, (void *)q, &b->q, "Q");
    if (!status) status = buffer_create(ctx, in, ext->k, (void *)k, &b->k, "K");
    if (!status) status = buffer_create(ctx, in, ext->v, (void *)v, &b->v, "V");
    if (!status)
        status =
            buffer_create(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, ext->o, o, &b->o, "O");
    if (!status && d->bias_host)
        status = buffer_create(ctx, in, ext->bias, (void *)d->bias_host, &b->bias, "bias");
    return status;
}

clattn_status clattn_attention_host(clattn_context *ctx, const clattn_attention_desc *d,
                                    const void *q, const void *k, const void *v, void *o,
                                    float *lse) {
    if (!ctx) return CLATTN_ERR_INVALID_ARGUMENT;
    ctx_clear_error(ctx);
    tensor_extents ext;
    clattn_status status = desc_check(ctx, d, d && d->bias_host != NULL, &ext);
    if (status != CLATTN_SUCCESS) return status;
    if (!q || !k || !v || !o)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "a host pointer (q, k, v or o) is "
                         "NULL");
    attention_buffers b = {0};
    status = upload(ctx, d, &ext, q, k, v, o, &b);
    if (!status && lse)
        status = buffer_create(ctx, CL_MEM_WRITE_ONLY, ext.lse, NULL, &b.lse, "LSE");
    clattn_attention_desc local = *d;
    local.bias = b.bias;
    if (!status) status = clattn_attention(ctx, &local, b.q, b.k, b.v, b.o, b.lse, NULL);
    cl_int err = CL_SUCCESS;
    if (!status) err = clEnqueueReadBuffer(ctx->queue, b.o, CL_TRUE, 0, ext.o, o, 0, NULL, NULL);
    if (!status && !err && lse)
        err = clEnqueueReadBuffer(ctx->queue, b.lse, CL_TRUE, 0, ext.lse, lse, 0, NULL, NULL);
    if (!status && err) status = ctx_cl_error(ctx, err, "reading results");
    release_buffers(&b);
    return status;
}
