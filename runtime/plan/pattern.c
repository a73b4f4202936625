/*
 * Block-sparse layouts of the standard sparse-attention patterns (clattn_pattern_layout), and
 * ALiBi's standard slopes (clattn_pattern_alibi_slopes, at the end). The layouts: the
 * sliding window, BigBird, the Sparse Transformer's "fixed" and "strided" patterns and
 * Longformer, as a row-major 0/1 matrix [blocks_q][blocks_k] for desc->block_layout.
 *
 * Block rows are aligned to the end, like causal attention: block row a sits at block position
 *
 *     a' = a + (blocks_k - blocks_q)        (negative when blocks_q > blocks_k)
 *
 * and every formula below compares a' with the block column b. A layout is built in passes:
 * the deterministic part of the kind (band, global rows and columns, stride rules), then the
 * causal cut (b > a' is zeroed), then BigBird's random blocks, which are drawn from what is
 * still zero (and, with causal, allowed). The random draws come from splitmix64 seeded with
 * `seed` and use only 64-bit integer arithmetic, so a seed gives the same layout everywhere.
 */
#include "core/core.h"

#include <math.h>
#include <string.h>

/* Bounds every block count and stride so that a' and a' - b stay far from int64 overflow; a
 * layout that large could never be allocated anyway. */
#define MAX_BLOCKS ((uint64_t)1 << 60)

/* The layout being filled and its geometry. */
typedef struct layout_grid {
    uint8_t *cells; /* [rows][cols], row-major */
    int64_t rows;   /* blocks_q */
    int64_t cols;   /* blocks_k */
    int64_t offset; /* blocks_k - blocks_q: a' = a + offset */
} layout_grid;

/* ---------------------------------------------------------------- validation */

static int window_valid(size_t window) {
    return window % 2 == 1; /* odd, hence >= 1 */
}

/* The parameters of the kind, as the header documents them. */
static int kind_params_valid(const clattn_pattern_desc *p) {
    switch (p->kind) {
    case CLATTN_PATTERN_SLIDING:
    case CLATTN_PATTERN_BIGBIRD:
        return window_valid(p->window);
    case CLATTN_PATTERN_FIXED:
        return p->stride >= 1 && p->stride <= MAX_BLOCKS && p->summary >= 1 &&
               p->summary <= p->stride;
    case CLATTN_PATTERN_STRIDED:
        return p->stride >= 1 && p->stride <= MAX_BLOCKS;
    case CLATTN_PATTERN_LONGFORMER:
        if (!window_valid(p->window)) return 0;
        if (p->num_global_blocks > 0 && !p->global_blocks) return 0;
        for (size_t g = 0; g < p->num_global_blocks; g++)
            if (p->global_blocks[g] >= p->blocks_k) return 0;
        return 1;
    }
    return 0; /* a kind outside the enum */
}

static int pattern_valid(const clattn_pattern_desc *p, uint8_t *layout) {
    size_t cells = 0;
    if (!p || !layout) return 0;
    if (p->blocks_q == 0 || p->blocks_k == 0) return 0;
    if (p->blocks_q > MAX_BLOCKS || p->blocks_k > MAX_BLOCKS) return 0;
    if (size_mul(p->blocks_q, p->blocks_k, &cells)) return 0;
    return kind_params_valid(p);
}

/* ---------------------------------------------------------------- arithmetic */

/* floor(x / d) and x mod d in [0, d), for d >= 1 and any sign of x. */
static int64_t floor_div(int64_t x, int64_t d) {
    int64_t q = x / d;
    return (x % d != 0 && x < 0) ? q - 1 : q;
}

static int64_t floor_mod(int64_t x, int64_t d) {
    int64_t r = x % d;
    return r < 0 ? r + d : r;
}

/* |x|, for the |x| <= 2^61 that a' - b can reach. */
static uint64_t magnitude(int64_t x) {
    return x < 0 ? (uint64_t)(-x) : (uint64_t)x;
}

/* ---------------------------------------------------------------- deterministic parts */

/* Sliding band: |a' - b| <= window/2. */
static void fill_band(layout_grid *g, size_t window) {
    uint64_t half = (uint64_t)(window / 2);
    for (int64_t a = 0; a < g->rows; a++)
        for (int64_t b = 0; b < g->cols; b++)
            if (magnitude(a + g->offset - b) <= half) g->cells[a * g->cols + b] = 1;
}

/* Block column `col` all ones, and the block row whose aligned position a' equals `col`
 * (row a = col - offset) all ones when that row exists. */
static void fill_global(layout_grid *g, int64_t col) {
    for (int64_t a = 0; a < g->rows; a++) g->cells[a * g->cols + col] = 1;
    int64_t row = col - g->offset;
    if (row >= 0 && row < g->rows) memset(g->cells + row * g->cols, 1, (size_t)g->cols);
}

/* Sparse Transformer "fixed" (Child et al. 2019), in blocks:
 *     floor(a'/stride) == floor(b/stride)  OR  b mod stride >= stride - summary. */
static void fill_fixed(layout_grid *g, int64_t stride, int64_t summary) {
    for (int64_t a = 0; a < g->rows; a++) {
        int64_t window_a = floor_div(a + g->offset, stride);
        for (int64_t b = 0; b < g->cols; b++)
            if (window_a == b / stride || b % stride >= stride - summary)
                g->cells[a * g->cols + b] = 1;
    }
}

/* Sparse Transformer "strided" (Child et al. 2019), in blocks:
 *     |a' - b| < stride  OR  (a' - b) mod stride == 0 (non-negative mod). */
static void fill_strided(layout_grid *g, int64_t stride) {
    for (int64_t a = 0; a < g->rows; a++)
        for (int64_t b = 0; b < g->cols; b++) {
            int64_t d = a + g->offset - b;
            if (magnitude(d) < (uint64_t)stride || floor_mod(d, stride) == 0)
                g->cells[a * g->cols + b] = 1;
        }
}

/* Causal: zero every block with b > a'. */
static void cut_causal(layout_grid *g) {
    for (int64_t a = 0; a < g->rows; a++) {
        int64_t first_cut = a + g->offset + 1; /* first b with b > a' */
        if (first_cut < 0) first_cut = 0;
        if (first_cut < g->cols)
            memset(g->cells + a * g->cols + first_cut, 0, (size_t)(g->cols - first_cut));
    }
}

/* ---------------------------------------------------------------- BigBird's random blocks */

/* splitmix64 (Steele, Lea, Flood 2014): the seed is the state; one step per draw. */
static uint64_t splitmix64_next(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in [0, n), n >= 1, without modulo bias: draws below 2^64 mod n are rejected. */
static uint64_t uniform_below(uint64_t *state, uint64_t n) {
    uint64_t reject_below = (0 - n) % n; /* = 2^64 mod n */
    for (;;) {
        uint64_t x = splitmix64_next(state);
        if (x >= reject_below) return x % n;
    }
}

/* Adds min(count, candidates) blocks to row a, chosen uniformly among its candidates (blocks
 * still 0 and, with causal, b <= a'). Selection sampling (Knuth's Algorithm S): walking the
 * candidates in order, take each with probability needed / remaining, which makes every
 * subset of that size equally likely; rows are drawn in order from one stream. */
static void add_random_row(layout_grid *g, int64_t a, size_t count, int causal, uint64_t *state) {
    uint8_t *row = g->cells + a * g->cols;
    int64_t last = causal ? a + g->offset : g->cols - 1; /* last column a block may take */
    if (last >= g->cols) last = g->cols - 1;
    uint64_t remaining = 0;
    for (int64_t b = 0; b <= last; b++) remaining += row[b] == 0;
    uint64_t needed = count < remaining ? (uint64_t)count : remaining;
    for (int64_t b = 0; b <= last && needed > 0; b++) {
        if (row[b] != 0) continue;
        if (uniform_below(state, remaining) < needed) {
            row[b] = 1;
            needed--;
        }
        remaining--;
    }
}

/* BigBird (Zaheer et al. 2020): the band of `window` blocks; the first `global` block columns
 * and the block rows at positions 0 <= a' < global all ones (the same global blocks as
 * Longformer with global_blocks = {0, ..., global-1}); the causal cut; then `random` random
 * blocks a row among the blocks still 0 (and allowed). */
static void fill_bigbird(layout_grid *g, const clattn_pattern_desc *p) {
    fill_band(g, p->window);
    int64_t global = p->global < (size_t)g->cols ? (int64_t)p->global : g->cols;
    for (int64_t col = 0; col < global; col++) fill_global(g, col);
    if (p->causal) cut_causal(g);
    uint64_t state = p->seed;
    if (p->random > 0)
        for (int64_t a = 0; a < g->rows; a++) add_random_row(g, a, p->random, p->causal, &state);
}

/* ---------------------------------------------------------------- entry point */

clattn_status clattn_pattern_desc_init_sized(clattn_pattern_desc *pattern, size_t struct_size,
                                             clattn_pattern_kind kind, size_t blocks_q,
                                             size_t blocks_k) {
    clattn_pattern_desc local;
    memset(&local, 0, sizeof local);
    local.kind = kind;
    local.blocks_q = blocks_q;
    local.blocks_k = blocks_k;
    return struct_init(pattern, struct_size, &local, sizeof local, sizeof local)
               ? CLATTN_ERR_INVALID_ARGUMENT
               : CLATTN_SUCCESS;
}

clattn_status clattn_pattern_layout(const clattn_pattern_desc *given, uint8_t *layout) {
    clattn_pattern_desc local;
    if (!given || struct_read(&local, sizeof local, given, given->struct_size, sizeof local))
        return CLATTN_ERR_INVALID_ARGUMENT;
    const clattn_pattern_desc *p = &local;
    if (!pattern_valid(p, layout)) return CLATTN_ERR_INVALID_ARGUMENT;
    layout_grid g = {layout, (int64_t)p->blocks_q, (int64_t)p->blocks_k,
                     (int64_t)p->blocks_k - (int64_t)p->blocks_q};
    memset(layout, 0, p->blocks_q * p->blocks_k);
    switch (p->kind) {
    case CLATTN_PATTERN_SLIDING:
        fill_band(&g, p->window);
        break;
    case CLATTN_PATTERN_BIGBIRD:
        fill_bigbird(&g, p); /* applies the causal cut itself, before the random draws */
        return CLATTN_SUCCESS;
    case CLATTN_PATTERN_FIXED:
        fill_fixed(&g, (int64_t)p->stride, (int64_t)p->summary);
        break;
    case CLATTN_PATTERN_STRIDED:
        fill_strided(&g, (int64_t)p->stride);
        break;
    case CLATTN_PATTERN_LONGFORMER:
        fill_band(&g, p->window);
        for (size_t i = 0; i < p->num_global_blocks; i++)
            fill_global(&g, (int64_t)p->global_blocks[i]);
        break;
    }
    if (p->causal) cut_causal(&g);
    return CLATTN_SUCCESS;
}

/* ---------------------------------------------------------------- ALiBi's slopes */

clattn_status clattn_pattern_alibi_slopes(size_t heads, float *slopes) {
    if (!slopes || heads == 0) return CLATTN_ERR_INVALID_ARGUMENT;
    size_t n = 1; /* the largest power of two <= heads */
    while (n <= heads / 2) n *= 2;
    for (size_t h = 0; h < heads; h++) {
        double exponent = h < n ? -8.0 * (double)(h + 1) / (double)n
                                : -4.0 * (double)(2 * (h - n) + 1) / (double)n;
        slopes[h] = (float)exp2(exponent);
    }
    return CLATTN_SUCCESS;
}
