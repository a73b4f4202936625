/* Error records (on their own and on a context), logging and the clock: the smallest pieces
 * every layer uses. */
#include "core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static clattn_status record_error(error_record *record, clattn_status status, const char *fmt,
                                  va_list ap) {
    if (!record) return status;
    vsnprintf(record->text, sizeof record->text, fmt, ap);
    log_msg("error: %s (%s)", record->text, clattn_status_name(status));
    return status;
}

clattn_status error_set(error_record *record, clattn_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    record_error(record, status, fmt, ap);
    va_end(ap);
    return status;
}

clattn_status ctx_error(clattn_context *ctx, clattn_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    record_error(ctx ? &ctx->error : NULL, status, fmt, ap);
    va_end(ap);
    return status;
}

clattn_status ctx_cl_error(clattn_context *ctx, cl_int err, const char *what) {
    clattn_status status = (clattn_status)err;
    return ctx_error(ctx, status, "%s: %s (%d)", what, clattn_status_name(status), (int)err);
}

void ctx_clear_error(clattn_context *ctx) {
    if (ctx) ctx->error.text[0] = '\0';
}

int log_enabled(void) {
    const char *v = getenv("CLATTN_VERBOSE");
    return v && *v && strcmp(v, "0") != 0;
}

void log_msg(const char *fmt, ...) {
    if (!log_enabled()) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("clattn: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
