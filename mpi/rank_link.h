/*
 * What libclattn_mpi's files share: point-to-point transfers on the caller's communicator that
 * never wait longer than the call's timeout for a silent peer (non-blocking sends and receives,
 * in pieces below MPI's int counts, polled together with the device's work), the agreement
 * every collective failure goes through, and the copies between shard arrays and whole or
 * packed ones.
 */
#ifndef CLATTN_MPI_RANK_LINK_H
#define CLATTN_MPI_RANK_LINK_H

#include "clattn_mpi.h"

#include <stdint.h>

/* Tags on the caller's communicator (clattn_mpi.h: 0x6C00 to 0x6CFF). */
enum {
    TAG_AGREE = 0x6C00,
    TAG_RING = 0x6C10,
    TAG_ULYSSES_IN = 0x6C20,
    TAG_ULYSSES_OUT = 0x6C21,
    TAG_GATHER = 0x6C30
};

#define LINK_MESSAGE 1024

/* The transfers of one phase, and what the call has learnt. */
typedef struct mpi_link {
    MPI_Comm comm;
    int rank, size;
    double timeout_s;
    MPI_Request *requests;
    const char **what; /* [count]: "K/V shard from rank 2", for a timeout's message */
    size_t count, cap;
    uint64_t bytes_sent;
    double compute_s, wait_s;
    char message[LINK_MESSAGE]; /* the failure, once there is one */
} mpi_link;

/* Sets MPI_ERRORS_RETURN on comm (the caller's handler is kept in *saved and put back by
 * link_release). @return CLATTN_SUCCESS or CLATTN_ERR_COMM. */
clattn_status link_init(mpi_link *l, MPI_Comm comm, double timeout_s, MPI_Errhandler *saved);
/* Cancels and frees what is still posted, and puts the caller's error handler back. */
void link_release(mpi_link *l, MPI_Errhandler saved);

/* Posts a send or a receive of `bytes` (several requests when above MPI's int counts).
 * `what` names it for messages (static storage). @return CLATTN_SUCCESS or CLATTN_ERR_COMM. */
clattn_status link_send(mpi_link *l, const void *buf, size_t bytes, int peer, int tag,
                        const char *what);
clattn_status link_recv(mpi_link *l, void *buf, size_t bytes, int peer, int tag, const char *what);

/* Waits for the device's `work` (may be NULL) and every posted request, polling both; counts
 * the time until the work is done as compute, the rest as waiting. A request still pending
 * timeout_s after the work is done fails with CLATTN_ERR_TIMEOUT naming it. The requests are
 * freed. @return CLATTN_SUCCESS, CLATTN_ERR_TIMEOUT, CLATTN_ERR_COMM or the work's OpenCL
 * error (*work_failed set then, so a caller can tell the device's failure from the peers'). */
clattn_status link_wait(mpi_link *l, cl_event work, int *work_failed);

/* The collective outcome: each rank's status, message and fingerprint (a hash of the call's
 * arguments) to every other; the lowest failing rank's status and "rank R: message", else a
 * rank whose fingerprint differs from rank 0's, else CLATTN_SUCCESS. The result is in
 * l->message. */
clattn_status link_agree(mpi_link *l, clattn_status status, const char *message,
                         uint64_t fingerprint);

/* Sets l->message (when it holds none yet) and returns status. */
clattn_status link_fail(mpi_link *l, clattn_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- shard arrays */

/* Rows of a shard in the whole sequence: map[i] = the whole-sequence row of shard row i. */
size_t *shard_row_map(const clattn_shard *shard);

/* A tensor of `heads` heads, `rows` rows and `dim` values dense in `layout`: its strides. */
clattn_tensor dense_tensor(clattn_layout layout, size_t heads, size_t rows, size_t dim);
/* LSE [B, heads, rows]: strides (heads * rows, rows, 1). */
clattn_tensor lse_tensor(size_t heads, size_t rows);

/* Copies rows x heads of `dim` values (elem bytes each) for every batch entry: row i of the
 * source (src_map ? src_map[i] : i) to row (dst_map ? dst_map[i] : i) of the destination, heads
 * src_h0 + h to dst_h0 + h. */
typedef struct block_copy {
    size_t batch, rows, heads, dim, elem;
    const clattn_tensor *src, *dst;
    const size_t *src_map, *dst_map;
    size_t src_h0, dst_h0;
} block_copy;
void copy_block(const block_copy *c, const void *src, void *dst);

/* The whole call's desc, read at its struct_size into a full one (zeros past it). */
void desc_copy(const clattn_attention_desc *given, clattn_attention_desc *whole);
/* A hash of everything that must be equal on every rank: the desc's sizes, types, mask
 * (global tokens and layout by content), bias strides, path and variant, and the options. */
uint64_t call_fingerprint(const clattn_attention_desc *d, const clattn_mpi_options *o);

/* Test builds only (CLATTN_TEST_HOOKS): $CLATTN_TEST_MPI_FAIL = "RANK:STEP:exit" ends rank RANK
 * abruptly (_exit, no MPI_Finalize) at ring step STEP, "RANK:STEP:stop" stops it (SIGSTOP), as
 * a dead and a hung process. A no-op otherwise. */
void test_hook_ring_step(int rank, int step);

#endif
