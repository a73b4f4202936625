/*
 * What the libFuzzer targets over the library share (tests/fuzz/fuzz_*.c): the fuzz input read
 * as a stream of choices (sizes, indices the caller gives, some of them hostile), one context on
 * the device for the whole process, device buffers with guard bytes on both sides (a kernel that
 * writes past its buffer changes a guard; ASan cannot see device writes), and the checks that
 * turn a wrong answer into a crash libFuzzer records.
 *
 * Host arrays that the library reads (tables, lengths, layouts, index lists) are given exactly
 * the size the API documents, each from its own malloc, so that ASan reports a read past them.
 */
#ifndef CLATTN_FUZZ_HARNESS_H
#define CLATTN_FUZZ_HARNESS_H

#include "clattn.h"

#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------- the input as choices */

typedef struct fuzz_input {
    const uint8_t *data;
    size_t size, used;
} fuzz_input;

void fuzz_input_init(fuzz_input *in, const uint8_t *data, size_t size);
/* Whether bytes are left (an input is a header, then operations until it is spent). */
int fuzz_more(const fuzz_input *in);
/* The next byte; 0 once the input is spent, so that a short input takes the first choices. */
uint8_t take_byte(fuzz_input *in);
int take_flag(fuzz_input *in);
/* A value in [lo, hi] (hi - lo < 2^16), always in range: for the harness's own choices. */
size_t take_size(fuzz_input *in, size_t lo, size_t hi);
/* One of `count` values. */
size_t take_choice(fuzz_input *in, const size_t *values, size_t count);
/* A value that the caller of the API gives: in [lo, hi] for most bytes; for 1 in 16 one of the
 * hostile values: lo - 1, hi + 1, -1, 0, and the type's extremes (for sizes: 0, hi + 1, 2^31,
 * 2^32, SIZE_MAX/2, SIZE_MAX). */
int32_t take_index32(fuzz_input *in, int32_t lo, int32_t hi);
int64_t take_index64(fuzz_input *in, int64_t lo, int64_t hi);
size_t take_count(fuzz_input *in, size_t lo, size_t hi);

/* ---------------------------------------------------------------- checks */

/* Prints "FUZZ FAILURE: ..." and aborts: libFuzzer keeps the input as a crash. */
void fuzz_fail(const char *format, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Prints one line on stderr when $FUZZ_TRACE is set (to see what an input does). */
void fuzz_trace(const char *format, ...) __attribute__((format(printf, 1, 2)));

/* A call's status: success, or a refusal that names its problem on the context
 * (INVALID_ARGUMENT, or UNSUPPORTED where `unsupported_ok`). Anything else fails: with the
 * harness's small sizes no call runs out of memory or meets a driver error. @return s. */
clattn_status expect_status(clattn_context *ctx, clattn_status s, int unsupported_ok,
                            const char *call);

/* Fails unless |got - want| <= atol + rtol * |want| for every element (NaN and infinities must
 * match exactly); names the first element that does not. */
void expect_close(const char *what, const float *got, const float *want, size_t count, double atol,
                  double rtol);

/* `count` values of `dtype` widened to a new float32 array (q8_0: count a multiple of 32). */
float *widen(clattn_dtype dtype, const void *data, size_t count);

/* A copy of `bytes` bytes in an allocation of exactly that size (NULL for 0), for the host
 * arrays the library reads. */
void *exact_copy(const void *data, size_t bytes);

/* ---------------------------------------------------------------- the device */

/* The context of the whole process, on the device $CLATTN_DEVICE names (else the default); a
 * process without one fails at once, naming why. */
clattn_context *fuzz_context(void);

/* Runs `run` on the input. When the context holds more or fewer OpenCL objects afterwards (a
 * kernel built and cached, a cache entry of the library replaced: buffers and programs each hold
 * a reference to the context), runs it once more: the second run builds and replaces nothing,
 * so a count that changes again is a buffer or program leaked (or released twice). */
void fuzz_run(void (*run)(fuzz_input *in), const uint8_t *data, size_t size);

/* A buffer `bytes` long inside a larger one, between guard bytes, on the fuzz context. */
typedef struct guarded_buffer {
    cl_mem whole, inner;
    size_t bytes, guard;
} guarded_buffer;

/* Creates it, the inner bytes copied from `init` (NULL: 0x7f each), the guards a known pattern.
 * bytes may be 0 (then the inner buffer is NULL). */
void guarded_create(guarded_buffer *g, size_t bytes, const void *init);
/* Fails, naming `what` and the first byte, when a guard changed. */
void guarded_check(const guarded_buffer *g, const char *what);
/* Copies the inner bytes to host. */
void guarded_read(const guarded_buffer *g, void *host);
void guarded_release(guarded_buffer *g);

#endif
