/*
 * 16-bit storage (float16, bfloat16) <-> dense float32 scratch, for the gemm path: CLBlast's
 * half-precision GEMM needs cl_khr_fp16, which many devices lack, and it has no bfloat16, while
 * common.cl's LOAD_IN / STORE_OUT work everywhere (IN_DTYPE, OUT_DTYPE select the types). The
 * values are widened exactly; narrowing rounds to nearest even, as the CPU reference does.
 * Built after common.cl.
 *
 * A tensor is seen as groups of rows: group g is (b, h) = (g / heads, g % heads), and row r of
 * it starts at element offset + b*stride_b + h*stride_h + r*stride_s (the head-dim stride is 1).
 * A launch covers the groups [group0, group0 + G) and rows [row0, row0 + R) of each; scratch is
 * dense float [G][R][dim]. One work-item per element: global size (dim, R, G). The kernels
 * after widen_rows and narrow_rows have dimension 0 rounded up to whole work-groups
 * (kernel_launch_padded), so they take their size along it as an argument and skip the
 * work-items past it.
 *
 * The last four kernels keep NaN and inf in V where docs/semantics.md section 1 wants them (see
 * their section below).
 */

/* Element index in the strided tensor of (group g of the launch, row r of the launch, x). */
inline long strided_index(long offset, long stride_b, long stride_h, long stride_s, long heads,
                          long group0, long row0, long g, long r, long x) {
    const long group = group0 + g;
    return offset + (group / heads) * stride_b + (group % heads) * stride_h +
           (row0 + r) * stride_s + x;
}

/* scratch[g][r][x] = (float)src[...]: a strided IN_DTYPE tensor widened into dense float32. */
__kernel void widen_rows(__global const IN_T *src, long offset, long stride_b, long stride_h,
                         long stride_s, long heads, long group0, long row0,
                         __global float *scratch) {
    const long x = get_global_id(0), r = get_global_id(1), g = get_global_id(2);
    const long dim = get_global_size(0), rows = get_global_size(1);
    const long at =
        strided_index(offset, stride_b, stride_h, stride_s, heads, group0, row0, g, r, x);
    scratch[(g * rows + r) * dim + x] = LOAD_IN(src, at);
}

/* tensor[...] = scratch[g][r][x]: dense float32 narrowed into a strided OUT_DTYPE tensor (the
 * arguments in widen_rows' order). */
__kernel void narrow_rows(__global OUT_T *dst, long offset, long stride_b, long stride_h,
                          long stride_s, long heads, long group0, long row0,
                          __global const float *scratch) {
    const long x = get_global_id(0), r = get_global_id(1), g = get_global_id(2);
    const long dim = get_global_size(0), rows = get_global_size(1);
    const long at =
        strided_index(offset, stride_b, stride_h, stride_s, heads, group0, row0, g, r, x);
    STORE_OUT(scratch[(g * rows + r) * dim + x], dst, at);
}

/* ---------------------------------------------------------------- non-finite rows of V
 *
 * The gemm path computes O = P V with a GEMM, where 0 * NaN and 0 * inf are NaN: a NaN or inf
 * in row j of V would reach every query row of its (b, kv head), also the rows that do not see
 * key j (P[i][j] == 0), which must stay untouched. So the path flags the rows of V that hold
 * a non-finite value, multiplies P by V with those rows zeroed, and then adds
 * P[i][j] * V[j][:] back only where P[i][j] != 0.
 *
 * V is read as float32 (the caller's tensor, or the widened scratch of a float16 one) with the
 * addressing above, group g = b * Hkv + kvh, heads = Hkv. A "row" number is g * len + j: key j
 * of group g, len = Nk.
 */

/* flags[g][r] = 1 when row r of group g holds a NaN or an infinity, else 0: one pass over V.
 * One work-item per row: global size (len, G). */
__kernel void flag_nonfinite_rows(__global const float *src, long offset, long stride_b,
                                  long stride_h, long stride_s, long heads, long dim, long len,
                                  __global uchar *flags) {
    const long r = get_global_id(0), g = get_global_id(1);
    if (r >= len) return;
    const long at = strided_index(offset, stride_b, stride_h, stride_s, heads, 0, 0, g, r, 0);
    int bad = 0;
    for (long x = 0; x < dim; x++) bad |= !isfinite(src[at + x]);
    flags[g * len + r] = (uchar)bad;
}

/* dst[k][x] = the listed row rows[k] of src: [count][dim] copies of the flagged rows, taken
 * before zero_flagged_rows clears them. Global size (dim, count). */
__kernel void gather_rows(__global const float *src, long offset, long stride_b, long stride_h,
                          long stride_s, long heads, long len, long dim, __global const uint *rows,
                          __global float *dst) {
    const long x = get_global_id(0), k = get_global_id(1);
    if (x >= dim) return;
    const long row = rows[k];
    const long at =
        strided_index(offset, stride_b, stride_h, stride_s, heads, 0, 0, row / len, row % len, x);
    dst[k * dim + x] = src[at];
}

/* dst[g][r][x] = src[...], or 0 where flags[g][r]: V with its flagged rows zeroed, as dense
 * float32 [G][len][dim]. dst may be src itself when src is that dense scratch: each
 * work-item reads and writes only its own element. Global size (dim, len, G). */
__kernel void zero_flagged_rows(__global const float *src, long offset, long stride_b,
                                long stride_h, long stride_s, long heads, long dim,
                                __global const uchar *flags, __global float *dst) {
    const long x = get_global_id(0), r = get_global_id(1), g = get_global_id(2);
    const long len = get_global_size(1);
    if (x >= dim) return;
    const long at = strided_index(offset, stride_b, stride_h, stride_s, heads, 0, 0, g, r, x);
    const long row = g * len + r;
    dst[row * dim + x] = flags[row] ? 0.0f : src[at];
}

/*
 * The flagged keys' share of O, after O = P V0 of a chunk (V0: V with the flagged rows
 * zeroed): o[i][x] += sum of P[i][j] * V[j][x] over the flagged keys j of the row's kv head
 * with P[i][j] != 0. Rows that do not see a flagged key are not touched at all.
 *
 * scores: the chunk's P, [G][R][keys] float over the keys [key0, key0 + keys); chunk group g
 *         is group0 + g = b * heads_q + h and reads kv group b * heads_kv + h / (heads_q /
 *         heads_kv). A flagged key outside the chunk's keys has P = 0 for all its rows.
 * start:  [B * heads_kv + 1]: kv group q's flagged rows are rows[start[q] .. start[q + 1]),
 *         each q * len + j; values: [count][dim], their original values (gather_rows).
 * o:      the chunk's output rows, addressed as in narrow_rows (o_heads, o_group0, o_row0):
 *         the caller's float32 O, or the dense float32 chunk of a float16 O.
 * One work-item per output element: global size (dim, R, G).
 */
__kernel void add_flagged_keys(__global const float *scores, long group0, long key0, long keys,
                               long heads_q, long heads_kv, long len, long dim,
                               __global const uint *start, __global const uint *rows,
                               __global const float *values, __global float *o, long o_offset,
                               long o_stride_b, long o_stride_h, long o_stride_s, long o_heads,
                               long o_group0, long o_row0) {
    const long x = get_global_id(0), r = get_global_id(1), g = get_global_id(2);
    const long R = get_global_size(1);
    if (x >= dim) return;
    const long group = group0 + g, b = group / heads_q, h = group % heads_q;
    const long kv = b * heads_kv + h / (heads_q / heads_kv);
    __global const float *p = scores + (g * R + r) * keys; /* p[c] is key key0 + c */
    float add = 0.0f;
    int seen = 0;
    for (uint k = start[kv]; k < start[kv + 1]; k++) {
        const long c = (long)rows[k] - kv * len - key0;
        if (c < 0 || c >= keys || p[c] == 0.0f) continue;
        add += p[c] * values[k * dim + x]; /* NaN or inf where V[j][x] is */
        seen = 1;
    }
    if (!seen) return;
    const long at = strided_index(o_offset, o_stride_b, o_stride_h, o_stride_s, o_heads, o_group0,
                                  o_row0, g, r, x);
    o[at] += add;
}
