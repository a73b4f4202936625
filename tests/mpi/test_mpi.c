/*
 * libclattn_mpi under mpirun (-np 2 and -np 3, an uneven split): ring attention for every mask
 * kind, GQA, both layouts and 16-bit storage, and Ulysses, each rank's rows of O and LSE
 * against the whole call's CPU reference (every rank builds the same seeded inputs) and again
 * after clattn_mpi_gather on rank 0; then the collective failures: a bad desc on one rank, a desc
 * that differs between ranks, Ulysses with too few heads and clattn_mpi_agree, each failing every
 * rank with the same status and message. A plain program (Criterion's runner forks, which MPI
 * does not take); it exits 77, the skip code, without an OpenCL device.
 */
#include "clattn_mpi.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, ranks, failures;

static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "rank %d: ", rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    failures++;
}

typedef struct mpi_case {
    const char *name;
    clattn_mpi_mode mode;
    size_t b, hq, hkv, nq, nk, d;
    clattn_layout layout;
    clattn_dtype dtype;
    int causal;
    int64_t left, right, dilation;
    int64_t globals[2];
    size_t num_globals;
    int block_layout; /* 0 none, 1 shared, 2 per head */
    size_t bq, bk;
    int bias;
    int alibi; /* 0 none, 1 slopes [Hq], 2 slopes [B][Hq] */
    int sinks;
} mpi_case;

/* Uniform in [-1, 1] from a seed, the same on every rank. */
static void fill(float *x, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(seed >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
}

static void *stored(size_t n, clattn_dtype dtype, uint64_t seed) {
    float *x = malloc(n * sizeof *x);
    void *out = malloc(n * 4);
    fill(x, n, seed);
    clattn_convert(CLATTN_F32, x, dtype, out, n);
    free(x);
    return out;
}

/* Rows of an array dense in the layout ([B,N,H,D] or [B,H,N,D]) to or from a shard. */
static void shard_copy(clattn_layout layout, size_t b, size_t h, size_t n, size_t d, size_t elem,
                       const clattn_shard *s, char *whole, char *shard, int to_shard) {
    clattn_tensor tw, ts;
    clattn_tensor_dense(&tw, layout, h, n, d, 0);
    clattn_tensor_dense(&ts, layout, h, s->rows ? s->rows : 1, d, 0);
    for (size_t bi = 0; bi < b; bi++)
        for (size_t hi = 0; hi < h; hi++)
            for (size_t row = 0, k = 0; k < 2; k++)
                for (size_t i = 0; i < s->len[k]; i++, row++)
                    memcpy(to_shard ? shard + (bi * ts.stride_batch + hi * ts.stride_head +
                                               row * ts.stride_seq) *
                                                  elem
                                    : whole + (bi * tw.stride_batch + hi * tw.stride_head +
                                               (s->start[k] + i) * tw.stride_seq) *
                                                  elem,
                           to_shard ? whole + (bi * tw.stride_batch + hi * tw.stride_head +
                                               (s->start[k] + i) * tw.stride_seq) *
                                                  elem
                                    : shard + (bi * ts.stride_batch + hi * ts.stride_head +
                                               row * ts.stride_seq) *
                                                  elem,
                           d * elem);
}

typedef struct whole_call {
    clattn_attention_desc desc;
    void *q, *k, *v;
    float *bias, *o_ref, *lse_ref, *slopes, *sinks;
    uint8_t *layout;
} whole_call;

static void setup(const mpi_case *c, whole_call *w) {
    memset(w, 0, sizeof *w);
    clattn_attention_desc *d = &w->desc;
    clattn_attention_desc_init(d, c->layout, c->b, c->hq, c->hkv, c->nq, c->nk, c->d, c->d);
    d->dtype = d->out_dtype = c->dtype;
    d->causal = c->causal, d->window_left = c->left, d->window_right = c->right;
    d->dilation = c->dilation ? c->dilation : 1;
    d->global_tokens = c->num_globals ? c->globals : NULL, d->num_global_tokens = c->num_globals;
    w->q = stored(c->b * c->hq * c->nq * c->d, c->dtype, 1);
    w->k = stored(c->b * c->hkv * c->nk * c->d, c->dtype, 2);
    w->v = stored(c->b * c->hkv * c->nk * c->d, c->dtype, 3);
    if (c->block_layout) {
        size_t cells = (c->block_layout == 2 ? c->hq : 1) * ((c->nq + c->bq - 1) / c->bq) *
                       ((c->nk + c->bk - 1) / c->bk);
        w->layout = malloc(cells);
        for (size_t i = 0; i < cells; i++) w->layout[i] = (i * 7 + 3) % 5 != 0;
        d->block_layout = w->layout, d->block_q = c->bq, d->block_k = c->bk;
        d->block_layout_per_head = c->block_layout == 2;
    }
    if (c->bias) {
        size_t n = c->b * c->hq * c->nq * c->nk;
        w->bias = malloc(n * sizeof *w->bias);
        fill(w->bias, n, 4);
        for (size_t i = 0; i < n; i += 7) w->bias[i] = -INFINITY;
        d->bias_host = w->bias;
        d->bias_strides = (clattn_tensor){0, c->hq * c->nq * c->nk, c->nq * c->nk, c->nk};
    }
    if (c->alibi) { /* a different slope a (batch, head) */
        size_t n = (c->alibi == 2 ? c->b : 1) * c->hq;
        w->slopes = malloc(n * sizeof *w->slopes);
        for (size_t i = 0; i < n; i++) w->slopes[i] = 0.05f * (float)(i + 1);
        d->alibi_slopes = w->slopes, d->alibi_per_batch = c->alibi == 2;
    }
    if (c->sinks) {
        w->sinks = malloc(c->hq * sizeof *w->sinks);
        for (size_t h = 0; h < c->hq; h++) w->sinks[h] = 0.5f * (float)h - 1.0f;
        d->sinks = w->sinks;
    }
    clattn_attention_desc ref = *d;
    ref.out_dtype = CLATTN_F32;
    w->o_ref = malloc(c->b * c->hq * c->nq * c->d * 4);
    w->lse_ref = malloc(c->b * c->hq * c->nq * 4);
    clattn_attention_reference(&ref, w->q, w->k, w->v, w->o_ref, w->lse_ref);
}

static void release(whole_call *w) {
    free(w->q), free(w->k), free(w->v), free(w->bias), free(w->o_ref), free(w->lse_ref),
        free(w->layout), free(w->slopes), free(w->sinks);
}

/* O (in out_dtype) and LSE of `rows` against the reference's rows; tolerance of docs/semantics.md section 4. */
static void compare(const char *what, const mpi_case *c, const whole_call *w,
                    const clattn_shard *rows, const void *o, const float *lse) {
    size_t n = c->b * c->hq * rows->rows * c->d, elem = c->dtype == CLATTN_F32 ? 4 : 2;
    float *got = malloc(n * 4 + 4), *want = malloc(n * 4 + 4);
    clattn_convert(c->dtype, o, CLATTN_F32, got, n);
    shard_copy(c->layout, c->b, c->hq, c->nq, c->d, 4, rows, (char *)w->o_ref, (char *)want, 1);
    double atol = c->dtype == CLATTN_F32 ? 2e-5 : c->dtype == CLATTN_F16 ? 2e-3 : 4e-3;
    double rtol = c->dtype == CLATTN_F32 ? 2e-4 : c->dtype == CLATTN_F16 ? 4e-3 : 1e-2;
    (void)elem;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= atol + rtol * fabs(want[i])) && bad++ == 0)
            fail("%s: %s: O[%zu] = %g, reference %g", c->name, what, i, got[i], want[i]);
    for (size_t g = 0; g < c->b * c->hq && lse; g++)
        for (size_t r = 0, k = 0; k < 2; k++)
            for (size_t i = 0; i < rows->len[k]; i++, r++) {
                double ref = w->lse_ref[g * c->nq + rows->start[k] + i],
                       x = lse[g * rows->rows + r];
                int ok = isinf(ref) ? x == ref : fabs(x - ref) <= 1e-4 * fmax(1.0, fabs(ref));
                if (!ok && bad++ == 0)
                    fail("%s: %s: LSE[%zu][%zu] = %g, reference %g", c->name, what, g, r, x, ref);
            }
    free(got), free(want);
}

/* The report's calls and skipped chunk pairs: Ulysses runs one call; the ring runs some, skips
 * none without a mask, and with causality over Nq = Nk skips on every rank at least the pair
 * of its first query chunk and the last key chunk of each part (zigzag). */
static void check_counts(const mpi_case *c, const clattn_mpi_report *report) {
    int unmasked = !c->causal && c->left < 0 && c->right < 0 && c->dilation <= 1 &&
                   !c->num_globals && !c->block_layout && !c->bias;
    if (c->mode == CLATTN_MPI_ULYSSES && (report->calls != 1 || report->skipped != 0))
        fail("%s: ulysses reports %zu calls, %zu skipped", c->name, report->calls, report->skipped);
    if (c->mode == CLATTN_MPI_RING &&
        (report->calls == 0 || (unmasked && report->skipped != 0) ||
         (c->causal && c->nq == c->nk && ranks > 1 && report->skipped < (size_t)ranks)))
        fail("%s: the ring reports %zu calls, %zu skipped", c->name, report->calls,
             report->skipped);
}

static void run_case(clattn_context *ctx, const mpi_case *c) {
    whole_call w;
    setup(c, &w);
    clattn_mpi_options opt;
    clattn_mpi_options_init(&opt);
    opt.mode = c->mode, opt.layout = c->layout, opt.timeout_s = 60;
    clattn_shard qs, ks;
    clattn_attention_shards(&w.desc, opt.sharding, (size_t)ranks, (size_t)rank, &qs, &ks);
    size_t e = c->dtype == CLATTN_F32 ? 4 : 2;
    char *q = malloc(c->b * c->hq * (qs.rows + 1) * c->d * e);
    char *k = malloc(c->b * c->hkv * (ks.rows + 1) * c->d * e);
    char *v = malloc(c->b * c->hkv * (ks.rows + 1) * c->d * e);
    char *o = malloc(c->b * c->hq * (qs.rows + 1) * c->d * e);
    float *lse = malloc(c->b * c->hq * (qs.rows + 1) * 4);
    shard_copy(c->layout, c->b, c->hq, c->nq, c->d, e, &qs, w.q, q, 1);
    shard_copy(c->layout, c->b, c->hkv, c->nk, c->d, e, &ks, w.k, k, 1);
    shard_copy(c->layout, c->b, c->hkv, c->nk, c->d, e, &ks, w.v, v, 1);
    clattn_mpi_report report;
    clattn_mpi_report_init(&report);
    clattn_status s =
        clattn_mpi_attention(ctx, MPI_COMM_WORLD, &w.desc, &opt, q, k, v, o, lse, &report);
    if (s) fail("%s: %s: %s", c->name, clattn_status_name(s), report.message);
    if (!s) compare("this rank's rows", c, &w, &qs, o, lse);
    if (!s) check_counts(c, &report);
    char *o_all = rank == 0 ? malloc(c->b * c->hq * c->nq * c->d * e) : NULL;
    float *lse_all = rank == 0 ? malloc(c->b * c->hq * c->nq * 4) : NULL;
    if (!s) {
        s = clattn_mpi_gather(MPI_COMM_WORLD, &w.desc, &opt, o, lse, 0, o_all, lse_all, &report);
        if (s) fail("%s: gather: %s: %s", c->name, clattn_status_name(s), report.message);
    }
    clattn_shard all = {{0, 0}, {c->nq, 0}, c->nq};
    if (!s && rank == 0) compare("gathered on rank 0", c, &w, &all, o_all, lse_all);
    free(q), free(k), free(v), free(o), free(lse), free(o_all), free(lse_all);
    release(&w);
}

static mpi_case base(const char *name, size_t nq, size_t nk) {
    mpi_case c = {name,
                  CLATTN_MPI_RING,
                  2,
                  4,
                  2,
                  nq,
                  nk,
                  16,
                  CLATTN_LAYOUT_BSHD,
                  CLATTN_F32,
                  0,
                  -1,
                  -1,
                  1,
                  {0},
                  0,
                  0,
                  0,
                  0,
                  0,
                  0,
                  0};
    return c;
}

static void every_case(clattn_context *ctx) {
    mpi_case c = base("ring, no mask", 37, 37);
    run_case(ctx, &c);
    c = base("ring, causal (zigzag)", 45, 45), c.causal = 1;
    run_case(ctx, &c);
    c = base("ring, causal, Nq < Nk", 20, 49), c.causal = 1;
    run_case(ctx, &c);
    c = base("ring, window and dilation", 41, 41), c.left = 6, c.right = 2, c.dilation = 2;
    run_case(ctx, &c);
    c = base("ring, globals in a causal window", 44, 44), c.causal = 1, c.left = 4;
    c.num_globals = 2, c.globals[0] = 1, c.globals[1] = 30;
    run_case(ctx, &c);
    c = base("ring, per-head block layout", 40, 40), c.block_layout = 2, c.bq = 4, c.bk = 4;
    run_case(ctx, &c);
    c = base("ring, bias, BHSD", 33, 39), c.bias = 1, c.layout = CLATTN_LAYOUT_BHSD;
    run_case(ctx, &c);
    c = base("ring, float16, causal", 40, 40), c.dtype = CLATTN_F16, c.causal = 1;
    run_case(ctx, &c);
    c = base("ring, bfloat16, shared layout", 38, 38), c.dtype = CLATTN_BF16;
    c.block_layout = 1, c.bq = 8, c.bk = 2;
    run_case(ctx, &c);
    c = base("ulysses, causal, GQA", 41, 41), c.mode = CLATTN_MPI_ULYSSES, c.causal = 1;
    c.hkv = (size_t)ranks, c.hq = 2 * (size_t)ranks;
    run_case(ctx, &c);
    c = base("ulysses, per-head layout, bias, BHSD", 30, 36), c.mode = CLATTN_MPI_ULYSSES;
    c.hkv = c.hq = (size_t)ranks, c.block_layout = 2, c.bq = 5, c.bk = 6, c.bias = 1;
    c.layout = CLATTN_LAYOUT_BHSD;
    run_case(ctx, &c);
    /* each rank's heads take their own slopes and sinks (every rank read head 0's) */
    c = base("ulysses, ALiBi per batch, sinks", 26, 26), c.mode = CLATTN_MPI_ULYSSES;
    c.hkv = (size_t)ranks, c.hq = 2 * (size_t)ranks, c.causal = 1, c.alibi = 2, c.sinks = 1;
    run_case(ctx, &c);
    c = base("ulysses, ALiBi a head", 20, 24), c.mode = CLATTN_MPI_ULYSSES, c.alibi = 1;
    c.hkv = c.hq = (size_t)ranks;
    run_case(ctx, &c);
}

/* Every rank must get `want` and the same message containing `text`. */
static void expect_collective(const char *what, clattn_status got, clattn_status want,
                              const char *message, const char *text) {
    if (got != want)
        fail("%s: %s, expected %s", what, clattn_status_name(got), clattn_status_name(want));
    if (!strstr(message, text)) fail("%s: message '%s' lacks '%s'", what, message, text);
    char first[1024] = "";
    if (rank == 0) snprintf(first, sizeof first, "%s", message);
    MPI_Bcast(first, sizeof first, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (strcmp(first, message) != 0)
        fail("%s: rank 0 says '%s', this rank '%s'", what, first, message);
}

static void collective_failures(clattn_context *ctx) {
    enum { N = 24, D = 16 };
    float q[N * D], k[N * D], v[N * D], o[N * D], lse[N];
    fill(q, N * D, 1), fill(k, N * D, 2), fill(v, N * D, 3);
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, N, N, D, D);
    clattn_mpi_report report;
    clattn_mpi_report_init(&report);
    /* shards as large as any rank's: every rank passes arrays */
    clattn_attention_desc bad = d;
    if (rank == ranks - 1) bad.window_left = -5;
    clattn_status s =
        clattn_mpi_attention(ctx, MPI_COMM_WORLD, &bad, NULL, q, k, v, o, lse, &report);
    char expected[64];
    snprintf(expected, sizeof expected, "rank %d: window (-5,-1)", ranks - 1);
    expect_collective("a bad desc on the last rank", s, CLATTN_ERR_INVALID_ARGUMENT, report.message,
                      expected);
    clattn_attention_desc other = d;
    other.causal = rank == 1;
    s = clattn_mpi_attention(ctx, MPI_COMM_WORLD, &other, NULL, q, k, v, o, lse, &report);
    expect_collective("a desc that differs on rank 1", s, CLATTN_ERR_INVALID_ARGUMENT,
                      report.message, "rank 1: its desc or options differ from rank 0's");
    other = d; /* a score modifier counts as the desc */
    other.softcap = rank == 1 ? 2.0f : 0.0f;
    s = clattn_mpi_attention(ctx, MPI_COMM_WORLD, &other, NULL, q, k, v, o, lse, &report);
    expect_collective("a softcap that differs on rank 1", s, CLATTN_ERR_INVALID_ARGUMENT,
                      report.message, "rank 1: its desc or options differ from rank 0's");
    float slopes[1] = {0.5f};
    other = d, other.alibi_slopes = slopes;
    s = clattn_mpi_attention(ctx, MPI_COMM_WORLD, &other, NULL, q, k, v, o, lse, &report);
    expect_collective("ALiBi over the ring", s, CLATTN_ERR_INVALID_ARGUMENT, report.message,
                      "rank 0: ring: softcap, alibi_slopes and sinks are not combined");
    other = d, other.lse_parts = 1;
    s = clattn_mpi_attention(ctx, MPI_COMM_WORLD, &other, NULL, q, k, v, o, lse, &report);
    expect_collective("lse_parts", s, CLATTN_ERR_INVALID_ARGUMENT, report.message,
                      "rank 0: lse_parts is not supported");
    float o_whole[N * D];
    s = clattn_mpi_gather(MPI_COMM_WORLD, &d, NULL, o, lse, 0, rank == 0 ? o_whole : NULL, NULL,
                          &report);
    expect_collective("a gather of LSE without the root's lse_whole", s,
                      CLATTN_ERR_INVALID_ARGUMENT, report.message,
                      "rank 0: the root's lse_whole is NULL but its lse_shard is not");
    clattn_mpi_options opt;
    clattn_mpi_options_init(&opt);
    opt.mode = CLATTN_MPI_ULYSSES;
    s = clattn_mpi_attention(ctx, MPI_COMM_WORLD, &d, &opt, q, k, v, o, lse, &report);
    expect_collective("ulysses with one head", s, CLATTN_ERR_INVALID_ARGUMENT, report.message,
                      "rank 0: ulysses: heads_kv (1) must be a multiple of the ranks");
    char message[256] = "";
    if (rank == 1) snprintf(message, sizeof message, "cannot open K.npy");
    s = clattn_mpi_agree(MPI_COMM_WORLD, rank == 1 ? CLATTN_ERR_IO : CLATTN_SUCCESS, message,
                         sizeof message, 10);
    expect_collective("clattn_mpi_agree", s, CLATTN_ERR_IO, message, "rank 1: cannot open K.npy");
    s = clattn_mpi_agree(MPI_COMM_WORLD, CLATTN_SUCCESS, message, sizeof message, 10);
    if (s) fail("clattn_mpi_agree with every rank well: %s", clattn_status_name(s));
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    size_t count = 0;
    clattn_device_count(&count);
    int have = count > 0, all = 0;
    MPI_Allreduce(&have, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) {
        if (rank == 0)
            printf("skipped: a rank has no OpenCL device (%s)\n",
                   clattn_device_discovery_summary());
        MPI_Finalize();
        return 77;
    }
    clattn_context *ctx = NULL;
    if (clattn_context_create(&ctx, 0) != CLATTN_SUCCESS) fail("no context on device 0");
    if (ctx) every_case(ctx);
    if (ctx) collective_failures(ctx);
    clattn_context_destroy(ctx);
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%d ranks: %s (%d failures)\n", ranks, total ? "FAILED" : "passed", total);
    MPI_Finalize();
    return total ? 1 : 0;
}
