/*
 * Fused attention shaped for CPUs. One work-item (work-groups of one) owns a query tile of
 * BLOCK_M rows (a multiple of 16) and walks its key tiles. The 16 lanes of every vector are 16
 * query rows (GROUPS = BLOCK_M / 16 lane groups), so the online softmax is lane-wise: the row
 * maxima, sums and rescale factors are vectors and no step reduces across lanes. (A tile of at
 * most 4 global rows puts the keys in the lanes instead: "few rows", at the end of this file.)
 * CPU OpenCL compilers (PoCL's LLVM) turn the float16 code into AVX-512 (or pairs of AVX2)
 * registers:
 *
 *   S^T tile [BLOCK_N][BLOCK_M] = K tile [BLOCK_N][DQK_PAD] x Q^T [DQK_PAD][BLOCK_M]
 *       KEY_BLOCK keys x GROUPS vectors of accumulators at a time: per head-dim index, GROUPS
 *       vector loads of Q^T and KEY_BLOCK broadcasts from the K rows (pack.cl's key_rows);
 *   online softmax down each lane (q is pre-scaled by scale; scores stay in the natural domain,
 *   so that a finite score is never -inf, and exp(x) is exp2((x - max) * log2(e)) with a
 *   polynomial exp2 on whole vectors); P is scaled by 1 / bound, an upper bound of the new row
 *   sum, so that the output accumulator stays a combination of V rows with weights summing to
 *   at most 1 (V near FLT_MAX cannot overflow it);
 *   O^T [DV_PAD][BLOCK_M] = O^T * keep + V tile^T [DV_PAD][BLOCK_N] x P^T [BLOCK_N][BLOCK_M]
 *       VALUE_BLOCK value columns x GROUPS vectors of accumulators at a time: per key, GROUPS
 *       vector loads of P^T and VALUE_BLOCK broadcasts of the V row [DV_PAD] (pack.cl).
 *
 * Register budget (32 zmm): at most 24 accumulators, GROUPS loaded vectors and a broadcast.
 * Q^T, O^T and S^T live in private memory (L1): Q^T and O^T are [DQK_PAD or DV_PAD][BLOCK_M],
 * S^T (then P^T) is [BLOCK_N][BLOCK_M].
 *
 * Built after common.cl and tile_walk.cl. BLOCK_M is 16, 32 or 48 (the tuning table's 32,
 * or fewer for calls with few rows: runtime/kernels/lanes.c); BLOCK_N is a multiple of
 * KEY_BLOCK; DV_PAD is a multiple of 16.
 *
 * What PoCL 3.1 (LLVM 15) does with this, and why the code reads as it does: vload16/vstore16
 * become four 16-byte pieces (so private arrays are float16 arrays and packed rows are stored
 * as float16); fmax and rint on float16 add NaN and range fix-ups (max_of, exp2_nonpositive);
 * a transposing copy in a loop becomes scatters and gathers, so 16 x 16 blocks are transposed
 * in registers (transpose16); the OpenCL prefetch() builtin compiles to nothing.
 */
#define GROUPS (BLOCK_M / 16) /* lane groups: 16 query rows per vector */

/* GLOBAL_TOKENS=1 (common.cl): a program for calls with global tokens (runtime/kernels/packed.c),
 * the only one that holds their faster tiles: the few-row tiles of the global rows and the
 * narrow global-key tiles below. Together they double the time PoCL takes to build the general
 * program (3.5 s more, cold, on a 2-core CPU), which calls with a bias, a block layout or 16-bit
 * storage would pay for nothing. Without them, global tokens still run, in whole tiles. */

/* The width of a global-key tile that holds at most this many keys (Longformer's few global
 * tokens): it computes those slots only, where a whole tile of BLOCK_N keys would mostly compute
 * padding. Even (softmax_update takes keys in pairs), and below BLOCK_N (at least KEY_BLOCK). */
#define NARROW_KEYS 4

/* Accumulators of the two products: KEY_BLOCK (or VALUE_BLOCK) x GROUPS vectors, <= 24. */
#if GROUPS == 1
#define KEY_BLOCK   16
#define VALUE_BLOCK 16
#else
#define KEY_BLOCK   8
#define VALUE_BLOCK 8
#endif

/* PREFETCH=1 (runtime/kernels/packed.c: PoCL on a CPU, whose clang makes it prefetcht1): lines
 * the walk will read later are asked into L2 ahead of time. A short walk (a window's) reads
 * its last key tile, the band's newest keys, from memory, and every query tile starts by
 * reading its Q rows from memory: the hardware prefetchers do not run ahead of either (the
 * dilated window's classes read every other row). */
#ifndef PREFETCH
#define PREFETCH 0
#endif
#if PREFETCH
#define PREFETCH_LINE(p) __builtin_prefetch((p), 0, 2)
#else
#define PREFETCH_LINE(p) ((void)0)
#endif

/* Key and value bytes a walk may read before its last tile for that tile's lines, asked for
 * early in the walk, still to be in L2 (1 MiB a core on the Xeons measured; half left to the
 * rest). */
#define PREFETCH_REACH (256 * 1024)

/* 2^x on 16 lanes for x <= 0, -inf or NaN (what softmax needs: the maximum is subtracted
 * first). 2^x = 2^k * 2^f with k = x rounded to an integer, f = x - k in [-0.5, 0.5] and 2^f
 * from Cephes' exp2f polynomial (relative error below 2e-7); 2^k is added into the exponent
 * bits. Adding 1.5 * 2^23 rounds x to an integer k and leaves k in the low bits of the sum, so
 * that (bits << 23) is k << 23 (PoCL's rint() takes a dozen instructions). x <= -127 (-inf
 * included) gives exactly 0 (k = -127, f = 0: the bits of 1.0 less 127 << 23); results between
 * 2^-127 and 2^-125 are rounded towards 0, far below what a softmax row can notice. */
ALWAYS_INLINE float16 exp2_nonpositive(float16 x) {
    const float16 round = (float16)12582912.0f;     /* 1.5 * 2^23 */
    const float16 xc = fmax(x, (float16)(-127.0f)); /* NaN becomes -127: restored below */
    const float16 shifted = xc + round;
    const float16 f = xc - (shifted - round);
    float16 p = (float16)1.535336188319500e-4f;
    p = fma(p, f, (float16)1.339887440266574e-3f);
    p = fma(p, f, (float16)9.618437357674640e-3f);
    p = fma(p, f, (float16)5.550332471162809e-2f);
    p = fma(p, f, (float16)2.402264791363012e-1f);
    p = fma(p, f, (float16)6.931472028550421e-1f);
    p = fma(p, f, (float16)1.0f);
    const float16 r = as_float16(as_int16(p) + (as_int16(shifted) << 23));
    return select(r, x, isnan(x));
}

/* A work-item's query tile and its running softmax state, lane m % 16 of group m / 16 holding
 * row m. */
typedef struct query_tile {
    long b, h, kv_bh, r;
    long row_i[BLOCK_M];           /* query row, or -1 past the end */
    long lo[BLOCK_M], hi[BLOCK_M]; /* class-local key range of each row in the current pass */
    float16 q_t[DQK_PAD][GROUPS];  /* Q^T [DQK_PAD][BLOCK_M], pre-scaled by scale; zero padded */
    float16 o_t[DV_PAD][GROUPS];   /* O^T [DV_PAD][BLOCK_M], normalised by the running sum */
    float16 row_max[GROUPS];       /* running maximum of the scores */
    float16 row_sum[GROUPS];       /* running sum of exp(score - row_max) */
    float16 row_bound[GROUPS];     /* what O^T is divided by: >= row_sum, < row_sum + BLOCK_N */
    __global const void *Q;        /* Q and the scale, for rescore */
    float scale;
    __global uint *tile_count; /* COUNT_TILES: the key tiles visited, counted */
} query_tile;

/* Where a key tile lies: BLOCK_N rows of K from k, k_step floats apart, and of V from v, v_step
 * apart; each row holds DQK_PAD (or DV_PAD) floats. The steps are the packed rows' DQK_PAD and
 * DV_PAD, or the caller's row strides for keys read in place. Passed by pointer: a struct
 * passed or returned by value to an inlined function leaves LLVM's noalias scope declarations,
 * which oclgrind cannot run. */
typedef struct key_rows {
    __global const float *k, *v;
    long k_step, v_step;
} key_rows;

/* A NaN or an infinity has every exponent bit set: `top` gathers the values' exponent bits
 * (largest so far, lane by lane), and any lane of it equal to EXPONENT_BITS saw one. */
#define EXPONENT_BITS ((int16)0x7f800000)
ALWAYS_INLINE int16 top_exponent(int16 top, float16 v) {
    return max(top, as_int16(v) & EXPONENT_BITS);
}

/* Whether any of the first `keys` V rows of a tile holds a NaN or an infinity, for rows read in
 * place, which no packing flagged. */
ALWAYS_INLINE int rows_have_bad_values(const key_rows *rows, int keys) {
    int16 top = (int16)0;
    for (int j = 0; j < keys; j++)
        for (int c = 0; c < DV_PAD; c += 16)
            top = top_exponent(top, vload16(0, rows->v + j * rows->v_step + c));
    return any(top == EXPONENT_BITS);
}

/* S^T [keys][BLOCK_M] = K Q^T for the first `keys` keys of a tile (BLOCK_N, or NARROW_KEYS: a
 * constant, so that each call's loops unroll to their own width); k_rows: K tile [keys][k_step]. */
ALWAYS_INLINE void tile_scores(const query_tile *t, __global const float *k_rows, long k_step,
                               int keys, float16 s_t[BLOCK_N][GROUPS]) {
    const int block =
        keys < KEY_BLOCK ? keys : KEY_BLOCK; /* not min(): PoCL links it after unrolling */
    for (int j0 = 0; j0 < keys; j0 += KEY_BLOCK) {
        float16 s[KEY_BLOCK][GROUPS];
#pragma unroll
        for (int j = 0; j < block; j++)
#pragma unroll
            for (int g = 0; g < GROUPS; g++) s[j][g] = (float16)0.0f;
        for (int d = 0; d < DQK_PAD; d++) {
            float16 q[GROUPS];
#pragma unroll
            for (int g = 0; g < GROUPS; g++) q[g] = t->q_t[d][g];
#pragma unroll
            for (int j = 0; j < block; j++) {
                const float16 k = (float16)k_rows[(j0 + j) * k_step + d];
#pragma unroll
                for (int g = 0; g < GROUPS; g++) s[j][g] = fma(q[g], k, s[j][g]);
            }
        }
#pragma unroll
        for (int j = 0; j < block; j++)
#pragma unroll
            for (int g = 0; g < GROUPS; g++) s_t[j0 + j][g] = s[j][g];
    }
}

/* Score (query row i of head (b, h), key row k) again without overflow on the way (common.cl,
 * rescored): for a score that came out non-finite from the pre-scaled Q. NaN or an infinity in
 * the inputs stays so. */
ALWAYS_INLINE float rescore_row(__constant attn_params *P, __global const void *Q, float scale,
                                long b, long h, long i, __global const float *k) {
    const long row = P->q_offset + b * P->q_stride_b + h * P->q_stride_h + i * P->q_stride_s;
    float2 dot = (float2)0.0f;
    for (int d = 0; d < P->dim_qk; d++)
        dot = rescore_add(dot, load_as(FEATURE(P, q_dtype), Q, row + d), k[d]);
    return rescore_end(dot, scale);
}

/* Score (j, m) of a tile again (rescore_row). */
ALWAYS_INLINE float rescore(__constant attn_params *P, const query_tile *t, const key_rows *rows,
                            int j, int m) {
    const long i = t->row_i[m];
    if (i < 0) return 0.0f;
    return rescore_row(P, t->Q, t->scale, t->b, t->h, i, rows->k + j * rows->k_step);
}

/* Rescores the tile's non-finite scores: rare (huge inputs, or NaN and infinities in them), so
 * one vector test per score vector, and plain code past it. Returns whether there were any. */
ALWAYS_INLINE int rescore_overflows(__constant attn_params *P, const query_tile *t,
                                     const key_rows *rows, int keys, float16 s_t[BLOCK_N][GROUPS]) {
    int16 bad = (int16)0;
    for (int j = 0; j < keys; j++)
        for (int g = 0; g < GROUPS; g++) bad |= isinf(s_t[j][g]) | isnan(s_t[j][g]);
    if (!any(bad)) return 0;
    float *s = (float *)s_t;
    for (int j = 0; j < keys; j++)
        for (int m = 0; m < BLOCK_M; m++)
            if (!isfinite(s[j * BLOCK_M + m])) s[j * BLOCK_M + m] = rescore(P, t, rows, j, m);
    return 1;
}

/* -inf outside each row's class-local range [lo, hi]; k0 is the tile's first class index. */
ALWAYS_INLINE void mask_bounded(const query_tile *t, long k0, int keys,
                                float16 s_t[BLOCK_N][GROUPS]) {
    for (int g = 0; g < GROUPS; g++) {
        int16 lo, hi; /* the lanes' bounds relative to the tile, clamped to fit an int */
        for (int l = 0; l < 16; l++) {
            ((int *)&lo)[l] = (int)clamp(t->lo[g * 16 + l] - k0, -1L, (long)BLOCK_N);
            ((int *)&hi)[l] = (int)clamp(t->hi[g * 16 + l] - k0, -1L, (long)BLOCK_N);
        }
        for (int j = 0; j < keys; j++)
            s_t[j][g] = select(s_t[j][g], (float16)(-INFINITY), (int16)j < lo || (int16)j > hi);
    }
}

/* Whether mask_global_keys can mask a global-key tile: no block layout, no dilation, and
 * positions small enough that every p - j fits an int lane. (No |offset|: an integer absolute
 * value compiles to llvm.abs, which oclgrind's LLVM does not know.) */
ALWAYS_INLINE int global_keys_in_vectors(__constant attn_params *P) {
    const long limit = 1L << 29;
    return !FEATURE(P, has_layout) && P->dilation == 1 && P->len_k < limit && P->len_q < limit &&
           P->offset > -limit && P->offset < limit;
}

/* -inf where the global-key pass does not own (row, key) (tile_walk.cl's pass_owns), on whole
 * vectors: the slot holds a global key j, j <= p if causal, and j lies outside the row's
 * window [p - left, p + right]. kpos: the slots' key positions (NO_KEY for empty slots). */
ALWAYS_INLINE void mask_global_keys(__constant attn_params *P, const query_tile *t,
                                    const long *kpos, int keys, float16 s_t[BLOCK_N][GROUPS]) {
    const long i0 = t->row_i[0]; /* a live tile's first row is a row */
    const int left = (int)min(P->left, 1L << 30), right = (int)min(P->right, 1L << 30);
    for (int g = 0; g < GROUPS; g++) {
        int16 lane_row; /* each lane's row less the first (rows past the end: 0, never stored) */
        for (int l = 0; l < 16; l++)
            ((int *)&lane_row)[l] = t->row_i[g * 16 + l] < 0 ? 0 : (int)(t->row_i[g * 16 + l] - i0);
        for (int c = 0; c < keys; c++) {
            const int16 d = (int16)(int)(kpos[c] - i0 - P->offset) - lane_row; /* j - p */
            const int16 after_left = left < 0 ? (int16)(-1) : (d >= (int16)(-left));
            const int16 before_right = right < 0 ? (int16)(-1) : (d <= (int16)right);
            const int16 causal_ok = P->causal ? (d <= (int16)0) : (int16)(-1);
            const int16 present = (int16)(kpos[c] != NO_KEY ? -1 : 0);
            const int16 owned = present & ~(after_left & before_right) & causal_ok;
            s_t[c][g] = select((float16)(-INFINITY), s_t[c][g], owned);
        }
    }
}

/* cap * tanh(x / cap) on whole vectors, k = -2 log2(e) / cap: sign(x) * cap * (1 - e) / (1 + e)
 * with e = e^(-2|x| / cap) = 2^z, z = k |x| held at -64 and above (e is 0 to float32 there
 * already), and 2^z = 2^n 2^f with f in [-0.5, 0.5] of degree 5 (2.4e-7 relative). The library's
 * tanh is several times slower on whole vectors; the error near 0, a few float32 ulps of 1 times
 * cap, is far inside the tolerances. NaN and -inf come out finite: the caller keeps them. */
ALWAYS_INLINE float16 soft_cap(float16 x, float cap, float k) {
    float16 z = fabs(x) * k;
    z = select(z, (float16)(-64.0f), z < (float16)(-64.0f));
    const float16 shifted = z + (float16)12582912.0f; /* 1.5 * 2^23: n in the low bits */
    const float16 f = z - (shifted - (float16)12582912.0f);
    float16 e = (float16)1.3276502722874284e-3f;
    e = fma(e, f, (float16)9.675541892647743e-3f);
    e = fma(e, f, (float16)5.550713092088699e-2f);
    e = fma(e, f, (float16)2.4022120237350464e-1f);
    e = fma(e, f, (float16)6.931469440460205e-1f);
    e = fma(e, f, (float16)1.0f);
    e = as_float16(as_int16(e) + (as_int16(shifted) << 23)); /* times 2^n */
    const float16 magnitude = fma((float16)(-cap), e, (float16)cap) / ((float16)1.0f + e);
    return as_float16(as_int16(magnitude) | (as_int16(x) & (int16)INT_MIN));
}

/* Soft-capping alone on a tile's S^T, which needs no key positions. */
ALWAYS_INLINE void soft_cap_tile(__constant attn_params *P, int keys,
                                 float16 s_t[BLOCK_N][GROUPS]) {
    const float cap = as_float((uint)MODIFIER(P, softcap)), k = -2.0f * M_LOG2E_F / cap;
    for (int j = 0; j < keys; j++)
        for (int g = 0; g < GROUPS; g++) {
            const float16 x = s_t[j][g];
            s_t[j][g] = select(soft_cap(x, cap, k), x, !(x > (float16)(-INFINITY))); /* NaN, -inf */
        }
}

/* Soft-capping and ALiBi (common.cl's modified_score) on whole vectors of S^T, for tiles whose
 * every slot holds a key (full and bounded ones; a bounded tile's masked lanes stay -inf):
 * cap * tanh(s / cap) (soft_cap), then s - slope * |p - j| with the rows' positions p in the
 * lanes. A NaN or -inf score stays as it was. */
ALWAYS_INLINE void modify_tile(__constant attn_params *P, const query_tile *t, const long *kpos,
                               int keys, float16 s_t[BLOCK_N][GROUPS]) {
    const float cap = MODIFIER(P, softcap) != 0 ? as_float((uint)MODIFIER(P, softcap)) : 0.0f;
    const float cap_exponent = cap != 0.0f ? -2.0f * M_LOG2E_F / cap : 0.0f; /* soft_cap's k */
    float slope = 0.0f;
    if (MODIFIER(P, alibi) != 0) { /* the extras: sinks [Hq] if any, then slopes [Hq] or [B][Hq] */
        const long at = (MODIFIER(P, has_sinks) ? P->heads_q : 0) +
                        (MODIFIER(P, alibi) == 2 ? t->b * P->heads_q : 0);
        slope = params_extras(P)[at + t->h];
    }
    /* a bound on every |p - j|, in float: an integer |offset| compiles to llvm.abs, which
       oclgrind's LLVM does not know */
    const float widest = (float)P->len_k + (float)P->len_q + fabs((float)P->offset);
    const int small_terms = fabs(slope) * widest < 1e30f;
    for (int g = 0; g < GROUPS; g++) {
        float position[16]; /* p = i + offset of each lane's row, exact in float below 2^24 */
        for (int l = 0; l < 16; l++)
            position[l] = (float)(max(t->row_i[g * 16 + l], 0L) + P->offset);
        const float16 p = vload16(0, position);
        for (int j = 0; j < keys; j++) {
            const float16 x = s_t[j][g];
            float16 y = x;
            if (cap != 0.0f) y = soft_cap(x, cap, cap_exponent);
            if (MODIFIER(P, alibi) != 0) {
                const float16 term = -(slope * fabs(p - (float16)(float)kpos[j]));
                const float16 sum = y + term; /* saturating, as add_saturating, unless no term */
                y = small_terms ? sum /* can reach 1e31, half of FLT_MAX's ulp: none overflows */
                                : select(sum, copysign((float16)FLT_MAX, sum),
                                         isinf(sum) & isfinite(y) & isfinite(term));
            }
            s_t[j][g] = select(y, x, !(x > (float16)(-INFINITY))); /* NaN, -inf */
        }
    }
}

/* Online softmax on S^T, lane by lane: rescale the running state to the new maximum and turn
 * the scores into P^T = exp(s - max) / bound, in place, where bound = old sum * alpha + BLOCK_N
 * is known before the exponentials and is at least the new sum (each of them is at most 1). So
 * O^T = (sum of p V) / bound stays a combination of V rows with weights summing to at most 1
 * (V near FLT_MAX cannot overflow it), for one multiply per probability; store_rows turns it
 * into (sum of p V) / sum. keep[g]: the factor the old output keeps. A row that has seen no
 * allowed key keeps max = -inf and sum 0, and its output stays 0. */
ALWAYS_INLINE void softmax_update(query_tile *t, int keys, float16 s_t[BLOCK_N][GROUPS],
                                  float16 keep[GROUPS]) {
    for (int g = 0; g < GROUPS; g++) {
        float16 max_even = t->row_max[g], max_odd = max_even; /* two chains: half the latency */
        for (int j = 0; j < keys; j += 2) {
            max_even = max_of(max_even, s_t[j][g]);
            max_odd = max_of(max_odd, s_t[j + 1][g]);
        }
        const float16 old_max = t->row_max[g], new_max = max_of(max_even, max_odd);
        /* base 0 where no allowed key was seen yet: avoids -inf - -inf */
        const float16 base = select(new_max, (float16)0.0f, new_max == (float16)(-INFINITY));
        const float16 alpha = exp2_nonpositive((old_max - base) * M_LOG2E_F);
        const float16 old_sum = t->row_sum[g], bound = fma(old_sum, alpha, (float16)keys);
        const float16 inv = 1.0f / bound;
        float16 sum_even = (float16)0.0f, sum_odd = (float16)0.0f;
        for (int j = 0; j < keys; j += 2) {
            const float16 p_even = exp2_nonpositive((s_t[j][g] - base) * M_LOG2E_F);
            const float16 p_odd = exp2_nonpositive((s_t[j + 1][g] - base) * M_LOG2E_F);
            sum_even += p_even;
            sum_odd += p_odd;
            s_t[j][g] = p_even * inv;
            s_t[j + 1][g] = p_odd * inv;
        }
        keep[g] = alpha * t->row_bound[g] * inv;
        t->row_max[g] = new_max;
        t->row_sum[g] = fma(old_sum, alpha, sum_even + sum_odd);
        t->row_bound[g] = bound;
    }
}

/* O^T = O^T * keep + V^T P^T for one key tile; vt: V tile [BLOCK_N][v_step]. */
ALWAYS_INLINE void tile_accumulate(query_tile *t, int keys, const float16 p_t[BLOCK_N][GROUPS],
                                   __global const float *vt, long v_step,
                                   const float16 keep[GROUPS]) {
    for (int c0 = 0; c0 < DV_PAD; c0 += VALUE_BLOCK) {
        float16 o[VALUE_BLOCK][GROUPS];
#pragma unroll
        for (int c = 0; c < VALUE_BLOCK; c++)
#pragma unroll
            for (int g = 0; g < GROUPS; g++) o[c][g] = t->o_t[c0 + c][g] * keep[g];
        for (int j = 0; j < keys; j++) {
            float16 p[GROUPS];
#pragma unroll
            for (int g = 0; g < GROUPS; g++) p[g] = p_t[j][g];
#pragma unroll
            for (int c = 0; c < VALUE_BLOCK; c++) {
                const float16 v = (float16)vt[j * v_step + c0 + c];
#pragma unroll
                for (int g = 0; g < GROUPS; g++) o[c][g] = fma(p[g], v, o[c][g]);
            }
        }
#pragma unroll
        for (int c = 0; c < VALUE_BLOCK; c++)
#pragma unroll
            for (int g = 0; g < GROUPS; g++) t->o_t[c0 + c][g] = o[c][g];
    }
}

/* The same for a tile whose V holds a NaN or an infinity: a zero probability (a key the row
 * does not see) adds nothing, instead of 0 * NaN. Rare, so plain. */
ALWAYS_INLINE void tile_accumulate_careful(query_tile *t, int keys,
                                           const float16 p_t[BLOCK_N][GROUPS],
                                           __global const float *vt, long v_step,
                                           const float16 keep[GROUPS]) {
    for (int c = 0; c < DV_PAD; c++)
        for (int g = 0; g < GROUPS; g++) {
            float16 o = t->o_t[c][g] * keep[g];
            for (int j = 0; j < keys; j++) {
                const float16 p = p_t[j][g];
                o = select(fma(p, (float16)vt[j * v_step + c], o), o, p == (float16)0.0f);
            }
            t->o_t[c][g] = o;
        }
}

/* What is known of a key tile's V rows: flagged finite or not (pack.cl's flags, made where K
 * and V are packed), or unchecked (read in place: attend_tile checks the rows of a tile with a
 * masked pair itself, the only tiles where a non-finite V row matters). */
#define VALUES_FINITE    0
#define VALUES_BAD       1
#define VALUES_UNCHECKED 2

ALWAYS_INLINE int values_known(const key_walk *w, __global const uchar *v_bad, long k0) {
    if (IN_PLACE && w->pass != PASS_GLOBAL_KEYS) return VALUES_UNCHECKED;
    return tile_has_bad_values(v_bad + k0) ? VALUES_BAD : VALUES_FINITE;
}

/* The first `keys` keys of a key tile of a pass (BLOCK_N, or NARROW_KEYS for a last global-key
 * tile that holds no more: a constant): scores, masks (and bias), softmax update, accumulation.
 * rows: the tile's K and V rows; k0: first class index (or global-list index) of the tile's
 * keys; values: what is known of the V tile (values_known). */
ALWAYS_INLINE void attend_tile(__constant attn_params *P, __global const uchar *layout,
                               __global const float *bias, __global const int *gpos, query_tile *t,
                               int pass, int kind, long k0, int keys, const key_rows *rows,
                               int values) {
    float16 s_t[BLOCK_N][GROUPS]; /* S^T, then P^T: [keys][BLOCK_M] */
    float16 keep[GROUPS];
    COUNT_TILE(t->tile_count);
    tile_scores(t, rows->k, rows->k_step, keys, s_t);
    const int non_finite = rescore_overflows(P, t, rows, keys, s_t);
    /* a -inf score can only come from a mask, the bias or a non-finite input */
    const int may_mask = kind != TILE_FULL || FEATURE(P, has_bias) || non_finite;
    const int careful = values == VALUES_UNCHECKED ? may_mask && rows_have_bad_values(rows, keys)
                                                   : values == VALUES_BAD;
    if (kind == TILE_BOUNDED) mask_bounded(t, k0, keys, s_t);
    const int positions = kind == TILE_GENERAL || FEATURE(P, has_bias) || MODIFIER(P, alibi) != 0;
    if (!positions && MODIFIER(P, softcap) != 0) soft_cap_tile(P, keys, s_t);
    if (positions) {
        long kpos[BLOCK_N];
        tile_key_positions(P, gpos, pass, t->r, k0, kpos);
        if (kind == TILE_GENERAL && pass == PASS_GLOBAL_KEYS && global_keys_in_vectors(P)) {
            mask_global_keys(P, t, kpos, keys, s_t);
            kind = TILE_BOUNDED; /* masked: what is left is bias and modifiers */
        }
        const int vector_modify = kind != TILE_GENERAL && MODIFIES_SCORES(P);
        if (vector_modify) modify_tile(P, t, kpos, keys, s_t);
        if (kind == TILE_GENERAL || FEATURE(P, has_bias))
            mask_and_bias(P, layout, bias, pass, kind, t->b, t->h, t->row_i, BLOCK_M, keys, 1,
                          BLOCK_M, kpos, !vector_modify, (float *)s_t);
    }
    softmax_update(t, keys, s_t, keep);
    if (careful)
        tile_accumulate_careful(t, keys, s_t, rows->v, rows->v_step, keep);
    else
        tile_accumulate(t, keys, s_t, rows->v, rows->v_step, keep);
}

/* x and y's blocks of b lanes swapped (lo, hi: common.cl's LOb, HIb): where lane e has bit b
 * clear, x becomes x[e], y[e] and y becomes x[e + b], y[e + b]. */
#define SWAP_BLOCKS(x, y, lo, hi)                                                                  \
    do {                                                                                           \
        const float16 x_ = (x), y_ = (y);                                                          \
        (x) = SHUFFLE_LANES(x_, y_, lo);                                                           \
        (y) = SHUFFLE_LANES(x_, y_, hi);                                                           \
    } while (0)

/* x[16] (x[r] lane c: row r, column c of a 16 x 16 block) transposed in registers: four rounds
 * that swap the off-diagonal blocks of 8, 4, 2 and 1, 32 two-vector shuffles each. A transposing
 * copy through memory takes 256 single-lane stores or loads, which cost a short window's query
 * tiles a tenth of their time. */
ALWAYS_INLINE void transpose16(float16 x[16]) {
#pragma unroll
    for (int i = 0; i < 8; i++) SWAP_BLOCKS(x[i], x[i + 8], LO8, HI8);
#pragma unroll
    for (int i = 0; i < 16; i++)
        if (!(i & 4)) SWAP_BLOCKS(x[i], x[i + 4], LO4, HI4);
#pragma unroll
    for (int i = 0; i < 16; i++)
        if (!(i & 2)) SWAP_BLOCKS(x[i], x[i + 2], LO2, HI2);
#pragma unroll
    for (int i = 0; i < 16; i += 2) SWAP_BLOCKS(x[i], x[i + 1], LO1, HI1);
}

/* Loads the tile's query rows into Q^T, pre-scaled; zero past dim_qk and for rows past the end.
 * Clears the output and the softmax state. The rows are read whole first and transposed after,
 * so that their cache misses overlap. */
ALWAYS_INLINE void load_queries(__constant attn_params *P, __global const void *Q, float q_scale,
                                query_tile *t) {
    float16 rows[BLOCK_M][DQK_PAD / 16]; /* the tile's Q rows [BLOCK_M][DQK_PAD] */
    for (int m = 0; m < BLOCK_M; m++) {
        const long i = t->row_i[m];
        const long row = P->q_offset + t->b * P->q_stride_b + t->h * P->q_stride_h +
                         (i < 0 ? 0 : i) * P->q_stride_s;
        for (int d0 = 0; d0 < DQK_PAD; d0 += 16)
            rows[m][d0 / 16] = load_row16_as(FEATURE(P, q_dtype), Q, row, d0, P->dim_qk, i >= 0);
    }
    for (int g = 0; g < GROUPS; g++)
        for (int d0 = 0; d0 < DQK_PAD; d0 += 16) {
            float16 block[16]; /* rows g*16 + l, columns d0 + e */
#pragma unroll
            for (int l = 0; l < 16; l++) block[l] = rows[g * 16 + l][d0 / 16] * q_scale;
            transpose16(block);
#pragma unroll
            for (int e = 0; e < 16; e++) t->q_t[d0 + e][g] = block[e];
        }
    for (int g = 0; g < GROUPS; g++) {
        for (int c = 0; c < DV_PAD; c++) t->o_t[c][g] = (float16)0.0f;
        t->row_max[g] = (float16)(-INFINITY);
        t->row_sum[g] = (float16)0.0f;
        t->row_bound[g] = (float16)0.0f;
    }
}

/* IN_PLACE: the caller's own K and V rows of the key tile at class index k0 of a class walk
 * (class r's keys are every classes-th row from key r), but for a class's last partial tile,
 * which is packed alone in Kt, Vt. */
ALWAYS_INLINE void rows_in_place(__constant attn_params *P, __global const float *K,
                                 __global const float *V, __global const float *Kt,
                                 __global const float *Vt, long b, long kv_bh, const key_walk *w,
                                 long k0, key_rows *rows) {
    const long r = w->r, kv_h = kv_bh - b * P->heads_kv, j = r + k0 * P->classes;
    if (k0 + BLOCK_N <= w->keys) {
        rows->k = K + P->k_offset + b * P->k_stride_b + kv_h * P->k_stride_h + j * P->k_stride_s;
        rows->v = V + P->v_offset + b * P->v_stride_b + kv_h * P->v_stride_h + j * P->v_stride_s;
        rows->k_step = P->classes * P->k_stride_s, rows->v_step = P->classes * P->v_stride_s;
    } else {
        const long tail = (kv_bh * P->classes + r) * BLOCK_N; /* pack.cl's PACK_TAIL slots */
        rows->k = Kt + tail * DQK_PAD;
        rows->v = Vt + tail * DV_PAD;
    }
}

/* The class-local key range [lo, hi] of each of `rows` rows in walk w (empty for rows past the
 * end, -1, and in the global-key walk, whose tiles are masked pair by pair). */
ALWAYS_INLINE void walk_key_ranges(__constant attn_params *P, const key_walk *w, const long *row_i,
                                   int rows, long *lo, long *hi) {
    class_reach c;
    class_reach_begin(P, w->pass, w->r, &c);
    const long own0 = row_i[0] >= 0 ? class_reach_own(&c, row_i[0] + P->offset) : 0;
    for (int m = 0; m < rows; m++) {
        lo[m] = 0, hi[m] = -1;
        if (row_i[m] >= 0 && w->pass != PASS_GLOBAL_KEYS)
            class_reach_range(&c, row_own(P, &c, own0, row_i[m], m), &lo[m], &hi[m]);
    }
}

/* Tile i of walk w (key_walk_tile) for K/V head kv_bh of sequence b: its first class (or
 * global-list) index *k0, its kind (returned), and its K and V rows, packed from the walk's k
 * and v (key_walk_rows), or the caller's own where IN_PLACE reads a class walk's keys. */
ALWAYS_INLINE int walk_tile(__constant attn_params *P, const packed_keys *in, const key_walk *w,
                            long i, long b, long kv_bh, __global const float *k,
                            __global const float *v, long *k0, key_rows *rows) {
    const int kind = key_walk_tile(P, in->tile_ptr, in->tile_idx, w, i, k0);
    rows->k = k + *k0 * DQK_PAD, rows->v = v + *k0 * DV_PAD;
    rows->k_step = DQK_PAD, rows->v_step = DV_PAD;
    if (IN_PLACE && w->pass != PASS_GLOBAL_KEYS)
        rows_in_place(P, in->Kp, in->Vp, in->Kt, in->Vt, b, kv_bh, w, *k0, rows);
    return kind;
}

/* What a window walk asks for ahead (PREFETCH_LINE), a share of rows at each key tile but its
 * last, so that the requests overlap the tiles' work rather than wait for free line buffers
 * at the walk's start: the K and V rows of its last key tile, where the walk is short enough
 * for them to stay in L2 until it gets there, and the Q rows of its class's next query tile,
 * which the next work-groups take. */
typedef struct lookahead {
    key_rows last;           /* the walk's last key tile (last.k 0: not asked for) */
    __global const uchar *q; /* the next query tile's first Q row */
    long q_step, q_bytes;    /* bytes from one of its rows to the next, and in a row */
    long q_rows;             /* its rows (0: none) */
    long share;              /* rows asked for at each key tile (0: nothing) */
} lookahead;

ALWAYS_INLINE void lookahead_begin(__constant attn_params *P, const packed_keys *in,
                                   const key_walk *w, long tile, const query_tile *t,
                                   __global const float *k, __global const float *v,
                                   lookahead *a) {
    const long tile_bytes = BLOCK_N * (DQK_PAD + DV_PAD) * (long)sizeof(float);
    a->share = 0;
    if (!PREFETCH || w->pass != PASS_WINDOW || w->count < 2) return;
    long k0;
    walk_tile(P, in, w, w->count - 1, t->b, t->kv_bh, k, v, &k0, &a->last);
    if ((w->count - 1) * tile_bytes > PREFETCH_REACH) a->last.k = 0;
    const long next = tile + P->classes, first = tile_first_row(P, next);
    const long bytes = FEATURE(P, q_dtype) == DTYPE_F32 ? 4 : 2;
    const long rows_left = (P->len_q - first + P->classes - 1) / P->classes;
    a->q_rows = first < P->len_q ? min((long)BLOCK_M, rows_left) : 0;
    a->q = (__global const uchar *)t->Q +
           bytes * (P->q_offset + t->b * P->q_stride_b + t->h * P->q_stride_h +
                    first * P->q_stride_s);
    a->q_step = bytes * P->classes * P->q_stride_s, a->q_bytes = bytes * P->dim_qk;
    a->share = (max(BLOCK_M, BLOCK_N) + w->count - 2) / (w->count - 1);
}

/* Key tile i's share of the lookahead. */
ALWAYS_INLINE void lookahead_step(const lookahead *a, long i) {
    for (long j = i * a->share; j < (i + 1) * a->share; j++) {
        if (j < BLOCK_N && a->last.k) {
            for (int d = 0; d < DQK_PAD; d += 16) PREFETCH_LINE(a->last.k + j * a->last.k_step + d);
            for (int d = 0; d < DV_PAD; d += 16) PREFETCH_LINE(a->last.v + j * a->last.v_step + d);
        }
        if (j < a->q_rows)
            for (long at = 0; at < a->q_bytes; at += 64) PREFETCH_LINE(a->q + j * a->q_step + at);
    }
}

/* Walks the key tiles of walk n of the work-item's query tile (tile_walk.cl's key_walk). */
ALWAYS_INLINE void walk_keys(__constant attn_params *P, const packed_keys *in, long tile, long n,
                             query_tile *t) {
    key_walk w;
    key_walk_begin(P, in->row_list, in->tile_ptr, in->gpos, tile, t->h, n, &w);
    const int global_keys = w.pass == PASS_GLOBAL_KEYS;
    t->r = w.r;
    walk_key_ranges(P, &w, t->row_i, BLOCK_M, t->lo, t->hi);
    __global const float *k, *v;
    __global const uchar *v_bad;
    key_walk_rows(P, in, &w, t->kv_bh, &k, &v, &v_bad);
    lookahead ahead;
    lookahead_begin(P, in, &w, tile, t, k, v, &ahead);
    for (long i = 0; i < w.count; i++) {
        long k0;
        key_rows rows;
        if (i < w.count - 1) lookahead_step(&ahead, i);
        const int kind = walk_tile(P, in, &w, i, t->b, t->kv_bh, k, v, &k0, &rows);
        const int values = values_known(&w, v_bad, k0);
        if (GLOBAL_TOKENS && global_keys && w.keys - k0 <= NARROW_KEYS) /* the last few */
            attend_tile(P, in->layout, in->bias, in->gpos, t, w.pass, kind, k0, NARROW_KEYS, &rows,
                        values);
        else
            attend_tile(P, in->layout, in->bias, in->gpos, t, w.pass, kind, k0, BLOCK_N, &rows,
                        values);
    }
}

/* O[at, at + n) = the first n values of o (all 16 when n >= 16), in O's storage. */
ALWAYS_INLINE void store_o16(__constant attn_params *P, __global void *O, long at, long n,
                             float16 o) {
    if (n >= 16) {
        store16_o(FEATURE(P, out_dtype), o, O, at);
        return;
    }
    float lanes[16];
    vstore16(o, 0, lanes);
    for (int d = 0; d < n; d++) store_o(FEATURE(P, out_dtype), lanes[d], O, at + d);
}

/* O rows = O^T * bound / sum (0 for empty rows) and LSE = max + log(sum) (-inf for an empty
 * row; a row of NaN scores has max -inf but sum NaN and stays NaN); a sink joins the sum
 * (sink_fold). */
ALWAYS_INLINE void store_rows(__constant attn_params *P, __global const uchar *is_global,
                              __global void *O, __global float *LSE, const query_tile *t) {
    const float *row_max = (const float *)t->row_max, *row_sum = (const float *)t->row_sum;
    const float *row_bound = (const float *)t->row_bound;
    long row[BLOCK_M];   /* where each row's O starts, or -1 for a row this tile does not store */
    float scale[BLOCK_M]; /* what its column of O^T is multiplied by */
    for (int m = 0; m < BLOCK_M; m++) {
        const long i = t->row_i[m];
        row[m] = -1, scale[m] = 0.0f;
        if (i < 0 || row_left_to_global_pass(P, is_global, i)) continue;
        row[m] = P->o_offset + t->b * P->o_stride_b + t->h * P->o_stride_h + i * P->o_stride_s;
        const int empty = row_max[m] == -INFINITY && row_sum[m] == 0.0f;
        float top = row_max[m], sum = row_sum[m]; /* with the head's sink, if any */
        const float keep = sink_fold(P, t->h, &top, &sum);
        /* bound / sum is in [1, 1 + BLOCK_N] */
        scale[m] = empty ? 0.0f : row_bound[m] / row_sum[m] * keep;
        store_lse(P, LSE, (t->b * P->heads_q + t->h) * P->len_q + i, top, sum,
                  top == -INFINITY && sum == 0.0f);
    }
    for (int g = 0; g < GROUPS; g++)
        for (int d0 = 0; d0 < P->dim_v; d0 += 16) {
            float16 block[16]; /* columns d0 + e, rows g*16 + l */
#pragma unroll
            for (int e = 0; e < 16; e++) block[e] = t->o_t[d0 + e][g];
            transpose16(block);
#pragma unroll
            for (int l = 0; l < 16; l++)
                if (row[g * 16 + l] >= 0)
                    store_o16(P, O, row[g * 16 + l] + d0, P->dim_v - d0,
                              block[l] * scale[g * 16 + l]);
        }
}

/* ---- The global-row pass's short tiles: keys in the lanes.
 *
 * The global-row pass (row_mode 1) lists the rows of global tokens, often only a few of a head
 * (Longformer's 4): in the lanes above they would keep 4 of 16 lanes busy over every key of the
 * head. A tile of at most FEW_ROWS rows, in a call without a rule that needs key positions (bias,
 * block layout, soft-capping, ALiBi), walks the same key tiles with the keys in the lanes
 * instead, as split.cl does: each K row is read once as DQK_PAD / 16 vectors for every row, each
 * row's 16 dot products are summed across lanes at once, in registers (sum_lanes16_reversed),
 * and each V row is read once as DV_PAD / 16 vectors. A whole key tile takes one softmax step.
 * The output stays normalised (O = sum p V / sum p at every step), so that values near FLT_MAX
 * never overflow it. */
#define FEW_ROWS 4

typedef struct few_rows {
    long b, h, kv_bh;
    long row_i[FEW_ROWS];               /* query row, or -1 */
    long lo[FEW_ROWS], hi[FEW_ROWS];    /* class-local key range of each row in the current walk */
    float16 q[FEW_ROWS][DQK_PAD / 16];  /* pre-scaled by scale, zero past dim_qk */
    float16 o[FEW_ROWS][DV_PAD / 16];   /* O so far, normalised */
    float max[FEW_ROWS], sum[FEW_ROWS]; /* running maximum and sum of exp(s - max) */
    __global const void *Q;             /* Q, for rescore_row */
    float scale;                        /* what Q is multiplied by: the call's scale */
} few_rows;

/* Whether query tile t (rows set) takes the few-row path. The listed rows come first, so a
 * tile holds at most FEW_ROWS of them when its row FEW_ROWS is past the list. */
ALWAYS_INLINE int takes_few_rows(__constant attn_params *P, const query_tile *t) {
    return GLOBAL_TOKENS && GLOBALS_FEATURE(P, row_mode) == 1 && t->row_i[FEW_ROWS] < 0 &&
           !FEATURE(P, has_bias) && !FEATURE(P, has_layout) && !MODIFIES_SCORES(P);
}

/* Rows `rows` (-1: none) of query tile t's head, their pre-scaled queries, and an empty softmax
 * state. */
ALWAYS_INLINE void few_rows_load(__constant attn_params *P, const query_tile *t, const long *rows,
                                 few_rows *f) {
    f->b = t->b, f->h = t->h, f->kv_bh = t->kv_bh, f->Q = t->Q, f->scale = t->scale;
    for (int r = 0; r < FEW_ROWS; r++) {
        const long i = rows[r];
        const long row = P->q_offset + t->b * P->q_stride_b + t->h * P->q_stride_h +
                         (i < 0 ? 0 : i) * P->q_stride_s;
        f->row_i[r] = i;
        for (int v = 0; v < DQK_PAD / 16; v++)
            f->q[r][v] =
                load_row16_as(FEATURE(P, q_dtype), t->Q, row, 16 * v, P->dim_qk, i >= 0) * f->scale;
        for (int v = 0; v < DV_PAD / 16; v++) f->o[r][v] = (float16)0.0f;
        f->max[r] = -INFINITY, f->sum[r] = 0.0f;
    }
}

/* A key tile's BLOCK_N keys, 16 to a vector (BLOCK_N is a multiple of 16). */
#define FEW_PARTS (BLOCK_N / 16)

/* Scores of a key tile's keys for every row, key 16 * part + c in lane c of s[r][part].
 * Returns whether a row's score came out non-finite (huge inputs, NaN or infinities). */
ALWAYS_INLINE int few_rows_scores(const few_rows *f, const key_rows *rows,
                                  float16 s[FEW_ROWS][FEW_PARTS]) {
    int rare = 0;
    for (int part = 0; part < FEW_PARTS; part++) {
        float16 dots[FEW_ROWS][16]; /* q.k lane by lane, key c in dots[r][BITS_REVERSED4(c)] */
#pragma unroll
        for (int c = 0; c < 16; c++) {
            __global const float *k = rows->k + (16 * part + c) * rows->k_step;
            float16 kv[DQK_PAD / 16];
#pragma unroll
            for (int v = 0; v < DQK_PAD / 16; v++) kv[v] = vload16(v, k);
#pragma unroll
            for (int r = 0; r < FEW_ROWS; r++) {
                float16 even = f->q[r][0] * kv[0], odd = (float16)0.0f; /* two chains */
#pragma unroll
                for (int v = 1; v < DQK_PAD / 16; v++) {
                    if (v % 2) odd = fma(f->q[r][v], kv[v], odd);
                    else even = fma(f->q[r][v], kv[v], even);
                }
                dots[r][BITS_REVERSED4(c)] = even + odd;
            }
        }
#pragma unroll
        for (int r = 0; r < FEW_ROWS; r++) {
            s[r][part] = sum_lanes16_reversed(dots[r]);
            rare |= f->row_i[r] >= 0 && any(isinf(s[r][part]) | isnan(s[r][part]));
        }
    }
    return rare;
}

/* The scores of few_rows_scores made whole: non-finite ones computed again (rescore_row) where
 * `rare`, and -inf, on a bounded tile, outside the row's [lo, hi]. */
ALWAYS_INLINE void few_rows_limits(__constant attn_params *P, const few_rows *f,
                                   const key_rows *rows, long k0, int bounded, int rare,
                                   float16 s[FEW_ROWS][FEW_PARTS]) {
    const int16 lane = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int r = 0; r < FEW_ROWS; r++)
        for (int part = 0; part < FEW_PARTS; part++) {
            if (rare && f->row_i[r] >= 0) {
                float x[16];
                vstore16(s[r][part], 0, x);
                for (int c = 0; c < 16; c++)
                    if (!isfinite(x[c]))
                        x[c] = rescore_row(P, f->Q, f->scale, f->b, f->h, f->row_i[r],
                                           rows->k + (16 * part + c) * rows->k_step);
                s[r][part] = vload16(0, x);
            }
            if (bounded) {
                const long first = k0 + 16 * part; /* class index of lane 0 */
                const int lo = (int)clamp(f->lo[r] - first, -1L, 16L);
                const int hi = (int)clamp(f->hi[r] - first, -1L, 16L);
                s[r][part] = select(s[r][part], (float16)(-INFINITY),
                                    (lane < (int16)lo) | (lane > (int16)hi));
            }
        }
}

/* Online softmax over one tile's scores s (keys in the lanes), and s turned into the weights of
 * the normalised update o = o * keep + sum_c s[c] V[c]. */
ALWAYS_INLINE void few_rows_weights(few_rows *f, float16 s[FEW_ROWS][FEW_PARTS],
                                    float keep[FEW_ROWS]) {
    for (int r = 0; r < FEW_ROWS; r++) {
        float16 tile_max = (float16)(-INFINITY);
        for (int part = 0; part < FEW_PARTS; part++) tile_max = max_of(tile_max, s[r][part]);
        const float new_max = fmax(f->max[r], max_across(tile_max).s0);
        const float base = new_max == -INFINITY ? 0.0f : new_max; /* avoids -inf - -inf */
        const float alpha = exp2((f->max[r] - base) * M_LOG2E_F);
        float16 sum = (float16)0.0f;
        for (int part = 0; part < FEW_PARTS; part++) {
            s[r][part] = exp2_nonpositive((s[r][part] - (float16)base) * M_LOG2E_F);
            sum += s[r][part];
        }
        const float new_sum = f->sum[r] * alpha + sum_across(sum).s0;
        const float inv = new_sum > 0.0f ? 1.0f / new_sum : 0.0f;
        keep[r] = kept_share(f->sum[r] * alpha, new_sum);
        for (int part = 0; part < FEW_PARTS; part++) s[r][part] *= inv;
        f->max[r] = new_max;
        f->sum[r] = new_sum;
    }
}

/* o = o * keep + sum_c w[c] V[c] over a key tile's keys; `careful`: a V row may hold a NaN or
 * an infinity, and a zero weight (a key the row does not see) adds nothing. `check`: whether V
 * may, unknown to the caller (rows read in place); finding one, it leaves o as it was and
 * returns 0, and the caller goes again, careful. */
ALWAYS_INLINE int few_rows_accumulate(few_rows *f, const key_rows *rows,
                                      const float16 w[FEW_ROWS][FEW_PARTS],
                                      const float keep[FEW_ROWS], int careful, int check) {
    float wt[FEW_ROWS][BLOCK_N];
    float16 o[FEW_ROWS][DV_PAD / 16]; /* in registers over the keys */
    int16 top = (int16)0; /* top_exponent of the V values */
#pragma unroll
    for (int r = 0; r < FEW_ROWS; r++) {
        for (int part = 0; part < FEW_PARTS; part++) vstore16(w[r][part], part, wt[r]);
#pragma unroll
        for (int v = 0; v < DV_PAD / 16; v++) o[r][v] = f->o[r][v] * keep[r];
    }
    for (int c = 0; c < BLOCK_N; c++) {
        __global const float *vrow = rows->v + c * rows->v_step;
        float16 vv[DV_PAD / 16];
#pragma unroll
        for (int v = 0; v < DV_PAD / 16; v++) {
            vv[v] = vload16(v, vrow);
            if (check) top = top_exponent(top, vv[v]);
        }
#pragma unroll
        for (int r = 0; r < FEW_ROWS; r++) {
            if (careful && wt[r][c] == 0.0f) continue;
#pragma unroll
            for (int v = 0; v < DV_PAD / 16; v++) o[r][v] = fma((float16)wt[r][c], vv[v], o[r][v]);
        }
    }
    if (check && any(top == EXPONENT_BITS)) return 0;
#pragma unroll
    for (int r = 0; r < FEW_ROWS; r++)
#pragma unroll
        for (int v = 0; v < DV_PAD / 16; v++) f->o[r][v] = o[r][v];
    return 1;
}

/* The key tiles of walk w, a tile at a time, for rows whose ranges [lo, hi] are set. */
ALWAYS_INLINE void few_rows_walk(__constant attn_params *P, const packed_keys *in,
                                 const key_walk *w, few_rows *f, __global uint *tile_count) {
    __global const float *k, *v;
    __global const uchar *v_bad;
    key_walk_rows(P, in, w, f->kv_bh, &k, &v, &v_bad);
    for (long i = 0; i < w->count; i++) {
        long k0;
        key_rows rows;
        const int kind = walk_tile(P, in, w, i, f->b, f->kv_bh, k, v, &k0, &rows);
        const int values = values_known(w, v_bad, k0);
        float16 s[FEW_ROWS][FEW_PARTS];
        float keep[FEW_ROWS];
        COUNT_TILE(tile_count);
        /* without a layout, the pass's rule on a general tile (dilation the classes do not
           separate) is the row's [lo, hi] too: causality alone */
        const int rare = few_rows_scores(f, &rows, s);
        few_rows_limits(P, f, &rows, k0, kind != TILE_FULL, rare, s);
        few_rows_weights(f, s, keep);
        if (!few_rows_accumulate(f, &rows, s, keep, values == VALUES_BAD,
                                 values == VALUES_UNCHECKED))
            few_rows_accumulate(f, &rows, s, keep, 1, 0);
    }
}

/* O rows and LSE of the tile's rows (row_finish: sinks, empty rows). */
ALWAYS_INLINE void few_rows_store(__constant attn_params *P, __global void *O, __global float *LSE,
                                  const few_rows *f) {
    for (int r = 0; r < FEW_ROWS; r++) {
        const long i = f->row_i[r];
        if (i < 0) continue;
        const float scale = row_finish(P, LSE, f->h, (f->b * P->heads_q + f->h) * P->len_q + i,
                                       f->max[r], f->sum[r], 1);
        const long row = o_row_start(P, f->b, f->h, i);
        for (int v = 0; v < DV_PAD / 16 && 16 * v < P->dim_v; v++)
            store_o16(P, O, row + 16 * v, P->dim_v - 16 * v, f->o[r][v] * scale);
    }
}

/* ---- The global rows folded into the window pass (fold_rows: packed.c decides).
 *
 * Without a dilation (one class), every window query tile also walks the listed rows (at most
 * FEW_ROWS global rows) over the keys it owns, the keys of its own rows' positions, which its
 * window walk has just brought into the cache, and stores their partial softmax state;
 * merge_global_rows merges the partials of every tile. The global-row pass would walk every key
 * of the head again for those few rows, in walks of their own (2.5 % of Longformer's time at
 * N = 16384 on one core, bench/README.md: the few-row tiles' work, not memory, is their cost). */

/* Keys [*a, *b) of class 0 that window tile `tile` owns: those at its rows' positions, the first
 * tile's also the keys before and the last tile's those after, so that every key has one
 * owner. */
ALWAYS_INLINE void fold_keys(__constant attn_params *P, long tile, long *a, long *b) {
    const long tiles = P->tiles_per_class;
    *a = tile == 0 ? 0 : clamp(tile * BLOCK_M + P->offset, 0L, P->len_k);
    *b = tile == tiles - 1 ? P->len_k : clamp((tile + 1) * BLOCK_M + P->offset, 0L, P->len_k);
}

/* The fold's walk of window tile `tile`: the rows' global-row ranges cut to the keys it owns. */
ALWAYS_INLINE void fold_walk_begin(__constant attn_params *P, long tile, few_rows *f,
                                   key_walk *w) {
    long a, b, lo_all = LONG_MAX, hi_all = -1;
    fold_keys(P, tile, &a, &b);
    *w = (key_walk){PASS_GLOBAL_ROWS, 0, class_keys(P, 0), 0, 0, a, b - 1, 0, 0};
    for (int r = 0; r < FEW_ROWS; r++) {
        f->lo[r] = 0, f->hi[r] = -1;
        if (f->row_i[r] < 0) continue;
        row_key_range(P, PASS_GLOBAL_ROWS, 0, f->row_i[r] + P->offset, &f->lo[r], &f->hi[r]);
        f->lo[r] = max(f->lo[r], a), f->hi[r] = min(f->hi[r], b - 1);
        w->full_lo = max(w->full_lo, f->lo[r]), w->full_hi = min(w->full_hi, f->hi[r]);
        if (f->lo[r] > f->hi[r]) continue;
        lo_all = min(lo_all, f->lo[r]), hi_all = max(hi_all, f->hi[r]);
    }
    w->first = lo_all / BLOCK_N;
    w->count = hi_all >= lo_all ? hi_all / BLOCK_N - w->first + 1 : 0;
}

/* A partial of the fold: a row's running max and sum, and its O normalised by the sum, over one
 * tile's keys; partials [B*Hq][tiles_per_class][FEW_ROWS][PARTIAL_FLOATS]. */
#define PARTIAL_FLOATS (2 + DV_PAD)

ALWAYS_INLINE __global float *partial_at(__constant attn_params *P, __global float *partials,
                                         long bh, long tile, long r) {
    return partials + ((bh * P->tiles_per_class + tile) * FEW_ROWS + r) * PARTIAL_FLOATS;
}

/* The few-row path of query tile t: the global-row pass's tile (takes_few_rows), or the rows
 * that window tile folds (row_mode 0: fold_rows), whose partials it stores. */
ALWAYS_INLINE void attend_few_rows(__constant attn_params *P, const packed_keys *in, long tile,
                                   const query_tile *t, __global void *O, __global float *LSE,
                                   __global float *partials) {
    const int fold = GLOBALS_FEATURE(P, row_mode) == 0;
    long rows[FEW_ROWS];
    for (int r = 0; r < FEW_ROWS; r++)
        rows[r] = !fold ? t->row_i[r] : r < P->num_listed_rows ? in->row_list[r] : -1;
    few_rows f;
    few_rows_load(P, t, rows, &f);
    for (long n = 0; n < (fold ? 1 : key_walks(P)); n++) {
        key_walk w;
        if (fold) {
            fold_walk_begin(P, tile, &f, &w);
        } else {
            key_walk_begin(P, in->row_list, in->tile_ptr, in->gpos, tile, f.h, n, &w);
            walk_key_ranges(P, &w, f.row_i, FEW_ROWS, f.lo, f.hi);
        }
        few_rows_walk(P, in, &w, &f, t->tile_count);
    }
    if (!fold) {
        few_rows_store(P, O, LSE, &f);
        return;
    }
    for (int r = 0; r < FEW_ROWS; r++) {
        __global float *part = partial_at(P, partials, t->b * P->heads_q + t->h, tile, r);
        part[0] = f.max[r], part[1] = f.sum[r];
        for (int v = 0; v < DV_PAD / 16; v++) vstore16(f.o[r][v], v, part + 2);
    }
}

/* The folded rows' outputs, after attention_lanes: work-item (r, b * Hq + h) merges listed row
 * r's partials over the window tiles as one walk over all their keys would have: with partial
 * p's max m_p, sum l_p and output O_p (normalised by l_p), m = max m_p, l = sum l_p e^(m_p - m)
 * and O = sum (l_p e^(m_p - m) / l) O_p (a convex combination: no overflow). row_finish folds
 * the sink in and stores LSE; a row that saw no key gets O = 0, and NaN stays NaN. */
__kernel void merge_global_rows(__constant attn_params *P, __global const int *row_list,
                                __global float *partials, __global void *O, __global float *LSE) {
    const long r = get_global_id(0), bh = get_global_id(1), tiles = P->tiles_per_class;
    if (r >= P->num_listed_rows) return;
    const long h = bh % P->heads_q, b = bh / P->heads_q, i = row_list[r];
    float m = -INFINITY, l = 0.0f;
    for (long p = 0; p < tiles; p++) m = fmax(m, partial_at(P, partials, bh, p, r)[0]);
    const float base = m == -INFINITY ? 0.0f : m; /* avoids -inf - -inf */
    for (long p = 0; p < tiles; p++) {
        __global const float *part = partial_at(P, partials, bh, p, r);
        l += part[1] * exp(part[0] - base);
    }
    float16 o[DV_PAD / 16];
    for (int v = 0; v < DV_PAD / 16; v++) o[v] = (float16)0.0f;
    for (long p = 0; p < tiles && l != 0.0f; p++) {
        __global const float *part = partial_at(P, partials, bh, p, r);
        const float w = part[1] * exp(part[0] - base) / l;
        for (int v = 0; v < DV_PAD / 16; v++) o[v] = fma((float16)w, vload16(v, part + 2), o[v]);
    }
    const float scale = row_finish(P, LSE, h, bh * P->len_q + i, m, l, 1);
    const long row = o_row_start(P, b, h, i);
    for (int v = 0; v < DV_PAD / 16 && 16 * v < P->dim_v; v++)
        store_o16(P, O, row + 16 * v, P->dim_v - 16 * v, o[v] * scale);
}

/* Work-group (tile, b*Hq + h) of one work-item: tile = t*classes + class (row_mode 0)
 * or the tile of listed rows (row_mode 1), the global-row pass's tiles first (PASS_PARAMS);
 * its key walks one after another (tile_walk.cl's key_walk). */
#if GLOBAL_TOKENS
#define PARTIALS_ARG , __global float *partials /* fold_rows: the partials, else a placeholder */
#define PARTIALS     partials
#else
#define PARTIALS_ARG
#define PARTIALS 0
#endif
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void
attention_lanes(ATTENTION_KERNEL_ARGS PARTIALS_ARG) {
    __constant attn_params *P = PASS_PARAMS(P_window, P_rows, row_tiles);
    const long tile = PASS_TILE(row_tiles), bh = get_group_id(1);
    query_tile t;
    const long first = tile_first_row(P, tile);
    /* a class with fewer tiles than the widest */
    if (tile_row_from(P, row_list, tile, first, 0) < 0) return;
    t.b = div_rem(bh, P->heads_q, &t.h);
    t.kv_bh = t.b * P->heads_kv + t.h / (P->heads_q / P->heads_kv);
    TILE_COUNTER_INIT(t.tile_count);
    t.Q = Q;
    t.scale = q_scale;
    for (int m = 0; m < BLOCK_M; m++) t.row_i[m] = tile_row_from(P, row_list, tile, first, m);
    const packed_keys keys = PACKED_KEYS;
    const int few = takes_few_rows(P, &t);
    if (!few) {
        load_queries(P, Q, q_scale, &t);
        for (long n = 0; n < key_walks(P); n++) walk_keys(P, &keys, tile, n, &t);
        store_rows(P, is_global, O, LSE, &t);
    }
    /* one call site: the few-row code is inlined once */
    if ((GLOBAL_TOKENS && GLOBALS_FEATURE(P, fold_rows)) || few)
        attend_few_rows(P, &keys, tile, &t, O, LSE, PARTIALS);
}
