/*
 * Shared by every attention kernel program: storage type macros and the per-pair masks of
 * SPEC section 2 over the parameter block (the rules themselves are mask_rules.h's, the same
 * file the host uses). The runtime builds it ahead of each kernel file.
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
#define OUT_T                        half
#define STORE_OUT(value, ptr, index) vstore_half((value), (index), (ptr))
#else
#define OUT_T                        float
#define STORE_OUT(value, ptr, index) ((ptr)[(index)] = (value))
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
 * The parameter block attn_params comes from "attn_params.cl", generated at build time from the
 * one list of its fields (runtime/plan/params.h), and the mask rules from "mask_rules.h"
 * (runtime/plan/mask_rules.h), both built ahead of this file.
 * Positions: query i sits at key position p = i + offset (offset = len_k - len_q).
 * Classes: keys of class r are j = r + m*classes (m = 0, 1, ...); a query at p belongs to
 * class p mod classes. With classes = dilation (the planner's choice while a class holds at
 * least a key tile) a query only meets its own class inside the window; with classes = 1 and
 * dilation > 1 the window pass tests (p - j) mod dilation pair by pair.
 */

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

/* Scores are float32 (README, Semantics): scale * q.k is an infinity only when that product
 * itself is beyond float32. A kernel's float32 sum of products (and a q pre-scaled by scale)
 * can overflow on the way even so; such a score is summed again with each operand scaled by
 * 2^-RESCORE_SHIFT (no product or partial sum of FLT_MAX-sized values then overflows), and
 * rescored() puts scale and 2^(2*RESCORE_SHIFT) back at once: scale's mantissa first, then
 * its exponent with ldexp, which is exact up to the final overflow or underflow. */
#define RESCORE_SHIFT 70
#define RESCORE_DOWN  0x1.0p-70f

inline float rescored(float scaled_dot, float scale) {
    int e = 0;
    const float m = frexp(scale, &e);
    return ldexp(m * scaled_dot, e + 2 * RESCORE_SHIFT);
}

/* Integer division with its remainder. */
inline long div_rem(long a, long b, long *rem) {
    long q = a / b;
    *rem = a - q * b;
    return q;
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
    return mask_window_ok(p, j, P->left, P->right, P->dilation);
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

/* SPEC section 2 (mask_rules.h): causal_ok AND layout_ok AND (window_ok OR j in G OR p in G) */
inline int mask_allowed(__constant attn_params *P, __global const uchar *is_global,
                        __global const uchar *layout, long head, long i, long j) {
    long p = i + P->offset;
    return mask_combine(mask_causal_ok(P->causal, p, j), layout_ok(P, layout, head, i, j),
                        window_ok(P, p, j), is_global_position(P, is_global, j),
                        is_global_position(P, is_global, p));
}
