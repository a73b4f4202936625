/* Shard arrays: row maps, dense strides, copies between strided arrays, and what must be equal
 * on every rank (rank_link.h). */
#include "rank_link.h"

#include <stdlib.h>
#include <string.h>

size_t *shard_row_map(const clattn_shard *s) {
    size_t *map = malloc((s->rows + 1) * sizeof *map), at = 0;
    if (!map) return NULL;
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < s->len[k]; i++) map[at++] = s->start[k] + i;
    return map;
}

clattn_tensor dense_tensor(clattn_layout layout, size_t heads, size_t rows, size_t dim) {
    clattn_tensor t = {0, 0, 0, 0};
    clattn_tensor_dense(&t, layout, heads, rows ? rows : 1, dim, 0);
    return t;
}

clattn_tensor lse_tensor(size_t heads, size_t rows) {
    clattn_tensor t = {0, heads * rows, rows, 1};
    return t;
}

static size_t element_at(const clattn_tensor *t, size_t b, size_t h, size_t row) {
    return t->offset + b * t->stride_batch + h * t->stride_head + row * t->stride_seq;
}

void copy_block(const block_copy *c, const void *src, void *dst) {
    const char *from = src;
    char *to = dst;
    for (size_t b = 0; b < c->batch; b++)
        for (size_t i = 0; i < c->rows; i++) {
            size_t si = c->src_map ? c->src_map[i] : i, di = c->dst_map ? c->dst_map[i] : i;
            for (size_t h = 0; h < c->heads; h++)
                memcpy(to + element_at(c->dst, b, c->dst_h0 + h, di) * c->elem,
                       from + element_at(c->src, b, c->src_h0 + h, si) * c->elem, c->dim * c->elem);
        }
}

void desc_copy(const clattn_attention_desc *given, clattn_attention_desc *whole) {
    memset(whole, 0, sizeof *whole);
    memcpy(whole, given, given->struct_size < sizeof *whole ? given->struct_size : sizeof *whole);
    whole->struct_size = sizeof *whole;
}

static uint64_t fnv1a(uint64_t hash, const void *data, size_t size) {
    const unsigned char *bytes = data;
    for (size_t i = 0; i < size; i++) hash = (hash ^ bytes[i]) * 1099511628211ull;
    return hash;
}

#define HASH_FIELD(h, x) ((h) = fnv1a((h), &(x), sizeof(x)))

uint64_t call_fingerprint(const clattn_attention_desc *d, const clattn_mpi_options *o) {
    uint64_t h = 14695981039346656037ull;
    size_t sizes[] = {d->batch, d->heads_q, d->heads_kv, d->len_q, d->len_k, d->dim_qk, d->dim_v};
    int64_t mask[] = {d->causal,
                      d->window_left,
                      d->window_right,
                      d->dilation,
                      d->block_layout != NULL,
                      (int64_t)d->block_q,
                      (int64_t)d->block_k,
                      d->block_layout_per_head,
                      d->bias_host != NULL,
                      d->path,
                      d->variant,
                      d->kv_q8_0,
                      d->kv_q4_0,
                      d->lse_parts,
                      d->alibi_per_batch,
                      d->dtype,
                      d->out_dtype,
                      o->mode,
                      o->sharding,
                      o->layout};
    HASH_FIELD(h, sizes);
    HASH_FIELD(h, mask);
    HASH_FIELD(h, d->scale);
    HASH_FIELD(h, d->softcap);
    h = fnv1a(h, d->global_tokens, d->num_global_tokens * sizeof *d->global_tokens);
    size_t slopes = d->alibi_per_batch ? d->batch * d->heads_q : d->heads_q;
    int64_t present[] = {d->alibi_slopes != NULL, d->sinks != NULL};
    HASH_FIELD(h, present);
    if (d->alibi_slopes) h = fnv1a(h, d->alibi_slopes, slopes * sizeof *d->alibi_slopes);
    if (d->sinks) h = fnv1a(h, d->sinks, d->heads_q * sizeof *d->sinks);
    if (d->bias_host) HASH_FIELD(h, d->bias_strides);
    if (d->block_layout) {
        size_t heads = d->block_layout_per_head ? d->heads_q : 1;
        size_t cells = heads * ((d->len_q + d->block_q - 1) / d->block_q) *
                       ((d->len_k + d->block_k - 1) / d->block_k);
        h = fnv1a(h, d->block_layout, cells);
    }
    return h;
}

/* ---------------------------------------------------------------- test hooks */

#ifdef CLATTN_TEST_HOOKS
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

void test_hook_ring_step(int rank, int step) {
    const char *spec = getenv("CLATTN_TEST_MPI_FAIL");
    int r = -1, s = -1;
    char how[8] = "";
    if (!spec || sscanf(spec, "%d:%d:%7s", &r, &s, how) != 3 || r != rank || s != step) return;
    if (strcmp(how, "exit") == 0) _exit(3);       /* dies: no MPI_Finalize, no cleanup */
    if (strcmp(how, "stop") == 0) raise(SIGSTOP); /* hangs until killed */
}
#else
void test_hook_ring_step(int rank, int step) {
    (void)rank, (void)step;
}
#endif
