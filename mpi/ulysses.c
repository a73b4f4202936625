/*
 * Ulysses (DeepSpeed-Ulysses): sequence shards become head shards and back, with one
 * all-to-all each way. Rank t takes key/value heads [t * hkv, (t + 1) * hkv) (hkv = Hkv / R)
 * and their query heads [t * hq, (t + 1) * hq), for the whole sequence. Phase in: each rank
 * sends rank t its rows of t's heads (Q, then K, then V, packed dense BSHD); rank t places them
 * at their rows of whole-sequence arrays in the call's layout. It then runs the whole call for
 * its heads on its device (the masks need no shard positions: every rank sees every row).
 * Phase out: rank t sends each rank s the rows of s's shard of O and LSE for t's heads.
 */
#include "mpi_call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct ulysses {
    mpi_call *c;
    size_t ranks, hq, hkv, in_elem, out_elem;
    clattn_shard *q_rows, *k_rows; /* [ranks] */
    size_t **q_map, **k_map;       /* [ranks] row maps */
    char **send, **recv;           /* [ranks] packed buffers */
    void *q, *k, *v, *o;           /* this rank's heads, whole sequences, in the layout */
    float *lse;                    /* [B, hq, Nq] */
} ulysses;

static void ulysses_free(ulysses *u) {
    for (size_t t = 0; t < u->ranks; t++) {
        if (u->q_map) free(u->q_map[t]);
        if (u->k_map) free(u->k_map[t]);
        if (u->send) free(u->send[t]);
        if (u->recv) free(u->recv[t]);
    }
    free(u->q_rows), free(u->k_rows), free(u->q_map), free(u->k_map), free(u->send), free(u->recv);
    free(u->q), free(u->k), free(u->v), free(u->o), free(u->lse);
}

/* Bytes rank `from`'s rows take for one rank's heads: Q, K and V in (phase in), O and LSE out. */
static size_t in_bytes(const ulysses *u, size_t from) {
    const clattn_attention_desc *w = &u->c->whole;
    return w->batch * u->in_elem *
           (u->q_rows[from].rows * u->hq * w->dim_qk +
            u->k_rows[from].rows * u->hkv * (w->dim_qk + w->dim_v));
}

static size_t out_bytes(const ulysses *u, size_t to) {
    const clattn_attention_desc *w = &u->c->whole;
    return u->c->whole.batch * u->q_rows[to].rows * u->hq * (w->dim_v * u->out_elem + 4);
}

static clattn_status ulysses_plan(ulysses *u) {
    const clattn_attention_desc *w = &u->c->whole;
    u->q_rows = calloc(u->ranks, sizeof *u->q_rows),
    u->k_rows = calloc(u->ranks, sizeof *u->k_rows);
    u->q_map = calloc(u->ranks, sizeof *u->q_map), u->k_map = calloc(u->ranks, sizeof *u->k_map);
    u->send = calloc(u->ranks, sizeof *u->send), u->recv = calloc(u->ranks, sizeof *u->recv);
    if (!u->q_rows || !u->k_rows || !u->q_map || !u->k_map || !u->send || !u->recv)
        return CLATTN_ERR_OUT_OF_MEMORY;
    for (size_t t = 0; t < u->ranks; t++) {
        clattn_attention_shards(w, u->c->opt.sharding, u->ranks, t, &u->q_rows[t], &u->k_rows[t]);
        u->q_map[t] = shard_row_map(&u->q_rows[t]), u->k_map[t] = shard_row_map(&u->k_rows[t]);
        if (!u->q_map[t] || !u->k_map[t]) return CLATTN_ERR_OUT_OF_MEMORY;
    }
    size_t q = w->batch * u->hq * w->len_q, kv = w->batch * u->hkv * w->len_k;
    u->q = malloc(q * w->dim_qk * u->in_elem + 1), u->k = malloc(kv * w->dim_qk * u->in_elem + 1);
    u->v = malloc(kv * w->dim_v * u->in_elem + 1), u->o = malloc(q * w->dim_v * u->out_elem + 1);
    u->lse = malloc(q * sizeof *u->lse + 1);
    return u->q && u->k && u->v && u->o && u->lse ? CLATTN_SUCCESS : CLATTN_ERR_OUT_OF_MEMORY;
}

/* Phase in, one direction: this rank's rows of t's heads packed into buf (to_whole = 0), or
 * rank `from`'s rows of this rank's heads unpacked from buf into the whole-sequence arrays. */
static void move_in(const ulysses *u, size_t from, size_t t, const void *const shard[3], char *buf,
                    int to_whole) {
    const clattn_attention_desc *w = &u->c->whole;
    clattn_layout L = u->c->opt.layout;
    const clattn_shard *rows[3] = {&u->q_rows[from], &u->k_rows[from], &u->k_rows[from]};
    size_t *maps[3] = {u->q_map[from], u->k_map[from], u->k_map[from]};
    size_t heads[3] = {u->hq, u->hkv, u->hkv}, all[3] = {w->heads_q, w->heads_kv, w->heads_kv};
    size_t dims[3] = {w->dim_qk, w->dim_qk, w->dim_v}, lens[3] = {w->len_q, w->len_k, w->len_k};
    void *whole[3] = {u->q, u->k, u->v};
    for (int x = 0; x < 3; x++) {
        clattn_tensor packed = dense_tensor(CLATTN_LAYOUT_BSHD, heads[x], rows[x]->rows, dims[x]);
        clattn_tensor mine = dense_tensor(L, all[x], rows[x]->rows, dims[x]);
        clattn_tensor big = dense_tensor(L, heads[x], lens[x], dims[x]);
        block_copy c = {w->batch,
                        rows[x]->rows,
                        heads[x],
                        dims[x],
                        u->in_elem,
                        to_whole ? &packed : &mine,
                        to_whole ? &big : &packed,
                        NULL,
                        to_whole ? maps[x] : NULL,
                        to_whole ? 0 : t * heads[x],
                        0};
        if (rows[x]->rows) copy_block(&c, to_whole ? buf : shard[x], to_whole ? whole[x] : buf);
        buf += w->batch * rows[x]->rows * heads[x] * dims[x] * u->in_elem;
    }
}

/* Phase out, one direction: this rank's heads of t's rows packed into buf, or rank `from`'s
 * heads of this rank's rows unpacked into o_shard and lse_shard. */
static void move_out(const ulysses *u, size_t from, size_t t, char *buf, void *o, float *lse,
                     int to_shard) {
    const clattn_attention_desc *w = &u->c->whole;
    clattn_layout L = u->c->opt.layout;
    size_t rows = u->q_rows[t].rows, b = w->batch;
    clattn_tensor packed = dense_tensor(CLATTN_LAYOUT_BSHD, u->hq, rows, w->dim_v);
    clattn_tensor big = dense_tensor(L, u->hq, w->len_q, w->dim_v);
    clattn_tensor mine = dense_tensor(L, w->heads_q, rows, w->dim_v);
    clattn_tensor lp = lse_tensor(u->hq, rows), lb = lse_tensor(u->hq, w->len_q);
    clattn_tensor lm = lse_tensor(w->heads_q, rows);
    block_copy oc = {b,
                     rows,
                     u->hq,
                     w->dim_v,
                     u->out_elem,
                     to_shard ? &packed : &big,
                     to_shard ? &mine : &packed,
                     to_shard ? NULL : u->q_map[t],
                     NULL,
                     0,
                     to_shard ? from * u->hq : 0};
    block_copy lc = {b,
                     rows,
                     u->hq,
                     1,
                     4,
                     to_shard ? &lp : &lb,
                     to_shard ? &lm : &lp,
                     to_shard ? NULL : u->q_map[t],
                     NULL,
                     0,
                     to_shard ? from * u->hq : 0};
    char *lse_buf = buf + b * rows * u->hq * w->dim_v * u->out_elem;
    if (!rows) return;
    copy_block(&oc, to_shard ? buf : u->o, to_shard ? o : buf);
    if (to_shard && !lse) return;
    copy_block(&lc, to_shard ? lse_buf : (char *)u->lse, to_shard ? (char *)lse : lse_buf);
}

/* One all-to-all: rank t gets send[t] (bytes_to(t)); recv[s] gets bytes_from(s). Own: copied. */
static clattn_status all_to_all(ulysses *u, int tag, size_t (*bytes_to)(const ulysses *, size_t),
                                size_t (*bytes_from)(const ulysses *, size_t), const char *what) {
    mpi_link *l = &u->c->link;
    size_t me = (size_t)l->rank;
    clattn_status s = CLATTN_SUCCESS;
    for (size_t t = 0; t < u->ranks && !s; t++) {
        if (t == me) continue;
        s = link_recv(l, u->recv[t], bytes_from(u, t), (int)t, tag, what);
        if (!s) s = link_send(l, u->send[t], bytes_to(u, t), (int)t, tag, what);
    }
    memcpy(u->recv[me], u->send[me], bytes_to(u, me));
    int unused = 0;
    return s ? s : link_wait(l, NULL, &unused);
}

static size_t in_to(const ulysses *u, size_t t) {
    (void)t;
    return in_bytes(u, (size_t)u->c->link.rank); /* this rank's rows, t's heads */
}
static size_t in_from(const ulysses *u, size_t s) {
    return in_bytes(u, s);
}
static size_t out_to(const ulysses *u, size_t t) {
    return out_bytes(u, t);
}
static size_t out_from(const ulysses *u, size_t s) {
    (void)s;
    return out_bytes(u, (size_t)u->c->link.rank);
}

static clattn_status allocate_buffers(ulysses *u, int phase_in) {
    for (size_t t = 0; t < u->ranks; t++) {
        free(u->send[t]), free(u->recv[t]);
        size_t out = phase_in ? in_to(u, t) : out_to(u, t);
        size_t in = phase_in ? in_from(u, t) : out_from(u, t);
        u->send[t] = malloc(out + 1), u->recv[t] = malloc(in + 1);
        if (!u->send[t] || !u->recv[t]) return CLATTN_ERR_OUT_OF_MEMORY;
    }
    return CLATTN_SUCCESS;
}

/* ALiBi's slopes of this rank's heads [h0, h0 + hq): a view of per-head slopes [Hq], or the
 * rows of per-batch ones [B][Hq] copied into slopes ([B][hq], the caller frees). */
static clattn_status head_slopes(const ulysses *u, size_t h0, clattn_attention_desc *d,
                                 float **slopes) {
    const clattn_attention_desc *w = &u->c->whole;
    *slopes = NULL;
    if (!w->alibi_slopes || !w->alibi_per_batch) {
        if (w->alibi_slopes) d->alibi_slopes = w->alibi_slopes + h0;
        return CLATTN_SUCCESS;
    }
    *slopes = malloc(w->batch * u->hq * sizeof **slopes);
    if (!*slopes) return CLATTN_ERR_OUT_OF_MEMORY;
    for (size_t b = 0; b < w->batch; b++)
        memcpy(*slopes + b * u->hq, w->alibi_slopes + b * w->heads_q + h0, u->hq * sizeof **slopes);
    d->alibi_slopes = *slopes;
    return CLATTN_SUCCESS;
}

/* This rank's heads of the whole call, on its device: every per-head input (block layout,
 * bias, slopes, sinks) from head h0 on. */
static clattn_status attend_heads(ulysses *u, char *message, size_t size) {
    const mpi_call *c = u->c;
    clattn_attention_desc d = c->whole;
    size_t h0 = (size_t)c->link.rank * u->hq;
    d.heads_q = u->hq, d.heads_kv = u->hkv;
    d.q = dense_tensor(c->opt.layout, u->hq, d.len_q, d.dim_qk);
    d.k = dense_tensor(c->opt.layout, u->hkv, d.len_k, d.dim_qk);
    d.v = dense_tensor(c->opt.layout, u->hkv, d.len_k, d.dim_v);
    d.o = dense_tensor(c->opt.layout, u->hq, d.len_q, d.dim_v);
    if (d.block_layout && d.block_layout_per_head)
        d.block_layout +=
            h0 * ((d.len_q + d.block_q - 1) / d.block_q) * ((d.len_k + d.block_k - 1) / d.block_k);
    if (d.bias_host) d.bias_strides.offset += h0 * d.bias_strides.stride_head;
    if (d.sinks) d.sinks += h0;
    float *slopes;
    clattn_status s = head_slopes(u, h0, &d, &slopes);
    if (s) {
        snprintf(message, size, "out of host memory for the heads' ALiBi slopes");
        return s;
    }
    s = clattn_attention_host(c->ctx, &d, u->q, u->k, u->v, u->o, u->lse);
    if (s) snprintf(message, size, "%s", clattn_context_last_error(c->ctx));
    u->c->calls = s ? 0 : 1; /* the whole call for this rank's heads */
    free(slopes);
    return s;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static clattn_status ulysses_phases(ulysses *u, const void *const shard[3], void *o, float *lse) {
    mpi_link *l = &u->c->link;
    size_t me = (size_t)l->rank;
    char message[LINK_MESSAGE] = "";
    clattn_status local = ulysses_plan(u);
    if (!local) local = allocate_buffers(u, 1);
    if (local) snprintf(message, sizeof message, "out of host memory for the heads' arrays");
    clattn_status s = link_agree(l, local, message, 0);
    for (size_t t = 0; t < u->ranks && !s; t++) move_in(u, me, t, shard, u->send[t], 0);
    if (!s) s = all_to_all(u, TAG_ULYSSES_IN, in_to, in_from, "sequence-to-head all-to-all");
    for (size_t f = 0; f < u->ranks && !s; f++) move_in(u, f, me, NULL, u->recv[f], 1);
    double start = now_s();
    if (!s) local = attend_heads(u, message, sizeof message);
    l->compute_s += now_s() - start;
    if (!s) s = link_agree(l, local, message, 0);
    if (!s && (local = allocate_buffers(u, 0)))
        snprintf(message, sizeof message, "out of host memory for the results' exchange");
    if (!s) s = link_agree(l, local, message, 0);
    for (size_t t = 0; t < u->ranks && !s; t++) move_out(u, me, t, u->send[t], NULL, NULL, 0);
    if (!s) s = all_to_all(u, TAG_ULYSSES_OUT, out_to, out_from, "head-to-sequence all-to-all");
    for (size_t f = 0; f < u->ranks && !s; f++) move_out(u, f, me, u->recv[f], o, lse, 1);
    return s;
}

clattn_status ulysses_run(mpi_call *c, const void *q, const void *k, const void *v, void *o,
                          float *lse) {
    ulysses u;
    memset(&u, 0, sizeof u);
    u.c = c;
    u.ranks = (size_t)c->link.size;
    u.hq = c->whole.heads_q / u.ranks, u.hkv = c->whole.heads_kv / u.ranks;
    u.in_elem = c->whole.dtype == CLATTN_F32 ? 4 : 2;
    u.out_elem = c->whole.out_dtype == CLATTN_F32 ? 4 : 2;
    const void *shard[3] = {q, k, v};
    clattn_status s = ulysses_phases(&u, shard, o, lse);
    ulysses_free(&u);
    return s;
}
