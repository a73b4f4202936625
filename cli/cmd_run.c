/*
 * clattn run: attention from .npy files (docs/semantics.md section 5). Q, K, V are 4-D in the
 * chosen layout; the bias is [Nq,Nk], [H,Nq,Nk] or [B,H,Nq,Nk] whatever the layout (as PyTorch's
 * attn_mask; size-1 dimensions broadcast); a block layout is 2-D (shared) or 3-D (one per query
 * head). Outputs are written whole or not at all.
 */
#include "args.h"
#include "common.h"
#include "run.h"
#include "commands.h"
#include "conformance.h"
#include "npy.h"
#include "outfile.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const cli_option run_options[] = {
    {"q", "Q.npy", "queries, 4-D in the layout"},
    {"k", "K.npy", "keys"},
    {"v", "V.npy", "values"},
    {"out", "O.npy", "output file"},
    {"lse", "LSE.npy", "also write the log-sum-exp, float32 [B,Hq,Nq]"},
    {"layout", "bshd|bhsd", "tensor layout (default bshd = [B,N,H,D])"},
    {"causal", NULL, "causal mask, aligned to the end of the keys"},
    {"window", "L,R", "sliding window; -1 = unbounded (write --window=-1,0)"},
    {"dilation", "N", "window dilation (default 1)"},
    {"global", "I,J,...", "global token positions (key positions)"},
    {"block-layout", "L.npy", "block-sparse layout, |u1 |b1 or <i4, 2-D or 3-D"},
    {"block-size", "BQ,BK", "block size of the layout"},
    {"bias", "BIAS.npy", "additive float bias; -inf masks"},
    {"scale", "S", "score scale (default 1/sqrt(Dqk))"},
    RUN_MODIFIER_OPTIONS,
    {"storage", "f32|f16|bf16",
     "round Q, K, V to this storage first (default: their own; <u2 files are bfloat16 bits)"},
    {"out-dtype", "f32|f16|bf16", "storage of O (default: the storage of Q, K, V)"},
    {"kv-storage", "q8_0|q4_0",
     "quantise K and V (and a cache) to ggml's blocks after --storage; head dims multiples of 32"},
    {"path", "auto|fused|gemm|reference", "how to compute (default auto)"},
    {"variant", "NAME", "the kernel variant to run (clattn devices --variants; default auto)"},
    {"device", "SPEC", "device: index, P:D, name, gpu|cpu|accelerator"},
    {"compare", "REF.npy", "check O against REF.npy (O's shape) with the contract's tolerance"},
    {"compare-lse", "REF.npy",
     "check LSE against REF.npy (<f4 [B,Hq,Nq]) with the contract's tolerance"},
    {"devices", "A,B,...", "shard the call over these devices of this process (a ring)"},
    {"distributed", "ring|ulysses", "under mpirun: shard the call over the ranks (libclattn_mpi)"},
    {"sharding", "auto|contiguous|zigzag", "rows of each device or rank (auto: zigzag if causal)"},
    {"timeout", "S", "--distributed: seconds a silent rank is waited for (default 60)"},
    CACHE_RUN_OPTIONS,
    {"help", NULL, "show this help"},
};

void run_release(run_state *s) {
    cache_release(s);
    npy_free(&s->q);
    npy_free(&s->k);
    npy_free(&s->v);
    npy_free(&s->bias);
    npy_free(&s->layout);
    npy_free(&s->ref);
    npy_free(&s->ref_lse);
    npy_free(&s->alibi);
    npy_free(&s->sinks);
    free(s->alibi_standard);
    free(s->bias_f32);
    free(s->layout_u8);
    free(s->globals);
    free(s->o);
    free(s->lse);
}

/* A block of K or V (flat block index `block` of `a`, 4-D in the layout) that `to` cannot
 * store, named by its position: batch (or page, for pools), row and head, and its dims. */
static void refuse_block(const cli_args *args, const run_state *s, const char *option,
                         const npy_array *a, size_t block, clattn_dtype to) {
    const char *name = to == CLATTN_Q4_0 ? "q4_0" : "q8_0";
    size_t at = block * 32, dim = a->shape[3], rest = at / dim, inner[3];
    for (int i = 2; i >= 0; i--) inner[i] = rest % a->shape[i], rest /= a->shape[i];
    int bhsd = s->layout_kind == CLATTN_LAYOUT_BHSD; /* [B,H,N,D], else [B,N,H,D] */
    float x[32], max = 0.0f;
    clattn_convert(s->desc.dtype,
                   (const char *)a->data + at * (s->desc.dtype == CLATTN_F32 ? 4 : 2), CLATTN_F32,
                   x, 32);
    for (int i = 0; i < 32; i++)
        if (isfinite(x[i]) && fabsf(x[i]) > max) max = fabsf(x[i]);
    cli_error("run",
              "--kv-storage %s: %s: %s %zu, row %zu, head %zu, dims %zu..%zu hold |x| = %g, at "
              "or above %s, where the block's float16 scale overflows (the block would be NaN)",
              name, args_get(args, option), args_has(args, "page-table") ? "page" : "batch",
              inner[0], inner[bhsd ? 2 : 1], inner[bhsd ? 1 : 2], at % dim, at % dim + 31,
              (double)max, to == CLATTN_Q4_0 ? "524160" : "8321040");
}

/* --kv-storage q8_0|q4_0: K and V quantised, a block of 32 values at a time (rows start blocks). */
static int setup_kv_storage(const cli_args *args, run_state *s) {
    static const char *const kv_dtypes[] = {"q8_0", "q4_0", NULL};
    static const char *const options[] = {"k", "v"};
    int choice = 0;
    if (!args_has(args, "kv-storage")) return 0;
    if (parse_choice(args, "kv-storage", kv_dtypes, &choice) != 0) return EXIT_USAGE;
    const clattn_dtype to = choice ? CLATTN_Q4_0 : CLATTN_Q8_0;
    if (s->desc.dim_qk % 32 || s->desc.dim_v % 32) {
        cli_error("run", "--kv-storage %s: head dims must be multiples of 32 (Dqk=%zu Dv=%zu)",
                  kv_dtypes[choice], s->desc.dim_qk, s->desc.dim_v);
        return 1; /* the inputs' sizes, not the option */
    }
    npy_array *kv[2] = {&s->k, &s->v};
    for (int i = 0; i < 2; i++) {
        size_t block = SIZE_MAX;
        if (clattn_convert_check(s->desc.dtype, kv[i]->data, to, kv[i]->count, &block) &&
            block != SIZE_MAX) {
            refuse_block(args, s, options[i], kv[i], block, to);
            return 1;
        }
    }
    for (int i = 0; i < 2; i++) {
        void *blocks = malloc(kv[i]->count / 32 * 34 + 1); /* q8_0's 34 bytes, q4_0's 18 */
        if (!blocks || clattn_convert(s->desc.dtype, kv[i]->data, to, blocks, kv[i]->count) !=
                           CLATTN_SUCCESS) {
            free(blocks);
            cli_error("run", "out of host memory quantising K and V");
            return 1;
        }
        free(kv[i]->data);
        kv[i]->data = blocks; /* kv[i]->dtype still names the values' type before */
    }
    s->desc.kv_q8_0 = to == CLATTN_Q8_0, s->desc.kv_q4_0 = to == CLATTN_Q4_0;
    return 0;
}

/* --storage: Q, K and V rounded to it (default: their own type). <u2 arrays are bfloat16 bit
 * patterns, read only with --storage bf16 (NumPy has no bfloat16). O defaults to the storage. */
static int setup_storage(const cli_args *args, run_state *s) {
    static const char *const dtypes[] = {"f32", "f16", "bf16", NULL}; /* clattn_dtype order */
    int choice = 0;
    if (args_has(args, "storage") && parse_choice(args, "storage", dtypes, &choice) != 0)
        return EXIT_USAGE;
    clattn_dtype from = run_storage_of(s->q.dtype);
    clattn_dtype storage = args_has(args, "storage") ? (clattn_dtype)choice : from;
    if (from == CLATTN_BF16 && (!args_has(args, "storage") || storage != CLATTN_BF16)) {
        cli_error("run",
                  "%s: <u2 arrays are read as bfloat16 bit patterns, with --storage bf16 "
                  "only",
                  args_get(args, "q"));
        return 1;
    }
    if (run_convert_array(&s->q, from, storage) || run_convert_array(&s->k, from, storage) ||
        run_convert_array(&s->v, from, storage)) {
        cli_error("run", "out of host memory converting Q, K and V to %s", dtypes[storage]);
        return 1;
    }
    s->desc.dtype = s->desc.out_dtype = storage;
    return setup_kv_storage(args, s);
}

/* Q [B,Nq,Hq,Dqk], K [B,Nk,Hkv,Dqk], V [B,Nk,Hkv,Dv] must agree. */
static int setup_shapes(const cli_args *args, run_state *s) {
    size_t q[4], k[4], v[4];
    if (run_tensor_dims(args, "q", &s->q, s->layout_kind, q) ||
        run_tensor_dims(args, "k", &s->k, s->layout_kind, k) ||
        run_tensor_dims(args, "v", &s->v, s->layout_kind, v))
        return 1;
    const char *qf = args_get(args, "q"), *kf = args_get(args, "k"), *vf = args_get(args, "v");
    if (s->q.dtype != s->k.dtype || s->q.dtype != s->v.dtype) {
        cli_error("run", "Q, K and V must share a dtype: %s is %s, %s is %s, %s is %s", qf,
                  npy_dtype_name(s->q.dtype), kf, npy_dtype_name(s->k.dtype), vf,
                  npy_dtype_name(s->v.dtype));
        return 1;
    }
    if ((k[0] != q[0] || v[0] != q[0]) && !args_has(args, "page-table")) { /* pools: pages */
        cli_error("run", "batch sizes differ: %s has %zu, %s %zu, %s %zu", qf, q[0], kf, k[0], vf,
                  v[0]);
        return 1;
    }
    if (k[1] != v[1] || k[2] != v[2]) {
        cli_error("run", "%s has %zu keys in %zu heads but %s has %zu in %zu heads", kf, k[1], k[2],
                  vf, v[1], v[2]);
        return 1;
    }
    if (k[3] != q[3]) {
        cli_error("run", "head dims differ: %s has %zu, %s has %zu", qf, q[3], kf, k[3]);
        return 1;
    }
    if (k[2] != 0 && q[2] % k[2] != 0) { /* zero sizes: the library names them all */
        cli_error("run", "%s has %zu heads, not a multiple of the %zu heads of %s", qf, q[2], k[2],
                  kf);
        return 1;
    }
    /* desc_init refuses B=0 before recording any size: initialise with 1 so that the library's
     * check can name every size ("every size must be >= 1 (B=0 Hq=...)") */
    clattn_attention_desc_init(&s->desc, s->layout_kind, q[0] ? q[0] : 1, q[2], k[2], q[1], k[1],
                               q[3], v[3]);
    s->desc.batch = q[0];
    return setup_storage(args, s);
}

/* --block-layout L.npy --block-size BQ,BK */
static int setup_block_layout(const cli_args *args, run_state *s) {
    int64_t bq = 0, bk = 0;
    if (args_has(args, "block-layout") != args_has(args, "block-size")) {
        cli_error(args->command, "--block-layout and --block-size go together");
        return EXIT_USAGE;
    }
    if (!args_has(args, "block-layout")) return 0;
    if (parse_pair_range(args, "block-size", MIN_BLOCK_SIZE, MAX_BLOCK_SIZE, &bq, &bk) != 0)
        return EXIT_USAGE;
    if (run_load(args, "block-layout", &s->layout)) return 1;
    const char *file = args_get(args, "block-layout");
    const npy_array *L = &s->layout;
    size_t bq_count = (s->desc.len_q + (size_t)bq - 1) / (size_t)bq;
    size_t bk_count = (s->desc.len_k + (size_t)bk - 1) / (size_t)bk;
    int per_head = L->ndim == 3;
    if ((L->ndim != 2 && L->ndim != 3) || L->shape[L->ndim - 2] != bq_count ||
        L->shape[L->ndim - 1] != bk_count ||
        (per_head && L->shape[0] != s->desc.heads_q && L->shape[0] != 1)) {
        cli_error(args->command,
                  "%s: layout shape must be [%zu, %zu] or [%zu (heads), %zu, %zu] for "
                  "Nq=%zu, Nk=%zu and blocks %lld,%lld",
                  file, bq_count, bk_count, s->desc.heads_q, bq_count, bk_count, s->desc.len_q,
                  s->desc.len_k, (long long)bq, (long long)bk);
        return 1;
    }
    if (L->dtype != NPY_U8 && L->dtype != NPY_BOOL && L->dtype != NPY_I32) {
        cli_error(args->command, "%s: layout dtype %s is not supported (use |u1, |b1 or <i4)", file,
                  npy_dtype_name(L->dtype));
        return 1;
    }
    s->layout_u8 = malloc(L->count + 1);
    if (!s->layout_u8) {
        cli_error(args->command, "%s: out of host memory for the layout", file);
        return 1;
    }
    for (size_t i = 0; i < L->count; i++)
        s->layout_u8[i] = L->dtype == NPY_I32 ? ((const int32_t *)L->data)[i] != 0
                                              : ((const uint8_t *)L->data)[i] != 0;
    s->desc.block_layout = s->layout_u8;
    s->desc.block_q = (size_t)bq;
    s->desc.block_k = (size_t)bk;
    s->desc.block_layout_per_head = per_head && L->shape[0] != 1;
    return 0;
}

/* --bias: [Nq,Nk], [H,Nq,Nk] or [B,H,Nq,Nk]; a dimension of 1 broadcasts (stride 0). */
static int setup_bias(const cli_args *args, run_state *s) {
    if (!args_has(args, "bias")) return 0;
    if (run_load(args, "bias", &s->bias)) return 1;
    const char *file = args_get(args, "bias");
    const npy_array *b = &s->bias;
    const clattn_attention_desc *d = &s->desc;
    size_t shape[4] = {1, 1, 0, 0};
    if (b->ndim >= 2 && b->ndim <= 4)
        memcpy(shape + 4 - b->ndim, b->shape, b->ndim * sizeof(size_t));
    if (b->ndim < 2 || shape[2] != d->len_q || shape[3] != d->len_k ||
        (shape[1] != 1 && shape[1] != d->heads_q) || (shape[0] != 1 && shape[0] != d->batch)) {
        cli_error(args->command,
                  "%s: bias shape must be [Nq,Nk], [H,Nq,Nk] or [B,H,Nq,Nk] with "
                  "Nq=%zu, Nk=%zu, H in {1,%zu}, B in {1,%zu}",
                  file, d->len_q, d->len_k, d->heads_q, d->batch);
        return 1;
    }
    if (b->dtype != NPY_F32 && b->dtype != NPY_F16) {
        cli_error(args->command, "%s: bias dtype %s is not supported (use <f4 or <f2)", file,
                  npy_dtype_name(b->dtype));
        return 1;
    }
    const float *values = b->data;
    if (b->dtype == NPY_F16) {
        if (!(s->bias_f32 = malloc(b->count * sizeof(float) + 1))) {
            cli_error(args->command, "%s: out of host memory widening the bias", file);
            return 1;
        }
        clattn_convert(CLATTN_F16, b->data, CLATTN_F32, s->bias_f32, b->count);
        values = s->bias_f32;
    }
    s->desc.bias_host = values;
    s->desc.bias_strides.stride_seq = d->len_k;
    s->desc.bias_strides.stride_head = shape[1] == 1 ? 0 : d->len_q * d->len_k;
    s->desc.bias_strides.stride_batch = shape[0] == 1 ? 0 : shape[1] * d->len_q * d->len_k;
    return 0;
}

/* --causal --window --dilation --global --scale --out-dtype --path */
static int setup_options(const cli_args *args, run_state *s) {
    clattn_attention_desc *d = &s->desc;
    d->causal = args_has(args, "causal");
    if (args_has(args, "window") &&
        parse_pair(args, "window", MIN_WINDOW_SIDE, &d->window_left, &d->window_right) != 0)
        return EXIT_USAGE;
    if (args_has(args, "dilation") &&
        parse_int64(args, "dilation", MIN_DILATION, &d->dilation) != 0)
        return EXIT_USAGE;
    if (args_has(args, "global")) {
        if (parse_index_list(args, "global", &s->globals, &d->num_global_tokens) != 0)
            return EXIT_USAGE;
        d->global_tokens = s->globals;
        for (size_t g = 0; g < d->num_global_tokens; g++)
            if ((size_t)s->globals[g] >= d->len_k) {
                cli_error(args->command, "--global: position %lld is outside the %zu keys",
                          (long long)s->globals[g], d->len_k);
                return EXIT_USAGE;
            }
    }
    if (args_has(args, "scale")) {
        if (parse_float(args, "scale", &d->scale) != 0) return EXIT_USAGE;
        if (d->scale == 0.0f) { /* 0 in the desc means the default, 1/sqrt(Dqk) */
            cli_error(args->command, "--scale: must be non-zero, got '%s'",
                      args_get(args, "scale"));
            return EXIT_USAGE;
        }
    }
    static const char *const dtypes[] = {"f32", "f16", "bf16", NULL}; /* clattn_dtype order */
    static const char *const paths[] = {"auto", "fused", "gemm", "reference", NULL};
    int choice = 0;
    if (args_has(args, "out-dtype")) {
        if (parse_choice(args, "out-dtype", dtypes, &choice) != 0) return EXIT_USAGE;
        d->out_dtype = (clattn_dtype)choice;
    }
    if (args_has(args, "path")) {
        if (parse_choice(args, "path", paths, &choice) != 0) return EXIT_USAGE;
        d->path = (clattn_path)choice;
    }
    if (args_has(args, "variant") && parse_variant(args, "variant", &d->variant) != 0)
        return EXIT_USAGE;
    if (d->variant == CLATTN_VARIANT_REFERENCE) d->path = CLATTN_PATH_REFERENCE; /* on the host */
    return 0;
}

int run_setup_mask(const cli_args *args, run_state *s) {
    int rc = setup_options(args, s);
    if (!rc) rc = setup_block_layout(args, s);
    if (!rc) rc = setup_bias(args, s);
    if (!rc) rc = run_setup_modifiers(args, s);
    return rc;
}

/* Runs the call on the reference or a device; fills s->o and s->lse. */
static int compute(const cli_args *args, run_state *s, char *where, size_t where_size) {
    const clattn_attention_desc *d = &s->desc;
    size_t o_count = d->batch * d->heads_q * d->len_q * d->dim_v;
    /* + 1 byte: a zero size must reach the library's check, not read as out of memory */
    s->o = malloc(o_count * (d->out_dtype == CLATTN_F32 ? 4 : 2) + 1);
    s->lse = malloc(d->batch * d->heads_q * d->len_q * sizeof(float) + 1);
    if (!s->o || !s->lse) {
        cli_error("run", "out of host memory for the outputs (%zu elements)", o_count);
        return 1;
    }
    if (s->cache) return cache_compute(args, s, where, where_size);
    if (args_has(args, "devices")) return run_multi_compute(args, s, where, where_size);
    if (d->path == CLATTN_PATH_REFERENCE) {
        char err[1024];
        clattn_status status = clattn_attention_desc_check(d, NULL, err, sizeof err);
        if (status == CLATTN_SUCCESS)
            status = clattn_attention_reference(d, s->q.data, s->k.data, s->v.data, s->o, s->lse);
        if (status != CLATTN_SUCCESS && !*err)
            snprintf(err, sizeof err, "%s", clattn_status_string(status));
        if (status != CLATTN_SUCCESS) {
            cli_error("run", "reference: %s (%s)", err, clattn_status_name(status));
            return 1;
        }
        snprintf(where, where_size, "reference (CPU)");
        return 0;
    }
    clattn_context *ctx = NULL;
    int rc = cli_open_context("run", args_get(args, "device"), &ctx);
    if (rc != 0) return rc;
    clattn_status status =
        clattn_attention_host(ctx, d, s->q.data, s->k.data, s->v.data, s->o, s->lse);
    if (status != CLATTN_SUCCESS) {
        cli_report("run", "attention", status, ctx);
        clattn_context_destroy(ctx);
        return 1;
    }
    clattn_stats stats;
    clattn_stats_init(&stats);
    clattn_device_info info;
    clattn_device_info_init(&info);
    clattn_context_device_info(ctx, &info);
    if (clattn_context_last_stats(ctx, &stats) == CLATTN_SUCCESS)
        snprintf(where, where_size, "%s on %s", stats.kernel, info.name);
    if (stats.fallback[0]) /* never in silence (docs/verification.md) */
        printf("auto ran %s, not a variant it prefers: %s\n", clattn_variant_name(stats.variant),
               stats.fallback);
    clattn_context_destroy(ctx);
    return 0;
}

/* O's shape in the layout: [B,Nq,Hq,Dv] or [B,Hq,Nq,Dv]. */
static void output_shape(const run_state *s, size_t shape[4]) {
    const clattn_attention_desc *d = &s->desc;
    int bshd = s->layout_kind == CLATTN_LAYOUT_BSHD;
    shape[0] = d->batch;
    shape[1] = bshd ? d->len_q : d->heads_q;
    shape[2] = bshd ? d->heads_q : d->len_q;
    shape[3] = d->dim_v;
}

/* Resolves where an output goes (outfile_prepare); a folder, block device or socket is
 * refused. @return 0 or 1 (said). */
static int prepare_output(const char *command, const run_output *o, outfile_staged *file) {
    int e = outfile_prepare(o->path, file);
    if (e == 0) return 0;
    cli_error(command, "--%s %s: %s", o->option, o->path,
              e == EISDIR ? "is a folder, not a file" : outfile_strerror(e));
    return 1;
}

/* Writes one output into its temporary, or in place (outfile_stage). @return 0 or 1 (said). */
static int stage_output(const char *command, const run_output *o, outfile_staged *file) {
    char err[PATH_MAX + 512];
    unsigned char preamble[NPY_PREAMBLE_MAX];
    outfile_part parts[2];
    if (npy_parts(o->path, o->dtype, o->ndim, o->shape, o->data, preamble, parts, err,
                  sizeof err) != CLATTN_SUCCESS) {
        cli_error(command, "--%s %s", o->option, err); /* err starts with the path */
        return 1;
    }
    int e = outfile_stage(file, parts, 2);
    if (e != 0)
        cli_error(command, "--%s %s: cannot write: %s", o->option, o->path, outfile_strerror(e));
    return e != 0;
}

int run_write_all(const char *command, const run_output *outs, size_t n) {
    outfile_staged files[RUN_MAX_OUTPUTS];
    size_t prepared = 0, failed = 0;
    int ok = n <= RUN_MAX_OUTPUTS;
    while (ok && prepared < n) {
        ok = prepare_output(command, &outs[prepared], &files[prepared]) == 0;
        prepared++;
    }
    /* regular files to their temporaries first, then devices and FIFOs in place */
    for (int in_place = 0; in_place < 2; in_place++)
        for (size_t i = 0; ok && i < n; i++)
            if (files[i].target.in_place == in_place)
                ok = stage_output(command, &outs[i], &files[i]) == 0;
    int e = ok ? outfile_commit(files, n, &failed) : 0;
    if (e != 0)
        cli_error(command, "--%s %s: cannot write: %s", outs[failed].option, outs[failed].path,
                  strerror(e));
    outfile_discard(files, prepared);
    return ok && e == 0 ? 0 : 1;
}

int run_write_outputs(const cli_args *args, const run_state *s) {
    const clattn_attention_desc *d = &s->desc;
    size_t o_shape[4], lse_shape[3] = {d->batch, d->heads_q, d->len_q};
    output_shape(s, o_shape);
    npy_dtype o_dtype = (npy_dtype)npy_dtype_of(d->out_dtype);
    run_output outs[4];
    memset(outs, 0, sizeof outs);
    outs[0] = (run_output){.option = "out",
                           .path = args_get(args, "out"),
                           .dtype = o_dtype,
                           .ndim = 4,
                           .shape = o_shape,
                           .data = s->o};
    outs[1] = (run_output){.option = "lse",
                           .path = args_get(args, "lse"),
                           .dtype = NPY_F32,
                           .ndim = 3,
                           .shape = lse_shape,
                           .data = s->lse};
    size_t n = args_has(args, "lse") ? 2 : 1;
    cache_outputs(args, s, outs, &n);
    return run_write_all("run", outs, n);
}

/* --compare-lse REF.npy: <f4 [B,Hq,Nq], read before computing as --compare's REF is. */
static int load_lse_reference(const cli_args *args, run_state *s) {
    if (!args_has(args, "compare-lse")) return 0;
    if (run_load(args, "compare-lse", &s->ref_lse)) return 1;
    const clattn_attention_desc *d = &s->desc;
    size_t shape[3] = {d->batch, d->heads_q, d->len_q};
    char want[128], got[128];
    run_format_shape(shape, 3, want, sizeof want);
    run_format_shape(s->ref_lse.shape, s->ref_lse.ndim, got, sizeof got);
    const char *file = args_get(args, "compare-lse");
    if (s->ref_lse.ndim != 3 || memcmp(s->ref_lse.shape, shape, sizeof shape) != 0) {
        cli_error("run", "--compare-lse %s: shape %s differs from LSE's %s ([B,Hq,Nq])", file, got,
                  want);
        return 1;
    }
    if (s->ref_lse.dtype != NPY_F32) {
        cli_error("run", "--compare-lse %s: dtype %s is not supported (LSE is <f4)", file,
                  npy_dtype_name(s->ref_lse.dtype));
        return 1;
    }
    return 0;
}

/* --compare REF.npy: read before computing, so that a missing or mismatched reference fails
 * without writing anything. REF must have O's shape and a float dtype. */
static int load_reference(const cli_args *args, run_state *s) {
    if (load_lse_reference(args, s)) return 1;
    if (!args_has(args, "compare")) return 0;
    if (run_load(args, "compare", &s->ref)) return 1;
    const char *file = args_get(args, "compare");
    size_t shape[4];
    char want[128], got[128];
    output_shape(s, shape);
    run_format_shape(shape, 4, want, sizeof want);
    run_format_shape(s->ref.shape, s->ref.ndim, got, sizeof got);
    if (s->ref.ndim != 4 || memcmp(s->ref.shape, shape, sizeof shape) != 0) {
        cli_error("run", "--compare %s: shape %s differs from O's %s (%s)", file, got, want,
                  s->layout_kind == CLATTN_LAYOUT_BSHD ? "[B,Nq,Hq,Dv]" : "[B,Hq,Nq,Dv]");
        return 1;
    }
    if (s->ref.dtype != NPY_F32 && s->ref.dtype != NPY_F16 && s->ref.dtype != NPY_U16) {
        cli_error("run", "--compare %s: dtype %s is not supported (use <f4, <f2 or <u2)", file,
                  npy_dtype_name(s->ref.dtype));
        return 1;
    }
    return 0;
}

/* Values of an array as float (16-bit types widened). */
static float *as_floats(const void *data, size_t count, clattn_dtype dtype) {
    float *out = malloc(count * sizeof *out + 1);
    if (out) clattn_convert(dtype, data, CLATTN_F32, out, count);
    return out;
}

/* O against the saved output (of --path reference, or another device) with docs/semantics.md
 * section 4's tolerance for the storage types. Within it: a line on stdout; outside: one line on
 * stderr (O has been written: the computation itself succeeded) and 1. */
static int compare_with(const cli_args *args, const run_state *s) {
    const clattn_attention_desc *d = &s->desc;
    size_t count = s->ref.count;
    float *got = as_floats(s->o, count, d->out_dtype);
    float *want = as_floats(s->ref.data, count, run_storage_of(s->ref.dtype));
    double *want64 = malloc(count * sizeof *want64), atol, rtol, ref_atol, ref_rtol;
    case_result result = {0};
    for (size_t i = 0; want && want64 && i < count; i++) want64[i] = want[i];
    /* the loosest of all the types; q8_0 K/V has float16's tolerance */
    tolerance_for((d->kv_q8_0 || d->kv_q4_0) && d->dtype == CLATTN_F32 ? CLATTN_F16 : d->dtype,
                  d->out_dtype, &atol, &rtol);
    tolerance_for(run_storage_of(s->ref.dtype), CLATTN_F32, &ref_atol, &ref_rtol);
    atol = atol > ref_atol ? atol : ref_atol, rtol = rtol > ref_rtol ? rtol : ref_rtol;
    int ok = got && want && want64;
    if (ok) compare_values("O", got, want64, count, atol, rtol, &result);
    free(got), free(want), free(want64);
    return run_report_comparison("run", "compare", args, ok, count, &result);
}

/* LSE against --compare-lse's file with docs/semantics.md section 4's LSE tolerance (-inf exactly);
 * reported as compare_with reports O. */
static int compare_lse_with(const cli_args *args, const run_state *s) {
    size_t count = s->ref_lse.count;
    double *want = malloc(count * sizeof *want + 1);
    case_result result = {0};
    for (size_t i = 0; want && i < count; i++) want[i] = ((const float *)s->ref_lse.data)[i];
    if (want) compare_lse_values(s->lse, want, count, &result);
    free(want);
    return run_report_comparison("run", "compare-lse", args, want != NULL, count, &result);
}

int run_report_comparison(const char *command, const char *option, const cli_args *args,
                          int compared, size_t count, const case_result *r) {
    const char *file = args_get(args, option);
    const char *what = strcmp(option, "compare-lse") == 0 ? "LSE " : "";
    if (!compared)
        cli_error(command, "--%s %s: out of host memory for %zu values", option, file, count);
    else if (r->mismatches)
        cli_error(command,
                  "--%s %s: %zu of %zu values outside the tolerance (worst %.3g of it; "
                  "first: %s); %s was written",
                  option, file, r->mismatches, r->checked, r->worst, r->message,
                  args_get(args, "out"));
    else
        printf("compare %swith %s: all %zu values within the tolerance; worst %.3g of it\n", what,
               file, r->checked, r->worst);
    return compared && !r->mismatches ? 0 : 1;
}

/* --compare and --compare-lse, after the outputs are written; with --lse but without
 * --compare-lse, a line says that LSE was not compared. @return 0, or 1 when a check failed. */
int run_compare_outputs(const cli_args *args, const run_state *s) {
    int rc = 0;
    if (args_has(args, "compare")) rc |= compare_with(args, s);
    if (args_has(args, "compare-lse"))
        rc |= compare_lse_with(args, s);
    else if (args_has(args, "compare") && args_has(args, "lse"))
        printf("LSE not compared: --compare checks O; --compare-lse REF.npy checks LSE\n");
    return rc;
}

/* Options present and outputs distinct from each other and from every input. */
int run_check_args(const cli_args *args, run_state *s) {
    static const char *const required[] = {"q", "k", "v", "out"};
    static const char *const outputs[] = {"out", "lse", "k-cache-out", "v-cache-out"};
    static const char *const inputs[] = {
        "q",       "k",           "v",          "bias",         "block-layout",
        "compare", "compare-lse", "cache-len",  "k-new",        "v-new",
        "new-len", "q-len",       "page-table", "alibi-slopes", "sinks"};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        if (!args_has(args, required[i])) {
            cli_error("run", "--%s is required (see clattn help run)", required[i]);
            return EXIT_USAGE;
        }
    if (args_check_outputs(args, outputs, 4, inputs, sizeof inputs / sizeof inputs[0]))
        return EXIT_USAGE;
    if (cache_check_args(args) != 0 || run_check_shard_args(args) != 0) return EXIT_USAGE;
    static const char *const layouts[] = {"bshd", "bhsd", NULL};
    int layout = 0;
    if (args_has(args, "layout") && parse_choice(args, "layout", layouts, &layout) != 0)
        return EXIT_USAGE;
    s->layout_kind = (clattn_layout)layout;
    return 0;
}

int run_prepare(const cli_args *args, run_state *s) {
    int rc = run_load(args, "q", &s->q) || run_load(args, "k", &s->k) || run_load(args, "v", &s->v);
    if (!rc) rc = setup_shapes(args, s);
    if (!rc) rc = cache_load(args, s);
    if (!rc) rc = run_setup_mask(args, s);
    if (!rc) rc = load_reference(args, s);
    return rc;
}

/* Reads and checks everything, computes, and only then writes: a failure writes nothing. */
static int run_with_args(const cli_args *args, run_state *s) {
    int rc = run_check_args(args, s);
    if (rc) return rc;
    if (args_has(args, "distributed")) return run_distributed(args, s);
    rc = run_prepare(args, s);
    char where[256] = "";
    double t0 = seconds_now();
    if (!rc) rc = compute(args, s, where, sizeof where);
    double elapsed = seconds_now() - t0;
    if (!rc) rc = run_write_outputs(args, s);
    if (rc) return rc;
    printf("wrote %s: B=%zu Hq=%zu Hkv=%zu Nq=%zu Nk=%zu Dqk=%zu Dv=%zu, %s, %.1f ms\n",
           args_get(args, "out"), s->desc.batch, s->desc.heads_q, s->desc.heads_kv, s->desc.len_q,
           s->desc.len_k, s->desc.dim_qk, s->desc.dim_v, where, elapsed * 1e3);
    return run_compare_outputs(args, s);
}

int cmd_run(int argc, char **argv) {
    const size_t n = sizeof run_options / sizeof run_options[0];
    cli_args args;
    int parsed = args_parse(&args, run_options, n, "run", argc, argv);
    if (parsed == 1) {
        args_usage("run", "--q Q.npy --k K.npy --v V.npy --out O.npy [options]", run_options, n);
        printf("\nOutputs are written only when everything succeeded, all or none (each to a "
               "temporary name,\nthen renamed). --compare (O) and --compare-lse (LSE, "
               "|lse - ref| <= 1e-4*max(1,|ref|), -inf\nexactly) read and check REF before "
               "computing; values outside the tolerance still write the\noutputs (the "
               "computation succeeded), print one line on stderr and exit 1.\n");
        return 0;
    }
    if (parsed) return parsed;
    run_state state;
    memset(&state, 0, sizeof state);
    int rc = run_with_args(&args, &state);
    run_release(&state);
    return rc;
}
