/* clattn_convert: host conversions between the storage types (half.h does the rounding). */
#include "core.h"
#include "half.h"

#include <math.h>
#include <string.h>

/* One value of `dtype` at index i, as float32. */
static float load_as_float(clattn_dtype dtype, const void *src, size_t i) {
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

/* One q8_0 block: scale d = max|x| / 127 rounded to float16, then q = round(x / d). A block of
 * zeros (or one whose scale rounds to zero) is all zero. */
static void quantize_block(const float *x, uint8_t *block) {
    float max = 0.0f;
    for (int i = 0; i < Q8_BLOCK; i++) max = fabsf(x[i]) > max ? fabsf(x[i]) : max;
    uint16_t d = float_to_half(max / 127.0f);
    float scale = half_to_float(d), inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    block[0] = (uint8_t)(d & 0xff), block[1] = (uint8_t)(d >> 8);
    for (int i = 0; i < Q8_BLOCK; i++) {
        float q = roundf(x[i] * inv);
        block[2 + i] = (uint8_t)(int8_t)(q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q);
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
            for (int i = 0; i < Q8_BLOCK; i++) x[i] = load_as_float(from, src, b * Q8_BLOCK + i);
        if (to == CLATTN_Q8_0)
            quantize_block(x, (uint8_t *)dst + b * Q8_BLOCK_BYTES);
        else
            for (int i = 0; i < Q8_BLOCK; i++) store_from_float(to, dst, b * Q8_BLOCK + i, x[i]);
    }
}

clattn_status clattn_convert(clattn_dtype from, const void *src, clattn_dtype to, void *dst,
                             size_t count) {
    int q8 = from == CLATTN_Q8_0 || to == CLATTN_Q8_0;
    if (!kv_dtype_known(from) || !kv_dtype_known(to) || (count && (!src || !dst)) ||
        (q8 && count % Q8_BLOCK))
        return CLATTN_ERR_INVALID_ARGUMENT;
    if (from == to) {
        memmove(dst, src, dtype_bytes(from, count));
        return CLATTN_SUCCESS;
    }
    if (q8) {
        convert_q8(from, src, to, dst, count);
        return CLATTN_SUCCESS;
    }
    for (size_t i = 0; i < count; i++) store_from_float(to, dst, i, load_as_float(from, src, i));
    return CLATTN_SUCCESS;
}
