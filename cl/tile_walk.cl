/*
 * What the tiled fused variants (lanes.cl, rowwise.cl, flash.cl) share: which query rows a
 * tile owns, the key walks it takes, the key range each row may see, and the masks.
 *
 * A call runs up to three passes, which together cover the contract's allowed set, each pair once:
 *  - the window pass (row_mode 0): query tiles of one class (common.cl) against the key tiles of
 *    that class inside the window: pairs with causal AND layout AND window;
 *  - the global-key pass (inside row_mode 0): the same rows against the packed global keys:
 *    pairs with causal AND layout AND NOT window (the global keys outside the window);
 *  - the global-row pass (row_mode 1): the rows whose position is a global token, against every
 *    key: pairs with causal AND layout. The window pass does not store these rows.
 * Without global tokens (or when the window is unbounded and undilated, so that they change
 * nothing) only the window pass runs.
 *
 * Keys are read from packed buffers (pack.cl): K tiles [DQK_PAD][BLOCK_N] (transposed) and V
 * rows [DV_PAD], float32, zero-padded, grouped by class. With IN_PLACE (lanes.cl only) K and V
 * are the caller's own float32 rows of DQK_PAD and DV_PAD floats, read where they lie, and only
 * each class's last partial key tile is packed (Kt, Vt: [B*Hkv][classes][BLOCK_N][DQK_PAD or
 * DV_PAD]).
 */
#ifndef BLOCK_M
#define BLOCK_M 8
#endif
#ifndef BLOCK_N
#define BLOCK_N 32
#endif
#ifndef DQK_PAD
#define DQK_PAD 64
#endif
#ifndef DV_PAD
#define DV_PAD 64
#endif
#ifndef IN_PLACE
#define IN_PLACE 0
#endif

/* COUNT_TILES=1 (desc.count_tiles): the kernels count the key tiles they visit into one
 * global counter, an extra last argument (runtime/kernels/packed.c compares it with its plan). */
#ifndef COUNT_TILES
#define COUNT_TILES 0
#endif
#if COUNT_TILES
#define TILE_COUNTER_ARG           , __global uint *tile_count
#define TILE_COUNTER_INIT(counter) (counter) = tile_count
#define COUNT_TILE(counter)        atomic_inc(counter)
#else
#define TILE_COUNTER_ARG
#define TILE_COUNTER_INIT(counter) (counter) = 0
#define COUNT_TILE(counter)        ((void)0)
#endif

/* The arguments of both variants' kernels, in the order runtime/kernels/packed.c sets them. */
#define ATTENTION_KERNEL_ARGS                                                                      \
    __constant attn_params *P_window, __constant attn_params *P_rows, long row_tiles,              \
        __global const void *Q, __global const float *Kp, __global const float *Vp,                \
        __global const uchar *Vbad, __global const float *Kt, __global const float *Vt,            \
        __global const float *Kg, __global const float *Vg, __global const uchar *Vbad_g,          \
        __global const int *gpos, __global void *O, __global float *LSE,                          \
        __global const float *bias, __global const uchar *is_global, __global const uchar *layout, \
        __global const int *tile_ptr, __global const int *tile_idx, __global const int *row_list,  \
        float q_scale TILE_COUNTER_ARG

/* The key side of those arguments, gathered for the kernels' walks (kernel: `const packed_keys
 * keys = PACKED_KEYS;`). */
typedef struct packed_keys {
    __global const float *Kp, *Vp, *Kt, *Vt, *Kg, *Vg, *bias;
    __global const uchar *Vbad, *Vbad_g, *layout;
    __global const int *gpos, *tile_ptr, *tile_idx, *row_list;
} packed_keys;
#define PACKED_KEYS                                                                                \
    {Kp, Vp, Kt, Vt, Kg, Vg, bias, Vbad, Vbad_g, layout, gpos, tile_ptr, tile_idx, row_list}

/* One launch runs both passes: its first row_tiles work-groups are the global-row pass's (P_rows,
 * row_mode 1), the rest the window pass's (P_window). The few long walks of the global rows
 * then start first and the many short ones fill the cores around them, where a launch of their
 * own would leave all but B*Hq work-items' cores idle. The pass's parameters, and the
 * work-group's tile within it: */
#define PASS_PARAMS(P_window, P_rows, row_tiles)                                                   \
    ((long)get_group_id(0) < (row_tiles) ? (P_rows) : (P_window))
#define PASS_TILE(row_tiles)                                                                       \
    ((long)get_group_id(0) < (row_tiles) ? (long)get_group_id(0)                                   \
                                         : (long)get_group_id(0) - (row_tiles))

#define PASS_WINDOW      0
#define PASS_GLOBAL_KEYS 1
#define PASS_GLOBAL_ROWS 2

/* Tile kinds: every pair allowed; a per-row class-local range [lo, hi]; per-pair rules. */
#define TILE_FULL    0
#define TILE_BOUNDED 1
#define TILE_GENERAL 2

#define NO_KEY (-1L)

/* Element `index` of x, stored as `dtype` (float32, float16 or bfloat16), chosen at run time:
 * Q of the packed variants (P->q_dtype), whose tiles read their query rows once, and K and V in
 * the packing (P->kv_dtype), which reads each value once; one program serves every storage. */
ALWAYS_INLINE float load_as(int dtype, __global const void *x, long index) {
    if (dtype == DTYPE_F16) return vload_half(index, (__global const half *)x);
    if (dtype == DTYPE_BF16) return bf16_to_float(((__global const ushort *)x)[index]);
    return ((__global const float *)x)[index];
}

/* 16 values of a row of x (stored as `dtype`) from d0 on, zero past `dim` and where the row is
 * not `present`. */
ALWAYS_INLINE float16 load_row16_as(int dtype, __global const void *x, long row, long d0, long dim,
                                    int present) {
    if (!present || d0 >= dim) return (float16)0.0f;
    if (d0 + 16 <= dim && dtype == DTYPE_F16)
        return vload_half16(0, (__global const half *)x + row + d0);
    if (d0 + 16 <= dim && dtype == DTYPE_BF16)
        return bf16x16_to_float16(vload16(0, (__global const ushort *)x + row + d0));
    if (d0 + 16 <= dim) return vload16(0, (__global const float *)x + row + d0);
    float lanes[16];
    for (int e = 0; e < 16; e++) lanes[e] = d0 + e < dim ? load_as(dtype, x, row + d0 + e) : 0.0f;
    return vload16(0, lanes);
}

/* Row m of query tile `tile`: its index, or -1 past the end. row_mode 0: rows of one
 * class, the classes interleaved (tile = t * classes + class), so that the tiles of every
 * class over the same rows run close in time and share the K and V lines a dilated walk
 * brings in (a class's keys are every classes-th row: 5 and 14 % faster at dilation 2 and 4
 * than the classes one after another); row_mode 1: the rows listed in row_list. */
ALWAYS_INLINE long tile_row(__constant attn_params *P, __global const int *row_list, long tile,
                            long m) {
    if (GLOBALS_FEATURE(P, row_mode) == 1) {
        long at = tile * BLOCK_M + m;
        return at < P->num_listed_rows ? row_list[at] : -1;
    }
    long r, d = P->classes, t = div_rem(tile, d, &r);
    long i = positive_mod(r - P->offset, d) + (t * BLOCK_M + m) * d; /* class r's rows */
    return i < P->len_q ? i : -1;
}

/* tile_row without its divisions for every row: `first` is tile_first_row's. In row_mode 0 row
 * m is row 0 plus m * classes (one class's consecutive class-local indices). */
ALWAYS_INLINE long tile_first_row(__constant attn_params *P, long tile) {
    if (GLOBALS_FEATURE(P, row_mode) == 1) return 0;
    long r, d = P->classes, t = div_rem(tile, d, &r);
    return positive_mod(r - P->offset, d) + t * BLOCK_M * d;
}

ALWAYS_INLINE long tile_row_from(__constant attn_params *P, __global const int *row_list,
                                 long tile, long first, long m) {
    if (GLOBALS_FEATURE(P, row_mode) == 1) return tile_row(P, row_list, tile, m);
    const long i = first + m * P->classes;
    return i < P->len_q ? i : -1;
}

/* The class of a tile's rows (row_mode 0). */
ALWAYS_INLINE long tile_class(__constant attn_params *P, long tile) {
    return GLOBALS_FEATURE(P, row_mode) == 1 ? 0 : tile % P->classes;
}

/* The tile list's row of query tile `tile` (row_mode 0) of head h: the planner lists them
 * class by class, [heads of the layout][classes][tiles_per_class]. */
ALWAYS_INLINE long tile_list_row(__constant attn_params *P, long h, long tile) {
    const long r = tile % P->classes, t = tile / P->classes;
    return ((P->layout_per_head ? h : 0) * P->classes + r) * P->tiles_per_class + t;
}

/* The key ranges of class r that a pass's rows may see (mask_class_range, plan/mask.h), with
 * its divisions done once for a walk: the class's keys and the window's reach in class-local
 * keys (-1: unbounded, or not the window pass, which alone a window bounds). */
typedef struct class_reach {
    long r, classes, keys, left, right;
    int causal;
} class_reach;

ALWAYS_INLINE void class_reach_begin(__constant attn_params *P, int pass, long r, class_reach *c) {
    const int windowed = pass == PASS_WINDOW;
    c->r = r, c->classes = P->classes, c->keys = class_keys(P, r), c->causal = (int)P->causal;
    c->left = mask_reach(windowed, P->left, P->classes);
    c->right = mask_reach(windowed, P->right, P->classes);
}

/* The class-local index of position p, or the one below it (p is in another class). */
ALWAYS_INLINE long class_reach_own(const class_reach *c, long p) {
    return mask_floor_div(p - c->r, c->classes);
}

/* [lo, hi] of a row whose own class-local index is `own` (empty when lo > hi). */
ALWAYS_INLINE void class_reach_range(const class_reach *c, long own, long *lo, long *hi) {
    mask_reach_range(own, c->keys, c->left, c->right, c->causal, lo, hi);
}

/* Class-local key range [lo, hi] that a row at position p may see in class r (empty when
 * lo > hi). The window pass bounds it by the window and causality; the global-row pass only by
 * causality. */
ALWAYS_INLINE void row_key_range(__constant attn_params *P, int pass, long r, long p, long *lo,
                                 long *hi) {
    class_reach c;
    class_reach_begin(P, pass, r, &c);
    class_reach_range(&c, class_reach_own(&c, p), lo, hi);
}

/* The own class-local index of row m of a tile whose row 0 is i0 (>= 0) and has own0: in
 * row_mode 0 the rows are one class's consecutive indices, so row m's is own0 + m, whatever r. */
ALWAYS_INLINE long row_own(__constant attn_params *P, const class_reach *c, long own0, long i,
                           long m) {
    return GLOBALS_FEATURE(P, row_mode) == 0 ? own0 + m : class_reach_own(c, i + P->offset);
}

/* Over the rows of query tile `tile`, for class r: the key tiles [first, last] that hold any
 * key a row may see, and [full_lo, full_hi], the class-local keys every row sees (tiles inside
 * it need no mask). Returns 0 when no row sees any key. The same in every work-item. */
ALWAYS_INLINE int tile_key_span(__constant attn_params *P, __global const int *row_list, long tile,
                                int pass, long r, long *first, long *last, long *full_lo,
                                long *full_hi) {
    long lo_all = LONG_MAX, hi_all = -1;
    const long start = tile_first_row(P, tile), i0 = tile_row_from(P, row_list, tile, start, 0);
    class_reach c;
    class_reach_begin(P, pass, r, &c);
    const long own0 = i0 >= 0 ? class_reach_own(&c, i0 + P->offset) : 0;
    *full_lo = 0;
    *full_hi = LONG_MAX;
    for (int m = 0; m < BLOCK_M; m++) {
        const long i = tile_row_from(P, row_list, tile, start, m);
        long lo, hi;
        if (i < 0) continue;
        class_reach_range(&c, row_own(P, &c, own0, i, m), &lo, &hi);
        *full_lo = max(*full_lo, lo);
        *full_hi = min(*full_hi, hi);
        if (lo > hi) continue;
        lo_all = min(lo_all, lo);
        hi_all = max(hi_all, hi);
    }
    *first = lo_all / BLOCK_N;
    *last = hi_all < 0 ? -1 : hi_all / BLOCK_N;
    return hi_all >= lo_all;
}

/* The largest key position of the tile's rows (for stopping at causal limits). */
ALWAYS_INLINE long tile_last_position(__constant attn_params *P, __global const int *row_list,
                                      long tile) {
    const long start = tile_first_row(P, tile);
    long last = LONG_MIN;
    for (int m = 0; m < BLOCK_M; m++) {
        const long i = tile_row_from(P, row_list, tile, start, m);
        if (i >= 0) last = max(last, i + P->offset);
    }
    return last;
}

/* The key tiles a walk of class r takes: from the planner's list (window pass with a block
 * layout) or the range [first, last]. tile_walk_count says how many; tile_walk_at gives the
 * n-th one's first class index (*k0) and its kind. Listed entries are kt * 2 + needs_pairs
 * (the layout is not all ones over the tile, or a dilation inside it); unlisted tiles need
 * pairs with a layout or a dilation that the classes do not separate. */
ALWAYS_INLINE long tile_walk_count(__global const int *tile_ptr, long list_row, int listed,
                                   long first, long last) {
    return listed ? tile_ptr[list_row + 1] - tile_ptr[list_row] : last - first + 1;
}

ALWAYS_INLINE int tile_walk_at(__constant attn_params *P, __global const int *tile_ptr,
                               __global const int *tile_idx, long list_row, int listed, long first,
                               long n, long full_lo, long full_hi, long *k0) {
    const long entry = listed ? tile_idx[tile_ptr[list_row] + n] : first + n;
    const int needs_pairs =
        listed ? (int)(entry & 1) : FEATURE(P, has_layout) || P->classes != P->dilation;
    *k0 = (listed ? entry >> 1 : entry) * BLOCK_N;
    const int inside = *k0 >= full_lo && *k0 + BLOCK_N - 1 <= full_hi;
    return needs_pairs ? TILE_GENERAL : inside ? TILE_FULL : TILE_BOUNDED;
}

/* One run of key tiles that a query tile walks: a class of the window or global-row pass, or the
 * global keys. A query tile's walks, in order: row_mode 1, every class of the global-row pass;
 * row_mode 0, its own class of the window pass, then the global keys if there are any. A
 * kernel loops over key_walks() walks and each walk's tiles, so that its tile code is inlined
 * once: three copies of it took PoCL twice as long to compile (bench/README.md, "Build less"). */
typedef struct key_walk {
    int pass;
    long r;                       /* the class (0 for the global keys) */
    long keys;                    /* the keys it holds: class_keys, or the global keys */
    long count;                   /* how many tiles the walk takes */
    long first, full_lo, full_hi; /* a class's tile_key_span */
    long list_row;                /* a class's row of the planner's tile list */
    int listed;                   /* whether its tiles come from that list */
} key_walk;

ALWAYS_INLINE long key_walks(__constant attn_params *P) {
    const int row_mode = GLOBALS_FEATURE(P, row_mode) == 1;
    return row_mode ? P->classes : 1 + (GLOBALS_FEATURE(P, has_global) != 0);
}

/* Sets up walk n (0 <= n < key_walks(P)) of query tile `tile` of head h. */
ALWAYS_INLINE void key_walk_begin(__constant attn_params *P, __global const int *row_list,
                                  __global const int *tile_ptr, __global const int *gpos, long tile,
                                  long h, long n, key_walk *w) {
    /* the global keys, sorted: stop past every causal limit */
    if (GLOBALS_FEATURE(P, row_mode) == 0 && n == 1) {
        const long last_p = tile_last_position(P, row_list, tile);
        long count = 0;
        while (count * BLOCK_N < P->num_global && !(P->causal && gpos[count * BLOCK_N] > last_p))
            count++;
        *w = (key_walk){PASS_GLOBAL_KEYS, 0, P->num_global, count, 0, 0, -1, 0, 0};
        return;
    }
    const int pass = GLOBALS_FEATURE(P, row_mode) == 1 ? PASS_GLOBAL_ROWS : PASS_WINDOW;
    const long r = GLOBALS_FEATURE(P, row_mode) == 1 ? n : tile_class(P, tile);
    const long list_row = GLOBALS_FEATURE(P, row_mode) == 1 ? 0 : tile_list_row(P, h, tile);
    const int listed = FEATURE(P, use_tile_list) && pass == PASS_WINDOW;
    long first, last, full_lo, full_hi;
    const long count = tile_key_span(P, row_list, tile, pass, r, &first, &last, &full_lo, &full_hi)
                           ? tile_walk_count(tile_ptr, list_row, listed, first, last)
                           : 0;
    *w = (key_walk){pass, r, class_keys(P, r), count, first, full_lo, full_hi, list_row, listed};
}

/* Where walk w's packed keys (pack.cl) start for K/V head kv_bh (b * Hkv + kv_h): its K and V
 * rows (DQK_PAD and DV_PAD floats a slot) and V flags, at the first slot of class r or of the
 * head's global keys. */
ALWAYS_INLINE void key_walk_rows(__constant attn_params *P, const packed_keys *in,
                                 const key_walk *w, long kv_bh, __global const float **k,
                                 __global const float **v, __global const uchar **v_bad) {
    const int global_keys = w->pass == PASS_GLOBAL_KEYS;
    const long slot = global_keys ? kv_bh * P->global_slots
                                  : (kv_bh * P->classes + w->r) * P->class_slots;
    *k = (global_keys ? in->Kg : in->Kp) + slot * DQK_PAD;
    *v = (global_keys ? in->Vg : in->Vp) + slot * DV_PAD;
    *v_bad = (global_keys ? in->Vbad_g : in->Vbad) + slot;
}

/* Tile n of a walk: its first class (or global-list) index *k0, and its kind. */
ALWAYS_INLINE int key_walk_tile(__constant attn_params *P, __global const int *tile_ptr,
                                __global const int *tile_idx, const key_walk *w, long n, long *k0) {
    if (w->pass == PASS_GLOBAL_KEYS) {
        *k0 = n * BLOCK_N;
        return TILE_GENERAL;
    }
    return tile_walk_at(P, tile_ptr, tile_idx, w->list_row, w->listed, w->first, n, w->full_lo,
                        w->full_hi, k0);
}

/* Whether any key slot of a tile has a non-finite V row (pack.cl's flags). */
ALWAYS_INLINE int tile_has_bad_values(__global const uchar *vbad) {
    int bad = 0;
    for (int c = 0; c < BLOCK_N; c++) bad |= vbad[c];
    return bad;
}

/* Whether the pass owns pair (i, j): see the top of this file. */
ALWAYS_INLINE int pass_owns(__constant attn_params *P, __global const uchar *layout, int pass,
                            long head, long i, long j) {
    long p = i + P->offset;
    if (!mask_causal_ok(P->causal, p, j) || !layout_ok(P, layout, head, i, j)) return 0;
    if (pass == PASS_WINDOW) return window_ok(P, p, j);
    if (pass == PASS_GLOBAL_KEYS) return !window_ok(P, p, j);
    return 1;
}

/* Whether this row is stored by the global-row pass instead of this one. */
ALWAYS_INLINE int row_left_to_global_pass(__constant attn_params *P,
                                          __global const uchar *is_global, long i) {
    return GLOBALS_FEATURE(P, row_mode) == 0 && is_global_position(P, is_global, i + P->offset);
}

/* ---- one pair at a time, for the kernels whose work-items hold scattered pairs of a tile
 * (flash's micro-tiles, nv_mma's fragments): walk w's classes are `classes` (1 for its global
 * keys). */

/* The key position of walk index m (class-local, or into the global keys), or NO_KEY. */
ALWAYS_INLINE int walk_key_position(const key_walk *w, long classes, __global const int *gpos,
                                    int m) {
    if (m >= w->keys) return (int)NO_KEY;
    return w->pass == PASS_GLOBAL_KEYS ? gpos[m] : (int)w->r + m * (int)classes;
}

/* The class-local keys [*lo, *hi] query row i (-1: none) may see in walk w (empty: lo > hi);
 * for TILE_BOUNDED tiles. The global keys' walk tests pair by pair instead. */
ALWAYS_INLINE void walk_row_range(__constant attn_params *P, const key_walk *w, long i, int *lo,
                                  int *hi) {
    long first = 0, last = -1;
    if (i >= 0 && w->pass != PASS_GLOBAL_KEYS)
        row_key_range(P, w->pass, w->r, i + P->offset, &first, &last);
    *lo = (int)min(first, (long)INT_MAX); /* class-local: within [0, keys) when not empty */
    *hi = (int)max(last, -1L);
}

/* Score x of query row i (0 for a row past the end) and walk index m at key position j (from
 * walk_key_position when the tile's kind or the modifiers need it, else NO_KEY), in the
 * natural domain: -inf where the walk does not own the pair by the tile's kind (outside
 * [lo, hi] on a TILE_BOUNDED tile, by the contract's rule on a TILE_GENERAL one) or the slot
 * holds no key; else soft-capped and ALiBi's term added, then the row's bias added (saturating:
 * a finite bias never masks). */
ALWAYS_INLINE float walk_masked_score(__constant attn_params *P, __global const uchar *layout,
                                      const key_walk *w, int kind, long b, long h, long i, int m,
                                      int j, int lo, int hi, __global const float *bias_row,
                                      float x) {
    if (kind == TILE_BOUNDED && (m < lo || m > hi))
        x = -INFINITY;
    else if (kind == TILE_GENERAL && (j == NO_KEY || !pass_owns(P, layout, w->pass, h, i, j)))
        x = -INFINITY;
    if (j != NO_KEY && x != -INFINITY && MODIFIES_SCORES(P)) /* not onto a mask */
        x = modified_score(P, x, b, h, i + P->offset, j);
    if (P->has_bias && j != NO_KEY && x != -INFINITY) x = add_saturating(x, bias_row[j]);
    return x;
}

/* Where row i of head (b, h) starts in O. */
ALWAYS_INLINE long o_row_start(__constant attn_params *P, long b, long h, long i) {
    return P->o_offset + b * P->o_stride_b + h * P->o_stride_h + i * P->o_stride_s;
}

/* Row i's bias row (row 0 for i < 0). */
ALWAYS_INLINE __global const float *bias_row_start(__constant attn_params *P,
                                                   __global const float *bias, long b, long h,
                                                   long i) {
    return bias + P->bias_offset + b * P->bias_stride_b + h * P->bias_stride_h +
           max(i, 0L) * P->bias_stride_s;
}

/* A row's end, from its largest score m and sum l of exp(s - m) (O normalised by l): the
 * factor O is multiplied by (head h's sink folded in; 0 for a row that saw no key: O = 0), and
 * its LSE stored at `row` of LSE. A row of NaN scores has m = -inf but l NaN and stays NaN. */
ALWAYS_INLINE float row_finish(__constant attn_params *P, __global float *LSE, long h, long row,
                               float m, float l, int store_lse_here) {
    const int empty = m == -INFINITY && l == 0.0f;
    float top = m, sum = l;
    const float keep = sink_fold(P, h, &top, &sum);
    if (store_lse_here) store_lse(P, LSE, row, top, sum, top == -INFINITY && sum == 0.0f);
    return empty ? 0.0f : keep;
}

/* Key positions of a tile of `count` keys: class r (j = r + m*d) or the global list. */
ALWAYS_INLINE void tile_key_positions(__constant attn_params *P, __global const int *gpos, int pass,
                                      long r, long first, long *kpos) {
    for (int c = 0; c < BLOCK_N; c++) {
        long m = first + c;
        if (pass == PASS_GLOBAL_KEYS)
            kpos[c] = m < P->num_global ? gpos[m] : NO_KEY;
        else
            kpos[c] = m < class_keys(P, r) ? r + m * P->classes : NO_KEY;
    }
}

/* Scores of `rows` rows and the first `keys` keys of a tile (natural domain), score (m, c) at
 * s[m * row_stride + c * key_stride]: -inf where the pass does not own the pair or the slot is
 * padding; else soft-capped and ALiBi's term added (modified_score, when `modify`: a caller
 * may have done it already, on whole vectors), then the bias where one is given (saturating: a
 * finite bias never masks). */
ALWAYS_INLINE void mask_and_bias(__constant attn_params *P, __global const uchar *layout,
                                 __global const float *bias, int pass, int kind, long b, long h,
                                 const long *row_i, int rows, int keys, int row_stride,
                                 int key_stride, const long *kpos, int modify, float *s) {
    for (int m = 0; m < rows; m++) {
        long i = row_i[m] < 0 ? 0 : row_i[m];
        __global const float *bias_row = bias + P->bias_offset + b * P->bias_stride_b +
                                         h * P->bias_stride_h + i * P->bias_stride_s;
        for (int c = 0; c < keys; c++) {
            float x = s[m * row_stride + c * key_stride];
            if (kind == TILE_GENERAL &&
                (kpos[c] == NO_KEY || !pass_owns(P, layout, pass, h, i, kpos[c])))
                x = -INFINITY;
            else if (kpos[c] != NO_KEY && x != -INFINITY) { /* not onto a mask */
                if (modify && MODIFIES_SCORES(P))
                    x = modified_score(P, x, b, h, i + P->offset, kpos[c]);
                if (FEATURE(P, has_bias)) x = add_saturating(x, bias_row[kpos[c]]);
            }
            s[m * row_stride + c * key_stride] = x;
        }
    }
}
