/*
 * clattn run --devices A,B,...: the call sharded over several devices of this process, as a ring
 * (clattn_attention_multi), and the checks of the options that shard a call (--devices,
 * --distributed, --sharding, --timeout). Without MPI, --distributed says so.
 */
#include "args.h"
#include "commands.h"
#include "common.h"
#include "run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEVICES 16

static int refuse_with(const cli_args *args, const char *mode, const char *other) {
    if (!args_has(args, mode) || !args_has(args, other)) return 0;
    cli_error("run", "--%s and --%s do not go together", mode, other);
    return EXIT_USAGE;
}

int run_sharding(const cli_args *args, clattn_sharding *sharding) {
    static const char *const names[] = {"auto", "contiguous", "zigzag", NULL}; /* enum order */
    int choice = 0;
    if (args_has(args, "sharding") && parse_choice(args, "sharding", names, &choice) != 0)
        return EXIT_USAGE;
    *sharding = (clattn_sharding)choice;
    return 0;
}

int run_check_shard_args(const cli_args *args) {
    int sharded = args_has(args, "devices") || args_has(args, "distributed");
    static const char *const excluded[] = {"distributed", "cache-len", "kv-storage"};
    for (size_t i = 0; i < ARRAY_LEN(excluded); i++)
        if (refuse_with(args, "devices", excluded[i]) ||
            (i && refuse_with(args, "distributed", excluded[i])))
            return EXIT_USAGE;
    if (!sharded && (args_has(args, "sharding") || args_has(args, "timeout"))) {
        cli_error("run", "--%s goes with --devices or --distributed",
                  args_has(args, "sharding") ? "sharding" : "timeout");
        return EXIT_USAGE;
    }
    if (args_has(args, "timeout") && !args_has(args, "distributed")) {
        cli_error("run", "--timeout goes with --distributed");
        return EXIT_USAGE;
    }
    clattn_sharding sharding;
    if (run_sharding(args, &sharding)) return EXIT_USAGE;
    static const char *const modes[] = {"ring", "ulysses", NULL};
    int mode = 0;
    if (args_has(args, "distributed") && parse_choice(args, "distributed", modes, &mode) != 0)
        return EXIT_USAGE;
    float timeout = 0;
    if (args_has(args, "timeout")) {
        if (parse_float(args, "timeout", &timeout) != 0) return EXIT_USAGE;
        if (!(timeout > 0) || !isfinite(timeout)) {
            cli_error("run", "--timeout: expected seconds > 0, got '%s'",
                      args_get(args, "timeout"));
            return EXIT_USAGE;
        }
    }
    char specs[MAX_DEVICES][64];
    size_t count = 0;
    if (args_has(args, "devices") &&
        parse_word_list(args, "devices", specs, MAX_DEVICES, &count) != 0)
        return EXIT_USAGE;
    return 0;
}

/* A context for each device of --devices (a device named twice gets two contexts). */
static int open_contexts(const cli_args *args, clattn_context **ctxs, size_t *n) {
    char specs[MAX_DEVICES][64];
    *n = 0;
    if (parse_word_list(args, "devices", specs, MAX_DEVICES, n) != 0) return EXIT_USAGE;
    for (size_t i = 0; i < *n; i++) {
        size_t index = 0, found = 0;
        int rc = cli_select_devices("run", specs[i], &index, 1, &found);
        clattn_status status = rc ? CLATTN_SUCCESS : clattn_context_create(&ctxs[i], index);
        if (!rc && status != CLATTN_SUCCESS) {
            cli_error("run", "--devices: cannot open device %zu: %s (%s)", index,
                      clattn_status_string(status), clattn_status_name(status));
            rc = 1;
        }
        if (rc) return rc;
    }
    return 0;
}

int run_multi_compute(const cli_args *args, run_state *s, char *where, size_t where_size) {
    clattn_context *ctxs[MAX_DEVICES] = {NULL};
    size_t n = 0;
    clattn_sharding sharding = CLATTN_SHARDING_AUTO;
    int rc = run_sharding(args, &sharding);
    if (!rc) rc = open_contexts(args, ctxs, &n);
    clattn_status status = CLATTN_SUCCESS;
    if (!rc) {
        status = clattn_attention_multi(ctxs, n, &s->desc, sharding, s->q.data, s->k.data,
                                        s->v.data, s->o, s->lse);
        if (status != CLATTN_SUCCESS) {
            char what[64];
            snprintf(what, sizeof what, "attention on %zu devices", n);
            cli_report("run", what, status, ctxs[0]);
            rc = 1;
        }
    }
    if (!rc) {
        size_t at =
            (size_t)snprintf(where, where_size, "a ring over %zu device%s:", n, n == 1 ? "" : "s");
        for (size_t i = 0; i < n && at < where_size; i++) {
            clattn_device_info info;
            clattn_device_info_init(&info);
            clattn_context_device_info(ctxs[i], &info);
            at += (size_t)snprintf(where + at, where_size - at, "%s %zu (%s)", i ? "," : "",
                                   info.index, info.name);
        }
    }
    for (size_t i = 0; i < MAX_DEVICES; i++) clattn_context_destroy(ctxs[i]);
    return rc;
}

#ifndef CLATTN_HAVE_MPI
int run_distributed(const cli_args *args, run_state *s) {
    (void)s;
    cli_error("run",
              "--distributed %s: this clattn was built without MPI (libclattn_mpi); "
              "build it where CMake finds MPI (apt-get install libopenmpi-dev)",
              args_get(args, "distributed"));
    return 1;
}
#endif
