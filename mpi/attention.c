/*
 * clattn_mpi_attention: the checks every rank makes and agrees on, and the ring mode. In the
 * ring, rank r holds key/value shard r at first; at step s it attends the shard of part
 * (r - s) mod R while it receives the next one from rank r - 1 and sends the one in hand to
 * rank r + 1 (non-blocking, polled with the device's work: link_wait). A rank whose device
 * fails keeps passing shards on, so that no rank waits for nothing, and the failure is agreed
 * at the end.
 */
#include "mpi_call.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

clattn_status clattn_mpi_options_init_sized(clattn_mpi_options *options, size_t struct_size) {
    if (!options || struct_size < sizeof *options) return CLATTN_ERR_INVALID_ARGUMENT;
    memset(options, 0, struct_size);
    options->struct_size = struct_size;
    options->mode = CLATTN_MPI_RING;
    options->sharding = CLATTN_SHARDING_AUTO;
    options->layout = CLATTN_LAYOUT_BSHD;
    options->timeout_s = 60.0;
    return CLATTN_SUCCESS;
}

clattn_status clattn_mpi_report_init_sized(clattn_mpi_report *report, size_t struct_size) {
    if (!report || struct_size < sizeof *report) return CLATTN_ERR_INVALID_ARGUMENT;
    memset(report, 0, struct_size);
    report->struct_size = struct_size;
    return CLATTN_SUCCESS;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------- checks */

clattn_status call_read_options(const clattn_mpi_options *given, clattn_mpi_options *o,
                                char *message, size_t size) {
    clattn_mpi_options_init(o);
    if (!given) return CLATTN_SUCCESS;
    if (given->struct_size < sizeof *o) {
        snprintf(message, size, "options->struct_size is %zu: start from clattn_mpi_options_init",
                 given->struct_size);
        return CLATTN_ERR_INVALID_ARGUMENT;
    }
    memcpy(o, given, sizeof *o);
    o->struct_size = sizeof *o;
    if ((o->mode != CLATTN_MPI_RING && o->mode != CLATTN_MPI_ULYSSES) ||
        (o->layout != CLATTN_LAYOUT_BSHD && o->layout != CLATTN_LAYOUT_BHSD) ||
        !(o->timeout_s >= 0 && isfinite(o->timeout_s))) {
        snprintf(message, size, "options: mode %d, layout %d or timeout %g is not one there is",
                 (int)o->mode, (int)o->layout, o->timeout_s);
        return CLATTN_ERR_INVALID_ARGUMENT;
    }
    return CLATTN_SUCCESS;
}

/* The desc (the whole call) and this rank's rows. */
static clattn_status check_desc(mpi_call *c, const clattn_attention_desc *desc, char *message,
                                size_t size) {
    clattn_status s = clattn_attention_desc_check(desc, NULL, message, size);
    if (s) return s;
    desc_copy(desc, &c->whole);
    const clattn_attention_desc *w = &c->whole;
    if (w->kv_q8_0 || w->kv_q4_0) {
        snprintf(message, size, "q8_0 and q4_0 key/value shards are not supported");
        return CLATTN_ERR_UNSUPPORTED;
    }
    if (w->bias && !w->bias_host) {
        snprintf(message, size, "the bias must be the whole call's host array (bias_host)");
        return CLATTN_ERR_INVALID_ARGUMENT;
    }
    if (w->lse_parts) {
        snprintf(message, size, "lse_parts is not supported (lse_shard is one float32 a row)");
        return CLATTN_ERR_INVALID_ARGUMENT;
    }
    s = clattn_attention_shards(w, c->opt.sharding, (size_t)c->link.size, (size_t)c->link.rank,
                                &c->q_rows, &c->k_rows);
    if (s)
        snprintf(message, size, "the desc is a shard, or the sharding %d is unknown",
                 (int)c->opt.sharding);
    return s;
}

static clattn_status check_local(mpi_call *c, const clattn_attention_desc *desc,
                                 const clattn_mpi_options *options, const void *const arrays[4],
                                 char *message, size_t size) {
    static const char *const names[4] = {"q_shard", "k_shard", "v_shard", "o_shard"};
    if (!c->ctx) return snprintf(message, size, "ctx is NULL"), CLATTN_ERR_INVALID_ARGUMENT;
    if (!desc) return snprintf(message, size, "desc is NULL"), CLATTN_ERR_INVALID_ARGUMENT;
    clattn_status s = call_read_options(options, &c->opt, message, size);
    if (!s) s = check_desc(c, desc, message, size);
    size_t rows[4] = {c->q_rows.rows, c->k_rows.rows, c->k_rows.rows, c->q_rows.rows};
    for (int i = 0; i < 4 && !s; i++)
        if (rows[i] && !arrays[i]) {
            snprintf(message, size, "%s is NULL but this rank holds %zu rows", names[i], rows[i]);
            s = CLATTN_ERR_INVALID_ARGUMENT;
        }
    const clattn_attention_desc *w = &c->whole;
    if (!s && c->opt.mode == CLATTN_MPI_ULYSSES && w->heads_kv % (size_t)c->link.size) {
        snprintf(message, size,
                 "ulysses: heads_kv (%zu) must be a multiple of the ranks (%d): each rank takes "
                 "whole key/value heads (use the ring)",
                 w->heads_kv, c->link.size);
        s = CLATTN_ERR_INVALID_ARGUMENT;
    }
    return s;
}

/* ---------------------------------------------------------------- the ring */

/* Bytes of part p's key/value shard: K then V, each dense. */
static void kv_bytes(const mpi_call *c, size_t p, size_t *k_bytes, size_t *total) {
    const clattn_attention_desc *w = &c->whole;
    clattn_shard rows;
    clattn_attention_shards(w, c->opt.sharding, (size_t)c->link.size, p, NULL, &rows);
    size_t row = w->batch * w->heads_kv * rows.rows * (w->dtype == CLATTN_F32 ? 4 : 2);
    *k_bytes = row * w->dim_qk;
    *total = row * (w->dim_qk + w->dim_v);
}

/* One step: the shard of part p in hand attended while the next moves. @return a transfer's
 * failure (the device's goes to *local). */
static clattn_status ring_step(mpi_call *c, clattn_ring *ring, int step, char *hand, char *next,
                               clattn_status *local, char *message, size_t size) {
    const int R = c->link.size, r = c->link.rank;
    const size_t p = (size_t)((r - step + 2 * R) % R),
                 incoming = (size_t)((r - step - 1 + 2 * R) % R);
    size_t k_bytes, bytes, next_k, next_bytes;
    kv_bytes(c, p, &k_bytes, &bytes);
    kv_bytes(c, incoming, &next_k, &next_bytes);
    clattn_status s = CLATTN_SUCCESS;
    if (step < R - 1) {
        s = link_recv(&c->link, next, next_bytes, (r + R - 1) % R, TAG_RING,
                      "key/value shard from the previous rank");
        if (!s)
            s = link_send(&c->link, hand, bytes, (r + 1) % R, TAG_RING,
                          "key/value shard to the next rank");
    }
    cl_event work = NULL;
    if (!s && !*local) {
        *local = clattn_ring_attend(ring, p, hand, hand + k_bytes, &work);
        if (*local) snprintf(message, size, "%s", clattn_context_last_error(c->ctx));
    }
    int work_failed = 0;
    if (!s) s = link_wait(&c->link, work, &work_failed);
    if (work) clReleaseEvent(work);
    if (work_failed) {
        *local = s, s = CLATTN_SUCCESS;
        snprintf(message, size, "the device failed attending a shard (%s)",
                 clattn_status_name(*local));
    }
    return s;
}

static clattn_status ring_steps(mpi_call *c, clattn_ring *ring, const void *k, const void *v,
                                clattn_status *local, char *message, size_t size) {
    size_t most = 0, k_bytes, bytes;
    for (int p = 0; p < c->link.size; p++) {
        kv_bytes(c, (size_t)p, &k_bytes, &bytes);
        if (bytes > most) most = bytes;
    }
    char *hand = malloc(most + 1), *next = malloc(most + 1);
    if (!hand || !next) {
        free(hand), free(next);
        return link_fail(&c->link, CLATTN_ERR_OUT_OF_MEMORY,
                         "rank %d: out of host memory for two key/value shards (%zu bytes)",
                         c->link.rank, 2 * most);
    }
    kv_bytes(c, (size_t)c->link.rank, &k_bytes, &bytes);
    if (k_bytes) memcpy(hand, k, k_bytes);
    if (bytes > k_bytes) memcpy(hand + k_bytes, v, bytes - k_bytes);
    clattn_status s = CLATTN_SUCCESS;
    for (int step = 0; step < c->link.size && !s; step++) {
        test_hook_ring_step(c->link.rank, step);
        s = ring_step(c, ring, step, hand, next, local, message, size);
        char *t = hand;
        hand = next, next = t;
    }
    free(hand), free(next);
    return s;
}

static clattn_status ring_run(mpi_call *c, const void *q, const void *k, const void *v, void *o,
                              float *lse) {
    char message[LINK_MESSAGE] = "";
    clattn_ring *ring = NULL;
    clattn_status local = clattn_ring_create(c->ctx, &c->whole, c->opt.layout, c->opt.sharding,
                                             (size_t)c->link.size, (size_t)c->link.rank, q, &ring);
    if (local) snprintf(message, sizeof message, "%s", clattn_context_last_error(c->ctx));
    clattn_status s = link_agree(&c->link, local, message, 0); /* every device is ready */
    if (!s) s = ring_steps(c, ring, k, v, &local, message, sizeof message);
    if (!s && !local) {
        local = clattn_ring_finish(ring, o, lse);
        if (local) snprintf(message, sizeof message, "%s", clattn_context_last_error(c->ctx));
    }
    clattn_ring_counts(ring, &c->calls, &c->skipped); /* accepts a NULL ring */
    clattn_ring_destroy(ring);
    return s ? s : link_agree(&c->link, local, message, 0);
}

/* ---------------------------------------------------------------- the call */

static void fill_report(const mpi_call *c, clattn_status s, double start,
                        clattn_mpi_report *report) {
    if (!report || report->struct_size < sizeof *report) return;
    snprintf(report->message, sizeof report->message, "%s", s ? c->link.message : "");
    if (s && !report->message[0])
        snprintf(report->message, sizeof report->message, "%s", clattn_status_string(s));
    report->total_ms = (now_s() - start) * 1e3;
    report->compute_ms = c->link.compute_s * 1e3;
    report->wait_ms = c->link.wait_s * 1e3;
    report->bytes_sent = c->link.bytes_sent;
    report->calls = c->calls, report->skipped = c->skipped;
}

clattn_status clattn_mpi_attention(clattn_context *ctx, MPI_Comm comm,
                                   const clattn_attention_desc *desc,
                                   const clattn_mpi_options *options, const void *q_shard,
                                   const void *k_shard, const void *v_shard, void *o_shard,
                                   float *lse_shard, clattn_mpi_report *report) {
    double start = now_s();
    mpi_call *c = calloc(1, sizeof *c);
    if (!c) return CLATTN_ERR_OUT_OF_MEMORY;
    c->ctx = ctx;
    MPI_Errhandler saved;
    double timeout = options && options->struct_size >= sizeof *options ? options->timeout_s : 0;
    clattn_status s = link_init(&c->link, comm, timeout, &saved);
    if (!s) {
        char message[LINK_MESSAGE] = "";
        const void *arrays[4] = {q_shard, k_shard, v_shard, o_shard};
        clattn_status local = check_local(c, desc, options, arrays, message, sizeof message);
        uint64_t fingerprint = local ? 0 : call_fingerprint(&c->whole, &c->opt);
        s = link_agree(&c->link, local, message, fingerprint);
    }
    if (!s && c->opt.mode == CLATTN_MPI_RING)
        s = ring_run(c, q_shard, k_shard, v_shard, o_shard, lse_shard);
    else if (!s)
        s = ulysses_run(c, q_shard, k_shard, v_shard, o_shard, lse_shard);
    fill_report(c, s, start, report);
    link_release(&c->link, saved);
    free(c);
    return s;
}
