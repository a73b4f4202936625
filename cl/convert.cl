/*
 * float16 storage <-> dense float32 scratch, for the gemm path: CLBlast's half-precision GEMM
 * needs cl_khr_fp16, which many devices lack, while vload_half / vstore_half work everywhere.
 * The values are widened exactly; narrowing rounds to nearest even (vstore_half's default), as
 * the CPU reference does.
 *
 * A tensor is seen as groups of rows: group g is (b, h) = (g / heads, g % heads), and row r of
 * it starts at element offset + b*stride_b + h*stride_h + r*stride_s (the head-dim stride is 1).
 * A launch covers the groups [group0, group0 + G) and rows [row0, row0 + R) of each; scratch is
 * dense float [G][R][dim]. One work-item per element: global size (dim, R, G).
 */

/* Element index in the strided tensor of (group g of the launch, row r of the launch, x). */
inline long strided_index(long offset, long stride_b, long stride_h, long stride_s, long heads,
                          long group0, long row0, long g, long r, long x) {
    const long group = group0 + g;
    return offset + (group / heads) * stride_b + (group % heads) * stride_h +
           (row0 + r) * stride_s + x;
}

/* scratch[g][r][x] = (float)src[...]: a strided float16 tensor widened into dense float32. */
__kernel void widen_rows(__global const half *src, long offset, long stride_b, long stride_h,
                         long stride_s, long heads, long group0, long row0,
                         __global float *scratch) {
    const long x = get_global_id(0), r = get_global_id(1), g = get_global_id(2);
    const long dim = get_global_size(0), rows = get_global_size(1);
    const long at = strided_index(offset, stride_b, stride_h, stride_s, heads, group0, row0, g,
                                  r, x);
    scratch[(g * rows + r) * dim + x] = vload_half(at, src);
}

/* tensor[...] = (half)scratch[g][r][x]: dense float32 narrowed into a strided float16 tensor
 * (the arguments in widen_rows' order). */
__kernel void narrow_rows(__global half *dst, long offset, long stride_b, long stride_h,
                          long stride_s, long heads, long group0, long row0,
                          __global const float *scratch) {
    const long x = get_global_id(0), r = get_global_id(1), g = get_global_id(2);
    const long dim = get_global_size(0), rows = get_global_size(1);
    const long at = strided_index(offset, stride_b, stride_h, stride_s, heads, group0, row0, g,
                                  r, x);
    vstore_half(scratch[(g * rows + r) * dim + x], at, dst);
}
