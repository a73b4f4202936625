/*
 * One part of a ring attention on one context (clattn_ring). The part holds its query shard,
 * one or two chunks of rows of the whole call, on the device, with the float32 O and LSE it
 * accumulates. Each key/value shard it is given is uploaded and attended chunk against chunk:
 * every (query chunk, key chunk) pair is a shard call of clattn_attention (the desc's q_start,
 * k_start, full_len_q and full_len_k put the masks at whole-sequence positions), skipped when
 * its mask allows no pair, and merged into the accumulators by clattn_attention_merge. The
 * arrays the caller gives are dense in the ring's layout: [B, rows, H, D] (BSHD) or
 * [B, H, rows, D] (BHSD).
 */
#include "ring/ring.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct clattn_ring {
    clattn_context *ctx;
    clattn_attention_desc whole; /* the whole call; its host arrays stay the caller's */
    clattn_layout layout;
    size_t parts;
    clattn_shard q_rows;
    clattn_shard *k_rows;    /* [parts] */
    uint8_t *attended;       /* [parts] */
    size_t max_k_rows;       /* the longest key/value shard of any part */
    cl_mem q, k, v;          /* the query shard; the key/value shard in hand */
    cl_mem o_acc, lse_acc;   /* float32 [B, rows, Hq, Dv] in the layout, [B, Hq, rows] */
    cl_mem o_part, lse_part; /* one chunk's call: float32, dense, the longest chunk's size */
    cl_mem bias[2];          /* each query chunk's rows of the bias, every key */
    clattn_tensor bias_rows[2];
};

/* Row where query chunk a starts in the part's shard arrays. */
static size_t chunk_row(const clattn_shard *s, int a) {
    return a == 0 ? 0 : s->len[0];
}

/* A tensor of `rows` rows dense in the ring's layout, from row `row0` on. */
static clattn_tensor shard_tensor(const clattn_ring *r, size_t heads, size_t rows, size_t dim,
                                  size_t row0) {
    clattn_tensor t = {0, 0, 0, 0};
    clattn_tensor_dense(&t, r->layout, heads, rows ? rows : 1, dim, 0);
    t.offset = row0 * t.stride_seq;
    return t;
}

static size_t tensor_bytes(size_t batch, size_t heads, size_t rows, size_t dim, size_t elem) {
    size_t n = 0;
    if (size_mul(batch, heads, &n) || size_mul(n, rows, &n) || size_mul(n, dim, &n) ||
        size_mul(n, elem, &n))
        return 0;
    return n;
}

static clattn_status ring_buffer(clattn_ring *r, size_t bytes, void *host, cl_mem *out,
                                 const char *what) {
    if (bytes == 0) return ctx_error(r->ctx, CLATTN_ERR_OUT_OF_MEMORY, "ring: %s overflows", what);
    cl_mem_flags flags = CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0);
    return buffer_create(r->ctx, flags, bytes, host, out, what);
}

/* The rows [start, start + len) of the whole bias, every key, as a dense array that keeps the
 * bias's broadcasts (a zero stride stays zero). */
static clattn_status gather_bias(clattn_ring *r, int a) {
    const clattn_attention_desc *w = &r->whole;
    const clattn_tensor *t = &w->bias_strides;
    size_t nb = t->stride_batch ? w->batch : 1, nh = t->stride_head ? w->heads_q : 1;
    size_t len = r->q_rows.len[a], nl = t->stride_seq ? len : 1, nk = w->len_k;
    size_t bytes = tensor_bytes(nb, nh, nl, nk, sizeof(float));
    float *rows = bytes ? malloc(bytes) : NULL;
    if (!rows) return ctx_error(r->ctx, CLATTN_ERR_OUT_OF_MEMORY, "ring: bias rows");
    for (size_t b = 0; b < nb; b++)
        for (size_t h = 0; h < nh; h++)
            for (size_t i = 0; i < nl; i++)
                memcpy(rows + ((b * nh + h) * nl + i) * nk,
                       w->bias_host + t->offset + b * t->stride_batch + h * t->stride_head +
                           (r->q_rows.start[a] + i) * t->stride_seq,
                       nk * sizeof(float));
    r->bias_rows[a] = (clattn_tensor){0, t->stride_batch ? nh * nl * nk : 0,
                                      t->stride_head ? nl * nk : 0, t->stride_seq ? nk : 0};
    clattn_status s = ring_buffer(r, bytes, rows, &r->bias[a], "bias rows");
    free(rows);
    return s;
}

/* The query shard, the accumulators (O = 0, LSE = -inf), a chunk's outputs, the key/value
 * buffers of the longest shard, the bias rows. */
static clattn_status ring_allocate(clattn_ring *r, const void *q_shard) {
    const clattn_attention_desc *w = &r->whole;
    size_t rows = r->q_rows.rows,
           chunk = r->q_rows.len[0] > r->q_rows.len[1] ? r->q_rows.len[0] : r->q_rows.len[1];
    size_t kv = r->max_k_rows ? r->max_k_rows : 1, elem = dtype_size(w->dtype);
    float *init = NULL;
    size_t lse_bytes = tensor_bytes(w->batch, w->heads_q, rows ? rows : 1, 1, sizeof(float));
    size_t o_bytes = tensor_bytes(w->batch, w->heads_q, rows ? rows : 1, w->dim_v, sizeof(float));
    clattn_status s = o_bytes && lse_bytes ? CLATTN_SUCCESS
                                           : ctx_error(r->ctx, CLATTN_ERR_OUT_OF_MEMORY,
                                                       "ring: the accumulators' sizes overflow");
    if (!s && !(init = calloc(1, o_bytes > lse_bytes ? o_bytes : lse_bytes)))
        s = ctx_error(r->ctx, CLATTN_ERR_OUT_OF_MEMORY, "ring: %zu bytes", o_bytes);
    if (!s) s = ring_buffer(r, o_bytes, init, &r->o_acc, "O accumulator");
    for (size_t i = 0; !s && i < lse_bytes / sizeof(float); i++) init[i] = -INFINITY;
    if (!s) s = ring_buffer(r, lse_bytes, init, &r->lse_acc, "LSE accumulator");
    free(init);
    size_t qb = tensor_bytes(w->batch, w->heads_q, rows ? rows : 1, w->dim_qk, elem);
    if (!s) s = ring_buffer(r, qb, rows ? (void *)q_shard : NULL, &r->q, "query shard");
    if (!s)
        s = ring_buffer(r, tensor_bytes(w->batch, w->heads_q, chunk ? chunk : 1, w->dim_v, 4), NULL,
                        &r->o_part, "a chunk's O");
    if (!s)
        s = ring_buffer(r, tensor_bytes(w->batch, w->heads_q, chunk ? chunk : 1, 1, 4), NULL,
                        &r->lse_part, "a chunk's LSE");
    if (!s)
        s = ring_buffer(r, tensor_bytes(w->batch, w->heads_kv, kv, w->dim_qk, elem), NULL, &r->k,
                        "key shard");
    if (!s)
        s = ring_buffer(r, tensor_bytes(w->batch, w->heads_kv, kv, w->dim_v, elem), NULL, &r->v,
                        "value shard");
    for (int a = 0; a < 2 && !s; a++)
        if (w->bias_host && r->q_rows.len[a]) s = gather_bias(r, a);
    return s;
}

static clattn_status ring_plan(clattn_ring *r, clattn_sharding sharding, size_t part) {
    r->k_rows = calloc(r->parts, sizeof *r->k_rows);
    r->attended = calloc(r->parts, 1);
    if (!r->k_rows || !r->attended)
        return ctx_error(r->ctx, CLATTN_ERR_OUT_OF_MEMORY, "ring: %zu parts", r->parts);
    clattn_status s =
        ring_shards(&r->whole, sharding, r->parts, part, &r->ctx->error, &r->q_rows, NULL);
    for (size_t p = 0; p < r->parts && s == CLATTN_SUCCESS; p++) {
        s = ring_shards(&r->whole, sharding, r->parts, p, &r->ctx->error, NULL, &r->k_rows[p]);
        if (r->k_rows[p].rows > r->max_k_rows) r->max_k_rows = r->k_rows[p].rows;
    }
    return s;
}

clattn_status clattn_ring_create(clattn_context *ctx, const clattn_attention_desc *desc,
                                 clattn_layout layout, clattn_sharding sharding, size_t parts,
                                 size_t part, const void *q_shard, clattn_ring **ring) {
    if (!ctx || !ring) return CLATTN_ERR_INVALID_ARGUMENT;
    *ring = NULL;
    ctx_clear_error(ctx);
    clattn_ring *r = calloc(1, sizeof *r);
    if (!r) return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "ring: %zu bytes", sizeof *r);
    r->ctx = ctx, r->layout = layout, r->parts = parts;
    clattn_status s = ring_read_whole(desc, &ctx->error, &r->whole);
    if (!s && layout != CLATTN_LAYOUT_BSHD && layout != CLATTN_LAYOUT_BHSD)
        s = ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "ring: unknown layout %d", (int)layout);
    if (!s && r->whole.kv_q8_0)
        s = ctx_error(ctx, CLATTN_ERR_UNSUPPORTED, "ring: q8_0 key/value shards are not supported");
    if (!s) s = ring_plan(r, sharding, part);
    if (!s && r->q_rows.rows && !q_shard)
        s = ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "ring: q_shard is NULL (%zu rows)",
                      r->q_rows.rows);
    if (!s) s = ring_allocate(r, q_shard);
    if (s) {
        clattn_ring_destroy(r);
        return s;
    }
    *ring = r;
    return CLATTN_SUCCESS;
}

void clattn_ring_destroy(clattn_ring *r) {
    if (!r) return;
    cl_mem held[] = {r->q,      r->k,        r->v,       r->o_acc,  r->lse_acc,
                     r->o_part, r->lse_part, r->bias[0], r->bias[1]};
    for (size_t i = 0; i < ARRAY_LEN(held); i++)
        if (held[i]) clReleaseMemObject(held[i]);
    free(r->k_rows);
    free(r->attended);
    free(r);
}

/* ---------------------------------------------------------------- attending a shard */

/* The shard call of query chunk a against key chunk c of part p's key/value shard. */
static clattn_attention_desc chunk_call(const clattn_ring *r, int a, size_t p, int c) {
    const clattn_attention_desc *w = &r->whole;
    const clattn_shard *kr = &r->k_rows[p];
    clattn_attention_desc d = *w;
    d.len_q = r->q_rows.len[a], d.len_k = kr->len[c];
    d.q_start = r->q_rows.start[a], d.k_start = kr->start[c];
    d.full_len_q = w->len_q, d.full_len_k = w->len_k;
    d.q = shard_tensor(r, w->heads_q, r->q_rows.rows, w->dim_qk, chunk_row(&r->q_rows, a));
    d.k = shard_tensor(r, w->heads_kv, kr->rows, w->dim_qk, chunk_row(kr, c));
    d.v = shard_tensor(r, w->heads_kv, kr->rows, w->dim_v, chunk_row(kr, c));
    d.o = shard_tensor(r, w->heads_q, d.len_q, w->dim_v, 0);
    d.out_dtype = CLATTN_F32; /* partials stay float32; clattn_ring_finish rounds once */
    d.bias = r->bias[a], d.bias_host = NULL;
    d.bias_strides = r->bias_rows[a];
    d.bias_strides.offset = d.k_start; /* the rows hold every key; a key's stride is 1 */
    return d;
}

/* O and LSE of query chunk a's call merged into the accumulators at its rows. */
static clattn_status merge_chunk(clattn_ring *r, int a, cl_event *event) {
    const clattn_attention_desc *w = &r->whole;
    size_t rows = r->q_rows.rows, len = r->q_rows.len[a], row0 = chunk_row(&r->q_rows, a);
    clattn_merge_desc m;
    clattn_merge_desc_init(&m, r->layout, w->batch, w->heads_q, len, w->dim_v);
    m.o = shard_tensor(r, w->heads_q, rows, w->dim_v, row0);
    m.lse = (clattn_tensor){row0, w->heads_q * rows, rows, 1};
    return clattn_attention_merge(r->ctx, &m, r->o_acc, r->lse_acc, r->o_part, r->lse_part, event);
}

/* Every chunk pair of the shard in hand that allows a pair. *event: the last merge's, if any. */
static clattn_status attend_chunks(clattn_ring *r, size_t p, cl_event *event) {
    clattn_status s = CLATTN_SUCCESS;
    for (int a = 0; a < 2 && !s; a++)
        for (int c = 0; c < 2 && !s; c++) {
            if (!r->q_rows.len[a] || !r->k_rows[p].len[c]) continue;
            clattn_attention_desc d = chunk_call(r, a, p, c);
            uint64_t pairs = 0;
            s = clattn_attention_pairs(&d, &pairs);
            if (s || pairs == 0) continue; /* no pair: LSE = -inf, nothing to merge */
            s = clattn_attention(r->ctx, &d, r->q, r->k, r->v, r->o_part, r->lse_part, NULL);
            if (*event) clReleaseEvent(*event), *event = NULL;
            if (!s) s = merge_chunk(r, a, event);
        }
    return s;
}

static clattn_status upload_shard(clattn_ring *r, size_t p, const void *k, const void *v) {
    const clattn_attention_desc *w = &r->whole;
    size_t rows = r->k_rows[p].rows, elem = dtype_size(w->dtype);
    if (!rows) return CLATTN_SUCCESS;
    cl_command_queue q = r->ctx->queue;
    cl_int err = clEnqueueWriteBuffer(q, r->k, CL_TRUE, 0,
                                      tensor_bytes(w->batch, w->heads_kv, rows, w->dim_qk, elem), k,
                                      0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueWriteBuffer(q, r->v, CL_TRUE, 0,
                                   tensor_bytes(w->batch, w->heads_kv, rows, w->dim_v, elem), v, 0,
                                   NULL, NULL);
    return err == CL_SUCCESS ? CLATTN_SUCCESS
                             : ctx_cl_error(r->ctx, err, "ring: uploading a key/value shard");
}

clattn_status clattn_ring_attend(clattn_ring *r, size_t p, const void *k, const void *v,
                                 cl_event *done) {
    if (done) *done = NULL;
    if (!r) return CLATTN_ERR_INVALID_ARGUMENT;
    ctx_clear_error(r->ctx);
    if (p >= r->parts || r->attended[p])
        return ctx_error(r->ctx, CLATTN_ERR_INVALID_ARGUMENT, "ring: key/value part %zu %s", p,
                         p >= r->parts ? "is out of range" : "was attended already");
    if (r->k_rows[p].rows && (!k || !v))
        return ctx_error(r->ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "ring: key/value shard %zu has %zu rows but k or v is NULL", p,
                         r->k_rows[p].rows);
    cl_event last = NULL;
    clattn_status s = upload_shard(r, p, k, v);
    if (!s) s = attend_chunks(r, p, &last);
    if (!s) r->attended[p] = 1;
    if (!s && !done && last) {
        cl_int err = clWaitForEvents(1, &last);
        if (err != CL_SUCCESS) s = ctx_cl_error(r->ctx, err, "ring: waiting for a shard");
    }
    if (done && !s)
        *done = last;
    else if (last)
        clReleaseEvent(last);
    return s;
}

/* ---------------------------------------------------------------- the result */

clattn_status clattn_ring_finish(clattn_ring *r, void *o_shard, float *lse_shard) {
    if (!r) return CLATTN_ERR_INVALID_ARGUMENT;
    ctx_clear_error(r->ctx);
    const clattn_attention_desc *w = &r->whole;
    for (size_t p = 0; p < r->parts; p++)
        if (!r->attended[p])
            return ctx_error(r->ctx, CLATTN_ERR_INVALID_ARGUMENT,
                             "ring: key/value part %zu was not attended", p);
    size_t rows = r->q_rows.rows;
    if (!rows) return CLATTN_SUCCESS;
    if (!o_shard) return ctx_error(r->ctx, CLATTN_ERR_INVALID_ARGUMENT, "ring: o_shard is NULL");
    size_t values = w->batch * w->heads_q * rows * w->dim_v;
    float *o = malloc(values * sizeof *o);
    if (!o) return ctx_error(r->ctx, CLATTN_ERR_OUT_OF_MEMORY, "ring: %zu values", values);
    cl_command_queue q = r->ctx->queue;
    cl_int err = clEnqueueReadBuffer(q, r->o_acc, CL_TRUE, 0, values * 4, o, 0, NULL, NULL);
    if (err == CL_SUCCESS && lse_shard)
        err = clEnqueueReadBuffer(q, r->lse_acc, CL_TRUE, 0, w->batch * w->heads_q * rows * 4,
                                  lse_shard, 0, NULL, NULL);
    clattn_status s =
        err == CL_SUCCESS ? CLATTN_SUCCESS : ctx_cl_error(r->ctx, err, "ring: reading the result");
    if (!s && clattn_convert(CLATTN_F32, o, w->out_dtype, o_shard, values) != CLATTN_SUCCESS)
        s = ctx_error(r->ctx, CLATTN_ERR_INVALID_ARGUMENT, "ring: out_dtype %d", (int)w->out_dtype);
    free(o);
    return s;
}
