/* clattn_softmax: the public row softmax over a matrix in a buffer, checked here and run by the
 * row softmax kernel (kernels/softmax.h) with the gemm path's work-group rule. */
#include "kernels/softmax.h"
#include "kernels/variant.h"

#include <stdio.h>
#include <math.h>
#include <string.h>

clattn_status clattn_softmax_desc_init_sized(clattn_softmax_desc *desc, size_t struct_size,
                                             size_t rows, size_t cols) {
    clattn_softmax_desc d;
    memset(&d, 0, sizeof d);
    d.rows = rows;
    d.cols = cols;
    d.dtype = CLATTN_F32;
    d.scale = 1.0f;
    d.in_row_stride = d.out_row_stride = cols;
    if (struct_init(desc, struct_size, &d, sizeof d, sizeof d)) return CLATTN_ERR_INVALID_ARGUMENT;
    return rows && cols ? CLATTN_SUCCESS : CLATTN_ERR_INVALID_ARGUMENT;
}

/* Bytes from the matrix's offset to its last element + 1, or 0 on overflow. */
static size_t matrix_span(size_t rows, size_t cols, size_t offset, size_t row_stride, size_t elem) {
    size_t a, total, bytes;
    if (size_mul(rows - 1, row_stride, &a) || size_add(a, cols, &total) ||
        size_add(total, offset, &total) || size_mul(total, elem, &bytes))
        return 0;
    return bytes;
}

/* The output shares no byte with the input unless it is exactly the input (in place: the same
 * memory, first element and row stride, so that each work-group reads its row before it writes
 * it), and LSE shares none with either. A partial overlap would let a row be read after another
 * row's results were written over it. */
static clattn_status check_overlaps(clattn_context *ctx, const clattn_softmax_desc *d, cl_mem in,
                                    cl_mem out, cl_mem lse, size_t need_in, size_t need_out) {
    size_t elem = dtype_size(d->dtype);
    byte_range x = buffer_bytes(in, d->in_offset * elem, need_in);
    byte_range y = buffer_bytes(out, d->out_offset * elem, need_out);
    int same_rows = d->rows == 1 || d->in_row_stride == d->out_row_stride;
    int in_place = same_rows && x.root == y.root && x.begin == y.begin;
    if (!in_place && byte_ranges_overlap(&x, &y))
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "softmax: the output's bytes [%zu, %zu) overlap the input's [%zu, %zu) "
                         "of the same memory (a sub-buffer counts as its parent); out may be in "
                         "only exactly (the same offset and row stride)",
                         y.begin, y.end, x.begin, x.end);
    if (!lse) return CLATTN_SUCCESS;
    byte_range l = buffer_bytes(lse, 0, d->rows * sizeof(float));
    if (byte_ranges_overlap(&l, &x) || byte_ranges_overlap(&l, &y))
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "softmax: LSE's bytes [%zu, %zu) overlap the %s of the same memory",
                         l.begin, l.end, byte_ranges_overlap(&l, &x) ? "input" : "output");
    return CLATTN_SUCCESS;
}

static clattn_status softmax_check(clattn_context *ctx, const clattn_softmax_desc *d, cl_mem in,
                                   cl_mem out, cl_mem lse) {
    if (!d || !in || !out)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "softmax: NULL "
                         "desc or buffer");
    if (d->rows == 0 || d->cols == 0 || d->cols > UINT32_MAX)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "softmax: rows and cols must be >= 1 and cols < 2^32 (got %zu x %zu)",
                         d->rows, d->cols);
    if (!dtype_known(d->dtype))
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "softmax: unknown dtype %d",
                         (int)d->dtype);
    if (!isfinite(d->scale)) /* as attention's: NaN or an infinity makes every row NaN */
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "softmax: scale must be finite, got %g",
                         (double)d->scale);
    if ((d->rows > 1 && (d->in_row_stride < d->cols || d->out_row_stride < d->cols)))
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "softmax: row strides (in %zu, out %zu) must be >= cols (%zu)",
                         d->in_row_stride, d->out_row_stride, d->cols);
    size_t elem = dtype_size(d->dtype);
    size_t need_in = matrix_span(d->rows, d->cols, d->in_offset, d->in_row_stride, elem);
    size_t need_out = matrix_span(d->rows, d->cols, d->out_offset, d->out_row_stride, elem);
    if (!need_in || !need_out)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "softmax: sizes overflow");
    if (need_in > buffer_size(in) || need_out > buffer_size(out))
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "softmax: %zu x %zu needs %zu input and %zu output bytes; the buffers "
                         "hold %zu and %zu",
                         d->rows, d->cols, need_in, need_out, buffer_size(in), buffer_size(out));
    if (lse && buffer_size(lse) / sizeof(float) < d->rows)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "softmax: the LSE buffer holds %zu floats, %zu rows need one each",
                         buffer_size(lse) / sizeof(float), d->rows);
    return check_overlaps(ctx, d, in, out, lse, need_in, need_out);
}

static clattn_status softmax_in_call(clattn_context *ctx, const clattn_softmax_desc *given,
                                     cl_mem in, cl_mem out, cl_mem lse, cl_event *event) {
    if (!ctx) return CLATTN_ERR_INVALID_ARGUMENT;
    ctx_clear_error(ctx);
    if (event) *event = NULL;
    clattn_softmax_desc local, *d = &local;
    if (!given || struct_read(d, sizeof *d, given, given->struct_size, sizeof *d))
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "softmax: desc is NULL or its struct_size (%zu) is not sizeof "
                         "(clattn_softmax_desc): start from clattn_softmax_desc_init",
                         given ? given->struct_size : 0);
    clattn_status status = softmax_check(ctx, d, in, out, lse);
    if (status != CLATTN_SUCCESS) return status;

    tuning_params tuning; /* the gemm path's softmax is the same kernel: one work-group rule */
    variant_tuning_on(&ctx->device, variant_find(CLATTN_VARIANT_GEMM), &tuning);
    launch_limits limits = launch_limits_of_device(&ctx->device);
    char dtypes[64];
    snprintf(dtypes, sizeof dtypes, "-DIN_DTYPE=%d -DOUT_DTYPE=%d", (int)d->dtype, (int)d->dtype);
    size_t wg = 1;
    cl_kernel kernel = NULL;
    status = softmax_kernel_get(ctx, &limits, tuning.wg_size ? tuning.wg_size : 1, "softmax_rows",
                                dtypes, &wg, &kernel);
    if (status != CLATTN_SUCCESS) return status;

    cl_ulong in_offset = d->in_offset, in_stride = d->in_row_stride;
    cl_ulong out_offset = d->out_offset, out_stride = d->out_row_stride;
    cl_uint cols = (cl_uint)d->cols;
    cl_int write_lse = lse != NULL;
    kernel_args args = {kernel, 0, CL_SUCCESS};
    KARG(args, in);
    KARG(args, in_offset);
    KARG(args, in_stride);
    KARG(args, out);
    KARG(args, out_offset);
    KARG(args, out_stride);
    KARG(args, cols);
    KARG(args, d->scale);
    KARG(args, lse); /* a NULL cl_mem is a NULL pointer in the kernel */
    KARG(args, write_lse);
    if (args.err != CL_SUCCESS) return ctx_cl_error(ctx, args.err, "softmax: kernel arguments");
    size_t global = d->rows * wg;
    return kernel_launch(ctx, kernel, 1, &global, &wg, event, "softmax: launch");
}

clattn_status clattn_softmax(clattn_context *ctx, const clattn_softmax_desc *given, cl_mem in,
                             cl_mem out, cl_mem lse, cl_event *event) {
    if (!ctx) return CLATTN_ERR_INVALID_ARGUMENT;
    if (event) *event = NULL;
    if (context_enter(ctx)) return CLATTN_ERR_INVALID_ARGUMENT;
    clattn_status status = softmax_in_call(ctx, given, in, out, lse, event);
    context_leave(ctx);
    return status;
}
