/* Host float16 conversion: every half round-trips, and float -> half rounds like the
 * compiler's _Float16 (round to nearest even, subnormals, overflow to inf, NaN stays NaN). */
#include <criterion/criterion.h>

#include "core/half.h"

#include <math.h>

Test(half, every_half_round_trips) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = half_to_float((uint16_t)h);
        uint16_t back = float_to_half(f);
        if (isnan(f))
            cr_assert((back & 0x7c00) == 0x7c00 && (back & 0x3ff), "NaN %04x -> %04x", h, back);
        else
            cr_assert_eq(back, h, "%04x -> %a -> %04x", h, f, back);
    }
}

Test(half, rounding_matches_the_compiler) {
    uint64_t state = 1;
    for (int i = 0; i < 2000000; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t bits = (uint32_t)(state >> 32);
        float f;
        memcpy(&f, &bits, sizeof f);
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
    for (uint32_t b = 0; b < 65536; b++) {
        float f = bf16_to_float((uint16_t)b);
        uint16_t back = float_to_bf16(f);
        if (isnan(f))
            cr_assert((back & 0x7f80) == 0x7f80 && (back & 0x7f), "NaN %04x -> %04x", b, back);
        else
            cr_assert_eq(back, b, "%04x -> %a -> %04x", b, f, back);
    }
    uint64_t state = 7;
    for (int i = 0; i < 2000000; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t bits = (uint32_t)(state >> 32);
        float f;
        memcpy(&f, &bits, sizeof f);
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
