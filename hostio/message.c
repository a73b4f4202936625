/* See message.h. */
#include "message.h"

#include <stdarg.h>
#include <stdio.h>

static char *captured; /* cli_error_capture's buffer, or NULL */
static size_t captured_size;

void cli_error_capture(char *buf, size_t size) {
    captured = size ? buf : NULL, captured_size = size;
    if (captured) captured[0] = '\0';
}

void cli_error(const char *command, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (captured) { /* the first message only, without the command */
        if (!captured[0]) vsnprintf(captured, captured_size, fmt, ap);
        va_end(ap);
        return;
    }
    /* one write a line, so that lines of processes sharing stderr (mpirun's ranks) never mix */
    char line[4096];
    int n = snprintf(line, sizeof line - 1, "clattn %s: ", command);
    if (n >= 0 && (size_t)n < sizeof line - 1)
        vsnprintf(line + n, sizeof line - 1 - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", line);
}

void cli_report(const char *command, const char *what, clattn_status status,
                const clattn_context *ctx) {
    const char *detail = clattn_context_last_error(ctx);
    cli_error(command, "%s: %s (%s)", what, *detail ? detail : clattn_status_string(status),
              clattn_status_name(status));
    const char *log = clattn_context_build_log(ctx);
    if (status == CLATTN_ERR_BUILD && *log) fprintf(stderr, "build log:\n%s\n", log);
}
