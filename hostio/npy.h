/*
 * NumPy .npy files: version 1.0 to 3.0, little-endian, C order, dtypes <f4, <f2, |u1, |b1, <i4,
 * <u2 (bfloat16 bit patterns, as NumPy has no bfloat16)
 * (a host that is not little-endian is not supported). Readers name the file and the problem
 * in `err`; writers go through a temporary file renamed into place, so a failed write never
 * leaves a partial output behind.
 */
#ifndef CLATTN_HOSTIO_NPY_H
#define CLATTN_HOSTIO_NPY_H

#include "clattn.h"
#include "outfile.h"

#include <stddef.h>

#define NPY_MAX_DIMS 8

typedef enum npy_dtype { NPY_F32, NPY_F16, NPY_U8, NPY_BOOL, NPY_I32, NPY_U16 } npy_dtype;

typedef struct npy_array {
    npy_dtype dtype;
    size_t ndim;
    size_t shape[NPY_MAX_DIMS];
    size_t count; /* product of shape (1 for a 0-d array) */
    void *data;   /* count elements of dtype, as stored in the file */
} npy_array;

/* Reads a whole .npy file into *out (zeroed on failure).
 * @return CLATTN_SUCCESS; CLATTN_ERR_IO (cannot open or read: err says why, with strerror);
 * CLATTN_ERR_FORMAT (bad magic, unsupported version, malformed header, Fortran order,
 * big-endian or unsupported dtype, a header longer than the file, data shorter or longer than
 * the shape says, a shape whose element count overflows); CLATTN_ERR_OUT_OF_MEMORY. */
clattn_status npy_read(const char *path, npy_array *out, char *err, size_t err_size);

/* Writes an array (version 1.0 header, or 2.0 when the header needs it) as outfile.h says:
 * atomically into a regular file, in place into a character device or a read FIFO.
 * @return CLATTN_SUCCESS, CLATTN_ERR_IO or CLATTN_ERR_INVALID_ARGUMENT. */
clattn_status npy_write(const char *path, npy_dtype dtype, size_t ndim, const size_t *shape,
                        const void *data, char *err, size_t err_size);

/* An .npy file as two parts for outfile_stage: a preamble (formatted into `preamble`, which
 * holds NPY_PREAMBLE_MAX bytes) and the data. @return what npy_write returns before writing;
 * `err` names `path`. */
#define NPY_PREAMBLE_MAX 512
clattn_status npy_parts(const char *path, npy_dtype dtype, size_t ndim, const size_t *shape,
                        const void *data, unsigned char preamble[NPY_PREAMBLE_MAX],
                        outfile_part parts[2], char *err, size_t err_size);

void npy_free(npy_array *a);

/* "<f4", "<f2", "|u1", "|b1", "<i4", "<u2" */
const char *npy_dtype_name(npy_dtype dtype);
size_t npy_dtype_size(npy_dtype dtype);

/* Writes `size` bytes to `path` as outfile.h says (a regular file through `path.tmp.<pid>.<n>`
 * and a rename); the CLI's other outputs. @return 0, else an errno value or OUTFILE_* code
 * (outfile_strerror); a temporary file is removed. */
int write_output_atomic(const char *path, const void *data, size_t size);

#endif
