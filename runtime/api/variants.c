/*
 * The entry points about the variant table: whether a variant serves a call on a context's
 * device, and what a variant is (its name, path, tuning and why `auto` passes it by).
 */
#include "kernels/variant.h"
#include "kernels/verify.h"

#include <stdio.h>
#include <string.h>

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
    return IN_CONTEXT(ctx, variant_supported_in_call(ctx, variant, desc, reason, reason_size));
}

clattn_status clattn_variant_info_init_sized(clattn_variant_info *info, size_t struct_size) {
    return struct_init_zeroed(info, struct_size, CLATTN_VARIANT_INFO_BASE_SIZE);
}

static clattn_status variant_describe_in_call(clattn_context *ctx, clattn_variant variant,
                                              clattn_variant_info *info) {
    const attn_variant *row = variant_find(variant);
    if (!ctx) return CLATTN_ERR_INVALID_ARGUMENT;
    ctx_clear_error(ctx);
    if (!row) return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "no variant %d", (int)variant);
    if (!info || info->struct_size < CLATTN_VARIANT_INFO_BASE_SIZE)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "info is NULL or its struct_size is below 0.2's clattn_variant_info: "
                         "start from clattn_variant_info_init");
    clattn_variant_info d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.variant = row->id;
    d.path = row->path;
    d.name = row->name;
    d.old_name = row->old_name;
    d.summary = row->summary;
    d.supported = row->supports(ctx, NULL, d.reason, sizeof d.reason);
    d.used_by_auto = d.supported && row->suits(&ctx->device, NULL, d.reason, sizeof d.reason);
    char verdict[300] = "";
    if (d.used_by_auto && verify_settings_of(ctx).policy != CLATTN_VERIFY_TRUST &&
        verify_row(ctx, row, verdict, sizeof verdict) > CLATTN_VERDICT_PASSED) {
        d.used_by_auto = 0; /* auto never picks a variant that failed or timed out here */
        snprintf(d.reason, sizeof d.reason, "auto passes it over: %s", verdict);
    }
    tuning_params unused;
    snprintf(d.tuning, sizeof d.tuning, "%s",
             tuning_source_name(variant_tuning(ctx, row, &unused)));
    d.num_axes = row->num_axes < ARRAY_LEN(d.axes) ? row->num_axes : ARRAY_LEN(d.axes);
    for (size_t i = 0; i < d.num_axes; i++) d.axes[i] = row->axes[i];
    struct_write(info, &d, sizeof d, CLATTN_VARIANT_INFO_BASE_SIZE);
    return CLATTN_SUCCESS;
}

clattn_status clattn_variant_describe(clattn_context *ctx, clattn_variant variant,
                                      clattn_variant_info *info) {
    return IN_CONTEXT(ctx, variant_describe_in_call(ctx, variant, info));
}
