/*
 * Shared by every kernel program: storage type macros, the parameter block of an attention
 * call, and the masking rules of SPEC section 2 (the same rules as runtime/mask.h, which is
 * their reference). The runtime prepends this file to each kernel file it builds.
 *
 * Storage: IN_F16 / OUT_F16 select float16 storage (read and written with vload_half and
 * vstore_half, which need no cl_khr_fp16); all arithmetic is float32.
 */
#ifndef IN_F16
#define IN_F16 0
#endif
#ifndef OUT_F16
#define OUT_F16 0
#endif

#if IN_F16
#define IN_T                  half
#define LOAD_IN(ptr, index)   vload_half((index), (ptr))
#define LOAD16_IN(ptr, index) vload_half16(0, (ptr) + (index)) /* 16 values from index on */
#else
#define IN_T                  float
#define LOAD_IN(ptr, index)   ((ptr)[(index)])
#define LOAD16_IN(ptr, index) vload16(0, (ptr) + (index))
#endif

#if OUT_F16
#define OUT_T                          half
#define STORE_OUT(value, ptr, index)   vstore_half((value), (index), (ptr))
#define STORE16_OUT(value, ptr, index) vstore_half16((value), 0, (ptr) + (index))
#else
#define OUT_T                          float
#define STORE_OUT(value, ptr, index)   ((ptr)[(index)] = (value))
#define STORE16_OUT(value, ptr, index) vstore16((value), 0, (ptr) + (index))
#endif

/* For helpers of hot loops: some compilers (PoCL's) do not inline them on their own, and a
 * tile passed by pointer to a call lives in memory instead of registers. `static` (OpenCL C
 * 1.2) keeps LLVM from also emitting an external copy, which measurably slows PoCL's code. */
#if defined(__OPENCL_C_VERSION__) && __OPENCL_C_VERSION__ >= 120
#define ALWAYS_INLINE static inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline __attribute__((always_inline))
#endif

/*
 * One attention call, as the runtime fills it (runtime/fused_params.h mirrors it field by
 * field: every field is a 64-bit integer so both sides agree on the layout).
 * Positions: query i sits at key position p = i + offset (offset = len_k - len_q).
 * Classes: keys of class r are j = r + m*classes (m = 0, 1, ...); a query at p belongs to
 * class p mod classes. With classes = dilation (the planner's choice while a class holds at
 * least a key tile) a query only meets its own class inside the window; with classes = 1 and
 * dilation > 1 the window pass tests (p - j) mod dilation pair by pair.
 */
typedef struct attn_params {
    long batch, heads_q, heads_kv, len_q, len_k, dim_qk, dim_v, offset;
    long q_offset, q_stride_b, q_stride_h, q_stride_s;
    long k_offset, k_stride_b, k_stride_h, k_stride_s;
    long v_offset, v_stride_b, v_stride_h, v_stride_s;
    long o_offset, o_stride_b, o_stride_h, o_stride_s;
    long bias_offset, bias_stride_b, bias_stride_h, bias_stride_s, has_bias;
    long causal, left, right, dilation;
    long has_global, num_global; /* global keys: positions in gpos[], flags in is_global[] */
    long has_layout, layout_per_head, block_q, block_k, blocks_q, blocks_k;
    long class_slots;     /* packed key slots per class (a multiple of BLOCK_N) */
    long classes;         /* dilation, or 1 when classes would be shorter than a key tile */
    long global_slots;    /* packed slots of the global keys (a multiple of BLOCK_N) */
    long tiles_per_class; /* query tiles per class */
    long row_mode;        /* 0: query tiles of a class; 1: the rows listed in row_list */
    long num_listed_rows;
    long use_tile_list; /* key tiles from tile_ptr/tile_idx instead of the window range */
    long write_lse;
} attn_params;

/* a + b and a * b where a finite result never overflows to an infinity: it saturates at
 * +-FLT_MAX. Only -inf masks (SPEC section 1), so a finite score or bias must stay finite
 * (a padding bias of -FLT_MAX plus a negative score would otherwise round to -inf). */
inline float add_saturating(float a, float b) {
    const float x = a + b;
    return isinf(x) && isfinite(a) && isfinite(b) ? copysign(FLT_MAX, x) : x;
}

inline float mul_saturating(float a, float b) {
    const float x = a * b;
    return isinf(x) && isfinite(a) && isfinite(b) ? copysign(FLT_MAX, x) : x;
}

/* Integer division with its remainder. */
inline long div_rem(long a, long b, long *rem) {
    long q = a / b;
    *rem = a - q * b;
    return q;
}

inline long floor_div(long a, long b) {
    long r, q = div_rem(a, b, &r);
    return (r != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

inline long positive_mod(long a, long b) {
    long r;
    div_rem(a, b, &r);
    return r < 0 ? r + b : r;
}

/* Keys of class r: j = r + m*classes for m in [0, class_keys). */
inline long class_keys(__constant attn_params *P, long r) {
    return r < P->len_k ? (P->len_k - 1 - r) / P->classes + 1 : 0;
}

inline int window_ok(__constant attn_params *P, long p, long j) {
    if (P->left >= 0 && j < p - P->left) return 0;
    if (P->right >= 0 && j > p + P->right) return 0;
    return (p - j) % P->dilation == 0;
}

inline int is_global_position(__constant attn_params *P, __global const uchar *is_global, long x) {
    return P->has_global && x >= 0 && x < P->len_k && is_global[x];
}

/* layout_head: the query head (ignored when one layout serves every head). */
inline int layout_ok(__constant attn_params *P, __global const uchar *layout, long layout_head,
                     long i, long j) {
    if (!P->has_layout) return 1;
    long h = P->layout_per_head ? layout_head : 0;
    return layout[(h * P->blocks_q + i / P->block_q) * P->blocks_k + j / P->block_k] != 0;
}

/* SPEC section 2: allowed = causal_ok AND layout_ok AND (window_ok OR j in G OR p in G) */
inline int mask_allowed(__constant attn_params *P, __global const uchar *is_global,
                        __global const uchar *layout, long head, long i, long j) {
    long p = i + P->offset;
    if (P->causal && j > p) return 0;
    if (!layout_ok(P, layout, head, i, j)) return 0;
    return window_ok(P, p, j) || is_global_position(P, is_global, j) ||
           is_global_position(P, is_global, p);
}
