/*
 * The nv_mma variant (tensor cores through inline PTX) on devices without them: where it runs
 * (NVIDIA's OpenCL on compute capability 8.0 or higher; PoCL's devices are refused, with the
 * reason), the calls it refuses, and its kernel's fragment bookkeeping against the reference
 * through the test build's emulation of mma.sync and shfl.sync ($CLATTN_TEST_NV_MMA=emulate):
 * every mask kind, float16 and bfloat16, head dims that pad, GQA, a dominant key over many key
 * tiles, NaN and infinities in V. Each emulated call first passes the variant's self-test on
 * its context, or it would be refused: a kernel with its fragments' rows swapped fails it.
 */
#include <criterion/criterion.h>

#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static clattn_context *first_context(void) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    return ctxs[0];
}

static void emulate(int on) {
    if (on)
        setenv("CLATTN_TEST_NV_MMA", "emulate", 1);
    else
        unsetenv("CLATTN_TEST_NV_MMA");
}

Test(nv_mma, refused_without_tensor_cores) {
    emulate(0);
    attn_case c;
    case_init(&c, 1, 2, 1, 40, 50, 32, 32);
    c.dtype = CLATTN_F16;
    expect_case_refused(first_context(), &c, CLATTN_VARIANT_NV_MMA, CLATTN_ERR_UNSUPPORTED,
                        "compute capability");
    cr_expect(!auto_uses(first_context(), CLATTN_VARIANT_NV_MMA));
}

Test(nv_mma, refuses_what_tensor_cores_do_not_take) {
    emulate(1);
    clattn_context *ctx = first_context();
    attn_case c;
    case_init(&c, 1, 2, 1, 40, 50, 32, 32);
    expect_case_refused(ctx, &c, CLATTN_VARIANT_NV_MMA, CLATTN_ERR_UNSUPPORTED,
                        "float16 or bfloat16");
    c.dtype = CLATTN_F16, c.kv_quant = CLATTN_Q8_0;
    expect_case_refused(ctx, &c, CLATTN_VARIANT_NV_MMA, CLATTN_ERR_UNSUPPORTED, "q8_0");
    case_init(&c, 1, 2, 1, 40, 50, 192, 128);
    c.dtype = CLATTN_BF16;
    expect_case_refused(ctx, &c, CLATTN_VARIANT_NV_MMA, CLATTN_ERR_UNSUPPORTED,
                        "head dims up to 128");
    emulate(0);
}

/* The mask kinds at head dim 32 (one program a storage type), with every score modifier on the
 * biased case and +inf rather than NaN in V. */
static size_t mask_cases(attn_case *cases, clattn_dtype dtype) {
    size_t n = mask_kind_cases(cases, 501);
    for (size_t i = 0; i < n; i++) cases[i].dtype = dtype;
    cases[4].softcap = 2.0f, cases[4].alibi = 1, cases[4].sinks = 1;
    cases[5].bad_value = 2;
    return n;
}

Test(nv_mma, emulated_kernel_matches_the_reference, .timeout = 600) {
    emulate(1);
    attn_case cases[10];
    size_t n = mask_cases(cases, CLATTN_F16);
    cr_expect_eq(check_cases(cases, n, CLATTN_PATH_FUSED, CLATTN_VARIANT_NV_MMA), 0,
                 "float16 masks: failing cases are listed above");
    n = mask_cases(cases, CLATTN_BF16);
    cr_expect_eq(check_cases(cases, n, CLATTN_PATH_FUSED, CLATTN_VARIANT_NV_MMA), 0,
                 "bfloat16 masks: failing cases are listed above");
    /* head dims that pad (64 and 48 to 64 and 48, 17 to 32), 128, and a dominant key */
    n = 0;
    case_init(&cases[n], 2, 4, 2, 45, 67, 64, 48);
    cases[n++].dtype = CLATTN_F16;
    case_init(&cases[n], 1, 2, 1, 37, 53, 17, 17);
    cases[n].causal = 1, cases[n++].dtype = CLATTN_BF16;
    case_init(&cases[n], 1, 2, 1, 70, 130, 128, 128);
    cases[n].out_dtype = CLATTN_F16, cases[n++].dtype = CLATTN_F16;
    case_init(&cases[n], 1, 2, 1, 64, 700, 64, 48);
    cases[n].scale = 4.0f, cases[n++].dtype = CLATTN_F16;
    cr_expect_eq(check_cases(cases, n, CLATTN_PATH_FUSED, CLATTN_VARIANT_NV_MMA), 0,
                 "head dims: failing cases are listed above");
    case_result r;
    case_run(first_context(), &cases[0], CLATTN_PATH_FUSED, CLATTN_VARIANT_NV_MMA, &r);
    cr_assert_eq(r.status, CLATTN_SUCCESS, "%s", r.message);
    cr_expect(strstr(r.stats.kernel, "emulated") != NULL, "%s", r.stats.kernel);
    emulate(0);
}

static clattn_tuning nv_mma_tuning(unsigned bm, unsigned bn, unsigned tm, unsigned stages) {
    clattn_tuning t;
    clattn_tuning_init(&t);
    t.block_m = bm, t.block_n = bn, t.tile_m = tm, t.stages = stages;
    return t;
}

/* Two row tiles a warp, 8 warps, 32-key tiles, two buffers: every shape stays right, with the
 * careful P V in one pass and in two, and a dominant key over many tiles of both buffers. */
Test(nv_mma, tunings_shape_the_kernel, .timeout = 600) {
    emulate(1);
    const clattn_tuning tunings[] = {nv_mma_tuning(128, 32, 2, 2), nv_mma_tuning(128, 64, 1, 2),
                                     nv_mma_tuning(64, 64, 2, 1)};
    for (size_t i = 0; i < COUNT(tunings); i++) {
        set_tuning_everywhere(CLATTN_VARIANT_NV_MMA, &tunings[i]);
        attn_case cases[11];
        size_t n = mask_cases(cases, i % 2 ? CLATTN_BF16 : CLATTN_F16);
        case_init(&cases[n], 1, 2, 1, 150, 700, 64, 48);
        cases[n].scale = 4.0f, cases[n++].dtype = CLATTN_F16;
        char expected[64];
        snprintf(expected, sizeof expected, "nv_mma bm%u bn%u tm%u s%u", tunings[i].block_m,
                 tunings[i].block_n, tunings[i].tile_m, tunings[i].stages);
        cr_expect_eq(check_cases(cases, n, CLATTN_PATH_FUSED, CLATTN_VARIANT_NV_MMA), 0,
                     "%s: failing cases are listed above", expected);
        case_result r;
        case_run(first_context(), &cases[0], CLATTN_PATH_FUSED, CLATTN_VARIANT_NV_MMA, &r);
        cr_assert_eq(r.status, CLATTN_SUCCESS, "%s", r.message);
        cr_expect(strstr(r.stats.kernel, expected) == r.stats.kernel, "%s, not %s", expected,
                  r.stats.kernel);
    }
    set_tuning_everywhere(CLATTN_VARIANT_NV_MMA, NULL);
    emulate(0);
}

Test(nv_mma, tuning_values_it_cannot_take_are_named) {
    emulate(1);
    const struct {
        clattn_tuning t;
        const char *field;
    } bad[] = {{nv_mma_tuning(64, 64, 3, 1), "tile_m"},
               {nv_mma_tuning(48, 64, 2, 1), "block_m"},
               {nv_mma_tuning(512, 64, 1, 1), "block_m"},
               {nv_mma_tuning(64, 16, 1, 1), "block_n"},
               {nv_mma_tuning(64, 64, 1, 3), "stages"}};
    clattn_context *ctx = first_context();
    for (size_t i = 0; i < COUNT(bad); i++)
        expect_tuning_refused(ctx, CLATTN_VARIANT_NV_MMA, &bad[i].t, bad[i].field);
    emulate(0);
}

/* A kernel whose emulated A operand has its rows and column halves swapped (a wrong fragment
 * layout): its self-test fails on a fresh context and the variant refuses every call, with the
 * values it got; auto runs the call elsewhere. */
Test(nv_mma, a_kernel_that_fails_its_self_test_is_refused) {
    char folder[256], command[1024];
    fresh_cache_dir(folder, sizeof folder, "nv-mma-self-test");
    snprintf(command, sizeof command,
             "cp -r '%s' '%s/cl' && sed -i 's/(g + 8 \\* (r %% 2)) \\* 16 + 2 \\* t + 8 "
             "\\* (r \\/ 2)/(g + 8 * (r \\/ 2)) * 16 + 2 * t + 8 * (r %% 2)/' '%s/cl/nv_mma.cl' "
             "&& ! cmp -s '%s/nv_mma.cl' '%s/cl/nv_mma.cl'",
             CLATTN_KERNEL_SOURCES, folder, folder, CLATTN_KERNEL_SOURCES, folder);
    cr_assert_eq(system(command), 0, "planting the bug failed (update the test): %s", command);
    snprintf(command, sizeof command, "%s/cl", folder);
    setenv("CLATTN_KERNEL_DIR", command, 1);
    emulate(1);
    attn_case c;
    case_init(&c, 1, 2, 1, 40, 50, 32, 32);
    c.dtype = CLATTN_F16;
    expect_case_refused(first_context(), &c, CLATTN_VARIANT_NV_MMA, CLATTN_ERR_UNSUPPORTED,
                        "self-test computed O[");
    clattn_variant_info info; /* the verdict is kept: the queries say so too */
    clattn_variant_info_init(&info);
    cr_assert_eq(clattn_variant_describe(first_context(), CLATTN_VARIANT_NV_MMA, &info),
                 CLATTN_SUCCESS);
    cr_expect(!info.supported && strstr(info.reason, "self-test computed O["), "%d: %s",
              info.supported, info.reason);
    cr_expect(!auto_uses(first_context(), CLATTN_VARIANT_NV_MMA));
    emulate(0);
    unsetenv("CLATTN_KERNEL_DIR");
    remove_cache_dir(folder);
}

/* An error on the way through the self-test (here its build, failed by the test hook) is the
 * call's status and is not kept: the next call runs the test again, passes and is served. */
Test(nv_mma, an_error_in_the_self_test_is_returned_not_kept) {
    emulate(1);
    clattn_context *ctx = NULL;
    cr_assert_eq(clattn_context_create(&ctx, 0), CLATTN_SUCCESS);
    attn_case c;
    case_init(&c, 1, 2, 1, 40, 50, 32, 32);
    c.dtype = CLATTN_F16;
    setenv("CLATTN_TEST_FAIL_BUILD", "nv_mma.cl", 1);
    case_result r;
    case_run(ctx, &c, CLATTN_PATH_FUSED, CLATTN_VARIANT_NV_MMA, &r);
    cr_expect_eq(r.status, CLATTN_ERR_BUILD, "%s", r.message);
    unsetenv("CLATTN_TEST_FAIL_BUILD");
    case_run(ctx, &c, CLATTN_PATH_FUSED, CLATTN_VARIANT_NV_MMA, &r);
    cr_expect_eq(r.status, CLATTN_SUCCESS, "%s", r.message);
    cr_expect_eq(r.mismatches, 0, "%s", r.message);
    clattn_context_destroy(ctx);
    emulate(0);
}
