/*
 * The inputs of `clattn run`, its KV cache mode (run_cache.c) and `clattn layer`: .npy files read
 * with one line naming the problem, tensors' sizes in a layout, and storage types (run.h).
 */
#include "common.h"
#include "run.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

int run_load(const cli_args *args, const char *option, npy_array *out) {
    char err[PATH_MAX + 512]; /* the path, then the problem */
    if (npy_read(args_get(args, option), out, err, sizeof err) != CLATTN_SUCCESS) {
        cli_error(args->command, "%s", err);
        return 1;
    }
    return 0;
}

int run_tensor_dims(const cli_args *args, const char *option, const npy_array *a,
                    clattn_layout layout, size_t dims[4]) {
    if (a->ndim != 4) {
        cli_error("run", "%s: expected a 4-D array (%s), got %zu-D", args_get(args, option),
                  layout == CLATTN_LAYOUT_BSHD ? "[B,N,H,D]" : "[B,H,N,D]", a->ndim);
        return 1;
    }
    if (a->dtype != NPY_F32 && a->dtype != NPY_F16 && a->dtype != NPY_U16) {
        cli_error("run", "%s: dtype %s is not supported (use <f4, <f2, or <u2 bfloat16 bits)",
                  args_get(args, option), npy_dtype_name(a->dtype));
        return 1;
    }
    int bshd = layout == CLATTN_LAYOUT_BSHD;
    dims[0] = a->shape[0];            /* B */
    dims[1] = a->shape[bshd ? 1 : 2]; /* N */
    dims[2] = a->shape[bshd ? 2 : 1]; /* H */
    dims[3] = a->shape[3];            /* D */
    return 0;
}

clattn_dtype run_storage_of(npy_dtype dtype) {
    return dtype == NPY_F16 ? CLATTN_F16 : dtype == NPY_U16 ? CLATTN_BF16 : CLATTN_F32;
}

int run_convert_array(npy_array *a, clattn_dtype from, clattn_dtype to) {
    if (from == to) return 0;
    size_t size = to == CLATTN_F32 ? 4 : 2;
    void *data = malloc(a->count * size + 1);
    if (!data) return 1;
    clattn_convert(from, a->data, to, data, a->count);
    free(a->data);
    a->data = data;
    a->dtype = to == CLATTN_F32 ? NPY_F32 : to == CLATTN_F16 ? NPY_F16 : NPY_U16;
    return 0;
}

void run_format_shape(const size_t *shape, size_t ndim, char *buf, size_t size) {
    size_t n = (size_t)snprintf(buf, size, "[");
    for (size_t i = 0; i < ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, i ? ", %zu" : "%zu", shape[i]);
    if (n < size) snprintf(buf + n, size - n, "]");
}
