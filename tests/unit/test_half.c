/* Host float16 conversion: every half round-trips, and float -> half rounds like the
 * compiler's _Float16 (round to nearest even, subnormals, overflow to inf, NaN stays NaN). */
#include <criterion/criterion.h>

#include "core/half.h"

#include <math.h>

/* Every 16-bit pattern widened and narrowed again comes back; a NaN (all exponent bits set,
 * some mantissa bit set) comes back as a NaN. */
static void expect_every_pattern_round_trips(float (*widen)(uint16_t), uint16_t (*narrow)(float),
                                             uint16_t exponent, uint16_t mantissa) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = widen((uint16_t)h);
        uint16_t back = narrow(f);
        if (isnan(f))
            cr_assert((back & exponent) == exponent && (back & mantissa), "NaN %04x -> %04x", h,
                      back);
        else
            cr_assert_eq(back, h, "%04x -> %a -> %04x", h, f, back);
    }
}

/* The next float of a 64-bit LCG stream: its bits are the state's high half (so NaNs, infinities
 * and subnormals all come up). */
static float next_random_float(uint64_t *state, uint32_t *bits) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    *bits = (uint32_t)(*state >> 32);
    float f;
    memcpy(&f, bits, sizeof f);
    return f;
}

Test(half, every_half_round_trips) {
    expect_every_pattern_round_trips(half_to_float, float_to_half, 0x7c00, 0x3ff);
}

Test(half, rounding_matches_the_compiler) {
    uint64_t state = 1;
    for (int i = 0; i < 2000000; i++) {
        uint32_t bits;
        float f = next_random_float(&state, &bits);
        if (isnan(f)) continue;
        _Float16 expected = (_Float16)f;
        uint16_t want;
        memcpy(&want, &expected, sizeof want);
        cr_assert_eq(float_to_half(f), want, "%a", f);
    }
    cr_assert_eq(float_to_half(65520.0f), 0x7c00); /* overflows to inf */
    cr_assert_eq(float_to_half(65519.0f), 0x7bff);
    cr_assert_eq(float_to_half(0x1p-25f), 0x0000); /* tie to even: zero */
    cr_assert_eq(float_to_half(0x1.000002p-25f), 0x0001);
}

/* bfloat16: widening is exact (every pattern round-trips), narrowing picks the nearer of the
 * two neighbouring bfloat16 values, ties to the even one, and overflows to infinity. */
Test(half, bfloat16_round_trips_and_rounds_to_nearest_even) {
    expect_every_pattern_round_trips(bf16_to_float, float_to_bf16, 0x7f80, 0x7f);
    uint64_t state = 7;
    for (int i = 0; i < 2000000; i++) {
        uint32_t bits;
        float f = next_random_float(&state, &bits);
        if (!isfinite(f)) continue;
        uint16_t below = (uint16_t)(bits >> 16), above = (uint16_t)(below + 1);
        double x = f, lo = bf16_to_float(below), hi = bf16_to_float(above);
        double d_lo = fabs(x - lo),
               d_hi = isinf(hi) ? fabs(x - 0x1p128 * copysign(1, x)) : fabs(x - hi);
        uint16_t want = d_lo < d_hi ? below : d_hi < d_lo ? above : (below & 1) ? above : below;
        cr_assert_eq(float_to_bf16(f), want, "%a", f);
    }
    cr_assert_eq(float_to_bf16(3.4028235e38f), 0x7f80, "FLT_MAX rounds up to inf");
    cr_assert_eq(float_to_bf16(1.0f + 0x1p-8f), 0x3f80, "a tie goes to the even neighbour");
    cr_assert_eq(float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
}
