/*
 * Row softmax: out[r][c] = exp(scale*x[r][c] - m_r) / sum_r, lse[r] = m_r + log(sum_r), where
 * m_r is the row maximum (numerically stable). One work-group of WG_SIZE work-items owns a
 * row; each work-item strides over the columns, so rows of any length work. A row whose
 * maximum is -inf (everything masked) gets zeros and lse = -inf.
 *
 * in/out: [rows][cols] at an element offset with a row stride; out may alias in.
 *
 * softmax_masked is the gemm path's step between its two GEMMs: the same three passes over a
 * chunk of attention scores, with the bias and every mask of docs/semantics.md section 2
 * (common.cl).
 */
#ifndef WG_SIZE
#define WG_SIZE 256
#endif

/* The larger of a and b, NaN when either is NaN (fmax would drop it and turn a row of NaN
 * into an empty row). */
inline float max_keep_nan(float a, float b) {
    return isnan(a) || a > b ? a : b;
}

/* Tree reduction over the work-group; `scratch` is [WG_SIZE] local floats. */
inline float group_max(float value, __local float *scratch) {
    int lid = get_local_id(0);
    scratch[lid] = value;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int half_size = WG_SIZE / 2; half_size > 0; half_size /= 2) {
        if (lid < half_size) scratch[lid] = max_keep_nan(scratch[lid], scratch[lid + half_size]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float result = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return result;
}

inline float group_sum(float value, __local float *scratch) {
    int lid = get_local_id(0);
    scratch[lid] = value;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int half_size = WG_SIZE / 2; half_size > 0; half_size /= 2) {
        if (lid < half_size) scratch[lid] += scratch[lid + half_size];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float result = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return result;
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
softmax_rows(__global const IN_T *in, ulong in_offset, ulong in_row_stride, __global OUT_T *out,
             ulong out_offset, ulong out_row_stride, uint cols, float scale, __global float *lse,
             int write_lse) {
    __local float scratch[WG_SIZE];
    const ulong row = get_group_id(0);
    const int lid = get_local_id(0);
    __global const IN_T *x = in + in_offset + row * in_row_stride;
    __global OUT_T *y = out + out_offset + row * out_row_stride;

    /* pass 1: row maximum of the scaled inputs */
    float local_max = -INFINITY;
    for (uint c = lid; c < cols; c += WG_SIZE)
        local_max = max_keep_nan(local_max, mul_saturating(scale, LOAD_IN(x, c)));
    const float row_max = group_max(local_max, scratch);

    /* pass 2: sum of exponentials (an all -inf row would give exp(nan): treat it as empty) */
    const int empty = row_max == -INFINITY;
    float local_sum = 0.0f;
    for (uint c = lid; !empty && c < cols; c += WG_SIZE)
        local_sum += exp(mul_saturating(scale, LOAD_IN(x, c)) - row_max);
    const float row_sum = group_sum(local_sum, scratch);

    /* pass 3: normalise (every read of this row happened before the barrier above, so
       writing in place is safe) */
    const float inv_sum = empty ? 0.0f : 1.0f / row_sum;
    for (uint c = lid; c < cols; c += WG_SIZE) {
        float p = empty ? 0.0f : exp(mul_saturating(scale, LOAD_IN(x, c)) - row_max) * inv_sum;
        STORE_OUT(p, y, c);
    }
    if (write_lse && lid == 0) lse[row] = empty ? -INFINITY : row_max + log(row_sum);
}

/*
 * The gemm path's masked softmax, in place over a chunk of scores S = scale * Q K^T.
 *
 * scores: [G][R][keys] float, dense: G (b, h) groups of the chunk, the first being group0
 *         (b = group / heads_q, h = group % heads_q), R query rows of each from row0, and the
 *         keys [key0, key0 + keys) the chunk's rows may see (the GEMMs skip the others).
 * Adds bias[b, h, i, j] (zero strides broadcast), applies every mask of docs/semantics.md section 2
 * through mask_allowed, and writes P over S. A disallowed key gets exactly 0 (never exp of NaN), so
 * that P V sums only allowed values; a row with no allowed key (or only -inf scores) gets
 * P = 0 and LSE = -inf; a NaN among the allowed scores makes the row's P and LSE NaN.
 * lse: [B][Hq][Nq] float, natural log, written when P->write_lse.
 * Q, K: the caller's tensors (IN_T storage) and `scale`: an allowed score the GEMM left
 * non-finite (its float32 sum overflowed on the way) is summed again without overflow
 * (rescore), so that it is an infinity only when scale * q.k is (docs/semantics.md section 9).
 * One work-group per row: global (WG_SIZE * R, G), local (WG_SIZE, 1).
 */

/* scale * dot(Q[b,h,i,:], K[b,kvh,j,:]) without overflow on the way (common.cl, rescored). */
inline float rescore(__constant attn_params *P, __global const IN_T *Q, __global const IN_T *K,
                     long b, long h, long i, long j, float scale) {
    const long kvh = h / (P->heads_q / P->heads_kv);
    const long q = P->q_offset + b * P->q_stride_b + h * P->q_stride_h + i * P->q_stride_s;
    const long k = P->k_offset + b * P->k_stride_b + kvh * P->k_stride_h + j * P->k_stride_s;
    float2 dot = (float2)0.0f;
    for (long d = 0; d < P->dim_qk; d++)
        dot = rescore_add(dot, LOAD_IN(Q, q + d), LOAD_IN(K, k + d));
    return rescore_end(dot, scale);
}

/* The masked softmax works on vectors of SV keys aligned to the keys' own indices: vector `av`
 * holds keys [av * SV, av * SV + SV), and work-item av % WG_SIZE owns it in every pass. So each
 * key's exponential is summed in the same lane of the same work-item, in the same order,
 * whatever range of keys a chunk covers (a key outside it adds an exact 0): the result does not
 * depend on the chunking. Full vectors are float16 loads and stores, which CPU compilers keep in
 * vector registers and GPUs read coalesced. */
#define SV 16

/* The largest of 16 values that hold no NaN. */
inline float max16(float16 x) {
    const float8 a = fmax(x.lo, x.hi);
    const float4 b = fmax(a.lo, a.hi);
    const float2 c = fmax(b.lo, b.hi);
    return fmax(c.lo, c.hi);
}

inline float sum16(float16 x) {
    const float8 a = x.lo + x.hi;
    const float4 b = a.lo + a.hi;
    const float2 c = b.lo + b.hi;
    return c.lo + c.hi;
}

/* The first aligned vector work-item lid owns among those from first_av on. */
inline long first_owned(long first_av, int lid) {
    return first_av + (long)((lid - (int)(first_av % WG_SIZE) + WG_SIZE) % WG_SIZE);
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
softmax_masked(__constant attn_params *P, __global float *scores, long group0, long row0, long key0,
               long keys, __global const float *bias, __global const uchar *is_global,
               __global const uchar *layout, __global float *lse, __global const IN_T *Q,
               __global const IN_T *K, float scale) {
    __local float scratch[WG_SIZE];
    const long rows = get_num_groups(0), r = get_group_id(0), g = get_global_id(1);
    const int lid = get_local_id(0);
    const long group = group0 + g, b = group / P->heads_q, h = group % P->heads_q;
    const long i = row0 + r, cols = keys;
    __global float *s = scores + (g * rows + r) * cols; /* s[c] is key key0 + c */
    const long bias_row = P->has_bias ? P->bias_offset + b * P->bias_stride_b +
                                            h * P->bias_stride_h + i * P->bias_stride_s + key0
                                      : 0;
    const int16 lane = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);

    /* pass 1: bias and masks, written back (-inf where masked), and the row maximum. Without a
       block layout, global tokens or dilation (causality and a window only), the keys the row
       may see are one range [lo, hi], found once (mask_allowed's rules, mask_rules.h), and a
       vector of finite scores without a bias or a score modifier is masked in registers;
       anything else (a tail, a non-finite score to rescore) goes key by key */
    const int one_range = !P->has_layout && !P->has_global && P->dilation == 1;
    const long p = i + P->offset;
    long lo = P->left >= 0 ? p - P->left : LONG_MIN, hi = P->right >= 0 ? p + P->right : LONG_MAX;
    if (P->causal) hi = min(hi, p);
    /* the aligned vectors over the chunk's keys [key0, key0 + cols): vector av starts at
       element js = av * SV - key0 of s, which may lie before 0 or end past cols */
    const long first_av = key0 / SV, end_av = (key0 + cols + SV - 1) / SV;
    float local_max = -INFINITY;
    for (long av = first_owned(first_av, lid); av < end_av; av += WG_SIZE) {
        const long js = av * SV - key0;
        if (one_range && !P->has_bias && !MODIFIES_SCORES(P) && js >= 0 && js + SV <= cols) {
            const long first = key0 + js; /* lanes allowed: [lo - first, hi - first] */
            const int lo_lane = (int)clamp(lo == LONG_MIN ? -1L : lo - first, -1L, (long)SV);
            const int hi_lane = (int)clamp(hi == LONG_MAX ? (long)SV : hi - first, -1L, (long)SV);
            const int16 allowed = (lane >= (int16)lo_lane) & (lane <= (int16)hi_lane);
            const float16 x = vload16(0, s + js);
            if (!any(allowed & ~isfinite(x))) {
                const float16 y = select((float16)(-INFINITY), x, allowed);
                vstore16(y, 0, s + js);
                local_max = max_keep_nan(local_max, max16(y));
                continue;
            }
        }
        for (long j = max(js, 0L); j < js + SV && j < cols; j++) {
            const long key = key0 + j;
            float x = -INFINITY;
            if (one_range ? key >= lo && key <= hi
                          : mask_allowed(P, is_global, layout, h, i, key)) {
                x = isfinite(s[j]) ? s[j] : rescore(P, Q, K, b, h, i, key, scale);
                if (MODIFIES_SCORES(P)) x = modified_score(P, x, b, h, p, key);
                if (P->has_bias) x = add_saturating(x, bias[bias_row + j]);
            }
            s[j] = x;
            local_max = max_keep_nan(local_max, x);
        }
    }
    const float row_max = group_max(local_max, scratch);

    /* pass 2: the exponentials, written back, and their sum, each key in its lane (each
       work-item reads back only what it wrote); a masked key's is exactly 0 */
    const int empty = row_max == -INFINITY;
    float16 sums = (float16)0.0f;
    for (long av = first_owned(first_av, lid); !empty && av < end_av; av += WG_SIZE) {
        const long js = av * SV - key0;
        if (js >= 0 && js + SV <= cols) {
            const float16 x = vload16(0, s + js);
            const float16 e = select(exp(x - row_max), (float16)0.0f, x == (float16)(-INFINITY));
            vstore16(e, 0, s + js);
            sums += e;
            continue;
        }
        /* a vector cut by the chunk: the same vector exp as a full one (a scalar exp may round
           differently), the keys outside it -inf, so 0 */
        float part[SV];
        for (int l = 0; l < SV; l++)
            part[l] = js + l >= 0 && js + l < cols ? s[js + l] : -INFINITY;
        const float16 x = vload16(0, part);
        const float16 e = select(exp(x - row_max), (float16)0.0f, x == (float16)(-INFINITY));
        vstore16(e, 0, part);
        for (int l = 0; l < SV; l++)
            if (js + l >= 0 && js + l < cols) s[js + l] = part[l];
        sums += e;
    }
    const float row_sum = group_sum(sum16(sums), scratch);

    /* pass 3: P in place; masked keys (and an empty row's) stay exactly 0, even in a row whose
       sum is NaN; a sink joins the sum (sink_fold) */
    float top = row_max, sum = row_sum;
    const float keep = sink_fold(P, h, &top, &sum);
    const float inv_sum = empty ? 0.0f : keep / row_sum;
    for (long av = first_owned(first_av, lid); av < end_av; av += WG_SIZE) {
        const long js = av * SV - key0;
        if (js >= 0 && js + SV <= cols) {
            const float16 e = vload16(0, s + js);
            const int16 zero = (e == (float16)0.0f) | (int16)(empty ? -1 : 0);
            vstore16(select(e * inv_sum, (float16)0.0f, zero), 0, s + js);
            continue;
        }
        for (long j = max(js, 0L); j < js + SV && j < cols; j++) {
            const float e = s[j];
            s[j] = empty || e == 0.0f ? 0.0f : e * inv_sum;
        }
    }
    if (lid == 0)
        store_lse(P, lse, (b * P->heads_q + h) * P->len_q + i, top, sum,
                  top == -INFINITY && sum == 0.0f);
}
