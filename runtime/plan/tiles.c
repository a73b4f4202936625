/* The fused kernels' tile geometry, lists and walk counts (tiles.h). */
#include "plan/tiles.h"

#include <stdlib.h>
#include <string.h>

enum { PASS_WINDOW, PASS_GLOBAL_KEYS, PASS_GLOBAL_ROWS }; /* as cl/tile_walk.cl */

unsigned tiles_head_dim_bucket(size_t dim) {
    static const unsigned buckets[] = {16, 32, 64, 80, 96, 128, 160, 192, TILES_MAX_HEAD_DIM};
    for (size_t i = 0; i < ARRAY_LEN(buckets); i++)
        if (dim <= buckets[i]) return buckets[i];
    return 0;
}

unsigned tiles_wide_head_dim_bucket(size_t dim) {
    if (dim <= TILES_MAX_HEAD_DIM) return tiles_head_dim_bucket(dim);
    return dim <= TILES_MAX_WIDE_HEAD_DIM ? (unsigned)((dim + 63) / 64 * 64) : 0;
}

void tiles_plan_geometry(const attn_problem *pb, unsigned block_m, unsigned block_n,
                         tile_geometry *g) {
    const mask_spec *m = &pb->mask;
    memset(g, 0, sizeof *g);
    g->block_m = block_m;
    g->block_n = block_n;
    int64_t keys_per_dilation_class = (m->len_k + m->dilation - 1) / m->dilation;
    g->classes = keys_per_dilation_class >= (int64_t)block_n ? m->dilation : 1;
    int64_t keys_per_class = (m->len_k + g->classes - 1) / g->classes;
    int64_t rows_per_class = (m->len_q + g->classes - 1) / g->classes;
    g->class_slots = (keys_per_class + block_n - 1) / block_n * block_n;
    g->tiles_per_class = (rows_per_class + block_m - 1) / block_m;
    g->globals_matter = m->has_global && (m->left >= 0 || m->right >= 0 || m->dilation > 1);
}

/* ---------------------------------------------------------------- rows, keys and ranges */

/* Keys of class r: j = r + m*classes for m in [0, class_keys). */
static int64_t class_keys(const mask_spec *m, int64_t classes, int64_t r) {
    return r < m->len_k ? (m->len_k - 1 - r) / classes + 1 : 0;
}

/* First query row of class r (rows whose position p = i + offset is = r mod classes). */
static int64_t class_first_row(const mask_spec *m, int64_t classes, int64_t r) {
    return ((r - m->offset) % classes + classes) % classes;
}

/* The rows of a query tile, -1 past the end: tile t of class r (window pass), or tile t of the
 * listed global rows. @return how many are rows. */
static int tile_rows(const attn_problem *pb, const tile_geometry *g, const tile_lists *lists,
                     int pass, int64_t r, int64_t t, int64_t *rows) {
    const mask_spec *m = &pb->mask;
    int count = 0;
    for (unsigned k = 0; k < g->block_m; k++) {
        int64_t i = -1;
        if (pass == PASS_GLOBAL_ROWS) {
            size_t at = (size_t)t * g->block_m + k;
            i = at < lists->num_rows ? lists->row_list[at] : -1;
        } else {
            i = class_first_row(m, g->classes, r) + (t * g->block_m + k) * g->classes;
            if (i >= m->len_q) i = -1;
        }
        rows[k] = i;
        count += i >= 0;
    }
    return count;
}

/* The class-local key tiles [first, last] any of the rows may see in class r (the kernels'
 * tile_key_span). @return 0 when none. */
static int tile_span(const attn_problem *pb, const tile_geometry *g, int pass, int64_t r,
                     const int64_t *rows, int64_t *first, int64_t *last) {
    const mask_spec *m = &pb->mask;
    int64_t lo_all = INT64_MAX, hi_all = -1;
    for (unsigned k = 0; k < g->block_m; k++) {
        if (rows[k] < 0) continue;
        int64_t lo, hi;
        mask_class_range(rows[k] + m->offset, r, g->classes, class_keys(m, g->classes, r), m->left,
                         m->right, m->causal, pass == PASS_WINDOW, &lo, &hi);
        if (lo > hi) continue;
        lo_all = lo < lo_all ? lo : lo_all;
        hi_all = hi > hi_all ? hi : hi_all;
    }
    *first = hi_all >= lo_all ? lo_all / g->block_n : 0;
    *last = hi_all >= lo_all ? hi_all / g->block_n : -1;
    return hi_all >= lo_all;
}

/* ---------------------------------------------------------------- block layout lists */

/* 2-D prefix sums of one layout head: sums[a * (blocks_k + 1) + b] = ones in [0,a) x [0,b). */
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

/* The ones among the blocks covering rows [i0, i1] and keys [j0, j1], and how many blocks that
 * is. */
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
static void list_tile(const attn_problem *pb, const tile_geometry *g, const uint32_t *sums,
                      int64_t r, int64_t t, tile_lists *lists) {
    const mask_spec *m = &pb->mask;
    int64_t rows[TILES_MAX_BLOCK_M], first, last, d = g->classes;
    if (!tile_rows(pb, g, lists, PASS_WINDOW, r, t, rows) ||
        !tile_span(pb, g, PASS_WINDOW, r, rows, &first, &last))
        return;
    int64_t i0 = rows[0], i1 = i0;
    for (unsigned k = 0; k < g->block_m; k++) i1 = rows[k] > i1 ? rows[k] : i1;
    for (int64_t kt = first; kt <= last; kt++) {
        int64_t j0 = r + kt * g->block_n * d, j1 = r + ((kt + 1) * g->block_n - 1) * d;
        if (j1 > m->len_k - 1) j1 = m->len_k - 1;
        uint32_t blocks = 0, ones = layout_ones(m, sums, i0, i1, j0, j1, &blocks);
        int needs_pairs = ones < blocks || m->dilation > 1;
        if (ones > 0) lists->tile_idx[lists->num_entries++] = (int32_t)(kt * 2 + needs_pairs);
    }
}

/* CSR of key tiles per (layout head, class, query tile). */
static clattn_status build_tile_lists(const attn_problem *pb, const tile_geometry *g,
                                      error_record *err, tile_lists *lists) {
    const mask_spec *m = &pb->mask;
    size_t per_head = (size_t)(g->classes * g->tiles_per_class), cap = 0;
    lists->list_heads = m->layout_per_head ? (int64_t)pb->heads_q : 1;
    if (size_mul(per_head, (size_t)lists->list_heads, &lists->num_lists) ||
        size_mul(lists->num_lists, (size_t)(g->class_slots / g->block_n), &cap) ||
        cap > INT32_MAX / 2)
        return error_set(err, CLATTN_ERR_OUT_OF_MEMORY,
                         "fused: key tile lists for %zu query tiles x %lld key tiles exceed 2^30 "
                         "entries",
                         lists->num_lists, (long long)(g->class_slots / g->block_n));
    lists->tile_ptr = malloc((lists->num_lists + 1) * sizeof *lists->tile_ptr);
    lists->tile_idx = malloc((cap ? cap : 1) * sizeof *lists->tile_idx);
    if (!lists->tile_ptr || !lists->tile_idx)
        return error_set(err, CLATTN_ERR_OUT_OF_MEMORY, "fused: key tile lists (%zu entries)", cap);
    size_t list = 0;
    for (int64_t h = 0; h < lists->list_heads; h++) {
        uint32_t *sums = layout_prefix_sums(m, h);
        if (!sums) return error_set(err, CLATTN_ERR_OUT_OF_MEMORY, "fused: layout sums");
        for (int64_t r = 0; r < g->classes; r++)
            for (int64_t t = 0; t < g->tiles_per_class; t++) {
                lists->tile_ptr[list++] = (int32_t)lists->num_entries;
                list_tile(pb, g, sums, r, t, lists);
            }
        free(sums);
    }
    lists->tile_ptr[list] = (int32_t)lists->num_entries;
    return CLATTN_SUCCESS;
}

/* Global key positions and the rows that sit on global positions (both sorted). A shard's
 * rows may sit on global positions outside its keys, so the rows come from the row flags. */
static clattn_status build_global_lists(const attn_problem *pb, error_record *err,
                                        tile_lists *lists) {
    const mask_spec *m = &pb->mask;
    size_t rows = 0;
    for (int64_t i = 0; i < m->len_q; i++) rows += m->is_global[m->len_k + i] != 0;
    lists->gpos = malloc(((size_t)m->num_globals + 1) * sizeof *lists->gpos);
    lists->row_list = malloc((rows + 1) * sizeof *lists->row_list);
    if (!lists->gpos || !lists->row_list)
        return error_set(err, CLATTN_ERR_OUT_OF_MEMORY, "fused: global token lists");
    for (int64_t k = 0; k < m->num_globals; k++) lists->gpos[k] = (int32_t)m->globals[k];
    for (int64_t i = 0; i < m->len_q; i++)
        if (m->is_global[m->len_k + i]) lists->row_list[lists->num_rows++] = (int32_t)i;
    return CLATTN_SUCCESS;
}

clattn_status tiles_build_lists(const attn_problem *pb, const tile_geometry *g, error_record *err,
                                tile_lists *lists) {
    memset(lists, 0, sizeof *lists);
    clattn_status status = CLATTN_SUCCESS;
    if (g->globals_matter) status = build_global_lists(pb, err, lists);
    if (status == CLATTN_SUCCESS && pb->mask.layout) status = build_tile_lists(pb, g, err, lists);
    return status;
}

void tiles_release_lists(tile_lists *lists) {
    free(lists->gpos);
    free(lists->row_list);
    free(lists->tile_ptr);
    free(lists->tile_idx);
    memset(lists, 0, sizeof *lists);
}

/* ---------------------------------------------------------------- counting the walk */

/* Global-key pass of one query tile: tiles of packed global keys up to the first one past
 * every row's causal limit. */
static uint64_t global_key_tiles(const attn_problem *pb, const tile_geometry *g,
                                 const tile_lists *lists, const int64_t *rows) {
    const mask_spec *m = &pb->mask;
    int64_t last_p = INT64_MIN;
    for (unsigned k = 0; k < g->block_m; k++)
        if (rows[k] >= 0 && rows[k] + m->offset > last_p) last_p = rows[k] + m->offset;
    uint64_t tiles = 0;
    for (int64_t k0 = 0; k0 < m->num_globals; k0 += g->block_n, tiles++)
        if (m->causal && lists->gpos[k0] > last_p) break;
    return tiles;
}

/* Window pass tiles of tile t of class r for layout head `list_head`. */
static uint64_t window_tiles(const attn_problem *pb, const tile_geometry *g,
                             const tile_lists *lists, int64_t list_head, int64_t r, int64_t t,
                             const int64_t *rows) {
    int64_t first, last;
    if (!tile_span(pb, g, PASS_WINDOW, r, rows, &first, &last)) return 0;
    if (!pb->mask.layout) return (uint64_t)(last - first + 1);
    size_t list = (size_t)((list_head * g->classes + r) * g->tiles_per_class + t);
    return (uint64_t)(lists->tile_ptr[list + 1] - lists->tile_ptr[list]);
}

uint64_t tiles_count_walk(const attn_problem *pb, const tile_geometry *g, const tile_lists *lists,
                          int64_t head) {
    int64_t rows[TILES_MAX_BLOCK_M], list_head = pb->mask.layout_per_head ? head : 0;
    uint64_t total = 0;
    for (int64_t r = 0; r < g->classes; r++)
        for (int64_t t = 0; t < g->tiles_per_class; t++) {
            if (!tile_rows(pb, g, lists, PASS_WINDOW, r, t, rows) || rows[0] < 0) continue;
            total += window_tiles(pb, g, lists, list_head, r, t, rows);
            if (g->globals_matter) total += global_key_tiles(pb, g, lists, rows);
        }
    return g->globals_matter ? total + tiles_count_row_pass(pb, g, lists) : total;
}

uint64_t tiles_count_row_pass(const attn_problem *pb, const tile_geometry *g,
                              const tile_lists *lists) {
    int64_t rows[TILES_MAX_BLOCK_M],
        row_tiles = ((int64_t)lists->num_rows + g->block_m - 1) / g->block_m;
    uint64_t total = 0;
    for (int64_t t = 0; t < row_tiles; t++) {
        tile_rows(pb, g, lists, PASS_GLOBAL_ROWS, 0, t, rows);
        for (int64_t r = 0; r < g->classes; r++) {
            int64_t first, last;
            if (tile_span(pb, g, PASS_GLOBAL_ROWS, r, rows, &first, &last))
                total += (uint64_t)(last - first + 1);
        }
    }
    return total;
}

/* Clamps x to [lo, hi]. */
static int64_t clamp64(int64_t x, int64_t lo, int64_t hi) {
    return x < lo ? lo : x > hi ? hi : x;
}

uint64_t tiles_count_folded_rows(const attn_problem *pb, const tile_geometry *g,
                                 const tile_lists *lists) {
    const mask_spec *m = &pb->mask;
    const int64_t tiles = g->tiles_per_class, bm = g->block_m;
    uint64_t total = 0;
    for (int64_t t = 0; t < tiles; t++) {
        /* the keys [a, b) tile t owns (cl/lanes.cl's fold_keys) */
        int64_t a = t == 0 ? 0 : clamp64(t * bm + m->offset, 0, m->len_k);
        int64_t b = t == tiles - 1 ? m->len_k : clamp64((t + 1) * bm + m->offset, 0, m->len_k);
        int64_t lo_all = INT64_MAX, hi_all = -1;
        for (size_t k = 0; k < lists->num_rows; k++) {
            int64_t lo, hi;
            mask_class_range(lists->row_list[k] + m->offset, 0, 1, m->len_k, m->left, m->right,
                             m->causal, 0, &lo, &hi);
            lo = lo > a ? lo : a;
            hi = hi < b - 1 ? hi : b - 1;
            if (lo > hi) continue;
            lo_all = lo < lo_all ? lo : lo_all;
            hi_all = hi > hi_all ? hi : hi_all;
        }
        if (hi_all >= lo_all) total += (uint64_t)(hi_all / g->block_n - lo_all / g->block_n + 1);
    }
    return total;
}

uint64_t tiles_dense_walk(const attn_problem *pb, const tile_geometry *g) {
    return ((pb->len_q + g->block_m - 1) / g->block_m) *
           ((pb->len_k + g->block_n - 1) / g->block_n);
}
