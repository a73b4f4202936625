/*
 * clattn layer: a multi-head attention layer from .npy files, as `clattn run` does attention.
 * X is [B, N, d_model] (and X_kv [B, Nk, d_kv] for cross-attention); the weights are 2-D
 * [out, in] as nn.Linear stores them, the biases 1-D, the head mask 1-D [Hq]; the heads come
 * from --heads (Dqk = rows of W_q / Hq) and --kv-heads (default: rows of W_k / Dqk). Every file
 * is read and checked first; Y is written only when everything succeeded.
 */
#include "args.h"
#include "commands.h"
#include "common.h"
#include "conformance.h"
#include "npy.h"
#include "run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cli_option layer_options[] = {
    {"x", "X.npy", "input [B,N,d_model]"},
    {"x-kv", "XKV.npy", "cross-attention: keys and values from [B,Nk,d_kv]"},
    {"wq", "WQ.npy", "W_q [Hq*Dqk, d_model] ([out, in], as nn.Linear)"},
    {"wk", "WK.npy", "W_k [Hkv*Dqk, d_kv]"},
    {"wv", "WV.npy", "W_v [Hkv*Dv, d_kv]"},
    {"wo", "WO.npy", "W_o [d_model, Hq*Dv]"},
    {"bq", "BQ.npy", "bias of Q [Hq*Dqk]"},
    {"bk", "BK.npy", "bias of K [Hkv*Dqk]"},
    {"bv", "BV.npy", "bias of V [Hkv*Dv]"},
    {"bo", "BO.npy", "bias of Y [d_model]"},
    {"heads", "H", "query heads (required)"},
    {"kv-heads", "HKV", "key/value heads (default: rows of W_k / Dqk)"},
    {"head-mask", "M.npy", "heads kept, [H] |u1, |b1 or <i4 (nonzero: kept)"},
    {"causal", NULL, "causal mask, aligned to the end of the keys"},
    {"window", "L,R", "sliding window; -1 = unbounded (write --window=-1,0)"},
    {"dilation", "N", "window dilation (default 1)"},
    {"global", "I,J,...", "global token positions (key positions)"},
    {"block-layout", "L.npy", "block-sparse layout, |u1 |b1 or <i4, 2-D or 3-D [H, ...]"},
    {"block-size", "BQ,BK", "block size of the layout"},
    {"bias", "BIAS.npy", "additive attention bias [N,Nk], [H,N,Nk] or [B,H,N,Nk]; -inf masks"},
    {"scale", "S", "score scale (default 1/sqrt(Dqk))"},
    {"storage", "f32|f16|bf16",
     "round X, X_kv, weights and biases to this type first (default: their own; <u2: bfloat16)"},
    {"out-dtype", "f32|f16|bf16", "storage of Y (default: X's)"},
    {"path", "auto|fused|gemm|reference",
     "the attention's path; reference: the whole layer on the CPU reference"},
    {"variant", "NAME", "the attention's kernel variant (default auto)"},
    {"gemm", "NAME", "the GEMM row of the projections: auto, clblast, panels (default auto)"},
    {"device", "SPEC", "device: index, P:D, name, gpu|cpu|accelerator"},
    {"compare", "REF.npy", "check Y against REF.npy ([B,N,d_model]) with the layer's tolerance"},
    {"out", "Y.npy", "output [B,N,d_model]"},
    {"help", NULL, "show this help"},
};

/* The files, in one order: X, X_kv, then the parameters as clattn_mha_desc lists them. */
enum { F_X, F_XKV, F_WQ, F_WK, F_WV, F_WO, F_BQ, F_BK, F_BV, F_BO, F_FILES };
static const char *const file_options[F_FILES] = {"x",  "x-kv", "wq", "wk", "wv",
                                                  "wo", "bq",   "bk", "bv", "bo"};

typedef struct layer_state {
    npy_array files[F_FILES]; /* absent: count 0, data NULL */
    npy_array mask_file;
    uint8_t *keep;
    size_t b, n, nk, d_model, d_kv, hq, hkv, dqk, dv;
    clattn_dtype x_dtype, w_dtype;
    clattn_mha_desc layer;
    run_state run; /* run.desc: the call (mask options), run.ref: --compare */
    void *y;
} layer_state;

static void layer_release(layer_state *s) {
    for (int f = 0; f < F_FILES; f++) npy_free(&s->files[f]);
    npy_free(&s->mask_file);
    free(s->keep);
    free(s->y);
    run_release(&s->run);
}

static const char *file_of(const cli_args *args, int f) {
    return args_get(args, file_options[f]);
}

/* Reads every file given, checking ranks and dtypes (float: <f4, <f2, <u2). */
static int load_files(const cli_args *args, layer_state *s) {
    for (int f = 0; f < F_FILES; f++) {
        if (!args_has(args, file_options[f])) continue;
        if (run_load(args, file_options[f], &s->files[f])) return 1;
        const npy_array *a = &s->files[f];
        size_t want = f <= F_XKV ? 3 : f <= F_WO ? 2 : 1;
        if (a->ndim != want) {
            cli_error("layer", "%s: expected a %zu-D array, got %zu-D", file_of(args, f), want,
                      a->ndim);
            return 1;
        }
        if (a->dtype != NPY_F32 && a->dtype != NPY_F16 && a->dtype != NPY_U16) {
            cli_error("layer", "%s: dtype %s is not supported (use <f4, <f2, or <u2 bfloat16 bits)",
                      file_of(args, f), npy_dtype_name(a->dtype));
            return 1;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- shapes */

/* Dimension `dim` of file f, when given, must be `want`. @return 0, or 1 after naming it. */
static int expect_dim(const cli_args *args, const layer_state *s, int f, size_t dim, size_t want,
                      const char *why) {
    const npy_array *a = &s->files[f];
    if (!args_has(args, file_options[f]) || a->shape[dim] == want) return 0;
    char shape[128];
    run_format_shape(a->shape, a->ndim, shape, sizeof shape);
    cli_error("layer", "%s: shape %s: dimension %zu must be %zu (%s)", file_of(args, f), shape, dim,
              want, why);
    return 1;
}

/* Hq from --heads, Dqk from W_q's rows, Hkv from --kv-heads or W_k's rows, Dv from W_v's. */
static int derive_heads(const cli_args *args, layer_state *s) {
    const size_t rq = s->files[F_WQ].shape[0], rk = s->files[F_WK].shape[0];
    const size_t rv = s->files[F_WV].shape[0];
    if (parse_size(args, "heads", 1, &s->hq) != 0) return EXIT_USAGE;
    if (args_has(args, "kv-heads") && parse_size(args, "kv-heads", 1, &s->hkv) != 0)
        return EXIT_USAGE;
    s->dqk = rq / s->hq;
    if (rq % s->hq || s->dqk == 0) {
        cli_error("layer", "%s has %zu rows: not Hq*Dqk for --heads %zu", file_of(args, F_WQ), rq,
                  s->hq);
        return 1;
    }
    if (!args_has(args, "kv-heads")) s->hkv = rk / s->dqk;
    if (s->hkv == 0 || rk != s->hkv * s->dqk || s->hq % s->hkv || rv % s->hkv || rv == 0) {
        cli_error("layer",
                  "%s has %zu rows and %s %zu: not Hkv*Dqk and Hkv*Dv for Hkv=%zu (dividing "
                  "Hq=%zu) and Dqk=%zu",
                  file_of(args, F_WK), rk, file_of(args, F_WV), rv, s->hkv, s->hq, s->dqk);
        return 1;
    }
    s->dv = rv / s->hkv;
    return 0;
}

/* Every file's shape against X's and the heads'. */
static int check_shapes(const cli_args *args, layer_state *s) {
    const npy_array *x = &s->files[F_X];
    s->b = x->shape[0], s->n = x->shape[1], s->d_model = x->shape[2];
    int rc = derive_heads(args, s);
    if (rc) return rc;
    s->d_kv = s->files[F_WK].shape[1];
    s->nk = args_has(args, "x-kv") ? s->files[F_XKV].shape[1] : s->n;
    if (expect_dim(args, s, F_WQ, 1, s->d_model, "X's width d_model") ||
        expect_dim(args, s, F_WV, 1, s->d_kv, "W_k's width d_kv") ||
        expect_dim(args, s, F_WO, 0, s->d_model, "X's width d_model") ||
        expect_dim(args, s, F_WO, 1, s->hq * s->dv, "Hq*Dv") ||
        expect_dim(args, s, F_BQ, 0, s->hq * s->dqk, "rows of W_q") ||
        expect_dim(args, s, F_BK, 0, s->hkv * s->dqk, "rows of W_k") ||
        expect_dim(args, s, F_BV, 0, s->hkv * s->dv, "rows of W_v") ||
        expect_dim(args, s, F_BO, 0, s->d_model, "d_model") ||
        expect_dim(args, s, F_XKV, 0, s->b, "X's batch") ||
        expect_dim(args, s, F_XKV, 2, s->d_kv, "W_k's width d_kv"))
        return 1;
    if (!args_has(args, "x-kv") && s->d_kv != s->d_model) {
        cli_error("layer", "%s reads %zu columns but X has %zu: give --x-kv for cross-attention",
                  file_of(args, F_WK), s->d_kv, s->d_model);
        return 1;
    }
    return 0;
}

/* ---------------------------------------------------------------- types */

/* X and X_kv share a type, the weights and biases another; --storage rounds all of them to
 * one; <u2 arrays (bfloat16 bit patterns) only with --storage bf16. */
static int setup_types(const cli_args *args, layer_state *s) {
    static const char *const dtypes[] = {"f32", "f16", "bf16", NULL}; /* clattn_dtype order */
    int choice = 0, given = args_has(args, "storage");
    if (given && parse_choice(args, "storage", dtypes, &choice) != 0) return EXIT_USAGE;
    for (int f = 0; f < F_FILES; f++) {
        const npy_array *a = &s->files[f], *first = &s->files[f < F_WQ ? F_X : F_WQ];
        if (!args_has(args, file_options[f])) continue;
        if (a->dtype == NPY_U16 && (!given || choice != CLATTN_BF16)) {
            cli_error("layer",
                      "%s: <u2 arrays are read as bfloat16 bit patterns, with --storage "
                      "bf16 only",
                      file_of(args, f));
            return 1;
        }
        if (!given && a->dtype != first->dtype) {
            cli_error("layer", "%s is %s but %s is %s: %s", file_of(args, f),
                      npy_dtype_name(a->dtype), file_of(args, f < F_WQ ? F_X : F_WQ),
                      npy_dtype_name(first->dtype),
                      f < F_WQ ? "X and X_kv share a type" : "weights and biases share a type");
            return 1;
        }
    }
    s->x_dtype = run_storage_of(s->files[F_X].dtype);
    s->w_dtype = run_storage_of(s->files[F_WQ].dtype);
    for (int f = 0; given && f < F_FILES; f++)
        if (args_has(args, file_options[f]) &&
            run_convert_array(&s->files[f], run_storage_of(s->files[f].dtype),
                              (clattn_dtype)choice)) {
            cli_error("layer", "out of host memory converting %s", file_of(args, f));
            return 1;
        }
    if (given) s->x_dtype = s->w_dtype = (clattn_dtype)choice;
    return 0;
}

/* --head-mask M.npy: [Hq] |u1, |b1 or <i4, nonzero kept. */
static int load_head_mask(const cli_args *args, layer_state *s) {
    if (!args_has(args, "head-mask")) return 0;
    if (run_load(args, "head-mask", &s->mask_file)) return 1;
    const npy_array *m = &s->mask_file;
    if (m->ndim != 1 || m->shape[0] != s->hq ||
        (m->dtype != NPY_U8 && m->dtype != NPY_BOOL && m->dtype != NPY_I32)) {
        cli_error("layer", "%s: a head mask is [%zu] (one a query head) of |u1, |b1 or <i4",
                  args_get(args, "head-mask"), s->hq);
        return 1;
    }
    if (!(s->keep = malloc(s->hq))) return 1;
    for (size_t h = 0; h < s->hq; h++)
        s->keep[h] = m->dtype == NPY_I32 ? ((const int32_t *)m->data)[h] != 0
                                         : ((const uint8_t *)m->data)[h] != 0;
    return 0;
}

/* The layer's desc (host arrays) and the call's (sizes; run_setup_mask adds the options). */
static int setup_descs(const cli_args *args, layer_state *s) {
    clattn_mha_desc *d = &s->layer;
    clattn_mha_desc_init(d, s->d_model, s->hq, s->hkv, s->dqk, s->dv);
    d->d_kv = s->d_kv, d->weight_dtype = s->w_dtype, d->head_mask = s->keep;
    clattn_mha_param *params[8] = {&d->w_q, &d->w_k, &d->w_v, &d->w_o,
                                   &d->b_q, &d->b_k, &d->b_v, &d->b_o};
    for (int f = F_WQ; f < F_FILES; f++) params[f - F_WQ]->host = s->files[f].data;
    clattn_attention_desc *call = &s->run.desc;
    /* desc_init refuses a zero size before recording any: the library's check names them */
    clattn_attention_desc_init(call, CLATTN_LAYOUT_BSHD, s->b ? s->b : 1, s->hq, s->hkv,
                               s->n ? s->n : 1, s->nk ? s->nk : 1, s->dqk, s->dv);
    call->batch = s->b, call->len_q = s->n, call->len_k = s->nk;
    call->dtype = call->out_dtype = s->x_dtype;
    return run_setup_mask(args, &s->run);
}

/* ---------------------------------------------------------------- computing */

/* --compare REF.npy, read before computing: [B, N, d_model], a float type. */
static int load_reference(const cli_args *args, layer_state *s) {
    if (!args_has(args, "compare")) return 0;
    npy_array *ref = &s->run.ref;
    if (run_load(args, "compare", ref)) return 1;
    size_t want[3] = {s->b, s->n, s->d_model};
    if (ref->ndim != 3 || memcmp(ref->shape, want, sizeof want) != 0 ||
        (ref->dtype != NPY_F32 && ref->dtype != NPY_F16 && ref->dtype != NPY_U16)) {
        char got[128], shape[128];
        run_format_shape(ref->shape, ref->ndim, got, sizeof got);
        run_format_shape(want, 3, shape, sizeof shape);
        cli_error("layer", "--compare %s: %s %s; Y is %s [B,N,d_model] of <f4, <f2 or <u2",
                  args_get(args, "compare"), got, npy_dtype_name(ref->dtype), shape);
        return 1;
    }
    return 0;
}

/* The whole layer on the CPU reference. */
static int compute_reference(layer_state *s, char *where, size_t where_size) {
    char err[1024] = "";
    clattn_status status = clattn_attention_desc_check(&s->run.desc, NULL, err, sizeof err);
    if (status == CLATTN_SUCCESS)
        status = clattn_mha_reference(&s->layer, &s->run.desc, s->files[F_X].data,
                                      s->files[F_XKV].data, s->y);
    if (status != CLATTN_SUCCESS) {
        cli_error("layer", "reference: %s (%s)", *err ? err : clattn_status_string(status),
                  clattn_status_name(status));
        return 1;
    }
    snprintf(where, where_size, "reference (CPU)");
    return 0;
}

/* --gemm's row (auto when not given). @return 0, or EXIT_USAGE after saying why. */
static int layer_gemm(const cli_args *args, clattn_gemm *gemm) {
    *gemm = CLATTN_GEMM_AUTO;
    if (!args_has(args, "gemm") || !clattn_gemm_from_name(args_get(args, "gemm"), gemm)) return 0;
    cli_error("layer", "--gemm: expected auto, clblast or panels, got '%s'",
              args_get(args, "gemm"));
    return EXIT_USAGE;
}

/* The layer on a device: created, run once, described. */
static int compute_device(const cli_args *args, layer_state *s, char *where, size_t where_size) {
    clattn_context *ctx = NULL;
    clattn_mha *mha = NULL;
    clattn_gemm gemm;
    int rc = layer_gemm(args, &gemm);
    if (!rc) rc = cli_open_context("layer", args_get(args, "device"), &ctx);
    if (rc != 0) return rc;
    clattn_status status = clattn_context_set_gemm(ctx, gemm);
    if (status == CLATTN_SUCCESS) status = clattn_mha_create(ctx, &s->layer, &mha);
    if (status != CLATTN_SUCCESS) cli_report("layer", "creating the layer", status, ctx);
    if (status == CLATTN_SUCCESS) {
        status = clattn_mha_forward_host(mha, &s->run.desc, s->files[F_X].data,
                                         s->files[F_XKV].data, s->y);
        if (status != CLATTN_SUCCESS) cli_report("layer", "forward", status, ctx);
    }
    clattn_mha_stats stats;
    clattn_mha_info info;
    clattn_device_info device;
    clattn_mha_stats_init(&stats), clattn_mha_info_init(&info);
    clattn_device_info_init(&device);
    if (status == CLATTN_SUCCESS && clattn_mha_last_stats(mha, &stats) == CLATTN_SUCCESS &&
        clattn_mha_get_info(mha, &info) == CLATTN_SUCCESS &&
        clattn_context_device_info(ctx, &device) == CLATTN_SUCCESS)
        snprintf(where, where_size,
                 "%zu of %zu heads kept (attention Hq=%zu Hkv=%zu), %s, GEMMs %s (%s) on %s",
                 info.heads_kept, info.heads_q, info.attention_heads_q, info.attention_heads_kv,
                 stats.kernel, clattn_gemm_name(stats.output_gemm), stats.gemm_kernel, device.name);
    clattn_mha_destroy(mha);
    clattn_context_destroy(ctx);
    return status == CLATTN_SUCCESS ? 0 : 1;
}

/* Y against REF with the layer's tolerance (the looser of Y's and REF's storage types).
 * Within it: a line on stdout; outside: one line on stderr (Y has been written) and 1. */
static int compare_with(const cli_args *args, const layer_state *s) {
    size_t count = s->run.ref.count;
    clattn_dtype y_dtype = s->run.desc.out_dtype, ref_dtype = run_storage_of(s->run.ref.dtype);
    float *got = malloc(count * sizeof *got + 1), *want = malloc(count * sizeof *want + 1);
    double *want64 = malloc(count * sizeof *want64 + 1), atol, rtol, ref_atol, ref_rtol;
    case_result result = {0};
    int ok = got && want && want64;
    if (ok) {
        clattn_convert(y_dtype, s->y, CLATTN_F32, got, count);
        clattn_convert(ref_dtype, s->run.ref.data, CLATTN_F32, want, count);
        for (size_t i = 0; i < count; i++) want64[i] = want[i];
        layer_tolerance(y_dtype, want64, count, &atol, &rtol);
        layer_tolerance(ref_dtype, want64, count, &ref_atol, &ref_rtol);
        compare_values("Y", got, want64, count, atol > ref_atol ? atol : ref_atol,
                       rtol > ref_rtol ? rtol : ref_rtol, &result);
    }
    free(got), free(want), free(want64);
    return run_report_comparison("layer", "compare", args, ok, count, &result);
}

/* ---------------------------------------------------------------- the command */

/* Options present, the output apart from every input. */
static int check_layer_args(const cli_args *args) {
    static const char *const required[] = {"x", "wq", "wk", "wv", "wo", "heads", "out"};
    static const char *const outputs[] = {"out"};
    static const char *const inputs[] = {"x",         "x-kv", "wq",           "wk",     "wv",
                                         "wo",        "bq",   "bk",           "bv",     "bo",
                                         "head-mask", "bias", "block-layout", "compare"};
    for (size_t i = 0; i < ARRAY_LEN(required); i++)
        if (!args_has(args, required[i])) {
            cli_error("layer", "--%s is required (see clattn help layer)", required[i]);
            return EXIT_USAGE;
        }
    clattn_gemm gemm; /* checked on every path, the reference's too */
    int rc = layer_gemm(args, &gemm);
    return rc ? rc : args_check_outputs(args, outputs, 1, inputs, ARRAY_LEN(inputs));
}

/* Reads and checks everything, computes, and only then writes: a failure writes nothing. */
static int layer_with_args(const cli_args *args, layer_state *s) {
    int rc = check_layer_args(args);
    if (!rc) rc = load_files(args, s);
    if (!rc) rc = check_shapes(args, s);
    if (!rc) rc = setup_types(args, s);
    if (!rc) rc = load_head_mask(args, s);
    if (!rc) rc = setup_descs(args, s);
    if (!rc) rc = load_reference(args, s);
    if (rc) return rc;
    size_t count = s->b * s->n * s->d_model, elem = s->run.desc.out_dtype == CLATTN_F32 ? 4 : 2;
    if (!(s->y = malloc(count * elem + 1))) {
        cli_error("layer", "out of host memory for Y (%zu values)", count);
        return 1;
    }
    char where[512] = "";
    double t0 = seconds_now();
    rc = s->run.desc.path == CLATTN_PATH_REFERENCE ? compute_reference(s, where, sizeof where)
                                                   : compute_device(args, s, where, sizeof where);
    double elapsed = seconds_now() - t0;
    size_t shape[3] = {s->b, s->n, s->d_model};
    run_output out = {.option = "out",
                      .path = args_get(args, "out"),
                      .dtype = (npy_dtype)npy_dtype_of(s->run.desc.out_dtype),
                      .ndim = 3,
                      .shape = shape,
                      .data = s->y};
    if (!rc) rc = run_write_all("layer", &out, 1);
    if (rc) return rc;
    printf("wrote %s: B=%zu N=%zu Nk=%zu d_model=%zu d_kv=%zu Hq=%zu Hkv=%zu Dqk=%zu Dv=%zu, %s, "
           "%.1f ms\n",
           args_get(args, "out"), s->b, s->n, s->nk, s->d_model, s->d_kv, s->hq, s->hkv, s->dqk,
           s->dv, where, elapsed * 1e3);
    return args_has(args, "compare") ? compare_with(args, s) : 0;
}

int cmd_layer(int argc, char **argv) {
    const size_t n = ARRAY_LEN(layer_options);
    cli_args args;
    int parsed = args_parse(&args, layer_options, n, "layer", argc, argv);
    if (parsed == 1) {
        args_usage("layer",
                   "--x X.npy --wq WQ.npy --wk WK.npy --wv WV.npy --wo WO.npy --heads H "
                   "--out Y.npy [options]",
                   layer_options, n);
        printf(
            "\nY = attention(X W_q^T + b_q, X_kv W_k^T + b_k, X_kv W_v^T + b_v) W_o^T + b_o, "
            "X_kv = X\nwithout --x-kv. Y is written only when everything succeeded. "
            "--compare uses the layer's\ntolerance: the contract's for Y's type, its absolute term "
            "scaled by the largest |REF|.\n");
        return 0;
    }
    if (parsed) return parsed;
    static layer_state state;
    memset(&state, 0, sizeof state);
    int rc = layer_with_args(&args, &state);
    layer_release(&state);
    return rc;
}
