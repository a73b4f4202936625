/*
 * The attention entry points. A call is checked once, here: the desc becomes the problem and
 * the buffers are checked against its extents (and host arrays are copied to the device). Then
 * the dispatcher (kernels/dispatch.h) picks a row of the variant table and runs it.
 */
#include "api/calls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- buffers */

/* Every buffer present and large enough for the extent its tensor spans; the outputs' bytes
 * (O, LSE) shared with no other tensor's, through sub-buffers and offsets too. */
static clattn_status check_buffers(clattn_context *ctx, const attn_problem *pb,
                                   const attn_buffers *b) {
    const clattn_attention_extents *ext = &pb->extents;
    size_t in = dtype_size(pb->dtype), out = dtype_size(pb->out_dtype);
    clattn_dtype kv = pb->kv.dtype; /* Q's storage, or K's and V's q8_0/q4_0 blocks */
    const struct {
        const char *name;
        cl_mem buffer;
        size_t need, first; /* bytes to the extent's end, and to its first element */
    } list[] = {{"Q", b->q, ext->q, pb->q.offset * in},
                {"K", b->k, ext->k, dtype_bytes(kv, pb->k.offset)},
                {"V", b->v, ext->v, dtype_bytes(kv, pb->v.offset)},
                {"O", b->o, ext->o, pb->o.offset * out},
                {"LSE", b->lse, ext->lse, 0},
                {"bias", b->bias, ext->bias, pb->bias.offset * sizeof(float)}};
    byte_range range[ARRAY_LEN(list)];
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
                             list[i].name, list[i].need, pb->batch, pb->heads_q, pb->heads_kv,
                             pb->len_q, pb->len_k, pb->dim_qk, pb->dim_v, have);
        range[i] = buffer_bytes(list[i].buffer, list[i].first, list[i].need);
    }
    /* The outputs (O at 3, LSE at 4) are writable and share no byte with anything else. */
    for (size_t o = 3; o <= 4; o++)
        if (list[o].buffer && buffer_read_only(list[o].buffer))
            return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                             "%s was created CL_MEM_READ_ONLY; the call writes it", list[o].name);
    for (size_t o = 3; o <= 4; o++)
        for (size_t i = 0; list[o].buffer && i < ARRAY_LEN(list); i++)
            if (i != o && list[i].buffer && byte_ranges_overlap(&range[o], &range[i]))
                return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                                 "%s overlaps %s: bytes [%zu, %zu) and [%zu, %zu) of the same "
                                 "memory (a sub-buffer counts as its parent); an output must "
                                 "not share memory with another tensor",
                                 list[o].name, list[i].name, range[o].begin, range[o].end,
                                 range[i].begin, range[i].end);
    return CLATTN_SUCCESS;
}

/* ---------------------------------------------------------------- entry points */

clattn_status attention_on_buffers(clattn_context *ctx, const attn_problem *pb,
                                   const attn_buffers *b, cl_event *event) {
    clattn_status status = check_buffers(ctx, pb, b);
    if (status != CLATTN_SUCCESS) return status;
    return dispatch_call(ctx, pb, b, event);
}

clattn_status attention_in_call(clattn_context *ctx, const clattn_attention_desc *d, cl_mem q,
                                cl_mem k, cl_mem v, cl_mem o, cl_mem lse, cl_event *event) {
    if (!ctx) return CLATTN_ERR_INVALID_ARGUMENT;
    ctx_clear_error(ctx);
    transfers_mark(ctx);
    if (event) *event = NULL;
    attn_problem pb;
    clattn_status status = problem_build(d, BIAS_FROM_BUFFER, &ctx->error, &pb);
    if (status == CLATTN_SUCCESS) {
        attn_buffers b = {q, k, v, o, lse, pb.has_bias ? d->bias : NULL, NULL, NULL, NULL, 0};
        status = attention_on_buffers(ctx, &pb, &b, event);
    }
    if (status == CLATTN_SUCCESS) stats_record_transfers(ctx);
    problem_release(&pb);
    return status;
}

clattn_status clattn_attention(clattn_context *ctx, const clattn_attention_desc *d, cl_mem q,
                               cl_mem k, cl_mem v, cl_mem o, cl_mem lse, cl_event *event) {
    if (!ctx) return CLATTN_ERR_INVALID_ARGUMENT;
    if (event) *event = NULL;
    if (context_enter(ctx)) return CLATTN_ERR_INVALID_ARGUMENT;
    clattn_status status = attention_in_call(ctx, d, q, k, v, o, lse, event);
    context_leave(ctx);
    return status;
}

static void release_buffers(attn_buffers *b) {
    cl_mem all[6] = {b->q, b->k, b->v, b->o, b->lse, b->bias};
    for (int i = 0; i < 6; i++)
        if (all[i]) clReleaseMemObject(all[i]);
}

/* Whether host arrays [a, a + a_bytes) and [b, b + b_bytes) share a byte. */
static int host_arrays_overlap(const void *a, size_t a_bytes, const void *b, size_t b_bytes) {
    uintptr_t a0 = (uintptr_t)a, b0 = (uintptr_t)b;
    return a && b && a0 < b0 + b_bytes && b0 < a0 + a_bytes;
}

clattn_status host_output_buffer(clattn_context *ctx, size_t bytes, void *host,
                                 const void *const *inputs, const size_t *input_bytes, size_t count,
                                 cl_mem *out, const char *what) {
    for (size_t i = 0; i < count; i++)
        if (host_arrays_overlap(host, bytes, inputs[i], input_bytes[i]))
            return buffer_create(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, host, out,
                                 what);
    return buffer_from_host(ctx, CL_MEM_READ_WRITE, bytes, host, out, what);
}

/* Device buffers over the host arrays: mapped where the device shares host memory, else
 * copies (buffer_from_host). host_copies counts the bytes copied (and LSE's, allocated). */
static clattn_status upload(clattn_context *ctx, const attn_problem *pb, const void *q,
                            const void *k, const void *v, void *o, float *lse, attn_buffers *b) {
    const clattn_attention_extents *ext = &pb->extents;
    const void *bias = pb->has_bias ? pb->bias_host : NULL;
    const void *inputs[] = {q, k, v, bias};
    const size_t input_bytes[] = {ext->q, ext->k, ext->v, bias ? ext->bias : 0};
    uint64_t copied = ctx->transfers.host_to_device_bytes;
    clattn_status status = buffer_from_host(ctx, CL_MEM_READ_ONLY, ext->q, q, &b->q, "Q");
    if (!status) status = buffer_from_host(ctx, CL_MEM_READ_ONLY, ext->k, k, &b->k, "K");
    if (!status) status = buffer_from_host(ctx, CL_MEM_READ_ONLY, ext->v, v, &b->v, "V");
    if (!status) status = host_output_buffer(ctx, ext->o, o, inputs, input_bytes, 4, &b->o, "O");
    if (!status && bias)
        status = buffer_from_host(ctx, CL_MEM_READ_ONLY, ext->bias, bias, &b->bias, "bias");
    const void *before_lse[] = {q, k, v, bias, o};
    const size_t before_lse_bytes[] = {ext->q, ext->k, ext->v, bias ? ext->bias : 0, ext->o};
    if (!status && lse)
        status =
            host_output_buffer(ctx, ext->lse, lse, before_lse, before_lse_bytes, 5, &b->lse, "LSE");
    b->host_copies = ctx->transfers.host_to_device_bytes - copied;
    return status;
}

static clattn_status attention_host_in_call(clattn_context *ctx, const clattn_attention_desc *d,
                                            const void *q, const void *k, const void *v, void *o,
                                            float *lse) {
    if (!ctx) return CLATTN_ERR_INVALID_ARGUMENT;
    ctx_clear_error(ctx);
    transfers_mark(ctx);
    attn_problem pb;
    attn_buffers b = {0};
    clattn_status status = problem_build(d, BIAS_FROM_HOST, &ctx->error, &pb);
    if (status == CLATTN_SUCCESS && (!q || !k || !v || !o))
        status =
            ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "a host pointer (q, k, v or o) is NULL");
    if (status == CLATTN_SUCCESS) status = upload(ctx, &pb, q, k, v, o, lse, &b);
    if (status == CLATTN_SUCCESS) status = attention_on_buffers(ctx, &pb, &b, NULL);
    const clattn_attention_extents *ext = &pb.extents;
    if (!status) status = buffer_to_host(ctx, b.o, ext->o, o, "reading results");
    if (!status && lse) status = buffer_to_host(ctx, b.lse, ext->lse, lse, "reading results");
    if (!status) stats_record_transfers(ctx);
    release_buffers(&b);
    problem_release(&pb);
    return status;
}

clattn_status clattn_attention_host(clattn_context *ctx, const clattn_attention_desc *d,
                                    const void *q, const void *k, const void *v, void *o,
                                    float *lse) {
    return IN_CONTEXT(ctx, attention_host_in_call(ctx, d, q, k, v, o, lse));
}
