/*
 * The clblast GEMM row: CLBlast's SGEMM (batched for batches), the fallback on every device.
 * Weights are kept as float32 rows [n][k] (CLBlast has no bfloat16, and its half GEMM wants
 * cl_khr_fp16 and half activations too), read transposed.
 *
 * Tuning: CLBlast's own database picks its Xgemm kernel's parameters. A tuning entry with
 * block_m set overrides them (CLBlastOverrideParameters) before each call: block_m and block_n
 * are Xgemm's MWG and NWG (C tile of a work-group), tile_m and tile_n its MDIMC and NDIMC (the
 * work-group's shape), vector its VWM and VWN; KWG is 32, and the rest as CLBlast's defaults.
 * CLBlast keeps an override for the rest of the process, for every context on the device.
 */
#include "core/blas.h"
#include "gemm/gemm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* CLBlast passes offsets and leading dimensions to its kernels as int. */
#define CLBLAST_MAX_ELEMENTS ((size_t)INT32_MAX)

/* ---------------------------------------------------------------- tuning */

#define XGEMM_KWG 32

static int tuning_valid(const tuning_params *t, const clattn_device_info *device, char *why,
                        size_t size) {
    if (!t->block_m) return 1; /* CLBlast's own database */
    unsigned mwg = t->block_m, nwg = t->block_n, mdimc = t->tile_m, ndimc = t->tile_n;
    unsigned vw = t->vector ? t->vector : 1;
    int ok = nwg && mdimc && ndimc && mwg % (mdimc * vw) == 0 && nwg % (ndimc * vw) == 0 &&
             XGEMM_KWG % mdimc == 0 && XGEMM_KWG % ndimc == 0 && (vw & (vw - 1)) == 0;
    uint64_t local = (uint64_t)(mwg + nwg) * XGEMM_KWG * sizeof(float);
    if (ok && device &&
        (mdimc * ndimc > device->max_work_group_size || local > device->local_mem_bytes)) {
        snprintf(why, size,
                 "MWG %u NWG %u MDIMC %u NDIMC %u: %u work-items and %llu bytes of local memory "
                 "a work-group exceed the device's",
                 mwg, nwg, mdimc, ndimc, mdimc * ndimc, (unsigned long long)local);
        return 0;
    }
    if (ok) return 1;
    snprintf(why, size,
             "block_m (MWG) %u, block_n (NWG) %u, tile_m (MDIMC) %u, tile_n (NDIMC) %u, vector %u: "
             "MWG a multiple of MDIMC*vector, NWG of NDIMC*vector, MDIMC and NDIMC dividing %d, "
             "vector a power of two",
             mwg, nwg, mdimc, ndimc, vw, XGEMM_KWG);
    return 0;
}

/* Xgemm's parameters from the entry (block_m set), all of them, as CLBlast requires. */
static CLBlastStatusCode override_xgemm(cl_device_id device, const tuning_params *t) {
    const char *names[] = {"GEMMK", "KREG", "KWG", "KWI", "MDIMA", "MDIMC", "MWG", "NDIMB",
                           "NDIMC", "NWG",  "SA",  "SB",  "STRM",  "STRN",  "VWM", "VWN"};
    size_t vw = t->vector ? t->vector : 1;
    size_t values[] = {0,          1,         XGEMM_KWG, 2,          t->tile_m, t->tile_m,
                       t->block_m, t->tile_n, t->tile_n, t->block_n, 1,         1,
                       0,          0,         vw,        vw};
    return CLBlastOverrideParameters(device, "Xgemm", CLBlastPrecisionSingle, ARRAY_LEN(names),
                                     names, values);
}

/* Its defaults: CLBlast's database. */
static const tuning_default defaults[] = {{CL_DEVICE_TYPE_ALL, "", "", {.block_m = 0}}};

static const clattn_tuning_axis axes[] = {
    TUNING_AXIS(block_m, 32, 64, 128), TUNING_AXIS(block_n, 32, 64, 128),
    TUNING_AXIS(tile_m, 8, 16, 32),    TUNING_AXIS(tile_n, 8, 16, 32),
    TUNING_AXIS(vector, 1, 2, 4, 8),
};

/* ---------------------------------------------------------------- checks */

/* The last element an operand's rows reach, +1: where CLBlast's int offsets must stay. */
static double operand_span(const gemm_operand *op, size_t count, size_t rows, size_t cols) {
    double last_entry = (double)(count - 1) * (double)(op->s_item + op->s_batch + op->s_head);
    return (double)op->offset + last_entry + (double)(rows - 1) * (double)op->ld + (double)cols;
}

static clattn_status check(const clattn_context *ctx, const gemm_desc *g, char *why, size_t size) {
    if (!g) return CLATTN_SUCCESS;
    size_t b_rows = g->transpose_b ? g->n : g->k, b_cols = g->transpose_b ? g->k : g->n;
    double spans[] = {operand_span(&g->a, g->count, g->m, g->k),
                      g->weights ? (double)g->n * (double)g->k
                                 : operand_span(&g->b, g->count, b_rows, b_cols),
                      operand_span(&g->c, g->count, g->m, g->n)};
    for (size_t i = 0; i < ARRAY_LEN(spans); i++)
        if (spans[i] > (double)CLBLAST_MAX_ELEMENTS) {
            snprintf(why, size,
                     "CLBlast addresses operands with int offsets, and an operand of a %zu x %zu x "
                     "%zu GEMM spans more than 2^31-1 elements",
                     g->m, g->n, g->k);
            return CLATTN_ERR_UNSUPPORTED;
        }
    if (g->count == 1 && !blas_gemm_copies_fit(&ctx->device, g->m, g->n, g->k)) {
        snprintf(why, size,
                 "CLBlast's padded copies of a %zu x %zu x %zu GEMM would exceed the device's "
                 "largest allocation (%llu bytes); use a smaller B*N",
                 g->m, g->n, g->k, (unsigned long long)ctx->device.max_alloc_bytes);
        return CLATTN_ERR_OUT_OF_MEMORY;
    }
    return CLATTN_SUCCESS;
}

static int suits(const clattn_device_info *device, char *why, size_t size) {
    return 1;
}

/* ---------------------------------------------------------------- weights */

static clattn_status weights_make(clattn_context *ctx, const tuning_params *t, const void *w,
                                  clattn_dtype dtype, size_t n, size_t k, gemm_weights *out) {
    size_t count = n * k;
    float *wide = malloc(count * sizeof *wide);
    if (!wide) return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "clblast: float32 weights");
    clattn_convert(dtype, w, CLATTN_F32, wide, count);
    clattn_status status =
        buffer_create(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, count * sizeof *wide, wide,
                      &out->buffer, "clblast: float32 weights");
    free(wide);
    out->dtype = CLATTN_F32;
    out->bytes = count * sizeof(float);
    return status;
}

/* ---------------------------------------------------------------- calls */

static size_t entry_offset(const gemm_operand *op, const gemm_desc *g, size_t i, size_t group) {
    size_t e = g->first + i;
    return op->offset + e / g->heads * op->s_batch + e % g->heads / group * op->s_head +
           i * op->s_item;
}

/* A batch: CLBlastSgemmBatched with each entry's offsets. */
static CLBlastStatusCode run_batched(clattn_context *ctx, const gemm_desc *g, size_t ldc,
                                     cl_event *event) {
    size_t n = g->count, *off = malloc(3 * n * sizeof *off);
    float *scalars = malloc(2 * n * sizeof *scalars);
    if (!off || !scalars) {
        free(off), free(scalars);
        return CLBlastInsufficientMemoryTemp;
    }
    for (size_t i = 0; i < n; i++) {
        off[i] = entry_offset(&g->a, g, i, 1);
        off[n + i] = entry_offset(&g->b, g, i, g->group);
        off[2 * n + i] = entry_offset(&g->c, g, i, 1);
        scalars[i] = g->alpha, scalars[n + i] = g->accumulate ? 1.0f : 0.0f;
    }
    CLBlastStatusCode code =
        CLBlastSgemmBatched(CLBlastLayoutRowMajor, CLBlastTransposeNo,
                            g->transpose_b ? CLBlastTransposeYes : CLBlastTransposeNo, g->m, g->n,
                            g->k, scalars, g->a.buffer, off, g->a.ld, g->b.buffer, off + n, g->b.ld,
                            scalars + n, g->c.buffer, off + 2 * n, ldc, n, &ctx->queue, event);
    free(off), free(scalars);
    return code;
}

static clattn_status run(clattn_context *ctx, const tuning_params *t, const gemm_desc *g) {
    cl_event event = NULL;
    cl_event *ev = ctx->timing ? &event : NULL;
    size_t ldc = g->test_fail ? 0 : g->c.ld; /* test-only: an ldc CLBlast rejects */
    blas_user_add(ctx);
    blas_enter(ctx);
    CLBlastStatusCode code = t->block_m ? override_xgemm(ctx->device.device, t) : CLBlastSuccess;
    if (code == CLBlastSuccess && g->count > 1)
        code = run_batched(ctx, g, ldc, ev);
    else if (code == CLBlastSuccess) {
        int tb = g->weights ? 1 : g->transpose_b;
        cl_mem b = g->weights ? g->weights->buffer : g->b.buffer;
        size_t b_off = g->weights ? 0 : g->b.offset, ldb = g->weights ? g->k : g->b.ld;
        code = CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo,
                            tb ? CLBlastTransposeYes : CLBlastTransposeNo, g->m, g->n, g->k,
                            g->alpha, g->a.buffer, g->a.offset, g->a.ld, b, b_off, ldb,
                            g->accumulate ? 1.0f : 0.0f, g->c.buffer, g->c.offset, ldc, &ctx->queue,
                            ev);
    }
    blas_leave(ctx);
    ctx->launched_in_call = 1; /* CLBlast may have enqueued kernels, even where it failed */
    char what[160];
    snprintf(what, sizeof what, "%s: CLBlast%s", g->what, g->count > 1 ? "SgemmBatched" : "Sgemm");
    return blas_done(ctx, code, event, what);
}

static void describe(const tuning_params *t, const gemm_desc *g, char *out, size_t size) {
    if (t->block_m)
        snprintf(out, size, "clblast xgemm MWG%u NWG%u MDIMC%u NDIMC%u VW%u", t->block_m,
                 t->block_n, t->tile_m, t->tile_n, t->vector ? t->vector : 1);
    else
        snprintf(out, size, "clblast sgemm%s (its database)", g->count > 1 ? " batched" : "");
}

const gemm_row gemm_clblast = {
    .id = CLATTN_GEMM_CLBLAST,
    .name = "clblast",
    .summary = "CLBlast's SGEMM (its database, or parameters from clattn tune); every device",
    .defaults = defaults,
    .num_defaults = ARRAY_LEN(defaults),
    .axes = axes,
    .num_axes = ARRAY_LEN(axes),
    .tuning_valid = tuning_valid,
    .check = check,
    .suits = suits,
    .weights_make = weights_make,
    .run = run,
    .describe = describe,
};
