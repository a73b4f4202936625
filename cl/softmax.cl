/*
 * Row softmax: out[r][c] = exp(scale*x[r][c] - m_r) / sum_r, lse[r] = m_r + log(sum_r), where
 * m_r is the row maximum (numerically stable). One work-group of WG_SIZE work-items owns a
 * row; each work-item strides over the columns, so rows of any length work. A row whose
 * maximum is -inf (everything masked) gets zeros and lse = -inf.
 *
 * in/out: [rows][cols] at an element offset with a row stride; out may alias in.
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

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void softmax_rows(__global const IN_T *in, ulong in_offset, ulong in_row_stride,
                  __global OUT_T *out, ulong out_offset, ulong out_row_stride, uint cols,
                  float scale, __global float *lse, int write_lse) {
    __local float scratch[WG_SIZE];
    const ulong row = get_group_id(0);
    const int lid = get_local_id(0);
    __global const IN_T *x = in + in_offset + row * in_row_stride;
    __global OUT_T *y = out + out_offset + row * out_row_stride;

    /* pass 1: row maximum of the scaled inputs */
    float local_max = -INFINITY;
    for (uint c = lid; c < cols; c += WG_SIZE)
        local_max = max_keep_nan(local_max, scale * LOAD_IN(x, c));
    const float row_max = group_max(local_max, scratch);

    /* pass 2: sum of exponentials (an all -inf row would give exp(nan): treat it as empty) */
    const int empty = row_max == -INFINITY;
    float local_sum = 0.0f;
    for (uint c = lid; !empty && c < cols; c += WG_SIZE)
        local_sum += exp(scale * LOAD_IN(x, c) - row_max);
    const float row_sum = group_sum(local_sum, scratch);

    /* pass 3: normalise (every read of this row happened before the barrier above, so
       writing in place is safe) */
    const float inv_sum = empty ? 0.0f : 1.0f / row_sum;
    for (uint c = lid; c < cols; c += WG_SIZE) {
        float p = empty ? 0.0f : exp(scale * LOAD_IN(x, c) - row_max) * inv_sum;
        STORE_OUT(p, y, c);
    }
    if (write_lse && lid == 0) lse[row] = empty ? -INFINITY : row_max + log(row_sum);
}
