/*
 * clattn bench: the command line of the benchmarks. It parses and checks the options into a
 * bench_config and hands it to the benchmark library (bench/bench.h: bench_run), which times
 * attention over sweeps of paths, sizes and patterns on the selected devices and writes the
 * results. See bench/README.md for the presets and results.
 */
#include "args.h"
#include "common.h" /* ARRAY_LEN */
#include "bench.h"
#include "commands.h"
#include "host_attention.h"
#include "textbuf.h" /* make_output_dir, check_output_file */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cli_option bench_options[] = {
    {"preset", "quick|paths|sparse|decode|layer",
     "a ready-made sweep (writes CSV, JSON and, but for decode and layer, a plot to --out; "
     "sparse: time against density at one length, with the ideal)"},
    {"path", "LIST", "fused,gemm,host,reference (default fused)"},
    {"b", "LIST", "batch sizes (default 1)"},
    {"hq", "LIST", "query heads (default 8)"},
    {"hkv", "LIST", "key/value heads (default: = hq)"},
    {"nq", "LIST", "query lengths (default 1024; --preset sparse: 16384)"},
    {"nk", "LIST", "key lengths (default: = nq)"},
    {"d", "LIST", "query/key head dims (default 64)"},
    {"dv", "LIST", "value head dims (default: = d)"},
    {"pattern", "LIST",
     "full,causal,window:L,R,dilated:L,R,D,bigbird:BLOCK,W,G,R[,SEED],longformer:W,G,"
     "fixed:BLOCK,STRIDE,SUMMARY,strided:BLOCK,STRIDE,blocks:FILE,BQ,BK (default full)"},
    {"dtype", "f32|f16|bf16|q8_0|q4_0",
     "storage of Q, K, V and O (default f32; decode: all five, q8_0 and q4_0 being K/V only)"},
    {"layout", "bshd|bhsd",
     "layout of Q, K, V and O (default bshd = [B,N,H,D]; --preset sparse: bhsd = [B,H,N,D])"},
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
 * quantities (args.h), so that bench accepts exactly what they accept; the library parses the
 * syntax (bench_parse_patterns). */
typedef struct number_rule {
    const char *name;
    int64_t min;
    int odd;
    int64_t max; /* 0: no upper bound */
} number_rule;

static const number_rule pattern_rules[][5] = {
    /* in pattern_kind order */
    [P_FULL] = {{0}},
    [P_CAUSAL] = {{0}},
    [P_WINDOW] = {{"L", MIN_WINDOW_SIDE, 0, 0}, {"R", MIN_WINDOW_SIDE, 0, 0}},
    [P_DILATED] = {{"L", MIN_WINDOW_SIDE, 0, 0},
                   {"R", MIN_WINDOW_SIDE, 0, 0},
                   {"D", MIN_DILATION, 0, 0}},
    /* as clattn pattern bigbird --block --window --global --random --seed */
    [P_BIGBIRD] = {{"BLOCK", MIN_BLOCK_SIZE, 0, MAX_BLOCK_SIZE},
                   {"W", MIN_BAND_BLOCKS, 1, 0},
                   {"G", 0, 0, 0},
                   {"R", 0, 0, 0},
                   {"SEED", 0, 0, 0}},
    /* W keys each side: a bounded window side */
    [P_LONGFORMER] = {{"W", MIN_WINDOW_SIDE + 1, 0, 0}, {"G", 0, 0, 0}},
    /* as clattn pattern fixed|strided --block --stride --summary (SUMMARY <= STRIDE: below) */
    [P_FIXED] = {{"BLOCK", MIN_BLOCK_SIZE, 0, MAX_BLOCK_SIZE},
                 {"STRIDE", 1, 0, MAX_PATTERN_STRIDE},
                 {"SUMMARY", 1, 0, 0}},
    [P_STRIDED] = {{"BLOCK", MIN_BLOCK_SIZE, 0, MAX_BLOCK_SIZE},
                   {"STRIDE", 1, 0, MAX_PATTERN_STRIDE}},
    [P_BLOCKS] = {{"BQ", MIN_BLOCK_SIZE, 0, MAX_BLOCK_SIZE},
                  {"BK", MIN_BLOCK_SIZE, 0, MAX_BLOCK_SIZE}},
};

/* Every number against its rule: one line naming the pattern and the number. @return 0 or -1. */
static int check_patterns(const bench_pattern *patterns, size_t count) {
    for (size_t i = 0; i < count; i++) {
        const bench_pattern *p = &patterns[i];
        for (size_t n = 0; n < p->count; n++) {
            const number_rule *rule = &pattern_rules[p->kind][n];
            char label[160];
            snprintf(label, sizeof label, "--pattern %s: %s", p->text, rule->name);
            int64_t max = rule->max ? rule->max : INT64_MAX;
            if (check_number_range("bench", label, p->num[n], rule->min, max, rule->odd) != 0)
                return -1;
        }
        if (p->kind == P_FIXED && p->num[2] > p->num[1]) { /* as clattn pattern --summary */
            cli_error("bench",
                      "--pattern %s: SUMMARY: must be at most the STRIDE (%lld), got '%lld'",
                      p->text, (long long)p->num[1], (long long)p->num[2]);
            return -1;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- configuration */

/* --path: each path once, however often it is named (as check and cache warm do). */
static int parse_paths(const cli_args *args, bench_config *c) {
    char words[16][64];
    size_t n = 0;
    if (parse_word_list(args, "path", words, 16, &n) != 0) return EXIT_USAGE;
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
        size_t seen = 0;
        while (seen < c->num_paths && c->paths[seen] != p) seen++;
        if (seen == c->num_paths) c->paths[c->num_paths++] = p;
    }
    return 0;
}

static const char *const list_names[7] = {"b", "hq", "hkv", "nq", "nk", "d", "dv"}; /* L_* */

static int parse_lists(const cli_args *args, bench_config *c) {
    for (int i = 0; i < 7; i++)
        if (args_has(args, list_names[i]) &&
            parse_size_list(args, list_names[i], 1, c->list[i], BENCH_MAX_LIST, &c->count[i]) != 0)
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
    static const char *const layouts[] = {"bshd", "bhsd", NULL}; /* clattn_layout */
    if (args_has(args, "layout")) {
        if (parse_choice(args, "layout", layouts, &choice) != 0) return EXIT_USAGE;
        c->layout = (clattn_layout)choice;
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
        parse_size_list(args, "kept", 1, c->kept, BENCH_MAX_LIST, &c->num_kept) != 0)
        return EXIT_USAGE;
    int64_t runs = 0; /* untimed at most 1000, timed at most the 256 a record holds */
    if (args_has(args, "warmup")) {
        if (parse_int64_range(args, "warmup", 0, 1000, &runs) != 0) return EXIT_USAGE;
        c->warmup = (size_t)runs;
    }
    if (args_has(args, "repeat")) {
        if (parse_int64_range(args, "repeat", 1, 256, &runs) != 0) return EXIT_USAGE;
        c->repeat = (size_t)runs;
    }
    if (args_has(args, "pattern")) c->curve_patterns = 0; /* the given patterns, as given */
    if (args_has(args, "pattern") &&
        bench_parse_patterns(args_get(args, "pattern"), c->patterns, &c->num_patterns) != 0) {
        cli_error("bench",
                  "--pattern: expected a list of full, causal, window:L,R, dilated:L,R,D, "
                  "bigbird:BLOCK,W,G,R[,SEED], longformer:W,G, fixed:BLOCK,STRIDE,SUMMARY, "
                  "strided:BLOCK,STRIDE or blocks:FILE,BQ,BK; got '%s'",
                  args_get(args, "pattern"));
        return EXIT_USAGE;
    }
    if (check_patterns(c->patterns, c->num_patterns) != 0) return EXIT_USAGE;
    return 0;
}

/* A ready-made sweep (the library's presets); explicit options override its settings. */
static int apply_preset(const char *name, bench_config *c) {
    if (bench_apply_preset(name, c) == 0) {
        c->title = name;
        return 0;
    }
    cli_error("bench", "--preset: expected quick, paths, sparse, decode or layer, got '%s'", name);
    return EXIT_USAGE;
}

/* Every Hq of the sweep must be a multiple of every Hkv, checked before anything runs. */
static int check_heads(const bench_config *c) {
    for (size_t i = 0; i < c->count[L_HQ]; i++)
        for (size_t k = 0; k < c->count[L_HKV]; k++)
            if (c->list[L_HQ][i] % c->list[L_HKV][k] != 0) {
                cli_error("bench",
                          "--hq %zu and --hkv %zu: the query heads must be a multiple "
                          "of the key/value heads",
                          c->list[L_HQ][i], c->list[L_HKV][k]);
                return EXIT_USAGE;
            }
    return 0;
}

/* The outputs must not overwrite each other or an input: --csv, --json, the tables and plot
 * files of --out's folder, and every blocks: layout. @return 0 or EXIT_USAGE. */
static int check_bench_files(const bench_config *c) {
    static const char *const folder_files[] = {"bench.csv",   "bench.json", "decode.csv",
                                               "decode.json", "layer.csv",  "layer.json",
                                               "plot.gp",     "plot.png"};
    enum { MAX_FILES = 2 + ARRAY_LEN(folder_files) };
    char paths[MAX_FILES][OUTPUT_PATH_MAX];
    const char *outputs[MAX_FILES], *labels[MAX_FILES];
    size_t count = 0;
    if (c->csv) outputs[count] = c->csv, labels[count++] = "--csv";
    if (c->json) outputs[count] = c->json, labels[count++] = "--json";
    for (size_t f = 0; c->out && f < ARRAY_LEN(folder_files); f++) {
        int n = snprintf(paths[count], sizeof paths[count], "%s/%s", c->out, folder_files[f]);
        if (n < 0 || (size_t)n >= sizeof paths[count]) break; /* make_output_dir refuses it */
        outputs[count] = paths[count], labels[count++] = "the folder of --out";
    }
    for (size_t o = 0; o < count; o++) {
        for (size_t i = o + 1; i < count; i++)
            if (args_same_file(outputs[o], outputs[i])) {
                cli_error("bench", "%s and %s name the same file '%s'", labels[o], labels[i],
                          outputs[i]);
                return EXIT_USAGE;
            }
        for (size_t p = 0; p < c->num_patterns; p++)
            if (c->patterns[p].kind == P_BLOCKS &&
                args_same_file(outputs[o], c->patterns[p].file)) {
                cli_error("bench", "%s '%s' would overwrite the layout of --pattern %s", labels[o],
                          outputs[o], c->patterns[p].text);
                return EXIT_USAGE;
            }
    }
    return 0;
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
    bench_config_defaults(c);
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
    if (check_heads(c) || check_bench_files(c)) return EXIT_USAGE;
    if (c->out && make_output_dir("bench", "out", c->out) != 0) return 1;
    if ((c->csv && check_output_file("bench", "csv", c->csv)) ||
        (c->json && check_output_file("bench", "json", c->json)))
        return 1;
    return cli_select_devices("bench", args_get(args, "device"), c->devices, 16, &c->num_devices);
}

/* --distributed and --sharding: the first B, Hq, Hkv, D and Dv, every Nq (and Nk) and pattern
 * over every rank, on the library's own path. @return 0 or EXIT_USAGE. */
static int parse_distributed(const cli_args *args, bench_config *c) {
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
    c->distributed = mode == 1 ? BENCH_ULYSSES : BENCH_RING;
    c->sharding = (clattn_sharding)sharding;
    return 0;
}

/* What a mode does not read is refused, not ignored: the options in `unread` (space-separated
 * names), and more than one value in the lists of `first_only`, of which it takes the first.
 * @return 0 or EXIT_USAGE. */
static int refuse_unread(const cli_args *args, const bench_config *c, const char *mode,
                         const char *unread, const char *first_only) {
    for (size_t i = 0; i < ARRAY_LEN(bench_options); i++)
        if (args_has(args, bench_options[i].name) && args_listed(unread, bench_options[i].name)) {
            cli_error("bench", "--%s does not apply to %s", bench_options[i].name, mode);
            return EXIT_USAGE;
        }
    for (int i = 0; i < 7; i++)
        if (c->count[i] > 1 && args_has(args, list_names[i]) &&
            args_listed(first_only, list_names[i])) {
            cli_error("bench", "--%s: %s takes one value, got '%s'", list_names[i], mode,
                      args_get(args, list_names[i]));
            return EXIT_USAGE;
        }
    return 0;
}

/* The options each mode reads (bench/presets.c). @return 0 or EXIT_USAGE. */
static int refuse_unread_options(const cli_args *args, const bench_config *c) {
    if (args_has(args, "distributed"))
        return refuse_unread(args, c, "--distributed", "layout variant gemm steps kept out",
                             "b hq hkv d dv");
    if (c->decode)
        return refuse_unread(args, c, "--preset decode", "path variant pattern layout gemm kept dv",
                             "b hq hkv d");
    if (c->layer)
        return refuse_unread(args, c, "--preset layer", "dv layout steps", "b hq hkv d nk");
    return refuse_unread(args, c, "this sweep (--preset decode and layer take it)", "steps kept",
                         "");
}

/* --preset layer: the attention's path is the first of --path, fused or gemm; each --kept at
 * most the (first) number of query heads. @return 0 or EXIT_USAGE. */
static int check_layer(const bench_config *c) {
    if (c->paths[0] != BENCH_FUSED && c->paths[0] != BENCH_GEMM) {
        cli_error("bench", "--preset layer: --path must be fused or gemm (the attention's path)");
        return EXIT_USAGE;
    }
    for (size_t k = 0; k < c->num_kept; k++)
        if (c->kept[k] > c->list[L_HQ][0]) {
            cli_error("bench", "--kept %zu: more than the %zu query heads", c->kept[k],
                      c->list[L_HQ][0]);
            return EXIT_USAGE;
        }
    return 0;
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
    int rc = parse_config(&args, &config);
    if (!rc) rc = refuse_unread_options(&args, &config);
    if (rc) return rc;
    if (args_has(&args, "distributed")) {
        rc = parse_distributed(&args, &config);
        return rc ? rc : bench_run(&config);
    }
    if (args_has(&args, "sharding")) {
        cli_error("bench", "--sharding goes with --distributed");
        return EXIT_USAGE;
    }
    if (config.layer && (rc = check_layer(&config)) != 0) return rc;
    size_t measurements = config.decode || config.layer ? 0 : bench_sweep_measurements(&config);
    if (measurements > BENCH_MAX_RECORDS) {
        cli_error("bench",
                  "the sweep has %zu measurements (devices x paths x shapes x patterns), more "
                  "than the %d a run holds: split it into runs",
                  measurements, BENCH_MAX_RECORDS);
        return EXIT_USAGE;
    }
    return bench_run(&config);
}
