/* clattn_convert: host conversions between the storage types (half.h does the rounding), and
 * ggml's quantisers (q8_0, q4_0) with the rule shared with the KV cache: a block whose float16
 * scale would overflow is refused, never stored as NaN. */
#include "core.h"
#include "half.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

float dtype_load_float(clattn_dtype dtype, const void *src, size_t i) {
    if (dtype == CLATTN_F16) return half_to_float(((const uint16_t *)src)[i]);
    if (dtype == CLATTN_BF16) return bf16_to_float(((const uint16_t *)src)[i]);
    return ((const float *)src)[i];
}

static void store_from_float(clattn_dtype dtype, void *dst, size_t i, float value) {
    if (dtype == CLATTN_F16)
        ((uint16_t *)dst)[i] = float_to_half(value);
    else if (dtype == CLATTN_BF16)
        ((uint16_t *)dst)[i] = float_to_bf16(value);
    else
        ((float *)dst)[i] = value;
}

/* The largest magnitude among a block's finite values: NaN and infinities have no say in its
 * scale (as in cl/kv_cache.cl). */
static float block_max(const float *x) {
    float max = 0.0f;
    for (int i = 0; i < Q8_BLOCK; i++)
        if (isfinite(x[i]) && fabsf(x[i]) > max) max = fabsf(x[i]);
    return max;
}

/* q4_0's m: the first finite value of the largest magnitude, with its sign (0 for a block
 * without a finite nonzero value). */
static float block_extreme(const float *x) {
    float max = 0.0f, m = 0.0f;
    for (int i = 0; i < Q8_BLOCK; i++)
        if (isfinite(x[i]) && fabsf(x[i]) > max) max = fabsf(x[i]), m = x[i];
    return m;
}

/* The block's float32 scale d, before it is rounded to float16. */
static float block_scale(clattn_dtype t, const float *x) {
    return t == CLATTN_Q4_0 ? block_extreme(x) / -8.0f : block_max(x) / 127.0f;
}

int quant_scale_overflows(clattn_dtype t, const float *block) {
    return (float_to_half(block_scale(t, block)) & 0x7fffu) == 0x7c00u;
}

/* One q8_0 block as ggml's quantize_row_q8_0_ref makes it: d = max|x| / 127 in float32, its
 * reciprocal taken from that float32 d (not from the float16 it is stored as), q = round(x * (1 /
 * d)) half away from zero; d is stored rounded to float16 (nearest even). A block of zeros is all
 * zero. Beyond ggml (which leaves them undefined): NaN and infinities have no say in the scale,
 * NaN stores 0 and an infinity +-127. The caller has checked that the scale is finite
 * (quant_scale_overflows). */
static void quantize_q8(const float *x, uint8_t *block) {
    const float d = block_scale(CLATTN_Q8_0, x), inv = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t h = float_to_half(d);
    block[0] = (uint8_t)(h & 0xff), block[1] = (uint8_t)(h >> 8);
    for (int i = 0; i < Q8_BLOCK; i++) {
        float q = roundf(x[i] * inv); /* inf * 0 is NaN: stores 0, as the device does */
        block[2 + i] = isnan(q) ? 0
                                : (uint8_t)(int8_t)(q > 127.0f    ? 127.0f
                                                    : q < -127.0f ? -127.0f
                                                                  : q);
    }
}

/* ggml's 4-bit code of x: min(15, trunc(x * inv + 8.5)), the product rounded to float32 before
 * the sum (two statements: no fused multiply-add). NaN stores 8 (the value 0); an infinity
 * clamps to 0 or 15, as the device does. */
static unsigned q4_code(float x, float inv) {
    const float t = x * inv;
    const float u = t + 8.5f;
    if (isnan(u)) return 8;
    return u >= 15.0f ? 15u : u <= 0.0f ? 0u : (unsigned)u;
}

/* One q4_0 block as ggml's quantize_row_q4_0_ref makes it: m the block's value of the largest
 * magnitude (the first, with its sign), d = m / -8 in float32 and its reciprocal, value j's code
 * in the low nibble of byte j and value j + 16's in the high one; d stored rounded to float16.
 * NaN and infinities have no say in the scale (q4_code). */
static void quantize_q4(const float *x, uint8_t *block) {
    const float d = block_scale(CLATTN_Q4_0, x), inv = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t h = float_to_half(d);
    block[0] = (uint8_t)(h & 0xff), block[1] = (uint8_t)(h >> 8);
    for (int j = 0; j < Q8_BLOCK / 2; j++)
        block[2 + j] = (uint8_t)(q4_code(x[j], inv) | q4_code(x[j + Q8_BLOCK / 2], inv) << 4);
}

static void dequantize_block(clattn_dtype t, const uint8_t *block, float *x) {
    const float d = half_to_float((uint16_t)(block[0] | block[1] << 8));
    for (int i = 0; i < Q8_BLOCK; i++)
        if (t == CLATTN_Q4_0)
            x[i] = (float)((block[2 + i % 16] >> (i / 16 * 4) & 15) - 8) * d;
        else
            x[i] = d * (float)(int8_t)block[2 + i];
}

/* Through float32, a block of 32 at a time. */
static void convert_blocks(clattn_dtype from, const void *src, clattn_dtype to, void *dst,
                           size_t count) {
    float x[Q8_BLOCK];
    for (size_t b = 0; b < count / Q8_BLOCK; b++) {
        if (dtype_is_quantised(from))
            dequantize_block(from, (const uint8_t *)src + b * quant_block_bytes(from), x);
        else
            for (int i = 0; i < Q8_BLOCK; i++) x[i] = dtype_load_float(from, src, b * Q8_BLOCK + i);
        uint8_t *block = (uint8_t *)dst + b * quant_block_bytes(to);
        if (to == CLATTN_Q8_0)
            quantize_q8(x, block);
        else if (to == CLATTN_Q4_0)
            quantize_q4(x, block);
        else
            for (int i = 0; i < Q8_BLOCK; i++) store_from_float(to, dst, b * Q8_BLOCK + i, x[i]);
    }
}

/* The first block of `count` values of `src` (a float type) whose scale in quantised type `to`
 * overflows, or SIZE_MAX when none does. */
static size_t first_overflowing_block(clattn_dtype from, const void *src, clattn_dtype to,
                                      size_t count) {
    float x[Q8_BLOCK];
    for (size_t b = 0; b < count / Q8_BLOCK; b++) {
        for (int i = 0; i < Q8_BLOCK; i++) x[i] = dtype_load_float(from, src, b * Q8_BLOCK + i);
        if (quant_scale_overflows(to, x)) return b;
    }
    return SIZE_MAX;
}

clattn_status clattn_convert_check(clattn_dtype from, const void *src, clattn_dtype to,
                                   size_t count, size_t *block) {
    int blocks = dtype_is_quantised(from) || dtype_is_quantised(to);
    size_t bad = SIZE_MAX;
    if (block) *block = SIZE_MAX;
    if (!kv_dtype_known(from) || !kv_dtype_known(to) || (count && !src) ||
        (blocks && count % Q8_BLOCK))
        return CLATTN_ERR_INVALID_ARGUMENT;
    if (dtype_is_quantised(to) && from != to) {
        if (dtype_is_quantised(from)) return CLATTN_ERR_INVALID_ARGUMENT; /* no requantising */
        bad = first_overflowing_block(from, src, to, count);
    }
    if (block) *block = bad;
    return bad == SIZE_MAX ? CLATTN_SUCCESS : CLATTN_ERR_INVALID_ARGUMENT;
}

clattn_status clattn_convert(clattn_dtype from, const void *src, clattn_dtype to, void *dst,
                             size_t count) {
    if (count && !dst) return CLATTN_ERR_INVALID_ARGUMENT;
    clattn_status status = clattn_convert_check(from, src, to, count, NULL);
    if (status != CLATTN_SUCCESS) return status; /* nothing written */
    if (from == to) {
        memmove(dst, src, dtype_bytes(from, count));
        return CLATTN_SUCCESS;
    }
    if (dtype_is_quantised(from) || dtype_is_quantised(to)) {
        convert_blocks(from, src, to, dst, count);
        return CLATTN_SUCCESS;
    }
    for (size_t i = 0; i < count; i++) store_from_float(to, dst, i, dtype_load_float(from, src, i));
    return CLATTN_SUCCESS;
}
