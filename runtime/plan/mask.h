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

/*
 * A shard of longer sequences (desc->q_start, ...) is resolved here into the same local terms
 * as an ordinary call: the offset takes the shard's positions (p = i + offset, with offset =
 * q_start + full_len_k - full_len_q - k_start, which may lie outside [-len_q, len_k]); the
 * flags say which of the call's keys and which of its query positions are global; and a block
 * layout of the whole sequences is cut into one of the shard (layout_owned), in blocks that
 * divide the caller's and start where the shard does.
 */
typedef struct mask_spec {
    int64_t len_q, len_k;
    int64_t offset; /* query i sits at key position p = i + offset (len_k - len_q, or a shard's) */
    int causal;
    int64_t left, right; /* window; -1 = unbounded; sides wider than every distance clamped */
    int64_t dilation;    /* >= 1, at most the widest |p - j| + 1 (larger ones keep only j = p) */
    int has_global;      /* a key or a query position of the call is global */
    uint8_t *is_global;  /* [len_k + len_q] flags: key j at [j], query position offset + r at
                            [len_k + r] (mask_is_global); NULL when has_global is 0 */
    int64_t flags_len_k, flags_len_q, flags_offset; /* len_k, len_q and offset as is_global was
                                                       laid out: a view of one sequence of the
                                                       call (reference.c) changes those, not
                                                       the flags */
    int64_t *globals;    /* the call's global keys, sorted, without repeats */
    int64_t num_globals;
    const uint8_t *layout; /* [layout_heads][blocks_q][blocks_k] (the caller's, or layout_owned) */
    uint8_t *layout_owned; /* a shard's layout, cut from the caller's; else NULL */
    int64_t block_q, block_k, blocks_q, blocks_k;
    int layout_per_head;
} mask_spec;

/* The whole sequences a shard belongs to (desc->full_len_q, full_len_k; 0: the call's own). */
static inline size_t mask_full_len_q(const clattn_attention_desc *d) {
    return d->full_len_q ? d->full_len_q : d->len_q;
}
static inline size_t mask_full_len_k(const clattn_attention_desc *d) {
    return d->full_len_k ? d->full_len_k : d->len_k;
}

/* Whether a desc is a shard of longer sequences (any of the 0.3 shard fields set). */
static inline int mask_desc_is_shard(const clattn_attention_desc *d) {
    return d->q_start || d->k_start || d->full_len_q || d->full_len_k;
}

/* Builds the mask of a desc that passed problem validation; release it with mask_release.
 * @return CLATTN_SUCCESS or CLATTN_ERR_OUT_OF_MEMORY. */
clattn_status mask_from_desc(const clattn_attention_desc *desc, mask_spec *mask);
void mask_release(mask_spec *mask);

/* Key positions of the window for position p, before dilation and causality: [lo, hi] clipped
 * to [0, len_k - 1]; empty when lo > hi. */
static inline void mask_window_range(const mask_spec *m, int64_t p, int64_t *lo, int64_t *hi) {
    mask_class_range(p, 0, 1, m->len_k, m->left, m->right, 0, 1, lo, hi);
}

/* Whether a position is global: a key of the call, or a position one of its queries sits at
 * (the two ranges overlap in an ordinary call, where both flags say the same). */
static inline int mask_is_global(const mask_spec *m, int64_t position) {
    if (!m->is_global) return 0;
    if (position >= 0 && position < m->flags_len_k) return m->is_global[position];
    int64_t row = position - m->flags_offset;
    return row >= 0 && row < m->flags_len_q && m->is_global[m->flags_len_k + row];
}

/* Bytes of the flags the kernels read (is_global), 0 without global positions. */
static inline size_t mask_flag_bytes(const mask_spec *m) {
    return m->is_global ? (size_t)(m->len_k + m->len_q) : 0;
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

/* Allowed pairs of the pattern over all (b, h, i, j) (bias not counted). Exact, or UINT64_MAX
 * when the count passes 64 bits; costs O(Hq * Nq * (1 + blocks_k + globals)) at worst, not
 * O(Nq * Nk). */
uint64_t mask_count_pairs(const mask_spec *m, int64_t batch, int64_t heads);

#endif
