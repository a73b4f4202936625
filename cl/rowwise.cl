/*
 * Fused attention shaped for GPUs. A work-group of BLOCK_M work-items owns a query tile, one
 * row per work-item (q and the O row in registers); for each key tile the group copies the
 * packed K^T tile [DQK_PAD][BLOCK_N] and V tile [BLOCK_N][DV_PAD] into local memory with
 * coalesced loads, then every work-item scores its row against the tile (all read the same
 * local word at once: a broadcast), updates its online softmax and accumulates P V. One row
 * per work-item needs no reductions, so no subgroup operations are required.
 *
 * Built after common.cl and tile_walk.cl; the planner sizes BLOCK_N so both tiles fit the
 * device's local memory and BLOCK_M to its work-group limit.
 */

/* One work-item's row and its running softmax state. */
typedef struct row_state {
    long i;                     /* query row, or -1 past the end */
    long lo, hi;                /* class-local key range in the current pass */
    float q[DQK_PAD];           /* pre-scaled by scale */
    float o[DV_PAD];            /* O row so far, normalised: the weighted mean of the V rows seen */
    float max, sum;             /* running maximum and sum of exp(score - max) */
    __global const void *q_src; /* the row of Q unscaled (q_src + q_row), for rescore */
    long q_row;
    float scale;
    __global uint *tile_count; /* COUNT_TILES: the key tiles visited, counted by work-item 0 */
} row_state;

/* Copies `count` floats from global to local memory, the group's work-items side by side. */
ALWAYS_INLINE void copy_to_local(__local float *dst, __global const float *src, int count) {
    for (int at = get_local_id(0); at < count; at += BLOCK_M) dst[at] = src[at];
}

/* Score c of the tile again, without overflow on the way (common.cl, rescored): a score that
 * came out non-finite from the pre-scaled q. NaN or an infinity in the inputs stays so. */
ALWAYS_INLINE float rescore(__constant attn_params *P, const row_state *st, __local const float *kt,
                            int c) {
    float2 dot = (float2)0.0f;
    for (int d = 0; d < P->dim_qk; d++)
        dot = rescore_add(dot, load_as(FEATURE(P, q_dtype), st->q_src, st->q_row + d),
                          kt[d * BLOCK_N + c]);
    return rescore_end(dot, st->scale);
}

/* The row against one key tile in local memory: scores, masks, softmax update, P V. O stays
 * normalised, the old row weighted by kept/sum and each new row by p/sum: a weighted mean of V's
 * rows never exceeds their largest magnitude, where the unnormalised sum of p*V overflowed for
 * V near FLT_MAX.
 * careful: the V tile holds a NaN or an infinity, so zero probabilities add nothing (instead of
 * 0 * NaN). */
ALWAYS_INLINE void attend_row(__constant attn_params *P, __global const uchar *layout,
                              __global const float *bias, __global const int *gpos, long b, long h,
                              long r, row_state *st, int pass, int kind, long k0,
                              __local const float *kt, __local const float *vt, int careful) {
    float s[BLOCK_N];
    if (get_local_id(0) == 0) COUNT_TILE(st->tile_count);
    for (int c = 0; c < BLOCK_N; c++) s[c] = 0.0f;
    for (int d = 0; d < DQK_PAD; d++) {
        const float qd = st->q[d];
        for (int c = 0; c < BLOCK_N; c++) s[c] = fma(qd, kt[d * BLOCK_N + c], s[c]);
    }
    if (st->i >= 0)
        for (int c = 0; c < BLOCK_N; c++)
            if (!isfinite(s[c])) s[c] = rescore(P, st, kt, c);
    if (kind == TILE_BOUNDED)
        for (int c = 0; c < BLOCK_N; c++)
            if (k0 + c < st->lo || k0 + c > st->hi) s[c] = -INFINITY;
    if (kind == TILE_GENERAL || FEATURE(P, has_bias) || MODIFIES_SCORES(P)) {
        long kpos[BLOCK_N];
        tile_key_positions(P, gpos, pass, r, k0, kpos);
        mask_and_bias(P, layout, bias, pass, kind, b, h, &st->i, 1, BLOCK_N, BLOCK_N, 1, kpos, 1,
                      s);
    }
    float tile_max = -INFINITY;
    for (int c = 0; c < BLOCK_N; c++) tile_max = fmax(tile_max, s[c]);
    const float new_max = fmax(st->max, tile_max);
    const float base = new_max == -INFINITY ? 0.0f : new_max; /* avoids -inf - -inf */
    const float alpha = exp2((st->max - base) * M_LOG2E_F);
    float tile_sum = 0.0f;
    for (int c = 0; c < BLOCK_N; c++) tile_sum += (s[c] = exp2((s[c] - base) * M_LOG2E_F));
    const float kept = st->sum * alpha, sum = kept + tile_sum;
    const float inv = sum == 0.0f ? 0.0f : 1.0f / sum; /* a NaN sum stays NaN */
    st->max = new_max;
    st->sum = sum;
    const float keep = kept_share(kept, sum);
    for (int e = 0; e < DV_PAD; e++) st->o[e] *= keep;
    for (int c = 0; c < BLOCK_N; c++) {
        if (careful && s[c] == 0.0f) continue;
        const float p = s[c] * inv;
        for (int e = 0; e < DV_PAD; e++) st->o[e] = fma(p, vt[c * DV_PAD + e], st->o[e]);
    }
}

/* Walks the key tiles of walk n of the group's query tile (tile_walk.cl's key_walk); every
 * work-item of the group takes the same tiles, so the barriers are uniform. */
ALWAYS_INLINE void walk_keys(__constant attn_params *P, const packed_keys *in, long tile, long n,
                             long b, long h, long kv_bh, row_state *st, __local float *kt,
                             __local float *vt) {
    key_walk w;
    key_walk_begin(P, in->row_list, in->tile_ptr, in->gpos, tile, h, n, &w);
    st->lo = 0;
    st->hi = -1;
    if (st->i >= 0 && w.pass != PASS_GLOBAL_KEYS)
        row_key_range(P, w.pass, w.r, st->i + P->offset, &st->lo, &st->hi);
    __global const float *k, *v;
    __global const uchar *v_bad;
    key_walk_rows(P, in, &w, kv_bh, &k, &v, &v_bad);
    for (long i = 0; i < w.count; i++) {
        long k0;
        const int kind = key_walk_tile(P, in->tile_ptr, in->tile_idx, &w, i, &k0);
        copy_to_local(kt, k + k0 * DQK_PAD, DQK_PAD * BLOCK_N);
        copy_to_local(vt, v + k0 * DV_PAD, BLOCK_N * DV_PAD);
        barrier(CLK_LOCAL_MEM_FENCE);
        attend_row(P, in->layout, in->bias, in->gpos, b, h, w.r, st, w.pass, kind, k0, kt, vt,
                   tile_has_bad_values(v_bad + k0));
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* O = o (normalised already) and LSE = max + log(sum); an empty row gets O = 0, LSE = -inf. */
ALWAYS_INLINE void store_row(__constant attn_params *P, __global const uchar *is_global,
                             __global void *O, __global float *LSE, long b, long h,
                             const row_state *st) {
    if (st->i < 0 || row_left_to_global_pass(P, is_global, st->i)) return;
    /* no allowed key; a row of NaN scores has max -inf but sum NaN and stays NaN */
    const int empty = st->max == -INFINITY && st->sum == 0.0f;
    float top = st->max, sum = st->sum; /* with the head's sink, if any */
    const float keep = sink_fold(P, h, &top, &sum);
    const long row = P->o_offset + b * P->o_stride_b + h * P->o_stride_h + st->i * P->o_stride_s;
    for (int e = 0; e < P->dim_v; e++)
        store_o(FEATURE(P, out_dtype), empty ? 0.0f : st->o[e] * keep, O, row + e);
    store_lse(P, LSE, (b * P->heads_q + h) * P->len_q + st->i, top, sum,
              top == -INFINITY && sum == 0.0f);
}

/* Work-group (tile, b*Hq + h) of BLOCK_M work-items, one query row each. */
__kernel __attribute__((reqd_work_group_size(BLOCK_M, 1, 1))) void
attention_rowwise(ATTENTION_KERNEL_ARGS) {
    __local float kt[DQK_PAD * BLOCK_N]; /* K^T tile */
    __local float vt[BLOCK_N * DV_PAD];  /* V tile */
    __constant attn_params *P = PASS_PARAMS(P_window, P_rows, row_tiles);
    const long tile = PASS_TILE(row_tiles), bh = get_group_id(1);
    if (tile_row(P, row_list, tile, 0) < 0) return; /* the whole group: a class's spare tile */
    long h;
    const long b = div_rem(bh, P->heads_q, &h);
    const long kv_bh = b * P->heads_kv + h / (P->heads_q / P->heads_kv);
    row_state st;
    TILE_COUNTER_INIT(st.tile_count);
    st.i = tile_row(P, row_list, tile, get_local_id(0));
    const long q_row =
        P->q_offset + b * P->q_stride_b + h * P->q_stride_h + (st.i < 0 ? 0 : st.i) * P->q_stride_s;
    for (int d = 0; d < DQK_PAD; d++) {
        const int present = st.i >= 0 && d < P->dim_qk;
        st.q[d] = present ? load_as(FEATURE(P, q_dtype), Q, q_row + d) * q_scale : 0.0f;
    }
    st.q_src = Q;
    st.q_row = q_row;
    st.scale = q_scale;
    for (int e = 0; e < DV_PAD; e++) st.o[e] = 0.0f;
    st.max = -INFINITY;
    st.sum = 0.0f;
    const packed_keys keys = PACKED_KEYS;
    for (long n = 0; n < key_walks(P); n++) walk_keys(P, &keys, tile, n, b, h, kv_bh, &st, kt, vt);
    store_row(P, is_global, O, LSE, b, h, &st);
}
