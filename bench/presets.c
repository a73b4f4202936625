/*
 * clattn bench's presets, beside their results (bench/README.md, bench/results/): quick, paths
 * and sparse sweep the attention (sweep.c); decode times a KV cache (decode.c); layer times a
 * multi-head attention layer (layer.c). bench_run hands a config to the sweep it asks for,
 * with the sizes each takes (the first B, Hq, Hkv, D where a sweep takes one).
 */
#include "common.h"
#include "host_attention.h"
#include "message.h"
#include "sweeps.h"

#include <string.h>

void bench_config_defaults(bench_config *c) {
    memset(c, 0, sizeof *c);
    c->paths[0] = BENCH_FUSED, c->num_paths = 1;
    c->list[L_B][0] = 1, c->count[L_B] = 1;
    c->list[L_HQ][0] = 8, c->count[L_HQ] = 1;
    c->list[L_NQ][0] = 1024, c->count[L_NQ] = 1;
    c->list[L_D][0] = 64, c->count[L_D] = 1;
    c->layout = CLATTN_LAYOUT_BSHD;
    c->warmup = 1, c->repeat = 5, c->steps = 64;
    c->title = "clattn bench";
    bench_parse_patterns("full", c->patterns, &c->num_patterns);
}

/* Ready-made sweeps; explicit options given with them override their settings. */
int bench_apply_preset(const char *name, bench_config *c) {
    if (strcmp(name, "quick") == 0) {
        c->paths[0] = BENCH_FUSED, c->num_paths = 1;
        if (host_attention_available()) c->paths[c->num_paths++] = BENCH_HOST;
        c->list[L_NQ][0] = 1024, c->count[L_NQ] = 1;
        c->repeat = 3;
        return bench_parse_patterns("full,causal", c->patterns, &c->num_patterns);
    }
    if (strcmp(name, "paths") == 0) {
        c->paths[0] = BENCH_FUSED, c->paths[1] = BENCH_GEMM, c->num_paths = 2;
        if (host_attention_available()) c->paths[c->num_paths++] = BENCH_HOST;
        static const size_t lengths[] = {512, 1024, 2048, 4096};
        memcpy(c->list[L_NQ], lengths, sizeof lengths), c->count[L_NQ] = 4;
        c->repeat = 3;
        return bench_parse_patterns("full,causal", c->patterns, &c->num_patterns);
    }
    if (strcmp(name, "sparse") == 0) { /* time against density at one length (curve.c) */
        c->list[L_NQ][0] = 16384, c->count[L_NQ] = 1;
        c->list[L_HQ][0] = 4, c->count[L_HQ] = 1;
        c->layout = CLATTN_LAYOUT_BHSD; /* PyTorch's: the lanes variant reads K and V in place */
        c->repeat = 3;
        c->density_curve = c->curve_patterns = 1;
        return bench_curve_patterns(16384, c->patterns, &c->num_patterns);
    }
    if (strcmp(name, "decode") == 0) { /* the decode issue's shape: GQA 32/8, D = 128 */
        static const size_t lengths[] = {1024, 4096, 16384, 32768, 131072}, queries[] = {1, 4};
        memcpy(c->list[L_NK], lengths, sizeof lengths), c->count[L_NK] = 5;
        memcpy(c->list[L_NQ], queries, sizeof queries), c->count[L_NQ] = 2;
        c->list[L_HQ][0] = 32, c->count[L_HQ] = 1;
        c->list[L_HKV][0] = 8, c->count[L_HKV] = 1;
        c->list[L_D][0] = 128, c->count[L_D] = 1;
        c->repeat = 5, c->decode = 1;
        return 0;
    }
    if (strcmp(name, "layer") == 0) { /* a 7B-class model's attention: GQA 32/8, D = 128 */
        c->list[L_NQ][0] = 2048, c->count[L_NQ] = 1;
        c->list[L_HQ][0] = 32, c->count[L_HQ] = 1;
        c->list[L_HKV][0] = 8, c->count[L_HKV] = 1;
        c->list[L_D][0] = 128, c->count[L_D] = 1;
        c->repeat = 3, c->layer = 1;
        return bench_parse_patterns("causal", c->patterns, &c->num_patterns);
    }
    return -1;
}

/* ---------------------------------------------------------------- decode */

/* --preset decode: the sizes and settings handed to bench_decode (first B, Hq, Hkv, D). */
static int run_decode(const bench_config *c) {
    decode_config dc;
    memset(&dc, 0, sizeof dc);
    dc.num_nq = c->count[L_NQ], dc.num_nk = c->count[L_NK] ? c->count[L_NK] : c->count[L_NQ];
    memcpy(dc.nq, c->list[L_NQ], sizeof dc.nq);
    memcpy(dc.nk, c->count[L_NK] ? c->list[L_NK] : c->list[L_NQ], sizeof dc.nk);
    dc.batch = c->list[L_B][0], dc.hq = c->list[L_HQ][0], dc.d = c->list[L_D][0];
    dc.hkv = c->count[L_HKV] ? c->list[L_HKV][0] : dc.hq;
    static const clattn_dtype all[] = {CLATTN_F32, CLATTN_F16, CLATTN_BF16, CLATTN_Q8_0,
                                       CLATTN_Q4_0};
    dc.num_dtypes = c->dtype_given ? 1 : ARRAY_LEN(all);
    memcpy(dc.dtypes, c->dtype_given ? &c->dtype : all, dc.num_dtypes * sizeof *all);
    dc.warmup = c->warmup, dc.repeat = c->repeat, dc.steps = c->steps;
    memcpy(dc.devices, c->devices, sizeof dc.devices), dc.num_devices = c->num_devices;
    dc.csv = c->csv, dc.json = c->json, dc.out = c->out;
    return bench_decode(&dc);
}

/* --preset layer: the sizes and settings handed to bench_layer (first B, Hq, Hkv, D; the
 * attention's path is the first of --path, fused or gemm: the program checked). */
static int run_layer(const bench_config *c) {
    layer_bench_config lc;
    memset(&lc, 0, sizeof lc);
    memcpy(lc.nq, c->list[L_NQ], sizeof lc.nq), lc.num_nq = c->count[L_NQ];
    lc.nk = c->count[L_NK] ? c->list[L_NK][0] : 0; /* cross-attention over X_kv of Nk rows */
    lc.gemm = c->gemm;
    lc.batch = c->list[L_B][0], lc.hq = c->list[L_HQ][0], lc.d = c->list[L_D][0];
    lc.hkv = c->count[L_HKV] ? c->list[L_HKV][0] : lc.hq;
    memcpy(lc.kept, c->kept, sizeof lc.kept), lc.num_kept = c->num_kept;
    if (!c->num_kept) { /* every head, then the first half of them */
        lc.kept[0] = lc.hq, lc.kept[1] = lc.hq / 2;
        lc.num_kept = lc.hq > 1 ? 2 : 1;
    }
    lc.wtype = c->dtype, lc.variant = c->variant;
    lc.path = c->paths[0] == BENCH_GEMM ? CLATTN_PATH_GEMM : CLATTN_PATH_FUSED;
    lc.patterns = c->patterns, lc.num_patterns = c->num_patterns;
    lc.warmup = c->warmup, lc.repeat = c->repeat;
    memcpy(lc.devices, c->devices, sizeof lc.devices), lc.num_devices = c->num_devices;
    lc.csv = c->csv, lc.json = c->json, lc.out = c->out;
    return bench_layer(&lc);
}

/* ---------------------------------------------------------------- distributed */

/* --distributed: the first B, Hq, Hkv, D and Dv, every Nq (and Nk) and pattern, handed to
 * bench_distributed (distributed.c, built with MPI; the program checked the options). */
static int run_distributed(const bench_config *c) {
#ifdef CLATTN_HAVE_MPI
    distributed_config d = {c->distributed == BENCH_ULYSSES,
                            c->sharding,
                            c->list[L_B][0],
                            c->list[L_HQ][0],
                            c->count[L_HKV] ? c->list[L_HKV][0] : c->list[L_HQ][0],
                            c->list[L_D][0],
                            c->count[L_DV] ? c->list[L_DV][0] : c->list[L_D][0],
                            {0},
                            c->count[L_NQ],
                            {0},
                            c->count[L_NK],
                            c->patterns,
                            c->num_patterns,
                            c->dtype,
                            c->warmup,
                            c->repeat,
                            c->devices,
                            c->num_devices,
                            c->csv,
                            c->json};
    memcpy(d.nq, c->list[L_NQ], sizeof d.nq), memcpy(d.nk, c->list[L_NK], sizeof d.nk);
    return bench_distributed(&d);
#else
    cli_error("bench", "--distributed: this clattn was built without MPI (libclattn_mpi)");
    return 1;
#endif
}

int bench_run(const bench_config *c) {
    if (c->distributed != BENCH_NOT_DISTRIBUTED) return run_distributed(c);
    if (c->decode) return run_decode(c);
    if (c->layer) return run_layer(c);
    return bench_sweep(c);
}
