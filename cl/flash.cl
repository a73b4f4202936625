/*
 * Attention shaped like FlashAttention-2, in portable OpenCL C (the `flash` variant).
 *
 * Work partition: work-group (tile, b*Hq + h) owns a query tile of BLOCK_M rows (the rows of
 * tile_walk.cl's tile_row: a dilation class's rows, or the listed global rows) and walks the
 * key tiles of tile_walk.cl's walk, BLOCK_N keys at a time, with an online softmax. Its
 * TEAMS x TEAM work-items (flash_team.cl: local id = team * TEAM + lane) each own a register
 * micro-tile:
 *   scores s[TILE_M][TILE_N]:        rows team*TILE_M + r, keys lane + c*TEAM of the key tile
 *   output o[TILE_M][DV_PAD / TEAM]: the same rows, columns lane + e*TEAM
 * so a row's scores are spread over one team (its maxima and sums reduced in flash_team.cl),
 * and adjacent lanes read adjacent words of every local tile.
 *
 * Local memory (the planner fits it to the device: runtime/kernels/flash.c):
 *   q_tile  [BLOCK_M][QK_COLS]          float32, pre-scaled by `scale`
 *   k_tiles [STAGES][QK_COLS][BLOCK_N]  storage width, transposed (a key per column)
 *   v_tiles [STAGES][BLOCK_N][V_COLS]   storage width
 *   p_tile  [BLOCK_M][BLOCK_N]          float32 probabilities, read back by the row's team
 *   scratch [BLOCK_M][TEAM]             float32, the reductions without subgroups
 * K and V are read from the caller's tensors at their storage width (no packing pass), kept so
 * in local memory and widened to float32 in registers. With STAGES=2 the next key tile is
 * loaded into the other buffer while the current one is multiplied by V, so a tile costs two
 * barriers (three without subgroups) instead of three (four).
 *
 * Head dims past 256 (up to DeepSeek's 576/512) stream the head dimension: with D_CHUNK > 0
 * the local tiles hold D_CHUNK columns (QK_COLS = V_COLS = D_CHUNK, STAGES = 1), Q K^T is summed
 * over DQK_PAD / D_CHUNK pieces of Q and K staged one after another, and P V over DV_PAD /
 * D_CHUNK pieces of V, each lane adding to its own columns of the piece. Local memory then
 * does not grow with the head dims (a 32 KiB device takes them); only the lanes' registers
 * of O do. Without D_CHUNK, Q is staged once and a tile's K and V whole.
 *
 * Masks: the walk's tile kinds (tile_walk.cl): TILE_FULL tiles take no per-pair test,
 * TILE_BOUNDED tiles a per-row class-local range, TILE_GENERAL tiles the contract's rule pair by
 * pair; a bias is added (saturating) where a pair is not masked. A V tile holding a NaN or an
 * infinity is flagged while it is loaded, and then zero probabilities add nothing (instead of 0 *
 * NaN).
 *
 * Values near FLT_MAX (docs/semantics.md section 9): a score that came out non-finite from the
 * pre-scaled q is summed again without overflow on the way (common.cl, rescored), and O stays
 * normalised (the weighted mean of the V rows seen): every lane reads its rows' whole P row from
 * the P tile, so each lane holds the row's full sum and no sum is reduced over the team.
 *
 * Index arithmetic in the loops is 32-bit: local offsets, and global offsets within a tile (the
 * planner checks that a tile's span fits in 31 bits); 64-bit only for the base of a tensor, a
 * row or a tile. Built after common.cl, tile_walk.cl and flash_team.cl.
 */
#ifndef VEC
#define VEC 4 /* elements a work-item copies from global memory at once */
#endif
#ifndef STAGES
#define STAGES 2 /* key tiles in local memory: 2 = double buffering */
#endif
#ifndef D_CHUNK
#define D_CHUNK 0 /* head-dim columns a local tile holds; 0: the whole head */
#endif
#if D_CHUNK
#define QK_COLS D_CHUNK
#define V_COLS  D_CHUNK
#else
#define QK_COLS DQK_PAD
#define V_COLS  DV_PAD
#endif
#define DV_COLS (DV_PAD / TEAM) /* O columns a lane owns */

#define CAT_(a, b) a##b
#define CAT(a, b)  CAT_(a, b)

/* K and V as raw bits in local memory (common.cl's KV_T: KV_DTYPE, here always IN_DTYPE), and
 * their widening to float32 in registers. q8_0 is the split variant's: flash.c refuses it. */
#if KV_DTYPE == DTYPE_F16
#define WIDEN(tile, index) vload_half((index), (__local const half *)(tile))
#define RAW_FINITE(x)      (((x) & 0x7c00u) != 0x7c00u)
#elif KV_DTYPE == DTYPE_BF16
#define WIDEN(tile, index) as_float((uint)(tile)[(index)] << 16)
#define RAW_FINITE(x)      (((x) & 0x7f80u) != 0x7f80u)
#elif KV_DTYPE == DTYPE_F32
#define WIDEN(tile, index) ((tile)[(index)])
#define RAW_FINITE(x)      isfinite(x)
#else
#error "flash reads float32, float16 or bfloat16 K and V"
#endif

#if defined(REQD_SUBGROUP_SIZE) && defined(cl_intel_required_subgroup_size)
#define SUBGROUP_SIZE_ATTRIBUTE __attribute__((intel_reqd_sub_group_size(REQD_SUBGROUP_SIZE)))
#else
#define SUBGROUP_SIZE_ATTRIBUTE
#endif

/* What every step of a work-group reads: the call, its (b, h), the tensors and local tiles. */
typedef struct flash_ctx {
    __constant attn_params *P;
    long tile, b, h;
    int team, lane, by_subgroups;
    __global const KV_T *k, *v; /* the (b, kv head) of K and V */
    __global const IN_T *q;     /* the (b, h) of Q, unscaled (rescore) */
    float q_scale;
    __global const int *gpos, *tile_ptr, *tile_idx, *row_list;
    __global const uchar *layout;
    __local const int *rows; /* the tile's query rows [BLOCK_M], -1 past the end */
    __local float *q_tile, *p_tile, *scratch;
    __local KV_T *k_tiles, *v_tiles;
    __local int *bad; /* [2]: the V tile of even / odd walk steps holds a NaN or an infinity */
    __global uint *tile_count;
} flash_ctx;

/* One work-item's rows and their online softmax. */
typedef struct flash_rows {
    int i[TILE_M];                          /* query rows, -1 past the end */
    __global const float *bias_row[TILE_M]; /* their bias rows (row 0 for -1) */
    float m[TILE_M];                        /* running maximum over the team's keys */
    float l[TILE_M];                        /* sum exp(s - m) over the row's keys so far */
    float alpha[TILE_M];                    /* exp(old m - new m) of the current tile */
    float o[TILE_M][DV_COLS];               /* O so far, normalised: columns lane + e*TEAM */
} flash_rows;

/* One walk over key tiles (tile_walk.cl's key_walk): a class of a pass, or the global keys. */
typedef struct walk_state {
    key_walk k;
    long classes;               /* class k.r of `classes` (1 for global keys) */
    int lo[TILE_M], hi[TILE_M]; /* per row, the class-local keys it may see (TILE_BOUNDED) */
} walk_state;

/* ---------------------------------------------------------------- loading tiles */

/* VEC raw values of a row from element d on, zero from `dim` on (dim 0: no key). */
ALWAYS_INLINE void load_raw(__global const KV_T *row, int d, int dim, KV_T *out) {
#if VEC > 1
    if (d + VEC <= dim) {
        CAT(vstore, VEC)(CAT(vload, VEC)(0, row + d), 0, out);
        return;
    }
#endif
    for (int e = 0; e < VEC; e++) out[e] = d + e < dim ? row[d + e] : (KV_T)0;
}

/* Row c of key tile k0 in a (b, kv head) slice `base` with sequence stride `stride`: class
 * tiles at tile + c * step (32-bit within the tile), global keys gathered through gpos. */
ALWAYS_INLINE __global const KV_T *key_row(const flash_ctx *f, const walk_state *w,
                                           __global const KV_T *base, __global const KV_T *tile,
                                           long stride, int step, long k0, int c) {
    if (w->k.pass == PASS_GLOBAL_KEYS) return base + (long)f->gpos[k0 + c] * stride;
    return tile + c * step;
}

/* Key tile k0's first row in the slice `base`, and the step from row to row (32-bit). */
ALWAYS_INLINE __global const KV_T *key_tile_start(const walk_state *w, __global const KV_T *base,
                                                  long stride, long k0, int *step) {
    const long first_key = w->k.pass == PASS_GLOBAL_KEYS ? 0 : w->k.r + k0 * w->classes;
    *step = (int)(w->classes * stride);
    return base + first_key * stride;
}

/* Columns [d0, d0 + QK_COLS) of key tile k0 into buffer `buf`, as K^T [QK_COLS][BLOCK_N], raw,
 * zero where the slot holds no key or the column is past dim_qk. */
ALWAYS_INLINE void stage_keys(const flash_ctx *f, const walk_state *w, long k0, int buf, int d0) {
    __constant attn_params *P = f->P;
    int step;
    __global const KV_T *tile = key_tile_start(w, f->k, P->k_stride_s, k0, &step);
    __local KV_T *kt = f->k_tiles + buf * (QK_COLS * BLOCK_N);
    for (int at = get_local_id(0); at < BLOCK_N * (QK_COLS / VEC); at += GROUP_SIZE) {
        const int c = at / (QK_COLS / VEC), d = at % (QK_COLS / VEC) * VEC;
        const int present = k0 + c < w->k.keys;
        KV_T x[VEC];
        load_raw(present ? key_row(f, w, f->k, tile, P->k_stride_s, step, k0, c) : tile, d0 + d,
                 present ? (int)P->dim_qk : 0, x);
        for (int e = 0; e < VEC; e++) kt[(d + e) * BLOCK_N + c] = x[e];
    }
}

/* Columns [d0, d0 + V_COLS) of key tile k0's V rows into buffer `buf`, as [BLOCK_N][V_COLS],
 * raw, zero where the slot holds no key; sets bad[flag] when they hold a NaN or an inf. */
ALWAYS_INLINE void stage_values(const flash_ctx *f, const walk_state *w, long k0, int buf,
                                int flag, int d0) {
    __constant attn_params *P = f->P;
    int step, bad = 0;
    __global const KV_T *tile = key_tile_start(w, f->v, P->v_stride_s, k0, &step);
    __local KV_T *vt = f->v_tiles + buf * (BLOCK_N * V_COLS);
    for (int at = get_local_id(0); at < BLOCK_N * (V_COLS / VEC); at += GROUP_SIZE) {
        const int c = at / (V_COLS / VEC), d = at % (V_COLS / VEC) * VEC;
        const int present = k0 + c < w->k.keys;
        KV_T x[VEC];
        load_raw(present ? key_row(f, w, f->v, tile, P->v_stride_s, step, k0, c) : tile, d0 + d,
                 present ? (int)P->dim_v : 0, x);
        for (int e = 0; e < VEC; e++) {
            bad |= !RAW_FINITE(x[e]);
            vt[c * V_COLS + d + e] = x[e];
        }
    }
    if (bad) atomic_or(f->bad + flag, 1);
}

/* The tile's query rows into rows[BLOCK_M] (f->rows). */
ALWAYS_INLINE void stage_rows(const flash_ctx *f, __local int *rows) {
    for (int m = get_local_id(0); m < BLOCK_M; m += GROUP_SIZE)
        rows[m] = (int)tile_row(f->P, f->row_list, f->tile, m);
}

/* Columns [d0, d0 + QK_COLS) of the tile's queries into q_tile [BLOCK_M][QK_COLS], pre-scaled,
 * zero past dim_qk and for rows past the end. */
ALWAYS_INLINE void stage_queries(const flash_ctx *f, int d0) {
    __constant attn_params *P = f->P;
    const int dqk = (int)P->dim_qk;
    for (int at = get_local_id(0); at < BLOCK_M * QK_COLS; at += GROUP_SIZE) {
        const int m = at / QK_COLS, d = d0 + at % QK_COLS, i = f->rows[m];
        float x = 0.0f;
        if (i >= 0 && d < dqk) x = LOAD_IN(f->q + (long)i * P->q_stride_s, d) * f->q_scale;
        f->q_tile[at] = x;
    }
}

/* ---------------------------------------------------------------- one key tile */

/* Score (row i, slot c of the lane) of key tile k0 again, without overflow on the way
 * (common.cl, rescored): one that came out non-finite from the pre-scaled q. Q and K are read
 * from global memory. NaN or an infinity in the inputs stays so. */
ALWAYS_INLINE float rescore(const flash_ctx *f, const walk_state *w, long k0, int i, int c) {
    __constant attn_params *P = f->P;
    const int slot = f->lane + c * TEAM;
    int step;
    __global const KV_T *tile = key_tile_start(w, f->k, P->k_stride_s, k0, &step);
    __global const KV_T *k = key_row(f, w, f->k, tile, P->k_stride_s, step, k0, slot);
    __global const IN_T *q = f->q + (long)i * P->q_stride_s;
    float2 dot = (float2)0.0f;
    for (int d = 0; d < (int)P->dim_qk; d++) dot = rescore_add(dot, LOAD_IN(q, d), LOAD_KV(k, d));
    return rescore_end(dot, f->q_scale);
}

/* s += Q K^T over the QK_COLS columns of the local tiles, for the work-item's micro-tile. */
ALWAYS_INLINE void add_scores(const flash_ctx *f, int buf, float s[TILE_M][TILE_N]) {
    __local const float *q = f->q_tile + f->team * TILE_M * QK_COLS;
    __local const KV_T *kt = f->k_tiles + buf * (QK_COLS * BLOCK_N) + f->lane;
    for (int d = 0; d < QK_COLS; d++) {
        float k[TILE_N];
        for (int c = 0; c < TILE_N; c++) k[c] = WIDEN(kt, d * BLOCK_N + c * TEAM);
        for (int r = 0; r < TILE_M; r++) {
            const float qd = q[r * QK_COLS + d];
            for (int c = 0; c < TILE_N; c++) s[r][c] = fma(qd, k[c], s[r][c]);
        }
    }
}

/* s = Q K^T for the work-item's micro-tile of key tile k0: from the staged tiles (buffer buf),
 * or with D_CHUNK piece by piece, each staged here between barriers. */
ALWAYS_INLINE void tile_scores(const flash_ctx *f, const walk_state *w, const flash_rows *st,
                               long k0, int buf, float s[TILE_M][TILE_N]) {
    for (int r = 0; r < TILE_M; r++)
        for (int c = 0; c < TILE_N; c++) s[r][c] = 0.0f;
#if D_CHUNK
    for (int d0 = 0; d0 < DQK_PAD; d0 += D_CHUNK) {
        stage_queries(f, d0);
        stage_keys(f, w, k0, 0, d0);
        barrier(CLK_LOCAL_MEM_FENCE); /* the pieces are staged */
        add_scores(f, 0, s);
        barrier(CLK_LOCAL_MEM_FENCE); /* and read */
    }
#else
    add_scores(f, buf, s);
#endif
    for (int c = 0; c < TILE_N; c++) {
        if (k0 + f->lane + c * TEAM >= w->k.keys) continue; /* no key: masked, never read */
        for (int r = 0; r < TILE_M; r++)
            if (!isfinite(s[r][c]) && st->i[r] >= 0) s[r][c] = rescore(f, w, k0, st->i[r], c);
    }
}

/* Scores in the natural domain: -inf where the walk does not own the pair (by the tile's kind)
 * or the slot holds no key; plus the bias where one is given (saturating: a finite bias never
 * masks). */
ALWAYS_INLINE void mask_scores(const flash_ctx *f, const walk_state *w, const flash_rows *st,
                               int kind, long k0, float s[TILE_M][TILE_N]) {
    __constant attn_params *P = f->P;
    const int modifies = P->has_bias || MODIFIES_SCORES(P);
    if (kind == TILE_FULL && !modifies) return;
    for (int c = 0; c < TILE_N; c++) {
        const int m = (int)k0 + f->lane + c * TEAM;
        const int j = kind == TILE_GENERAL || modifies ? walk_key_position(&w->k, w->classes,
                                                                           f->gpos, m)
                                                       : (int)NO_KEY;
        for (int r = 0; r < TILE_M; r++)
            s[r][c] = walk_masked_score(P, f->layout, &w->k, kind, f->b, f->h, max(st->i[r], 0),
                                        m, j, w->lo[r], w->hi[r], st->bias_row[r], s[r][c]);
    }
}

/* The online softmax over one tile: the rows' new maxima over the team, and P = exp(s - max)
 * into the P tile; the sums and O follow in accumulate_pv, once the P tile is complete. */
ALWAYS_INLINE void softmax_step(const flash_ctx *f, flash_rows *st, float s[TILE_M][TILE_N]) {
    float tile_max[TILE_M];
    for (int r = 0; r < TILE_M; r++) {
        float x = -INFINITY; /* fmax drops NaN scores, so no NaN enters the reduction */
        for (int c = 0; c < TILE_N; c++) x = fmax(x, s[r][c]);
        tile_max[r] = x;
    }
    team_max(tile_max, f->by_subgroups, f->scratch, f->team, f->lane);
    for (int r = 0; r < TILE_M; r++) {
        const float new_max = fmax(st->m[r], tile_max[r]);
        const float base = new_max == -INFINITY ? 0.0f : new_max; /* avoids -inf - -inf */
        const float alpha = exp2((st->m[r] - base) * M_LOG2E_F);
        __local float *p_row = f->p_tile + (f->team * TILE_M + r) * BLOCK_N + f->lane;
        for (int c = 0; c < TILE_N; c++) p_row[c * TEAM] = exp2((s[r][c] - base) * M_LOG2E_F);
        st->m[r] = new_max;
        st->alpha[r] = alpha;
    }
}

/* The rows' new sums (kept + the tile's sum of P, where kept is the old sum rescaled) into
 * st->l, their inverses into inv, and O rescaled to kept/sum: each lane sums its rows' whole P
 * row (the same values in the same order in every lane of a team). */
ALWAYS_INLINE void rescale_rows(const flash_ctx *f, flash_rows *st, float inv[TILE_M]) {
    __local const float *p = f->p_tile + f->team * TILE_M * BLOCK_N;
    for (int r = 0; r < TILE_M; r++) {
        float tile_sum = 0.0f;
        for (int c = 0; c < BLOCK_N; c++) tile_sum += p[r * BLOCK_N + c];
        const float kept = st->l[r] * st->alpha[r], sum = kept + tile_sum;
        inv[r] = sum == 0.0f ? 0.0f : 1.0f / sum; /* a NaN sum stays NaN */
        st->l[r] = sum;
        const float keep = kept_share(kept, sum);
        for (int e = 0; e < DV_COLS; e++) st->o[r][e] *= keep;
    }
}

/* O += (P/sum) V over the tile for the work-item's rows and its columns of the staged V piece
 * (buffer buf, columns d0 + lane + e*TEAM). O stays a weighted mean of V's rows, which never
 * exceeds their largest magnitude, where the unnormalised sum of p*V overflowed for V near
 * FLT_MAX. careful: the piece holds a NaN or an infinity, so zero probabilities are skipped
 * (0 * NaN would be NaN). */
ALWAYS_INLINE void add_pv(const flash_ctx *f, flash_rows *st, const float inv[TILE_M], int buf,
                          int d0, int careful) {
    __local const float *p = f->p_tile + f->team * TILE_M * BLOCK_N;
    __local const KV_T *vt = f->v_tiles + buf * (BLOCK_N * V_COLS) + f->lane;
    for (int c = 0; c < BLOCK_N; c++) {
        float pc[TILE_M];
        for (int r = 0; r < TILE_M; r++) pc[r] = p[r * BLOCK_N + c];
        for (int e = 0; e < V_COLS / TEAM; e++) {
            const float v = WIDEN(vt, c * V_COLS + e * TEAM);
            for (int r = 0; r < TILE_M; r++)
                st->o[r][d0 / TEAM + e] = careful && pc[r] == 0.0f
                                              ? st->o[r][d0 / TEAM + e]
                                              : fma(pc[r] * inv[r], v, st->o[r][d0 / TEAM + e]);
        }
    }
}

/* ---------------------------------------------------------------- walks */

#if D_CHUNK
/* Every tile of a walk, the head dimension in pieces (single buffered): each piece is staged,
 * then used, with a barrier after each. V piece u of the walk sets bad[u & 1], cleared during
 * piece u - 1 (whose readers are past a barrier by then). */
ALWAYS_INLINE void walk_tiles(const flash_ctx *f, const walk_state *w, flash_rows *st) {
    const int lid = get_local_id(0);
    if (w->k.count <= 0) return; /* the same in every work-item */
    if (lid == 0) f->bad[0] = f->bad[1] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    int u = 0;
    for (long n = 0; n < w->k.count; n++) {
        long k0;
        const int kind = key_walk_tile(f->P, f->tile_ptr, f->tile_idx, &w->k, n, &k0);
        if (lid == 0) COUNT_TILE(f->tile_count);
        float s[TILE_M][TILE_N], inv[TILE_M];
        tile_scores(f, w, st, k0, 0, s);
        mask_scores(f, w, st, kind, k0, s);
        softmax_step(f, st, s);
        barrier(CLK_LOCAL_MEM_FENCE); /* the P tile is complete */
        rescale_rows(f, st, inv);
        #pragma unroll /* constant indices into the lanes' O registers */
        for (int d0 = 0; d0 < DV_PAD; d0 += D_CHUNK, u++) {
            if (lid == 0) f->bad[(u + 1) & 1] = 0;
            stage_values(f, w, k0, 0, u & 1, d0);
            barrier(CLK_LOCAL_MEM_FENCE); /* the piece and its flag are staged */
            if (f->bad[u & 1])
                add_pv(f, st, inv, 0, d0, 1);
            else
                add_pv(f, st, inv, 0, d0, 0);
            barrier(CLK_LOCAL_MEM_FENCE); /* P and the piece read */
        }
    }
}
#else
/* Every tile of a walk. Buffers and V flags alternate with the step's parity; with STAGES=2
 * step n + 1 is staged between the P tile's barrier and P V of step n. */
ALWAYS_INLINE void walk_tiles(const flash_ctx *f, const walk_state *w, flash_rows *st) {
    const int lid = get_local_id(0);
    long k0 = 0, k0_next = 0;
    if (w->k.count <= 0) return; /* the same in every work-item */
    if (lid == 0) f->bad[0] = f->bad[1] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    const long count = w->k.count;
    int kind = key_walk_tile(f->P, f->tile_ptr, f->tile_idx, &w->k, 0, &k0);
    stage_keys(f, w, k0, 0, 0);
    stage_values(f, w, k0, 0, 0, 0);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (long n = 0; n < count; n++) {
        const int parity = (int)(n & 1), buf = STAGES == 2 ? parity : 0, more = n + 1 < count;
        const int next_kind =
            more ? key_walk_tile(f->P, f->tile_ptr, f->tile_idx, &w->k, n + 1, &k0_next)
                 : TILE_FULL;
        if (lid == 0) {
            f->bad[parity ^ 1] = 0; /* for step n + 1; last read by step n - 1 */
            COUNT_TILE(f->tile_count);
        }
        float s[TILE_M][TILE_N], inv[TILE_M];
        tile_scores(f, w, st, k0, buf, s);
        mask_scores(f, w, st, kind, k0, s);
        softmax_step(f, st, s);
        barrier(CLK_LOCAL_MEM_FENCE); /* the P tile is complete */
        if (STAGES == 2 && more) {
            stage_keys(f, w, k0_next, buf ^ 1, 0);
            stage_values(f, w, k0_next, buf ^ 1, parity ^ 1, 0);
        }
        rescale_rows(f, st, inv);
        if (f->bad[parity])
            add_pv(f, st, inv, buf, 0, 1);
        else
            add_pv(f, st, inv, buf, 0, 0);
        barrier(CLK_LOCAL_MEM_FENCE); /* P and this buffer read; the next one staged */
        if (STAGES == 1 && more) {
            stage_keys(f, w, k0_next, 0, 0);
            stage_values(f, w, k0_next, 0, parity ^ 1, 0);
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        kind = next_kind;
        k0 = k0_next;
    }
}
#endif

/* Sets up walk n of the work-group (tile_walk.cl's key_walk), with each row's class-local key
 * range. @return 0 when it has no tile. */
ALWAYS_INLINE int walk_at(const flash_ctx *f, const flash_rows *st, long n, walk_state *w) {
    __constant attn_params *P = f->P;
    key_walk_begin(P, f->row_list, f->tile_ptr, f->gpos, f->tile, f->h, n, &w->k);
    w->classes = w->k.pass == PASS_GLOBAL_KEYS ? 1 : P->classes;
    for (int m = 0; m < TILE_M; m++) walk_row_range(P, &w->k, st->i[m], &w->lo[m], &w->hi[m]);
    return w->k.count > 0;
}

/* ---------------------------------------------------------------- the kernel */

/* O = o (normalised already) and LSE = max + log(sum); an empty row gets O = 0, LSE = -inf. */
ALWAYS_INLINE void store_rows(const flash_ctx *f, const flash_rows *st,
                              __global const uchar *is_global, __global void *O,
                              __global float *LSE) {
    __constant attn_params *P = f->P;
    for (int r = 0; r < TILE_M; r++) {
        const int i = st->i[r];
        if (i < 0 || row_left_to_global_pass(P, is_global, i)) continue;
        const float keep = row_finish(P, LSE, f->h, (f->b * P->heads_q + f->h) * P->len_q + i,
                                      st->m[r], st->l[r], f->lane == 0);
        const long row = o_row_start(P, f->b, f->h, i);
        for (int e = 0; e < DV_COLS; e++) {
            const int col = f->lane + e * TEAM;
            if (col < P->dim_v) store_o(P->out_dtype, st->o[r][e] * keep, O, row + col);
        }
    }
}

/* The work-item's rows (from f->rows) with an empty softmax state. */
ALWAYS_INLINE void init_rows(const flash_ctx *f, __global const float *bias, flash_rows *st) {
    for (int r = 0; r < TILE_M; r++) {
        st->i[r] = f->rows[f->team * TILE_M + r];
        st->bias_row[r] = bias_row_start(f->P, bias, f->b, f->h, st->i[r]);
        st->m[r] = -INFINITY;
        st->l[r] = 0.0f;
        st->alpha[r] = 1.0f;
        for (int e = 0; e < DV_COLS; e++) st->o[r][e] = 0.0f;
    }
}

/* Work-group (tile, b*Hq + h) of GROUP_SIZE work-items. */
__kernel __attribute__((reqd_work_group_size(GROUP_SIZE, 1, 1))) SUBGROUP_SIZE_ATTRIBUTE void
attention_flash(__constant attn_params *P, __global const IN_T *Q, __global const IN_T *K,
                __global const IN_T *V, __global void *O, __global float *LSE,
                __global const float *bias, __global const int *gpos,
                __global const uchar *is_global, __global const uchar *layout,
                __global const int *tile_ptr, __global const int *tile_idx,
                __global const int *row_list, float q_scale TILE_COUNTER_ARG) {
    __local float q_tile[BLOCK_M * QK_COLS];
    __local KV_T k_tiles[STAGES * QK_COLS * BLOCK_N];
    __local KV_T v_tiles[STAGES * BLOCK_N * V_COLS];
    __local float p_tile[BLOCK_M * BLOCK_N];
    __local float scratch[BLOCK_M * TEAM];
    __local int rows[BLOCK_M];
    __local int flags[3]; /* V tiles with a NaN or an inf [2]; subgroups are the teams [1] */
    const long tile = get_group_id(0), bh = get_group_id(1);
    if (tile_row(P, row_list, tile, 0) < 0) return; /* the whole group: a class's spare tile */
    flash_ctx f;
    f.P = P;
    f.tile = tile;
    f.b = div_rem(bh, P->heads_q, &f.h);
    f.team = (int)get_local_id(0) / TEAM;
    f.lane = (int)get_local_id(0) % TEAM;
    const long kvh = f.h / (P->heads_q / P->heads_kv);
    f.k = (__global const KV_T *)K + P->k_offset + f.b * P->k_stride_b + kvh * P->k_stride_h;
    f.v = (__global const KV_T *)V + P->v_offset + f.b * P->v_stride_b + kvh * P->v_stride_h;
    f.q = Q + P->q_offset + f.b * P->q_stride_b + f.h * P->q_stride_h;
    f.q_scale = q_scale;
    f.gpos = gpos, f.tile_ptr = tile_ptr, f.tile_idx = tile_idx, f.row_list = row_list;
    f.layout = layout;
    f.q_tile = q_tile, f.p_tile = p_tile, f.scratch = scratch;
    f.k_tiles = k_tiles, f.v_tiles = v_tiles, f.bad = flags;
    TILE_COUNTER_INIT(f.tile_count);
    f.by_subgroups = subgroups_are_teams(flags + 2);
    f.rows = rows;
    stage_rows(&f, rows);
    barrier(CLK_LOCAL_MEM_FENCE);
#if !D_CHUNK
    stage_queries(&f, 0); /* once: the walks read it whole */
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
    flash_rows st;
    init_rows(&f, bias, &st);
    for (long n = 0; n < key_walks(P); n++) { /* one call site, so the walk is compiled once */
        walk_state w;
        if (walk_at(&f, &st, n, &w)) walk_tiles(&f, &w, &st);
    }
    store_rows(&f, &st, is_global, O, LSE);
}
