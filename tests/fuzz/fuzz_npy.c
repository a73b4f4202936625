/*
 * libFuzzer target: the .npy reader (hostio/npy.c) on arbitrary bytes. The input is put in a
 * memory file and read through its /proc path, as `clattn run` reads a file: npy_read must
 * return a status and a message, never crash, overrun or leak; a success must describe the
 * data it returns. Built and run by tests/fuzz/run.sh.
 */
#define _GNU_SOURCE /* memfd_create */
#include "npy.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("fuzz-npy", 0);
        if (fd < 0) abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size) abort();
    npy_array a;
    char err[512];
    clattn_status status = npy_read(path, &a, err, sizeof err);
    if (status == CLATTN_SUCCESS) {
        size_t count = 1;
        for (size_t i = 0; i < a.ndim; i++) count *= a.shape[i];
        if (count != a.count || !a.data || a.ndim > NPY_MAX_DIMS) abort();
        volatile uint8_t sink = 0; /* every byte the array claims is readable */
        size_t bytes = a.count * npy_dtype_size(a.dtype);
        for (size_t i = 0; i < bytes; i++) sink ^= ((const uint8_t *)a.data)[i];
        (void)sink;
    } else if (!err[0] || strlen(err) >= sizeof err) {
        abort(); /* a failure names its problem */
    }
    npy_free(&a);
    return 0;
}
