/*
 * The host baseline of the benchmarks: attention the way a CPU user writes it with NumPy and
 * OpenBLAS. For each (batch, head) and chunk of query rows:
 *
 *     S = scale * Q K^T    cblas_sgemm (OpenBLAS's own threads)
 *     P = softmax(S)       masked (clattn_attention_mask), over the host's threads
 *     O = P V              cblas_sgemm
 *
 * float32 only, dense tensors in the desc's layout (the strides say where each row is).
 * Scores of one chunk take at most HOST_SCORE_BUDGET bytes.
 *
 * OpenBLAS is loaded (dlopen) when the baseline is first asked for, not linked: when loaded, it
 * sizes its buffers and starts its threads, and under a memory limit (ulimit -v) it spun on
 * a failed thread start and hung every command of the program, even --version. Without it the
 * baseline is unavailable, with the loader's reason.
 */

#include "host_attention.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HOST_SCORE_BUDGET ((size_t)256 << 20)
#define MAX_THREADS       64

/* cblas_sgemm and the CBLAS values of its enums (cblas.h, stable since the reference CBLAS). */
typedef void (*sgemm_fn)(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
                         const float *a, int lda, const float *b, int ldb, float beta, float *c,
                         int ldc);
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static sgemm_fn sgemm;
static char blas_problem[512] = "this build has no host baseline (CLATTN_BUILD_BENCH=OFF)";

static void load_blas(void) {
#ifdef CLATTN_HOST_BASELINE
    static const char *const names[] = {"libopenblas.so.0", "libopenblas.so"};
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !sgemm; i++) {
        void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        const char *why = lib ? NULL : dlerror();
        if (lib && !(sgemm = (sgemm_fn)dlsym(lib, "cblas_sgemm"))) {
            why = "it has no cblas_sgemm";
            dlclose(lib);
        }
        if (why && i == 0)
            snprintf(blas_problem, sizeof blas_problem,
                     "OpenBLAS cannot be loaded (%s: %s); install libopenblas0", names[i], why);
    }
#endif
}

int host_attention_available(void) {
    pthread_once(&blas_once, load_blas);
    return sgemm != NULL;
}

const char *host_attention_unavailable(void) {
    return host_attention_available() ? "" : blas_problem;
}

/* One softmax job: rows [row_begin, row_end) of a chunk's scores. */
typedef struct softmax_job {
    const uint8_t *allowed; /* [rows][len_k] of the chunk, or NULL: every pair allowed */
    const clattn_attention_desc *d;
    float *scores;     /* [rows][len_k] */
    float *lse;        /* [B][Hq][Nq], or NULL */
    size_t b, h, row0; /* the chunk: query rows row0... of (b, h) */
    size_t row_begin, row_end;
} softmax_job;

/* Masked softmax of row r of the chunk in place; returns its LSE. */
static float softmax_row(const softmax_job *job, size_t r, float *s) {
    size_t nk = job->d->len_k;
    const uint8_t *allowed = job->allowed ? job->allowed + r * nk : NULL;
    float max = -INFINITY;
    for (size_t j = 0; j < nk; j++) {
        if (allowed && !allowed[j]) s[j] = -INFINITY;
        if (s[j] > max) max = s[j];
    }
    if (max == -INFINITY) {
        memset(s, 0, nk * sizeof *s);
        return -INFINITY;
    }
    float sum = 0.0f;
    for (size_t j = 0; j < nk; j++) sum += (s[j] = expf(s[j] - max));
    for (size_t j = 0; j < nk; j++) s[j] /= sum;
    return max + logf(sum);
}

static void *softmax_rows_job(void *arg) {
    const softmax_job *job = arg;
    const clattn_attention_desc *d = job->d;
    for (size_t r = job->row_begin; r < job->row_end; r++) {
        size_t i = job->row0 + r;
        float lse = softmax_row(job, r, job->scores + r * d->len_k);
        if (job->lse) job->lse[(job->b * d->heads_q + job->h) * d->len_q + i] = lse;
    }
    return NULL;
}

/* Splits the chunk's rows over the host's threads. */
static void softmax_chunk(const softmax_job *base, size_t rows) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    size_t threads = online > 0 ? (size_t)online : 1;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (threads > rows) threads = rows;
    pthread_t tid[MAX_THREADS];
    softmax_job jobs[MAX_THREADS];
    size_t started = 0;
    for (size_t t = 0; t < threads; t++) {
        jobs[t] = *base;
        jobs[t].row_begin = rows * t / threads;
        jobs[t].row_end = rows * (t + 1) / threads;
        if (t + 1 < threads && pthread_create(&tid[t], NULL, softmax_rows_job, &jobs[t]) == 0)
            started++;
        else
            softmax_rows_job(&jobs[t]); /* the last share, or one a thread could not take */
    }
    for (size_t t = 0; t < started; t++) pthread_join(tid[t], NULL);
}

/* One chunk: rows [row0, row0 + rows) of (b, h); `allowed` its mask or NULL. */
static void host_chunk(const clattn_attention_desc *d, const uint8_t *allowed, const float *q,
                       const float *k, const float *v, float *o, float *lse, float *scores,
                       size_t b, size_t h, size_t row0, size_t rows) {
    size_t kvh = h / (d->heads_q / d->heads_kv);
    const float *qb =
        q + d->q.offset + b * d->q.stride_batch + h * d->q.stride_head + row0 * d->q.stride_seq;
    const float *kb = k + d->k.offset + b * d->k.stride_batch + kvh * d->k.stride_head;
    const float *vb = v + d->v.offset + b * d->v.stride_batch + kvh * d->v.stride_head;
    float *ob =
        o + d->o.offset + b * d->o.stride_batch + h * d->o.stride_head + row0 * d->o.stride_seq;
    int nk = (int)d->len_k, dqk = (int)d->dim_qk, dv = (int)d->dim_v;
    float scale = d->scale != 0.0f ? d->scale : (float)(1.0 / sqrt((double)d->dim_qk));
    sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS, (int)rows, nk, dqk, scale, qb,
          (int)d->q.stride_seq, kb, (int)d->k.stride_seq, 0.0f, scores, nk);
    softmax_job job = {allowed, d, scores, lse, b, h, row0, 0, 0};
    softmax_chunk(&job, rows);
    sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_NO_TRANS, (int)rows, dv, nk, 1.0f, scores, nk, vb,
          (int)d->v.stride_seq, 0.0f, ob, (int)d->o.stride_seq);
}

clattn_status host_attention(const clattn_attention_desc *d, const float *q, const float *k,
                             const float *v, float *o, float *lse, size_t *scratch_bytes) {
    if (!host_attention_available() || d->dtype != CLATTN_F32 || d->out_dtype != CLATTN_F32 ||
        d->bias_host)
        return CLATTN_ERR_UNSUPPORTED;
    clattn_status status = clattn_attention_desc_check(d, NULL, NULL, 0);
    if (status != CLATTN_SUCCESS) return status;
    int dense = !d->causal && d->window_left < 0 && d->window_right < 0 && d->dilation == 1 &&
                !d->block_layout;
    size_t rows = HOST_SCORE_BUDGET / (d->len_k * sizeof(float));
    if (rows == 0) rows = 1;
    if (rows > d->len_q) rows = d->len_q;
    float *scores = malloc(rows * d->len_k * sizeof(float));
    uint8_t *allowed = dense ? NULL : malloc(rows * d->len_k);
    if (!scores || (!dense && !allowed)) status = CLATTN_ERR_OUT_OF_MEMORY;
    for (size_t h = 0; status == CLATTN_SUCCESS && h < d->heads_q; h++)
        for (size_t row0 = 0; status == CLATTN_SUCCESS && row0 < d->len_q; row0 += rows) {
            size_t n = row0 + rows <= d->len_q ? rows : d->len_q - row0;
            if (!dense) status = clattn_attention_mask(d, h, row0, n, allowed);
            for (size_t b = 0; status == CLATTN_SUCCESS && b < d->batch; b++)
                host_chunk(d, allowed, q, k, v, o, lse, scores, b, h, row0, n);
        }
    if (scratch_bytes) *scratch_bytes = rows * d->len_k * sizeof(float);
    free(allowed);
    free(scores);
    return status;
}
