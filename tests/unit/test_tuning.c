/*
 * The tuning database: planners take their tile sizes from it, and a tuning.json in the cache
 * folder overrides the built-in entry for one device and driver (only the fields it gives). A
 * malformed file is ignored, never trusted; so is one behind a link or in a folder others
 * can write to. clattn_tuning_save writes entries that later calls take, and a context's own
 * parameters (clattn_context_set_tuning) come before both.
 */
#include <criterion/criterion.h>

#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char folder[64];

static void write_tuning(const char *text) {
    write_tuning_json(folder, text);
}

/* A tuning.json of one entry: `field` = value for `variant` on the device named `device`. */
static void write_one_entry(const char *device, const char *variant, const char *field,
                            unsigned value) {
    char text[512];
    snprintf(text, sizeof text,
             "{\"entries\": [{\"device\": \"%s\", \"variant\": \"%s\", \"%s\": %u}]}", device,
             variant, field, value);
    write_tuning(text);
}

static void setup(void) {
    fresh_cache_dir(folder, sizeof folder, "tuning");
}

static void teardown(void) {
    remove_cache_dir(folder);
}

/* A context on device 0, and its device's description in *info. */
static clattn_context *context_on_device_0(clattn_device_info *info) {
    clattn_context *ctx = NULL;
    cr_assert_eq(clattn_context_create(&ctx, 0), CLATTN_SUCCESS);
    clattn_device_info_init(info);
    clattn_context_device_info(ctx, info);
    return ctx;
}

/* Where the context's tuning for `variant` comes from (clattn_variant_info.tuning). */
static const char *tuning_source(clattn_context *ctx, clattn_variant variant) {
    static clattn_variant_info vi;
    clattn_variant_info_init(&vi);
    cr_assert_eq(clattn_variant_describe(ctx, variant, &vi), CLATTN_SUCCESS);
    return vi.tuning;
}

/* Runs a small call on `variant` and returns its statistics (the result checked). */
static clattn_stats run_variant(clattn_context *ctx, clattn_variant variant) {
    case_result r = run_small_causal(ctx, CLATTN_PATH_FUSED, variant);
    cr_assert_eq(r.status, CLATTN_SUCCESS, "%s", r.message);
    cr_assert_eq(r.mismatches, 0, "%s", r.message);
    return r.stats;
}

Test(tuning, a_user_entry_overrides_the_built_in_one, .init = setup, .fini = teardown) {
    clattn_device_info info;
    clattn_context *ctx = context_on_device_0(&info);
    clattn_stats before = run_variant(ctx, CLATTN_VARIANT_LANES);
    cr_assert_eq(before.block_m, 16, "the built-in 32 rows, split finer for a call of 90 rows");

    char text[1024];
    snprintf(text, sizeof text,
             "{\"clattn_tuning\": 1, \"note\": [1, {\"x\": \"y\"}], \"entries\": [\n"
             "  {\"device\": \"another device\", \"variant\": \"cpu\", \"block_m\": 2},\n"
             "  {\"device\": \"%s\", \"driver\": \"%s\", \"variant\": \"cpu\", \"block_m\": 48,\n"
             "   \"comment\": \"block_n stays built in\"}]}\n",
             info.name, info.driver_version);
    write_tuning(text);
    clattn_stats tuned = run_variant(ctx, CLATTN_VARIANT_LANES);
    cr_expect_eq(tuned.block_m, 48, "tuning.json's block_m, taken as it is");
    cr_expect_eq(tuned.block_n, before.block_n, "a field the entry leaves out stays built in");
    cr_expect_eq(run_variant(ctx, CLATTN_VARIANT_ROWWISE).block_m, 64, "other variants untouched");
    cr_expect_str_eq(tuning_source(ctx, CLATTN_VARIANT_LANES), "tuning.json");

    write_tuning("{\"entries\": [{\"device\": \""); /* cut short: ignored */
    cr_expect_eq(run_variant(ctx, CLATTN_VARIANT_LANES).block_m, 16);
    clattn_context_destroy(ctx);
}

/* An entry with tiles the kernels cannot take is refused with a message, not run. */
Test(tuning, out_of_range_tiles_are_named, .init = setup, .fini = teardown) {
    clattn_device_info info;
    clattn_context *ctx = context_on_device_0(&info);
    write_one_entry(info.name, "cpu", "block_n", 24);
    attn_case c;
    case_init(&c, 1, 1, 1, 8, 8, 16, 16);
    expect_case_refused(ctx, &c, CLATTN_VARIANT_LANES, CLATTN_ERR_INVALID_ARGUMENT, "block_n 24");
    clattn_context_destroy(ctx);
}

/* clattn_tuning_save writes the context's device and driver entry into tuning.json (keeping
 * the others), and later calls and lookups take it. */
Test(tuning, a_saved_entry_is_read_back_and_used, .init = setup, .fini = teardown) {
    clattn_device_info info;
    clattn_context *ctx = context_on_device_0(&info);
    write_one_entry("another device", "flash", "block_m", 2);

    clattn_tuning saved, read;
    clattn_tuning_source source = CLATTN_TUNING_DEFAULT;
    clattn_tuning_init(&saved);
    cr_assert_eq(clattn_device_tuning(info.index, CLATTN_VARIANT_FLASH, &saved, &source),
                 CLATTN_SUCCESS);
    cr_expect_neq(source, CLATTN_TUNING_FILE);
    saved.block_m = 8, saved.block_n = 16, saved.tile_m = 2, saved.tile_n = 2, saved.stages = 1;
    ASSERT_OK(ctx, clattn_tuning_save(ctx, CLATTN_VARIANT_FLASH, &saved));
    clattn_tuning_init(&read);
    cr_assert_eq(clattn_device_tuning(info.index, CLATTN_VARIANT_FLASH, &read, &source),
                 CLATTN_SUCCESS);
    cr_expect_eq(source, CLATTN_TUNING_FILE);
    cr_expect_eq(memcmp(&read, &saved, sizeof read), 0, "the entry reads back as written");
    clattn_stats used = run_variant(ctx, CLATTN_VARIANT_FLASH);
    cr_expect(used.block_m == 8 && used.block_n == 16, "%s", used.kernel);

    char path[512], file[4096] = "";
    cr_assert_eq(clattn_tuning_file(path, sizeof path), CLATTN_SUCCESS);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    size_t got = fread(file, 1, sizeof file - 1, f);
    file[got] = '\0';
    fclose(f);
    cr_expect(strstr(file, "another device") != NULL, "the other entry is kept:\n%s", file);

    /* the context's own parameters come first, and NULL returns to the file */
    saved.block_m = 4;
    ASSERT_OK(ctx, clattn_context_set_tuning(ctx, CLATTN_VARIANT_FLASH, &saved));
    cr_expect_eq(run_variant(ctx, CLATTN_VARIANT_FLASH).block_m, 4);
    cr_expect_str_eq(tuning_source(ctx, CLATTN_VARIANT_FLASH), "context");
    ASSERT_OK(ctx, clattn_context_set_tuning(ctx, CLATTN_VARIANT_FLASH, NULL));
    cr_expect_eq(run_variant(ctx, CLATTN_VARIANT_FLASH).block_m, 8);
    clattn_context_destroy(ctx);
}

/* A tuner's candidate that the kernel cannot take, or not as given on this device, is refused
 * when it is set, naming why; the context keeps what it had. */
Test(tuning, a_candidate_the_kernel_cannot_take_is_refused, .init = setup, .fini = teardown) {
    clattn_device_info info;
    clattn_context *ctx = context_on_device_0(&info);
    clattn_tuning t;
    clattn_tuning_init(&t);
    cr_assert_eq(clattn_device_tuning(info.index, CLATTN_VARIANT_FLASH, &t, NULL), CLATTN_SUCCESS);
    t.block_m = 32, t.tile_m = 3; /* micro-tiles that do not divide the tile */
    cr_expect_eq(clattn_context_set_tuning(ctx, CLATTN_VARIANT_FLASH, &t),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(ctx), "block_m is out of range") != NULL, "%s",
              clattn_context_last_error(ctx));
    t.tile_m = t.tile_n = 1; /* as many work-items as scores: more than any device runs */
    t.block_m = 128, t.block_n = 128;
    if (info.max_work_group_size < 128 * 128) {
        cr_expect_eq(clattn_context_set_tuning(ctx, CLATTN_VARIANT_FLASH, &t),
                     CLATTN_ERR_INVALID_ARGUMENT);
        cr_expect(strstr(clattn_context_last_error(ctx), "16384 work-items") != NULL, "%s",
                  clattn_context_last_error(ctx));
    }
    cr_expect_str_neq(tuning_source(ctx, CLATTN_VARIANT_FLASH), "context");
    unsigned *field = clattn_tuning_field(&t, "tile_n");
    cr_expect(field == &t.tile_n, "clattn_tuning_field names the field");
    cr_expect_null(clattn_tuning_field(&t, "tile"));
    clattn_context_destroy(ctx);
}

Test(tuning, nothing_is_written_with_the_cache_folder_off) {
    clattn_context *ctx = NULL;
    setenv("CLATTN_CACHE_DIR", "off", 1);
    cr_assert_eq(clattn_context_create(&ctx, 0), CLATTN_SUCCESS);
    clattn_tuning t; /* the device's own entry: one flash takes */
    clattn_tuning_init(&t);
    cr_assert_eq(clattn_device_tuning(0, CLATTN_VARIANT_FLASH, &t, NULL), CLATTN_SUCCESS);
    char path[64];
    cr_expect_eq(clattn_tuning_file(path, sizeof path), CLATTN_ERR_UNSUPPORTED);
    cr_expect_eq(clattn_tuning_save(ctx, CLATTN_VARIANT_FLASH, &t), CLATTN_ERR_UNSUPPORTED);
    cr_expect_eq(clattn_tuning_save(ctx, (clattn_variant)99, &t), CLATTN_ERR_INVALID_ARGUMENT);
    clattn_context_destroy(ctx);
}

/* tuning.json is read only as a regular file (not through a link) in a private folder. */
Test(tuning, a_file_others_could_have_written_is_ignored, .init = setup, .fini = teardown) {
    clattn_device_info info;
    clattn_context *ctx = context_on_device_0(&info);
    char path[128], real[128];
    write_one_entry(info.name, "lanes", "block_m", 48);
    snprintf(path, sizeof path, "%s/tuning.json", folder);
    snprintf(real, sizeof real, "%s/real.json", folder);
    cr_assert_eq(rename(path, real), 0);
    cr_assert_eq(symlink(real, path), 0);
    cr_expect_eq(run_variant(ctx, CLATTN_VARIANT_LANES).block_m, 16, "read through a link");
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(rename(real, path), 0);
    cr_expect_eq(run_variant(ctx, CLATTN_VARIANT_LANES).block_m, 48, "the regular file");
    cr_assert_eq(chmod(folder, 0777), 0);
    cr_expect_eq(run_variant(ctx, CLATTN_VARIANT_LANES).block_m, 16,
                 "read in a folder others write");
    clattn_tuning t; /* nor written there */
    clattn_tuning_init(&t);
    cr_assert_eq(clattn_device_tuning(info.index, CLATTN_VARIANT_LANES, &t, NULL), CLATTN_SUCCESS);
    cr_expect_eq(clattn_tuning_save(ctx, CLATTN_VARIANT_LANES, &t), CLATTN_ERR_IO, "%s",
                 clattn_context_last_error(ctx));
    cr_assert_eq(chmod(folder, 0700), 0);
    clattn_context_destroy(ctx);
}

/* A damaged file in the cache folder: a value that is not one (a closing bracket or a NUL byte
 * where an array's value should be) ends the reading there, and calls go on. The entry before
 * the damage is still taken. Before, the reader looped on it for ever. */
Test(tuning, a_damaged_file_ends_the_reading_without_hanging, .init = setup, .fini = teardown,
     .timeout = 60) {
    clattn_device_info info;
    clattn_context *ctx = context_on_device_0(&info);
    static const char *const names[] = {"tuning.json", "verdicts.json"};
    static const struct {
        const char *bytes;
        size_t size;
    } damage[] = {{"[}]", 3}, {"[\0]", 3}, {"{\"a\":}", 6}};
    for (size_t n = 0; n < 2; n++)
        for (size_t d = 0; d < sizeof damage / sizeof damage[0]; d++) {
            char path[128];
            snprintf(path, sizeof path, "%s/%s", folder, names[n]);
            FILE *f = fopen(path, "wb");
            cr_assert_not_null(f);
            fprintf(f,
                    "{\"entries\": [{\"device\": \"%s\", \"variant\": \"lanes\", "
                    "\"block_m\": 48}], \"junk\": ",
                    info.name);
            fwrite(damage[d].bytes, 1, damage[d].size, f);
            fputs(", \"more\": 1}", f);
            fclose(f);
            clattn_stats used = run_variant(ctx, CLATTN_VARIANT_LANES);
            if (n == 0) cr_expect_eq(used.block_m, 48, "damage %zu: the entry before it", d);
            remove(path);
        }
    clattn_context_destroy(ctx);
}

/* clattn_tuning_save and clattn_gemm_tuning_save refuse what the row would refuse at run time,
 * as clattn_context_set_tuning does, and leave tuning.json as it was: before, a saved flash entry
 * of tile_m 0 made every later flash call on the device fail. */
Test(tuning, saving_parameters_the_row_refuses_writes_nothing, .init = setup, .fini = teardown) {
    clattn_device_info info;
    clattn_context *ctx = context_on_device_0(&info);
    write_one_entry("another device", "flash", "block_m", 2);
    char path[512], before[512] = "", after[512] = "";
    cr_assert_eq(clattn_tuning_file(path, sizeof path), CLATTN_SUCCESS);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    before[fread(before, 1, sizeof before - 1, f)] = '\0';
    fclose(f);

    clattn_tuning t;
    clattn_tuning_init(&t);
    cr_assert_eq(clattn_device_tuning(info.index, CLATTN_VARIANT_FLASH, &t, NULL), CLATTN_SUCCESS);
    t.tile_m = 0;
    cr_expect_eq(clattn_tuning_save(ctx, CLATTN_VARIANT_FLASH, &t), CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(ctx), "flash: tile_m is out of range") != NULL, "%s",
              clattn_context_last_error(ctx));
    clattn_tuning_init(&t);
    cr_assert_eq(clattn_device_gemm_tuning(info.index, CLATTN_GEMM_PANELS, &t, NULL),
                 CLATTN_SUCCESS);
    t.tile_n = 17;
    cr_expect_eq(clattn_gemm_tuning_save(ctx, CLATTN_GEMM_PANELS, &t), CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(ctx), "panels: tile_m") != NULL, "%s",
              clattn_context_last_error(ctx));

    f = fopen(path, "r");
    cr_assert_not_null(f);
    after[fread(after, 1, sizeof after - 1, f)] = '\0';
    fclose(f);
    cr_expect_str_eq(after, before, "tuning.json changed");
    clattn_context_destroy(ctx);
}

/* Expects a save of the device's own `variant` entry to fail with CLATTN_ERR_IO, saying `text`. */
static void expect_save_refused(clattn_context *ctx, const clattn_device_info *info,
                                clattn_variant variant, const char *text) {
    clattn_tuning t;
    clattn_tuning_init(&t);
    cr_assert_eq(clattn_device_tuning(info->index, variant, &t, NULL), CLATTN_SUCCESS);
    cr_expect_eq(clattn_tuning_save(ctx, variant, &t), CLATTN_ERR_IO);
    cr_expect(strstr(clattn_context_last_error(ctx), text) != NULL, "%s",
              clattn_context_last_error(ctx));
}

/* A tuning.json the reader stopped in (malformed) or could not read (not a regular file) is
 * not rewritten by a save from the entries it kept: the others would be lost. */
Test(tuning, a_save_leaves_a_file_it_could_not_read_whole, .init = setup, .fini = teardown) {
    clattn_device_info info;
    clattn_context *ctx = context_on_device_0(&info);
    static const char damaged[] = "{\"entries\": [{\"device\": \"a\", \"variant\": \"flash\", "
                                  "\"driver\": 3}, {\"device\": \"b\", \"variant\": \"flash\"}]}";
    write_tuning(damaged);
    expect_save_refused(ctx, &info, CLATTN_VARIANT_FLASH, "or holds more than 4096 entries, near");
    char path[512], file[512] = "";
    cr_assert_eq(clattn_tuning_file(path, sizeof path), CLATTN_SUCCESS);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    file[fread(file, 1, sizeof file - 1, f)] = '\0';
    fclose(f);
    cr_expect_str_eq(file, damaged, "the file was rewritten");

    cr_assert_eq(remove(path), 0); /* a folder in its place */
    cr_assert_eq(mkdir(path, 0700), 0);
    expect_save_refused(ctx, &info, CLATTN_VARIANT_FLASH, "is not a regular file");
    cr_assert_eq(rmdir(path), 0);
    clattn_tuning t;
    clattn_tuning_init(&t);
    cr_assert_eq(clattn_device_tuning(info.index, CLATTN_VARIANT_FLASH, &t, NULL), CLATTN_SUCCESS);
    ASSERT_OK(ctx, clattn_tuning_save(ctx, CLATTN_VARIANT_FLASH, &t)); /* none: written */
    clattn_context_destroy(ctx);
}

/* Counts the lines of the file naming `"variant": "`. */
static int entries_in(const char *path) {
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, f)) n += strstr(line, "\"variant\": \"") != NULL;
    fclose(f);
    return n;
}

/* Processes that save tuning entries and record verdicts at the same moment lose none of them:
 * each read, merge and rewrite holds the file's lock (before, 2 to 6 of 7 were kept). The
 * children start together on a pipe's close, each with its own variant; three rounds. */
Test(tuning, processes_saving_at_once_lose_no_entry, .init = setup, .fini = teardown,
     .timeout = 240) {
    static const clattn_variant variants[] = {CLATTN_VARIANT_LANES, CLATTN_VARIANT_ROWWISE,
                                              CLATTN_VARIANT_SPLIT, CLATTN_VARIANT_FLASH};
    enum { WRITERS = sizeof variants / sizeof variants[0] };
    char tuning[512], verdicts[512];
    for (int round = 0; round < 3; round++) {
        int go[2];
        cr_assert_eq(pipe(go), 0);
        for (int w = 0; w < WRITERS; w++) {
            pid_t child = fork();
            cr_assert(child >= 0);
            if (child) continue;
            close(go[1]);
            clattn_context *ctx = NULL;
            clattn_tuning t;
            clattn_verdict v;
            clattn_tuning_init(&t);
            clattn_verdict_init(&v);
            v.kind = CLATTN_VERDICT_PASSED;
            int ok = clattn_context_create(&ctx, 0) == CLATTN_SUCCESS &&
                     clattn_device_tuning(0, variants[w], &t, NULL) == CLATTN_SUCCESS;
            char c;
            ok &= read(go[0], &c, 1) == 0; /* the parent closed it: go */
            ok = ok && clattn_tuning_save(ctx, variants[w], &t) == CLATTN_SUCCESS &&
                 clattn_verdict_record(ctx, variants[w], &v, NULL) == CLATTN_SUCCESS;
            clattn_context_destroy(ctx);
            _exit(ok ? 0 : 1);
        }
        close(go[0]);
        sleep(1); /* the children are ready and waiting on the pipe */
        close(go[1]);
        for (int w = 0; w < WRITERS; w++) {
            int status = 0;
            cr_assert(wait(&status) > 0);
            cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "a writer failed");
        }
        cr_assert_eq(clattn_tuning_file(tuning, sizeof tuning), CLATTN_SUCCESS);
        cr_assert_eq(clattn_verdicts_file(verdicts, sizeof verdicts), CLATTN_SUCCESS);
        cr_expect_eq(entries_in(tuning), WRITERS, "round %d: tuning.json lost entries", round);
        cr_expect_eq(entries_in(verdicts), WRITERS, "round %d: verdicts.json lost entries", round);
        remove(tuning), remove(verdicts);
    }
}

/* Temporaries named as this process's next ones (left by a killed process whose PID this one
 * now has) do not block a save: it takes the next free name. */
Test(tuning, a_save_steps_over_temporaries_named_like_its_own, .init = setup, .fini = teardown) {
    clattn_device_info info;
    clattn_context *ctx = context_on_device_0(&info);
    char path[512], planted[600];
    cr_assert_eq(clattn_tuning_file(path, sizeof path), CLATTN_SUCCESS);
    for (int n = 0; n < 4; n++) {
        snprintf(planted, sizeof planted, "%s.tmp.%ld.%d", path, (long)getpid(), n);
        FILE *f = fopen(planted, "w");
        cr_assert_not_null(f);
        fclose(f);
    }
    clattn_tuning t;
    clattn_tuning_init(&t);
    cr_assert_eq(clattn_device_tuning(info.index, CLATTN_VARIANT_LANES, &t, NULL), CLATTN_SUCCESS);
    ASSERT_OK(ctx, clattn_tuning_save(ctx, CLATTN_VARIANT_LANES, &t));
    cr_expect_eq(entries_in(path), 1);
    clattn_context_destroy(ctx);
}

/* A file of more entries than any real one (JSON_MAX_ENTRIES, 4096) is read up to that many and
 * not rewritten: thousands of empty entries took gigabytes, and written back could pass the
 * readers' size limit. */
Test(tuning, a_file_of_too_many_entries_is_not_rewritten, .init = setup, .fini = teardown) {
    clattn_device_info info;
    clattn_context *ctx = context_on_device_0(&info);
    char path[512];
    cr_assert_eq(clattn_tuning_file(path, sizeof path), CLATTN_SUCCESS);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("{\"entries\": [", f);
    for (int i = 0; i < 5000; i++) fputs("{}, ", f);
    fputs("{}]}", f);
    fclose(f);
    struct stat before, after;
    cr_assert_eq(stat(path, &before), 0);
    expect_save_refused(ctx, &info, CLATTN_VARIANT_LANES, "or holds more than 4096 entries, near");
    cr_assert_eq(stat(path, &after), 0);
    cr_expect_eq(after.st_size, before.st_size, "the file was rewritten");
    clattn_context_destroy(ctx);
}
