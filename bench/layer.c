/*
 * clattn bench --preset layer: a whole multi-head attention layer (clattn_mha_forward) of a
 * model's shape, d_model = Hq*D, timed end to end and in its three phases (clattn_mha_stats,
 * with the context timing: each phase is waited for), for each Nq, pattern and number of kept
 * heads (the first K query heads; the rest pruned), so that a user sees where the time goes.
 * Weights are seeded uniform in [-1/sqrt(in), 1/sqrt(in)] (nn.Linear's initialisation), X in
 * [-1, 1]; X and Y float32, the weights in --dtype. With --nk the layer is cross-attention: X_kv
 * [B, Nk, d_model] as well (the first Nk).
 *
 * FLOP/s: projections 2*M*d_model*(kept*Dqk + kv*(Dqk+Dv)) and output 2*M*kept*Dv*d_model with
 * M = B*Nq (the layer's own counts), attention 2*pairs*(Dqk+Dv) over the kept heads' allowed
 * pairs (the pattern's pairs * kept/Hq: exact for patterns shared by the heads).
 *
 * After each record the device's float32 FMA peak is measured (clattn_context_fma_peak), and
 * the GEMMs' FLOP/s (projections and output together) are reported as a share of it, next to
 * the GEMM row that ran them (clattn_mha_stats.gemm_kernel; $CLATTN_GEMM chooses the row).
 */
#include "common.h"
#include "message.h"
#include "sweeps.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct layer_record {
    size_t device;
    clattn_dtype wtype;
    size_t b, d_model, hq, hkv, d, nq, nk, kept, attention_kv; /* nk: = nq for self-attention */
    int cross;                                                 /* X_kv given (--nk) */
    int duplicated;
    char pattern[96];
    double ms_min, ms_median;        /* the whole call, waited for */
    double proj_ms, attn_ms, out_ms; /* medians of the phases */
    double proj_flops, attn_flops, out_flops;
    double peak_gflops; /* the device's FMA peak, measured right after the record */
    char kernel[96];
    char gemm[96]; /* the GEMM row and kernel of the projections and the output */
} layer_record;

static const char *dtype_text(clattn_dtype t) {
    return t == CLATTN_F16 ? "f16" : t == CLATTN_BF16 ? "bf16" : "f32";
}

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, size_t n) {
    qsort(v, n, sizeof *v, compare_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double gflops(double flops, double ms) {
    return ms > 0 ? flops / (ms * 1e6) : 0;
}

/* n values uniform in [-scale, scale] stored as dtype (seeded); NULL when out of memory. */
static void *random_values(size_t n, double scale, clattn_dtype dtype, uint64_t seed) {
    size_t elem = dtype == CLATTN_F32 ? 4 : 2;
    float *x = malloc(n * sizeof *x + 1);
    void *out = malloc(n * elem + 1);
    for (size_t i = 0; x && i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)(((double)(seed >> 40) / (double)(1ull << 24) * 2.0 - 1.0) * scale);
    }
    if (x && out) clattn_convert(CLATTN_F32, x, dtype, out, n);
    free(x);
    if (!x) free(out);
    return x ? out : NULL;
}

/* The layer of the record's shape with its first `kept` heads kept. */
static clattn_status make_layer(clattn_context *ctx, layer_record *r, clattn_mha **mha) {
    clattn_mha_desc d;
    size_t hd = r->hq * r->d, kvd = r->hkv * r->d;
    clattn_mha_desc_init(&d, r->d_model, r->hq, r->hkv, r->d, r->d);
    d.weight_dtype = r->wtype;
    void *w[4] = {random_values(hd * r->d_model, 1 / sqrt((double)r->d_model), r->wtype, 11),
                  random_values(kvd * r->d_model, 1 / sqrt((double)r->d_model), r->wtype, 12),
                  random_values(kvd * r->d_model, 1 / sqrt((double)r->d_model), r->wtype, 13),
                  random_values(r->d_model * hd, 1 / sqrt((double)hd), r->wtype, 14)};
    uint8_t *keep = calloc(r->hq, 1);
    for (size_t h = 0; keep && h < r->kept; h++) keep[h] = 1;
    d.w_q.host = w[0], d.w_k.host = w[1], d.w_v.host = w[2], d.w_o.host = w[3];
    d.head_mask = keep;
    clattn_status s = w[0] && w[1] && w[2] && w[3] && keep ? clattn_mha_create(ctx, &d, mha)
                                                           : CLATTN_ERR_OUT_OF_MEMORY;
    clattn_mha_info info;
    clattn_mha_info_init(&info);
    if (!s && clattn_mha_get_info(*mha, &info) == CLATTN_SUCCESS)
        r->attention_kv = info.attention_heads_kv, r->duplicated = info.kv_duplicated;
    for (int i = 0; i < 4; i++) free(w[i]);
    free(keep);
    return s;
}

/* What one timed call of the layer took. */
typedef struct layer_sample {
    double wall, proj, attn, out;
} layer_sample;

/* One call, waited for, and its phases. */
static clattn_status run_once(clattn_context *ctx, clattn_mha *mha,
                              const clattn_attention_desc *call, cl_mem x, cl_mem x_kv, cl_mem y,
                              layer_sample *t, clattn_mha_stats *stats) {
    double t0 = seconds_now();
    clattn_status s = clattn_mha_forward(mha, call, x, x_kv, y, NULL);
    clFinish(clattn_context_queue(ctx));
    t->wall = (seconds_now() - t0) * 1e3;
    if (!s) s = clattn_mha_last_stats(mha, stats);
    t->proj = stats->projection_ms, t->attn = stats->attention_ms, t->out = stats->output_ms;
    return s;
}

/* Warm-up, then the timed repeats of one record's layer and call. */
static clattn_status measure(clattn_context *ctx, const layer_bench_config *c, clattn_mha *mha,
                             const clattn_attention_desc *call, layer_record *r) {
    size_t rows = r->b * r->nq * r->d_model, repeat = c->repeat < 64 ? c->repeat : 64;
    cl_int err = CL_SUCCESS;
    void *host = random_values(rows, 1.0, CLATTN_F32, 15);
    cl_mem x = host ? clCreateBuffer(clattn_context_cl_context(ctx), CL_MEM_COPY_HOST_PTR, rows * 4,
                                     host, &err)
                    : NULL;
    cl_mem y = err == CL_SUCCESS ? clCreateBuffer(clattn_context_cl_context(ctx), CL_MEM_READ_WRITE,
                                                  rows * 4, NULL, &err)
                                 : NULL;
    free(host);
    size_t kv_rows = r->b * r->nk * r->d_model;
    host = r->cross && err == CL_SUCCESS ? random_values(kv_rows, 1.0, CLATTN_F32, 16) : NULL;
    cl_mem x_kv = host ? clCreateBuffer(clattn_context_cl_context(ctx), CL_MEM_COPY_HOST_PTR,
                                        kv_rows * 4, host, &err)
                       : NULL;
    free(host);
    clattn_status s = x && y && (x_kv || !r->cross) && err == CL_SUCCESS ? CLATTN_SUCCESS
                                                                         : CLATTN_ERR_OUT_OF_MEMORY;
    layer_sample t[64], ignored;
    clattn_mha_stats stats;
    clattn_mha_stats_init(&stats);
    for (size_t i = 0; !s && i < c->warmup; i++)
        s = run_once(ctx, mha, call, x, x_kv, y, &ignored, &stats);
    for (size_t i = 0; !s && i < repeat; i++)
        s = run_once(ctx, mha, call, x, x_kv, y, &t[i], &stats);
    if (!s) {
        double wall[64], proj[64], attn[64], out[64];
        for (size_t i = 0; i < repeat; i++)
            wall[i] = t[i].wall, proj[i] = t[i].proj, attn[i] = t[i].attn, out[i] = t[i].out;
        r->ms_median = median(wall, repeat), r->ms_min = wall[0]; /* sorted by median() */
        r->proj_ms = median(proj, repeat), r->attn_ms = median(attn, repeat);
        r->out_ms = median(out, repeat);
        r->proj_flops = (double)stats.projection_flops, r->out_flops = (double)stats.output_flops;
        snprintf(r->kernel, sizeof r->kernel, "%s", stats.kernel);
        snprintf(r->gemm, sizeof r->gemm, "%s", stats.gemm_kernel);
    }
    if (x) clReleaseMemObject(x);
    if (x_kv) clReleaseMemObject(x_kv);
    if (y) clReleaseMemObject(y);
    return s;
}

/* One record: the layer with `kept` heads, the call with the pattern, measured. */
static clattn_status measure_record(clattn_context *ctx, const layer_bench_config *c,
                                    const bench_pattern *p, layer_record *r) {
    clattn_mha *mha = NULL;
    clattn_attention_desc call;
    pattern_data pd = {0};
    uint64_t pairs = 0;
    clattn_attention_desc_init(&call, CLATTN_LAYOUT_BSHD, r->b, r->hq, r->hkv, r->nq, r->nk, r->d,
                               r->d);
    call.path = c->path, call.variant = c->variant;
    if (bench_apply_pattern(p, &call, &pd) != 0) return CLATTN_ERR_INVALID_ARGUMENT;
    clattn_status s = make_layer(ctx, r, &mha);
    if (!s) s = measure(ctx, c, mha, &call, r);
    if (!s) s = clattn_context_fma_peak(ctx, &r->peak_gflops);
    if (!s && clattn_attention_pairs(&call, &pairs) == CLATTN_SUCCESS)
        r->attn_flops = 2.0 * (double)pairs * (double)r->kept / (double)r->hq * 2.0 * (double)r->d;
    clattn_mha_destroy(mha);
    bench_pattern_data_free(&pd);
    return s;
}

/* ---------------------------------------------------------------- outputs */

/* The GEMMs' FLOP/s (projections and output together) as a percentage of the FMA peak. */
static double gemm_share(const layer_record *r) {
    double gf = gflops(r->proj_flops + r->out_flops, r->proj_ms + r->out_ms);
    return r->peak_gflops > 0 ? 100.0 * gf / r->peak_gflops : 0;
}

static void print_header(const clattn_device_info *info) {
    printf("\ndevice %zu: %s (%s, driver %s)\n", info->index, info->name, info->platform_name,
           info->driver_version);
    printf("%-4s %2s %7s %3s %3s %4s %6s %6s %4s %5s %-12s %9s %9s | %9s %7s | %9s %7s | %9s "
           "%7s | %7s %6s | %s; %s\n",
           "w", "B", "d_model", "Hq", "Hkv", "D", "Nq", "Nk", "kept", "kv", "pattern", "ms min",
           "ms med", "proj ms", "GFLOP/s", "attn ms", "GFLOP/s", "out ms", "GFLOP/s", "FMA pk",
           "GEMM%", "attention kernel", "GEMM");
    fflush(stdout);
}

static void print_record(const layer_record *r) {
    printf("%-4s %2zu %7zu %3zu %3zu %4zu %6zu %5zu%s %4zu %4zu%s %-12.12s %9.1f %9.1f | %9.1f "
           "%7.1f | %9.1f %7.1f | %9.1f %7.1f | %7.1f %5.1f%% | %s; %s\n",
           dtype_text(r->wtype), r->b, r->d_model, r->hq, r->hkv, r->d, r->nq, r->nk,
           r->cross ? "x" : " ", r->kept, r->attention_kv, r->duplicated ? "*" : " ", r->pattern,
           r->ms_min, r->ms_median, r->proj_ms, gflops(r->proj_flops, r->proj_ms), r->attn_ms,
           gflops(r->attn_flops, r->attn_ms), r->out_ms, gflops(r->out_flops, r->out_ms),
           r->peak_gflops, gemm_share(r), r->kernel, r->gemm);
    fflush(stdout);
}

static void layer_csv(textbuf *t, const layer_record *r, size_t n) {
    textbuf_printf(
        t, "device,wtype,b,d_model,hq,hkv,d,nq,nk,cross,kept,attention_hkv,duplicated,pattern,"
           "ms_min,ms_median,projection_ms,attention_ms,output_ms,projection_gflops,"
           "attention_gflops,output_gflops,fma_peak_gflops,gemm_percent_of_peak,kernel,"
           "gemm\n");
    for (size_t i = 0; i < n; i++, r++)
        textbuf_printf(
            t,
            "%zu,%s,%zu,%zu,%zu,%zu,%zu,%zu,%zu,%d,%zu,%zu,%d,\"%s\",%.3f,%.3f,%.3f,%.3f,%.3f,"
            "%.2f,%.2f,%.2f,%.2f,%.2f,\"%s\",\"%s\"\n",
            r->device, dtype_text(r->wtype), r->b, r->d_model, r->hq, r->hkv, r->d, r->nq, r->nk,
            r->cross, r->kept, r->attention_kv, r->duplicated, r->pattern, r->ms_min, r->ms_median,
            r->proj_ms, r->attn_ms, r->out_ms, gflops(r->proj_flops, r->proj_ms),
            gflops(r->attn_flops, r->attn_ms), gflops(r->out_flops, r->out_ms), r->peak_gflops,
            gemm_share(r), r->kernel, r->gemm);
}

static void layer_json(textbuf *t, const layer_record *r, size_t n, const layer_bench_config *c) {
    bench_json_begin(t, "layer", c->devices, c->num_devices);
    for (size_t i = 0; i < n; i++, r++) {
        textbuf_printf(t,
                       "    {\"device\": %zu, \"wtype\": \"%s\", \"b\": %zu, \"d_model\": %zu, "
                       "\"hq\": %zu, \"hkv\": %zu, \"d\": %zu, \"nq\": %zu, \"nk\": %zu, "
                       "\"cross\": %d, \"kept\": %zu, "
                       "\"attention_hkv\": %zu, \"duplicated\": %d, \"pattern\": ",
                       r->device, dtype_text(r->wtype), r->b, r->d_model, r->hq, r->hkv, r->d,
                       r->nq, r->nk, r->cross, r->kept, r->attention_kv, r->duplicated);
        textbuf_json_string(t, r->pattern);
        textbuf_printf(t,
                       ", \"ms_min\": %.3f, \"ms_median\": %.3f, \"projection_ms\": %.3f, "
                       "\"attention_ms\": %.3f, \"output_ms\": %.3f, \"projection_flops\": %.0f, "
                       "\"attention_flops\": %.0f, \"output_flops\": %.0f, \"fma_peak_gflops\": "
                       "%.2f, \"gemm_percent_of_peak\": %.2f, \"kernel\": ",
                       r->ms_min, r->ms_median, r->proj_ms, r->attn_ms, r->out_ms, r->proj_flops,
                       r->attn_flops, r->out_flops, r->peak_gflops, gemm_share(r));
        textbuf_json_string(t, r->kernel);
        textbuf_printf(t, ", \"gemm\": ");
        textbuf_json_string(t, r->gemm);
        textbuf_printf(t, "}%s\n", i + 1 < n ? "," : "");
    }
    bench_json_end(t);
}

static int write_layer_outputs(const layer_bench_config *c, const layer_record *r, size_t n) {
    textbuf csv = {0}, json = {0};
    layer_csv(&csv, r, n);
    layer_json(&json, r, n, c);
    return bench_write_tables(c->csv, c->json, c->out, "layer", &csv, &json);
}

/* ---------------------------------------------------------------- the sweep */

/* Every Nq, pattern and kept count on one device. @return the records added, or -1 after a
 * failure it named. */
static int layer_device(const layer_bench_config *c, size_t device, layer_record *out,
                        size_t room) {
    clattn_device_info info;
    clattn_context *ctx = bench_open_timed(device, c->gemm, &info);
    if (!ctx) return -1;
    print_header(&info);
    size_t n = 0;
    clattn_status s = CLATTN_SUCCESS;
    for (size_t q = 0; !s && q < c->num_nq; q++)
        for (size_t p = 0; !s && p < c->num_patterns; p++)
            for (size_t k = 0; !s && k < c->num_kept && n < room; k++) {
                layer_record *r = &out[n];
                memset(r, 0, sizeof *r);
                r->device = device, r->wtype = c->wtype, r->b = c->batch, r->hq = c->hq;
                r->hkv = c->hkv, r->d = c->d, r->d_model = c->hq * c->d, r->nq = c->nq[q];
                r->nk = c->nk ? c->nk : c->nq[q], r->cross = c->nk != 0;
                r->kept = c->kept[k];
                snprintf(r->pattern, sizeof r->pattern, "%s", c->patterns[p].text);
                if (!(s = measure_record(ctx, c, &c->patterns[p], r))) print_record(&out[n++]);
            }
    if (s) cli_report("bench", "layer", s, ctx);
    clattn_context_destroy(ctx);
    return s ? -1 : (int)n;
}

int bench_layer(const layer_bench_config *c) {
    static layer_record records[1024];
    size_t n = 0;
    int failed = 0;
    for (size_t k = 0; k < c->num_kept; k++) /* the program checks --kept first, as usage */
        if (c->kept[k] > c->hq) {
            cli_error("bench", "--kept %zu: more than the %zu query heads", c->kept[k], c->hq);
            return 1;
        }
    for (size_t i = 0; i < c->num_devices; i++) {
        int added = layer_device(c, c->devices[i], records + n, 1024 - n);
        if (added < 0)
            failed = 1;
        else
            n += (size_t)added;
    }
    printf(
        "kv: the attention's kv heads (* duplicated per kept query head); Nk x: "
        "cross-attention over X_kv of Nk rows; ms: the whole call; the phases are waited for one "
        "by one; FMA pk: the device's float32 FMA peak in GFLOP/s measured after the record; "
        "GEMM%%: the projections' and output's FLOP/s as a share of it\n");
    if (n == 0) return 1;
    return write_layer_outputs(c, records, n) || failed ? 1 : 0;
}
