/*
 * `clattn check`'s rows in child processes: the program runs itself again for each (device,
 * path, variant) row (`clattn check --child-fd 3 ...`), several rows at once (--jobs), reads
 * each row's case lines from its pipe (check.h), shows which cases run on a terminal, and kills
 * a child when its row's time limit passes. A driver that never returns from a build or a
 * kernel, or that crashes, ends one row; the others still run. Most of a cold check is the
 * driver compiling kernels, one program at a time in each process: rows at once keep every
 * core busy. Linux finds the program through /proc/self/exe; where it cannot, rows run in the
 * parent's process without a limit (cmd_check.c).
 */
#include "check.h"
#include "common.h"
#include "interrupt.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define CHILD_FD 3 /* the child's end of the pipe */

static int self_path(char *out, size_t size) {
    ssize_t n = readlink("/proc/self/exe", out, size - 1);
    if (n <= 0 || (size_t)n >= size - 1) return -1;
    out[n] = '\0';
    return 0;
}

int check_children_possible(void) {
    char path[PATH_MAX];
    return self_path(path, sizeof path) == 0 && access(path, X_OK) == 0;
}

/* The child's command line: the row, and the options that shape its cases. */
typedef struct child_args {
    char exe[PATH_MAX], device[32], variant[64], fd[16], only_case[32];
    char *argv[20];
} child_args;

static void make_child_args(const check_plan *plan, const run_row *row, child_args *a) {
    size_t n = 0;
    self_path(a->exe, sizeof a->exe);
    snprintf(a->device, sizeof a->device, "%zu", row->device);
    snprintf(a->variant, sizeof a->variant, "%s", clattn_variant_name(row->variant));
    snprintf(a->fd, sizeof a->fd, "%d", CHILD_FD);
    snprintf(a->only_case, sizeof a->only_case, "%ld", plan->only_case);
    a->argv[n++] = a->exe, a->argv[n++] = "check";
    a->argv[n++] = "--child-fd", a->argv[n++] = a->fd;
    a->argv[n++] = "--device", a->argv[n++] = a->device;
    a->argv[n++] = "--path", a->argv[n++] = (char *)check_path_name(row->path);
    a->argv[n++] = "--variant", a->argv[n++] = a->variant;
    if (plan->quick) a->argv[n++] = "--quick";
    if (plan->storage_name) a->argv[n++] = "--storage", a->argv[n++] = (char *)plan->storage_name;
    if (plan->verbose) a->argv[n++] = "--verbose";
    if (plan->only_case >= 0) a->argv[n++] = "--case", a->argv[n++] = a->only_case;
    if (plan->dump_dir) a->argv[n++] = "--dump", a->argv[n++] = (char *)plan->dump_dir;
    a->argv[n] = NULL;
}

/* Starts the child with the pipe's write end as its CHILD_FD. @return 0 or an errno. */
static int spawn_child(const check_plan *plan, const run_row *row, int write_end, pid_t *pid) {
    static child_args a; /* PATH_MAX and more: off the stack */
    make_child_args(plan, row, &a);
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, write_end, CHILD_FD);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawnattr_init(&attr);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    interrupt_section section; /* the child is known to the handler from its start */
    interrupt_defer_begin(&section);
    int e = posix_spawn(pid, a.exe, &actions, &attr, a.argv, environ);
    if (e == 0) interrupt_child_add(*pid);
    interrupt_defer_end(&section);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    return e;
}

/* ---------------------------------------------------------------- the child's lines */

/* A row whose child runs: its pipe, and what its lines said so far. */
typedef struct row_child {
    run_row *row;
    pid_t pid;
    int fd;       /* the pipe's read end; -1 once the row has ended */
    long running; /* the case started and not ended, or -1 */
    double t0, deadline;
    char line[256];
    size_t len;
} row_child;

static void take_line(check_plan *plan, const sweep *s, row_child *c, const char *line) {
    long i = -1, failures = 0;
    int ok = 0;
    float worst = 0, ms = 0;
    run_row *row = c->row;
    if (sscanf(line, "start %ld", &i) == 1 && i >= 0 && (size_t)i < s->count) {
        c->running = i;
    } else if (sscanf(line, "end %ld %d %f %f", &i, &ok, &worst, &ms) == 4 && i >= 0 &&
               (size_t)i < s->count) {
        case_record *r = &row->cases[i];
        r->outcome = ok == 2 ? CASE_NOT_SERVED : ok ? CASE_PASSED : CASE_FAILED;
        r->worst = worst, r->ms = ms;
        if (ok == 2)
            row->not_served++;
        else if (ok)
            row->passed++;
        else
            row->failed++, plan->failures++;
        if (worst > row->worst) row->worst = worst;
        c->running = -1;
    } else if (sscanf(line, "dump-failures %ld", &failures) == 1 && failures > 0) {
        plan->dump_failures += (size_t)failures;
    }
}

/* Takes what the pipe has. @return 0, or 1 at its end. */
static int read_lines(check_plan *plan, const sweep *s, row_child *c) {
    char buf[512];
    ssize_t n = read(c->fd, buf, sizeof buf);
    if (n < 0) return errno == EINTR || errno == EAGAIN ? 0 : 1;
    if (n == 0) return 1;
    for (ssize_t k = 0; k < n; k++) {
        if (buf[k] != '\n') {
            if (c->len < sizeof c->line - 1) c->line[c->len++] = buf[k];
            continue;
        }
        c->line[c->len] = '\0';
        take_line(plan, s, c, c->line);
        c->len = 0;
    }
    return 0;
}

/* ---------------------------------------------------------------- progress on a terminal */

/* One line: the first running row's case and count, how many more rows run, and the seconds
 * since that row started. */
static void show_progress(const check_plan *plan, const sweep *s, const row_child *children,
                          size_t n) {
    const row_child *first = NULL;
    size_t others = 0;
    for (size_t i = 0; i < n; i++)
        if (children[i].fd >= 0 && !first)
            first = &children[i];
        else if (children[i].fd >= 0)
            others++;
    if (!first || first->running < 0) return;
    const run_row *row = first->row;
    fprintf(stderr, "\rdevice %zu %s %s: case %ld (%zu of %zu run) %.0f s", row->device,
            check_path_name(row->path), clattn_variant_name(row->variant), first->running,
            row->passed + row->failed + 1, check_cases_run(plan, s), seconds_now() - first->t0);
    if (others)
        fprintf(stderr, ", %zu more rows running ", others);
    else
        fputc(' ', stderr);
}

static void clear_progress(void) {
    fprintf(stderr, "\r%120s\r", "");
}

/* ---------------------------------------------------------------- a row's start and end */

static void say_stopped(const sweep *s, const run_row *row, const char *how) {
    char where[600];
    check_case_name(s, row->stopped_in, where, sizeof where);
    fprintf(stderr, "clattn check: device %zu, path %s, variant %s: %s in %s\n", row->device,
            check_path_name(row->path), clattn_variant_name(row->variant), how, where);
}

/* How the child ended, from its wait status; `timed_out` when it was killed at the limit. */
static void row_ended(check_plan *plan, const sweep *s, run_row *row, long running, int timed_out,
                      int status) {
    char how[128];
    row->stopped_in = running;
    if (timed_out) {
        row->outcome = ROW_TIMED_OUT;
        snprintf(how, sizeof how, "timed out after %.0f s", row->timeout_s);
    } else if (WIFSIGNALED(status)) {
        row->outcome = ROW_CRASHED, row->signal = WTERMSIG(status);
        snprintf(how, sizeof how, "crashed (signal %d)", row->signal);
    } else if (running >= 0 || !WIFEXITED(status) || WEXITSTATUS(status) > 1) {
        row->outcome = ROW_BROKEN, row->exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        snprintf(how, sizeof how, "its process exited with status %d", row->exit_status);
    } else {
        return; /* completed: its failures are counted case by case */
    }
    if (running >= 0)
        row->cases[running].outcome = timed_out             ? CASE_TIMED_OUT
                                      : WIFSIGNALED(status) ? CASE_CRASHED
                                                            : CASE_FAILED;
    plan->failures++;
    say_stopped(s, row, how);
}

/* Starts the row's child. @return 0, or -1 when it could not start (the row is broken). */
static int start_row(check_plan *plan, const sweep *s, run_row *row, row_child *c) {
    size_t cases = check_cases_run(plan, s);
    row->timeout_s = plan->timeout_s > 0 ? plan->timeout_s
                                         : ROW_SECONDS_FIXED + ROW_SECONDS_PER_CASE * (double)cases;
    row->stopped_in = -1;
    memset(c, 0, sizeof *c);
    c->row = row, c->fd = -1, c->running = -1;
    c->t0 = seconds_now(), c->deadline = c->t0 + row->timeout_s;
    int fds[2];
    fflush(stdout), fflush(stderr); /* the child writes to them too */
    int e = pipe(fds) == 0 ? 0 : errno;
    if (e == 0) {
        fcntl(fds[0], F_SETFD, FD_CLOEXEC), fcntl(fds[1], F_SETFD, FD_CLOEXEC);
        if (fds[1] == CHILD_FD) { /* dup2 onto itself would keep FD_CLOEXEC */
            int moved = fcntl(fds[1], F_DUPFD_CLOEXEC, CHILD_FD + 1);
            close(fds[1]);
            fds[1] = moved;
        }
        e = spawn_child(plan, row, fds[1], &c->pid);
        close(fds[1]);
        if (e != 0) close(fds[0]);
    }
    if (e != 0) {
        row->outcome = ROW_BROKEN, row->exit_status = -1, plan->failures++;
        fprintf(stderr, "clattn check: cannot start a process for device %zu, variant %s: %s\n",
                row->device, clattn_variant_name(row->variant), strerror(e));
        return -1;
    }
    c->fd = fds[0];
    return 0;
}

/* Reaps the row's child (killed first when it ran out of time) and fills in how it ended. */
static void end_row(check_plan *plan, const sweep *s, row_child *c, int timed_out) {
    if (timed_out) kill(c->pid, SIGKILL);
    int status = 0;
    while (waitpid(c->pid, &status, 0) < 0 && errno == EINTR) {
    }
    interrupt_child_remove(c->pid);
    while (!timed_out && read_lines(plan, s, c) == 0) { /* what is left in the pipe */
    }
    close(c->fd);
    c->fd = -1;
    c->row->ms = (seconds_now() - c->t0) * 1e3;
    row_ended(plan, s, c->row, c->running, timed_out, status);
}

/* ---------------------------------------------------------------- the rows at once */

/* Waits up to a second for lines, then takes them and ends the rows whose pipe closed or whose
 * time ran out. @return the rows that ended. */
static size_t follow_children(check_plan *plan, const sweep *s, row_child *children, size_t n,
                              check_row_done done, void *arg) {
    struct pollfd polls[MAX_RUNS];
    size_t at[MAX_RUNS], polled = 0, ended = 0;
    double now = seconds_now(), wait_s = 1.0;
    for (size_t i = 0; i < n; i++) {
        if (children[i].fd < 0) continue;
        polls[polled] = (struct pollfd){children[i].fd, POLLIN, 0};
        at[polled++] = i;
        if (children[i].deadline - now < wait_s) wait_s = children[i].deadline - now;
    }
    int ready = poll(polls, polled, wait_s > 0 ? (int)(wait_s * 1000) + 1 : 0);
    if (ready < 0 && errno != EINTR) ready = 0;
    for (size_t p = 0; p < polled; p++) {
        row_child *c = &children[at[p]];
        int finished = ready > 0 && polls[p].revents && read_lines(plan, s, c);
        int timed_out = !finished && seconds_now() >= c->deadline;
        if (!finished && !timed_out) continue;
        end_row(plan, s, c, timed_out);
        done(arg, c->row);
        ended++;
    }
    return ended;
}

void check_run_rows_children(check_plan *plan, const sweep *s, run_row *rows, size_t n,
                             size_t jobs, check_row_done done, void *arg) {
    static row_child children[MAX_RUNS];
    int progress = isatty(STDERR_FILENO) && !plan->verbose;
    size_t started = 0, running = 0;
    if (jobs < 1) jobs = 1;
    while (started < n || running > 0) {
        while (started < n && running < jobs) {
            if (start_row(plan, s, &rows[started], &children[started]) == 0)
                running++;
            else
                done(arg, &rows[started]);
            started++;
        }
        if (running == 0) continue;
        size_t ended = follow_children(plan, s, children, started, done, arg);
        running -= ended;
        if (progress && ended)
            clear_progress(); /* for the rows printed now */
        else if (progress)
            show_progress(plan, s, children, started);
    }
    if (progress) clear_progress();
}
