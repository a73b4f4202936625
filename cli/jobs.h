/*
 * Work spread over child processes, one OpenCL context each: how `cache warm` and `tune` build
 * several programs at once (PoCL compiles on one thread per process, and creating contexts
 * concurrently in one process is not safe on every driver). A process that forks must not have
 * started the OpenCL driver: a driver's threads do not survive a fork, and a child of an
 * initialised process can wait forever on a lock that one of them held.
 */
#ifndef CLATTN_CLI_JOBS_H
#define CLATTN_CLI_JOBS_H

#include "args.h"

#include <stddef.h>

/* Share `job` of `jobs` (items job, job + jobs, ... of the caller's list). @return an exit
 * status. */
typedef int (*job_share)(void *arg, size_t job, size_t jobs);

/* Resolves the --device spec in a child process, so that a bad spec is said once before the
 * jobs start and this process does not start the driver. @return 0, or 1 when it matches no
 * device. */
int jobs_check_device(const char *command, const char *spec);

/* Runs share(arg, j, jobs) for every j < jobs in child processes and waits for them all; a
 * share whose process cannot start runs in this one. With quiet, the children's stderr goes to
 * /dev/null (this process says what goes wrong itself); this one's never does. @return 0, or 1
 * when a share failed. */
int jobs_run(const char *command, job_share share, void *arg, size_t jobs, int quiet);

/* The cores online, at least 1 and at most the children a signal handler follows
 * (MAX_CHILDREN, interrupt.h): the default number of jobs. */
size_t jobs_default(void);

/* --jobs N into *jobs (left as it is when not given): from 1 to MAX_CHILDREN, since a child
 * the signal handler does not know would outlive an interrupted command. @return 0 or
 * EXIT_USAGE. */
int jobs_parse(const cli_args *args, size_t *jobs);

#endif
