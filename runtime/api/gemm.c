/*
 * The entry points about the GEMM table (runtime/gemm/): names, the context's choice of a row,
 * what each row is on a device, and the rows' tuning (the database is plan/tuning.c, as for the
 * attention variants).
 */
#include "api/calls.h"
#include "gemm/gemm.h"

#include <stdio.h>
#include <string.h>

const char *clattn_gemm_name(clattn_gemm gemm) {
    if (gemm == CLATTN_GEMM_AUTO) return "auto";
    const gemm_row *row = gemm_find(gemm);
    return row ? row->name : "unknown";
}

clattn_status clattn_gemm_from_name(const char *name, clattn_gemm *gemm) {
    if (!name || !gemm) return CLATTN_ERR_INVALID_ARGUMENT;
    if (strcmp(name, "auto") == 0) {
        *gemm = CLATTN_GEMM_AUTO;
        return CLATTN_SUCCESS;
    }
    const gemm_row *row = gemm_named(name);
    if (!row) return CLATTN_ERR_INVALID_ARGUMENT;
    *gemm = row->id;
    return CLATTN_SUCCESS;
}

clattn_status clattn_context_set_gemm(clattn_context *ctx, clattn_gemm gemm) {
    if (!ctx) return CLATTN_ERR_INVALID_ARGUMENT;
    if (context_enter(ctx)) return CLATTN_ERR_INVALID_ARGUMENT;
    ctx_clear_error(ctx);
    clattn_status status = CLATTN_SUCCESS;
    if (gemm != CLATTN_GEMM_AUTO && !gemm_find(gemm))
        status = ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "no GEMM row %d", (int)gemm);
    else if (gemm_set_choice(ctx, gemm) != CLATTN_SUCCESS)
        status = ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "choosing a GEMM row");
    context_leave(ctx);
    return status;
}

clattn_status clattn_gemm_info_init_sized(clattn_gemm_info *info, size_t struct_size) {
    return struct_init_zeroed(info, struct_size, sizeof *info);
}

static clattn_status describe_in_call(clattn_context *ctx, clattn_gemm gemm,
                                      clattn_gemm_info *info) {
    const gemm_row *row = gemm_find(gemm);
    ctx_clear_error(ctx);
    if (!row) return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "no GEMM row %d", (int)gemm);
    if (!info || info->struct_size < sizeof *info)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "info is NULL or its struct_size is too small: clattn_gemm_info_init");
    clattn_gemm_info d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.gemm = row->id, d.name = row->name, d.summary = row->summary;
    d.supported = row->check(ctx, NULL, d.reason, sizeof d.reason) == CLATTN_SUCCESS;
    d.used_by_auto = d.supported && row->suits(&ctx->device, d.reason, sizeof d.reason);
    tuning_params unused;
    snprintf(d.tuning, sizeof d.tuning, "%s", tuning_source_name(gemm_tuning(ctx, row, &unused)));
    d.num_axes = row->num_axes < ARRAY_LEN(d.axes) ? row->num_axes : ARRAY_LEN(d.axes);
    for (size_t i = 0; i < d.num_axes; i++) d.axes[i] = row->axes[i];
    struct_write(info, &d, sizeof d, sizeof d);
    return CLATTN_SUCCESS;
}

clattn_status clattn_gemm_describe(clattn_context *ctx, clattn_gemm gemm, clattn_gemm_info *info) {
    return IN_CONTEXT(ctx, describe_in_call(ctx, gemm, info));
}

/* ---------------------------------------------------------------- tuning */

clattn_status clattn_device_gemm_tuning(size_t device_index, clattn_gemm gemm,
                                        clattn_tuning *params, clattn_tuning_source *source) {
    const gemm_row *row = gemm_find(gemm);
    clattn_device_info info;
    clattn_device_info_init(&info);
    if (!row || !params || params->struct_size < sizeof *params ||
        clattn_device_get_info(device_index, &info) != CLATTN_SUCCESS)
        return CLATTN_ERR_INVALID_ARGUMENT;
    tuning_params found;
    tuning_source from = gemm_tuning_on(&info, row, &found);
    tuning_to_caller(&found, from, params, source);
    return CLATTN_SUCCESS;
}

static clattn_status set_tuning_in_call(clattn_context *ctx, clattn_gemm gemm,
                                        const clattn_tuning *params) {
    const gemm_row *row = gemm_find(gemm);
    ctx_clear_error(ctx);
    if (!row) return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "no GEMM row %d", (int)gemm);
    tuning_params p;
    clattn_status status =
        params ? tuning_from_caller(ctx, row->name, row->tuning_valid, params, &p) : CLATTN_SUCCESS;
    if (status) return status;
    status = tuning_set_context(ctx, row->name, params ? &p : NULL);
    return status ? ctx_error(ctx, status, "setting the tuning of %s", row->name) : status;
}

clattn_status clattn_context_set_gemm_tuning(clattn_context *ctx, clattn_gemm gemm,
                                             const clattn_tuning *params) {
    return IN_CONTEXT(ctx, set_tuning_in_call(ctx, gemm, params));
}

clattn_status clattn_gemm_tuning_save(clattn_context *ctx, clattn_gemm gemm,
                                      const clattn_tuning *params) {
    if (!ctx) return CLATTN_ERR_INVALID_ARGUMENT;
    if (context_enter(ctx)) return CLATTN_ERR_INVALID_ARGUMENT;
    ctx_clear_error(ctx);
    const gemm_row *row = gemm_find(gemm);
    tuning_params p;
    clattn_status status =
        !row || !params ? ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                                    "clattn_gemm_tuning_save: an unknown GEMM row (%d) or NULL "
                                    "params",
                                    (int)gemm)
                        : tuning_from_caller(ctx, row->name, row->tuning_valid, params, &p);
    if (!status) status = tuning_save(&ctx->device, row->name, &p, &ctx->error);
    context_leave(ctx);
    return status;
}

clattn_status clattn_context_fma_peak(clattn_context *ctx, double *gflops) {
    if (!ctx || !gflops) return CLATTN_ERR_INVALID_ARGUMENT;
    if (context_enter(ctx)) return CLATTN_ERR_INVALID_ARGUMENT;
    ctx_clear_error(ctx);
    clattn_status status = gemm_fma_peak(ctx, gflops);
    context_leave(ctx);
    return status;
}
