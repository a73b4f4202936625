/*
 * clattn's own GEMM, shaped for CPU devices (the `panels` row of the GEMM table,
 * runtime/gemm/panels.c), for each entry e of a batch:
 *
 *     C[m][n] = alpha * A[m][k] B[k][n]  (+ C when BETA_ONE)
 *
 * A: float32 rows read in place (row stride lda). B: packed panels [n_pad / NR][k][NR], NR
 * consecutive columns of one k next to each other, stored as W_DTYPE (float32, float16 or
 * bfloat16) and widened in registers: the layer's weights are packed once on the host in their
 * storage type, other operands by pack_panels below (float32). C: float32 rows (row stride ldc).
 *
 * A work-item (work-groups of one) computes a block of BLOCK_M rows and BLOCK_N columns of C,
 * one micro-tile of MR rows and NR = 16 * NV columns at a time over the whole of k: MR x NV
 * vector accumulators, per k NV vector loads of the panel and MR broadcasts of A. Register
 * budget (32 zmm on AVX-512): MR * NV accumulators + NV + 1 <= 32. The panel ([k][NR]) is read
 * again by each of the block's BLOCK_M / MR micro-tiles while it sits in the cache; A's block
 * rows by each of its BLOCK_N / NR panels.
 *
 * Batches address each operand as base + (g / heads) * s_batch + ((g % heads) / group) *
 * s_head + i * s_item for entry i, g = first + i (the attention's (b, h) groups, GQA through
 * `group`, which only B's addressing divides by); a single GEMM passes zeros.
 *
 * Rows past m read row m - 1 and store nothing; columns past n are the panels' zero padding
 * and are not stored. No -cl-fast-relaxed-math: NaN and infinities pass through as IEEE says.
 */
#ifndef MR
#define MR 8 /* rows of a micro-tile */
#endif
#ifndef NV
#define NV 2 /* 16-lane vectors across a micro-tile */
#endif
#define NR (16 * NV) /* columns of a micro-tile, and of a panel */
#ifndef BLOCK_M
#define BLOCK_M 64 /* rows of a work-item's block, a multiple of MR */
#endif
#ifndef BLOCK_N
#define BLOCK_N 128 /* columns of a work-item's block, a multiple of NR */
#endif
#ifndef W_DTYPE
#define W_DTYPE 0 /* the panels' storage: 0 float32, 1 float16, 2 bfloat16 (clattn_dtype) */
#endif
#ifndef BETA_ONE
#define BETA_ONE 0 /* 1: C += alpha * A B */
#endif

#if defined(__OPENCL_C_VERSION__) && __OPENCL_C_VERSION__ >= 120
#define GEMM_INLINE static inline __attribute__((always_inline))
#else
#define GEMM_INLINE inline __attribute__((always_inline))
#endif

/* 16 float16 bit patterns widened exactly with integer operations (subnormals, infinities and
 * NaN included), which CPU compilers turn into a few vector instructions. */
GEMM_INLINE float16 widen_half16(ushort16 h) {
    const uint16 x = convert_uint16(h);
    const uint16 exp = x & 0x7c00u;
    uint16 o = ((x & 0x7fffu) << 13) + (112u << 23);
    o = select(o, o + (112u << 23), exp == 0x7c00u);
    const int16 tiny = convert_int16(exp == 0u);
    float16 f = as_float16(select(o, o + (1u << 23), convert_uint16(tiny)));
    f = select(f, f - as_float16((uint16)(113u << 23)), tiny);
    return as_float16(as_uint16(f) | ((x & 0x8000u) << 16));
}

#if W_DTYPE == 1
#define PANEL_T     ushort16
#define WIDEN(x)    widen_half16(x)
#elif W_DTYPE == 2
#define PANEL_T     ushort16
#define WIDEN(x)    as_float16(convert_uint16(x) << 16)
#else
#define PANEL_T     float16
#define WIDEN(x)    (x)
#endif

/* Where entry i of a batch starts in an operand. */
GEMM_INLINE long entry_base(long base, long s_batch, long s_head, long s_item, long i, long first,
                            long heads, long group) {
    const long g = first + i;
    return base + (g / heads) * s_batch + ((g % heads) / group) * s_head + i * s_item;
}

/* acc[MR][NV] = A rows [MR][k] x panel [k][NR]; a[r] points at row r of A. */
GEMM_INLINE void micro_tile(__global const float *a[MR], __global const PANEL_T *panel, long k,
                            float16 acc[MR][NV]) {
#pragma unroll
    for (int r = 0; r < MR; r++)
#pragma unroll
        for (int v = 0; v < NV; v++) acc[r][v] = (float16)0.0f;
    for (long p = 0; p < k; p++) {
        float16 b[NV];
#pragma unroll
        for (int v = 0; v < NV; v++) b[v] = WIDEN(panel[p * NV + v]);
#pragma unroll
        for (int r = 0; r < MR; r++) {
            const float16 x = (float16)a[r][p];
#pragma unroll
            for (int v = 0; v < NV; v++) acc[r][v] = fma(x, b[v], acc[r][v]);
        }
    }
}

/* Row r of a micro-tile into C: `cols` valid columns from c on. */
GEMM_INLINE void store_row(__global float *c, const float16 acc[NV], long cols, float alpha) {
    if (cols >= NR) {
#pragma unroll
        for (int v = 0; v < NV; v++) {
            float16 out = alpha * acc[v];
#if BETA_ONE
            out += vload16(v, c);
#endif
            vstore16(out, v, c);
        }
        return;
    }
    for (int v = 0; v < NV; v++) {
        float lanes[16];
        vstore16(alpha * acc[v], 0, lanes);
        for (int j = 0; j < 16 && v * 16 + j < cols; j++) {
#if BETA_ONE
            c[v * 16 + j] += lanes[j];
#else
            c[v * 16 + j] = lanes[j];
#endif
        }
    }
}

/* Global size: (row blocks, column blocks, batch entries); work-groups of one. */
__kernel void gemm_panels(long m, long n, long k, float alpha, long first, long heads, long group,
                          __global const float *A, long a_off, long lda, long a_sb, long a_sh,
                          long a_si, __global const PANEL_T *B, long b_off, long b_sb, long b_sh,
                          long b_si, __global float *C, long c_off, long ldc, long c_sb, long c_sh,
                          long c_si) {
    const long i0 = get_global_id(0) * BLOCK_M, j0 = get_global_id(1) * BLOCK_N;
    const long e = get_global_id(2);
    if (i0 >= m || j0 >= n) return;
    __global const float *a_entry = A + entry_base(a_off, a_sb, a_sh, a_si, e, first, heads, 1);
    /* b_off and the strides count PANEL_T vectors: 16 values each */
    __global const PANEL_T *b_entry =
        B + entry_base(b_off, b_sb, b_sh, b_si, e, first, heads, group);
    __global float *c_entry = C + entry_base(c_off, c_sb, c_sh, c_si, e, first, heads, 1);
    const long j_end = min(j0 + (long)BLOCK_N, n), i_end = min(i0 + (long)BLOCK_M, m);
    for (long j = j0; j < j_end; j += NR) {
        __global const PANEL_T *panel = b_entry + (j / NR) * k * NV;
        for (long i = i0; i < i_end; i += MR) {
            __global const float *a[MR];
#pragma unroll
            for (int r = 0; r < MR; r++) a[r] = a_entry + min(i + r, m - 1) * lda;
            float16 acc[MR][NV];
            micro_tile(a, panel, k, acc);
#pragma unroll
            for (int r = 0; r < MR; r++)
                if (i + r < i_end) store_row(c_entry + (i + r) * ldc + j, acc[r], j_end - j, alpha);
        }
    }
}

/* B of each batch entry into float32 panels dst[i][n_pad / NR][k][NR], zeros past n. B is
 * [k][n] (element (p, j) at p * ldb + j) or, TRANSPOSED, [n][k] (at j * ldb + p).
 * Global size: (NR, k, panels * entries). */
__kernel void pack_panels(long n, long k, long first, long heads, long group, int transposed,
                          __global const float *B, long b_off, long ldb, long b_sb, long b_sh,
                          long b_si, __global float *dst) {
    const long j = get_global_id(0), p = get_global_id(1);
    const long panels = (n + NR - 1) / NR, e = get_global_id(2) / panels;
    const long col = (get_global_id(2) % panels) * NR + j;
    __global const float *b = B + entry_base(b_off, b_sb, b_sh, b_si, e, first, heads, group);
    float x = 0.0f;
    if (col < n) x = transposed ? b[col * ldb + p] : b[p * ldb + col];
    dst[((e * panels + col / NR) * k + p) * NR + j] = x;
}
