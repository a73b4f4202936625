/* clattn_attention_shards: which query and key/value rows each part of a ring holds
 * (contiguous or zigzag chunks, on block edges when the call has a block layout). */
#include "ring/ring.h"

#include <string.h>

/* Row where chunk c of `chunks` starts in a sequence of n rows (n at the end), on a multiple of
 * granule: n / chunks * c + (n % chunks) * c / chunks = floor(c * n / chunks), the second
 * product in 128 bits (a part count past 2^32 overflowed it). */
static size_t chunk_edge(size_t n, size_t chunks, size_t c, size_t granule) {
    if (c >= chunks) return n;
    size_t edge = n / chunks * c + (size_t)((unsigned __int128)(n % chunks) * c / chunks);
    return granule > 1 ? edge / granule * granule : edge;
}

void shard_rows(size_t n, size_t parts, size_t part, int zigzag, size_t granule,
                clattn_shard *shard) {
    memset(shard, 0, sizeof *shard);
    size_t chunks = zigzag ? 2 * parts : parts;
    size_t chunk[2] = {part, 2 * parts - 1 - part};
    for (int k = 0; k < (zigzag ? 2 : 1); k++) {
        size_t start = chunk_edge(n, chunks, chunk[k], granule);
        shard->start[k] = start;
        shard->len[k] = chunk_edge(n, chunks, chunk[k] + 1, granule) - start;
        shard->rows += shard->len[k];
    }
}

clattn_status ring_read_whole(const clattn_attention_desc *given, error_record *err,
                              clattn_attention_desc *whole) {
    attn_problem pb;
    clattn_status s = problem_build(given, BIAS_FROM_EITHER, err, &pb);
    problem_release(&pb);
    if (s != CLATTN_SUCCESS) return s;
    struct_read(whole, sizeof *whole, given, given->struct_size, CLATTN_ATTENTION_DESC_BASE_SIZE);
    whole->struct_size = sizeof *whole;
    if (mask_desc_is_shard(whole))
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "ring: the desc describes the whole call, not a shard (q_start=%zu "
                         "k_start=%zu full_len_q=%zu full_len_k=%zu must be 0)",
                         whole->q_start, whole->k_start, whole->full_len_q, whole->full_len_k);
    return CLATTN_SUCCESS;
}

clattn_status ring_check_splittable(const clattn_attention_desc *whole, const char *who,
                                    error_record *err) {
    if (whole->kv_q8_0 || whole->kv_q4_0)
        return error_set(err, CLATTN_ERR_UNSUPPORTED,
                         "%s: q8_0 and q4_0 key/value shards are not supported", who);
    if (whole->softcap > 0.0f || whole->alibi_slopes || whole->sinks)
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "%s: softcap, alibi_slopes and sinks are not combined with shard "
                         "positions (each part sees only some of a row's keys; over MPI, "
                         "Ulysses takes them)",
                         who);
    if (whole->lse_parts)
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "%s: lse_parts is not supported (the LSE is one float32 a row)", who);
    return CLATTN_SUCCESS;
}

clattn_status ring_shards(const clattn_attention_desc *whole, clattn_sharding sharding,
                          size_t parts, size_t part, error_record *err, clattn_shard *q_rows,
                          clattn_shard *k_rows) {
    if (parts == 0 || part >= parts || parts > SIZE_MAX / 4)
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT, "ring: part %zu of %zu parts", part,
                         parts);
    if (sharding != CLATTN_SHARDING_AUTO && sharding != CLATTN_SHARDING_CONTIGUOUS &&
        sharding != CLATTN_SHARDING_ZIGZAG)
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT, "ring: unknown sharding %d",
                         (int)sharding);
    int zigzag =
        sharding == CLATTN_SHARDING_ZIGZAG || (sharding == CLATTN_SHARDING_AUTO && whole->causal);
    int layout = whole->block_layout != NULL;
    clattn_shard unused;
    shard_rows(whole->len_q, parts, part, zigzag, layout ? whole->block_q : 1,
               q_rows ? q_rows : &unused);
    shard_rows(whole->len_k, parts, part, zigzag, layout ? whole->block_k : 1,
               k_rows ? k_rows : &unused);
    return CLATTN_SUCCESS;
}

clattn_status clattn_attention_shards(const clattn_attention_desc *desc, clattn_sharding sharding,
                                      size_t parts, size_t part, clattn_shard *q_rows,
                                      clattn_shard *k_rows) {
    clattn_attention_desc whole;
    clattn_status s = ring_read_whole(desc, NULL, &whole);
    if (s == CLATTN_SUCCESS) s = ring_shards(&whole, sharding, parts, part, NULL, q_rows, k_rows);
    return s;
}
