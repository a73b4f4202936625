/*
 * Packs K and V for the fused kernels: float32, zero-padded to DQK_PAD / DV_PAD and to whole
 * tiles of BLOCK_N keys, with the keys reordered so each tile is one read away:
 *
 *   Kp: [B*Hkv][slots / BLOCK_N][DQK_PAD][BLOCK_N]   (each tile transposed: key along a row)
 *       or, with KEY_ROWS (the CPU variant, which broadcasts single values of K),
 *       [B*Hkv][slots][DQK_PAD] like V: whole-vector copies, no transposing stores
 *   Vp: [B*Hkv][slots][DV_PAD]
 *
 * Slot s holds key j = r + m*classes with r = s / class_slots, m = s % class_slots (keys
 * grouped by class, see common.cl), or, when from_list is set, j = gpos[s] (the global keys).
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

__kernel void pack_keys(__constant attn_params *P, __global const IN_T *K, __global const IN_T *V,
                        __global const int *gpos, int from_list, long slots, __global float *Kp,
                        __global float *Vp, __global uchar *Vbad) {
    const long s = get_global_id(0), bh = get_global_id(1);
    if (s >= slots) return;
    long h, m;
    const long b = div_rem(bh, P->heads_kv, &h);
    long j = NO_KEY;
    if (from_list) {
        if (s < P->num_global) j = gpos[s];
    } else {
        long r = div_rem(s, P->class_slots, &m);
        if (r < P->classes && m < class_keys(P, r)) j = r + m * P->classes;
    }
    const int present = j != NO_KEY;
    const long k_row = P->k_offset + b * P->k_stride_b + h * P->k_stride_h + j * P->k_stride_s;
    const long v_row = P->v_offset + b * P->v_stride_b + h * P->v_stride_h + j * P->v_stride_s;
#if KEY_ROWS
    __global float16 *kr = (__global float16 *)(Kp + (bh * slots + s) * DQK_PAD);
    for (int d0 = 0; d0 < DQK_PAD; d0 += 16)
        kr[d0 / 16] = load_row16(K, k_row, d0, P->dim_qk, present);
#else
    const ulong tile = (ulong)s / BLOCK_N, lane = (ulong)s % BLOCK_N;
    __global float *kt = Kp + (bh * slots + tile * BLOCK_N) * DQK_PAD + lane; /* column `lane` */
    for (int d0 = 0; d0 < DQK_PAD; d0 += 16) {
        float lanes[16];
        vstore16(load_row16(K, k_row, d0, P->dim_qk, present), 0, lanes);
        for (int e = 0; e < 16; e++) kt[(d0 + e) * BLOCK_N] = lanes[e];
    }
#endif
    __global float16 *vr = (__global float16 *)(Vp + (bh * slots + s) * DV_PAD);
    int bad = 0;
    for (int d0 = 0; d0 < DV_PAD; d0 += 16) {
        const float16 x = load_row16(V, v_row, d0, P->dim_v, present);
        bad |= !all(isfinite(x));
        vr[d0 / 16] = x;
    }
    Vbad[bh * slots + s] = bad;
}
