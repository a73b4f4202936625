/*
 * The flash variant (cl/flash.cl): attention shaped like FlashAttention-2 for GPUs. A work-group
 * owns BLOCK_M query rows and walks BLOCK_N-key tiles staged in local memory (double buffered);
 * each work-item holds a TILE_M x TILE_N micro-tile of scores and the matching rows of O, and a
 * row's maxima are reduced over the work-items that share it, through subgroups where the
 * device has them and local memory where it does not (its sums each reads from the local P
 * tile). K and V are read in place, at their storage width: no packing pass, and no q8_0 or KV
 * cache (the split variant's). Head dims past 256, up to 576, stream through the local tiles in
 * pieces of FLASH_D_CHUNK columns (single buffered), so local memory does not grow with them. The
 * walk (query tiles, dilation classes, passes, tile kinds, lists) is the fused kernels'
 * (plan/tiles.h, cl/tile_walk.cl), so the planner's count of the tiles it visits holds for this
 * kernel too; the lists live on the device in the context's cache (tile_cache.h), built once per
 * pattern.
 *
 * Every size comes from the tuning database (block_m, block_n, tile_m, tile_n, vector, stages,
 * subgroups); the planner only shrinks tiles that do not fit the local memory or work-group
 * limit of the device and of the compiled kernel, and hands the call on (to `rowwise`, then
 * `gemm`) when nothing fits.
 */
#include "kernels/compilers.h"
#include "kernels/walk_launch.h"
#include "plan/params.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FLASH_MAX_HEAD_DIM   TILES_MAX_HEAD_DIM
#define FLASH_D_CHUNK        64 /* head-dim columns a local tile holds past FLASH_MAX_HEAD_DIM */
#define FLASH_MAX_MICRO_TILE 16
#define FLASH_LOCAL_RESERVE  1024 /* bytes of local memory left to the implementation */

/* Head dims the kernel is compiled for; a call uses the smallest bucket >= its dim that the
 * lanes of a team and the vector width divide. Past them, up to TILES_MAX_WIDE_HEAD_DIM, both
 * dims are padded to multiples of FLASH_D_CHUNK and streamed in pieces of that many columns
 * (cl/flash.cl's D_CHUNK). */
static const unsigned head_dim_buckets[] = {16, 32, 64, 80, 96, 128, 160, 192, 256};

typedef struct flash_state {
    unsigned block_m, block_n, tile_m, tile_n, vector, stages;
    int subgroups;            /* 0 local memory, 1 subgroups, 2 emulated (test builds) */
    unsigned emulated_size;   /* subgroups == 2: the emulated subgroup size */
    unsigned dqk_pad, dv_pad; /* head-dim buckets */
    unsigned d_chunk;         /* head-dim columns a local tile holds; 0: the whole head */
    size_t group_size;        /* work-items a work-group */
    tile_geometry geometry;
    tile_cache_entry *entry; /* the cached lists, held until release */
    const device_lists *lists;
} flash_state;

static unsigned team_of(const flash_state *st) {
    return st->block_n / st->tile_n;
}

/* ---------------------------------------------------------------- shapes */

static unsigned bucket_for(size_t dim, unsigned team, unsigned vector) {
    for (size_t i = 0; i < ARRAY_LEN(head_dim_buckets); i++) {
        unsigned b = head_dim_buckets[i];
        if (dim <= b && b % team == 0 && b % vector == 0) return b;
    }
    return 0;
}

static int is_wide(const attn_problem *pb) {
    return pb->dim_qk > FLASH_MAX_HEAD_DIM || pb->dim_v > FLASH_MAX_HEAD_DIM;
}

/* The head-dim buckets and pieces of the state's shape; dv_pad 0 when the team or the vector
 * width divides no bucket. */
static void choose_head_dims(const attn_problem *pb, flash_state *st) {
    unsigned team = team_of(st);
    if (!is_wide(pb)) {
        st->d_chunk = 0;
        st->dqk_pad = bucket_for(pb->dim_qk, 1, st->vector);
        st->dv_pad = bucket_for(pb->dim_v, team, st->vector);
        return;
    }
    st->d_chunk = FLASH_D_CHUNK;
    st->stages = 1; /* the pieces are staged one after another */
    st->dqk_pad = (unsigned)((pb->dim_qk + FLASH_D_CHUNK - 1) / FLASH_D_CHUNK * FLASH_D_CHUNK);
    st->dv_pad = (unsigned)((pb->dim_v + FLASH_D_CHUNK - 1) / FLASH_D_CHUNK * FLASH_D_CHUNK);
    if (FLASH_D_CHUNK % team || FLASH_D_CHUNK % st->vector) st->dv_pad = 0;
}

/* Head-dim columns of Q and K, and of V, that the local tiles hold. */
static unsigned qk_cols(const flash_state *st) {
    return st->d_chunk ? st->d_chunk : st->dqk_pad;
}

static unsigned v_cols(const flash_state *st) {
    return st->d_chunk ? st->d_chunk : st->dv_pad;
}

/* Local memory the kernel declares (cl/flash.cl), in bytes. */
static size_t local_bytes(const flash_state *st, const attn_problem *pb) {
    size_t team = team_of(st), kv_size = dtype_size(pb->dtype);
    size_t floats = (size_t)st->block_m * (qk_cols(st) + st->block_n + team) + st->block_m + 3;
    return floats * 4 + kv_size * st->stages * st->block_n * (qk_cols(st) + v_cols(st));
}

/* Whether a tuner's candidate runs on the device as it is: its work-items within the device's
 * work-group limit, subgroups only where the device has them. */
static int runs_as_given(const tuning_params *t, const clattn_device_info *device, char *why,
                         size_t size) {
    size_t items = (size_t)(t->block_m / t->tile_m) * (t->block_n / t->tile_n);
    if (items > device->max_work_group_size)
        snprintf(why, size, "%zu work-items a work-group; the device runs at most %zu", items,
                 device->max_work_group_size);
    else if (t->subgroups && !device->has_subgroups)
        snprintf(why, size, "subgroups: the device has none");
    else
        return 1;
    return 0;
}

/* Whether the tuning entry's numbers are ones the kernel takes; names the first that is not. */
static int tuning_valid(const tuning_params *t, const clattn_device_info *device, char *why,
                        size_t size) {
    const char *bad =
        t->tile_m < 1 || t->tile_m > FLASH_MAX_MICRO_TILE   ? "tile_m"
        : t->tile_n < 1 || t->tile_n > FLASH_MAX_MICRO_TILE ? "tile_n"
        : t->block_m < t->tile_m || t->block_m % t->tile_m || t->block_m > TILES_MAX_BLOCK_M
            ? "block_m"
        : t->block_n < t->tile_n || t->block_n % t->tile_n ||
                t->block_n / t->tile_n > FLASH_MAX_HEAD_DIM
            ? "block_n"
        : t->vector < 1 || t->vector > 16 || (t->vector & (t->vector - 1)) ? "vector"
        : t->stages < 1 || t->stages > 2                                   ? "stages"
        : t->subgroups > 1                                                 ? "subgroups"
                                                                           : NULL;
    if (!bad) return device ? runs_as_given(t, device, why, size) : 1;
    snprintf(why, size,
             "%s is out of range (block_m %u, block_n %u, tile_m %u, tile_n %u, vector %u, "
             "stages %u, subgroups %u: tile_m and tile_n 1 to %d dividing block_m (up to %d) and "
             "block_n, vector 1 to 16 a power of two, stages 1 or 2, subgroups 0 or 1)",
             bad, t->block_m, t->block_n, t->tile_m, t->tile_n, t->vector, t->stages, t->subgroups,
             FLASH_MAX_MICRO_TILE, TILES_MAX_BLOCK_M);
    return 0;
}

/* One step smaller: single buffering first, then half the rows or half the keys of a tile,
 * whichever takes more local memory (or more work-items). @return 0 when nothing is left. */
static int shrink(flash_state *st, const attn_problem *pb, int too_many_items) {
    unsigned teams = st->block_m / st->tile_m, team = team_of(st);
    if (!too_many_items && st->stages > 1) {
        st->stages = 1;
        return 1;
    }
    size_t q_cost = (size_t)st->block_m * qk_cols(st) * 4;
    size_t kv_cost =
        (size_t)st->stages * st->block_n * (qk_cols(st) + v_cols(st)) * dtype_size(pb->dtype);
    int rows_first = too_many_items ? teams >= team : q_cost >= kv_cost;
    if (teams > 1 && (rows_first || team == 1))
        st->block_m = st->tile_m * (teams / 2);
    else if (team > 1)
        st->block_n = st->tile_n * (team / 2);
    else
        return 0;
    return 1;
}

/* Fits the tuned shape to the limits: head-dim buckets, the work-group limit, local memory. */
static clattn_status fit_limits(clattn_context *ctx, const attn_problem *pb,
                                const launch_limits *dev, flash_state *st) {
    for (;;) {
        choose_head_dims(pb, st);
        st->group_size = (size_t)(st->block_m / st->tile_m) * team_of(st);
        if (!st->dv_pad && team_of(st) > 1) { /* no bucket the team divides: a smaller team */
            st->block_n = st->tile_n * (team_of(st) / 2);
            continue;
        }
        int too_many = st->group_size > dev->work_group_size;
        int too_big = local_bytes(st, pb) + FLASH_LOCAL_RESERVE > dev->local_mem_bytes;
        if (st->dv_pad && !too_many && !too_big) return CLATTN_SUCCESS;
        if (st->dv_pad && shrink(st, pb, too_many)) continue;
        return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED,
                         "flash: no tile fits the device (%llu bytes of local memory, work-groups "
                         "of %zu) for head dims %zu+%zu",
                         (unsigned long long)dev->local_mem_bytes, dev->work_group_size, pb->dim_qk,
                         pb->dim_v);
    }
}

/* ---------------------------------------------------------------- the row */

static int supports(const clattn_context *ctx, const attn_problem *pb, char *why, size_t size) {
    if (compiler_refuses(&ctx->device, "flash", why, size)) return 0; /* kernels/compilers.c */
    if (pb && problem_is_cache(pb)) {
        snprintf(why, size,
                 "reads the call's K and V tensors: not a KV cache (the split variant "
                 "does)");
        return 0;
    }
    if (pb && dtype_is_quantised(pb->kv.dtype)) {
        snprintf(why, size, "stages float or 16-bit K/V tiles: not %s (the split variant reads it)",
                 dtype_name(pb->kv.dtype));
        return 0;
    }
    if (!pb || (pb->dim_qk <= TILES_MAX_WIDE_HEAD_DIM && pb->dim_v <= TILES_MAX_WIDE_HEAD_DIM))
        return 1;
    snprintf(why, size, "head dims up to %d are compiled (Dqk=%zu, Dv=%zu)",
             TILES_MAX_WIDE_HEAD_DIM, pb->dim_qk, pb->dim_v);
    return 0;
}

/* GPUs, and CPU devices whose compiler runs work-items in SIMD lanes as GPUs do: those that
 * prefer float vectors of width 1 (Mesa's llvmpipe), where lanes' 16-wide vectors buy nothing. */
static int suits(const clattn_device_info *device, const attn_problem *pb, char *why, size_t size) {
    if (!(device->type & CL_DEVICE_TYPE_CPU) || device->preferred_vector_width_float == 1) return 1;
    snprintf(why, size, "auto uses lanes on CPU devices that prefer float vectors (width %u)",
             device->preferred_vector_width_float);
    return 0;
}

/* The subgroup path: the tuning asks for it and the device has subgroups; test builds may
 * emulate it ($CLATTN_TEST_FLASH_SUBGROUPS=emulate[:SIZE]) where the device has none. */
static void choose_subgroups(const clattn_context *ctx, const tuning_params *t, flash_state *st) {
    st->subgroups = t->subgroups && ctx->device.has_subgroups;
#ifdef CLATTN_TEST_HOOKS
    const char *emulate = getenv("CLATTN_TEST_FLASH_SUBGROUPS");
    if (emulate && strncmp(emulate, "emulate", 7) == 0) {
        st->subgroups = 2;
        st->emulated_size = emulate[7] == ':' ? (unsigned)strtoul(emulate + 8, NULL, 10) : 0;
    }
#endif
}

static clattn_status get_kernel(clattn_context *ctx, const attn_problem *pb, const flash_state *st,
                                cl_kernel *kernel);

/* Rounds of fitting against the kernel's own limits before the plan gives up. */
#define FIT_ROUNDS 8

/* Fits the tuned shape to the plan's limits, then to the compiled kernel's own: while the
 * kernel allows fewer work-items a work-group than the shape has, or uses more local memory
 * than the limits, the limits are narrowed and the tuned shape fitted again (the kernel is
 * built here; run() finds it in the context's cache). */
static clattn_status fit_to_kernel(clattn_context *ctx, const variant_plan *plan, flash_state *st) {
    const tuning_params *t = &plan->tuning;
    launch_limits limits = plan->limits;
    for (int round = 0; round < FIT_ROUNDS; round++) {
        st->block_m = t->block_m, st->block_n = t->block_n;
        st->tile_m = t->tile_m, st->tile_n = t->tile_n;
        st->vector = t->vector, st->stages = t->stages;
        clattn_status status = fit_limits(ctx, plan->problem, &limits, st);
        cl_kernel kernel = NULL;
        if (!status) status = get_kernel(ctx, plan->problem, st, &kernel);
        if (status) return status;
        kernel_limits k;
        kernel_limits_get(ctx, kernel, &k);
        uint64_t counted = local_bytes(st, plan->problem) + FLASH_LOCAL_RESERVE;
        if (!launch_limits_narrow(&limits, st->group_size, counted, &k)) return CLATTN_SUCCESS;
        log_msg("flash: bm%u bn%u tm%u tn%u s%u does not fit the kernel (work-groups up to %zu, "
                "%llu bytes of local memory, %llu of private memory a work-item); fitting again",
                st->block_m, st->block_n, st->tile_m, st->tile_n, st->stages, k.work_group_size,
                (unsigned long long)k.local_mem_bytes, (unsigned long long)k.private_mem_bytes);
    }
    return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED,
                     "flash: no tile fits the kernel's own limits after %d tries (work-groups of "
                     "%zu, %llu bytes of local memory left)",
                     FIT_ROUNDS, limits.work_group_size,
                     (unsigned long long)limits.local_mem_bytes);
}

static clattn_status plan(clattn_context *ctx, variant_plan *plan) {
    const attn_problem *pb = plan->problem;
    const tuning_params *t = &plan->tuning;
    flash_state *st = calloc(1, sizeof *st);
    if (!st) return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "flash: plan");
    plan->state = st;
    choose_subgroups(ctx, t, st);
    clattn_status status = fit_to_kernel(ctx, plan, st);
    if (status) return status;
    tiles_plan_geometry(pb, st->block_m, st->block_n, &st->geometry);
    if (!walk_tile_offsets_fit(pb, st->block_n, st->geometry.classes))
        return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED,
                         "flash: a key tile of K or V spans more than 2^31 elements (sequence "
                         "strides %zu, %zu): offsets within a tile are 32-bit",
                         pb->k.stride_seq, pb->v.stride_seq);
    /* what a run allocates: its two parameter blocks and the tile counter (the lists are the
     * context's, made here when new) */
    plan->device_bytes = 2 * sizeof(attn_params) + sizeof(cl_uint);
    return tile_cache_get(ctx, pb, &st->geometry, &st->entry, &st->lists);
}

static void release(variant_plan *plan) {
    flash_state *st = plan->state;
    if (!st) return;
    tile_cache_put(st->entry);
    free(st);
}

/* ---------------------------------------------------------------- running */

/* The -D options of the kernel: its shape, the head-dim buckets, storage types, reductions. */
static void kernel_defines(const clattn_context *ctx, const attn_problem *pb, const flash_state *st,
                           int subgroups, char *out, size_t size) {
    unsigned team = team_of(st);
    int n =
        snprintf(out, size,
                 "-DBLOCK_M=%u -DBLOCK_N=%u -DTILE_M=%u -DTILE_N=%u -DVEC=%u -DSTAGES=%u "
                 "-DSUBGROUPS=%d -DDQK_PAD=%u -DDV_PAD=%u -DD_CHUNK=%u -DIN_DTYPE=%d "
                 "-DCOUNT_TILES=%d",
                 st->block_m, st->block_n, st->tile_m, st->tile_n, st->vector, st->stages,
                 subgroups, st->dqk_pad, st->dv_pad, st->d_chunk, (int)pb->dtype, pb->count_tiles);
    for (unsigned i = 0; subgroups == 1 && i < ctx->device.num_subgroup_sizes; i++)
        if (ctx->device.subgroup_sizes[i] == team) /* Intel: ask for subgroups of a team */
            n += snprintf(out + n, size - (size_t)n, " -DREQD_SUBGROUP_SIZE=%u", team);
    if (subgroups == 2 && st->emulated_size)
        snprintf(out + n, size - (size_t)n, " -DEMULATED_SUBGROUP_SIZE=%u", st->emulated_size);
}

/* The kernel; a device whose compiler refuses the subgroup path gets the local-memory one. */
static clattn_status get_kernel(clattn_context *ctx, const attn_problem *pb, const flash_state *st,
                                cl_kernel *kernel) {
    static const char *const files[] = {ATTN_PRELUDE, "tile_walk.cl", "flash_team.cl", "flash.cl"};
    char defines[512];
    kernel_defines(ctx, pb, st, st->subgroups, defines, sizeof defines);
    clattn_status status =
        kernel_get(ctx, files, ARRAY_LEN(files), defines, "attention_flash", kernel);
    if (status != CLATTN_ERR_BUILD || st->subgroups != 1) return status;
    log_msg("flash: the subgroup build failed (%s); reducing through local memory",
            ctx->error.text);
    ctx_clear_error(ctx);
    kernel_defines(ctx, pb, st, 0, defines, sizeof defines);
    return kernel_get(ctx, files, ARRAY_LEN(files), defines, "attention_flash", kernel);
}

static clattn_status run(clattn_context *ctx, const variant_plan *plan, const attn_buffers *buf,
                         cl_event *event, clattn_stats *stats) {
    const attn_problem *pb = plan->problem;
    const flash_state *st = plan->state;
    walk_launch w = {"flash",     NULL,          st->group_size, st->block_m,
                     st->block_n, &st->geometry, st->lists};
    clattn_status s = get_kernel(ctx, pb, st, &w.kernel);
    if (!s) s = walk_launch_run(ctx, plan, &w, buf, event, stats);
    if (s) return s;
    snprintf(stats->kernel, sizeof stats->kernel,
             "flash bm%u bn%u tm%u tn%u v%u s%u sg%d d%u/%u dc%u %s", st->block_m, st->block_n,
             st->tile_m, st->tile_n, st->vector, st->stages, st->subgroups, st->dqk_pad, st->dv_pad,
             st->d_chunk, dtype_name(pb->dtype));
    log_msg("flash: %s, %llu of %llu key tiles", stats->kernel,
            (unsigned long long)stats->tiles_visited, (unsigned long long)stats->tiles_total);
    return CLATTN_SUCCESS;
}

/* The GPU classes take the defaults of CLBlast's Xgemm database (single precision) read as the
 * S = Q K^T product's: MWG -> block_m, NWG -> block_n, MWG/MDIMC x NWG/NDIMC -> the micro-tile,
 * VWM -> vector; not measured on these devices. Subgroups where the vendor's OpenCL has them
 * (AMD, Intel). The planner shrinks tiles that do not fit a device's local memory or work-group
 * limit. CPUs: PoCL's pthread device, where `clattn tune` chose it (`auto` runs lanes there).
 * Every other device: CLBlast's default of every device class. */
#define FLASH_CLASS(type, vendor, bm, bn, tm, tn, vec, sub)                                        \
    {                                                                                              \
        (type), (vendor), "", {                                                                    \
            .block_m = (bm), .block_n = (bn), .tile_m = (tm), .tile_n = (tn), .vector = (vec),     \
            .stages = 2, .subgroups = (sub)                                                        \
        }                                                                                          \
    }

static const tuning_default defaults[] = {
    FLASH_CLASS(CL_DEVICE_TYPE_GPU, "NVIDIA", 32, 64, 4, 2, 4, 0),
    FLASH_CLASS(CL_DEVICE_TYPE_GPU, "Advanced Micro Devices", 64, 64, 4, 8, 4, 1),
    FLASH_CLASS(CL_DEVICE_TYPE_GPU, "AMD", 64, 64, 4, 8, 4, 1),
    FLASH_CLASS(CL_DEVICE_TYPE_GPU, "Intel", 64, 64, 4, 8, 4, 1),
    FLASH_CLASS(CL_DEVICE_TYPE_GPU, "ARM", 64, 32, 4, 4, 4, 0),
    FLASH_CLASS(CL_DEVICE_TYPE_GPU, "QUALCOMM", 32, 32, 4, 4, 4, 0),
    FLASH_CLASS(CL_DEVICE_TYPE_CPU, "", 32, 32, 4, 4, 4, 0),
    FLASH_CLASS(CL_DEVICE_TYPE_ALL, "", 32, 32, 4, 2, 4, 1),
};

static const clattn_tuning_axis axes[] = {
    TUNING_AXIS(block_m, 16, 32, 64, 128), TUNING_AXIS(block_n, 16, 32, 64, 128),
    TUNING_AXIS(tile_m, 1, 2, 4, 8),       TUNING_AXIS(tile_n, 1, 2, 4, 8),
    TUNING_AXIS(vector, 1, 2, 4, 8),       TUNING_AXIS(stages, 1, 2),
    TUNING_AXIS(subgroups, 0, 1),
};

const attn_variant variant_flash = {
    .id = CLATTN_VARIANT_FLASH,
    .name = "flash",
    .path = CLATTN_PATH_FUSED,
    .summary = "fused, FlashAttention-2's partition: micro-tiles a work-item, K/V double-buffered "
               "in local memory (GPUs)",
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
