/* See util.h. */
#include "util.h"

#include "core/core.h"
#include "core/half.h"

#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void fill_uniform(float *x, size_t n, uint64_t seed) {
    uint64_t state = seed;
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((double)(splitmix64(&state) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

void fill_uniform_f16(uint16_t *x, size_t n, uint64_t seed) {
    uint64_t state = seed;
    for (size_t i = 0; i < n; i++)
        x[i] = float_to_half((float)((double)(splitmix64(&state) >> 11) * 0x1.0p-53 * 2.0 - 1.0));
}

double tolerance_atol(clattn_dtype dtype) {
    double atol = 0;
    clattn_tolerance(dtype, dtype, &atol, NULL, NULL);
    return atol;
}

double tolerance_rtol(clattn_dtype dtype) {
    double rtol = 0;
    clattn_tolerance(dtype, dtype, NULL, &rtol, NULL);
    return rtol;
}

size_t compare_outputs(const char *label, const float *got, const double *ref, size_t n,
                       double atol, double rtol) {
    case_result result;
    memset(&result, 0, sizeof result);
    compare_values(label, got, ref, n, atol, rtol, &result);
    if (result.mismatches)
        fprintf(stderr, "%s: %zu mismatches; first: %s\n", label, result.mismatches,
                result.message);
    return result.mismatches;
}

cl_int caller_objects_create(caller_objects *c, cl_command_queue_properties properties) {
    clattn_device_info info;
    clattn_device_info_init(&info);
    cl_int err = CL_SUCCESS;
    memset(c, 0, sizeof *c);
    if (clattn_device_get_info(0, &info) == CLATTN_SUCCESS)
        c->context = clCreateContext(NULL, 1, &info.device, NULL, NULL, &err);
    if (!c->context) {
        fprintf(stderr, "cannot create a cl_context on device 0: %d\n", (int)err);
        abort();
    }
    c->device = info.device;
    c->queue = clCreateCommandQueue(c->context, c->device, properties, &err);
    return err;
}

void caller_objects_release(caller_objects *c) {
    if (c->queue) clReleaseCommandQueue(c->queue);
    clReleaseContext(c->context);
    memset(c, 0, sizeof *c);
}

static clattn_context **contexts;
static size_t num_contexts;

static void release_contexts(void) {
    for (size_t i = 0; i < num_contexts; i++) clattn_context_destroy(contexts[i]);
    free(contexts);
}

size_t test_contexts(clattn_context ***out) {
    if (!contexts) {
        size_t count = 0;
        if (clattn_device_count(&count) != CLATTN_SUCCESS || count == 0) {
            fprintf(stderr, "no OpenCL device: %s\n", clattn_device_discovery_summary());
            abort();
        }
        contexts = calloc(count, sizeof *contexts);
        for (size_t i = 0; i < count; i++) {
            clattn_status status = clattn_context_create(&contexts[num_contexts], i);
            if (status != CLATTN_SUCCESS) {
                fprintf(stderr, "device %zu: %s\n", i, clattn_status_name(status));
                abort();
            }
            num_contexts++;
        }
        atexit(release_contexts);
    }
    *out = contexts;
    return num_contexts;
}

clattn_context *small_device(cl_ulong local, size_t items) {
    clattn_context *ctx = NULL;
    cr_assert_eq(clattn_context_create(&ctx, 0), CLATTN_SUCCESS);
    ctx->device.local_mem_bytes = local;
    if (items) ctx->device.max_work_group_size = items;
    return ctx;
}

static size_t check_one(clattn_context *ctx, size_t device, const attn_case *c, clattn_path path,
                        clattn_variant variant) {
    case_result r;
    case_run(ctx, c, path, variant, &r);
    if (r.status == CLATTN_SUCCESS && r.mismatches == 0) return 0;
    char what[512];
    case_describe(c, what, sizeof what);
    fprintf(stderr, "FAIL device %zu path %d variant %d: %s\n  %s (%zu of %zu values off)\n",
            device, (int)path, (int)variant, what, r.message, r.mismatches, r.checked);
    return 1;
}

size_t variants_on_path(clattn_context *ctx, clattn_path path, clattn_variant *out, size_t cap) {
    size_t n = 0;
    for (int v = 1; n < cap; v++) {
        clattn_variant_info info;
        clattn_variant_info_init(&info);
        if (clattn_variant_describe(ctx, (clattn_variant)v, &info) != CLATTN_SUCCESS) break;
        if (info.path == path && info.supported) out[n++] = info.variant;
    }
    return n;
}

int auto_uses(clattn_context *ctx, clattn_variant variant) {
    clattn_variant_info vi;
    clattn_variant_info_init(&vi);
    cr_assert_eq(clattn_variant_describe(ctx, variant, &vi), CLATTN_SUCCESS);
    return vi.supported && vi.used_by_auto;
}

clattn_variant auto_row_for_wide(clattn_context *ctx, size_t queries) {
    int split = auto_uses(ctx, CLATTN_VARIANT_SPLIT);
    if (split && queries <= 11) return CLATTN_VARIANT_SPLIT;
    if (auto_uses(ctx, CLATTN_VARIANT_LANES)) return CLATTN_VARIANT_LANES;
    if (auto_uses(ctx, CLATTN_VARIANT_FLASH)) return CLATTN_VARIANT_FLASH;
    return split ? CLATTN_VARIANT_SPLIT : CLATTN_VARIANT_GEMM;
}

size_t gemm_rows_on(clattn_context *ctx, clattn_gemm *out, size_t cap) {
    size_t n = 0;
    for (int g = 1; n < cap; g++) {
        clattn_gemm_info info;
        clattn_gemm_info_init(&info);
        if (clattn_gemm_describe(ctx, (clattn_gemm)g, &info) != CLATTN_SUCCESS) break;
        if (info.supported) out[n++] = info.gemm;
    }
    return n;
}

void for_each_gemm_row(gemm_row_check *check, const void *cases, size_t case_size, size_t count) {
    clattn_context **ctxs;
    size_t num = test_contexts(&ctxs);
    for (size_t d = 0; d < num; d++) {
        clattn_gemm rows[8];
        size_t num_rows = gemm_rows_on(ctxs[d], rows, sizeof rows / sizeof rows[0]);
        cr_expect_geq(num_rows, 2, "the GEMM table lists %zu rows here", num_rows);
        for (size_t r = 0; r < num_rows; r++) {
            ASSERT_OK(ctxs[d], clattn_context_set_gemm(ctxs[d], rows[r]));
            for (size_t c = 0; c < count; c++)
                check(ctxs[d], rows[r], (const char *)cases + c * case_size);
            ASSERT_OK(ctxs[d], clattn_context_set_gemm(ctxs[d], CLATTN_GEMM_AUTO));
        }
    }
}

void fresh_cache_dir(char *folder, size_t size, const char *name) {
    snprintf(folder, size, "/tmp/clattn-%s-XXXXXX", name);
    cr_assert_not_null(mkdtemp(folder));
    setenv("CLATTN_CACHE_DIR", folder, 1);
}

void remove_cache_dir(const char *folder) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", folder);
    cr_expect_eq(system(cmd), 0);
}

void write_tuning_json(const char *folder, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/tuning.json", folder);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

case_result run_small_causal(clattn_context *ctx, clattn_path path, clattn_variant variant) {
    attn_case c;
    case_init(&c, 1, 2, 1, 45, 70, 32, 32);
    c.causal = 1;
    case_result r;
    case_run(ctx, &c, path, variant, &r);
    return r;
}

void expect_case_refused(clattn_context *ctx, const attn_case *c, clattn_variant variant,
                         clattn_status want, const char *words) {
    case_result r;
    case_run(ctx, c, CLATTN_PATH_FUSED, variant, &r);
    cr_expect_eq(r.status, want);
    cr_expect(strstr(r.message, words) != NULL, "%s", r.message);
}

void set_tuning_everywhere(clattn_variant variant, const clattn_tuning *t) {
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs);
    for (size_t d = 0; d < devices; d++)
        ASSERT_OK(ctxs[d], clattn_context_set_tuning(ctxs[d], variant, t));
}

void expect_tuning_refused(clattn_context *ctx, clattn_variant variant, const clattn_tuning *t,
                           const char *field) {
    cr_expect_eq(clattn_context_set_tuning(ctx, variant, t), CLATTN_ERR_INVALID_ARGUMENT,
                 "%s accepted", field);
    char expected[64];
    snprintf(expected, sizeof expected, "%s: %s is out of range", clattn_variant_name(variant),
             field);
    cr_expect(strstr(clattn_context_last_error(ctx), expected) != NULL, "%s",
              clattn_context_last_error(ctx));
    attn_case c;
    case_init(&c, 1, 2, 1, 8, 8, 16, 16);
    c.dtype = CLATTN_F16; /* every fused variant takes it */
    case_result r;
    case_run(ctx, &c, CLATTN_PATH_FUSED, variant, &r);
    cr_expect_eq(r.status, CLATTN_SUCCESS, "%s", r.message);
}

size_t mask_kind_cases(attn_case *cases, unsigned seed) {
    for (int kind = 0; kind < MASK_KINDS; kind++) {
        attn_case *c = &cases[kind];
        case_init(c, 2, 4, 2, 67, 93, 32, 32);
        c->seed = seed + kind;
        switch (kind) {
        case 0:
            c->causal = 1;
            break;
        case 1:
            c->left = 9, c->right = 4, c->dilation = 2;
            break;
        case 2: /* global rows and keys */
            c->left = c->right = 3, c->num_globals = 3;
            c->globals[0] = 0, c->globals[1] = 40, c->globals[2] = 92;
            break;
        case 3:
            c->block_layout = LAYOUT_PER_HEAD, c->bq = 16, c->bk = 24, c->causal = 1;
            break;
        case 4:
            c->bias = BIAS_FULL;
            break;
        case 5:
            c->bad_value = 1, c->left = c->right = 5;
            break;
        case 6:
            c->nan_key = 1, c->causal = 1, c->bias = BIAS_PADDING;
            break;
        }
    }
    return MASK_KINDS;
}

size_t check_cases(const attn_case *cases, size_t count, clattn_path path, clattn_variant variant) {
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs), failed = 0;
    clattn_variant rows[16] = {variant};
    int sweep_variants = path == CLATTN_PATH_FUSED && variant == CLATTN_VARIANT_AUTO;
    size_t variants = sweep_variants ? variants_on_path(ctxs[0], path, rows, 16) : 1;
    for (size_t dev = 0; dev < devices; dev++)
        for (size_t i = 0; i < count; i++)
            for (size_t v = 0; v < variants; v++)
                failed += check_one(ctxs[dev], dev, &cases[i], path, rows[v]);
    return failed;
}

void expect_every_path_passes(const attn_case *cases, size_t count) {
    cr_expect_eq(check_cases(cases, count, CLATTN_PATH_FUSED, CLATTN_VARIANT_AUTO), 0,
                 "fused: failing cases are listed above");
    cr_expect_eq(check_cases(cases, count, CLATTN_PATH_GEMM, CLATTN_VARIANT_AUTO), 0,
                 "gemm: failing cases are listed above");
    cr_expect_eq(check_cases(cases, count, CLATTN_PATH_AUTO, CLATTN_VARIANT_AUTO), 0,
                 "auto: failing cases are listed above");
}

uint8_t *random_quantised(clattn_dtype dtype, size_t n, float amplitude, uint64_t seed) {
    size_t block_bytes = dtype == CLATTN_Q4_0 ? 18 : 34;
    float *x = malloc(n * sizeof *x);
    uint8_t *q = malloc(n / 32 * block_bytes);
    cr_assert(x && q);
    fill_uniform(x, n, seed);
    for (size_t i = 0; i < n; i++) x[i] *= amplitude;
    cr_assert_eq(clattn_convert(CLATTN_F32, x, dtype, q, n), CLATTN_SUCCESS);
    free(x);
    return q;
}
