/* clattn bench's outputs of the attention sweep: the human table, CSV and JSON, each record
 * with its speed-up over full attention where the run has that (curve.c); the plots are
 * plot.c's (see sweeps.h). */
#include "sweeps.h"

#include <stdio.h>
#include <string.h>

const char *bench_path_name(bench_path path) {
    static const char *const names[] = {"fused", "gemm", "host", "reference"};
    return names[path];
}

static const char *variant_name(const bench_record *r) {
    if (r->path != BENCH_FUSED) return "-";
    return clattn_variant_name(r->variant);
}

const char *bench_layout_name(clattn_layout layout) {
    return layout == CLATTN_LAYOUT_BHSD ? "bhsd" : "bshd";
}

static const char *dtype_name(clattn_dtype dtype) {
    return dtype == CLATTN_F16 ? "f16" : dtype == CLATTN_BF16 ? "bf16" : "f32";
}

double bench_gflops(const bench_record *r) {
    return r->ms_median > 0
               ? 2.0 * (double)r->pairs * (double)(r->dqk + r->dv) / (r->ms_median * 1e6)
               : 0;
}

double bench_gbytes_s(const bench_record *r) {
    double in = r->dtype == CLATTN_F32 ? 4 : 2;
    double bytes =
        in * (double)r->b *
            ((double)r->hq * r->nq * r->dqk + (double)r->hkv * r->nk * (r->dqk + r->dv)) +
        in * (double)r->b * r->hq * r->nq * r->dv;
    return r->ms_median > 0 ? bytes / (r->ms_median * 1e6) : 0;
}

void bench_print_header(const clattn_device_info *d) {
    printf("\ndevice %zu: %s (%s, driver %s)\n", d->index, d->name, d->platform_name,
           d->driver_version);
    printf("%-6s %-3s %-3s %3s %4s %4s %6s %6s %4s %4s %-22s %8s %7s %9s %9s %9s %8s %7s %8s\n",
           "path", "var", "dt", "B", "Hq", "Hkv", "Nq", "Nk", "Dqk", "Dv", "pattern", "density",
           "tiles", "ms min", "ms med", "kern med", "GFLOP/s", "GB/s", "dev MiB");
    fflush(stdout);
}

/* density: allowed pairs of the full matrix; tiles: key tiles the fused kernel visited, of a
 * dense walk's ("-" for other paths) */
void bench_print_record(const bench_record *r) {
    char tiles[16] = "-", kernel[16] = "-";
    if (r->tiles_total)
        snprintf(tiles, sizeof tiles, "%.4f", (double)r->tiles_visited / (double)r->tiles_total);
    if (r->kernel_median > 0) snprintf(kernel, sizeof kernel, "%.2f", r->kernel_median);
    printf("%-6s %-3s %-3s %3zu %4zu %4zu %6zu %6zu %4zu %4zu %-22.22s %8.4f %7s %9.2f %9.2f "
           "%9s %8.1f %7.2f %8.1f%s%s\n",
           bench_path_name(r->path), variant_name(r), dtype_name(r->dtype), r->b, r->hq, r->hkv,
           r->nq, r->nk, r->dqk, r->dv, r->pattern, bench_density(r), tiles, r->ms_min,
           r->ms_median, kernel, bench_gflops(r), bench_gbytes_s(r),
           (double)r->device_bytes / (1 << 20), r->path == BENCH_GEMM ? "  " : "",
           r->path == BENCH_GEMM ? r->kernel : ""); /* the gemm path: which GEMM row ran */
    fflush(stdout);
}

/* A CSV field, quoted when it holds a comma or a quote. */
static void csv_field(textbuf *t, const char *s) {
    if (!strpbrk(s, ",\"")) {
        textbuf_printf(t, "%s", s);
        return;
    }
    textbuf_printf(t, "\"");
    for (; *s; s++) textbuf_printf(t, *s == '"' ? "\"\"" : "%c", *s);
    textbuf_printf(t, "\"");
}

/* ",speedup,ideal,fraction" against full attention, or ",,," when the run has no full record */
static void csv_curve(textbuf *t, const bench_record *records, size_t count, size_t i) {
    curve_figures f;
    if (bench_curve_figures(records, count, i, &f))
        textbuf_printf(t, ",%.4f,%.4f,%.4f", f.speedup, f.ideal, f.fraction);
    else
        textbuf_printf(t, ",,,");
}

void bench_csv(textbuf *t, const bench_record *records, size_t count) {
    textbuf_printf(t, "device,path,variant,dtype,layout,b,hq,hkv,nq,nk,dqk,dv,pattern,pairs,ms_min,"
                      "ms_median,gflops,gbytes_s,device_bytes,kernel,speedup_over_full,"
                      "ideal_speedup,fraction_of_ideal\n");
    for (size_t i = 0; i < count; i++) {
        const bench_record *r = &records[i];
        clattn_device_info d;
        clattn_device_info_init(&d);
        if (clattn_device_get_info(r->device, &d) != CLATTN_SUCCESS) d.name[0] = '\0';
        csv_field(t, d.name);
        textbuf_printf(t, ",%s,%s,%s,%s,%zu,%zu,%zu,%zu,%zu,%zu,%zu,", bench_path_name(r->path),
                       variant_name(r), dtype_name(r->dtype), bench_layout_name(r->layout), r->b,
                       r->hq, r->hkv, r->nq, r->nk, r->dqk, r->dv);
        csv_field(t, r->pattern);
        textbuf_printf(t, ",%llu,%.4f,%.4f,%.3f,%.3f,%llu,", (unsigned long long)r->pairs,
                       r->ms_min, r->ms_median, bench_gflops(r), bench_gbytes_s(r),
                       (unsigned long long)r->device_bytes);
        csv_field(t, r->kernel);
        csv_curve(t, records, count, i);
        textbuf_printf(t, "\n");
    }
}

/* ", \"speedup_over_full\": ..., \"ideal_speedup\": ..., \"fraction_of_ideal\": ..." (null
 * when the run has no full record) */
static void json_curve(textbuf *t, const bench_record *records, size_t count, size_t i) {
    curve_figures f;
    if (bench_curve_figures(records, count, i, &f))
        textbuf_printf(t,
                       ", \"speedup_over_full\": %.4f, \"ideal_speedup\": %.4f, "
                       "\"fraction_of_ideal\": %.4f",
                       f.speedup, f.ideal, f.fraction);
    else
        textbuf_printf(t, ", \"speedup_over_full\": null, \"ideal_speedup\": null, "
                          "\"fraction_of_ideal\": null");
}

static void json_record(textbuf *t, const bench_record *records, size_t count, size_t i) {
    const bench_record *r = &records[i];
    textbuf_printf(t,
                   "    {\"device\": %zu, \"path\": \"%s\", \"variant\": \"%s\", \"dtype\": "
                   "\"%s\", \"layout\": \"%s\", \"b\": %zu, \"hq\": %zu, \"hkv\": %zu, "
                   "\"nq\": %zu, \"nk\": %zu, \"dqk\": %zu, \"dv\": %zu, \"pattern\": ",
                   r->device, bench_path_name(r->path), variant_name(r), dtype_name(r->dtype),
                   bench_layout_name(r->layout), r->b, r->hq, r->hkv, r->nq, r->nk, r->dqk, r->dv);
    textbuf_json_string(t, r->pattern);
    textbuf_printf(t,
                   ", \"pairs\": %llu, \"ms_min\": %.4f, \"ms_median\": %.4f, "
                   "\"kernel_ms_min\": %.4f, \"kernel_ms_median\": %.4f, \"build_ms\": %.1f, "
                   "\"gflops\": %.3f, "
                   "\"gbytes_s\": %.3f, \"device_bytes\": %llu, \"tiles_visited\": %llu, "
                   "\"tiles_total\": %llu, \"kernel\": ",
                   (unsigned long long)r->pairs, r->ms_min, r->ms_median, r->kernel_min,
                   r->kernel_median, r->build_ms, bench_gflops(r), bench_gbytes_s(r),
                   (unsigned long long)r->device_bytes, (unsigned long long)r->tiles_visited,
                   (unsigned long long)r->tiles_total);
    textbuf_json_string(t, r->kernel);
    json_curve(t, records, count, i);
    textbuf_printf(t, "}");
}

void bench_json(textbuf *t, const bench_record *records, size_t count, const size_t *devices,
                size_t num_devices) {
    textbuf_printf(t, "{\n  \"clattn\": \"%s\",\n  \"devices\": [\n", clattn_version());
    for (size_t i = 0; i < num_devices; i++) {
        textbuf_printf(t, "    ");
        textbuf_json_device(t, devices[i]);
        textbuf_printf(t, "%s\n", i + 1 < num_devices ? "," : "");
    }
    textbuf_printf(t, "  ],\n  \"records\": [\n");
    for (size_t i = 0; i < count; i++) {
        json_record(t, records, count, i);
        textbuf_printf(t, "%s\n", i + 1 < count ? "," : "");
    }
    bench_json_end(t);
}

void bench_json_begin(textbuf *t, const char *preset, const size_t *devices, size_t num_devices) {
    textbuf_printf(t, "{\n  \"preset\": \"%s\",\n  \"devices\": [", preset);
    for (size_t i = 0; i < num_devices; i++) {
        textbuf_printf(t, i ? ", " : "");
        textbuf_json_device(t, devices[i]);
    }
    textbuf_printf(t, "],\n  \"records\": [\n");
}

void bench_json_end(textbuf *t) {
    textbuf_printf(t, "  ]\n}\n");
}

int bench_write_tables(const char *csv, const char *json, const char *dir, const char *name,
                       textbuf *csv_text, textbuf *json_text) {
    char dir_csv[OUTPUT_PATH_MAX], dir_json[OUTPUT_PATH_MAX];
    output_set set; /* committed together */
    output_set_init(&set, "bench");
    int rc = 0;
    if (csv) rc |= output_set_text(&set, csv, csv_text);
    if (json) rc |= output_set_text(&set, json, json_text);
    if (dir) {
        snprintf(dir_csv, sizeof dir_csv, "%s/%s.csv", dir, name);
        snprintf(dir_json, sizeof dir_json, "%s/%s.json", dir, name);
        rc |= output_set_text(&set, dir_csv, csv_text);
        rc |= output_set_text(&set, dir_json, json_text);
    }
    rc |= output_set_commit(&set);
    textbuf_free(csv_text);
    textbuf_free(json_text);
    if (!rc && dir) printf("wrote %s and %s\n", dir_csv, dir_json);
    return rc;
}

/* See sweeps.h. */
void bench_print_curve(const bench_record *records, size_t count) {
    size_t shown = 0;
    curve_figures f;
    for (size_t i = 0; i < count; i++) {
        if (!bench_curve_figures(records, count, i, &f)) continue;
        if (shown++ == 0)
            printf("\nagainst full attention (same device, path, variant, dtype, layout, shape):\n"
                   "%-6s %-24s %6s %8s %9s %9s %9s %8s\n",
                   "path", "pattern", "Nq", "density", "ms med", "speedup", "ideal", "fraction");
        printf("%-6s %-24.24s %6zu %8.4f %9.2f %8.2fx %8.2fx %8.3f\n",
               bench_path_name(records[i].path), records[i].pattern, records[i].nq, f.density,
               records[i].ms_median, f.speedup, f.ideal, f.fraction);
    }
    if (!shown)
        printf("\nno full-attention record of the same device, path, variant, dtype, layout and "
               "shape: no speed-ups to show (add full to --pattern)\n");
    fflush(stdout);
}
