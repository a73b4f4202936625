/* Small helpers the programs' files share (cli/, bench/; the library keeps its own inside). */
#ifndef CLATTN_HOSTIO_COMMON_H
#define CLATTN_HOSTIO_COMMON_H

#include <stddef.h>
#include <time.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#if defined(__GNUC__)
#define PRINTF_LIKE(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define PRINTF_LIKE(fmt, args)
#endif

/* Checked size arithmetic: 1 on overflow. */
static inline int size_mul(size_t a, size_t b, size_t *out) {
    return __builtin_mul_overflow(a, b, out);
}
static inline int size_add(size_t a, size_t b, size_t *out) {
    return __builtin_add_overflow(a, b, out);
}

/* Seconds on a monotonic clock. */
static inline double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
