/*
 * Packs K and V for the fused kernels: float32, zero-padded to dqk_pad / dv_pad and to whole
 * tiles of block_n keys, with the keys reordered so each tile is one read away:
 *
 *   Kp: [B*Hkv][slots / block_n][dqk_pad][block_n]   (each tile transposed: key along a row)
 *       or, with key_rows (the CPU variant, which broadcasts single values of K),
 *       [B*Hkv][slots][dqk_pad] like V: whole-vector copies, no transposing stores
 *   Vp: [B*Hkv][slots][dv_pad]
 *
 * What slot s holds, by `mode`:
 *   PACK_CLASSES: key j = r + m*classes with r = s / class_slots, m = s % class_slots (keys
 *                 grouped by class, see common.cl);
 *   PACK_GLOBALS: key j = gpos[s] (the global keys);
 *   PACK_TAIL:    slot s = r * block_n + n holds the n-th key of class r's last partial tile,
 *                 and only Kp and Vp are written (the tiles that reading in place would run
 *                 past a class's last key).
 * Slots without a key are zero. Work-item (s, b*Hkv + kvh). Built after tile_walk.cl, into the
 * program of the attention kernel it packs for (runtime/kernels/packed.c).
 * Packed rows start at multiples of 16 floats, so they are stored as whole float16 vectors
 * (PoCL splits vstore16 into four 16-byte stores).
 *
 * The tile shape (block_n, dqk_pad, dv_pad, key_rows) arrives as arguments and K's and V's
 * storage as P->kv_dtype (float32 in a plain program, common.cl's PLAIN_CALL): they only bound
 * loops and pick a load, in a kernel bound by memory.
 *
 * Vbad[b*Hkv + kvh][s] is 1 when the slot's V row holds a NaN or an infinity: tiles with such a
 * slot must not add 0 * V for keys a row does not see (0 * NaN is NaN).
 */
#define PACK_CLASSES 0
#define PACK_GLOBALS 1
#define PACK_TAIL    2

/* The key that slot s holds in `mode`, or NO_KEY. */
inline long slot_key(__constant attn_params *P, __global const int *gpos, int mode, int block_n,
                     long s) {
    long m;
    if (mode == PACK_GLOBALS) return s < P->num_global ? gpos[s] : NO_KEY;
    if (mode == PACK_TAIL) {
        const long r = div_rem(s, block_n, &m), keys = class_keys(P, r);
        m += keys / block_n * block_n;
        return m < keys ? r + m * P->classes : NO_KEY;
    }
    const long r = div_rem(s, P->class_slots, &m);
    return r < P->classes && m < class_keys(P, r) ? r + m * P->classes : NO_KEY;
}

/* K's row at k_row (zeros unless present) into slot s of a head's packed keys Kp: a row
 * [dqk_pad] (key_rows) or column s % block_n of its transposed tile. */
inline void pack_key_row(__constant attn_params *P, __global const void *K, long k_row,
                         int present, long s, int block_n, int dqk_pad, int key_rows,
                         __global float *Kp) {
    if (key_rows) {
        __global float16 *kr = (__global float16 *)(Kp + s * dqk_pad);
        for (int d0 = 0; d0 < dqk_pad; d0 += 16)
            kr[d0 / 16] = load_row16_as(FEATURE(P, kv_dtype), K, k_row, d0, P->dim_qk, present);
        return;
    }
    const ulong tile = (ulong)s / block_n, lane = (ulong)s % block_n;
    __global float *kt = Kp + tile * block_n * dqk_pad + lane; /* column `lane` */
    for (int d0 = 0; d0 < dqk_pad; d0 += 16) {
        float lanes[16];
        vstore16(load_row16_as(FEATURE(P, kv_dtype), K, k_row, d0, P->dim_qk, present), 0, lanes);
        for (int e = 0; e < 16; e++) kt[(d0 + e) * block_n] = lanes[e];
    }
}

__kernel void pack_keys(__constant attn_params *P, __global const void *K, __global const void *V,
                        __global const int *gpos, int mode, long slots, int block_n, int dqk_pad,
                        int dv_pad, int key_rows, __global float *Kp, __global float *Vp,
                        __global uchar *Vbad) {
    const long s = get_global_id(0), bh = get_global_id(1);
    if (s >= slots) return;
    long h;
    const long b = div_rem(bh, P->heads_kv, &h);
    const long j = slot_key(P, gpos, mode, block_n, s);
    const int present = j != NO_KEY;
    const long k_row = P->k_offset + b * P->k_stride_b + h * P->k_stride_h + j * P->k_stride_s;
    const long v_row = P->v_offset + b * P->v_stride_b + h * P->v_stride_h + j * P->v_stride_s;
    pack_key_row(P, K, k_row, present, s, block_n, dqk_pad, key_rows, Kp + bh * slots * dqk_pad);
    __global float16 *vr = (__global float16 *)(Vp + (bh * slots + s) * dv_pad);
    int bad = 0;
    for (int d0 = 0; d0 < dv_pad; d0 += 16) {
        const float16 x = load_row16_as(FEATURE(P, kv_dtype), V, v_row, d0, P->dim_v, present);
        bad |= !all(isfinite(x));
        vr[d0 / 16] = x;
    }
    if (mode != PACK_TAIL) Vbad[bh * slots + s] = bad;
}
