/*
 * Shared by every attention kernel program: storage type macros and the per-pair masks of
 * docs/semantics.md section 2 over the parameter block (the rules themselves are mask_rules.h's,
 * the same file the host uses). The runtime builds it ahead of each kernel file.
 *
 * Storage: IN_DTYPE (Q, K, V) and OUT_DTYPE (O) are clattn_dtype values: float32, float16
 * (read and written with vload_half and vstore_half, which need no cl_khr_fp16) or bfloat16
 * (the upper half of a float32's bits, widened by a shift, narrowed rounding to nearest even).
 * KV_DTYPE, when K and V are stored apart from Q, may also be q8_0 or q4_0. All arithmetic is
 * float32.
 */
#define DTYPE_F32  0
#define DTYPE_F16  1
#define DTYPE_BF16 2
#define DTYPE_Q8_0 3 /* K and V only: blocks of a float16 scale and 32 int8 (34 bytes) */
#define DTYPE_Q4_0 4 /* K and V only: blocks of a float16 scale and 32 4-bit codes (18 bytes) */
#ifndef IN_DTYPE
#define IN_DTYPE DTYPE_F32
#endif
#ifndef OUT_DTYPE
#define OUT_DTYPE DTYPE_F32
#endif

/* A plain program (-DPLAIN_CALL=1, runtime/plan/params.h's params_plain) serves only calls
 * whose feature fields are all zero: float32 Q, K, V and O, no bias, no block layout or global
 * tokens (so no tile list and no listed rows), one length for every sequence and no pages; but
 * lanes' program for global tokens has a plain build too (GLOBALS_FEATURE, below).
 * This file, tile_walk.cl and the packed variants read those fields through FEATURE, which is
 * then the constant 0, so the program holds none of their code: PoCL builds it in about 0.5 s
 * less (a cold first call: 1.9 s to 1.4 s). The other programs read the fields at run time.
 * The score modifiers and sinks (soft-capping, ALiBi, sinks) are read through MODIFIER, at run
 * time in every program: a call that has only them runs a plain program, which is 1 to 2 % faster
 * than the general one (bench/features.py), for a test a tile in the plain calls. */
#ifndef PLAIN_CALL
#define PLAIN_CALL 0
#endif
/* (a product, not PLAIN_CALL ? 0 : field: clang warns of a test on a constant expression) */
#define FEATURE(P, field)  ((P)->field * !PLAIN_CALL)
#define MODIFIER(P, field) ((P)->field)

/* GLOBAL_TOKENS=1: lanes' program for calls with global tokens (cl/lanes.cl), plain or general
 * like the others. Its global tokens' fields (has_global, row_mode, fold_rows) are read at run
 * time in both builds: a plain one then serves calls whose only feature is global tokens. */
#ifndef GLOBAL_TOKENS
#define GLOBAL_TOKENS 0
#endif
#define GLOBALS_FEATURE(P, field) ((P)->field * (!PLAIN_CALL || GLOBAL_TOKENS))

inline float bf16_to_float(ushort x) {
    return as_float((uint)x << 16);
}

inline float16 bf16x16_to_float16(ushort16 x) {
    return as_float16(convert_uint16(x) << 16);
}

/* Round to nearest even; NaN stays a (quiet) NaN of the same sign. */
inline ushort float_to_bf16(float x) {
    const uint bits = as_uint(x);
    if (isnan(x)) return (ushort)((bits >> 16) | 0x40u);
    return (ushort)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

#if IN_DTYPE == DTYPE_F16
#define IN_T                  half
#define LOAD_IN(ptr, index)   vload_half((index), (ptr))
#define LOAD16_IN(ptr, index) vload_half16(0, (ptr) + (index)) /* 16 values from index on */
#elif IN_DTYPE == DTYPE_BF16
#define IN_T                  ushort
#define LOAD_IN(ptr, index)   bf16_to_float((ptr)[(index)])
#define LOAD16_IN(ptr, index) bf16x16_to_float16(vload16(0, (ptr) + (index)))
#else
#define IN_T                  float
#define LOAD_IN(ptr, index)   ((ptr)[(index)])
#define LOAD16_IN(ptr, index) vload16(0, (ptr) + (index))
#endif

/* K and V may be stored apart from Q (a KV cache): KV_DTYPE, by default IN_DTYPE. */
#ifndef KV_DTYPE
#define KV_DTYPE IN_DTYPE
#endif
#if KV_DTYPE == DTYPE_F16
#define KV_T                  ushort
#define LOAD_KV(ptr, index)   vload_half((index), (__global const half *)(ptr))
#define LOAD16_KV(ptr, index) vload_half16(0, (__global const half *)(ptr) + (index))
#elif KV_DTYPE == DTYPE_BF16
#define KV_T                  ushort
#define LOAD_KV(ptr, index)   bf16_to_float((ptr)[(index)])
#define LOAD16_KV(ptr, index) bf16x16_to_float16(vload16(0, (ptr) + (index)))
#elif KV_DTYPE == DTYPE_Q8_0 || KV_DTYPE == DTYPE_Q4_0
/* Value `index` (an element index; rows start whole blocks) is in block index / 32, at byte
 * QBLOCK_BYTES * (index / 32): a float16 scale d, then q8_0's 32 int8 q (value d * q) or
 * q4_0's 16 bytes of 4-bit codes q, value j's in the low nibble of byte j and value j + 16's in
 * the high one (value (q - 8) * d). Dequantised in registers. */
#define KV_T                  uchar
#define QBLOCK_BYTES          (KV_DTYPE == DTYPE_Q8_0 ? 34 : 18)
#define LOAD_KV(ptr, index)   quant_load((ptr), (index))

/* The float16 scale at the start of block `block`. q4_0 widens it with integer operations
 * (exactly), which PoCL 3.1 runs about 5 % faster in q4_0's decoding loop than vload_half; q8_0
 * decodes about 20 % faster with vload_half (bench/README.md, issue 33). */
inline float quant_scale(__global const uchar *x, long block) {
#if KV_DTYPE == DTYPE_Q8_0
    return vload_half(0, (__global const half *)(x + block * QBLOCK_BYTES));
#else
    const uint h = *(__global const ushort *)(x + block * QBLOCK_BYTES), exp = h & 0x7c00u;
    uint o = ((h & 0x7fffu) << 13) + (112u << 23);
    float f;
    if (exp == 0x7c00u) /* infinity or NaN */
        f = as_float(o + (112u << 23));
    else if (exp == 0u) /* zero or subnormal: renormalise */
        f = as_float(o + (1u << 23)) - as_float(113u << 23);
    else
        f = as_float(o);
    return as_float(as_uint(f) | ((h & 0x8000u) << 16));
#endif
}

inline float quant_load(__global const uchar *x, long index) {
    const long block = index >> 5;
    __global const uchar *q = x + block * QBLOCK_BYTES + 2;
#if KV_DTYPE == DTYPE_Q8_0
    return quant_scale(x, block) * (float)((__global const char *)q)[index & 31];
#else
    const int code = (q[index & 15] >> ((index & 16) >> 2)) & 15;
    return quant_scale(x, block) * (float)(code - 8);
#endif
}

/* The 16 values of a row from d0 on, d0 a multiple of 16: `row` (the element index of the
 * row's first value) is a multiple of 32, as rows start whole blocks, so which half of the block
 * d0 is in is known where d0 is, at compile time in unrolled loops. */
inline float16 quant_load16_row(__global const uchar *x, long row, int d0) {
    const long block = (row >> 5) + (d0 >> 5);
    __global const uchar *q = x + block * QBLOCK_BYTES + 2;
#if KV_DTYPE == DTYPE_Q8_0
    const float16 values = convert_float16(vload16(0, (__global const char *)q + (d0 & 16)));
#else
    const uchar16 bytes = vload16(0, q);
    const uchar16 codes = (d0 & 16) ? bytes >> (uchar16)4 : bytes & (uchar16)15;
    const float16 values = convert_float16(as_char16(codes) - (char16)8);
#endif
    return quant_scale(x, block) * values;
}
#define LOAD16_KV_ROW(ptr, row, d0) quant_load16_row((ptr), (row), (d0))

/* The 32 values of a row from d0 on, d0 a multiple of 32: one whole block, one scale. */
inline void quant_load32_row(__global const uchar *x, long row, int d0, float16 *lo,
                             float16 *hi) {
    const long block = (row >> 5) + (d0 >> 5);
    __global const uchar *q = x + block * QBLOCK_BYTES + 2;
    const float16 scale = (float16)quant_scale(x, block);
#if KV_DTYPE == DTYPE_Q8_0
    *lo = scale * convert_float16(vload16(0, (__global const char *)q));
    *hi = scale * convert_float16(vload16(1, (__global const char *)q));
#else
    const uchar16 bytes = vload16(0, q);
    *lo = scale * convert_float16(as_char16(bytes & (uchar16)15) - (char16)8);
    *hi = scale * convert_float16(as_char16(bytes >> (uchar16)4) - (char16)8);
#endif
}
#define LOAD32_KV_ROW(ptr, row, d0, lo, hi) quant_load32_row((ptr), (row), (d0), (lo), (hi))
#else
#define KV_T                  float
#define LOAD_KV(ptr, index)   ((ptr)[(index)])
#define LOAD16_KV(ptr, index) vload16(0, (ptr) + (index))
#endif

#ifndef LOAD16_KV_ROW /* 16 values of a K or V row (element index `row`) from d0 on */
#define LOAD16_KV_ROW(ptr, row, d0) LOAD16_KV((ptr), (row) + (d0))
#endif
#ifndef LOAD32_KV_ROW /* 32 values from d0 on, as two vectors of 16 */
#define LOAD32_KV_ROW(ptr, row, d0, lo, hi) \
    (*(lo) = LOAD16_KV_ROW((ptr), (row), (d0)), *(hi) = LOAD16_KV_ROW((ptr), (row), (d0) + 16))
#endif

/* 16 values narrowed to bfloat16 and stored from `index` on. */
inline void store_bf16x16(float16 x, __global ushort *ptr, long index) {
    ushort lanes[16];
    for (int e = 0; e < 16; e++) lanes[e] = float_to_bf16(((float *)&x)[e]);
    vstore16(vload16(0, lanes), 0, ptr + index);
}

#if OUT_DTYPE == DTYPE_F16
#define OUT_T                          half
#define STORE_OUT(value, ptr, index)   vstore_half((value), (index), (ptr))
#define STORE16_OUT(value, ptr, index) vstore_half16((value), 0, (ptr) + (index))
#elif OUT_DTYPE == DTYPE_BF16
#define OUT_T                          ushort
#define STORE_OUT(value, ptr, index)   ((ptr)[(index)] = float_to_bf16(value))
#define STORE16_OUT(value, ptr, index) store_bf16x16((value), (ptr), (index))
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

/* O of the attention kernels, whose storage (a clattn_dtype) is chosen at run time: O is stored
 * once per value, after the keys, so one program serves every output storage instead of one
 * program each (bench/README.md, "Build less"). */
ALWAYS_INLINE void store_o(int dtype, float value, __global void *O, long index) {
    if (dtype == DTYPE_F16)
        vstore_half(value, index, (__global half *)O);
    else if (dtype == DTYPE_BF16)
        ((__global ushort *)O)[index] = float_to_bf16(value);
    else
        ((__global float *)O)[index] = value;
}

ALWAYS_INLINE void store16_o(int dtype, float16 value, __global void *O, long index) {
    if (dtype == DTYPE_F16)
        vstore_half16(value, 0, (__global half *)O + index);
    else if (dtype == DTYPE_BF16)
        store_bf16x16(value, (__global ushort *)O, index);
    else
        vstore16(value, 0, (__global float *)O + index);
}

/* ---- across the 16 lanes of a vector: split.cl's keys, lanes.cl's few-row tiles and transposes */

/* Horizontal sum, lane by lane (oclgrind mis-tracks 16-wide .lo/.hi shuffles). */
ALWAYS_INLINE float hsum16(float16 v) {
    float a = ((v.s0 + v.s1) + (v.s2 + v.s3)) + ((v.s4 + v.s5) + (v.s6 + v.s7));
    float b = ((v.s8 + v.s9) + (v.sa + v.sb)) + ((v.sc + v.sd) + (v.se + v.sf));
    return a + b;
}

/* SHUFFLE_LANES(x, y, lanes...): 16 lanes picked from x (0 to 15) and y (16 to 31). Clang's
 * shufflevector is one instruction with constant lanes (4 % faster on PoCL than shuffle2);
 * OpenCL's shuffle2 is the same where a compiler lacks it, and in unoptimised builds
 * (-cl-opt-disable), whose shufflevector oclgrind's uninitialized-value checker reads as
 * uninitialized lanes. */
#if defined(__has_builtin) && defined(__OPTIMIZE__)
#if __has_builtin(__builtin_shufflevector)
#define SHUFFLE_LANES(x, y, ...) __builtin_shufflevector(x, y, __VA_ARGS__)
#endif
#endif
#ifndef SHUFFLE_LANES
#define SHUFFLE_LANES(x, y, ...) shuffle2(x, y, (uint16)(__VA_ARGS__))
#endif
/* LOb and HIb (b = 8, 4, 2, 1): two vectors' blocks of b lanes interleaved, the even blocks of
 * x and y (LOb: x[e], y[e] for e with bit b clear) or the odd ones (HIb: x[e + b], y[e + b]). */
#define LO8 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define HI8 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define LO4 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27
#define HI4 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31
#define LO2 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define HI2 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define LO1 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30
#define HI1 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31

/* Lane c of the result: the sum of the 16 lanes of x[c'], c' being c with its four bits in
 * reverse order, in registers: four rounds that each add two vectors' halves (16 -> 8 -> 4 ->
 * 2 -> 1 partial sums a key), 30 two-vector shuffles. The rounds interleave the keys; the
 * reversed order undoes that. x is overwritten. */
ALWAYS_INLINE float16 sum_lanes16_reversed(float16 x[16]) {
#pragma unroll
    for (int i = 0; i < 8; i++)
        x[i] = SHUFFLE_LANES(x[2 * i], x[2 * i + 1], LO8) +
               SHUFFLE_LANES(x[2 * i], x[2 * i + 1], HI8);
#pragma unroll
    for (int i = 0; i < 4; i++)
        x[i] = SHUFFLE_LANES(x[2 * i], x[2 * i + 1], LO4) +
               SHUFFLE_LANES(x[2 * i], x[2 * i + 1], HI4);
#pragma unroll
    for (int i = 0; i < 2; i++)
        x[i] = SHUFFLE_LANES(x[2 * i], x[2 * i + 1], LO2) +
               SHUFFLE_LANES(x[2 * i], x[2 * i + 1], HI2);
    return SHUFFLE_LANES(x[0], x[1], LO1) + SHUFFLE_LANES(x[0], x[1], HI1);
}

/* The four bits of c (0 <= c < 16) in reverse order, from a table in a constant's nibbles:
 * LLVM turns the bit arithmetic into llvm.bitreverse.i4 where c is not a constant, which
 * oclgrind cannot run. */
#define BITS_REVERSED4(c) ((int)((0xF7B3D591E6A2C480UL >> (4 * (c))) & 15))

/* The larger of a and b, lane by lane, for a that is never NaN: b where b > a, so a NaN b
 * leaves a (as fmax would) in one compare-free instruction (PoCL's fmax adds NaN tests). */
ALWAYS_INLINE float16 max_of(float16 a, float16 b) {
    return select(a, b, b > a);
}

/* Every lane: the largest lane of x (NaN lanes left out: max_of), or the sum of x's lanes. */
#define SWAP8 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7
#define SWAP4 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11
#define SWAP2 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13
#define SWAP1 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14
ALWAYS_INLINE float16 max_across(float16 x) {
    x = max_of(x, SHUFFLE_LANES(x, x, SWAP8));
    x = max_of(x, SHUFFLE_LANES(x, x, SWAP4));
    x = max_of(x, SHUFFLE_LANES(x, x, SWAP2));
    return max_of(x, SHUFFLE_LANES(x, x, SWAP1));
}
ALWAYS_INLINE float16 sum_across(float16 x) {
    x += SHUFFLE_LANES(x, x, SWAP8);
    x += SHUFFLE_LANES(x, x, SWAP4);
    x += SHUFFLE_LANES(x, x, SWAP2);
    return x + SHUFFLE_LANES(x, x, SWAP1);
}

/*
 * The parameter block attn_params comes from "attn_params.cl", generated at build time from the
 * one list of its fields (runtime/plan/params.h), and the mask rules from "mask_rules.h"
 * (cl/mask_rules.h, which the host includes too), both built ahead of this file.
 * Positions: query i sits at key position p = i + offset (offset = len_k - len_q, or a
 * shard's: plan/mask.h).
 * Classes: keys of class r are j = r + m*classes (m = 0, 1, ...); a query at p belongs to
 * class p mod classes. With classes = dilation (the planner's choice while a class holds at
 * least a key tile) a query only meets its own class inside the window; with classes = 1 and
 * dilation > 1 the window pass tests (p - j) mod dilation pair by pair.
 */

/* a + b and a * b where a finite result never overflows to an infinity: it saturates at
 * +-FLT_MAX. Only -inf masks (docs/semantics.md section 1), so a finite score or bias must stay
 * finite (a padding bias of -FLT_MAX plus a negative score would otherwise round to -inf). */
inline float add_saturating(float a, float b) {
    const float x = a + b;
    return isinf(x) && isfinite(a) && isfinite(b) ? copysign(FLT_MAX, x) : x;
}

inline float mul_saturating(float a, float b) {
    const float x = a * b;
    return isinf(x) && isfinite(a) && isfinite(b) ? copysign(FLT_MAX, x) : x;
}

/* Scores are float32 (docs/semantics.md section 9): scale * q.k is an infinity only when that
 * product itself is beyond float32. A kernel's float32 sum of products (and a q pre-scaled by
 * scale) can overflow on the way even so; such a score is summed again (rescore_add, then
 * rescore_end): q.k as it is, which is exact unless it overflows (a huge scale over ordinary
 * values, 3e38 say), and with each operand scaled by 2^-RESCORE_SHIFT, which never overflows for
 * FLT_MAX-sized values but puts products of ordinary ones among float32's subnormals (a
 * thousandth off). The first is taken where finite, times scale; else rescored() puts scale and
 * 2^(2*RESCORE_SHIFT) back into the second at once: scale's mantissa first, then its exponent
 * with ldexp, which is exact up to the final overflow or underflow. */
#define RESCORE_SHIFT 70
#define RESCORE_DOWN  0x1.0p-70f

inline float rescored(float scaled_dot, float scale) {
    /* scale = m * 2^e, m in [0.5, 1), as frexp gives them, from the bits (oclgrind's checker
     * stops at frexp's pointer into private memory); 0, infinities and NaN keep m = scale */
    float m = scale;
    int e = 0;
    uint bits = as_uint(scale), exponent = (bits >> 23) & 0xffu;
    if (exponent == 0u && scale != 0.0f) { /* subnormal: normalised first */
        m = scale * 0x1.0p24f, e = -24;
        bits = as_uint(m), exponent = (bits >> 23) & 0xffu;
    }
    if (exponent != 0u && exponent != 0xffu) {
        e += (int)exponent - 126;
        m = as_float((bits & 0x807fffffu) | (126u << 23));
    }
    return ldexp(m * scaled_dot, e + 2 * RESCORE_SHIFT);
}

/* What a normalised output (O = sum p V / sum p) keeps of itself when its row's sum of
 * exponentials goes from `kept` (the old sum, rescaled to the new maximum) to `sum`: kept / sum,
 * which is exactly 1 where the keys added nothing, as on a row whose later keys lie far below its
 * maximum or past its causal limit (kept * (1 / sum) is 1 - 2^-24 for many sums, and that, tile
 * after tile, took a long row's O down by 5e-4 at 131072 keys); 0 for an empty row, NaN for a
 * NaN sum. */
inline float kept_share(float kept, float sum) {
    return sum == 0.0f ? 0.0f : kept / sum;
}

/* The two sums of q.k a rescore keeps (above): .x as it is, .y scaled down. */
inline float2 rescore_add(float2 dot, float q, float k) {
    return (float2)(fma(q, k, dot.x), fma(q * RESCORE_DOWN, k * RESCORE_DOWN, dot.y));
}

/* scale * q.k from rescore_add's sums. */
inline float rescore_end(float2 dot, float scale) {
    return isfinite(dot.x) ? scale * dot.x : rescored(dot.y, scale);
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

/* is_global: [len_k] flags of the call's keys, then [len_q] of its query positions offset + r
 * (a shard's queries may sit on global positions outside its keys; plan/mask.h). */
inline int is_global_position(__constant attn_params *P, __global const uchar *is_global, long x) {
    if (!GLOBALS_FEATURE(P, has_global)) return 0;
    if (x >= 0 && x < P->len_k) return is_global[x];
    const long row = x - P->offset;
    return row >= 0 && row < P->len_q && is_global[P->len_k + row];
}

/* A row's LSE from its largest score m and sum l of exp(s - m): m + log(l) (write_lse 1), or
 * the pair (m, log(l)) at 2 * row (write_lse 2, desc->lse_parts: partials merge exactly);
 * an empty row has -inf. */
inline void store_lse(__constant attn_params *P, __global float *LSE, long row, float m, float l,
                      int empty) {
    if (P->write_lse == 2) {
        LSE[2 * row] = empty ? -INFINITY : m;
        LSE[2 * row + 1] = empty ? -INFINITY : log(l);
    } else if (P->write_lse) {
        LSE[row] = empty ? -INFINITY : m + log(l);
    }
}

/* ---- score modifiers and sinks (docs/semantics.md section 8). The block P points to is
 * followed by float32 sinks [Hq] (has_sinks), then ALiBi slopes [Hq] or [B][Hq] (alibi 1, 2):
 * plan/params.h, params_block. */
#define MODIFIES_SCORES(P) (MODIFIER(P, softcap) != 0 || MODIFIER(P, alibi) != 0)

inline __constant float *params_extras(__constant attn_params *P) {
    return (__constant float *)(P + 1);
}

/* An allowed pair's scaled score t (query position p, key j; head h of sequence b), soft-capped
 * (softcap * tanh(t / softcap), float32) and then given ALiBi's -slope * |p - j| (float32
 * product, saturating sum): the reference takes the same steps. */
inline float modified_score(__constant attn_params *P, float t, long b, long h, long p, long j) {
    if (MODIFIER(P, softcap) != 0) {
        const float cap = as_float((uint)MODIFIER(P, softcap));
        t = cap * tanh(t / cap);
    }
    if (MODIFIER(P, alibi) != 0) {
        const long first = MODIFIER(P, has_sinks) ? P->heads_q : 0; /* slopes follow the sinks */
        const long batch_row = MODIFIER(P, alibi) == 2 ? b * P->heads_q : 0;
        const float slope = params_extras(P)[first + batch_row + h];
        const long distance = p > j ? p - j : j - p;
        t = add_saturating(t, -(slope * (float)distance));
    }
    return t;
}

/* Head h's sink folded into a row's softmax state (largest score m, sum l of exp(s - m)):
 * m and l become the state with the sink among the scores, for the LSE, and the result is what
 * O normalised by the old l is multiplied by, l / (l + exp(sink - m)), computed without
 * overflow. An empty row (m = -inf, l = 0) gets the factor 0 and the state (sink, 1), so LSE =
 * sink; a NaN row keeps its NaN. Without a sink: 1, state unchanged. */
inline float sink_fold(__constant attn_params *P, long h, float *m, float *l) {
    if (!MODIFIER(P, has_sinks) || isnan(*m) || isnan(*l)) return 1.0f;
    const float sink = params_extras(P)[h];
    if (sink == -INFINITY) return 1.0f;
    const float top = fmax(*m, sink);
    const float kept = *m == -INFINITY ? 0.0f : *l * exp(*m - top), added = exp(sink - top);
    *m = top, *l = kept + added;
    return kept / (kept + added);
}

/* layout_head: the query head (ignored when one layout serves every head). */
inline int layout_ok(__constant attn_params *P, __global const uchar *layout, long layout_head,
                     long i, long j) {
    if (!FEATURE(P, has_layout)) return 1;
    long h = P->layout_per_head ? layout_head : 0;
    return layout[(h * P->blocks_q + i / P->block_q) * P->blocks_k + j / P->block_k] != 0;
}

/* Whether query i may see key j (docs/semantics.md section 2, mask_rules.h):
 * causal_ok AND layout_ok AND (window_ok OR j in G OR p in G) */
inline int mask_allowed(__constant attn_params *P, __global const uchar *is_global,
                        __global const uchar *layout, long head, long i, long j) {
    long p = i + P->offset;
    return mask_combine(mask_causal_ok(P->causal, p, j), layout_ok(P, layout, head, i, j),
                        window_ok(P, p, j), is_global_position(P, is_global, j),
                        is_global_position(P, is_global, p));
}

/* Element index of row j of (b, kv head) in K or V (docs/semantics.md section 6): the tensor's row,
 * or in a paged cache through the block table (the pages are the pool tensor's batch entries). */
inline long kv_row(__constant attn_params *P, __global const int *block_table, long offset,
                   long stride_b, long stride_h, long stride_s, long b, long kvh, long j) {
    if (FEATURE(P, page_size) == 0) return offset + b * stride_b + kvh * stride_h + j * stride_s;
    const long page = block_table[b * P->max_pages + j / FEATURE(P, page_size)];
    return offset + page * stride_b + kvh * stride_h + (j % FEATURE(P, page_size)) * stride_s;
}
