/*
 * Row softmax: out[r][c] = exp(scale*x[r][c] - m_r) / sum_r, lse[r] = m_r + log(sum_r), where
 * m_r is the row maximum (numerically stable). One work-group of WG_SIZE work-items owns a
 * row; each work-item strides over the columns, so rows of any length work. A row whose
 * maximum is -inf (everything masked) gets zeros and lse = -inf.
 *
 * in/out: [rows][cols] at an element offset with a row stride; out may alias in.
 *
 * softmax_masked is the gemm path's step between its two GEMMs: the same three passes over a
 * chunk of attention scores, with the bias and every mask of docs/semantics.md section 2
 * (common.cl).
 */
#ifndef WG_SIZE
#define WG_SIZE 256
#endif

/* The larger of a and b, NaN when either is NaN (fmax would drop it and turn a row of NaN
 * into an empty row). */
inline float max_keep_nan(float a, float b) {
    return isnan(a) || a > b ? a : b;
}

/* Tree reduction over the work-group; `scratch` is [WG_SIZE] local floats. */
inline float group_max(float value, __local float *scratch) {
    int lid = get_local_id(0);
    scratch[lid] = value;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int half_size = WG_SIZE / 2; half_size > 0; half_size /= 2) {
        if (lid < half_size) scratch[lid] = max_keep_nan(scratch[lid], scratch[lid + half_size]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float result = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return result;
}

inline float group_sum(float value, __local float *scratch) {
    int lid = get_local_id(0);
    scratch[lid] = value;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int half_size = WG_SIZE / 2; half_size > 0; half_size /= 2) {
        if (lid < half_size) scratch[lid] += scratch[lid + half_size];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float result = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return result;
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
softmax_rows(__global const IN_T *in, ulong in_offset, ulong in_row_stride, __global OUT_T *out,
             ulong out_offset, ulong out_row_stride, uint cols, float scale, __global float *lse,
             int write_lse) {
    __local float scratch[WG_SIZE];
    const ulong row = get_group_id(0);
    const int lid = get_local_id(0);
    __global const IN_T *x = in + in_offset + row * in_row_stride;
    __global OUT_T *y = out + out_offset + row * out_row_stride;

    /* pass 1: row maximum of the scaled inputs */
    float local_max = -INFINITY;
    for (uint c = lid; c < cols; c += WG_SIZE)
        local_max = max_keep_nan(local_max, mul_saturating(scale, LOAD_IN(x, c)));
    const float row_max = group_max(local_max, scratch);

    /* pass 2: sum of exponentials (an all -inf row would give exp(nan): treat it as empty) */
    const int empty = row_max == -INFINITY;
    float local_sum = 0.0f;
    for (uint c = lid; !empty && c < cols; c += WG_SIZE)
        local_sum += exp(mul_saturating(scale, LOAD_IN(x, c)) - row_max);
    const float row_sum = group_sum(local_sum, scratch);

    /* pass 3: normalise (every read of this row happened before the barrier above, so
       writing in place is safe) */
    const float inv_sum = empty ? 0.0f : 1.0f / row_sum;
    for (uint c = lid; c < cols; c += WG_SIZE) {
        float p = empty ? 0.0f : exp(mul_saturating(scale, LOAD_IN(x, c)) - row_max) * inv_sum;
        STORE_OUT(p, y, c);
    }
    if (write_lse && lid == 0) lse[row] = empty ? -INFINITY : row_max + log(row_sum);
}

/*
 * The gemm path's masked softmax, in place over a chunk of scores S = scale * Q K^T.
 *
 * scores: [G][R][keys] float, dense: G (b, h) groups of the chunk, the first being group0
 *         (b = group / heads_q, h = group % heads_q), R query rows of each from row0, and the
 *         keys [key0, key0 + keys) the chunk's rows may see (the GEMMs skip the others).
 * Adds bias[b, h, i, j] (zero strides broadcast), applies every mask of docs/semantics.md section 2
 * through mask_allowed, and writes P over S. A disallowed key gets exactly 0 (never exp of NaN), so
 * that P V sums only allowed values; a row with no allowed key (or only -inf scores) gets
 * P = 0 and LSE = -inf; a NaN among the allowed scores makes the row's P and LSE NaN.
 * lse: [B][Hq][Nq] float, natural log, written when P->write_lse.
 * Q, K: the caller's tensors (IN_T storage) and `scale`: an allowed score the GEMM left
 * non-finite (its float32 sum overflowed on the way) is summed again without overflow
 * (rescore), so that it is an infinity only when scale * q.k is (README, Semantics).
 * One work-group per row: global (WG_SIZE * R, G), local (WG_SIZE, 1).
 */

/* scale * dot(Q[b,h,i,:], K[b,kvh,j,:]) without overflow on the way (common.cl, rescored). */
inline float rescore(__constant attn_params *P, __global const IN_T *Q, __global const IN_T *K,
                     long b, long h, long i, long j, float scale) {
    const long kvh = h / (P->heads_q / P->heads_kv);
    const long q = P->q_offset + b * P->q_stride_b + h * P->q_stride_h + i * P->q_stride_s;
    const long k = P->k_offset + b * P->k_stride_b + kvh * P->k_stride_h + j * P->k_stride_s;
    float dot = 0.0f;
    for (long d = 0; d < P->dim_qk; d++)
        dot = fma(LOAD_IN(Q, q + d) * RESCORE_DOWN, LOAD_IN(K, k + d) * RESCORE_DOWN, dot);
    return rescored(dot, scale);
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
softmax_masked(__constant attn_params *P, __global float *scores, long group0, long row0, long key0,
               long keys, __global const float *bias, __global const uchar *is_global,
               __global const uchar *layout, __global float *lse, __global const IN_T *Q,
               __global const IN_T *K, float scale) {
    __local float scratch[WG_SIZE];
    const long rows = get_num_groups(0), r = get_group_id(0), g = get_global_id(1);
    const int lid = get_local_id(0);
    const long group = group0 + g, b = group / P->heads_q, h = group % P->heads_q;
    const long i = row0 + r, cols = keys;
    __global float *s = scores + (g * rows + r) * cols; /* s[c] is key key0 + c */
    const long bias_row = P->has_bias ? P->bias_offset + b * P->bias_stride_b +
                                            h * P->bias_stride_h + i * P->bias_stride_s + key0
                                      : 0;

    /* pass 1: bias and masks, written back (-inf where masked), and the row maximum */
    float local_max = -INFINITY;
    for (long j = lid; j < cols; j += WG_SIZE) {
        float x = -INFINITY;
        if (mask_allowed(P, is_global, layout, h, i, key0 + j)) {
            x = isfinite(s[j]) ? s[j] : rescore(P, Q, K, b, h, i, key0 + j, scale);
            if (MODIFIES_SCORES(P)) x = modified_score(P, x, b, h, i + P->offset, key0 + j);
            if (P->has_bias) x = add_saturating(x, bias[bias_row + j]);
        }
        s[j] = x;
        local_max = max_keep_nan(local_max, x);
    }
    const float row_max = group_max(local_max, scratch);

    /* pass 2: sum of exponentials (each work-item reads back only what it wrote) */
    const int empty = row_max == -INFINITY;
    float local_sum = 0.0f;
    for (long j = lid; !empty && j < cols; j += WG_SIZE)
        if (s[j] != -INFINITY) local_sum += exp(s[j] - row_max);
    const float row_sum = group_sum(local_sum, scratch);

    /* pass 3: P in place; masked keys exactly 0; a sink joins the sum (sink_fold) */
    float top = row_max, sum = row_sum;
    const float keep = sink_fold(P, h, &top, &sum);
    const float inv_sum = empty ? 0.0f : keep / row_sum;
    for (long j = lid; j < cols; j += WG_SIZE) {
        const float x = s[j];
        s[j] = empty || x == -INFINITY ? 0.0f : exp(x - row_max) * inv_sum;
    }
    if (lid == 0)
        store_lse(P, lse, (b * P->heads_q + h) * P->len_q + i, top, sum,
                  top == -INFINITY && sum == 0.0f);
}
