/* clattn bench's outputs: the human table, CSV, JSON and gnuplot plots (see sweeps.h). */
#include "sweeps.h"

#include "interrupt.h"
#include "message.h"
#include "outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

const char *bench_path_name(bench_path path) {
    static const char *const names[] = {"fused", "gemm", "host", "reference"};
    return names[path];
}

static const char *variant_name(const bench_record *r) {
    if (r->path != BENCH_FUSED) return "-";
    return clattn_variant_name(r->variant);
}

static const char *layout_name(clattn_layout layout) {
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
    double full = (double)r->b * r->hq * r->nq * r->nk;
    char tiles[16] = "-", kernel[16] = "-";
    if (r->tiles_total)
        snprintf(tiles, sizeof tiles, "%.4f", (double)r->tiles_visited / (double)r->tiles_total);
    if (r->kernel_median > 0) snprintf(kernel, sizeof kernel, "%.2f", r->kernel_median);
    printf("%-6s %-3s %-3s %3zu %4zu %4zu %6zu %6zu %4zu %4zu %-22.22s %8.4f %7s %9.2f %9.2f "
           "%9s %8.1f %7.2f %8.1f%s%s\n",
           bench_path_name(r->path), variant_name(r), dtype_name(r->dtype), r->b, r->hq, r->hkv,
           r->nq, r->nk, r->dqk, r->dv, r->pattern, full > 0 ? (double)r->pairs / full : 0, tiles,
           r->ms_min, r->ms_median, kernel, bench_gflops(r), bench_gbytes_s(r),
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

void bench_csv(textbuf *t, const bench_record *records, size_t count) {
    textbuf_printf(t, "device,path,variant,dtype,layout,b,hq,hkv,nq,nk,dqk,dv,pattern,pairs,ms_min,"
                      "ms_median,gflops,gbytes_s,device_bytes,kernel\n");
    for (size_t i = 0; i < count; i++) {
        const bench_record *r = &records[i];
        clattn_device_info d;
        clattn_device_info_init(&d);
        if (clattn_device_get_info(r->device, &d) != CLATTN_SUCCESS) d.name[0] = '\0';
        csv_field(t, d.name);
        textbuf_printf(t, ",%s,%s,%s,%s,%zu,%zu,%zu,%zu,%zu,%zu,%zu,", bench_path_name(r->path),
                       variant_name(r), dtype_name(r->dtype), layout_name(r->layout), r->b, r->hq,
                       r->hkv, r->nq, r->nk, r->dqk, r->dv);
        csv_field(t, r->pattern);
        textbuf_printf(t, ",%llu,%.4f,%.4f,%.3f,%.3f,%llu,", (unsigned long long)r->pairs,
                       r->ms_min, r->ms_median, bench_gflops(r), bench_gbytes_s(r),
                       (unsigned long long)r->device_bytes);
        csv_field(t, r->kernel);
        textbuf_printf(t, "\n");
    }
}

static void json_record(textbuf *t, const bench_record *r) {
    textbuf_printf(t,
                   "    {\"device\": %zu, \"path\": \"%s\", \"variant\": \"%s\", \"dtype\": "
                   "\"%s\", \"layout\": \"%s\", \"b\": %zu, \"hq\": %zu, \"hkv\": %zu, "
                   "\"nq\": %zu, \"nk\": %zu, \"dqk\": %zu, \"dv\": %zu, \"pattern\": ",
                   r->device, bench_path_name(r->path), variant_name(r), dtype_name(r->dtype),
                   layout_name(r->layout), r->b, r->hq, r->hkv, r->nq, r->nk, r->dqk, r->dv);
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
        json_record(t, &records[i]);
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
    char dir_csv[1024], dir_json[1024];
    if (dir) {
        snprintf(dir_csv, sizeof dir_csv, "%s/%s.csv", dir, name);
        snprintf(dir_json, sizeof dir_json, "%s/%s.json", dir, name);
        csv = dir_csv, json = dir_json;
    }
    output_set set; /* committed together */
    output_set_init(&set, "bench");
    int rc = 0;
    if (csv) rc |= output_set_text(&set, csv, csv_text);
    if (json) rc |= output_set_text(&set, json, json_text);
    rc |= output_set_commit(&set);
    textbuf_free(csv_text);
    textbuf_free(json_text);
    if (!rc && dir) printf("wrote %s and %s\n", csv, json);
    return rc;
}

/* ---------------------------------------------------------------- plots */

/* Numbers the series, (device, path, pattern), in order of first appearance: series[i] is
 * record i's. @return the number of series. */
static size_t number_series(const bench_record *r, size_t count, size_t *series) {
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        size_t j = 0;
        while (j < i && !(r[j].device == r[i].device && r[j].path == r[i].path &&
                          strcmp(r[j].pattern, r[i].pattern) == 0))
            j++;
        series[i] = j < i ? series[j] : n++;
    }
    return n;
}

/* Series k as gnuplot data: "nq ms_median" a line. */
static void series_data(const bench_record *r, size_t count, const size_t *series, size_t k,
                        textbuf *t) {
    for (size_t i = 0; i < count; i++)
        if (series[i] == k) textbuf_printf(t, "%zu %.4f\n", r[i].nq, r[i].ms_median);
}

/* The plot's gnuplot commands, drawing into `png`: the series read from DIR/series-K.dat
 * (plot.gp, for a reader), or given inline (what gnuplot itself is fed, before those files
 * are in place). */
static void plot_commands(const bench_record *r, size_t count, const size_t *series,
                          size_t num_series, const char *dir, const char *title, const char *png,
                          int inline_data, textbuf *t) {
    textbuf_printf(t,
                   "set terminal png size 1000,650\nset output '%s'\n"
                   "set title 'clattn bench: %s (median time per call)'\nset logscale xy\n"
                   "set xlabel 'sequence length (Nq = Nk)'\nset ylabel 'ms'\nset grid\n"
                   "set key left top\n",
                   png, title);
    size_t lengths = 0;
    textbuf_printf(t, "set xtics (");
    for (size_t i = 0; i < count; i++) { /* a tick at each length measured */
        size_t j = 0;
        while (j < i && r[j].nq != r[i].nq) j++;
        if (j == i) textbuf_printf(t, "%s%zu", lengths++ ? ", " : "", r[i].nq);
    }
    textbuf_printf(t, ")\n");
    if (lengths > 1) /* the x range is the lengths measured (a single one keeps the default) */
        textbuf_printf(t, "set autoscale xfix\nset offsets graph 0.04, graph 0.04, 0, 0\n");
    for (size_t k = 0; inline_data && k < num_series; k++) {
        textbuf_printf(t, "$series%zu << EOD\n", k);
        series_data(r, count, series, k, t);
        textbuf_printf(t, "EOD\n");
    }
    for (size_t k = 0, i = 0; k < num_series; k++) {
        while (series[i] != k) i++; /* the series' first record */
        textbuf_printf(t, k ? ", \\\n     " : "plot ");
        if (inline_data)
            textbuf_printf(t, "$series%zu", k);
        else
            textbuf_printf(t, "'%s/series-%zu.dat'", dir, k);
        textbuf_printf(t, " using 1:2 with linespoints title '%s %s'", bench_path_name(r[i].path),
                       r[i].pattern);
    }
    textbuf_printf(t, "\n");
}

/* Runs gnuplot on `commands` (its standard input), its output thrown away; a signal stops it
 * (interrupt_child). @return 0, or the errno or exit status that says it failed. */
static int run_gnuplot(const textbuf *commands) {
    if (commands->failed) return ENOMEM;
    int fds[2]; /* gnuplot's stdin: [0] read (dup2'ed to its stdin), [1] write */
    if (pipe(fds) != 0) return errno;
    fcntl(fds[0], F_SETFD, FD_CLOEXEC), fcntl(fds[1], F_SETFD, FD_CLOEXEC);
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE); /* ignored here, not in gnuplot */
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[0], STDIN_FILENO);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawnattr_init(&attr);
    posix_spawnattr_setsigmask(&attr, &none); /* not the section's blocked signals */
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    char *argv[] = {"gnuplot", NULL};
    pid_t pid = 0;
    interrupt_section section; /* the child is known to the handler from its start */
    interrupt_defer_begin(&section);
    int e = posix_spawnp(&pid, "gnuplot", &actions, &attr, argv, environ);
    if (e == 0) interrupt_child(pid);
    interrupt_defer_end(&section);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    close(fds[0]);
    for (size_t at = 0; e == 0 && at < commands->len;) {
        ssize_t n = write(fds[1], commands->data + at, commands->len - at);
        if (n < 0 && errno != EINTR) break; /* gnuplot left early: its status says why */
        if (n > 0) at += (size_t)n;
    }
    close(fds[1]);
    int status = 0;
    while (e == 0 && waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) e = errno;
    interrupt_child(0);
    if (e == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) e = -1;
    return e;
}

int bench_plot(const bench_record *records, size_t count, const char *dir, const char *title,
               output_set *set) {
    size_t *series = malloc((count ? count : 1) * sizeof *series);
    if (!series) return 1;
    size_t num_series = number_series(records, count, series);
    char path[1024], png[1024];
    int rc = 0;
    for (size_t k = 0; k < num_series && !rc; k++) {
        textbuf data = {0};
        series_data(records, count, series, k, &data);
        snprintf(path, sizeof path, "%s/series-%zu.dat", dir, k);
        rc = output_set_text(set, path, &data);
        textbuf_free(&data);
    }
    textbuf script = {0}, draw = {0};
    snprintf(png, sizeof png, "%s/plot.png", dir);
    plot_commands(records, count, series, num_series, dir, title, png, 0, &script);
    snprintf(path, sizeof path, "%s/plot.gp", dir);
    if (!rc && num_series) rc = output_set_text(set, path, &script);
    const char *drawn = !rc && num_series ? output_set_reserve(set, png) : NULL;
    if (drawn) plot_commands(records, count, series, num_series, dir, title, drawn, 1, &draw);
    int e = drawn ? run_gnuplot(&draw) : 0;
    if (drawn && e == 0) output_set_made(set);
    if (drawn && e != 0)
        cli_error("bench",
                  "gnuplot failed or is missing (apt-get install gnuplot-nox; %s): %s was not "
                  "drawn; run gnuplot %s to see why",
                  e > 0 ? strerror(e) : "it exited with an error", png, path);
    textbuf_free(&script), textbuf_free(&draw);
    free(series);
    return rc || (drawn && e != 0) || (num_series && !drawn);
}
