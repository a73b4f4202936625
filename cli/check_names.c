/* Names and counts of `clattn check`'s plan that both of its sides use (check.h): the parent
 * that runs rows in child processes (check_child.c) and the row runner (cmd_check.c). */
#include "check.h"

#include <stdio.h>

const char *check_path_name(clattn_path path) {
    static const char *const names[] = {"auto", "fused", "gemm", "reference"};
    return names[path];
}

size_t check_cases_run(const check_plan *plan, const sweep *s) {
    return plan->only_case >= 0 ? 1 : s->count;
}

void check_case_name(const sweep *s, long index, char *out, size_t size) {
    char what[512];
    if (index < 0 || (size_t)index >= s->count) {
        snprintf(out, size, "opening the device, before its first case");
        return;
    }
    case_describe(&s->cases[index], what, sizeof what);
    snprintf(out, size, "case %ld (%s)", index, what);
}
