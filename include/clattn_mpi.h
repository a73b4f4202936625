/*
 * libclattn_mpi - clattn's attention sharded over the processes of an MPI communicator
 * (context parallelism), each process on its own OpenCL device.
 *
 * Built beside libclattn when CMake finds MPI; it uses clattn's public API only (clattn.h:
 * shard calls, clattn_ring, clattn_attention_merge), and libclattn does not depend on MPI.
 *
 * Two modes:
 * - Ring attention (Liu et al. 2023): each rank holds a shard of the query rows and one of the
 *   key/value rows (clattn_attention_shards: zigzag chunks for causal calls, so that every rank
 *   gets as much work). The key/value shards go round the ring with non-blocking sends and
 *   receives, each moving while the device attends the shard in hand; the partial results are
 *   merged exactly through their LSE. Every mask, GQA, both layouts and 16-bit storage work.
 * - Ulysses (DeepSpeed-Ulysses): one all-to-all turns the sequence shards into head shards
 *   (each rank the whole sequence for heads_kv / R key/value heads and their query heads), the
 *   attention runs whole there, and a second all-to-all turns the result back. It needs heads_kv
 *   to be a multiple of the ranks.
 * Either way each rank ends with exactly its rows of the whole call's O and LSE.
 *
 * Failures are collective. Every rank checks its arguments and the ranks agree before any
 * shard moves: a problem on any rank (a bad desc, desc or options that differ between ranks,
 * a device out of memory) fails every rank with the same status and message, naming the rank.
 * A rank that stops answering (it died, or hangs) fails the others with CLATTN_ERR_TIMEOUT
 * after options->timeout_s of silence, instead of a hang; after that, and after
 * CLATTN_ERR_COMM, the communicator is unusable and the process should end (MPI_Abort).
 *
 * The library sends on the caller's communicator with tags 0x6C00 to 0x6CFF, which the caller
 * must not use for other messages meanwhile. MPI must be initialised (MPI_Init). A call is
 * made by one thread of each rank.
 */
#ifndef CLATTN_MPI_H
#define CLATTN_MPI_H

#include "clattn.h"

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(CLATTN_MPI_SHARED_BUILD)
#define CLATTN_MPI_API __declspec(dllexport)
#elif defined(__GNUC__)
#define CLATTN_MPI_API __attribute__((visibility("default")))
#else
#define CLATTN_MPI_API
#endif

typedef enum clattn_mpi_mode {
    CLATTN_MPI_RING = 0,   /* ring attention: key/value shards go round the ranks */
    CLATTN_MPI_ULYSSES = 1 /* all-to-all: sequence shards to head shards and back */
} clattn_mpi_mode;

/** How a call is distributed. Equal on every rank (checked). */
typedef struct clattn_mpi_options {
    size_t struct_size;       /* sizeof(clattn_mpi_options): clattn_mpi_options_init */
    clattn_mpi_mode mode;     /* RING (default) or ULYSSES */
    clattn_sharding sharding; /* the ranks' rows (clattn_attention_shards); AUTO: zigzag for
                                 causal calls */
    clattn_layout layout;     /* of the shard arrays */
    double timeout_s;         /* a peer silent this long, while this rank waits for it, fails
                                 the call with CLATTN_ERR_TIMEOUT; 0: 60 s */
} clattn_mpi_options;

/** Fills *options with the defaults (ring, AUTO sharding, BSHD shards, 60 s).
 *  @return CLATTN_SUCCESS or CLATTN_ERR_INVALID_ARGUMENT (NULL, a size below the first
 *  layout). */
CLATTN_MPI_API clattn_status clattn_mpi_options_init_sized(clattn_mpi_options *options,
                                                           size_t struct_size);
#define clattn_mpi_options_init(options) clattn_mpi_options_init_sized((options), sizeof *(options))

/** What a call did, on this rank; and, when it failed, why (the same message on every rank for
 *  a collective failure). */
typedef struct clattn_mpi_report {
    size_t struct_size; /* sizeof(clattn_mpi_report): clattn_mpi_report_init */
    char message[1024]; /* "" on success; else one line naming the rank and the problem */
    double total_ms;    /* the call, from the first check to the result */
    double compute_ms;  /* waiting for this rank's device work (attention and merges) */
    double wait_ms;     /* waiting for other ranks after this rank's own work was done */
    size_t calls;       /* shard calls this rank ran: the ring's chunk pairs with an allowed
                           pair; Ulysses' 1, the call over this rank's heads */
    size_t skipped;     /* the ring's chunk pairs skipped because their mask allows no pair */
    uint64_t bytes_sent;
} clattn_mpi_report;

/** Zeroes `struct_size` bytes of *report and sets report->struct_size. */
CLATTN_MPI_API clattn_status clattn_mpi_report_init_sized(clattn_mpi_report *report,
                                                          size_t struct_size);
#define clattn_mpi_report_init(report) clattn_mpi_report_init_sized((report), sizeof *(report))

/** The whole call `desc` (shard fields 0) over the ranks of comm; collective, every rank with
 *  the same desc and options, each with its own context. Rank r holds the rows
 *  clattn_attention_shards(desc, options->sharding, size, r) gives, in shard arrays dense in
 *  options->layout: q_shard [B, rows_q, Hq, Dqk] and k_shard, v_shard [B, rows_k, Hkv, D] in
 *  desc->dtype, o_shard [B, rows_q, Hq, Dv] in desc->out_dtype, lse_shard float32
 *  [B, Hq, rows_q] (may be NULL); an array of a shard with no rows may be NULL (the BHSD
 *  order is [B, H, rows, D]). The bias, when given, is the whole call's desc->bias_host on
 *  every rank, as are the global tokens and the block layout. `report` may be NULL.
 *  @return CLATTN_SUCCESS; the agreed failure of any rank's checks or device work
 *  (CLATTN_ERR_INVALID_ARGUMENT, CLATTN_ERR_UNSUPPORTED, CLATTN_ERR_OUT_OF_MEMORY, an OpenCL
 *  error, ...), the same on every rank; CLATTN_ERR_TIMEOUT (a peer stopped answering);
 *  CLATTN_ERR_COMM (an MPI call failed). On a failure o_shard and lse_shard are unspecified. */
CLATTN_MPI_API clattn_status clattn_mpi_attention(clattn_context *ctx, MPI_Comm comm,
                                                  const clattn_attention_desc *desc,
                                                  const clattn_mpi_options *options,
                                                  const void *q_shard, const void *k_shard,
                                                  const void *v_shard, void *o_shard,
                                                  float *lse_shard, clattn_mpi_report *report);

/** Gathers every rank's rows of O and LSE into the whole call's arrays on rank `root`:
 *  o_whole [B, Nq, Hq, Dv] dense in options->layout and desc->out_dtype, lse_whole float32
 *  [B, Hq, Nq]. LSE is gathered when the ranks pass lse_shard: all of them or none (the ranks
 *  must agree; a rank without rows passes any non-NULL pointer, which is not read), and the
 *  root then passes lse_whole. Collective; the other ranks pass NULL for o_whole.
 *  @return CLATTN_SUCCESS, CLATTN_ERR_INVALID_ARGUMENT (agreed, as for clattn_mpi_attention),
 *  CLATTN_ERR_TIMEOUT or CLATTN_ERR_COMM. */
CLATTN_MPI_API clattn_status clattn_mpi_gather(MPI_Comm comm, const clattn_attention_desc *desc,
                                               const clattn_mpi_options *options,
                                               const void *o_shard, const float *lse_shard,
                                               int root, void *o_whole, float *lse_whole,
                                               clattn_mpi_report *report);

/** Agrees on the ranks' own outcomes, for work done outside the library (a program reading its
 *  inputs): every rank passes its status and, when it failed, a message; every rank returns
 *  the failure of the lowest failing rank, with `message` replaced by "rank R: " and that
 *  rank's message (the same text on every rank), or CLATTN_SUCCESS when every rank succeeded.
 *  Collective; waits at most timeout_s (0: 60 s) for the other ranks.
 *  @return the agreed status, CLATTN_ERR_TIMEOUT or CLATTN_ERR_COMM. */
CLATTN_MPI_API clattn_status clattn_mpi_agree(MPI_Comm comm, clattn_status status, char *message,
                                              size_t message_size, double timeout_s);

#ifdef __cplusplus
}
#endif
#endif /* CLATTN_MPI_H */
