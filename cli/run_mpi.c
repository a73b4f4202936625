/*
 * clattn run --distributed ring|ulysses, under mpirun: every rank reads the inputs and keeps its
 * shard of the rows (clattn_attention_shards), opens its own device, and the ranks compute the
 * call with libclattn_mpi; rank 0 gathers O and LSE and writes --out and --lse. Each phase
 * ends in an agreement: a problem on any rank (a file it cannot read, a device it cannot open,
 * the call, the write) makes every rank print the same line, naming the rank, and exit 1, with
 * nothing written. A rank that stops answering makes the others fail after --timeout seconds
 * (then MPI_Abort ends the job: MPI cannot go on without the rank).
 */
#include "args.h"
#include "commands.h"
#include "common.h"
#include "run.h"

#include "clattn_mpi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rank_state {
    int rank, size, local_rank;
    clattn_mpi_options options;
    clattn_context *ctx;
    void *q, *k, *v, *o; /* this rank's shard arrays, dense in the layout */
    float *lse;
    clattn_shard q_rows, k_rows;
} rank_state;

static int mpi_start(rank_state *r) {
    int ready = 0;
    MPI_Initialized(&ready);
    if (!ready && MPI_Init(NULL, NULL) != MPI_SUCCESS) {
        cli_error("run", "--distributed: MPI_Init failed (run under mpirun)");
        return 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &r->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &r->size);
    MPI_Comm local; /* the ranks of this machine: each takes its own device */
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, r->rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &r->local_rank);
    MPI_Comm_free(&local);
    return 0;
}

/* Entry local_rank % count of the devices --device selects (by default the default device). */
static int open_rank_device(const cli_args *args, rank_state *r) {
    size_t indices[64], count = 0;
    int rc = cli_select_devices("run", args_get(args, "device"), indices, 64, &count);
    if (rc) return rc;
    size_t index = indices[(size_t)r->local_rank % count];
    clattn_status status = clattn_context_create(&r->ctx, index);
    if (status == CLATTN_SUCCESS) return 0;
    cli_error("run", "cannot open device %zu: %s (%s)", index, clattn_status_string(status),
              clattn_status_name(status));
    return 1;
}

/* Rows of an array dense in the layout ([B,N,H,D] or [B,H,N,D]) into a shard's array. */
static void copy_rows(clattn_layout layout, size_t batch, size_t heads, size_t len, size_t dim,
                      size_t elem, const clattn_shard *s, const char *whole, char *shard) {
    clattn_tensor tw, ts;
    clattn_tensor_dense(&tw, layout, heads, len, dim, 0);
    clattn_tensor_dense(&ts, layout, heads, s->rows ? s->rows : 1, dim, 0);
    for (size_t b = 0; b < batch; b++)
        for (size_t h = 0; h < heads; h++)
            for (size_t row = 0, k = 0; k < 2; k++)
                for (size_t i = 0; i < s->len[k]; i++, row++)
                    memcpy(shard +
                               (b * ts.stride_batch + h * ts.stride_head + row * ts.stride_seq) *
                                   elem,
                           whole + (b * tw.stride_batch + h * tw.stride_head +
                                    (s->start[k] + i) * tw.stride_seq) *
                                       elem,
                           dim * elem);
}

/* This rank's shards of Q, K and V, and room for its O and LSE; the whole inputs are freed. */
static int keep_shards(run_state *s, rank_state *r) {
    const clattn_attention_desc *d = &s->desc;
    clattn_attention_shards(d, r->options.sharding, (size_t)r->size, (size_t)r->rank, &r->q_rows,
                            &r->k_rows);
    size_t e = d->dtype == CLATTN_F32 ? 4 : 2, eo = d->out_dtype == CLATTN_F32 ? 4 : 2;
    size_t qn = d->batch * d->heads_q * r->q_rows.rows,
           kn = d->batch * d->heads_kv * r->k_rows.rows;
    r->q = malloc(qn * d->dim_qk * e + 1), r->k = malloc(kn * d->dim_qk * e + 1);
    r->v = malloc(kn * d->dim_v * e + 1), r->o = malloc(qn * d->dim_v * eo + 1);
    r->lse = malloc(qn * sizeof(float) + 1);
    if (!r->q || !r->k || !r->v || !r->o || !r->lse) {
        cli_error("run", "out of host memory for this rank's shards");
        return 1;
    }
    copy_rows(s->layout_kind, d->batch, d->heads_q, d->len_q, d->dim_qk, e, &r->q_rows, s->q.data,
              r->q);
    copy_rows(s->layout_kind, d->batch, d->heads_kv, d->len_k, d->dim_qk, e, &r->k_rows, s->k.data,
              r->k);
    copy_rows(s->layout_kind, d->batch, d->heads_kv, d->len_k, d->dim_v, e, &r->k_rows, s->v.data,
              r->v);
    npy_free(&s->q), npy_free(&s->k), npy_free(&s->v);
    return 0;
}

/* Every rank's outcome of a phase: 0 when all went well; else every rank prints the same line
 * and gets 1 (EXIT_USAGE for a usage error, which every rank makes alike). */
static int agree(int rc, char *message, size_t size, double timeout) {
    clattn_status local = rc ? CLATTN_ERR_INVALID_ARGUMENT : CLATTN_SUCCESS;
    if (rc && !*message) snprintf(message, size, "failed");
    clattn_status s = clattn_mpi_agree(MPI_COMM_WORLD, local, message, size, timeout);
    if (s == CLATTN_SUCCESS) return 0;
    cli_error("run", "%s", message);
    if (s == CLATTN_ERR_TIMEOUT || s == CLATTN_ERR_COMM) MPI_Abort(MPI_COMM_WORLD, 1);
    return rc == EXIT_USAGE ? EXIT_USAGE : 1;
}

/* A failure of libclattn_mpi, the same on every rank; a lost rank ends the job. */
static int report_failure(clattn_status s, const clattn_mpi_report *report, const char *what) {
    cli_error("run", "--distributed: %s: %s (%s)", what, report->message, clattn_status_name(s));
    if (s == CLATTN_ERR_TIMEOUT || s == CLATTN_ERR_COMM) MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
}

/* The call, then its rows gathered on rank 0. */
static int compute_and_gather(run_state *s, rank_state *r, clattn_mpi_report *report) {
    const clattn_attention_desc *d = &s->desc;
    clattn_status st = clattn_mpi_attention(r->ctx, MPI_COMM_WORLD, d, &r->options, r->q, r->k,
                                            r->v, r->o, r->lse, report);
    if (st != CLATTN_SUCCESS) return report_failure(st, report, "attention");
    clattn_mpi_report gathered;
    clattn_mpi_report_init(&gathered);
    if (r->rank == 0) {
        size_t rows = d->batch * d->heads_q * d->len_q;
        s->o = malloc(rows * d->dim_v * (d->out_dtype == CLATTN_F32 ? 4 : 2) + 1);
        s->lse = malloc(rows * sizeof(float) + 1);
    }
    int ready = r->rank != 0 || (s->o && s->lse);
    char message[1024] = "";
    if (!ready) snprintf(message, sizeof message, "out of host memory for the whole output");
    int rc = agree(!ready, message, sizeof message, r->options.timeout_s);
    if (rc) return rc;
    st =
        clattn_mpi_gather(MPI_COMM_WORLD, d, &r->options, r->o, r->lse, 0, s->o, s->lse, &gathered);
    return st == CLATTN_SUCCESS ? 0 : report_failure(st, &gathered, "gathering O on rank 0");
}

/* Rank 0 writes the outputs; every rank learns whether it could. */
static int write_on_rank_0(const cli_args *args, run_state *s, const rank_state *r) {
    char message[1024] = "";
    int rc = 0;
    if (r->rank == 0) {
        cli_error_capture(message, sizeof message);
        rc = run_write_outputs(args, s);
        cli_error_capture(NULL, 0);
    }
    return agree(rc, message, sizeof message, r->options.timeout_s);
}

static void say_what_ran(const cli_args *args, const run_state *s, const rank_state *r,
                         const clattn_mpi_report *report) {
    if (r->rank != 0) return;
    const clattn_attention_desc *d = &s->desc;
    clattn_device_info info;
    clattn_device_info_init(&info);
    clattn_context_device_info(r->ctx, &info);
    static const char *const sharding[] = {"auto", "contiguous", "zigzag"};
    clattn_sharding used = r->options.sharding;
    if (used == CLATTN_SHARDING_AUTO)
        used = d->causal ? CLATTN_SHARDING_ZIGZAG : CLATTN_SHARDING_CONTIGUOUS;
    printf("wrote %s: B=%zu Hq=%zu Hkv=%zu Nq=%zu Nk=%zu Dqk=%zu Dv=%zu, %s over %d ranks "
           "(%s rows; rank 0 on %s: compute %.1f ms, waiting %.1f ms), %.1f ms\n",
           args_get(args, "out"), d->batch, d->heads_q, d->heads_kv, d->len_q, d->len_k, d->dim_qk,
           d->dim_v, r->options.mode == CLATTN_MPI_RING ? "ring" : "ulysses", r->size,
           sharding[used], info.name, report->compute_ms, report->wait_ms, report->total_ms);
}

static int run_ranks(const cli_args *args, run_state *s, rank_state *r) {
    char message[1024] = "";
    cli_error_capture(message, sizeof message);
    int rc = run_prepare(args, s);
    if (!rc) rc = open_rank_device(args, r);
    if (!rc) rc = keep_shards(s, r);
    cli_error_capture(NULL, 0);
    rc = agree(rc, message, sizeof message, r->options.timeout_s);
    clattn_mpi_report report;
    clattn_mpi_report_init(&report);
    if (!rc) rc = compute_and_gather(s, r, &report);
    if (!rc) rc = write_on_rank_0(args, s, r);
    if (!rc) say_what_ran(args, s, r, &report);
    if (!rc && r->rank == 0) rc = run_compare_outputs(args, s);
    return rc;
}

int run_distributed(const cli_args *args, run_state *s) {
    rank_state r;
    memset(&r, 0, sizeof r);
    clattn_mpi_options_init(&r.options);
    static const char *const modes[] = {"ring", "ulysses", NULL};
    int mode = 0;
    float timeout = 60.0f;
    if (parse_choice(args, "distributed", modes, &mode) ||
        run_sharding(args, &r.options.sharding) ||
        (args_has(args, "timeout") && parse_float(args, "timeout", &timeout)))
        return EXIT_USAGE; /* run_check_args took them: not reached */
    r.options.mode = (clattn_mpi_mode)mode, r.options.layout = s->layout_kind;
    r.options.timeout_s = timeout;
    int rc = mpi_start(&r), started = rc == 0;
    if (!rc) rc = run_ranks(args, s, &r);
    clattn_context_destroy(r.ctx);
    free(r.q), free(r.k), free(r.v), free(r.o), free(r.lse);
    if (started) MPI_Finalize();
    return rc;
}
