/*
 * The dispatcher (dispatch.h): which row of the variant table runs a call, and the run itself.
 * It never names a variant: it walks the table (variants.c) in its order.
 */
#include "kernels/dispatch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* The common part of the statistics: what runs. A variant whose tile lists know the pattern's
 * pair count fills it in (tile_cache.h). */
static void stats_begin(const attn_variant *row, clattn_stats *s) {
    clattn_stats_init(s);
    s->path = row->path;
    s->variant = row->id;
    s->pairs = PAIRS_UNKNOWN;
}

/* The pattern's allowed pairs, counted here only when the variant did not know them. */
static void stats_end(const attn_problem *pb, clattn_stats *s) {
    if (s->pairs == PAIRS_UNKNOWN)
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
    stats_begin(row, &stats);
    status = probe_host_memory(ctx, &plan, b);
    if (status == CLATTN_SUCCESS) status = row->run(ctx, &plan, b, event, &stats);
    variant_plan_release(&plan);
    if (status == CLATTN_SUCCESS) {
        stats_end(pb, &stats);
        ctx->stats = stats;
        ctx->has_stats = 1;
    }
    return status;
}

/* AUTO: the rows of the table in order, those on the desc's path that support the call and suit
 * the device; when the desc names a path, then also its rows that do not suit the device (the
 * reference, rowwise on a CPU). A row that cannot plan the call, or whose kernel fails
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

clattn_status dispatch_call(clattn_context *ctx, const attn_problem *pb, const attn_buffers *b,
                            cl_event *event) {
    ctx->in_attention = 1; /* timing keeps this call's events only */
    clattn_status status = dispatch(ctx, pb, b, event);
    double kernel_ms = timing_finish(ctx); /* releases the kept events on failure too */
    ctx->in_attention = 0;
    if (status == CLATTN_SUCCESS) ctx->stats.kernel_ms = kernel_ms;
    return status;
}
