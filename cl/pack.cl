/*
 * Packs K and V for the fused kernels: float32, zero-padded to DQK_PAD / DV_PAD and to whole
 * tiles of BLOCK_N keys, with the keys reordered so each tile is one read away:
 *
 *   Kp: [B*Hkv][slots / BLOCK_N][DQK_PAD][BLOCK_N]   (each tile transposed: key along a row)
 *       or, with KEY_ROWS (the CPU variant, which broadcasts single values of K),
 *       [B*Hkv][slots][DQK_PAD] like V: whole-vector copies, no transposing stores
 *   Vp: [B*Hkv][slots][DV_PAD]
 *
 * What slot s holds, by `mode`:
 *   PACK_CLASSES: key j = r + m*classes with r = s / class_slots, m = s % class_slots (keys
 *                 grouped by class, see common.cl);
 *   PACK_GLOBALS: key j = gpos[s] (the global keys);
 *   PACK_FLAGS:   as PACK_CLASSES, but only Vbad is written (the kernel reads K and V in place);
 *   PACK_TAIL:    slot s = r * BLOCK_N + n holds the n-th key of class r's last partial tile,
 *                 and only Kp and Vp are written (the tiles that reading in place would run
 *                 past a class's last key).
 * Slots without a key are zero. Work-item (s, b*Hkv + kvh). Built after tile_walk.cl.
 * Packed rows start at multiples of 16 floats, so they are stored as whole float16 vectors
 * (PoCL splits vstore16 into four 16-byte stores).
 *
 * Vbad[b*Hkv + kvh][s] is 1 when the slot's V row holds a NaN or an infinity: tiles with such a
 * slot must not add 0 * V for keys a row does not see (0 * NaN is NaN).
 */
#ifndef KEY_ROWS
#define KEY_ROWS 0
#endif

/* 16 values of a row from d0 on, zero past `dim` and for a missing key. */
ALWAYS_INLINE float16 load_row16(__global const IN_T *x, long row, long d0, long dim, int present) {
    if (!present || d0 >= dim) return (float16)0.0f;
    if (d0 + 16 <= dim) return LOAD16_IN(x, row + d0);
    float lanes[16];
    for (int e = 0; e < 16; e++) lanes[e] = d0 + e < dim ? LOAD_IN(x, row + d0 + e) : 0.0f;
    return vload16(0, lanes);
}

#define PACK_CLASSES 0
#define PACK_GLOBALS 1
#define PACK_FLAGS   2
#define PACK_TAIL    3

/* The key that slot s holds in `mode`, or NO_KEY. */
inline long slot_key(__constant attn_params *P, __global const int *gpos, int mode, long s) {
    long m;
    if (mode == PACK_GLOBALS) return s < P->num_global ? gpos[s] : NO_KEY;
    if (mode == PACK_TAIL) {
        const long r = div_rem(s, BLOCK_N, &m), keys = class_keys(P, r);
        m += keys / BLOCK_N * BLOCK_N;
        return m < keys ? r + m * P->classes : NO_KEY;
    }
    const long r = div_rem(s, P->class_slots, &m);
    return r < P->classes && m < class_keys(P, r) ? r + m * P->classes : NO_KEY;
}

/* K's row at k_row (zeros unless present) into slot s of a head's packed keys Kp: a row
 * [DQK_PAD] (KEY_ROWS) or column s % BLOCK_N of its transposed tile. */
inline void pack_key_row(__constant attn_params *P, __global const IN_T *K, long k_row, int present,
                         long s, __global float *Kp) {
#if KEY_ROWS
    __global float16 *kr = (__global float16 *)(Kp + s * DQK_PAD);
    for (int d0 = 0; d0 < DQK_PAD; d0 += 16)
        kr[d0 / 16] = load_row16(K, k_row, d0, P->dim_qk, present);
#else
    const ulong tile = (ulong)s / BLOCK_N, lane = (ulong)s % BLOCK_N;
    __global float *kt = Kp + tile * BLOCK_N * DQK_PAD + lane; /* column `lane` */
    for (int d0 = 0; d0 < DQK_PAD; d0 += 16) {
        float lanes[16];
        vstore16(load_row16(K, k_row, d0, P->dim_qk, present), 0, lanes);
        for (int e = 0; e < 16; e++) kt[(d0 + e) * BLOCK_N] = lanes[e];
    }
#endif
}

__kernel void pack_keys(__constant attn_params *P, __global const IN_T *K, __global const IN_T *V,
                        __global const int *gpos, int mode, long slots, __global float *Kp,
                        __global float *Vp, __global uchar *Vbad) {
    const long s = get_global_id(0), bh = get_global_id(1);
    if (s >= slots) return;
    long h;
    const long b = div_rem(bh, P->heads_kv, &h);
    const long j = slot_key(P, gpos, mode, s);
    const int present = j != NO_KEY, rows = mode != PACK_FLAGS;
    const long k_row = P->k_offset + b * P->k_stride_b + h * P->k_stride_h + j * P->k_stride_s;
    const long v_row = P->v_offset + b * P->v_stride_b + h * P->v_stride_h + j * P->v_stride_s;
    if (rows) pack_key_row(P, K, k_row, present, s, Kp + bh * slots * DQK_PAD);
    __global float16 *vr = (__global float16 *)(Vp + (bh * slots + s) * DV_PAD);
    int bad = 0;
    for (int d0 = 0; d0 < DV_PAD; d0 += 16) {
        const float16 x = load_row16(V, v_row, d0, P->dim_v, present);
        bad |= !all(isfinite(x));
        if (rows) vr[d0 / 16] = x;
    }
    if (mode != PACK_TAIL) Vbad[bh * slots + s] = bad;
}
