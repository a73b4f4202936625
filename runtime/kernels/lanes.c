/*
 * The fused variant shaped for CPUs (cl/lanes.cl): one work-item (work-groups of one) owns
 * a query tile of BLOCK_M rows and walks its key tiles with explicit 16-wide vectors, which CPU
 * OpenCL compilers turn into AVX/AVX-512 code. It runs on any device; `auto` picks it on CPUs.
 */
#include "kernels/compilers.h"
#include "kernels/packed.h"

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

/* Keys a row may see in a window at most for the smallest tiles (SHORT_ROW_TILE) to pay. A
 * query tile of 32 rows walks 31 keys more than each row sees, 16 rows 15; but 32 x 32 tiles
 * compute a pair faster (each K value broadcast serves two vectors of rows, and a tile's softmax
 * and rescaling serve 32 keys). Measured at N = 16384 on 2 cores (bench/README.md, 11-29), time
 * of 32 x 32 over 16 x 16 tiles: 1.2 to 2 with 17 and 33 keys a row, 1.0 with 65, 0.94 and 1.0
 * with 129 (a window, a dilated one), 0.90 with 257 and 0.87 with 513. */
#define SHORT_ROW_KEYS 96
#define SHORT_ROW_TILE 16

/* Whether the call's window bounds every row to at most SHORT_ROW_KEYS keys of its class, and to
 * at most half of them (a window that covers the keys is full attention, and computes as it). */
static int rows_are_short(const attn_problem *pb) {
    const mask_spec *m = &pb->mask;
    int64_t right = m->causal ? 0 : m->right; /* causal cuts the window at the diagonal */
    if (m->left < 0 || right < 0) return 0;
    int64_t span = m->left + right + 1; /* positions; a class holds every dilation-th */
    return span / m->dilation <= SHORT_ROW_KEYS && 2 * span <= m->len_k;
}

/* Bytes of K and V (float32, as the kernel reads them) that a row's keys span at least for the
 * largest tiles (LONG_ROW_TILE rows) to pay. Every query tile streams its rows' keys through
 * the cache once, so 48 rows a tile read them a third less often than 32. Where they no longer
 * stay in a core's cache (2 MiB of L2 a core here) that matters: measured on 2 cores
 * (bench/README.md, 11-29), time of 48 x 32 over 32 x 32 tiles 0.92 to 1.0 in full and
 * causal attention with 4 and 8 MiB a head, about 1.0 with 1 MiB, 1.03 to 1.12 in windows of
 * 129 to 513 keys (a taller tile walks more keys outside the band). */
#define LONG_ROW_BYTES ((int64_t)4 << 20)
#define LONG_ROW_TILE  48

/* Whether the keys a row may see (all of them, or its window's) span at least LONG_ROW_BYTES of
 * K and V, in a call without a block layout or global tokens (a taller tile spans more of a
 * layout's blocks, and the global tokens' passes take 32 rows better). */
static int rows_are_long(const attn_problem *pb) {
    const mask_spec *m = &pb->mask;
    if (m->layout || m->has_global) return 0;
    int64_t right = m->causal ? 0 : m->right, keys = m->len_k;
    if (m->left >= 0 && right >= 0 && (m->left + right + 1) / m->dilation < keys)
        keys = (m->left + right + 1) / m->dilation;
    return keys * (int64_t)(pb->dim_qk + pb->dim_v) * 4 >= LONG_ROW_BYTES;
}

/* The kernel's lanes are query rows: tiles of 16, 32 or 48 rows. A tuning.json entry, or the
 * context's own (a tuner's candidate), is taken as it is; otherwise rows that a window keeps
 * short get the smallest tiles and rows that see many keys the largest, and the tile shrinks by 16
 * rows (down to 16) while the call has fewer than ITEMS_PER_UNIT work-items a compute unit. */
static clattn_status fit_lanes(clattn_context *ctx, const variant_plan *plan,
                               const launch_limits *limits, packed_state *st) {
    uint64_t units = ctx->device.compute_units ? ctx->device.compute_units : 1;
    if (plan->tuning_from != TUNING_USER && plan->tuning_from != TUNING_CONTEXT) {
        if (rows_are_short(plan->problem)) st->block_m = st->block_n = SHORT_ROW_TILE;
        if (rows_are_long(plan->problem)) st->block_m = LONG_ROW_TILE;
        while (st->block_m > 16 &&
               query_tiles(plan->problem, st->block_m, st->block_n) < ITEMS_PER_UNIT * units)
            st->block_m -= 16;
    }
    st->group_size = 1, st->local_counted = 0; /* registers only: any device's limits hold */
    return CLATTN_SUCCESS;
}

/* Keys a tile at most: the tile's scores are private [BLOCK_N][BLOCK_M] floats. */
#define MAX_BLOCK_N 128

/* Tiles of 16, 32 or 48 query rows (the lanes of the kernel's vectors) and whole key blocks of
 * 16. */
static int tuning_valid(const tuning_params *t, const clattn_device_info *device, char *why,
                        size_t size) {
    (void)device; /* a work-item without local memory runs on any device */
    if (t->block_m && t->block_m % 16 == 0 && t->block_m <= 48 && t->block_n &&
        t->block_n % 16 == 0 && t->block_n <= MAX_BLOCK_N)
        return 1;
    snprintf(why, size,
             "block_m %u, block_n %u: block_m is 16, 32 or 48 query rows (the lanes of the "
             "kernel's vectors), block_n a multiple of 16 up to %d",
             t->block_m, t->block_n, MAX_BLOCK_N);
    return 0;
}

/* A query tile of BLOCK_M rows a work-item, BLOCK_N keys a tile (fewer rows for calls with
 * few rows: fit_lanes). */
static const tuning_default defaults[] = {
    {CL_DEVICE_TYPE_ALL, "", "", {.block_m = 32, .block_n = 32, .wg_size = 1, .vector = 16}},
};

static const clattn_tuning_axis axes[] = {
    TUNING_AXIS(block_m, 16, 32, 48),
    TUNING_AXIS(block_n, 16, 32, 64),
};

static const packed_kind lanes_kind = {.kernel_file = "lanes.cl",
                                       .kernel_name = "attention_lanes",
                                       .key_rows = 1,
                                       .global_program = 1,
                                       .fold_rows = 1,
                                       .max_head_dim = TILES_MAX_WIDE_HEAD_DIM,
                                       .fit = fit_lanes};

/* Not where the device's compiler does not finish the kernel (kernels/compilers.c). */
static int supports(const clattn_context *ctx, const attn_problem *pb, char *why, size_t size) {
    if (compiler_refuses(&ctx->device, "lanes", why, size)) return 0;
    return packed_supports(pb, &lanes_kind, why, size);
}

/* CPU devices whose compiler wants vectors (a preferred float width above 1), which is what
 * the kernel's 16-wide vectors are for; flash serves those that vectorise across work-items. */
static int suits(const clattn_device_info *device, const attn_problem *pb, char *why, size_t size) {
    if ((device->type & CL_DEVICE_TYPE_CPU) && device->preferred_vector_width_float > 1) return 1;
    snprintf(why, size, "auto uses it on CPU devices that prefer float vectors only");
    return 0;
}

static clattn_status plan(clattn_context *ctx, variant_plan *plan) {
    return packed_plan(ctx, plan, &lanes_kind);
}

const attn_variant variant_lanes = {
    .id = CLATTN_VARIANT_LANES,
    .name = "lanes",
    .old_name = "cpu",
    .path = CLATTN_PATH_FUSED,
    .summary = "fused, a query tile a work-item, its rows in the lanes of 16-wide vectors (CPUs)",
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
