/*
 * The variant table. Its order is `auto`'s preference: the first row that supports the call
 * and suits the device runs; a row whose kernel fails to build hands the call to the next.
 * Adding a kernel variant adds a row here and nothing in the dispatcher (docs/variants.md).
 */
#include "kernels/variant.h"

#include <string.h>

/* The rows, each defined in its own file (kernels/NAME.c). */
extern const attn_variant variant_split, variant_lanes, variant_nv_mma, variant_flash,
    variant_rowwise, variant_gemm, variant_reference;

static const attn_variant *const table[] = {
    &variant_split,     /* decoding and KV caches (auto: few query rows a kv head) */
    &variant_lanes,     /* CPU devices */
    &variant_nv_mma,    /* NVIDIA tensor cores: float16 and bfloat16 */
    &variant_flash,     /* other devices */
    &variant_rowwise,   /* other devices where flash's tiles do not fit */
    &variant_gemm,      /* every device, any head dim */
    &variant_reference, /* on request */
};

const attn_variant *const *variant_table(size_t *count) {
    *count = ARRAY_LEN(table);
    return table;
}

const attn_variant *variant_find(clattn_variant id) {
    for (size_t i = 0; i < ARRAY_LEN(table); i++)
        if (table[i]->id == id) return table[i];
    return NULL;
}

const attn_variant *variant_named(const char *name) {
    for (size_t i = 0; name && i < ARRAY_LEN(table); i++)
        if (strcmp(table[i]->name, name) == 0 ||
            (table[i]->old_name && strcmp(table[i]->old_name, name) == 0))
            return table[i];
    return NULL;
}

static tuning_subject subject_of(const attn_variant *variant) {
    tuning_subject s = {variant->name, variant->old_name, variant->defaults, variant->num_defaults};
    return s;
}

tuning_source variant_tuning(clattn_context *ctx, const attn_variant *variant, tuning_params *out) {
    tuning_subject subject = subject_of(variant);
    return tuning_lookup_context(ctx, &subject, out);
}

tuning_source variant_tuning_on(const clattn_device_info *device, const attn_variant *variant,
                                tuning_params *out) {
    tuning_subject subject = subject_of(variant);
    return tuning_lookup(device, &subject, out);
}

clattn_status variant_plan_make(clattn_context *ctx, const attn_variant *variant,
                                const attn_problem *pb, int write_lse, variant_plan *plan) {
    launch_limits limits = launch_limits_of_device(&ctx->device);
    return variant_plan_make_limited(ctx, variant, pb, write_lse, &limits, plan);
}

clattn_status variant_plan_make_limited(clattn_context *ctx, const attn_variant *variant,
                                        const attn_problem *pb, int write_lse,
                                        const launch_limits *limits, variant_plan *plan) {
    memset(plan, 0, sizeof *plan);
    plan->variant = variant;
    plan->problem = pb;
    plan->write_lse = write_lse;
    plan->limits = *limits;
    plan->tuning_from = variant_tuning(ctx, variant, &plan->tuning);
    char why[512] = "";
    if (variant->tuning_valid && !variant->tuning_valid(&plan->tuning, NULL, why, sizeof why))
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "%s: the tuning entry (%s): %s",
                         variant->name, tuning_source_name(plan->tuning_from), why);
    clattn_status status = variant->plan(ctx, plan);
    if (status != CLATTN_SUCCESS) variant_plan_release(plan);
    return status;
}

void variant_plan_release(variant_plan *plan) {
    if (plan->variant && plan->variant->release) plan->variant->release(plan);
    plan->state = NULL;
}

const char *clattn_variant_name(clattn_variant variant) {
    if (variant == CLATTN_VARIANT_AUTO) return "auto";
    const attn_variant *row = variant_find(variant);
    return row ? row->name : "unknown";
}

clattn_status clattn_variant_from_name(const char *name, clattn_variant *variant) {
    if (!name || !variant) return CLATTN_ERR_INVALID_ARGUMENT;
    if (strcmp(name, "auto") == 0) {
        *variant = CLATTN_VARIANT_AUTO;
        return CLATTN_SUCCESS;
    }
    const attn_variant *row = variant_named(name);
    if (!row) return CLATTN_ERR_INVALID_ARGUMENT;
    *variant = row->id;
    return CLATTN_SUCCESS;
}
