/*
 * The float32 FMA peak of a device, measured (clattn bench reports GEMM and attention FLOP/s
 * against it, from the same run): each work-item runs CHAINS independent chains of
 * fused multiply-adds on VEC-wide vectors, `rounds` times, and stores their sum so that
 * nothing is optimised away. FLOPs = 2 * VEC * CHAINS * rounds * work-items. Sixteen-wide
 * vectors suit CPUs (AVX-512, or pairs of AVX2 registers), where independent chains hide the
 * FMA latency; a GPU runs each lane as its own thread.
 */
#ifndef CHAINS
#define CHAINS 12
#endif
#ifndef VEC
#define VEC 16
#endif
#define VTYPE_(n) float##n
#define VTYPE(n)  VTYPE_(n)
#define FLOATV    VTYPE(VEC)

__kernel void fma_peak(int rounds, float mul, float add, __global float *out) {
    FLOATV acc[CHAINS];
    const float seed = (float)get_global_id(0) * 1e-7f;
#pragma unroll
    for (int c = 0; c < CHAINS; c++) acc[c] = (FLOATV)(seed + (float)c * 1e-3f);
    for (int r = 0; r < rounds; r++)
#pragma unroll
        for (int c = 0; c < CHAINS; c++) acc[c] = fma(acc[c], (FLOATV)mul, (FLOATV)add);
    FLOATV sum = acc[0];
#pragma unroll
    for (int c = 1; c < CHAINS; c++) sum += acc[c];
    float total = 0.0f;
    for (int i = 0; i < VEC; i++) total += ((float *)&sum)[i];
    out[get_global_id(0)] = total;
}
