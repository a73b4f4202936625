/*
 * Merging two partial attention results of the same query rows over disjoint sets of keys
 * (clattn_attention_merge), exactly. Each LSE is a max m and a log-sum s (LSE = m + s; a plain
 * LSE is read as m with s = 0); with top = max(m, m_part) the weights are
 *
 *     w = exp(m - top + s),  w_part = exp(m_part - top + s_part),
 *     O = (w O + w_part O_part) / (w + w_part),  (m, s) = (top, log(w + w_part)).
 *
 * Keeping s apart from m (lse_parts) keeps the merge exact when |m| is so large that float32's
 * m + s has lost s (a row whose every key has a bias of -FLT_MAX). A part that saw no key
 * (m = -inf, s = -inf or 0) adds nothing; the accumulator may start there, with O = 0. NaN in
 * either stays NaN. O tensors are float32 [B, H, N, D] by element offset and strides (batch,
 * head, sequence; the dim stride is 1), LSE tensors float32 by offset and strides (in pairs
 * with `parts`). One work-item a row: it reads both LSEs before any write, so no other
 * work-item's write races with its reads.
 *
 * Tensor t of the long16 `at`: offset at[4t], strides at[4t + 1 .. 4t + 3], for t = 0 (O),
 * 1 (LSE), 2 (O_part), 3 (LSE_part).
 */
inline long merge_index(long16 at, int t, long b, long h, long i) {
    const long w[16] = {at.s0, at.s1, at.s2, at.s3, at.s4, at.s5, at.s6, at.s7,
                        at.s8, at.s9, at.sa, at.sb, at.sc, at.sd, at.se, at.sf};
    return w[4 * t] + b * w[4 * t + 1] + h * w[4 * t + 2] + i * w[4 * t + 3];
}

/* A row's (max, log sum): a pair, or a plain LSE with log sum 0. */
inline float2 lse_at(__global const float *LSE, long index, int parts) {
    return parts ? (float2)(LSE[2 * index], LSE[2 * index + 1]) : (float2)(LSE[index], 0.0f);
}

__kernel void merge_partials(__global float *O, __global float *LSE, __global const float *O_part,
                             __global const float *LSE_part, long16 at, long heads, long len,
                             long dim, int parts, long rows) {
    const long row = get_global_id(0);
    if (row >= rows) return; /* rounded up to whole work-groups (kernel_launch_padded) */
    const long b = row / (heads * len), h = (row / len) % heads, i = row % len;
    const long lse_index = merge_index(at, 1, b, h, i);
    const float2 mine = lse_at(LSE, lse_index, parts);
    const float2 part = lse_at(LSE_part, merge_index(at, 3, b, h, i), parts);
    if (part.x == -INFINITY && !isnan(part.y)) return; /* the part saw no key */
    const float top = fmax(mine.x, part.x); /* fmax skips a NaN: the weights below keep it */
    const float w_mine = mine.x == -INFINITY && !isnan(mine.y) ? 0.0f : exp(mine.x - top + mine.y);
    const float w_part = exp(part.x - top + part.y);
    const float sum = w_mine + w_part;
    __global float *o = O + merge_index(at, 0, b, h, i);
    __global const float *p = O_part + merge_index(at, 2, b, h, i);
    for (long x = 0; x < dim; x++) o[x] = (w_mine * o[x] + w_part * p[x]) / sum;
    if (parts)
        LSE[2 * lse_index] = top, LSE[2 * lse_index + 1] = log(sum);
    else
        LSE[lse_index] = top + log(sum);
}
