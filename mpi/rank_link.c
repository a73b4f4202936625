/* Transfers with a time limit, the collective agreement and shard copies (rank_link.h). */
#include "rank_link.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PIECE_BYTES ((size_t)1 << 30) /* below MPI's int counts */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

clattn_status link_fail(mpi_link *l, clattn_status status, const char *fmt, ...) {
    if (!l->message[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(l->message, sizeof l->message, fmt, ap);
        va_end(ap);
    }
    return status;
}

clattn_status link_init(mpi_link *l, MPI_Comm comm, double timeout_s, MPI_Errhandler *saved) {
    memset(l, 0, sizeof *l);
    l->comm = comm;
    l->timeout_s = timeout_s > 0 ? timeout_s : 60.0;
    *saved = MPI_ERRHANDLER_NULL;
    if (comm == MPI_COMM_NULL || MPI_Comm_get_errhandler(comm, saved) != MPI_SUCCESS)
        return link_fail(l, CLATTN_ERR_COMM, "the communicator is not usable");
    if (MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN) != MPI_SUCCESS ||
        MPI_Comm_rank(comm, &l->rank) != MPI_SUCCESS ||
        MPI_Comm_size(comm, &l->size) != MPI_SUCCESS)
        return link_fail(l, CLATTN_ERR_COMM, "the communicator is not usable");
    return CLATTN_SUCCESS;
}

/* Cancels (receives) and frees what is still posted: after a timeout the peer may never come. */
static void drop_requests(mpi_link *l) {
    for (size_t i = 0; i < l->count; i++) {
        if (l->requests[i] == MPI_REQUEST_NULL) continue;
        MPI_Cancel(&l->requests[i]);
        MPI_Request_free(&l->requests[i]);
    }
    l->count = 0;
}

void link_release(mpi_link *l, MPI_Errhandler saved) {
    drop_requests(l);
    free(l->requests);
    free(l->what);
    l->requests = NULL, l->what = NULL, l->cap = 0;
    if (saved != MPI_ERRHANDLER_NULL && l->comm != MPI_COMM_NULL) {
        MPI_Comm_set_errhandler(l->comm, saved);
        MPI_Errhandler_free(&saved);
    }
}

static clattn_status post(mpi_link *l, void *buf, size_t bytes, int peer, int tag, int send,
                          const char *what) {
    size_t pieces = bytes / PIECE_BYTES + 1; /* a last piece, maybe empty: a 0-byte shard too */
    if (l->count + pieces > l->cap) {
        size_t cap = (l->count + pieces) * 2;
        MPI_Request *r = realloc(l->requests, cap * sizeof *r);
        if (r) l->requests = r;
        const char **w = r ? realloc(l->what, cap * sizeof *w) : NULL;
        if (!r || !w) return link_fail(l, CLATTN_ERR_OUT_OF_MEMORY, "out of host memory");
        l->what = w, l->cap = cap;
    }
    for (size_t k = 0; k < pieces; k++) {
        size_t at = k * PIECE_BYTES, n = bytes - at < PIECE_BYTES ? bytes - at : PIECE_BYTES;
        char *p = (char *)buf + at;
        MPI_Request *r = &l->requests[l->count];
        int err = send ? MPI_Isend(p, (int)n, MPI_BYTE, peer, tag, l->comm, r)
                       : MPI_Irecv(p, (int)n, MPI_BYTE, peer, tag, l->comm, r);
        if (err != MPI_SUCCESS)
            return link_fail(l, CLATTN_ERR_COMM, "rank %d: MPI could not post the %s %s rank %d",
                             l->rank, what, send ? "to" : "from", peer);
        l->what[l->count++] = what;
    }
    if (send) l->bytes_sent += bytes;
    return CLATTN_SUCCESS;
}

clattn_status link_send(mpi_link *l, const void *buf, size_t bytes, int peer, int tag,
                        const char *what) {
    return post(l, (void *)buf, bytes, peer, tag, 1, what);
}

clattn_status link_recv(mpi_link *l, void *buf, size_t bytes, int peer, int tag, const char *what) {
    return post(l, buf, bytes, peer, tag, 0, what);
}

/* 1 when the work is done (or failed: *err), 0 while it runs. */
static int work_done(cl_event work, cl_int *err) {
    cl_int state = CL_QUEUED;
    *err = clGetEventInfo(work, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof state, &state, NULL);
    if (*err == CL_SUCCESS && state < 0) *err = state;
    return *err != CL_SUCCESS || state == CL_COMPLETE;
}

/* The first request still pending, for the timeout's message. */
static const char *pending(const mpi_link *l) {
    for (size_t i = 0; i < l->count; i++)
        if (l->requests[i] != MPI_REQUEST_NULL) return l->what[i];
    return "transfer";
}

clattn_status link_wait(mpi_link *l, cl_event work, int *work_failed) {
    double start = now_s(), done_at = work ? 0.0 : start;
    long pause_ns = 20000;
    cl_int work_err = CL_SUCCESS;
    *work_failed = 0;
    for (;;) {
        int all = 1;
        if (l->count && MPI_Testall((int)l->count, l->requests, &all, MPI_STATUSES_IGNORE))
            return link_fail(l, CLATTN_ERR_COMM, "rank %d: MPI failed waiting for the %s", l->rank,
                             pending(l));
        if (!done_at && work_done(work, &work_err)) done_at = now_s();
        if (done_at && all) break; /* failed work too: the transfers still complete */
        if (done_at && now_s() - done_at > l->timeout_s)
            return link_fail(l, CLATTN_ERR_TIMEOUT,
                             "rank %d: no progress on the %s for %.0f s: a rank died or hangs",
                             l->rank, pending(l), l->timeout_s);
        struct timespec pause = {0, pause_ns};
        nanosleep(&pause, NULL);
        if (pause_ns < 1000000) pause_ns *= 2;
    }
    l->compute_s += done_at - start;
    l->wait_s += now_s() - done_at;
    l->count = 0;
    *work_failed = work_err != CL_SUCCESS;
    return (clattn_status)work_err;
}

/* ---------------------------------------------------------------- agreement */

typedef struct vote {
    int32_t status;
    uint32_t pad;
    uint64_t fingerprint;
    char message[LINK_MESSAGE - 64];
} vote;

/* Every rank's vote, this one's at votes[rank]. */
static clattn_status exchange_votes(mpi_link *l, vote *votes) {
    clattn_status s = CLATTN_SUCCESS;
    for (int r = 0; r < l->size && !s; r++) {
        if (r == l->rank) continue;
        s = link_recv(l, &votes[r], sizeof *votes, r, TAG_AGREE, "agreement");
        if (!s) s = link_send(l, &votes[l->rank], sizeof *votes, r, TAG_AGREE, "agreement");
    }
    int unused = 0;
    return s ? s : link_wait(l, NULL, &unused);
}

clattn_status link_agree(mpi_link *l, clattn_status status, const char *message,
                         uint64_t fingerprint) {
    vote *votes = calloc((size_t)l->size, sizeof *votes);
    if (!votes)
        return link_fail(l, CLATTN_ERR_OUT_OF_MEMORY, "rank %d: out of host memory", l->rank);
    vote *mine = &votes[l->rank];
    mine->status = (int32_t)status, mine->fingerprint = fingerprint;
    snprintf(mine->message, sizeof mine->message, "%s",
             message && *message ? message : clattn_status_string(status));
    clattn_status s = exchange_votes(l, votes);
    for (int r = 0; r < l->size && !s; r++)
        if (votes[r].status != CLATTN_SUCCESS) {
            s = (clattn_status)votes[r].status;
            l->message[0] = '\0';
            link_fail(l, s, "rank %d: %s", r, votes[r].message);
        }
    for (int r = 1; r < l->size && !s; r++)
        if (votes[r].fingerprint != votes[0].fingerprint)
            s = link_fail(l, CLATTN_ERR_INVALID_ARGUMENT,
                          "rank %d: its desc or options differ from rank 0's (every rank must "
                          "make the same call)",
                          r);
    free(votes);
    return s;
}

clattn_status clattn_mpi_agree(MPI_Comm comm, clattn_status status, char *message,
                               size_t message_size, double timeout_s) {
    mpi_link l;
    MPI_Errhandler saved;
    clattn_status s = link_init(&l, comm, timeout_s, &saved);
    if (!s) s = link_agree(&l, status, message, 0);
    if (s && message && message_size) snprintf(message, message_size, "%s", l.message);
    link_release(&l, saved);
    return s;
}
