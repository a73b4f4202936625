/*
 * The fused variant shaped for CPUs (cl/fused_cpu.cl): one work-item (work-groups of one) owns
 * a query tile of BLOCK_M rows and walks its key tiles with explicit 16-wide vectors, which CPU
 * OpenCL compilers turn into AVX/AVX-512 code. It runs on any device; `auto` picks it on CPUs.
 */
#include "kernels/fused.h"

#include <stdio.h>

/* Work-items a compute unit the planner wants at least, so that every core stays busy and the
 * cores finish at about the same time however few heads and rows a call has. */
#define ITEMS_PER_UNIT 8

/* Query tiles (work-items) of a call with tiles of block_m rows. */
static uint64_t query_tiles(const attn_problem *pb, unsigned block_m, unsigned block_n) {
    tile_geometry g;
    tiles_plan_geometry(pb, block_m, block_n, &g);
    return (uint64_t)(g.classes * g.tiles_per_class) * pb->batch * pb->heads_q;
}

/* The kernel's lanes are query rows: tiles of 16, 32 or 48 rows. A tuning.json entry, or the
 * context's own (a tuner's candidate), is taken as it is; otherwise the tile shrinks by 16 rows
 * (down to 16) while the call has fewer than ITEMS_PER_UNIT work-items a compute unit. */
static clattn_status fit_cpu(clattn_context *ctx, const variant_plan *plan,
                             const launch_limits *limits, fused_state *st) {
    if (st->block_m % 16 != 0 || st->block_m > 48)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "cpu: the tuning entry's block_m %u is out of range (16, 32 or 48 query "
                         "rows, the lanes of the kernel's vectors)",
                         st->block_m);
    uint64_t units = ctx->device.compute_units ? ctx->device.compute_units : 1;
    if (plan->tuning_from != TUNING_USER && plan->tuning_from != TUNING_CONTEXT)
        while (st->block_m > 16 &&
               query_tiles(plan->problem, st->block_m, st->block_n) < ITEMS_PER_UNIT * units)
            st->block_m -= 16;
    st->group_size = 1, st->local_counted = 0; /* registers only: any device's limits hold */
    return CLATTN_SUCCESS;
}

static const fused_kind cpu_kind = {"fused_cpu.cl", "attention_cpu", 1, fit_cpu};

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
