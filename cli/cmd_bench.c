/*
 * clattn bench: times attention over sweeps of paths, sizes and patterns on the selected
 * devices. Each measurement warms up, then repeats; it reports the minimum and median of the
 * wall time around the call (end to end, with the inputs already on the device) and of the
 * kernel time (OpenCL profiling events), the build time of the first call separately, FLOP/s
 * over the allowed pairs only, bytes moved and the device memory the call allocated. See
 * bench/README.md for the presets and results.
 */
#include "args.h"
#include "common.h"
#include "bench.h"
#include "commands.h"
#include "host_attention.h"
#include "npy.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_LIST     16
#define MAX_PATTERNS 16
#define MAX_RECORDS  4096

static const cli_option bench_options[] = {
    {"preset", "quick|paths|sparse|decode|layer",
     "a ready-made sweep (writes CSV, JSON and, but for decode and layer, a plot to --out)"},
    {"path", "LIST", "fused,gemm,host,reference (default fused)"},
    {"b", "LIST", "batch sizes (default 1)"},
    {"hq", "LIST", "query heads (default 8)"},
    {"hkv", "LIST", "key/value heads (default: = hq)"},
    {"nq", "LIST", "query lengths (default 1024)"},
    {"nk", "LIST", "key lengths (default: = nq)"},
    {"d", "LIST", "query/key head dims (default 64)"},
    {"dv", "LIST", "value head dims (default: = d)"},
    {"pattern", "LIST",
     "full,causal,window:L,R,dilated:L,R,D,bigbird:BLOCK,W,G,R[,SEED],"
     "longformer:W,G,blocks:FILE,BQ,BK (default full)"},
    {"dtype", "f32|f16|bf16|q8_0|q4_0",
     "storage of Q, K, V and O (default f32; decode: all five, q8_0 and q4_0 being K/V only)"},
    {"variant", "NAME", "the kernel variant (clattn devices --variants; default auto)"},
    {"gemm", "NAME",
     "the GEMM row of the gemm path and the layer: auto, clblast, panels (default auto, or "
     "$CLATTN_GEMM)"},
    {"steps", "N", "decode: tokens the generation mode appends one at a time (default 64)"},
    {"kept", "LIST", "layer: query heads kept, the first K (default: all, then half)"},
    {"warmup", "N", "untimed runs first (default 1)"},
    {"repeat", "N", "timed runs (default 5)"},
    {"device", "SPEC|all", "devices (default: CLATTN_DEVICE or the first GPU, else device 0)"},
    {"csv", "FILE", "write the results as CSV"},
    {"json", "FILE", "write the results and the devices as JSON"},
    {"out", "DIR", "folder for a preset's CSV, JSON and PNG plot (default bench-out)"},
    {"distributed", "ring|ulysses",
     "under mpirun: one rank against every rank, per Nq and pattern (first B, Hq, Hkv, D)"},
    {"sharding", "auto|contiguous|zigzag",
     "--distributed: rows of each rank (auto: zigzag if causal)"},
    {"help", NULL, "show this help"},
};

/* ---------------------------------------------------------------- patterns */

/* A pattern's numbers and the bounds `clattn run` and `clattn pattern` apply to the same
 * quantities (args.h), so that bench accepts exactly what they accept. */
typedef struct number_rule {
    const char *name;
    int64_t min;
    int odd;
    int64_t max; /* 0: no upper bound */
} number_rule;

static const struct pattern_syntax {
    const char *name;
    pattern_kind kind;
    size_t min, max;
    number_rule rules[5];
} syntaxes[] = {
    /* in pattern_kind order */
    {"full", P_FULL, 0, 0, {{0}}},
    {"causal", P_CAUSAL, 0, 0, {{0}}},
    {"window", P_WINDOW, 2, 2, {{"L", MIN_WINDOW_SIDE, 0, 0}, {"R", MIN_WINDOW_SIDE, 0, 0}}},
    {"dilated",
     P_DILATED,
     3,
     3,
     {{"L", MIN_WINDOW_SIDE, 0, 0}, {"R", MIN_WINDOW_SIDE, 0, 0}, {"D", MIN_DILATION, 0, 0}}},
    {"bigbird", /* as clattn pattern bigbird --block --window --global --random --seed */
     P_BIGBIRD,
     4,
     5,
     {{"BLOCK", MIN_BLOCK_SIZE, 0, MAX_BLOCK_SIZE},
      {"W", MIN_BAND_BLOCKS, 1, 0},
      {"G", 0, 0, 0},
      {"R", 0, 0, 0},
      {"SEED", 0, 0, 0}}},
    {"longformer", /* W keys each side: a bounded window side */
     P_LONGFORMER,
     2,
     2,
     {{"W", MIN_WINDOW_SIDE + 1, 0, 0}, {"G", 0, 0, 0}}},
    {"blocks",
     P_BLOCKS,
     2,
     2,
     {{"BQ", MIN_BLOCK_SIZE, 0, MAX_BLOCK_SIZE}, {"BK", MIN_BLOCK_SIZE, 0, MAX_BLOCK_SIZE}}},
};
#define NUM_SYNTAXES (sizeof syntaxes / sizeof syntaxes[0])

static const struct pattern_syntax *find_syntax(const char *name) {
    for (size_t k = 0; k < NUM_SYNTAXES; k++)
        if (strcmp(syntaxes[k].name, name) == 0) return &syntaxes[k];
    return NULL;
}

/* Splits "full,window:128,128,bigbird:64,3,2,3" into patterns: a word that starts with a digit
 * (or '-') belongs to the pattern before it. @return 0, or -1 for a malformed list. */
static int split_patterns(const char *list, bench_pattern *out, size_t *count) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", list);
    *count = 0;
    bench_pattern *p = NULL;
    for (char *word = strtok(buf, ","); word; word = strtok(NULL, ",")) {
        int numeric = (word[0] >= '0' && word[0] <= '9') || word[0] == '-';
        if (numeric && p && p->count < 5) {
            char *end = NULL;
            p->num[p->count++] = strtoll(word, &end, 10);
            if (*end) return -1;
            snprintf(p->text + strlen(p->text), sizeof p->text - strlen(p->text), ",%s", word);
            continue;
        }
        if (numeric || *count == MAX_PATTERNS) return -1;
        p = &out[(*count)++];
        memset(p, 0, sizeof *p);
        char *colon = strchr(word, ':');
        if (colon) *colon = '\0';
        const struct pattern_syntax *syntax = find_syntax(word);
        if (!syntax) return -1;
        p->kind = syntax->kind;
        snprintf(p->text, sizeof p->text, "%s%s", word, colon ? ":" : "");
        if (colon && p->kind == P_BLOCKS) { /* blocks:FILE,BQ,BK */
            snprintf(p->file, sizeof p->file, "%s", colon + 1);
            snprintf(p->text + strlen(p->text), sizeof p->text - strlen(p->text), "%s", colon + 1);
        } else if (colon && colon[1]) {
            char *end = NULL;
            p->num[p->count++] = strtoll(colon + 1, &end, 10);
            if (*end) return -1;
            snprintf(p->text + strlen(p->text), sizeof p->text - strlen(p->text), "%s", colon + 1);
        }
    }
    for (size_t i = 0; i < *count; i++) {
        const struct pattern_syntax *syntax = &syntaxes[out[i].kind];
        if (out[i].count < syntax->min || out[i].count > syntax->max) return -1;
    }
    return *count > 0 ? 0 : -1;
}

/* Every number against its rule: one line naming the pattern and the number. @return 0 or -1. */
static int check_patterns(const bench_pattern *patterns, size_t count) {
    for (size_t i = 0; i < count; i++) {
        const bench_pattern *p = &patterns[i];
        for (size_t n = 0; n < p->count; n++) {
            const number_rule *rule = &syntaxes[p->kind].rules[n];
            char label[160];
            snprintf(label, sizeof label, "--pattern %s: %s", p->text, rule->name);
            int64_t max = rule->max ? rule->max : INT64_MAX;
            if (check_number_range("bench", label, p->num[n], rule->min, max, rule->odd) != 0)
                return -1;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- configuration */

typedef struct bench_config {
    bench_path paths[4];
    size_t num_paths;
    size_t list[7][MAX_LIST]; /* b, hq, hkv, nq, nk, d, dv */
    size_t count[7];          /* 0 for hkv, nk, dv: follow hq, nq, d */
    bench_pattern patterns[MAX_PATTERNS];
    size_t num_patterns;
    clattn_dtype dtype;
    clattn_variant variant;
    clattn_gemm gemm;
    size_t warmup, repeat;
    size_t devices[16], num_devices;
    const char *csv, *json, *out;
    int decode;      /* --preset decode: bench_decode.c runs it */
    int dtype_given; /* --dtype: decode measures only that type */
    size_t steps;    /* decode's generation mode */
    int layer;       /* --preset layer: bench_layer.c runs it */
    size_t kept[MAX_LIST], num_kept;
} bench_config;

enum { L_B, L_HQ, L_HKV, L_NQ, L_NK, L_D, L_DV };

static int parse_paths(const cli_args *args, bench_config *c) {
    char words[4][64];
    size_t n = 0;
    if (parse_word_list(args, "path", words, 4, &n) != 0) return EXIT_USAGE;
    c->num_paths = 0;
    for (size_t i = 0; i < n; i++) {
        bench_path p = BENCH_FUSED;
        while (p <= BENCH_REFERENCE && strcmp(words[i], bench_path_name(p)) != 0) p++;
        if (p > BENCH_REFERENCE) {
            cli_error("bench", "--path: expected fused, gemm, host or reference, got '%s'",
                      words[i]);
            return EXIT_USAGE;
        }
        if (p == BENCH_HOST && !host_attention_available()) {
            cli_error("bench", "--path host: %s", host_attention_unavailable());
            return EXIT_USAGE;
        }
        c->paths[c->num_paths++] = p;
    }
    return 0;
}

static int parse_lists(const cli_args *args, bench_config *c) {
    static const char *const names[7] = {"b", "hq", "hkv", "nq", "nk", "d", "dv"};
    for (int i = 0; i < 7; i++)
        if (args_has(args, names[i]) &&
            parse_size_list(args, names[i], 1, c->list[i], MAX_LIST, &c->count[i]) != 0)
            return EXIT_USAGE;
    return 0;
}

static int parse_settings(const cli_args *args, bench_config *c) {
    static const char *const dtypes[] = {"f32", "f16", "bf16", "q8_0", "q4_0", NULL}; /* enum */
    int choice = 0;
    if (args_has(args, "dtype")) {
        if (parse_choice(args, "dtype", dtypes, &choice) != 0) return EXIT_USAGE;
        c->dtype = (clattn_dtype)choice;
        c->dtype_given = 1;
    }
    if ((c->dtype == CLATTN_Q8_0 || c->dtype == CLATTN_Q4_0) && !c->decode) {
        cli_error("bench", "--dtype %s stores K and V only: it is measured by --preset decode",
                  dtypes[c->dtype]);
        return EXIT_USAGE;
    }
    if (args_has(args, "variant") && parse_variant(args, "variant", &c->variant) != 0)
        return EXIT_USAGE;
    if (args_has(args, "gemm") && clattn_gemm_from_name(args_get(args, "gemm"), &c->gemm) != 0) {
        cli_error("bench", "--gemm: expected auto, clblast or panels, got '%s'",
                  args_get(args, "gemm"));
        return EXIT_USAGE;
    }
    if (args_has(args, "steps") && parse_size(args, "steps", 0, &c->steps) != 0) return EXIT_USAGE;
    if (args_has(args, "kept") &&
        parse_size_list(args, "kept", 1, c->kept, MAX_LIST, &c->num_kept) != 0)
        return EXIT_USAGE;
    if (args_has(args, "warmup") && parse_size(args, "warmup", 0, &c->warmup) != 0)
        return EXIT_USAGE;
    if (args_has(args, "repeat") && parse_size(args, "repeat", 1, &c->repeat) != 0)
        return EXIT_USAGE;
    if (args_has(args, "pattern") &&
        split_patterns(args_get(args, "pattern"), c->patterns, &c->num_patterns) != 0) {
        cli_error("bench",
                  "--pattern: expected a list of full, causal, window:L,R, "
                  "dilated:L,R,D, bigbird:BLOCK,W,G,R[,SEED], longformer:W,G or blocks:FILE,BQ,BK; "
                  "got '%s'",
                  args_get(args, "pattern"));
        return EXIT_USAGE;
    }
    if (check_patterns(c->patterns, c->num_patterns) != 0) return EXIT_USAGE;
    return 0;
}

/* Ready-made sweeps; explicit options given with them override their settings. */
static int apply_preset(const char *name, bench_config *c) {
    if (strcmp(name, "quick") == 0) {
        c->paths[0] = BENCH_FUSED, c->num_paths = 1;
        if (host_attention_available()) c->paths[c->num_paths++] = BENCH_HOST;
        c->list[L_NQ][0] = 1024, c->count[L_NQ] = 1;
        c->repeat = 3;
        return split_patterns("full,causal", c->patterns, &c->num_patterns);
    }
    if (strcmp(name, "paths") == 0) {
        c->paths[0] = BENCH_FUSED, c->paths[1] = BENCH_GEMM, c->num_paths = 2;
        if (host_attention_available()) c->paths[c->num_paths++] = BENCH_HOST;
        static const size_t lengths[] = {512, 1024, 2048, 4096};
        memcpy(c->list[L_NQ], lengths, sizeof lengths), c->count[L_NQ] = 4;
        c->repeat = 3;
        return split_patterns("full,causal", c->patterns, &c->num_patterns);
    }
    if (strcmp(name, "sparse") == 0) {
        static const size_t lengths[] = {1024, 2048, 4096, 8192, 16384};
        memcpy(c->list[L_NQ], lengths, sizeof lengths), c->count[L_NQ] = 5;
        c->list[L_HQ][0] = 4, c->count[L_HQ] = 1;
        c->repeat = 3;
        return split_patterns("full,causal,window:128,128,bigbird:64,3,2,3", c->patterns,
                              &c->num_patterns);
    }
    if (strcmp(name, "decode") == 0) { /* the decode issue's shape: GQA 32/8, D = 128 */
        static const size_t lengths[] = {1024, 4096, 16384, 32768, 131072}, queries[] = {1, 4};
        memcpy(c->list[L_NK], lengths, sizeof lengths), c->count[L_NK] = 5;
        memcpy(c->list[L_NQ], queries, sizeof queries), c->count[L_NQ] = 2;
        c->list[L_HQ][0] = 32, c->count[L_HQ] = 1;
        c->list[L_HKV][0] = 8, c->count[L_HKV] = 1;
        c->list[L_D][0] = 128, c->count[L_D] = 1;
        c->repeat = 5, c->decode = 1;
        return 0;
    }
    if (strcmp(name, "layer") == 0) { /* a 7B-class model's attention: GQA 32/8, D = 128 */
        c->list[L_NQ][0] = 2048, c->count[L_NQ] = 1;
        c->list[L_HQ][0] = 32, c->count[L_HQ] = 1;
        c->list[L_HKV][0] = 8, c->count[L_HKV] = 1;
        c->list[L_D][0] = 128, c->count[L_D] = 1;
        c->repeat = 3, c->layer = 1;
        return split_patterns("causal", c->patterns, &c->num_patterns);
    }
    cli_error("bench", "--preset: expected quick, paths, sparse, decode or layer, got '%s'", name);
    return EXIT_USAGE;
}

static void config_defaults(bench_config *c) {
    memset(c, 0, sizeof *c);
    c->paths[0] = BENCH_FUSED, c->num_paths = 1;
    c->list[L_B][0] = 1, c->count[L_B] = 1;
    c->list[L_HQ][0] = 8, c->count[L_HQ] = 1;
    c->list[L_NQ][0] = 1024, c->count[L_NQ] = 1;
    c->list[L_D][0] = 64, c->count[L_D] = 1;
    c->warmup = 1, c->repeat = 5, c->steps = 64;
    split_patterns("full", c->patterns, &c->num_patterns);
}

/* The host baseline (OpenBLAS sgemm) is float32 only: with a 16-bit --dtype it is dropped with a
 * line saying so, rather than measuring nothing in silence; when it was the only path, that is
 * a usage error. @return 0 or EXIT_USAGE. */
static int drop_host_for_16bit(bench_config *c) {
    size_t kept = 0;
    for (size_t i = 0; i < c->num_paths; i++)
        if (c->paths[i] != BENCH_HOST || c->dtype == CLATTN_F32) c->paths[kept++] = c->paths[i];
    if (kept == c->num_paths) return 0;
    c->num_paths = kept;
    cli_error("bench", "%s --path host: the host baseline is float32 only (--dtype %s)%s",
              kept ? "skipping" : "nothing to measure with",
              c->dtype == CLATTN_F16 ? "f16" : "bf16", kept ? "" : "; add --path fused");
    return kept ? 0 : EXIT_USAGE;
}

static int parse_config(const cli_args *args, bench_config *c) {
    config_defaults(c);
    int rc = 0;
    if (args_has(args, "preset")) {
        rc = apply_preset(args_get(args, "preset"), c);
        c->out = "bench-out";
    }
    if (!rc && args_has(args, "path")) rc = parse_paths(args, c);
    if (!rc) rc = parse_lists(args, c);
    if (!rc) rc = parse_settings(args, c);
    if (rc) return rc;
    if (drop_host_for_16bit(c) != 0) return EXIT_USAGE;
    c->csv = args_get(args, "csv");
    c->json = args_get(args, "json");
    if (args_has(args, "out")) c->out = args_get(args, "out");
    if (c->out && make_output_dir("bench", "out", c->out) != 0) return 1;
    if ((c->csv && check_output_file("bench", "csv", c->csv)) ||
        (c->json && check_output_file("bench", "json", c->json)))
        return 1;
    return cli_select_devices("bench", args_get(args, "device"), c->devices, 16, &c->num_devices);
}

/* ---------------------------------------------------------------- measuring */

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* min and median of n values (sorts them) */
static void min_median(double *v, size_t n, double *min, double *median) {
    qsort(v, n, sizeof *v, compare_double);
    *min = v[0];
    *median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One call of a path; *kernel_ms is the device's kernel time (0 for host paths). */
typedef struct bench_inputs {
    const clattn_attention_desc *desc;
    clattn_context *ctx;
    cl_mem q, k, v, o;        /* device copies */
    const void *hq, *hk, *hv; /* host copies */
    void *ho;
} bench_inputs;

static clattn_status run_once(const bench_inputs *in, bench_path path, double *wall_ms,
                              double *kernel_ms) {
    clattn_attention_desc d = *in->desc;
    clattn_status status = CLATTN_SUCCESS;
    double t0 = seconds_now();
    if (path == BENCH_HOST) {
        status = host_attention(&d, in->hq, in->hk, in->hv, in->ho, NULL, NULL);
    } else if (path == BENCH_REFERENCE) {
        status = clattn_attention_reference(&d, in->hq, in->hk, in->hv, in->ho, NULL);
    } else {
        d.path = path == BENCH_FUSED ? CLATTN_PATH_FUSED : CLATTN_PATH_GEMM;
        status = clattn_attention(in->ctx, &d, in->q, in->k, in->v, in->o, NULL, NULL);
        clFinish(clattn_context_queue(in->ctx));
    }
    *wall_ms = (seconds_now() - t0) * 1e3;
    clattn_stats stats;
    clattn_stats_init(&stats);
    *kernel_ms =
        path <= BENCH_GEMM && clattn_context_last_stats(in->ctx, &stats) == 0 ? stats.kernel_ms : 0;
    return status;
}

/* Warm-up (the first run builds kernels), then the timed repeats. */
static clattn_status measure(const bench_inputs *in, bench_path path, const bench_config *c,
                             bench_record *r) {
    double wall[256], kernel[256], first = 0, ignored = 0;
    size_t repeat = c->repeat < 256 ? c->repeat : 256;
    clattn_status status = run_once(in, path, &first, &ignored);
    for (size_t w = 1; status == CLATTN_SUCCESS && w < c->warmup; w++)
        status = run_once(in, path, &ignored, &ignored);
    for (size_t i = 0; status == CLATTN_SUCCESS && i < repeat; i++)
        status = run_once(in, path, &wall[i], &kernel[i]);
    if (status != CLATTN_SUCCESS) return status;
    min_median(wall, repeat, &r->ms_min, &r->ms_median);
    if (path <= BENCH_GEMM) min_median(kernel, repeat, &r->kernel_min, &r->kernel_median);
    r->build_ms = first > r->ms_median ? first - r->ms_median : 0;
    clattn_stats stats;
    clattn_stats_init(&stats);
    if (path <= BENCH_GEMM && clattn_context_last_stats(in->ctx, &stats) == CLATTN_SUCCESS) {
        r->variant = stats.variant;
        r->device_bytes = stats.device_bytes;
        r->tiles_visited = stats.tiles_visited, r->tiles_total = stats.tiles_total;
        snprintf(r->kernel, sizeof r->kernel, "%s", stats.kernel);
    }
    return CLATTN_SUCCESS;
}

/* ---------------------------------------------------------------- the sweep */

typedef struct bench_run {
    const bench_config *config;
    bench_record *records;
    size_t num_records, total, done;
    int failed;
} bench_run;

/* A shape's inputs: seeded uniform values on the host and their device copies. */
typedef struct shape_inputs {
    clattn_attention_desc desc;
    void *host[4]; /* q, k, v, o */
    cl_mem dev[4];
} shape_inputs;

static void shape_free(shape_inputs *s) {
    for (int i = 0; i < 4; i++) {
        free(s->host[i]);
        if (s->dev[i]) clReleaseMemObject(s->dev[i]);
    }
    memset(s, 0, sizeof *s);
}

static int shape_setup(clattn_context *ctx, const size_t shape[7], clattn_dtype dtype,
                       shape_inputs *s) {
    memset(s, 0, sizeof *s);
    clattn_attention_desc *d = &s->desc;
    if (clattn_attention_desc_init(d, CLATTN_LAYOUT_BSHD, shape[L_B], shape[L_HQ], shape[L_HKV],
                                   shape[L_NQ], shape[L_NK], shape[L_D], shape[L_DV])) {
        cli_error("bench", "invalid sizes (Hq must be a multiple of Hkv)");
        return 1;
    }
    d->dtype = d->out_dtype = dtype;
    size_t elem = dtype == CLATTN_F32 ? 4 : 2;
    size_t count[4] = {shape[L_B] * shape[L_NQ] * shape[L_HQ] * shape[L_D],
                       shape[L_B] * shape[L_NK] * shape[L_HKV] * shape[L_D],
                       shape[L_B] * shape[L_NK] * shape[L_HKV] * shape[L_DV],
                       shape[L_B] * shape[L_NQ] * shape[L_HQ] * shape[L_DV]};
    uint64_t state = 42;
    for (int t = 0; t < 4; t++) {
        if (!(s->host[t] = calloc(count[t], elem))) goto fail;
        for (size_t i = 0; t < 3 && i < count[t]; i++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            float x = (float)((double)(state >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
            clattn_convert(CLATTN_F32, &x, dtype, (char *)s->host[t] + i * elem, 1);
        }
        cl_int err = CL_SUCCESS;
        s->dev[t] = clCreateBuffer(clattn_context_cl_context(ctx), CL_MEM_COPY_HOST_PTR,
                                   count[t] * elem, s->host[t], &err);
        if (err != CL_SUCCESS) goto fail;
    }
    return 0;
fail:
    cli_error("bench", "cannot allocate the inputs of B=%zu Hq=%zu Nq=%zu Nk=%zu D=%zu", shape[L_B],
              shape[L_HQ], shape[L_NQ], shape[L_NK], shape[L_D]);
    shape_free(s);
    return 1;
}

static void fill_record(bench_record *r, size_t device, bench_path path,
                        const clattn_attention_desc *d, const bench_pattern *p) {
    memset(r, 0, sizeof *r);
    r->device = device, r->path = path, r->dtype = d->dtype;
    r->b = d->batch, r->hq = d->heads_q, r->hkv = d->heads_kv, r->nq = d->len_q;
    r->nk = d->len_k, r->dqk = d->dim_qk, r->dv = d->dim_v;
    snprintf(r->pattern, sizeof r->pattern, "%s", p->text);
    if (clattn_attention_pairs(d, &r->pairs) != CLATTN_SUCCESS) r->pairs = 0;
}

/* Every path for one shape and pattern on one device. */
static void bench_pattern_paths(bench_run *run, clattn_context *ctx, size_t device,
                                const shape_inputs *s, const bench_pattern *p) {
    const bench_config *c = run->config;
    clattn_attention_desc d = s->desc;
    d.variant = c->variant;
    pattern_data pd = {0};
    if (bench_apply_pattern(p, &d, &pd) != 0) {
        run->failed = 1;
        run->done += c->num_paths;
        return;
    }
    bench_inputs in = {&d,        ctx,        s->dev[0],  s->dev[1],  s->dev[2],
                       s->dev[3], s->host[0], s->host[1], s->host[2], s->host[3]};
    for (size_t i = 0; i < c->num_paths && run->num_records < MAX_RECORDS; i++) {
        bench_record *r = &run->records[run->num_records];
        fill_record(r, device, c->paths[i], &d, p);
        if (isatty(STDERR_FILENO))
            fprintf(stderr, "\r[%zu/%zu] %s %s Nq=%zu ...", ++run->done, run->total,
                    bench_path_name(r->path), r->pattern, r->nq);
        clattn_status status = measure(&in, c->paths[i], c, r);
        if (isatty(STDERR_FILENO)) fprintf(stderr, "\r%70s\r", "");
        if (status == CLATTN_SUCCESS) {
            bench_print_record(r);
            run->num_records++;
        } else { /* host with f16 never gets here: drop_host_for_16bit */
            cli_report("bench", bench_path_name(c->paths[i]), status, ctx);
            run->failed = 1;
        }
    }
    bench_pattern_data_free(&pd);
}

/* The shape at `index` of the cartesian product of the lists (hkv, nk, dv follow hq, nq, d
 * when not given). */
static void shape_at(const bench_config *c, size_t index, size_t shape[7]) {
    for (int i = 0; i < 7; i++) {
        if (c->count[i] == 0) continue;
        shape[i] = c->list[i][index % c->count[i]];
        index /= c->count[i];
    }
    if (!c->count[L_HKV]) shape[L_HKV] = shape[L_HQ];
    if (!c->count[L_NK]) shape[L_NK] = shape[L_NQ];
    if (!c->count[L_DV]) shape[L_DV] = shape[L_D];
}

static size_t num_shapes(const bench_config *c) {
    size_t n = 1;
    for (int i = 0; i < 7; i++) n *= c->count[i] ? c->count[i] : 1;
    return n;
}

static void bench_device(bench_run *run, size_t device) {
    const bench_config *c = run->config;
    clattn_context *ctx = NULL;
    clattn_device_info info;
    clattn_device_info_init(&info);
    if (clattn_context_create(&ctx, device) != CLATTN_SUCCESS ||
        clattn_context_set_timing(ctx, 1) != CLATTN_SUCCESS ||
        clattn_context_set_gemm(ctx, c->gemm) != CLATTN_SUCCESS) {
        cli_error("bench", "cannot open device %zu", device);
        clattn_context_destroy(ctx);
        run->failed = 1;
        return;
    }
    clattn_context_device_info(ctx, &info);
    bench_print_header(&info);
    for (size_t i = 0; i < num_shapes(c); i++) {
        size_t shape[7] = {0}; /* every size has a list or follows one: see shape_at */
        shape_inputs s;
        shape_at(c, i, shape);
        if (shape_setup(ctx, shape, c->dtype, &s) != 0) {
            run->failed = 1;
            continue;
        }
        for (size_t p = 0; p < c->num_patterns; p++)
            bench_pattern_paths(run, ctx, device, &s, &c->patterns[p]);
        shape_free(&s);
    }
    clattn_context_destroy(ctx);
}

/* ---------------------------------------------------------------- decode */

/* --preset decode: the sizes and settings handed to bench_decode (first B, Hq, Hkv, D). */
static int run_decode(const bench_config *c) {
    decode_config dc;
    memset(&dc, 0, sizeof dc);
    dc.num_nq = c->count[L_NQ], dc.num_nk = c->count[L_NK] ? c->count[L_NK] : c->count[L_NQ];
    memcpy(dc.nq, c->list[L_NQ], sizeof dc.nq);
    memcpy(dc.nk, c->count[L_NK] ? c->list[L_NK] : c->list[L_NQ], sizeof dc.nk);
    dc.batch = c->list[L_B][0], dc.hq = c->list[L_HQ][0], dc.d = c->list[L_D][0];
    dc.hkv = c->count[L_HKV] ? c->list[L_HKV][0] : dc.hq;
    static const clattn_dtype all[] = {CLATTN_F32, CLATTN_F16, CLATTN_BF16, CLATTN_Q8_0,
                                       CLATTN_Q4_0};
    dc.num_dtypes = c->dtype_given ? 1 : ARRAY_LEN(all);
    memcpy(dc.dtypes, c->dtype_given ? &c->dtype : all, dc.num_dtypes * sizeof *all);
    dc.warmup = c->warmup, dc.repeat = c->repeat, dc.steps = c->steps;
    memcpy(dc.devices, c->devices, sizeof dc.devices), dc.num_devices = c->num_devices;
    dc.csv = c->csv, dc.json = c->json, dc.out = c->out;
    return bench_decode(&dc);
}

/* --preset layer: the sizes and settings handed to bench_layer (first B, Hq, Hkv, D; the
 * attention's path is the first of --path, fused or gemm). */
static int run_layer(const bench_config *c) {
    layer_bench_config lc;
    memset(&lc, 0, sizeof lc);
    if (c->paths[0] != BENCH_FUSED && c->paths[0] != BENCH_GEMM) {
        cli_error("bench", "--preset layer: --path must be fused or gemm (the attention's path)");
        return EXIT_USAGE;
    }
    memcpy(lc.nq, c->list[L_NQ], sizeof lc.nq), lc.num_nq = c->count[L_NQ];
    lc.nk = c->count[L_NK] ? c->list[L_NK][0] : 0; /* cross-attention over X_kv of Nk rows */
    lc.gemm = c->gemm;
    lc.batch = c->list[L_B][0], lc.hq = c->list[L_HQ][0], lc.d = c->list[L_D][0];
    lc.hkv = c->count[L_HKV] ? c->list[L_HKV][0] : lc.hq;
    memcpy(lc.kept, c->kept, sizeof lc.kept), lc.num_kept = c->num_kept;
    if (!c->num_kept) { /* every head, then the first half of them */
        lc.kept[0] = lc.hq, lc.kept[1] = lc.hq / 2;
        lc.num_kept = lc.hq > 1 ? 2 : 1;
    }
    lc.wtype = c->dtype, lc.variant = c->variant;
    lc.path = c->paths[0] == BENCH_GEMM ? CLATTN_PATH_GEMM : CLATTN_PATH_FUSED;
    lc.patterns = c->patterns, lc.num_patterns = c->num_patterns;
    lc.warmup = c->warmup, lc.repeat = c->repeat;
    memcpy(lc.devices, c->devices, sizeof lc.devices), lc.num_devices = c->num_devices;
    lc.csv = c->csv, lc.json = c->json, lc.out = c->out;
    return bench_layer(&lc);
}

/* ---------------------------------------------------------------- distributed */

/* --distributed: the first B, Hq, Hkv, D and Dv, every Nq (and Nk) and pattern, handed to
 * bench_distributed (bench_distributed.c, built with MPI). */
static int run_distributed(const cli_args *args, const bench_config *c) {
    static const char *const modes[] = {"ring", "ulysses", NULL};
    static const char *const shardings[] = {"auto", "contiguous", "zigzag", NULL};
    int mode = 0, sharding = 0;
    if (parse_choice(args, "distributed", modes, &mode) != 0 ||
        (args_has(args, "sharding") && parse_choice(args, "sharding", shardings, &sharding) != 0))
        return EXIT_USAGE;
    if (args_has(args, "preset") || args_has(args, "path") || c->num_paths != 1) {
        cli_error("bench", "--distributed measures the library's own path: no --preset or --path");
        return EXIT_USAGE;
    }
#ifdef CLATTN_HAVE_MPI
    distributed_config d = {mode == 1,
                            (clattn_sharding)sharding,
                            c->list[L_B][0],
                            c->list[L_HQ][0],
                            c->count[L_HKV] ? c->list[L_HKV][0] : c->list[L_HQ][0],
                            c->list[L_D][0],
                            c->count[L_DV] ? c->list[L_DV][0] : c->list[L_D][0],
                            {0},
                            c->count[L_NQ],
                            {0},
                            c->count[L_NK],
                            c->patterns,
                            c->num_patterns,
                            c->dtype,
                            c->warmup,
                            c->repeat,
                            c->devices,
                            c->num_devices,
                            c->csv,
                            c->json};
    memcpy(d.nq, c->list[L_NQ], sizeof d.nq), memcpy(d.nk, c->list[L_NK], sizeof d.nk);
    return bench_distributed(&d);
#else
    cli_error("bench", "--distributed: this clattn was built without MPI (libclattn_mpi)");
    return 1;
#endif
}

/* ---------------------------------------------------------------- outputs */

/* Stages `text` as `path` in the set and frees it. @return 0 or 1 (said). */
static int stage_text(output_set *set, const char *path, textbuf *text) {
    int rc = output_set_text(set, path, text);
    textbuf_free(text);
    return rc;
}

/* The table as CSV and JSON, each when its path is given. @return 0 or 1 (said). */
static int stage_tables(const bench_run *run, output_set *set, const char *csv, const char *json) {
    textbuf t = {0};
    int rc = 0;
    if (csv) {
        bench_csv(&t, run->records, run->num_records);
        rc |= stage_text(set, csv, &t);
    }
    if (json) {
        bench_json(&t, run->records, run->num_records, run->config->devices,
                   run->config->num_devices);
        rc |= stage_text(set, json, &t);
    }
    return rc;
}

/* --csv, --json and a preset's folder (made by parse_config: bench.csv, bench.json, the
 * plot's data, plot.gp and plot.png), committed together. @return 0 or 1 (said). */
static int write_outputs(const bench_run *run, const char *csv, const char *json, const char *dir,
                         const char *title) {
    char dir_csv[1024], dir_json[1024];
    output_set set;
    output_set_init(&set, "bench");
    int rc = stage_tables(run, &set, csv, json), plot_rc = 0;
    if (dir) {
        snprintf(dir_csv, sizeof dir_csv, "%s/bench.csv", dir);
        snprintf(dir_json, sizeof dir_json, "%s/bench.json", dir);
        rc |= stage_tables(run, &set, dir_csv, dir_json);
        if (!rc) plot_rc = bench_plot(run->records, run->num_records, dir, title, &set);
    }
    rc |= output_set_commit(&set);
    if (dir && !rc)
        printf("wrote %s and %s%s\n", dir_csv, dir_json,
               plot_rc ? "" : ", with the plot (plot.gp, plot.png)");
    return rc || plot_rc;
}

int cmd_bench(int argc, char **argv) {
    const size_t n = sizeof bench_options / sizeof bench_options[0];
    cli_args args;
    int parsed = args_parse(&args, bench_options, n, "bench", argc, argv);
    if (parsed == 1) {
        args_usage("bench", "[--preset quick|paths|sparse|decode|layer] [options]", bench_options,
                   n);
        printf("\nLists (comma-separated) make sweeps. ms is the wall time around the call; kernel "
               "ms comes from\nOpenCL profiling events (fused, gemm); see bench/README.md.\n");
        return 0;
    }
    if (parsed) return parsed;
    static bench_config config;
    static bench_record records[MAX_RECORDS];
    int rc = parse_config(&args, &config);
    if (rc) return rc;
    if (args_has(&args, "distributed")) return run_distributed(&args, &config);
    if (args_has(&args, "sharding")) {
        cli_error("bench", "--sharding goes with --distributed");
        return EXIT_USAGE;
    }
    if (config.decode) return run_decode(&config);
    if (config.layer) return run_layer(&config);
    bench_run run = {&config, records, 0, 0, 0, 0};
    run.total = config.num_devices * num_shapes(&config) * config.num_patterns * config.num_paths;
    for (size_t i = 0; i < config.num_devices; i++) bench_device(&run, config.devices[i]);
    if (run.num_records == 0) { /* the failures, if any, have been named */
        if (!run.failed) cli_error("bench", "nothing was measured");
        return 1;
    }
    rc = write_outputs(&run, config.csv, config.json, config.out,
                       args_has(&args, "preset") ? args_get(&args, "preset") : "clattn bench");
    return rc || run.failed ? 1 : 0;
}
