/* clattn_convert: host conversions between the storage types (half.h does the rounding), and
 * the q8_0 rule shared with the KV cache: a block whose float16 scale would overflow is
 * refused, never stored as NaN. */
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

int q8_scale_overflows(const float *block) {
    return (float_to_half(block_max(block) / 127.0f) & 0x7fffu) == 0x7c00u;
}

/* One q8_0 block as ggml's quantize_row_q8_0_ref makes it: d = max|x| / 127 in float32, its
 * reciprocal taken from that float32 d (not from the float16 it is stored as), q = round(x * (1 /
 * d)) half away from zero; d is stored rounded to float16 (nearest even). A block of zeros is all
 * zero. Beyond ggml (which leaves them undefined): NaN and infinities have no say in the scale,
 * NaN stores 0 and an infinity +-127. The caller has checked that the scale is finite
 * (q8_scale_overflows). */
static void quantize_block(const float *x, uint8_t *block) {
    const float d = block_max(x) / 127.0f, inv = d != 0.0f ? 1.0f / d : 0.0f;
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

static void dequantize_block(const uint8_t *block, float *x) {
    float scale = half_to_float((uint16_t)(block[0] | block[1] << 8));
    for (int i = 0; i < Q8_BLOCK; i++) x[i] = scale * (float)(int8_t)block[2 + i];
}

/* Through float32, a block of 32 at a time. */
static void convert_q8(clattn_dtype from, const void *src, clattn_dtype to, void *dst,
                       size_t count) {
    float x[Q8_BLOCK];
    for (size_t b = 0; b < count / Q8_BLOCK; b++) {
        if (from == CLATTN_Q8_0)
            dequantize_block((const uint8_t *)src + b * Q8_BLOCK_BYTES, x);
        else
            for (int i = 0; i < Q8_BLOCK; i++) x[i] = dtype_load_float(from, src, b * Q8_BLOCK + i);
        if (to == CLATTN_Q8_0)
            quantize_block(x, (uint8_t *)dst + b * Q8_BLOCK_BYTES);
        else
            for (int i = 0; i < Q8_BLOCK; i++) store_from_float(to, dst, b * Q8_BLOCK + i, x[i]);
    }
}

/* The first block of `count` values of `src` (a float type) whose q8_0 scale overflows, or
 * SIZE_MAX when none does. */
static size_t first_overflowing_block(clattn_dtype from, const void *src, size_t count) {
    float x[Q8_BLOCK];
    for (size_t b = 0; b < count / Q8_BLOCK; b++) {
        for (int i = 0; i < Q8_BLOCK; i++) x[i] = dtype_load_float(from, src, b * Q8_BLOCK + i);
        if (q8_scale_overflows(x)) return b;
    }
    return SIZE_MAX;
}

clattn_status clattn_convert_check(clattn_dtype from, const void *src, clattn_dtype to,
                                   size_t count, size_t *block) {
    int q8 = from == CLATTN_Q8_0 || to == CLATTN_Q8_0;
    size_t bad = SIZE_MAX;
    if (block) *block = SIZE_MAX;
    if (!kv_dtype_known(from) || !kv_dtype_known(to) || (count && !src) || (q8 && count % Q8_BLOCK))
        return CLATTN_ERR_INVALID_ARGUMENT;
    if (to == CLATTN_Q8_0 && from != CLATTN_Q8_0) bad = first_overflowing_block(from, src, count);
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
    if (from == CLATTN_Q8_0 || to == CLATTN_Q8_0) {
        convert_q8(from, src, to, dst, count);
        return CLATTN_SUCCESS;
    }
    for (size_t i = 0; i < count; i++) store_from_float(to, dst, i, dtype_load_float(from, src, i));
    return CLATTN_SUCCESS;
}
