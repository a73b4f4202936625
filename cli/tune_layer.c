/*
 * The layers `clattn tune --gemm` measures a GEMM row on (tune_layer.h). A GEMM row's tuning
 * is baked into the layer's weights when they are prepared (the panels' width), so each
 * candidate makes its own layer. Inputs are seeded, X in [-1, 1], weights in
 * [-1/sqrt(in), 1/sqrt(in)] as nn.Linear initialises them.
 */
#include "tune_layer.h"

#include "conformance.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* `count` seeded values in [-scale, scale] stored as dtype; NULL when out of memory. */
static void *seeded(size_t count, double scale, clattn_dtype dtype, uint64_t seed) {
    float *x = malloc(count * sizeof *x + 1);
    void *stored = malloc(count * 4 + 1);
    for (size_t i = 0; x && i < count; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)(((double)(seed >> 11) * 0x1.0p-53 * 2.0 - 1.0) * scale);
    }
    if (x && stored) clattn_convert(CLATTN_F32, x, dtype, stored, count);
    free(x);
    if (!x) free(stored);
    return x ? stored : NULL;
}

static int reference_of(tune_layer *l) {
    float *y = malloc(l->y_count * sizeof *y);
    l->ref = malloc(l->y_count * sizeof *l->ref);
    if (!y || !l->ref ||
        clattn_mha_reference(&l->layer, &l->call, l->x, NULL, y) != CLATTN_SUCCESS) {
        free(y);
        return 1;
    }
    for (size_t i = 0; i < l->y_count; i++) l->ref[i] = y[i];
    free(y);
    return 0;
}

int tune_layer_setup(clattn_context *ctx, tune_layer *l, size_t hq, size_t hkv, size_t d, size_t n,
                     clattn_dtype wtype) {
    memset(l, 0, sizeof *l);
    size_t dm = hq * d;
    snprintf(l->name, sizeof l->name, "layer d=%zu H=%zu/%zu N=%zu w %s", dm, hq, hkv, n,
             wtype == CLATTN_BF16  ? "bf16"
             : wtype == CLATTN_F16 ? "f16"
                                   : "f32");
    clattn_mha_desc_init(&l->layer, dm, hq, hkv, d, d);
    l->layer.weight_dtype = wtype;
    double scale = 1.0 / sqrt((double)dm);
    l->w[0] = seeded(hq * d * dm, scale, wtype, 21),
    l->w[1] = seeded(hkv * d * dm, scale, wtype, 22);
    l->w[2] = seeded(hkv * d * dm, scale, wtype, 23),
    l->w[3] = seeded(dm * hq * d, scale, wtype, 24);
    l->layer.w_q.host = l->w[0], l->layer.w_k.host = l->w[1];
    l->layer.w_v.host = l->w[2], l->layer.w_o.host = l->w[3];
    clattn_attention_desc_init(&l->call, CLATTN_LAYOUT_BSHD, 1, hq, hkv, n, n, d, d);
    l->call.causal = 1;
    l->y_count = n * dm;
    l->x = seeded(l->y_count, 1.0, CLATTN_F32, 25);
    if (!l->w[0] || !l->w[1] || !l->w[2] || !l->w[3] || !l->x || reference_of(l)) return 1;
    cl_int err = CL_SUCCESS;
    l->x_dev = clCreateBuffer(clattn_context_cl_context(ctx), CL_MEM_COPY_HOST_PTR, l->y_count * 4,
                              l->x, &err);
    if (err == CL_SUCCESS)
        l->y_dev = clCreateBuffer(clattn_context_cl_context(ctx), CL_MEM_READ_WRITE, l->y_count * 4,
                                  NULL, &err);
    return err != CL_SUCCESS;
}

void tune_layer_free(tune_layer *l) {
    for (int i = 0; i < 4; i++) free(l->w[i]);
    free(l->x);
    free(l->ref);
    if (l->x_dev) clReleaseMemObject(l->x_dev);
    if (l->y_dev) clReleaseMemObject(l->y_dev);
    memset(l, 0, sizeof *l);
}

/* Whether Y matches the reference within the layer's tolerance. */
static int output_matches(clattn_context *ctx, const tune_layer *l, char *why, size_t size) {
    float *got = malloc(l->y_count * sizeof *got);
    int ok = got && clEnqueueReadBuffer(clattn_context_queue(ctx), l->y_dev, CL_TRUE, 0,
                                        l->y_count * 4, got, 0, NULL, NULL) == CL_SUCCESS;
    if (ok) {
        case_result r;
        double atol, rtol;
        memset(&r, 0, sizeof r);
        layer_tolerance(CLATTN_F32, l->ref, l->y_count, &atol, &rtol);
        compare_values("Y", got, l->ref, l->y_count, atol, rtol, &r);
        ok = r.mismatches == 0;
        if (!ok) snprintf(why, size, "%s", r.message);
    }
    free(got);
    return ok;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int tune_layer_measure(clattn_context *ctx, tune_layer *l, size_t repeat, double *ms, char *kernel,
                       size_t kernel_size, char *why, size_t why_size) {
    double times[TUNE_REPEAT_MAX];
    clattn_mha *mha = NULL;
    clattn_status status = clattn_mha_create(ctx, &l->layer, &mha);
    clattn_mha_stats stats;
    for (size_t i = 0; status == CLATTN_SUCCESS && i <= repeat; i++) {
        status = clattn_mha_forward(mha, &l->call, l->x_dev, NULL, l->y_dev, NULL);
        clattn_mha_stats_init(&stats);
        if (status == CLATTN_SUCCESS) status = clattn_mha_last_stats(mha, &stats);
        if (status == CLATTN_SUCCESS && i == 0 && !output_matches(ctx, l, why, why_size)) {
            clattn_mha_destroy(mha);
            return 1;
        }
        if (i > 0) times[i - 1] = stats.projection_ms + stats.output_ms;
    }
    clattn_mha_destroy(mha);
    if (status != CLATTN_SUCCESS) {
        snprintf(why, why_size, "%s: %s", clattn_status_name(status),
                 clattn_context_last_error(ctx));
        return 1;
    }
    qsort(times, repeat, sizeof *times, compare_doubles);
    *ms = repeat ? times[repeat / 2] : stats.projection_ms + stats.output_ms;
    snprintf(kernel, kernel_size, "%s", stats.gemm_kernel);
    return 0;
}
