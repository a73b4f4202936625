/*
 * clattn bench --distributed ring|ulysses, under mpirun: scaling of libclattn_mpi. For each Nq
 * and pattern, rank 0 first runs the whole call alone on its device (clattn_attention_host;
 * the other ranks wait), then every rank runs its shard (clattn_mpi_attention), host arrays in
 * and out on both sides. Each is warmed up, then repeated; a distributed repeat's time is the
 * slowest rank's, from a barrier. Reported: minimum and median of both, the speed-up (one
 * rank's median over R ranks'), and each rank's median time waiting for its own device work,
 * whose spread, (max - min) / max, says how evenly the sharding shares the work (zigzag for
 * causal calls). Inputs are seeded uniform values; the result is not checked here (the tests
 * do that).
 */
#include "common.h"
#include "message.h"
#include "sweeps.h"
#include "textbuf.h"

#include "clattn_mpi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_RANKS 64

typedef struct scaling_record {
    size_t nq, nk;
    char pattern[96];
    int ranks;
    double one_min, one_median; /* rank 0 alone, ms */
    double all_min, all_median; /* every rank, ms (the slowest rank of each repeat) */
    double compute[MAX_RANKS];  /* each rank's median device work, ms */
    double wait_median;         /* rank 0's median waiting for the others, ms */
} scaling_record;

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_of(double *v, size_t n, double *min) {
    qsort(v, n, sizeof *v, compare_double);
    if (min) *min = v[0];
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void *random_array(size_t n, clattn_dtype dtype, uint64_t seed) {
    size_t elem = dtype == CLATTN_F32 ? 4 : 2;
    void *out = malloc(n * elem + 1);
    float chunk[256];
    for (size_t i = 0; out && i < n; i += 256) {
        size_t m = n - i < 256 ? n - i : 256;
        for (size_t j = 0; j < m; j++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            chunk[j] = (float)((double)(seed >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
        }
        clattn_convert(CLATTN_F32, chunk, dtype, (char *)out + i * elem, m);
    }
    return out;
}

/* Waits for a request asleep: a rank that spins in MPI while rank 0 times the whole call alone
 * would take cycles from it (a core's sibling thread, or a shared core). */
static void wait_asleep(MPI_Request *request) {
    int done = 0;
    while (MPI_Test(request, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) {
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
    }
}

/* The whole call on rank 0 alone (the others wait asleep). @return 0 or 1. */
static int time_one_rank(clattn_context *ctx, const clattn_attention_desc *d,
                         const distributed_config *c, int rank, scaling_record *r) {
    int ok = 1;
    if (rank == 0) {
        size_t q = d->batch * d->heads_q * d->len_q, kv = d->batch * d->heads_kv * d->len_k;
        void *hq = random_array(q * d->dim_qk, d->dtype, 1),
             *hk = random_array(kv * d->dim_qk, d->dtype, 2);
        void *hv = random_array(kv * d->dim_v, d->dtype, 3),
             *ho = random_array(q * d->dim_v, d->dtype, 4);
        double ms[256];
        size_t n = c->repeat < 256 ? c->repeat : 256;
        ok = hq && hk && hv && ho;
        for (size_t i = 0; ok && i < c->warmup + n; i++) {
            double t0 = seconds_now();
            ok = clattn_attention_host(ctx, d, hq, hk, hv, ho, NULL) == CLATTN_SUCCESS;
            if (i >= c->warmup) ms[i - c->warmup] = (seconds_now() - t0) * 1e3;
        }
        if (!ok) cli_error("bench", "one rank: %s", clattn_context_last_error(ctx));
        if (ok) r->one_median = median_of(ms, n, &r->one_min);
        free(hq), free(hk), free(hv), free(ho);
    }
    MPI_Request request;
    MPI_Ibcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD, &request);
    wait_asleep(&request);
    return ok ? 0 : 1;
}

typedef struct rank_shards {
    void *q, *k, *v, *o;
    float *lse;
} rank_shards;

static int make_shards(const clattn_attention_desc *d, const clattn_mpi_options *o, int rank,
                       int size, rank_shards *s) {
    clattn_shard qs, ks;
    clattn_attention_shards(d, o->sharding, (size_t)size, (size_t)rank, &qs, &ks);
    size_t q = d->batch * d->heads_q * qs.rows, kv = d->batch * d->heads_kv * ks.rows;
    s->q = random_array(q * d->dim_qk, d->dtype, 10 + (uint64_t)rank);
    s->k = random_array(kv * d->dim_qk, d->dtype, 20 + (uint64_t)rank);
    s->v = random_array(kv * d->dim_v, d->dtype, 30 + (uint64_t)rank);
    s->o = random_array(q * d->dim_v, d->dtype, 0);
    s->lse = malloc(q * sizeof(float) + 1);
    return s->q && s->k && s->v && s->o && s->lse ? 0 : 1;
}

/* Every rank's shard, each repeat from a barrier; a repeat takes the slowest rank's time. */
static int time_all_ranks(clattn_context *ctx, const clattn_attention_desc *d,
                          const distributed_config *c, const clattn_mpi_options *o, int rank,
                          int size, scaling_record *r) {
    rank_shards s = {0};
    int bad = make_shards(d, o, rank, size, &s), any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    double all[256], compute[256], wait[256];
    size_t n = c->repeat < 256 ? c->repeat : 256;
    clattn_mpi_report report;
    clattn_mpi_report_init(&report);
    for (size_t i = 0; !any && i < c->warmup + n; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = seconds_now();
        clattn_status st =
            clattn_mpi_attention(ctx, MPI_COMM_WORLD, d, o, s.q, s.k, s.v, s.o, s.lse, &report);
        double ms = (seconds_now() - t0) * 1e3, slowest = 0;
        if (st != CLATTN_SUCCESS) { /* the same on every rank, or a lost rank */
            cli_error("bench", "--distributed: %s (%s)", report.message, clattn_status_name(st));
            if (st == CLATTN_ERR_TIMEOUT || st == CLATTN_ERR_COMM) MPI_Abort(MPI_COMM_WORLD, 1);
            any = 1;
            break;
        }
        MPI_Allreduce(&ms, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (i < c->warmup) continue;
        all[i - c->warmup] = slowest, compute[i - c->warmup] = report.compute_ms;
        wait[i - c->warmup] = report.wait_ms;
    }
    free(s.q), free(s.k), free(s.v), free(s.o), free(s.lse);
    if (any) return 1;
    r->all_median = median_of(all, n, &r->all_min);
    double mine = median_of(compute, n, NULL);
    r->wait_median = median_of(wait, n, NULL);
    MPI_Gather(&mine, 1, MPI_DOUBLE, r->compute, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    return 0;
}

/* (max - min) / max of the ranks' device work. */
static double spread_of(const scaling_record *r) {
    double lo = r->compute[0], hi = r->compute[0];
    for (int i = 1; i < r->ranks; i++) {
        if (r->compute[i] < lo) lo = r->compute[i];
        if (r->compute[i] > hi) hi = r->compute[i];
    }
    return hi > 0 ? (hi - lo) / hi : 0;
}

static void print_header(const clattn_device_info *info, const distributed_config *c, int ranks) {
    printf("\n%s over %d ranks; rank 0 on %s (%s)\n", c->ulysses ? "ulysses" : "ring", ranks,
           info->name, info->platform_name);
    printf("%6s %6s %-16s %10s %10s %10s %10s %8s %8s  %s\n", "Nq", "Nk", "pattern", "1 min",
           "1 med", "R min", "R med", "speedup", "spread", "device ms per rank (median)");
    fflush(stdout);
}

static void print_record(const scaling_record *r) {
    printf("%6zu %6zu %-16.16s %10.1f %10.1f %10.1f %10.1f %8.2f %7.1f%% ", r->nq, r->nk,
           r->pattern, r->one_min, r->one_median, r->all_min, r->all_median,
           r->one_median / r->all_median, 100 * spread_of(r));
    for (int i = 0; i < r->ranks; i++) printf("%s%.1f", i ? " " : " ", r->compute[i]);
    printf("\n");
    fflush(stdout);
}

/* --csv and --json, committed together (all or none). @return 0 or 1 (said). */
static int write_files(const distributed_config *c, const scaling_record *recs, size_t n) {
    textbuf csv = {0}, json = {0};
    textbuf_printf(&csv, "mode,nq,nk,pattern,ranks,one_ms_min,one_ms_median,all_ms_min,"
                         "all_ms_median,speedup,spread,compute_ms_per_rank\n");
    textbuf_printf(&json, "{\n  \"records\": [");
    for (size_t i = 0; i < n; i++) {
        const scaling_record *r = &recs[i];
        const char *mode = c->ulysses ? "ulysses" : "ring";
        textbuf_printf(&csv, "%s,%zu,%zu,%s,%d,%.3f,%.3f,%.3f,%.3f,%.4f,%.4f,", mode, r->nq, r->nk,
                       r->pattern, r->ranks, r->one_min, r->one_median, r->all_min, r->all_median,
                       r->one_median / r->all_median, spread_of(r));
        textbuf_printf(&json, "%s\n    {\"mode\": \"%s\", \"nq\": %zu, \"nk\": %zu, \"pattern\": ",
                       i ? "," : "", mode, r->nq, r->nk);
        textbuf_json_string(&json, r->pattern);
        textbuf_printf(&json,
                       ", \"ranks\": %d, \"one_ms_min\": %.3f, \"one_ms_median\": %.3f, "
                       "\"all_ms_min\": %.3f, \"all_ms_median\": %.3f, \"speedup\": %.4f, "
                       "\"spread\": %.4f, \"compute_ms\": [",
                       r->ranks, r->one_min, r->one_median, r->all_min, r->all_median,
                       r->one_median / r->all_median, spread_of(r));
        for (int k = 0; k < r->ranks; k++) {
            textbuf_printf(&csv, "%s%.3f", k ? " " : "", r->compute[k]);
            textbuf_printf(&json, "%s%.3f", k ? ", " : "", r->compute[k]);
        }
        textbuf_printf(&csv, "\n");
        textbuf_printf(&json, "]}");
    }
    textbuf_printf(&json, "\n  ]\n}\n");
    output_set set;
    output_set_init(&set, "bench");
    int rc = 0;
    if (c->csv) rc |= output_set_text(&set, c->csv, &csv);
    if (c->json) rc |= output_set_text(&set, c->json, &json);
    rc |= output_set_commit(&set);
    textbuf_free(&csv), textbuf_free(&json);
    return rc;
}

/* One Nq and pattern: rank 0 alone, then every rank. @return 0 or 1. */
static int measure(clattn_context *ctx, const distributed_config *c, const clattn_mpi_options *o,
                   size_t nq, size_t nk, const bench_pattern *p, int rank, int size,
                   scaling_record *r) {
    clattn_attention_desc d;
    pattern_data pd = {0};
    memset(r, 0, sizeof *r);
    r->nq = nq, r->nk = nk, r->ranks = size;
    snprintf(r->pattern, sizeof r->pattern, "%s", p->text);
    if (clattn_attention_desc_init(&d, o->layout, c->batch, c->hq, c->hkv, nq, nk, c->d, c->dv)) {
        cli_error("bench", "invalid sizes (Hq must be a multiple of Hkv)");
        return 1;
    }
    d.dtype = d.out_dtype = c->dtype;
    int rc = bench_apply_pattern(p, &d, &pd);
    if (!rc) rc = time_one_rank(ctx, &d, c, rank, r);
    if (!rc) rc = time_all_ranks(ctx, &d, c, o, rank, size, r);
    bench_pattern_data_free(&pd);
    return rc;
}

static int measure_all(clattn_context *ctx, const distributed_config *c, int rank, int size) {
    clattn_mpi_options o;
    clattn_mpi_options_init(&o);
    o.mode = c->ulysses ? CLATTN_MPI_ULYSSES : CLATTN_MPI_RING, o.sharding = c->sharding;
    scaling_record records[16 * 16];
    size_t n = 0;
    clattn_device_info info;
    clattn_device_info_init(&info);
    clattn_context_device_info(ctx, &info);
    if (rank == 0) print_header(&info, c, size);
    int rc = 0;
    for (size_t i = 0; i < c->num_nq && !rc; i++)
        for (size_t p = 0; p < c->num_patterns && !rc && n < 256; p++) {
            size_t nk = c->num_nk ? c->nk[i < c->num_nk ? i : c->num_nk - 1] : c->nq[i];
            rc = measure(ctx, c, &o, c->nq[i], nk, &c->patterns[p], rank, size, &records[n]);
            if (!rc && rank == 0) print_record(&records[n]);
            n += !rc;
        }
    if (rank == 0 && n && !rc) rc = write_files(c, records, n); /* a sweep cut short: none */
    return rc;
}

int bench_distributed(const distributed_config *c) {
    int ready = 0, rank = 0, size = 1, local_rank = 0;
    MPI_Initialized(&ready);
    if (!ready && MPI_Init(NULL, NULL) != MPI_SUCCESS) {
        cli_error("bench", "--distributed: MPI_Init failed (run under mpirun)");
        return 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &local_rank);
    MPI_Comm_free(&local);
    clattn_context *ctx = NULL;
    size_t device = c->devices[(size_t)local_rank % c->num_devices];
    int bad = size > MAX_RANKS || clattn_context_create(&ctx, device) != CLATTN_SUCCESS, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    int rc = 1;
    if (any)
        cli_error("bench",
                  "--distributed: a rank could not open its device (or more than %d ranks)",
                  MAX_RANKS);
    else
        rc = measure_all(ctx, c, rank, size);
    clattn_context_destroy(ctx);
    MPI_Finalize();
    return rc;
}
