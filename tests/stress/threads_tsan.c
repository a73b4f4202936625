/*
 * The threads test as a plain program, for the build with -fsanitize=thread (scripts/test.sh):
 * Criterion's runner does not start under ThreadSanitizer. Exits 0 when every call passed;
 * the sanitizer's reports are the script's to find.
 */
#include "threads_work.h"

#include <stdio.h>

int main(void) {
    size_t devices = 0, wrong = threads_device_queries(&devices);
    char first[512];
    size_t failed = threads_mixed_paths(first, sizeof first);
    printf("threads_tsan: %zu devices; %zu threads described them wrong; %zu of %d calls "
           "failed%s%s\n",
           devices, wrong, failed, THREADS * CALLS, failed ? "; first: " : "", first);
    return wrong == 0 && failed == 0 && devices > 0 ? 0 : 1;
}
