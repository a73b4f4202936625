/*
 * The smallest kernel found that shows why Mesa rusticl (22.3.6, llvmpipe) does not finish
 * building clattn's lanes kernel: lanes.cl's exp2_nonpositive, 2^x on 16 lanes by Cephes'
 * polynomial with the exponent added into the float bits (as_int16 and a shift), applied over a
 * private array of float16 in a loop. clBuildProgram takes 0.1 s; clCreateKernel, where rusticl
 * compiles through NIR, took 32 to 42 s whatever BLOCK_N (4, 8, 32: the loop is not unrolled),
 * at 390 MB; the same kernel on float4 took 4.5 s, and with the builtin exp2 for the exponent
 * in place of the bit trick 29 s, so the cost is the 16-wide arithmetic itself (llvmpipe
 * prefers float vectors of width 1). PoCL builds it in 5.3 s (clBuildProgram, cold). The lanes
 * kernel inlines this function twice in each of its three copies of the tile step, among more
 * 16-wide code, and its clCreateKernel had not returned after 5 minutes; with the builtin exp2
 * in its place, one copy of the tile step was created in 16 s. Run it with tests/compilers/create_kernel:
 *
 *   OCL_ICD_VENDORS=FOLDER_WITH_rusticl.icd RUSTICL_ENABLE=llvmpipe MESA_SHADER_CACHE_DISABLE=1 \
 *     build/tests/create_kernel tests/compilers/rusticl_exp2_poly.cl exp2_rows -DBLOCK_N=4
 */
#ifndef BLOCK_N
#define BLOCK_N 32
#endif
float16 exp2_nonpositive(float16 x) {
    const float16 round = (float16)12582912.0f; /* 1.5 * 2^23 */
    const float16 xc = fmax(x, (float16)(-127.0f));
    const float16 shifted = xc + round;
    const float16 f = xc - (shifted - round);
    float16 p = (float16)1.535336188319500e-4f;
    p = fma(p, f, (float16)1.339887440266574e-3f);
    p = fma(p, f, (float16)9.618437357674640e-3f);
    p = fma(p, f, (float16)5.550332471162809e-2f);
    p = fma(p, f, (float16)2.402264791363012e-1f);
    p = fma(p, f, (float16)6.931472028550421e-1f);
    p = fma(p, f, (float16)1.0f);
    const float16 r = as_float16(as_int16(p) + (as_int16(shifted) << 23));
    return select(r, x, isnan(x));
}

__kernel void exp2_rows(__global const float *in, __global float *out) {
    float16 s[BLOCK_N];
    for (int j = 0; j < BLOCK_N; j++) s[j] = vload16(j, in);
    float16 sum = (float16)0.0f;
    for (int j = 0; j < BLOCK_N; j++) {
        const float16 p = exp2_nonpositive(s[j]);
        sum += p;
        s[j] = p;
    }
    for (int j = 0; j < BLOCK_N; j++) vstore16(s[j] / sum, j, out);
}
