/*
 * Verified dispatch through the C API (docs/verification.md), on a verdict store of each test's
 * own ($CLATTN_CACHE_DIR): a verdict recorded with clattn_verdict_record is read back; `auto`
 * passes a failed variant over and says why in clattn_stats.fallback; require-verified refuses
 * until a variant passed; strict mode makes the fallback an error; trust runs the table's order;
 * entries of another driver, library version or kernel sources are never taken. Needs a device
 * where auto picks lanes (a CPU device that prefers float vectors, such as PoCL's).
 */
#include <criterion/criterion.h>

#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char folder[64];

static void setup(void) {
    fresh_cache_dir(folder, sizeof folder, "verify");
    unsetenv("CLATTN_VERIFY");
    unsetenv("CLATTN_STRICT");
    unsetenv("CLATTN_KERNEL");
}

static void teardown(void) {
    remove_cache_dir(folder);
}

/* A context on device 0, or NULL (the test skips) where auto does not pick lanes. */
static clattn_context *lanes_context(void) {
    clattn_context *ctx = NULL;
    cr_assert_eq(clattn_context_create(&ctx, 0), CLATTN_SUCCESS);
    clattn_variant_info info;
    clattn_variant_info_init(&info);
    cr_assert_eq(clattn_variant_describe(ctx, CLATTN_VARIANT_LANES, &info), CLATTN_SUCCESS);
    if (info.used_by_auto) return ctx;
    clattn_context_destroy(ctx);
    cr_skip_test("auto does not pick lanes on device 0 (%s)", info.reason);
    return NULL;
}

static void record(clattn_context *ctx, clattn_variant variant, clattn_verdict_kind kind,
                   const char *detail) {
    clattn_verdict v;
    clattn_verdict_init(&v);
    v.kind = kind;
    snprintf(v.sweep, sizeof v.sweep, "test");
    snprintf(v.detail, sizeof v.detail, "%s", detail);
    ASSERT_OK(ctx, clattn_verdict_record(ctx, variant, &v, NULL));
}

/* One small call through `auto` (on `path`); its result is checked when it succeeds. */
static case_result run_auto(clattn_context *ctx, clattn_path path) {
    case_result r = run_small_causal(ctx, path, CLATTN_VARIANT_AUTO);
    if (r.status == CLATTN_SUCCESS) cr_assert_eq(r.mismatches, 0, "%s", r.message);
    return r;
}

Test(verify, a_recorded_verdict_is_read_back, .init = setup, .fini = teardown) {
    clattn_context *ctx = lanes_context();
    clattn_verdict v;
    clattn_verdict_init(&v);
    ASSERT_OK(ctx, clattn_verdict_get(ctx, CLATTN_VARIANT_LANES, &v));
    cr_expect_eq(v.kind, CLATTN_VERDICT_NONE, "a fresh store has no verdict");
    record(ctx, CLATTN_VARIANT_LANES, CLATTN_VERDICT_FAILED, "case 7 (planted)");
    ASSERT_OK(ctx, clattn_verdict_get(ctx, CLATTN_VARIANT_LANES, &v));
    cr_expect_eq(v.kind, CLATTN_VERDICT_FAILED);
    cr_expect_str_eq(v.detail, "case 7 (planted)");
    cr_expect_str_eq(v.sweep, "test");
    cr_expect(strlen(v.date) == 20 && v.date[10] == 'T' && v.date[19] == 'Z', "date %s", v.date);
    ASSERT_OK(ctx, clattn_verdict_get(ctx, CLATTN_VARIANT_GEMM, &v));
    cr_expect_eq(v.kind, CLATTN_VERDICT_NONE, "one variant's verdict is not another's");
    clattn_context_destroy(ctx);
}

Test(verify, auto_passes_a_failed_variant_over_and_says_why, .init = setup, .fini = teardown) {
    clattn_context *ctx = lanes_context();
    case_result r = run_auto(ctx, CLATTN_PATH_AUTO);
    cr_assert_eq(r.status, CLATTN_SUCCESS, "%s", r.message);
    cr_expect_eq(r.stats.variant, CLATTN_VARIANT_LANES, "no verdicts: the table's order");
    cr_expect_str_eq(r.stats.fallback, "");
    record(ctx, CLATTN_VARIANT_LANES, CLATTN_VERDICT_FAILED, "case 7 (planted)");
    record(ctx, CLATTN_VARIANT_GEMM, CLATTN_VERDICT_PASSED, "");
    r = run_auto(ctx, CLATTN_PATH_AUTO);
    cr_assert_eq(r.status, CLATTN_SUCCESS, "%s", r.message);
    cr_expect_eq(r.stats.variant, CLATTN_VARIANT_GEMM);
    cr_expect_eq(r.stats.verdict, CLATTN_VERDICT_PASSED);
    cr_expect_not_null(strstr(r.stats.fallback, "lanes: failed clattn check on 20"), "%s",
                       r.stats.fallback);
    cr_expect_not_null(strstr(r.stats.fallback, "case 7 (planted)"), "%s", r.stats.fallback);
    clattn_variant_info info;
    clattn_variant_info_init(&info);
    ASSERT_OK(ctx, clattn_variant_describe(ctx, CLATTN_VARIANT_LANES, &info));
    cr_expect(!info.used_by_auto && strstr(info.reason, "auto passes it over: failed"), "%s",
              info.reason);
    clattn_context_destroy(ctx);
}

Test(verify, require_verified_refuses_until_a_variant_passed, .init = setup, .fini = teardown) {
    clattn_context *ctx = lanes_context();
    ASSERT_OK(ctx, clattn_context_set_verify(ctx, CLATTN_VERIFY_REQUIRE, 0));
    case_result r = run_auto(ctx, CLATTN_PATH_FUSED);
    cr_expect_eq(r.status, CLATTN_ERR_UNSUPPORTED);
    const char *why = clattn_context_last_error(ctx);
    cr_expect_not_null(strstr(why, "clattn check --quick --device 0"), "%s", why);
    record(ctx, CLATTN_VARIANT_LANES, CLATTN_VERDICT_PASSED, "");
    r = run_auto(ctx, CLATTN_PATH_FUSED);
    cr_assert_eq(r.status, CLATTN_SUCCESS, "%s", r.message);
    cr_expect_eq(r.stats.variant, CLATTN_VARIANT_LANES);
    cr_expect_eq(r.stats.verdict, CLATTN_VERDICT_PASSED);
    /* a variant named by the caller, unverified, is refused as well */
    attn_case c;
    case_init(&c, 1, 2, 1, 45, 70, 32, 32);
    case_run(ctx, &c, CLATTN_PATH_FUSED, CLATTN_VARIANT_ROWWISE, &r);
    cr_expect_eq(r.status, CLATTN_ERR_UNSUPPORTED);
    clattn_context_destroy(ctx);
}

Test(verify, strict_mode_makes_a_fallback_an_error, .init = setup, .fini = teardown) {
    clattn_context *ctx = lanes_context();
    record(ctx, CLATTN_VARIANT_LANES, CLATTN_VERDICT_TIMED_OUT, "after 9 s in case 0 (x)");
    ASSERT_OK(ctx, clattn_context_set_verify(ctx, CLATTN_VERIFY_PREFER, CLATTN_VERIFY_STRICT));
    case_result r = run_auto(ctx, CLATTN_PATH_AUTO);
    cr_expect_eq(r.status, CLATTN_ERR_UNSUPPORTED);
    const char *why = clattn_context_last_error(ctx);
    cr_expect_not_null(strstr(why, "strict mode"), "%s", why);
    cr_expect_not_null(strstr(why, "lanes: timed out clattn check"), "%s", why);
    ASSERT_OK(ctx, clattn_context_set_verify(ctx, CLATTN_VERIFY_FROM_ENV, 0));
    setenv("CLATTN_STRICT", "1", 1);
    r = run_auto(ctx, CLATTN_PATH_AUTO);
    cr_expect_eq(r.status, CLATTN_ERR_UNSUPPORTED, "CLATTN_STRICT=1");
    unsetenv("CLATTN_STRICT");
    /* trust: the table's order, verdicts not read */
    ASSERT_OK(ctx, clattn_context_set_verify(ctx, CLATTN_VERIFY_TRUST, 0));
    r = run_auto(ctx, CLATTN_PATH_AUTO);
    cr_assert_eq(r.status, CLATTN_SUCCESS, "%s", r.message);
    cr_expect_eq(r.stats.variant, CLATTN_VARIANT_LANES);
    cr_expect_str_eq(r.stats.fallback, "");
    cr_expect_eq(clattn_context_set_verify(ctx, (clattn_verify_policy)7, 0),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect_eq(clattn_context_set_verify(ctx, CLATTN_VERIFY_TRUST, 64),
                 CLATTN_ERR_INVALID_ARGUMENT);
    clattn_context_destroy(ctx);
}

Test(verify, verdicts_of_another_driver_library_or_sources_are_not_taken, .init = setup,
     .fini = teardown) {
    clattn_context *ctx = lanes_context();
    clattn_device_info info;
    clattn_device_info_init(&info);
    clattn_context_device_info(ctx, &info);
    record(ctx, CLATTN_VARIANT_GEMM, CLATTN_VERDICT_PASSED, ""); /* learns the sources' hash */
    char path[256], line[4096], sources[32] = "";
    snprintf(path, sizeof path, "%s/verdicts.json", folder);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    while (fgets(line, sizeof line, f))
        if (strstr(line, "\"sources\": \""))
            sscanf(strstr(line, "\"sources\": \"") + 12, "%16s", sources);
    fclose(f);
    cr_assert_eq(strlen(sources), 16);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    const char *keys[3][3] = {{"0.0-other", CLATTN_VERSION_STRING, sources},
                              {info.driver_version, "0.0.1", sources},
                              {info.driver_version, CLATTN_VERSION_STRING, "0000000000000000"}};
    fprintf(f, "{\"clattn_verdicts\": 1, \"entries\": [\n");
    for (int i = 0; i < 3; i++)
        fprintf(f,
                "%s{\"device\": \"%s\", \"platform\": \"%s\", \"driver\": \"%s\", \"library\": "
                "\"%s\", \"sources\": \"%s\", \"variant\": \"lanes\", \"verdict\": \"failed\", "
                "\"sweep\": \"x\", \"date\": \"2026-01-01T00:00:00Z\", \"detail\": \"y\"}\n",
                i ? "," : "", info.name, info.platform_name, keys[i][0], keys[i][1], keys[i][2]);
    fprintf(f, "]}\n");
    fclose(f);
    clattn_verdict v;
    clattn_verdict_init(&v);
    ASSERT_OK(ctx, clattn_verdict_get(ctx, CLATTN_VARIANT_LANES, &v));
    cr_expect_eq(v.kind, CLATTN_VERDICT_NONE, "a mismatched entry was taken");
    case_result r = run_auto(ctx, CLATTN_PATH_AUTO);
    cr_assert_eq(r.status, CLATTN_SUCCESS, "%s", r.message);
    cr_expect_eq(r.stats.variant, CLATTN_VARIANT_LANES);
    cr_expect_str_eq(r.stats.fallback, "");
    clattn_context_destroy(ctx);
}
