/* The OpenCL sources of cl/, embedded at build time by cmake/embed_kernels.cmake. */
#ifndef CLATTN_EMBEDDED_H
#define CLATTN_EMBEDDED_H

#include <stddef.h>

struct embedded_kernel {
    const char *name;   /* file name in cl/, e.g. "softmax.cl" */
    const char *source; /* NUL-terminated */
    size_t size;        /* bytes, without the NUL */
};

/* Terminated by an entry whose name is NULL. */
extern const struct embedded_kernel clattn_embedded_kernels[];

#endif
