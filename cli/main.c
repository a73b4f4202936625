/* The clattn program: dispatches to a subcommand, and answers --help and --version. */
#include "args.h"
#include "commands.h"
#include "interrupt.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

typedef struct subcommand {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} subcommand;

static const subcommand subcommands[] = {
    {"devices", cmd_devices, "list every OpenCL platform and device"},
    {"run", cmd_run, "compute attention from .npy files"},
    {"layer", cmd_layer, "compute a multi-head attention layer from .npy files"},
    {"check", cmd_check, "check devices and paths against the CPU reference"},
    {"bench", cmd_bench, "benchmark paths and sparse patterns"},
    {"pattern", cmd_pattern, "write a block-sparse layout (.npy)"},
    {"tune", cmd_tune, "search a device's kernel parameters and store them in tuning.json"},
    {"cache", cmd_cache, "show, trim, clear or warm the cache of compiled kernels"},
};

static void usage(FILE *out) {
    fprintf(out, "clattn %s - attention on any OpenCL device\n\n", clattn_version());
    fprintf(out, "usage: clattn COMMAND [OPTIONS]\n       clattn help COMMAND\n"
                 "       clattn --version\n\ncommands:\n");
    for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++)
        fprintf(out, "  %-10s %s\n", subcommands[i].name, subcommands[i].summary);
    fprintf(
        out,
        "\nenvironment: CLATTN_DEVICE (device spec), CLATTN_VERBOSE=1, CLATTN_CACHE_DIR "
        "(or off),\n             CLATTN_CACHE_MAX_MB (default 256),\n             CLATTN_KERNEL=");
    const char *name;
    for (int v = 1; strcmp(name = clattn_variant_name((clattn_variant)v), "unknown") != 0; v++)
        fprintf(out, "%s%s", v > 1 ? "|" : "", name);
    fprintf(out, " (the variant auto would otherwise choose),\n             "
                 "CLATTN_NO_DRIVER_SEARCH=1 (use only the drivers the ICD loader registers)\n");
}

static const subcommand *find_subcommand(const char *name) {
    for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++)
        if (strcmp(subcommands[i].name, name) == 0) return &subcommands[i];
    return NULL;
}

int main(int argc, char **argv) {
    /* A FIFO or pipe whose reader leaves makes a write fail (EPIPE, reported as such) instead of
     * killing the program half-way through its outputs. */
    signal(SIGPIPE, SIG_IGN);
    /* SIGINT and SIGTERM remove the temporaries and exit with 130 or 143, after a commit of
     * outputs that is under way (interrupt.h, outfile.h) */
    interrupt_install();
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *first = argv[1];
    if (strcmp(first, "--help") == 0 || strcmp(first, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(first, "--version") == 0) {
        printf("clattn %s\n", clattn_version());
        return 0;
    }
    if (strcmp(first, "help") == 0) {
        if (argc < 3) {
            usage(stdout);
            return 0;
        }
        const subcommand *sub = find_subcommand(argv[2]);
        if (!sub) {
            fprintf(stderr, "clattn help: unknown command '%s'\n", argv[2]);
            return EXIT_USAGE;
        }
        char *help_argv[] = {"--help", NULL};
        return sub->run(1, help_argv);
    }
    const subcommand *sub = find_subcommand(first);
    if (!sub) {
        fprintf(stderr, "clattn: unknown command '%s' (see clattn --help)\n", first);
        return EXIT_USAGE;
    }
    return sub->run(argc - 2, argv + 2);
}
