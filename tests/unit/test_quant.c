/*
 * clattn_convert's quantisers against ggml's reference quantisers (quantize_row_q8_0_ref in
 * ggml-quants.c), bit for bit: the block bytes, float16 scale included. The test carries its own
 * reimplementation of ggml's rules, written from their description (docs/semantics.md section
 * 7) and independent of the library's code, and checks it first against outputs computed
 * beforehand (with NumPy's float32 arithmetic) for three blocks; then the library against it
 * over blocks of every magnitude. The KV cache's device quantiser is checked against
 * clattn_convert in tests/conformance/test_q8.c.
 *
 * ggml's q8_0: d = max|x| / 127 in float32, id = 1 / d (from the float32 d), q = roundf(x * id)
 * (half away from zero), and d stored as float16 rounded to nearest even.
 */
#include <criterion/criterion.h>

#include "clattn.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { BLOCK = 32, Q8_BYTES = 34 };

/* ---------------------------------------------------------------- the test's own ggml rules */

/* float32 to float16 bits, nearest even, computed in double: the value is snapped to a
 * multiple of its float16 ulp with nearbyint (the default rounding mode: ties to even), then
 * encoded. For the finite scales of a block (below 65520). */
static uint16_t half_bits(float f) {
    double a = fabs((double)f);
    uint16_t sign = signbit(f) ? 0x8000u : 0;
    if (a == 0.0) return sign;
    int e = (int)floor(log2(a));
    if (e < -14) e = -14; /* subnormals share the smallest normal's ulp, 2^-24 */
    double ulp = ldexp(1.0, e - 10), m = nearbyint(a / ulp); /* m in [0, 2048] */
    if (m >= 2048.0) m /= 2.0, e++;                          /* rounded up to the next binade */
    if (m < 1024.0) return (uint16_t)(sign | (uint16_t)m);   /* subnormal */
    return (uint16_t)(sign | (uint16_t)((e + 15) << 10) | (uint16_t)((int)m - 1024));
}

/* roundf: half away from zero. */
static float round_away(float x) {
    float t = truncf(x);
    if (fabsf(x - t) >= 0.5f) t += copysignf(1.0f, x);
    return t;
}

static void ggml_q8_0(const float *x, uint8_t *block) {
    float amax = 0.0f;
    for (int i = 0; i < BLOCK; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    volatile float d = amax / 127.0f; /* volatile: each step rounded to float32 */
    volatile float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint16_t h = half_bits(d);
    block[0] = (uint8_t)(h & 0xff), block[1] = (uint8_t)(h >> 8);
    for (int i = 0; i < BLOCK; i++) {
        volatile float t = x[i] * id;
        block[2 + i] = (uint8_t)(int8_t)round_away(t);
    }
}

/* Block k of the known outputs: x[i] = ((37 i + 11 k) mod 61 - 30) / (7 + k), float32. */
static void known_block(int k, float *x) {
    for (int i = 0; i < BLOCK; i++) x[i] = (float)((i * 37 + k * 11) % 61 - 30) / (float)(7 + k);
}

/* The first of `n` bytes where two blocks differ, or -1. */
static int first_difference(const uint8_t *a, const uint8_t *b, int n) {
    for (int i = 0; i < n; i++)
        if (a[i] != b[i]) return i;
    return -1;
}

/* ---------------------------------------------------------------- q8_0 */

/* ggml's outputs for known_block(0..2), from NumPy float32 (scale bits, then the 32 q). A
 * quantiser that took the reciprocal of the float16 scale instead differs in every one. */
static const uint16_t q8_known_scale[3] = {0x2852, 0x278f, 0x26b8};
static const int8_t q8_known_q[3][BLOCK] = {
    {-127, 30,  -72, 85, -17, -119, 38,  -64, 93, -8,  -110, 47,  -55, 102, 0,   -102,
     55,   -47, 110, 8,  -93, 64,   -38, 119, 17, -85, 72,   -30, 127, 25,  -76, 80},
    {-80, 76, -25,  -127, 30,  -72, 85, -17, -119, 38,  -63, 93, -8,  -110, 47,  -55,
     102, 0,  -102, 55,   -47, 110, 8,  -93, 63,   -38, 119, 17, -85, 72,   -30, 127},
    {-34,  123, 21,  -80, 76, -25,  -127, 30,  -72, 85, -17, -119, 38,  -63, 93, -8,
     -110, 47,  -55, 102, 0,  -102, 55,   -47, 110, 8,  -93, 63,   -38, 119, 17, -85},
};

static void q8_known(int k, uint8_t *block) {
    block[0] = (uint8_t)(q8_known_scale[k] & 0xff), block[1] = (uint8_t)(q8_known_scale[k] >> 8);
    for (int i = 0; i < BLOCK; i++) block[2 + i] = (uint8_t)q8_known_q[k][i];
}

Test(quant, q8_0_test_rules_give_ggml_known_outputs) {
    for (int k = 0; k < 3; k++) {
        float x[BLOCK];
        uint8_t want[Q8_BYTES], got[Q8_BYTES];
        known_block(k, x);
        q8_known(k, want);
        ggml_q8_0(x, got);
        int at = first_difference(got, want, Q8_BYTES);
        cr_expect_eq(at, -1, "block %d byte %d: %d, ggml's %d", k, at, got[at], want[at]);
    }
}

Test(quant, q8_0_convert_gives_ggml_known_outputs) {
    float x[3 * BLOCK];
    uint8_t want[3 * Q8_BYTES], got[3 * Q8_BYTES];
    for (int k = 0; k < 3; k++) known_block(k, x + k * BLOCK), q8_known(k, want + k * Q8_BYTES);
    cr_assert_eq(clattn_convert(CLATTN_F32, x, CLATTN_Q8_0, got, 3 * BLOCK), CLATTN_SUCCESS);
    int at = first_difference(got, want, 3 * Q8_BYTES);
    cr_expect_eq(at, -1, "byte %d: %d, ggml's %d", at, got[at], want[at]);
}

/* Seeded blocks of every magnitude from 2^-30 to 2^22 (up to where the scale still fits
 * float16), some with repeated values, zeros and exact halves. */
static void random_block(uint64_t *state, int kind, float *x) {
    for (int i = 0; i < BLOCK; i++) {
        *state = *state * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(*state >> 11) * 0x1.0p-53 * 2.0 - 1.0;
        x[i] = (float)ldexp(u, kind % 53 - 30);
    }
    if (kind % 7 == 0) x[5] = x[9] = -x[3];            /* ties in magnitude */
    if (kind % 11 == 0) memset(x, 0, 8 * sizeof *x);   /* zeros */
    if (kind % 13 == 0) x[2] = 0.5f * (x[1] = 127.0f); /* a scale of 1 and a half step */
}

Test(quant, q8_0_convert_is_ggml_bit_for_bit) {
    enum { BLOCKS = 4096 };
    float *x = malloc(BLOCKS * BLOCK * sizeof *x);
    uint8_t *got = malloc(BLOCKS * Q8_BYTES), want[Q8_BYTES];
    uint64_t state = 33;
    for (int b = 0; b < BLOCKS; b++) random_block(&state, b, x + b * BLOCK);
    cr_assert_eq(clattn_convert(CLATTN_F32, x, CLATTN_Q8_0, got, BLOCKS * BLOCK), CLATTN_SUCCESS);
    size_t bad = 0;
    for (int b = 0; b < BLOCKS; b++) {
        ggml_q8_0(x + b * BLOCK, want);
        int at = first_difference(got + b * Q8_BYTES, want, Q8_BYTES);
        if (at >= 0 && bad++ < 3)
            cr_log_error("block %d byte %d: %d, ggml's %d", b, at, got[b * Q8_BYTES + at],
                         want[at]);
    }
    cr_expect_eq(bad, 0, "%zu of %d blocks differ from ggml's", bad, BLOCKS);
    free(x), free(got);
}
