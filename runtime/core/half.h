/* float16 and bfloat16 <-> float32 on the host. float16 is IEEE binary16 with
 * round-to-nearest-even, subnormals, infinities and NaN (NaN keeps a quiet payload bit);
 * bfloat16 is the upper 16 bits of a float32, narrowed with round-to-nearest-even (NaN stays a
 * quiet NaN of its sign), as cl/common.cl does on the device. */
#ifndef CLATTN_HALF_H
#define CLATTN_HALF_H

#include <stdint.h>
#include <string.h>

static inline float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13); /* inf or NaN */
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (mant << 13); /* normal: rebias 15 -> 127 */
    } else if (mant == 0) {
        bits = sign; /* zero */
    } else {
        int shift = 0; /* subnormal: normalise */
        while (!(mant & 0x400u)) {
            mant <<= 1;
            shift++;
        }
        bits = sign | ((uint32_t)(113 - shift) << 23) | ((mant & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint16_t float_to_half(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    uint32_t abs = bits & 0x7fffffffu;
    if (abs >= 0x7f800000u) /* inf or NaN */
        return (uint16_t)(sign | 0x7c00u |
                          (abs > 0x7f800000u ? 0x200u | ((abs >> 13) & 0x3ffu) : 0));
    if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
    if (abs < 0x33000001u) return sign;                        /* < 2^-25 (ties to 0): zero */
    uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = exp < 113u ? 126u - exp : 13u; /* subnormal results shift further */
    uint32_t half_bits = exp < 113u ? 0 : (exp - 112u) << 10;
    uint32_t kept = mant >> shift;
    uint32_t rest = mant & ((1u << shift) - 1u);
    uint32_t halfway = 1u << (shift - 1u);
    uint32_t result = half_bits + (exp < 113u ? kept : (kept & 0x3ffu));
    if (rest > halfway || (rest == halfway && (kept & 1u))) result++; /* carries into exponent */
    return (uint16_t)(sign | result);
}

static inline float bf16_to_float(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint16_t float_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40u); /* NaN */
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

#endif
