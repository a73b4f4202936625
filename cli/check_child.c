/*
 * `clattn check`'s rows in child processes: the program runs itself again for one (device,
 * path, variant) row (`clattn check --child-fd 3 ...`), reads the row's case lines from a pipe
 * (check.h), shows which case runs on a terminal, and kills the child when the row's time
 * limit passes. A driver that never returns from a build or a kernel, or that crashes, ends
 * one row; the others still run. Linux finds the program through /proc/self/exe; where it
 * cannot, rows run in the parent's process without a limit (cmd_check.c).
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
    if (e == 0) interrupt_child(*pid);
    interrupt_defer_end(&section);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    return e;
}

/* ---------------------------------------------------------------- the child's lines */

typedef struct row_reader {
    check_plan *plan;
    const sweep *s;
    run_row *row;
    long running; /* the case started and not ended, or -1 */
    int progress; /* a terminal: show the running case */
    double t0;
    char line[256];
    size_t len;
} row_reader;

static void show_progress(const row_reader *r) {
    if (!r->progress || r->running < 0) return;
    fprintf(stderr, "\rdevice %zu %s %s: case %ld (%zu of %zu run) %.0f s ", r->row->device,
            check_path_name(r->row->path), clattn_variant_name(r->row->variant), r->running,
            r->row->passed + r->row->failed + 1, check_cases_run(r->plan, r->s),
            seconds_now() - r->t0);
}

static void clear_progress(const row_reader *r) {
    if (r->progress) fprintf(stderr, "\r%70s\r", "");
}

static void take_line(row_reader *r, const char *line) {
    long i = -1, failures = 0;
    int ok = 0;
    float worst = 0, ms = 0;
    if (sscanf(line, "start %ld", &i) == 1 && i >= 0 && (size_t)i < r->s->count) {
        r->running = i;
    } else if (sscanf(line, "end %ld %d %f %f", &i, &ok, &worst, &ms) == 4 && i >= 0 &&
               (size_t)i < r->s->count) {
        case_record *c = &r->row->cases[i];
        c->outcome = ok ? CASE_PASSED : CASE_FAILED, c->worst = worst, c->ms = ms;
        if (ok)
            r->row->passed++;
        else
            r->row->failed++, r->plan->failures++;
        if (worst > r->row->worst) r->row->worst = worst;
        r->running = -1;
    } else if (sscanf(line, "dump-failures %ld", &failures) == 1 && failures > 0) {
        r->plan->dump_failures += (size_t)failures;
    }
}

/* Takes what the pipe has. @return 0, or 1 at its end. */
static int read_lines(row_reader *r, int fd) {
    char buf[512];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0) return errno == EINTR || errno == EAGAIN ? 0 : 1;
    if (n == 0) return 1;
    for (ssize_t k = 0; k < n; k++) {
        if (buf[k] != '\n') {
            if (r->len < sizeof r->line - 1) r->line[r->len++] = buf[k];
            continue;
        }
        r->line[r->len] = '\0';
        take_line(r, r->line);
        r->len = 0;
    }
    return 0;
}

/* Reads until the pipe ends or the time runs out. @return 1 when it ran out. */
static int follow_child(row_reader *r, int fd) {
    double deadline = r->t0 + r->row->timeout_s;
    for (;;) {
        double left = deadline - seconds_now();
        if (left <= 0) return 1;
        struct pollfd p = {fd, POLLIN, 0};
        int wait_ms = left > 1.0 ? 1000 : (int)(left * 1000) + 1;
        int ready = poll(&p, 1, wait_ms);
        if (ready < 0 && errno != EINTR) return 0;
        if (ready > 0 && read_lines(r, fd)) return 0;
        show_progress(r);
    }
}

/* ---------------------------------------------------------------- the row's end */

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

void check_run_row_child(check_plan *plan, const sweep *s, run_row *row) {
    size_t cases = check_cases_run(plan, s);
    row->timeout_s = plan->timeout_s > 0 ? plan->timeout_s
                                         : ROW_SECONDS_FIXED + ROW_SECONDS_PER_CASE * (double)cases;
    row->stopped_in = -1;
    row_reader r = {plan,          s,  row, -1, isatty(STDERR_FILENO) && !plan->verbose,
                    seconds_now(), "", 0};
    int fds[2];
    pid_t pid = 0;
    fflush(stdout), fflush(stderr); /* the child writes to them too */
    int e = pipe(fds);
    if (e == 0) {
        fcntl(fds[0], F_SETFD, FD_CLOEXEC), fcntl(fds[1], F_SETFD, FD_CLOEXEC);
        if (fds[1] == CHILD_FD) { /* dup2 onto itself would keep FD_CLOEXEC */
            int moved = fcntl(fds[1], F_DUPFD_CLOEXEC, CHILD_FD + 1);
            close(fds[1]);
            fds[1] = moved;
        }
        e = spawn_child(plan, row, fds[1], &pid);
        close(fds[1]);
        if (e != 0) close(fds[0]);
    } else {
        e = errno;
    }
    if (e != 0) {
        row->outcome = ROW_BROKEN, row->exit_status = -1, plan->failures++;
        fprintf(stderr, "clattn check: cannot start a process for device %zu, variant %s: %s\n",
                row->device, clattn_variant_name(row->variant), strerror(e));
        return;
    }
    int timed_out = follow_child(&r, fds[0]);
    if (timed_out) kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    interrupt_child(0);
    while (!timed_out && read_lines(&r, fds[0]) == 0) { /* what is left in the pipe */
    }
    close(fds[0]);
    clear_progress(&r);
    row->ms = (seconds_now() - r.t0) * 1e3;
    row_ended(plan, s, row, r.running, timed_out, status);
}
