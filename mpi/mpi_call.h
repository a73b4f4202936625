/*
 * One call of libclattn_mpi on one rank: the whole call's desc, the options, this rank's rows
 * and the link to the other ranks. attention.c checks and agrees on it and runs the ring;
 * ulysses.c runs the all-to-all mode; gather.c collects the result on one rank.
 */
#ifndef CLATTN_MPI_CALL_H
#define CLATTN_MPI_CALL_H

#include "rank_link.h"

typedef struct mpi_call {
    clattn_context *ctx;
    clattn_attention_desc whole; /* read at the caller's struct_size */
    clattn_mpi_options opt;
    clattn_shard q_rows, k_rows; /* this rank's */
    mpi_link link;
    size_t calls, skipped; /* this rank's shard calls, and chunk pairs skipped (the report's) */
} mpi_call;

/* The options (NULL: the defaults), checked. @return CLATTN_SUCCESS or
 * CLATTN_ERR_INVALID_ARGUMENT with the message. */
clattn_status call_read_options(const clattn_mpi_options *given, clattn_mpi_options *o,
                                char *message, size_t size);

/* Ulysses: the call checked and agreed, heads_kv a multiple of the ranks. @return as
 * clattn_mpi_attention (the failure's message in c->link.message). */
clattn_status ulysses_run(mpi_call *c, const void *q, const void *k, const void *v, void *o,
                          float *lse);

#endif
