/*
 * The density curve of `clattn bench --preset sparse`: the preset's patterns at one length
 * (each family, full and causal, at several densities from about 0.004 to 0.27), and, for any
 * sweep, each record's time against full attention's: its speed-up over full, the ideal
 * speed-up 1/density and the fraction of the ideal that it reaches. The CSV and JSON carry
 * these, the sparse preset prints them after its table (output.c's bench_print_curve) and
 * plots time against density (plot.c).
 */
#include "sweeps.h"

#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- the preset's patterns */

/* The length the preset's lengths in tokens are chosen for; other lengths scale them. */
#define CURVE_LENGTH 16384

/* v tokens at N = CURVE_LENGTH, scaled to keys of length n: rounded, at least 1. */
static long long scaled(long long v, size_t n) {
    long long s = (long long)((double)v * (double)n / CURVE_LENGTH + 0.5);
    return s > 0 ? s : 1;
}

/* The preset's families: each value makes one pattern, "NAME:BLOCK,VALUE" + rest with blocks
 * of 64 tokens (`blocked`), else "NAME:VALUE" + rest (twice: "NAME:VALUE,VALUE"), VALUE in
 * tokens. Densities at N = 16384 (256 blocks of 64): window 0.004 to 0.12, dilated (every
 * second key) 0.004 to 0.06, longformer (4 global tokens) 0.008 to 0.063, bigbird (band of
 * VALUE blocks, 2 global, 3 random) 0.031 to 0.144, fixed (stride VALUE, summary 1) 0.12 to
 * 0.26, strided 0.17 to 0.27: the Sparse Transformer's patterns, without causal, are no
 * sparser than about 2/sqrt(blocks). */
static const struct curve_family {
    const char *name;
    int blocked, twice;
    const char *rest;
    long long values[7]; /* ending with 0 */
} families[] = {
    {"window", 0, 1, "", {32, 64, 128, 256, 512, 1024}},
    {"dilated", 0, 1, ",2", {64, 128, 256, 512, 1024}},
    {"longformer", 0, 0, ",4", {64, 128, 256, 512}},
    {"bigbird", 1, 0, ",2,3", {1, 3, 7, 15, 31}},
    {"fixed", 1, 0, ",1", {16, 8, 6, 4}},
    {"strided", 1, 0, "", {12, 8, 6, 4}},
};

/* One pattern of a family, for keys of length n. */
static void family_pattern(const struct curve_family *f, long long value, size_t n, char *text,
                           size_t size) {
    long long tokens = scaled(value, n);
    if (f->blocked)
        snprintf(text, size, "%s:%lld,%lld%s", f->name, scaled(64, n), value, f->rest);
    else if (f->twice)
        snprintf(text, size, "%s:%lld,%lld%s", f->name, tokens, tokens, f->rest);
    else
        snprintf(text, size, "%s:%lld%s", f->name, tokens, f->rest);
}

/* The preset's --pattern list for keys of length n: full, causal, then the families. */
static void curve_list(size_t n, char *buf, size_t size) {
    snprintf(buf, size, "full,causal");
    for (size_t k = 0; k < sizeof families / sizeof *families; k++)
        for (const long long *v = families[k].values; *v; v++) {
            size_t len = strlen(buf);
            if (len + 2 >= size) return; /* never: the list takes some 600 characters */
            buf[len] = ',';
            family_pattern(&families[k], *v, n, buf + len + 1, size - len - 1);
        }
}

/* See sweeps.h. */
int bench_curve_patterns(size_t n, bench_pattern *out, size_t *count) {
    char list[2048];
    curve_list(n, list, sizeof list);
    if (bench_parse_patterns(list, out, count) != 0) return -1;
    size_t kept = 0; /* at small n, lengths that round alike give one pattern twice */
    for (size_t i = 0; i < *count; i++) {
        size_t j = 0;
        while (j < kept && strcmp(out[j].text, out[i].text) != 0) j++;
        if (j == kept) out[kept++] = out[i];
    }
    *count = kept;
    return 0;
}

/* ---------------------------------------------------------------- against full attention */

static int same_run_and_shape(const bench_record *a, const bench_record *b) {
    return a->device == b->device && a->path == b->path && a->variant == b->variant &&
           a->dtype == b->dtype && a->layout == b->layout && a->b == b->b && a->hq == b->hq &&
           a->hkv == b->hkv && a->nq == b->nq && a->nk == b->nk && a->dqk == b->dqk &&
           a->dv == b->dv;
}

/* See sweeps.h. */
long bench_full_record(const bench_record *records, size_t count, size_t i) {
    for (size_t j = 0; j < count; j++)
        if (strcmp(records[j].pattern, "full") == 0 && same_run_and_shape(&records[i], &records[j]))
            return (long)j;
    return -1;
}

/* See sweeps.h. */
double bench_density(const bench_record *r) {
    double all = (double)r->b * (double)r->hq * (double)r->nq * (double)r->nk;
    return all > 0 ? (double)r->pairs / all : 0;
}

/* See sweeps.h. */
int bench_curve_figures(const bench_record *records, size_t count, size_t i, curve_figures *f) {
    const bench_record *r = &records[i];
    long full = bench_full_record(records, count, i);
    memset(f, 0, sizeof *f);
    f->density = bench_density(r);
    if (full < 0 || f->density <= 0 || r->ms_median <= 0) return 0;
    f->speedup = records[full].ms_median / r->ms_median;
    f->ideal = 1 / f->density;
    f->fraction = f->speedup / f->ideal;
    return 1;
}
