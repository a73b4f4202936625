/*
 * clattn pattern: writes the block-sparse layout of a standard pattern (clattn_pattern_layout)
 * as a |u1 .npy file that `clattn run --block-layout L.npy --block-size BQ,BK` reads: 2-D
 * [ceil(Nq/BQ), ceil(Nk/BK)], or 3-D [H, ...] with --heads (BigBird draws head h with seed+h,
 * the other kinds repeat the layout). --show prints the layout, '#' for an allowed block.
 * Usage errors exit 2, failures to write exit 1.
 */
#include "args.h"
#include "commands.h"
#include "npy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cli_option pattern_options[] = {
    {"kind", "KIND", "sliding|bigbird|fixed|strided|longformer (or the first argument)"},
    {"nq", "N", "query length (required)"},
    {"nk", "N", "key length (required)"},
    {"block", "BQ,BK", "block size in queries,keys (required)"},
    {"window", "W", "sliding, bigbird, longformer: band width in blocks, odd (default 3)"},
    {"global", "G", "bigbird: global block rows and columns (default 2)"},
    {"random", "R", "bigbird: random blocks per block row (default 3)"},
    {"seed", "S", "bigbird: seed of the random blocks (default 0)"},
    {"stride", "S", "fixed, strided: stride in blocks, 1 to 2^60 (default 4)"},
    {"summary", "C", "fixed: summary blocks at the end of each stride (default 1)"},
    {"global-blocks", "I,J,...", "longformer: global block indices (key blocks)"},
    {"causal", NULL, "keep only blocks at or below the end-aligned diagonal"},
    {"heads", "H", "write [H, blocks_q, blocks_k] (bigbird: seed+h for head h)"},
    {"out", "L.npy", "output file (|u1)"},
    {"show", NULL, "print the layout: '#' allowed, '.' masked, one line per block row"},
    {"help", NULL, "show this help"},
};
#define NUM_PATTERN_OPTIONS (sizeof pattern_options / sizeof pattern_options[0])
#define PATTERN_SYNOPSIS                                                                           \
    "KIND --nq N --nk N --block BQ,BK (--out L.npy | --show)\n"                                    \
    "       [--window W] [--global G] [--random R] [--seed S] [--stride S] [--summary C]\n"        \
    "       [--global-blocks I,J,...] [--causal] [--heads H]\n\n"                                  \
    "KIND: sliding | bigbird | fixed | strided | longformer (see docs/patterns.md)"

/* Kind names in clattn_pattern_kind order, and the parameter options each kind takes. */
#define KIND_LIST "sliding|bigbird|fixed|strided|longformer"
static const char *const kind_names[] = {"sliding", "bigbird",    "fixed",
                                         "strided", "longformer", NULL};
static const char *const kind_params[] = {"--window", "--window, --global, --random, --seed",
                                          "--stride, --summary", "--stride",
                                          "--window, --global-blocks"};
static const char *const all_params[] = {"window", "global",  "random",       "seed",
                                         "stride", "summary", "global-blocks"};

/* What the command builds; released by job_release. */
typedef struct pattern_job {
    clattn_pattern_desc desc;
    const char *kind_name;
    size_t nq, nk, bq, bk, heads;
    size_t *globals;
    uint8_t *layout; /* [heads][blocks_q][blocks_k] */
} pattern_job;

static void job_release(pattern_job *job) {
    free(job->globals);
    free(job->layout);
}

/* ---------------------------------------------------------------- the KIND argument */

static int option_takes_value(const char *word) {
    const char *name = word + 2;
    size_t len = strcspn(name, "=");
    if (name[len] == '=') return 0; /* --opt=VALUE carries its value */
    for (size_t i = 0; i < NUM_PATTERN_OPTIONS; i++)
        if (strlen(pattern_options[i].name) == len &&
            strncmp(pattern_options[i].name, name, len) == 0)
            return pattern_options[i].value != NULL;
    return 0;
}

/* Moves the first word that is neither an option nor an option's value into *kind; the other
 * words go to rest[] (a second stray word stays there for args_parse to reject). */
static void split_kind(int argc, char **argv, const char **kind, char **rest, int *rest_count) {
    *kind = NULL;
    *rest_count = 0;
    for (int a = 0; a < argc; a++) {
        const char *word = argv[a];
        if (strncmp(word, "--", 2) == 0) {
            rest[(*rest_count)++] = argv[a];
            if (option_takes_value(word) && a + 1 < argc) rest[(*rest_count)++] = argv[++a];
        } else if (!*kind && word[0] != '-') {
            *kind = word;
        } else {
            rest[(*rest_count)++] = argv[a];
        }
    }
}

static int find_kind(const char *name) {
    for (int i = 0; kind_names[i]; i++)
        if (strcmp(kind_names[i], name) == 0) return i;
    return -1;
}

/* The kind from the positional word or --kind (one of them, once). @return 0 or EXIT_USAGE. */
static int resolve_kind(const cli_args *args, const char *positional, pattern_job *job) {
    int index = 0;
    if (positional && args_has(args, "kind")) {
        cli_error("pattern", "the kind is given twice: '%s' and --kind %s", positional,
                  args_get(args, "kind"));
        return EXIT_USAGE;
    }
    if (positional) {
        if ((index = find_kind(positional)) < 0) {
            cli_error("pattern", "unknown kind '%s' (expected " KIND_LIST ")", positional);
            return EXIT_USAGE;
        }
    } else if (!args_has(args, "kind")) {
        cli_error("pattern", "KIND is required: " KIND_LIST " (see clattn help pattern)");
        return EXIT_USAGE;
    } else if (parse_choice(args, "kind", kind_names, &index) != 0) {
        return EXIT_USAGE;
    }
    job->desc.kind = (clattn_pattern_kind)index;
    job->kind_name = kind_names[index];
    return 0;
}

/* ---------------------------------------------------------------- options */

/* --nq, --nk, --block and one of --out/--show are required; parameters of other kinds are
 * refused rather than silently ignored. */
static int check_presence(const cli_args *args, const pattern_job *job) {
    static const char *const required[] = {"nq", "nk", "block"};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        if (!args_has(args, required[i])) {
            cli_error("pattern", "--%s is required (see clattn help pattern)", required[i]);
            return EXIT_USAGE;
        }
    if (!args_has(args, "out") && !args_has(args, "show")) {
        cli_error("pattern", "--out L.npy or --show is required");
        return EXIT_USAGE;
    }
    const char *takes = kind_params[job->desc.kind];
    for (size_t i = 0; i < sizeof all_params / sizeof all_params[0]; i++)
        if (args_has(args, all_params[i]) && !args_listed(takes, all_params[i])) {
            cli_error("pattern", "--%s does not apply to %s (it takes %s)", all_params[i],
                      job->kind_name, takes);
            return EXIT_USAGE;
        }
    return 0;
}

/* Reads an optional size option from min to max, keeping `fallback` when it is absent. */
static int optional_size(const cli_args *args, const char *name, int64_t min, int64_t max,
                         size_t fallback, size_t *out) {
    int64_t value = 0;
    *out = fallback;
    if (!args_has(args, name)) return 0;
    if (parse_int64_range(args, name, min, max, &value) != 0) return -1;
    *out = (size_t)value;
    return 0;
}

/* ceil(n / block) without overflow */
static size_t blocks_of(size_t n, size_t block) {
    return n / block + (n % block != 0);
}

/* --nq --nk --block --heads: the layout's shape. */
static int parse_shape(const cli_args *args, pattern_job *job) {
    int64_t bq = 0, bk = 0;
    if (parse_size(args, "nq", 1, &job->nq) || parse_size(args, "nk", 1, &job->nk) ||
        parse_pair_range(args, "block", MIN_BLOCK_SIZE, MAX_BLOCK_SIZE, &bq, &bk) ||
        optional_size(args, "heads", 1, INT64_MAX, 1, &job->heads))
        return EXIT_USAGE;
    job->bq = (size_t)bq;
    job->bk = (size_t)bk;
    job->desc.blocks_q = blocks_of(job->nq, job->bq);
    job->desc.blocks_k = blocks_of(job->nk, job->bk);
    job->desc.causal = args_has(args, "causal");
    return 0;
}

/* --global-blocks I,J,...: key block indices below blocks_k. */
static int parse_global_blocks(const cli_args *args, pattern_job *job) {
    int64_t *list = NULL;
    size_t count = 0;
    if (!args_has(args, "global-blocks")) return 0;
    if (parse_index_list(args, "global-blocks", &list, &count) != 0) return EXIT_USAGE;
    job->globals = malloc(count * sizeof *job->globals);
    for (size_t i = 0; job->globals && i < count; i++) {
        if ((uint64_t)list[i] >= job->desc.blocks_k) {
            cli_error("pattern",
                      "--global-blocks: block %lld is outside the %zu key blocks "
                      "(Nk=%zu, BK=%zu)",
                      (long long)list[i], job->desc.blocks_k, job->nk, job->bk);
            free(list);
            return EXIT_USAGE;
        }
        job->globals[i] = (size_t)list[i];
    }
    free(list);
    if (!job->globals) {
        cli_error("pattern", "out of memory for --global-blocks (%zu entries)", count);
        return 1;
    }
    job->desc.global_blocks = job->globals;
    job->desc.num_global_blocks = count;
    return 0;
}

/* The kind's parameters, with their defaults; checks what the library would only refuse. */
static int parse_params(const cli_args *args, pattern_job *job) {
    clattn_pattern_desc *d = &job->desc;
    int64_t seed = 0;
    if (optional_size(args, "window", MIN_BAND_BLOCKS, INT64_MAX, 3, &d->window) ||
        optional_size(args, "global", 0, INT64_MAX, 2, &d->global) ||
        optional_size(args, "random", 0, INT64_MAX, 3, &d->random) ||
        optional_size(args, "stride", 1, MAX_PATTERN_STRIDE, 4, &d->stride) ||
        optional_size(args, "summary", 1, INT64_MAX, 1, &d->summary) ||
        (args_has(args, "seed") && parse_int64(args, "seed", 0, &seed)))
        return EXIT_USAGE;
    d->seed = (uint64_t)seed;
    if (check_number("pattern", "--window", (int64_t)d->window, MIN_BAND_BLOCKS, 1) != 0)
        return EXIT_USAGE;
    if (d->summary > d->stride) {
        cli_error("pattern", "--summary: must be at most the stride (%zu), got '%s'", d->stride,
                  args_get(args, "summary"));
        return EXIT_USAGE;
    }
    return parse_global_blocks(args, job);
}

/* ---------------------------------------------------------------- output */

/* Fills job->layout, one layout per head. @return 0, 1 or EXIT_USAGE. */
static int build_layout(pattern_job *job) {
    size_t per_head = 0, total = 0;
    if (__builtin_mul_overflow(job->desc.blocks_q, job->desc.blocks_k, &per_head) ||
        __builtin_mul_overflow(per_head, job->heads, &total)) {
        cli_error("pattern", "layout too large: %zu heads x %zu x %zu blocks", job->heads,
                  job->desc.blocks_q, job->desc.blocks_k);
        return EXIT_USAGE;
    }
    if (!(job->layout = malloc(total))) {
        cli_error("pattern", "out of memory for a layout of %zu blocks", total);
        return 1;
    }
    clattn_pattern_desc head = job->desc;
    for (size_t h = 0; h < job->heads; h++) {
        uint8_t *dst = job->layout + h * per_head;
        head.seed = job->desc.seed + h; /* only BigBird reads it */
        clattn_status status = h > 0 && head.kind != CLATTN_PATTERN_BIGBIRD
                                   ? (memcpy(dst, job->layout, per_head), CLATTN_SUCCESS)
                                   : clattn_pattern_layout(&head, dst);
        if (status != CLATTN_SUCCESS) {
            cli_error("pattern", "%s: %s (%s)", job->kind_name, clattn_status_string(status),
                      clattn_status_name(status));
            return EXIT_USAGE;
        }
    }
    return 0;
}

static void show_layout(const pattern_job *job) {
    size_t rows = job->desc.blocks_q, cols = job->desc.blocks_k;
    const uint8_t *cell = job->layout;
    for (size_t h = 0; h < job->heads; h++) {
        if (job->heads > 1) printf("head %zu:\n", h);
        for (size_t a = 0; a < rows; a++) {
            for (size_t b = 0; b < cols; b++) putchar(*cell++ ? '#' : '.');
            putchar('\n');
        }
    }
}

/* Writes --out (when given) and prints the one-line summary. @return 0 or 1. */
static int write_layout(const cli_args *args, const pattern_job *job) {
    size_t shape[3] = {job->heads, job->desc.blocks_q, job->desc.blocks_k};
    int per_head = args_has(args, "heads");
    size_t ndim = per_head ? 3 : 2, total = job->heads * shape[1] * shape[2], ones = 0;
    for (size_t i = 0; i < total; i++) ones += job->layout[i] != 0;
    char err[512], dims[96];
    const char *out = args_get(args, "out");
    if (out && npy_write(out, NPY_U8, ndim, per_head ? shape : shape + 1, job->layout, err,
                         sizeof err) != CLATTN_SUCCESS) {
        cli_error("pattern", "%s", err);
        return 1;
    }
    if (per_head)
        snprintf(dims, sizeof dims, "[%zu, %zu, %zu]", shape[0], shape[1], shape[2]);
    else
        snprintf(dims, sizeof dims, "[%zu, %zu]", shape[1], shape[2]);
    printf("%s%s%s%s layout |u1 %s (Nq=%zu, Nk=%zu, blocks %zu,%zu%s): %zu of %zu blocks, "
           "density %.4f\n",
           out ? "wrote " : "", out ? out : "", out ? ": " : "", job->kind_name, dims, job->nq,
           job->nk, job->bq, job->bk, job->desc.causal ? ", causal" : "", ones, total,
           (double)ones / (double)total);
    return 0;
}

static int pattern_with_args(const cli_args *args, const char *positional, pattern_job *job) {
    int rc = resolve_kind(args, positional, job);
    if (!rc) rc = check_presence(args, job);
    if (!rc) rc = parse_shape(args, job);
    if (!rc) rc = parse_params(args, job);
    if (!rc) rc = build_layout(job);
    if (!rc && args_has(args, "show")) show_layout(job);
    if (!rc) rc = write_layout(args, job);
    return rc;
}

int cmd_pattern(int argc, char **argv) {
    char **rest = malloc((size_t)(argc > 0 ? argc : 1) * sizeof *rest);
    if (!rest) {
        cli_error("pattern", "out of memory");
        return 1;
    }
    const char *positional = NULL;
    int rest_count = 0;
    split_kind(argc, argv, &positional, rest, &rest_count);
    cli_args args;
    int rc = args_parse(&args, pattern_options, NUM_PATTERN_OPTIONS, "pattern", rest_count, rest);
    if (rc == 1) {
        args_usage("pattern", PATTERN_SYNOPSIS, pattern_options, NUM_PATTERN_OPTIONS);
        rc = 0;
    } else if (rc == 0) {
        pattern_job job;
        memset(&job, 0, sizeof job);
        clattn_pattern_desc_init(&job.desc, CLATTN_PATTERN_SLIDING, 0, 0);
        rc = pattern_with_args(&args, positional, &job);
        job_release(&job);
    }
    free(rest);
    return rc;
}
