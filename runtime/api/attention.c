/*
 * The attention entry points. A call is checked once, here: the desc becomes the problem and
 * the buffers are checked against its extents. Then the dispatcher picks a row of the variant
 * table (kernels/variants.c): the one the caller named (desc->variant, else $CLATTN_KERNEL), or,
 * for `auto`, the first that serves the call on this device. It plans, runs and fills the
 * statistics; it never names a variant itself.
 */
#include "api/dispatch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- buffers */

/* The bytes a tensor occupies: [begin, end) of the memory object that owns them (a
 * sub-buffer's parent, at the sub-buffer's origin) and, for memory the caller lent with
 * CL_MEM_USE_HOST_PTR, of the host address space. */
typedef struct byte_range {
    cl_mem root;
    size_t begin, end;
    uintptr_t host_begin, host_end; /* 0, 0 without a host pointer */
} byte_range;

static byte_range tensor_bytes(cl_mem buffer, size_t first_byte, size_t extent) {
    byte_range r = {buffer, first_byte, extent, 0, 0};
    cl_mem parent = NULL;
    size_t origin = 0;
    cl_mem_flags flags = 0;
    void *host = NULL;
    if (clGetMemObjectInfo(buffer, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof parent, &parent, NULL) ==
            CL_SUCCESS &&
        parent &&
        clGetMemObjectInfo(buffer, CL_MEM_OFFSET, sizeof origin, &origin, NULL) == CL_SUCCESS) {
        r.root = parent;
        r.begin += origin, r.end += origin;
    }
    if (clGetMemObjectInfo(buffer, CL_MEM_FLAGS, sizeof flags, &flags, NULL) == CL_SUCCESS &&
        (flags & CL_MEM_USE_HOST_PTR) &&
        clGetMemObjectInfo(buffer, CL_MEM_HOST_PTR, sizeof host, &host, NULL) == CL_SUCCESS && host)
        r.host_begin = (uintptr_t)host + first_byte, r.host_end = (uintptr_t)host + extent;
    return r;
}

static int ranges_overlap(const byte_range *a, const byte_range *b) {
    int device = a->root == b->root && a->begin < b->end && b->begin < a->end;
    int host =
        a->host_end && b->host_end && a->host_begin < b->host_end && b->host_begin < a->host_end;
    return device || host;
}

/* Every buffer present and large enough for the extent its tensor spans; the outputs' bytes
 * (O, LSE) shared with no other tensor's, through sub-buffers and offsets too. */
static clattn_status check_buffers(clattn_context *ctx, const attn_problem *pb,
                                   const attn_buffers *b) {
    const clattn_attention_extents *ext = &pb->extents;
    size_t in = dtype_size(pb->dtype), out = dtype_size(pb->out_dtype);
    const struct {
        const char *name;
        cl_mem buffer;
        size_t need, first; /* bytes to the extent's end, and to its first element */
    } list[] = {{"Q", b->q, ext->q, pb->q.offset * in},
                {"K", b->k, ext->k, pb->k.offset * in},
                {"V", b->v, ext->v, pb->v.offset * in},
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
        range[i] = tensor_bytes(list[i].buffer, list[i].first, list[i].need);
    }
    /* The outputs (O at 3, LSE at 4) must not share a byte with anything else. */
    for (size_t o = 3; o <= 4; o++)
        for (size_t i = 0; list[o].buffer && i < ARRAY_LEN(list); i++)
            if (i != o && list[i].buffer && ranges_overlap(&range[o], &range[i]))
                return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                                 "%s overlaps %s: bytes [%zu, %zu) and [%zu, %zu) of the same "
                                 "memory (a sub-buffer counts as its parent); an output must "
                                 "not share memory with another tensor",
                                 list[o].name, list[i].name, range[o].begin, range[o].end,
                                 range[i].begin, range[i].end);
    return CLATTN_SUCCESS;
}

/* ---------------------------------------------------------------- choosing a row */

/* The row the caller names: desc->variant, else $CLATTN_KERNEL when it names a row on a path
 * the desc allows. *row stays NULL for `auto`. */
static clattn_status named_row(clattn_context *ctx, const attn_problem *pb,
                               const attn_variant **row) {
    *row = NULL;
    if (pb->variant != CLATTN_VARIANT_AUTO) {
        if (!(*row = variant_find(pb->variant)))
            return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "unknown variant %d",
                             (int)pb->variant);
        if (pb->path != CLATTN_PATH_AUTO && pb->path != (*row)->path)
            return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                             "variant %s is not on the path the desc asks for (%d)", (*row)->name,
                             (int)pb->path);
        return CLATTN_SUCCESS;
    }
    const char *env = getenv("CLATTN_KERNEL");
    clattn_variant named = CLATTN_VARIANT_AUTO;
    if (!env || !*env) return CLATTN_SUCCESS;
    if (clattn_variant_from_name(env, &named) != CLATTN_SUCCESS)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "CLATTN_KERNEL=%s: expected auto or a variant (see clattn devices "
                         "--variants)",
                         env);
    const attn_variant *found = variant_find(named);
    if (found && (pb->path == CLATTN_PATH_AUTO || pb->path == found->path)) *row = found;
    return CLATTN_SUCCESS;
}

/* The common part of the statistics: what ran, and the pattern's allowed pairs. */
static void stats_begin(const attn_problem *pb, const attn_variant *row, clattn_stats *s) {
    clattn_stats_init(s);
    s->path = row->path;
    s->variant = row->id;
    s->pairs = mask_count_pairs(&pb->mask, (int64_t)pb->batch, (int64_t)pb->heads_q);
    s->density = (double)s->pairs / ((double)pb->batch * pb->heads_q * pb->len_q * pb->len_k);
}

/* On a CPU device the device's memory is the process's own, and a driver that cannot get it
 * when it first touches a buffer aborts (PoCL 3.1: an assertion on mem_ptr). So before a call
 * runs there, the memory it is about to take is asked of the host first, and given back: a
 * process near its limit (ulimit -v) gets CLATTN_ERR_OUT_OF_MEMORY with the numbers instead. */
static clattn_status probe_host_memory(clattn_context *ctx, const variant_plan *plan,
                                       const attn_buffers *b) {
    uint64_t bytes = plan->device_bytes + b->host_copies;
    if (!(ctx->device.type & CL_DEVICE_TYPE_CPU) || bytes == 0) return CLATTN_SUCCESS;
    void *probe = bytes <= SIZE_MAX ? malloc((size_t)bytes) : NULL;
    free(probe);
    if (probe) return CLATTN_SUCCESS;
    return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY,
                     "%s: the call needs about %llu MiB of device memory (%llu MiB of it copies "
                     "of the host arrays), which on this CPU device is the process's own, and "
                     "the process cannot get it (a memory limit such as ulimit -v?)",
                     plan->variant->name, (unsigned long long)(bytes >> 20),
                     (unsigned long long)(b->host_copies >> 20));
}

/* Plans and runs one row. */
static clattn_status run_row(clattn_context *ctx, const attn_variant *row, const attn_problem *pb,
                             const attn_buffers *b, cl_event *event) {
    char why[256] = "";
    if (!row->supports(ctx, pb, why, sizeof why))
        return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED, "%s: %s", row->name, why);
    variant_plan plan;
    clattn_status status = variant_plan_make(ctx, row, pb, b->lse != NULL, &plan);
    if (status != CLATTN_SUCCESS) return status;
    clattn_stats stats;
    stats_begin(pb, row, &stats);
    status = probe_host_memory(ctx, &plan, b);
    if (status == CLATTN_SUCCESS) status = row->run(ctx, &plan, b, event, &stats);
    variant_plan_release(&plan);
    if (status == CLATTN_SUCCESS) {
        ctx->stats = stats;
        ctx->has_stats = 1;
    }
    return status;
}

/* AUTO: the rows of the table in order, those on the desc's path that support the call and suit
 * the device; when the desc names a path, then also its rows that do not suit the device (the
 * reference, the gpu variant on a CPU). A row that cannot plan the call, or whose kernel fails
 * to build, hands it on. Other failures are the caller's to see. */
static clattn_status run_auto(clattn_context *ctx, const attn_problem *pb, const attn_buffers *b,
                              cl_event *event) {
    size_t count;
    const attn_variant *const *table = variant_table(&count);
    clattn_status status = CLATTN_ERR_UNSUPPORTED;
    char tried[512] = "";
    int rounds = pb->path == CLATTN_PATH_AUTO ? 1 : 2;
    for (size_t n = 0; n < rounds * count; n++) {
        const attn_variant *row = table[n % count];
        char why[256] = "";
        if (pb->path != CLATTN_PATH_AUTO && pb->path != row->path) continue;
        if (row->suits(&ctx->device, pb, why, sizeof why) != (n < count)) continue;
        status = run_row(ctx, row, pb, b, event);
        if (status != CLATTN_ERR_UNSUPPORTED && status != CLATTN_ERR_BUILD) return status;
        log_msg("auto: %s cannot serve the call (%s); trying the next variant", row->name,
                ctx->error.text);
        snprintf(tried + strlen(tried), sizeof tried - strlen(tried), "%s%s", *tried ? "; " : "",
                 ctx->error.text);
        ctx_clear_error(ctx);
    }
    return ctx_error(ctx, status, "no variant serves the call%s%s", *tried ? ": " : "", tried);
}

static clattn_status dispatch(clattn_context *ctx, const attn_problem *pb, const attn_buffers *b,
                              cl_event *event) {
    const attn_variant *row = NULL;
    clattn_status status = named_row(ctx, pb, &row);
    if (status != CLATTN_SUCCESS) return status;
    return row ? run_row(ctx, row, pb, b, event) : run_auto(ctx, pb, b, event);
}

/* ---------------------------------------------------------------- entry points */

clattn_status attention_on_buffers(clattn_context *ctx, const attn_problem *pb,
                                   const attn_buffers *b, cl_event *event) {
    clattn_status status = check_buffers(ctx, pb, b);
    if (status != CLATTN_SUCCESS) return status;
    ctx->in_attention = 1; /* timing keeps this call's events only */
    status = dispatch(ctx, pb, b, event);
    double kernel_ms = timing_finish(ctx); /* releases the kept events on failure too */
    ctx->in_attention = 0;
    if (status == CLATTN_SUCCESS) ctx->stats.kernel_ms = kernel_ms;
    return status;
}

static clattn_status attention_in_call(clattn_context *ctx, const clattn_attention_desc *d,
                                       cl_mem q, cl_mem k, cl_mem v, cl_mem o, cl_mem lse,
                                       cl_event *event) {
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
    if (!ctx) return CLATTN_ERR_INVALID_ARGUMENT;
    if (context_enter(ctx)) return CLATTN_ERR_INVALID_ARGUMENT;
    clattn_status status = attention_host_in_call(ctx, d, q, k, v, o, lse);
    context_leave(ctx);
    return status;
}

/* ---------------------------------------------------------------- what a variant serves */

static clattn_status variant_supported_in_call(clattn_context *ctx, clattn_variant variant,
                                               const clattn_attention_desc *desc, char *reason,
                                               size_t reason_size) {
    char why[512] = "";
    const attn_variant *row = variant_find(variant);
    if (!ctx) return CLATTN_ERR_INVALID_ARGUMENT;
    ctx_clear_error(ctx);
    if (!row) return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "no variant %d", (int)variant);
    attn_problem pb;
    memset(&pb, 0, sizeof pb);
    clattn_status status =
        desc ? problem_build(desc, BIAS_FROM_EITHER, &ctx->error, &pb) : CLATTN_SUCCESS;
    if (status == CLATTN_SUCCESS && !row->supports(ctx, desc ? &pb : NULL, why, sizeof why))
        status = CLATTN_ERR_UNSUPPORTED;
    if (status == CLATTN_SUCCESS && desc) { /* planning may still find it cannot */
        variant_plan plan;
        status = variant_plan_make(ctx, row, &pb, 1, &plan);
        if (status == CLATTN_SUCCESS) variant_plan_release(&plan);
        snprintf(why, sizeof why, "%s", ctx->error.text);
    }
    if (status != CLATTN_SUCCESS && reason && reason_size)
        snprintf(reason, reason_size, "%s", *why ? why : ctx->error.text);
    problem_release(&pb);
    return status;
}

clattn_status clattn_variant_supported(clattn_context *ctx, clattn_variant variant,
                                       const clattn_attention_desc *desc, char *reason,
                                       size_t reason_size) {
    if (!ctx) return CLATTN_ERR_INVALID_ARGUMENT;
    if (context_enter(ctx)) return CLATTN_ERR_INVALID_ARGUMENT;
    clattn_status status = variant_supported_in_call(ctx, variant, desc, reason, reason_size);
    context_leave(ctx);
    return status;
}

clattn_status clattn_variant_info_init_sized(clattn_variant_info *info, size_t struct_size) {
    clattn_variant_info local;
    memset(&local, 0, sizeof local);
    return struct_init(info, struct_size, &local, sizeof local, sizeof local)
               ? CLATTN_ERR_INVALID_ARGUMENT
               : CLATTN_SUCCESS;
}

static clattn_status variant_describe_in_call(clattn_context *ctx, clattn_variant variant,
                                              clattn_variant_info *info) {
    const attn_variant *row = variant_find(variant);
    if (!ctx) return CLATTN_ERR_INVALID_ARGUMENT;
    ctx_clear_error(ctx);
    if (!row) return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "no variant %d", (int)variant);
    if (!info || info->struct_size < sizeof *info)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "info is NULL or its struct_size is below sizeof(clattn_variant_info): "
                         "start from clattn_variant_info_init");
    clattn_variant_info d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.variant = row->id;
    d.path = row->path;
    d.name = row->name;
    d.summary = row->summary;
    d.supported = row->supports(ctx, NULL, d.reason, sizeof d.reason);
    d.used_by_auto = d.supported && row->suits(&ctx->device, NULL, d.reason, sizeof d.reason);
    tuning_params unused;
    snprintf(d.tuning, sizeof d.tuning, "%s",
             tuning_source_name(tuning_lookup_context(ctx, row->name, &unused)));
    struct_write(info, &d, sizeof d, sizeof d);
    return CLATTN_SUCCESS;
}

clattn_status clattn_variant_describe(clattn_context *ctx, clattn_variant variant,
                                      clattn_variant_info *info) {
    if (!ctx) return CLATTN_ERR_INVALID_ARGUMENT;
    if (context_enter(ctx)) return CLATTN_ERR_INVALID_ARGUMENT;
    clattn_status status = variant_describe_in_call(ctx, variant, info);
    context_leave(ctx);
    return status;
}
