/*
 * The attention sweep of `clattn bench`: times attention over every path, shape and pattern
 * of a bench_config on each of its devices. Each measurement warms up, then repeats; it reports
 * the minimum and median of the wall time around the call (end to end, with the inputs already
 * on the device) and of the kernel time (OpenCL profiling events), the build time of the first
 * call separately, FLOP/s over the allowed pairs only, bytes moved and the device memory the
 * call allocated. See bench/README.md for the presets and results.
 */
#include "common.h"
#include "host_attention.h"
#include "message.h"
#include "sweeps.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_RECORDS BENCH_MAX_RECORDS

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
    clattn_stats stats; /* only after a success: asking replaces the failure's message */
    clattn_stats_init(&stats);
    *kernel_ms = status == CLATTN_SUCCESS && path <= BENCH_GEMM &&
                         clattn_context_last_stats(in->ctx, &stats) == 0
                     ? stats.kernel_ms
                     : 0;
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

typedef struct sweep_run {
    const bench_config *config;
    bench_record *records;
    size_t num_records, total, done;
    int failed;
} sweep_run;

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
                       clattn_layout layout, shape_inputs *s) {
    memset(s, 0, sizeof *s);
    clattn_attention_desc *d = &s->desc;
    if (clattn_attention_desc_init(d, layout, shape[L_B], shape[L_HQ], shape[L_HKV], shape[L_NQ],
                                   shape[L_NK], shape[L_D], shape[L_DV])) {
        cli_error("bench",
                  "B=%zu Hq=%zu Hkv=%zu Nq=%zu Nk=%zu D=%zu Dv=%zu: the tensors' sizes "
                  "overflow",
                  shape[L_B], shape[L_HQ], shape[L_HKV], shape[L_NQ], shape[L_NK], shape[L_D],
                  shape[L_DV]); /* (the heads were checked by the program) */
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
static void bench_pattern_paths(sweep_run *run, clattn_context *ctx, size_t device,
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
        r->layout = c->layout;
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

/* The patterns measured at a shape: the sparse preset's at its Nk, or the config's. */
static const bench_pattern *shape_patterns(const bench_config *c, const size_t shape[7],
                                           bench_pattern *own, size_t *count) {
    if (c->curve_patterns && bench_curve_patterns(shape[L_NK], own, count) == 0) return own;
    *count = c->num_patterns;
    return c->patterns;
}

/* Measurements a device makes: every shape's patterns times the paths. */
static size_t measurements_per_device(const bench_config *c) {
    bench_pattern own[BENCH_MAX_PATTERNS];
    size_t total = 0, count = 0;
    for (size_t i = 0; i < num_shapes(c); i++) {
        size_t shape[7] = {0};
        shape_at(c, i, shape);
        shape_patterns(c, shape, own, &count);
        total += count * c->num_paths;
    }
    return total;
}

size_t bench_sweep_measurements(const bench_config *c) {
    return c->num_devices * measurements_per_device(c);
}

clattn_context *bench_open_timed(size_t device, clattn_gemm gemm, clattn_device_info *info) {
    clattn_context *ctx = NULL;
    clattn_device_info_init(info);
    if (clattn_context_create(&ctx, device) != CLATTN_SUCCESS ||
        clattn_context_set_timing(ctx, 1) != CLATTN_SUCCESS ||
        clattn_context_set_gemm(ctx, gemm) != CLATTN_SUCCESS ||
        clattn_context_device_info(ctx, info) != CLATTN_SUCCESS) {
        cli_error("bench", "cannot open device %zu with timing", device);
        clattn_context_destroy(ctx);
        return NULL;
    }
    return ctx;
}

static void bench_device(sweep_run *run, size_t device) {
    const bench_config *c = run->config;
    clattn_device_info info;
    clattn_context *ctx = bench_open_timed(device, c->gemm, &info);
    if (!ctx) {
        run->failed = 1;
        return;
    }
    bench_print_header(&info);
    for (size_t i = 0; i < num_shapes(c); i++) {
        size_t shape[7] = {0}; /* every size has a list or follows one: see shape_at */
        shape_inputs s;
        shape_at(c, i, shape);
        if (shape_setup(ctx, shape, c->dtype, c->layout, &s) != 0) {
            run->failed = 1;
            continue;
        }
        bench_pattern own[BENCH_MAX_PATTERNS];
        size_t count = 0;
        const bench_pattern *patterns = shape_patterns(c, shape, own, &count);
        for (size_t p = 0; p < count; p++) bench_pattern_paths(run, ctx, device, &s, &patterns[p]);
        shape_free(&s);
    }
    clattn_context_destroy(ctx);
}

/* ---------------------------------------------------------------- outputs */

/* Stages `text` as `path` in the set and frees it. @return 0 or 1 (said). */
static int stage_text(output_set *set, const char *path, textbuf *text) {
    int rc = output_set_text(set, path, text);
    textbuf_free(text);
    return rc;
}

/* The table as CSV and JSON, each when its path is given. @return 0 or 1 (said). */
static int stage_tables(const sweep_run *run, output_set *set, const char *csv, const char *json) {
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
 * plot's data, plot.gp and plot.png: ms against Nq, or against density for the sparse
 * preset), committed together. @return 0 or 1 (said). */
static int write_outputs(const sweep_run *run, const char *csv, const char *json, const char *dir,
                         const char *title) {
    char dir_csv[OUTPUT_PATH_MAX], dir_json[OUTPUT_PATH_MAX];
    output_set set;
    output_set_init(&set, "bench");
    int rc = stage_tables(run, &set, csv, json), plot_rc = 0;
    if (dir) {
        snprintf(dir_csv, sizeof dir_csv, "%s/bench.csv", dir);
        snprintf(dir_json, sizeof dir_json, "%s/bench.json", dir);
        rc |= stage_tables(run, &set, dir_csv, dir_json);
        if (!rc)
            plot_rc = bench_plot(run->records, run->num_records, dir, title,
                                 run->config->density_curve, &set);
    }
    rc |= output_set_commit(&set);
    if (dir && !rc)
        printf("wrote %s and %s%s\n", dir_csv, dir_json,
               plot_rc ? "" : ", with the plot (plot.gp, plot.png)");
    return rc || plot_rc;
}

int bench_sweep(const bench_config *c) {
    static bench_record records[MAX_RECORDS];
    sweep_run run = {c, records, 0, 0, 0, 0};
    run.total = bench_sweep_measurements(c);
    for (size_t i = 0; i < c->num_devices; i++) bench_device(&run, c->devices[i]);
    if (run.num_records == 0) { /* the failures, if any, have been named */
        if (!run.failed) cli_error("bench", "nothing was measured");
        return 1;
    }
    if (c->density_curve) bench_print_curve(run.records, run.num_records);
    int rc = write_outputs(&run, c->csv, c->json, c->out, c->title);
    return rc || run.failed ? 1 : 0;
}
