/*
 * The dispatcher (dispatch.h): which row of the variant table runs a call, and the run itself.
 * It never names a variant: it walks the table (variants.c) in its order.
 */
#include "kernels/dispatch.h"
#include "kernels/verify.h"
#include "plan/verdicts.h"

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
/* CLATTN_ERR_UNSUPPORTED, naming why, when the row does not serve the call. */
static clattn_status row_serves(clattn_context *ctx, const attn_variant *row,
                                const attn_problem *pb) {
    char why[256] = "";
    if (!row->supports(ctx, pb, why, sizeof why))
        return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED, "%s: %s", row->name, why);
    return CLATTN_SUCCESS;
}

static clattn_status plan_and_run(clattn_context *ctx, const attn_variant *row,
                                  const attn_problem *pb, const attn_buffers *b, cl_event *event) {
    clattn_status status = row_serves(ctx, row, pb);
    if (status != CLATTN_SUCCESS) return status;
    variant_plan plan;
    status = variant_plan_make(ctx, row, pb, b->lse != NULL, &plan);
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

/* ---------------------------------------------------------------- auto, verified */

#define MAX_CANDIDATES 16

/* A row auto may try for the call, and how it stands on this device and driver. */
typedef struct candidate {
    const attn_variant *row;
    clattn_verdict_kind verdict;
    char why[300]; /* why it did not run: its verdict, or the error trying it gave */
    int tried;
} candidate;

/* The rows auto may try, in the table's order: those on the desc's path that suit the device;
 * when the desc names a path, then also its rows that do not suit the device (the reference,
 * rowwise on a CPU). A row the device refuses for every call is none (devices --variants
 * says why). Each with its verdict (none under trust). */
static size_t list_candidates(const clattn_context *ctx, const attn_problem *pb,
                              const verify_settings *vs, candidate *out) {
    size_t count, n = 0;
    const attn_variant *const *table = variant_table(&count);
    size_t rounds = pb->path == CLATTN_PATH_AUTO ? 1 : 2;
    for (size_t k = 0; k < rounds * count && n < MAX_CANDIDATES; k++) {
        const attn_variant *row = table[k % count];
        char why[256] = "";
        if (pb->path != CLATTN_PATH_AUTO && pb->path != row->path) continue;
        if (row->suits(&ctx->device, pb, why, sizeof why) != (k < count)) continue;
        if (!row->supports(ctx, NULL, why, sizeof why)) continue; /* never on this device */
        candidate *c = &out[n++];
        memset(c, 0, sizeof *c);
        c->row = row;
        if (vs->policy != CLATTN_VERIFY_TRUST)
            c->verdict = verify_row(ctx, row, c->why, sizeof c->why);
    }
    return n;
}

/* The order to try them in (indices into c): trust, every one in order; prefer-verified,
 * passed ones first, then those without a verdict; require-verified, passed ones only. A row
 * that failed or timed out is never tried. */
static size_t try_order(const candidate *c, size_t n, const verify_settings *vs, size_t *order) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (vs->policy == CLATTN_VERIFY_TRUST || c[i].verdict == CLATTN_VERDICT_PASSED)
            order[m++] = i;
    for (size_t i = 0; vs->policy == CLATTN_VERIFY_PREFER && i < n; i++)
        if (c[i].verdict == CLATTN_VERDICT_NONE) order[m++] = i;
    return m;
}

/* Why candidate c did not run although auto prefers it to the one that ran. */
static const char *passed_over(const candidate *c, const verify_settings *vs) {
    if (c->tried || c->verdict == CLATTN_VERDICT_FAILED || c->verdict == CLATTN_VERDICT_TIMED_OUT)
        return c->why;
    return vs->policy == CLATTN_VERIFY_REQUIRE
               ? "unverified on this device and driver (CLATTN_VERIFY=require-verified)"
               : "unverified on this device and driver (auto runs verified variants first)";
}

/* "NAME: why; ..." for the candidates before `ran` (all of them when ran is n). */
static void describe_fallback(const candidate *c, size_t ran, const verify_settings *vs, char *out,
                              size_t size) {
    out[0] = '\0';
    for (size_t i = 0; i < ran; i++) {
        size_t used = strlen(out);
        snprintf(out + used, size - used, "%s%s: %s", used ? "; " : "", c[i].row->name,
                 passed_over(&c[i], vs));
    }
}

/* The verification a call asks for, after the first-use sweep where it is on. */
static size_t candidates_for_call(clattn_context *ctx, const attn_problem *pb,
                                  const verify_settings *vs, candidate *c) {
    size_t n = list_candidates(ctx, pb, vs, c);
    if (!vs->first_use || ctx->first_use_checked) return n;
    const char *unverified[MAX_CANDIDATES];
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (c[i].verdict == CLATTN_VERDICT_NONE && c[i].row->id != CLATTN_VARIANT_REFERENCE)
            unverified[m++] = c[i].row->name;
    verify_first_use(ctx, unverified, m);
    return list_candidates(ctx, pb, vs, c);
}

/* A call strict mode or require-verified refuses: nothing it may run, or a fallback. */
static clattn_status refuse(clattn_context *ctx, const candidate *c, size_t n,
                            const verify_settings *vs, const char *what) {
    char reasons[1024];
    describe_fallback(c, n, vs, reasons, sizeof reasons);
    if (vs->strict && n)
        return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED,
                         "strict mode (CLATTN_STRICT): auto would fall back%s: %s", what, reasons);
    char device[32] = "SPEC"; /* a wrapped device clattn's list lacks has no index */
    if (ctx->device.index != SIZE_MAX) snprintf(device, sizeof device, "%zu", ctx->device.index);
    return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED,
                     "CLATTN_VERIFY=require-verified: no variant that serves this call has "
                     "passed clattn check on %s (driver %s, clattn %s): verify with `clattn "
                     "check --quick --device %s`, or set CLATTN_VERIFY=prefer-verified%s%s",
                     ctx->device.name, ctx->device.driver_version, CLATTN_VERSION_STRING, device,
                     *reasons ? "; " : "", reasons);
}

/* Records what auto did in the statistics and the log: the verdict of the row that ran, and
 * why the rows it prefers did not run. */
static void note_choice(clattn_context *ctx, const candidate *c, size_t ran,
                        const verify_settings *vs) {
    ctx->stats.verdict = (int)c[ran].verdict;
    describe_fallback(c, ran, vs, ctx->stats.fallback, sizeof ctx->stats.fallback);
    if (ctx->stats.fallback[0])
        log_msg("auto ran %s (%s), not a variant it prefers: %s", c[ran].row->name,
                verdict_kind_name(c[ran].verdict), ctx->stats.fallback);
}

/* AUTO: the candidates in the order the policy gives; a row that cannot plan the call, or whose
 * kernel fails to build, hands it on (strict mode: fails it). Other failures are the caller's
 * to see. */
static clattn_status run_auto(clattn_context *ctx, const attn_problem *pb, const attn_buffers *b,
                              cl_event *event) {
    candidate c[MAX_CANDIDATES];
    size_t order[MAX_CANDIDATES];
    verify_settings vs = verify_settings_of(ctx);
    size_t n = candidates_for_call(ctx, pb, &vs, c), m = try_order(c, n, &vs, order);
    clattn_status status = CLATTN_ERR_UNSUPPORTED;
    if (vs.strict && m && order[0] != 0) return refuse(ctx, c, order[0], &vs, "");
    if (m == 0 && vs.policy == CLATTN_VERIFY_REQUIRE) return refuse(ctx, c, n, &vs, "");
    for (size_t k = 0; k < m; k++) {
        candidate *t = &c[order[k]];
        status = plan_and_run(ctx, t->row, pb, b, event);
        if (status == CLATTN_SUCCESS) note_choice(ctx, c, order[k], &vs);
        if (status != CLATTN_ERR_UNSUPPORTED && status != CLATTN_ERR_BUILD) return status;
        t->tried = 1; /* the error without the "NAME: " plan_and_run puts before it */
        size_t name = strlen(t->row->name);
        const char *text = ctx->error.text;
        if (strncmp(text, t->row->name, name) == 0 && strncmp(text + name, ": ", 2) == 0)
            text += name + 2;
        snprintf(t->why, sizeof t->why, "%s", text);
        ctx_clear_error(ctx);
        if (vs.strict) return refuse(ctx, c, order[k] + 1, &vs, " from the first variant");
        log_msg("auto: %s cannot serve the call (%s); trying the next variant", t->row->name,
                t->why);
    }
    char tried[1024];
    describe_fallback(c, n, &vs, tried, sizeof tried);
    return ctx_error(ctx, status, "no variant serves the call%s%s", *tried ? ": " : "", tried);
}

/* A row the caller names runs whatever its verdict, except that require-verified asks for a
 * passed one. */
static clattn_status run_named(clattn_context *ctx, const attn_variant *row, const attn_problem *pb,
                               const attn_buffers *b, cl_event *event) {
    verify_settings vs = verify_settings_of(ctx);
    candidate c = {row, CLATTN_VERDICT_NONE, "", 0};
    if (vs.policy != CLATTN_VERIFY_TRUST) c.verdict = verify_row(ctx, row, c.why, sizeof c.why);
    if (vs.policy == CLATTN_VERIFY_REQUIRE && c.verdict != CLATTN_VERDICT_PASSED) {
        vs.strict = 0; /* the refusal is require-verified's */
        return refuse(ctx, &c, 1, &vs, "");
    }
    if (c.verdict == CLATTN_VERDICT_FAILED || c.verdict == CLATTN_VERDICT_TIMED_OUT)
        log_msg("%s runs as the caller named it, although it %s", row->name, c.why);
    clattn_status status = plan_and_run(ctx, row, pb, b, event);
    if (status == CLATTN_SUCCESS) ctx->stats.verdict = (int)c.verdict;
    return status;
}

static clattn_status dispatch(clattn_context *ctx, const attn_problem *pb, const attn_buffers *b,
                              cl_event *event) {
    const attn_variant *row = NULL;
    clattn_status status = named_row(ctx, pb, &row);
    if (status != CLATTN_SUCCESS) return status;
    return row ? run_named(ctx, row, pb, b, event) : run_auto(ctx, pb, b, event);
}

clattn_status dispatch_named_serves(clattn_context *ctx, const attn_problem *pb) {
    const attn_variant *row = NULL;
    clattn_status status = named_row(ctx, pb, &row);
    if (status != CLATTN_SUCCESS || row) return status ? status : row_serves(ctx, row, pb);
    candidate c[MAX_CANDIDATES];
    verify_settings vs = verify_settings_of(ctx);
    vs.policy = CLATTN_VERIFY_TRUST; /* which rows serve the call, whatever their verdicts */
    size_t n = list_candidates(ctx, pb, &vs, c);
    for (size_t i = 0; i < n; i++) {
        if (c[i].row->supports(ctx, pb, c[i].why, sizeof c[i].why)) return CLATTN_SUCCESS;
        c[i].tried = 1;
    }
    char reasons[1024];
    describe_fallback(c, n, &vs, reasons, sizeof reasons);
    return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED, "no variant serves the call%s%s",
                     *reasons ? ": " : "", reasons);
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
