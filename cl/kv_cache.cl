/*
 * Appending rows to a KV cache (docs/semantics.md section 6): row t of sequence b of K_new and
 * V_new goes to row lengths[b] + t of the cache, for t < new_len[b] (the host has checked that
 * every such row fits its capacity and its pages). The cache's addressing - its tensors, contiguous
 * or paged - is the parameter block's k_* and v_* fields with page_size and max_pages; the new rows
 * are IN_DTYPE tensors [B, len, Hkv, D] at the offsets and strides given; the cache is OUT_DTYPE.
 * Work-item (d, t, b * Hkv + kvh) over (max(Dqk, Dv), len, B * Hkv). Built after common.cl.
 *
 * A q8_0 cache (KV_DTYPE q8_0, OUT_DTYPE unused) is written a block at a time, each block
 * quantised as clattn_convert does it: work-item (block, t, b * Hkv + kvh) over
 * (max(Dqk, Dv) / 32, len, B * Hkv). check_rows runs first on the same work-items: a block
 * whose float16 scale would overflow refuses the whole append.
 */
#if KV_DTYPE == DTYPE_Q8_0
/* x[from .. from+31] into v[32], and the largest magnitude among the finite ones: NaN and
 * infinities have no say in a block's scale. */
ALWAYS_INLINE float load_block(__global const IN_T *x, long from, float *v) {
    float max = 0.0f;
    for (int i = 0; i < 32; i++) {
        v[i] = LOAD_IN(x, from + i);
        if (isfinite(v[i])) max = fmax(max, fabs(v[i]));
    }
    return max;
}

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

/* Values x[from .. from+31] as one q8_0 block at `block`, as clattn_convert makes it (ggml's
 * quantize_row_q8_0_ref): d = max|x| / 127 (finite values), q = round(x * (1 / d)) half away
 * from zero, the reciprocal of the float32 d; d stored rounded to float16. NaN stores 0.
 * check_rows has made sure that d is finite. */
ALWAYS_INLINE void quantize_block(__global const IN_T *x, long from, __global uchar *block) {
    float v[32];
    const float d = nearest_quotient(load_block(x, from, v), 127.0f);
    const float inv = d != 0.0f ? nearest_quotient(1.0f, d) : 0.0f;
    vstore_half_rte(d, 0, (__global half *)block);
    __global char *q = (__global char *)(block + 2);
    for (int i = 0; i < 32; i++) {
        const float t = v[i] * inv;
        q[i] = isnan(t) ? 0 : (char)clamp(round(t), -127.0f, 127.0f);
    }
}

/* Whether the block's scale max|x| / 127 rounds to infinity in float16 (65520 and up round
 * there; clattn_convert's rule): such a block would dequantise to NaN throughout. */
ALWAYS_INLINE int scale_overflows(__global const IN_T *x, long from) {
    float v[32];
    return load_block(x, from, v) / 127.0f >= 65520.0f;
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
                       K + at / 32 * 34);
    }
    if (d < P->dim_v) {
        const long at = kv_row(P, block_table, P->v_offset, P->v_stride_b, P->v_stride_h,
                               P->v_stride_s, b, kvh, j) + d;
        quantize_block(V_new, vn_offset + b * vn_sb + kvh * vn_sh + t * vn_ss + d,
                       V + at / 32 * 34);
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
