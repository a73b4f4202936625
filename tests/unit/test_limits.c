/*
 * Per-kernel limits (core.h, "what a work-group may use"): a compiled kernel may allow fewer
 * work-items a work-group than its device (CL_KERNEL_WORK_GROUP_SIZE) or use more local memory
 * than its planner counted. Planners take their limits as an input, so these tests plan the
 * gpu, flash, nv_mma and gemm variants against limits lower than the device's: the tiles shrink to
 * fit and the call still matches the reference, or the plan refuses with the reason. How a kernel's
 * own limits narrow a plan's is checked on made-up kernels, and kernel_launch refuses a work-group
 * above the kernel's limit with a status, never a failed launch.
 */
#include <criterion/criterion.h>

#include "kernels/compilers.h"
#include "kernels/variant.h"
#include "reference/reference.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- narrowing */

Test(limits, a_kernel_below_the_device_narrows_the_work_group) {
    launch_limits l = {256, 65536};
    kernel_limits k = {64, 8192, 0};
    cr_expect_eq(launch_limits_narrow(&l, 128, 9000, &k), 1,
                 "128 work-items, the kernel allows 64");
    cr_expect_eq(l.work_group_size, 64);
    cr_expect_eq(l.local_mem_bytes, 65536, "local memory was not the matter");
    cr_expect_eq(launch_limits_narrow(&l, 64, 9000, &k), 0, "64 work-items fit");
}

Test(limits, local_memory_the_planner_did_not_count_shrinks_the_budget_below_its_count) {
    launch_limits l = {256, 16384};
    kernel_limits k = {256, 17000, 0}; /* counted 15000, the kernel uses 2000 more */
    cr_expect_eq(launch_limits_narrow(&l, 64, 15000, &k), 1);
    cr_expect_eq(l.local_mem_bytes, 16384 - 2000, "the budget shrinks by what was missed");
    cr_expect_lt(l.local_mem_bytes, 15000, "the next fit must count less than this one");
    kernel_limits fits = {256, 12000, 0};
    cr_expect_eq(launch_limits_narrow(&l, 64, 11000, &fits), 0);
}

/* ---------------------------------------------------------------- planning against limits */

/* B=1, Hq=2, Hkv=1, Nq=70, Nk=90, D=32, causal: inputs seeded, the reference computed once. */
enum { NQ = 70, NK = 90, HQ = 2, D = 32 };
static float q[NQ * HQ * D], k[NK * D], v[NK * D], o[NQ * HQ * D], lse[HQ * NQ];
static double ref_o[NQ * HQ * D], ref_lse[HQ * NQ];

static clattn_attention_desc limited_desc(attn_problem *pb) {
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, HQ, 1, NQ, NK, D, D);
    d.causal = 1;
    fill_uniform(q, NQ * HQ * D, 41), fill_uniform(k, NK * D, 42), fill_uniform(v, NK * D, 43);
    cr_assert_eq(problem_build(&d, BIAS_FROM_HOST, NULL, pb), CLATTN_SUCCESS);
    static float ref32[NQ * HQ * D], ref_lse32[HQ * NQ]; /* stored as a device stores O */
    cr_assert_eq(reference_attention_store(pb, q, k, v, NULL, ref32, ref_lse32, NULL),
                 CLATTN_SUCCESS);
    for (size_t i = 0; i < NQ * HQ * D; i++) ref_o[i] = ref32[i];
    for (size_t i = 0; i < HQ * NQ; i++) ref_lse[i] = ref_lse32[i];
    return d;
}

/* The inputs of a run: Q, K and V as stored (any dtype), with their sizes in bytes. */
typedef struct run_inputs {
    const void *q, *k, *v;
    size_t q_bytes, kv_bytes;
} run_inputs;

/* Plans `variant` against `limits` and, when it plans, runs the plan on `in` into o and lse;
 * *stats gets what ran. */
static clattn_status plan_and_run_inputs(clattn_context *ctx, const attn_variant *variant,
                                         const attn_problem *pb, const launch_limits *limits,
                                         const run_inputs *in, clattn_stats *stats) {
    variant_plan plan;
    clattn_status status = variant_plan_make_limited(ctx, variant, pb, 1, limits, &plan);
    if (status != CLATTN_SUCCESS) return status;
    cl_context cl = clattn_context_cl_context(ctx);
    cl_int err = CL_SUCCESS;
    const cl_mem_flags input = CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR;
    attn_buffers b;
    memset(&b, 0, sizeof b);
    b.q = clCreateBuffer(cl, input, in->q_bytes, (void *)in->q, &err);
    b.k = clCreateBuffer(cl, input, in->kv_bytes, (void *)in->k, &err);
    b.v = clCreateBuffer(cl, input, in->kv_bytes, (void *)in->v, &err);
    b.o = clCreateBuffer(cl, CL_MEM_WRITE_ONLY, sizeof o, NULL, &err);
    b.lse = clCreateBuffer(cl, CL_MEM_WRITE_ONLY, sizeof lse, NULL, &err);
    cr_assert(b.q && b.k && b.v && b.o && b.lse, "buffers: %d", (int)err);
    memset(stats, 0, sizeof *stats);
    status = variant->run(ctx, &plan, &b, NULL, stats);
    cl_command_queue queue = clattn_context_queue(ctx);
    if (status == CLATTN_SUCCESS) {
        clEnqueueReadBuffer(queue, b.o, CL_TRUE, 0, sizeof o, o, 0, NULL, NULL);
        clEnqueueReadBuffer(queue, b.lse, CL_TRUE, 0, sizeof lse, lse, 0, NULL, NULL);
    }
    clReleaseMemObject(b.q), clReleaseMemObject(b.k), clReleaseMemObject(b.v);
    clReleaseMemObject(b.o), clReleaseMemObject(b.lse);
    variant_plan_release(&plan);
    return status;
}

/* The same on the float32 inputs q, k, v. */
static clattn_status plan_and_run(clattn_context *ctx, const attn_variant *variant,
                                  const attn_problem *pb, const launch_limits *limits,
                                  clattn_stats *stats) {
    const run_inputs in = {q, k, v, sizeof q, sizeof k};
    return plan_and_run_inputs(ctx, variant, pb, limits, &in, stats);
}

static void expect_reference(const char *what) {
    cr_expect_eq(compare_outputs(what, o, ref_o, NQ * HQ * D, TOL_F32_ATOL, TOL_F32_RTOL), 0,
                 "%s: O differs from the reference", what);
    case_result r;
    memset(&r, 0, sizeof r);
    compare_lse_values(lse, ref_lse, HQ * NQ, &r);
    cr_expect_eq(r.mismatches, 0, "%s: LSE: %s", what, r.message);
}

/* The micro-tile of flash's kernel string "flash bm32 bn32 tm4 tn4 ...". */
static void flash_shape(const char *kernel, unsigned *bm, unsigned *bn, unsigned *tm,
                        unsigned *tn) {
    cr_assert_eq(sscanf(kernel, "flash bm%u bn%u tm%u tn%u", bm, bn, tm, tn), 4, "%s", kernel);
}

Test(limits, gpu_tiles_shrink_to_limits_below_the_device) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    attn_problem pb;
    limited_desc(&pb);
    launch_limits device = launch_limits_of_device(&ctxs[0]->device), low;
    /* 16 work-items and 6 KiB: a tile of at most 16 rows, and K^T + V tiles of (32 + 32) x 16
     * floats (4 KiB) with the 1 KiB the planner keeps for the kernel's own */
    low.work_group_size = 16, low.local_mem_bytes = 6144;
    cr_assert_lt(low.work_group_size, device.work_group_size);
    clattn_stats stats;
    ASSERT_OK(ctxs[0],
              plan_and_run(ctxs[0], variant_find(CLATTN_VARIANT_ROWWISE), &pb, &low, &stats));
    cr_expect_leq(stats.block_m, 16, "%s", stats.kernel);
    cr_expect_leq((size_t)(D + D) * stats.block_n * 4 + 1024, 6144, "%s", stats.kernel);
    expect_reference("gpu against low limits");
    low.work_group_size = 4; /* the kernel needs 8 rows a work-group at least */
    cr_expect_eq(plan_and_run(ctxs[0], variant_find(CLATTN_VARIANT_ROWWISE), &pb, &low, &stats),
                 CLATTN_ERR_UNSUPPORTED);
    cr_expect(strstr(clattn_context_last_error(ctxs[0]), "work-groups of 4 work-items") != NULL,
              "%s", clattn_context_last_error(ctxs[0]));
    problem_release(&pb);
}

Test(limits, flash_tiles_shrink_to_limits_below_the_device) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    attn_problem pb;
    limited_desc(&pb);
    launch_limits low = {8, 8192};
    clattn_stats stats;
    ASSERT_OK(ctxs[0],
              plan_and_run(ctxs[0], variant_find(CLATTN_VARIANT_FLASH), &pb, &low, &stats));
    unsigned bm, bn, tm, tn;
    flash_shape(stats.kernel, &bm, &bn, &tm, &tn);
    cr_expect_leq((bm / tm) * (bn / tn), 8, "work-items a work-group: %s", stats.kernel);
    expect_reference("flash against low limits");
    low.local_mem_bytes = 1024; /* the reserve alone: no tile */
    cr_expect_eq(plan_and_run(ctxs[0], variant_find(CLATTN_VARIANT_FLASH), &pb, &low, &stats),
                 CLATTN_ERR_UNSUPPORTED);
    cr_expect(strstr(clattn_context_last_error(ctxs[0]), "no tile fits") != NULL, "%s",
              clattn_context_last_error(ctxs[0]));
    problem_release(&pb);
}

Test(limits, gemm_softmax_work_group_follows_the_limits) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    attn_problem pb;
    limited_desc(&pb);
    launch_limits low = {24, 65536}; /* the tuning's 256 down to a power of two: 16 */
    clattn_stats stats;
    ASSERT_OK(ctxs[0], plan_and_run(ctxs[0], variant_find(CLATTN_VARIANT_GEMM), &pb, &low, &stats));
    cr_expect(strstr(stats.kernel, "softmax wg16 ") != NULL, "%s", stats.kernel);
    expect_reference("gemm against low limits");
    problem_release(&pb);
}

/* nv_mma (its emulated build) at head dim 32: against 64 work-items and 12 KiB its default
 * shape (8 warps, 64 keys) gives way to one buffer, 32 keys and 32 rows; against a work-group
 * limit alone, whole warps go and the keys stay. Each stays right. */
Test(limits, nv_mma_shape_shrinks_to_limits_below_the_device) {
    setenv("CLATTN_TEST_NV_MMA", "emulate", 1);
    clattn_context **ctxs;
    test_contexts(&ctxs);
    attn_problem pb;
    clattn_attention_desc d = limited_desc(&pb);
    problem_release(&pb);
    d.dtype = CLATTN_F16; /* O stays float32 */
    static uint16_t q16[NQ * HQ * D], k16[NK * D], v16[NK * D];
    clattn_convert(CLATTN_F32, q, CLATTN_F16, q16, NQ * HQ * D);
    clattn_convert(CLATTN_F32, k, CLATTN_F16, k16, NK * D);
    clattn_convert(CLATTN_F32, v, CLATTN_F16, v16, NK * D);
    cr_assert_eq(problem_build(&d, BIAS_FROM_HOST, NULL, &pb), CLATTN_SUCCESS);
    static float ref32[NQ * HQ * D], ref_lse32[HQ * NQ];
    cr_assert_eq(reference_attention_store(&pb, q16, k16, v16, NULL, ref32, ref_lse32, NULL),
                 CLATTN_SUCCESS);
    for (size_t i = 0; i < NQ * HQ * D; i++) ref_o[i] = ref32[i];

    const run_inputs in = {q16, k16, v16, sizeof q16, sizeof k16};
    const struct {
        unsigned block_m; /* tuned; 0: the default */
        launch_limits limits;
        const char *shape;
    } fits[] = {{0, {64, 12288}, "nv_mma bm32 bn32 tm1 s1 "},
                /* 3 warps, then 1 of 16 rows for the work-group limit; 64 keys kept */
                {48, {32, 1 << 20}, "nv_mma bm16 bn64 tm1 s1 "},
                {112, {128, 1 << 20}, "nv_mma bm48 bn64 tm1 s1 "}};
    for (size_t i = 0; i < sizeof fits / sizeof fits[0]; i++) {
        clattn_tuning t;
        clattn_tuning_init(&t);
        t.block_m = fits[i].block_m, t.block_n = 64, t.tile_m = 1, t.stages = 1;
        ASSERT_OK(ctxs[0], clattn_context_set_tuning(ctxs[0], CLATTN_VARIANT_NV_MMA,
                                                     fits[i].block_m ? &t : NULL));
        clattn_stats stats;
        ASSERT_OK(ctxs[0], plan_and_run_inputs(ctxs[0], variant_find(CLATTN_VARIANT_NV_MMA), &pb,
                                               &fits[i].limits, &in, &stats));
        cr_expect(strstr(stats.kernel, fits[i].shape) == stats.kernel, "%s, not %s", stats.kernel,
                  fits[i].shape);
        cr_expect_eq(
            compare_outputs(fits[i].shape, o, ref_o, NQ * HQ * D, TOL_F16_ATOL, TOL_F16_RTOL), 0);
    }
    ASSERT_OK(ctxs[0], clattn_context_set_tuning(ctxs[0], CLATTN_VARIANT_NV_MMA, NULL));
    problem_release(&pb);
    unsetenv("CLATTN_TEST_NV_MMA");
}

/* ---------------------------------------------------------------- the launch */

/* A kernel without a required work-group size (the KV cache's append), launched with one
 * work-item more a work-group than it allows: a status naming the limit, nothing enqueued. */
Test(limits, a_launch_above_the_kernels_limit_is_refused) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_context *ctx = ctxs[0];
    static const char *const files[] = {"attn_params.cl", "mask_rules.h", "common.cl",
                                        "kv_cache.cl"};
    cl_kernel kernel = NULL;
    ASSERT_OK(ctx, kernel_get(ctx, files, 4, "-DIN_DTYPE=0 -DOUT_DTYPE=0", "append_rows", &kernel));
    kernel_limits k;
    kernel_limits_get(ctx, kernel, &k);
    cr_assert_geq(k.work_group_size, 1);
    size_t local = k.work_group_size + 1, global = local;
    cr_expect_eq(kernel_launch(ctx, kernel, 1, &global, &local, NULL, "test launch"),
                 CLATTN_ERR_UNSUPPORTED);
    cr_expect(strstr(clattn_context_last_error(ctx), "CL_KERNEL_WORK_GROUP_SIZE") != NULL, "%s",
              clattn_context_last_error(ctx));
}

/* ---------------------------------------------------------------- loop budgets */

/* Mesa's llvmpipe as clattn_device_get_info describes it (kernels/compilers.c). */
static void as_llvmpipe(clattn_device_info *device) {
    snprintf(device->platform_name, sizeof device->platform_name, "rusticl");
    snprintf(device->name, sizeof device->name, "llvmpipe (LLVM 15.0.6, 256 bits)");
}

/* The lengths that gave wrong results on Mesa 22.3.6 (kernels/compilers.c) are refused there,
 * and nothing is refused on a device without a loop budget. */
Test(limits, llvmpipe_refuses_the_walks_that_came_out_wrong_there) {
    clattn_device_info llvmpipe, pocl;
    memset(&llvmpipe, 0, sizeof llvmpipe);
    as_llvmpipe(&llvmpipe);
    cr_expect_eq(device_loop_budget(&llvmpipe), 65535);
    cr_expect_lt(loop_budget_keys(&llvmpipe, "rowwise", 64, 64), 512);
    cr_expect_lt(loop_budget_keys(&llvmpipe, "rowwise", 128, 128), 256);
    cr_expect_lt(loop_budget_keys(&llvmpipe, "split", 64, 64), 1024);
    cr_expect_lt(loop_budget_keys(&llvmpipe, "split", 256, 256), 256);
    cr_expect_lt(loop_budget_keys(&llvmpipe, "gemm", 64, 64), 2048);
    cr_expect_geq(loop_budget_keys(&llvmpipe, "split", 64, 64), 128, "a useful chunk is left");
    cr_expect_eq(loop_budget_keys(&llvmpipe, "lanes", 64, 64), 0, "no measured cost: nothing");
    char why[512];
    cr_expect_eq(loop_budget_allows(&llvmpipe, "rowwise", 8192, 64, 64, why, sizeof why), 0);
    cr_expect(strstr(why, "llvmpipe") && strstr(why, "65535") && strstr(why, "8192"), "%s", why);

    memset(&pocl, 0, sizeof pocl);
    snprintf(pocl.platform_name, sizeof pocl.platform_name, "Portable Computing Language");
    snprintf(pocl.name, sizeof pocl.name, "cpu");
    cr_expect_eq(device_loop_budget(&pocl), 0);
    cr_expect_eq(loop_budget_keys(&pocl, "rowwise", 64, 64), SIZE_MAX);
    cr_expect_eq(loop_budget_allows(&pocl, "gemm", 1L << 30, 576, 512, why, sizeof why), 1);
}

/* Prefetch hints are compiled for PoCL's CPU devices only: rusticl's SPIR-V, oclgrind's
 * interpreter and GPU compilers get none (kernels/compilers.c). */
Test(limits, prefetch_is_compiled_for_pocl_cpus_only) {
    clattn_device_info device;
    memset(&device, 0, sizeof device);
    snprintf(device.platform_name, sizeof device.platform_name, "Portable Computing Language");
    device.type = CL_DEVICE_TYPE_CPU;
    cr_expect(compiler_builds_prefetch(&device));
    device.type = CL_DEVICE_TYPE_GPU; /* PoCL's CUDA device */
    cr_expect_not(compiler_builds_prefetch(&device));
    as_llvmpipe(&device);
    device.type = CL_DEVICE_TYPE_CPU;
    cr_expect_not(compiler_builds_prefetch(&device));
    snprintf(device.platform_name, sizeof device.platform_name, "Oclgrind");
    cr_expect_not(compiler_builds_prefetch(&device));
}

/* Attention over the first n_k keys of k and v (bshd, so the rows of a prefix are contiguous)
 * on ctx with this path and variant, against the reference. */
static void expect_prefix_matches(clattn_context *ctx, clattn_path path, clattn_variant variant,
                                  size_t n_k, const float *q, const float *k, const float *v,
                                  clattn_stats *stats) {
    enum { H = 2, N_Q = 4, DIM = 64 };
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, H, H, N_Q, n_k, DIM, DIM);
    d.path = path, d.variant = variant;
    float out[N_Q * H * DIM], ref[N_Q * H * DIM];
    double ref64[N_Q * H * DIM];
    ASSERT_OK(ctx, clattn_attention_host(ctx, &d, q, k, v, out, NULL));
    clattn_stats_init(stats);
    cr_assert_eq(clattn_context_last_stats(ctx, stats), CLATTN_SUCCESS);
    cr_assert_eq(clattn_attention_reference(&d, q, k, v, ref, NULL), CLATTN_SUCCESS);
    for (size_t i = 0; i < N_Q * H * DIM; i++) ref64[i] = ref[i];
    cr_expect_eq(
        compare_outputs(stats->kernel, out, ref64, N_Q * H * DIM, TOL_F32_ATOL, TOL_F32_RTOL), 0);
}

/* A context that takes its device for llvmpipe (white-box: the planners read ctx->device).
 * `auto` gives rows longer than rowwise and the gemm path may walk to split, whose chunks stay
 * within the budget; the gemm path's GEMM shrinks its blocks to the budget on rows it takes,
 * and those two decline the longer rows with the reason. */
Test(limits, llvmpipe_plans_stay_within_its_loop_budget) {
    enum { H = 2, N_Q = 4, N_K = 1500, SHORT_K = 700, DIM = 64 };
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_context *ctx = ctxs[0];
    as_llvmpipe(&ctx->device);
    static float qs[N_Q * H * DIM], ks[N_K * H * DIM], vs[N_K * H * DIM], out[N_Q * H * DIM];
    fill_uniform(qs, N_Q * H * DIM, 71), fill_uniform(ks, N_K * H * DIM, 72);
    fill_uniform(vs, N_K * H * DIM, 73);
    cr_assert_lt(loop_budget_keys(&ctx->device, "gemm", DIM, DIM), N_K);
    cr_assert_geq(loop_budget_keys(&ctx->device, "gemm", DIM, DIM), SHORT_K);

    clattn_stats stats;
    expect_prefix_matches(ctx, CLATTN_PATH_AUTO, CLATTN_VARIANT_AUTO, N_K, qs, ks, vs, &stats);
    cr_expect_eq(stats.variant, CLATTN_VARIANT_SPLIT, "ran %s", stats.kernel);
    size_t most = loop_budget_keys(&ctx->device, "split", DIM, DIM);
    cr_expect_geq(stats.chunks, (N_K + most - 1) / most, "%s", stats.kernel);
    expect_prefix_matches(ctx, CLATTN_PATH_GEMM, CLATTN_VARIANT_GEMM, SHORT_K, qs, ks, vs, &stats);

    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, H, H, N_Q, N_K, DIM, DIM);
    const clattn_variant declining[] = {CLATTN_VARIANT_ROWWISE, CLATTN_VARIANT_GEMM};
    for (size_t i = 0; i < 2; i++) {
        d.path = i ? CLATTN_PATH_GEMM : CLATTN_PATH_FUSED, d.variant = declining[i];
        cr_expect_eq(clattn_attention_host(ctx, &d, qs, ks, vs, out, NULL), CLATTN_ERR_UNSUPPORTED);
        cr_expect(strstr(clattn_context_last_error(ctx), "loops") != NULL, "%s",
                  clattn_context_last_error(ctx));
    }
}
