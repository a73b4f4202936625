/*
 * Split-KV attention ("flash-decoding"), for calls with few query rows: decoding over a KV
 * cache, and short query blocks. K and V are read where they are, in their storage type, from
 * the caller's tensors or a cache's storage (contiguous, or pages through a block table), with a
 * length per sequence: nothing is packed, so a decode step costs one pass over the cache.
 *
 * Two forms: GROUP == 1 (CPUs) is attention_split below, GROUP > 1 (GPUs) attention_split_group
 * at the end of the file, which shares a row block and chunk among GROUP work-items.
 *
 * Work-item (row block rb, chunk c) x (b, kv head): it owns BLOCK_R query rows of one (b, kv
 * head) - the rows r = i * group + g of its group of query heads, so that a key is read once
 * for every head that shares it (GQA) - and the keys [c * chunk_len, (c + 1) * chunk_len) of
 * the sequence. It walks them in tiles of 16 keys with an online softmax whose accumulator stays
 * normalised (O = sum p V / sum p at every step, so values near FLT_MAX never overflow it).
 * In a tile, each row's 16 dot products are kept lane by lane and summed across lanes all at
 * once, in registers (sum_lanes16_reversed), and the V rows are read in passes of V_GROUP x 16
 * columns whose accumulators stay in registers. It writes a partial O and its LSE per chunk;
 * merge_chunks combines the chunks exactly:
 *     LSE = log sum_c exp(LSE_c),  O = sum_c exp(LSE_c - LSE) O_c.
 * With one chunk the kernel writes O and LSE itself.
 *
 * Per sequence b (docs/semantics.md section 6): keys L_b = seq_len[b] (or len_k), valid query rows
 * q_b = q_len[b] (or len_q), query i at key position p = i + L_b - q_b; rows i >= q_b are empty.
 * Scores stay in the natural domain (a finite score never becomes -inf), and one whose float32
 * sum overflowed on the way is summed again with scaled operands (rescore); exp(x) is
 * exp2((x - max) * log2 e).
 *
 * Built after common.cl. Q is IN_DTYPE, K and V KV_DTYPE, O P->out_dtype. DQK_PAD and DV_PAD are
 * multiples of 16 at least the head dims.
 */
#ifndef BLOCK_R
#define BLOCK_R 4
#endif
#ifndef DQK_PAD
#define DQK_PAD 64
#endif
#ifndef DV_PAD
#define DV_PAD 64
#endif
#ifndef GROUP
#define GROUP 1 /* work-items a work-group: 1, or a power of two for attention_split_group */
#endif
#define KEY_TILE 16
/* 16-wide columns of O a pass over a tile's V rows keeps in registers (with BLOCK_R rows) */
#define V_GROUP (NDV % 4 == 0 ? 4 : NDV % 2 == 0 ? 2 : 1)
#define NQK      (DQK_PAD / 16) /* 16-wide vectors of a q or k row */
#define NDV      (DV_PAD / 16)  /* of a v or o row */

/* The rows of a work-item and their running state. */
typedef struct row_block {
    long b, kvh, keys, queries, offset; /* sequence b: L_b keys, q_b valid queries */
    long h[BLOCK_R], i[BLOCK_R];        /* query head and row; i = -1: not a valid row */
    long at[BLOCK_R];                   /* the row index i even when not valid (< 0: none) */
    long lo[BLOCK_R], hi[BLOCK_R];      /* keys each row may see by causality and window */
    float16 q[BLOCK_R][NQK];            /* pre-scaled by scale, zero past dim_qk */
    float16 acc[BLOCK_R][NDV];          /* O so far, normalised */
    float max[BLOCK_R], sum[BLOCK_R];   /* running maximum and sum of exp(s - max) */
    __global const IN_T *Q;             /* Q and the scale, for rescore */
    float scale;
} row_block;

/* 16 values of a K or V row from d0 on, zero past `dim`. */
ALWAYS_INLINE float16 load_kv16(__global const KV_T *x, long row, int d0, long dim) {
    if (d0 + 16 <= dim) return LOAD16_KV_ROW(x, row, d0);
    float lanes[16];
    for (int e = 0; e < 16; e++) lanes[e] = d0 + e < dim ? LOAD_KV(x, row + d0 + e) : 0.0f;
    return vload16(0, lanes);
}

/* n 16-wide vectors of a K or V row from value 16 * v0 on (v0 even), zero past `dim`: whole
 * pairs at once, so that a quantised block's scale is widened once. */
ALWAYS_INLINE void load_kv_vectors(__global const KV_T *x, long row, int v0, int n, long dim,
                                   float16 *out) {
    #pragma unroll
    for (int v = 0; v < n; v += 2) {
        const int d0 = (v0 + v) * 16;
        if (v + 1 < n && d0 + 32 <= dim) {
            LOAD32_KV_ROW(x, row, d0, &out[v], &out[v + 1]);
            continue;
        }
        out[v] = load_kv16(x, row, d0, dim);
        if (v + 1 < n) out[v + 1] = load_kv16(x, row, d0 + 16, dim);
    }
}

/* The block's rows and their key ranges (not their queries); returns 0 when none is valid. */
ALWAYS_INLINE int locate_rows(__constant attn_params *P, __global const IN_T *Q,
                              __global const int *seq_len, __global const int *q_len, long rb,
                              long bkv, float scale, row_block *t) {
    t->b = bkv / P->heads_kv, t->kvh = bkv % P->heads_kv;
    t->keys = P->per_sequence ? seq_len[t->b] : P->len_k;
    t->queries = P->per_sequence ? q_len[t->b] : P->len_q;
    t->offset = P->per_sequence ? t->keys - t->queries : P->offset; /* a shard's, or Nk - Nq */
    t->Q = Q, t->scale = scale;
    int valid = 0;
    for (int k = 0; k < BLOCK_R; k++) {
        const long r = rb * BLOCK_R + k, i = r / P->group;
        t->h[k] = t->kvh * P->group + r % P->group;
        t->at[k] = i < P->len_q ? i : -1;
        t->i[k] = i < t->queries && i < P->len_q ? i : -1;
        t->lo[k] = 0, t->hi[k] = -1;
        if (t->i[k] >= 0)
            mask_class_range(i + t->offset, 0, 1, t->keys, P->left, P->right, (int)P->causal,
                             !P->has_global, &t->lo[k], &t->hi[k]);
        valid |= t->i[k] >= 0;
    }
    return valid;
}

/* Where row k's query starts in Q (row 0's when the row is not valid). */
ALWAYS_INLINE long query_start(__constant attn_params *P, const row_block *t, int k) {
    return P->q_offset + t->b * P->q_stride_b + t->h[k] * P->q_stride_h +
           (t->i[k] < 0 ? 0 : t->i[k]) * P->q_stride_s;
}

/* The block's rows, their key ranges and pre-scaled queries; returns 0 when none is valid. */
ALWAYS_INLINE int load_rows(__constant attn_params *P, __global const IN_T *Q,
                            __global const int *seq_len, __global const int *q_len, long rb,
                            long bkv, float scale, row_block *t) {
    const int valid = locate_rows(P, Q, seq_len, q_len, rb, bkv, scale, t);
    for (int k = 0; k < BLOCK_R; k++) {
        const long row = query_start(P, t, k);
        float lanes[DQK_PAD];
        for (int d = 0; d < DQK_PAD; d++)
            lanes[d] = t->i[k] >= 0 && d < P->dim_qk ? LOAD_IN(Q, row + d) * scale : 0.0f;
        #pragma unroll
        for (int v = 0; v < NQK; v++) t->q[k][v] = vload16(v, lanes);
        #pragma unroll
        for (int v = 0; v < NDV; v++) t->acc[k][v] = (float16)0.0f;
        t->max[k] = -INFINITY, t->sum[k] = 0.0f;
    }
    return valid;
}

/* Whether row k sees key j, beyond its [lo, hi] range: dilation, globals, layout. */
ALWAYS_INLINE int pair_allowed(__constant attn_params *P, __global const uchar *is_global,
                               __global const uchar *layout, const row_block *t, int k, long j) {
    const long i = t->i[k], p = i + t->offset;
    if (i < 0) return 0;
    if (!P->has_global && !P->has_layout && P->dilation == 1)
        return j >= t->lo[k] && j <= t->hi[k];
    const int key_global = is_global_position(P, is_global, j);
    const int row_global = is_global_position(P, is_global, p);
    return mask_combine(mask_causal_ok(P->causal, p, j), layout_ok(P, layout, t->h[k], i, j),
                        window_ok(P, p, j), key_global, row_global);
}

/* Score x of (row r, key j) with what applies key by key: the mask past the row's [lo, hi]
 * (dilation, globals, a layout; not when `simple`), the score modifiers and the bias. */
ALWAYS_INLINE float keyed_score(__constant attn_params *P, __global const float *bias,
                                __global const uchar *is_global, __global const uchar *layout,
                                const row_block *t, int r, long j, float x, int simple) {
    if (!simple && !pair_allowed(P, is_global, layout, t, r, j)) return -INFINITY;
    if (MODIFIES_SCORES(P) && x != -INFINITY)
        x = modified_score(P, x, t->b, t->h[r], t->i[r] + t->offset, j);
    if (P->has_bias && x != -INFINITY)
        x = add_saturating(x, bias[P->bias_offset + t->b * P->bias_stride_b +
                                   t->h[r] * P->bias_stride_h + t->i[r] * P->bias_stride_s + j]);
    return x;
}

/* Score (row r, key j) again without overflow on the way (common.cl, rescored): for a score
 * that came out non-finite from the pre-scaled q. NaN or an infinity in the inputs stays so. */
ALWAYS_INLINE float rescore(__constant attn_params *P, __global const KV_T *K,
                            __global const int *block_table, const row_block *t, int r, long j) {
    const long q_row = query_start(P, t, r);
    const long k_row = kv_row(P, block_table, P->k_offset, P->k_stride_b, P->k_stride_h,
                              P->k_stride_s, t->b, t->kvh, j);
    float2 dot = (float2)0.0f;
    for (int d = 0; d < P->dim_qk; d++)
        dot = rescore_add(dot, LOAD_IN(t->Q, q_row + d), LOAD_KV(K, k_row + d));
    return rescore_end(dot, t->scale);
}

/* The lanes (keys j0 + c) of row r's tile that are masked before any key-by-key rule: c >= n,
 * and, when `simple` (no dilation, globals or layout), keys outside the row's [lo, hi]. */
ALWAYS_INLINE int16 masked_lanes(const row_block *t, int r, long j0, int n, int simple) {
    const int16 key = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    /* the row's key range [lo, hi] relative to j0, clamped to the tile */
    const int lo = t->i[r] < 0 ? 1 : (int)clamp(t->lo[r] - j0, -1L, (long)KEY_TILE);
    const int hi = t->i[r] < 0 ? 0 : (int)clamp(t->hi[r] - j0, -1L, (long)KEY_TILE);
    return (key >= (int16)n) |
           ((int16)(simple ? -1 : 0) & ((key < (int16)lo) | (key > (int16)hi)));
}

/* Scores of the tile's keys j0 + c (c < n) for every row: scale * q.k (+ bias), -inf where the
 * pair is masked or c >= n. s is [BLOCK_R][KEY_TILE]. */
ALWAYS_INLINE void tile_scores(__constant attn_params *P, __global const KV_T *K,
                               __global const int *block_table, __global const float *bias,
                               __global const uchar *is_global, __global const uchar *layout,
                               const row_block *t, long j0, int n, float s[BLOCK_R][KEY_TILE]) {
    float16 dots[BLOCK_R][KEY_TILE]; /* q.k lane by lane, key c at [BITS_REVERSED4(c)] */
    for (int c = 0; c < KEY_TILE; c++) {
        float16 k[NQK];
        const long row = kv_row(P, block_table, P->k_offset, P->k_stride_b, P->k_stride_h,
                                P->k_stride_s, t->b, t->kvh, j0 + min(c, n - 1));
        load_kv_vectors(K, row, 0, NQK, P->dim_qk, k);
        #pragma unroll
        for (int r = 0; r < BLOCK_R; r++) { /* two chains of fma, half as long */
            float16 even = (float16)0.0f, odd = (float16)0.0f;
            #pragma unroll
            for (int v = 0; v + 1 < NQK; v += 2)
                even = fma(t->q[r][v], k[v], even), odd = fma(t->q[r][v + 1], k[v + 1], odd);
            if (NQK % 2) even = fma(t->q[r][NQK - 1], k[NQK - 1], even);
            dots[r][BITS_REVERSED4(c)] = even + odd;
        }
    }
    /* The rare and key-by-key paths run once for all rows, not in the unrolled loop: BLOCK_R
     * copies of them took PoCL twice as long to compile (bench/README.md, "Build less"). */
    const int simple = !P->has_global && !P->has_layout && P->dilation == 1;
    int rare = 0; /* a valid row's score came out non-finite: huge inputs, NaN or inf */
    #pragma unroll
    for (int r = 0; r < BLOCK_R; r++) {
        const float16 x = sum_lanes16_reversed(dots[r]);
        rare |= t->i[r] >= 0 && any(isinf(x) | isnan(x));
        vstore16(select(x, (float16)(-INFINITY), masked_lanes(t, r, j0, n, simple)), 0, s[r]);
    }
    if (rare)
        for (int r = 0; r < BLOCK_R; r++) {
            int masked[KEY_TILE];
            vstore16(masked_lanes(t, r, j0, n, simple), 0, masked);
            for (int c = 0; c < n; c++)
                if (t->i[r] >= 0 && !masked[c] && !isfinite(s[r][c]))
                    s[r][c] = rescore(P, K, block_table, t, r, j0 + c);
        }
    if (simple && !MODIFIES_SCORES(P) && !P->has_bias) return; /* nothing key by key */
    for (int r = 0; r < BLOCK_R; r++)
        for (int c = 0; c < n; c++)
            s[r][c] = keyed_score(P, bias, is_global, layout, t, r, j0 + c, s[r][c], simple);
}

/* Online softmax over one tile of scores s[row][key], 16-wide: the new maxima, and s turned
 * into the weights of the normalised update acc = acc * keep + sum_c s[c] V[c]. */
ALWAYS_INLINE void tile_weights(row_block *t, float s[BLOCK_R][KEY_TILE], float keep[BLOCK_R]) {
    #pragma unroll
    for (int r = 0; r < BLOCK_R; r++) {
        const float16 x = vload16(0, s[r]);
        const float new_max = fmax(t->max[r], max_across(max_of((float16)(-INFINITY), x)).s0);
        const float base = new_max == -INFINITY ? 0.0f : new_max; /* avoids -inf - -inf */
        const float alpha = exp2((t->max[r] - base) * M_LOG2E_F);
        const float16 e = exp2((x - base) * M_LOG2E_F);
        const float new_sum = t->sum[r] * alpha + sum_across(e).s0;
        const float inv = new_sum > 0.0f ? 1.0f / new_sum : 0.0f;
        keep[r] = kept_share(t->sum[r] * alpha, new_sum);
        vstore16(e * inv, 0, s[r]);
        t->max[r] = new_max;
        t->sum[r] = new_sum;
    }
}

/* Whether a valid row gives one of the tile's first n keys a zero weight: such a key must add
 * nothing (not 0 * an infinite or NaN value), so the update goes key by key. */
ALWAYS_INLINE int has_zero_weight(const row_block *t, float s[BLOCK_R][KEY_TILE], int n) {
    const int16 key = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    int16 zero = (int16)0;
    #pragma unroll
    for (int r = 0; r < BLOCK_R; r++)
        if (t->i[r] >= 0) zero |= (vload16(0, s[r]) == (float16)0.0f) & (key < (int16)n);
    return any(zero);
}

/* One tile of keys [j0, j0 + n), n <= 16. */
ALWAYS_INLINE void attend_tile(__constant attn_params *P, __global const KV_T *K,
                               __global const KV_T *V, __global const int *block_table,
                               __global const float *bias, __global const uchar *is_global,
                               __global const uchar *layout, row_block *t, long j0, int n) {
    float s[BLOCK_R][KEY_TILE], keep[BLOCK_R];
    long row[KEY_TILE];
    tile_scores(P, K, block_table, bias, is_global, layout, t, j0, n, s);
    tile_weights(t, s, keep);
    for (int c = 0; c < n; c++)
        row[c] = kv_row(P, block_table, P->v_offset, P->v_stride_b, P->v_stride_h, P->v_stride_s,
                        t->b, t->kvh, j0 + c);
    const int by_key = has_zero_weight(t, s, n);
    #pragma unroll
    for (int g = 0; g < NDV; g += V_GROUP) { /* V_GROUP x 16 columns of O in registers */
        float16 acc[BLOCK_R][V_GROUP];
        #pragma unroll
        for (int r = 0; r < BLOCK_R; r++)
            #pragma unroll
            for (int v = 0; v < V_GROUP; v++) acc[r][v] = t->acc[r][g + v] * keep[r];
        for (int c = 0; c < n; c++) {
            float16 vv[V_GROUP];
            load_kv_vectors(V, row[c], g, V_GROUP, P->dim_v, vv);
            #pragma unroll
            for (int r = 0; r < BLOCK_R; r++) {
                if (by_key && s[r][c] == 0.0f) continue;
                #pragma unroll
                for (int v = 0; v < V_GROUP; v++)
                    acc[r][v] = fma((float16)s[r][c], vv[v], acc[r][v]);
            }
        }
        #pragma unroll
        for (int r = 0; r < BLOCK_R; r++)
            #pragma unroll
            for (int v = 0; v < V_GROUP; v++) t->acc[r][g + v] = acc[r][v];
    }
}

/* The keys any row of the block may see within chunk c: [*first, *end). */
ALWAYS_INLINE void chunk_keys(__constant attn_params *P, const row_block *t, long c, long *first,
                              long *end) {
    long lo = LONG_MAX, hi = -1;
    #pragma unroll
    for (int r = 0; r < BLOCK_R; r++)
        if (t->i[r] >= 0 && t->lo[r] <= t->hi[r]) lo = min(lo, t->lo[r]), hi = max(hi, t->hi[r]);
    *first = max(lo, c * P->chunk_len);
    *end = min(hi + 1, min((c + 1) * P->chunk_len, t->keys));
}

/* Chunk results: O and LSE themselves with one chunk, else the partials of chunk c, whose LSE
 * is kept as its parts (max, sum): merged through m + log(sum) in float32, a row whose scores
 * are all near -FLT_MAX would lose its keys' count. An empty row (no allowed key) has O = 0 and
 * LSE = -inf; a row of NaN scores stays NaN. */
ALWAYS_INLINE void store_rows(__constant attn_params *P, const row_block *t, long c,
                              __global float *O_part, __global float *LSE_part,
                              __global void *O, __global float *LSE) {
    #pragma unroll 1
    for (int r = 0; r < BLOCK_R; r++) {
        if (t->at[r] < 0 || (t->i[r] < 0 && P->chunks > 1)) continue; /* merge_chunks does */
        const int empty = t->i[r] < 0 || (t->max[r] == -INFINITY && t->sum[r] == 0.0f);
        float top = t->max[r], sum = t->sum[r]; /* one chunk: with the head's sink, if any */
        const float keep = P->chunks > 1 || t->i[r] < 0 ? 1.0f : sink_fold(P, t->h[r], &top, &sum);
        float o[DV_PAD];
        #pragma unroll
        for (int v = 0; v < NDV; v++) vstore16(empty ? (float16)0.0f : t->acc[r][v] * keep, v, o);
        const long row = (t->b * P->heads_q + t->h[r]) * P->len_q + t->at[r];
        if (P->chunks > 1) {
            for (int d = 0; d < P->dim_v; d++) O_part[(row * P->chunks + c) * P->dim_v + d] = o[d];
            LSE_part[2 * (row * P->chunks + c)] = empty ? -INFINITY : t->max[r];
            LSE_part[2 * (row * P->chunks + c) + 1] = empty ? 0.0f : t->sum[r];
            continue;
        }
        const long at = P->o_offset + t->b * P->o_stride_b + t->h[r] * P->o_stride_h +
                        t->at[r] * P->o_stride_s;
        for (int d = 0; d < P->dim_v; d++) store_o(P->out_dtype, o[d], O, at + d);
        store_lse(P, LSE, row, top, sum, t->i[r] < 0 || (top == -INFINITY && sum == 0.0f));
    }
}

#if GROUP == 1
/* Work-item (rb * chunks + c, b * Hkv + kvh). */
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void
attention_split(__constant attn_params *P, __global const IN_T *Q, __global const KV_T *K,
                __global const KV_T *V, __global const int *seq_len, __global const int *q_len,
                __global const int *block_table, __global const float *bias,
                __global const uchar *is_global, __global const uchar *layout,
                __global float *O_part, __global float *LSE_part, __global void *O,
                __global float *LSE, float scale) {
    row_block t;
    const long rb = get_global_id(0) / P->chunks, c = get_global_id(0) % P->chunks;
    /* with one chunk, rows past a sequence's queries are written empty here */
    if (!load_rows(P, Q, seq_len, q_len, rb, get_global_id(1), scale, &t) && P->chunks > 1) return;
    long first, end;
    chunk_keys(P, &t, c, &first, &end);
    for (long j0 = first; j0 < end; j0 += KEY_TILE)
        attend_tile(P, K, V, block_table, bias, is_global, layout, &t, j0,
                    (int)min((long)KEY_TILE, end - j0));
    store_rows(P, &t, c, O_part, LSE_part, O, LSE);
}
#else
/* ---------------------------------------------------------------- the work-group form (GPUs)
 *
 * GROUP work-items share a row block and a chunk: a tile is GROUP keys, one a work-item, whose
 * scores it computes for every row (its K row read whole, the queries from local memory); the
 * tile's maxima and sums are reduced across the group in local memory, and the weights shared
 * there. For P V, work-item l takes the 16-column block l % NDV of O and the keys
 * k = key lane + KEY_LANES m of the tile (key lane l / NDV): a V row's blocks are read by
 * consecutive work-items, 16 values each, and KEY_LANES rows at once, so that many loads are in
 * flight (one 2-byte column a work-item, key after key, left a GPU waiting on each). The key
 * lanes' sums are added in local memory once a chunk. Every work-item keeps the same running
 * maxima and sums. Same semantics as attention_split, key for key. */
#define GROUP_COLS ((DV_PAD + GROUP - 1) / GROUP) /* O columns a work-item stores a row */
#define KEY_LANES  (GROUP / NDV)                  /* keys of a tile read at once */
#if GROUP < NDV
#error "the work-group form needs a work-item for each 16 columns of O (GROUP >= DV_PAD / 16)"
#endif

/* x[r] becomes its maximum (or sum) over the work-group, for each row r. */
ALWAYS_INLINE void group_reduce(float x[BLOCK_R], int take_max, __local float (*scratch)[GROUP]) {
    const int l = get_local_id(0);
    for (int r = 0; r < BLOCK_R; r++) scratch[r][l] = x[r];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int width = GROUP / 2; width > 0; width /= 2) {
        if (l < width)
            for (int r = 0; r < BLOCK_R; r++)
                scratch[r][l] = take_max ? fmax(scratch[r][l], scratch[r][l + width])
                                         : scratch[r][l] + scratch[r][l + width];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int r = 0; r < BLOCK_R; r++) x[r] = scratch[r][0];
    barrier(CLK_LOCAL_MEM_FENCE); /* scratch is written again next */
}

/* Every row's score of key j (-inf past the chunk's end, or where the pair is masked). */
ALWAYS_INLINE void key_scores(__constant attn_params *P, __global const KV_T *K,
                              __global const int *block_table, __global const float *bias,
                              __global const uchar *is_global, __global const uchar *layout,
                              const row_block *t, __local float (*q)[DQK_PAD], long j, long end,
                              float s[BLOCK_R]) {
    float dots[BLOCK_R];
    for (int r = 0; r < BLOCK_R; r++) dots[r] = 0.0f;
    const long row = kv_row(P, block_table, P->k_offset, P->k_stride_b, P->k_stride_h,
                            P->k_stride_s, t->b, t->kvh, min(j, end - 1));
    for (int v = 0; v < NQK; v += 2) { /* pairs of 16 values: a quantised block's scale once */
        float16 k[2];
        if (v + 1 < NQK) load_kv_vectors(K, row, v, 2, P->dim_qk, k);
        else load_kv_vectors(K, row, v, 1, P->dim_qk, k);
        for (int w = 0; w < 2 && v + w < NQK; w++)
            for (int r = 0; r < BLOCK_R; r++) dots[r] += hsum16(vload16(v + w, q[r]) * k[w]);
    }
    const int simple = !P->has_global && !P->has_layout && P->dilation == 1;
    for (int r = 0; r < BLOCK_R; r++) {
        s[r] = -INFINITY;
        if (j >= end || t->i[r] < 0 || (simple && (j < t->lo[r] || j > t->hi[r]))) continue;
        const float x = isfinite(dots[r]) ? dots[r] : rescore(P, K, block_table, t, r, j);
        s[r] = keyed_score(P, bias, is_global, layout, t, r, j, x, simple);
    }
}

/* acc += the tile's weights times its V rows: the work-item's 16 columns of the n keys from j0
 * on that fall to its key lane. */
ALWAYS_INLINE void tile_values(__constant attn_params *P, __global const KV_T *V,
                               __global const int *block_table, const row_block *t,
                               __local const float (*weights)[GROUP], long j0, int n,
                               float16 acc[BLOCK_R]) {
    const int l = get_local_id(0);
    if (l / NDV >= KEY_LANES) return; /* GROUP not a multiple of NDV: a spare work-item */
    for (int k = l / NDV; k < n; k += KEY_LANES) {
        const long row = kv_row(P, block_table, P->v_offset, P->v_stride_b, P->v_stride_h,
                                P->v_stride_s, t->b, t->kvh, j0 + k);
        const float16 v = load_kv16(V, row, 16 * (l % NDV), P->dim_v);
        for (int r = 0; r < BLOCK_R; r++) { /* a zero weight adds nothing, not 0 * inf */
            const float w = weights[r][k];
            if (w != 0.0f) acc[r] = fma((float16)w, v, acc[r]);
        }
    }
}

/* The key lanes' acc added into out, lane after lane; cols[r][u] = column l + GROUP u of row r
 * (group_store's columns). */
ALWAYS_INLINE void lanes_summed(const float16 acc[BLOCK_R], __local float (*out)[DV_PAD],
                                float cols[BLOCK_R][GROUP_COLS]) {
    const int l = get_local_id(0);
    for (int lane = 0; lane < KEY_LANES; lane++) {
        if (l / NDV == lane)
            for (int r = 0; r < BLOCK_R; r++) {
                __local float *o = out[r] + 16 * (l % NDV);
                vstore16(lane == 0 ? acc[r] : vload16(0, o) + acc[r], 0, o);
            }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int r = 0; r < BLOCK_R; r++)
        for (int u = 0; u < GROUP_COLS; u++)
            cols[r][u] = l + GROUP * u < DV_PAD ? out[r][l + GROUP * u] : 0.0f;
}

/* The chunk's results, as store_rows writes them; work-item l writes the columns it holds. */
ALWAYS_INLINE void group_store(__constant attn_params *P, const row_block *t, long c,
                               float acc[BLOCK_R][GROUP_COLS], const float max[BLOCK_R],
                               const float sum[BLOCK_R], __global float *O_part,
                               __global float *LSE_part, __global void *O, __global float *LSE) {
    const int l = get_local_id(0);
    for (int r = 0; r < BLOCK_R; r++) {
        if (t->at[r] < 0 || (t->i[r] < 0 && P->chunks > 1)) continue; /* merge_chunks does */
        const int empty = t->i[r] < 0 || (max[r] == -INFINITY && sum[r] == 0.0f);
        float top = max[r], total = sum[r]; /* one chunk: with the head's sink, if any */
        const float keep =
            P->chunks > 1 || t->i[r] < 0 ? 1.0f : sink_fold(P, t->h[r], &top, &total);
        const long row = (t->b * P->heads_q + t->h[r]) * P->len_q + t->at[r];
        const long at = P->o_offset + t->b * P->o_stride_b + t->h[r] * P->o_stride_h +
                        t->at[r] * P->o_stride_s;
        for (int u = 0; u < GROUP_COLS; u++) {
            const int d = l + GROUP * u;
            const float o = empty ? 0.0f : acc[r][u] * keep;
            if (d < P->dim_v && P->chunks > 1) O_part[(row * P->chunks + c) * P->dim_v + d] = o;
            else if (d < P->dim_v) store_o(P->out_dtype, o, O, at + d);
        }
        if (l > 0) continue;
        if (P->chunks > 1) {
            LSE_part[2 * (row * P->chunks + c)] = empty ? -INFINITY : max[r];
            LSE_part[2 * (row * P->chunks + c) + 1] = empty ? 0.0f : sum[r];
        } else {
            store_lse(P, LSE, row, top, total, t->i[r] < 0 || (top == -INFINITY && total == 0.0f));
        }
    }
}

/* Work-group (rb * chunks + c, b * Hkv + kvh) of GROUP work-items. */
__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1))) void
attention_split_group(__constant attn_params *P, __global const IN_T *Q, __global const KV_T *K,
                      __global const KV_T *V, __global const int *seq_len,
                      __global const int *q_len, __global const int *block_table,
                      __global const float *bias, __global const uchar *is_global,
                      __global const uchar *layout, __global float *O_part,
                      __global float *LSE_part, __global void *O, __global float *LSE,
                      float scale) {
    /* the rows' queries (pre-scaled, zero past dim_qk) while the keys are scored, then the
     * chunk's O, the key lanes' sums added */
    __local float q_then_o[BLOCK_R * (DQK_PAD > DV_PAD ? DQK_PAD : DV_PAD)];
    __local float(*q)[DQK_PAD] = (__local float(*)[DQK_PAD])q_then_o;
    __local float weights[BLOCK_R][GROUP]; /* the tile's weights, key by key */
    __local float scratch[BLOCK_R][GROUP];
    const int l = get_local_id(0);
    const long rb = get_group_id(0) / P->chunks, c = get_group_id(0) % P->chunks;
    row_block t;
    /* the same for the whole group: with one chunk, rows past a sequence's queries are written
     * empty below */
    if (!locate_rows(P, Q, seq_len, q_len, rb, get_global_id(1), scale, &t) && P->chunks > 1)
        return;
    for (int x = l; x < BLOCK_R * DQK_PAD; x += GROUP) {
        const int r = x / DQK_PAD, d = x % DQK_PAD;
        q[r][d] = t.i[r] >= 0 && d < P->dim_qk ? LOAD_IN(Q, query_start(P, &t, r) + d) * scale
                                               : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float16 acc[BLOCK_R]; /* the work-item's 16 columns of O, over its key lane's keys */
    float max[BLOCK_R], sum[BLOCK_R];
    for (int r = 0; r < BLOCK_R; r++) max[r] = -INFINITY, sum[r] = 0.0f, acc[r] = 0.0f;
    long first, end;
    chunk_keys(P, &t, c, &first, &end);
    for (long j0 = first; j0 < end; j0 += GROUP) {
        float s[BLOCK_R], top[BLOCK_R], total[BLOCK_R], keep[BLOCK_R];
        key_scores(P, K, block_table, bias, is_global, layout, &t, q, j0 + l, end, s);
        for (int r = 0; r < BLOCK_R; r++) top[r] = s[r];
        group_reduce(top, 1, scratch);
        for (int r = 0; r < BLOCK_R; r++) { /* the normalised update, as tile_weights */
            const float new_max = fmax(max[r], top[r]);
            const float base = new_max == -INFINITY ? 0.0f : new_max;
            keep[r] = exp2((max[r] - base) * M_LOG2E_F);
            total[r] = s[r] = exp2((s[r] - base) * M_LOG2E_F);
            max[r] = new_max;
        }
        group_reduce(total, 0, scratch);
        for (int r = 0; r < BLOCK_R; r++) {
            const float new_sum = sum[r] * keep[r] + total[r];
            const float inv = new_sum > 0.0f ? 1.0f / new_sum : 0.0f;
            keep[r] = kept_share(sum[r] * keep[r], new_sum);
            weights[r][l] = s[r] * inv;
            sum[r] = new_sum;
            acc[r] *= keep[r];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        tile_values(P, V, block_table, &t, weights, j0, (int)min((long)GROUP, end - j0), acc);
        barrier(CLK_LOCAL_MEM_FENCE); /* weights is written again next */
    }
    float cols[BLOCK_R][GROUP_COLS];
    lanes_summed(acc, (__local float(*)[DV_PAD])q_then_o, cols); /* q read: the last barrier */
    group_store(P, &t, c, cols, max, sum, O_part, LSE_part, O, LSE);
}
#endif

/* The chunks of every row merged: work-item (d, row) with row = (b * Hq + h) * Nq + i, d
 * rounded up to whole work-groups (kernel_launch_padded). Rows past a sequence's valid queries
 * (never written by attention_split) get O = 0, LSE = -inf. */
__kernel void merge_chunks(__constant attn_params *P, __global const int *q_len,
                           __global const float *O_part, __global const float *LSE_part,
                           __global void *O, __global float *LSE) {
    const long d = get_global_id(0), row = get_global_id(1);
    if (d >= P->dim_v) return;
    const long i = row % P->len_q, bh = row / P->len_q, b = bh / P->heads_q, h = bh % P->heads_q;
    const long queries = P->per_sequence ? q_len[b] : P->len_q;
    float m = -INFINITY; /* the row's largest score, over the chunks' (parts: max, sum) */
    int nan = 0;
    for (long c = 0; i < queries && c < P->chunks; c++) {
        const float cm = LSE_part[2 * (row * P->chunks + c)];
        const float cl = LSE_part[2 * (row * P->chunks + c) + 1];
        nan |= isnan(cm) || isnan(cl);
        m = cm > m ? cm : m;
    }
    const int empty = m == -INFINITY && !nan;
    float sum = 0.0f, o = 0.0f;
    for (long c = 0; !empty && c < P->chunks; c++) {
        const float cm = LSE_part[2 * (row * P->chunks + c)];
        const float cl = LSE_part[2 * (row * P->chunks + c) + 1];
        if (cm == -INFINITY && cl == 0.0f) continue; /* a chunk with no allowed key adds nothing */
        const float w = cl * exp2((cm - m) * M_LOG2E_F); /* its keys' sum of exp(s - m) */
        sum += w;
        o += w * O_part[(row * P->chunks + c) * P->dim_v + d];
    }
    const long at = P->o_offset + b * P->o_stride_b + h * P->o_stride_h + i * P->o_stride_s;
    float top = nan ? NAN : m, total = sum; /* with the head's sink, once for all chunks */
    const float keep = i < queries ? sink_fold(P, h, &top, &total) : 1.0f;
    store_o(P->out_dtype, empty ? 0.0f : nan ? NAN : o / sum * keep, O, at + d);
    if (d == 0) store_lse(P, LSE, row, top, total, top == -INFINITY && total == 0.0f);
}
