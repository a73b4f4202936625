/*
 * The entry points of the verdict store (plan/verdicts.h): a variant's verdict on a context's
 * device, recording one, merging a report, and the context's verification policy, which the
 * dispatcher reads (kernels/dispatch.c).
 */
#include "kernels/variant.h"
#include "plan/verdicts.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

clattn_status clattn_verdict_init_sized(clattn_verdict *verdict, size_t struct_size) {
    return struct_init_zeroed(verdict, struct_size, sizeof *verdict);
}

static clattn_status verdict_get_in_call(clattn_context *ctx, clattn_variant variant,
                                         clattn_verdict *verdict) {
    const attn_variant *row = variant_find(variant);
    ctx_clear_error(ctx);
    if (!row || !verdict || verdict->struct_size != sizeof *verdict)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "clattn_verdict_get: an unknown variant (%d), or a verdict that is NULL "
                         "or not from clattn_verdict_init",
                         (int)variant);
    verdict_entry e;
    verdict_key(&ctx->device, row->name, &e);
    clattn_verdict_init(verdict);
    if (!verdict_find(&e)) return CLATTN_SUCCESS;
    verdict->kind = verdict_kind_of(e.verdict);
    snprintf(verdict->sweep, sizeof verdict->sweep, "%s", e.sweep);
    snprintf(verdict->date, sizeof verdict->date, "%s", e.date);
    snprintf(verdict->detail, sizeof verdict->detail, "%s", e.detail);
    return CLATTN_SUCCESS;
}

clattn_status clattn_verdict_get(clattn_context *ctx, clattn_variant variant,
                                 clattn_verdict *verdict) {
    return IN_CONTEXT(ctx, verdict_get_in_call(ctx, variant, verdict));
}

static clattn_status verdict_record_in_call(clattn_context *ctx, clattn_variant variant,
                                            const clattn_verdict *verdict, const char *file) {
    const attn_variant *row = variant_find(variant);
    ctx_clear_error(ctx);
    if (!row || !verdict || verdict->struct_size != sizeof *verdict ||
        verdict->kind < CLATTN_VERDICT_PASSED || verdict->kind > CLATTN_VERDICT_TIMED_OUT)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "clattn_verdict_record: an unknown variant (%d), or a verdict that is "
                         "NULL, not from clattn_verdict_init or of no kind",
                         (int)variant);
    verdict_entry e;
    verdict_key(&ctx->device, row->name, &e);
    snprintf(e.verdict, sizeof e.verdict, "%s", verdict_kind_name(verdict->kind));
    snprintf(e.sweep, sizeof e.sweep, "%s", verdict->sweep);
    snprintf(e.detail, sizeof e.detail, "%s", verdict->detail);
    time_t now = time(NULL);
    struct tm utc;
    gmtime_r(&now, &utc);
    strftime(e.date, sizeof e.date, "%Y-%m-%dT%H:%M:%SZ", &utc);
    clattn_status status = verdict_write(file, &e, &ctx->error);
    if (status == CLATTN_SUCCESS)
        log_msg("verdicts: %s on %s (%s): %s", row->name, ctx->device.name,
                ctx->device.driver_version, e.verdict);
    return status;
}

clattn_status clattn_verdict_record(clattn_context *ctx, clattn_variant variant,
                                    const clattn_verdict *verdict, const char *file) {
    return IN_CONTEXT(ctx, verdict_record_in_call(ctx, variant, verdict, file));
}

clattn_status clattn_verdicts_file(char *path, size_t size) {
    return program_cache_path("verdicts.json", path, size);
}

clattn_status clattn_verdicts_merge(const char *file, size_t *merged, size_t *ignored, char *why,
                                    size_t why_size) {
    error_record err = {""};
    if (merged) *merged = 0;
    if (ignored) *ignored = 0;
    if (!file) return CLATTN_ERR_INVALID_ARGUMENT;
    clattn_status status = verdicts_merge(file, merged, ignored, &err);
    if (why && why_size) snprintf(why, why_size, "%s", err.text);
    return status;
}

clattn_status clattn_context_set_verify(clattn_context *ctx, clattn_verify_policy policy,
                                        unsigned flags) {
    if (!ctx || policy < CLATTN_VERIFY_FROM_ENV || policy > CLATTN_VERIFY_REQUIRE ||
        (flags & ~(CLATTN_VERIFY_STRICT | CLATTN_VERIFY_FIRST_USE)))
        return CLATTN_ERR_INVALID_ARGUMENT;
    if (context_enter(ctx)) return CLATTN_ERR_INVALID_ARGUMENT;
    ctx->verify_policy = (int)policy;
    ctx->verify_flags = flags;
    context_leave(ctx);
    return CLATTN_SUCCESS;
}
