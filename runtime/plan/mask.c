/* Building a mask_spec from a desc, and counting the allowed pairs of a pattern exactly without
 * visiting every (i, j). The per-pair rules themselves are inline in mask.h. */
#include "plan/mask.h"

#include "core/core.h"

#include <stdlib.h>
#include <string.h>

static int compare_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int64_t gcd_i64(int64_t a, int64_t b) {
    while (b) {
        int64_t r = a % b;
        a = b, b = r;
    }
    return a;
}

/* The window and the dilation, clamped to the distances the call has: every |p - j| is below
 * `widest`, so a dilation of at least widest keeps only j = p, as a larger one does, and
 * clamping bounds the planners' per-class loops and buffers by the lengths; a side wider than
 * `reach` sees every key, and clamping keeps p +- side in range. */
static void resolve_window(const clattn_attention_desc *d, mask_spec *m) {
    int64_t ahead = m->offset + m->len_q, behind = m->len_k - m->offset;
    int64_t widest = ahead > behind ? ahead : behind;
    int64_t shift = m->offset - (m->len_k - m->len_q); /* 0 for an ordinary call */
    int64_t reach = m->len_q + m->len_k + (shift < 0 ? -shift : shift);
    m->causal = d->causal != 0;
    m->left = d->window_left > reach ? reach : d->window_left;
    m->right = d->window_right > reach ? reach : d->window_right;
    m->dilation = d->dilation > widest ? widest : d->dilation < 1 ? 1 : d->dilation;
}

/* The flags of the call's global keys and global query positions, and its sorted global keys,
 * from the whole-sequence key positions of desc->global_tokens. */
static clattn_status resolve_globals(const clattn_attention_desc *d, mask_spec *m) {
    if (d->num_global_tokens == 0) return CLATTN_SUCCESS;
    const int64_t k0 = (int64_t)d->k_start;
    m->is_global = calloc((size_t)(m->len_k + m->len_q), 1);
    m->flags_len_k = m->len_k, m->flags_len_q = m->len_q, m->flags_offset = m->offset;
    m->globals = malloc(d->num_global_tokens * sizeof *m->globals);
    if (!m->is_global || !m->globals) return CLATTN_ERR_OUT_OF_MEMORY;
    memcpy(m->globals, d->global_tokens, d->num_global_tokens * sizeof *m->globals);
    qsort(m->globals, d->num_global_tokens, sizeof *m->globals, compare_i64);
    for (size_t g = 0; g < d->num_global_tokens; g++) {
        int64_t x = m->globals[g] - k0, row = x - m->offset; /* the call's key position */
        if (row >= 0 && row < m->len_q) m->is_global[m->len_k + row] = 1, m->has_global = 1;
        if (x < 0 || x >= m->len_k || (m->num_globals && m->globals[m->num_globals - 1] == x))
            continue;
        m->globals[m->num_globals++] = x; /* x >= every kept one: the list stays sorted */
        m->is_global[x] = 1, m->has_global = 1;
    }
    if (!m->has_global) mask_release(m); /* no global position falls in this shard */
    return CLATTN_SUCCESS;
}

/* A shard's block layout, cut from the caller's of the whole sequences: blocks of gq rows and gk
 * keys, the largest that divide block_q and block_k and start where the shard does, so that
 * each lies in one block of the caller's (the caller's own blocks when the shard starts on a
 * block edge). */
static clattn_status cut_layout(const clattn_attention_desc *d, mask_spec *m) {
    const int64_t bq = (int64_t)d->block_q, bk = (int64_t)d->block_k;
    const int64_t q0 = (int64_t)d->q_start, k0 = (int64_t)d->k_start;
    const int64_t full_bq = ((int64_t)mask_full_len_q(d) + bq - 1) / bq;
    const int64_t full_bk = ((int64_t)mask_full_len_k(d) + bk - 1) / bk;
    const int64_t gq = gcd_i64(bq, q0 % bq), gk = gcd_i64(bk, k0 % bk);
    const int64_t heads = m->layout_per_head ? (int64_t)d->heads_q : 1;
    m->block_q = gq, m->block_k = gk;
    m->blocks_q = (m->len_q + gq - 1) / gq, m->blocks_k = (m->len_k + gk - 1) / gk;
    size_t cells = 0;
    if (size_mul((size_t)heads, (size_t)m->blocks_q, &cells) ||
        size_mul(cells, (size_t)m->blocks_k, &cells))
        return CLATTN_ERR_OUT_OF_MEMORY;
    m->layout_owned = malloc(cells);
    if (!m->layout_owned) return CLATTN_ERR_OUT_OF_MEMORY;
    for (int64_t h = 0; h < heads; h++)
        for (int64_t a = 0; a < m->blocks_q; a++) {
            const uint8_t *row = d->block_layout + (h * full_bq + (q0 + a * gq) / bq) * full_bk;
            uint8_t *out = m->layout_owned + (h * m->blocks_q + a) * m->blocks_k;
            for (int64_t c = 0; c < m->blocks_k; c++) out[c] = row[(k0 + c * gk) / bk];
        }
    m->layout = m->layout_owned;
    return CLATTN_SUCCESS;
}

static clattn_status resolve_layout(const clattn_attention_desc *d, mask_spec *m) {
    if (!d->block_layout) return CLATTN_SUCCESS;
    m->layout_per_head = d->block_layout_per_head != 0;
    if (mask_desc_is_shard(d)) return cut_layout(d, m);
    m->layout = d->block_layout;
    m->block_q = (int64_t)d->block_q;
    m->block_k = (int64_t)d->block_k;
    m->blocks_q = (m->len_q + m->block_q - 1) / m->block_q;
    m->blocks_k = (m->len_k + m->block_k - 1) / m->block_k;
    return CLATTN_SUCCESS;
}

clattn_status mask_from_desc(const clattn_attention_desc *d, mask_spec *m) {
    memset(m, 0, sizeof *m);
    m->len_q = (int64_t)d->len_q;
    m->len_k = (int64_t)d->len_k;
    m->offset = (int64_t)d->q_start + (int64_t)mask_full_len_k(d) - (int64_t)mask_full_len_q(d) -
                (int64_t)d->k_start;
    resolve_window(d, m);
    clattn_status status = resolve_globals(d, m);
    if (status == CLATTN_SUCCESS) status = resolve_layout(d, m);
    if (status != CLATTN_SUCCESS) mask_release(m);
    return status;
}

void mask_release(mask_spec *m) {
    free(m->is_global);
    free(m->globals);
    free(m->layout_owned);
    if (m->layout == m->layout_owned) m->layout = NULL;
    m->is_global = NULL;
    m->globals = NULL;
    m->layout_owned = NULL;
    m->num_globals = 0;
    m->has_global = 0;
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
        int overflow = 0;
        for (int64_t i = 0; i < m->len_q; i++)
            overflow |= __builtin_add_overflow(total, (uint64_t)count_row(m, prefix, h, i), &total);
        free(prefix);
        if (overflow) return UINT64_MAX;
    }
    if (distinct_heads == 1 && __builtin_mul_overflow(total, (uint64_t)heads, &total))
        return UINT64_MAX;
    if (__builtin_mul_overflow(total, (uint64_t)batch, &total)) return UINT64_MAX;
    return total;
}
