/*
 * Running a kernel of flash.cl's arguments over tile_walk.cl's walk (flash, nv_mma): the
 * window pass (with the global keys), then the rows at global positions, with their parameter
 * blocks, the lists of the context's tile cache, the optional tile counter, and the statistics
 * every such kernel reports.
 */
#ifndef CLATTN_WALK_LAUNCH_H
#define CLATTN_WALK_LAUNCH_H

#include "kernels/tile_cache.h"
#include "kernels/variant.h"

/* A planned walk kernel: its query tile, work-group and lists. */
typedef struct walk_launch {
    const char *name; /* the variant's, for messages */
    cl_kernel kernel;
    size_t group_size;
    unsigned block_m, block_n;
    const tile_geometry *geometry;
    const device_lists *lists;
} walk_launch;

/* Whether offsets within a key tile (32-bit in the kernels) fit pb's K and V strides. */
int walk_tile_offsets_fit(const attn_problem *pb, unsigned block_n, long classes);

/* Enqueues both passes and fills the walk's part of *stats (tiles, pairs, block sizes, device
 * bytes); the caller names the kernel in stats->kernel. */
clattn_status walk_launch_run(clattn_context *ctx, const variant_plan *plan, const walk_launch *w,
                              const attn_buffers *buf, cl_event *event, clattn_stats *stats);

#endif
