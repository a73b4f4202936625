/*
 * The benchmarks behind `clattn bench`, as a library (clattn_bench): the program parses the
 * command line into a bench_config (cli/cmd_bench.c) and hands it to bench_run, which measures,
 * prints the tables and writes the CSV, JSON and plots. The presets (bench_apply_preset) live
 * here, beside their results (bench/README.md, bench/results/).
 *
 * Layering: cli/ -> bench/ -> hostio/. The program includes this header; the library includes
 * only hostio/ (the .npy reader for blocks:FILE patterns, outputs committed whole, the
 * interrupt sections around gnuplot, the one-line messages) and clattn's public headers, never
 * the program's: the argument parsing and every usage check stay in cli/, and what both need
 * lies below both, in hostio/, so no include runs back up and none closes a circle.
 */
#ifndef CLATTN_BENCH_H
#define CLATTN_BENCH_H

#include "clattn.h"

#include <stddef.h>
#include <stdint.h>

#define BENCH_MAX_LIST     16
#define BENCH_MAX_PATTERNS 48

typedef enum bench_path { BENCH_FUSED, BENCH_GEMM, BENCH_HOST, BENCH_REFERENCE } bench_path;

/* "fused", "gemm", "host", "reference" */
const char *bench_path_name(bench_path path);

/* ---- patterns: --pattern's items and what they set in an attention desc (pattern.c) */

typedef enum pattern_kind {
    P_FULL,
    P_CAUSAL,
    P_WINDOW,
    P_DILATED,
    P_BIGBIRD,
    P_LONGFORMER,
    P_FIXED,   /* the Sparse Transformer's "fixed" block layout */
    P_STRIDED, /* and its "strided" one */
    P_BLOCKS
} pattern_kind;

typedef struct bench_pattern {
    char text[96];
    pattern_kind kind;
    int64_t num[5]; /* the numbers after the name, in order */
    size_t count;
    char file[512];
} bench_pattern;

/* Splits "full,window:128,128,bigbird:64,3,2,3" into at most BENCH_MAX_PATTERNS patterns: a
 * word that starts with a digit (or '-') belongs to the pattern before it. Only the syntax is
 * checked (names, how many numbers); the numbers' bounds are the caller's. @return 0, or -1
 * for a malformed list. */
int bench_parse_patterns(const char *list, bench_pattern *out, size_t *count);

/* ---- what to measure */

enum { L_B, L_HQ, L_HKV, L_NQ, L_NK, L_D, L_DV }; /* bench_config's lists */

typedef enum bench_distributed_mode {
    BENCH_NOT_DISTRIBUTED,
    BENCH_RING,
    BENCH_ULYSSES
} bench_distributed_mode;

typedef struct bench_config {
    bench_path paths[4];
    size_t num_paths;
    size_t list[7][BENCH_MAX_LIST]; /* b, hq, hkv, nq, nk, d, dv */
    size_t count[7];                /* 0 for hkv, nk, dv: follow hq, nq, d */
    bench_pattern patterns[BENCH_MAX_PATTERNS];
    size_t num_patterns;
    clattn_dtype dtype;
    clattn_layout layout; /* of Q, K, V and O: [B, N, H, D] (default) or [B, H, N, D] */
    clattn_variant variant;
    clattn_gemm gemm;
    size_t warmup, repeat;
    size_t devices[16], num_devices;
    const char *csv, *json, *out;
    const char *title;  /* the plot's: the preset's name, or "clattn bench" */
    int density_curve;  /* --preset sparse: plot.png and a table after the sweep show time
                           against density, with the ideal (curve.c) */
    int curve_patterns; /* --preset sparse without --pattern: the preset's patterns, scaled to
                           each Nk (bench_curve_patterns) */
    int decode;         /* --preset decode: decode.c runs it */
    int dtype_given;    /* --dtype: decode measures only that type */
    size_t steps;       /* decode's generation mode */
    int layer;          /* --preset layer: layer.c runs it (paths[0] fused or gemm) */
    size_t kept[BENCH_MAX_LIST], num_kept; /* layer: each <= the first hq */
    bench_distributed_mode distributed;    /* --distributed: distributed.c runs it */
    clattn_sharding sharding;
} bench_config;

/* One fused path, B = 1, Hq = 8, Nq = 1024, D = 64, full, 1 warm-up and 5 repeats, 64 steps. */
void bench_config_defaults(bench_config *c);

/* Sets a ready-made sweep (quick, paths, sparse, decode, layer) over the defaults; options
 * given with it then override its settings (--pattern clears curve_patterns). Adds the host path
 * where the presets take it and OpenBLAS is there. @return 0, or -1 for an unknown name. */
int bench_apply_preset(const char *name, bench_config *c);

/* The measurements a sweep (no preset decode or layer, not distributed) takes: devices x paths x
 * shapes x patterns, each pattern scaled to each shape; at most BENCH_MAX_RECORDS a run. */
#define BENCH_MAX_RECORDS 4096
size_t bench_sweep_measurements(const bench_config *c);

/* Runs what the config asks on its devices, printing a table as it goes, and writes its
 * outputs (all or none). @return 0, or 1 after naming what failed. */
int bench_run(const bench_config *c);

#endif
