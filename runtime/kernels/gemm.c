/*
 * The gemm path: attention in three steps per chunk of query rows, for the calls the fused
 * kernel cannot serve and as the baseline the benchmarks compare against:
 *
 *     S = scale * Q K^T       a batched GEMM of the GEMM table (gemm/gemm.h: clattn's panels
 *                             kernel on CPUs, CLBlast elsewhere), an entry per (b, h) group
 *     P = masked softmax(S)   softmax_masked (cl/softmax.cl): bias, every mask of docs/semantics.md
 * section 2 and LSE; P overwrites S
 *     O = P V                 a batched GEMM of the GEMM table
 *
 * Batched GEMM takes one element offset per entry and one leading dimension, so GQA (entry h
 * reads K/V head h / (Hq/Hkv)) and both layouts (ld = the sequence stride) read the caller's
 * float32 tensors where they are, without copies. 16-bit storage (float16, bfloat16):
 * CLBlast's half GEMM needs cl_khr_fp16, which many devices (PoCL among them) lack, and it has
 * no bfloat16, so K and V are widened once and Q chunk by chunk into float32 scratch, and a
 * 16-bit O is narrowed from a float32 chunk (cl/convert.cl).
 *
 * Memory: the score buffer is [groups][rows][Nk] floats and fits a budget: desc->
 * gemm_budget_bytes, else $CLATTN_GEMM_BUDGET_MB, else a quarter of the device's global
 * memory; never more than the device's largest allocation. A chunk is whole (b, h) groups when
 * one group's Nq score rows fit, else rows of one group; and no larger than leaves room for
 * CLBlast's own padded temporaries (see "CLBlast's temporaries" below), whose failed
 * allocation would abort the process.
 *
 * Work: a chunk's GEMMs cover only the keys its rows can reach by causality and the window
 * (all keys with global tokens); the softmax applies the exact mask inside that range. Each
 * score and output row is computed the same way whatever chunk holds it.
 *
 * NaN and inf in V (docs/semantics.md section 1): inside O = P V, 0 * NaN and 0 * inf are NaN, so
 * one bad value in row j of V would reach every row of its (b, kv head), also the rows that do not
 * see key j. Every call therefore flags the rows of V holding a non-finite value (one pass over
 * V, B*Hkv*Nk bytes read back). With none, nothing else changes. With some, the second GEMM
 * reads V with those rows zeroed (a float32 copy, or the widened scratch of 16-bit V), and
 * after it a small kernel adds P[i][j] * V[j][:] to the rows with P[i][j] != 0 (cl/convert.cl).
 */
#include "core/blas.h"
#include "gemm/gemm.h"
#include "kernels/compilers.h"
#include "kernels/softmax.h"
#include "kernels/variant.h"
#include "plan/params.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* CLBlast passes offsets and leading dimensions to its kernels as int. */
#define CLBLAST_MAX_ELEMENTS ((size_t)INT32_MAX)
/* At most 2^30 scores (4 GiB) a chunk, so that CLBlast's padded copies of them stay
 * addressable with int offsets too. */
#define MAX_CHUNK_SCORES ((size_t)1 << 30)

/* ---------------------------------------------------------------- planning */

typedef struct gemm_plan {
    size_t groups;           /* (b, h) groups: B * Hq */
    size_t group_chunk;      /* groups per chunk */
    size_t row_chunk;        /* query rows of each group per chunk */
    size_t chunks;           /* chunks of the call */
    size_t budget;           /* bytes the score buffer may take, after the caps */
    const char *budget_from; /* where the budget came from, for messages */
    size_t wg;               /* softmax work-group size */
    int in_16bit, out_16bit; /* 16-bit storage (float16, bfloat16) of Q/K/V and of O */
    int fail_gemm;           /* test-only: $CLATTN_TEST_FAIL_GEMM makes the first GEMM invalid */
} gemm_plan;

/* One chunk: groups [group0, group0 + groups), query rows [row0, row0 + rows) of each, and
 * the keys [key0, key0 + keys) any of those rows may see. */
typedef struct gemm_chunk {
    size_t group0, groups, row0, rows, key0, keys;
} gemm_chunk;

/* $CLATTN_GEMM_BUDGET_MB as bytes; 0 when unset. */
static clattn_status budget_from_env(clattn_context *ctx, size_t *bytes) {
    const char *env = getenv("CLATTN_GEMM_BUDGET_MB");
    *bytes = 0;
    if (!env || !*env) return CLATTN_SUCCESS;
    char *end = NULL;
    unsigned long long mib = strtoull(env, &end, 10);
    if (*end != '\0' || env[0] == '-' || mib == 0 || mib > SIZE_MAX / (1024 * 1024))
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "CLATTN_GEMM_BUDGET_MB=%s: expected a whole number of MiB >= 1", env);
    *bytes = (size_t)mib * 1024 * 1024;
    return CLATTN_SUCCESS;
}

/* The score budget: desc, else environment, else a quarter of global memory; capped by the
 * largest allocation and by MAX_CHUNK_SCORES. */
static clattn_status choose_budget(clattn_context *ctx, const attn_problem *pb, gemm_plan *p) {
    size_t env_bytes = 0;
    clattn_status status = budget_from_env(ctx, &env_bytes);
    if (status != CLATTN_SUCCESS) return status;
    if (pb->gemm_budget_bytes) {
        p->budget = pb->gemm_budget_bytes;
        p->budget_from = "desc->gemm_budget_bytes";
    } else if (env_bytes) {
        p->budget = env_bytes;
        p->budget_from = "CLATTN_GEMM_BUDGET_MB";
    } else {
        cl_ulong quarter = ctx->device.global_mem_bytes / 4;
        p->budget = quarter > SIZE_MAX ? SIZE_MAX : (size_t)quarter;
        p->budget_from = "a quarter of global memory";
    }
    if (p->budget > ctx->device.max_alloc_bytes) {
        p->budget = (size_t)ctx->device.max_alloc_bytes;
        p->budget_from = "the device's largest allocation";
    }
    if (p->budget / sizeof(float) > MAX_CHUNK_SCORES) p->budget = MAX_CHUNK_SCORES * sizeof(float);
    return CLATTN_SUCCESS;
}

static size_t ceil_div(size_t a, size_t b) {
    return a / b + (a % b != 0);
}

/* ---------------------------------------------------------------- CLBlast's temporaries
 *
 * CLBlast 1.5's batched GEMM reads an operand in place only when its sizes are multiples of
 * the kernel's tiles and its rows lie the kernel's way; otherwise its "indirect" kernel copies
 * the operand, for every batch entry, into a padded temporary (A, B and C of one GEMM at once,
 * each dimension rounded up to its tile: at most 128 in CLBlast's database). Should allocating
 * one fail, CLBlast throws from a destructor and the process aborts (std::terminate), so no
 * status could ever come back. A chunk is therefore planned so that every temporary CLBlast
 * could make, counted with each dimension rounded up to a multiple of BLAS_PAD (blas.h), fits
 * the device's largest allocation and 2^31-1 elements (CLBlast's int offsets), and so that the
 * chunk's scores and one GEMM's temporaries together fit half the global memory. Whether
 * CLBlast copies depends on its database (a small product runs a direct kernel that copies
 * nothing); the plan assumes it does.
 */

/* a * b * c and a + b, SIZE_MAX when they overflow. */
static size_t product3(size_t a, size_t b, size_t c) {
    size_t n = 0;
    return size_mul(a, b, &n) || size_mul(n, c, &n) ? SIZE_MAX : n;
}
static size_t sum2(size_t a, size_t b) {
    return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}
static size_t max2(size_t a, size_t b) {
    return a > b ? a : b;
}

/* CLBlast's copies for a chunk of `groups` (b, h) groups of `rows` query rows, in floats: the
 * largest one, and those of one GEMM together. S = Q K^T copies Q [rows][Dqk], K [Nk][Dqk] and
 * S [rows][Nk]; O = P V copies P [rows][Nk], V [Nk][Dv] and O [rows][Dv]; all per group. */
static void temporaries(const attn_problem *pb, size_t groups, size_t rows, size_t *largest,
                        size_t *one_gemm) {
    size_t r = blas_padded(rows), n = blas_padded(pb->len_k);
    size_t dq = blas_padded(pb->dim_qk), dv = blas_padded(pb->dim_v);
    size_t s = product3(groups, r, n), q = product3(groups, r, dq), k = product3(groups, n, dq);
    size_t v = product3(groups, n, dv), o = product3(groups, r, dv);
    *largest = max2(max2(s, max2(q, k)), max2(v, o));
    *one_gemm = max2(sum2(sum2(q, k), s), sum2(sum2(s, v), o));
}

/* Whether such a chunk leaves CLBlast room for its copies, beside the chunk's scores. */
static int temporaries_fit(const attn_problem *pb, const clattn_device_info *dev, size_t groups,
                           size_t rows) {
    size_t largest = 0, one_gemm = 0;
    temporaries(pb, groups, rows, &largest, &one_gemm);
    size_t scores = product3(groups, rows, pb->len_k);
    cl_ulong alloc = dev->max_alloc_bytes / sizeof(float), half = dev->global_mem_bytes / 8;
    return largest <= CLBLAST_MAX_ELEMENTS && largest <= alloc && sum2(one_gemm, scores) <= half;
}

/* The largest count in [1, hi] of groups (whole ones, by_rows 0) or of rows of one group
 * (by_rows 1) whose chunk leaves CLBlast room (the test is monotonic), or 0. */
static size_t largest_fitting(const attn_problem *pb, const clattn_device_info *dev, size_t hi,
                              int by_rows) {
    size_t lo = 0; /* fits (0 stands for none) */
    while (lo < hi) {
        size_t mid = lo + (hi - lo + 1) / 2;
        if (by_rows ? temporaries_fit(pb, dev, 1, mid) : temporaries_fit(pb, dev, mid, pb->len_q))
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static clattn_status no_room_for_copies(clattn_context *ctx, const attn_problem *pb) {
    const clattn_device_info *dev = &ctx->device;
    return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY,
                     "gemm: even one query row a chunk leaves CLBlast no room for its padded "
                     "copies of K [%zu][%zu] and V [%zu][%zu] (the device's largest allocation "
                     "is %llu bytes, its global memory %llu): the keys are too long for the gemm "
                     "path on this device",
                     pb->len_k, pb->dim_qk, pb->len_k, pb->dim_v,
                     (unsigned long long)dev->max_alloc_bytes,
                     (unsigned long long)dev->global_mem_bytes);
}

/* Chunks of the budget: whole groups when a group's Nq score rows fit, else rows of one group,
 * as many as leave CLBlast room for its copies; evened out so that the last chunk is not a
 * sliver. */
static clattn_status plan_chunks(clattn_context *ctx, const attn_problem *pb, gemm_plan *p) {
    size_t row_bytes = pb->len_k * sizeof(float); /* one row of scores */
    size_t fit = p->budget / row_bytes;           /* score rows a chunk may hold */
    size_t widest = pb->dim_qk > pb->dim_v ? pb->dim_qk : pb->dim_v; /* widened scratch rows */
    if (fit > CLBLAST_MAX_ELEMENTS / widest) fit = CLBLAST_MAX_ELEMENTS / widest;
    if (fit == 0)
        return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY,
                         "gemm: a score budget of %zu bytes (%s) cannot hold one row of scores: "
                         "Nk=%zu keys need %zu bytes; raise desc->gemm_budget_bytes or "
                         "CLATTN_GEMM_BUDGET_MB",
                         p->budget, p->budget_from, pb->len_k, row_bytes);
    p->groups = pb->batch * pb->heads_q;
    size_t per_chunk = fit >= pb->len_q ? fit / pb->len_q : 0;
    per_chunk = largest_fitting(pb, &ctx->device, per_chunk < p->groups ? per_chunk : p->groups, 0);
    if (per_chunk > 0) {
        p->chunks = ceil_div(p->groups, per_chunk);
        p->group_chunk = ceil_div(p->groups, p->chunks);
        p->row_chunk = pb->len_q;
    } else {
        size_t rows = largest_fitting(pb, &ctx->device, fit < pb->len_q ? fit : pb->len_q, 1);
        if (rows == 0) return no_room_for_copies(ctx, pb);
        size_t per_group = ceil_div(pb->len_q, rows);
        p->row_chunk = ceil_div(pb->len_q, per_group);
        p->group_chunk = 1;
        p->chunks = p->groups * per_group;
    }
    return CLATTN_SUCCESS;
}

/* The keys rows [row0, row0 + rows) may see by causality and the window (with global tokens,
 * by causality only): the chunk's GEMMs skip the rest. With none, one key stays, which the
 * softmax masks, so that O = 0 and LSE = -inf are still written. */
static void chunk_keys(const mask_spec *m, gemm_chunk *c) {
    int64_t first = (int64_t)c->row0 + m->offset, last = first + (int64_t)c->rows - 1;
    int64_t lo, hi, unused;
    int windowed = !m->has_global; /* a global row or key reaches past the window */
    mask_class_range(first, 0, 1, m->len_k, m->left, m->right, m->causal, windowed, &lo, &unused);
    mask_class_range(last, 0, 1, m->len_k, m->left, m->right, m->causal, windowed, &unused, &hi);
    if (lo > hi) lo = hi = 0;
    c->key0 = (size_t)lo;
    c->keys = (size_t)(hi - lo + 1);
}

static gemm_chunk chunk_at(const gemm_plan *p, const attn_problem *pb, const mask_spec *m,
                           size_t index) {
    gemm_chunk c = {0, 1, 0, pb->len_q, 0, pb->len_k};
    if (p->row_chunk == pb->len_q) { /* whole groups */
        c.group0 = index * p->group_chunk;
        c.groups = p->groups - c.group0 < p->group_chunk ? p->groups - c.group0 : p->group_chunk;
    } else {
        size_t per_group = p->chunks / p->groups;
        c.group0 = index / per_group;
        c.row0 = (index % per_group) * p->row_chunk;
        c.rows = pb->len_q - c.row0 < p->row_chunk ? pb->len_q - c.row0 : p->row_chunk;
    }
    chunk_keys(m, &c);
    return c;
}

/* Elements of dense float32 scratch [b][h][len][dim]; SIZE_MAX on overflow. */
static size_t dense_elements(size_t b, size_t h, size_t len, size_t dim) {
    size_t n = 0;
    if (size_mul(b, h, &n) || size_mul(n, len, &n) || size_mul(n, dim, &n)) return SIZE_MAX;
    return n;
}

/* CLBlast addresses its operands with int offsets: every tensor it reads or writes in place,
 * and the widened K and V, must span at most 2^31-1 elements. */
static clattn_status check_int_offsets(clattn_context *ctx, const attn_problem *pb,
                                       const gemm_plan *p) {
    static const char *const names[4] = {"Q", "K", "V", "O"};
    const clattn_attention_extents *ext = &pb->extents;
    size_t kv = pb->heads_kv, span[4]; /* elements of Q, K, V, O as CLBlast sees them */
    span[0] = p->in_16bit ? 0 : ext->q / 4;
    span[1] = p->in_16bit ? dense_elements(pb->batch, kv, pb->len_k, pb->dim_qk) : ext->k / 4;
    span[2] = p->in_16bit ? dense_elements(pb->batch, kv, pb->len_k, pb->dim_v) : ext->v / 4;
    span[3] = p->out_16bit ? 0 : ext->o / 4;
    for (int i = 0; i < 4; i++)
        if (span[i] > CLBLAST_MAX_ELEMENTS)
            return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED,
                             "gemm: CLBlast addresses operands with int offsets, and %s spans "
                             "more than 2^31-1 elements (B=%zu Hq=%zu Hkv=%zu Nq=%zu Nk=%zu)",
                             names[i], pb->batch, pb->heads_q, pb->heads_kv, pb->len_q, pb->len_k);
    return CLATTN_SUCCESS;
}

/* A test hook, compiled into test builds only (CLATTN_TEST_HOOKS): $CLATTN_TEST_FAIL_GEMM makes
 * the first GEMM invalid, to check that CLBlast's failures come back as statuses. */
static int test_fail_gemm(void) {
#ifdef CLATTN_TEST_HOOKS
    const char *fail = getenv("CLATTN_TEST_FAIL_GEMM");
    return fail && *fail && strcmp(fail, "0") != 0;
#else
    return 0;
#endif
}

/* About what a call allocates, saturating: the scores, float32 scratch for float16 storage,
 * the flags of V's rows, and CLBlast's copies for one GEMM. */
static uint64_t device_bytes(const attn_problem *pb, const gemm_plan *p) {
    size_t rows = p->group_chunk * p->row_chunk, kv = pb->batch * pb->heads_kv;
    size_t largest = 0, one_gemm = 0;
    temporaries(pb, p->group_chunk, p->row_chunk, &largest, &one_gemm);
    size_t floats = sum2(one_gemm, product3(rows, pb->len_k, 1));
    if (p->in_16bit)
        floats = sum2(floats, sum2(product3(kv, pb->len_k, pb->dim_qk + pb->dim_v),
                                   product3(rows, pb->dim_qk, 1)));
    if (p->out_16bit) floats = sum2(floats, product3(rows, pb->dim_v, 1));
    uint64_t bytes = floats > UINT64_MAX / 4 ? UINT64_MAX : (uint64_t)floats * 4;
    return bytes > UINT64_MAX - kv * pb->len_k ? UINT64_MAX : bytes + kv * pb->len_k;
}

/* The masked softmax's work-group: the tuning's size within the plan's limits and the
 * kernel's own (built here; run() finds it in the context's cache). */
static clattn_status fit_softmax(clattn_context *ctx, const variant_plan *vp, gemm_plan *p) {
    char dtypes[64];
    cl_kernel kernel = NULL;
    snprintf(dtypes, sizeof dtypes, "-DIN_DTYPE=%d -DOUT_DTYPE=0", (int)vp->problem->dtype);
    return softmax_kernel_get(ctx, &vp->limits, vp->tuning.wg_size ? vp->tuning.wg_size : 1,
                              "softmax_masked", dtypes, &p->wg, &kernel);
}

static clattn_status plan(clattn_context *ctx, variant_plan *vp) {
    const attn_problem *pb = vp->problem;
    gemm_plan *p = calloc(1, sizeof *p);
    if (!p) return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "gemm: plan");
    vp->state = p;
    p->in_16bit = pb->dtype != CLATTN_F32;
    p->out_16bit = pb->out_dtype != CLATTN_F32;
    p->fail_gemm = test_fail_gemm();
    clattn_status status = check_int_offsets(ctx, pb, p);
    if (status == CLATTN_SUCCESS) status = fit_softmax(ctx, vp, p);
    if (status == CLATTN_SUCCESS) status = choose_budget(ctx, pb, p);
    if (status == CLATTN_SUCCESS) status = plan_chunks(ctx, pb, p);
    if (status == CLATTN_SUCCESS) vp->device_bytes = device_bytes(pb, p);
    return status;
}

static void release(variant_plan *vp) {
    free(vp->state);
}

/* ---------------------------------------------------------------- device buffers */

typedef struct gemm_buffers {
    buffer_set set;
    cl_mem params;        /* attn_params, read as __constant */
    cl_mem scores;        /* [group_chunk][row_chunk][Nk] float: S, then P in place */
    cl_mem q32, k32, v32; /* float32 copies of 16-bit inputs: Q of a chunk, all of K and V */
    cl_mem o32;           /* [group_chunk][row_chunk][Dv] float, for a 16-bit O */
    cl_mem flags;         /* [B*Hkv][Nk] bytes: 1 where the row of V holds NaN or inf */
    cl_mem is_global;     /* [Nk + Nq] global flags (plan/mask.h), or the placeholder */
    cl_mem layout;        /* [Hq or 1][blocks_q][blocks_k] block layout, or the placeholder */
} gemm_buffers;

/* count * a * b elements of `elem` bytes (copied from `host` when given), in the set; the
 * placeholder when count is 0. */
static clattn_status add_buffer(clattn_context *ctx, buffer_set *set, size_t count, size_t a,
                                size_t b, size_t elem, const void *host, cl_mem *out,
                                const char *what) {
    size_t n = 0;
    if (size_mul(count, a, &n) || size_mul(n, b, &n))
        return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "gemm: the size of %s overflows", what);
    return buffer_set_add(ctx, set, n, elem, host, out, what);
}

static clattn_status make_buffers(clattn_context *ctx, const attn_problem *pb, const gemm_plan *p,
                                  const attn_params *P, gemm_buffers *gb) {
    const mask_spec *m = &pb->mask;
    buffer_set *set = &gb->set;
    size_t rows = p->group_chunk * p->row_chunk, kv = pb->batch * pb->heads_kv;
    size_t layout_heads = m->layout ? (m->layout_per_head ? pb->heads_q : 1) : 0;
    cl_mem placeholder = NULL; /* stands in for an absent LSE or bias */
    clattn_status s = buffer_set_placeholder(ctx, set, &placeholder);
    if (!s) s = params_buffer_add(ctx, set, P, pb, &gb->params);
    if (!s) s = add_buffer(ctx, set, rows, pb->len_k, 1, 4, NULL, &gb->scores, "gemm scores");
    if (!s)
        s = add_buffer(ctx, set, p->in_16bit ? rows : 0, pb->dim_qk, 1, 4, NULL, &gb->q32,
                       "float32 Q chunk");
    if (!s)
        s = add_buffer(ctx, set, p->in_16bit ? kv : 0, pb->len_k, pb->dim_qk, 4, NULL, &gb->k32,
                       "float32 K");
    if (!s)
        s = add_buffer(ctx, set, p->in_16bit ? kv : 0, pb->len_k, pb->dim_v, 4, NULL, &gb->v32,
                       "float32 V");
    if (!s)
        s = add_buffer(ctx, set, p->out_16bit ? rows : 0, pb->dim_v, 1, 4, NULL, &gb->o32,
                       "float32 O chunk");
    if (!s) s = add_buffer(ctx, set, kv, pb->len_k, 1, 1, NULL, &gb->flags, "V row flags");
    if (!s)
        s = add_buffer(ctx, set, 1, mask_flag_bytes(m), 1, 1, m->is_global, &gb->is_global,
                       "global flags");
    if (!s)
        s = add_buffer(ctx, set, layout_heads, (size_t)m->blocks_q, (size_t)m->blocks_k, 1,
                       m->layout, &gb->layout, "block layout");
    return s;
}

/* ---------------------------------------------------------------- operands */

/* Where the rows of a GEMM operand live: the caller's strided tensor, or float32 scratch. */
typedef struct operand {
    cl_mem buffer;
    clattn_tensor t; /* element offset and strides of (b, head, row) */
    size_t ld;       /* row stride passed to CLBlast */
    int chunk_local; /* scratch of the current chunk only: entry g at g * rows * ld */
} operand;

static operand strided_operand(cl_mem buffer, const clattn_tensor *t, size_t ld) {
    operand op = {buffer, *t, ld, 0};
    return op;
}

/* Dense [B][heads][len][dim] float32 scratch (the widened K or V). */
static operand dense_operand(cl_mem buffer, size_t heads, size_t len, size_t dim) {
    operand op = {buffer, {0, heads * len * dim, len * dim, dim}, dim, 0};
    return op;
}

static operand chunk_operand(cl_mem buffer, size_t dim) {
    operand op = {buffer, {0, 0, 0, dim}, dim, 1};
    return op;
}

/* The operands of both GEMMs; 16-bit storage reads and writes float32 scratch instead. */
typedef struct gemm_operands {
    operand q, k, v, o, s; /* s: the score buffer, [rows][keys] per entry (ld set per chunk) */
} gemm_operands;

static void make_operands(const attn_problem *pb, const gemm_plan *p, const gemm_buffers *gb,
                          const attn_buffers *buf, gemm_operands *ops) {
    ops->q = p->in_16bit ? chunk_operand(gb->q32, pb->dim_qk)
                         : strided_operand(buf->q, &pb->q, pb->q.stride_seq);
    ops->k = p->in_16bit ? dense_operand(gb->k32, pb->heads_kv, pb->len_k, pb->dim_qk)
                         : strided_operand(buf->k, &pb->k, pb->k.stride_seq);
    ops->v = p->in_16bit ? dense_operand(gb->v32, pb->heads_kv, pb->len_k, pb->dim_v)
                         : strided_operand(buf->v, &pb->v, pb->v.stride_seq);
    /* a single row's stride is never used, but CLBlast wants ld >= Dv for C */
    size_t o_ld = pb->len_q == 1 && pb->o.stride_seq < pb->dim_v ? pb->dim_v : pb->o.stride_seq;
    ops->o =
        p->out_16bit ? chunk_operand(gb->o32, pb->dim_v) : strided_operand(buf->o, &pb->o, o_ld);
    ops->s = chunk_operand(gb->scores, pb->len_k);
}

/* ---------------------------------------------------------------- launching */

/* One GEMM of a chunk: C[rows][n] = alpha * A[rows][k] * B for every (b, h) entry, where A
 * and C hold query rows and B key rows, at the entry's kv head: [n][k] read transposed (K) or
 * [k][n] (V). */
typedef struct gemm_step {
    const operand *a, *b, *c;
    int transpose_b;
    size_t n, k;
    float alpha;
    int invalid; /* test-only: the GEMM row is made to reject the call */
    const char *what;
} gemm_step;

/* An operand of a chunk's batch as the GEMM table addresses it: entry i is the group
 * g = group0 + i (batch g / Hq, head g % Hq), at query rows from c->row0 or, for kv operands, key
 * rows from c->key0; chunk scratch holds entry i at i * rows * ld. */
static gemm_operand batch_operand(const operand *op, const gemm_chunk *c, int kv) {
    gemm_operand g = {.buffer = op->buffer, .ld = op->ld};
    if (op->chunk_local) {
        g.s_item = c->rows * op->ld;
        return g;
    }
    g.offset = op->t.offset + (kv ? c->key0 : c->row0) * op->t.stride_seq;
    g.s_batch = op->t.stride_batch, g.s_head = op->t.stride_head;
    return g;
}

static clattn_status batched_gemm(clattn_context *ctx, const attn_problem *pb, const gemm_chunk *c,
                                  const gemm_step *st, gemm_ran *ran) {
    gemm_desc g = gemm_desc_single(c->rows, st->n, st->k, st->what);
    g.count = c->groups, g.first = c->group0;
    g.heads = pb->heads_q, g.group = pb->heads_q / pb->heads_kv;
    g.alpha = st->alpha, g.transpose_b = st->transpose_b, g.test_fail = st->invalid;
    g.a = batch_operand(st->a, c, 0), g.b = batch_operand(st->b, c, 1);
    g.c = batch_operand(st->c, c, 0);
    return gemm_run(ctx, &g, ran);
}

typedef struct gemm_kernels {
    cl_kernel softmax, widen, narrow; /* widen and narrow only for 16-bit storage */
    cl_kernel flag;                   /* flag_nonfinite_rows, every call */
} gemm_kernels;

/* A kernel of cl/convert.cl, specialised for the call's storage types. */
static clattn_status convert_kernel(clattn_context *ctx, const attn_problem *pb, const char *name,
                                    cl_kernel *kernel) {
    static const char *const files[] = {ATTN_PRELUDE, "convert.cl"};
    char defines[64];
    snprintf(defines, sizeof defines, "-DIN_DTYPE=%d -DOUT_DTYPE=%d", (int)pb->dtype,
             (int)pb->out_dtype);
    return kernel_get(ctx, files, ARRAY_LEN(files), defines, name, kernel);
}

static clattn_status get_kernels(clattn_context *ctx, const attn_problem *pb, const gemm_plan *p,
                                 gemm_kernels *k) {
    static const char *const softmax_files[] = {ATTN_PRELUDE, "softmax.cl"};
    char defines[96];
    memset(k, 0, sizeof *k);
    /* float32 scores out: clattn_softmax's defines for Q's storage, so both share one build;
     * the softmax reads the caller's Q and K (IN_DTYPE) to rescore */
    snprintf(defines, sizeof defines, "-DWG_SIZE=%zu -DIN_DTYPE=%d -DOUT_DTYPE=0", p->wg,
             (int)pb->dtype);
    clattn_status status = kernel_get(ctx, softmax_files, ARRAY_LEN(softmax_files), defines,
                                      "softmax_masked", &k->softmax);
    if (status == CLATTN_SUCCESS && p->in_16bit)
        status = convert_kernel(ctx, pb, "widen_rows", &k->widen);
    if (status == CLATTN_SUCCESS && p->out_16bit)
        status = convert_kernel(ctx, pb, "narrow_rows", &k->narrow);
    if (status == CLATTN_SUCCESS) status = convert_kernel(ctx, pb, "flag_nonfinite_rows", &k->flag);
    return status;
}

/* Rows [row0, row0 + rows) of groups [group0, group0 + groups) of a strided tensor (`heads`
 * heads per batch), widened into dense [groups][rows][dim] (narrow: the other way). */
typedef struct convert_range {
    const clattn_tensor *t;
    size_t heads, group0, groups, row0, rows, dim;
} convert_range;

/* widen_rows and narrow_rows take the same arguments: tensor, its addressing, scratch. */
static clattn_status launch_convert(clattn_context *ctx, cl_kernel kernel, cl_mem tensor,
                                    cl_mem scratch, const convert_range *r, const char *what) {
    cl_long offset = (cl_long)r->t->offset, sb = (cl_long)r->t->stride_batch;
    cl_long sh = (cl_long)r->t->stride_head, ss = (cl_long)r->t->stride_seq;
    cl_long heads = (cl_long)r->heads, group0 = (cl_long)r->group0, row0 = (cl_long)r->row0;
    kernel_args a = {kernel, 0, CL_SUCCESS};
    KARG(a, tensor);
    KARG(a, offset);
    KARG(a, sb);
    KARG(a, sh);
    KARG(a, ss);
    KARG(a, heads);
    KARG(a, group0);
    KARG(a, row0);
    KARG(a, scratch);
    if (a.err != CL_SUCCESS) return ctx_cl_error(ctx, a.err, what);
    size_t global[3] = {r->dim, r->rows, r->groups};
    return kernel_launch(ctx, kernel, 3, global, NULL, NULL, what);
}

static clattn_status launch_softmax(clattn_context *ctx, cl_kernel kernel, const gemm_plan *p,
                                    const gemm_buffers *gb, const attn_buffers *buf,
                                    const gemm_chunk *c, float scale) {
    cl_long group0 = (cl_long)c->group0, row0 = (cl_long)c->row0;
    cl_long key0 = (cl_long)c->key0, keys = (cl_long)c->keys;
    cl_mem placeholder = gb->set.placeholder; /* made by make_buffers */
    cl_mem bias = buf->bias ? buf->bias : placeholder, lse = buf->lse ? buf->lse : placeholder;
    kernel_args a = {kernel, 0, CL_SUCCESS};
    KARG(a, gb->params);
    KARG(a, gb->scores);
    KARG(a, group0);
    KARG(a, row0);
    KARG(a, key0);
    KARG(a, keys);
    KARG(a, bias);
    KARG(a, gb->is_global);
    KARG(a, gb->layout);
    KARG(a, lse);
    KARG(a, buf->q);
    KARG(a, buf->k);
    KARG(a, scale);
    if (a.err != CL_SUCCESS) return ctx_cl_error(ctx, a.err, "gemm: softmax arguments");
    size_t global[2] = {p->wg * c->rows, c->groups}, local[2] = {p->wg, 1};
    return kernel_launch(ctx, kernel, 2, global, local, NULL, "gemm: masked softmax");
}

/* ---------------------------------------------------------------- NaN and inf in V */

/* The keys whose row of V holds NaN or inf ("bad" keys), found once per call. A row number
 * is q * Nk + j: key j of kv group q = b * Hkv + kvh. Everything but `count` stays empty in
 * the normal case of none. */
typedef struct bad_keys {
    size_t count;     /* over all kv groups */
    cl_uint *start;   /* host [B*Hkv + 1]: group q's bad rows are rows[start[q] .. start[q+1]) */
    cl_uint *rows;    /* host [count], ascending */
    cl_mem start_buf; /* device copy of start */
    cl_mem rows_buf;  /* device copy of rows */
    cl_mem values;    /* [count][Dv] float: the bad rows' original values */
    cl_mem v0;        /* float32 V: dense [B][Hkv][Nk][Dv] copy with the bad rows zeroed */
    cl_kernel add;    /* add_flagged_keys */
} bad_keys;           /* the device buffers belong to the call's buffer set */

static void bad_keys_release(bad_keys *bad) {
    free(bad->start), free(bad->rows);
    memset(bad, 0, sizeof *bad);
}

/* Everything a chunk needs, prepared once per call. */
typedef struct gemm_call {
    const attn_problem *pb;
    const gemm_plan *p;
    gemm_buffers *gb;
    const attn_buffers *buf;
    gemm_kernels kernels;
    gemm_operands ops;
    gemm_ran ran; /* the GEMM row of the first product */
    bad_keys bad;
    uint64_t scores_computed; /* by the first GEMM, summed over the chunks */
} gemm_call;

/* A strided float32 tensor as convert.cl's kernels address it: `heads` heads a batch entry. */
typedef struct float_tensor {
    cl_mem buffer;
    clattn_tensor t;
    size_t heads;
} float_tensor;

/* Offset, strides of (b, head, row) and heads: five long kernel arguments. */
static void karg_tensor(kernel_args *a, const float_tensor *ft) {
    cl_long v[5] = {(cl_long)ft->t.offset, (cl_long)ft->t.stride_batch, (cl_long)ft->t.stride_head,
                    (cl_long)ft->t.stride_seq, (cl_long)ft->heads};
    for (size_t i = 0; i < ARRAY_LEN(v); i++) kernel_arg(a, sizeof v[i], &v[i]);
}

/* V as float32: the caller's tensor, or for 16-bit storage the widened [B][Hkv][Nk][Dv]. */
static float_tensor v_as_float(const gemm_call *call) {
    const attn_problem *pb = call->pb;
    size_t plane = pb->len_k * pb->dim_v;
    float_tensor dense = {call->gb->v32, {0, pb->heads_kv * plane, plane, pb->dim_v}, pb->heads_kv};
    float_tensor caller = {call->buf->v, pb->v, pb->heads_kv};
    return call->p->in_16bit ? dense : caller;
}

/* The host list of bad keys from the flags, [B*Hkv][Nk] bytes. */
static clattn_status list_bad_keys(clattn_context *ctx, const attn_problem *pb,
                                   const unsigned char *flags, bad_keys *bad) {
    size_t kv = pb->batch * pb->heads_kv, all = kv * pb->len_k, n = 0;
    for (size_t i = 0; i < all; i++) bad->count += flags[i] != 0;
    if (bad->count == 0) return CLATTN_SUCCESS;
    /* the copy of V the GEMM then reads must be addressable by CLBlast (and rows by cl_uint) */
    if (dense_elements(pb->batch, pb->heads_kv, pb->len_k, pb->dim_v) > CLBLAST_MAX_ELEMENTS)
        return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED,
                         "gemm: V holds NaN or inf and its float32 copy without them would span "
                         "more than 2^31-1 elements (B=%zu Hkv=%zu Nk=%zu Dv=%zu)",
                         pb->batch, pb->heads_kv, pb->len_k, pb->dim_v);
    bad->start = malloc((kv + 1) * sizeof *bad->start);
    bad->rows = malloc(bad->count * sizeof *bad->rows);
    if (!bad->start || !bad->rows)
        return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "gemm: a list of %zu keys", bad->count);
    for (size_t q = 0; q < kv; q++) {
        bad->start[q] = (cl_uint)n;
        for (size_t j = 0; j < pb->len_k; j++)
            if (flags[q * pb->len_k + j]) bad->rows[n++] = (cl_uint)(q * pb->len_k + j);
    }
    bad->start[kv] = (cl_uint)n;
    return CLATTN_SUCCESS;
}

/* Flags the rows of V that hold NaN or inf and lists them in call->bad: one pass over V and
 * the one wait for the device that every call pays, to read the flags back. */
static clattn_status find_bad_keys(clattn_context *ctx, gemm_call *call) {
    const attn_problem *pb = call->pb;
    size_t kv = pb->batch * pb->heads_kv, bytes = kv * pb->len_k;
    float_tensor v = v_as_float(call);
    cl_long dim = (cl_long)pb->dim_v, len = (cl_long)pb->len_k;
    kernel_args a = {call->kernels.flag, 0, CL_SUCCESS};
    KARG(a, v.buffer);
    karg_tensor(&a, &v);
    KARG(a, dim);
    KARG(a, len);
    KARG(a, call->gb->flags);
    if (a.err != CL_SUCCESS) return ctx_cl_error(ctx, a.err, "gemm: flagging V: arguments");
    size_t global[2] = {pb->len_k, kv};
    clattn_status status = kernel_launch_padded(ctx, call->kernels.flag, 2, global, NULL,
                                                "gemm: flagging the rows of V with NaN or inf");
    unsigned char *flags = status ? NULL : malloc(bytes);
    if (!status && !flags)
        status = ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "gemm: %zu flags of V", bytes);
    if (!status)
        status = buffer_read(ctx, call->gb->flags, 0, bytes, flags, "gemm: reading the flags of V");
    if (!status) status = list_bad_keys(ctx, pb, flags, &call->bad);
    free(flags);
    return status;
}

/* The bad rows' original values into bad->values, then V with them zeroed where the second
 * GEMM reads it: float32 storage into the copy v0; float16 in place in the widened scratch. */
static clattn_status clean_v(clattn_context *ctx, const gemm_call *call, cl_kernel gather,
                             cl_kernel zero) {
    const attn_problem *pb = call->pb;
    const bad_keys *bad = &call->bad;
    float_tensor v = v_as_float(call);
    cl_mem dst = call->p->in_16bit ? call->gb->v32 : bad->v0;
    cl_long len = (cl_long)pb->len_k, dim = (cl_long)pb->dim_v;
    kernel_args g = {gather, 0, CL_SUCCESS}, z = {zero, 0, CL_SUCCESS};
    KARG(g, v.buffer);
    karg_tensor(&g, &v);
    KARG(g, len);
    KARG(g, dim);
    KARG(g, bad->rows_buf);
    KARG(g, bad->values);
    KARG(z, v.buffer);
    karg_tensor(&z, &v);
    KARG(z, dim);
    KARG(z, call->gb->flags);
    KARG(z, dst);
    if (g.err != CL_SUCCESS || z.err != CL_SUCCESS)
        return ctx_cl_error(ctx, g.err != CL_SUCCESS ? g.err : z.err, "gemm: cleaning V");
    size_t rows[2] = {pb->dim_v, bad->count};
    size_t all[3] = {pb->dim_v, pb->len_k, pb->batch * pb->heads_kv};
    clattn_status status =
        kernel_launch_padded(ctx, gather, 2, rows, NULL, "gemm: keeping the bad rows of V");
    if (status == CLATTN_SUCCESS)
        status = kernel_launch_padded(ctx, zero, 3, all, NULL, "gemm: zeroing the bad rows of V");
    return status;
}

/* With bad keys: their device list and values, the kernels, and the cleaned V (clean_v). */
static clattn_status prepare_bad_keys(clattn_context *ctx, gemm_call *call) {
    const attn_problem *pb = call->pb;
    bad_keys *bad = &call->bad;
    size_t kv = pb->batch * pb->heads_kv, n = bad->count, u = sizeof(cl_uint);
    cl_kernel gather = NULL, zero = NULL;
    clattn_status s = add_buffer(ctx, &call->gb->set, kv + 1, u, 1, 1, bad->start, &bad->start_buf,
                                 "bad key starts");
    if (!s) s = add_buffer(ctx, &call->gb->set, n, u, 1, 1, bad->rows, &bad->rows_buf, "bad keys");
    if (!s)
        s = add_buffer(ctx, &call->gb->set, n, pb->dim_v, 1, 4, NULL, &bad->values, "bad V rows");
    if (!s && !call->p->in_16bit)
        s = add_buffer(ctx, &call->gb->set, kv, pb->len_k, pb->dim_v, 4, NULL, &bad->v0,
                       "float32 V without its bad rows");
    if (!s) s = convert_kernel(ctx, pb, "gather_rows", &gather);
    if (!s) s = convert_kernel(ctx, pb, "zero_flagged_rows", &zero);
    if (!s) s = convert_kernel(ctx, pb, "add_flagged_keys", &bad->add);
    if (!s) s = clean_v(ctx, call, gather, zero);
    if (!s)
        log_msg("gemm: %zu keys hold NaN or inf in V; O = P V reads them as 0 and adds them to "
                "the rows that see them",
                n);
    return s;
}

/* After a chunk's O = P V0: the bad keys' share, P[i][j] * V[j][:], added to the rows with
 * P[i][j] != 0 (the caller's O, or the float32 chunk of a float16 O before narrowing). */
static clattn_status add_bad_keys(clattn_context *ctx, const gemm_call *call, const gemm_chunk *c) {
    const attn_problem *pb = call->pb;
    const bad_keys *bad = &call->bad;
    int dense = call->p->out_16bit; /* o32: [groups][rows][Dv], group and row from 0 */
    float_tensor o32 = {call->gb->o32, {0, c->rows * pb->dim_v, 0, pb->dim_v}, 1};
    float_tensor caller = {call->buf->o, pb->o, pb->heads_q};
    cl_long group0 = (cl_long)c->group0, key0 = (cl_long)c->key0, keys = (cl_long)c->keys;
    cl_long hq = (cl_long)pb->heads_q, hkv = (cl_long)pb->heads_kv, len = (cl_long)pb->len_k;
    cl_long dim = (cl_long)pb->dim_v;
    cl_long o_group0 = dense ? 0 : group0, o_row0 = dense ? 0 : (cl_long)c->row0;
    kernel_args a = {bad->add, 0, CL_SUCCESS};
    KARG(a, call->gb->scores);
    KARG(a, group0);
    KARG(a, key0);
    KARG(a, keys);
    KARG(a, hq);
    KARG(a, hkv);
    KARG(a, len);
    KARG(a, dim);
    KARG(a, bad->start_buf);
    KARG(a, bad->rows_buf);
    KARG(a, bad->values);
    const float_tensor *o = dense ? &o32 : &caller;
    KARG(a, o->buffer);
    karg_tensor(&a, o);
    KARG(a, o_group0);
    KARG(a, o_row0);
    if (a.err != CL_SUCCESS) return ctx_cl_error(ctx, a.err, "gemm: adding bad keys: arguments");
    size_t global[3] = {pb->dim_v, c->rows, c->groups};
    return kernel_launch_padded(ctx, bad->add, 3, global, NULL, "gemm: adding the bad keys of V");
}

static clattn_status run_chunk(clattn_context *ctx, gemm_call *call, const gemm_chunk *c) {
    const attn_problem *pb = call->pb;
    const gemm_plan *p = call->p;
    clattn_status status = CLATTN_SUCCESS;
    if (p->in_16bit) {
        convert_range q = {&pb->q, pb->heads_q, c->group0, c->groups, c->row0, c->rows, pb->dim_qk};
        status = launch_convert(ctx, call->kernels.widen, call->buf->q, call->gb->q32, &q,
                                "gemm: widening Q");
    }
    gemm_operands ops = call->ops;
    ops.s.ld = c->keys; /* this chunk's scores: [groups][rows][keys] */
    gemm_step scores = {.a = &ops.q,
                        .b = &ops.k,
                        .c = &ops.s,
                        .transpose_b = 1,
                        .n = c->keys,
                        .k = pb->dim_qk,
                        .alpha = pb->scale,
                        .invalid = p->fail_gemm,
                        .what = "gemm: scores S = scale*Q*K^T"};
    gemm_step output = {.a = &ops.s,
                        .b = &ops.v,
                        .c = &ops.o,
                        .n = pb->dim_v,
                        .k = c->keys,
                        .alpha = 1.0f,
                        .what = "gemm: output O = P*V"};
    if (!status) status = batched_gemm(ctx, pb, c, &scores, &call->ran);
    if (!status)
        status = launch_softmax(ctx, call->kernels.softmax, p, call->gb, call->buf, c, pb->scale);
    if (!status) status = batched_gemm(ctx, pb, c, &output, NULL);
    if (!status && call->bad.count) status = add_bad_keys(ctx, call, c);
    if (!status && p->out_16bit) {
        convert_range o = {&pb->o, pb->heads_q, c->group0, c->groups, c->row0, c->rows, pb->dim_v};
        status = launch_convert(ctx, call->kernels.narrow, call->buf->o, call->gb->o32, &o,
                                "gemm: narrowing O");
    }
    return status;
}

/* float16 K and V, widened once for every chunk. */
static clattn_status widen_keys(clattn_context *ctx, const gemm_call *call) {
    const attn_problem *pb = call->pb;
    size_t kv = pb->batch * pb->heads_kv;
    convert_range k = {&pb->k, pb->heads_kv, 0, kv, 0, pb->len_k, pb->dim_qk};
    convert_range v = {&pb->v, pb->heads_kv, 0, kv, 0, pb->len_k, pb->dim_v};
    clattn_status status = launch_convert(ctx, call->kernels.widen, call->buf->k, call->gb->k32, &k,
                                          "gemm: widening K");
    if (status == CLATTN_SUCCESS)
        status = launch_convert(ctx, call->kernels.widen, call->buf->v, call->gb->v32, &v,
                                "gemm: widening V");
    return status;
}

static clattn_status run_chunks(clattn_context *ctx, gemm_call *call) {
    clattn_status status = get_kernels(ctx, call->pb, call->p, &call->kernels);
    if (!status && call->p->in_16bit) status = widen_keys(ctx, call);
    if (!status) status = find_bad_keys(ctx, call);
    if (!status && call->bad.count) status = prepare_bad_keys(ctx, call);
    make_operands(call->pb, call->p, call->gb, call->buf, &call->ops);
    if (call->bad.v0) /* float32 V with bad rows: the GEMM reads the cleaned copy */
        call->ops.v =
            dense_operand(call->bad.v0, call->pb->heads_kv, call->pb->len_k, call->pb->dim_v);
    for (size_t i = 0; !status && i < call->p->chunks; i++) {
        gemm_chunk c = chunk_at(call->p, call->pb, &call->pb->mask, i);
        status = run_chunk(ctx, call, &c);
        call->scores_computed += (uint64_t)c.groups * c.rows * c.keys;
    }
    return status;
}

static void fill_stats(const attn_problem *pb, const gemm_plan *p, const gemm_ran *ran,
                       uint64_t bytes, clattn_stats *s) {
    s->block_m = (unsigned)(p->group_chunk * p->row_chunk); /* score rows of a chunk */
    s->block_n = (unsigned)pb->len_k;                       /* score columns of a chunk, at most */
    s->chunks = p->chunks > UINT32_MAX ? UINT32_MAX : (unsigned)p->chunks;
    s->device_bytes = bytes;
    snprintf(s->kernel, sizeof s->kernel, "gemm-%s %zux%zu rows softmax wg%zu %s->%s",
             clattn_gemm_name(ran->gemm), p->group_chunk, p->row_chunk, p->wg,
             dtype_name(pb->dtype), dtype_name(pb->out_dtype));
}

static clattn_status run(clattn_context *ctx, const variant_plan *vp, const attn_buffers *buf,
                         cl_event *event, clattn_stats *stats) {
    const attn_problem *pb = vp->problem;
    const gemm_plan *plan = vp->state;
    gemm_buffers gb;
    attn_params P;
    gemm_call call;
    memset(&gb, 0, sizeof gb);
    memset(&call, 0, sizeof call);
    call.pb = pb, call.p = plan, call.gb = &gb, call.buf = buf;
    params_from_problem(pb, vp->write_lse, &P);
    clattn_status status = make_buffers(ctx, pb, plan, &P, &gb);
    if (!status) status = run_chunks(ctx, &call);
    if (!status && event) {
        cl_int err = clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, event);
        if (err != CL_SUCCESS) status = ctx_cl_error(ctx, err, "gemm: completion event");
    }
    if (!status) {
        fill_stats(pb, plan, &call.ran, gb.set.bytes, stats);
        log_msg("gemm: %s, %zu chunks, score budget %zu bytes (%s), %.1f%% of the scores "
                "computed",
                stats->kernel, plan->chunks, plan->budget, plan->budget_from,
                100.0 * (double)call.scores_computed /
                    ((double)plan->groups * (double)pb->len_q * (double)pb->len_k));
    }
    bad_keys_release(&call.bad);
    buffer_set_release(&gb.set);
    return status;
}

static int supports(const clattn_context *ctx, const attn_problem *pb, char *why, size_t size) {
    if (pb && problem_is_cache(pb)) {
        snprintf(why, size, "reads dense K and V tensors: not a KV cache (the split variant does)");
        return 0;
    }
    if (pb && dtype_is_quantised(pb->kv.dtype)) {
        snprintf(why, size, "CLBlast multiplies float K and V: not %s (the split variant reads it)",
                 dtype_name(pb->kv.dtype));
        return 0;
    }
    if (pb && !loop_budget_allows(&ctx->device, "gemm", pb->len_k, pb->dim_qk, pb->dim_v, why,
                                  size))
        return 0; /* kernels/compilers.c: llvmpipe */
    return 1; /* any other call; limits of CLBlast's int offsets are found when planning */
}

static int suits(const clattn_device_info *device, const attn_problem *pb, char *why, size_t size) {
    return 1;
}

/* The masked softmax's work-group: a power of two up to wg_size. */
static const tuning_default defaults[] = {
    /* CPUs: a work-group's barriers cost PoCL more the more work-items it runs in turn; 64
     * measured 15-25% faster than 256 on PoCL here (bench/README.md, issue 23) */
    {CL_DEVICE_TYPE_CPU, "", "", {.wg_size = 64, .vector = 1}},
    {CL_DEVICE_TYPE_ALL, "", "", {.wg_size = 256, .vector = 1}},
};

const attn_variant variant_gemm = {
    .id = CLATTN_VARIANT_GEMM,
    .name = "gemm",
    .path = CLATTN_PATH_GEMM,
    .summary =
        "batched GEMM (the GEMM table: panels on CPUs, CLBlast elsewhere), masked softmax, batched "
        "GEMM, in chunks of query rows",
    .defaults = defaults,
    .num_defaults = ARRAY_LEN(defaults),
    .supports = supports,
    .suits = suits,
    .plan = plan,
    .run = run,
    .release = release,
};
