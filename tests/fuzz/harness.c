/*
 * The shared part of the libFuzzer targets over the library: see harness.h.
 */
#include "harness.h"

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the input as choices */

/* Bytes from 240 up pick a hostile value instead of one in range (1 in 16). */
#define HOSTILE_FROM 240

void fuzz_input_init(fuzz_input *in, const uint8_t *data, size_t size) {
    in->data = data, in->size = size, in->used = 0;
}

int fuzz_more(const fuzz_input *in) {
    return in->used < in->size;
}

uint8_t take_byte(fuzz_input *in) {
    return in->used < in->size ? in->data[in->used++] : 0;
}

int take_flag(fuzz_input *in) {
    return take_byte(in) & 1;
}

size_t take_size(fuzz_input *in, size_t lo, size_t hi) {
    size_t span = hi - lo + 1, raw = take_byte(in);
    if (span > 256) raw = raw << 8 | take_byte(in);
    return lo + raw % span;
}

size_t take_choice(fuzz_input *in, const size_t *values, size_t count) {
    return values[take_size(in, 0, count - 1)];
}

/* The byte that chooses in range (below HOSTILE_FROM) or hostile; *hostile gets which. */
static int take_selector(fuzz_input *in, size_t *raw, unsigned *hostile) {
    uint8_t b = take_byte(in);
    *hostile = (unsigned)(b - HOSTILE_FROM);
    *raw = b;
    return b >= HOSTILE_FROM;
}

int32_t take_index32(fuzz_input *in, int32_t lo, int32_t hi) {
    const int64_t hostile[] = {(int64_t)lo - 1, (int64_t)hi + 1, -1, 0, INT32_MIN,
                               INT32_MAX,       (int64_t)hi + 2};
    size_t raw;
    unsigned which;
    if (take_selector(in, &raw, &which)) {
        int64_t v = hostile[which % (sizeof hostile / sizeof hostile[0])];
        return v < INT32_MIN || v > INT32_MAX ? INT32_MIN : (int32_t)v;
    }
    return (int32_t)(lo + (int64_t)(raw % (uint64_t)((int64_t)hi - lo + 1)));
}

int64_t take_index64(fuzz_input *in, int64_t lo, int64_t hi) {
    const int64_t hostile[] = {lo - 1, hi + 1, -1, 0, INT64_MIN, INT64_MAX, (int64_t)INT32_MAX + 1};
    size_t raw;
    unsigned which;
    if (take_selector(in, &raw, &which))
        return hostile[which % (sizeof hostile / sizeof hostile[0])];
    return lo + (int64_t)(raw % (uint64_t)(hi - lo + 1));
}

size_t take_count(fuzz_input *in, size_t lo, size_t hi) {
    /* Only values a check must refuse or that stay small: a large valid size would make the
     * library allocate it, as it should. */
    const size_t hostile[] = {0, hi + 1, SIZE_MAX, SIZE_MAX / 2 + 1};
    size_t raw;
    unsigned which;
    if (take_selector(in, &raw, &which)) return hostile[which % (sizeof hostile / sizeof *hostile)];
    return lo + raw % (hi - lo + 1);
}

/* ---------------------------------------------------------------- checks */

/* LLVM inside PoCL installs its own handlers for the crash signals when it first compiles (it
 * prints its stack and dies), over libFuzzer's and ASan's, which record the input. The harness
 * keeps theirs, from before the first OpenCL call, and puts them back after every input. */
static const int crash_signals[] = {SIGABRT, SIGSEGV, SIGBUS, SIGILL,
                                    SIGFPE,  SIGTRAP, SIGINT, SIGTERM};
#define NUM_CRASH_SIGNALS (sizeof crash_signals / sizeof crash_signals[0])
static struct sigaction fuzzer_handlers[NUM_CRASH_SIGNALS];
static int handlers_saved;

static void save_crash_handlers(void) {
    for (size_t i = 0; i < NUM_CRASH_SIGNALS; i++)
        sigaction(crash_signals[i], NULL, &fuzzer_handlers[i]);
    handlers_saved = 1;
}

static void restore_crash_handlers(void) {
    for (size_t i = 0; handlers_saved && i < NUM_CRASH_SIGNALS; i++)
        sigaction(crash_signals[i], &fuzzer_handlers[i], NULL);
}

void fuzz_fail(const char *format, ...) {
    restore_crash_handlers();
    va_list args;
    va_start(args, format);
    fputs("FUZZ FAILURE: ", stderr);
    vfprintf(stderr, format, args);
    fputc('\n', stderr);
    va_end(args);
    abort();
}

void fuzz_trace(const char *format, ...) {
    static int on = -1;
    if (on < 0) on = getenv("FUZZ_TRACE") != NULL;
    if (!on) return;
    va_list args;
    va_start(args, format);
    vfprintf(stderr, format, args);
    fputc('\n', stderr);
    va_end(args);
}

clattn_status expect_status(clattn_context *ctx, clattn_status s, int unsupported_ok,
                            const char *call) {
    fuzz_trace("  %s: %s %s", call, clattn_status_name(s), s ? clattn_context_last_error(ctx) : "");
    if (s == CLATTN_SUCCESS) return s;
    if (s != CLATTN_ERR_INVALID_ARGUMENT && !(unsupported_ok && s == CLATTN_ERR_UNSUPPORTED))
        fuzz_fail("%s returned %s: %s", call, clattn_status_name(s),
                  clattn_context_last_error(ctx));
    if (!clattn_context_last_error(ctx)[0])
        fuzz_fail("%s returned %s without a message", call, clattn_status_name(s));
    return s;
}

void expect_close(const char *what, const float *got, const float *want, size_t count, double atol,
                  double rtol) {
    for (size_t i = 0; i < count; i++) {
        double g = got[i], w = want[i];
        int same_special = (isnan(g) && isnan(w)) || (isinf(w) && g == w);
        if (!isfinite(w) || !isfinite(g) ? !same_special : fabs(g - w) > atol + rtol * fabs(w))
            fuzz_fail("%s: element %zu of %zu is %.9g, expected %.9g", what, i, count, g, w);
    }
}

float *widen(clattn_dtype dtype, const void *data, size_t count) {
    float *out = malloc((count ? count : 1) * sizeof *out);
    if (!out) fuzz_fail("out of host memory");
    if (count && clattn_convert(dtype, data, CLATTN_F32, out, count) != CLATTN_SUCCESS)
        fuzz_fail("clattn_convert from dtype %d refused %zu values", (int)dtype, count);
    return out;
}

void *exact_copy(const void *data, size_t bytes) {
    if (!bytes) return NULL;
    void *copy = malloc(bytes);
    if (!copy) fuzz_fail("out of host memory");
    return memcpy(copy, data, bytes);
}

/* ---------------------------------------------------------------- the device */

clattn_context *fuzz_context(void) {
    static clattn_context *ctx;
    if (ctx) return ctx;
    save_crash_handlers();
    size_t index = 0, count = 0;
    clattn_status s = clattn_device_select(NULL, &index, 1, &count);
    if (s == CLATTN_SUCCESS) s = clattn_context_create(&ctx, index);
    if (s != CLATTN_SUCCESS)
        fuzz_fail("no context on a device ($CLATTN_DEVICE, else the default): %s",
                  clattn_status_name(s));
    restore_crash_handlers();
    return ctx;
}

static cl_uint context_references(void) {
    cl_uint count = 0;
    clGetContextInfo(clattn_context_cl_context(fuzz_context()), CL_CONTEXT_REFERENCE_COUNT,
                     sizeof count, &count, NULL);
    return count;
}

void fuzz_run(void (*run)(fuzz_input *in), const uint8_t *data, size_t size) {
    fuzz_input in;
    cl_uint before = context_references();
    fuzz_input_init(&in, data, size);
    run(&in);
    restore_crash_handlers();
    cl_uint after = context_references();
    if (after == before) return;
    fuzz_trace("the context's references went from %u to %u: once more", before, after);
    fuzz_input_init(&in, data, size);
    run(&in);
    restore_crash_handlers();
    cl_uint again = context_references();
    if (again != after)
        fuzz_fail("OpenCL objects leaked: the same input, run twice, took the context's "
                  "references from %u to %u, then to %u",
                  before, after, again);
}

/* Guard bytes each side: at least 4096 (a page of the largest KV cache the fuzzers make, so a
 * write to page -1 lands in it) and the device's sub-buffer alignment. */
static size_t guard_bytes(void) {
    clattn_device_info info;
    clattn_device_info_init(&info);
    clattn_context_device_info(fuzz_context(), &info);
    cl_uint bits = 0;
    clGetDeviceInfo(info.device, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof bits, &bits, NULL);
    return bits / 8 > 4096 ? bits / 8 : 4096;
}

#define GUARD_BYTE 0xa5

void guarded_create(guarded_buffer *g, size_t bytes, const void *init) {
    static size_t guard;
    if (!guard) guard = guard_bytes();
    memset(g, 0, sizeof *g);
    g->bytes = bytes, g->guard = guard;
    size_t total = bytes + 2 * guard;
    unsigned char *host = malloc(total);
    if (!host) fuzz_fail("out of host memory");
    memset(host, GUARD_BYTE, total);
    if (init)
        memcpy(host + guard, init, bytes);
    else
        memset(host + guard, 0x7f, bytes);
    cl_int err = CL_SUCCESS;
    cl_context cl = clattn_context_cl_context(fuzz_context());
    g->whole = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, total, host, &err);
    free(host);
    if (err != CL_SUCCESS) fuzz_fail("clCreateBuffer(%zu bytes): %d", total, err);
    if (!bytes) return;
    cl_buffer_region region = {guard, bytes};
    g->inner =
        clCreateSubBuffer(g->whole, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &region, &err);
    if (err != CL_SUCCESS) fuzz_fail("clCreateSubBuffer(%zu at %zu): %d", bytes, guard, err);
}

void guarded_check(const guarded_buffer *g, const char *what) {
    size_t total = g->bytes + 2 * g->guard;
    unsigned char *host = malloc(total);
    if (!host) fuzz_fail("out of host memory");
    cl_int err = clEnqueueReadBuffer(clattn_context_queue(fuzz_context()), g->whole, CL_TRUE, 0,
                                     total, host, 0, NULL, NULL);
    if (err != CL_SUCCESS) fuzz_fail("reading %s back: %d", what, err);
    for (size_t i = 0; i < total; i++) {
        if (i == g->guard) i += g->bytes; /* skip the inner bytes */
        if (i < total && host[i] != GUARD_BYTE)
            fuzz_fail("%s: a write past its %zu bytes, at byte %+lld of it", what, g->bytes,
                      i < g->guard ? (long long)i - (long long)g->guard
                                   : (long long)(i - g->guard));
    }
    free(host);
}

void guarded_read(const guarded_buffer *g, void *host) {
    if (!g->bytes) return;
    cl_int err = clEnqueueReadBuffer(clattn_context_queue(fuzz_context()), g->inner, CL_TRUE, 0,
                                     g->bytes, host, 0, NULL, NULL);
    if (err != CL_SUCCESS) fuzz_fail("reading a buffer back: %d", err);
}

void guarded_release(guarded_buffer *g) {
    if (g->inner) clReleaseMemObject(g->inner);
    if (g->whole) clReleaseMemObject(g->whole);
    memset(g, 0, sizeof *g);
}
