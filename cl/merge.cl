/*
 * Merging two partial attention results of the same query rows over disjoint sets of keys
 * (clattn_attention_merge), exactly: with L = log(exp(LSE) + exp(LSE_part)),
 *
 *     O   = exp(LSE - L) * O + exp(LSE_part - L) * O_part,     LSE = L.
 *
 * A partial that saw no key (LSE_part = -inf) adds nothing; the accumulator may start at
 * O = 0, LSE = -inf. NaN in either partial stays NaN. O tensors are float32 [B, H, N, D] by
 * element offset and strides (batch, head, sequence; the dim stride is 1), LSE tensors float32
 * by offset and strides (batch, head, sequence). One work-item a row: it reads both LSEs before
 * any write, so no other work-item's write races with its reads.
 *
 * Tensor t of the long16 `at`: offset at[4t], strides at[4t + 1 .. 4t + 3], for t = 0 (O),
 * 1 (LSE), 2 (O_part), 3 (LSE_part).
 */
inline long merge_index(long16 at, int t, long b, long h, long i) {
    const long w[16] = {at.s0, at.s1, at.s2, at.s3, at.s4, at.s5, at.s6, at.s7,
                        at.s8, at.s9, at.sa, at.sb, at.sc, at.sd, at.se, at.sf};
    return w[4 * t] + b * w[4 * t + 1] + h * w[4 * t + 2] + i * w[4 * t + 3];
}

__kernel void merge_partials(__global float *O, __global float *LSE, __global const float *O_part,
                             __global const float *LSE_part, long16 at, long heads, long len,
                             long dim) {
    const long row = get_global_id(0);
    const long b = row / (heads * len), h = (row / len) % heads, i = row % len;
    const long lse_at = merge_index(at, 1, b, h, i);
    const float mine = LSE[lse_at], part = LSE_part[merge_index(at, 3, b, h, i)];
    if (part == -INFINITY) return; /* the part saw no key */
    const float top = fmax(mine, part); /* fmax skips a NaN: the weights below keep it */
    const float w_mine = mine == -INFINITY ? 0.0f : exp(mine - top);
    const float w_part = exp(part - top);
    const float sum = w_mine + w_part;
    __global float *o = O + merge_index(at, 0, b, h, i);
    __global const float *p = O_part + merge_index(at, 2, b, h, i);
    for (long x = 0; x < dim; x++) o[x] = (w_mine * o[x] + w_part * p[x]) / sum;
    LSE[lse_at] = top + log(sum);
}
