/*
 * Fused attention shaped for CPUs. One work-item (work-groups of one) owns a query tile of
 * BLOCK_M rows and walks its key tiles with explicit 16-wide vectors, which CPU OpenCL
 * compilers (PoCL's LLVM) turn into AVX/AVX-512 code directly:
 *
 *   S tile [BLOCK_M][BLOCK_N] = Q tile [BLOCK_M][DQK_PAD] x K^T tile [DQK_PAD][BLOCK_N]
 *       as BLOCK_M x NV vector accumulators, one broadcast q value per row and column of K^T;
 *   online softmax per row (q is pre-scaled by scale; scores stay in the natural domain, so
 *   that a finite score is never -inf, and exp(x) is computed as exp2((x - max) * log2(e)));
 *   O tile [BLOCK_M][DV_PAD] += P [BLOCK_M][BLOCK_N] x V tile [BLOCK_N][DV_PAD],
 *       one 16-wide slice of the head dim at a time.
 *
 * Built after common.cl and fused_common.cl. BLOCK_N and DV_PAD are multiples of 16.
 */
#define NV  (BLOCK_N / 16) /* score vectors per row */
#define NDV (DV_PAD / 16)  /* output vectors per row */

/* Horizontal max and sum, lane by lane: oclgrind mis-tracks 16-wide shuffles (v.lo, v.hi) as
 * uninitialized, and the cost is the same on PoCL (once per row and tile). */
ALWAYS_INLINE float max16(float16 v) {
    float a =
        fmax(fmax(fmax(v.s0, v.s1), fmax(v.s2, v.s3)), fmax(fmax(v.s4, v.s5), fmax(v.s6, v.s7)));
    float b =
        fmax(fmax(fmax(v.s8, v.s9), fmax(v.sa, v.sb)), fmax(fmax(v.sc, v.sd), fmax(v.se, v.sf)));
    return fmax(a, b);
}

ALWAYS_INLINE float sum16(float16 v) {
    float a = ((v.s0 + v.s1) + (v.s2 + v.s3)) + ((v.s4 + v.s5) + (v.s6 + v.s7));
    float b = ((v.s8 + v.s9) + (v.sa + v.sb)) + ((v.sc + v.sd) + (v.se + v.sf));
    return a + b;
}

/* A work-item's query tile and its running softmax state. */
typedef struct query_tile {
    long b, h, kv_bh, r;
    long row_i[BLOCK_M];           /* query row, or -1 past the end */
    long lo[BLOCK_M], hi[BLOCK_M]; /* class-local key range of each row in the current pass */
    float q[BLOCK_M][DQK_PAD];     /* pre-scaled by scale; zero past dim_qk */
    float16 acc[BLOCK_M][NDV];     /* unnormalised O rows */
    float row_max[BLOCK_M];        /* running maximum of the scores */
    float row_sum[BLOCK_M];        /* running sum of exp(score - row_max) */
    __global uint *tile_count;     /* COUNT_TILES: the key tiles visited, counted */
} query_tile;

/* S = Q K^T for one key tile: [BLOCK_M][NV] vectors. */
ALWAYS_INLINE void tile_scores(const query_tile *t, __global const float *kt,
                               float16 s[BLOCK_M][NV]) {
#pragma unroll
    for (int m = 0; m < BLOCK_M; m++)
#pragma unroll
        for (int v = 0; v < NV; v++) s[m][v] = (float16)0.0f;
    for (int d = 0; d < DQK_PAD; d++) {
        float16 k[NV];
#pragma unroll
        for (int v = 0; v < NV; v++) k[v] = vload16(v, kt + d * BLOCK_N);
#pragma unroll
        for (int m = 0; m < BLOCK_M; m++) {
            const float16 qv = (float16)t->q[m][d];
#pragma unroll
            for (int v = 0; v < NV; v++) s[m][v] = fma(qv, k[v], s[m][v]);
        }
    }
}

/* -inf outside each row's class-local range [lo, hi]; k0 is the tile's first class index. */
ALWAYS_INLINE void mask_bounded(const query_tile *t, long k0, float16 s[BLOCK_M][NV]) {
    const int16 lane = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#pragma unroll
    for (int m = 0; m < BLOCK_M; m++) {
        /* bounds relative to the tile, clamped so they fit an int */
        const int lo = (int)clamp(t->lo[m] - k0, -1L, (long)BLOCK_N);
        const int hi = (int)clamp(t->hi[m] - k0, -1L, (long)BLOCK_N);
#pragma unroll
        for (int v = 0; v < NV; v++) {
            const int16 key = lane + v * 16;
            s[m][v] = select(s[m][v], (float16)(-INFINITY), key < lo || key > hi);
        }
    }
}

/* Online softmax: rescale the running state to the new maximum, turn the scores into
 * probabilities p[BLOCK_M][BLOCK_N]. A row that has seen no allowed key keeps max = -inf. */
ALWAYS_INLINE void softmax_update(query_tile *t, float16 s[BLOCK_M][NV], float *p) {
#pragma unroll
    for (int m = 0; m < BLOCK_M; m++) {
        float tile_max = max16(s[m][0]);
#pragma unroll
        for (int v = 1; v < NV; v++) tile_max = fmax(tile_max, max16(s[m][v]));
        const float new_max = fmax(t->row_max[m], tile_max);
        const float base = new_max == -INFINITY ? 0.0f : new_max; /* avoids -inf - -inf */
        const float alpha = exp2((t->row_max[m] - base) * M_LOG2E_F);
        float sum = 0.0f;
#pragma unroll
        for (int v = 0; v < NV; v++) {
            const float16 e = exp2((s[m][v] - base) * M_LOG2E_F);
            sum += sum16(e);
            vstore16(e, v, p + m * BLOCK_N);
        }
        t->row_max[m] = new_max;
        t->row_sum[m] = t->row_sum[m] * alpha + sum;
#pragma unroll
        for (int c = 0; c < NDV; c++) t->acc[m][c] *= alpha;
    }
}

/* O += P V for one key tile, PV_SLICES 16-wide slices of the value dim at a time (enough
 * independent accumulators to hide the FMA latency). */
#define PV_SLICES (NDV % 2 == 0 ? 2 : 1)
ALWAYS_INLINE void tile_accumulate(query_tile *t, const float *p, __global const float *vt) {
    for (int c = 0; c < NDV; c += PV_SLICES) {
        float16 a[BLOCK_M][PV_SLICES];
#pragma unroll
        for (int m = 0; m < BLOCK_M; m++)
#pragma unroll
            for (int u = 0; u < PV_SLICES; u++) a[m][u] = t->acc[m][c + u];
        for (int j = 0; j < BLOCK_N; j++) {
            float16 v[PV_SLICES];
#pragma unroll
            for (int u = 0; u < PV_SLICES; u++) v[u] = vload16(c + u, vt + j * DV_PAD);
#pragma unroll
            for (int m = 0; m < BLOCK_M; m++) {
                const float16 pm = (float16)p[m * BLOCK_N + j];
#pragma unroll
                for (int u = 0; u < PV_SLICES; u++) a[m][u] = fma(pm, v[u], a[m][u]);
            }
        }
#pragma unroll
        for (int m = 0; m < BLOCK_M; m++)
#pragma unroll
            for (int u = 0; u < PV_SLICES; u++) t->acc[m][c + u] = a[m][u];
    }
}

/* O += P V for a tile whose V holds a NaN or an infinity: a zero probability (a key the row
 * does not see) adds nothing, instead of 0 * NaN. Rare, so plain. */
ALWAYS_INLINE void tile_accumulate_careful(query_tile *t, const float *p,
                                           __global const float *vt) {
    for (int m = 0; m < BLOCK_M; m++)
        for (int j = 0; j < BLOCK_N; j++) {
            const float pm = p[m * BLOCK_N + j];
            if (pm == 0.0f) continue;
            for (int c = 0; c < NDV; c++)
                t->acc[m][c] = fma((float16)pm, vload16(c, vt + j * DV_PAD), t->acc[m][c]);
        }
}

/* One key tile of a pass: scores, masks (and bias), softmax update, accumulation.
 * kt: K^T tile [DQK_PAD][BLOCK_N]; vt: V tile [BLOCK_N][DV_PAD]; k0: first class index (or
 * global-list index) of the tile's keys; careful: the V tile holds a NaN or an infinity. */
ALWAYS_INLINE void attend_tile(__constant attn_params *P, __global const uchar *layout,
                               __global const float *bias, __global const int *gpos, query_tile *t,
                               int pass, int kind, long k0, __global const float *kt,
                               __global const float *vt, int careful) {
    float16 s[BLOCK_M][NV];
    float p[BLOCK_M * BLOCK_N];
    COUNT_TILE(t->tile_count);
    tile_scores(t, kt, s);
    if (kind == TILE_BOUNDED) mask_bounded(t, k0, s);
    if (kind == TILE_GENERAL || P->has_bias) {
        long kpos[BLOCK_N];
        tile_key_positions(P, gpos, pass, t->r, k0, kpos);
#pragma unroll
        for (int m = 0; m < BLOCK_M; m++)
#pragma unroll
            for (int v = 0; v < NV; v++) vstore16(s[m][v], v, p + m * BLOCK_N);
        mask_and_bias(P, layout, bias, pass, kind, t->b, t->h, t->row_i, BLOCK_M, kpos, p);
#pragma unroll
        for (int m = 0; m < BLOCK_M; m++)
#pragma unroll
            for (int v = 0; v < NV; v++) s[m][v] = vload16(v, p + m * BLOCK_N);
    }
    softmax_update(t, s, p);
    if (careful)
        tile_accumulate_careful(t, p, vt);
    else
        tile_accumulate(t, p, vt);
}

/* Loads the tile's query rows, pre-scaled; zero past dim_qk and for rows past the end. */
ALWAYS_INLINE void load_queries(__constant attn_params *P, __global const IN_T *Q, float q_scale,
                                query_tile *t) {
    for (int m = 0; m < BLOCK_M; m++) {
        const long i = t->row_i[m];
        const long row = P->q_offset + t->b * P->q_stride_b + t->h * P->q_stride_h +
                         (i < 0 ? 0 : i) * P->q_stride_s;
        for (int d = 0; d < DQK_PAD; d++)
            t->q[m][d] = (i >= 0 && d < P->dim_qk) ? LOAD_IN(Q, row + d) * q_scale : 0.0f;
        for (int c = 0; c < NDV; c++) t->acc[m][c] = (float16)0.0f;
        t->row_max[m] = -INFINITY;
        t->row_sum[m] = 0.0f;
    }
}

/* Walks the key tiles of class r for a pass (the tile list when the planner made one). */
ALWAYS_INLINE void walk_class(__constant attn_params *P, __global const float *Kp,
                              __global const float *Vp, __global const uchar *Vbad,
                              __global const uchar *layout, __global const float *bias,
                              __global const int *tile_ptr, __global const int *tile_idx,
                              __global const int *row_list, long tile, long list_row, query_tile *t,
                              int pass, long r) {
    long first, last, full_lo, full_hi;
    t->r = r;
    if (!tile_key_span(P, row_list, tile, pass, r, &first, &last, &full_lo, &full_hi)) return;
    for (int m = 0; m < BLOCK_M; m++) {
        t->lo[m] = 0;
        t->hi[m] = -1;
        if (t->row_i[m] >= 0)
            row_key_range(P, pass, r, t->row_i[m] + P->offset, &t->lo[m], &t->hi[m]);
    }
    const long base = (t->kv_bh * P->classes + r) * P->class_slots; /* first slot of class r */
    const int listed = P->use_tile_list && pass == PASS_WINDOW;
    const long count = tile_walk_count(tile_ptr, list_row, listed, first, last);
    for (long n = 0; n < count; n++) {
        long k0;
        const int kind =
            tile_walk_at(P, tile_ptr, tile_idx, list_row, listed, first, n, full_lo, full_hi, &k0);
        attend_tile(P, layout, bias, 0, t, pass, kind, k0, Kp + (base + k0) * DQK_PAD,
                    Vp + (base + k0) * DV_PAD, tile_has_bad_values(Vbad + base + k0));
    }
}

/* The global keys, packed like one class: every tile, masked pair by pair. Sorted positions
 * let the walk stop at the first tile past every row's causal limit. */
ALWAYS_INLINE void walk_global_keys(__constant attn_params *P, __global const float *Kg,
                                    __global const float *Vg, __global const uchar *Vbad_g,
                                    __global const int *gpos, __global const uchar *layout,
                                    __global const float *bias, __global const int *row_list,
                                    long tile, query_tile *t) {
    const long last_p = tile_last_position(P, row_list, tile);
    const long base = t->kv_bh * P->global_slots;
    for (long k0 = 0; k0 < P->num_global; k0 += BLOCK_N) {
        if (P->causal && gpos[k0] > last_p) break;
        attend_tile(P, layout, bias, gpos, t, PASS_GLOBAL_KEYS, TILE_GENERAL, k0,
                    Kg + (base + k0) * DQK_PAD, Vg + (base + k0) * DV_PAD,
                    tile_has_bad_values(Vbad_g + base + k0));
    }
}

/* O = acc / sum and LSE = max + log(sum); empty rows get O = 0, LSE = -inf. */
ALWAYS_INLINE void store_rows(__constant attn_params *P, __global const uchar *is_global,
                              __global OUT_T *O, __global float *LSE, const query_tile *t) {
    for (int m = 0; m < BLOCK_M; m++) {
        const long i = t->row_i[m];
        if (i < 0 || row_left_to_global_pass(P, is_global, i)) continue;
        /* no allowed key; a row of NaN scores has max -inf but sum NaN and stays NaN */
        const int empty = t->row_max[m] == -INFINITY && t->row_sum[m] == 0.0f;
        const float inv = empty ? 0.0f : 1.0f / t->row_sum[m];
        float o[DV_PAD];
        for (int c = 0; c < NDV; c++) vstore16(t->acc[m][c] * inv, c, o);
        const long row =
            P->o_offset + t->b * P->o_stride_b + t->h * P->o_stride_h + i * P->o_stride_s;
        for (int d = 0; d < P->dim_v; d++) STORE_OUT(empty ? 0.0f : o[d], O, row + d);
        if (P->write_lse)
            LSE[(t->b * P->heads_q + t->h) * P->len_q + i] =
                empty ? -INFINITY : t->row_max[m] + log(t->row_sum[m]);
    }
}

/* Work-group (tile, b*Hq + h) of one work-item: tile = class*tiles_per_class + t (row_mode 0)
 * or the tile of listed rows (row_mode 1). */
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void attention_cpu(ATTENTION_KERNEL_ARGS) {
    query_tile t;
    const long tile = get_group_id(0), bh = get_group_id(1);
    if (tile_row(P, row_list, tile, 0) < 0) return; /* a class with fewer tiles than the widest */
    t.b = div_rem(bh, P->heads_q, &t.h);
    t.kv_bh = t.b * P->heads_kv + t.h / (P->heads_q / P->heads_kv);
    TILE_COUNTER_INIT(t.tile_count);
    for (int m = 0; m < BLOCK_M; m++) t.row_i[m] = tile_row(P, row_list, tile, m);
    load_queries(P, Q, q_scale, &t);
    if (P->row_mode == 1) {
        for (long c = 0; c < P->classes; c++)
            walk_class(P, Kp, Vp, Vbad, layout, bias, tile_ptr, tile_idx, row_list, tile, 0, &t,
                       PASS_GLOBAL_ROWS, c);
    } else {
        const long list_row =
            (P->layout_per_head ? t.h : 0) * P->classes * P->tiles_per_class + tile;
        walk_class(P, Kp, Vp, Vbad, layout, bias, tile_ptr, tile_idx, row_list, tile, list_row, &t,
                   PASS_WINDOW, tile_class(P, tile));
        if (P->has_global)
            walk_global_keys(P, Kg, Vg, Vbad_g, gpos, layout, bias, row_list, tile, &t);
    }
    store_rows(P, is_global, O, LSE, &t);
}
