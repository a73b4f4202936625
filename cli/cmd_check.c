/* clattn check: in progress. */
#include "args.h"
#include "commands.h"

int cmd_check(int argc, char **argv) {
    cli_error("check", "not built yet");
    return 1;
}
