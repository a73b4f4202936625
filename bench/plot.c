/*
 * clattn bench's plots, drawn by gnuplot: the median time of each call against Nq, one series
 * a (device, path, pattern); or, for the sparse preset, against density, one series a pattern
 * family (the name before the colon) with full attention's ideal line, time = full's time x
 * density. Each series is a data file, DIR/series-K.dat, that DIR/plot.gp reads; gnuplot draws
 * DIR/plot.png from the same data given inline, before anything is committed.
 */
#include "sweeps.h"

#include "interrupt.h"
#include "message.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* A plot: its settings and its series. */
typedef struct plot_series {
    textbuf data; /* "x y" a line */
    char title[160];
    const char *style; /* gnuplot's "with" */
} plot_series;

typedef struct plot_spec {
    textbuf settings; /* gnuplot's commands before "plot" (the terminal and output come first) */
    plot_series *series;
    size_t count, capacity;
} plot_spec;

static int plot_init(plot_spec *p, size_t capacity) {
    memset(p, 0, sizeof *p);
    p->series = calloc(capacity ? capacity : 1, sizeof *p->series);
    p->capacity = capacity;
    return p->series ? 0 : -1;
}

static void plot_free(plot_spec *p) {
    for (size_t k = 0; k < p->count; k++) textbuf_free(&p->series[k].data);
    free(p->series);
    textbuf_free(&p->settings);
}

/* A new series, empty. */
static plot_series *plot_add(plot_spec *p, const char *style) {
    plot_series *s = &p->series[p->count++];
    s->style = style;
    return s;
}

/* Text between gnuplot's single quotes, where '' stands for a quote. */
static void print_quoted(textbuf *t, const char *text) {
    textbuf_printf(t, "'");
    for (const char *c = text; *c; c++) textbuf_printf(t, *c == '\'' ? "''" : "%c", *c);
    textbuf_printf(t, "'");
}

/* The gnuplot commands, drawing into `png`: the series read from DIR/series-K.dat (plot.gp,
 * for a reader), or given inline (what gnuplot itself is fed, before those files are in
 * place). */
static void plot_commands(const plot_spec *p, const char *dir, const char *png, int inline_data,
                          textbuf *t) {
    textbuf_printf(t, "set terminal png size 1000,650\nset output ");
    print_quoted(t, png);
    textbuf_printf(t, "\n");
    if (p->settings.len) textbuf_printf(t, "%s", p->settings.data);
    for (size_t k = 0; inline_data && k < p->count; k++)
        textbuf_printf(t, "$series%zu << EOD\n%sEOD\n", k,
                       p->series[k].data.len ? p->series[k].data.data : "");
    for (size_t k = 0; k < p->count; k++) {
        textbuf_printf(t, k ? ", \\\n     " : "plot ");
        char data[OUTPUT_PATH_MAX];
        snprintf(data, sizeof data, "%s/series-%zu.dat", dir, k);
        if (inline_data)
            textbuf_printf(t, "$series%zu", k);
        else
            print_quoted(t, data);
        textbuf_printf(t, " using 1:2 with %s title ", p->series[k].style);
        print_quoted(t, p->series[k].title);
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
    if (e == 0) interrupt_child_add(pid);
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
    if (pid > 0) interrupt_child_remove(pid);
    if (e == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) e = -1;
    return e;
}

/* Stages the series' data and plot.gp into `set`, and has gnuplot draw plot.png. @return 0,
 * or 1 with a message when gnuplot is missing or fails (plot.png is then left out of the set)
 * or a file cannot be staged. */
static int draw_plot(const plot_spec *p, const char *dir, output_set *set) {
    char path[OUTPUT_PATH_MAX], png[OUTPUT_PATH_MAX];
    int rc = p->settings.failed;
    if (rc) cli_error("bench", "%s/plot.gp: out of memory while formatting", dir);
    for (size_t k = 0; k < p->count && !rc; k++) {
        snprintf(path, sizeof path, "%s/series-%zu.dat", dir, k);
        rc = output_set_text(set, path, &p->series[k].data);
    }
    textbuf script = {0}, draw = {0};
    snprintf(png, sizeof png, "%s/plot.png", dir);
    plot_commands(p, dir, png, 0, &script);
    snprintf(path, sizeof path, "%s/plot.gp", dir);
    if (!rc && p->count) rc = output_set_text(set, path, &script);
    const char *drawn = !rc && p->count ? output_set_reserve(set, png) : NULL;
    if (drawn) plot_commands(p, dir, drawn, 1, &draw);
    int e = drawn ? run_gnuplot(&draw) : 0;
    if (drawn && e == 0) output_set_made(set);
    if (drawn && e != 0 && strcmp(drawn, png) != 0) unlink(drawn); /* what gnuplot left */
    if (drawn && e != 0)
        cli_error("bench",
                  "gnuplot failed or is missing (apt-get install gnuplot-nox; %s): %s was not "
                  "drawn; run gnuplot %s to see why",
                  e > 0 ? strerror(e) : "it exited with an error", png, path);
    textbuf_free(&script), textbuf_free(&draw);
    return rc || (drawn && e != 0) || (p->count && !drawn);
}

/* ---------------------------------------------------------------- ms against Nq */

/* Numbers the series, (device, path, pattern), in order of first appearance: series[i] is
 * record i's. @return the number of series. */
static size_t number_nq_series(const bench_record *r, size_t count, size_t *series) {
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

/* The axes of the Nq plot: log-log, a tick at each length measured. */
static void nq_settings(const bench_record *r, size_t count, const char *title, textbuf *t) {
    textbuf_printf(t,
                   "set title 'clattn bench: %s (median time per call)'\nset logscale xy\n"
                   "set xlabel 'sequence length (Nq = Nk)'\nset ylabel 'ms'\nset grid\n"
                   "set key left top\n",
                   title);
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
}

/* ms against Nq: "nq ms_median" a line, a series a (device, path, pattern). */
static void nq_plot(const bench_record *r, size_t count, const size_t *series, size_t num_series,
                    const char *title, plot_spec *p) {
    nq_settings(r, count, title, &p->settings);
    for (size_t k = 0; k < num_series; k++) {
        plot_series *s = plot_add(p, "linespoints");
        for (size_t i = 0; i < count; i++)
            if (series[i] == k) {
                if (s->data.len == 0)
                    snprintf(s->title, sizeof s->title, "%s %s", bench_path_name(r[i].path),
                             r[i].pattern);
                textbuf_printf(&s->data, "%zu %.4f\n", r[i].nq, r[i].ms_median);
            }
    }
}

/* ---------------------------------------------------------------- ms against density */

/* The records' group: device, path and Nq (each group has its own full attention). */
static int same_group(const bench_record *a, const bench_record *b) {
    return a->device == b->device && a->path == b->path && a->nq == b->nq;
}

/* The pattern's family, its name before the colon: the length of that name. */
static size_t family_length(const char *pattern) {
    return strcspn(pattern, ":");
}

static int same_family(const bench_record *a, const bench_record *b) {
    size_t n = family_length(a->pattern);
    return n == family_length(b->pattern) && strncmp(a->pattern, b->pattern, n) == 0;
}

/* Numbers the series, (group, family), in order of first appearance; a record without pairs
 * (no point on a log axis) gets SIZE_MAX. @return the number of series. */
static size_t number_density_series(const bench_record *r, size_t count, size_t *series) {
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        size_t j = 0;
        while (j < i &&
               !(series[j] != SIZE_MAX && same_group(&r[j], &r[i]) && same_family(&r[j], &r[i])))
            j++;
        series[i] = bench_density(&r[i]) <= 0 ? SIZE_MAX : j < i ? series[j] : n++;
    }
    return n;
}

/* " (fused, device 0, N=16384)": what tells record i's group from others, or "" when there is
 * one group. */
static void group_label(const bench_record *r, size_t count, size_t i, char *out, size_t size) {
    int paths = 0, devices = 0, lengths = 0;
    for (size_t j = 0; j < count; j++) {
        paths |= r[j].path != r[i].path;
        devices |= r[j].device != r[i].device;
        lengths |= r[j].nq != r[i].nq;
    }
    char device[32], length[32];
    snprintf(device, sizeof device, "device %zu", r[i].device);
    snprintf(length, sizeof length, "N=%zu", r[i].nq);
    const char *parts[3] = {paths ? bench_path_name(r[i].path) : NULL, devices ? device : NULL,
                            lengths ? length : NULL};
    out[0] = '\0';
    for (int k = 0; k < 3; k++)
        if (parts[k])
            snprintf(out + strlen(out), size - strlen(out), "%s%s", out[0] ? ", " : " (", parts[k]);
    if (out[0]) snprintf(out + strlen(out), size - strlen(out), ")");
}

/* Series k's records in order of density: "density ms_median" a line. */
static void density_data(const bench_record *r, size_t count, const size_t *series, size_t k,
                         textbuf *t) {
    double last = 0; /* the points, lowest density first: each time the next one up */
    for (;;) {
        size_t next = SIZE_MAX;
        for (size_t i = 0; i < count; i++)
            if (series[i] == k && bench_density(&r[i]) > last &&
                (next == SIZE_MAX || bench_density(&r[i]) < bench_density(&r[next])))
                next = i;
        if (next == SIZE_MAX) return;
        last = bench_density(&r[next]);
        for (size_t i = 0; i < count; i++) /* equal densities: each of them */
            if (series[i] == k && bench_density(&r[i]) == last)
                textbuf_printf(t, "%.6g %.4f\n", last, r[i].ms_median);
    }
}

/* The ideal line of each full record that others are compared with: time = full's time x
 * density, from the lowest density compared down to 1. */
static void ideal_lines(const bench_record *r, size_t count, plot_spec *p) {
    double *lowest = malloc((count ? count : 1) * sizeof *lowest); /* [full record] */
    if (!lowest) {
        p->settings.failed = 1; /* said by draw_plot */
        return;
    }
    for (size_t j = 0; j < count; j++) lowest[j] = 1;
    for (size_t i = 0; i < count; i++) {
        long full = bench_full_record(r, count, i);
        if (full >= 0 && bench_density(&r[i]) > 0 && bench_density(&r[i]) < lowest[full])
            lowest[full] = bench_density(&r[i]);
    }
    for (size_t j = 0; j < count; j++) {
        if (lowest[j] >= 1) continue; /* not a full record, or nothing sparser measured */
        char group[96];
        group_label(r, count, j, group, sizeof group);
        plot_series *s = plot_add(p, "lines linecolor rgb 'gray40' dashtype 2 linewidth 3");
        snprintf(s->title, sizeof s->title, "ideal: full's ms x density%s", group);
        textbuf_printf(&s->data, "%.6g %.4f\n1 %.4f\n", lowest[j], r[j].ms_median * lowest[j],
                       r[j].ms_median);
    }
    free(lowest);
}

/* "4096,16384": the distinct values of a size field of the records. */
static void distinct_sizes(const bench_record *r, size_t count, size_t offset, char *out,
                           size_t size) {
    out[0] = '\0';
    for (size_t i = 0; i < count; i++) {
        size_t value = *(const size_t *)((const char *)&r[i] + offset), j = 0;
        while (j < i && *(const size_t *)((const char *)&r[j] + offset) != value) j++;
        if (j == i) snprintf(out + strlen(out), size - strlen(out), "%s%zu", i ? "," : "", value);
    }
}

/* The density plot's title and axes: log-log. */
static void density_settings(const bench_record *r, size_t count, const char *title, textbuf *t) {
    char n[128], h[128], hkv[128], d[128];
    distinct_sizes(r, count, offsetof(bench_record, nq), n, sizeof n);
    distinct_sizes(r, count, offsetof(bench_record, hq), h, sizeof h);
    distinct_sizes(r, count, offsetof(bench_record, hkv), hkv, sizeof hkv);
    distinct_sizes(r, count, offsetof(bench_record, dqk), d, sizeof d);
    textbuf_printf(t,
                   "set title 'clattn bench: %s, N=%s, H=%s%s%s, D=%s, %s (median time per "
                   "call against density)'\n",
                   title, n, h, strcmp(h, hkv) ? ", Hkv=" : "", strcmp(h, hkv) ? hkv : "", d,
                   bench_layout_name(r[0].layout));
    textbuf_printf(t, "set logscale xy\nset xlabel 'density (allowed pairs / B*Hq*Nq*Nk)'\n"
                      "set ylabel 'ms'\nset grid\nset key right bottom\n"
                      "set xrange [*:1.5]\n"); /* full's point, at 1, inside the frame */
}

/* ms against density: a series a (group, family), and the ideal lines. */
static void density_plot(const bench_record *r, size_t count, const size_t *series,
                         size_t num_series, const char *title, plot_spec *p) {
    density_settings(r, count, title, &p->settings);
    for (size_t k = 0, i = 0; k < num_series; k++, i = 0) {
        while (series[i] != k) i++; /* the series' first record */
        char group[96];
        group_label(r, count, i, group, sizeof group);
        plot_series *s = plot_add(p, "linespoints");
        snprintf(s->title, sizeof s->title, "%.*s%s", (int)family_length(r[i].pattern),
                 r[i].pattern, group);
        density_data(r, count, series, k, &s->data);
    }
    ideal_lines(r, count, p);
}

/* See sweeps.h. */
int bench_plot(const bench_record *records, size_t count, const char *dir, const char *title,
               int against_density, output_set *set) {
    size_t *series = malloc((count ? count : 1) * sizeof *series);
    plot_spec plot; /* at most a series a record and an ideal line a full record */
    if (!series || plot_init(&plot, 2 * count) != 0) {
        free(series);
        cli_error("bench", "no memory for the plot of %zu records", count);
        return 1;
    }
    if (against_density)
        density_plot(records, count, series, number_density_series(records, count, series), title,
                     &plot);
    else
        nq_plot(records, count, series, number_nq_series(records, count, series), title, &plot);
    int rc = draw_plot(&plot, dir, set);
    plot_free(&plot);
    free(series);
    return rc;
}
