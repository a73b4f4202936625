/*
 * clattn tune: searches one device's kernel parameters for a variant (flash by default: rows
 * and keys a work-group, the micro-tile, vector width, local-memory staging, subgroups; each
 * variant's row publishes the fields and values it searches, clattn_variant_info's axes) over a
 * few representative shapes, and stores the winner in tuning.json in the cache folder,
 * keyed by device and driver (clattn_tuning_save). Public API only: candidates are tried on
 * the context with clattn_context_set_tuning.
 *
 * The search is coordinate descent from the parameters in effect: one field at a time through
 * its values, a candidate kept when it is correct on every shape (checked against the CPU
 * reference with docs/semantics.md section 4's tolerances) and at least 2% faster (geometric mean
 * over the shapes of its median kernel time, from OpenCL profiling events), rounds until nothing
 * improves or --time runs out (a candidate is never started after that). Before the search,
 * --jobs child processes build the first round's candidates into the cache folder, several at
 * once (jobs.h), so that the search mostly finds its kernels built.
 *
 * --gemm NAME tunes a row of the GEMM table instead (clattn_gemm_info's axes; the panels row's
 * micro-tile and blocks, or CLBlast's Xgemm parameters through CLBlastOverrideParameters) on
 * attention layers (tune_layer.c) whose projections and output run on it: the time is the
 * GEMMs' (projections plus output), the check the layer's reference. A row whose parameters in
 * effect are not on its axes (CLBlast's own database) is searched from the middle of each axis,
 * and its winner kept only when it beats those parameters by 2% too.
 */
#include "args.h"
#include "common.h"
#include "commands.h"
#include "conformance.h"
#include "interrupt.h"
#include "jobs.h"
#include "tune_layer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TUNE_SHAPES 3
#define TUNE_GAIN   0.98 /* a candidate must beat the best by 2% */

static const cli_option tune_options[] = {
    {"device", "SPEC", "the device to tune (default: $CLATTN_DEVICE or the first GPU)"},
    {"variant", "NAME",
     "the variant to tune (default flash): one with tuning axes in clattn devices --variants"},
    {"gemm", "NAME",
     "tune a GEMM row (clblast, panels: clattn devices --variants) on attention layers instead"},
    {"time", "SECONDS", "time budget of the search (default 120); no candidate starts after it"},
    {"n", "N", "sequence length of the shapes (default 1024; --gemm: 512)"},
    {"repeat", "N", "timed runs a candidate and shape, after one warm-up (default 3, at most 64)"},
    {"jobs", "N",
     "programs built at once ahead of the search, in child processes (default: the cores)"},
    {"dry-run", NULL, "search and print, but write nothing"},
    {"verbose", NULL, "print every candidate"},
    {"help", NULL, "show this help"},
};

/* ---------------------------------------------------------------- shapes */

typedef struct tune_shape {
    char name[96];
    clattn_attention_desc desc;
    cl_mem q, k, v, o;
    size_t o_count, o_bytes;
    double *ref; /* the reference's O, [B][Hq][Nq][Dv] */
    double before_ms, best_ms, ms;
} tune_shape;

/* Q, K, V with seeded values in [-1, 1], stored in the desc's type, on the host. */
static void *random_tensor(size_t count, clattn_dtype dtype, uint64_t seed) {
    size_t size = dtype == CLATTN_F32 ? 4 : 2;
    float *x = malloc(count * sizeof *x);
    void *stored = malloc(count * size);
    if (!x || !stored) {
        free(x);
        free(stored);
        return NULL;
    }
    for (size_t i = 0; i < count; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(seed >> 11) * 0x1.0p-53 * 2.0 - 1.0);
    }
    clattn_convert(CLATTN_F32, x, dtype, stored, count);
    free(x);
    return stored;
}

static cl_mem device_copy(clattn_context *ctx, size_t bytes, void *host) {
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(clattn_context_cl_context(ctx),
                              host ? CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR : CL_MEM_READ_WRITE,
                              bytes, host, &err);
    return err == CL_SUCCESS ? m : NULL;
}

/* The reference's O, float32 [B][Hq][Nq][Dv], widened. */
static int reference_of(tune_shape *s, const void *q, const void *k, const void *v) {
    clattn_attention_desc d = s->desc;
    d.out_dtype = CLATTN_F32;
    float *o = malloc(s->o_count * sizeof *o);
    s->ref = malloc(s->o_count * sizeof *s->ref);
    if (!o || !s->ref || clattn_attention_reference(&d, q, k, v, o, NULL) != CLATTN_SUCCESS) {
        free(o);
        return 1;
    }
    for (size_t i = 0; i < s->o_count; i++) s->ref[i] = o[i];
    free(o);
    return 0;
}

/* Inputs, device buffers and (with_reference) the reference of one shape (BHSD, so O is the
 * reference's order). */
static int shape_setup(clattn_context *ctx, tune_shape *s, size_t hq, size_t hkv, size_t n,
                       size_t d, clattn_dtype dtype, int causal, int with_reference) {
    clattn_attention_desc_init(&s->desc, CLATTN_LAYOUT_BHSD, 1, hq, hkv, n, n, d, d);
    s->desc.dtype = s->desc.out_dtype = dtype;
    s->desc.causal = causal;
    s->desc.path = CLATTN_PATH_FUSED;
    snprintf(s->name, sizeof s->name, "H=%zu/%zu N=%zu D=%zu %s%s", hq, hkv, n, d,
             dtype == CLATTN_F16    ? "f16"
             : dtype == CLATTN_BF16 ? "bf16"
                                    : "f32",
             causal ? " causal" : "");
    size_t size = dtype == CLATTN_F32 ? 4 : 2, q_count = hq * n * d, kv_count = hkv * n * d;
    s->o_count = q_count;
    s->o_bytes = q_count * size;
    void *q = random_tensor(q_count, dtype, 1), *k = random_tensor(kv_count, dtype, 2);
    void *v = random_tensor(kv_count, dtype, 3);
    int failed = !q || !k || !v || (with_reference && reference_of(s, q, k, v));
    if (!failed) {
        s->q = device_copy(ctx, q_count * size, q), s->k = device_copy(ctx, kv_count * size, k);
        s->v = device_copy(ctx, kv_count * size, v), s->o = device_copy(ctx, s->o_bytes, NULL);
        failed = !s->q || !s->k || !s->v || !s->o;
    }
    free(q), free(k), free(v);
    return failed;
}

static void shape_free(tune_shape *s) {
    cl_mem all[] = {s->q, s->k, s->v, s->o};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        if (all[i]) clReleaseMemObject(all[i]);
    free(s->ref);
}

/* ---------------------------------------------------------------- measuring */

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Whether O (read back) matches the reference within docs/semantics.md section 4's tolerance. */
static int output_matches(clattn_context *ctx, const tune_shape *s, char *why, size_t size) {
    void *raw = malloc(s->o_bytes);
    float *got = malloc(s->o_count * sizeof *got);
    int ok = raw && got &&
             clEnqueueReadBuffer(clattn_context_queue(ctx), s->o, CL_TRUE, 0, s->o_bytes, raw, 0,
                                 NULL, NULL) == CL_SUCCESS;
    if (ok) {
        case_result r;
        double atol, rtol;
        memset(&r, 0, sizeof r);
        clattn_convert(s->desc.out_dtype, raw, CLATTN_F32, got, s->o_count);
        tolerance_for(s->desc.dtype, s->desc.out_dtype, &atol, &rtol);
        compare_values("O", got, s->ref, s->o_count, atol, rtol, &r);
        ok = r.mismatches == 0;
        if (!ok) snprintf(why, size, "%s", r.message);
    }
    free(raw);
    free(got);
    return ok;
}

/* One warm-up call (builds the kernel), the check, then `repeat` (at most TUNE_REPEAT_MAX) timed
 * calls: *ms receives the median kernel time and kernel the variant's description.
 * @return 0, or 1 with why. */
static int measure(clattn_context *ctx, tune_shape *s, clattn_variant variant, size_t repeat,
                   char *kernel, size_t kernel_size, char *why, size_t why_size) {
    double times[TUNE_REPEAT_MAX];
    clattn_stats stats;
    s->desc.variant = variant;
    for (size_t i = 0; i <= repeat; i++) {
        clattn_status status = clattn_attention(ctx, &s->desc, s->q, s->k, s->v, s->o, NULL, NULL);
        clattn_stats_init(&stats);
        if (status == CLATTN_SUCCESS) status = clattn_context_last_stats(ctx, &stats);
        if (status != CLATTN_SUCCESS) {
            snprintf(why, why_size, "%s: %s", clattn_status_name(status),
                     clattn_context_last_error(ctx));
            return 1;
        }
        if (i == 0 && !output_matches(ctx, s, why, why_size)) return 1;
        if (i > 0) times[i - 1] = stats.kernel_ms;
    }
    qsort(times, repeat, sizeof *times, compare_doubles);
    s->ms = repeat ? times[repeat / 2] : stats.kernel_ms;
    snprintf(kernel, kernel_size, "%s", stats.kernel);
    return 0;
}

/* ---------------------------------------------------------------- candidates */

/* The field an axis walks. */
static unsigned *field_of(clattn_tuning *t, const clattn_tuning_axis *axis) {
    return clattn_tuning_field(t, axis->field);
}

typedef struct tuner {
    clattn_context *ctx;
    clattn_device_info device;
    clattn_variant variant;
    clattn_gemm gemm;               /* --gemm: a GEMM row is tuned, on `layers` */
    tune_shape shapes[TUNE_SHAPES]; /* names and times (and, for variants, the calls) */
    tune_layer layers[TUNE_SHAPES];
    size_t repeat, tried, rejected;
    int verbose;
    double deadline;
    clattn_tuning seen[256];
    size_t num_seen;
} tuner;

static int seen_before(tuner *t, const clattn_tuning *c) {
    for (size_t i = 0; i < t->num_seen; i++)
        if (memcmp(&t->seen[i], c, sizeof *c) == 0) return 1;
    if (t->num_seen < ARRAY_LEN(t->seen)) t->seen[t->num_seen++] = *c;
    return 0;
}

/* Runs a candidate on every shape: the log of its geometric-mean time against `before`
 * (shape.before_ms; 0 when before is unset), or INFINITY when it fails or is wrong. */
static double evaluate(tuner *t, const clattn_tuning *c, char *kernel, size_t size) {
    char why[512] = "";
    double score = 0;
    t->tried++;
    clattn_status set = t->gemm ? clattn_context_set_gemm_tuning(t->ctx, t->gemm, c)
                                : clattn_context_set_tuning(t->ctx, t->variant, c);
    if (set != CLATTN_SUCCESS) {
        t->rejected++; /* the kernel cannot take it as given on this device */
        if (t->verbose) printf("  refused: %s\n", clattn_context_last_error(t->ctx));
        return INFINITY;
    }
    for (size_t i = 0; i < TUNE_SHAPES; i++) {
        tune_shape *s = &t->shapes[i];
        int failed = t->gemm
                         ? tune_layer_measure(t->ctx, &t->layers[i], t->repeat, &s->ms, kernel,
                                              size, why, sizeof why)
                         : measure(t->ctx, s, t->variant, t->repeat, kernel, size, why, sizeof why);
        if (failed) {
            t->rejected++;
            if (t->verbose) printf("  rejected: %s\n", why);
            return INFINITY;
        }
        score += log(s->ms / (s->before_ms > 0 ? s->before_ms : s->ms)) / TUNE_SHAPES;
    }
    return score;
}

/* A winner's times become the shapes' best. */
static void keep_times(tuner *t) {
    for (size_t i = 0; i < TUNE_SHAPES; i++) {
        tune_shape *s = &t->shapes[i];
        s->best_ms = s->ms;
        if (s->before_ms <= 0) s->before_ms = s->ms; /* before failed: the first winner is it */
    }
}

static void format_params(const clattn_tuning *p, const clattn_tuning_axis *axes, size_t n,
                          char *out, size_t size) {
    size_t used = 0;
    out[0] = '\0';
    for (size_t a = 0; a < n && used < size; a++)
        used += (size_t)snprintf(out + used, size - used, "%s%s %u", a ? ", " : "", axes[a].field,
                                 *field_of((clattn_tuning *)p, &axes[a]));
}

/* On a terminal without --verbose, one line on stderr that says the search goes on (cleared
 * before the table). */
static void show_progress(const tuner *t, const char *what) {
    if (t->verbose || !isatty(STDERR_FILENO)) return;
    double left = t->deadline - seconds_now();
    fprintf(stderr, "\r  candidate %zu: %s; at most %.0f s left   ", t->tried + 1, what,
            left > 0 ? left : 0);
}

static void clear_progress(const tuner *t) {
    if (!t->verbose && isatty(STDERR_FILENO)) fprintf(stderr, "\r%70s\r", "");
}

/* Coordinate descent from *best: each field through its values, the best kept, in rounds
 * until a round improves nothing or the time is up. */
static void search(tuner *t, const clattn_tuning_axis *axes, size_t num_axes, clattn_tuning *best,
                   double *best_score) {
    for (int improved = 1; improved;) {
        improved = 0;
        for (size_t a = 0; a < num_axes; a++)
            for (size_t v = 0; v < axes[a].count; v++) {
                if (seconds_now() >= t->deadline) return;
                clattn_tuning c = *best;
                *field_of(&c, &axes[a]) = axes[a].values[v];
                if (seen_before(t, &c)) continue;
                char kernel[96] = "", text[256];
                char what[64];
                snprintf(what, sizeof what, "other %s values", axes[a].field);
                show_progress(t, what);
                double score = evaluate(t, &c, kernel, sizeof kernel);
                int better = score < *best_score + log(TUNE_GAIN);
                if (t->verbose) {
                    format_params(&c, axes, num_axes, text, sizeof text);
                    printf("  %-70s %s\n", text,
                           isinf(score) ? "rejected"
                           : better     ? "kept"
                                        : "slower");
                    fflush(stdout); /* progress, also when stdout is a file or a pipe */
                }
                if (!better) continue;
                *best = c, *best_score = score, improved = 1;
                keep_times(t);
            }
    }
}

static void print_table(const tuner *t, const char *before, const char *after) {
    printf("\n%-32s %12s %12s %9s\n", "shape", "before ms", "after ms", "speedup");
    for (size_t i = 0; i < TUNE_SHAPES; i++) {
        const tune_shape *s = &t->shapes[i];
        if (s->before_ms > 0 && s->best_ms > 0)
            printf("%-32s %12.3f %12.3f %8.2fx\n", s->name, s->before_ms, s->best_ms,
                   s->before_ms / s->best_ms);
        else
            printf("%-32s %12s %12s %9s\n", s->name, "failed", "-", "-");
    }
    printf("before: %s\nafter:  %s\n", before, after);
    printf("%zu candidates run, %zu rejected (an error or a result off the reference); kernel "
           "times from OpenCL profiling events, median of %zu runs\n",
           t->tried, t->rejected, t->repeat);
}

/* ---------------------------------------------------------------- the command */

typedef struct tune_options_values {
    const char *device;
    clattn_variant variant;
    clattn_gemm gemm;                         /* CLATTN_GEMM_AUTO: none given */
    double seconds, deadline, build_deadline; /* no candidate starts after them */
    size_t n, repeat, jobs;
    int dry_run, verbose;
} tune_options_values;

static int parse_tune(const cli_args *args, tune_options_values *o) {
    size_t seconds = 120;
    o->device = args_get(args, "device");
    o->n = 1024, o->repeat = 3, o->jobs = jobs_default();
    o->variant = CLATTN_VARIANT_FLASH;
    if ((args_has(args, "variant") && parse_variant(args, "variant", &o->variant)) ||
        (args_has(args, "time") && parse_size(args, "time", 1, &seconds)) ||
        (args_has(args, "n") && parse_size(args, "n", 1, &o->n)) ||
        (args_has(args, "repeat") && parse_size(args, "repeat", 1, &o->repeat)) ||
        jobs_parse(args, &o->jobs))
        return EXIT_USAGE;
    if (o->repeat > TUNE_REPEAT_MAX) {
        cli_error("tune", "--repeat: at most %d timed runs a candidate and shape, got %zu",
                  TUNE_REPEAT_MAX, o->repeat);
        return EXIT_USAGE;
    }
    o->gemm = CLATTN_GEMM_AUTO;
    if (args_has(args, "gemm")) {
        if (args_has(args, "variant")) {
            cli_error("tune", "--gemm and --variant: one subject at a time");
            return EXIT_USAGE;
        }
        if (clattn_gemm_from_name(args_get(args, "gemm"), &o->gemm) != CLATTN_SUCCESS ||
            o->gemm == CLATTN_GEMM_AUTO) {
            cli_error("tune", "--gemm: expected clblast or panels, got '%s'",
                      args_get(args, "gemm"));
            return EXIT_USAGE;
        }
        if (!args_has(args, "n")) o->n = 512;
    }
    o->seconds = (double)seconds;
    o->deadline = seconds_now() + o->seconds;
    o->build_deadline = o->deadline - o->seconds / 2; /* building ahead: half the budget */
    o->dry_run = args_has(args, "dry-run");
    o->verbose = args_has(args, "verbose");
    return 0;
}

/* --gemm: causal layers of d_model 1024 (16 heads of 64): MHA and GQA with float32 weights, and
 * MHA with bfloat16 weights. */
static int setup_layers(tuner *t, size_t n) {
    static const size_t heads_kv[TUNE_SHAPES] = {16, 4, 16};
    static const clattn_dtype wtypes[TUNE_SHAPES] = {CLATTN_F32, CLATTN_F32, CLATTN_BF16};
    for (size_t i = 0; i < TUNE_SHAPES; i++) {
        if (tune_layer_setup(t->ctx, &t->layers[i], 16, heads_kv[i], 64, n, wtypes[i])) return 1;
        snprintf(t->shapes[i].name, sizeof t->shapes[i].name, "%s", t->layers[i].name);
    }
    return 0;
}

/* The representative shapes: MHA, causal GQA, and a float16 causal call with D=128; the first
 * two in float16 too for nv_mma (tensor cores take 16-bit storage only). */
static int setup_shapes(tuner *t, size_t n, int with_reference) {
    if (t->gemm) return setup_layers(t, n);
    const clattn_dtype d64 = t->variant == CLATTN_VARIANT_NV_MMA ? CLATTN_F16 : CLATTN_F32;
    return shape_setup(t->ctx, &t->shapes[0], 8, 8, n, 64, d64, 0, with_reference) ||
           shape_setup(t->ctx, &t->shapes[1], 8, 2, n, 64, d64, 1, with_reference) ||
           shape_setup(t->ctx, &t->shapes[2], 4, 4, n, 128, CLATTN_F16, 1, with_reference);
}

/* The axes' middle values over `from`: where a search starts when `from` is not on the axes. */
static int off_the_axes(const clattn_tuning *from, const clattn_tuning_axis *axes, size_t n,
                        clattn_tuning *middle) {
    int off = 0;
    *middle = *from;
    for (size_t a = 0; a < n; a++) {
        unsigned value = *field_of((clattn_tuning *)from, &axes[a]), found = 0;
        for (unsigned i = 0; i < axes[a].count; i++) found |= axes[a].values[i] == value;
        off |= !found;
        *field_of(middle, &axes[a]) = axes[a].values[axes[a].count / 2];
    }
    return off;
}

/* The parameters in effect for the subject, and where they come from. */
static void tuning_in_effect(const tuner *t, clattn_tuning *before, clattn_tuning_source *source) {
    clattn_tuning_init(before);
    if (t->gemm)
        clattn_device_gemm_tuning(t->device.index, t->gemm, before, source);
    else
        clattn_device_tuning(t->device.index, t->variant, before, source);
}

/* Appends c to list[*n] unless it is there already or the list is full. */
static void add_candidate(clattn_tuning *list, size_t *n, size_t cap, const clattn_tuning *c) {
    for (size_t i = 0; i < *n; i++)
        if (memcmp(&list[i], c, sizeof *c) == 0) return;
    if (*n < cap) list[(*n)++] = *c;
}

/* The candidates the search tries first: the parameters in effect, the axes' middle when
 * those are off the axes (the search then starts there), and each field of the start through
 * its values. @return how many (at most cap), none twice. */
static size_t first_round(const clattn_tuning *before, const clattn_tuning_axis *axes,
                          size_t num_axes, clattn_tuning *out, size_t cap) {
    clattn_tuning start;
    size_t n = 0;
    if (!off_the_axes(before, axes, num_axes, &start)) start = *before;
    add_candidate(out, &n, cap, before);
    add_candidate(out, &n, cap, &start);
    for (size_t a = 0; a < num_axes; a++)
        for (size_t v = 0; v < axes[a].count; v++) {
            clattn_tuning c = start;
            *field_of(&c, &axes[a]) = axes[a].values[v];
            add_candidate(out, &n, cap, &c);
        }
    return n;
}

/* Measures the parameters in effect, searches, prints; *best receives the winner. */
static int run_search(tuner *t, const clattn_tuning_axis *axes, size_t num_axes,
                      clattn_tuning *best) {
    static const char *const sources[] = {"class default", "built-in", "tuning.json", "context"};
    clattn_tuning_source source = CLATTN_TUNING_DEFAULT;
    clattn_tuning before, start;
    tuning_in_effect(t, &before, &source);
    char kernel[96] = "", text_before[512], text_after[512], params[256];
    seen_before(t, &before);
    show_progress(t, "the parameters in effect");
    double best_score = evaluate(t, &before, kernel, sizeof kernel);
    for (size_t i = 0; i < TUNE_SHAPES; i++)
        t->shapes[i].before_ms = t->shapes[i].best_ms = isinf(best_score) ? 0 : t->shapes[i].ms;
    format_params(&before, axes, num_axes, params, sizeof params);
    snprintf(text_before, sizeof text_before, "%s (%s)%s", params, sources[source],
             isinf(best_score) ? ": failed" : "");
    if (isinf(best_score)) {
        clear_progress(t);
        printf("the parameters in effect fail: %s\n", text_before);
    }
    *best = before;
    double before_score = best_score;
    if (off_the_axes(&before, axes, num_axes, &start) && !seen_before(t, &start)) {
        show_progress(t, "the middle of the axes");
        double start_score = evaluate(t, &start, kernel, sizeof kernel);
        if (!isinf(start_score)) { /* descend from the middle; keep it only if it wins */
            *best = start, best_score = start_score;
            keep_times(t);
        }
    }
    search(t, axes, num_axes, best, &best_score);
    clear_progress(t);
    if (!isinf(before_score) && best_score >= before_score + log(TUNE_GAIN))
        *best = before, best_score = before_score; /* nothing beat the parameters in effect */
    if (isinf(best_score)) {
        cli_error("tune", "no candidate ran correctly on %s", t->device.name);
        return 1;
    }
    format_params(best, axes, num_axes, params, sizeof params);
    snprintf(text_after, sizeof text_after, "%s", params);
    print_table(t, text_before, text_after);
    return 0;
}

static int save_winner(tuner *t, const tune_options_values *o, const clattn_tuning *best) {
    char path[4200] = "";
    if (t->gemm)
        clattn_context_set_gemm_tuning(t->ctx, t->gemm, NULL);
    else
        clattn_context_set_tuning(t->ctx, o->variant, NULL);
    if (o->dry_run) {
        printf("--dry-run: tuning.json not written\n");
        return 0;
    }
    /* tuning.json is written through a temporary and a rename inside the library: SIGINT and
     * SIGTERM wait for it, so that neither half a file nor the temporary is left */
    interrupt_section section;
    interrupt_defer_begin(&section);
    clattn_status status = t->gemm ? clattn_gemm_tuning_save(t->ctx, t->gemm, best)
                                   : clattn_tuning_save(t->ctx, o->variant, best);
    interrupt_defer_end(&section);
    if (status != CLATTN_SUCCESS) {
        cli_report("tune", "saving the winner", status, t->ctx);
        return 1;
    }
    clattn_tuning_file(path, sizeof path);
    printf("wrote the %s entry of %s (driver %s) to %s\n",
           t->gemm ? clattn_gemm_name(t->gemm) : clattn_variant_name(o->variant), t->device.name,
           t->device.driver_version, path);
    return 0;
}

/* Whether the subject (variant or GEMM row) has axes and runs on the device; its axes.
 * @return 0, or the exit status after saying why not. */
static int subject_check(tuner *t, clattn_tuning_axis *axes, size_t *num_axes) {
    char why[256] = "";
    const char *name = t->gemm ? clattn_gemm_name(t->gemm) : clattn_variant_name(t->variant);
    int supported = 0;
    if (t->gemm) {
        clattn_gemm_info info;
        clattn_gemm_info_init(&info);
        if (clattn_gemm_describe(t->ctx, t->gemm, &info) == CLATTN_SUCCESS) {
            *num_axes = info.num_axes;
            memcpy(axes, info.axes, info.num_axes * sizeof *axes);
            supported = info.supported;
            snprintf(why, sizeof why, "%s", info.reason);
        }
    } else {
        clattn_variant_info info;
        clattn_variant_info_init(&info);
        if (clattn_variant_describe(t->ctx, t->variant, &info) == CLATTN_SUCCESS) {
            *num_axes = info.num_axes < 8 ? info.num_axes : 8;
            memcpy(axes, info.axes, *num_axes * sizeof *axes);
            supported = clattn_variant_supported(t->ctx, t->variant, NULL, why, sizeof why) ==
                        CLATTN_SUCCESS;
        }
    }
    if (!*num_axes) {
        cli_error("tune",
                  "%s has nothing to tune (see the tuning axes in clattn devices --variants)",
                  name);
        return EXIT_USAGE;
    }
    if (!supported) {
        cli_error("tune", "%s does not run on %s: %s", name, t->device.name, why);
        return 1;
    }
    return 0;
}

/* ---------------------------------------------------------------- building ahead */

/* The tuner a job or the search works with: its context on the device, the subject's axes and
 * the shapes. @return 0, or the exit status after saying why not. */
static int tuner_open(tuner *t, const tune_options_values *o, clattn_tuning_axis *axes,
                      size_t *num_axes, int with_reference) {
    int rc = cli_open_context("tune", o->device, &t->ctx);
    if (rc) return rc;
    clattn_device_info_init(&t->device);
    clattn_context_device_info(t->ctx, &t->device);
    t->variant = o->variant, t->gemm = o->gemm, t->repeat = o->repeat, t->verbose = o->verbose;
    t->deadline = o->deadline;
    rc = subject_check(t, axes, num_axes);
    if (!rc && (clattn_context_set_timing(t->ctx, 1) != CLATTN_SUCCESS ||
                (t->gemm && clattn_context_set_gemm(t->ctx, t->gemm) != CLATTN_SUCCESS) ||
                setup_shapes(t, o->n, with_reference))) {
        cli_error("tune", "cannot set up the shapes on %s (out of memory?)", t->device.name);
        rc = 1;
    }
    return rc;
}

static void tuner_close(tuner *t) {
    for (size_t i = 0; i < TUNE_SHAPES; i++) tune_layer_free(&t->layers[i]);
    for (size_t i = 0; i < TUNE_SHAPES; i++) shape_free(&t->shapes[i]);
    clattn_context_destroy(t->ctx);
}

/* A job's share of the first round (a job_share): each candidate run once on every shape, which
 * builds its kernels into the cache folder, none started past half the budget (the search has
 * the rest); a line each. Its jobs run quiet: the search says what goes wrong, once. */
static int build_share(void *arg, size_t job, size_t jobs) {
    const tune_options_values *o = arg;
    static tuner t; /* this process's own */
    clattn_tuning_axis axes[8];
    size_t num_axes = 0;
    int rc = tuner_open(&t, o, axes, &num_axes, 0);
    clattn_tuning before, round[64];
    clattn_tuning_source source;
    size_t count = 0;
    if (!rc) {
        tuning_in_effect(&t, &before, &source);
        count = first_round(&before, axes, num_axes, round, ARRAY_LEN(round));
    }
    for (size_t i = job; i < count && seconds_now() < o->build_deadline; i += jobs) {
        if (clattn_context_set_tuning(t.ctx, t.variant, &round[i]) != CLATTN_SUCCESS) continue;
        double start = seconds_now();
        for (size_t s = 0; s < TUNE_SHAPES; s++) {
            tune_shape *shape = &t.shapes[s];
            shape->desc.variant = t.variant;
            clattn_attention(t.ctx, &shape->desc, shape->q, shape->k, shape->v, shape->o, NULL,
                             NULL);
        }
        char params[256];
        format_params(&round[i], axes, num_axes, params, sizeof params);
        printf("  [%zu/%zu] %s: built in %.1f s\n", i + 1, count, params, seconds_now() - start);
        fflush(stdout);
    }
    tuner_close(&t);
    return rc;
}

/* Builds the first round ahead in --jobs processes, where that can help: a variant's kernels
 * (CLBlast keeps its own in memory only), a cache folder to keep them in, and more than one
 * job. @return 0, or 1 when the device spec matches no device. */
static int build_ahead(const tune_options_values *o) {
    char folder[4096];
    if (o->gemm || o->jobs < 2 || clattn_cache_folder(folder, sizeof folder) != CLATTN_SUCCESS)
        return 0;
    if (jobs_check_device("tune", o->device)) return 1;
    double start = seconds_now();
    if (jobs_run("tune", build_share, (void *)o, o->jobs, 1)) return 0; /* the search says why */
    double seconds = seconds_now() - start;
    printf("built the first round's kernels ahead in %.1f s with %zu jobs\n", seconds, o->jobs);
    return 0;
}

int cmd_tune(int argc, char **argv) {
    const size_t n = ARRAY_LEN(tune_options);
    cli_args args;
    int rc = args_parse(&args, tune_options, n, "tune", argc, argv);
    if (rc == 1) {
        args_usage("tune", "[--device SPEC] [--variant NAME] [--time SECONDS] [options]",
                   tune_options, n);
        return 0;
    }
    static tuner t; /* large: keep it off the stack */
    tune_options_values o;
    if (rc || (rc = parse_tune(&args, &o)) || (rc = build_ahead(&o))) return rc;
    const char *subject = o.gemm ? clattn_gemm_name(o.gemm) : clattn_variant_name(o.variant);
    clattn_tuning_axis axes[8];
    size_t num_axes = 0;
    rc = tuner_open(&t, &o, axes, &num_axes, 1);
    if (!rc) {
        printf("tuning %s%s on %s (driver %s), %.0f s budget, N=%zu\n", t.gemm ? "the GEMM " : "",
               subject, t.device.name, t.device.driver_version, o.seconds, o.n);
        fflush(stdout);
    }
    clattn_tuning best;
    if (!rc) rc = run_search(&t, axes, num_axes, &best);
    if (!rc) rc = save_winner(&t, &o, &best);
    tuner_close(&t);
    return rc;
}
