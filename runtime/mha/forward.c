/*
 * Running a multi-head attention layer, in three phases (clattn_mha_stats times each):
 *
 *   projection  16-bit X (and X_kv) widened to float32; Q, K, V = X W^T + b with GEMMs of the
 *               GEMM table (gemm/gemm.h; the row the weights were prepared for) straight into
 *               the layout the attention reads: self-attention writes rows
 *               [B, N, kept*Dqk + kv*Dqk + kv*Dv] holding Q, K and V side by side (Q from W_q
 *               into the first columns, K and V from W_kv into the rest), so Q is BSHD
 *               [B, N, kept, Dqk] with a row stride of the whole row, and K and V likewise (no
 *               copy); cross-attention writes Q from X and K, V from X_kv into buffers of their
 *               own. A bias is broadcast into the rows first and the GEMMs add to it.
 *   attention   clattn_attention over the kept heads (or, with a KV cache, the append of K and
 *               V and clattn_kv_cache_attention), into O [B, N, kept, Dv]
 *   output      Y = O W_o^T + b_o, one GEMM over [B*N, kept*Dv]; a 16-bit Y is narrowed from a
 *               float32 copy.
 *
 * Each GEMM row has its own limits (CLBlast's int offsets and padded copies, for one), so the
 * layer asks the row of each of its GEMMs before anything runs.
 *
 * Everything is checked before the first command is enqueued, and Y is written last.
 */
#include "mha/mha.h"

#include "api/calls.h"
#include "plan/params.h"

#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

/* ---------------------------------------------------------------- one call */

typedef struct mha_run {
    clattn_mha *m;
    mha_call call;
    clattn_attention_desc attn; /* the kept heads' attention over the scratch */
    uint8_t *layout;            /* the kept heads' block layout, when reduced */
    cl_mem x, x_kv, y;          /* the caller's */
    cl_mem x32, x_kv32;         /* float32 X and X_kv (the caller's when float32) */
    cl_mem proj, proj_kv;       /* Q (and K, V) rows; cross: K, V rows in proj_kv */
    cl_mem o, y32;              /* O; Y before narrowing (the caller's Y when float32) */
    size_t width;               /* floats a row of proj: all of Q, K, V, or Q's (cross) */
    double ms[3];               /* projection, attention, output, while timing */
    gemm_ran ran[2];            /* the GEMM rows of the projections and the output */
    double t0;
    int32_t *cache_lengths; /* a cache's lengths before the call appended to it, else NULL */
} mha_run;

/* A scratch buffer of at least `bytes`, kept by the layer (grown when a call needs more). */
static clattn_status scratch(clattn_mha *m, int slot, size_t bytes, cl_mem *out, const char *what) {
    if (m->scratch[slot] && m->scratch_bytes[slot] < bytes) {
        clReleaseMemObject(m->scratch[slot]);
        m->scratch[slot] = NULL;
    }
    if (!m->scratch[slot]) {
        clattn_status status =
            buffer_create(m->ctx, CL_MEM_READ_WRITE, bytes, NULL, &m->scratch[slot], what);
        if (status != CLATTN_SUCCESS) return status;
        m->scratch_bytes[slot] = bytes;
    }
    *out = m->scratch[slot];
    return CLATTN_SUCCESS;
}

/* Waits for a phase and adds its wall time, while the context times. */
static clattn_status phase_done(mha_run *r, int phase) {
    if (!r->m->ctx->timing) return CLATTN_SUCCESS;
    cl_int err = clFinish(r->m->ctx->queue);
    double now = seconds_now();
    r->ms[phase] += (now - r->t0) * 1e3;
    r->t0 = now;
    return err == CL_SUCCESS ? CLATTN_SUCCESS : ctx_cl_error(r->m->ctx, err, "mha: waiting");
}

/* ---------------------------------------------------------------- checks */

/* The layer's GEMMs: Q (with K and V, self-attention), K and V, and the output, with the
 * scratch buffers the run holds (NULL while checking). */
enum { GEMM_Q, GEMM_KV, GEMM_OUT, LAYER_GEMMS };

static void layer_gemms(const mha_run *r, gemm_desc g[LAYER_GEMMS]) {
    const mha_shape *s = &r->m->shape;
    const mha_weights *w = &r->m->weights;
    size_t mq = r->call.batch * r->call.len_q, mk = r->call.batch * r->call.len_k;
    size_t rows_kv = w->rows_k + w->rows_v, width = r->call.cross ? w->rows_q : w->rows_q + rows_kv;
    size_t in_o = r->m->heads.kept * s->dim_v;
    int cross = r->call.cross, bias = w->b_in != NULL;
    g[GEMM_Q] = gemm_desc_single(mq, w->rows_q, s->d_model, "mha: Q = X W_q^T");
    g[GEMM_KV] = gemm_desc_single(cross ? mk : mq, rows_kv, s->d_kv,
                                  cross ? "mha: K, V = X_kv W_kv^T" : "mha: K, V = X W_kv^T");
    g[GEMM_OUT] = gemm_desc_single(mq, s->d_model, in_o, "mha: Y = O W_o^T");
    const gemm_operand a[] = {{.buffer = r->x32, .ld = s->d_model},
                              {.buffer = cross ? r->x_kv32 : r->x32, .ld = s->d_kv},
                              {.buffer = r->o, .ld = in_o}};
    const gemm_operand c[] = {{.buffer = r->proj, .ld = width},
                              {.buffer = cross ? r->proj_kv : r->proj,
                               .offset = cross ? 0 : w->rows_q,
                               .ld = cross ? rows_kv : width},
                              {.buffer = r->y32, .ld = s->d_model}};
    const gemm_weights *weights[] = {&w->w_q, &w->w_kv, &w->w_o};
    for (int i = 0; i < LAYER_GEMMS; i++) {
        g[i].a = a[i], g[i].c = c[i], g[i].weights = weights[i];
        g[i].accumulate = i == GEMM_OUT ? w->b_o != NULL : bias;
    }
}

/* Each GEMM's row can run it (CLBlast's int offsets and padded copies, the panels' sizes),
 * checked before anything runs: CLBlast would abort the process where its copies do not fit. */
static clattn_status check_gemms(const mha_run *r) {
    gemm_desc g[LAYER_GEMMS];
    layer_gemms(r, g);
    clattn_status status = CLATTN_SUCCESS;
    for (int i = 0; status == CLATTN_SUCCESS && i < LAYER_GEMMS; i++)
        status = gemm_check(r->m->ctx, &g[i]);
    return status;
}

/* The caller's buffers and the bytes the call spans in each: X, X_kv, Y, the bias (X_kv and
 * the bias may be NULL). */
enum { CALLER_Y = 2, CALLER_BUFFERS = 4 };
typedef struct caller_buffer {
    const char *name;
    cl_mem buffer;
    size_t need;
} caller_buffer;

static void caller_buffers(const mha_run *r, caller_buffer out[CALLER_BUFFERS]) {
    const mha_call *c = &r->call;
    out[0] = (caller_buffer){"X", r->x, c->x_bytes};
    out[1] = (caller_buffer){"X_kv", r->x_kv, c->x_kv_bytes};
    out[CALLER_Y] = (caller_buffer){"Y", r->y, c->y_bytes};
    out[3] = (caller_buffer){"the bias", c->attn.bias, c->extents.bias};
}

/* The caller's buffers: present, large enough, Y sharing no byte with the inputs. */
static clattn_status check_buffers(const mha_run *r) {
    const mha_call *c = &r->call;
    caller_buffer list[CALLER_BUFFERS];
    caller_buffers(r, list);
    for (size_t i = 0; i < CALLER_BUFFERS; i++) {
        if (!list[i].buffer && (i == 1 || i == 3)) continue; /* X_kv, bias: optional */
        size_t have = buffer_size(list[i].buffer);
        if (have < list[i].need || have == 0)
            return ctx_error(r->m->ctx, CLATTN_ERR_INVALID_ARGUMENT,
                             "mha: %s needs %zu bytes (B=%zu N=%zu Nk=%zu d_model=%zu d_kv=%zu); "
                             "the buffer %s",
                             list[i].name, list[i].need, c->batch, c->len_q, c->len_k,
                             r->m->shape.d_model, r->m->shape.d_kv,
                             list[i].buffer ? "is smaller" : "is NULL");
    }
    if (buffer_read_only(r->y))
        return ctx_error(r->m->ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "mha: Y was created CL_MEM_READ_ONLY; the call writes it");
    byte_range y = buffer_bytes(r->y, 0, c->y_bytes);
    for (size_t i = 0; i < CALLER_BUFFERS; i++) {
        if (i == CALLER_Y || !list[i].buffer) continue;
        byte_range in = buffer_bytes(list[i].buffer, 0, list[i].need);
        if (byte_ranges_overlap(&y, &in))
            return ctx_error(r->m->ctx, CLATTN_ERR_INVALID_ARGUMENT,
                             "mha: Y shares memory with %s (bytes [%zu, %zu) and [%zu, %zu); a "
                             "sub-buffer counts as its parent); the output must not overlap an "
                             "input",
                             list[i].name, y.begin, y.end, in.begin, in.end);
    }
    return CLATTN_SUCCESS;
}

/* Checks the call (capacity: a KV cache's, else 0) and prepares the kept heads' attention. */
static clattn_status run_begin(mha_run *r, clattn_mha *m, const clattn_attention_desc *call,
                               size_t capacity) {
    r->m = m;
    clattn_status status = mha_call_check(&m->shape, call, r->x_kv != NULL, capacity,
                                          MHA_BIAS_BUFFER, &r->call, &m->ctx->error);
    if (status == CLATTN_SUCCESS) status = check_buffers(r);
    if (status == CLATTN_SUCCESS) status = check_gemms(r);
    if (status == CLATTN_SUCCESS)
        status = mha_pruned_attention(&r->call, &m->heads, &r->attn, &r->layout, &m->ctx->error);
    r->t0 = seconds_now();
    return status;
}

static void run_end(mha_run *r) {
    free(r->layout);
    free(r->cache_lengths);
}

/* ---------------------------------------------------------------- kernels and GEMMs */

/* convert.cl's widen_rows or narrow_rows, specialised for the storage types. */
static clattn_status convert_kernel(clattn_context *ctx, clattn_dtype in, clattn_dtype out,
                                    const char *name, cl_kernel *kernel) {
    static const char *const files[] = {ATTN_PRELUDE, "convert.cl"};
    char defines[64];
    snprintf(defines, sizeof defines, "-DIN_DTYPE=%d -DOUT_DTYPE=%d", (int)in, (int)out);
    return kernel_get(ctx, files, ARRAY_LEN(files), defines, name, kernel);
}

/* Dense float32 [rows][cols] <-> a tensor of `rows` rows, from element `offset`, `stride`
 * elements apart: widen_rows reads the tensor into dense (stride 0 repeats one row: a bias
 * broadcast), narrow_rows writes dense into it. */
typedef struct rows_copy {
    cl_kernel kernel;
    cl_mem tensor, dense;
    size_t offset, stride, rows, cols;
    const char *what;
} rows_copy;

static clattn_status copy_rows(clattn_context *ctx, const rows_copy *c) {
    cl_long offset = (cl_long)c->offset, zero = 0, stride = (cl_long)c->stride, one = 1;
    kernel_args a = {c->kernel, 0, CL_SUCCESS};
    KARG(a, c->tensor);
    KARG(a, offset);
    KARG(a, zero); /* batch stride */
    KARG(a, zero); /* head stride */
    KARG(a, stride);
    KARG(a, one);  /* heads */
    KARG(a, zero); /* first group */
    KARG(a, zero); /* first row */
    KARG(a, c->dense);
    if (a.err != CL_SUCCESS) return ctx_cl_error(ctx, a.err, c->what);
    size_t global[3] = {c->cols, c->rows, 1};
    return kernel_launch(ctx, c->kernel, 3, global, NULL, NULL, c->what);
}

/* Broadcasts a float32 bias (from element `offset`) into the dense rows [rows][cols] of dst,
 * which the GEMMs then add to. */
static clattn_status broadcast_bias(mha_run *r, cl_mem bias, size_t offset, cl_mem dst, size_t rows,
                                    size_t cols) {
    clattn_context *ctx = r->m->ctx;
    rows_copy fill = {NULL, bias, dst, offset, 0, rows, cols, "mha: broadcasting a bias"};
    clattn_status status = convert_kernel(ctx, CLATTN_F32, CLATTN_F32, "widen_rows", &fill.kernel);
    return status == CLATTN_SUCCESS ? copy_rows(ctx, &fill) : status;
}

/* ---------------------------------------------------------------- phases */

/* X (rows of `width`) as float32: the caller's buffer, or widened into scratch `slot`. */
static clattn_status float_input(mha_run *r, cl_mem x, size_t rows, size_t width, int slot,
                                 cl_mem *out) {
    clattn_context *ctx = r->m->ctx;
    *out = x;
    if (r->call.x_dtype == CLATTN_F32) return CLATTN_SUCCESS;
    rows_copy widen = {NULL, x, NULL, 0, width, rows, width, "mha: widening X"};
    clattn_status status = scratch(r->m, slot, rows * width * 4, &widen.dense, "mha: float32 X");
    if (status == CLATTN_SUCCESS)
        status = convert_kernel(ctx, r->call.x_dtype, r->call.y_dtype, "widen_rows", &widen.kernel);
    if (status == CLATTN_SUCCESS) status = copy_rows(ctx, &widen);
    *out = widen.dense;
    return status;
}

/* Q, K, V of the kept heads, and the attention's tensors over them. */
static clattn_status project_inputs(mha_run *r) {
    const mha_shape *s = &r->m->shape;
    const mha_weights *w = &r->m->weights;
    size_t mq = r->call.batch * r->call.len_q, mk = r->call.batch * r->call.len_k;
    size_t qkv = w->rows_q + w->rows_k + w->rows_v;
    r->width = r->call.cross ? w->rows_q : qkv;
    clattn_status st = float_input(r, r->x, mq, s->d_model, MHA_X32, &r->x32);
    if (!st && r->call.cross) st = float_input(r, r->x_kv, mk, s->d_kv, MHA_XKV32, &r->x_kv32);
    if (!st) st = scratch(r->m, MHA_PROJ, mq * r->width * 4, &r->proj, "mha: Q, K, V");
    if (!st && r->call.cross)
        st = scratch(r->m, MHA_PROJKV, mk * (qkv - w->rows_q) * 4, &r->proj_kv, "mha: K, V");
    if (!st && w->b_in) st = broadcast_bias(r, w->b_in, 0, r->proj, mq, r->width);
    if (!st && w->b_in && r->call.cross)
        st = broadcast_bias(r, w->b_in, w->rows_q, r->proj_kv, mk, qkv - w->rows_q);
    gemm_desc g[LAYER_GEMMS];
    layer_gemms(r, g);
    if (!st) st = gemm_run(r->m->ctx, &g[GEMM_Q], &r->ran[0]);
    if (!st) st = gemm_run(r->m->ctx, &g[GEMM_KV], NULL);
    /* the attention's tensors: BSHD rows of the projections */
    size_t kv_width = r->call.cross ? qkv - w->rows_q : qkv, k0 = r->call.cross ? 0 : w->rows_q;
    size_t nq = r->call.len_q, nk = r->call.cross ? r->call.len_k : nq; /* rows a sequence */
    clattn_tensor tq = {0, nq * r->width, s->dim_qk, r->width};
    clattn_tensor tk = {k0, nk * kv_width, s->dim_qk, kv_width};
    clattn_tensor tv = {k0 + w->rows_k, nk * kv_width, s->dim_v, kv_width};
    r->attn.q = tq, r->attn.k = tk, r->attn.v = tv;
    clattn_tensor_dense(&r->attn.o, CLATTN_LAYOUT_BSHD, r->attn.heads_q, nq, s->dim_v, 0);
    if (!r->call.cross) r->proj_kv = r->proj;
    return st;
}

/* One plane [rows][Nk] of a bias, row stride `stride`, into dense rows at dst_offset (bytes). */
static cl_int copy_bias_plane(cl_command_queue queue, cl_mem src, size_t src_offset, size_t stride,
                              cl_mem dst, size_t dst_offset, size_t rows, size_t len_k) {
    size_t row = len_k * sizeof(float);
    if (rows > 1 && stride < len_k) { /* rows that overlap: one copy a row */
        cl_int err = CL_SUCCESS;
        for (size_t i = 0; err == CL_SUCCESS && i < rows; i++)
            err = clEnqueueCopyBuffer(queue, src, dst, src_offset + i * stride * sizeof(float),
                                      dst_offset + i * row, row, 0, NULL, NULL);
        return err;
    }
    size_t src_origin[3] = {src_offset, 0, 0}, dst_origin[3] = {dst_offset, 0, 0};
    size_t region[3] = {row, rows, 1};
    return clEnqueueCopyBufferRect(queue, src, dst, src_origin, dst_origin, region,
                                   rows > 1 ? stride * sizeof(float) : 0, 0, row, 0, 0, NULL, NULL);
}

/* A bias with one plane a head, of a pruned layer: the kept heads' planes copied into scratch
 * [B or 1][kept][Nq or 1][Nk], which the attention then reads. */
static clattn_status reduce_bias(mha_run *r) {
    clattn_attention_desc *a = &r->attn;
    const clattn_tensor t = a->bias_strides;
    const mha_heads *h = &r->m->heads;
    if (!a->bias || !t.stride_head || h->kept == r->call.attn.heads_q) return CLATTN_SUCCESS;
    size_t batches = t.stride_batch ? a->batch : 1, rows = t.stride_seq ? a->len_q : 1;
    size_t plane = rows * a->len_k, bytes = batches * h->kept * plane * sizeof(float);
    cl_mem dst = NULL;
    clattn_status status = scratch(r->m, MHA_BIAS, bytes, &dst, "mha: the kept heads' bias");
    cl_int err = CL_SUCCESS;
    for (size_t b = 0; !status && !err && b < batches; b++)
        for (size_t i = 0; !err && i < h->kept; i++) {
            size_t from = t.offset + b * t.stride_batch + h->q_head[i] * t.stride_head;
            err = copy_bias_plane(r->m->ctx->queue, a->bias, from * sizeof(float), t.stride_seq,
                                  dst, (b * h->kept + i) * plane * sizeof(float), rows, a->len_k);
        }
    if (!status && err) return ctx_cl_error(r->m->ctx, err, "mha: copying the kept heads' bias");
    clattn_tensor reduced = {0, t.stride_batch ? h->kept * plane : 0, plane,
                             t.stride_seq ? a->len_k : 0};
    a->bias = dst, a->bias_strides = reduced;
    return status;
}

/* Y = O W_o^T + b_o into Y (or its float32 copy, then narrowed). */
static clattn_status project_output(mha_run *r) {
    clattn_mha *m = r->m;
    const mha_shape *s = &m->shape;
    size_t rows = r->call.batch * r->call.len_q;
    int narrow = r->call.y_dtype != CLATTN_F32;
    clattn_status st = CLATTN_SUCCESS;
    r->y32 = r->y;
    if (narrow) st = scratch(m, MHA_Y32, rows * s->d_model * 4, &r->y32, "mha: float32 Y");
    if (!st && m->weights.b_o) st = broadcast_bias(r, m->weights.b_o, 0, r->y32, rows, s->d_model);
    gemm_desc g[LAYER_GEMMS];
    layer_gemms(r, g);
    if (!st) st = gemm_run(m->ctx, &g[GEMM_OUT], &r->ran[1]);
    rows_copy y = {NULL, r->y, r->y32, 0, s->d_model, rows, s->d_model, "mha: narrowing Y"};
    if (!st && narrow)
        st = convert_kernel(m->ctx, r->call.x_dtype, r->call.y_dtype, "narrow_rows", &y.kernel);
    if (!st && narrow) st = copy_rows(m->ctx, &y);
    return st;
}

/* The attention of the kept heads into O: over Q, K, V, or with a cache, append K and V and
 * attend over the cache (sequence b's queries being its new_len[b] new rows), keeping the
 * cache's lengths from before the append in r->cache_lengths. */
static clattn_status attend(mha_run *r, clattn_kv_cache *cache, const int32_t *new_len) {
    clattn_mha *m = r->m;
    size_t rows = r->call.batch * r->call.len_q, b = r->call.batch;
    clattn_status st =
        scratch(m, MHA_O, rows * m->heads.kept * m->shape.dim_v * 4, &r->o, "mha: O");
    if (!st) st = reduce_bias(r);
    if (!st && !cache)
        return attention_in_call(m->ctx, &r->attn, r->proj, r->proj_kv, r->proj_kv, r->o, NULL,
                                 NULL);
    int32_t *saved = st ? NULL : malloc(b * sizeof *saved);
    if (!st && !saved) st = ctx_error(m->ctx, CLATTN_ERR_OUT_OF_MEMORY, "mha: cache lengths");
    if (!st) st = kv_cache_lengths_in_call(cache, saved);
    if (!st) st = kv_cache_attention_check(cache, &r->attn, new_len); /* before any row changes */
    clattn_kv_rows kv = {r->proj,    r->proj,       r->attn.k, r->attn.v,
                         CLATTN_F32, r->call.len_q, new_len};
    if (!st) st = kv_cache_append_in_call(cache, &kv);
    if (!st)
        r->cache_lengths = saved;
    else
        free(saved);
    if (!st) st = phase_done(r, 0); /* the append is part of the projection phase */
    if (!st) st = kv_cache_attention_in_call(cache, &r->attn, r->proj, new_len, r->o, NULL, NULL);
    return st;
}

/* The statistics of a call that succeeded, and its completion event. */
static clattn_status run_finish(mha_run *r, cl_event *event) {
    clattn_mha *m = r->m;
    const mha_shape *s = &m->shape;
    const mha_weights *w = &m->weights;
    if (event) {
        cl_int err = clEnqueueMarkerWithWaitList(m->ctx->queue, 0, NULL, event);
        if (err != CL_SUCCESS) return ctx_cl_error(m->ctx, err, "mha: completion event");
    }
    clattn_mha_stats *st = &m->stats;
    memset(st, 0, sizeof *st);
    st->struct_size = sizeof *st;
    st->projection_ms = r->ms[0], st->attention_ms = r->ms[1], st->output_ms = r->ms[2];
    if (m->ctx->has_stats) { /* the attention step's */
        st->variant = m->ctx->stats.variant;
        snprintf(st->kernel, sizeof st->kernel, "%s", m->ctx->stats.kernel);
    }
    st->attention_heads_q = m->heads.kept, st->attention_heads_kv = m->heads.kv;
    st->projection_gemm = r->ran[0].gemm, st->output_gemm = r->ran[1].gemm;
    snprintf(st->gemm_kernel, sizeof st->gemm_kernel, "%s", r->ran[1].kernel);
    double mq = (double)(r->call.batch * r->call.len_q);
    double mk = r->call.cross ? (double)(r->call.batch * r->call.len_k) : mq;
    st->projection_flops = (uint64_t)(2.0 * mq * (double)(w->rows_q * s->d_model) +
                                      2.0 * mk * (double)((w->rows_k + w->rows_v) * s->d_kv));
    st->output_flops =
        (uint64_t)(2.0 * mq * (double)(w->rows_q / s->dim_qk * s->dim_v) * (double)s->d_model);
    m->has_stats = 1;
    return CLATTN_SUCCESS;
}

/* The three phases of a checked call. */
static clattn_status run_phases(mha_run *r, clattn_kv_cache *cache, const int32_t *new_len,
                                cl_event *event) {
    clattn_status st = project_inputs(r);
    if (!st && !cache) st = phase_done(r, 0);
    if (!st) st = attend(r, cache, new_len);
    if (!st) st = phase_done(r, 1);
    if (!st) st = project_output(r);
    if (!st) st = phase_done(r, 2);
    if (!st) st = run_finish(r, event);
    return st;
}

static clattn_status forward_in_call(clattn_mha *m, const clattn_attention_desc *call, cl_mem x,
                                     cl_mem x_kv, cl_mem y, cl_event *event) {
    ctx_clear_error(m->ctx);
    mha_run r;
    memset(&r, 0, sizeof r);
    r.x = x, r.x_kv = x_kv, r.y = y;
    clattn_status status = run_begin(&r, m, call, 0);
    if (status == CLATTN_SUCCESS) status = run_phases(&r, NULL, NULL, event);
    run_end(&r);
    return status;
}

clattn_status clattn_mha_forward(clattn_mha *m, const clattn_attention_desc *call, cl_mem x,
                                 cl_mem x_kv, cl_mem y, cl_event *event) {
    if (event) *event = NULL;
    return m ? IN_CONTEXT(m->ctx, forward_in_call(m, call, x, x_kv, y, event))
             : CLATTN_ERR_INVALID_ARGUMENT;
}

/* A cache the layer can use: its context, B sequences, the attention's kv heads, the dims;
 * new_len within the N new rows; no byte of the caller's buffers in its storage. */
static clattn_status check_cache(const mha_run *r, clattn_kv_cache *cache, const int32_t *new_len) {
    const clattn_kv_cache_desc *cd = kv_cache_desc(cache);
    const mha_shape *s = &r->m->shape;
    if (cd->batch != r->call.batch || cd->heads_kv != r->m->heads.kv || cd->dim_qk != s->dim_qk ||
        cd->dim_v != s->dim_v)
        return ctx_error(r->m->ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "mha: the cache has B=%zu Hkv=%zu Dqk=%zu Dv=%zu; the call needs B=%zu "
                         "and the layer's attention Hkv=%zu Dqk=%zu Dv=%zu (%zu heads kept%s)",
                         cd->batch, cd->heads_kv, cd->dim_qk, cd->dim_v, r->call.batch,
                         r->m->heads.kv, s->dim_qk, s->dim_v, r->m->heads.kept,
                         r->m->heads.duplicated ? ", kv heads duplicated" : "");
    for (size_t b = 0; new_len && b < cd->batch; b++)
        if (new_len[b] < 0 || (size_t)new_len[b] > r->call.len_q)
            return ctx_error(r->m->ctx, CLATTN_ERR_INVALID_ARGUMENT,
                             "mha: new_len[%zu] = %d is not in [0, N=%zu]", b, new_len[b],
                             r->call.len_q);
    byte_range storage[2];
    kv_cache_storage(cache, storage);
    caller_buffer list[CALLER_BUFFERS];
    caller_buffers(r, list);
    for (size_t i = 0; i < CALLER_BUFFERS; i++)
        for (int kv = 0; list[i].buffer && kv < 2; kv++) {
            byte_range mine = buffer_bytes(list[i].buffer, 0, list[i].need);
            if (byte_ranges_overlap(&mine, &storage[kv]))
                return ctx_error(r->m->ctx, CLATTN_ERR_INVALID_ARGUMENT,
                                 "mha: %s shares memory with the cache's %s storage, which the "
                                 "call appends to",
                                 list[i].name, kv ? "V" : "K");
        }
    return CLATTN_SUCCESS;
}

/* Sets the cache's lengths back to those before a call that failed after its append, keeping
 * the call's message; where that fails too, the message says so, and that the cache's lengths
 * still count the appended rows. */
static void undo_append(clattn_context *ctx, clattn_kv_cache *cache, const int32_t *lengths,
                        clattn_status failed) {
    error_record failure = ctx->error;
    if (kv_cache_set_lengths_in_call(cache, lengths) == CLATTN_SUCCESS) {
        ctx->error = failure;
        return;
    }
    error_record undo = ctx->error;
    error_set(&ctx->error, failed,
              "%s; and setting the cache's lengths back failed (%s): they still count the rows "
              "this call appended",
              failure.text, undo.text);
}

static clattn_status forward_cache_in_call(clattn_mha *m, clattn_kv_cache *cache,
                                           const clattn_attention_desc *call, cl_mem x,
                                           const int32_t *new_len, cl_mem y, cl_event *event) {
    ctx_clear_error(m->ctx);
    if (!cache || kv_cache_context(cache) != m->ctx)
        return ctx_error(m->ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "mha: the cache is NULL or belongs to another context");
    mha_run r;
    memset(&r, 0, sizeof r);
    r.x = x, r.y = y;
    clattn_status status = run_begin(&r, m, call, kv_cache_desc(cache)->capacity);
    if (status == CLATTN_SUCCESS) status = check_cache(&r, cache, new_len);
    if (status == CLATTN_SUCCESS) status = run_phases(&r, cache, new_len, event);
    if (status != CLATTN_SUCCESS && r.cache_lengths) /* failed after the append: undo it */
        undo_append(m->ctx, cache, r.cache_lengths, status);
    run_end(&r);
    return status;
}

clattn_status clattn_mha_forward_cache(clattn_mha *m, clattn_kv_cache *cache,
                                       const clattn_attention_desc *call, cl_mem x,
                                       const int32_t *new_len, cl_mem y, cl_event *event) {
    if (event) *event = NULL;
    return m ? IN_CONTEXT(m->ctx, forward_cache_in_call(m, cache, call, x, new_len, y, event))
             : CLATTN_ERR_INVALID_ARGUMENT;
}

/* ---------------------------------------------------------------- host arrays */

/* Device copies of X, X_kv and the bias, and Y's buffer. */
static clattn_status upload_call(clattn_mha *m, const mha_call *c, const void *x, const void *x_kv,
                                 cl_mem b[4]) {
    const cl_mem_flags in = CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR;
    clattn_status st = CLATTN_SUCCESS;
    if (!x || (c->cross && !x_kv))
        st = ctx_error(m->ctx, CLATTN_ERR_INVALID_ARGUMENT, "mha: x (or x_kv) is NULL");
    if (!st) st = buffer_create(m->ctx, in, c->x_bytes, (void *)x, &b[0], "X");
    if (!st && c->cross) st = buffer_create(m->ctx, in, c->x_kv_bytes, (void *)x_kv, &b[1], "X_kv");
    if (!st) st = buffer_create(m->ctx, CL_MEM_READ_WRITE, c->y_bytes, NULL, &b[2], "Y");
    if (!st && c->attn.bias_host)
        st = buffer_create(m->ctx, in, c->extents.bias, (void *)c->attn.bias_host, &b[3], "bias");
    return st;
}

static clattn_status forward_host_in_call(clattn_mha *m, const clattn_attention_desc *call,
                                          const void *x, const void *x_kv, void *y) {
    ctx_clear_error(m->ctx);
    mha_call c;
    cl_mem b[4] = {NULL, NULL, NULL, NULL}; /* X, X_kv, Y, bias */
    clattn_status st =
        mha_call_check(&m->shape, call, x_kv != NULL, 0, MHA_BIAS_HOST, &c, &m->ctx->error);
    if (!st && !y) st = ctx_error(m->ctx, CLATTN_ERR_INVALID_ARGUMENT, "mha: y is NULL");
    if (!st) st = upload_call(m, &c, x, x_kv, b);
    clattn_attention_desc d; /* the caller's desc, reading the uploaded bias */
    if (!st) {
        struct_read(&d, sizeof d, call, call->struct_size, CLATTN_ATTENTION_DESC_BASE_SIZE);
        d.struct_size = sizeof d, d.bias = b[3], d.bias_host = NULL;
        st = forward_in_call(m, &d, b[0], b[1], b[2], NULL);
    }
    if (!st) st = buffer_read(m->ctx, b[2], 0, c.y_bytes, y, "mha: reading Y");
    for (int i = 0; i < 4; i++)
        if (b[i]) clReleaseMemObject(b[i]);
    return st;
}

clattn_status clattn_mha_forward_host(clattn_mha *m, const clattn_attention_desc *call,
                                      const void *x, const void *x_kv, void *y) {
    return m ? IN_CONTEXT(m->ctx, forward_host_in_call(m, call, x, x_kv, y))
             : CLATTN_ERR_INVALID_ARGUMENT;
}

/* ---------------------------------------------------------------- statistics */

/* A caller built against 0.2's header passes the struct without the GEMM fields of 0.3. */
#define MHA_STATS_BASE_SIZE offsetof(clattn_mha_stats, projection_gemm)

clattn_status clattn_mha_stats_init_sized(clattn_mha_stats *stats, size_t struct_size) {
    return struct_init_zeroed(stats, struct_size, MHA_STATS_BASE_SIZE);
}

static clattn_status last_stats_in_call(const clattn_mha *m, clattn_mha_stats *stats) {
    if (!m->has_stats || struct_write(stats, &m->stats, sizeof m->stats, MHA_STATS_BASE_SIZE))
        return CLATTN_ERR_INVALID_ARGUMENT;
    return CLATTN_SUCCESS;
}

clattn_status clattn_mha_last_stats(const clattn_mha *m, clattn_mha_stats *stats) {
    if (!m || !stats) return CLATTN_ERR_INVALID_ARGUMENT;
    return IN_CONTEXT(m->ctx, last_stats_in_call(m, stats)); /* a call may be writing them */
}
