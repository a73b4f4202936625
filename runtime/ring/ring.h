/*
 * Ring attention inside the library (clattn.h, "shards and rings"): how rows are cut into the
 * shards of R parts, and the checks every ring entry point shares. ring.c runs one part on a
 * context (clattn_ring), multi.c several parts on several contexts of one process.
 */
#ifndef CLATTN_RING_H
#define CLATTN_RING_H

#include "plan/problem.h"

/* The rows part `part` of `parts` holds of a sequence of n rows: chunk `part` of `parts`, or
 * chunks part and 2*parts-1-part of 2*parts (zigzag), chunk edges on multiples of granule. */
void shard_rows(size_t n, size_t parts, size_t part, int zigzag, size_t granule,
                clattn_shard *shard);

/* Checks a desc as every call does and reads it whole (struct_size), refusing a shard: a ring
 * takes the whole call. @return CLATTN_SUCCESS or CLATTN_ERR_INVALID_ARGUMENT (message in err). */
clattn_status ring_read_whole(const clattn_attention_desc *given, error_record *err,
                              clattn_attention_desc *whole);

/* What a call split over parts cannot take, refused with `who` ("ring", "multi") naming the
 * caller: quantised K/V shards, score modifiers and sinks (a part's call sees only some of a
 * row's keys) and lse_parts (the parts' LSEs are merged as one float32 a row).
 * @return CLATTN_SUCCESS, CLATTN_ERR_UNSUPPORTED or CLATTN_ERR_INVALID_ARGUMENT (in err). */
clattn_status ring_check_splittable(const clattn_attention_desc *whole, const char *who,
                                    error_record *err);

/* The query and key rows of a part (either may be NULL), AUTO resolved from whole->causal. */
clattn_status ring_shards(const clattn_attention_desc *whole, clattn_sharding sharding,
                          size_t parts, size_t part, error_record *err, clattn_shard *q_rows,
                          clattn_shard *k_rows);

#endif
