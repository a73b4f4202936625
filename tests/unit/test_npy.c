/*
 * .npy reading and writing: round trips of every dtype and rank, files written by NumPy itself
 * (kept here as bytes, since CI need not have NumPy), one test per kind of malformed input
 * (each checks the status and that the message names the file and the problem), and the
 * atomicity of writes. Every test works in its own folder from mkdtemp, removed afterwards.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, mkfifo, fork, opendir, setrlimit */

#include <criterion/criterion.h>

#include "npy.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---------------------------------------------------------------- files written by NumPy 2.4 */

/* np.save(f, np.arange(6, dtype='<f4').reshape(2, 3) * 0.5) */
static const unsigned char numpy_f4_2x3[152] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63,
    0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x66, 0x34, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72, 0x74,
    0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61, 0x6c, 0x73,
    0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x32, 0x2c, 0x20,
    0x33, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x3f, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0xc0, 0x3f,
    0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x20, 0x40,
};
/* np.lib.format.write_array(f, np.array([1, -2, 3], dtype='<i4'), version=(2, 0)) */
static const unsigned char numpy_i4_v2[140] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x02, 0x00, 0x74, 0x00, 0x00, 0x00, 0x7b, 0x27, 0x64, 0x65,
    0x73, 0x63, 0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x69, 0x34, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f,
    0x72, 0x74, 0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46, 0x61,
    0x6c, 0x73, 0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x33,
    0x2c, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a,
    0x01, 0x00, 0x00, 0x00, 0xfe, 0xff, 0xff, 0xff, 0x03, 0x00, 0x00, 0x00,
};
/* np.lib.format.write_array(f, np.array([[True, False], [False, True]]), version=(3, 0)) */
static const unsigned char numpy_b1_v3[132] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x03, 0x00, 0x74, 0x00, 0x00, 0x00, 0x7b, 0x27, 0x64,
    0x65, 0x73, 0x63, 0x72, 0x27, 0x3a, 0x20, 0x27, 0x7c, 0x62, 0x31, 0x27, 0x2c, 0x20, 0x27,
    0x66, 0x6f, 0x72, 0x74, 0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a,
    0x20, 0x46, 0x61, 0x6c, 0x73, 0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27,
    0x3a, 0x20, 0x28, 0x32, 0x2c, 0x20, 0x32, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a, 0x01, 0x00, 0x00, 0x01,
};
/* np.save(f, np.array(1.5, dtype='<f2')) */
static const unsigned char numpy_f2_0d[130] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73,
    0x63, 0x72, 0x27, 0x3a, 0x20, 0x27, 0x3c, 0x66, 0x32, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f,
    0x72, 0x74, 0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46,
    0x61, 0x6c, 0x73, 0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20,
    0x28, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a, 0x00, 0x3e,
};
/* np.save(f, np.arange(5, dtype='u1')) */
static const unsigned char numpy_u1_5[133] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73,
    0x63, 0x72, 0x27, 0x3a, 0x20, 0x27, 0x7c, 0x75, 0x31, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f,
    0x72, 0x74, 0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x46,
    0x61, 0x6c, 0x73, 0x65, 0x2c, 0x20, 0x27, 0x73, 0x68, 0x61, 0x70, 0x65, 0x27, 0x3a, 0x20,
    0x28, 0x35, 0x2c, 0x29, 0x2c, 0x20, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x0a, 0x00, 0x01, 0x02, 0x03, 0x04,
};

/* ---------------------------------------------------------------- helpers */

static char dir[64];

static void make_dir(void) {
    strcpy(dir, "/tmp/clattn-npy-XXXXXX");
    cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
}

/* Removes the test's folder and what the test left in it (files and empty folders). */
static void remove_dir(void) {
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        remove(path);
    }
    closedir(d);
    rmdir(dir);
}

TestSuite(npy, .init = make_dir, .fini = remove_dir);

static void in_dir(char path[256], const char *name) {
    snprintf(path, 256, "%s/%s", dir, name);
}

/* Entries in the test's folder other than "." and "..". */
static size_t count_entries(void) {
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static void write_bytes(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(data, 1, size, f), size);
    cr_assert_eq(fclose(f), 0);
}

/* The whole file in a new buffer (*size bytes). */
static unsigned char *read_bytes(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    unsigned char *buf = malloc(1 << 16);
    cr_assert_not_null(buf);
    *size = fread(buf, 1, 1 << 16, f);
    fclose(f);
    return buf;
}

/* A file with the magic, version major.0, a length field of `header_len`, the `header_size`
 * bytes of `header` (which may disagree with header_len) and then `data`. */
static void write_npy_raw(const char *path, int major, size_t header_len, const char *header,
                          size_t header_size, const void *data, size_t data_size) {
    size_t prefix = major == 1 ? 10 : 12;
    unsigned char *buf = calloc(prefix + header_size + data_size + 1, 1);
    cr_assert_not_null(buf);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    for (size_t i = 0; i < prefix - 8; i++) buf[8 + i] = (unsigned char)(header_len >> (8 * i));
    memcpy(buf + prefix, header, header_size);
    if (data_size) memcpy(buf + prefix + header_size, data, data_size);
    write_bytes(path, buf, prefix + header_size + data_size);
    free(buf);
}

/* A version 1.0 file whose header is `dict` padded as NumPy pads it (spaces, then '\n' at a
 * multiple of 64 bytes), followed by `data_size` zero bytes. */
static void write_npy_dict(const char *path, const char *dict, size_t data_size) {
    char header[1024];
    size_t len = strlen(dict) + 1;
    len += 64 - (10 + len) % 64;
    cr_assert_lt(len, sizeof header);
    memset(header, ' ', len);
    memcpy(header, dict, strlen(dict));
    header[len - 1] = '\n';
    void *zeros = calloc(data_size + 1, 1);
    write_npy_raw(path, 1, len, header, len, zeros, data_size);
    free(zeros);
}

/* Reads `path` expecting `want`, an error "<path>: ..." whose problem part contains `word`, and
 * a zeroed array. */
static void expect_failure(const char *path, clattn_status want, const char *word) {
    npy_array a;
    char err[512];
    memset(&a, 0x5a, sizeof a);
    clattn_status status = npy_read(path, &a, err, sizeof err);
    cr_assert_eq(status, want, "got %s, want %s: %s", clattn_status_name(status),
                 clattn_status_name(want), err);
    size_t n = strlen(path);
    cr_assert(strncmp(err, path, n) == 0 && strncmp(err + n, ": ", 2) == 0,
              "message does not start with the path: %s", err);
    cr_assert_not_null(strstr(err + n, word), "message lacks \"%s\": %s", word, err);
    cr_assert(a.data == NULL && a.count == 0 && a.ndim == 0, "array not zeroed after failure");
}

/* Writes `dict` (padded) with `data_size` bytes and expects the read to fail naming `word`. */
static void expect_dict_failure(const char *dict, size_t data_size, const char *word) {
    char path[256];
    in_dir(path, "bad.npy");
    write_npy_dict(path, dict, data_size);
    expect_failure(path, CLATTN_ERR_FORMAT, word);
}

/* Reads `path` and checks dtype, shape and the data bytes. */
static void expect_array(const char *path, npy_dtype dtype, size_t ndim, const size_t *shape,
                         const void *data) {
    npy_array a;
    char err[512];
    clattn_status status = npy_read(path, &a, err, sizeof err);
    cr_assert_eq(status, CLATTN_SUCCESS, "%s: %s", clattn_status_name(status), err);
    cr_assert_eq(a.dtype, dtype);
    cr_assert_eq(a.ndim, ndim);
    size_t count = 1;
    for (size_t i = 0; i < ndim; i++) {
        cr_assert_eq(a.shape[i], shape[i], "dimension %zu: %zu, want %zu", i, a.shape[i], shape[i]);
        count *= shape[i];
    }
    cr_assert_eq(a.count, count);
    cr_assert_not_null(a.data);
    cr_assert(memcmp(a.data, data, count * npy_dtype_size(dtype)) == 0, "data differs");
    npy_free(&a);
    cr_assert_null(a.data);
}

/* ---------------------------------------------------------------- round trips */

Test(npy, dtype_names_and_sizes) {
    cr_assert_str_eq(npy_dtype_name(NPY_F32), "<f4");
    cr_assert_str_eq(npy_dtype_name(NPY_F16), "<f2");
    cr_assert_str_eq(npy_dtype_name(NPY_U8), "|u1");
    cr_assert_str_eq(npy_dtype_name(NPY_BOOL), "|b1");
    cr_assert_str_eq(npy_dtype_name(NPY_I32), "<i4");
    cr_assert_eq(npy_dtype_size(NPY_F32), 4);
    cr_assert_eq(npy_dtype_size(NPY_F16), 2);
    cr_assert_eq(npy_dtype_size(NPY_U8), 1);
    cr_assert_eq(npy_dtype_size(NPY_BOOL), 1);
    cr_assert_eq(npy_dtype_size(NPY_I32), 4);
}

Test(npy, round_trip_every_dtype) {
    static const npy_dtype dtypes[] = {NPY_F32, NPY_F16, NPY_U8, NPY_BOOL, NPY_I32};
    const size_t shape[2] = {3, 5};
    unsigned char data[3 * 5 * 4];
    char path[256], err[512];
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
        for (size_t i = 0; i < sizeof data; i++)
            data[i] =
                dtypes[d] == NPY_BOOL ? (unsigned char)(i % 3 == 0) : (unsigned char)(i * 37 + d);
        in_dir(path, npy_dtype_name(dtypes[d]) + 1);
        clattn_status status = npy_write(path, dtypes[d], 2, shape, data, err, sizeof err);
        cr_assert_eq(status, CLATTN_SUCCESS, "%s", err);
        expect_array(path, dtypes[d], 2, shape, data);
    }
}

Test(npy, round_trip_ranks_0_to_4) {
    static const size_t shapes[5][4] = {{0}, {7}, {2, 3}, {2, 3, 4}, {1, 2, 3, 5}};
    float data[2 * 3 * 4 * 5];
    for (size_t i = 0; i < 2 * 3 * 4 * 5; i++) data[i] = (float)i * 0.25f - 3.0f;
    char path[256], err[512];
    for (size_t rank = 0; rank <= 4; rank++) {
        in_dir(path, "rank.npy");
        clattn_status status = npy_write(path, NPY_F32, rank, shapes[rank], data, err, sizeof err);
        cr_assert_eq(status, CLATTN_SUCCESS, "rank %zu: %s", rank, err);
        expect_array(path, NPY_F32, rank, shapes[rank], data);
        /* NumPy's convention: the data starts at a multiple of 64 bytes. */
        size_t size, count = 1;
        for (size_t i = 0; i < rank; i++) count *= shapes[rank][i];
        free(read_bytes(path, &size));
        cr_assert_eq((size - count * 4) % 64, 0, "rank %zu: data starts at %zu", rank,
                     size - count * 4);
    }
}

Test(npy, round_trip_empty_and_eight_dims) {
    const size_t empty[2] = {0, 4}, eight[8] = {1, 2, 1, 2, 1, 2, 1, 3};
    unsigned char data[24];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)i;
    char path[256], err[512];
    in_dir(path, "empty.npy");
    cr_assert_eq(npy_write(path, NPY_F32, 2, empty, NULL, err, sizeof err), CLATTN_SUCCESS, "%s",
                 err);
    expect_array(path, NPY_F32, 2, empty, data);
    in_dir(path, "eight.npy");
    cr_assert_eq(npy_write(path, NPY_U8, 8, eight, data, err, sizeof err), CLATTN_SUCCESS, "%s",
                 err);
    expect_array(path, NPY_U8, 8, eight, data);
}

/* ---------------------------------------------------------------- NumPy's own files */

Test(npy, writes_the_same_bytes_as_numpy) {
    static const struct {
        const unsigned char *bytes;
        size_t size;
        npy_dtype dtype;
        size_t ndim, shape[2], header;
    } cases[] = {
        {numpy_f4_2x3, sizeof numpy_f4_2x3, NPY_F32, 2, {2, 3}, 128},
        {numpy_f2_0d, sizeof numpy_f2_0d, NPY_F16, 0, {0}, 128},
        {numpy_u1_5, sizeof numpy_u1_5, NPY_U8, 1, {5}, 128},
    };
    char path[256], err[512];
    in_dir(path, "same.npy");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        clattn_status status = npy_write(path, cases[c].dtype, cases[c].ndim, cases[c].shape,
                                         cases[c].bytes + cases[c].header, err, sizeof err);
        cr_assert_eq(status, CLATTN_SUCCESS, "%s", err);
        size_t size;
        unsigned char *got = read_bytes(path, &size);
        cr_assert_eq(size, cases[c].size, "case %zu: %zu bytes, NumPy wrote %zu", c, size,
                     cases[c].size);
        cr_assert(memcmp(got, cases[c].bytes, size) == 0, "case %zu: bytes differ", c);
        free(got);
    }
}

Test(npy, reads_numpy_version_1_f4) {
    const float want[6] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 2.5f};
    const size_t shape[2] = {2, 3};
    char path[256];
    in_dir(path, "v1.npy");
    write_bytes(path, numpy_f4_2x3, sizeof numpy_f4_2x3);
    expect_array(path, NPY_F32, 2, shape, want);
}

Test(npy, reads_numpy_version_2_i4) {
    const int32_t want[3] = {1, -2, 3};
    const size_t shape[1] = {3};
    char path[256];
    in_dir(path, "v2.npy");
    write_bytes(path, numpy_i4_v2, sizeof numpy_i4_v2);
    expect_array(path, NPY_I32, 1, shape, want);
}

Test(npy, reads_numpy_version_3_b1) {
    const unsigned char want[4] = {1, 0, 0, 1};
    const size_t shape[2] = {2, 2};
    char path[256];
    in_dir(path, "v3.npy");
    write_bytes(path, numpy_b1_v3, sizeof numpy_b1_v3);
    expect_array(path, NPY_BOOL, 2, shape, want);
}

Test(npy, reads_numpy_0d_f2_and_u1) {
    const uint16_t half_one_and_a_half = 0x3e00;
    const unsigned char bytes[5] = {0, 1, 2, 3, 4};
    const size_t shape[1] = {5};
    char path[256];
    in_dir(path, "0d.npy");
    write_bytes(path, numpy_f2_0d, sizeof numpy_f2_0d);
    expect_array(path, NPY_F16, 0, NULL, &half_one_and_a_half);
    in_dir(path, "u1.npy");
    write_bytes(path, numpy_u1_5, sizeof numpy_u1_5);
    expect_array(path, NPY_U8, 1, shape, bytes);
}

/* Headers other writers (or other NumPy versions, or Python 2) produce. */
Test(npy, parses_header_variants) {
    static const char *const dicts[] = {
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
        "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2, 3)}",
        "{'shape': (2, 3), 'descr': '<f4', 'fortran_order': False}",
        "{'fortran_order':False,'shape':(2,3,),'descr':'<f4',}",
        "{ 'descr' : '<f4' ,\t'fortran_order' :\nFalse , 'shape' : ( 2 , 3 ) , }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }",
    };
    const size_t shape[2] = {2, 3};
    const float zeros[6] = {0};
    char path[256];
    in_dir(path, "variant.npy");
    for (size_t i = 0; i < sizeof dicts / sizeof dicts[0]; i++) {
        write_npy_dict(path, dicts[i], 24);
        expect_array(path, NPY_F32, 2, shape, zeros);
    }
    /* A header without padding or '\n' at all. */
    const char *bare = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}";
    write_npy_raw(path, 1, strlen(bare), bare, strlen(bare), zeros, 24);
    expect_array(path, NPY_F32, 2, shape, zeros);
}

/* Data arriving through a pipe: the reader cannot know the size in advance. */
static void write_through_fifo(const char *fifo, const unsigned char *bytes, size_t size) {
    pid_t child = fork();
    cr_assert_neq(child, -1);
    if (child == 0) {
        signal(SIGPIPE, SIG_IGN);
        alarm(10); /* never outlive a reader that failed to open the pipe */
        FILE *f = fopen(fifo, "wb");
        if (f) {
            fwrite(bytes, 1, size, f);
            fclose(f);
        }
        _exit(0);
    }
}

Test(npy, reads_from_a_pipe) {
    char path[256];
    in_dir(path, "fifo");
    cr_assert_eq(mkfifo(path, 0600), 0, "mkfifo: %s", strerror(errno));
    const size_t shape[2] = {2, 3};
    write_through_fifo(path, numpy_f4_2x3, sizeof numpy_f4_2x3);
    expect_array(path, NPY_F32, 2, shape, numpy_f4_2x3 + 128);
    wait(NULL);
    write_through_fifo(path, numpy_f4_2x3, sizeof numpy_f4_2x3 - 1);
    expect_failure(path, CLATTN_ERR_FORMAT, "needs 24");
    wait(NULL);
    unsigned char longer[sizeof numpy_f4_2x3 + 4] = {0};
    memcpy(longer, numpy_f4_2x3, sizeof numpy_f4_2x3);
    write_through_fifo(path, longer, sizeof longer);
    expect_failure(path, CLATTN_ERR_FORMAT, "trailing");
    wait(NULL);
    write_through_fifo(path, numpy_f4_2x3, 60);
    expect_failure(path, CLATTN_ERR_FORMAT, "runs past the end");
    wait(NULL);
}

/* ---------------------------------------------------------------- malformed files */

Test(npy, rejects_fortran_order) {
    expect_dict_failure("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24,
                        "Fortran order");
}

Test(npy, rejects_big_endian) {
    expect_dict_failure("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", 24,
                        "big-endian");
}

Test(npy, rejects_unsupported_dtypes) {
    expect_dict_failure("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", 48,
                        "unsupported dtype '<f8'");
    expect_dict_failure("{'descr': '=f4', 'fortran_order': False, 'shape': (2, 3), }", 24,
                        "unsupported dtype '=f4'");
    expect_dict_failure("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8,
                        "structured");
}

Test(npy, rejects_bad_magic) {
    char path[256];
    in_dir(path, "magic.npy");
    unsigned char bytes[sizeof numpy_f4_2x3];
    memcpy(bytes, numpy_f4_2x3, sizeof bytes);
    bytes[5] = 'X';
    write_bytes(path, bytes, sizeof bytes);
    expect_failure(path, CLATTN_ERR_FORMAT, "not a .npy file (bad magic)");
    write_bytes(path, "PK\x03\x04", 4); /* a .npz */
    expect_failure(path, CLATTN_ERR_FORMAT, "bad magic");
    write_bytes(path, "", 0);
    expect_failure(path, CLATTN_ERR_FORMAT, "bad magic");
}

Test(npy, rejects_unsupported_versions) {
    char path[256];
    in_dir(path, "version.npy");
    unsigned char bytes[sizeof numpy_f4_2x3];
    memcpy(bytes, numpy_f4_2x3, sizeof bytes);
    bytes[6] = 4;
    write_bytes(path, bytes, sizeof bytes);
    expect_failure(path, CLATTN_ERR_FORMAT, "unsupported .npy version 4.0");
    bytes[6] = 1;
    bytes[7] = 1;
    write_bytes(path, bytes, sizeof bytes);
    expect_failure(path, CLATTN_ERR_FORMAT, "version 1.1");
    bytes[6] = 0;
    bytes[7] = 0;
    write_bytes(path, bytes, sizeof bytes);
    expect_failure(path, CLATTN_ERR_FORMAT, "version 0.0");
}

Test(npy, rejects_a_file_cut_inside_the_preamble) {
    char path[256];
    in_dir(path, "cut.npy");
    write_bytes(path, numpy_i4_v2, 11); /* version 2.0: the u32 length needs 4 bytes */
    expect_failure(path, CLATTN_ERR_FORMAT, "preamble");
}

Test(npy, rejects_a_header_longer_than_the_file) {
    char path[256], header[110], want[512];
    in_dir(path, "q.npy");
    memset(header, ' ', sizeof header);
    write_npy_raw(path, 1, 4096, header, sizeof header, NULL, 0); /* 120 bytes in all */
    expect_failure(path, CLATTN_ERR_FORMAT, "runs past the end");
    npy_array a;
    char err[512];
    npy_read(path, &a, err, sizeof err);
    snprintf(want, sizeof want, "%s: header length 4096 runs past the end of the file (120 bytes)",
             path);
    cr_assert_str_eq(err, want);
    write_npy_raw(path, 2, 0xffffffffu, header, sizeof header, NULL, 0);
    expect_failure(path, CLATTN_ERR_FORMAT, "header length 4294967295 runs past the end");
}

Test(npy, rejects_data_shorter_than_the_shape) {
    char path[256], want[512], err[512];
    in_dir(path, "k.npy");
    write_npy_dict(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 20);
    expect_failure(path, CLATTN_ERR_FORMAT, "needs 24");
    npy_array a;
    npy_read(path, &a, err, sizeof err);
    snprintf(want, sizeof want, "%s: data holds 20 bytes but shape (2, 3) of <f4 needs 24", path);
    cr_assert_str_eq(err, want);
    /* A shape far larger than the file is refused before anything is allocated. */
    expect_dict_failure("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }", 24,
                        "needs 4000000000000");
}

Test(npy, rejects_data_longer_than_the_shape) {
    expect_dict_failure("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 28,
                        "data holds 28 bytes but shape (2, 3) of <f4 needs 24 (trailing bytes)");
    expect_dict_failure("{'descr': '<f2', 'fortran_order': False, 'shape': (), }", 4,
                        "shape () of <f2 needs 2");
}

Test(npy, rejects_shapes_that_overflow) {
    if (sizeof(size_t) == 8) {
        expect_dict_failure("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, "
                            "4294967296, 4294967296), }",
                            0, "shape (4294967296, 4294967296, 4294967296) overflows");
        expect_dict_failure(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904,), }", 0,
            "overflows the byte count");
    }
    expect_dict_failure("{'descr': '|u1', 'fortran_order': False, 'shape': (3, "
                        "99999999999999999999999999), }",
                        0, "shape dimension 99999999999999999999999999 overflows");
}

Test(npy, rejects_too_many_dimensions) {
    expect_dict_failure(
        "{'descr': '|u1', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1), }", 1,
        "more than 8 dimensions");
}

Test(npy, rejects_a_missing_key) {
    expect_dict_failure("{'descr': '<f4', 'fortran_order': False, }", 4, "no 'shape' key");
    expect_dict_failure("{'fortran_order': False, 'shape': (2, 3), }", 24, "no 'descr' key");
    expect_dict_failure("{}", 4, "no 'descr' key");
}

Test(npy, rejects_an_unterminated_header) {
    expect_dict_failure("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), ", 24,
                        "unterminated");
    expect_dict_failure("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3", 24,
                        "unterminated");
    expect_dict_failure("{'descr': '<f4, 'fortran_order': False, 'shape': (2, 3), }", 24, "header");
    char path[256];
    in_dir(path, "open.npy");
    const char *open_string = "{'descr': '<f4";
    write_npy_raw(path, 1, strlen(open_string), open_string, strlen(open_string), NULL, 0);
    expect_failure(path, CLATTN_ERR_FORMAT, "unterminated");
    write_npy_raw(path, 1, 0, "", 0, NULL, 0);
    expect_failure(path, CLATTN_ERR_FORMAT, "unterminated");
}

Test(npy, rejects_a_malformed_dict) {
    expect_dict_failure("{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 3), }", 24,
                        "expected a non-negative integer");
    expect_dict_failure("{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3], }", 24,
                        "expected a shape tuple");
    expect_dict_failure("{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }", 24,
                        "expected ',' or ')'");
    expect_dict_failure("{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3), }", 24,
                        "True or False");
    expect_dict_failure("{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3), }", 24,
                        "expected ',' or '}'");
    expect_dict_failure("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}", 24,
                        "unknown key 'x'");
    expect_dict_failure("{'descr': '<f4', 'descr': '<f4', 'shape': (2, 3), }", 24,
                        "repeats key 'descr'");
    expect_dict_failure("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } x", 24,
                        "only padding");
    expect_dict_failure("('descr', '<f4')", 24, "'{'");
    char path[256];
    in_dir(path, "nul.npy");
    const char with_nul[] = "{'descr': '<f4', 'fortran_order': False,\0'shape': (2, 3), }\n";
    const float zeros[6] = {0};
    write_npy_raw(path, 1, sizeof with_nul - 1, with_nul, sizeof with_nul - 1, zeros, 24);
    expect_failure(path, CLATTN_ERR_FORMAT, "malformed header");
}

Test(npy, rejects_a_missing_file_and_a_directory) {
    char path[256];
    in_dir(path, "missing.npy");
    expect_failure(path, CLATTN_ERR_IO, "cannot open: No such file or directory");
    expect_failure(dir, CLATTN_ERR_IO, "directory");
}

/* Every prefix of a valid file is refused, never read past its end (ASan watches). */
Test(npy, rejects_every_truncation) {
    char path[256];
    in_dir(path, "short.npy");
    for (size_t len = 0; len < sizeof numpy_f4_2x3; len++) {
        write_bytes(path, numpy_f4_2x3, len);
        npy_array a;
        char err[512];
        cr_assert_eq(npy_read(path, &a, err, sizeof err), CLATTN_ERR_FORMAT, "%zu bytes: %s", len,
                     err);
        cr_assert(strncmp(err, path, strlen(path)) == 0, "%s", err);
    }
}

/* Every header byte replaced by characters that matter to the parser: each read either fails
 * with a message or yields an array the file really holds. */
Test(npy, survives_corrupted_headers) {
    static const unsigned char probes[] = {0x00, '\'', '"',  '(', ')', ',',  ':', '{',
                                           '}',  '9',  '\n', ' ', 'L', 0x80, 0xff};
    unsigned char bytes[sizeof numpy_f4_2x3];
    char path[256];
    in_dir(path, "fuzz.npy");
    for (size_t at = 6; at < 128; at++) {
        for (size_t p = 0; p < sizeof probes; p++) {
            memcpy(bytes, numpy_f4_2x3, sizeof bytes);
            bytes[at] = probes[p];
            write_bytes(path, bytes, sizeof bytes);
            npy_array a;
            char err[512];
            clattn_status status = npy_read(path, &a, err, sizeof err);
            if (status == CLATTN_SUCCESS) {
                cr_assert_eq(a.count * npy_dtype_size(a.dtype), 24, "byte %zu = %#x", at,
                             probes[p]);
                npy_free(&a);
                continue;
            }
            cr_assert_eq(status, CLATTN_ERR_FORMAT, "byte %zu = %#x: %s", at, probes[p], err);
            cr_assert(strncmp(err, path, strlen(path)) == 0, "%s", err);
        }
    }
}

/* ---------------------------------------------------------------- writing */

Test(npy, failed_write_into_a_missing_folder_leaves_nothing) {
    const size_t shape[1] = {2};
    const float data[2] = {1.0f, 2.0f};
    char path[256], err[512];
    in_dir(path, "no/such/folder.npy");
    cr_assert_eq(npy_write(path, NPY_F32, 1, shape, data, err, sizeof err), CLATTN_ERR_IO);
    cr_assert(strncmp(err, path, strlen(path)) == 0, "%s", err);
    cr_assert_not_null(strstr(err, "cannot write: No such file or directory"), "%s", err);
    cr_assert_eq(count_entries(), 0);
    cr_assert_eq(write_output_atomic(path, data, sizeof data), ENOENT);
    cr_assert_eq(count_entries(), 0);
}

Test(npy, failed_open_keeps_the_old_file) {
    const size_t shape[1] = {2};
    const float data[2] = {1.0f, 2.0f};
    char path[256], blocker[300], err[512];
    in_dir(path, "kept.npy");
    write_bytes(path, "old contents", 12);
    /* A folder where the temporary file would go makes the write fail before the rename (the
     * process's first write is number 0: each test runs in a process of its own). */
    snprintf(blocker, sizeof blocker, "%s.tmp.%ld.0", path, (long)getpid());
    cr_assert_eq(mkdir(blocker, 0700), 0);
    cr_assert_eq(npy_write(path, NPY_F32, 1, shape, data, err, sizeof err), CLATTN_ERR_IO);
    cr_assert(strncmp(err, path, strlen(path)) == 0, "%s", err);
    size_t size;
    unsigned char *got = read_bytes(path, &size);
    cr_assert(size == 12 && memcmp(got, "old contents", 12) == 0, "the old file changed");
    free(got);
    struct stat st;
    cr_assert_eq(stat(blocker, &st), 0, "the write removed what it had not created");
    cr_assert_eq(count_entries(), 2);
}

/* A write that fails halfway (at the file size limit here, as on a full disk) leaves the old
 * file as it was and no temporary file. */
Test(npy, failed_write_halfway_keeps_the_old_file) {
    static float data[4096];
    const size_t shape[1] = {4096};
    char path[256], err[512];
    in_dir(path, "kept.npy");
    write_bytes(path, "old contents", 12);
    struct rlimit limit, saved;
    cr_assert_eq(getrlimit(RLIMIT_FSIZE, &saved), 0);
    limit = saved;
    limit.rlim_cur = 1000;
    signal(SIGXFSZ, SIG_IGN); /* make the write fail with EFBIG instead of a signal */
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &limit), 0);
    clattn_status status = npy_write(path, NPY_F32, 1, shape, data, err, sizeof err);
    int e = write_output_atomic(path, data, sizeof data);
    setrlimit(RLIMIT_FSIZE, &saved);
    cr_assert_eq(status, CLATTN_ERR_IO, "%s", err);
    cr_assert(strncmp(err, path, strlen(path)) == 0, "%s", err);
    cr_assert_not_null(strstr(err, strerror(EFBIG)), "%s", err);
    cr_assert_eq(e, EFBIG);
    size_t size;
    unsigned char *got = read_bytes(path, &size);
    cr_assert(size == 12 && memcmp(got, "old contents", 12) == 0, "the old file changed");
    free(got);
    cr_assert_eq(count_entries(), 1, "a temporary file was left behind");
}

Test(npy, failed_rename_removes_the_temporary_file) {
    const size_t shape[1] = {2};
    const float data[2] = {1.0f, 2.0f};
    char path[256], err[512];
    in_dir(path, "folder.npy");
    cr_assert_eq(mkdir(path, 0700), 0); /* rename() cannot put a file over a folder */
    cr_assert_eq(npy_write(path, NPY_F32, 1, shape, data, err, sizeof err), CLATTN_ERR_IO);
    cr_assert(strncmp(err, path, strlen(path)) == 0, "%s", err);
    cr_assert_eq(count_entries(), 1, "a temporary file was left behind");
    struct stat st;
    cr_assert(stat(path, &st) == 0 && S_ISDIR(st.st_mode));
}

Test(npy, write_replaces_an_existing_file) {
    const size_t shape[2] = {2, 2};
    const int32_t data[4] = {7, -8, 9, -10};
    char path[256], err[512];
    in_dir(path, "replaced.npy");
    write_bytes(path, "an older and rather longer file than the new one will be", 56);
    cr_assert_eq(npy_write(path, NPY_I32, 2, shape, data, err, sizeof err), CLATTN_SUCCESS, "%s",
                 err);
    expect_array(path, NPY_I32, 2, shape, data);
    cr_assert_eq(count_entries(), 1, "a temporary file was left behind");
    cr_assert_eq(write_output_atomic(path, "abc", 3), 0);
    size_t size;
    unsigned char *got = read_bytes(path, &size);
    cr_assert(size == 3 && memcmp(got, "abc", 3) == 0);
    free(got);
    cr_assert_eq(count_entries(), 1);
}

Test(npy, write_rejects_bad_arguments) {
    const size_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    const size_t huge[2] = {(size_t)1 << (sizeof(size_t) * 4), (size_t)1 << (sizeof(size_t) * 4)};
    const size_t two[1] = {2};
    const float data[2] = {0};
    char path[256], err[512];
    in_dir(path, "bad.npy");
    cr_assert_eq(npy_write(path, NPY_F32, 9, nine, data, err, sizeof err),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_assert_not_null(strstr(err, "dimensions"), "%s", err);
    cr_assert_eq(npy_write(path, (npy_dtype)99, 1, two, data, err, sizeof err),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_assert_not_null(strstr(err, "dtype"), "%s", err);
    cr_assert_eq(npy_write(path, NPY_F32, 2, huge, data, err, sizeof err),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_assert_not_null(strstr(err, "overflows"), "%s", err);
    cr_assert_eq(npy_write(path, NPY_F32, 1, two, NULL, err, sizeof err),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_assert_not_null(strstr(err, "no data"), "%s", err);
    cr_assert_eq(write_output_atomic(path, NULL, 4), EINVAL);
    cr_assert_eq(count_entries(), 0);
}
