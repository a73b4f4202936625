/*
 * Packs K and V for the fused kernels: float32, zero-padded to DQK_PAD / DV_PAD and to whole
 * tiles of BLOCK_N keys, with the keys reordered so each tile is one read away:
 *
 *   Kp: [B*Hkv][slots / BLOCK_N][DQK_PAD][BLOCK_N]   (each tile transposed: key along a row)
 *   Vp: [B*Hkv][slots][DV_PAD]
 *
 * Slot s holds key j = r + m*classes with r = s / class_slots, m = s % class_slots (keys
 * grouped by class, see common.cl), or, when from_list is set, j = gpos[s] (the global keys).
 * Slots without a key are zero. Work-item (s, b*Hkv + kvh). Built after fused_common.cl.
 *
 * Vbad[b*Hkv + kvh][s] is 1 when the slot's V row holds a NaN or an infinity: tiles with such a
 * slot must not add 0 * V for keys a row does not see (0 * NaN is NaN).
 */
/* 16 values of a row from d0 on, zero past `dim` and for a missing key. */
ALWAYS_INLINE float16 load_row16(__global const IN_T *x, long row, long d0, long dim, int present) {
    if (!present || d0 >= dim) return (float16)0.0f;
    if (d0 + 16 <= dim) return LOAD16_IN(x, row + d0);
    float lanes[16];
    for (int e = 0; e < 16; e++) lanes[e] = d0 + e < dim ? LOAD_IN(x, row + d0 + e) : 0.0f;
    return vload16(0, lanes);
}

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
    const ulong tile = (ulong)s / BLOCK_N, lane = (ulong)s % BLOCK_N;
    __global float *kt = Kp + (bh * slots + tile * BLOCK_N) * DQK_PAD + lane; /* column `lane` */
    __global float *vr = Vp + (bh * slots + s) * DV_PAD;
    const long k_row = P->k_offset + b * P->k_stride_b + h * P->k_stride_h + j * P->k_stride_s;
    const long v_row = P->v_offset + b * P->v_stride_b + h * P->v_stride_h + j * P->v_stride_s;
    for (int d0 = 0; d0 < DQK_PAD; d0 += 16) {
        float lanes[16];
        vstore16(load_row16(K, k_row, d0, P->dim_qk, present), 0, lanes);
        for (int e = 0; e < 16; e++) kt[(d0 + e) * BLOCK_N] = lanes[e];
    }
    int bad = 0;
    for (int d0 = 0; d0 < DV_PAD; d0 += 16) {
        const float16 x = load_row16(V, v_row, d0, P->dim_v, present);
        bad |= !all(isfinite(x));
        vstore16(x, d0 / 16, vr);
    }
    Vbad[bh * slots + s] = bad;
}
