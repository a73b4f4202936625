/* clattn bench: in progress. */
#include "args.h"
#include "commands.h"

int cmd_bench(int argc, char **argv) {
    cli_error("bench", "not built yet");
    return 1;
}
