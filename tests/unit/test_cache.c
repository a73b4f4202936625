/*
 * The program cache: a second context loads from disk, damaged or foreign entries are
 * rebuilt (never trusted), "off" disables it, the folder follows the environment, builds that
 * fail keep their log, and CLATTN_KERNEL_DIR replaces the embedded sources. Only regular files
 * are read (a FIFO or link named like an entry is skipped), and only in a private folder (made
 * 0700; one others can write to, or another user's, is refused with a message). Temporaries
 * that killed writers left are removed by the next process.
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>

#include "core/core.h"
#include "util.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char cache_dir[128];

/* PoCL keeps compiled programs in its own cache, where clattn then keeps none: with PoCL's off,
 * clattn's cache holds them, on every device. */
static void use_fresh_cache(void) {
    setenv("POCL_KERNEL_CACHE", "0", 1);
    fresh_cache_dir(cache_dir, sizeof cache_dir, "cache-test");
    unsetenv("CLATTN_KERNEL_DIR");
}

static void remove_dir(const char *dir) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

/* Runs a 2x3 softmax on a fresh context; returns the context for inspection. */
static clattn_context *softmax_once(float *out_first) {
    clattn_context *ctx = NULL;
    cr_assert_eq(clattn_context_create(&ctx, 0), CLATTN_SUCCESS);
    float x[6] = {1, 2, 3, 0, 0, 0}, y[6];
    cl_mem in = clCreateBuffer(ctx->cl_ctx, CL_MEM_COPY_HOST_PTR, sizeof x, x, NULL);
    cl_mem out = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE, sizeof y, NULL, NULL);
    clattn_softmax_desc d = {sizeof(clattn_softmax_desc), 2, 3, CLATTN_F32, 1.0f, 0, 3, 0, 3};
    clattn_status status = clattn_softmax(ctx, &d, in, out, NULL, NULL);
    cr_assert_eq(status, CLATTN_SUCCESS, "%s", clattn_context_last_error(ctx));
    clEnqueueReadBuffer(ctx->queue, out, CL_TRUE, 0, sizeof y, y, 0, NULL, NULL);
    if (out_first) *out_first = y[0];
    clReleaseMemObject(in);
    clReleaseMemObject(out);
    return ctx;
}

/* Builds and loads counted on a fresh context running the softmax. */
static void expect_counts(unsigned built, unsigned loaded) {
    clattn_context *ctx = softmax_once(NULL);
    cr_assert_eq(ctx->programs_built, built, "built %u, expected %u", ctx->programs_built, built);
    cr_assert_eq(ctx->programs_loaded, loaded, "loaded %u, expected %u", ctx->programs_loaded,
                 loaded);
    clattn_context_destroy(ctx);
}

/* The path of the single cache entry in cache_dir. */
static void entry_path(char *out, size_t size) {
    DIR *dir = opendir(cache_dir);
    cr_assert_not_null(dir);
    int found = 0;
    for (struct dirent *e; (e = readdir(dir));) {
        if (!strstr(e->d_name, ".clbin")) continue;
        cr_assert(strstr(e->d_name, ".tmp") == NULL, "a temporary file was left behind");
        snprintf(out, size, "%s/%s", cache_dir, e->d_name);
        found++;
    }
    closedir(dir);
    cr_assert_eq(found, 1, "expected one cache entry, found %d", found);
}

static long file_size(const char *path) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    return size;
}

/* Replaces the byte at `offset` with `value`, or flips all its bits when value is -1. */
static void poke(const char *path, long offset, int value) {
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f);
    fseek(f, offset, SEEK_SET);
    int old = fgetc(f);
    fseek(f, offset, SEEK_SET);
    fputc(value < 0 ? old ^ 0xFF : value, f);
    fclose(f);
}

Test(cache, second_context_loads_from_disk) {
    use_fresh_cache();
    expect_counts(1, 0);
    expect_counts(0, 1);
    remove_dir(cache_dir);
}

Test(cache, one_context_builds_once) {
    use_fresh_cache();
    clattn_context *ctx = softmax_once(NULL);
    float x[3] = {0, 0, 0};
    cl_mem buf = clCreateBuffer(ctx->cl_ctx, CL_MEM_COPY_HOST_PTR, sizeof x, x, NULL);
    clattn_softmax_desc d = {sizeof(clattn_softmax_desc), 1, 3, CLATTN_F32, 1.0f, 0, 3, 0, 3};
    cr_assert_eq(clattn_softmax(ctx, &d, buf, buf, NULL, NULL), CLATTN_SUCCESS);
    clFinish(ctx->queue);
    cr_assert_eq(ctx->programs_built + ctx->programs_loaded, 1);
    clReleaseMemObject(buf);
    clattn_context_destroy(ctx);
    remove_dir(cache_dir);
}

/* Each kind of damage makes the entry ignored and rebuilt; the rebuilt entry loads again. */
Test(cache, damaged_entries_are_rebuilt_not_trusted) {
    use_fresh_cache();
    expect_counts(1, 0);
    char path[512];
    entry_path(path, sizeof path);
    long size = file_size(path);
    const char *kinds[] = {"last binary byte", "magic", "format version", "key",
                           "truncated",        "empty"};
    for (size_t kind = 0; kind < sizeof kinds / sizeof kinds[0]; kind++) {
        switch (kind) {
        case 0:
            poke(path, size - 1, -1);
            break;
        case 1:
            poke(path, 0, 'X');
            break;
        case 2:
            poke(path, 8, 7);
            break;
        case 3:
            poke(path, 40, '#');
            break; /* inside the key text */
        case 4:
            cr_assert_eq(truncate(path, size / 2), 0);
            break;
        case 5:
            cr_assert_eq(truncate(path, 0), 0);
            break;
        }
        cr_log_info("damage: %s", kinds[kind]);
        expect_counts(1, 0);
        expect_counts(0, 1);
        size = file_size(path);
    }
    remove_dir(cache_dir);
}

/* An entry made for another program, under this program's name, is foreign: rebuilt. */
Test(cache, foreign_entry_is_rebuilt) {
    use_fresh_cache();
    expect_counts(1, 0);
    char path[512], moved[600];
    entry_path(path, sizeof path);
    snprintf(moved, sizeof moved, "%s/other.bin", cache_dir);
    cr_assert_eq(rename(path, moved), 0);
    /* A float16 softmax is another program: its entry is a valid file with another key. */
    clattn_context *ctx = NULL;
    cr_assert_eq(clattn_context_create(&ctx, 0), CLATTN_SUCCESS);
    uint16_t x[3] = {0, 0, 0};
    cl_mem buf = clCreateBuffer(ctx->cl_ctx, CL_MEM_COPY_HOST_PTR, sizeof x, x, NULL);
    clattn_softmax_desc d = {sizeof(clattn_softmax_desc), 1, 3, CLATTN_F16, 1.0f, 0, 3, 0, 3};
    cr_assert_eq(clattn_softmax(ctx, &d, buf, buf, NULL, NULL), CLATTN_SUCCESS);
    clFinish(ctx->queue);
    clReleaseMemObject(buf);
    clattn_context_destroy(ctx);
    char f16_path[512];
    entry_path(f16_path, sizeof f16_path);
    cr_assert_eq(rename(f16_path, path), 0); /* the f16 entry under the f32 name */
    expect_counts(1, 0);
    remove(moved);
    remove_dir(cache_dir);
}

Test(cache, off_disables_the_disk_cache) {
    setenv("CLATTN_CACHE_DIR", "off", 1);
    char buf[256];
    cr_assert_null(program_cache_dir(buf, sizeof buf));
    expect_counts(1, 0);
    expect_counts(1, 0);
}

Test(cache, folder_follows_the_environment) {
    char buf[256];
    unsetenv("CLATTN_CACHE_DIR");
    setenv("XDG_CACHE_HOME", "/tmp/xdg-test", 1);
    cr_assert_str_eq(program_cache_dir(buf, sizeof buf), "/tmp/xdg-test/clattn");
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", "/tmp/home-test", 1);
    cr_assert_str_eq(program_cache_dir(buf, sizeof buf), "/tmp/home-test/.cache/clattn");
    setenv("CLATTN_CACHE_DIR", "/tmp/elsewhere", 1);
    cr_assert_str_eq(program_cache_dir(buf, sizeof buf), "/tmp/elsewhere");
}

/* Writes cl/common.cl and a softmax.cl edited by `edit` (from, to) into a temporary folder;
 * skips the test when the source tree is not where it was built. */
static void kernel_dir_with(const char *from, const char *to, char *dir, size_t size) {
    if (access(CLATTN_SOURCE_DIR "/cl/softmax.cl", R_OK) != 0)
        cr_skip_test("needs the source tree at " CLATTN_SOURCE_DIR);
    snprintf(dir, size, "/tmp/clattn-kernels-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "cp '%s'/cl/* '%s/' && sed 's|%s|%s|' '%s/cl/softmax.cl' > '%s/softmax.cl'",
             CLATTN_SOURCE_DIR, dir, from, to, CLATTN_SOURCE_DIR, dir);
    cr_assert_eq(system(cmd), 0);
    setenv("CLATTN_KERNEL_DIR", dir, 1);
}

Test(cache, kernel_dir_replaces_the_embedded_sources) {
    setenv("CLATTN_CACHE_DIR", "off", 1);
    float first = 0, doubled = 0;
    unsetenv("CLATTN_KERNEL_DIR");
    clattn_context_destroy(softmax_once(&first));
    char dir[64];
    kernel_dir_with("1.0f / row_sum", "2.0f / row_sum", dir, sizeof dir);
    clattn_context_destroy(softmax_once(&doubled));
    cr_assert_float_eq(doubled, 2 * first, 1e-6);
    remove_dir(dir);
}

Test(cache, failed_build_returns_build_and_keeps_the_log) {
    setenv("CLATTN_CACHE_DIR", "off", 1);
    char dir[64];
    kernel_dir_with("float local_max", "float local_max = undeclared_name +", dir, sizeof dir);
    clattn_context *ctx = NULL;
    cr_assert_eq(clattn_context_create(&ctx, 0), CLATTN_SUCCESS);
    float x[3] = {0};
    cl_mem buf = clCreateBuffer(ctx->cl_ctx, CL_MEM_COPY_HOST_PTR, sizeof x, x, NULL);
    clattn_softmax_desc d = {sizeof(clattn_softmax_desc), 1, 3, CLATTN_F32, 1.0f, 0, 3, 0, 3};
    cr_assert_eq(clattn_softmax(ctx, &d, buf, buf, NULL, NULL), CLATTN_ERR_BUILD);
    cr_assert(strstr(clattn_context_build_log(ctx), "undeclared_name") != NULL, "log: %s",
              clattn_context_build_log(ctx));
    cr_assert(strstr(clattn_context_last_error(ctx), "softmax.cl") != NULL);
    clReleaseMemObject(buf);
    clattn_context_destroy(ctx);
    remove_dir(dir);
}

Test(cache, missing_kernel_dir_file_is_an_io_error) {
    setenv("CLATTN_KERNEL_DIR", "/nonexistent-clattn-kernels", 1);
    clattn_context *ctx = NULL;
    cr_assert_eq(clattn_context_create(&ctx, 0), CLATTN_SUCCESS);
    float x[3] = {0};
    cl_mem buf = clCreateBuffer(ctx->cl_ctx, CL_MEM_COPY_HOST_PTR, sizeof x, x, NULL);
    clattn_softmax_desc d = {sizeof(clattn_softmax_desc), 1, 3, CLATTN_F32, 1.0f, 0, 3, 0, 3};
    cr_assert_eq(clattn_softmax(ctx, &d, buf, buf, NULL, NULL), CLATTN_ERR_IO);
    /* the generated attn_params.cl stays embedded; mask_rules.h, a file of cl/, must be there */
    cr_assert(strstr(clattn_context_last_error(ctx), "mask_rules.h") != NULL, "%s",
              clattn_context_last_error(ctx));
    clReleaseMemObject(buf);
    clattn_context_destroy(ctx);
}

/* ---------------------------------------------------------------- the folder's safety */

/* A FIFO under an entry's name: once, every later run hung in fopen. Now it is skipped, the
 * program built, and the entry written over it. */
Test(cache, a_fifo_named_like_an_entry_is_skipped_not_waited_on, .timeout = 300) {
    use_fresh_cache();
    expect_counts(1, 0);
    char path[512];
    entry_path(path, sizeof path);
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(mkfifo(path, 0600), 0);
    expect_counts(1, 0);
    expect_counts(0, 1);
    remove_dir(cache_dir);
}

/* A symbolic link under an entry's name is not followed, even to a valid entry. */
Test(cache, a_link_named_like_an_entry_is_not_followed) {
    use_fresh_cache();
    expect_counts(1, 0);
    char path[512], moved[600];
    entry_path(path, sizeof path);
    snprintf(moved, sizeof moved, "%s/elsewhere", cache_dir);
    cr_assert_eq(rename(path, moved), 0);
    cr_assert_eq(symlink(moved, path), 0);
    expect_counts(1, 0);
    remove_dir(cache_dir);
}

/* Runs expect_counts(1, 0) twice with stderr captured: nothing is cached, and the refusal is
 * said once, naming the folder and `why`. */
static void expect_folder_refused(const char *why) {
    fflush(stderr);
    cr_redirect_stderr();
    expect_counts(1, 0);
    expect_counts(1, 0);
    fflush(stderr);
    char text[2048] = "";
    FILE *f = cr_get_redirected_stderr();
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    cr_expect(strstr(text, cache_dir) && strstr(text, why), "stderr: '%s'", text);
    const char *first = strstr(text, "not using");
    cr_expect(first && !strstr(first + 1, "not using"), "said more than once: '%s'", text);
}

/* A folder others can write to could hold their code: not read, not written, and said. */
Test(cache, a_folder_others_can_write_is_not_used) {
    use_fresh_cache();
    cr_assert_eq(chmod(cache_dir, 0777), 0);
    expect_folder_refused("writable by others");
    DIR *dir = opendir(cache_dir);
    int entries = 0;
    for (struct dirent *e; (e = readdir(dir));) entries += e->d_name[0] != '.';
    closedir(dir);
    cr_expect_eq(entries, 0, "an entry was written into the folder");
    cr_assert_eq(chmod(cache_dir, 0700), 0);
    expect_counts(1, 0);
    expect_counts(0, 1);
    remove_dir(cache_dir);
}

Test(cache, a_folder_under_one_others_can_write_is_not_used) {
    use_fresh_cache();
    char inner[256];
    snprintf(inner, sizeof inner, "%s/inner", cache_dir);
    cr_assert_eq(mkdir(inner, 0700), 0);
    cr_assert_eq(chmod(cache_dir, 0777), 0); /* not sticky: others may replace `inner` */
    setenv("CLATTN_CACHE_DIR", inner, 1);
    expect_folder_refused("the folder above it");
    remove_dir(cache_dir);
}

Test(cache, a_folder_of_another_user_is_not_used) {
    if (geteuid() != 0) cr_skip_test("needs root, to give the folder to another user");
    use_fresh_cache();
    cr_assert_eq(chown(cache_dir, 65534, 65534), 0);
    expect_folder_refused("owned by uid 65534");
    remove_dir(cache_dir);
}

/* The folders the cache creates are 0700. */
Test(cache, the_folders_it_makes_are_private) {
    use_fresh_cache();
    char outer[256], inner[300];
    snprintf(outer, sizeof outer, "%s/a", cache_dir);
    snprintf(inner, sizeof inner, "%s/b", outer);
    setenv("CLATTN_CACHE_DIR", inner, 1);
    expect_counts(1, 0);
    struct stat st;
    cr_assert_eq(stat(outer, &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0700, "%s: mode %03o", outer, st.st_mode & 0777);
    cr_assert_eq(stat(inner, &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0700, "%s: mode %03o", inner, st.st_mode & 0777);
    expect_counts(0, 1);
    remove_dir(cache_dir);
}

/* Writes "stale" into cache_dir/NAME, NAME a printf format of one process id. */
static void plant(const char *format, int pid) {
    char name[128], path[300];
    snprintf(name, sizeof name, format, pid);
    snprintf(path, sizeof path, "%s/%s", cache_dir, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs("stale", f);
    fclose(f);
}

static int planted_exists(const char *format, int pid) {
    char name[128], path[300];
    snprintf(name, sizeof name, format, pid);
    snprintf(path, sizeof path, "%s/%s", cache_dir, name);
    return access(path, F_OK) == 0;
}

/* What writers killed while writing left (a kernel binary's temporary, tuning.json's) is
 * removed at the folder's first use by a later process; a live process's temporary, and
 * names that are not the folder's temporaries, stay. */
Test(cache, temporaries_of_processes_that_are_gone_are_removed) {
    use_fresh_cache();
    pid_t gone = fork();
    if (gone == 0) _exit(0);
    cr_assert(gone > 0);
    cr_assert_eq(waitpid(gone, NULL, 0), gone);
    cr_assert(kill(gone, 0) != 0, "process %d still exists", (int)gone);
    static const char *const removed[] = {"0123456789abcdef.clbin.tmp.%d.0",
                                          "tuning.json.tmp.%d.3"};
    static const char *const kept[] = {"0123456789abcdef.clbin.tmp.%d.x", "notes.tmp.%d.0",
                                       "0123456789abcdef.clbin.tmp.%d.1.2", "x.clbin.tmp.%d.0"};
    for (size_t i = 0; i < 2; i++) plant(removed[i], gone);
    for (size_t i = 0; i < 4; i++) plant(kept[i], gone);
    plant("fedcba9876543210.clbin.tmp.%d.0", getpid()); /* alive: this process */
    expect_counts(1, 0);
    for (size_t i = 0; i < 2; i++) cr_expect(!planted_exists(removed[i], gone), "%s", removed[i]);
    for (size_t i = 0; i < 4; i++) cr_expect(planted_exists(kept[i], gone), "%s", kept[i]);
    cr_expect(planted_exists("fedcba9876543210.clbin.tmp.%d.0", getpid()),
              "a live process's temporary was removed");
    remove_dir(cache_dir);
}
