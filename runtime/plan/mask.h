/*
 * The mask of one call (docs/semantics.md section 2) on the host: its parameters, resolved once
 * when the problem is built, and the per-pair rule of mask_rules.h applied to them. The reference,
 * the planners and the pair counts all ask this file.
 */
#ifndef CLATTN_MASK_H
#define CLATTN_MASK_H

#define MASK_RULES_HOST
#include "cl/mask_rules.h"

#include "clattn.h"

#include <stdint.h>

typedef struct mask_spec {
    int64_t len_q, len_k;
    int64_t offset; /* len_k - len_q: query i sits at key position p = i + offset */
    int causal;
    int64_t left, right; /* window; -1 = unbounded; sides wider than every distance clamped */
    int64_t dilation;    /* >= 1, at most max(len_q, len_k) (larger ones keep only j = p too) */
    uint8_t *is_global;  /* [len_k] flags, or NULL when there are no global tokens */
    int64_t *globals;    /* the global key positions, sorted, without repeats */
    int64_t num_globals;
    const uint8_t *layout; /* [layout_heads][blocks_q][blocks_k] (the caller's), or NULL */
    int64_t block_q, block_k, blocks_q, blocks_k;
    int layout_per_head;
} mask_spec;

/* Builds the mask of a desc that passed problem validation; release it with mask_release.
 * @return CLATTN_SUCCESS or CLATTN_ERR_OUT_OF_MEMORY. */
clattn_status mask_from_desc(const clattn_attention_desc *desc, mask_spec *mask);
void mask_release(mask_spec *mask);

/* Key positions of the window for position p, before dilation and causality: [lo, hi] clipped
 * to [0, len_k - 1]; empty when lo > hi. */
static inline void mask_window_range(const mask_spec *m, int64_t p, int64_t *lo, int64_t *hi) {
    mask_class_range(p, 0, 1, m->len_k, m->left, m->right, 0, 1, lo, hi);
}

static inline int mask_is_global(const mask_spec *m, int64_t position) {
    return m->is_global && position >= 0 && position < m->len_k && m->is_global[position];
}

static inline int mask_layout_ok(const mask_spec *m, int64_t head, int64_t i, int64_t j) {
    if (!m->layout) return 1;
    int64_t h = m->layout_per_head ? head : 0;
    return m->layout[(h * m->blocks_q + i / m->block_q) * m->blocks_k + j / m->block_k] != 0;
}

static inline int mask_allowed(const mask_spec *m, int64_t head, int64_t i, int64_t j) {
    int64_t p = i + m->offset;
    return mask_combine(mask_causal_ok(m->causal, p, j), mask_layout_ok(m, head, i, j),
                        mask_window_ok(p, j, m->left, m->right, m->dilation), mask_is_global(m, j),
                        mask_is_global(m, p));
}

/* Allowed pairs of the pattern over all (b, h, i, j) (bias not counted). Exact; costs
 * O(Hq * Nq * (1 + blocks_k + globals)) at worst, not O(Nq * Nk). */
uint64_t mask_count_pairs(const mask_spec *m, int64_t batch, int64_t heads);

#endif
