/*
 * libFuzzer target: the row softmax (clattn_softmax) on the device, with its sizes, offsets and
 * row strides from the input: rows and cols, the dtype, the scale, where the input and output
 * matrices start and how far apart their rows are, in place or not, and an LSE buffer (absent,
 * its own, or one time in sixteen the input's buffer). Mostly valid, hostile one time in
 * sixteen. Checks: a call that breaks a rule (a size of 0, a row stride below cols, a buffer too
 * small, an output sharing bytes with another matrix other than exactly in place) is refused; an
 * accepted call gives every row's softmax and LSE of the input as it was, and writes nothing
 * past its buffers. Built and run by tests/fuzz/run.sh.
 */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_ROWS = 6, MAX_COLS = 12, LIMIT = 1 << 20 };

/* Values of a matrix stored from `offset`, `stride` apart: elements to its last + 1, or 0 when
 * that overflows or passes LIMIT. */
static size_t span_of(size_t rows, size_t cols, size_t offset, size_t stride) {
    if (!rows || !cols || cols > LIMIT || offset > LIMIT) return 0;
    if (stride && rows - 1 > LIMIT / stride) return 0;
    size_t span = offset + (rows - 1) * stride + cols;
    return span <= LIMIT ? span : 0;
}

typedef struct softmax_case {
    clattn_softmax_desc d;
    int in_place;  /* out is in's buffer */
    int lse_mode;  /* 0: none, 1: its own buffer, 2: in's buffer */
    size_t elem;   /* bytes a value (float32 for an unknown dtype) */
    size_t values; /* in's buffer (and out's, in place), in values */
} softmax_case;

static void take_case(fuzz_input *in, softmax_case *c) {
    clattn_softmax_desc *d = &c->d;
    static const float scales[] = {1.0f, 0.5f, -2.0f, 0.0f};
    clattn_softmax_desc_init(d, 1, 1);
    d->rows = take_count(in, 1, MAX_ROWS), d->cols = take_count(in, 1, MAX_COLS);
    d->dtype = (clattn_dtype)take_index32(in, 0, 2);
    d->scale = scales[take_size(in, 0, 3)];
    d->in_offset = take_count(in, 0, 4);
    d->in_row_stride = take_count(in, d->cols, d->cols + 3);
    c->in_place = take_flag(in);
    d->out_offset = c->in_place ? d->in_offset : take_count(in, 0, 4);
    d->out_row_stride = c->in_place ? d->in_row_stride : take_count(in, d->cols, d->cols + 3);
    if (c->in_place && take_byte(in) >= 240) /* in place, but shifted */
        d->out_offset += take_size(in, 1, 2 * MAX_COLS);
    size_t lse = take_size(in, 0, 15);
    c->lse_mode = lse == 0 ? 0 : lse == 15 ? 2 : 1;
    c->elem = (unsigned)d->dtype <= 2 && d->dtype != CLATTN_F32 ? 2 : 4;
}

/* Whether the library must refuse the case (1), must accept it (0), or may do either (-1). */
static int must_refuse(const softmax_case *c, size_t span_in, size_t span_out) {
    const clattn_softmax_desc *d = &c->d;
    if (!d->rows || !d->cols || (unsigned)d->dtype > 2 || !span_in || !span_out) return 1;
    if (d->rows > 1 && (d->in_row_stride < d->cols || d->out_row_stride < d->cols)) return 1;
    size_t lse_end = d->rows * sizeof(float); /* LSE's bytes, from 0 of in's buffer in mode 2 */
    if (c->lse_mode == 2 &&
        (d->in_offset * c->elem < lse_end || (c->in_place && d->out_offset * c->elem < lse_end)))
        return 1;
    int exact = d->out_offset == d->in_offset && d->out_row_stride == d->in_row_stride;
    if (c->in_place && !exact) /* disjoint spans are fine, sharing bytes is not */
        return d->out_offset < span_in && d->in_offset < span_out ? 1 : -1;
    return 0;
}

/* The softmax and LSE of row r of x as float64, against what the device wrote. */
static void expect_row(const softmax_case *c, const float *x, const float *y, const float *lse,
                       size_t r) {
    const clattn_softmax_desc *d = &c->d;
    const float *row = x + d->in_offset + r * d->in_row_stride;
    double max = -INFINITY, sum = 0;
    for (size_t j = 0; j < d->cols; j++) max = fmax(max, (double)d->scale * row[j]);
    for (size_t j = 0; j < d->cols; j++) sum += exp((double)d->scale * row[j] - max);
    double rtol = d->dtype == CLATTN_F32 ? 1e-5 : d->dtype == CLATTN_F16 ? 2e-3 : 1e-2;
    float *want = malloc(d->cols * sizeof *want);
    for (size_t j = 0; j < d->cols; j++)
        want[j] = (float)(exp((double)d->scale * row[j] - max) / sum);
    expect_close("a softmax row", y + d->out_offset + r * d->out_row_stride, want, d->cols, 1e-6,
                 rtol);
    float l = (float)(max + log(sum));
    if (lse) expect_close("a row's LSE", lse + r, &l, 1, 1e-5, 1e-5);
    free(want);
}

/* Values k/8 in [-4, 4) by index (exact in every float type), `count` of them as dtype. */
static void *make_matrix(const softmax_case *c, size_t count, float **as_float) {
    *as_float = malloc(count * sizeof **as_float);
    void *stored = malloc(count * c->elem);
    for (size_t i = 0; i < count; i++) (*as_float)[i] = (float)((i * 7) % 64) / 8.0f - 4.0f;
    clattn_convert(CLATTN_F32, *as_float, c->elem == 4 ? CLATTN_F32 : c->d.dtype, stored, count);
    return stored;
}

/* The accepted call's output (and LSE) against the input as it was. */
static void expect_softmax(const softmax_case *c, const float *x, guarded_buffer *out,
                           size_t out_values, guarded_buffer *lse) {
    void *raw = malloc(out_values * c->elem);
    guarded_read(out, raw);
    float *y = widen(c->d.dtype, raw, out_values), *l = NULL;
    if (lse->bytes) guarded_read(lse, l = malloc(lse->bytes));
    for (size_t r = 0; r < c->d.rows; r++) expect_row(c, x, y, l, r);
    free(raw), free(y), free(l);
}

static void run_input(fuzz_input *in) {
    clattn_context *ctx = fuzz_context();
    softmax_case c;
    take_case(in, &c);
    const clattn_softmax_desc *d = &c.d;
    size_t span_in = span_of(d->rows, d->cols, d->in_offset, d->in_row_stride);
    size_t span_out = span_of(d->rows, d->cols, d->out_offset, d->out_row_stride);
    int refuse = must_refuse(&c, span_in, span_out);
    size_t in_values = span_in ? span_in : 1, out_values = span_out ? span_out : 1;
    if (c.in_place) in_values = out_values = in_values > out_values ? in_values : out_values;
    size_t lse_bytes = (d->rows <= MAX_ROWS + 1 ? d->rows : 1) * sizeof(float); /* hostile */
    if (c.lse_mode == 2 && in_values * c.elem < lse_bytes)
        in_values = (lse_bytes + c.elem - 1) / c.elem; /* room for the LSE */
    float *x = NULL;
    void *stored = make_matrix(&c, in_values, &x);
    guarded_buffer inb, outb, lseb;
    guarded_create(&inb, in_values * c.elem, stored);
    guarded_create(&outb, c.in_place ? 0 : out_values * c.elem, NULL);
    guarded_create(&lseb, c.lse_mode == 1 ? lse_bytes : 0, NULL);
    cl_mem out = c.in_place ? inb.inner : outb.inner,
           lse = c.lse_mode == 2 ? inb.inner : lseb.inner;
    clattn_status s = clattn_softmax(ctx, d, inb.inner, out, lse, NULL);
    clFinish(clattn_context_queue(ctx));
    fuzz_trace("softmax %zu x %zu dtype %d in (%zu, %zu) out (%zu, %zu)%s lse %d: %s", d->rows,
               d->cols, (int)d->dtype, d->in_offset, d->in_row_stride, d->out_offset,
               d->out_row_stride, c.in_place ? " in place" : "", c.lse_mode, clattn_status_name(s));
    expect_status(ctx, s, 0, "clattn_softmax");
    if (!s && refuse == 1) fuzz_fail("clattn_softmax accepted a call that breaks a rule");
    if (s && refuse == 0)
        fuzz_fail("clattn_softmax refused a valid call: %s", clattn_context_last_error(ctx));
    guarded_check(&inb, "in"), guarded_check(&outb, "out"), guarded_check(&lseb, "LSE");
    if (!s) expect_softmax(&c, x, c.in_place ? &inb : &outb, out_values, &lseb);
    guarded_release(&inb), guarded_release(&outb), guarded_release(&lseb);
    free(x), free(stored);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_run(run_input, data, size);
    return 0;
}
