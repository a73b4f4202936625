/* clattn_attention_merge: a partial attention result merged into an accumulator through the
 * LSEs, on the device (cl/merge.cl), for ring attention's key/value shards. */
#include "core/core.h"
#include "plan/problem.h"

#include <string.h>

clattn_status clattn_merge_desc_init_sized(clattn_merge_desc *desc, size_t struct_size,
                                           clattn_layout layout, size_t batch, size_t heads,
                                           size_t len, size_t dim) {
    clattn_merge_desc d;
    memset(&d, 0, sizeof d);
    d.batch = batch, d.heads = heads, d.len = len, d.dim = dim;
    size_t plane = 0;
    int bad = batch == 0 || clattn_tensor_dense(&d.o, layout, heads, len, dim, 0) ||
              size_mul(heads, len, &plane);
    d.o_part = d.o;
    d.lse = (clattn_tensor){0, plane, len, 1};
    d.lse_part = d.lse;
    if (struct_init(desc, struct_size, &d, sizeof d, sizeof d)) return CLATTN_ERR_INVALID_ARGUMENT;
    return bad ? CLATTN_ERR_INVALID_ARGUMENT : CLATTN_SUCCESS;
}

/* Bytes from a float32 tensor's buffer start to its last element + 1 (first element at
 * `first`); 0 on overflow. */
static size_t tensor_end(const clattn_merge_desc *d, const clattn_tensor *t, size_t dim,
                         size_t *first) {
    size_t a, b, c, last;
    if (size_mul(d->batch - 1, t->stride_batch, &a) || size_mul(d->heads - 1, t->stride_head, &b) ||
        size_mul(d->len - 1, t->stride_seq, &c) || size_add(a, b, &last) ||
        size_add(last, c, &last) || size_add(last, t->offset, &last) ||
        size_add(last, dim, &last) || size_mul(last, sizeof(float), &last))
        return 0;
    *first = t->offset * sizeof(float);
    return last;
}

/* Sizes, extents, and the outputs apart from every other tensor. */
static clattn_status merge_check(clattn_context *ctx, const clattn_merge_desc *d, cl_mem mem[4]) {
    static const char *const names[4] = {"O", "LSE", "O_part", "LSE_part"};
    const clattn_tensor *t[4] = {&d->o, &d->lse, &d->o_part, &d->lse_part};
    size_t first[4], end[4];
    if (!d->batch || !d->heads || !d->len || !d->dim)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "merge: every size must be >= 1 (B=%zu H=%zu N=%zu D=%zu)", d->batch,
                         d->heads, d->len, d->dim);
    byte_range range[4];
    for (int i = 0; i < 4; i++) {
        end[i] = tensor_end(d, t[i], i % 2 ? 1 : d->dim, &first[i]);
        if (i % 2 && d->lse_parts && /* pairs (max, sum): twice the bytes */
            (size_mul(end[i], 2, &end[i]) || size_mul(first[i], 2, &first[i])))
            end[i] = 0;
        if (!mem[i] || !end[i])
            return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "merge: %s is %s", names[i],
                             mem[i] ? "too large (its sizes overflow)" : "NULL");
        if (end[i] > buffer_size(mem[i]))
            return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                             "merge: %s needs %zu bytes, its buffer holds %zu", names[i], end[i],
                             buffer_size(mem[i]));
        range[i] = buffer_bytes(mem[i], first[i], end[i]);
    }
    for (int out = 0; out < 2; out++) {
        /* an output's own elements apart (LSE as a [B, H, N, 1] tensor; its pairs are whole) */
        if (tensor_rows_overlap(t[out], d->batch, d->heads, d->len, out ? 1 : d->dim))
            return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                             "merge: %s's strides (batch %zu, head %zu, seq %zu) put two of its "
                             "elements in one place",
                             names[out], t[out]->stride_batch, t[out]->stride_head,
                             t[out]->stride_seq);
        for (int other = 0; other < 4; other++)
            if (other != out && byte_ranges_overlap(&range[out], &range[other]))
                return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                                 "merge: %s overlaps %s: bytes [%zu, %zu) and [%zu, %zu) of the "
                                 "same memory (a sub-buffer counts as its parent)",
                                 names[out], names[other], range[out].begin, range[out].end,
                                 range[other].begin, range[other].end);
    }
    return CLATTN_SUCCESS;
}

static clattn_status merge_launch(clattn_context *ctx, const clattn_merge_desc *d, cl_mem mem[4],
                                  cl_event *event) {
    static const char *const files[] = {"merge.cl"};
    cl_kernel kernel = NULL;
    clattn_status s = kernel_get(ctx, files, ARRAY_LEN(files), "", "merge_partials", &kernel);
    if (s != CLATTN_SUCCESS) return s;
    const clattn_tensor *t[4] = {&d->o, &d->lse, &d->o_part, &d->lse_part};
    cl_long16 at;
    for (int i = 0; i < 4; i++) {
        at.s[4 * i] = (cl_long)t[i]->offset;
        at.s[4 * i + 1] = (cl_long)t[i]->stride_batch;
        at.s[4 * i + 2] = (cl_long)t[i]->stride_head;
        at.s[4 * i + 3] = (cl_long)t[i]->stride_seq;
    }
    cl_long heads = (cl_long)d->heads, len = (cl_long)d->len, dim = (cl_long)d->dim;
    cl_int parts = d->lse_parts != 0;
    size_t rows = d->batch * d->heads * d->len;
    cl_long rows_arg = (cl_long)rows;
    kernel_args a = {kernel, 0, CL_SUCCESS};
    for (int i = 0; i < 4; i++) KARG(a, mem[i]);
    KARG(a, at);
    KARG(a, heads);
    KARG(a, len);
    KARG(a, dim);
    KARG(a, parts);
    KARG(a, rows_arg);
    if (a.err != CL_SUCCESS) return ctx_cl_error(ctx, a.err, "merge: kernel arguments");
    return kernel_launch_padded(ctx, kernel, 1, &rows, event, "merge: launch");
}

clattn_status clattn_attention_merge(clattn_context *ctx, const clattn_merge_desc *given, cl_mem o,
                                     cl_mem lse, cl_mem o_part, cl_mem lse_part, cl_event *event) {
    if (event) *event = NULL;
    if (!ctx) return CLATTN_ERR_INVALID_ARGUMENT;
    if (context_enter(ctx)) return CLATTN_ERR_INVALID_ARGUMENT;
    ctx_clear_error(ctx);
    clattn_merge_desc d;
    cl_mem mem[4] = {o, lse, o_part, lse_part};
    clattn_status s = CLATTN_SUCCESS;
    if (!given || struct_read(&d, sizeof d, given, given->struct_size, sizeof d))
        s = ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                      "merge: desc is NULL or its struct_size is wrong: start from "
                      "clattn_merge_desc_init");
    if (s == CLATTN_SUCCESS) s = merge_check(ctx, &d, mem);
    if (s == CLATTN_SUCCESS) s = merge_launch(ctx, &d, mem, event);
    context_leave(ctx);
    return s;
}
