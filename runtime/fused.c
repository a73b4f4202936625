/*
 * The fused path: plans and launches the tiled attention kernels (cl/fused_cpu.cl,
 * cl/fused_gpu.cl) after packing K and V (cl/pack.cl).
 *
 * Planning picks the variant (by device type; desc->variant or $CLATTN_KERNEL=cpu|gpu
 * override), the tile shape from one table, the head-dim buckets the kernels are specialised
 * for, and turns the pattern into what the kernels walk: for each query tile, a key-tile range
 * computed in the kernel from the window and causality, or, with a block layout, a list of the
 * key tiles that hold any allowed pair (CSR, built here). Global tokens add a packed set of
 * global keys and a pass over the global rows (see cl/fused_common.cl).
 *
 * Device memory per call: the packed K and V (B*Hkv*Nk*(Dqk+Dv) floats, padded), the global
 * keys, flags and lists: nothing grows with Nq*Nk except a block layout's tile list.
 */
#include "desc.h"
#include "kernel_params.h"
#include "mask.h"
#include "paths.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUSED_MAX_HEAD_DIM 256

/* Head dims the kernels are compiled for; a call uses the smallest bucket >= its dim. */
static const unsigned head_dim_buckets[] = {16, 32, 64, 80, 96, 128, 160, 192, 256};

/* Tile shapes per variant. CPU: rows per work-item (a multiple of 16: the lanes of its
 * vectors are query rows; fit_cpu_tiles may take fewer) and keys per tile; GPU: rows per
 * work-group (one per work-item) and the largest key tile local memory takes. */
static const struct {
    clattn_variant variant;
    unsigned block_m, block_n;
} tile_table[] = {
    {CLATTN_VARIANT_CPU, 32, 32},
    {CLATTN_VARIANT_GPU, 64, 32},
};

typedef struct fused_plan {
    clattn_variant variant;
    unsigned block_m, block_n, dqk_pad, dv_pad;
    size_t group_size;       /* work-items per work-group */
    int64_t classes;         /* the dilation classes keys and rows are grouped by (or 1) */
    int64_t class_slots;     /* packed key slots per class */
    int64_t tiles_per_class; /* query tiles per class */
    int globals_matter;      /* global tokens change the pattern (a window or dilation) */
} fused_plan;

/* Host-side shape of the pattern: what the kernels' lists hold. */
typedef struct fused_pattern {
    mask_spec mask;
    int32_t *gpos;     /* sorted global key positions */
    int32_t *row_list; /* query rows at global positions */
    size_t num_rows;
    int32_t *tile_ptr; /* CSR over (layout head, class, query tile) */
    int32_t *tile_idx;
    size_t num_lists, num_entries;
    uint64_t tiles_visited; /* per (b, h) group of layout heads, summed */
} fused_pattern;

/* ---------------------------------------------------------------- planning */

static unsigned bucket_for(size_t dim) {
    for (size_t i = 0; i < ARRAY_LEN(head_dim_buckets); i++)
        if (dim <= head_dim_buckets[i]) return head_dim_buckets[i];
    return 0;
}

/* desc->variant, else $CLATTN_KERNEL (cpu, gpu, auto or empty), else by device type. */
static clattn_status choose_variant(clattn_context *ctx, const clattn_attention_desc *d,
                                    clattn_variant *variant) {
    const char *env = getenv("CLATTN_KERNEL");
    *variant = (ctx->device.type & CL_DEVICE_TYPE_CPU) ? CLATTN_VARIANT_CPU : CLATTN_VARIANT_GPU;
    if (d->variant != CLATTN_VARIANT_AUTO)
        *variant = d->variant;
    else if (env && strcmp(env, "cpu") == 0)
        *variant = CLATTN_VARIANT_CPU;
    else if (env && strcmp(env, "gpu") == 0)
        *variant = CLATTN_VARIANT_GPU;
    else if (env && *env && strcmp(env, "auto") != 0)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "CLATTN_KERNEL=%s: expected cpu, gpu or auto", env);
    if (*variant != CLATTN_VARIANT_CPU && *variant != CLATTN_VARIANT_GPU)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "fused: unknown variant %d",
                         (int)*variant);
    return CLATTN_SUCCESS;
}

/* GPU variant: rows per work-group within the device's limit, key tiles within local memory
 * (K^T and V tiles: (dqk_pad + dv_pad) * block_n floats). */
static clattn_status fit_gpu_tiles(clattn_context *ctx, fused_plan *p) {
    while (p->block_m > ctx->device.max_work_group_size && p->block_m > 8) p->block_m /= 2;
    if (p->block_m > ctx->device.max_work_group_size)
        return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED,
                         "fused: work-groups of %zu work-items are too small for the GPU variant",
                         ctx->device.max_work_group_size);
    size_t reserve = 1024; /* the kernel's own local scalars */
    while (p->block_n >= 8 &&
           (size_t)(p->dqk_pad + p->dv_pad) * p->block_n * sizeof(float) + reserve >
               ctx->device.local_mem_bytes)
        p->block_n /= 2;
    if (p->block_n < 8)
        return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED,
                         "fused: %llu bytes of local memory cannot hold a key tile of head dims "
                         "%u+%u",
                         (unsigned long long)ctx->device.local_mem_bytes, p->dqk_pad, p->dv_pad);
    p->group_size = p->block_m;
    return CLATTN_SUCCESS;
}

/* How many classes keys and rows are grouped by. Grouping by dilation class makes the keys a
 * dilated window meets contiguous, so its tiles are dense; but every class is padded to whole
 * tiles, so it pays only while a class holds at least a tile of keys. Past that (a dilation
 * above Nk / block_n) there is one class and the window pass tests (p - j) mod d pair by pair:
 * memory and work stay those of the undilated window. */
static int64_t dilation_classes(const clattn_attention_desc *d, unsigned block_n) {
    int64_t dilation = desc_dilation(d);
    int64_t keys_per_class = ((int64_t)d->len_k + dilation - 1) / dilation;
    return keys_per_class >= (int64_t)block_n ? dilation : 1;
}

/* Query tiles per class for the plan's rows per tile. */
static int64_t query_tiles_per_class(const clattn_attention_desc *d, const fused_plan *p) {
    int64_t rows_per_class = ((int64_t)d->len_q + p->classes - 1) / p->classes;
    return (rows_per_class + p->block_m - 1) / p->block_m;
}

/* CPU variant: fewer rows per work-item (down to 16, one vector of rows) while the call has
 * fewer than CPU_ITEMS_PER_UNIT work-items per compute unit, so that every core stays busy
 * and finishes at about the same time however few heads and rows there are. */
#define CPU_ITEMS_PER_UNIT 8
static void fit_cpu_tiles(clattn_context *ctx, const clattn_attention_desc *d, fused_plan *p) {
    uint64_t units = ctx->device.compute_units ? ctx->device.compute_units : 1;
    while (p->block_m > 16 &&
           (uint64_t)(p->classes * query_tiles_per_class(d, p)) * d->batch * d->heads_q <
               CPU_ITEMS_PER_UNIT * units)
        p->block_m -= 16;
}

static clattn_status plan_tiles(clattn_context *ctx, const clattn_attention_desc *d,
                                fused_plan *p) {
    memset(p, 0, sizeof *p);
    if (d->dim_qk > FUSED_MAX_HEAD_DIM || d->dim_v > FUSED_MAX_HEAD_DIM)
        return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED,
                         "fused: head dims up to %d are supported (Dqk=%zu, Dv=%zu)",
                         FUSED_MAX_HEAD_DIM, d->dim_qk, d->dim_v);
    clattn_status status = choose_variant(ctx, d, &p->variant);
    if (status != CLATTN_SUCCESS) return status;
    for (size_t i = 0; i < ARRAY_LEN(tile_table); i++)
        if (tile_table[i].variant == p->variant) {
            p->block_m = tile_table[i].block_m;
            p->block_n = tile_table[i].block_n;
        }
    p->dqk_pad = bucket_for(d->dim_qk);
    p->dv_pad = bucket_for(d->dim_v);
    p->group_size = 1;
    if (p->variant == CLATTN_VARIANT_GPU) status = fit_gpu_tiles(ctx, p);
    if (status != CLATTN_SUCCESS) return status;
    p->classes = dilation_classes(d, p->block_n);
    int64_t keys_per_class = ((int64_t)d->len_k + p->classes - 1) / p->classes;
    p->class_slots = (keys_per_class + p->block_n - 1) / p->block_n * p->block_n;
    if (p->variant == CLATTN_VARIANT_CPU) fit_cpu_tiles(ctx, d, p);
    p->tiles_per_class = query_tiles_per_class(d, p);
    p->globals_matter = d->num_global_tokens > 0 &&
                        (d->window_left >= 0 || d->window_right >= 0 || desc_dilation(d) > 1);
    return CLATTN_SUCCESS;
}

clattn_status fused_supports(clattn_context *ctx, const clattn_attention_desc *d) {
    fused_plan plan;
    return plan_tiles(ctx, d, &plan);
}

/* ---------------------------------------------------------------- the pattern on the host */

static int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

/* Keys of class r: j = r + m*classes for m in [0, class_keys). */
static int64_t class_keys(const mask_spec *m, int64_t classes, int64_t r) {
    return r < m->len_k ? (m->len_k - 1 - r) / classes + 1 : 0;
}

/* First query row of class r (rows whose position p = i + offset is = r mod classes). */
static int64_t class_first_row(const mask_spec *m, int64_t classes, int64_t r) {
    return ((r - m->offset) % classes + classes) % classes;
}

/* The window pass's key tiles [first, last] for query tile t of class r, as the kernel
 * computes them (fused_common.cl row_key_range, fused_cpu.cl pass_ranges). */
static int window_tile_range(const mask_spec *m, const fused_plan *p, int64_t r, int64_t t,
                             int64_t *first, int64_t *last) {
    int64_t d = p->classes, lo_all = INT64_MAX, hi_all = -1;
    for (unsigned row = 0; row < p->block_m; row++) {
        int64_t i = class_first_row(m, d, r) + ((int64_t)t * p->block_m + row) * d;
        if (i >= m->len_q) break;
        int64_t own = floor_div(i + m->offset - r, d), lo = 0, hi = class_keys(m, d, r) - 1;
        if (m->left >= 0 && own - m->left / d > lo) lo = own - m->left / d;
        if (m->right >= 0 && own + m->right / d < hi) hi = own + m->right / d;
        if (m->causal && own < hi) hi = own;
        if (lo > hi) continue;
        lo_all = lo < lo_all ? lo : lo_all;
        hi_all = hi > hi_all ? hi : hi_all;
    }
    *first = lo_all / p->block_n;
    *last = hi_all / p->block_n;
    return hi_all >= lo_all;
}

/* 2-D prefix sums of one layout head: sums[(a)*(blocks_k+1) + b] = ones in [0,a) x [0,b). */
static uint32_t *layout_prefix_sums(const mask_spec *m, int64_t head) {
    size_t w = (size_t)m->blocks_k + 1;
    uint32_t *sums = calloc(((size_t)m->blocks_q + 1) * w, sizeof *sums);
    if (!sums) return NULL;
    const uint8_t *L = m->layout + head * m->blocks_q * m->blocks_k;
    for (int64_t a = 0; a < m->blocks_q; a++)
        for (int64_t b = 0; b < m->blocks_k; b++)
            sums[(a + 1) * w + b + 1] = sums[a * w + b + 1] + sums[(a + 1) * w + b] -
                                        sums[a * w + b] + (L[a * m->blocks_k + b] != 0);
    return sums;
}

/* The ones among the blocks covering rows [i0, i1] and keys [j0, j1], and how many blocks
 * that is. */
static uint32_t layout_ones(const mask_spec *m, const uint32_t *sums, int64_t i0, int64_t i1,
                            int64_t j0, int64_t j1, uint32_t *blocks) {
    size_t w = (size_t)m->blocks_k + 1;
    int64_t a0 = i0 / m->block_q, a1 = i1 / m->block_q + 1;
    int64_t b0 = j0 / m->block_k, b1 = j1 / m->block_k + 1;
    *blocks = (uint32_t)((a1 - a0) * (b1 - b0));
    return sums[a1 * w + b1] - sums[a0 * w + b1] - sums[a1 * w + b0] + sums[a0 * w + b0];
}

/* Appends the key tiles of query tile t (class r) whose block rectangle holds a one, as
 * kt * 2 + needs_pairs. The rectangle spans the tile's first to last row and key: exact
 * without dilation, a superset with it. A tile whose rectangle is all ones needs no per-pair
 * layout rule (needs_pairs = 0: the kernel still bounds it by the window and causality). */
static void list_tile(const mask_spec *m, const fused_plan *p, const uint32_t *sums, int64_t r,
                      int64_t t, fused_pattern *pat) {
    int64_t first, last, d = p->classes;
    if (!window_tile_range(m, p, r, t, &first, &last)) return;
    int64_t i0 = class_first_row(m, d, r) + t * p->block_m * d;
    int64_t i1 = i0 + ((int64_t)p->block_m - 1) * d;
    if (i1 > m->len_q - 1) i1 = m->len_q - 1;
    for (int64_t kt = first; kt <= last; kt++) {
        int64_t j0 = r + kt * p->block_n * d, j1 = r + ((kt + 1) * p->block_n - 1) * d;
        if (j1 > m->len_k - 1) j1 = m->len_k - 1;
        uint32_t blocks = 0, ones = layout_ones(m, sums, i0, i1, j0, j1, &blocks);
        int needs_pairs = ones < blocks || m->dilation > 1;
        if (ones > 0) pat->tile_idx[pat->num_entries++] = (int32_t)(kt * 2 + needs_pairs);
    }
}

/* CSR of key tiles per (layout head, class, query tile). */
static clattn_status build_tile_lists(clattn_context *ctx, const fused_plan *p, int64_t heads,
                                      fused_pattern *pat) {
    const mask_spec *m = &pat->mask;
    size_t per_head = (size_t)(p->classes * p->tiles_per_class), cap = 0;
    if (size_mul(per_head, (size_t)heads, &pat->num_lists) ||
        size_mul(pat->num_lists, (size_t)(p->class_slots / p->block_n), &cap) ||
        cap > INT32_MAX / 2)
        return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY,
                         "fused: key tile lists for %zu query tiles x %lld key tiles exceed 2^30 "
                         "entries",
                         pat->num_lists, (long long)(p->class_slots / p->block_n));
    pat->tile_ptr = malloc((pat->num_lists + 1) * sizeof *pat->tile_ptr);
    pat->tile_idx = malloc((cap ? cap : 1) * sizeof *pat->tile_idx);
    if (!pat->tile_ptr || !pat->tile_idx)
        return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "fused: key tile lists (%zu entries)", cap);
    size_t list = 0;
    for (int64_t h = 0; h < heads; h++) {
        uint32_t *sums = layout_prefix_sums(m, h);
        if (!sums) return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "fused: layout sums");
        for (int64_t r = 0; r < p->classes; r++)
            for (int64_t t = 0; t < p->tiles_per_class; t++) {
                pat->tile_ptr[list++] = (int32_t)pat->num_entries;
                list_tile(m, p, sums, r, t, pat);
            }
        free(sums);
    }
    pat->tile_ptr[list] = (int32_t)pat->num_entries;
    return CLATTN_SUCCESS;
}

static void pattern_release(fused_pattern *pat) {
    mask_release(&pat->mask);
    free(pat->gpos);
    free(pat->row_list);
    free(pat->tile_ptr);
    free(pat->tile_idx);
    memset(pat, 0, sizeof *pat);
}

/* Global key positions and the rows that sit on them (both sorted). */
static clattn_status build_global_lists(clattn_context *ctx, fused_pattern *pat) {
    const mask_spec *m = &pat->mask;
    pat->gpos = malloc(((size_t)m->num_globals + 1) * sizeof *pat->gpos);
    pat->row_list = malloc(((size_t)m->num_globals + 1) * sizeof *pat->row_list);
    if (!pat->gpos || !pat->row_list)
        return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "fused: global token lists");
    for (int64_t g = 0; g < m->num_globals; g++) {
        pat->gpos[g] = (int32_t)m->globals[g];
        int64_t i = m->globals[g] - m->offset;
        if (i >= 0 && i < m->len_q) pat->row_list[pat->num_rows++] = (int32_t)i;
    }
    return CLATTN_SUCCESS;
}

/* Key tiles the kernels walk for one (b, h), summed over query tiles (the global-key and
 * global-row passes counted as dense over their keys). */
static uint64_t count_tiles_visited(const fused_plan *p, const fused_pattern *pat,
                                    int64_t heads_q) {
    const mask_spec *m = &pat->mask;
    uint64_t per_head = 0;
    if (m->layout) {
        per_head = pat->num_entries / (m->layout_per_head ? (uint64_t)heads_q : 1);
    } else {
        for (int64_t r = 0; r < p->classes; r++)
            for (int64_t t = 0; t < p->tiles_per_class; t++) {
                int64_t first, last;
                if (window_tile_range(m, p, r, t, &first, &last))
                    per_head += (uint64_t)(last - first + 1);
            }
    }
    if (p->globals_matter) {
        uint64_t global_tiles = ((uint64_t)m->num_globals + p->block_n - 1) / p->block_n;
        uint64_t row_tiles = (pat->num_rows + p->block_m - 1) / p->block_m;
        per_head += global_tiles * (uint64_t)(p->classes * p->tiles_per_class);
        per_head += row_tiles * (uint64_t)(p->classes * p->class_slots / p->block_n);
    }
    return per_head;
}

static clattn_status build_pattern(clattn_context *ctx, const clattn_attention_desc *d,
                                   const fused_plan *p, fused_pattern *pat) {
    memset(pat, 0, sizeof *pat);
    clattn_status status = mask_from_desc(d, &pat->mask);
    if (status != CLATTN_SUCCESS) return ctx_error(ctx, status, "fused: mask of the call");
    if (p->globals_matter) status = build_global_lists(ctx, pat);
    if (status == CLATTN_SUCCESS && d->block_layout)
        status = build_tile_lists(ctx, p, d->block_layout_per_head ? (int64_t)d->heads_q : 1, pat);
    if (status == CLATTN_SUCCESS)
        pat->tiles_visited = count_tiles_visited(p, pat, (int64_t)d->heads_q);
    return status;
}

/* ---------------------------------------------------------------- device buffers */

typedef struct fused_buffers {
    cl_mem params, params_rows, kp, vp, vbad, kg, vg, vbad_g, gpos, is_global, layout, tile_ptr,
        tile_idx, row_list, dummy;
    uint64_t bytes; /* what this call allocated */
} fused_buffers;

static void buffers_release(fused_buffers *fb) {
    cl_mem all[] = {fb->params, fb->params_rows, fb->kp,       fb->vp,       fb->vbad,
                    fb->kg,     fb->vg,          fb->vbad_g,   fb->gpos,     fb->is_global,
                    fb->layout, fb->tile_ptr,    fb->tile_idx, fb->row_list, fb->dummy};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        if (all[i]) clReleaseMemObject(all[i]);
}

/* A buffer of `bytes` (copied from `host` when given); NULL host and 0 bytes give the dummy. */
static clattn_status add_buffer(clattn_context *ctx, fused_buffers *fb, size_t bytes,
                                const void *host, cl_mem *out, const char *what) {
    if (bytes == 0) {
        *out = NULL;
        if (fb->dummy) clRetainMemObject(fb->dummy);
        *out = fb->dummy;
        return CLATTN_SUCCESS;
    }
    cl_mem_flags flags = host ? CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR : CL_MEM_READ_WRITE;
    clattn_status status = buffer_create(ctx, flags, bytes, (void *)host, out, what);
    if (status == CLATTN_SUCCESS) fb->bytes += bytes;
    return status;
}

/* The context's reusable buffer for `slot`; counted in the call's device bytes all the same. */
static clattn_status add_workspace(clattn_context *ctx, fused_buffers *fb, int slot, size_t bytes,
                                   cl_mem *out, const char *what) {
    clattn_status status = workspace_get(ctx, slot, bytes, out, what);
    if (status == CLATTN_SUCCESS) fb->bytes += bytes;
    return status;
}

/* Packed key bytes: B*Hkv*slots*pad floats, checked for overflow. */
static size_t packed_bytes(const clattn_attention_desc *d, int64_t slots, unsigned pad) {
    size_t n = 0;
    if (size_mul(d->batch * d->heads_kv, (size_t)slots, &n) || size_mul(n, pad, &n) ||
        size_mul(n, sizeof(float), &n))
        return SIZE_MAX;
    return n;
}

static clattn_status make_buffers(clattn_context *ctx, const clattn_attention_desc *d,
                                  const fused_plan *p, const fused_pattern *pat,
                                  const attn_params *params, const attn_params *params_rows,
                                  fused_buffers *fb) {
    const mask_spec *m = &pat->mask;
    int64_t slots = p->classes * p->class_slots, gslots = params->global_slots;
    size_t layout_bytes =
        m->layout ? (size_t)((m->layout_per_head ? d->heads_q : 1) * m->blocks_q * m->blocks_k) : 0;
    clattn_status s = buffer_create(ctx, CL_MEM_READ_WRITE, 16, NULL, &fb->dummy, "placeholder");
    if (!s) s = add_buffer(ctx, fb, sizeof *params, params, &fb->params, "parameters");
    if (!s)
        s = add_buffer(ctx, fb, sizeof *params_rows, params_rows, &fb->params_rows, "parameters");
    if (!s)
        s = add_workspace(ctx, fb, WORKSPACE_PACKED_K, packed_bytes(d, slots, p->dqk_pad), &fb->kp,
                          "packed K");
    if (!s)
        s = add_workspace(ctx, fb, WORKSPACE_PACKED_V, packed_bytes(d, slots, p->dv_pad), &fb->vp,
                          "packed V");
    if (!s) s = add_buffer(ctx, fb, packed_bytes(d, gslots, p->dqk_pad), NULL, &fb->kg, "global K");
    if (!s) s = add_buffer(ctx, fb, packed_bytes(d, gslots, p->dv_pad), NULL, &fb->vg, "global V");
    /* one flag byte per packed slot: its V row holds a NaN or an infinity */
    if (!s)
        s = add_workspace(ctx, fb, WORKSPACE_V_FLAGS, (size_t)(d->batch * d->heads_kv * slots),
                          &fb->vbad, "V flags");
    if (!s)
        s = add_buffer(ctx, fb, (size_t)(d->batch * d->heads_kv * gslots), NULL, &fb->vbad_g,
                       "V flags");
    if (!s && p->globals_matter)
        s = add_buffer(ctx, fb, (size_t)m->num_globals * 4, pat->gpos, &fb->gpos, "global list");
    else if (!s)
        s = add_buffer(ctx, fb, 0, NULL, &fb->gpos, "");
    if (!s)
        s = add_buffer(ctx, fb, p->globals_matter ? (size_t)m->len_k : 0, m->is_global,
                       &fb->is_global, "global flags");
    if (!s) s = add_buffer(ctx, fb, layout_bytes, m->layout, &fb->layout, "block layout");
    if (!s)
        s = add_buffer(ctx, fb, pat->tile_ptr ? (pat->num_lists + 1) * 4 : 0, pat->tile_ptr,
                       &fb->tile_ptr, "tile lists");
    if (!s)
        s = add_buffer(ctx, fb, pat->num_entries * 4, pat->tile_idx, &fb->tile_idx, "tile lists");
    if (!s) s = add_buffer(ctx, fb, pat->num_rows * 4, pat->row_list, &fb->row_list, "global rows");
    return s;
}

/* ---------------------------------------------------------------- launching */

static void fill_params(const clattn_attention_desc *d, const fused_plan *p,
                        const fused_pattern *pat, const attention_buffers *buf, attn_params *P,
                        attn_params *P_rows) {
    params_from_desc(d, buf->lse != NULL, P);
    P->has_bias = buf->bias != NULL;
    P->has_global = p->globals_matter;
    P->num_global = p->globals_matter ? pat->mask.num_globals : 0;
    P->class_slots = p->class_slots;
    P->classes = p->classes;
    P->global_slots = (P->num_global + p->block_n - 1) / p->block_n * p->block_n;
    P->tiles_per_class = p->tiles_per_class;
    P->use_tile_list = d->block_layout != NULL;
    *P_rows = *P;
    P_rows->row_mode = 1;
    P_rows->num_listed_rows = (cl_long)pat->num_rows;
}

static clattn_status get_kernels(clattn_context *ctx, const clattn_attention_desc *d,
                                 const fused_plan *p, cl_kernel *pack, cl_kernel *attention) {
    static const char *const pack_files[] = {"common.cl", "fused_common.cl", "pack.cl"};
    static const char *const cpu_files[] = {"common.cl", "fused_common.cl", "fused_cpu.cl"};
    static const char *const gpu_files[] = {"common.cl", "fused_common.cl", "fused_gpu.cl"};
    char pack_defines[160], defines[256];
    int cpu = p->variant == CLATTN_VARIANT_CPU; /* K as rows for the CPU variant (pack.cl) */
    snprintf(pack_defines, sizeof pack_defines,
             "-DBLOCK_N=%u -DDQK_PAD=%u -DDV_PAD=%u -DIN_F16=%d -DKEY_ROWS=%d", p->block_n,
             p->dqk_pad, p->dv_pad, d->dtype == CLATTN_F16, cpu);
    snprintf(defines, sizeof defines, "%s -DBLOCK_M=%u -DOUT_F16=%d", pack_defines, p->block_m,
             d->out_dtype == CLATTN_F16);
    clattn_status status =
        kernel_get(ctx, pack_files, ARRAY_LEN(pack_files), pack_defines, "pack_keys", pack);
    if (status != CLATTN_SUCCESS) return status;
    return kernel_get(ctx, cpu ? cpu_files : gpu_files, 3, defines,
                      cpu ? "attention_cpu" : "attention_gpu", attention);
}

static clattn_status launch_pack(clattn_context *ctx, cl_kernel kernel, const fused_buffers *fb,
                                 const attention_buffers *buf, const clattn_attention_desc *d,
                                 int from_list, int64_t slots, cl_mem kp, cl_mem vp, cl_mem vbad) {
    cl_int list = from_list;
    cl_long count = slots;
    kernel_args a = {kernel, 0, CL_SUCCESS};
    KARG(a, fb->params);
    KARG(a, buf->k);
    KARG(a, buf->v);
    KARG(a, fb->gpos);
    KARG(a, list);
    KARG(a, count);
    KARG(a, kp);
    KARG(a, vp);
    KARG(a, vbad);
    if (a.err != CL_SUCCESS) return ctx_cl_error(ctx, a.err, "fused: pack arguments");
    size_t global[2] = {(size_t)slots, d->batch * d->heads_kv};
    return kernel_launch(ctx, kernel, 2, global, NULL, NULL, "fused: packing K and V");
}

static clattn_status launch_attention(clattn_context *ctx, cl_kernel kernel, const fused_plan *p,
                                      const fused_buffers *fb, const attention_buffers *buf,
                                      cl_mem params, size_t tiles, size_t heads, float q_scale,
                                      cl_event *event) {
    cl_mem lse = buf->lse ? buf->lse : fb->dummy, bias = buf->bias ? buf->bias : fb->dummy;
    kernel_args a = {kernel, 0, CL_SUCCESS};
    KARG(a, params);
    KARG(a, buf->q);
    KARG(a, fb->kp);
    KARG(a, fb->vp);
    KARG(a, fb->vbad);
    KARG(a, fb->kg);
    KARG(a, fb->vg);
    KARG(a, fb->vbad_g);
    KARG(a, fb->gpos);
    KARG(a, buf->o);
    KARG(a, lse);
    KARG(a, bias);
    KARG(a, fb->is_global);
    KARG(a, fb->layout);
    KARG(a, fb->tile_ptr);
    KARG(a, fb->tile_idx);
    KARG(a, fb->row_list);
    KARG(a, q_scale);
    if (a.err != CL_SUCCESS) return ctx_cl_error(ctx, a.err, "fused: attention arguments");
    size_t global[2] = {tiles * p->group_size, heads}, local[2] = {p->group_size, 1};
    return kernel_launch(ctx, kernel, 2, global, local, event, "fused: attention");
}

static clattn_status run_kernels(clattn_context *ctx, const clattn_attention_desc *d,
                                 const fused_plan *p, const fused_pattern *pat,
                                 const fused_buffers *fb, const attn_params *P,
                                 const attention_buffers *buf, cl_event *event) {
    cl_kernel pack = NULL, attention = NULL;
    clattn_status status = get_kernels(ctx, d, p, &pack, &attention);
    int global_rows = p->globals_matter && pat->num_rows > 0;
    float q_scale = desc_scale(d); /* scores in the natural domain: finite stays finite */
    size_t heads = d->batch * d->heads_q;
    if (!status)
        status = launch_pack(ctx, pack, fb, buf, d, 0, p->classes * p->class_slots, fb->kp, fb->vp,
                             fb->vbad);
    if (!status && P->global_slots > 0)
        status = launch_pack(ctx, pack, fb, buf, d, 1, P->global_slots, fb->kg, fb->vg, fb->vbad_g);
    if (!status)
        status = launch_attention(ctx, attention, p, fb, buf, fb->params,
                                  (size_t)(p->classes * p->tiles_per_class), heads, q_scale,
                                  global_rows ? NULL : event);
    if (!status && global_rows)
        status =
            launch_attention(ctx, attention, p, fb, buf, fb->params_rows,
                             (pat->num_rows + p->block_m - 1) / p->block_m, heads, q_scale, event);
    return status;
}

static void record_stats(clattn_context *ctx, const clattn_attention_desc *d, const fused_plan *p,
                         const fused_pattern *pat, uint64_t bytes) {
    stats_start(ctx, CLATTN_PATH_FUSED, p->variant, d, &pat->mask, bytes);
    clattn_stats *s = &ctx->stats;
    uint64_t groups = d->batch * d->heads_q;
    s->tiles_visited = pat->tiles_visited * groups;
    s->tiles_total = groups * ((d->len_q + p->block_m - 1) / p->block_m) *
                     ((d->len_k + p->block_n - 1) / p->block_n);
    s->block_m = p->block_m;
    s->block_n = p->block_n;
    snprintf(s->kernel, sizeof s->kernel, "fused-%s bm%u bn%u d%u/%u %s",
             p->variant == CLATTN_VARIANT_CPU ? "cpu" : "gpu", p->block_m, p->block_n, p->dqk_pad,
             p->dv_pad, d->dtype == CLATTN_F16 ? "f16" : "f32");
}

clattn_status fused_attention(clattn_context *ctx, const clattn_attention_desc *d,
                              const attention_buffers *buf, cl_event *event) {
    fused_plan plan;
    fused_pattern pat;
    fused_buffers fb;
    attn_params P, P_rows;
    memset(&fb, 0, sizeof fb);
    memset(&pat, 0, sizeof pat);
    clattn_status status = plan_tiles(ctx, d, &plan);
    if (!status) status = build_pattern(ctx, d, &plan, &pat);
    if (!status) {
        fill_params(d, &plan, &pat, buf, &P, &P_rows);
        status = make_buffers(ctx, d, &plan, &pat, &P, &P_rows, &fb);
    }
    if (!status) status = run_kernels(ctx, d, &plan, &pat, &fb, &P, buf, event);
    if (!status) {
        record_stats(ctx, d, &plan, &pat, fb.bytes);
        log_msg("fused: %s, %llu of %llu key tiles", ctx->stats.kernel,
                (unsigned long long)ctx->stats.tiles_visited,
                (unsigned long long)ctx->stats.tiles_total);
    }
    buffers_release(&fb);
    pattern_release(&pat);
    return status;
}
