/*
 * The fused variant shaped for GPUs (cl/rowwise.cl): a work-group of BLOCK_M work-items owns
 * a query tile, one row a work-item, and stages each K^T and V tile in local memory with
 * coalesced loads. It needs neither subgroups nor half arithmetic; `auto` picks it on every
 * device that is not a CPU.
 */
#include "kernels/compilers.h"
#include "kernels/packed.h"

#include <stdio.h>

/* Rows a work-group within the limits; key tiles within local memory (K^T and V tiles:
 * (dqk_pad + dv_pad) * block_n floats, and the kernel's own local scalars). */
static clattn_status fit_rowwise(clattn_context *ctx, const variant_plan *plan,
                                 const launch_limits *limits, packed_state *st) {
    while (st->block_m > limits->work_group_size && st->block_m > 8) st->block_m /= 2;
    if (st->block_m > limits->work_group_size)
        return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED,
                         "rowwise: work-groups of %zu work-items are too small (8 at least)",
                         limits->work_group_size);
    const size_t reserve = 1024;
    while (st->block_n > 16 &&
           (size_t)(st->dqk_pad + st->dv_pad) * st->block_n * sizeof(float) + reserve >
               limits->local_mem_bytes)
        st->block_n /= 2;
    st->local_counted = (size_t)(st->dqk_pad + st->dv_pad) * st->block_n * sizeof(float) + reserve;
    if (st->local_counted > limits->local_mem_bytes)
        return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED,
                         "rowwise: %llu bytes of local memory cannot hold a key tile of head dims "
                         "%u+%u",
                         (unsigned long long)limits->local_mem_bytes, st->dqk_pad, st->dv_pad);
    st->group_size = st->block_m;
    return CLATTN_SUCCESS;
}

/* A tuner's candidate runs as given while a work-group of block_m rows fits the device. */
static int tuning_valid(const tuning_params *t, const clattn_device_info *device, char *why,
                        size_t size) {
    if (t->block_m >= 8 && t->block_n >= 16 &&
        (!device || t->block_m <= device->max_work_group_size))
        return 1;
    snprintf(why, size, "block_m %u, block_n %u: at least 8 rows and 16 keys a tile%s", t->block_m,
             t->block_n, device ? ", and rows within the device's work-group limit" : "");
    return 0;
}

/* BLOCK_M rows a work-group (a row a work-item), BLOCK_N keys a tile in local memory. */
static const tuning_default defaults[] = {
    {CL_DEVICE_TYPE_ALL, "", "", {.block_m = 64, .block_n = 32, .wg_size = 64, .vector = 1}},
};

static const clattn_tuning_axis axes[] = {
    TUNING_AXIS(block_m, 16, 32, 64, 128, 256),
    TUNING_AXIS(block_n, 16, 32, 64),
};

static const packed_kind rowwise_kind = {.kernel_file = "rowwise.cl",
                                         .kernel_name = "attention_rowwise",
                                         .max_head_dim = TILES_MAX_HEAD_DIM,
                                         .fit = fit_rowwise};

static int supports(const clattn_context *ctx, const attn_problem *pb, char *why, size_t size) {
    if (ctx->device.max_work_group_size < 8) {
        snprintf(why, size, "work-groups of %zu work-items are too small (8 at least)",
                 ctx->device.max_work_group_size);
        return 0;
    }
    if (pb && !loop_budget_allows(&ctx->device, "rowwise", pb->len_k, pb->dim_qk, pb->dim_v, why,
                                  size))
        return 0; /* kernels/compilers.c: llvmpipe */
    return packed_supports(pb, &rowwise_kind, why, size);
}

/* GPUs, and CPU devices that run work-items in SIMD lanes as GPUs do (a preferred float
 * vector width of 1: Mesa's llvmpipe), after flash in the table. */
static int suits(const clattn_device_info *device, const attn_problem *pb, char *why, size_t size) {
    if (!(device->type & CL_DEVICE_TYPE_CPU) || device->preferred_vector_width_float == 1) return 1;
    snprintf(why, size,
             "auto does not use it on CPU devices that prefer float vectors (lanes "
             "serves them)");
    return 0;
}

static clattn_status plan(clattn_context *ctx, variant_plan *plan) {
    return packed_plan(ctx, plan, &rowwise_kind);
}

const attn_variant variant_rowwise = {
    .id = CLATTN_VARIANT_ROWWISE,
    .name = "rowwise",
    .old_name = "gpu",
    .path = CLATTN_PATH_FUSED,
    .summary = "fused, a query row a work-item, K/V tiles staged in local memory (GPUs)",
    .defaults = defaults,
    .num_defaults = ARRAY_LEN(defaults),
    .axes = axes,
    .num_axes = ARRAY_LEN(axes),
    .tuning_valid = tuning_valid,
    .supports = supports,
    .suits = suits,
    .plan = plan,
    .run = packed_run,
    .release = packed_release,
};
