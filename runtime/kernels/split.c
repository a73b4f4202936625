/*
 * The split variant (cl/split.cl): K and V read in place - the call's tensors, or a KV cache's
 * contiguous or paged storage with a length per sequence - in blocks of query rows of one kv
 * head, with each sequence's keys split into chunks that run side by side and are merged
 * exactly afterwards. It serves every call over a KV cache, and `auto` takes it for calls with
 * few query rows a kv head (decoding, speculative decoding), where the fused variants, which
 * parallelise over query tiles and pack K and V first, leave the device idle.
 *
 * Two forms of the kernel, by the tuning entry's wg_size: 1, a work-item a row block and chunk
 * (attention_split: CPUs, where a work-item's 16-wide vectors are the parallelism); a power of two,
 * a work-group of that many work-items a row block and chunk, a key each, sharing the scores
 * through local memory (attention_split_group: GPUs, whose lanes would sit idle in the first).
 *
 * Planning: BLOCK_R, the rows a work-item (or work-group) holds, from the tuning entry (block_m)
 * and the rows a kv head has; the chunk count so that the device is full (the entry's `split`,
 * or SPLIT_ITEMS_PER_UNIT work-items or SPLIT_GROUPS_PER_UNIT work-groups a compute unit by
 * default) without chunks shorter than block_n keys, which keeps the merge small; and on a
 * device that ends loops early (Mesa's llvmpipe, kernels/compilers.c), chunks no longer than
 * its loop budget allows a work-item.
 */
#include "kernels/compilers.h"
#include "kernels/variant.h"
#include "plan/params.h"
#include "plan/tiles.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct split_plan {
    unsigned block_r;         /* query rows a work-item (work-group): a power of two */
    unsigned group;           /* work-items a work-group: 1, or attention_split_group's */
    unsigned dqk_pad, dv_pad; /* head-dim buckets */
    size_t rows;              /* query rows a (b, kv head): Nq * group */
    size_t row_blocks;        /* ceil(rows / block_r) */
    size_t chunks, chunk_len; /* key chunks a row, keys a chunk */
    size_t max_keys;          /* the longest sequence the call may have */
} split_plan;

/* ---------------------------------------------------------------- the row */

extern const attn_variant variant_split; /* the row, at the end of the file */
extern const attn_variant variant_lanes; /* take long wide calls on the devices they serve */
extern const attn_variant variant_flash;

/* Head dims past the fused tiles' 256, up to DeepSeek's MLA (Dqk 576, Dv 512,
 * tiles_wide_head_dim_bucket): a work-item holds its rows' q and O in private memory (no local
 * memory), BLOCK_R capped at SPLIT_WIDE_ROWS. */
#define SPLIT_WIDE_ROWS 2

/* The default chunk count fills each compute unit with this many work-items (the work-item form)
 * or work-groups (the work-group form: enough warps to keep loads in flight on a GPU). */
#define SPLIT_ITEMS_PER_UNIT  4
#define SPLIT_GROUPS_PER_UNIT 8
#define SPLIT_MAX_GROUP       256

/* auto's limit: query rows a kv head (the packed variants' tiles hold 16 or 32) */
#define SPLIT_AUTO_ROWS 16

/* auto's limit past head dim 256 where lanes serves the device: query rows a head. From 12 on,
 * lanes' 16-row tiles of each head beat split's rows of a kv head (at 576/512: 12 rows 30 against
 * 45 ms, 8 rows 35 against 24 ms, bench/README.md). */
#define SPLIT_WIDE_AUTO_QUERIES 11

static int supports(const clattn_context *ctx, const attn_problem *pb, char *why, size_t size) {
    if (!pb || (pb->dim_qk <= TILES_MAX_WIDE_HEAD_DIM && pb->dim_v <= TILES_MAX_WIDE_HEAD_DIM))
        return 1;
    snprintf(why, size, "head dims up to %d are compiled (Dqk=%zu, Dv=%zu)",
             TILES_MAX_WIDE_HEAD_DIM, pb->dim_qk, pb->dim_v);
    return 0;
}

/* Whether a tiled variant takes a call with head dims past 256 on this device: lanes (CPUs) or
 * flash (GPUs, the head dim in pieces), where it serves the device and its compiler builds it.
 * Elsewhere split keeps them. */
static int tiles_take_wide(const clattn_device_info *device, const attn_problem *pb) {
    static const attn_variant *const tiled[] = {&variant_lanes, &variant_flash};
    char why[256];
    for (size_t i = 0; i < ARRAY_LEN(tiled); i++)
        if (!compiler_refuses(device, tiled[i]->name, why, sizeof why) &&
            tiled[i]->suits(device, pb, why, sizeof why))
            return 1;
    return 0;
}

/* Over a KV cache and q8_0 or q4_0 K/V always (no other variant reads them), and for rows longer
 * than the others walk within the device's loop budget. Else, unless the
 * device's compiler builds it only slowly (kernels/compilers.c): up to head dim 256 while a kv
 * head has at most SPLIT_AUTO_ROWS query rows, where the fused variants' query tiles would leave
 * most of the device idle; past it, while a head has at most SPLIT_WIDE_AUTO_QUERIES rows, and
 * always on devices that neither lanes nor flash serves. */
static int suits(const clattn_device_info *device, const attn_problem *pb, char *why, size_t size) {
    int only_split =
        pb && (problem_is_cache(pb) || dtype_is_quantised(pb->kv.dtype) ||
               loop_budget_leaves_only(device, "split", pb->len_k, pb->dim_qk, pb->dim_v));
    char slow[256];
    if (!only_split && compiler_is_slow(device, "split", slow, sizeof slow)) {
        snprintf(why, size,
                 "auto uses it only over KV caches, for q8_0 or q4_0 K/V and for rows longer "
                 "than the loop budget lets the others walk here: %s",
                 slow);
        return 0;
    }
    if (!pb || only_split) return 1;
    int wide = pb->dim_qk > TILES_MAX_HEAD_DIM || pb->dim_v > TILES_MAX_HEAD_DIM;
    if (!wide && pb->len_q * pb->group <= SPLIT_AUTO_ROWS) return 1;
    if (wide && (pb->len_q <= SPLIT_WIDE_AUTO_QUERIES || !tiles_take_wide(device, pb))) return 1;
    snprintf(why, size,
             "auto uses it over KV caches, for q8_0 and q4_0 K/V, for at most %d query rows a kv "
             "head, and past head dim %d for at most %d query rows a head or where neither lanes "
             "nor flash serves (this call has %zu rows a head, %zu a kv head)",
             SPLIT_AUTO_ROWS, TILES_MAX_HEAD_DIM, SPLIT_WIDE_AUTO_QUERIES, pb->len_q,
             pb->len_q * pb->group);
    return 0;
}

static unsigned pow2_at_least(size_t n, unsigned cap) {
    unsigned p = 1;
    while (p < n && p < cap) p *= 2;
    return p;
}

/* Local memory of the work-group form: the queries (then the chunk's O, in the same place),
 * and the weights and scratch of a tile. */
static size_t group_local_bytes(const split_plan *p) {
    const size_t width = p->dqk_pad > p->dv_pad ? p->dqk_pad : p->dv_pad;
    return ((size_t)p->block_r * width + 2 * (size_t)p->block_r * p->group) * sizeof(float);
}

/* Whether the device takes the plan's work-group: its size and its local memory; and whether
 * it has a work-item for each 16 columns of O (cl/split.cl's key lanes). */
static int group_fits(const clattn_device_info *device, const split_plan *p) {
    return p->group <= device->max_work_group_size && p->group * 16 >= p->dv_pad &&
           group_local_bytes(p) <= device->local_mem_bytes;
}

/* The work-group size: 1 (the work-item form) when the entry says so; else the entry's, raised
 * to a work-item for each 16 columns of O, then halved while the device cannot take it (down to
 * 32 or that least); the work-item form where even that does not fit. */
static void fit_group(const clattn_device_info *device, split_plan *p, unsigned wanted) {
    const unsigned least = pow2_at_least(p->dv_pad / 16, SPLIT_MAX_GROUP);
    p->group = wanted == 1 || wanted > least ? wanted : least;
    while (p->group > 32 && p->group > least && !group_fits(device, p)) p->group /= 2;
    if (!group_fits(device, p)) p->group = 1;
}

/* The fewest chunks that keep each work-item's walk within the device's loop budget
 * (kernels/compilers.c: llvmpipe), 1 where it has none. The budget's keys were measured at 8
 * rows a work-item; more rows cost more a key. */
static size_t chunks_within_loop_budget(const clattn_device_info *device, const attn_problem *pb,
                                        const split_plan *p) {
    size_t most = loop_budget_keys(device, "split", pb->dim_qk, pb->dim_v);
    if (most == SIZE_MAX) return 1;
    if (p->block_r > 8) most = most * 8 / p->block_r;
    return most ? (p->max_keys + most - 1) / most : p->max_keys;
}

static clattn_status plan(clattn_context *ctx, variant_plan *vp) {
    const attn_problem *pb = vp->problem;
    const tuning_params *tune = &vp->tuning;
    split_plan *p = calloc(1, sizeof *p);
    if (!p) return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "split: plan");
    vp->state = p;
    unsigned wg = tune->wg_size;
    if (tune->block_m < 1 || tune->block_m > 16 || tune->block_n < 16 || wg < 1 ||
        wg > SPLIT_MAX_GROUP || (wg & (wg - 1)) != 0)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "split: the tuning entry's block_m %u (rows a work-item, 1 to 16), "
                         "block_n %u (least keys a chunk, 16 or more) or wg_size %u (1 or a power "
                         "of two up to %d) is out of range",
                         tune->block_m, tune->block_n, wg, SPLIT_MAX_GROUP);
    p->dqk_pad = tiles_wide_head_dim_bucket(pb->dim_qk);
    p->dv_pad = tiles_wide_head_dim_bucket(pb->dim_v);
    p->rows = pb->len_q * pb->group;
    int wide = p->dqk_pad > TILES_MAX_HEAD_DIM || p->dv_pad > TILES_MAX_HEAD_DIM;
    p->block_r = pow2_at_least(p->rows, wide && tune->block_m > SPLIT_WIDE_ROWS ? SPLIT_WIDE_ROWS
                                                                                : tune->block_m);
    p->row_blocks = (p->rows + p->block_r - 1) / p->block_r;
    fit_group(&ctx->device, p, wg);
    p->max_keys = pb->len_k; /* the call's keys, or the longest sequence of a cache */
    if (pb->kv.seq_len) {
        p->max_keys = 1;
        for (size_t b = 0; b < pb->batch; b++)
            if ((size_t)pb->kv.seq_len[b] > p->max_keys) p->max_keys = (size_t)pb->kv.seq_len[b];
    }
    size_t items = p->row_blocks * pb->batch * pb->heads_kv;
    size_t per_unit = p->group > 1 ? SPLIT_GROUPS_PER_UNIT : SPLIT_ITEMS_PER_UNIT;
    size_t want = tune->split ? tune->split
                              : ((size_t)ctx->device.compute_units * per_unit + items - 1) / items;
    size_t most = (p->max_keys + tune->block_n - 1) / tune->block_n; /* chunks of block_n keys */
    p->chunks = want < 1 ? 1 : want > most ? most : want;
    if (p->chunks < 1) p->chunks = 1;
    size_t least = chunks_within_loop_budget(&ctx->device, pb, p);
    if (p->chunks < least) p->chunks = least;
    if (least > 1 && 2 * least >= device_loop_budget(&ctx->device)) /* merge_chunks walks twice */
        return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED,
                         "split: %zu keys need %zu chunks within the loop budget of %s, more "
                         "than the merge can walk",
                         p->max_keys, least, ctx->device.name);
    p->chunk_len = (p->max_keys + p->chunks - 1) / p->chunks;
    p->chunks = (p->max_keys + p->chunk_len - 1) / p->chunk_len;
    if (p->chunks > 1) /* the partial outputs and LSEs, for the host-memory probe */
        vp->device_bytes = (uint64_t)pb->batch * pb->heads_q * pb->len_q * p->chunks *
                           (pb->dim_v + 1) * sizeof(float);
    return CLATTN_SUCCESS;
}

static void release(variant_plan *vp) {
    free(vp->state);
}

/* ---------------------------------------------------------------- buffers and launches */

typedef struct split_buffers {
    buffer_set set;
    cl_mem params, seq_len, q_len, block_table, is_global, layout, o_part, lse_part;
} split_buffers;

/* The lengths and the block table: the cache's device copies, or uploads of the host arrays. */
static clattn_status sequence_buffers(clattn_context *ctx, const attn_problem *pb,
                                      const attn_buffers *buf, split_buffers *sb) {
    const kv_view *kv = &pb->kv;
    buffer_set *set = &sb->set;
    size_t b = pb->batch, table = kv->page_size ? pb->batch * kv->max_pages : 0;
    clattn_status s = CLATTN_SUCCESS;
    sb->seq_len = buf->seq_len, sb->q_len = buf->q_len, sb->block_table = buf->block_table;
    if (!sb->seq_len)
        s = buffer_set_add(ctx, set, kv->seq_len ? b : 0, 4, kv->seq_len, &sb->seq_len,
                           "sequence lengths");
    if (!s && !sb->q_len && kv->seq_len && !kv->q_len) { /* every sequence has Nq queries */
        int32_t *all = malloc(b * sizeof *all);
        for (size_t i = 0; all && i < b; i++) all[i] = (int32_t)pb->len_q;
        s = all ? buffer_set_add(ctx, set, b, 4, all, &sb->q_len, "query lengths")
                : ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "split: query lengths");
        free(all);
    } else if (!s && !sb->q_len) {
        s = buffer_set_add(ctx, set, kv->q_len ? b : 0, 4, kv->q_len, &sb->q_len, "query lengths");
    }
    if (!s && !sb->block_table)
        s = buffer_set_add(ctx, set, table, 4, kv->block_table, &sb->block_table, "block table");
    return s;
}

static clattn_status make_buffers(clattn_context *ctx, const attn_problem *pb, const split_plan *p,
                                  const attn_params *P, const attn_buffers *buf,
                                  split_buffers *sb) {
    const mask_spec *m = &pb->mask;
    buffer_set *set = &sb->set;
    size_t rows = pb->batch * pb->heads_q * pb->len_q, parts = p->chunks > 1 ? rows * p->chunks : 0;
    size_t layout_bytes =
        m->layout
            ? (size_t)((m->layout_per_head ? (int64_t)pb->heads_q : 1) * m->blocks_q * m->blocks_k)
            : 0;
    clattn_status s = params_buffer_add(ctx, set, P, pb, &sb->params);
    if (!s) s = sequence_buffers(ctx, pb, buf, sb);
    if (!s)
        s = buffer_set_add(ctx, set, mask_flag_bytes(m), 1, m->is_global, &sb->is_global,
                           "global flags");
    if (!s) s = buffer_set_add(ctx, set, layout_bytes, 1, m->layout, &sb->layout, "block layout");
    if (!s)
        s = buffer_set_add(ctx, set, parts * pb->dim_v, 4, NULL, &sb->o_part, "partial outputs");
    if (!s) s = buffer_set_add(ctx, set, parts, 8, NULL, &sb->lse_part, "partial (max, sum)");
    return s;
}

static clattn_status get_kernels(clattn_context *ctx, const attn_problem *pb, const split_plan *p,
                                 cl_kernel *attention, cl_kernel *merge) {
    static const char *const files[] = {ATTN_PRELUDE, "split.cl"};
    char defines[192];
    snprintf(defines, sizeof defines,
             "-DBLOCK_R=%u -DDQK_PAD=%u -DDV_PAD=%u -DGROUP=%u -DIN_DTYPE=%d -DKV_DTYPE=%d",
             p->block_r, p->dqk_pad, p->dv_pad, p->group, (int)pb->dtype, (int)pb->kv.dtype);
    const char *name = p->group > 1 ? "attention_split_group" : "attention_split";
    clattn_status status = kernel_get(ctx, files, ARRAY_LEN(files), defines, name, attention);
    if (status == CLATTN_SUCCESS && p->chunks > 1)
        status = kernel_get(ctx, files, ARRAY_LEN(files), defines, "merge_chunks", merge);
    return status;
}

static clattn_status launch_attention(clattn_context *ctx, cl_kernel kernel, const attn_problem *pb,
                                      const split_plan *p, const split_buffers *sb,
                                      const attn_buffers *buf, cl_event *event) {
    cl_mem placeholder = sb->set.placeholder;
    cl_mem bias = buf->bias ? buf->bias : placeholder, lse = buf->lse ? buf->lse : placeholder;
    kernel_args a = {kernel, 0, CL_SUCCESS};
    KARG(a, sb->params);
    KARG(a, buf->q);
    KARG(a, buf->k);
    KARG(a, buf->v);
    KARG(a, sb->seq_len);
    KARG(a, sb->q_len);
    KARG(a, sb->block_table);
    KARG(a, bias);
    KARG(a, sb->is_global);
    KARG(a, sb->layout);
    KARG(a, sb->o_part);
    KARG(a, sb->lse_part);
    KARG(a, buf->o);
    KARG(a, lse);
    KARG(a, pb->scale);
    if (a.err != CL_SUCCESS) return ctx_cl_error(ctx, a.err, "split: attention arguments");
    size_t global[2] = {p->row_blocks * p->chunks * p->group, pb->batch * pb->heads_kv};
    size_t local[2] = {p->group, 1};
    return kernel_launch(ctx, kernel, 2, global, local, event, "split: attention");
}

static clattn_status launch_merge(clattn_context *ctx, cl_kernel kernel, const attn_problem *pb,
                                  const split_buffers *sb, const attn_buffers *buf,
                                  cl_event *event) {
    cl_mem lse = buf->lse ? buf->lse : sb->set.placeholder;
    kernel_args a = {kernel, 0, CL_SUCCESS};
    KARG(a, sb->params);
    KARG(a, sb->q_len);
    KARG(a, sb->o_part);
    KARG(a, sb->lse_part);
    KARG(a, buf->o);
    KARG(a, lse);
    if (a.err != CL_SUCCESS) return ctx_cl_error(ctx, a.err, "split: merge arguments");
    size_t global[2] = {pb->dim_v, pb->batch * pb->heads_q * pb->len_q};
    return kernel_launch_padded(ctx, kernel, 2, global, event, "split: merging the chunks");
}

static clattn_status run(clattn_context *ctx, const variant_plan *vp, const attn_buffers *buf,
                         cl_event *event, clattn_stats *stats) {
    const attn_problem *pb = vp->problem;
    const split_plan *p = vp->state;
    split_buffers sb;
    attn_params P;
    cl_kernel attention = NULL, merge = NULL;
    cl_mem placeholder = NULL; /* stands in for an absent bias or LSE */
    memset(&sb, 0, sizeof sb);
    params_from_problem(pb, vp->write_lse, &P);
    P.chunks = (cl_long)p->chunks;
    P.chunk_len = (cl_long)p->chunk_len;
    P.row_blocks = (cl_long)p->row_blocks;
    clattn_status status = buffer_set_placeholder(ctx, &sb.set, &placeholder);
    if (!status) status = make_buffers(ctx, pb, p, &P, buf, &sb);
    if (!status) status = get_kernels(ctx, pb, p, &attention, &merge);
    if (!status)
        status = launch_attention(ctx, attention, pb, p, &sb, buf, p->chunks > 1 ? NULL : event);
    if (!status && p->chunks > 1) status = launch_merge(ctx, merge, pb, &sb, buf, event);
    if (!status) {
        stats->block_m = p->block_r;
        stats->block_n = (unsigned)p->chunk_len;
        stats->chunks = (unsigned)p->chunks;
        stats->device_bytes = sb.set.bytes;
        snprintf(stats->kernel, sizeof stats->kernel,
                 "split r%u g%u x%zu chunks of %zu d%u/%u %s/%s", p->block_r, p->group, p->chunks,
                 p->chunk_len, p->dqk_pad, p->dv_pad, dtype_name(pb->dtype),
                 dtype_name(pb->kv.dtype));
    }
    buffer_set_release(&sb.set);
    return status;
}

/* Up to block_m query rows a work-item (work-group), chunks of at least block_n keys, wg_size
 * work-items a work-group. CPUs: the work-item form; 8 rows rather than 16: on PoCL (AVX-512) 16
 * rows' scores and accumulators no longer fit the registers, so a kv head's 16 rows ran no faster
 * in one work-item than in two, and its kernel took half as long again to compile
 * (bench/README.md, issue 31). GPUs: work-groups of 128, a tile of 128 keys. */
static const tuning_default defaults[] = {
    {CL_DEVICE_TYPE_GPU, "", "", {.block_m = 8, .block_n = 128, .wg_size = 128, .vector = 1}},
    {CL_DEVICE_TYPE_ALL, "", "", {.block_m = 8, .block_n = 256, .wg_size = 1, .vector = 16}},
};

const attn_variant variant_split = {
    .id = CLATTN_VARIANT_SPLIT,
    .name = "split",
    .path = CLATTN_PATH_FUSED,
    .summary = "K/V read in place (tensors or KV caches, paged), key chunks side by side, merged",
    .defaults = defaults,
    .num_defaults = ARRAY_LEN(defaults),
    .supports = supports,
    .suits = suits,
    .plan = plan,
    .run = run,
    .release = release,
};
