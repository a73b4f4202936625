/*
 * The tuning entry points: a variant's parameters from the database, a context's own ones (for
 * tuners), and tuning.json's writer. The database itself is plan/tuning.c.
 */
#include "api/calls.h"
#include "kernels/variant.h"

#include <stdio.h>
#include <string.h>

void tuning_to_public(const tuning_params *in, clattn_tuning *out) {
#define COPY_FIELD(name, meaning) out->name = in->name;
    TUNING_FIELDS(COPY_FIELD)
#undef COPY_FIELD
}

static void from_public(const clattn_tuning *in, tuning_params *out) {
#define COPY_FIELD(name, meaning) out->name = in->name;
    TUNING_FIELDS(COPY_FIELD)
#undef COPY_FIELD
}

clattn_status clattn_tuning_init_sized(clattn_tuning *params, size_t struct_size) {
    return struct_init_zeroed(params, struct_size, sizeof *params);
}

unsigned *clattn_tuning_field(clattn_tuning *params, const char *field) {
#define FIELD_NAMED(name, meaning)                                                                 \
    if (params && field && strcmp(field, #name) == 0) return &params->name;
    TUNING_FIELDS(FIELD_NAMED)
#undef FIELD_NAMED
    return NULL;
}

void tuning_to_caller(const tuning_params *found, tuning_source from, clattn_tuning *params,
                      clattn_tuning_source *source) {
    clattn_tuning out;
    memset(&out, 0, sizeof out);
    out.struct_size = sizeof out;
    tuning_to_public(found, &out);
    struct_write(params, &out, sizeof out, sizeof out);
    if (source) *source = (clattn_tuning_source)from;
}

clattn_status clattn_device_tuning(size_t device_index, clattn_variant variant,
                                   clattn_tuning *params, clattn_tuning_source *source) {
    const attn_variant *row = variant_find(variant);
    clattn_device_info info;
    clattn_device_info_init(&info);
    if (!row || !params || params->struct_size < sizeof *params ||
        clattn_device_get_info(device_index, &info) != CLATTN_SUCCESS)
        return CLATTN_ERR_INVALID_ARGUMENT;
    tuning_params found;
    tuning_source from = variant_tuning_on(&info, row, &found);
    tuning_to_caller(&found, from, params, source);
    return CLATTN_SUCCESS;
}

/* The caller's params read into the database's struct. @return 0, or 1 for a bad struct. */
static int read_params(const clattn_tuning *params, tuning_params *out) {
    clattn_tuning local;
    if (struct_read(&local, sizeof local, params, params->struct_size, sizeof local)) return 1;
    memset(out, 0, sizeof *out);
    from_public(&local, out);
    return 0;
}

clattn_status tuning_from_caller(clattn_context *ctx, const char *row, tuning_valid_fn *valid,
                                 const clattn_tuning *params, tuning_params *out) {
    if (read_params(params, out))
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "params->struct_size is %zu: set it with clattn_tuning_init",
                         params->struct_size);
    char why[512] = "";
    if (valid && !valid(out, &ctx->device, why, sizeof why))
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "%s: %s", row, why);
    return CLATTN_SUCCESS;
}

static clattn_status set_tuning_in_call(clattn_context *ctx, clattn_variant variant,
                                        const clattn_tuning *params) {
    const attn_variant *row = variant_find(variant);
    ctx_clear_error(ctx);
    if (!row)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "unknown variant %d", (int)variant);
    tuning_params p;
    clattn_status status =
        params ? tuning_from_caller(ctx, row->name, row->tuning_valid, params, &p) : CLATTN_SUCCESS;
    if (status) return status;
    status = tuning_set_context(ctx, row->name, params ? &p : NULL);
    return status ? ctx_error(ctx, status, "setting the tuning of %s", row->name) : status;
}

clattn_status clattn_context_set_tuning(clattn_context *ctx, clattn_variant variant,
                                        const clattn_tuning *params) {
    return IN_CONTEXT(ctx, set_tuning_in_call(ctx, variant, params));
}

static clattn_status tuning_save_in_call(clattn_context *ctx, clattn_variant variant,
                                         const clattn_tuning *params) {
    const attn_variant *row = variant_find(variant);
    ctx_clear_error(ctx);
    if (!row || !params)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "clattn_tuning_save: an unknown variant (%d) or NULL params",
                         (int)variant);
    tuning_params p;
    clattn_status status = tuning_from_caller(ctx, row->name, row->tuning_valid, params, &p);
    return status ? status : tuning_save(&ctx->device, row->name, &p, &ctx->error);
}

clattn_status clattn_tuning_save(clattn_context *ctx, clattn_variant variant,
                                 const clattn_tuning *params) {
    return IN_CONTEXT(ctx, tuning_save_in_call(ctx, variant, params));
}

/* Where the file is, whether or not the folder exists yet (tuning_file_path also asks that it
 * exists and is private, which the lookups and tuning_save need). */
clattn_status clattn_tuning_file(char *path, size_t size) {
    return program_cache_path("tuning.json", path, size);
}
