/* clattn pattern: in progress. */
#include "args.h"
#include "commands.h"

int cmd_pattern(int argc, char **argv) {
    cli_error("pattern", "not built yet");
    return 1;
}
