/*
 * SIGINT and SIGTERM in the clattn program. Once interrupt_install has run, either signal makes
 * the process remove the temporary files registered here and exit at once with 128 + the
 * signal's number (130 for SIGINT, 143 for SIGTERM), whichever thread receives it (the
 * driver's threads too). What must not be cut in the middle (the renames that commit a set of
 * outputs, a change of the registry) runs as a section, between interrupt_defer_begin and
 * interrupt_defer_end: the signals are blocked in that thread, a handler that runs in another
 * thread only records the signal, and the exit comes when the last section ends. The handler
 * makes only async-signal-safe calls (unlink, write, _exit) and lock-free atomic operations.
 */
#ifndef CLATTN_HOSTIO_INTERRUPT_H
#define CLATTN_HOSTIO_INTERRUPT_H

#include <signal.h>
#include <sys/types.h>

/* Handles SIGINT and SIGTERM as the header comment says. A signal that was ignored when the
 * program started (nohup; a shell's background job without job control, for SIGINT) stays
 * ignored. */
void interrupt_install(void);

/* A section: the calling thread's signal mask, kept by interrupt_defer_begin. */
typedef struct interrupt_section {
    sigset_t saved;
} interrupt_section;

/* Starts a section. When a handler is already exiting the process, waits for the exit. */
void interrupt_defer_begin(interrupt_section *section);
/* Ends it; after the last section, a signal received during it ends the process now. */
void interrupt_defer_end(const interrupt_section *section);

/* Child processes (gnuplot writing one of the temporaries, `clattn check`'s rows): the handler
 * stops each with SIGKILL and reaps it before removing the temporaries. Add a child while the
 * signals are deferred (a section), so that none starts unknown to the handler; remove it once
 * it is reaped. @return 0, or -1 when MAX_CHILDREN are known already (then it is not). */
#define MAX_CHILDREN 16
int interrupt_child_add(pid_t pid);
void interrupt_child_remove(pid_t pid);

/* Registers a temporary file for the handler to remove; call it before creating the file.
 * @return its registration (>= 0), or -1 when the path is too long or the registry full (then
 * a signal leaves the file, which the next run that writes the same output removes, see
 * outfile.h). */
int interrupt_track(const char *path);
/* Ends a registration (-1: none), once the file is renamed into place or removed. */
void interrupt_untrack(int registration);

#endif
