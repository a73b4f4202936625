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
    clattn_shard *k_rows; /* [parts] */
    uint8_t *attended;    /* [parts] */
    size_t max_k_chunk;   /* the longest key/value chunk of any part */
    /* A buffer a chunk, so that no allocation is larger than a chunk's rows (devices cap one
     * allocation: PoCL at a quarter of its memory, Intel at 4 GiB). Query chunk a: its rows,
     * and the float32 O [B, len, Hq, Dv] (in the layout) and LSE [B, Hq, len, 2] it accumulates,
     * the LSE as (max, log sum) pairs (desc->lse_parts), which merge exactly whatever the
     * scores' magnitude; key/value chunk c of the shard in hand. */
    cl_mem q[2], o_acc[2], lse_acc[2], k[2], v[2];
    cl_mem o_part, lse_part; /* one chunk call's outputs, float32, the longest query chunk */
    cl_mem bias[2];          /* each query chunk's rows of the bias, every key */
    clattn_tensor bias_rows[2];
    size_t calls, skipped; /* chunk pairs attended, and those whose mask allows no pair */
};

/* Row where chunk a starts in a part's shard arrays. */
static size_t chunk_row(const clattn_shard *s, int a) {
    return a == 0 ? 0 : s->len[0];
}

/* A tensor of `rows` rows dense in the ring's layout. */
static clattn_tensor dense_rows(const clattn_ring *r, size_t heads, size_t rows, size_t dim) {
    clattn_tensor t = {0, 0, 0, 0};
    clattn_tensor_dense(&t, r->layout, heads, rows ? rows : 1, dim, 0);
    return t;
}

static size_t tensor_bytes(size_t batch, size_t heads, size_t rows, size_t dim, size_t elem) {
    size_t n = 0;
    if (size_mul(batch, heads, &n) || size_mul(n, rows, &n) || size_mul(n, dim, &n) ||
        size_mul(n, elem, &n))
        return 0;
    return n;
}

/* The rows [row0, row0 + len) of a shard array of `rows` rows, dense in `layout` ([B, rows, H,
 * D] or [B, H, rows, D]), to or from a buffer that holds only them, dense: one rectangle copy
 * (BSHD: a batch entry a row; BHSD: a (batch, head) a row). An LSE [B, H, rows] is the BHSD
 * case with dim 1. */
typedef struct chunk_copy {
    clattn_layout layout;
    size_t batch, heads, rows, dim, elem, row0, len;
} chunk_copy;

static cl_int copy_chunk(cl_command_queue queue, cl_mem buffer, int write, const chunk_copy *c,
                         void *host) {
    size_t line = c->dim * c->elem, zero[3] = {0, 0, 0}, host_origin[3] = {0, 0, 0};
    size_t region[3], host_row, host_slice, buf_row, buf_slice;
    if (c->layout == CLATTN_LAYOUT_BSHD) {
        region[0] = c->len * c->heads * line, region[1] = c->batch, region[2] = 1;
        host_origin[0] = c->row0 * c->heads * line;
        host_row = c->rows * c->heads * line, buf_row = region[0];
        host_slice = host_row * c->batch, buf_slice = buf_row * c->batch;
    } else {
        region[0] = c->len * line, region[1] = c->heads, region[2] = c->batch;
        host_origin[0] = c->row0 * line;
        host_row = c->rows * line, buf_row = region[0];
        host_slice = host_row * c->heads, buf_slice = buf_row * c->heads;
    }
    return write
               ? clEnqueueWriteBufferRect(queue, buffer, CL_TRUE, zero, host_origin, region,
                                          buf_row, buf_slice, host_row, host_slice, host, 0, NULL,
                                          NULL)
               : clEnqueueReadBufferRect(queue, buffer, CL_TRUE, zero, host_origin, region, buf_row,
                                         buf_slice, host_row, host_slice, host, 0, NULL, NULL);
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

/* Query chunk a: its rows (copied from the shard), its accumulators (O = 0, LSE = -inf) and
 * its bias rows. `init` holds zeros then -infinities, at least a chunk's O. */
static clattn_status chunk_allocate(clattn_ring *r, int a, const void *q_shard, float *init) {
    const clattn_attention_desc *w = &r->whole;
    size_t len = r->q_rows.len[a], elem = dtype_size(w->dtype);
    size_t o_bytes = tensor_bytes(w->batch, w->heads_q, len, w->dim_v, sizeof(float));
    size_t lse_bytes = tensor_bytes(w->batch, w->heads_q, len, 2, sizeof(float)); /* pairs */
    memset(init, 0, o_bytes);
    clattn_status s = ring_buffer(r, o_bytes, init, &r->o_acc[a], "O accumulator");
    for (size_t i = 0; i < lse_bytes / sizeof(float); i++) init[i] = -INFINITY;
    if (!s) s = ring_buffer(r, lse_bytes, init, &r->lse_acc[a], "LSE accumulator");
    if (!s)
        s = ring_buffer(r, tensor_bytes(w->batch, w->heads_q, len, w->dim_qk, elem), NULL, &r->q[a],
                        "query chunk");
    chunk_copy c = {
        r->layout, w->batch, w->heads_q, r->q_rows.rows, w->dim_qk, elem, chunk_row(&r->q_rows, a),
        len};
    cl_int err = s ? CL_SUCCESS : copy_chunk(r->ctx->queue, r->q[a], 1, &c, (void *)q_shard);
    if (err != CL_SUCCESS) s = ctx_cl_error(r->ctx, err, "ring: uploading a query chunk");
    if (!s && w->bias_host) s = gather_bias(r, a);
    return s;
}

/* Every query chunk's buffers, a chunk call's outputs and the key/value chunks in hand. */
static clattn_status ring_allocate(clattn_ring *r, const void *q_shard) {
    const clattn_attention_desc *w = &r->whole;
    size_t chunk = r->q_rows.len[0] > r->q_rows.len[1] ? r->q_rows.len[0] : r->q_rows.len[1];
    size_t kv = r->max_k_chunk ? r->max_k_chunk : 1, elem = dtype_size(w->dtype);
    size_t most = tensor_bytes(w->batch, w->heads_q, chunk ? chunk : 1, w->dim_v > 2 ? w->dim_v : 2,
                               sizeof(float));
    float *init = most ? malloc(most) : NULL;
    clattn_status s = init ? CLATTN_SUCCESS
                           : ctx_error(r->ctx, CLATTN_ERR_OUT_OF_MEMORY, "ring: %zu bytes", most);
    for (int a = 0; a < 2 && !s; a++)
        if (r->q_rows.len[a]) s = chunk_allocate(r, a, q_shard, init);
    free(init);
    size_t heads = w->heads_q, batch = w->batch, rows = chunk ? chunk : 1;
    if (!s) s = ring_buffer(r, most, NULL, &r->o_part, "a chunk's O");
    if (!s)
        s = ring_buffer(r, tensor_bytes(batch, heads, rows, 2, sizeof(float)), NULL, &r->lse_part,
                        "a chunk's LSE parts");
    for (int c = 0; c < 2 && !s; c++) {
        s = ring_buffer(r, tensor_bytes(batch, w->heads_kv, kv, w->dim_qk, elem), NULL, &r->k[c],
                        "key chunk");
        if (!s)
            s = ring_buffer(r, tensor_bytes(batch, w->heads_kv, kv, w->dim_v, elem), NULL, &r->v[c],
                            "value chunk");
    }
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
        for (int c = 0; c < 2; c++)
            if (r->k_rows[p].len[c] > r->max_k_chunk) r->max_k_chunk = r->k_rows[p].len[c];
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
    if (!s) s = ring_check_splittable(&r->whole, "ring", &ctx->error);
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
    cl_mem *held[] = {r->q, r->o_acc, r->lse_acc, r->k, r->v, r->bias};
    for (size_t i = 0; i < ARRAY_LEN(held); i++)
        for (int c = 0; c < 2; c++)
            if (held[i][c]) clReleaseMemObject(held[i][c]);
    if (r->o_part) clReleaseMemObject(r->o_part);
    if (r->lse_part) clReleaseMemObject(r->lse_part);
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
    d.q = dense_rows(r, w->heads_q, d.len_q, w->dim_qk);
    d.k = dense_rows(r, w->heads_kv, d.len_k, w->dim_qk);
    d.v = dense_rows(r, w->heads_kv, d.len_k, w->dim_v);
    d.o = dense_rows(r, w->heads_q, d.len_q, w->dim_v);
    d.out_dtype = CLATTN_F32; /* partials stay float32; clattn_ring_finish rounds once */
    d.lse_parts = 1;
    d.bias = r->bias[a], d.bias_host = NULL;
    d.bias_strides = r->bias_rows[a];
    d.bias_strides.offset = d.k_start; /* the rows hold every key; a key's stride is 1 */
    return d;
}

/* O and LSE of query chunk a's call merged into its accumulators. */
static clattn_status merge_chunk(clattn_ring *r, int a, cl_event *event) {
    const clattn_attention_desc *w = &r->whole;
    clattn_merge_desc m;
    clattn_merge_desc_init(&m, r->layout, w->batch, w->heads_q, r->q_rows.len[a], w->dim_v);
    m.lse_parts = 1;
    return clattn_attention_merge(r->ctx, &m, r->o_acc[a], r->lse_acc[a], r->o_part, r->lse_part,
                                  event);
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
            if (!s && pairs == 0) r->skipped++;
            if (s || pairs == 0) continue; /* no pair: LSE = -inf, nothing to merge */
            r->calls++;
            s = clattn_attention(r->ctx, &d, r->q[a], r->k[c], r->v[c], r->o_part, r->lse_part,
                                 NULL);
            if (*event) clReleaseEvent(*event), *event = NULL;
            if (!s) s = merge_chunk(r, a, event);
        }
    return s;
}

/* Part p's key/value shard, a chunk a buffer. */
static clattn_status upload_shard(clattn_ring *r, size_t p, const void *k, const void *v) {
    const clattn_attention_desc *w = &r->whole;
    const clattn_shard *kr = &r->k_rows[p];
    cl_int err = CL_SUCCESS;
    for (int c = 0; c < 2 && err == CL_SUCCESS; c++) {
        if (!kr->len[c]) continue;
        chunk_copy kc = {r->layout,        w->batch,  w->heads_kv,
                         kr->rows,         w->dim_qk, dtype_size(w->dtype),
                         chunk_row(kr, c), kr->len[c]};
        chunk_copy vc = kc;
        vc.dim = w->dim_v;
        err = copy_chunk(r->ctx->queue, r->k[c], 1, &kc, (void *)k);
        if (err == CL_SUCCESS) err = copy_chunk(r->ctx->queue, r->v[c], 1, &vc, (void *)v);
    }
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

/* The accumulated O (float32, into the shard array o at its chunk rows) and LSE parts
 * ([B, Hq, rows, 2]). */
static clattn_status read_result(clattn_ring *r, float *o, float *lse) {
    const clattn_attention_desc *w = &r->whole;
    cl_int err = CL_SUCCESS;
    for (int a = 0; a < 2 && err == CL_SUCCESS; a++) {
        size_t len = r->q_rows.len[a], row0 = chunk_row(&r->q_rows, a);
        if (!len) continue;
        chunk_copy oc = {r->layout, w->batch,      w->heads_q, r->q_rows.rows,
                         w->dim_v,  sizeof(float), row0,       len};
        chunk_copy lc = {CLATTN_LAYOUT_BHSD, w->batch, w->heads_q, r->q_rows.rows, 2,
                         sizeof(float),      row0,     len};
        err = copy_chunk(r->ctx->queue, r->o_acc[a], 0, &oc, o);
        if (err == CL_SUCCESS && lse) err = copy_chunk(r->ctx->queue, r->lse_acc[a], 0, &lc, lse);
    }
    return err == CL_SUCCESS ? CLATTN_SUCCESS
                             : ctx_cl_error(r->ctx, err, "ring: reading the result");
}

clattn_status clattn_ring_counts(const clattn_ring *r, size_t *calls, size_t *skipped) {
    if (!r) return CLATTN_ERR_INVALID_ARGUMENT;
    if (calls) *calls = r->calls;
    if (skipped) *skipped = r->skipped;
    return CLATTN_SUCCESS;
}

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
    size_t values = w->batch * w->heads_q * rows * w->dim_v, lses = w->batch * w->heads_q * rows;
    float *o = malloc(values * sizeof *o), *parts = malloc(2 * lses * sizeof *parts);
    clattn_status s = o && parts
                          ? CLATTN_SUCCESS
                          : ctx_error(r->ctx, CLATTN_ERR_OUT_OF_MEMORY, "ring: %zu values", values);
    if (!s) s = read_result(r, o, parts);
    if (!s && clattn_convert(CLATTN_F32, o, w->out_dtype, o_shard, values) != CLATTN_SUCCESS)
        s = ctx_error(r->ctx, CLATTN_ERR_INVALID_ARGUMENT, "ring: out_dtype %d", (int)w->out_dtype);
    for (size_t i = 0; !s && lse_shard && i < lses; i++) /* as a kernel rounds m + log(sum) */
        lse_shard[i] = parts[2 * i] + parts[2 * i + 1];
    free(o), free(parts);
    return s;
}
