/*
 * clattn_attention_multi: one call on several devices of one process, as a ring. Part d runs
 * on ctxs[d] in a thread of its own: it takes its query shard from the caller's Q, and then
 * each key/value shard in turn, starting with its own (the shard its ring neighbour held the
 * step before), gathered from the caller's K and V into dense arrays and attended by its
 * clattn_ring. The results are scattered into the caller's O and LSE only when every part
 * succeeded. Shard arrays are dense BSHD [B, rows, H, D].
 */
#include "ring/ring.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct multi_call {
    clattn_attention_desc whole;
    clattn_sharding sharding;
    size_t parts;
    const void *q, *k, *v; /* the caller's arrays, by the desc's tensors */
    atomic_int failed;     /* a part failed: the others stop at their next shard */
} multi_call;

typedef struct multi_part {
    multi_call *call;
    clattn_context *ctx;
    size_t part;
    clattn_shard q_rows;
    void *o_shard;    /* [B, rows, Hq, Dv] in out_dtype */
    float *lse_shard; /* [B, Hq, rows] */
    clattn_status status;
    int stopped; /* it stopped because another part failed */
    char message[512];
    pthread_t thread;
} multi_part;

/* Copies the shard's rows of a strided tensor into dense BSHD [B, rows, heads, dim], or back
 * (to_shard = 0). elem: bytes a value. */
static void copy_rows(const clattn_tensor *t, size_t batch, size_t heads, size_t dim, size_t elem,
                      const clattn_shard *s, char *whole, char *shard, int to_shard) {
    size_t row = 0;
    for (size_t b = 0; b < batch; b++)
        for (int k = 0; k < 2; k++)
            for (size_t i = 0; i < s->len[k]; i++, row++)
                for (size_t h = 0; h < heads; h++) {
                    char *w = whole + (t->offset + b * t->stride_batch + h * t->stride_head +
                                       (s->start[k] + i) * t->stride_seq) *
                                          elem;
                    char *d = shard + (row * heads + h) * dim * elem;
                    memcpy(to_shard ? d : w, to_shard ? w : d, dim * elem);
                }
}

/* LSE rows of the shard: [B, Hq, rows] to or from the whole call's [B, Hq, Nq]. */
static void copy_lse(const clattn_attention_desc *w, const clattn_shard *s, float *whole,
                     float *shard, int to_shard) {
    size_t at = 0;
    for (size_t g = 0; g < w->batch * w->heads_q; g++)
        for (int k = 0; k < 2; k++)
            for (size_t i = 0; i < s->len[k]; i++, at++) {
                float *x = whole + g * w->len_q + s->start[k] + i;
                if (to_shard)
                    shard[at] = *x;
                else
                    *x = shard[at];
            }
}

static void *dense_rows(const clattn_attention_desc *w, size_t heads, size_t rows, size_t dim,
                        clattn_dtype dtype) {
    return malloc((w->batch * heads * (rows ? rows : 1) * dim) * dtype_size(dtype));
}

/* Gathers key/value shard p and attends it. */
static clattn_status attend_part(multi_part *mp, clattn_ring *ring, size_t p, void *k, void *v) {
    const multi_call *c = mp->call;
    const clattn_attention_desc *w = &c->whole;
    clattn_shard rows;
    ring_shards(w, c->sharding, c->parts, p, NULL, NULL, &rows);
    size_t elem = dtype_size(w->dtype);
    copy_rows(&w->k, w->batch, w->heads_kv, w->dim_qk, elem, &rows, (char *)c->k, k, 1);
    copy_rows(&w->v, w->batch, w->heads_kv, w->dim_v, elem, &rows, (char *)c->v, v, 1);
    return clattn_ring_attend(ring, p, k, v, NULL);
}

/* One part's ring, on its own thread; it stops early (mp->stopped) when another part failed. */
static clattn_status run_part(multi_part *mp) {
    multi_call *c = mp->call;
    const clattn_attention_desc *w = &c->whole;
    size_t longest = 0;
    for (size_t p = 0; p < c->parts; p++) {
        clattn_shard rows;
        ring_shards(w, c->sharding, c->parts, p, NULL, NULL, &rows);
        if (rows.rows > longest) longest = rows.rows;
    }
    void *q = dense_rows(w, w->heads_q, mp->q_rows.rows, w->dim_qk, w->dtype);
    void *k = dense_rows(w, w->heads_kv, longest, w->dim_qk, w->dtype);
    void *v = dense_rows(w, w->heads_kv, longest, w->dim_v, w->dtype);
    clattn_ring *ring = NULL;
    clattn_status s = CLATTN_SUCCESS;
    if (!q || !k || !v)
        s = ctx_error(mp->ctx, CLATTN_ERR_OUT_OF_MEMORY, "multi: host memory for the shards");
    if (!s)
        copy_rows(&w->q, w->batch, w->heads_q, w->dim_qk, dtype_size(w->dtype), &mp->q_rows,
                  (char *)c->q, q, 1);
    if (!s)
        s = clattn_ring_create(mp->ctx, w, CLATTN_LAYOUT_BSHD, c->sharding, c->parts, mp->part, q,
                               &ring);
    for (size_t step = 0; step < c->parts && !s && !mp->stopped; step++) {
        mp->stopped = atomic_load(&c->failed);
        if (!mp->stopped) s = attend_part(mp, ring, (mp->part + step) % c->parts, k, v);
    }
    if (!s && !mp->stopped) s = clattn_ring_finish(ring, mp->o_shard, mp->lse_shard);
    clattn_ring_destroy(ring);
    free(q), free(k), free(v);
    return s;
}

static void *part_thread(void *arg) {
    multi_part *mp = arg;
    mp->status = run_part(mp);
    if (mp->status != CLATTN_SUCCESS) {
        snprintf(mp->message, sizeof mp->message, "%s", clattn_context_last_error(mp->ctx));
        atomic_store(&mp->call->failed, 1);
    }
    return NULL;
}

/* ---------------------------------------------------------------- the call */

static clattn_status multi_check(clattn_context *const *ctxs, size_t n,
                                 const clattn_attention_desc *desc, clattn_sharding sharding,
                                 const void *const arrays[4], multi_call *c) {
    static const char *const names[4] = {"q", "k", "v", "o"};
    for (size_t i = 0; i < n; i++)
        if (!ctxs[i]) return CLATTN_ERR_INVALID_ARGUMENT;
    clattn_context *ctx = ctxs[0];
    ctx_clear_error(ctx);
    for (size_t i = 1; i < n; i++)
        for (size_t j = 0; j < i; j++)
            if (ctxs[i] == ctxs[j])
                return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                                 "multi: ctxs[%zu] is ctxs[%zu]; a context serves one thread at "
                                 "a time, so each part needs its own",
                                 i, j);
    clattn_status s = ring_read_whole(desc, &ctx->error, &c->whole);
    if (!s) s = ring_check_splittable(&c->whole, "multi", &ctx->error);
    if (s) return s;
    if (c->whole.bias && !c->whole.bias_host)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "multi: the bias must be a host array (desc->bias_host)");
    for (int i = 0; i < 4; i++)
        if (!arrays[i])
            return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "multi: %s is NULL", names[i]);
    return ring_shards(&c->whole, sharding, n, 0, &ctx->error, NULL, NULL);
}

/* Starts a thread a part and joins them. @return 0, or -1 when a thread could not start (the
 * parts that did are joined; they stop at their next shard). */
static int run_threads(multi_part *parts, size_t n) {
    size_t started = 0;
    int failed = 0;
    for (; started < n; started++)
        if (pthread_create(&parts[started].thread, NULL, part_thread, &parts[started]) != 0) {
            atomic_store(&parts[0].call->failed, 1);
            failed = -1;
            break;
        }
    for (size_t i = 0; i < started; i++) pthread_join(parts[i].thread, NULL);
    return failed;
}

/* The first part that failed (not one that stopped because another had), named on ctxs[0]. */
static clattn_status first_failure(clattn_context *ctx, const multi_part *parts, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (parts[i].status == CLATTN_SUCCESS) continue;
        clattn_device_info info;
        clattn_device_info_init(&info);
        clattn_context_device_info(parts[i].ctx, &info);
        return ctx_error(ctx, parts[i].status, "multi: part %zu on device %zu (%s): %s", i,
                         info.index, info.name, parts[i].message);
    }
    return CLATTN_SUCCESS;
}

static clattn_status multi_parts(clattn_context *const *ctxs, size_t n, multi_call *c, void *o,
                                 float *lse) {
    const clattn_attention_desc *w = &c->whole;
    multi_part *parts = calloc(n, sizeof *parts);
    clattn_status s = parts ? CLATTN_SUCCESS
                            : ctx_error(ctxs[0], CLATTN_ERR_OUT_OF_MEMORY, "multi: %zu parts", n);
    for (size_t i = 0; i < n && !s; i++) {
        multi_part *mp = &parts[i];
        mp->call = c, mp->ctx = ctxs[i], mp->part = i;
        ring_shards(w, c->sharding, n, i, NULL, &mp->q_rows, NULL);
        mp->o_shard = dense_rows(w, w->heads_q, mp->q_rows.rows, w->dim_v, w->out_dtype);
        mp->lse_shard = dense_rows(w, w->heads_q, mp->q_rows.rows, 1, CLATTN_F32);
        if (!mp->o_shard || !mp->lse_shard)
            s = ctx_error(ctxs[0], CLATTN_ERR_OUT_OF_MEMORY, "multi: host memory for the results");
    }
    if (!s && run_threads(parts, n))
        s = ctx_error(ctxs[0], CLATTN_ERR_OUT_OF_MEMORY, "multi: a thread could not start");
    if (!s) s = first_failure(ctxs[0], parts, n);
    for (size_t i = 0; i < n && !s; i++) {
        copy_rows(&w->o, w->batch, w->heads_q, w->dim_v, dtype_size(w->out_dtype), &parts[i].q_rows,
                  o, parts[i].o_shard, 0);
        if (lse) copy_lse(w, &parts[i].q_rows, lse, parts[i].lse_shard, 0);
    }
    for (size_t i = 0; parts && i < n; i++) free(parts[i].o_shard), free(parts[i].lse_shard);
    free(parts);
    return s;
}

clattn_status clattn_attention_multi(clattn_context *const *ctxs, size_t n,
                                     const clattn_attention_desc *desc, clattn_sharding sharding,
                                     const void *q, const void *k, const void *v, void *o,
                                     float *lse) {
    if (!ctxs || n == 0) return CLATTN_ERR_INVALID_ARGUMENT;
    multi_call *c = calloc(1, sizeof *c);
    if (!c) return CLATTN_ERR_OUT_OF_MEMORY;
    const void *arrays[4] = {q, k, v, o};
    clattn_status s = multi_check(ctxs, n, desc, sharding, arrays, c);
    if (!s) {
        c->sharding = sharding, c->parts = n, c->q = q, c->k = k, c->v = v;
        atomic_init(&c->failed, 0);
        s = multi_parts(ctxs, n, c, o, lse);
    }
    free(c);
    return s;
}
