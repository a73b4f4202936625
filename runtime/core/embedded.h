/* The OpenCL sources of cl/, and those the build generates, embedded at build time by
 * cmake/embed_kernels.cmake. */
#ifndef CLATTN_EMBEDDED_H
#define CLATTN_EMBEDDED_H

#include <stddef.h>

struct embedded_kernel {
    const char *name;   /* file name in cl/, e.g. "softmax.cl" */
    const char *source; /* NUL-terminated */
    size_t size;        /* bytes, without the NUL */
    int generated;      /* made by the build, not a file of cl/ */
};

/* Terminated by an entry whose name is NULL. */
extern const struct embedded_kernel clattn_embedded_kernels[];

#endif
