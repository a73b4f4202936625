/*
 * The device's float32 FMA peak, measured (cl/fma_peak.cl), so that the bench can report a
 * GEMM's or an attention kernel's FLOP/s as a share of what the device did in the same run
 * rather than of a figure from another day: work-items running independent FMA chains on
 * 16-lane vectors, `rounds` sized so that a run takes about PEAK_TARGET_S, the median of
 * PEAK_RUNS runs (as the decode bench's copy bandwidth).
 */
#include "gemm/gemm.h"

#include <stdio.h>
#include <stdlib.h>

#define PEAK_CHAINS   12 /* independent chains a work-item: hides the FMA latency */
#define PEAK_VEC      16
#define PEAK_RUNS     5
#define PEAK_TARGET_S 0.05
#define PEAK_ITEMS    64 /* work-items a compute unit (GPUs want many more: 1024) */

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One run of `rounds`, waited for; its seconds in *s. */
static clattn_status run_once(clattn_context *ctx, cl_kernel kernel, size_t items, cl_int rounds,
                              cl_mem out, double *s) {
    float mul = 0.999999f, add = 1e-7f;
    kernel_args a = {kernel, 0, CL_SUCCESS};
    KARG(a, rounds);
    KARG(a, mul);
    KARG(a, add);
    KARG(a, out);
    if (a.err != CL_SUCCESS) return ctx_cl_error(ctx, a.err, "fma peak: arguments");
    double t0 = seconds_now();
    clattn_status status = kernel_launch(ctx, kernel, 1, &items, NULL, NULL, "fma peak");
    cl_int err = status ? CL_SUCCESS : clFinish(ctx->queue);
    if (!status && err != CL_SUCCESS) status = ctx_cl_error(ctx, err, "fma peak: finishing");
    *s = seconds_now() - t0;
    return status;
}

clattn_status gemm_fma_peak(clattn_context *ctx, double *gflops) {
    static const char *const files[] = {"fma_peak.cl"};
    char defines[64];
    snprintf(defines, sizeof defines, "-DCHAINS=%d -DVEC=%d", PEAK_CHAINS, PEAK_VEC);
    cl_kernel kernel = NULL;
    cl_mem out = NULL;
    size_t units = ctx->device.compute_units ? ctx->device.compute_units : 1;
    size_t items = units * (ctx->device.type & CL_DEVICE_TYPE_GPU ? 1024 : PEAK_ITEMS);
    clattn_status status = kernel_get(ctx, files, 1, defines, "fma_peak", &kernel);
    if (!status)
        status = buffer_create(ctx, CL_MEM_WRITE_ONLY, items * sizeof(float), NULL, &out,
                               "fma peak: output");
    cl_int rounds = 256;
    double s = 0, runs[PEAK_RUNS];
    if (!status) status = run_once(ctx, kernel, items, rounds, out, &s); /* warm-up */
    while (!status && s < PEAK_TARGET_S / 4 && rounds < (1 << 24)) {
        rounds *= 4;
        status = run_once(ctx, kernel, items, rounds, out, &s);
    }
    for (int i = 0; !status && i < PEAK_RUNS; i++)
        status = run_once(ctx, kernel, items, rounds, out, &runs[i]);
    if (out) clReleaseMemObject(out);
    if (status) return status;
    qsort(runs, PEAK_RUNS, sizeof *runs, compare_double);
    double flops = 2.0 * PEAK_VEC * PEAK_CHAINS * (double)rounds * (double)items;
    *gflops = flops / (runs[PEAK_RUNS / 2] * 1e9);
    return CLATTN_SUCCESS;
}
