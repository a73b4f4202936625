/* What the benchmark library's files share (bench.h is what the program sees): a measurement of
 * the attention sweep (sweep.c) and its outputs (output.c), patterns as masks (pattern.c), and
 * the configs of the decode, layer and distributed sweeps (decode.c, layer.c, distributed.c),
 * which presets.c fills from a bench_config. */
#ifndef CLATTN_BENCH_SWEEPS_H
#define CLATTN_BENCH_SWEEPS_H

#include "bench.h"
#include "textbuf.h"

#include <stdint.h>

typedef struct bench_record {
    size_t device; /* device index (host and reference: the run's device anyway) */
    bench_path path;
    clattn_variant variant; /* fused: the variant that ran */
    clattn_dtype dtype;
    clattn_layout layout;
    size_t b, hq, hkv, nq, nk, dqk, dv;
    char pattern[96];
    uint64_t pairs;           /* allowed (b, h, i, j) pairs */
    double ms_min, ms_median; /* wall time around the call, end to end (inputs on the device) */
    double kernel_min, kernel_median; /* OpenCL profiling events (device paths; 0 otherwise);
                                         CLBlast reports only its last kernel of each call */
    double build_ms;       /* first call minus the median: building and caching kernels */
    uint64_t device_bytes; /* device memory the call allocated */
    uint64_t tiles_visited, tiles_total;
    char kernel[96];
} bench_record;

double bench_gflops(const bench_record *r);   /* 2 * pairs * (dqk + dv) / time */
double bench_gbytes_s(const bench_record *r); /* Q, K, V read once and O written once / time */

void bench_print_header(const clattn_device_info *device);
void bench_print_record(const bench_record *r);
void bench_csv(textbuf *t, const bench_record *records, size_t count);
void bench_json(textbuf *t, const bench_record *records, size_t count, const size_t *devices,
                size_t num_devices);
/* Stages into `set` DIR/series-K.dat (the data of one series), DIR/plot.gp that plots them,
 * and DIR/plot.png, drawn by gnuplot from the same data before anything is committed (plot.c):
 * the median time against Nq, a series a (device, path, pattern), or `against_density`, one a
 * pattern family with the ideal lines (curve.c). @return 0, or 1 with a message when gnuplot is
 * missing or fails (the set is then committed without plot.png, which stays as it was) or a
 * file cannot be staged. */
int bench_plot(const bench_record *records, size_t count, const char *dir, const char *title,
               int against_density, output_set *set);

const char *bench_layout_name(clattn_layout layout); /* "bshd", "bhsd" */

/* ---- the density curve (curve.c) */

/* --preset sparse's patterns for keys of length n: full, causal and each family at several
 * densities; lengths in tokens (window sides, block sizes) are chosen for n = 16384 and scale
 * with n / 16384, rounded and at least 1, so that every n gives about the same densities;
 * patterns that round alike are kept once. @return 0, or -1 (never, for the lengths a sweep
 * can hold). */
int bench_curve_patterns(size_t n, bench_pattern *out, size_t *count);

/* pairs / (B * Hq * Nq * Nk) */
double bench_density(const bench_record *r);

/* The index of the full-attention record of record i's device, path, variant, dtype, layout
 * and shape, or -1. */
long bench_full_record(const bench_record *records, size_t count, size_t i);

/* Record i against full attention: speedup = full's median / its median, ideal = 1 / density,
 * fraction = speedup / ideal. */
typedef struct curve_figures {
    double density, speedup, ideal, fraction;
} curve_figures;

/* Fills *f (density always). @return 1 when the figures against full are there, else 0. */
int bench_curve_figures(const bench_record *records, size_t count, size_t i, curve_figures *f);

/* The table of every record that has its full record: density, median, speed-up, ideal and
 * fraction. */
void bench_print_curve(const bench_record *records, size_t count);

/* The decode and layer presets' JSON opens with {"preset": NAME, "devices": [...], "records": [
 * and closes with bench_json_end; their records go one a line in between. */
void bench_json_begin(textbuf *t, const char *preset, const size_t *devices, size_t num_devices);
void bench_json_end(textbuf *t);
/* Stages a preset's CSV and JSON texts as their paths (--csv, --json) where given, and as
 * DIR/NAME.csv and DIR/NAME.json with --out DIR, commits them together (all or none) and
 * frees both texts. @return 0, or 1 after naming the failure. */
int bench_write_tables(const char *csv, const char *json, const char *dir, const char *name,
                       textbuf *csv_text, textbuf *json_text);

/* ---- patterns (pattern.c) */

/* What a pattern allocates for a desc. */
typedef struct pattern_data {
    uint8_t *layout;
    int64_t *globals;
} pattern_data;

/* Sets the desc's mask fields for a pattern (sizes already set); what it allocates goes into
 * *pd, freed by bench_pattern_data_free. @return 0, or 1 after naming the problem. */
int bench_apply_pattern(const bench_pattern *p, clattn_attention_desc *d, pattern_data *pd);
void bench_pattern_data_free(pattern_data *pd);

/* The attention sweep over every path, shape and pattern (sweep.c). @return 0, or 1 after
 * naming what failed. */
int bench_sweep(const bench_config *c);

/* Opens device `device` as the attention and layer sweeps measure it: event timing on, GEMM row
 * `gemm`; fills *info. @return the context, or NULL after naming the failure (sweep.c). */
clattn_context *bench_open_timed(size_t device, clattn_gemm gemm, clattn_device_info *info);

/* clattn bench --preset decode (decode.c): attention of Nq queries over full KV caches of
 * Nk rows, for each storage type, against the device's copy bandwidth, and a generation mode. */
typedef struct decode_config {
    size_t nq[16], num_nq, nk[16], num_nk;
    size_t batch, hq, hkv, d;
    clattn_dtype dtypes[5]; /* the cache's; Q and O are float32 for a q8_0 or q4_0 cache */
    size_t num_dtypes;
    size_t warmup, repeat;
    size_t steps; /* generation: tokens appended one at a time */
    size_t devices[16], num_devices;
    const char *csv, *json, *out;
} decode_config;

/* @return 0, or 1 after naming what failed. */
int bench_decode(const decode_config *c);

/* clattn bench --preset layer (layer.c): a multi-head attention layer of d_model = Hq*D,
 * for each Nq, pattern and number of kept query heads, timed end to end and in its phases. */
typedef struct layer_bench_config {
    size_t nq[16], num_nq, kept[16], num_kept;
    size_t nk; /* 0: self-attention; else cross-attention over X_kv [B, nk, d_model] */
    size_t batch, hq, hkv, d;
    clattn_gemm gemm;   /* the GEMM row (clattn_context_set_gemm) */
    clattn_dtype wtype; /* the weights' storage; X and Y are float32 */
    clattn_path path;   /* the attention's */
    clattn_variant variant;
    const bench_pattern *patterns;
    size_t num_patterns;
    size_t warmup, repeat;
    size_t devices[16], num_devices;
    const char *csv, *json, *out;
} layer_bench_config;

/* @return 0, or 1 after naming what failed. */
int bench_layer(const layer_bench_config *c);

/* clattn bench --distributed ring|ulysses (distributed.c), under mpirun: for each Nq and
 * pattern, the whole call on rank 0 alone, then sharded over every rank, with the speed-up and
 * how evenly the ranks' device work is spread. */
typedef struct distributed_config {
    int ulysses; /* else the ring */
    clattn_sharding sharding;
    size_t batch, hq, hkv, d, dv;
    size_t nq[16], num_nq, nk[16], num_nk; /* nk follows nq when num_nk is 0 */
    const bench_pattern *patterns;
    size_t num_patterns;
    clattn_dtype dtype;
    size_t warmup, repeat;
    const size_t *devices; /* rank r takes devices[local rank % num_devices] */
    size_t num_devices;
    const char *csv, *json;
} distributed_config;

/* @return 0, or 1 after naming what failed (on every rank). */
int bench_distributed(const distributed_config *c);

#endif
