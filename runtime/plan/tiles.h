/*
 * What the fused kernels walk, planned on the host: the tile geometry of a call (query tiles of
 * BLOCK_M rows, key tiles of BLOCK_N keys, keys and rows grouped by dilation class) and, from
 * the mask, the lists the kernels read: for a block layout, the key tiles of each query tile that
 * hold an allowed pair (CSR); for global tokens, the global keys and the rows that sit on them.
 *
 * A call runs up to three passes, which together cover the contract's allowed set, each pair once
 * (cl/tile_walk.cl): the window pass (query tiles of a class against the key tiles of that
 * class inside the window, or the listed ones), the global-key pass (the same rows against the
 * packed global keys) and the global-row pass (the rows at global positions against every key).
 * tiles_count_walk counts the key tiles those passes visit exactly as the kernels do, which a
 * test compares with the count the kernels make themselves.
 */
#ifndef CLATTN_TILES_H
#define CLATTN_TILES_H

#include "plan/problem.h"

/* Head dims the kernels are compiled for: a call uses the smallest bucket at least its dim
 * (zero padded), up to TILES_MAX_HEAD_DIM; 0 above that. */
#define TILES_MAX_HEAD_DIM 256
unsigned tiles_head_dim_bucket(size_t dim);

/* Head dims of the kernels that hold a tile's query rows in private memory (lanes, split):
 * past TILES_MAX_HEAD_DIM in buckets of 64, up to DeepSeek's MLA (Dqk 576, Dv 512); 0 above. */
#define TILES_MAX_WIDE_HEAD_DIM 576
unsigned tiles_wide_head_dim_bucket(size_t dim);

/* The most rows a query tile may have (the planners stay below it). */
#define TILES_MAX_BLOCK_M 1024

typedef struct tile_geometry {
    unsigned block_m, block_n; /* query rows a tile, keys a tile */
    int64_t classes;           /* the dilation classes keys and rows are grouped by (or 1) */
    int64_t class_slots;       /* packed key slots a class: a multiple of block_n */
    int64_t tiles_per_class;   /* query tiles a class */
    int globals_matter;        /* global tokens change the pattern (a window or a dilation) */
} tile_geometry;

/* The geometry of a call for tiles of block_m x block_n. Grouping by dilation class makes the
 * keys a dilated window meets contiguous, so its tiles are dense; but each class is padded to
 * whole tiles, so it pays only while a class holds at least a tile of keys. Past that (a
 * dilation above Nk / block_n) there is one class and the window pass tests (p - j) mod d pair
 * by pair: memory and work stay those of the undilated window. */
void tiles_plan_geometry(const attn_problem *pb, unsigned block_m, unsigned block_n,
                         tile_geometry *g);

/* The lists of a call. */
typedef struct tile_lists {
    int32_t *gpos;     /* sorted global key positions [num_globals] */
    int32_t *row_list; /* query rows at global positions [num_rows] */
    size_t num_rows;
    int32_t *tile_ptr; /* CSR over (layout head, class, query tile): [num_lists + 1] */
    int32_t *tile_idx; /* entries kt * 2 + needs_pairs */
    size_t num_lists, num_entries;
    int64_t list_heads; /* layout heads the lists hold (heads_q for per-head layouts, else 1) */
} tile_lists;

/* Builds the lists the geometry and the mask call for (nothing without globals or a layout).
 * @return CLATTN_SUCCESS or CLATTN_ERR_OUT_OF_MEMORY (the message goes to err). */
clattn_status tiles_build_lists(const attn_problem *pb, const tile_geometry *g, error_record *err,
                                tile_lists *lists);
void tiles_release_lists(tile_lists *lists);

/* Key tiles the passes visit for query head `head` of one batch entry, summed over query
 * tiles (what the kernels count for one (b, h)). */
uint64_t tiles_count_walk(const attn_problem *pb, const tile_geometry *g, const tile_lists *lists,
                          int64_t head);

/* Of those, the global-row pass's (globals_matter). */
uint64_t tiles_count_row_pass(const attn_problem *pb, const tile_geometry *g,
                              const tile_lists *lists);

/* Key tiles the window pass's query tiles walk for the listed rows instead, where they fold
 * them in (a single class: cl/lanes.cl's fold_walk_begin), per (b, h). */
uint64_t tiles_count_folded_rows(const attn_problem *pb, const tile_geometry *g,
                                 const tile_lists *lists);

/* Key tiles of a dense walk: query tiles x key tiles, per (b, h). */
uint64_t tiles_dense_walk(const attn_problem *pb, const tile_geometry *g);

#endif
