/* The clattn program's subcommands and what they share. */
#ifndef CLATTN_CLI_COMMANDS_H
#define CLATTN_CLI_COMMANDS_H

#include "clattn.h"
#include "message.h" /* cli_report */

#include <stddef.h>

int cmd_devices(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_pattern(int argc, char **argv);
int cmd_tune(int argc, char **argv);
int cmd_layer(int argc, char **argv);
int cmd_cache(int argc, char **argv);

/* Resolves a --device spec (NULL: $CLATTN_DEVICE or the default) to device indices, printing
 * one clear line when nothing matches. @return 0 or 1 (no device installed, or none matches
 * the spec): the exit status. */
int cli_select_devices(const char *command, const char *spec, size_t *indices, size_t capacity,
                       size_t *count);
/* Opens a context on the first device the spec selects. @return 0 or 1. */
int cli_open_context(const char *command, const char *spec, clattn_context **ctx);

#endif
