/*
 * Attention on NVIDIA tensor cores (the `nv_mma` variant): FlashAttention-2's partition with
 * both products on `mma.sync.m16n8k16` (16-bit inputs, float32 accumulators) through inline PTX.
 *
 * Work partition: work-group (tile, b*Hq + h) of WARPS warps owns a query tile of BLOCK_M rows
 * (tile_walk.cl's tile_row) and walks the key tiles of tile_walk.cl's walk, BLOCK_N keys at a
 * time, with an online softmax. Warp w owns M_TILES row tiles of 16 (rows 16 (M_TILES w + mt)
 * .. + 15, mt < M_TILES), so that each K and V fragment it loads feeds M_TILES products; in
 * it, lane = 4 * g + t (g = lane / 4, t = lane % 4) holds the fragments PTX's m16n8k16 layout
 * gives it:
 *   Q (A operand)  q[mt][ks][4]:  rows g, g + 8; dims 16 ks + 2t, +1 and 16 ks + 2t + 8, +9
 *   S (C operand)  s[mt][nt][4]:  rows g (s[.][nt][0..1]) and g + 8 ([2..3]); keys 8 nt + 2t, +1
 *   O (C operand)  o[mt][nv][4]:  the same rows; columns 8 nv + 2t, +1
 * so each lane holds 2 M_TILES rows (slot SLOT(mt, e) = 2 mt + e / 2), and a row's maxima and
 * sums are reduced over the four lanes of a quad. S's fragments of key tiles 2 ks and 2 ks + 1
 * are exactly the A operand of P V's k-step ks (the FA2 register trick), P rounded to the
 * storage type on the way.
 *
 * Local memory, as 32-bit words of two 16-bit values (the mma operands' registers), STAGES
 * buffers of K and V (2: the next tile is stored while this one is computed):
 *   k_words [BLOCK_N][K_STRIDE]: key c, dims 2w and 2w + 1 in word w (the B operand of Q K^T)
 *   v_words [DV_PAD][V_STRIDE]:  V transposed: column n, keys 2w and 2w + 1 in word w
 *   p_tile  [BLOCK_M][P_COLS]:   16-bit P, only for a tile whose V holds a NaN or an infinity
 * Rows are padded by 4 words, so the 32 lanes of a fragment load (8 rows x 4 words) hit 32
 * different banks. K and V are copied as raw bits; dims past the head dim and keys past the
 * walk are zero.
 *
 * Scores are scale * (q . k) in float32 (Q is not pre-scaled: its 16-bit rounding would add an
 * error); one that came out non-finite is summed again without overflow (common.cl, rescored).
 * O stays normalised, the weighted mean of the V rows seen, as flash's does: each tile's P is
 * divided by the row's new sum before it is rounded, so no sum of products can pass V's
 * largest magnitude. A V tile holding a NaN or an infinity takes P V one pair at a time from
 * the P tile, skipping zero probabilities (0 * NaN would be NaN), as flash does.
 *
 * MMA_PTX=1 (NVIDIA, compute capability 8.0 or higher) issues the PTX; MMA_PTX=0 emulates the
 * same instructions with the same fragment layouts through local memory and barriers, for
 * devices without tensor cores (the tests run the kernel's bookkeeping on PoCL that way). Built
 * after common.cl and tile_walk.cl; IN_DTYPE is float16 or bfloat16 (Q, K and V alike); the
 * host sets BLOCK_M (a multiple of 16 M_TILES), BLOCK_N (32 or 64), M_TILES and STAGES (1, 2).
 */
#define WARPS      (BLOCK_M / (16 * M_TILES))
#define GROUP_SIZE (32 * WARPS)
#define ROWS       (2 * M_TILES) /* query rows a lane holds */
#define P_COLS     32            /* keys of P a pass of the careful P V (p_tile's columns) */
#define NT         (BLOCK_N / 8)  /* S fragments: key columns of 8 */
#define KS_QK      (DQK_PAD / 16) /* k-steps of Q K^T */
#define KS_PV      (BLOCK_N / 16) /* k-steps of P V */
#define NV         (DV_PAD / 8)   /* O fragments: columns of 8 */
#define K_STRIDE   (DQK_PAD / 2 + 4)
#define V_STRIDE   (BLOCK_N / 2 + 4)
#ifndef PREFETCH
#define PREFETCH (DQK_PAD + DV_PAD <= 128) /* registers for the next tile's K and V */
#endif
#ifndef ALIGNED_ROWS
#define ALIGNED_ROWS 0
#endif

#if IN_DTYPE == DTYPE_F16
#define MMA_TYPE           "f16"
#define RAW_FINITE(x)      (((x) & 0x7c00u) != 0x7c00u)
#define WIDEN_RAW(x)       half_bits_to_float(x)
#elif IN_DTYPE == DTYPE_BF16
#define MMA_TYPE           "bf16"
#define RAW_FINITE(x)      (((x) & 0x7f80u) != 0x7f80u)
#define WIDEN_RAW(x)       bf16_to_float(x)
#else
#error "nv_mma reads float16 or bfloat16 Q, K and V"
#endif

/* Loops over fragments are unrolled in the PTX build, so that every fragment index is a
 * constant and the arrays stay in registers (one index the compiler cannot resolve moves a
 * whole array to local memory); the emulation's loops hold barriers and stay rolled. */
#if MMA_PTX
#define UNROLL _Pragma("unroll")
#define EXP2   native_exp2 /* ex2.approx: 2 ulp */
#else
#define UNROLL
#define EXP2 exp2
#endif

ALWAYS_INLINE float half_bits_to_float(ushort x) {
    return vload_half(0, (const __private half *)&x);
}

/* ---------------------------------------------------------------- the instructions */

#if MMA_PTX
/* d = a b + c for one warp: A 16x16 (row-major), B 16x8 (column-major), C and D 16x8 float32. */
ALWAYS_INLINE void mma_16816(float c[4], const uint a[4], uint b0, uint b1,
                             __local float *scratch) {
    float d0, d1, d2, d3;
    asm("mma.sync.aligned.m16n8k16.row.col.f32." MMA_TYPE "." MMA_TYPE ".f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
                 : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]),
                   "f"(c[1]), "f"(c[2]), "f"(c[3]));
    c[0] = d0, c[1] = d1, c[2] = d2, c[3] = d3;
}

/* x of the lane whose index differs from this one's by `mask` (within the warp). */
ALWAYS_INLINE float shuffle_xor(float x, int mask, __local float *scratch) {
    uint y;
    asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;"
                 : "=r"(y)
                 : "r"(as_uint(x)), "r"(mask));
    return as_float(y);
}
#else
/* The same through local memory: scratch holds the warp's A [16][16] and B [16][8] as floats
 * (WARP_SCRATCH floats a warp); every work-item of the group calls it at once. */
ALWAYS_INLINE void mma_16816(float c[4], const uint a[4], uint b0, uint b1,
                             __local float *scratch) {
    const int lane = get_local_id(0) % 32, g = lane / 4, t = lane % 4;
    __local float *A = scratch, *B = scratch + 256;
    for (int r = 0; r < 4; r++) { /* a[r]: row g + 8 (r % 2), columns 2t + 8 (r / 2), +1 */
        const int at = (g + 8 * (r % 2)) * 16 + 2 * t + 8 * (r / 2);
        A[at] = WIDEN_RAW((ushort)a[r]);
        A[at + 1] = WIDEN_RAW((ushort)(a[r] >> 16));
    }
    B[(2 * t) * 8 + g] = WIDEN_RAW((ushort)b0);
    B[(2 * t + 1) * 8 + g] = WIDEN_RAW((ushort)(b0 >> 16));
    B[(2 * t + 8) * 8 + g] = WIDEN_RAW((ushort)b1);
    B[(2 * t + 9) * 8 + g] = WIDEN_RAW((ushort)(b1 >> 16));
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = 0; e < 4; e++) { /* c[e]: row g + 8 (e / 2), column 2t + e % 2 */
        float acc = c[e];
        for (int k = 0; k < 16; k++)
            acc = fma(A[(g + 8 * (e / 2)) * 16 + k], B[k * 8 + 2 * t + e % 2], acc);
        c[e] = acc;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

ALWAYS_INLINE float shuffle_xor(float x, int mask, __local float *scratch) {
    const int lane = get_local_id(0) % 32;
    scratch[lane] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    const float y = scratch[lane ^ mask];
    barrier(CLK_LOCAL_MEM_FENCE);
    return y;
}
#endif
#define WARP_SCRATCH 384 /* floats: the emulation's A and B (the PTX build declares 1) */

/* Two floats rounded to the storage type (to nearest even), packed low, high. */
ALWAYS_INLINE uint pack2(float lo, float hi) {
#if MMA_PTX
    uint d;
    asm("cvt.rn." MMA_TYPE "x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
#elif IN_DTYPE == DTYPE_F16
    ushort h[2];
    vstore_half_rte(lo, 0, (__private half *)h);
    vstore_half_rte(hi, 1, (__private half *)h);
    return (uint)h[0] | (uint)h[1] << 16;
#else
    return (uint)float_to_bf16(lo) | (uint)float_to_bf16(hi) << 16;
#endif
}

/* ---------------------------------------------------------------- state */

/* One stage of local memory: a key tile's K and V, and the tag of the last tile stored there
 * whose V holds a NaN or an infinity (tags count the group's tiles from 1, so no flag needs
 * clearing). */
typedef struct tile_buffer {
    __local uint *k_words, *v_words;
    __local int *bad_tag;
} tile_buffer;

typedef struct mma_ctx {
    __constant attn_params *P;
    long tile, b, h;
    int warp, g, t;
    __global const ushort *q, *k, *v; /* the (b, h) of Q; the (b, kv head) of K and V */
    float scale;
    __global const int *gpos, *tile_ptr, *tile_idx, *row_list;
    __global const uchar *layout;
    tile_buffer buf[STAGES];
    __local ushort *p_tile;
    __local float *scratch; /* the warp's (emulation) */
    __global uint *tile_count;
} mma_ctx;

/* A lane's rows (slot 2 mt + r: row g + 8r of the warp's row tile mt) and their online
 * softmax. */
typedef struct mma_rows {
    int i[ROWS];                          /* query rows, -1 past the end */
    __global const float *bias_row[ROWS]; /* their bias rows (row 0 for -1) */
    float m[ROWS];                        /* running maximum */
    float l[ROWS];                        /* sum exp(s - m) over the row's keys so far */
    float o[M_TILES][NV][4];              /* O so far, normalised (the O fragments) */
} mma_rows;

/* One walk over key tiles (tile_walk.cl's key_walk). */
typedef struct walk_state {
    key_walk k;
    long classes;           /* class k.r of `classes` (1 for global keys) */
    int lo[ROWS], hi[ROWS]; /* per row, the class-local keys it may see (TILE_BOUNDED) */
} walk_state;

#define SLOT(mt, e) (2 * (mt) + (e) / 2)       /* a fragment element's row slot */
#define COL(n, e)   (8 * (n) + 2 * f->t + (e) % 2) /* its column in the key tile or O */

/* The work-group's row of slot r (0 .. BLOCK_M - 1). */
ALWAYS_INLINE int group_row(const mma_ctx *f, int r) {
    return 16 * (M_TILES * f->warp + r / 2) + f->g + 8 * (r % 2);
}

/* ---------------------------------------------------------------- staging */

/* Row c of key tile k0 (class tiles: every classes-th key; global keys through gpos). */
ALWAYS_INLINE __global const ushort *key_row(const mma_ctx *f, const walk_state *w,
                                             __global const ushort *base, long stride, long k0,
                                             int c) {
    const long m = k0 + c;
    const long j = w->k.pass == PASS_GLOBAL_KEYS ? (long)f->gpos[m] : w->k.r + m * w->classes;
    return base + j * stride;
}

/* 8 raw values of a row from element d on, zero from `dim` on (dim 0: no key). ALIGNED_ROWS
 * (the planner's: offsets and strides of K and V multiples of 8 values) reads them as one
 * 16-byte word; vload8 may become 8 loads of 2 bytes. */
ALWAYS_INLINE uint4 load8(__global const ushort *row, int d, int dim) {
#if ALIGNED_ROWS
    if (d + 8 <= dim) return *(__global const uint4 *)(row + d);
#else
    if (d + 8 <= dim) return as_uint4(vload8(0, row + d));
#endif
    ushort x[8];
    for (int e = 0; e < 8; e++) x[e] = d + e < dim ? row[d + e] : (ushort)0;
    return as_uint4(vload8(0, x));
}

ALWAYS_INLINE int all_finite8(uint4 raw) {
    const ushort8 x = as_ushort8(raw);
    return RAW_FINITE(x.s0) && RAW_FINITE(x.s1) && RAW_FINITE(x.s2) && RAW_FINITE(x.s3) &&
           RAW_FINITE(x.s4) && RAW_FINITE(x.s5) && RAW_FINITE(x.s6) && RAW_FINITE(x.s7);
}

/* A key tile on its way from global to local memory, in registers: the work-item's chunks of
 * 8 values, K's (key c, dims d..d+7) and V's (keys 2 pair and 2 pair + 1, dims d..d+7). */
#define K_CHUNKS ((BLOCK_N * (DQK_PAD / 8) + GROUP_SIZE - 1) / GROUP_SIZE)
#define V_CHUNKS ((BLOCK_N / 2 * (DV_PAD / 8) + GROUP_SIZE - 1) / GROUP_SIZE)
typedef struct staged_tile {
    uint4 k[K_CHUNKS];
    uint4 v[V_CHUNKS][2];
} staged_tile;

/* Loads the walk's tile `index` into *t (zero where a slot holds no key). */
ALWAYS_INLINE void fetch_tile(const mma_ctx *f, const walk_state *w, long index, staged_tile *t) {
    __constant attn_params *P = f->P;
    const int lid = get_local_id(0), dqk = (int)P->dim_qk, dv = (int)P->dim_v;
    long k0;
    key_walk_tile(P, f->tile_ptr, f->tile_idx, &w->k, index, &k0);
    UNROLL for (int n = 0; n < K_CHUNKS; n++) {
        const int at = lid + n * GROUP_SIZE;
        const int c = at / (DQK_PAD / 8), d = at % (DQK_PAD / 8) * 8;
        const int present = at < BLOCK_N * (DQK_PAD / 8) && k0 + c < w->k.keys;
        t->k[n] = present ? load8(key_row(f, w, f->k, P->k_stride_s, k0, c), d, dqk) : (uint4)0;
    }
    UNROLL for (int n = 0; n < V_CHUNKS; n++) {
        const int at = lid + n * GROUP_SIZE;
        const int pair = at % (BLOCK_N / 2), d = at / (BLOCK_N / 2) * 8;
        const int inside = at < BLOCK_N / 2 * (DV_PAD / 8);
        UNROLL for (int h = 0; h < 2; h++) {
            const int c = 2 * pair + h;
            t->v[n][h] = inside && k0 + c < w->k.keys
                             ? load8(key_row(f, w, f->v, P->v_stride_s, k0, c), d, dv)
                             : (uint4)0;
        }
    }
}

/* Stores *t into the buffer (layouts at the top), tagging it `tag` when V holds a NaN or an
 * infinity. Between barriers. */
ALWAYS_INLINE void store_tile(const staged_tile *t, const tile_buffer *buf, int tag) {
    const int lid = get_local_id(0);
    UNROLL for (int n = 0; n < K_CHUNKS; n++) {
        const int at = lid + n * GROUP_SIZE;
        const int c = at / (DQK_PAD / 8), d = at % (DQK_PAD / 8) * 8;
        if (at < BLOCK_N * (DQK_PAD / 8)) vstore4(t->k[n], 0, buf->k_words + c * K_STRIDE + d / 2);
    }
    int any_bad = 0;
    UNROLL for (int n = 0; n < V_CHUNKS; n++) {
        const int at = lid + n * GROUP_SIZE;
        const int pair = at % (BLOCK_N / 2), d = at / (BLOCK_N / 2) * 8;
        if (at >= BLOCK_N / 2 * (DV_PAD / 8)) continue;
        any_bad |= !all_finite8(t->v[n][0]) || !all_finite8(t->v[n][1]);
        const uint8 words = convert_uint8(as_ushort8(t->v[n][0])) |
                            convert_uint8(as_ushort8(t->v[n][1])) << 16;
        __local uint *col = buf->v_words + d * V_STRIDE + pair;
        col[0 * V_STRIDE] = words.s0, col[1 * V_STRIDE] = words.s1;
        col[2 * V_STRIDE] = words.s2, col[3 * V_STRIDE] = words.s3;
        col[4 * V_STRIDE] = words.s4, col[5 * V_STRIDE] = words.s5;
        col[6 * V_STRIDE] = words.s6, col[7 * V_STRIDE] = words.s7;
    }
    if (any_bad) atomic_max(buf->bad_tag, tag);
}

/* The lane's Q fragments, raw, zero past the head dim and for rows past the end. */
ALWAYS_INLINE void load_q(const mma_ctx *f, const mma_rows *st, uint q[M_TILES][KS_QK][4]) {
    __constant attn_params *P = f->P;
    const int dqk = (int)P->dim_qk;
    UNROLL for (int mt = 0; mt < M_TILES; mt++) UNROLL for (int ks = 0; ks < KS_QK; ks++)
        UNROLL for (int r = 0; r < 4; r++) {
            const int i = st->i[2 * mt + r % 2], d = 16 * ks + 2 * f->t + 8 * (r / 2);
            __global const ushort *row = f->q + (long)max(i, 0) * P->q_stride_s;
            const uint lo = i >= 0 && d < dqk ? row[d] : 0u;
            const uint hi = i >= 0 && d + 1 < dqk ? row[d + 1] : 0u;
            q[mt][ks][r] = lo | hi << 16;
        }
}

/* ---------------------------------------------------------------- one key tile */

/* Score (row i, key slot c) again, without overflow on the way (common.cl, rescored). */
ALWAYS_INLINE float rescore(const mma_ctx *f, const tile_buffer *buf, int i, int c) {
    __global const ushort *q = f->q + (long)i * f->P->q_stride_s;
    __local const ushort *k = (__local const ushort *)(buf->k_words + c * K_STRIDE);
    float2 dot = (float2)0.0f;
    for (int d = 0; d < (int)f->P->dim_qk; d++)
        dot = rescore_add(dot, WIDEN_RAW(q[d]), WIDEN_RAW(k[d]));
    return rescore_end(dot, f->scale);
}

/* s = scale * Q K^T for the warp's rows and the tile's keys: each K fragment feeds the
 * M_TILES row tiles. */
ALWAYS_INLINE void tile_scores(const mma_ctx *f, const tile_buffer *buf, const mma_rows *st,
                               const uint q[M_TILES][KS_QK][4], float s[M_TILES][NT][4]) {
    UNROLL for (int mt = 0; mt < M_TILES; mt++) UNROLL for (int n = 0; n < NT; n++)
        UNROLL for (int e = 0; e < 4; e++) s[mt][n][e] = 0.0f;
    UNROLL for (int n = 0; n < NT; n++) {
        __local const uint *key = buf->k_words + (8 * n + f->g) * K_STRIDE + f->t;
        UNROLL for (int ks = 0; ks < KS_QK; ks++) {
            const uint b0 = key[8 * ks], b1 = key[8 * ks + 4];
            UNROLL for (int mt = 0; mt < M_TILES; mt++)
                mma_16816(s[mt][n], q[mt][ks], b0, b1, f->scratch);
        }
    }
    int overflowed = 0;
    UNROLL for (int mt = 0; mt < M_TILES; mt++) UNROLL for (int n = 0; n < NT; n++)
        UNROLL for (int e = 0; e < 4; e++) {
            overflowed |= !isfinite(s[mt][n][e]) && st->i[SLOT(mt, e)] >= 0;
            s[mt][n][e] *= f->scale;
        }
    if (overflowed) /* rare: the fix-up is kept out of the common path */
        UNROLL for (int mt = 0; mt < M_TILES; mt++) UNROLL for (int n = 0; n < NT; n++)
            UNROLL for (int e = 0; e < 4; e++) {
                const int i = st->i[SLOT(mt, e)];
                if (!isfinite(s[mt][n][e]) && i >= 0) s[mt][n][e] = rescore(f, buf, i, COL(n, e));
            }
}

/* The tile's masks, score modifiers and bias on the lane's fragments (tile_walk.cl's
 * walk_masked_score). */
ALWAYS_INLINE void mask_scores(const mma_ctx *f, const walk_state *w, const mma_rows *st,
                               int kind, long k0, float s[M_TILES][NT][4]) {
    __constant attn_params *P = f->P;
    const int modifies = P->has_bias || MODIFIES_SCORES(P);
    if (kind == TILE_FULL && !modifies) return;
    UNROLL for (int mt = 0; mt < M_TILES; mt++) UNROLL for (int n = 0; n < NT; n++)
        UNROLL for (int e = 0; e < 4; e++) {
            const int m = (int)k0 + COL(n, e), r = SLOT(mt, e);
            const int j = kind == TILE_GENERAL || modifies
                              ? walk_key_position(&w->k, w->classes, f->gpos, m)
                              : (int)NO_KEY;
            s[mt][n][e] = walk_masked_score(P, f->layout, &w->k, kind, f->b, f->h,
                                            max(st->i[r], 0), m, j, w->lo[r], w->hi[r],
                                            st->bias_row[r], s[mt][n][e]);
        }
}

/* A row's value reduced over the quad (the four lanes holding the row). */
ALWAYS_INLINE float quad_max(float x, __local float *scratch) {
    x = fmax(x, shuffle_xor(x, 1, scratch));
    return fmax(x, shuffle_xor(x, 2, scratch));
}

ALWAYS_INLINE float quad_sum(float x, __local float *scratch) {
    x += shuffle_xor(x, 1, scratch);
    return x + shuffle_xor(x, 2, scratch);
}

/* The online softmax over one tile: the rows' new maxima and sums, s turned into P / sum, and
 * O rescaled by old sum * exp(old max - new max) / new sum. */
ALWAYS_INLINE void softmax_step(const mma_ctx *f, mma_rows *st, float s[M_TILES][NT][4]) {
    UNROLL for (int r = 0; r < ROWS; r++) {
        const int mt = r / 2, e0 = 2 * (r % 2); /* the row's elements: e0, e0 + 1 */
        float x = -INFINITY; /* fmax drops NaN scores, so no NaN enters the reduction */
        UNROLL for (int n = 0; n < NT; n++) x = fmax(x, fmax(s[mt][n][e0], s[mt][n][e0 + 1]));
        const float new_max = fmax(st->m[r], quad_max(x, f->scratch));
        const float base = new_max == -INFINITY ? 0.0f : new_max; /* avoids -inf - -inf */
        float sum = 0.0f;
        UNROLL for (int n = 0; n < NT; n++) UNROLL for (int e = e0; e < e0 + 2; e++) {
            s[mt][n][e] = EXP2((s[mt][n][e] - base) * M_LOG2E_F);
            sum += s[mt][n][e];
        }
        const float kept = st->l[r] * EXP2((st->m[r] - base) * M_LOG2E_F);
        const float total = kept + quad_sum(sum, f->scratch);
        const float inv = total == 0.0f ? 0.0f : 1.0f / total; /* a NaN sum stays NaN */
        UNROLL for (int n = 0; n < NT; n++) UNROLL for (int e = e0; e < e0 + 2; e++)
            s[mt][n][e] *= inv;
        const float keep = kept_share(kept, total);
        UNROLL for (int n = 0; n < NV; n++) UNROLL for (int e = e0; e < e0 + 2; e++)
            st->o[mt][n][e] *= keep;
        st->m[r] = new_max;
        st->l[r] = total;
    }
}

/* O += P V on the tensor cores: P's fragments rounded to the storage type as the A operand;
 * each V fragment feeds the M_TILES row tiles. */
ALWAYS_INLINE void accumulate_pv(const mma_ctx *f, const tile_buffer *buf, mma_rows *st,
                                 float p[M_TILES][NT][4]) {
    UNROLL for (int ks = 0; ks < KS_PV; ks++) {
        uint a[M_TILES][4];
        UNROLL for (int mt = 0; mt < M_TILES; mt++) {
            a[mt][0] = pack2(p[mt][2 * ks][0], p[mt][2 * ks][1]);
            a[mt][1] = pack2(p[mt][2 * ks][2], p[mt][2 * ks][3]);
            a[mt][2] = pack2(p[mt][2 * ks + 1][0], p[mt][2 * ks + 1][1]);
            a[mt][3] = pack2(p[mt][2 * ks + 1][2], p[mt][2 * ks + 1][3]);
        }
        __local const uint *col = buf->v_words + f->g * V_STRIDE + 8 * ks + f->t;
        UNROLL for (int n = 0; n < NV; n++) {
            const uint b0 = col[8 * n * V_STRIDE], b1 = col[8 * n * V_STRIDE + 4];
            UNROLL for (int mt = 0; mt < M_TILES; mt++)
                mma_16816(st->o[mt][n], a[mt], b0, b1, f->scratch);
        }
    }
}

/* The same one pair at a time, skipping zero probabilities: for a V tile holding a NaN or an
 * infinity. P goes through the P tile (a row's P is spread over its quad), P_COLS keys a pass. */
ALWAYS_INLINE void accumulate_pv_careful(const mma_ctx *f, const tile_buffer *buf, mma_rows *st,
                                         float p[M_TILES][NT][4]) {
    __local const ushort *v = (__local const ushort *)buf->v_words;
    UNROLL for (int pass = 0; pass < BLOCK_N / P_COLS; pass++) {
        const int n0 = pass * (P_COLS / 8); /* the pass's first S fragment */
        UNROLL for (int r = 0; r < ROWS; r++) {
            __local ushort *prow = f->p_tile + group_row(f, r) * P_COLS + 2 * f->t;
            UNROLL for (int n = 0; n < P_COLS / 8; n++) {
                const int mt = r / 2, e = 2 * (r % 2);
                const uint two = pack2(p[mt][n0 + n][e], p[mt][n0 + n][e + 1]);
                prow[8 * n] = (ushort)two;
                prow[8 * n + 1] = (ushort)(two >> 16);
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        UNROLL for (int mt = 0; mt < M_TILES; mt++) UNROLL for (int n = 0; n < NV; n++)
            UNROLL for (int e = 0; e < 4; e++) {
                __local const ushort *prow = f->p_tile + group_row(f, SLOT(mt, e)) * P_COLS;
                __local const ushort *vcol = v + COL(n, e) * (2 * V_STRIDE) + pass * P_COLS;
                float acc = st->o[mt][n][e];
                for (int c = 0; c < P_COLS; c++) {
                    const float pc = WIDEN_RAW(prow[c]);
                    if (pc != 0.0f) acc = fma(pc, WIDEN_RAW(vcol[c]), acc);
                }
                st->o[mt][n][e] = acc;
            }
        barrier(CLK_LOCAL_MEM_FENCE); /* the P tile read before the next pass writes it */
    }
}

/* Everything one key tile does, from the buffer it was stored in. */
ALWAYS_INLINE void compute_tile(const mma_ctx *f, const walk_state *w, const tile_buffer *buf,
                                int tag, int kind, long k0, const uint q[M_TILES][KS_QK][4],
                                mma_rows *st) {
    float s[M_TILES][NT][4];
    tile_scores(f, buf, st, q, s);
    mask_scores(f, w, st, kind, k0, s);
    softmax_step(f, st, s);
    if (*buf->bad_tag == tag)
        accumulate_pv_careful(f, buf, st, s);
    else
        accumulate_pv(f, buf, st, s);
}

/* ---------------------------------------------------------------- walks */

/* Every tile of a walk in one buffer: fetched into registers, stored into local memory,
 * computed. With PREFETCH the next tile's loads are issued before this one is computed, so
 * that their latency hides behind it (head dims up to 64, where registers allow: 5 % faster on
 * the H200 at D = 64). Tags the tiles from *tag + 1 on. */
ALWAYS_INLINE void walk_one_stage(const mma_ctx *f, const walk_state *w,
                                  const uint q[M_TILES][KS_QK][4], mma_rows *st, int *tag) {
    const long count = w->k.count; /* the same in every work-item */
    staged_tile tile;
    if (PREFETCH) fetch_tile(f, w, 0, &tile);
    for (long n = 0; n < count; n++) {
        if (!PREFETCH) fetch_tile(f, w, n, &tile);
        barrier(CLK_LOCAL_MEM_FENCE); /* the last tile read */
        if (get_local_id(0) == 0) COUNT_TILE(f->tile_count);
        store_tile(&tile, &f->buf[0], ++*tag);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (PREFETCH && n + 1 < count) fetch_tile(f, w, n + 1, &tile);
        long k0;
        const int kind = key_walk_tile(f->P, f->tile_ptr, f->tile_idx, &w->k, n, &k0);
        compute_tile(f, w, &f->buf[0], *tag, kind, k0, q, st);
    }
}

/* The same in two buffers, one barrier a tile: tile n is computed from buffer n % 2 while tile
 * n + 1, loaded before, is stored into the other. */
ALWAYS_INLINE void walk_two_stages(const mma_ctx *f, const walk_state *w,
                                   const uint q[M_TILES][KS_QK][4], mma_rows *st, int *tag) {
    const long count = w->k.count; /* the same in every work-item */
    const int first = *tag + 1;
    staged_tile tile;
    fetch_tile(f, w, 0, &tile);
    barrier(CLK_LOCAL_MEM_FENCE); /* the walk before read its buffers */
    store_tile(&tile, &f->buf[0], first);
    for (long n = 0; n < count; n++) {
        barrier(CLK_LOCAL_MEM_FENCE); /* tile n stored; tile n - 1 read */
        if (get_local_id(0) == 0) COUNT_TILE(f->tile_count);
        if (n + 1 < count) fetch_tile(f, w, n + 1, &tile);
        long k0;
        const int kind = key_walk_tile(f->P, f->tile_ptr, f->tile_idx, &w->k, n, &k0);
        const tile_buffer *buf = &f->buf[n & 1];
        compute_tile(f, w, buf, first + (int)n, kind, k0, q, st);
        if (n + 1 < count) store_tile(&tile, &f->buf[(n + 1) & 1], first + (int)n + 1);
    }
    *tag += (int)count;
}

/* Sets up walk n of the work-group, with each row's class-local key range. @return 0 when it
 * has no tile. */
ALWAYS_INLINE int walk_at(const mma_ctx *f, const mma_rows *st, long n, walk_state *w) {
    __constant attn_params *P = f->P;
    key_walk_begin(P, f->row_list, f->tile_ptr, f->gpos, f->tile, f->h, n, &w->k);
    w->classes = w->k.pass == PASS_GLOBAL_KEYS ? 1 : P->classes;
    UNROLL for (int r = 0; r < ROWS; r++)
        walk_row_range(P, &w->k, st->i[r], &w->lo[r], &w->hi[r]);
    return w->k.count > 0;
}

/* ---------------------------------------------------------------- the kernel */

/* O and LSE of the lane's rows: the quad's lane t stores columns 8n + 2t, +1; lane 0 the LSE.
 * An empty row gets O = 0, LSE = -inf. */
ALWAYS_INLINE void store_rows(const mma_ctx *f, const mma_rows *st,
                              __global const uchar *is_global, __global void *O,
                              __global float *LSE) {
    __constant attn_params *P = f->P;
    UNROLL for (int r = 0; r < ROWS; r++) {
        const int i = st->i[r], mt = r / 2, e0 = 2 * (r % 2);
        if (i < 0 || row_left_to_global_pass(P, is_global, i)) continue;
        const float keep = row_finish(P, LSE, f->h, (f->b * P->heads_q + f->h) * P->len_q + i,
                                      st->m[r], st->l[r], f->t == 0);
        const long row = o_row_start(P, f->b, f->h, i);
        UNROLL for (int n = 0; n < NV; n++)
            UNROLL for (int e = e0; e < e0 + 2; e++) {
                const int col = COL(n, e);
                if (col < P->dim_v) store_o(P->out_dtype, st->o[mt][n][e] * keep, O, row + col);
            }
    }
}

ALWAYS_INLINE void init_rows(const mma_ctx *f, __global const float *bias,
                             __local const int *rows, mma_rows *st) {
    UNROLL for (int r = 0; r < ROWS; r++) {
        st->i[r] = rows[group_row(f, r)];
        st->bias_row[r] = bias_row_start(f->P, bias, f->b, f->h, st->i[r]);
        st->m[r] = -INFINITY;
        st->l[r] = 0.0f;
    }
    UNROLL for (int mt = 0; mt < M_TILES; mt++) UNROLL for (int n = 0; n < NV; n++)
        UNROLL for (int e = 0; e < 4; e++) st->o[mt][n][e] = 0.0f;
}

/* Work-group (tile, b*Hq + h) of GROUP_SIZE work-items. */
__kernel __attribute__((reqd_work_group_size(GROUP_SIZE, 1, 1))) void
attention_nv_mma(__constant attn_params *P, __global const IN_T *Q, __global const IN_T *K,
                 __global const IN_T *V, __global void *O, __global float *LSE,
                 __global const float *bias, __global const int *gpos,
                 __global const uchar *is_global, __global const uchar *layout,
                 __global const int *tile_ptr, __global const int *tile_idx,
                 __global const int *row_list, float scale TILE_COUNTER_ARG) {
    __local uint k_words[STAGES][BLOCK_N * K_STRIDE];
    __local uint v_words[STAGES][DV_PAD * V_STRIDE];
    __local ushort p_tile[BLOCK_M * P_COLS];
#if MMA_PTX
    __local float scratch[1];
#else
    __local float scratch[WARPS * WARP_SCRATCH];
#endif
    __local int rows[BLOCK_M];
    __local int bad_tags[STAGES];
    const long tile = get_group_id(0), bh = get_group_id(1);
    if (tile_row(P, row_list, tile, 0) < 0) return; /* the whole group: a class's spare tile */
    mma_ctx f;
    f.P = P;
    f.tile = tile;
    f.b = div_rem(bh, P->heads_q, &f.h);
    f.warp = (int)get_local_id(0) / 32;
    f.g = (int)get_local_id(0) % 32 / 4;
    f.t = (int)get_local_id(0) % 4;
    const long kvh = f.h / (P->heads_q / P->heads_kv);
    f.k = (__global const ushort *)K + P->k_offset + f.b * P->k_stride_b + kvh * P->k_stride_h;
    f.v = (__global const ushort *)V + P->v_offset + f.b * P->v_stride_b + kvh * P->v_stride_h;
    f.q = (__global const ushort *)Q + P->q_offset + f.b * P->q_stride_b + f.h * P->q_stride_h;
    f.scale = scale;
    f.gpos = gpos, f.tile_ptr = tile_ptr, f.tile_idx = tile_idx, f.row_list = row_list;
    f.layout = layout;
    UNROLL for (int b = 0; b < STAGES; b++) {
        f.buf[b].k_words = k_words[b], f.buf[b].v_words = v_words[b];
        f.buf[b].bad_tag = bad_tags + b;
    }
    f.p_tile = p_tile;
    f.scratch = scratch + (MMA_PTX ? 0 : f.warp * WARP_SCRATCH);
    TILE_COUNTER_INIT(f.tile_count);
    for (int m = get_local_id(0); m < BLOCK_M; m += GROUP_SIZE)
        rows[m] = (int)tile_row(P, row_list, tile, m);
    if (get_local_id(0) < STAGES) bad_tags[get_local_id(0)] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    mma_rows st;
    init_rows(&f, bias, rows, &st);
    uint q[M_TILES][KS_QK][4];
    load_q(&f, &st, q);
    int tag = 0; /* tiles walked so far */
    for (long n = 0; n < key_walks(P); n++) { /* one call site, so the walk is compiled once */
        walk_state w;
        if (!walk_at(&f, &st, n, &w)) continue;
        if (STAGES == 2)
            walk_two_stages(&f, &w, q, &st, &tag);
        else
            walk_one_stage(&f, &w, q, &st, &tag);
    }
    store_rows(&f, &st, is_global, O, LSE);
}
