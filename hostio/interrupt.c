/* SIGINT and SIGTERM: temporaries removed, the exit deferred past a commit (see interrupt.h). */
#define _XOPEN_SOURCE 700 /* SA_RESTART, beside the build's _POSIX_C_SOURCE */

#include "interrupt.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_TRACKED 64
#define EXITING     (-1) /* `sections` once a handler has started to end the process */

enum { SLOT_FREE, SLOT_FILLING, SLOT_LIVE };

/* The registry: a slot is claimed (FREE -> FILLING), its path written, then published (LIVE).
 * Changes happen inside sections, so the handler's exit never sees a half-written path. */
static struct tracked {
    atomic_int state;
    char path[PATH_MAX + 64];
} tracked[MAX_TRACKED];

static atomic_int sections; /* sections in progress, or EXITING */
static atomic_int children[MAX_CHILDREN]; /* interrupt_child_add's processes; 0: a free slot */
static atomic_int caught;   /* the first signal received; 0 before */

/* AddressSanitizer precedes a call to a function that does not return (_exit) with one into
 * its runtime that allocates memory: in a handler that interrupted malloc, a deadlock. The
 * handler's functions are left uninstrumented. */
#if defined(__GNUC__)
#define NOT_INSTRUMENTED __attribute__((no_sanitize_address))
#else
#define NOT_INSTRUMENTED
#endif

/* Removes the registered temporaries and ends the process with 128 + sig. The caller has
 * made `sections` EXITING, so the registry no longer changes. Async-signal-safe. */
NOT_INSTRUMENTED static void exit_now(int sig) {
    static const char interrupted[] = "clattn: interrupted (SIGINT)\n";
    static const char terminated[] = "clattn: terminated (SIGTERM)\n";
    for (size_t i = 0; i < MAX_CHILDREN; i++) { /* no more writes */
        pid_t pid = (pid_t)atomic_load(&children[i]);
        if (pid > 0 && kill(pid, SIGKILL) == 0) waitpid(pid, NULL, 0);
    }
    for (size_t i = 0; i < MAX_TRACKED; i++)
        if (atomic_load(&tracked[i].state) == SLOT_LIVE) unlink(tracked[i].path);
    const char *line = sig == SIGINT ? interrupted : terminated;
    size_t len = sig == SIGINT ? sizeof interrupted - 1 : sizeof terminated - 1;
    if (write(STDERR_FILENO, line, len) < 0) { /* nothing more to do */
    }
    _exit(128 + sig);
}

/* Exits at once unless a section is in progress; then the last section to end exits. */
NOT_INSTRUMENTED static void on_signal(int sig) {
    int saved_errno = errno, none = 0, idle = 0;
    atomic_compare_exchange_strong(&caught, &none, sig);
    if (atomic_compare_exchange_strong(&sections, &idle, EXITING)) exit_now(sig);
    errno = saved_errno;
}

void interrupt_install(void) {
    static const int signals[] = {SIGINT, SIGTERM};
    struct sigaction action, old;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    sigaddset(&action.sa_mask, SIGINT);
    sigaddset(&action.sa_mask, SIGTERM);
    action.sa_flags = SA_RESTART; /* a thread that only records the signal carries on */
    for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++) {
        if (sigaction(signals[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        sigaction(signals[i], &action, NULL);
    }
}

void interrupt_defer_begin(interrupt_section *section) {
    sigset_t both;
    sigemptyset(&both);
    sigaddset(&both, SIGINT);
    sigaddset(&both, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &both, &section->saved);
    int n = atomic_load(&sections);
    do {
        if (n == EXITING)
            for (;;) pause(); /* another thread is ending the process */
    } while (!atomic_compare_exchange_weak(&sections, &n, n + 1));
}

void interrupt_defer_end(const interrupt_section *section) {
    int sig = 0, idle = 0;
    if (atomic_fetch_sub(&sections, 1) == 1 && (sig = atomic_load(&caught)) != 0) {
        if (atomic_compare_exchange_strong(&sections, &idle, EXITING)) exit_now(sig);
        if (idle == EXITING)
            for (;;) pause(); /* a handler is ending the process */
        /* else another section has begun: its end exits */
    }
    pthread_sigmask(SIG_SETMASK, &section->saved, NULL); /* a pending signal arrives now */
}

int interrupt_child_add(pid_t pid) {
    for (size_t i = 0; i < MAX_CHILDREN; i++) {
        int free_slot = 0;
        if (atomic_compare_exchange_strong(&children[i], &free_slot, (int)pid)) return 0;
    }
    return -1;
}

void interrupt_child_remove(pid_t pid) {
    for (size_t i = 0; i < MAX_CHILDREN; i++) {
        int known = (int)pid;
        if (atomic_compare_exchange_strong(&children[i], &known, 0)) return;
    }
}

int interrupt_track(const char *path) {
    if (strlen(path) >= sizeof tracked[0].path) return -1;
    interrupt_section section;
    int registration = -1;
    interrupt_defer_begin(&section);
    for (int i = 0; i < MAX_TRACKED && registration < 0; i++) {
        int state = SLOT_FREE;
        if (!atomic_compare_exchange_strong(&tracked[i].state, &state, SLOT_FILLING)) continue;
        strcpy(tracked[i].path, path);
        atomic_store(&tracked[i].state, SLOT_LIVE);
        registration = i;
    }
    interrupt_defer_end(&section);
    return registration;
}

void interrupt_untrack(int registration) {
    if (registration < 0 || registration >= MAX_TRACKED) return;
    interrupt_section section;
    interrupt_defer_begin(&section);
    atomic_store(&tracked[registration].state, SLOT_FREE);
    interrupt_defer_end(&section);
}
