/* Building a mask_spec from a desc, and counting the allowed pairs of a pattern exactly without
 * visiting every (i, j). The per-pair rules themselves are inline in mask.h. */
#include "plan/mask.h"

#include <stdlib.h>
#include <string.h>

static int compare_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

clattn_status mask_from_desc(const clattn_attention_desc *d, mask_spec *m) {
    memset(m, 0, sizeof *m);
    m->len_q = (int64_t)d->len_q;
    m->len_k = (int64_t)d->len_k;
    m->offset = m->len_k - m->len_q;
    m->causal = d->causal != 0;
    /* a side wider than every distance is unbounded, and clamping keeps p +- side in range */
    int64_t reach = m->len_q + m->len_k, widest = m->len_q > m->len_k ? m->len_q : m->len_k;
    m->left = d->window_left > reach ? reach : d->window_left;
    m->right = d->window_right > reach ? reach : d->window_right;
    /* |p - j| < max(len_q, len_k): a larger dilation keeps only j == p, as that one does, and
       clamping bounds the planner's per-class loops and buffers by the lengths */
    m->dilation = d->dilation > widest ? widest : d->dilation < 1 ? 1 : d->dilation;
    if (d->block_layout) {
        m->layout = d->block_layout;
        m->block_q = (int64_t)d->block_q;
        m->block_k = (int64_t)d->block_k;
        m->blocks_q = (m->len_q + m->block_q - 1) / m->block_q;
        m->blocks_k = (m->len_k + m->block_k - 1) / m->block_k;
        m->layout_per_head = d->block_layout_per_head != 0;
    }
    if (d->num_global_tokens == 0) return CLATTN_SUCCESS;
    m->is_global = calloc((size_t)m->len_k, 1);
    m->globals = malloc(d->num_global_tokens * sizeof *m->globals);
    if (!m->is_global || !m->globals) {
        mask_release(m);
        return CLATTN_ERR_OUT_OF_MEMORY;
    }
    memcpy(m->globals, d->global_tokens, d->num_global_tokens * sizeof *m->globals);
    qsort(m->globals, d->num_global_tokens, sizeof *m->globals, compare_i64);
    for (size_t g = 0; g < d->num_global_tokens; g++) {
        int64_t j = m->globals[g];
        if (m->num_globals == 0 || m->globals[m->num_globals - 1] != j)
            m->globals[m->num_globals++] = j;
        m->is_global[j] = 1;
    }
    return CLATTN_SUCCESS;
}

void mask_release(mask_spec *m) {
    free(m->is_global);
    free(m->globals);
    m->is_global = NULL;
    m->globals = NULL;
    m->num_globals = 0;
}

/* How many j in [a, b] satisfy j = p (mod d). */
static int64_t count_progression(int64_t a, int64_t b, int64_t p, int64_t d) {
    if (a > b) return 0;
    int64_t first = a + (((p - a) % d) + d) % d;
    return first > b ? 0 : (b - first) / d + 1;
}

/* Allowed blocks of one head's layout before each block column, a block row at a time:
 * prefix[bi * (blocks_k + 1) + bj] counts the allowed blocks (bi, 0 .. bj-1). It makes a row's
 * count O(1) instead of O(blocks_k) when every key of a block counts (no dilation). */
static int32_t *layout_prefix(const mask_spec *m, int64_t head) {
    int32_t *prefix = malloc((size_t)(m->blocks_q * (m->blocks_k + 1)) * sizeof *prefix);
    if (!prefix) return NULL; /* the counts are made block by block instead */
    const uint8_t *layout = m->layout + (m->layout_per_head ? head : 0) * m->blocks_q * m->blocks_k;
    for (int64_t bi = 0; bi < m->blocks_q; bi++) {
        int32_t *row = prefix + bi * (m->blocks_k + 1);
        row[0] = 0;
        for (int64_t bj = 0; bj < m->blocks_k; bj++)
            row[bj + 1] = row[bj] + (layout[bi * m->blocks_k + bj] != 0);
    }
    return prefix;
}

/* Keys in [a, b] (a <= b) of row i that pass the layout, from its block row's prefix counts:
 * the partial blocks at both ends, and block_k keys for each allowed block between. */
static int64_t count_in_prefix(const mask_spec *m, const int32_t *prefix, int64_t i, int64_t a,
                               int64_t b) {
    const int32_t *row = prefix + (i / m->block_q) * (m->blocks_k + 1);
    int64_t ba = a / m->block_k, bb = b / m->block_k;
    int first_ok = row[ba + 1] > row[ba], last_ok = row[bb + 1] > row[bb];
    if (ba == bb) return first_ok ? b - a + 1 : 0;
    return (first_ok ? (ba + 1) * m->block_k - a : 0) + (last_ok ? b - bb * m->block_k + 1 : 0) +
           (int64_t)(row[bb] - row[ba + 1]) * m->block_k;
}

/* Keys in [a, b] (already causal-clipped) that pass the layout for row i; with `dilated`, only
 * those on p's progression. prefix: the head's layout_prefix, or NULL. */
static int64_t count_in_layout(const mask_spec *m, const int32_t *prefix, int64_t head, int64_t i,
                               int64_t a, int64_t b, int dilated) {
    int64_t p = i + m->offset, d = dilated ? m->dilation : 1;
    if (!m->layout) return count_progression(a, b, p, d);
    if (a > b) return 0;
    if (prefix && d == 1) return count_in_prefix(m, prefix, i, a, b);
    int64_t total = 0;
    for (int64_t bj = a / m->block_k; bj < m->blocks_k; bj++) {
        int64_t lo = bj * m->block_k, hi = lo + m->block_k - 1;
        if (lo > b) break;
        if (mask_layout_ok(m, head, i, lo))
            total += count_progression(lo > a ? lo : a, hi < b ? hi : b, p, d);
    }
    return total;
}

static int64_t count_row(const mask_spec *m, const int32_t *prefix, int64_t head, int64_t i) {
    int64_t p = i + m->offset;
    int64_t last = m->causal && p < m->len_k - 1 ? p : m->len_k - 1; /* causal limit */
    if (mask_is_global(m, p)) return count_in_layout(m, prefix, head, i, 0, last, 0);
    int64_t lo, hi;
    mask_window_range(m, p, &lo, &hi);
    int64_t total = count_in_layout(m, prefix, head, i, lo, hi < last ? hi : last, 1);
    for (int64_t g = 0; g < m->num_globals; g++) {
        int64_t j = m->globals[g];
        if (j > last) break;
        if (!mask_window_ok(p, j, m->left, m->right, m->dilation) && mask_layout_ok(m, head, i, j))
            total++;
    }
    return total;
}

uint64_t mask_count_pairs(const mask_spec *m, int64_t batch, int64_t heads) {
    int64_t distinct_heads = m->layout && m->layout_per_head ? heads : 1;
    uint64_t total = 0;
    for (int64_t h = 0; h < distinct_heads; h++) {
        int32_t *prefix = m->layout ? layout_prefix(m, h) : NULL;
        for (int64_t i = 0; i < m->len_q; i++) total += (uint64_t)count_row(m, prefix, h, i);
        free(prefix);
    }
    if (distinct_heads == 1) total *= (uint64_t)heads;
    return total * (uint64_t)batch;
}
