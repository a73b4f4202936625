/* NumPy .npy reading and writing (see npy.h); every byte of an input file is untrusted. */
#define _POSIX_C_SOURCE 200809L /* fileno, fstat */

#include "npy.h"

#include "common.h"
#include "outfile.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define NPY_MAGIC         "\x93NUMPY"
#define NPY_MAGIC_LEN     6
#define NPY_ALIGN         64      /* NumPy starts the data at a multiple of 64 bytes */
#define NPY_GROWTH_DIGITS 21      /* NumPy's spare room for the first dimension to grow */
#define NPY_MAX_HEADER    1048576 /* bound for a header read from a pipe; NumPy's own is 10000 */
#define SHAPE_TEXT_MAX    200     /* "(" + 8 * "<20 digits>, " + ")" */
#define TOKEN_TEXT_MAX    40      /* how much of a key or descr an error message quotes */
/* the longest preamble: magic, version, length, the dictionary, its padding */
_Static_assert(SHAPE_TEXT_MAX + 128 + 2 * NPY_ALIGN <= NPY_PREAMBLE_MAX, "npy preamble");

static const struct {
    const char *name;
    size_t size;
} dtype_table[] = {
    [NPY_F32] = {"<f4", 4},  [NPY_F16] = {"<f2", 2}, [NPY_U8] = {"|u1", 1},
    [NPY_BOOL] = {"|b1", 1}, [NPY_I32] = {"<i4", 4}, [NPY_U16] = {"<u2", 2},
};

static int dtype_valid(npy_dtype dtype) {
    return (unsigned)dtype < ARRAY_LEN(dtype_table);
}

const char *npy_dtype_name(npy_dtype dtype) {
    return dtype_valid(dtype) ? dtype_table[dtype].name : "?";
}

size_t npy_dtype_size(npy_dtype dtype) {
    return dtype_valid(dtype) ? dtype_table[dtype].size : 0;
}

void npy_free(npy_array *a) {
    if (!a) return;
    free(a->data);
    memset(a, 0, sizeof *a);
}

/* ---------------------------------------------------------------- messages */

/* Writes "<path>: <message>" into err (which may be NULL) and returns `status`. */
static clattn_status vreport(char *err, size_t err_size, const char *path, clattn_status status,
                             const char *fmt, va_list args) {
    if (!err || err_size == 0) return status;
    int n = snprintf(err, err_size, "%s: ", path ? path : "(null)");
    if (n >= 0 && (size_t)n < err_size) vsnprintf(err + n, err_size - (size_t)n, fmt, args);
    return status;
}

static clattn_status report(char *err, size_t err_size, const char *path, clattn_status status,
                            const char *fmt, ...) PRINTF_LIKE(5, 6);
static clattn_status report(char *err, size_t err_size, const char *path, clattn_status status,
                            const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vreport(err, err_size, path, status, fmt, args);
    va_end(args);
    return status;
}

/* Python's repr of a shape tuple: "()", "(5,)", "(2, 3)". */
static void format_shape(const size_t *shape, size_t ndim, char *buf, size_t size) {
    size_t n = (size_t)snprintf(buf, size, "(");
    for (size_t i = 0; i < ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, i ? ", %zu" : "%zu", shape[i]);
    if (n < size) snprintf(buf + n, size - n, ndim == 1 ? ",)" : ")");
}

/* Copies a token from the file for an error message: printable ASCII only, cut if long. */
static void quote_token(const char *s, size_t len, char out[TOKEN_TEXT_MAX + 4]) {
    size_t n = len < TOKEN_TEXT_MAX ? len : TOKEN_TEXT_MAX;
    for (size_t i = 0; i < n; i++) out[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    strcpy(out + n, len > n ? "..." : "");
}

/* ---------------------------------------------------------------- reading: the file */

typedef struct npy_reader {
    const char *path;
    FILE *file;
    int size_known;     /* a regular file: file_size is its length */
    uint64_t file_size; /* bytes */
    uint64_t offset;    /* bytes consumed so far */
    char *err;
    size_t err_size;
} npy_reader;

static clattn_status fail(npy_reader *r, clattn_status status, const char *fmt, ...)
    PRINTF_LIKE(3, 4);
static clattn_status fail(npy_reader *r, clattn_status status, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vreport(r->err, r->err_size, r->path, status, fmt, args);
    va_end(args);
    return status;
}

static clattn_status read_error(npy_reader *r) {
    return fail(r, CLATTN_ERR_IO, "cannot read: %s", strerror(errno ? errno : EIO));
}

/* Opens the file and learns its size; a directory is refused here because fopen accepts it. */
static clattn_status reader_open(npy_reader *r) {
    struct stat st;
    r->file = fopen(r->path, "rb");
    if (!r->file) return fail(r, CLATTN_ERR_IO, "cannot open: %s", strerror(errno));
    if (fstat(fileno(r->file), &st) != 0)
        return fail(r, CLATTN_ERR_IO, "cannot stat: %s", strerror(errno));
    if (S_ISDIR(st.st_mode)) return fail(r, CLATTN_ERR_IO, "cannot read: %s", strerror(EISDIR));
    r->size_known = S_ISREG(st.st_mode);
    r->file_size = r->size_known ? (uint64_t)st.st_size : 0;
    return CLATTN_SUCCESS;
}

/* Magic "\x93NUMPY", version major.minor, header length (u16 for 1.0, u32 for 2.0 and 3.0). */
static clattn_status read_preamble(npy_reader *r, uint32_t *header_len) {
    unsigned char b[12];
    errno = 0;
    size_t got = fread(b, 1, 8, r->file);
    if (got < 8 && ferror(r->file)) return read_error(r);
    if (got < NPY_MAGIC_LEN || memcmp(b, NPY_MAGIC, NPY_MAGIC_LEN) != 0)
        return fail(r, CLATTN_ERR_FORMAT, "not a .npy file (bad magic)");
    if (got < 8) return fail(r, CLATTN_ERR_FORMAT, "file ends inside the .npy preamble");
    if (b[6] < 1 || b[6] > 3 || b[7] != 0)
        return fail(r, CLATTN_ERR_FORMAT, "unsupported .npy version %u.%u", (unsigned)b[6],
                    (unsigned)b[7]);
    size_t len_bytes = b[6] == 1 ? 2 : 4;
    got = fread(b + 8, 1, len_bytes, r->file);
    if (got < len_bytes && ferror(r->file)) return read_error(r);
    if (got < len_bytes) return fail(r, CLATTN_ERR_FORMAT, "file ends inside the .npy preamble");
    *header_len = (uint32_t)b[8] | (uint32_t)b[9] << 8;
    if (len_bytes == 4) *header_len |= (uint32_t)b[10] << 16 | (uint32_t)b[11] << 24;
    r->offset = 8 + len_bytes;
    return CLATTN_SUCCESS;
}

static clattn_status header_past_end(npy_reader *r, uint32_t len) {
    if (!r->size_known)
        return fail(r, CLATTN_ERR_FORMAT, "header length %lu runs past the end of the file",
                    (unsigned long)len);
    return fail(r, CLATTN_ERR_FORMAT,
                "header length %lu runs past the end of the file (%llu bytes)", (unsigned long)len,
                (unsigned long long)r->file_size);
}

/* Reads the header's `len` bytes into a new buffer (*text, to be freed by the caller). */
static clattn_status read_header_text(npy_reader *r, uint32_t len, char **text) {
    if (r->size_known && (r->offset > r->file_size || len > r->file_size - r->offset))
        return header_past_end(r, len);
    if (len > NPY_MAX_HEADER)
        return fail(r, CLATTN_ERR_FORMAT, "header length %lu is over the limit of %d bytes",
                    (unsigned long)len, NPY_MAX_HEADER);
    *text = malloc(len ? len : 1);
    if (!*text)
        return fail(r, CLATTN_ERR_OUT_OF_MEMORY, "out of memory for a %lu-byte header",
                    (unsigned long)len);
    errno = 0;
    if (fread(*text, 1, len, r->file) != len)
        return ferror(r->file) ? read_error(r) : header_past_end(r, len);
    r->offset += len;
    return CLATTN_SUCCESS;
}

/* ---------------------------------------------------------------- reading: the header dict */

enum { KEY_DESCR, KEY_FORTRAN_ORDER, KEY_SHAPE, NUM_KEYS };
static const char *const header_keys[NUM_KEYS] = {"descr", "fortran_order", "shape"};

typedef struct npy_header {
    int seen[NUM_KEYS];
    const char *descr; /* points into the header text; not NUL-terminated */
    size_t descr_len;
    int fortran_order;
    size_t ndim;
    size_t shape[NPY_MAX_DIMS];
} npy_header;

/* A cursor over the header text, [p, end); nothing here reads at or past `end`. */
typedef struct header_parser {
    npy_reader *r;
    const char *begin, *p, *end;
} header_parser;

static void skip_space(header_parser *hp) {
    while (hp->p < hp->end && (*hp->p == ' ' || *hp->p == '\t' || *hp->p == '\n' ||
                               *hp->p == '\r' || *hp->p == '\f' || *hp->p == '\v'))
        hp->p++;
}

/* Skips white space, then consumes `c` if it comes next. */
static int accept(header_parser *hp, char c) {
    skip_space(hp);
    if (hp->p >= hp->end || *hp->p != c) return 0;
    hp->p++;
    return 1;
}

static int at(const header_parser *hp, char c) {
    return hp->p < hp->end && *hp->p == c;
}

static int accept_word(header_parser *hp, const char *word) {
    size_t n = strlen(word);
    skip_space(hp);
    if ((size_t)(hp->end - hp->p) < n || memcmp(hp->p, word, n) != 0) return 0;
    hp->p += n;
    return 1;
}

/* The error for "`what` should come next": says where, or that the header ended early. */
static clattn_status expected(header_parser *hp, const char *what) {
    if (hp->p >= hp->end)
        return fail(hp->r, CLATTN_ERR_FORMAT,
                    "malformed header: unterminated; it ends where %s was expected", what);
    char found[TOKEN_TEXT_MAX + 4];
    quote_token(hp->p, 1, found);
    return fail(hp->r, CLATTN_ERR_FORMAT, "malformed header: expected %s at byte %zu, found '%s'",
                what, (size_t)(hp->p - hp->begin), found);
}

/* A Python string literal in single or double quotes, without escapes. */
static clattn_status parse_string(header_parser *hp, const char *what, const char **s,
                                  size_t *len) {
    skip_space(hp);
    if (!at(hp, '\'') && !at(hp, '"')) return expected(hp, what);
    char quote = *hp->p++;
    const char *start = hp->p;
    while (hp->p < hp->end && *hp->p != quote) {
        if (*hp->p == '\\' || *hp->p == '\n')
            return fail(hp->r, CLATTN_ERR_FORMAT,
                        "malformed header: escapes and line breaks in strings are not supported");
        hp->p++;
    }
    if (hp->p >= hp->end) return expected(hp, "the end of a string");
    *s = start;
    *len = (size_t)(hp->p - start);
    hp->p++;
    return CLATTN_SUCCESS;
}

/* One dimension: decimal digits, with the 'L' suffix that Python 2 wrote for longs. */
static clattn_status parse_dim(header_parser *hp, size_t *dim) {
    skip_space(hp);
    const char *start = hp->p;
    while (hp->p < hp->end && *hp->p >= '0' && *hp->p <= '9') hp->p++;
    if (hp->p == start) return expected(hp, "a non-negative integer in the shape");
    size_t value = 0;
    for (const char *d = start; d < hp->p; d++)
        if (size_mul(value, 10, &value) || size_add(value, (size_t)(*d - '0'), &value))
            return fail(hp->r, CLATTN_ERR_FORMAT, "shape dimension %.*s overflows",
                        (int)(hp->p - start < TOKEN_TEXT_MAX ? hp->p - start : TOKEN_TEXT_MAX),
                        start);
    if (at(hp, 'L')) hp->p++;
    *dim = value;
    return CLATTN_SUCCESS;
}

/* A tuple of dimensions: (), (5,), (2, 3, 4); (5) is taken as (5,). */
static clattn_status parse_shape(header_parser *hp, npy_header *h) {
    if (!accept(hp, '(')) return expected(hp, "a shape tuple");
    h->ndim = 0;
    while (!accept(hp, ')')) {
        if (h->ndim == NPY_MAX_DIMS)
            return fail(hp->r, CLATTN_ERR_FORMAT, "shape has more than %d dimensions",
                        NPY_MAX_DIMS);
        clattn_status status = parse_dim(hp, &h->shape[h->ndim++]);
        if (status != CLATTN_SUCCESS) return status;
        if (!accept(hp, ',') && !at(hp, ')')) return expected(hp, "',' or ')' in the shape");
    }
    return CLATTN_SUCCESS;
}

/* One "key: value" pair of the dict. */
static clattn_status parse_entry(header_parser *hp, npy_header *h) {
    const char *key;
    size_t len, k = 0;
    clattn_status status = parse_string(hp, "a quoted key", &key, &len);
    if (status != CLATTN_SUCCESS) return status;
    while (k < NUM_KEYS &&
           !(strlen(header_keys[k]) == len && memcmp(key, header_keys[k], len) == 0))
        k++;
    char quoted[TOKEN_TEXT_MAX + 4];
    quote_token(key, len, quoted);
    if (k == NUM_KEYS) return fail(hp->r, CLATTN_ERR_FORMAT, "header has unknown key '%s'", quoted);
    if (h->seen[k]) return fail(hp->r, CLATTN_ERR_FORMAT, "header repeats key '%s'", quoted);
    h->seen[k] = 1;
    if (!accept(hp, ':')) return expected(hp, "':' after a key");
    if (k == KEY_SHAPE) return parse_shape(hp, h);
    if (k == KEY_FORTRAN_ORDER) {
        if (accept_word(hp, "True"))
            h->fortran_order = 1;
        else if (!accept_word(hp, "False"))
            return expected(hp, "True or False");
        return CLATTN_SUCCESS;
    }
    skip_space(hp);
    if (hp->p < hp->end && !at(hp, '\'') && !at(hp, '"'))
        return fail(hp->r, CLATTN_ERR_FORMAT,
                    "header 'descr' is not a dtype string (structured dtypes are not supported)");
    return parse_string(hp, "a dtype string", &h->descr, &h->descr_len);
}

/* The dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } in any key
 * order, then nothing but white space (NumPy pads with spaces and ends with '\n'). */
static clattn_status parse_header(npy_reader *r, const char *text, size_t len, npy_header *h) {
    header_parser hp = {r, text, text, text + len};
    memset(h, 0, sizeof *h);
    if (!accept(&hp, '{')) return expected(&hp, "'{' opening the header dict");
    while (!accept(&hp, '}')) {
        clattn_status status = parse_entry(&hp, h);
        if (status != CLATTN_SUCCESS) return status;
        if (!accept(&hp, ',') && !at(&hp, '}')) return expected(&hp, "',' or '}' after a value");
    }
    skip_space(&hp);
    if (hp.p < hp.end) return expected(&hp, "only padding after the header dict");
    for (size_t k = 0; k < NUM_KEYS; k++)
        if (!h->seen[k])
            return fail(r, CLATTN_ERR_FORMAT, "header has no '%s' key", header_keys[k]);
    return CLATTN_SUCCESS;
}

/* ---------------------------------------------------------------- reading: checks and data */

static clattn_status descr_to_dtype(npy_reader *r, const npy_header *h, npy_dtype *dtype) {
    for (size_t d = 0; d < ARRAY_LEN(dtype_table); d++) {
        if (strlen(dtype_table[d].name) == h->descr_len &&
            memcmp(dtype_table[d].name, h->descr, h->descr_len) == 0) {
            *dtype = (npy_dtype)d;
            return CLATTN_SUCCESS;
        }
    }
    char quoted[TOKEN_TEXT_MAX + 4];
    quote_token(h->descr, h->descr_len, quoted);
    if (h->descr_len > 0 && h->descr[0] == '>')
        return fail(r, CLATTN_ERR_FORMAT, "big-endian data is not supported (dtype '%s')", quoted);
    return fail(r, CLATTN_ERR_FORMAT,
                "unsupported dtype '%s' (supported: <f4, <f2, |u1, |b1, <i4, <u2)", quoted);
}

/* Fills dtype, ndim, shape and count from the header; *bytes is the data size it implies. */
static clattn_status header_to_array(npy_reader *r, const npy_header *h, npy_array *a,
                                     size_t *bytes) {
    clattn_status status = descr_to_dtype(r, h, &a->dtype);
    if (status != CLATTN_SUCCESS) return status;
    if (h->fortran_order)
        return fail(r, CLATTN_ERR_FORMAT,
                    "Fortran order is not supported; save with np.ascontiguousarray");
    char shape[SHAPE_TEXT_MAX];
    format_shape(h->shape, h->ndim, shape, sizeof shape);
    a->ndim = h->ndim;
    a->count = 1;
    for (size_t i = 0; i < h->ndim; i++) {
        a->shape[i] = h->shape[i];
        if (size_mul(a->count, h->shape[i], &a->count))
            return fail(r, CLATTN_ERR_FORMAT, "shape %s overflows", shape);
    }
    if (size_mul(a->count, npy_dtype_size(a->dtype), bytes))
        return fail(r, CLATTN_ERR_FORMAT, "shape %s of %s overflows the byte count", shape,
                    npy_dtype_name(a->dtype));
    return CLATTN_SUCCESS;
}

/* "data holds H bytes but shape S of D needs N"; `at_least` when H is only a lower bound. */
static clattn_status data_size_error(npy_reader *r, const npy_array *a, uint64_t holds,
                                     int at_least, size_t needs) {
    char shape[SHAPE_TEXT_MAX];
    format_shape(a->shape, a->ndim, shape, sizeof shape);
    return fail(r, CLATTN_ERR_FORMAT, "data holds %s%llu bytes but shape %s of %s needs %zu%s",
                at_least ? "at least " : "", (unsigned long long)holds, shape,
                npy_dtype_name(a->dtype), needs, holds > needs ? " (trailing bytes)" : "");
}

/* Reads exactly `bytes` of data, sized against the file before anything is allocated. */
static clattn_status read_data(npy_reader *r, npy_array *a, size_t bytes) {
    if (r->size_known && r->file_size - r->offset != bytes)
        return data_size_error(r, a, r->file_size - r->offset, 0, bytes);
    a->data = malloc(bytes ? bytes : 1);
    if (!a->data)
        return fail(r, CLATTN_ERR_OUT_OF_MEMORY, "out of memory for %zu bytes of data", bytes);
    errno = 0;
    size_t got = fread(a->data, 1, bytes, r->file);
    if (got != bytes) return ferror(r->file) ? read_error(r) : data_size_error(r, a, got, 0, bytes);
    /* The file may have grown since fstat, or be a pipe: one more byte is an error too. */
    if (fgetc(r->file) != EOF) return data_size_error(r, a, (uint64_t)bytes + 1, 1, bytes);
    if (ferror(r->file)) return read_error(r);
    return CLATTN_SUCCESS;
}

clattn_status npy_read(const char *path, npy_array *out, char *err, size_t err_size) {
    npy_reader r = {.path = path, .err = err, .err_size = err_size};
    if (err && err_size) err[0] = '\0';
    if (out) memset(out, 0, sizeof *out);
    if (!path || !out)
        return report(err, err_size, path, CLATTN_ERR_INVALID_ARGUMENT,
                      "npy_read needs a path and an output array");
    uint32_t header_len = 0;
    char *text = NULL;
    npy_header header;
    size_t bytes = 0;
    clattn_status status = reader_open(&r);
    if (status == CLATTN_SUCCESS) status = read_preamble(&r, &header_len);
    if (status == CLATTN_SUCCESS) status = read_header_text(&r, header_len, &text);
    if (status == CLATTN_SUCCESS) status = parse_header(&r, text, header_len, &header);
    if (status == CLATTN_SUCCESS) status = header_to_array(&r, &header, out, &bytes);
    if (status == CLATTN_SUCCESS) status = read_data(&r, out, bytes);
    free(text);
    if (r.file) fclose(r.file);
    if (status != CLATTN_SUCCESS) npy_free(out);
    return status;
}

/* ---------------------------------------------------------------- writing */

int write_output_atomic(const char *path, const void *data, size_t size) {
    outfile_part part = {data, size};
    return outfile_write(path, &part, 1);
}

/* Checks npy_write's arguments and computes the data size. */
static clattn_status check_write_args(const char *path, npy_dtype dtype, size_t ndim,
                                      const size_t *shape, const void *data, size_t *bytes,
                                      char *err, size_t err_size) {
    clattn_status bad = CLATTN_ERR_INVALID_ARGUMENT;
    if (!path) return report(err, err_size, path, bad, "npy_write needs a path");
    if (!dtype_valid(dtype))
        return report(err, err_size, path, bad, "unknown dtype %d", (int)dtype);
    if (ndim > NPY_MAX_DIMS)
        return report(err, err_size, path, bad, "%zu dimensions, more than the %d supported", ndim,
                      NPY_MAX_DIMS);
    if (ndim > 0 && !shape) return report(err, err_size, path, bad, "no shape given");
    size_t count = 1;
    for (size_t i = 0; i < ndim; i++) {
        if (size_mul(count, shape[i], &count)) {
            char text[SHAPE_TEXT_MAX];
            format_shape(shape, ndim, text, sizeof text);
            return report(err, err_size, path, bad, "shape %s overflows", text);
        }
    }
    if (size_mul(count, npy_dtype_size(dtype), bytes))
        return report(err, err_size, path, bad, "data size overflows");
    if (*bytes > 0 && !data) return report(err, err_size, path, bad, "no data given");
    return CLATTN_SUCCESS;
}

/* Preamble and header exactly as NumPy's np.save writes them: keys sorted, the shape as
 * Python's repr, 21 spare spaces less the first dimension's digits, then spaces and '\n' up to
 * a multiple of 64 bytes. Version 1.0 unless the header outgrows its u16 length. */
static size_t format_preamble(npy_dtype dtype, size_t ndim, const size_t *shape, unsigned char *buf,
                              size_t size) {
    char dict[SHAPE_TEXT_MAX + 128], text[SHAPE_TEXT_MAX];
    format_shape(shape, ndim, text, sizeof text);
    int dict_len =
        snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                 npy_dtype_name(dtype), text);
    size_t len = (size_t)dict_len;
    if (ndim > 0) {
        int digits = snprintf(NULL, 0, "%zu", shape[0]);
        for (int i = digits; i < NPY_GROWTH_DIGITS && len < sizeof dict - 1; i++) dict[len++] = ' ';
    }
    size_t prefix = 10, unpadded = len + 1; /* + '\n' */
    size_t header_len = unpadded + NPY_ALIGN - (prefix + unpadded) % NPY_ALIGN;
    if (header_len > 65535) { /* too long for version 1.0's u16 length */
        prefix = 12;
        header_len = unpadded + NPY_ALIGN - (prefix + unpadded) % NPY_ALIGN;
    }
    if (prefix + header_len > size) return 0;
    memcpy(buf, NPY_MAGIC, NPY_MAGIC_LEN);
    buf[6] = prefix == 10 ? 1 : 2;
    buf[7] = 0;
    for (size_t i = 0; i < prefix - 8; i++) buf[8 + i] = (unsigned char)(header_len >> (8 * i));
    memcpy(buf + prefix, dict, len);
    memset(buf + prefix + len, ' ', header_len - len - 1);
    buf[prefix + header_len - 1] = '\n';
    return prefix + header_len;
}

clattn_status npy_parts(const char *path, npy_dtype dtype, size_t ndim, const size_t *shape,
                        const void *data, unsigned char preamble[NPY_PREAMBLE_MAX],
                        outfile_part parts[2], char *err, size_t err_size) {
    size_t bytes = 0;
    if (err && err_size) err[0] = '\0';
    clattn_status status = check_write_args(path, dtype, ndim, shape, data, &bytes, err, err_size);
    if (status != CLATTN_SUCCESS) return status;
    size_t preamble_len = format_preamble(dtype, ndim, shape, preamble, NPY_PREAMBLE_MAX);
    if (preamble_len == 0)
        return report(err, err_size, path, CLATTN_ERR_INVALID_ARGUMENT, "header too long");
    parts[0] = (outfile_part){preamble, preamble_len};
    parts[1] = (outfile_part){data, bytes};
    return CLATTN_SUCCESS;
}

clattn_status npy_write(const char *path, npy_dtype dtype, size_t ndim, const size_t *shape,
                        const void *data, char *err, size_t err_size) {
    unsigned char preamble[NPY_PREAMBLE_MAX];
    outfile_part parts[2];
    clattn_status status =
        npy_parts(path, dtype, ndim, shape, data, preamble, parts, err, err_size);
    if (status != CLATTN_SUCCESS) return status;
    int e = outfile_write(path, parts, 2);
    if (e != 0)
        return report(err, err_size, path, CLATTN_ERR_IO, "cannot write: %s", outfile_strerror(e));
    return CLATTN_SUCCESS;
}
