/*
 * clattn cache: the cache folder of compiled kernels.
 *   info   where it is, what it holds, its limit;
 *   clear  removes every compiled kernel (tuning.json and verdicts.json stay);
 *   trim   removes the least recently used down to a size (other clattn versions first);
 *   warm   builds ahead what `auto` runs for some dtypes and head dimensions, several
 *          programs at once: one child process per job, each with its own context (jobs.h).
 * Failures exit 1, usage errors 2.
 */
#include "args.h"
#include "commands.h"
#include "common.h"
#include "jobs.h"
#include "textbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_WARM_DIMS  8
#define MAX_WARM_ITEMS (3 * MAX_WARM_DIMS) /* f32, f16, bf16 x --head-dims values */

static const cli_option cache_options[] = {
    {"device", "SPEC", "warm: the device (default $CLATTN_DEVICE, else the first)"},
    {"dtypes", "LIST", "warm: input dtypes, of f32,f16,bf16 (default f32,f16)"},
    {"head-dims", "LIST", "warm: head dimensions (default 64,128)"},
    {"jobs", "N", "warm: programs built at once, in child processes (default: the cores)"},
    {"max-mb", "MB", "trim: the size to trim to, in MiB (default: the limit)"},
    {"json", NULL, "info: print one JSON object"},
    {"help", NULL, "show this help"},
};
#define NUM_CACHE_OPTIONS (sizeof cache_options / sizeof cache_options[0])
#define CACHE_SYNOPSIS                                                                             \
    "info [--json] | clear | trim [--max-mb MB]\n"                                                 \
    "       | warm [--device SPEC] [--dtypes LIST] [--head-dims LIST] [--jobs N]\n\n"              \
    "The folder is $CLATTN_CACHE_DIR, else $XDG_CACHE_HOME/clattn, else ~/.cache/clattn;\n"        \
    "its compiled kernels are kept under $CLATTN_CACHE_MAX_MB MiB (default 256)."

static void usage(void) {
    args_usage("cache", CACHE_SYNOPSIS, cache_options, NUM_CACHE_OPTIONS);
}

/* ---------------------------------------------------------------- info, clear, trim */

static void format_time(int64_t seconds, char *out, size_t size) {
    time_t t = (time_t)seconds;
    struct tm tm;
    if (seconds == 0 || !gmtime_r(&t, &tm) || !strftime(out, size, "%Y-%m-%d %H:%M UTC", &tm))
        snprintf(out, size, "-");
}

static int cache_unavailable(clattn_status status) {
    if (status == CLATTN_ERR_UNSUPPORTED)
        cli_error(
            "cache",
            "the cache is off (CLATTN_CACHE_DIR=off, no HOME, or a folder name past 4095 bytes)");
    else
        cli_error("cache", "cannot read the cache folder (%s)", clattn_status_name(status));
    return 1;
}

/* The cache's limit: CLATTN_CACHE_MAX_MB takes sizes below this many MiB, --max-mb too. */
#define MAX_MB_LIMIT 1e12

/* A size in MiB from 0 to below MAX_MB_LIMIT, the whole text; -1 for anything else. */
static double size_mb(const char *text) {
    char *end = NULL;
    double mb = text && *text ? strtod(text, &end) : -1;
    return end && !*end && mb >= 0 && mb < MAX_MB_LIMIT ? mb : -1;
}

/* Where the limit comes from, as the library reads $CLATTN_CACHE_MAX_MB (which it ignores,
 * quietly but for CLATTN_VERBOSE, when the value is not a size). */
static void print_limit_source(void) {
    const char *env = getenv("CLATTN_CACHE_MAX_MB");
    if (!env || !*env)
        printf(" (the default; $CLATTN_CACHE_MAX_MB sets it)\n");
    else if (size_mb(env) < 0)
        printf(" (the default: CLATTN_CACHE_MAX_MB=%s is not a size in MiB below %.0e)\n", env,
               MAX_MB_LIMIT);
    else
        printf(" ($CLATTN_CACHE_MAX_MB)\n");
}

static int cache_info(const cli_args *args) {
    char folder[4096], oldest[64], newest[64];
    clattn_cache_info info;
    clattn_cache_info_init(&info);
    clattn_status status = clattn_cache_folder(folder, sizeof folder);
    if (status == CLATTN_SUCCESS) status = clattn_cache_info_get(&info);
    if (status != CLATTN_SUCCESS) return cache_unavailable(status);
    format_time(info.oldest_use, oldest, sizeof oldest);
    format_time(info.newest_use, newest, sizeof newest);
    if (args_has(args, "json")) {
        textbuf name = {0};
        textbuf_json_string(&name, folder); /* quotes and backslashes escaped */
        printf("{\"folder\": %s, \"entries\": %zu, \"bytes\": %llu, "
               "\"other_version_entries\": %zu, \"other_version_bytes\": %llu, "
               "\"oldest_use\": %lld, \"newest_use\": %lld, \"limit_bytes\": %llu}\n",
               name.failed ? "null" : name.data, info.entries, (unsigned long long)info.bytes,
               info.other_version_entries, (unsigned long long)info.other_version_bytes,
               (long long)info.oldest_use, (long long)info.newest_use,
               (unsigned long long)info.limit_bytes);
        textbuf_free(&name);
        return 0;
    }
    printf("folder      %s\n", folder);
    printf("entries     %zu compiled programs, %.1f MiB\n", info.entries,
           (double)info.bytes / 1048576.0);
    printf("  of them   %zu of other clattn versions, %.1f MiB (removed first)\n",
           info.other_version_entries, (double)info.other_version_bytes / 1048576.0);
    printf("last used   oldest %s, newest %s\n", oldest, newest);
    printf("limit       %.1f MiB", (double)info.limit_bytes / 1048576.0);
    print_limit_source();
    printf("PoCL        keeps its devices' compiled kernels in its own cache, not here, unless\n"
           "            POCL_KERNEL_CACHE=0 (docs/kernel-cache.md)\n");
    return 0;
}

static int cache_trim_to(const cli_args *args, int clear) {
    clattn_cache_info info;
    clattn_cache_info_init(&info);
    clattn_status status = clattn_cache_info_get(&info);
    if (status != CLATTN_SUCCESS) return cache_unavailable(status);
    uint64_t max_bytes = clear ? 0 : info.limit_bytes;
    if (!clear && args_get(args, "max-mb")) {
        const char *text = args_get(args, "max-mb");
        double mb = size_mb(text); /* a double: float32 would round 1e12 down into range */
        if (mb < 0) {
            cli_error("cache", "--max-mb: expected a size >= 0 and below %.0e MiB, got '%s'",
                      MAX_MB_LIMIT, text);
            return EXIT_USAGE;
        }
        max_bytes = (uint64_t)(mb * 1048576.0);
    }
    size_t removed = 0;
    status = clattn_cache_trim(max_bytes, &removed);
    printf("removed %zu of %zu compiled programs\n", removed, info.entries);
    if (status == CLATTN_ERR_IO) {
        cli_error("cache", "some entries could not be removed (CLATTN_VERBOSE=1 names them)");
        return 1;
    }
    return status == CLATTN_SUCCESS ? 0 : cache_unavailable(status);
}

/* ---------------------------------------------------------------- warm */

typedef struct warm_item {
    clattn_dtype dtype;
    size_t head_dim;
} warm_item;

static const char *const dtype_names[] = {"f32", "f16", "bf16", NULL}; /* clattn_dtype order */

/* The dtypes x head dimensions of the options, into items. @return 0 or EXIT_USAGE. */
static int warm_items(const cli_args *args, warm_item *items, size_t *count) {
    char words[16][64] = {"f32", "f16"};
    size_t dims[32] = {64, 128}, num_words = 2, num_dims = 2, distinct = 0;
    if (args_get(args, "dtypes") && parse_word_list(args, "dtypes", words, 16, &num_words) != 0)
        return EXIT_USAGE;
    if (args_get(args, "head-dims") &&
        parse_size_list(args, "head-dims", 1, dims, 32, &num_dims) != 0)
        return EXIT_USAGE;
    for (size_t d = 0; d < num_dims; d++) { /* a dim named twice counts once */
        size_t seen = 0;
        while (seen < distinct && dims[seen] != dims[d]) seen++;
        if (seen == distinct) dims[distinct++] = dims[d];
    }
    num_dims = distinct;
    if (num_dims > MAX_WARM_DIMS) {
        cli_error("cache", "--head-dims: at most %d different head dims, got %zu", MAX_WARM_DIMS,
                  num_dims);
        return EXIT_USAGE;
    }
    *count = 0;
    for (size_t w = 0; w < num_words; w++) {
        int t = 0;
        while (dtype_names[t] && strcmp(dtype_names[t], words[w]) != 0) t++;
        if (!dtype_names[t]) {
            cli_error("cache", "--dtypes: expected f32, f16 or bf16, got '%s'", words[w]);
            return EXIT_USAGE;
        }
        for (size_t d = 0; d < num_dims; d++) {
            warm_item item = {(clattn_dtype)t, dims[d]};
            size_t seen = 0; /* a dtype or dim given twice is warmed once */
            while (seen < *count &&
                   (items[seen].dtype != item.dtype || items[seen].head_dim != item.head_dim))
                seen++;
            if (seen == *count) items[(*count)++] = item;
        }
    }
    return 0;
}

/* What the warming jobs share. */
typedef struct warm_list {
    const char *spec;
    const warm_item *items;
    size_t count;
} warm_list;

/* Warms items job, job + jobs, ... on its own context (a job_share). @return the exit status. */
static int warm_share(void *arg, size_t job, size_t jobs) {
    const warm_list *list = arg;
    clattn_context *ctx = NULL;
    int rc = cli_open_context("cache", list->spec, &ctx);
    for (size_t i = job; rc == 0 && i < list->count; i += jobs) {
        const warm_item *item = &list->items[i];
        double start = seconds_now();
        clattn_status status = clattn_cache_warm(ctx, item->dtype, item->head_dim);
        char what[64];
        snprintf(what, sizeof what, "%s D=%zu", dtype_names[item->dtype], item->head_dim);
        if (status != CLATTN_SUCCESS) {
            cli_report("cache", what, status, ctx);
            rc = 1;
        } else {
            printf("[%zu/%zu] %-12s ready in %.1f s\n", i + 1, list->count, what,
                   seconds_now() - start);
            fflush(stdout);
        }
    }
    clattn_context_destroy(ctx);
    return rc;
}

static int cache_warm(const cli_args *args) {
    warm_item items[MAX_WARM_ITEMS];
    size_t count = 0, jobs = jobs_default();
    int rc = warm_items(args, items, &count);
    if (rc != 0) return rc;
    if (jobs_parse(args, &jobs) != 0) return EXIT_USAGE;
    warm_list list = {args_get(args, "device"), items, count};
    if (jobs > count) jobs = count > 0 ? count : 1;
    if (jobs > 1 && jobs_check_device("cache", list.spec) != 0) return 1;
    double start = seconds_now();
    rc = jobs == 1 ? warm_share(&list, 0, 1) : jobs_run("cache", warm_share, &list, jobs, 0);
    printf("%s %zu kinds of call in %.1f s with %zu jobs%s\n", rc ? "tried" : "warmed", count,
           seconds_now() - start, jobs, rc ? "; some failed (above)" : "");
    return rc;
}

/* Whether every option given belongs to the action (its words in action_options). */
static int options_fit(const cli_args *args, const char *action, const char *allowed) {
    for (size_t i = 0; i < NUM_CACHE_OPTIONS; i++) {
        const char *name = cache_options[i].name;
        if (args->values[i] && strcmp(name, "help") != 0 && !args_listed(allowed, name)) {
            cli_error("cache", "--%s does not apply to 'cache %s'", name, action);
            return 0;
        }
    }
    return 1;
}

int cmd_cache(int argc, char **argv) {
    static const char *const actions[] = {"info", "clear", "trim", "warm"};
    static const char *const action_options[] = {"json", "", "max-mb",
                                                 "device dtypes head-dims jobs"};
    if (argc < 1 || argv[0][0] == '-') {
        cli_args args;
        int rc = args_parse(&args, cache_options, NUM_CACHE_OPTIONS, "cache", argc, argv);
        if (rc == 0) cli_error("cache", "name an action: info, clear, trim or warm");
        if (rc <= 1) usage();
        return rc == 1 ? 0 : EXIT_USAGE;
    }
    int action = 0;
    while (action < 4 && strcmp(actions[action], argv[0]) != 0) action++;
    if (action == 4) {
        cli_error("cache", "unknown action '%s' (info, clear, trim or warm)", argv[0]);
        return EXIT_USAGE;
    }
    cli_args args;
    int rc = args_parse(&args, cache_options, NUM_CACHE_OPTIONS, "cache", argc - 1, argv + 1);
    if (rc == 1) usage();
    if (rc != 0) return rc == 1 ? 0 : EXIT_USAGE;
    if (!options_fit(&args, actions[action], action_options[action])) return EXIT_USAGE;
    if (action == 0) return cache_info(&args);
    if (action == 3) return cache_warm(&args);
    return cache_trim_to(&args, action == 1);
}
