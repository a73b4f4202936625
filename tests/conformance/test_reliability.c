/*
 * The library where it once gave wrong answers in silence or a stale message (the reliability
 * issue): every failing call on a context leaves its own message; outputs overlapping inputs
 * through sub-buffers are refused; buffers that kernels write are read-write; the gemm path
 * plans around CLBlast's padded copies.
 */
#include <criterion/criterion.h>

#include "core/core.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static clattn_context *first_context(void) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    return ctxs[0];
}

/* ---------------------------------------------------------------- messages */

/* Makes the context's last error a known one, then expects `call` to fail with a message of
 * its own that mentions `text`. */
#define EXPECT_OWN_MESSAGE(ctx, call, text)                                                        \
    do {                                                                                           \
        cr_assert_neq(clattn_attention(ctx, NULL, NULL, NULL, NULL, NULL, NULL, NULL),             \
                      CLATTN_SUCCESS);                                                             \
        cr_assert(strstr(clattn_context_last_error(ctx), "desc is NULL") != NULL);                 \
        clattn_status status_ = (call);                                                            \
        cr_expect_neq(status_, CLATTN_SUCCESS, "%s succeeded", #call);                             \
        cr_expect(strstr(clattn_context_last_error(ctx), text) != NULL,                            \
                  "%s: last error '%s' does not mention '%s'", #call,                              \
                  clattn_context_last_error(ctx), text);                                           \
    } while (0)

Test(errors, every_failing_call_on_a_context_leaves_its_own_message) {
    clattn_context *ctx = first_context();
    clattn_variant_info info;
    clattn_variant_info_init(&info);
    char reason[128];
    EXPECT_OWN_MESSAGE(ctx, clattn_context_last_stats(ctx, NULL), "stats is NULL");
    EXPECT_OWN_MESSAGE(ctx, clattn_softmax(ctx, NULL, NULL, NULL, NULL, NULL), "softmax");
    EXPECT_OWN_MESSAGE(ctx, clattn_variant_describe(ctx, (clattn_variant)999, &info),
                       "variant 999");
    EXPECT_OWN_MESSAGE(ctx, clattn_variant_describe(ctx, CLATTN_VARIANT_GEMM, NULL), "info");
    EXPECT_OWN_MESSAGE(
        ctx, clattn_variant_supported(ctx, (clattn_variant)999, NULL, reason, sizeof reason),
        "variant 999");
}

/* ---------------------------------------------------------------- aliasing */

/* A call whose tensors live in slices of one parent buffer: [B=1, N=8, H=1, D=8] float32,
 * 256 bytes each, Q, K and V filled with seeded values. */
#define ALIAS_N     8
#define ALIAS_BYTES (ALIAS_N * ALIAS_N * sizeof(float))

typedef struct alias_setup {
    clattn_context *ctx;
    clattn_attention_desc desc;
    cl_mem parent;  /* 16 slices' worth */
    size_t align;   /* bytes between sub-buffer origins the device accepts */
    float want[64]; /* O from separate buffers */
    cl_mem slices[16];
    size_t num_slices;
} alias_setup;

/* A sub-buffer of the parent, released by alias_setup_release. */
static cl_mem slice(alias_setup *s, size_t origin, size_t size) {
    cl_buffer_region region = {origin, size};
    cl_int err = CL_SUCCESS;
    cl_mem sub = clCreateSubBuffer(s->parent, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION,
                                   &region, &err);
    cr_assert_eq(err, CL_SUCCESS, "sub-buffer [%zu, +%zu): %d", origin, size, err);
    cr_assert_lt(s->num_slices, 16);
    return s->slices[s->num_slices++] = sub;
}

static void alias_setup_release(alias_setup *s) {
    clFinish(clattn_context_queue(s->ctx));
    for (size_t i = 0; i < s->num_slices; i++) clReleaseMemObject(s->slices[i]);
    clReleaseMemObject(s->parent);
}

static void alias_setup_make(alias_setup *s) {
    memset(s, 0, sizeof *s);
    s->ctx = first_context();
    clattn_device_info info;
    clattn_device_info_init(&info);
    ASSERT_OK(s->ctx, clattn_context_device_info(s->ctx, &info));
    cl_uint bits = 0;
    clGetDeviceInfo(info.device, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof bits, &bits, NULL);
    s->align = bits / 8 > ALIAS_BYTES ? bits / 8 : ALIAS_BYTES;
    ASSERT_OK(s->ctx, clattn_attention_desc_init(&s->desc, CLATTN_LAYOUT_BSHD, 1, 1, 1, ALIAS_N,
                                                 ALIAS_N, ALIAS_N, ALIAS_N));
    float in[3][64], lse[ALIAS_N];
    for (int t = 0; t < 3; t++) fill_uniform(in[t], 64, 40 + t);
    ASSERT_OK(s->ctx, clattn_attention_host(s->ctx, &s->desc, in[0], in[1], in[2], s->want, lse));
    cl_int err = CL_SUCCESS;
    s->parent = clCreateBuffer(clattn_context_cl_context(s->ctx), CL_MEM_READ_WRITE, 16 * s->align,
                               NULL, &err);
    cr_assert_eq(err, CL_SUCCESS);
    cl_command_queue queue = clattn_context_queue(s->ctx);
    for (int t = 0; t < 3; t++) /* Q, K, V in slices 0, 1, 2 */
        clEnqueueWriteBuffer(queue, s->parent, CL_TRUE, t * s->align, ALIAS_BYTES, in[t], 0, NULL,
                             NULL);
}

/* Runs the call on the given buffers and expects a refusal that names both tensors. */
static void expect_refused(alias_setup *s, cl_mem q, cl_mem k, cl_mem v, cl_mem o, cl_mem lse,
                           const char *names, const char *what) {
    clattn_status status = clattn_attention(s->ctx, &s->desc, q, k, v, o, lse, NULL);
    cr_expect_eq(status, CLATTN_ERR_INVALID_ARGUMENT, "%s: %s", what, clattn_status_name(status));
    cr_expect(strstr(clattn_context_last_error(s->ctx), names) != NULL,
              "%s: last error '%s' does not name '%s'", what, clattn_context_last_error(s->ctx),
              names);
    clFinish(clattn_context_queue(s->ctx));
}

/* Runs the call and expects O (read from `o` at byte `at`) to be what separate buffers gave. */
static void expect_right(alias_setup *s, cl_mem q, cl_mem k, cl_mem v, cl_mem o, size_t at,
                         const char *what) {
    float got[64];
    ASSERT_OK(s->ctx, clattn_attention(s->ctx, &s->desc, q, k, v, o, NULL, NULL));
    clEnqueueReadBuffer(clattn_context_queue(s->ctx), o, CL_TRUE, at, sizeof got, got, 0, NULL,
                        NULL);
    cr_expect_eq(memcmp(got, s->want, sizeof got), 0, "%s: O differs", what);
}

Test(aliasing, outputs_overlapping_an_input_through_sub_buffers_are_refused) {
    alias_setup s;
    alias_setup_make(&s);
    cl_mem q = slice(&s, 0, ALIAS_BYTES), k = slice(&s, s.align, ALIAS_BYTES);
    cl_mem v = slice(&s, 2 * s.align, ALIAS_BYTES);
    cl_mem q_half = slice(&s, 0, 2 * s.align); /* Q's bytes and the next slice */
    cl_mem k_and_more = slice(&s, s.align, 4 * s.align);
    expect_refused(&s, q, k, v, q_half, NULL, "O", "O a sub-buffer over Q's bytes");
    expect_refused(&s, q, k, v, s.parent, NULL, "O", "O the parent of Q");
    expect_refused(&s, s.parent, k, v, q, NULL, "O", "O a sub-buffer of Q's buffer");
    expect_refused(&s, q, k, v, slice(&s, 5 * s.align, ALIAS_BYTES), k_and_more, "LSE",
                   "LSE a sub-buffer over K");
    s.desc.o.offset = s.align / sizeof(float); /* O one slice into Q's buffer: K's bytes */
    expect_refused(&s, q, k, v, q_half, NULL, "O", "O by its offset over K");
    s.desc.o.offset = 0;
    s.desc.bias = slice(&s, 6 * s.align, 3 * s.align);
    s.desc.bias_strides = (clattn_tensor){0, 0, 0, ALIAS_N};
    expect_refused(&s, q, k, v, slice(&s, 6 * s.align, ALIAS_BYTES), NULL, "O",
                   "O inside the bias");
    alias_setup_release(&s);
}

Test(aliasing, disjoint_parts_of_one_buffer_are_fine) {
    alias_setup s;
    alias_setup_make(&s);
    cl_mem q = slice(&s, 0, ALIAS_BYTES), k = slice(&s, s.align, ALIAS_BYTES);
    cl_mem v = slice(&s, 2 * s.align, ALIAS_BYTES);
    expect_right(&s, q, k, v, slice(&s, 3 * s.align, ALIAS_BYTES), 0, "O a slice of its own");
    s.desc.o.offset = 3 * s.align / sizeof(float); /* O in the parent, after Q, K and V */
    expect_right(&s, q, k, v, s.parent, 3 * s.align, "O in the parent past the inputs");
    s.desc.q.offset = 0, s.desc.k.offset = s.align / 4, s.desc.v.offset = 2 * s.align / 4;
    s.desc.o.offset = 4 * s.align / 4; /* everything in one buffer, by offsets */
    expect_right(&s, s.parent, s.parent, s.parent, s.parent, 4 * s.align, "one buffer");
    alias_setup_release(&s);
}

/* K in q8_0 blocks lies at byte offset / 32 * 34, not at offset times Q's element size: O over
 * those bytes is refused too (it ran, writing over K). */
Test(aliasing, an_output_over_quantised_k_is_refused) {
    clattn_context *ctx = first_context();
    clattn_attention_desc d;
    ASSERT_OK(ctx, clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, 1, 4, 32, 32));
    d.kv_q8_0 = 1;
    d.k.offset = 3200; /* blocks 100..103: bytes [3400, 3536) */
    d.o.offset = 850;  /* float32: bytes [3400, 3528) */
    static unsigned char zeros[8192];
    cl_context cl = clattn_context_cl_context(ctx);
    cl_int err = CL_SUCCESS;
    cl_mem shared =
        clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof zeros, zeros, &err);
    cl_mem q = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, 32 * sizeof(float),
                              zeros, &err);
    cl_mem v = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, 4 * 34, zeros, &err);
    cr_assert_eq(err, CL_SUCCESS);
    cr_expect_eq(clattn_attention(ctx, &d, q, shared, v, shared, NULL, NULL),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(ctx), "O overlaps K: bytes [3400, 3528) and "
                                                     "[3400, 3536)") != NULL,
              "%s", clattn_context_last_error(ctx));
    d.o.offset = 3536 / sizeof(float); /* just past K: runs */
    ASSERT_OK(ctx, clattn_attention(ctx, &d, q, shared, v, shared, NULL, NULL));
    /* The call only enqueues: a process that exits while PoCL still compiles the kernel in its
     * own thread aborts there ("Failed to create kernel compiler pass"), LLVM's registry being
     * gone. */
    cr_assert_eq(clFinish(clattn_context_queue(ctx)), CL_SUCCESS);
    clReleaseMemObject(shared), clReleaseMemObject(q), clReleaseMemObject(v);
}

/* ---------------------------------------------------------------- buffers kernels write */

/* The tile counters and the KV cache's overflow flag start at zero from host memory and are
 * written by kernels: such a buffer must be read-write (one created read-only and written is
 * undefined; the flag was read-only until a review found it). */
Test(buffers, a_zeroed_word_that_kernels_write_is_read_write) {
    clattn_context *ctx = NULL;
    cr_assert_eq(clattn_context_create(&ctx, 0), CLATTN_SUCCESS);
    buffer_set set;
    memset(&set, 0, sizeof set);
    cl_mem word = NULL;
    cr_assert_eq(buffer_set_add_zeroed_word(ctx, &set, &word, "flag"), CLATTN_SUCCESS);
    cl_mem_flags flags = 0;
    cr_assert_eq(clGetMemObjectInfo(word, CL_MEM_FLAGS, sizeof flags, &flags, NULL), CL_SUCCESS);
    cr_expect(flags & CL_MEM_READ_WRITE, "flags 0x%llx", (unsigned long long)flags);
    cl_uint value = 7;
    cr_assert_eq(clEnqueueReadBuffer(clattn_context_queue(ctx), word, CL_TRUE, 0, sizeof value,
                                     &value, 0, NULL, NULL),
                 CL_SUCCESS);
    cr_expect_eq(value, 0u);
    cr_expect_eq(set.bytes, sizeof value);
    buffer_set_release(&set);
    clattn_context_destroy(ctx);
}

/* ---------------------------------------------------------------- gemm and CLBlast's copies */

/* Expects O (n float32 values) within the contract's float32 tolerance of the reference's result
 * for the same call. */
static void expect_reference_result(const clattn_attention_desc *desc, const float *q,
                                    const float *k, const float *v, const float *o, size_t n) {
    float *ref = malloc(n * sizeof *ref);
    double *ref64 = malloc(n * sizeof *ref64);
    cr_assert(ref && ref64);
    cr_assert_eq(clattn_attention_reference(desc, q, k, v, ref, NULL), CLATTN_SUCCESS);
    for (size_t i = 0; i < n; i++) ref64[i] = ref[i];
    size_t off = compare_outputs("gemm path", o, ref64, n, TOL_F32_ATOL, TOL_F32_RTOL);
    cr_expect_eq(off, 0, "%zu of %zu values differ from the reference's", off, n);
    free(ref), free(ref64);
}

/* Q (nq_all values), K and V (nk_all) uniform in [-1, 1], and O all NaN (a value left
 * unwritten fails), for a call that `desc` sends down the GEMM path. The caller frees them. */
static void gemm_call_arrays(clattn_attention_desc *desc, size_t nq_all, size_t nk_all, float **q,
                             float **k, float **v, float **o) {
    *q = malloc(nq_all * 4), *k = malloc(nk_all * 4), *v = malloc(nk_all * 4);
    *o = malloc(nq_all * 4);
    cr_assert(*q && *k && *v && *o);
    fill_uniform(*q, nq_all, 1), fill_uniform(*k, nk_all, 2), fill_uniform(*v, nk_all, 3);
    for (size_t i = 0; i < nq_all; i++) (*o)[i] = NAN;
    desc->path = CLATTN_PATH_GEMM;
}

/* Runs one float32 call on the gemm path with the score budget set to the device's largest
 * allocation; expects success (O within the contract's tolerance of the reference's) or
 * CLATTN_ERR_OUT_OF_MEMORY. Before CLBlast's padded copies were budgeted, such calls aborted
 * the process inside CLBlast. */
static void expect_gemm_runs_or_says_out_of_memory(size_t b, size_t hq, size_t hkv, size_t nq,
                                                   size_t nk, size_t d) {
    clattn_context *ctx = first_context();
    clattn_device_info info;
    clattn_device_info_init(&info);
    ASSERT_OK(ctx, clattn_context_device_info(ctx, &info));
    clattn_attention_desc desc;
    ASSERT_OK(ctx, clattn_attention_desc_init(&desc, CLATTN_LAYOUT_BSHD, b, hq, hkv, nq, nk, d, d));
    size_t nq_all = b * nq * hq * d, nk_all = b * nk * hkv * d;
    float *q, *k, *v, *o;
    gemm_call_arrays(&desc, nq_all, nk_all, &q, &k, &v, &o);
    desc.gemm_budget_bytes = (size_t)info.max_alloc_bytes;
    clattn_status status = clattn_attention_host(ctx, &desc, q, k, v, o, NULL);
    cr_assert(status == CLATTN_SUCCESS || status == CLATTN_ERR_OUT_OF_MEMORY, "%s: %s",
              clattn_status_name(status), clattn_context_last_error(ctx));
    if (status == CLATTN_SUCCESS)
        expect_reference_result(&desc, q, k, v, o, nq_all);
    else
        cr_log_info("out of memory, as allowed: %s", clattn_context_last_error(ctx));
    free(q), free(k), free(v), free(o);
}

/* A device whose largest allocation is at most 256 MiB keeps these calls small: ctest runs
 * this suite again with POCL_MEMORY_LIMIT=1 (PoCL's global memory 1 GiB, 256 MiB at most an
 * allocation). */
static void need_small_allocations(void) {
    clattn_device_info info;
    clattn_device_info_init(&info);
    clattn_context_device_info(first_context(), &info);
    if (info.max_alloc_bytes > ((cl_ulong)256 << 20))
        cr_skip_test("the largest allocation is %llu MiB; this runs where it is at most 256 MiB "
                     "(ctest: reliability_memory_limit, with POCL_MEMORY_LIMIT=1)",
                     (unsigned long long)(info.max_alloc_bytes >> 20));
}

/* Scores filling the largest allocation: CLBlast's padded copy of them is larger still. */
Test(gemm_budget, scores_that_fill_the_largest_allocation) {
    need_small_allocations();
    clattn_device_info info;
    clattn_device_info_init(&info);
    clattn_context_device_info(first_context(), &info);
    size_t nk = 8193, nq = (size_t)info.max_alloc_bytes / (4 * nk);
    expect_gemm_runs_or_says_out_of_memory(1, 1, 1, nq, nk, 64);
}

/* A layer whose GEMM CLBlast could copy into a padded temporary beyond the largest allocation
 * (X [65537][900] padded to [65792][1024] floats, over 256 MiB) is refused before it runs;
 * CLBlast would abort the process. Y stays as it was. The layer's GEMMs are CLBlast's here
 * (clattn_context_set_gemm): `auto` would take clattn's own panels kernel on a CPU, which has
 * no such copies. */
Test(gemm_budget, a_layer_beyond_clblasts_copies_is_refused) {
    need_small_allocations();
    clattn_context *ctx = first_context();
    clattn_device_info info;
    clattn_device_info_init(&info);
    clattn_context_device_info(ctx, &info);
    size_t d_model = 900, n = (size_t)info.max_alloc_bytes / (4 * 1024) + 1, d = 64;
    float *w = calloc(d_model * d, sizeof(float)), *x = calloc(n * d_model, sizeof(float));
    float *y = malloc(n * d_model * sizeof(float));
    cr_assert(w && x && y);
    for (size_t i = 0; i < n * d_model; i++) y[i] = 7.0f;
    clattn_mha_desc desc;
    ASSERT_OK(ctx, clattn_mha_desc_init(&desc, d_model, 1, 1, d, d));
    desc.w_q.host = desc.w_k.host = desc.w_v.host = desc.w_o.host = w;
    clattn_mha *mha = NULL;
    ASSERT_OK(ctx, clattn_context_set_gemm(ctx, CLATTN_GEMM_CLBLAST));
    ASSERT_OK(ctx, clattn_mha_create(ctx, &desc, &mha));
    ASSERT_OK(ctx, clattn_context_set_gemm(ctx, CLATTN_GEMM_AUTO)); /* the layer keeps its row */
    clattn_attention_desc call;
    clattn_attention_desc_init(&call, CLATTN_LAYOUT_BSHD, 1, 1, 1, n, n, d, d);
    cr_expect_eq(clattn_mha_forward_host(mha, &call, x, NULL, y), CLATTN_ERR_OUT_OF_MEMORY);
    cr_expect(strstr(clattn_context_last_error(ctx), "CLBlast's padded copies") != NULL, "%s",
              clattn_context_last_error(ctx));
    size_t changed = 0;
    for (size_t i = 0; i < n * d_model; i++) changed += y[i] != 7.0f;
    cr_expect_eq(changed, 0, "%zu values of Y were written", changed);
    clattn_mha_destroy(mha);
    free(w), free(x), free(y);
}

/* The planner's side, on any device: with the context's largest allocation made small (a
 * white-box change of its description; PoCL itself allows more, so nothing fails for real),
 * a call whose score budget takes every head in one chunk, MQA, must still be split so that
 * CLBlast's copy of K for each head of a chunk (counted with each dimension padded to a
 * multiple of 256: 1024 x 256 floats, 1 MiB a head) fits the largest allocation. */
Test(gemm_budget, chunks_keep_every_copy_within_the_largest_allocation) {
    clattn_context *ctx = NULL;
    cr_assert_eq(clattn_context_create(&ctx, 0), CLATTN_SUCCESS);
    ctx->device.max_alloc_bytes = (size_t)1 << 20;
    ctx->device.global_mem_bytes = (size_t)8 << 20;
    clattn_attention_desc desc;
    ASSERT_OK(ctx,
              clattn_attention_desc_init(&desc, CLATTN_LAYOUT_BSHD, 1, 16, 1, 4, 1024, 64, 64));
    size_t nq_all = 16 * 4 * 64, nk_all = 1024 * 64;
    float *q, *k, *v, *o;
    gemm_call_arrays(&desc, nq_all, nk_all, &q, &k, &v, &o);
    ASSERT_OK(ctx, clattn_attention_host(ctx, &desc, q, k, v, o, NULL));
    clattn_stats stats;
    clattn_stats_init(&stats);
    ASSERT_OK(ctx, clattn_context_last_stats(ctx, &stats));
    cr_expect_eq(stats.chunks, 16, "%u chunks: K's copies of a chunk exceed 1 MiB", stats.chunks);
    expect_reference_result(&desc, q, k, v, o, nq_all);
    free(q), free(k), free(v), free(o);
    clattn_context_destroy(ctx);
}

/* ---------------------------------------------------------------- values near FLT_MAX */

/* docs/semantics.md section 9: scores are float32 (scale * q.k beyond its range is an infinity, and
 * nothing finite becomes one on the way), O is a weighted mean of V's rows. Each case is
 * [B=1, N=64, H=2, D=64] with values in [-1, 1] except where it says; "|q| = 2, q.k = 0" is
 * q = +-2 against K all 1: scale*q overflows, scale*q.k does not. */
#define BIG_N    64
#define BIG_SIZE (BIG_N * 2 * 64)

typedef enum big_case { BIG_SCALE, BIG_SCALE_CANCELS, BIG_K, BIG_V, BIG_CASES } big_case;

static const char *const big_names[BIG_CASES] = {"scale 3e38", "scale 3e38, |q| = 2, q.k = 0",
                                                 "K all 3e38", "V all 3e38"};

static void big_inputs(big_case which, clattn_attention_desc *d, float *q, float *k, float *v) {
    clattn_attention_desc_init(d, CLATTN_LAYOUT_BSHD, 1, 2, 2, BIG_N, BIG_N, 64, 64);
    fill_uniform(q, BIG_SIZE, 1), fill_uniform(k, BIG_SIZE, 2), fill_uniform(v, BIG_SIZE, 3);
    for (size_t i = 0; i < BIG_SIZE; i++) {
        if (which == BIG_SCALE_CANCELS) q[i] = i % 2 ? -2.0f : 2.0f, k[i] = 1.0f;
        if (which == BIG_K) k[i] = 3e38f;
        if (which == BIG_V) v[i] = 3e38f;
    }
    if (which == BIG_SCALE || which == BIG_SCALE_CANCELS) d->scale = 3e38f;
}

/* Values of one call on every device outside the contract's float32 tolerance of the reference's
 * (NaN and infinities must match exactly), O and LSE. */
static size_t big_mismatches(big_case which, clattn_path path, clattn_variant variant) {
    static float q[BIG_SIZE], k[BIG_SIZE], v[BIG_SIZE], o[BIG_SIZE], ref_o[BIG_SIZE];
    float lse[2 * BIG_N], ref_lse[2 * BIG_N];
    static double ref[BIG_SIZE];
    double ref_l[2 * BIG_N];
    clattn_attention_desc d;
    big_inputs(which, &d, q, k, v);
    cr_assert_eq(clattn_attention_reference(&d, q, k, v, ref_o, ref_lse), CLATTN_SUCCESS);
    for (size_t i = 0; i < BIG_SIZE; i++) ref[i] = ref_o[i];
    for (size_t i = 0; i < 2 * BIG_N; i++) ref_l[i] = ref_lse[i];
    d.path = path, d.variant = variant;
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs), off = 0;
    for (size_t dev = 0; dev < devices; dev++) {
        ASSERT_OK(ctxs[dev], clattn_attention_host(ctxs[dev], &d, q, k, v, o, lse));
        char label[256];
        snprintf(label, sizeof label, "%s, device %zu, %s O", big_names[which], dev,
                 clattn_variant_name(variant));
        off += compare_outputs(label, o, ref, BIG_SIZE, TOL_F32_ATOL, TOL_F32_RTOL);
        snprintf(label, sizeof label, "%s, device %zu, %s LSE", big_names[which], dev,
                 clattn_variant_name(variant));
        off += compare_outputs(label, lse, ref_l, 2 * BIG_N, 0, 1e-4);
    }
    return off;
}

/* Every fused variant (each rescores overflowed scores and keeps O a combination of V rows with
 * weights summing to at most 1) and the gemm path. */
Test(overflow, every_variant_agrees_with_the_reference) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    clattn_variant variants[16];
    size_t count = variants_on_path(ctxs[0], CLATTN_PATH_FUSED, variants, 15);
    variants[count++] = CLATTN_VARIANT_GEMM;
    for (size_t v = 0; v < count; v++)
        for (big_case c = 0; c < BIG_CASES; c++) {
            clattn_path path = v + 1 == count ? CLATTN_PATH_GEMM : CLATTN_PATH_FUSED;
            cr_expect_eq(big_mismatches(c, path, variants[v]), 0, "%s: %s",
                         clattn_variant_name(variants[v]), big_names[c]);
        }
}
