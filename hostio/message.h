/*
 * The programs' messages: one line on stderr, "clattn CMD: what went wrong", written whole in
 * one write so that the lines of processes sharing stderr (mpirun's ranks) never mix; and a
 * library status with the context's detail and build log. The clattn program (cli/) and the
 * benchmarks (bench/) both speak through these.
 */
#ifndef CLATTN_HOSTIO_MESSAGE_H
#define CLATTN_HOSTIO_MESSAGE_H

#include "clattn.h"

#include <stddef.h>

/* Keeps the messages of cli_error in buf (the first one, without "clattn CMD: ") instead of
 * printing them, until called with NULL: for a program whose ranks agree on one message before
 * any prints it (clattn run --distributed). */
void cli_error_capture(char *buf, size_t size);

/* Prints "clattn CMD: message" on stderr. */
void cli_error(const char *command, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Prints "clattn CMD: <what>: <detail> (<status name>)" and the build log when there is one. */
void cli_report(const char *command, const char *what, clattn_status status,
                const clattn_context *ctx);

#endif
