/*
 * clattn bench's plots, drawn by gnuplot: the median time of each call against Nq, one series
 * a (device, path, pattern). Each series is a data file, DIR/series-K.dat, that DIR/plot.gp reads;
 * gnuplot draws DIR/plot.png from the same data given inline, before anything is committed.
 */
#include "sweeps.h"

#include "interrupt.h"
#include "message.h"

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

/* The gnuplot commands, drawing into `png`: the series read from DIR/series-K.dat (plot.gp,
 * for a reader), or given inline (what gnuplot itself is fed, before those files are in
 * place). */
static void plot_commands(const plot_spec *p, const char *dir, const char *png, int inline_data,
                          textbuf *t) {
    textbuf_printf(t, "set terminal png size 1000,650\nset output '%s'\n", png);
    if (p->settings.len) textbuf_printf(t, "%s", p->settings.data);
    for (size_t k = 0; inline_data && k < p->count; k++)
        textbuf_printf(t, "$series%zu << EOD\n%sEOD\n", k,
                       p->series[k].data.len ? p->series[k].data.data : "");
    for (size_t k = 0; k < p->count; k++) {
        textbuf_printf(t, k ? ", \\\n     " : "plot ");
        if (inline_data)
            textbuf_printf(t, "$series%zu", k);
        else
            textbuf_printf(t, "'%s/series-%zu.dat'", dir, k);
        textbuf_printf(t, " using 1:2 with %s title '", p->series[k].style);
        for (const char *c = p->series[k].title; *c; c++) /* '' is a quote in '...' */
            textbuf_printf(t, *c == '\'' ? "''" : "%c", *c);
        textbuf_printf(t, "'");
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

/* Stages the series' data and plot.gp into `set`, and has gnuplot draw plot.png. @return 0,
 * or 1 with a message when gnuplot is missing or fails (plot.png is then left out of the set)
 * or a file cannot be staged. */
static int draw_plot(const plot_spec *p, const char *dir, output_set *set) {
    char path[1024], png[1024];
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

/* See sweeps.h. */
int bench_plot(const bench_record *records, size_t count, const char *dir, const char *title,
               output_set *set) {
    size_t *series = malloc((count ? count : 1) * sizeof *series);
    plot_spec plot; /* at most a series a record */
    if (!series || plot_init(&plot, count) != 0) {
        free(series);
        cli_error("bench", "no memory for the plot of %zu records", count);
        return 1;
    }
    nq_plot(records, count, series, number_nq_series(records, count, series), title, &plot);
    int rc = draw_plot(&plot, dir, set);
    plot_free(&plot);
    free(series);
    return rc;
}
