/*
 * What the threads test does, without Criterion, so that it also builds as a plain program
 * under -fsanitize=thread (Criterion's runner does not start under ThreadSanitizer).
 */
#ifndef CLATTN_TEST_THREADS_WORK_H
#define CLATTN_TEST_THREADS_WORK_H

#include <stddef.h>

#define THREADS 4
#define CALLS   20

/* THREADS threads create a context each (all at once), then each runs CALLS small cases on it,
 * alternating the fused and the gemm path, each against the reference. @return the failed
 * calls; the first one is described in `first`. */
size_t threads_mixed_paths(char *first, size_t size);

/* THREADS threads count and describe every device at once, first thing in the process.
 * @return the threads that did not describe all `count` devices. */
size_t threads_device_queries(size_t *count);

#endif
