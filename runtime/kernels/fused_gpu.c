/*
 * The fused variant shaped for GPUs (cl/fused_gpu.cl): a work-group of BLOCK_M work-items owns
 * a query tile, one row a work-item, and stages each K^T and V tile in local memory with
 * coalesced loads. It needs neither subgroups nor half arithmetic; `auto` picks it on every
 * device that is not a CPU.
 */
#include "kernels/fused.h"

#include <stdio.h>

/* Rows a work-group within the limits; key tiles within local memory (K^T and V tiles:
 * (dqk_pad + dv_pad) * block_n floats, and the kernel's own local scalars). */
static clattn_status fit_gpu(clattn_context *ctx, const variant_plan *plan,
                             const launch_limits *limits, fused_state *st) {
    while (st->block_m > limits->work_group_size && st->block_m > 8) st->block_m /= 2;
    if (st->block_m > limits->work_group_size)
        return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED,
                         "gpu: work-groups of %zu work-items are too small (8 at least)",
                         limits->work_group_size);
    const size_t reserve = 1024;
    while (st->block_n > 16 &&
           (size_t)(st->dqk_pad + st->dv_pad) * st->block_n * sizeof(float) + reserve >
               limits->local_mem_bytes)
        st->block_n /= 2;
    st->local_counted = (size_t)(st->dqk_pad + st->dv_pad) * st->block_n * sizeof(float) + reserve;
    if (st->local_counted > limits->local_mem_bytes)
        return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED,
                         "gpu: %llu bytes of local memory cannot hold a key tile of head dims "
                         "%u+%u",
                         (unsigned long long)limits->local_mem_bytes, st->dqk_pad, st->dv_pad);
    st->group_size = st->block_m;
    return CLATTN_SUCCESS;
}

static const fused_kind gpu_kind = {"fused_gpu.cl", "attention_gpu", 0, fit_gpu};

static int supports(const clattn_context *ctx, const attn_problem *pb, char *why, size_t size) {
    if (ctx->device.max_work_group_size < 8) {
        snprintf(why, size, "work-groups of %zu work-items are too small (8 at least)",
                 ctx->device.max_work_group_size);
        return 0;
    }
    return fused_supports(pb, why, size);
}

static int suits(const clattn_device_info *device, const attn_problem *pb, char *why, size_t size) {
    if (!(device->type & CL_DEVICE_TYPE_CPU)) return 1;
    snprintf(why, size, "auto uses the cpu variant on CPU devices");
    return 0;
}

static clattn_status plan(clattn_context *ctx, variant_plan *plan) {
    return fused_plan(ctx, plan, &gpu_kind);
}

const attn_variant variant_fused_gpu = {
    CLATTN_VARIANT_GPU,
    "gpu",
    CLATTN_PATH_FUSED,
    "fused, a query row a work-item, K/V tiles staged in local memory (GPUs)",
    supports,
    suits,
    plan,
    fused_run,
    fused_release,
};
