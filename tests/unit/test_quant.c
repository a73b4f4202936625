/*
 * clattn_convert's quantisers against ggml's reference quantisers (quantize_row_q8_0_ref in
 * and quantize_row_q4_0_ref in
 * ggml-quants.c), bit for bit: the block bytes, float16 scale included. The test carries its own
 * reimplementation of ggml's rules, written from their description (docs/semantics.md section
 * 7) and independent of the library's code, and checks it first against outputs computed
 * beforehand (with NumPy's float32 arithmetic) for three blocks; then the library against it
 * over blocks of every magnitude. The KV cache's device quantiser is checked against
 * clattn_convert in tests/conformance/test_q8.c.
 *
 * ggml's q8_0: d = max|x| / 127 in float32, id = 1 / d (from the float32 d), q = roundf(x * id)
 * (half away from zero), and d stored as float16 rounded to nearest even.
 * ggml's q4_0: m = the first value of the largest magnitude (with its sign), d = m / -8, id = 1 /
 * d, q = min(15, (int8_t)(x * id + 8.5)) (each step in float32), value j's code in the low nibble
 * of byte j and value j + 16's in the high one; d stored as for q8_0.
 */
#include <criterion/criterion.h>

#include "clattn.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { BLOCK = 32, Q8_BYTES = 34, Q4_BYTES = 18 };

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

/* ---------------------------------------------------------------- q4_0 */

static void ggml_q4_0(const float *x, uint8_t *block) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < BLOCK; i++)
        if (amax < fabsf(x[i])) amax = fabsf(x[i]), max = x[i];
    volatile float d = max / -8.0f;
    volatile float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint16_t h = half_bits(d);
    block[0] = (uint8_t)(h & 0xff), block[1] = (uint8_t)(h >> 8);
    for (int j = 0; j < BLOCK / 2; j++) {
        volatile float x0 = x[j] * id, x1 = x[j + BLOCK / 2] * id;
        volatile float s0 = x0 + 8.5f, s1 = x1 + 8.5f;
        int q0 = (int8_t)s0 < 15 ? (int8_t)s0 : 15, q1 = (int8_t)s1 < 15 ? (int8_t)s1 : 15;
        block[2 + j] = (uint8_t)(q0 | q1 << 4);
    }
}

/* ggml's outputs for known_block(0..2), from NumPy float32 (scale bits, then the 16 bytes). */
static const uint16_t q4_known_scale[3] = {0x3849, 0x3780, 0x36ab};
static const uint8_t q4_known_q[3][BLOCK / 2] = {
    {176, 90, 243, 157, 39, 193, 106, 244, 158, 55, 209, 107, 245, 174, 56, 210},
    {227, 141, 38, 176, 90, 243, 157, 39, 193, 106, 244, 158, 55, 209, 107, 245},
    {22, 191, 89, 227, 141, 38, 176, 90, 243, 157, 39, 193, 106, 244, 158, 55},
};

static void q4_known(int k, uint8_t *block) {
    block[0] = (uint8_t)(q4_known_scale[k] & 0xff), block[1] = (uint8_t)(q4_known_scale[k] >> 8);
    memcpy(block + 2, q4_known_q[k], BLOCK / 2);
}

Test(quant, q4_0_test_rules_give_ggml_known_outputs) {
    for (int k = 0; k < 3; k++) {
        float x[BLOCK];
        uint8_t want[Q4_BYTES], got[Q4_BYTES];
        known_block(k, x);
        q4_known(k, want);
        ggml_q4_0(x, got);
        int at = first_difference(got, want, Q4_BYTES);
        cr_expect_eq(at, -1, "block %d byte %d: %d, ggml's %d", k, at, got[at], want[at]);
    }
}

Test(quant, q4_0_convert_is_ggml_bit_for_bit_and_dequantises_as_ggml) {
    enum { BLOCKS = 4096 };
    float *x = malloc(BLOCKS * BLOCK * sizeof *x), back[BLOCK];
    uint8_t *got = malloc(BLOCKS * Q4_BYTES), want[Q4_BYTES];
    uint64_t state = 34;
    for (int b = 0; b < BLOCKS; b++) { /* up to 2^18: q4_0's scale |m| / 8 overflows sooner */
        random_block(&state, b, x + b * BLOCK);
        for (int i = 0; b % 53 > 48 && i < BLOCK; i++) x[b * BLOCK + i] /= 16.0f;
    }
    for (int k = 0; k < 3; k++) known_block(k, x + k * BLOCK);
    cr_assert_eq(clattn_convert(CLATTN_F32, x, CLATTN_Q4_0, got, BLOCKS * BLOCK), CLATTN_SUCCESS);
    size_t bad = 0;
    for (int b = 0; b < BLOCKS; b++) {
        ggml_q4_0(x + b * BLOCK, want);
        int at = first_difference(got + b * Q4_BYTES, want, Q4_BYTES);
        if (at >= 0 && bad++ < 3)
            cr_log_error("block %d byte %d: %d, ggml's %d", b, at, got[b * Q4_BYTES + at],
                         want[at]);
    }
    cr_expect_eq(bad, 0, "%zu of %d blocks differ from ggml's", bad, BLOCKS);
    /* dequantised: (q - 8) * d, d the float16 scale widened */
    cr_assert_eq(clattn_convert(CLATTN_Q4_0, got, CLATTN_F32, back, BLOCK), CLATTN_SUCCESS);
    float d;
    uint16_t h = (uint16_t)(got[0] | got[1] << 8);
    clattn_convert(CLATTN_F16, &h, CLATTN_F32, &d, 1);
    for (int i = 0; i < BLOCK; i++) {
        int q = got[2 + i % 16] >> (i / 16 * 4) & 15;
        cr_expect_eq(back[i], (float)(q - 8) * d, "value %d: %g", i, back[i]);
    }
    free(x), free(got);
}

Test(quant, q4_0_refuses_an_overflowing_scale_and_requantising) {
    float x[2 * BLOCK] = {0};
    uint8_t q[2 * Q4_BYTES], q8[2 * Q8_BYTES];
    size_t block = 0;
    x[BLOCK + 3] = nextafterf(524160.0f, 0.0f); /* |m| / 8 still below float16's 65520 */
    cr_expect_eq(clattn_convert_check(CLATTN_F32, x, CLATTN_Q4_0, 2 * BLOCK, &block),
                 CLATTN_SUCCESS);
    x[BLOCK + 3] = -524160.0f;
    cr_expect_eq(clattn_convert_check(CLATTN_F32, x, CLATTN_Q4_0, 2 * BLOCK, &block),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect_eq(block, 1, "block %zu", block);
    cr_expect_eq(clattn_convert(CLATTN_F32, x, CLATTN_Q4_0, q, 2 * BLOCK),
                 CLATTN_ERR_INVALID_ARGUMENT);
    x[BLOCK + 3] = 1.0f;
    cr_assert_eq(clattn_convert(CLATTN_F32, x, CLATTN_Q4_0, q, 2 * BLOCK), CLATTN_SUCCESS);
    cr_expect_eq(clattn_convert(CLATTN_Q4_0, q, CLATTN_Q8_0, q8, 2 * BLOCK),
                 CLATTN_ERR_INVALID_ARGUMENT, "q4_0 to q8_0 would quantise twice");
}
