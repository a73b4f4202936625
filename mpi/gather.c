/* clattn_mpi_gather: every rank's rows of O and LSE into the whole call's arrays on one rank. */
#include "mpi_call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gather {
    mpi_call call; /* the desc, options and link */
    size_t elem;
    int with_lse, root;
} gather;

static size_t o_bytes(const gather *g, const clattn_shard *rows) {
    const clattn_attention_desc *w = &g->call.whole;
    return w->batch * w->heads_q * rows->rows * w->dim_v * g->elem;
}

static size_t lse_bytes(const gather *g, const clattn_shard *rows) {
    const clattn_attention_desc *w = &g->call.whole;
    return g->with_lse ? w->batch * w->heads_q * rows->rows * sizeof(float) : 0;
}

/* A rank's shard arrays into the whole ones. */
static void place_rows(const gather *g, const clattn_shard *rows, const void *o_shard,
                       const float *lse_shard, void *o, float *lse) {
    const clattn_attention_desc *w = &g->call.whole;
    size_t *map = shard_row_map(rows);
    if (!map) return;
    clattn_tensor src = dense_tensor(g->call.opt.layout, w->heads_q, rows->rows, w->dim_v);
    clattn_tensor dst = dense_tensor(g->call.opt.layout, w->heads_q, w->len_q, w->dim_v);
    block_copy oc = {w->batch, rows->rows, w->heads_q, w->dim_v, g->elem, &src,
                     &dst,     NULL,       map,        0,        0};
    if (rows->rows) copy_block(&oc, o_shard, o);
    clattn_tensor ls = lse_tensor(w->heads_q, rows->rows), ld = lse_tensor(w->heads_q, w->len_q);
    block_copy lc = {w->batch, rows->rows, w->heads_q, 1, sizeof(float), &ls, &ld, NULL, map, 0, 0};
    if (rows->rows && g->with_lse) copy_block(&lc, lse_shard, lse);
    free(map);
}

/* The root receives every other rank's arrays (O, then LSE) and places every rank's rows. */
static clattn_status root_receives(gather *g, const void *o_shard, const float *lse_shard, void *o,
                                   float *lse) {
    mpi_link *l = &g->call.link;
    size_t ranks = (size_t)l->size;
    char **bufs = calloc(ranks, sizeof *bufs);
    clattn_shard *rows = calloc(ranks, sizeof *rows);
    clattn_status s = bufs && rows ? CLATTN_SUCCESS
                                   : link_fail(l, CLATTN_ERR_OUT_OF_MEMORY,
                                               "rank %d: out of host memory", l->rank);
    for (size_t r = 0; r < ranks && !s; r++) {
        clattn_attention_shards(&g->call.whole, g->call.opt.sharding, ranks, r, &rows[r], NULL);
        if ((int)r == g->root) continue;
        size_t ob = o_bytes(g, &rows[r]);
        bufs[r] = malloc(ob + lse_bytes(g, &rows[r]) + 1);
        if (!bufs[r])
            s = link_fail(l, CLATTN_ERR_OUT_OF_MEMORY, "rank %d: out of host memory", l->rank);
        if (!s) s = link_recv(l, bufs[r], ob, (int)r, TAG_GATHER, "rows of O for the gather");
        if (!s && g->with_lse)
            s = link_recv(l, bufs[r] + ob, lse_bytes(g, &rows[r]), (int)r, TAG_GATHER,
                          "rows of LSE for the gather");
    }
    int unused = 0;
    if (!s) s = link_wait(l, NULL, &unused);
    for (size_t r = 0; r < ranks && !s; r++)
        place_rows(g, &rows[r], (int)r == g->root ? o_shard : bufs[r],
                   (int)r == g->root ? lse_shard : (const float *)(bufs[r] + o_bytes(g, &rows[r])),
                   o, lse);
    for (size_t r = 0; bufs && r < ranks; r++) free(bufs[r]);
    free(bufs), free(rows);
    return s;
}

static clattn_status check_gather(gather *g, const clattn_attention_desc *desc,
                                  const clattn_mpi_options *options, const void *o_shard,
                                  const void *o_whole, const float *lse_whole, char *message,
                                  size_t size) {
    mpi_call *c = &g->call;
    clattn_status s = call_read_options(options, &c->opt, message, size);
    if (!s && !desc) s = CLATTN_ERR_INVALID_ARGUMENT, snprintf(message, size, "desc is NULL");
    if (!s) s = clattn_attention_desc_check(desc, NULL, message, size);
    if (!s) desc_copy(desc, &c->whole);
    if (!s && clattn_attention_shards(&c->whole, c->opt.sharding, (size_t)c->link.size,
                                      (size_t)c->link.rank, &c->q_rows, NULL))
        s = CLATTN_ERR_INVALID_ARGUMENT, snprintf(message, size, "the desc is a shard");
    if (!s && (g->root < 0 || g->root >= c->link.size))
        s = CLATTN_ERR_INVALID_ARGUMENT,
        snprintf(message, size, "root %d is no rank of %d", g->root, c->link.size);
    if (!s && c->q_rows.rows && !o_shard)
        s = CLATTN_ERR_INVALID_ARGUMENT, snprintf(message, size, "o_shard is NULL");
    if (!s && c->link.rank == g->root && !o_whole)
        s = CLATTN_ERR_INVALID_ARGUMENT, snprintf(message, size, "the root's o_whole is NULL");
    if (!s && c->link.rank == g->root && g->with_lse && !lse_whole)
        s = CLATTN_ERR_INVALID_ARGUMENT,
        snprintf(message, size,
                 "the root's lse_whole is NULL but its lse_shard is not (LSE is gathered when "
                 "the ranks pass lse_shard)");
    g->elem = !s && c->whole.out_dtype != CLATTN_F32 ? 2 : 4;
    return s;
}

clattn_status clattn_mpi_gather(MPI_Comm comm, const clattn_attention_desc *desc,
                                const clattn_mpi_options *options, const void *o_shard,
                                const float *lse_shard, int root, void *o_whole, float *lse_whole,
                                clattn_mpi_report *report) {
    gather *g = calloc(1, sizeof *g);
    if (!g) return CLATTN_ERR_OUT_OF_MEMORY;
    g->root = root, g->with_lse = lse_shard != NULL;
    mpi_link *l = &g->call.link;
    MPI_Errhandler saved;
    double timeout = options && options->struct_size >= sizeof *options ? options->timeout_s : 0;
    clattn_status s = link_init(l, comm, timeout, &saved);
    if (!s) {
        char message[LINK_MESSAGE] = "";
        clattn_status local =
            check_gather(g, desc, options, o_shard, o_whole, lse_whole, message, sizeof message);
        uint64_t fingerprint = local ? 0 : call_fingerprint(&g->call.whole, &g->call.opt);
        fingerprint ^= (uint64_t)g->with_lse << 63 ^ (uint64_t)(unsigned)root;
        s = link_agree(l, local, message, fingerprint);
    }
    if (!s && l->rank == root) s = root_receives(g, o_shard, lse_shard, o_whole, lse_whole);
    if (!s && l->rank != root) {
        s = link_send(l, o_shard, o_bytes(g, &g->call.q_rows), root, TAG_GATHER, "rows of O");
        if (!s && g->with_lse)
            s = link_send(l, lse_shard, lse_bytes(g, &g->call.q_rows), root, TAG_GATHER,
                          "rows of LSE");
        int unused = 0;
        if (!s) s = link_wait(l, NULL, &unused);
    }
    if (report && report->struct_size >= sizeof *report)
        snprintf(report->message, sizeof report->message, "%s", s ? l->message : "");
    link_release(l, saved);
    free(g);
    return s;
}
