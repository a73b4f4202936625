/*
 * Appending rows to a KV cache (docs/semantics.md section 6): row t of sequence b of K_new and
 * V_new goes to row lengths[b] + t of the cache, for t < new_len[b] (the host has checked that
 * every such row fits its capacity and its pages). The cache's addressing - its tensors, contiguous
 * or paged - is the parameter block's k_* and v_* fields with page_size and max_pages; the new rows
 * are IN_DTYPE tensors [B, len, Hkv, D] at the offsets and strides given; the cache is OUT_DTYPE.
 * Work-item (d, t, b * Hkv + kvh) over (max(Dqk, Dv), len, B * Hkv). Built after common.cl.
 *
 * A quantised cache (KV_DTYPE q8_0 or q4_0, OUT_DTYPE unused) is written a block at a time,
 * each block quantised as clattn_convert does it (ggml's reference quantisers, bit for bit):
 * work-item (block, t, b * Hkv + kvh) over (max(Dqk, Dv) / 32, len, B * Hkv). check_rows runs
 * first on the same work-items: a block whose float16 scale would overflow refuses the whole
 * append. The first dimension is rounded up to whole work-groups (kernel_launch_padded): the
 * work-items past Dqk (or Dv) write nothing of K (or V).
 */
#if KV_DTYPE == DTYPE_Q8_0 || KV_DTYPE == DTYPE_Q4_0
/* Sums and products below are each rounded to float32, as the host's quantiser rounds them: a
 * fused multiply-add would round x * (1 / d) + 8.5 once. */
#pragma OPENCL FP_CONTRACT OFF

/* The float32 nearest to a / b, which IEEE division gives (and ggml's host code takes): an
 * OpenCL device's division may be 2.5 ulp off, or a * (1 / b). The quotient is corrected once by
 * its residual (then within an ulp), and of it and its two neighbours the one whose residual
 * a - q * b is smallest wins: within an ulp of a / b that residual is exact in an fma, and a
 * quotient of two float32 is never halfway between two of them. a, b finite, b nonzero. */
ALWAYS_INLINE float nearest_quotient(float a, float b) {
    float q = a / b;
    q = fma(fma(-q, b, a), 1.0f / b, q);
    const float below = nextafter(q, -INFINITY), above = nextafter(q, INFINITY);
    const float r = fabs(fma(-q, b, a)), r_below = fabs(fma(-below, b, a));
    const float r_above = fabs(fma(-above, b, a));
    if (r_below < r && r_below <= r_above) return below;
    return r_above < r ? above : q;
}

/* x[from .. from+31] into v[32]; returns the block's float32 scale d before its rounding to
 * float16: q8_0's max|x| / 127, q4_0's m / -8 with m the first value of the largest magnitude.
 * NaN and infinities have no say in a block's scale. */
ALWAYS_INLINE float load_block(__global const IN_T *x, long from, float *v) {
    float max = 0.0f, m = 0.0f;
    for (int i = 0; i < 32; i++) {
        v[i] = LOAD_IN(x, from + i);
        if (isfinite(v[i]) && fabs(v[i]) > max) max = fabs(v[i]), m = v[i];
    }
    return KV_DTYPE == DTYPE_Q8_0 ? nearest_quotient(max, 127.0f) : nearest_quotient(m, -8.0f);
}

/* Values x[from .. from+31] as one block at `block`, as clattn_convert makes it: d from
 * load_block and its reciprocal (of the float32 d); q8_0: q = round(x * (1 / d)) half away
 * from zero, NaN storing 0; q4_0: q = min(15, trunc(x * (1 / d) + 8.5)), value j's code in the
 * low nibble of byte j and value j + 16's in the high one, NaN storing 8 (the value 0). d is
 * stored rounded to float16. check_rows has made sure that it is finite there. */
ALWAYS_INLINE void quantize_block(__global const IN_T *x, long from, __global uchar *block) {
    float v[32];
    const float d = load_block(x, from, v);
    const float inv = d != 0.0f ? nearest_quotient(1.0f, d) : 0.0f;
    vstore_half_rte(d, 0, (__global half *)block);
#if KV_DTYPE == DTYPE_Q8_0
    __global char *q = (__global char *)(block + 2);
    for (int i = 0; i < 32; i++) {
        const float t = v[i] * inv;
        q[i] = isnan(t) ? 0 : (char)clamp(round(t), -127.0f, 127.0f);
    }
#else
    uchar codes[32];
    for (int i = 0; i < 32; i++) {
        const float t = v[i] * inv;
        const float u = t + 8.5f;
        codes[i] = isnan(u) ? 8 : (uchar)clamp(trunc(u), 0.0f, 15.0f);
    }
    for (int j = 0; j < 16; j++) block[2 + j] = codes[j] | (uchar)(codes[j + 16] << 4);
#endif
}

/* Whether the block's scale rounds to infinity in float16 (from 65520 up: clattn_convert's
 * rule): such a block would dequantise to NaN throughout. */
ALWAYS_INLINE int scale_overflows(__global const IN_T *x, long from) {
    float v[32];
    return fabs(load_block(x, from, v)) >= 65520.0f;
}

/* Before append_rows, over its work-items: *overflow = 1 when the scale of any block that it
 * would write overflows (the host then refuses the append, with nothing written, and finds the
 * block to name on its own copy of the rows). */
__kernel void check_rows(__constant attn_params *P, __global const int *new_len,
                         __global const IN_T *K_new, long kn_offset, long kn_sb, long kn_sh,
                         long kn_ss, __global const IN_T *V_new, long vn_offset, long vn_sb,
                         long vn_sh, long vn_ss, __global int *overflow) {
    const long d = get_global_id(0) * 32, t = get_global_id(1), bkv = get_global_id(2);
    const long b = bkv / P->heads_kv, kvh = bkv % P->heads_kv;
    if (t >= new_len[b]) return;
    if ((d < P->dim_qk &&
         scale_overflows(K_new, kn_offset + b * kn_sb + kvh * kn_sh + t * kn_ss + d)) ||
        (d < P->dim_v &&
         scale_overflows(V_new, vn_offset + b * vn_sb + kvh * vn_sh + t * vn_ss + d)))
        *overflow = 1; /* every writer stores the same value */
}

__kernel void append_rows(__constant attn_params *P, __global const int *lengths,
                          __global const int *new_len, __global const int *block_table,
                          __global const IN_T *K_new, long kn_offset, long kn_sb, long kn_sh,
                          long kn_ss, __global const IN_T *V_new, long vn_offset, long vn_sb,
                          long vn_sh, long vn_ss, __global uchar *K, __global uchar *V) {
    const long d = get_global_id(0) * 32, t = get_global_id(1), bkv = get_global_id(2);
    const long b = bkv / P->heads_kv, kvh = bkv % P->heads_kv;
    if (t >= new_len[b]) return;
    const long j = lengths[b] + t;
    if (d < P->dim_qk) {
        const long at = kv_row(P, block_table, P->k_offset, P->k_stride_b, P->k_stride_h,
                               P->k_stride_s, b, kvh, j) + d;
        quantize_block(K_new, kn_offset + b * kn_sb + kvh * kn_sh + t * kn_ss + d,
                       K + at / 32 * QBLOCK_BYTES);
    }
    if (d < P->dim_v) {
        const long at = kv_row(P, block_table, P->v_offset, P->v_stride_b, P->v_stride_h,
                               P->v_stride_s, b, kvh, j) + d;
        quantize_block(V_new, vn_offset + b * vn_sb + kvh * vn_sh + t * vn_ss + d,
                       V + at / 32 * QBLOCK_BYTES);
    }
}
#else
__kernel void append_rows(__constant attn_params *P, __global const int *lengths,
                          __global const int *new_len, __global const int *block_table,
                          __global const IN_T *K_new, long kn_offset, long kn_sb, long kn_sh,
                          long kn_ss, __global const IN_T *V_new, long vn_offset, long vn_sb,
                          long vn_sh, long vn_ss, __global OUT_T *K, __global OUT_T *V) {
    const long d = get_global_id(0), t = get_global_id(1), bkv = get_global_id(2);
    const long b = bkv / P->heads_kv, kvh = bkv % P->heads_kv;
    if (t >= new_len[b]) return;
    const long j = lengths[b] + t;
    if (d < P->dim_qk) {
        const float x = LOAD_IN(K_new, kn_offset + b * kn_sb + kvh * kn_sh + t * kn_ss + d);
        STORE_OUT(x, K, kv_row(P, block_table, P->k_offset, P->k_stride_b, P->k_stride_h,
                               P->k_stride_s, b, kvh, j) + d);
    }
    if (d < P->dim_v) {
        const float x = LOAD_IN(V_new, vn_offset + b * vn_sb + kvh * vn_sh + t * vn_ss + d);
        STORE_OUT(x, V, kv_row(P, block_table, P->v_offset, P->v_stride_b, P->v_stride_h,
                               P->v_stride_s, b, kvh, j) + d);
    }
}
#endif
