/*
 * Verified dispatch (verify.h). Self-verification runs the clattn program rather than the
 * sweep in this process: a child process is how a build or kernel that never returns is
 * stopped (its time limit), and a library cannot fork a process whose OpenCL drivers have
 * started threads, so it starts the program afresh (posix_spawn).
 */
#include "kernels/verify.h"
#include "plan/verdicts.h"

#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* $CLATTN_VERIFY: trust, prefer-verified, require-verified, first-use (prefer-verified with
 * self-verification); anything else is the default, said once in the log. */
static void policy_from_env(verify_settings *s) {
    const char *v = getenv("CLATTN_VERIFY");
    if (!v || !*v) return;
    if (strcmp(v, "trust") == 0)
        s->policy = CLATTN_VERIFY_TRUST;
    else if (strcmp(v, "require-verified") == 0)
        s->policy = CLATTN_VERIFY_REQUIRE;
    else if (strcmp(v, "first-use") == 0)
        s->first_use = 1;
    else if (strcmp(v, "prefer-verified") != 0)
        log_msg("CLATTN_VERIFY=%s: expected trust, prefer-verified, require-verified or "
                "first-use; prefer-verified it is",
                v);
}

verify_settings verify_settings_of(const clattn_context *ctx) {
    verify_settings s = {CLATTN_VERIFY_PREFER, 0, 0};
    const char *strict = getenv("CLATTN_STRICT");
    if (ctx->verify_policy == CLATTN_VERIFY_FROM_ENV)
        policy_from_env(&s);
    else
        s.policy = (clattn_verify_policy)ctx->verify_policy;
    s.strict = (ctx->verify_flags & CLATTN_VERIFY_STRICT) ||
               (strict && *strict && strcmp(strict, "0") != 0);
    s.first_use = s.first_use || (ctx->verify_flags & CLATTN_VERIFY_FIRST_USE);
    if (s.policy == CLATTN_VERIFY_TRUST) s.first_use = 0;
    return s;
}

clattn_verdict_kind verify_row(const clattn_context *ctx, const attn_variant *row, char *why,
                               size_t size) {
    verdict_entry e;
    verdict_key(&ctx->device, row->name, &e);
    if (!verdict_find(&e)) return CLATTN_VERDICT_NONE;
    clattn_verdict_kind kind = verdict_kind_of(e.verdict);
    if (kind != CLATTN_VERDICT_PASSED)
        snprintf(why, size, "%s clattn check on %s (%s%s%s)", e.verdict, e.date, e.sweep,
                 *e.detail ? ": " : "", e.detail);
    return kind;
}

/* The program's command line: check --quick on the device, for the rows. */
static void first_use_args(const clattn_context *ctx, const char *const *rows, size_t count,
                           char *device, size_t device_size, char *variants, size_t variants_size,
                           char *argv[8]) {
    const char *program = getenv("CLATTN_PROGRAM");
    snprintf(device, device_size, "%zu", ctx->device.index);
    variants[0] = '\0';
    for (size_t i = 0; i < count; i++)
        snprintf(variants + strlen(variants), variants_size - strlen(variants), "%s%s",
                 i ? "," : "", rows[i]);
    argv[0] = (char *)(program && *program ? program : "clattn");
    argv[1] = "check", argv[2] = "--quick", argv[3] = "--device", argv[4] = device;
    argv[5] = "--variant", argv[6] = variants, argv[7] = NULL;
}

void verify_first_use(clattn_context *ctx, const char *const *rows, size_t count) {
    char device[32], variants[256], *argv[8];
    if (ctx->first_use_checked) return;
    ctx->first_use_checked = 1;
    if (count == 0) return;
    if (ctx->device.index == SIZE_MAX) { /* a wrapped device no spec names */
        log_msg("first use on %s: not verified, since no --device names it (clattn's device "
                "list does not hold it)",
                ctx->device.name);
        return;
    }
    first_use_args(ctx, rows, count, device, sizeof device, variants, sizeof variants, argv);
    log_msg("first use on %s (%s): verifying %s with %s check --quick (its output on stderr)",
            ctx->device.name, ctx->device.driver_version, variants, argv[0]);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
    pid_t pid = 0;
    int e = posix_spawnp(&pid, argv[0], &actions, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    int status = 0;
    while (e == 0 && waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) e = errno;
    if (e != 0)
        log_msg("first use: cannot run %s (%s): the variants stay unverified (set "
                "CLATTN_PROGRAM to the clattn program)",
                argv[0], strerror(e));
    else
        log_msg("first use: %s check exited %d; its verdicts are in the store", argv[0],
                WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
}
