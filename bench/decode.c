/*
 * clattn bench --preset decode: decoding over a KV cache (docs/semantics.md section 6). For each
 * storage type of the cache (a q8_0 or q4_0 cache is read with float32 Q and O), cache length Nk
 * and query block Nq (1, and 4 for speculative decoding), one call of Nq queries over a full cache;
 * it reports the time and the K/V bytes read per second next to the device's memory bandwidth,
 * measured in the same run by a device-to-device copy (bytes read plus written, per second). A
 * generation mode appends one token a step to a growing cache and attends with it, and reports
 * tokens per second.
 */
#include "common.h"
#include "message.h"
#include "sweeps.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define COPY_BYTES ((size_t)256 << 20)

typedef struct decode_record {
    size_t device;
    const char *mode;   /* "attend" or "generate" */
    clattn_dtype dtype; /* the cache's */
    size_t b, hq, hkv, d, nq, nk;
    double ms_min, ms_median; /* attend: one call; generate: one step (append + attend) */
    double kv_bytes;          /* K and V bytes a call reads */
    double copy_gbs;          /* the device's copy bandwidth, same run */
    char kernel[96];
} decode_record;

static double kv_gbs(const decode_record *r) {
    return r->ms_median > 0 ? r->kv_bytes / (r->ms_median * 1e6) : 0;
}

static const char *dtype_text(clattn_dtype t) {
    return t == CLATTN_F16    ? "f16"
           : t == CLATTN_BF16 ? "bf16"
           : t == CLATTN_Q8_0 ? "q8_0"
           : t == CLATTN_Q4_0 ? "q4_0"
                              : "f32";
}

/* Q's and O's storage with a cache of `cache` storage. */
static clattn_dtype query_dtype(clattn_dtype cache) {
    return cache == CLATTN_Q8_0 || cache == CLATTN_Q4_0 ? CLATTN_F32 : cache;
}

/* Bytes of n values (q8_0, q4_0: n a multiple of 32, 34 or 18 bytes a block). */
static size_t values_bytes(clattn_dtype t, size_t n) {
    if (t == CLATTN_Q8_0 || t == CLATTN_Q4_0) return n / 32 * (t == CLATTN_Q8_0 ? 34 : 18);
    return n * (t == CLATTN_F32 ? 4 : 2);
}

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void min_median(double *v, size_t n, double *min, double *median) {
    qsort(v, n, sizeof *v, compare_double);
    *min = v[0];
    *median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Copy bandwidth: clEnqueueCopyBuffer of COPY_BYTES, the median of 5, as (read + written) bytes
 * a second, GB/s. */
static double copy_bandwidth(clattn_context *ctx) {
    cl_context cl = clattn_context_cl_context(ctx);
    cl_command_queue q = clattn_context_queue(ctx);
    cl_int err = CL_SUCCESS;
    cl_mem a = clCreateBuffer(cl, CL_MEM_READ_WRITE, COPY_BYTES, NULL, &err);
    cl_mem b =
        err == CL_SUCCESS ? clCreateBuffer(cl, CL_MEM_READ_WRITE, COPY_BYTES, NULL, &err) : NULL;
    double t[5] = {0}, min = 0, median = 0;
    const unsigned char one = 1;
    if (err == CL_SUCCESS) err = clEnqueueFillBuffer(q, a, &one, 1, 0, COPY_BYTES, 0, NULL, NULL);
    for (int i = -1; err == CL_SUCCESS && i < 5; i++) { /* the first one warms up */
        double t0 = seconds_now();
        err = clEnqueueCopyBuffer(q, a, b, 0, 0, COPY_BYTES, 0, NULL, NULL);
        if (err == CL_SUCCESS) err = clFinish(q);
        if (i >= 0) t[i] = seconds_now() - t0;
    }
    if (a) clReleaseMemObject(a);
    if (b) clReleaseMemObject(b);
    if (err != CL_SUCCESS) return 0;
    min_median(t, 5, &min, &median);
    return 2.0 * (double)COPY_BYTES / median / 1e9;
}

/* Seeded uniform values in [-1, 1] as `dtype`; NULL when out of memory or for q8_0 values that
 * are not whole blocks. */
static void *random_values(size_t n, clattn_dtype dtype, uint64_t seed) {
    float *x = malloc(n * sizeof *x + 1);
    void *out = malloc(values_bytes(dtype, n) + 1);
    for (size_t i = 0; x && i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(seed >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
    }
    if (x && out && clattn_convert(CLATTN_F32, x, dtype, out, n) == CLATTN_SUCCESS) {
        free(x);
        return out;
    }
    free(x), free(out);
    return NULL;
}

/* A device buffer of seeded values. */
static cl_mem device_values(clattn_context *ctx, size_t n, clattn_dtype dtype, uint64_t seed) {
    void *host = random_values(n, dtype, seed);
    cl_int err = CL_SUCCESS;
    cl_mem m = host ? clCreateBuffer(clattn_context_cl_context(ctx),
                                     CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                                     values_bytes(dtype, n), host, &err)
                    : NULL;
    free(host);
    return err == CL_SUCCESS ? m : NULL;
}

/* A full cache of capacity nk (every sequence holding `len` rows) of seeded values. */
static clattn_status full_cache(clattn_context *ctx, const decode_config *c, clattn_dtype dtype,
                                size_t nk, size_t len, clattn_kv_cache **cache) {
    clattn_kv_cache_desc cd;
    clattn_kv_cache_desc_init(&cd, c->batch, c->hkv, c->d, c->d, nk);
    cd.dtype = dtype;
    size_t n = c->batch * nk * c->hkv * c->d;
    clattn_status s = clattn_kv_cache_create(ctx, &cd, cache); /* names bad sizes first */
    if (s) return s;
    void *k = random_values(n, dtype, 2), *v = random_values(n, dtype, 3);
    int32_t *lengths = malloc(c->batch * sizeof *lengths);
    for (size_t b = 0; lengths && b < c->batch; b++) lengths[b] = (int32_t)len;
    s = k && v && lengths ? clattn_kv_cache_write_host(*cache, k, v) : CLATTN_ERR_OUT_OF_MEMORY;
    if (!s) s = clattn_kv_cache_set_lengths(*cache, lengths);
    free(k), free(v), free(lengths);
    return s;
}

/* The attention desc of nq queries over a cache of capacity nk. */
static void decode_desc(const decode_config *c, clattn_dtype dtype, size_t nq, size_t nk,
                        clattn_attention_desc *d) {
    clattn_attention_desc_init(d, CLATTN_LAYOUT_BSHD, c->batch, c->hq, c->hkv, nq, nk, c->d, c->d);
    d->dtype = d->out_dtype = query_dtype(dtype);
    d->causal = 1;
}

/* One call of nq queries over a full cache of nk rows, warmed up and repeated. */
static clattn_status measure_attend(clattn_context *ctx, const decode_config *c, decode_record *r) {
    clattn_kv_cache *cache = NULL;
    clattn_attention_desc d;
    decode_desc(c, r->dtype, r->nq, r->nk, &d);
    cl_mem q = device_values(ctx, c->batch * r->nq * c->hq * c->d, d.dtype, 1);
    cl_mem o = device_values(ctx, c->batch * r->nq * c->hq * c->d, d.dtype, 4);
    clattn_status s =
        q && o ? full_cache(ctx, c, r->dtype, r->nk, r->nk, &cache) : CLATTN_ERR_OUT_OF_MEMORY;
    double t[256];
    size_t repeat = c->repeat < 256 ? c->repeat : 256;
    for (size_t i = 0; !s && i < c->warmup + repeat; i++) {
        double t0 = seconds_now();
        s = clattn_kv_cache_attention(cache, &d, q, NULL, o, NULL, NULL);
        clFinish(clattn_context_queue(ctx));
        if (i >= c->warmup) t[i - c->warmup] = (seconds_now() - t0) * 1e3;
    }
    if (!s) min_median(t, repeat, &r->ms_min, &r->ms_median);
    clattn_stats stats;
    clattn_stats_init(&stats);
    if (!s && clattn_context_last_stats(ctx, &stats) == CLATTN_SUCCESS)
        snprintf(r->kernel, sizeof r->kernel, "%s", stats.kernel);
    clattn_kv_cache_destroy(cache);
    if (q) clReleaseMemObject(q);
    if (o) clReleaseMemObject(o);
    return s;
}

/* Generation: from nk - steps rows, each step appends one token's K/V row and attends with
 * its query. ms is a step's time past the first, which builds or loads the append kernel and
 * launches the cache's attention for the first time (timed only when it is the one step);
 * tokens per second = 1000 / ms * B. */
static clattn_status measure_generate(clattn_context *ctx, const decode_config *c,
                                      decode_record *r) {
    size_t steps = c->steps < r->nk ? c->steps : r->nk - 1;
    clattn_kv_cache *cache = NULL;
    clattn_attention_desc d;
    decode_desc(c, r->dtype, 1, r->nk, &d);
    clattn_kv_rows rows = {NULL, NULL, {0}, {0}, d.dtype, 1, NULL}; /* quantised for q8_0 */
    size_t rows_n = c->batch * steps * c->hkv * c->d;
    rows.k = device_values(ctx, rows_n, d.dtype, 5);
    rows.v = device_values(ctx, rows_n, d.dtype, 6);
    clattn_tensor_dense(&rows.k_tensor, CLATTN_LAYOUT_BSHD, c->hkv, steps, c->d, 0);
    clattn_tensor_dense(&rows.v_tensor, CLATTN_LAYOUT_BSHD, c->hkv, steps, c->d, 0);
    cl_mem q = device_values(ctx, c->batch * c->hq * c->d, d.dtype, 1);
    cl_mem o = device_values(ctx, c->batch * c->hq * c->d, d.dtype, 4);
    clattn_status s = rows.k && rows.v && q && o
                          ? full_cache(ctx, c, r->dtype, r->nk, r->nk - steps, &cache)
                          : CLATTN_ERR_OUT_OF_MEMORY;
    clFinish(clattn_context_queue(ctx));
    const size_t timed = steps > 1 ? steps - 1 : steps;
    double t0 = seconds_now();
    for (size_t step = 0; !s && step < steps; step++) {
        if (step == steps - timed) clFinish(clattn_context_queue(ctx)), t0 = seconds_now();
        rows.k_tensor.offset = rows.v_tensor.offset = step * c->hkv * c->d; /* token `step` */
        s = clattn_kv_cache_append(cache, &rows);
        if (!s) s = clattn_kv_cache_attention(cache, &d, q, NULL, o, NULL, NULL);
    }
    clFinish(clattn_context_queue(ctx));
    r->ms_min = r->ms_median = (seconds_now() - t0) * 1e3 / (double)(timed ? timed : 1);
    clattn_kv_cache_destroy(cache);
    cl_mem all[] = {rows.k, rows.v, q, o};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        if (all[i]) clReleaseMemObject(all[i]);
    return s;
}

/* ---------------------------------------------------------------- outputs */

static void print_header(const clattn_device_info *info, double copy_gbs) {
    printf("device %zu: %s (%s); copy bandwidth %.1f GB/s (read + written)\n", info->index,
           info->name, info->platform_name, copy_gbs);
    printf("%-8s %-5s %4s %8s %10s %10s %9s %8s  %s\n", "mode", "dtype", "Nq", "Nk", "ms min",
           "ms median", "K/V GB/s", "of copy", "kernel / tokens a second");
}

static void print_record(const decode_record *r) {
    printf("%-8s %-5s %4zu %8zu %10.3f %10.3f %9.1f %7.0f%%  ", r->mode, dtype_text(r->dtype),
           r->nq, r->nk, r->ms_min, r->ms_median, kv_gbs(r),
           r->copy_gbs > 0 ? 100.0 * kv_gbs(r) / r->copy_gbs : 0.0);
    if (strcmp(r->mode, "generate") == 0)
        printf("%.1f tokens/s\n", r->ms_median > 0 ? 1000.0 * (double)r->b / r->ms_median : 0);
    else
        printf("%s\n", r->kernel);
    fflush(stdout);
}

static void decode_csv(textbuf *t, const decode_record *r, size_t n) {
    textbuf_printf(t, "device,mode,dtype,b,hq,hkv,d,nq,nk,ms_min,ms_median,kv_bytes,kv_gbs,"
                      "copy_gbs,tokens_per_s,kernel\n");
    for (size_t i = 0; i < n; i++, r++)
        textbuf_printf(t,
                       "%zu,%s,%s,%zu,%zu,%zu,%zu,%zu,%zu,%.4f,%.4f,%.0f,%.3f,%.3f,%.2f,\"%s\"\n",
                       r->device, r->mode, dtype_text(r->dtype), r->b, r->hq, r->hkv, r->d, r->nq,
                       r->nk, r->ms_min, r->ms_median, r->kv_bytes, kv_gbs(r), r->copy_gbs,
                       strcmp(r->mode, "generate") == 0 && r->ms_median > 0
                           ? 1000.0 * (double)r->b / r->ms_median
                           : 0.0,
                       r->kernel);
}

static void decode_json(textbuf *t, const decode_record *r, size_t n, const decode_config *c) {
    bench_json_begin(t, "decode", c->devices, c->num_devices);
    for (size_t i = 0; i < n; i++, r++)
        textbuf_printf(t,
                       "    {\"device\": %zu, \"mode\": \"%s\", \"dtype\": \"%s\", \"b\": %zu, "
                       "\"hq\": %zu, \"hkv\": %zu, \"d\": %zu, \"nq\": %zu, \"nk\": %zu, "
                       "\"ms_min\": %.4f, \"ms_median\": %.4f, \"kv_gbs\": %.3f, \"copy_gbs\": "
                       "%.3f}%s\n",
                       r->device, r->mode, dtype_text(r->dtype), r->b, r->hq, r->hkv, r->d, r->nq,
                       r->nk, r->ms_min, r->ms_median, kv_gbs(r), r->copy_gbs,
                       i + 1 < n ? "," : "");
    bench_json_end(t);
}

static int write_decode_outputs(const decode_config *c, const decode_record *r, size_t n) {
    textbuf csv = {0}, json = {0};
    decode_csv(&csv, r, n);
    decode_json(&json, r, n, c);
    return bench_write_tables(c->csv, c->json, c->out, "decode", &csv, &json);
}

/* ---------------------------------------------------------------- the sweep */

static void fill_record(decode_record *r, const decode_config *c, size_t device, const char *mode,
                        clattn_dtype dtype, size_t nq, size_t nk, double copy_gbs) {
    memset(r, 0, sizeof *r);
    r->device = device, r->mode = mode, r->dtype = dtype;
    r->b = c->batch, r->hq = c->hq, r->hkv = c->hkv, r->d = c->d, r->nq = nq, r->nk = nk;
    r->kv_bytes = 2.0 * (double)values_bytes(dtype, c->batch * nk * c->hkv * c->d);
    r->copy_gbs = copy_gbs;
}

/* Every dtype, Nk and Nq on one device, then the generation mode for each dtype at the largest
 * Nk up to 32768. @return how many records it added, or -1 after a failure it named. */
static int decode_device(const decode_config *c, size_t device, decode_record *out, size_t room) {
    clattn_context *ctx = NULL;
    clattn_device_info info;
    clattn_device_info_init(&info);
    if (clattn_context_create(&ctx, device) != CLATTN_SUCCESS) {
        cli_error("bench", "cannot open device %zu", device);
        return -1;
    }
    clattn_context_device_info(ctx, &info);
    double copy_gbs = copy_bandwidth(ctx);
    print_header(&info, copy_gbs);
    size_t n = 0, gen_nk = 0;
    clattn_status s = CLATTN_SUCCESS;
    for (size_t k = 0; k < c->num_nk; k++)
        if (c->nk[k] <= 32768 && c->nk[k] > gen_nk) gen_nk = c->nk[k];
    for (size_t t = 0; !s && t < c->num_dtypes; t++) {
        for (size_t k = 0; !s && k < c->num_nk; k++)
            for (size_t q = 0; !s && q < c->num_nq && n < room; q++) {
                fill_record(&out[n], c, device, "attend", c->dtypes[t], c->nq[q], c->nk[k],
                            copy_gbs);
                if (!(s = measure_attend(ctx, c, &out[n]))) print_record(&out[n++]);
            }
        if (!s && gen_nk > 1 && c->steps > 0 && n < room) {
            fill_record(&out[n], c, device, "generate", c->dtypes[t], 1, gen_nk, copy_gbs);
            if (!(s = measure_generate(ctx, c, &out[n]))) print_record(&out[n++]);
        }
    }
    if (s) cli_report("bench", "decode", s, ctx);
    clattn_context_destroy(ctx);
    return s ? -1 : (int)n;
}

int bench_decode(const decode_config *c) {
    static decode_record records[4096];
    size_t n = 0;
    int failed = 0;
    for (size_t i = 0; i < c->num_devices; i++) {
        int added = decode_device(c, c->devices[i], records + n, 4096 - n);
        if (added < 0)
            failed = 1;
        else
            n += (size_t)added;
    }
    if (n == 0) return 1;
    return write_decode_outputs(c, records, n) || failed ? 1 : 0;
}
