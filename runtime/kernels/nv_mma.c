/*
 * The nv_mma variant (cl/nv_mma.cl): FlashAttention-2's partition on NVIDIA's tensor cores, both
 * products on `mma.sync.m16n8k16` through inline PTX, for float16 and bfloat16 storage. A
 * work-group holds block_m query rows, tile_m row tiles of 16 a warp (so block_m / (16 tile_m)
 * warps); key tiles of block_n keys are staged in local memory, in one buffer or two (stages).
 * Those four come from the tuning database; the planner shrinks what does not fit the device's
 * local memory. The walk (query tiles, classes, passes, tile kinds, lists) is the fused
 * kernels' (plan/tiles.h, cl/tile_walk.cl), so every mask, bias, score modifier and sink the
 * flash variant serves, this one serves too.
 *
 * Where it runs: NVIDIA's OpenCL on compute capability 8.0 or higher
 * (cl_nv_device_attribute_query), and only after a one-tile self-test has passed on the context
 * (run on the first call it plans, and remembered): a driver that builds the PTX but computes
 * something else hands every call on to the next variant, with the reason. Test builds may run
 * the kernel's emulated build on any device ($CLATTN_TEST_NV_MMA=emulate), where the same
 * fragment bookkeeping runs with the instructions emulated through local memory.
 */
#include "kernels/walk_launch.h"
#include "plan/params.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NV_MMA_MAX_HEAD_DIM 128 /* K and V (transposed) tiles within 48 KB of local memory */
#define NV_MMA_MAX_WARPS    8
#define NV_MMA_P_COLS       32 /* cl/nv_mma.cl's P_COLS */
#define NV_MMA_FIT_ROUNDS   4

/* cl_nv_device_attribute_query */
#define CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV 0x4000
#define CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV 0x4001

extern const attn_variant variant_nv_mma; /* the self-test plans and runs it */

/* A kernel's shape (the tuning fields it reads). */
typedef struct nv_mma_shape {
    unsigned block_m, block_n; /* query rows and keys a tile */
    unsigned tile_m;           /* row tiles of 16 a warp */
    unsigned stages;           /* key tiles in local memory: 1, or 2 (double buffering) */
} nv_mma_shape;

typedef struct nv_mma_state {
    nv_mma_shape shape;
    unsigned dqk_pad, dv_pad; /* head dims rounded up to 16 */
    int ptx;                  /* 1: the PTX build; 0: the emulated one (test builds) */
    int aligned_rows;         /* K and V rows start at multiples of 16 bytes (PTX build) */
    tile_geometry geometry;
    tile_cache_entry *entry; /* the cached lists, held until release */
    const device_lists *lists;
} nv_mma_state;

/* ---------------------------------------------------------------- where it runs */

/* Whether the test hook asks for the emulated build on whatever device. */
static int emulated_by_request(void) {
#ifdef CLATTN_TEST_HOOKS
    const char *mode = getenv("CLATTN_TEST_NV_MMA");
    return mode && strcmp(mode, "emulate") == 0;
#else
    return 0;
#endif
}

/* Whether the device has mma.sync with 16-bit inputs: NVIDIA, compute capability 8.0 or
 * higher. Writes why not. */
static int has_tensor_cores(const clattn_device_info *device, char *why, size_t size) {
    cl_uint major = 0, minor = 0;
    if (!strstr(device->vendor, "NVIDIA") ||
        clGetDeviceInfo(device->device, CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV, sizeof major, &major,
                        NULL) != CL_SUCCESS ||
        clGetDeviceInfo(device->device, CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV, sizeof minor, &minor,
                        NULL) != CL_SUCCESS) {
        snprintf(why, size,
                 "tensor cores through NVIDIA's OpenCL only (the device reports no compute "
                 "capability: cl_nv_device_attribute_query)");
        return 0;
    }
    if (major >= 8) return 1;
    snprintf(why, size,
             "mma.sync with 16-bit inputs needs compute capability 8.0 or higher (%u.%u)", major,
             minor);
    return 0;
}

static int supports_problem(const attn_problem *pb, char *why, size_t size) {
    if (pb->dtype != CLATTN_F16 && pb->dtype != CLATTN_BF16)
        snprintf(why, size, "tensor cores take float16 or bfloat16 Q, K and V, not %s",
                 dtype_name(pb->dtype));
    else if (pb->kv.dtype != pb->dtype)
        snprintf(why, size, "K and V stored as %s: tensor cores take them stored as Q is (%s)",
                 dtype_name(pb->kv.dtype), dtype_name(pb->dtype));
    else if (problem_is_cache(pb))
        snprintf(why, size,
                 "reads the call's K and V tensors: not a KV cache (the split variant "
                 "does)");
    else if (pb->dim_qk > NV_MMA_MAX_HEAD_DIM || pb->dim_v > NV_MMA_MAX_HEAD_DIM)
        snprintf(why, size, "head dims up to %d (Dqk=%zu, Dv=%zu)", NV_MMA_MAX_HEAD_DIM, pb->dim_qk,
                 pb->dim_v);
    else
        return 1;
    return 0;
}

static int failed_self_test(const clattn_context *ctx, char *why, size_t size);

static int supports(const clattn_context *ctx, const attn_problem *pb, char *why, size_t size) {
    if (!emulated_by_request() && !has_tensor_cores(&ctx->device, why, size)) return 0;
    if (failed_self_test(ctx, why, size)) return 0;
    return !pb || supports_problem(pb, why, size);
}

static int suits(const clattn_device_info *device, const attn_problem *pb, char *why, size_t size) {
    (void)device, (void)pb, (void)why, (void)size;
    return 1; /* wherever it runs */
}

/* ---------------------------------------------------------------- the shape */

static unsigned group_size(const nv_mma_shape *s) {
    return 32 * s->block_m / (16 * s->tile_m);
}

/* Whether the tuning entry's numbers are ones the kernel takes; names the first that is not. */
static int tuning_valid(const tuning_params *t, const clattn_device_info *device, char *why,
                        size_t size) {
    const char *bad = t->tile_m < 1 || t->tile_m > 2 ? "tile_m"
                      : t->block_m % (16 * t->tile_m) || t->block_m == 0 ||
                              t->block_m / (16 * t->tile_m) > NV_MMA_MAX_WARPS
                          ? "block_m"
                      : t->block_n != 32 && t->block_n != 64 ? "block_n"
                      : t->stages < 1 || t->stages > 2       ? "stages"
                                                             : NULL;
    if (bad) {
        snprintf(why, size,
                 "%s is out of range (block_m %u, block_n %u, tile_m %u, stages %u: tile_m 1 or "
                 "2, block_m a multiple of 16 tile_m, up to %d warps of 16 tile_m rows; "
                 "block_n 32 or 64; stages 1 or 2)",
                 bad, t->block_m, t->block_n, t->tile_m, t->stages, NV_MMA_MAX_WARPS);
        return 0;
    }
    const nv_mma_shape s = {t->block_m, t->block_n, t->tile_m, t->stages};
    if (device && group_size(&s) > device->max_work_group_size) {
        snprintf(why, size, "%u work-items a work-group; the device runs at most %zu",
                 group_size(&s), device->max_work_group_size);
        return 0;
    }
    return 1;
}

/* The local memory the kernel declares (cl/nv_mma.cl's arrays), in bytes. */
static uint64_t local_bytes(const nv_mma_shape *s, const nv_mma_state *st) {
    const uint64_t k_stride = st->dqk_pad / 2 + 4, v_stride = s->block_n / 2 + 4;
    const uint64_t warps = s->block_m / (16 * s->tile_m);
    const uint64_t scratch = st->ptx ? 4 : warps * 384 * 4;
    return 4 * s->stages * (s->block_n * k_stride + st->dv_pad * v_stride) +
           2 * (uint64_t)s->block_m * NV_MMA_P_COLS + 4 * s->block_m + 4 * s->stages + scratch;
}

/* About half the rows, whole warps still: @return 0 when the shape is one warp of 16 rows. */
static int fewer_rows(nv_mma_shape *s) {
    const unsigned warp_rows = 16 * s->tile_m, half = s->block_m / 2 / warp_rows * warp_rows;
    if (s->block_m > warp_rows)
        s->block_m = half > warp_rows ? half : warp_rows;
    else if (s->tile_m > 1)
        s->tile_m = 1, s->block_m = 16;
    else
        return 0;
    return 1;
}

/* Shrinks the shape until it fits the limits: fewer rows for the work-group limit; one buffer,
 * then 32 keys a tile, then fewer rows for local memory. @return 0 when even the smallest does
 * not fit. */
static int fit_limits(const launch_limits *limits, const nv_mma_state *st, nv_mma_shape *s) {
    while (group_size(s) > limits->work_group_size)
        if (!fewer_rows(s)) return 0;
    while (local_bytes(s, st) > limits->local_mem_bytes) {
        if (s->stages > 1)
            s->stages = 1;
        else if (s->block_n > 32)
            s->block_n = 32;
        else if (!fewer_rows(s))
            return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------- the kernel */

static clattn_status get_kernel(clattn_context *ctx, const attn_problem *pb, const nv_mma_state *st,
                                cl_kernel *kernel) {
    static const char *const files[] = {ATTN_PRELUDE, "tile_walk.cl", "nv_mma.cl"};
    const nv_mma_shape *s = &st->shape;
    char defines[320];
    snprintf(defines, sizeof defines,
             "-DBLOCK_M=%u -DBLOCK_N=%u -DM_TILES=%u -DSTAGES=%u -DDQK_PAD=%u -DDV_PAD=%u "
             "-DIN_DTYPE=%d -DCOUNT_TILES=%d -DMMA_PTX=%d -DALIGNED_ROWS=%d",
             s->block_m, s->block_n, s->tile_m, s->stages, st->dqk_pad, st->dv_pad, (int)pb->dtype,
             pb->count_tiles, st->ptx, st->aligned_rows);
    return kernel_get(ctx, files, ARRAY_LEN(files), defines, "attention_nv_mma", kernel);
}

/* Fits the tuned shape to the call's limits, builds the kernel, and fits again while the
 * kernel allows fewer work-items (registers) or declares more local memory than counted. */
static clattn_status fit_to_kernel(clattn_context *ctx, const variant_plan *plan,
                                   nv_mma_state *st) {
    const tuning_params *t = &plan->tuning;
    launch_limits limits = plan->limits;
    st->shape = (nv_mma_shape){t->block_m, t->block_n, t->tile_m, t->stages};
    for (int round = 0; round < NV_MMA_FIT_ROUNDS; round++) {
        if (!fit_limits(&limits, st, &st->shape)) break;
        cl_kernel kernel = NULL;
        clattn_status status = get_kernel(ctx, plan->problem, st, &kernel);
        if (status) return status;
        kernel_limits k;
        kernel_limits_get(ctx, kernel, &k);
        log_msg("nv_mma: bm%u bn%u tm%u s%u takes work-groups of up to %zu, %llu bytes of local "
                "memory and %llu of private memory a work-item (spilled registers)",
                st->shape.block_m, st->shape.block_n, st->shape.tile_m, st->shape.stages,
                k.work_group_size, (unsigned long long)k.local_mem_bytes,
                (unsigned long long)k.private_mem_bytes);
        if (!launch_limits_narrow(&limits, group_size(&st->shape), local_bytes(&st->shape, st), &k))
            return CLATTN_SUCCESS;
    }
    return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED,
                     "nv_mma: no shape fits (work-groups of up to %zu work-items, %llu bytes of "
                     "local memory; head dims %u/%u)",
                     limits.work_group_size, (unsigned long long)limits.local_mem_bytes,
                     st->dqk_pad, st->dv_pad);
}

/* ---------------------------------------------------------------- the self-test */

/* The self-test's verdict on a context: whether the kernel computes one tile right there. */
typedef struct self_test {
    int state; /* 0 not run, 1 running, 2 passed, 3 failed */
    char why[200];
} self_test;

static void free_self_test(clattn_context *ctx) {
    void **slot = context_data(ctx, free_self_test);
    if (slot) free(*slot);
}

/* Whether the self-test ran on ctx and failed; then writes why (the queries say so too). */
static int failed_self_test(const clattn_context *ctx, char *why, size_t size) {
    const self_test *t = context_data_find(ctx, free_self_test);
    if (!t || t->state != 3) return 0;
    snprintf(why, size, "%s", t->why);
    return 1;
}

/* One query tile of float16 attention, causal, 64 rows and 64 keys at head dim 64: the inputs
 * (smooth values in [-1, 1]) and the float16 output, on the heap (a caller's thread may have a
 * small stack). */
#define SELF_TEST_N      64
#define SELF_TEST_VALUES (SELF_TEST_N * SELF_TEST_N)
typedef struct self_test_data {
    uint16_t q[SELF_TEST_VALUES], k[SELF_TEST_VALUES], v[SELF_TEST_VALUES], o[SELF_TEST_VALUES];
    float ref[SELF_TEST_VALUES], got[SELF_TEST_VALUES];
} self_test_data;

static void self_test_inputs(clattn_attention_desc *desc, self_test_data *d) {
    clattn_attention_desc_init(desc, CLATTN_LAYOUT_BSHD, 1, 1, 1, SELF_TEST_N, SELF_TEST_N,
                               SELF_TEST_N, SELF_TEST_N);
    desc->dtype = desc->out_dtype = CLATTN_F16;
    desc->causal = 1;
    uint16_t *inputs[3] = {d->q, d->k, d->v};
    for (int t = 0; t < 3; t++) {
        for (int i = 0; i < SELF_TEST_VALUES; i++) d->got[i] = (float)sin(0.37 * i + 1.3 * t);
        clattn_convert(CLATTN_F32, d->got, CLATTN_F16, inputs[t], SELF_TEST_VALUES);
    }
}

/* The tile through this variant's plan and run on ctx's device, into d->o. */
static clattn_status self_test_on_device(clattn_context *ctx, const attn_problem *pb,
                                         self_test_data *d) {
    const cl_mem_flags in = CL_MEM_READ_ONLY, out = CL_MEM_READ_WRITE;
    attn_buffers b = {0};
    clattn_status status = buffer_from_host(ctx, in, sizeof d->q, d->q, &b.q, "self-test Q");
    if (!status) status = buffer_from_host(ctx, in, sizeof d->k, d->k, &b.k, "self-test K");
    if (!status) status = buffer_from_host(ctx, in, sizeof d->v, d->v, &b.v, "self-test V");
    if (!status) status = buffer_from_host(ctx, out, sizeof d->o, d->o, &b.o, "self-test O");
    variant_plan plan;
    if (!status) status = variant_plan_make(ctx, &variant_nv_mma, pb, 0, &plan);
    if (!status) {
        clattn_stats stats;
        memset(&stats, 0, sizeof stats);
        status = variant_nv_mma.run(ctx, &plan, &b, NULL, &stats);
        variant_plan_release(&plan);
    }
    if (!status) status = buffer_to_host(ctx, b.o, sizeof d->o, d->o, "self-test O");
    cl_mem all[4] = {b.q, b.k, b.v, b.o};
    for (int i = 0; i < 4; i++)
        if (all[i]) clReleaseMemObject(all[i]);
    return status;
}

/* The tile against the CPU reference, within the float16 tolerance; else UNSUPPORTED and the
 * first value off into `why`. */
static clattn_status run_self_test(clattn_context *ctx, char *why, size_t size) {
    self_test_data *d = calloc(1, sizeof *d);
    if (!d) return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "nv_mma: the self-test's data");
    clattn_attention_desc desc, ref_desc;
    self_test_inputs(&desc, d);
    ref_desc = desc;
    ref_desc.out_dtype = CLATTN_F32;
    attn_problem pb;
    clattn_status status = clattn_attention_reference(&ref_desc, d->q, d->k, d->v, d->ref, NULL);
    if (!status) status = problem_build(&desc, BIAS_FROM_HOST, &ctx->error, &pb);
    if (!status) {
        status = self_test_on_device(ctx, &pb, d);
        problem_release(&pb);
    }
    double atol, rtol;
    clattn_tolerance(CLATTN_F16, CLATTN_F16, &atol, &rtol, NULL);
    if (!status) clattn_convert(CLATTN_F16, d->o, CLATTN_F32, d->got, SELF_TEST_VALUES);
    for (int i = 0; !status && i < SELF_TEST_VALUES; i++)
        if (!(fabs(d->got[i] - d->ref[i]) <= atol + rtol * fabs(d->ref[i]))) {
            snprintf(why, size, "its one-tile self-test computed O[%d][%d] = %g, the reference %g",
                     i / SELF_TEST_N, i % SELF_TEST_N, d->got[i], d->ref[i]);
            status = CLATTN_ERR_UNSUPPORTED;
        }
    free(d);
    return status;
}

/* The self-test's verdict on ctx, run on first use. A wrong value, or the kernel refused on
 * the device, is kept for the context's life; an error on the way (memory, the driver) is
 * returned and the test runs again at the next call. @return CLATTN_SUCCESS when it passed (or
 * is running: its own plan), else UNSUPPORTED with the reason, or the error it met. */
static clattn_status self_tested(clattn_context *ctx) {
    self_test **slot = (self_test **)context_data(ctx, free_self_test);
    if (!slot) return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "nv_mma: the self-test's record");
    if (!*slot && !(*slot = calloc(1, sizeof **slot)))
        return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "nv_mma: the self-test's record");
    self_test *t = *slot;
    if (t->state == 0) {
        t->state = 1;
        clattn_status status = run_self_test(ctx, t->why, sizeof t->why);
        log_msg("nv_mma: the one-tile self-test %s%s", status ? "failed: " : "passed",
                t->why[0] ? t->why
                : status  ? ctx->error.text
                          : "");
        if (status && status != CLATTN_ERR_UNSUPPORTED) { /* memory, the driver: try again later */
            t->state = 0;
            return status;
        }
        if (status && !t->why[0])
            snprintf(t->why, sizeof t->why, "its self-test: %s", ctx->error.text);
        t->state = status ? 3 : 2;
    }
    if (t->state != 3) return CLATTN_SUCCESS;
    return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED, "nv_mma: %s", t->why);
}

/* ---------------------------------------------------------------- the row */

/* Whether every row of t starts at a multiple of 8 values (16 bytes: buffers start at the
 * device's base alignment). */
static int rows_of_8(const clattn_tensor *t) {
    return (t->offset | t->stride_batch | t->stride_head | t->stride_seq) % 8 == 0;
}

static unsigned pad16(size_t dim) {
    return (unsigned)((dim + 15) / 16 * 16);
}

static clattn_status plan(clattn_context *ctx, variant_plan *plan) {
    const attn_problem *pb = plan->problem;
    clattn_status status = self_tested(ctx);
    if (status) return status;
    nv_mma_state *st = calloc(1, sizeof *st);
    if (!st) return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "nv_mma: plan");
    plan->state = st;
    st->dqk_pad = pad16(pb->dim_qk);
    st->dv_pad = pad16(pb->dim_v);
    st->ptx = !emulated_by_request();
    /* (the emulation's CPU buffers may wrap host memory of any alignment) */
    st->aligned_rows = st->ptx && rows_of_8(&pb->k) && rows_of_8(&pb->v);
    status = fit_to_kernel(ctx, plan, st);
    if (status) return status;
    tiles_plan_geometry(pb, st->shape.block_m, st->shape.block_n, &st->geometry);
    plan->device_bytes = 2 * sizeof(attn_params) + sizeof(cl_uint);
    return tile_cache_get(ctx, pb, &st->geometry, &st->entry, &st->lists);
}

static void release(variant_plan *plan) {
    nv_mma_state *st = plan->state;
    if (!st) return;
    tile_cache_put(st->entry);
    free(st);
}

static clattn_status run(clattn_context *ctx, const variant_plan *plan, const attn_buffers *buf,
                         cl_event *event, clattn_stats *stats) {
    const attn_problem *pb = plan->problem;
    const nv_mma_state *st = plan->state;
    const nv_mma_shape *shape = &st->shape;
    walk_launch w = {"nv_mma",       NULL,          group_size(shape), shape->block_m,
                     shape->block_n, &st->geometry, st->lists};
    clattn_status s = get_kernel(ctx, pb, st, &w.kernel);
    if (!s) s = walk_launch_run(ctx, plan, &w, buf, event, stats);
    if (s) return s;
    snprintf(stats->kernel, sizeof stats->kernel, "nv_mma bm%u bn%u tm%u s%u d%u/%u %s%s",
             shape->block_m, shape->block_n, shape->tile_m, shape->stages, st->dqk_pad, st->dv_pad,
             dtype_name(pb->dtype), st->ptx ? "" : " emulated");
    log_msg("nv_mma: %s, %llu of %llu key tiles", stats->kernel,
            (unsigned long long)stats->tiles_visited, (unsigned long long)stats->tiles_total);
    return CLATTN_SUCCESS;
}

/* 8 warps of 16 rows, 64 keys, one buffer: the fastest of 14 shapes on the H200 at head dims
 * 64 and 128 (bench/README.md, 2026-11-28). */
static const tuning_default defaults[] = {
    {CL_DEVICE_TYPE_ALL, "", "", {.block_m = 128, .block_n = 64, .tile_m = 1, .stages = 1}},
};

static const clattn_tuning_axis axes[] = {
    TUNING_AXIS(block_m, 64, 128),
    TUNING_AXIS(block_n, 32, 64),
    TUNING_AXIS(tile_m, 1, 2),
    TUNING_AXIS(stages, 1, 2),
};

const attn_variant variant_nv_mma = {
    .id = CLATTN_VARIANT_NV_MMA,
    .name = "nv_mma",
    .path = CLATTN_PATH_FUSED,
    .summary = "fused, FlashAttention-2's partition on NVIDIA tensor cores (mma.sync through "
               "inline PTX), float16 and bfloat16",
    .defaults = defaults,
    .num_defaults = ARRAY_LEN(defaults),
    .axes = axes,
    .num_axes = ARRAY_LEN(axes),
    .tuning_valid = tuning_valid,
    .supports = supports,
    .suits = suits,
    .plan = plan,
    .run = run,
    .release = release,
};
