/*
 * The tuning database: planners take their tile sizes from it, and a tuning.json in the cache
 * folder overrides the built-in entry for one device and driver (only the fields it gives). A
 * malformed file is ignored, never trusted; so is one behind a link or in a folder others
 * can write to.
 */
#include <criterion/criterion.h>

#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char folder[64];

static void write_tuning(const char *text) {
    char path[128];
    snprintf(path, sizeof path, "%s/tuning.json", folder);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

static void setup(void) {
    snprintf(folder, sizeof folder, "/tmp/clattn-tuning-XXXXXX");
    cr_assert_not_null(mkdtemp(folder));
    setenv("CLATTN_CACHE_DIR", folder, 1);
}

static void teardown(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", folder);
    cr_expect_eq(system(cmd), 0);
}

/* Runs a small call on `variant` and returns its statistics (the result checked). */
static clattn_stats run_variant(clattn_context *ctx, clattn_variant variant) {
    attn_case c;
    case_init(&c, 1, 2, 1, 45, 70, 32, 32);
    c.causal = 1;
    case_result r;
    case_run(ctx, &c, CLATTN_PATH_FUSED, variant, &r);
    cr_assert_eq(r.status, CLATTN_SUCCESS, "%s", r.message);
    cr_assert_eq(r.mismatches, 0, "%s", r.message);
    return r.stats;
}

Test(tuning, a_user_entry_overrides_the_built_in_one, .init = setup, .fini = teardown) {
    clattn_context *ctx = NULL;
    cr_assert_eq(clattn_context_create(&ctx, 0), CLATTN_SUCCESS);
    clattn_device_info info;
    clattn_device_info_init(&info);
    clattn_context_device_info(ctx, &info);
    clattn_stats before = run_variant(ctx, CLATTN_VARIANT_CPU);
    cr_assert_eq(before.block_m, 8, "the built-in default");

    char text[1024];
    snprintf(text, sizeof text,
             "{\"clattn_tuning\": 1, \"note\": [1, {\"x\": \"y\"}], \"entries\": [\n"
             "  {\"device\": \"another device\", \"variant\": \"cpu\", \"block_m\": 2},\n"
             "  {\"device\": \"%s\", \"driver\": \"%s\", \"variant\": \"cpu\", \"block_m\": 4,\n"
             "   \"comment\": \"block_n stays built in\"}]}\n",
             info.name, info.driver_version);
    write_tuning(text);
    clattn_stats tuned = run_variant(ctx, CLATTN_VARIANT_CPU);
    cr_expect_eq(tuned.block_m, 4, "tuning.json's block_m");
    cr_expect_eq(tuned.block_n, before.block_n, "a field the entry leaves out stays built in");
    cr_expect_eq(run_variant(ctx, CLATTN_VARIANT_GPU).block_m, 64, "other variants untouched");
    clattn_variant_info vi;
    clattn_variant_info_init(&vi);
    cr_assert_eq(clattn_variant_describe(ctx, CLATTN_VARIANT_CPU, &vi), CLATTN_SUCCESS);
    cr_expect_str_eq(vi.tuning, "tuning.json");

    write_tuning("{\"entries\": [{\"device\": \""); /* cut short: ignored */
    cr_expect_eq(run_variant(ctx, CLATTN_VARIANT_CPU).block_m, 8);
    clattn_context_destroy(ctx);
}

/* An entry with tiles the kernels cannot take is refused with a message, not run. */
Test(tuning, out_of_range_tiles_are_named, .init = setup, .fini = teardown) {
    clattn_context *ctx = NULL;
    cr_assert_eq(clattn_context_create(&ctx, 0), CLATTN_SUCCESS);
    clattn_device_info info;
    clattn_device_info_init(&info);
    clattn_context_device_info(ctx, &info);
    char text[512];
    snprintf(text, sizeof text,
             "{\"entries\": [{\"device\": \"%s\", \"variant\": \"cpu\", \"block_n\": 24}]}",
             info.name);
    write_tuning(text);
    attn_case c;
    case_init(&c, 1, 1, 1, 8, 8, 16, 16);
    case_result r;
    case_run(ctx, &c, CLATTN_PATH_FUSED, CLATTN_VARIANT_CPU, &r);
    cr_expect_eq(r.status, CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(r.message, "block_n 24") != NULL, "%s", r.message);
    clattn_context_destroy(ctx);
}

/* tuning.json is read only as a regular file (not through a link) in a private folder. */
Test(tuning, a_file_others_could_have_written_is_ignored, .init = setup, .fini = teardown) {
    clattn_context *ctx = NULL;
    cr_assert_eq(clattn_context_create(&ctx, 0), CLATTN_SUCCESS);
    clattn_device_info info;
    clattn_device_info_init(&info);
    clattn_context_device_info(ctx, &info);
    char text[512], path[128], real[128];
    snprintf(text, sizeof text,
             "{\"entries\": [{\"device\": \"%s\", \"variant\": \"cpu\", \"block_m\": 4}]}",
             info.name);
    write_tuning(text);
    snprintf(path, sizeof path, "%s/tuning.json", folder);
    snprintf(real, sizeof real, "%s/real.json", folder);
    cr_assert_eq(rename(path, real), 0);
    cr_assert_eq(symlink(real, path), 0);
    cr_expect_eq(run_variant(ctx, CLATTN_VARIANT_CPU).block_m, 8, "read through a link");
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(rename(real, path), 0);
    cr_expect_eq(run_variant(ctx, CLATTN_VARIANT_CPU).block_m, 4, "the regular file");
    cr_assert_eq(chmod(folder, 0777), 0);
    cr_expect_eq(run_variant(ctx, CLATTN_VARIANT_CPU).block_m, 8, "read in a folder others write");
    cr_assert_eq(chmod(folder, 0700), 0);
    clattn_context_destroy(ctx);
}
