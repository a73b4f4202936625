/*
 * clattn check: a built-in conformance sweep (the shapes and masks of the tests, without
 * Criterion) on every selected device, for each path and fused kernel variant, against the
 * CPU reference with docs/semantics.md section 4's tolerances. Prints a table (device, path,
 * variant, cases passed and failed, worst error as a fraction of the tolerance, time), optionally
 * JSON, and for each failing case its description, the first mismatch and how to replay it. A
 * variant that does not run (refused by the device, left out by the options, or serving none
 * of the sweep's cases) is listed with the reason and keeps "all passed" from being said; one
 * that --require names fails the check. Each row runs in a child process with a time limit
 * (check_child.c); the child is this command again with --child-fd, running the row here and
 * reporting its cases (check.h).
 */
#include "args.h"
#include "check.h"
#include "common.h"
#include "commands.h"
#include "npy.h"
#include "interrupt.h"
#include "jobs.h"
#include "textbuf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

static const cli_option check_options[] = {
    {"device", "SPEC", "devices to check (default all)"},
    {"quick", NULL, "a short sweep (small shapes)"},
    {"storage", "TYPE",
     "store every case's Q, K and V as f32, f16 or bf16 (default: each case's own; quantised K "
     "and V stay)"},
    {"path", "LIST", "paths to check: fused,gemm,reference (default fused,gemm)"},
    {"variant", "LIST",
     "variants to run: lanes,rowwise,split,flash,nv_mma,gemm,reference (default: every one on "
     "--path)"},
    {"require", "LIST", "fail unless each of these variants runs on every device checked"},
    {"case", "N", "run only case N of the sweep (see --list)"},
    {"list", NULL, "list the cases of the sweep and exit"},
    {"dump", "DIR", "write failing cases' inputs (with --case: that case's) to DIR/case-N"},
    {"json", "FILE", "also write the results as JSON"},
    {"verbose", NULL, "print every case"},
    {"timeout", "S",
     "seconds a (device, variant) row may take before it is stopped (default: 300 + 15 a case)"},
    {"jobs", "N", "rows run at once, each in its own process (default: the cores)"},
    {"in-process", NULL,
     "run every row in this process, without a time limit (for tools that follow one process)"},
    {"no-record", NULL, "do not record the rows' verdicts in this machine's verdict store"},
    {"report", "FILE", "also write the rows' verdicts as a report other machines can merge"},
    {"child-fd", "N", "(internal) run one row in this process and report its cases on fd N"},
    {"help", NULL, "show this help"},
};

/* ---------------------------------------------------------------- the sweep */

static attn_case *add_case(sweep *s, size_t b, size_t hq, size_t hkv, size_t nq, size_t nk,
                           size_t dqk, size_t dv) {
    attn_case *c = &s->cases[s->count];
    case_init(c, b, hq, hkv, nq, nk, dqk, dv);
    c->seed = 1000 + s->count++;
    return c;
}

/* Lengths that are not tile multiples, head dims, heads, causal alignment, float16. */
static void add_dense_cases(sweep *s, int quick) {
    static const size_t lengths[] = {1, 7, 113, 203, 1023, 1025};
    static const size_t dims[][2] = {{1, 1},     {3, 3},     {32, 32},  {59, 59},
                                     {64, 64},   {80, 80},   {96, 96},  {111, 111},
                                     {128, 128}, {256, 256}, {192, 128}};
    static const size_t heads[][2] = {{4, 4}, {4, 2}, {8, 1}};
    static const size_t causal[][2] = {{17, 100}, {64, 64}, {100, 17}};
    size_t n_lengths = quick ? 4 : 6, n_dims = quick ? 5 : 11;
    for (size_t i = 0; i < n_lengths; i++)
        add_case(s, 1, 2, 2, lengths[i], lengths[(i + 1) % n_lengths], 64, 64)->causal = i % 2;
    for (size_t i = 0; i < n_dims; i++)
        add_case(s, 1, 2, 1, 37, 53, dims[i][0], dims[i][1])->causal = i % 2;
    for (size_t i = 0; i < 3; i++) add_case(s, 2, heads[i][0], heads[i][1], 29, 41, 32, 32);
    for (size_t i = 0; i < 3; i++)
        add_case(s, 1, 2, 2, causal[i][0], causal[i][1], 32, 32)->causal = 1;
    for (int i = 0; i < 3; i++) {
        attn_case *c = add_case(s, 2, 4, 2, 45, 67, 64, 48);
        c->dtype = i != 1 ? CLATTN_F16 : CLATTN_F32;
        c->out_dtype = i != 0 ? CLATTN_F16 : CLATTN_F32;
        c->layout = i == 2 ? CLATTN_LAYOUT_BHSD : CLATTN_LAYOUT_BSHD;
        c->offset = 3 * (size_t)i;
    }
    /* Dv=17 pads unlike Dqk=64 (the 64/48 cases above pad both to 64) */
    attn_case *c = add_case(s, 2, 4, 2, 45, 67, 64, 17);
    c->causal = 1;
}

/* Windows, dilation, global tokens, block layouts, bias, and NaN inputs. */
static void add_sparse_cases(sweep *s, int quick) {
    static const int64_t windows[][3] = {{0, 0, 0}, {-1, 5, 0}, {9, -1, 0}, {9, 0, 1}, {20, 20, 1}};
    for (size_t i = 0; i < (quick ? 3u : 5u); i++) {
        attn_case *c = add_case(s, 1, 2, 1, 70, 90, 32, 32);
        c->left = windows[i][0], c->right = windows[i][1], c->causal = (int)windows[i][2];
    }
    /* 20 keys a dilation class: tested pair by pair; then 40: grouped by class (packed.c) */
    attn_case *c = add_case(s, 1, 2, 2, 60, 60, 32, 32);
    c->left = 12, c->right = 12, c->dilation = 3;
    c = add_case(s, 1, 2, 2, 80, 80, 32, 32);
    c->left = 20, c->right = 20, c->dilation = 2;
    c = add_case(s, 1, 2, 1, 50, 77, 32, 32);
    c->left = 4, c->right = 4, c->causal = 1, c->num_globals = 3;
    c->globals[0] = 0, c->globals[1] = 30, c->globals[2] = 76;
    c = add_case(s, 1, 4, 2, 64, 96, 32, 32);
    c->block_layout = LAYOUT_PER_HEAD, c->bq = 16, c->bk = 16, c->causal = 1;
    c = add_case(s, 2, 2, 2, 33, 47, 32, 32);
    c->block_layout = LAYOUT_SHARED, c->bq = 8, c->bk = 12;
    c = add_case(s, 2, 2, 1, 40, 52, 32, 32);
    c->bias = BIAS_FULL;
    c = add_case(s, 1, 2, 2, 40, 40, 32, 32);
    c->bias = BIAS_BROADCAST, c->left = 6, c->right = 6;
    c = add_case(s, 1, 2, 1, 40, 40, 32, 32);
    c->nan_key = 1, c->causal = 1;
    /* finite biases never mask: a Hugging Face padding mask, and huge finite values */
    c = add_case(s, 3, 2, 2, 37, 37, 32, 32);
    c->bias = BIAS_PADDING;
    c = add_case(s, 1, 2, 1, 30, 45, 32, 32);
    c->bias = BIAS_FINITE_MIN;
    for (int i = 0; i < 3; i++) { /* bfloat16 storage of Q/K/V, of O, of both (with a mask) */
        c = add_case(s, 2, 4, 2, 45, 67, 64, 48);
        c->dtype = i != 1 ? CLATTN_BF16 : CLATTN_F32;
        c->out_dtype = i != 0 ? CLATTN_BF16 : CLATTN_F32;
        c->causal = i == 2, c->layout = i == 2 ? CLATTN_LAYOUT_BHSD : CLATTN_LAYOUT_BSHD;
    }
    if (quick) return;
    c = add_case(s, 2, 4, 1, 129, 257, 64, 64);
    c->left = 20, c->right = 3, c->dilation = 2, c->num_globals = 2, c->globals[0] = 5;
    c->globals[1] = 200, c->block_layout = LAYOUT_SHARED, c->bq = 32, c->bk = 32, c->causal = 1;
    c->bias = BIAS_BROADCAST;
    c = add_case(s, 1, 2, 2, 300, 300, 64, 64);
    c->block_layout = LAYOUT_ALL_ONES, c->bq = 64, c->bk = 64;
}

/* Soft-capping, ALiBi and sinks (docs/semantics.md section 8), composed with masks, a bias,
 * GQA, empty rows and 16-bit storage. The quick ones reuse shapes of the cases above, whose
 * kernel builds they share (a cold cache builds nothing more for them). */
static void add_modifier_cases(sweep *s, int quick) {
    attn_case *c = add_case(s, 2, 2, 1, 40, 52, 32, 32);
    c->bias = BIAS_FULL, c->softcap = 1.5f, c->alibi = 2, c->sinks = 1;
    c = add_case(s, 1, 2, 1, 70, 90, 32, 32);
    c->causal = 1, c->left = 9, c->right = 0, c->alibi = 1, c->softcap = 2.0f, c->scale = 1.0f;
    c = add_case(s, 1, 2, 2, 100, 17, 32, 32); /* rows before the first key: empty, with sinks */
    c->causal = 1, c->sinks = 1, c->alibi = 1;
    if (quick) return;
    c = add_case(s, 1, 8, 2, 40, 40, 32, 32);
    c->alibi = 1, c->causal = 1;
    c = add_case(s, 2, 4, 4, 3, 77, 64, 32);
    c->sinks = 1;
    c = add_case(s, 1, 4, 4, 64, 64, 64, 64);
    c->block_layout = LAYOUT_PER_HEAD, c->bq = c->bk = 16, c->softcap = 5.0f, c->alibi = 1;
    c->sinks = 1, c->dtype = c->out_dtype = CLATTN_F16;
}

/* Head dims past 256 (DeepSeek's MLA is 576/512), which lanes, split, flash (in pieces) and gemm
 * serve and rowwise does not (each is a program of its own a variant). The quick sweep's is
 * small: oclgrind runs every quick case. */
static void add_wide_cases(sweep *s, int quick) {
    attn_case *c = add_case(s, 1, quick ? 4 : 16, 1, quick ? 5 : 40, quick ? 40 : 70, 576, 512);
    c->causal = 1;
    if (quick) return;
    c = add_case(s, 2, 2, 1, 13, 90, 320, 64);
    c->left = 20, c->right = 3, c->dtype = c->out_dtype = CLATTN_F16;
}

/* K and V in ggml's q4_0 and q8_0 blocks, which split reads and the other variants refuse
 * ("not served"): a query block with a window and sinks, and decoding with GQA over a causal
 * cache. Each block type is a split program of its own (about 6 s to build here), so the
 * quick sweep takes q4_0 only. */
static void add_quantised_cases(sweep *s, int quick) {
    attn_case *c = add_case(s, 1, 4, 1, 9, 100, 64, 64);
    c->left = 30, c->right = 0, c->sinks = 1, c->kv_quant = CLATTN_Q4_0;
    if (quick) return;
    c = add_case(s, 2, 4, 2, 3, 77, 64, 64);
    c->causal = 1, c->kv_quant = CLATTN_Q8_0;
}

/* What tiles and 16-bit probabilities may get wrong: rows whose softmax a few keys dominate
 * (scores spread over about +-40) over many key tiles, and rows that see one key each (O is
 * that key's V row). Full sweep only: the cases before keep their numbers. */
static void add_edge_cases(sweep *s, int quick) {
    if (quick) return;
    attn_case *c = add_case(s, 1, 2, 1, 64, 1500, 64, 64);
    c->scale = 4.0f;
    c = add_case(s, 1, 2, 2, 70, 70, 64, 64);
    c->left = c->right = 0;
}

static void build_sweep(sweep *s, int quick) {
    s->count = 0;
    add_dense_cases(s, quick);
    add_sparse_cases(s, quick);
    add_modifier_cases(s, quick);
    add_wide_cases(s, quick);
    add_quantised_cases(s, quick);
    add_edge_cases(s, quick);
}

/* --storage: every case's Q, K and V (not quantised K and V) in one storage type; its name into
 * *name (NULL without the option). */
static int apply_storage(const cli_args *args, sweep *s, const char **name) {
    static const char *const dtypes[] = {"f32", "f16", "bf16", NULL}; /* clattn_dtype order */
    int choice = 0;
    *name = NULL;
    if (!args_has(args, "storage")) return 0;
    if (parse_choice(args, "storage", dtypes, &choice) != 0) return EXIT_USAGE;
    *name = dtypes[choice];
    for (size_t i = 0; i < s->count; i++)
        if (s->cases[i].kv_quant == CLATTN_F32) s->cases[i].dtype = (clattn_dtype)choice;
    return 0;
}

/* ---------------------------------------------------------------- what to run */

static const char *variant_name(clattn_variant v) {
    return clattn_variant_name(v);
}

static int parse_paths(const cli_args *args, check_plan *plan) {
    char words[4][64];
    size_t n = 0;
    plan->paths[0] = CLATTN_PATH_FUSED;
    plan->paths[1] = CLATTN_PATH_GEMM;
    plan->num_paths = 2;
    if (!args_has(args, "path")) return 0;
    if (parse_word_list(args, "path", words, 4, &n) != 0) return EXIT_USAGE;
    plan->num_paths = 0;
    for (size_t i = 0; i < n; i++) {
        clattn_path p = strcmp(words[i], "fused") == 0       ? CLATTN_PATH_FUSED
                        : strcmp(words[i], "gemm") == 0      ? CLATTN_PATH_GEMM
                        : strcmp(words[i], "reference") == 0 ? CLATTN_PATH_REFERENCE
                                                             : CLATTN_PATH_AUTO;
        if (p == CLATTN_PATH_AUTO) {
            cli_error("check", "--path: expected fused, gemm or reference, got '%s'", words[i]);
            return EXIT_USAGE;
        }
        int seen = 0; /* a path given twice runs once */
        for (size_t j = 0; j < plan->num_paths; j++) seen |= plan->paths[j] == p;
        if (!seen) plan->paths[plan->num_paths++] = p;
    }
    return 0;
}

/* --OPTION NAME,...: rows of the variant table (clattn devices --variants lists them), marked
 * in chosen[] by clattn_variant. */
static int parse_variant_list(const cli_args *args, const char *option, int chosen[MAX_VARIANTS]) {
    char words[MAX_VARIANTS][64];
    size_t n = 0;
    if (parse_word_list(args, option, words, MAX_VARIANTS, &n) != 0) return EXIT_USAGE;
    for (size_t i = 0; i < n; i++) {
        clattn_variant v = CLATTN_VARIANT_AUTO;
        if (clattn_variant_from_name(words[i], &v) != CLATTN_SUCCESS || v == CLATTN_VARIANT_AUTO ||
            v >= MAX_VARIANTS) {
            cli_error("check", "--%s: '%s' is no variant (see clattn devices --variants)", option,
                      words[i]);
            return EXIT_USAGE;
        }
        chosen[v] = 1;
    }
    return 0;
}

/* --variant (every variant when absent) and --require (none when absent). */
static int parse_variants(const cli_args *args, check_plan *plan) {
    for (int v = 0; v < MAX_VARIANTS; v++) plan->variants[v] = !args_has(args, "variant");
    plan->variants_named = args_has(args, "variant");
    if (args_has(args, "variant") && parse_variant_list(args, "variant", plan->variants) != 0)
        return EXIT_USAGE;
    if (args_has(args, "require") && parse_variant_list(args, "require", plan->required) != 0)
        return EXIT_USAGE;
    return 0;
}

static int parse_plan(const cli_args *args, const sweep *s, check_plan *plan) {
    memset(plan, 0, sizeof *plan);
    plan->only_case = -1;
    plan->child_fd = -1;
    plan->quick = args_has(args, "quick");
    plan->verbose = args_has(args, "verbose");
    plan->dump_dir = args_get(args, "dump");
    int rc = parse_paths(args, plan);
    if (!rc) rc = parse_variants(args, plan);
    if (!rc && args_has(args, "variant") && !args_has(args, "path")) { /* the variants' paths */
        plan->paths[0] = CLATTN_PATH_FUSED, plan->paths[1] = CLATTN_PATH_GEMM;
        plan->paths[2] = CLATTN_PATH_REFERENCE, plan->num_paths = 3;
    }
    if (!rc && args_has(args, "case")) {
        size_t n = 0;
        if (parse_size(args, "case", 0, &n) != 0) return EXIT_USAGE;
        if (n >= s->count) {
            cli_error("check", "--case: the sweep has cases 0 to %zu, got %zu", s->count - 1, n);
            return EXIT_USAGE;
        }
        plan->only_case = (long)n;
    }
    if (!rc && args_has(args, "timeout")) {
        float t = 0;
        if (parse_float(args, "timeout", &t) != 0) return EXIT_USAGE;
        if (!(t > 0)) {
            cli_error("check", "--timeout: expected seconds > 0, got '%s'",
                      args_get(args, "timeout"));
            return EXIT_USAGE;
        }
        plan->timeout_s = t;
    }
    if (!rc && args_has(args, "child-fd")) {
        size_t fd = 0;
        if (parse_size(args, "child-fd", 3, &fd) != 0) return EXIT_USAGE;
        plan->child_fd = (int)fd;
    }
    plan->jobs = jobs_default();
    if (!rc && jobs_parse(args, &plan->jobs) != 0) return EXIT_USAGE;
    plan->record = !args_has(args, "no-record");
    plan->in_process = args_has(args, "in-process");
    if (!rc && plan->in_process && args_has(args, "timeout")) {
        cli_error("check", "--timeout needs rows in processes of their own; --in-process runs "
                           "them without a time limit");
        return EXIT_USAGE;
    }
    plan->report = args_get(args, "report");
    if (!rc && plan->report) {
        if (check_output_file("check", "report", plan->report)) return 1;
        snprintf(plan->report_tmp, sizeof plan->report_tmp, "%s.tmp.%ld", plan->report,
                 (long)getpid());
        unlink(plan->report_tmp); /* one left by a killed check of the same pid: not ours */
    }
    if (!rc && plan->dump_dir) rc = make_output_dir("check", "dump", plan->dump_dir);
    if (rc) return rc;
    const char *spec = args_has(args, "device") ? args_get(args, "device") : "all";
    return cli_select_devices("check", spec, plan->devices, MAX_DEVICES, &plan->num_devices);
}

/* ---------------------------------------------------------------- running */

/* Writes a case's inputs into DIR/case-N (DIR made by parse_plan) and prints the clattn run
 * line that computes it; a failure counts in plan->dump_failures (exit 1). */
static void dump_case(check_plan *plan, const attn_case *c, size_t index, const run_row *row) {
    char dir[OUTPUT_PATH_MAX], cmd[4096], err[512], dev[32];
    snprintf(dir, sizeof dir, "%s/case-%zu", plan->dump_dir, index);
    snprintf(dev, sizeof dev, "%zu", row->device);
    if (make_output_dir("check", "dump", dir) != 0) {
        plan->dump_failures++;
    } else if (case_dump(c, dir, check_path_name(row->path), clattn_variant_name(row->variant),
                         dev, cmd, sizeof cmd, err, sizeof err) != CLATTN_SUCCESS) {
        cli_error("check", "--dump: %s", err);
        plan->dump_failures++;
    } else {
        printf("  inputs in %s; compute it with: %s\n", dir, cmd);
    }
}

static void report_failure(check_plan *plan, const attn_case *c, size_t index, const run_row *row,
                           const case_result *r) {
    char what[512];
    case_describe(c, what, sizeof what);
    fprintf(stderr, "FAIL case %zu on device %zu, path %s, variant %s: %s\n  %s\n", index,
            row->device, check_path_name(row->path), variant_name(row->variant), what, r->message);
    fprintf(stderr,
            "  replay with: clattn check%s%s%s --case %zu --device %zu --path %s --variant %s%s\n",
            plan->quick ? " --quick" : "", plan->storage_name ? " --storage " : "",
            plan->storage_name ? plan->storage_name : "", index, row->device,
            check_path_name(row->path), variant_name(row->variant),
            plan->dump_dir ? "" : " (add --dump DIR for .npy inputs and a clattn run line)");
    if (plan->dump_dir) dump_case(plan, c, index, row);
    plan->failures++;
}

/* A line to the parent (check.h), when this process runs a row for one. */
static void tell_parent(const check_plan *plan, const char *fmt, ...) PRINTF_LIKE(2, 3);
static void tell_parent(const check_plan *plan, const char *fmt, ...) {
    if (plan->child_fd < 0) return;
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0 && (size_t)n < sizeof line && write(plan->child_fd, line, (size_t)n) < 0) {
        /* the parent left: the row's outcome no longer matters */
    }
}

/* One case on the row; records it and reports a failure. */
static void run_one_case(check_plan *plan, clattn_context *ctx, const sweep *s, run_row *row,
                         size_t i) {
    case_result r;
    tell_parent(plan, "start %zu\n", i);
    case_run(ctx, &s->cases[i], row->path, row->variant, &r);
    int ok = r.status == CLATTN_SUCCESS && r.mismatches == 0;
    int served = r.status != CLATTN_ERR_UNSUPPORTED || row->variant == CLATTN_VARIANT_AUTO;
    tell_parent(plan, "end %zu %d %.6g %.3f\n", i, served ? ok : 2, r.worst, r.ms);
    row->cases[i].outcome = !served ? CASE_NOT_SERVED : ok ? CASE_PASSED : CASE_FAILED;
    row->cases[i].worst = (float)r.worst, row->cases[i].ms = (float)r.ms;
    if (!served)
        row->not_served++;
    else if (ok)
        row->passed++;
    else
        row->failed++;
    if (r.worst > row->worst) row->worst = r.worst;
    if (plan->verbose) {
        char what[512];
        case_describe(&s->cases[i], what, sizeof what);
        const char *mark = !served ? "n/s " : ok ? "ok  " : "FAIL";
        printf("  case %-3zu %s worst %.3f %8.1f ms  %s\n", i, mark, r.worst, r.ms, what);
        if (!served) printf("    not served: %s\n", r.message);
        fflush(stdout);
    }
    if (served && !ok)
        report_failure(plan, &s->cases[i], i, row, &r);
    else if (plan->only_case >= 0 && plan->dump_dir)
        dump_case(plan, &s->cases[i], i, row);
}

/* Every case of the sweep (or the one asked for) on one (device, path, variant), in this
 * process: a child's row, or every row where no child can be started. */
static void run_row_cases(check_plan *plan, clattn_context *ctx, const sweep *s, run_row *row) {
    double t0 = seconds_now();
    int progress = isatty(STDERR_FILENO) && !plan->verbose && plan->child_fd < 0;
    for (size_t i = 0; i < s->count; i++) {
        if (plan->only_case >= 0 && (size_t)plan->only_case != i) continue;
        if (progress)
            fprintf(stderr, "\rdevice %zu %s %s: case %zu/%zu ", row->device,
                    check_path_name(row->path), clattn_variant_name(row->variant), i + 1, s->count);
        run_one_case(plan, ctx, s, row, i);
        if (progress) fprintf(stderr, "\r%60s\r", "");
    }
    row->ms = (seconds_now() - t0) * 1e3;
    tell_parent(plan, "dump-failures %zu\n", plan->dump_failures);
}

/* How a row that did not complete ended, for the table and JSON. */
static const char *row_outcome_name(row_outcome outcome) {
    static const char *const names[] = {"completed", "timed out", "crashed", "stopped"};
    return names[outcome];
}

static void print_row(const run_row *row) {
    clattn_device_info info;
    clattn_device_info_init(&info);
    clattn_device_get_info(row->device, &info);
    printf("%-3zu %-36.36s %-9s %-7s %6zu %6zu %9.3f %10.1f", row->device, info.name,
           check_path_name(row->path), variant_name(row->variant), row->passed, row->failed,
           row->worst, row->ms / 1e3);
    if (row->outcome == ROW_CRASHED)
        printf("  crashed (signal %d)", row->signal);
    else if (row->outcome != ROW_COMPLETED)
        printf("  %s", row_outcome_name(row->outcome));
    if (row->not_served) printf("  %zu not served (--verbose says why)", row->not_served);
    printf("\n");
    fflush(stdout);
}

static int path_chosen(const check_plan *plan, clattn_path path) {
    for (size_t p = 0; p < plan->num_paths; p++)
        if (plan->paths[p] == path) return 1;
    return 0;
}

/* Records a variant that was not run on a device, with the reason. */
static void note_not_run(check_plan *plan, size_t device, clattn_variant variant, int required,
                         const char *reason) {
    if (plan->num_not_run == MAX_RUNS) return;
    not_run_row *row = &plan->not_run[plan->num_not_run++];
    row->device = device, row->variant = variant, row->required = required;
    snprintf(row->reason, sizeof row->reason, "%s", reason);
    if (!required) return;
    plan->required_not_run++;
    cli_error("check", "--require %s: not run on device %zu: %s", variant_name(variant), device,
              reason);
}

/* Every variant --require names that did not run on the device (ran[], by clattn_variant):
 * refused by the device, or left out by --path or --variant. */
static void note_required_not_run(check_plan *plan, clattn_context *ctx, size_t device,
                                  const int ran[MAX_VARIANTS]) {
    for (int v = 1; v < MAX_VARIANTS; v++) {
        if (!plan->required[v] || ran[v]) continue;
        clattn_variant_info info;
        clattn_variant_info_init(&info);
        char why[300];
        if (clattn_variant_describe(ctx, (clattn_variant)v, &info) != CLATTN_SUCCESS)
            snprintf(why, sizeof why, "not a variant of this library");
        else if (!info.supported)
            snprintf(why, sizeof why, "%s", info.reason);
        else if (!plan->variants[v])
            snprintf(why, sizeof why, "not among --variant");
        else if (!path_chosen(plan, info.path))
            snprintf(why, sizeof why, "its path, %s, is not among --path",
                     check_path_name(info.path));
        else
            snprintf(why, sizeof why, "more than %d runs were asked for", MAX_RUNS);
        note_not_run(plan, device, (clattn_variant)v, 1, why);
    }
}

/* The verdict a row earns: passed (the whole sweep, not one --case), failed with its first
 * failing case, crashed (failed), timed out with the case that hung. @return 0 when the row
 * says nothing of the variant (its process did not run it, or one case passed). */
static int row_verdict(const check_plan *plan, const sweep *s, const run_row *row,
                       clattn_verdict *v) {
    char where[600];
    long first_failed = -1;
    for (size_t i = 0; i < s->count && first_failed < 0; i++)
        if (row->cases[i].outcome == CASE_FAILED) first_failed = (long)i;
    clattn_verdict_init(v);
    const char *storage = plan->storage_name ? plan->storage_name : "";
    if (plan->only_case >= 0)
        snprintf(v->sweep, sizeof v->sweep, "case %ld of %s%s%s", plan->only_case,
                 plan->quick ? "quick" : "full", *storage ? " in " : "", storage);
    else
        snprintf(v->sweep, sizeof v->sweep, "%s (%zu cases)%s%s", plan->quick ? "quick" : "full",
                 s->count, *storage ? " in " : "", storage);
    check_case_name(s, row->outcome == ROW_COMPLETED ? first_failed : row->stopped_in, where,
                    sizeof where);
    if (row->outcome == ROW_TIMED_OUT) {
        v->kind = CLATTN_VERDICT_TIMED_OUT;
        snprintf(v->detail, sizeof v->detail, "after %.0f s in %s", row->timeout_s, where);
    } else if (row->outcome == ROW_CRASHED) {
        v->kind = CLATTN_VERDICT_FAILED;
        snprintf(v->detail, sizeof v->detail, "crashed (signal %d) in %s", row->signal, where);
    } else if (row->outcome == ROW_COMPLETED && row->failed) {
        v->kind = CLATTN_VERDICT_FAILED;
        snprintf(v->detail, sizeof v->detail, "first failing: %s", where);
    } else if (row->outcome == ROW_COMPLETED && plan->only_case < 0 && row->passed) {
        v->kind = CLATTN_VERDICT_PASSED;
    }
    return v->kind != CLATTN_VERDICT_NONE;
}

/* Records the row's verdict in the store (unless --no-record) and the report's file. */
static void record_row(check_plan *plan, clattn_context *ctx, const sweep *s, const run_row *row) {
    clattn_verdict v;
    if (!row_verdict(plan, s, row, &v)) return;
    if (plan->record) {
        clattn_status status = clattn_verdict_record(ctx, row->variant, &v, NULL);
        if (status == CLATTN_SUCCESS)
            plan->recorded++;
        else if (!plan->record_failed++)
            cli_error("check", "verdicts not recorded: %s (%s)", clattn_context_last_error(ctx),
                      clattn_status_name(status));
    }
    if (plan->report &&
        clattn_verdict_record(ctx, row->variant, &v, plan->report_tmp) != CLATTN_SUCCESS) {
        cli_error("check", "--report %s: %s", plan->report, clattn_context_last_error(ctx));
        plan->report_incomplete = 1;
    }
}

/* The rows of one device as they end: each is printed and recorded once the rows before it
 * have been, so the table keeps their order. */
typedef struct device_rows {
    check_plan *plan;
    clattn_context *ctx;
    const sweep *s;
    run_row *first;
    size_t count, shown;
    int ended[MAX_RUNS];
} device_rows;

/* A row that completed the whole sweep but served none of its cases (every call refused: a
 * variant whose self-test failed on the device, say) ran nothing: it is noted as not run, so
 * that "all passed" is not said of it, and fails the check when --require names it. */
static void note_row_served_nothing(check_plan *plan, const sweep *s, const run_row *row) {
    if (plan->only_case >= 0 || row->outcome != ROW_COMPLETED || row->passed || row->failed ||
        !row->not_served)
        return;
    char why[160];
    snprintf(why, sizeof why, "served none of the sweep's %zu cases (--verbose says why)",
             s->count);
    note_not_run(plan, row->device, row->variant, plan->required[row->variant], why);
}

static void row_done(void *arg, run_row *row) {
    device_rows *d = arg;
    d->ended[row - d->first] = 1;
    for (; d->shown < d->count && d->ended[d->shown]; d->shown++) {
        print_row(&d->first[d->shown]);
        record_row(d->plan, d->ctx, d->s, &d->first[d->shown]);
        note_row_served_nothing(d->plan, d->s, &d->first[d->shown]);
    }
    fflush(stdout);
}

/* Runs the rows: in child processes with a time limit, --jobs at once, where they can be
 * started; else here, one after another. */
static void run_rows(device_rows *d) {
    check_plan *plan = d->plan;
    if (!plan->in_process && check_children_possible()) {
        check_run_rows_children(plan, d->s, d->first, d->count, plan->jobs, row_done, d);
        return;
    }
    for (size_t i = 0; i < d->count; i++) {
        run_row_cases(plan, d->ctx, d->s, &d->first[i]);
        row_done(d, &d->first[i]);
    }
}

/* A context for check's own calls: it names each variant, so no verification policy
 * ($CLATTN_VERIFY=require-verified would refuse every unverified variant, and first-use would
 * start a check of its own) stands between a row and its kernels. */
static clattn_status check_context(size_t device, clattn_context **ctx) {
    clattn_status status = clattn_context_create(ctx, device);
    if (status == CLATTN_SUCCESS) status = clattn_context_set_verify(*ctx, CLATTN_VERIFY_TRUST, 0);
    return status;
}

/* The variants --variant names that --path leaves out, listed with the reason (not run), unless
 * --require names them too (note_required_not_run says so). */
static void note_named_left_out(check_plan *plan, clattn_context *ctx, size_t device) {
    for (int v = 1; plan->variants_named && v < MAX_VARIANTS; v++) {
        clattn_variant_info info;
        clattn_variant_info_init(&info);
        if (!plan->variants[v] || plan->required[v] ||
            clattn_variant_describe(ctx, (clattn_variant)v, &info) != CLATTN_SUCCESS ||
            !info.supported || path_chosen(plan, info.path))
            continue;
        char why[160];
        snprintf(why, sizeof why, "its path, %s, is not among --path", check_path_name(info.path));
        printf("%-3zu %-36s %-9s %-7s not run: %s\n", device, "", check_path_name(info.path),
               info.name, why);
        note_not_run(plan, device, info.variant, 0, why);
    }
}

/* Every chosen row of the variant table on one device (the variants numbered from 1 while
 * they have a name); a row the device cannot run is listed with the reason, not run. */
static int check_device(check_plan *plan, const sweep *s, size_t device) {
    clattn_context *ctx = NULL;
    clattn_status status = check_context(device, &ctx);
    if (status != CLATTN_SUCCESS) {
        cli_error("check", "cannot open device %zu: %s", device, clattn_status_name(status));
        plan->failures++;
        return 1;
    }
    int ran[MAX_VARIANTS] = {0};
    static device_rows rows;
    rows = (device_rows){plan, ctx, s, &plan->rows[plan->num_rows], 0, 0, {0}};
    for (size_t p = 0; p < plan->num_paths; p++)
        for (int v = 1; v < MAX_VARIANTS && strcmp(variant_name(v), "unknown") != 0; v++) {
            clattn_variant_info info;
            clattn_variant_info_init(&info);
            if (clattn_variant_describe(ctx, (clattn_variant)v, &info) != CLATTN_SUCCESS) break;
            if (info.path != plan->paths[p] || !plan->variants[v] || !path_chosen(plan, info.path))
                continue;
            if (!info.supported) {
                printf("%-3zu %-36s %-9s %-7s not run: %s\n", device, "",
                       check_path_name(info.path), info.name, info.reason);
                if (!plan->required[v]) note_not_run(plan, device, info.variant, 0, info.reason);
                continue;
            }
            if (plan->num_rows == MAX_RUNS) break;
            ran[v] = 1;
            run_row *row = &plan->rows[plan->num_rows++];
            memset(row, 0, sizeof *row);
            row->device = device, row->path = info.path, row->variant = info.variant;
            rows.count++;
        }
    note_named_left_out(plan, ctx, device);
    run_rows(&rows);
    fflush(stdout); /* the table before the lines on stderr */
    note_required_not_run(plan, ctx, device, ran);
    clattn_context_destroy(ctx);
    return 0;
}

/* Ends this process when the check that started it ends, however it ends (a SIGKILL to the
 * parent would leave a hung row running for ever). Linux; elsewhere the parent's time limit
 * and its signal handler are all there is. */
static void die_with_parent(void) {
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
}

/* A child's row (--child-fd): the one device and variant its parent names. Exit status 0 (every
 * case passed), 1 (some failed) or 3 (the device did not open: said on stderr). */
static int run_child_row(check_plan *plan, const sweep *s) {
    clattn_variant variant = CLATTN_VARIANT_AUTO;
    for (int v = 1; v < MAX_VARIANTS && variant == CLATTN_VARIANT_AUTO; v++)
        if (plan->variants[v]) variant = (clattn_variant)v;
    die_with_parent();
    clattn_context *ctx = NULL;
    clattn_status status = check_context(plan->devices[0], &ctx);
    if (plan->num_devices != 1 || plan->num_paths != 1 || variant == CLATTN_VARIANT_AUTO ||
        status != CLATTN_SUCCESS) {
        cli_error("check", "--child-fd: cannot run the row (device %zu: %s)", plan->devices[0],
                  clattn_status_name(status));
        clattn_context_destroy(ctx);
        return 3;
    }
    run_row *row = &plan->rows[plan->num_rows++];
    memset(row, 0, sizeof *row);
    row->device = plan->devices[0], row->path = plan->paths[0], row->variant = variant;
    run_row_cases(plan, ctx, s, row);
    clattn_context_destroy(ctx);
    return plan->failures || plan->dump_failures ? 1 : 0;
}

/* ---------------------------------------------------------------- output */

static void json_devices(textbuf *t, const check_plan *plan) {
    textbuf_printf(t, "  \"devices\": [");
    for (size_t i = 0; i < plan->num_devices; i++) {
        textbuf_printf(t, "%s\n    ", i ? "," : "");
        textbuf_json_device(t, plan->devices[i]);
    }
    textbuf_printf(t, "\n  ],\n");
}

/* "outcome", the time limit and, for a row that stopped, the case it stopped in. */
static void json_row_outcome(textbuf *t, const sweep *s, const run_row *r) {
    textbuf_printf(t, "\"outcome\": \"%s\", \"timeout_seconds\": %.1f, ",
                   row_outcome_name(r->outcome), r->timeout_s);
    if (r->outcome == ROW_CRASHED) textbuf_printf(t, "\"signal\": %d, ", r->signal);
    if (r->outcome == ROW_COMPLETED) return;
    char where[600];
    check_case_name(s, r->stopped_in, where, sizeof where);
    textbuf_printf(t, "\"stopped_in_case\": %ld, \"stopped_in\": ", r->stopped_in);
    textbuf_json_string(t, where);
    textbuf_printf(t, ", ");
}

/* Every case the row was to run, with its result: passed, failed, timed out, crashed or not
 * reached (after the case it stopped in). */
static void json_row_cases(textbuf *t, const check_plan *plan, const sweep *s, const run_row *r) {
    static const char *const names[] = {"not reached", "passed",  "failed",
                                        "timed out",   "crashed", "not served"};
    textbuf_printf(t, "\"cases\": [");
    int first = 1;
    for (size_t i = 0; i < s->count; i++) {
        if (plan->only_case >= 0 && (size_t)plan->only_case != i) continue;
        const case_record *c = &r->cases[i];
        textbuf_printf(t, "%s{\"case\": %zu, \"result\": \"%s\"", first ? "" : ", ", i,
                       names[c->outcome]);
        if (c->outcome == CASE_PASSED || c->outcome == CASE_FAILED)
            textbuf_printf(t, ", \"worst_of_tolerance\": %.6g, \"ms\": %.3f", c->worst, c->ms);
        textbuf_printf(t, "}");
        first = 0;
    }
    textbuf_printf(t, "]");
}

static int write_json(const check_plan *plan, const sweep *s, const char *path) {
    textbuf t = {0};
    textbuf_printf(&t, "{\n  \"clattn\": \"%s\",\n", clattn_version());
    json_devices(&t, plan);
    textbuf_printf(&t, "  \"results\": [");
    for (size_t i = 0; i < plan->num_rows; i++) {
        const run_row *r = &plan->rows[i];
        textbuf_printf(&t,
                       "%s\n    {\"device\": %zu, \"path\": \"%s\", \"variant\": \"%s\", "
                       "\"passed\": %zu, \"failed\": %zu, \"not_served\": %zu, "
                       "\"worst_of_tolerance\": %.6g, \"seconds\": %.3f, ",
                       i ? "," : "", r->device, check_path_name(r->path), variant_name(r->variant),
                       r->passed, r->failed, r->not_served, r->worst, r->ms / 1e3);
        json_row_outcome(&t, s, r);
        json_row_cases(&t, plan, s, r);
        textbuf_printf(&t, "}");
    }
    textbuf_printf(&t, "\n  ],\n  \"not_run\": [");
    for (size_t i = 0; i < plan->num_not_run; i++) {
        const not_run_row *r = &plan->not_run[i];
        textbuf_printf(&t,
                       "%s\n    {\"device\": %zu, \"variant\": \"%s\", \"required\": %s, "
                       "\"reason\": ",
                       i ? "," : "", r->device, variant_name(r->variant),
                       r->required ? "true" : "false");
        textbuf_json_string(&t, r->reason);
        textbuf_printf(&t, "}");
    }
    textbuf_printf(&t, "\n  ],\n  \"failures\": %zu,\n  \"required_not_run\": %zu\n}\n",
                   plan->failures, plan->required_not_run);
    int rc = textbuf_write(&t, path, "check");
    textbuf_free(&t);
    return rc;
}

/* The last line: "all passed" only when every run passed and nothing was left unrun; a
 * variant --require names that did not run fails the check. */
static void print_summary(const check_plan *plan) {
    const char *verdict = plan->failures || plan->required_not_run ? "FAILED"
                          : plan->num_not_run                      ? "passed where run"
                                                                   : "all passed";
    printf("%s: %zu failing runs", verdict, plan->failures);
    if (plan->num_not_run)
        printf(", not run: %zu (required: %zu)", plan->num_not_run, plan->required_not_run);
    printf("; worst is the largest |error| / tolerance (<= 1 passes)\n");
}

/* Writes the empty report into `path`. @return 0, or errno. */
static int write_empty_report(const char *path) {
    static const char empty[] = "{\"clattn_verdicts\": 1, \"entries\": []}\n";
    FILE *f = fopen(path, "w");
    if (!f) return errno;
    int e = fputs(empty, f) < 0 ? errno : 0;
    if (fclose(f) != 0 && !e) e = errno;
    return e;
}

/* --report: the verdicts gathered beside FILE renamed into place, or an empty report when no
 * row earned one (so that FILE always says what this check found). A report missing a row's
 * verdict is not written at all. */
static void finish_report(check_plan *plan, int registration) {
    int e = 0;
    if (!plan->report_incomplete && access(plan->report_tmp, F_OK) != 0)
        e = write_empty_report(plan->report_tmp);
    if (!plan->report_incomplete && !e && rename(plan->report_tmp, plan->report) != 0) e = errno;
    if (plan->report_incomplete || e) {
        cli_error("check", "--report %s: not written: %s", plan->report,
                  e ? strerror(e) : "a row's verdict could not be added (said above)");
        unlink(plan->report_tmp);
        plan->dump_failures++;
    }
    interrupt_untrack(registration);
}

static void list_cases(const sweep *s) {
    for (size_t i = 0; i < s->count; i++) {
        char what[512];
        case_describe(&s->cases[i], what, sizeof what);
        printf("%-3zu %s\n", i, what);
    }
}

int cmd_check(int argc, char **argv) {
    const size_t n = sizeof check_options / sizeof check_options[0];
    cli_args args;
    int parsed = args_parse(&args, check_options, n, "check", argc, argv);
    if (parsed == 1) {
        args_usage("check", "[--device SPEC|all] [--quick] [options]", check_options, n);
        return 0;
    }
    if (parsed) return parsed;
    static sweep s; /* large: keep it off the stack */
    build_sweep(&s, args_has(&args, "quick"));
    const char *storage = NULL;
    if (apply_storage(&args, &s, &storage)) return EXIT_USAGE;
    if (args_has(&args, "list")) {
        for (size_t i = 0; i < n; i++) { /* it runs nothing: options of a run would be lost */
            const char *name = check_options[i].name;
            if (args_has(&args, name) && strcmp(name, "list") && strcmp(name, "quick") &&
                strcmp(name, "storage")) {
                cli_error("check",
                          "--list lists the sweep and runs nothing; it takes only "
                          "--quick and --storage, got --%s",
                          name);
                return EXIT_USAGE;
            }
        }
        list_cases(&s);
        return 0;
    }
    static check_plan plan;
    int rc = parse_plan(&args, &s, &plan);
    if (rc) return rc;
    plan.storage_name = storage;
    if (plan.child_fd >= 0) return run_child_row(&plan, &s);
    static const char *const outputs[] = {"json", "report"};
    if (args_check_outputs(&args, outputs, ARRAY_LEN(outputs), NULL, 0)) return EXIT_USAGE;
    if (args_has(&args, "json") && check_output_file("check", "json", args_get(&args, "json")))
        return 1;
    printf("%-3s %-36s %-9s %-7s %6s %6s %9s %10s\n", "#", "device", "path", "variant", "passed",
           "failed", "worst", "seconds");
    int registration = plan.report ? interrupt_track(plan.report_tmp) : -1;
    for (size_t i = 0; i < plan.num_devices; i++) check_device(&plan, &s, plan.devices[i]);
    if (plan.report) finish_report(&plan, registration);
    if (plan.recorded) {
        char store[4096] = "";
        clattn_verdicts_file(store, sizeof store);
        printf("verdicts: %zu recorded in %s (clattn devices --variants shows them)\n",
               plan.recorded, store);
    }
    print_summary(&plan);
    if (args_has(&args, "json") && write_json(&plan, &s, args_get(&args, "json"))) return 1;
    return plan.failures || plan.dump_failures || plan.required_not_run ? 1 : 0;
}
