/* clattn_convert: host conversions between the storage types (half.h does the rounding). */
#include "core.h"
#include "half.h"

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

clattn_status clattn_convert(clattn_dtype from, const void *src, clattn_dtype to, void *dst,
                             size_t count) {
    if (!dtype_known(from) || !dtype_known(to) || (count && (!src || !dst)))
        return CLATTN_ERR_INVALID_ARGUMENT;
    if (from == to) {
        memmove(dst, src, count * dtype_size(from));
        return CLATTN_SUCCESS;
    }
    for (size_t i = 0; i < count; i++) store_from_float(to, dst, i, load_as_float(from, src, i));
    return CLATTN_SUCCESS;
}
