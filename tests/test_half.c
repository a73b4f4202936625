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
