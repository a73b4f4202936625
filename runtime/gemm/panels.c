/*
 * The panels GEMM row (cl/gemm_panels.cl): clattn's own GEMM for CPU devices, built like the
 * lanes attention kernel: a work-item a block of C, register-blocked micro-tiles of tile_m
 * rows and tile_n columns (16-lane vectors, which CPU OpenCL compilers turn into AVX-512 or
 * AVX2), B read from packed panels [n_pad / tile_n][k][tile_n]. Weights are packed once on the
 * host in their storage type (float32, float16 or bfloat16: widened in registers, no float32
 * copy); any other B is packed per call into the context's workspace (pack_panels). It runs on
 * any device; `auto` picks it on CPUs, where it measured faster than CLBlast (bench/README.md).
 *
 * Tuning: tile_m (MR, rows of a micro-tile), tile_n (NR, its columns: 16, 32 or 48), block_m
 * and block_n (a work-item's block of C: the panel is reused by block_m / tile_m micro-tiles,
 * A's rows by block_n / tile_n panels).
 */
#include "gemm/gemm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Work-items a compute unit the planner wants at least, for balance across cores. */
#define ITEMS_PER_UNIT 8

static int tuning_valid(const tuning_params *t, const clattn_device_info *device, char *why,
                        size_t size) {
    (void)device; /* work-groups of one, no local memory: any device takes it */
    unsigned mr = t->tile_m, nr = t->tile_n;
    if (mr >= 1 && mr <= 16 && nr >= 16 && nr <= 64 && nr % 16 == 0 &&
        mr * (nr / 16) + nr / 16 + 1 <= 32 && t->block_m && t->block_m % mr == 0 && t->block_n &&
        t->block_n % nr == 0)
        return 1;
    snprintf(why, size,
             "tile_m %u, tile_n %u, block_m %u, block_n %u: tile_m 1 to 16 rows, tile_n 16 to 64 "
             "columns in steps of 16, tile_m * tile_n / 16 + tile_n / 16 + 1 <= 32 vector "
             "registers, block_m a multiple of tile_m, block_n of tile_n",
             mr, nr, t->block_m, t->block_n);
    return 0;
}

static const tuning_default defaults[] = {
    {CL_DEVICE_TYPE_ALL, "", "", {.tile_m = 8, .tile_n = 32, .block_m = 64, .block_n = 128}},
};

/* Blocks that are multiples of several micro-tiles (48 and 96 rows: of 4, 6, 8 and 12; 96, 192
 * and 384 columns: of 16, 32 and 48), so that a step along one axis is seldom refused. */
static const clattn_tuning_axis axes[] = {
    TUNING_AXIS(tile_m, 4, 6, 8, 12),
    TUNING_AXIS(tile_n, 16, 32, 48),
    TUNING_AXIS(block_m, 32, 48, 64, 96, 128, 192),
    TUNING_AXIS(block_n, 64, 96, 128, 192, 256, 384),
};

/* ---------------------------------------------------------------- checks */

static size_t panels_of(size_t n, unsigned nr) {
    return (n + nr - 1) / nr;
}

/* Bytes of the per-call panels of B (0 for weights). */
static double packed_bytes(const gemm_desc *g, unsigned nr) {
    if (g->weights) return 0;
    return (double)g->count * (double)panels_of(g->n, nr) * nr * (double)g->k * sizeof(float);
}

static clattn_status check(const clattn_context *ctx, const gemm_desc *g, char *why, size_t size) {
    if (!g) return CLATTN_SUCCESS;
    if (g->test_fail) {
        snprintf(why, size, "a test hook makes this row refuse the call");
        return CLATTN_ERR_UNSUPPORTED;
    }
    unsigned long budget = device_loop_budget(&ctx->device);
    if (budget && (uint64_t)g->k * PANELS_SMALLEST_BLOCK_STEP > budget) {
        snprintf(why, size,
                 "k = %zu takes a work-item past the %lu loop iterations %s runs, at the "
                 "smallest block",
                 g->k, budget, ctx->device.name);
        return CLATTN_ERR_UNSUPPORTED;
    }
    if (packed_bytes(g, 64) > (double)ctx->device.max_alloc_bytes) {
        snprintf(why, size,
                 "B's panels (%.0f bytes) would exceed the device's largest allocation (%llu)",
                 packed_bytes(g, 64), (unsigned long long)ctx->device.max_alloc_bytes);
        return CLATTN_ERR_OUT_OF_MEMORY;
    }
    return CLATTN_SUCCESS;
}

static int suits(const clattn_device_info *device, char *why, size_t size) {
    if (device->type & CL_DEVICE_TYPE_CPU) return 1;
    snprintf(why, size, "auto uses it on CPU devices only");
    return 0;
}

/* ---------------------------------------------------------------- weights */

/* W [n][k] (elem bytes a value) into panels [n_pad / nr][k][nr], zeros past n. */
static void pack_host(const unsigned char *w, size_t elem, size_t n, size_t k, unsigned nr,
                      unsigned char *dst) {
    size_t panels = panels_of(n, nr);
    memset(dst, 0, panels * nr * k * elem);
    for (size_t j = 0; j < n; j++)
        for (size_t p = 0; p < k; p++)
            memcpy(dst + (((j / nr) * k + p) * nr + j % nr) * elem, w + (j * k + p) * elem, elem);
}

static clattn_status weights_make(clattn_context *ctx, const tuning_params *t, const void *w,
                                  clattn_dtype dtype, size_t n, size_t k, gemm_weights *out) {
    size_t elem = dtype_size(dtype), bytes = 0;
    if (size_mul(panels_of(n, t->tile_n) * t->tile_n, k, &bytes) || size_mul(bytes, elem, &bytes))
        return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "panels: %zu x %zu weights", n, k);
    unsigned char *packed = malloc(bytes);
    if (!packed) return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "panels: packing the weights");
    pack_host(w, elem, n, k, t->tile_n, packed);
    clattn_status status = buffer_create(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes,
                                         packed, &out->buffer, "panels: packed weights");
    free(packed);
    out->dtype = dtype;
    out->bytes = bytes;
    return status;
}

/* ---------------------------------------------------------------- calls */

/* The kernel of cl/gemm_panels.cl for these parameters and panel storage. */
static clattn_status get_kernel(clattn_context *ctx, const tuning_params *t, clattn_dtype w_dtype,
                                int accumulate, const char *name, cl_kernel *kernel) {
    static const char *const files[] = {"gemm_panels.cl"};
    char defines[160];
    snprintf(defines, sizeof defines,
             "-DMR=%u -DNV=%u -DBLOCK_M=%u -DBLOCK_N=%u -DW_DTYPE=%d -DBETA_ONE=%d", t->tile_m,
             t->tile_n / 16, t->block_m, t->block_n, (int)w_dtype, accumulate);
    return kernel_get(ctx, files, ARRAY_LEN(files), defines, name, kernel);
}

/* Six long arguments of an operand: its base and batch strides (in `unit` elements). */
static void karg_operand(kernel_args *a, const gemm_operand *op, size_t unit, int with_ld) {
    cl_long v[5] = {(cl_long)(op->offset / unit), (cl_long)op->ld, (cl_long)(op->s_batch / unit),
                    (cl_long)(op->s_head / unit), (cl_long)(op->s_item / unit)};
    kernel_arg(a, sizeof op->buffer, &op->buffer);
    for (size_t i = 0; i < ARRAY_LEN(v); i++)
        if (i != 1 || with_ld) kernel_arg(a, sizeof v[i], &v[i]);
}

/* B of every entry into float32 panels in `dst` (pack_panels). */
static clattn_status pack_b(clattn_context *ctx, const tuning_params *t, const gemm_desc *g,
                            cl_mem dst) {
    cl_kernel kernel = NULL;
    clattn_status status = get_kernel(ctx, t, CLATTN_F32, 0, "pack_panels", &kernel);
    if (status != CLATTN_SUCCESS) return status;
    cl_long n = (cl_long)g->n, k = (cl_long)g->k, first = (cl_long)g->first;
    cl_long heads = (cl_long)g->heads, group = (cl_long)g->group;
    cl_int transposed = g->transpose_b;
    kernel_args a = {kernel, 0, CL_SUCCESS};
    KARG(a, n);
    KARG(a, k);
    KARG(a, first);
    KARG(a, heads);
    KARG(a, group);
    KARG(a, transposed);
    karg_operand(&a, &g->b, 1, 1);
    KARG(a, dst);
    if (a.err != CL_SUCCESS) return ctx_cl_error(ctx, a.err, "panels: packing B: arguments");
    size_t global[3] = {t->tile_n, g->k, panels_of(g->n, t->tile_n) * g->count};
    return kernel_launch(ctx, kernel, 3, global, NULL, NULL, "panels: packing B");
}

/* Loop iterations of the busiest work-item: its micro-tiles, k steps each. */
static uint64_t work_item_loops(const tuning_params *t, const gemm_desc *g) {
    uint64_t rows = g->m < t->block_m ? g->m : t->block_m;
    uint64_t cols = g->n < t->block_n ? g->n : t->block_n;
    uint64_t tiles = (rows + t->tile_m - 1) / t->tile_m * ((cols + t->tile_n - 1) / t->tile_n);
    return tiles * g->k * PANELS_LOOP_STEP(t->tile_m, t->tile_n);
}

/* Whether the busiest work-item's loops stay within the device's loop budget (core.h), with a
 * factor 2 to spare. */
static int within_loop_budget(const clattn_context *ctx, const tuning_params *t,
                              const gemm_desc *g) {
    unsigned long budget = device_loop_budget(&ctx->device);
    return !budget || 2 * work_item_loops(t, g) <= budget;
}

/* Halves block_n, else block_m, down to the micro-tile; 0 when neither can be halved. */
static int halve_block(tuning_params *t) {
    if (t->block_n > t->tile_n && t->block_n / 2 % t->tile_n == 0)
        t->block_n /= 2;
    else if (t->block_m > t->tile_m && t->block_m / 2 % t->tile_m == 0)
        t->block_m /= 2;
    else
        return 0;
    return 1;
}

/* A smaller block while the call has fewer than ITEMS_PER_UNIT work-items a compute unit, or
 * while a work-item's loops exceed the device's loop budget. */
static void fit_blocks(const clattn_context *ctx, const gemm_desc *g, tuning_params *t) {
    uint64_t units = ctx->device.compute_units ? ctx->device.compute_units : 1;
    for (;;) {
        uint64_t items = (uint64_t)((g->m + t->block_m - 1) / t->block_m) *
                         ((g->n + t->block_n - 1) / t->block_n) * g->count;
        int few_items = items < ITEMS_PER_UNIT * units;
        if ((!few_items && within_loop_budget(ctx, t, g)) || !halve_block(t)) return;
    }
}

static clattn_status run(clattn_context *ctx, const tuning_params *tuning, const gemm_desc *g) {
    tuning_params t = *tuning;
    fit_blocks(ctx, g, &t);
    if (!within_loop_budget(ctx, &t, g))
        return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED,
                         "panels: %s: k = %zu takes a work-item past the %lu loop iterations %s "
                         "runs (core.h, device_loop_budget)",
                         g->what, g->k, device_loop_budget(&ctx->device), ctx->device.name);
    clattn_dtype w_dtype = g->weights ? g->weights->dtype : CLATTN_F32;
    gemm_operand b = g->b;
    cl_mem scratch = NULL;
    size_t nv = t.tile_n / 16, panel_vectors = panels_of(g->n, t.tile_n) * g->k * nv;
    clattn_status status = CLATTN_SUCCESS;
    if (g->weights) {
        memset(&b, 0, sizeof b);
        b.buffer = g->weights->buffer;
    } else {
        status = workspace_get(ctx, WORKSPACE_GEMM_PANELS, (size_t)packed_bytes(g, t.tile_n),
                               &scratch, "panels: B's panels");
        if (!status) status = pack_b(ctx, &t, g, scratch);
        memset(&b, 0, sizeof b);
        b.buffer = scratch, b.s_item = panel_vectors * 16;
    }
    cl_kernel kernel = NULL;
    if (!status) status = get_kernel(ctx, &t, w_dtype, g->accumulate, "gemm_panels", &kernel);
    cl_long m = (cl_long)g->m, n = (cl_long)g->n, k = (cl_long)g->k, first = (cl_long)g->first;
    cl_long heads = (cl_long)g->heads, group = (cl_long)g->group;
    kernel_args a = {kernel, 0, CL_SUCCESS};
    KARG(a, m);
    KARG(a, n);
    KARG(a, k);
    KARG(a, g->alpha);
    KARG(a, first);
    KARG(a, heads);
    KARG(a, group);
    karg_operand(&a, &g->a, 1, 1);
    karg_operand(&a, &b, 16, 0); /* panels count 16-value vectors */
    karg_operand(&a, &g->c, 1, 1);
    if (!status && a.err != CL_SUCCESS) status = ctx_cl_error(ctx, a.err, "panels: arguments");
    size_t global[3] = {(g->m + t.block_m - 1) / t.block_m, (g->n + t.block_n - 1) / t.block_n,
                        g->count};
    size_t local[3] = {1, 1, 1};
    if (!status) status = kernel_launch(ctx, kernel, 3, global, local, NULL, g->what);
    if (scratch) clReleaseMemObject(scratch);
    return status;
}

static void describe(const tuning_params *t, const gemm_desc *g, char *out, size_t size) {
    snprintf(out, size, "panels %ux%u micro-tiles, blocks %ux%u, %s B", t->tile_m, t->tile_n,
             t->block_m, t->block_n, g->weights ? dtype_name(g->weights->dtype) : "packed f32");
}

const gemm_row gemm_panels = {
    .id = CLATTN_GEMM_PANELS,
    .name = "panels",
    .summary = "clattn's own GEMM: register-blocked micro-tiles over packed panels of B, 16-lane "
               "vectors, 16-bit weights read as stored (CPUs)",
    .defaults = defaults,
    .num_defaults = ARRAY_LEN(defaults),
    .axes = axes,
    .num_axes = ARRAY_LEN(axes),
    .tuning_valid = tuning_valid,
    .check = check,
    .suits = suits,
    .weights_make = weights_make,
    .run = run,
    .describe = describe,
};
