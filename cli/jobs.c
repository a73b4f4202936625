/* Work spread over child processes (jobs.h). */
#include "jobs.h"
#include "interrupt.h"

#include "commands.h"

#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

int jobs_check_device(const char *command, const char *spec) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        size_t index = 0, found = 0;
        _exit(cli_select_devices(command, spec, &index, 1, &found));
    }
    int wstatus = 0;
    if (pid < 0 || waitpid(pid, &wstatus, 0) != pid) return 0; /* the jobs will say it */
    return !WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0;
}

/* A child's share, its stderr silenced first when quiet. */
static int child_share(job_share share, void *arg, size_t job, size_t jobs, int quiet) {
    if (quiet && !freopen("/dev/null", "w", stderr)) return 1;
    return share(arg, job, jobs);
}

int jobs_run(const char *command, job_share share, void *arg, size_t jobs, int quiet) {
    int rc = 0;
    size_t started = 0;
    fflush(stdout);
    for (; started < jobs; started++) {
        interrupt_section section; /* a signal to this process ends the child too */
        interrupt_defer_begin(&section);
        pid_t pid = fork();
        if (pid == 0) {
            interrupt_defer_end(&section);
            _exit(child_share(share, arg, started, jobs, quiet));
        }
        if (pid > 0) interrupt_child_add(pid);
        interrupt_defer_end(&section);
        if (pid < 0) {
            cli_error(command, "cannot start a build process; building the rest here");
            for (size_t job = started; job < jobs; job++) rc |= share(arg, job, jobs) != 0;
            break;
        }
    }
    for (size_t i = 0; i < started; i++) {
        int wstatus = 0;
        pid_t pid = wait(&wstatus);
        if (pid > 0) interrupt_child_remove(pid);
        if (pid < 0 || !WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) rc = 1;
    }
    return rc;
}

size_t jobs_default(void) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return cores <= 1 ? 1 : cores < MAX_CHILDREN ? (size_t)cores : MAX_CHILDREN;
}

int jobs_parse(const cli_args *args, size_t *jobs) {
    int64_t n = 0;
    if (!args_has(args, "jobs")) return 0;
    if (parse_int64_range(args, "jobs", 1, MAX_CHILDREN, &n) != 0) return EXIT_USAGE;
    *jobs = (size_t)n;
    return 0;
}
