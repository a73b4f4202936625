/*
 * What the fused variants (lanes.c, rowwise.c) share: one tiled kernel with an online
 * softmax that never holds the Nq x Nk scores, after K and V are packed into float32 tiles
 * (cl/pack.cl). A variant is its kernel file and the way its tiles fit a device; the planning of
 * the tiles (plan/tiles.h), the packing, the buffers and the launches are common.
 *
 * Device memory per call: the packed K and V (B*Hkv*Nk*(Dqk+Dv) floats, padded), the global
 * keys and flags; where the kernel reads K and V in place (lanes, float32 rows that are already
 * the packed layout), only each class's last partial key tile; the tile lists are
 * the context's (tile_cache.h), built once per pattern; where lanes folds a few global rows into
 * the window pass, their partial sums (B*Hq*(Nq/block_m)*4*(Dv+2) floats, at most K and V's size).
 * Nothing grows with Nq*Nk except a block layout's tile list.
 */
#ifndef CLATTN_PACKED_H
#define CLATTN_PACKED_H

#include "kernels/tile_cache.h"
#include "kernels/variant.h"

struct packed_state;

typedef struct packed_kind {
    const char *kernel_file; /* "lanes.cl" */
    const char *kernel_name; /* "attention_lanes" */
    int key_rows;            /* K packed as rows like V (cl/pack.cl key_rows), not as K^T tiles */
    int global_program;      /* calls with global tokens get a program of their own
                                (-DGLOBAL_TOKENS=1: cl/lanes.cl's tiles for them) */
    int fold_rows;           /* its window tiles can fold in a few global rows (fold_rows) */
    unsigned max_head_dim;   /* TILES_MAX_HEAD_DIM, or TILES_MAX_WIDE_HEAD_DIM (plan/tiles.h) */
    /* Fits the tuned tile shape (st->block_m, block_n) to `limits` and the call and sets the
     * work-group size and the local memory it counts; CLATTN_ERR_UNSUPPORTED (or
     * INVALID_ARGUMENT for a tuning entry the kernel cannot take) with the reason on ctx when
     * no tile fits. */
    clattn_status (*fit)(clattn_context *ctx, const variant_plan *plan, const launch_limits *limits,
                         struct packed_state *st);
} packed_kind;

typedef struct packed_state {
    const packed_kind *kind;
    unsigned block_m, block_n; /* query rows and keys of a tile */
    unsigned dqk_pad, dv_pad;  /* head-dim buckets the kernels are compiled for */
    int in_place;              /* K and V read where they lie (reads_in_place), not packed */
    int plain;                 /* plain programs serve the call (plan/params.h, params_plain) */
    int fold_rows;             /* the window tiles fold the global rows in (packed.c) */
    size_t group_size;         /* work-items a work-group */
    uint64_t local_counted;    /* local memory the fit counted against the limits, bytes */
    tile_geometry geometry;
    tile_cache_entry *entry; /* the context's cached lists, held until release */
    const device_lists *lists;
} packed_state;

/* Whether the kind's kernel serves the call (float K and V, no KV cache, head dims up to its
 * max_head_dim); writes why not. */
int packed_supports(const attn_problem *pb, const packed_kind *kind, char *why, size_t size);
clattn_status packed_plan(clattn_context *ctx, variant_plan *plan, const packed_kind *kind);
clattn_status packed_run(clattn_context *ctx, const variant_plan *plan, const attn_buffers *buf,
                         cl_event *event, clattn_stats *stats);
void packed_release(variant_plan *plan);

#endif
