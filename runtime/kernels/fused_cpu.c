/*
 * The fused variant shaped for CPUs (cl/fused_cpu.cl): one work-item (work-groups of one) owns
 * a query tile of BLOCK_M rows and walks its key tiles with explicit 16-wide vectors, which CPU
 * OpenCL compilers turn into AVX/AVX-512 code. It runs on any device; `auto` picks it on CPUs.
 */
#include "kernels/fused.h"

#include <stdio.h>

static clattn_status fit_cpu(clattn_context *ctx, fused_state *st) {
    st->group_size = 1;
    return CLATTN_SUCCESS;
}

static const fused_kind cpu_kind = {"fused_cpu.cl", "attention_cpu", fit_cpu};

static int supports(const clattn_context *ctx, const attn_problem *pb, char *why, size_t size) {
    return fused_supports(pb, why, size);
}

static int suits(const clattn_device_info *device, const attn_problem *pb, char *why, size_t size) {
    if (device->type & CL_DEVICE_TYPE_CPU) return 1;
    snprintf(why, size, "auto uses it on CPU devices only");
    return 0;
}

static clattn_status plan(clattn_context *ctx, variant_plan *plan) {
    return fused_plan(ctx, plan, &cpu_kind);
}

const attn_variant variant_fused_cpu = {
    CLATTN_VARIANT_CPU,
    "cpu",
    CLATTN_PATH_FUSED,
    "fused, a register-tiled query tile a work-item, 16-wide vectors (CPUs)",
    supports,
    suits,
    plan,
    fused_run,
    fused_release,
};
