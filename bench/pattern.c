/*
 * clattn bench's patterns: their syntax ("window:L,R", ...) and, as masks, what each --pattern
 * item sets in an attention desc (a window, global tokens, a generated or loaded block layout).
 * The attention sweep (sweep.c), the layer sweep (layer.c) and the distributed one
 * (distributed.c) apply patterns through it; the numbers' bounds are checked by the program
 * (cli/cmd_bench.c), against the same bounds as `clattn run` and `clattn pattern`.
 */
#include "message.h"
#include "npy.h"
#include "sweeps.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each pattern's name and how many numbers follow it, in pattern_kind order. */
static const struct pattern_syntax {
    const char *name;
    pattern_kind kind;
    size_t min, max;
} syntaxes[] = {
    {"full", P_FULL, 0, 0},       {"causal", P_CAUSAL, 0, 0},   {"window", P_WINDOW, 2, 2},
    {"dilated", P_DILATED, 3, 3}, {"bigbird", P_BIGBIRD, 4, 5}, {"longformer", P_LONGFORMER, 2, 2},
    {"fixed", P_FIXED, 3, 3},     {"strided", P_STRIDED, 2, 2}, {"blocks", P_BLOCKS, 2, 2},
};
#define NUM_SYNTAXES (sizeof syntaxes / sizeof syntaxes[0])

static const struct pattern_syntax *find_syntax(const char *name) {
    for (size_t k = 0; k < NUM_SYNTAXES; k++)
        if (strcmp(syntaxes[k].name, name) == 0) return &syntaxes[k];
    return NULL;
}

/* See bench.h. */
int bench_parse_patterns(const char *list, bench_pattern *out, size_t *count) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", list);
    *count = 0;
    bench_pattern *p = NULL;
    for (char *word = strtok(buf, ","); word; word = strtok(NULL, ",")) {
        int numeric = (word[0] >= '0' && word[0] <= '9') || word[0] == '-';
        if (numeric && p && p->count < 5) {
            char *end = NULL;
            p->num[p->count++] = strtoll(word, &end, 10);
            if (*end) return -1;
            snprintf(p->text + strlen(p->text), sizeof p->text - strlen(p->text), ",%s", word);
            continue;
        }
        if (numeric || *count == BENCH_MAX_PATTERNS) return -1;
        p = &out[(*count)++];
        memset(p, 0, sizeof *p);
        char *colon = strchr(word, ':');
        if (colon) *colon = '\0';
        const struct pattern_syntax *syntax = find_syntax(word);
        if (!syntax) return -1;
        p->kind = syntax->kind;
        snprintf(p->text, sizeof p->text, "%s%s", word, colon ? ":" : "");
        if (colon && p->kind == P_BLOCKS) { /* blocks:FILE,BQ,BK */
            snprintf(p->file, sizeof p->file, "%s", colon + 1);
            snprintf(p->text + strlen(p->text), sizeof p->text - strlen(p->text), "%s", colon + 1);
        } else if (colon && colon[1]) {
            char *end = NULL;
            p->num[p->count++] = strtoll(colon + 1, &end, 10);
            if (*end) return -1;
            snprintf(p->text + strlen(p->text), sizeof p->text - strlen(p->text), "%s", colon + 1);
        }
    }
    for (size_t i = 0; i < *count; i++) {
        const struct pattern_syntax *syntax = &syntaxes[out[i].kind];
        if (out[i].count < syntax->min || out[i].count > syntax->max) return -1;
    }
    return *count > 0 ? 0 : -1;
}

void bench_pattern_data_free(pattern_data *pd) {
    free(pd->layout);
    free(pd->globals);
    memset(pd, 0, sizeof *pd);
}

/* The numbers after BLOCK of a generated layout, in clattn_pattern_desc's terms. @return what
 * the message of a refused one asks for. */
static const char *layout_params(const bench_pattern *p, clattn_pattern_desc *pat) {
    switch (p->kind) {
    case P_BIGBIRD:
        pat->window = (size_t)p->num[1];
        pat->global = (size_t)p->num[2];
        pat->random = (size_t)p->num[3];
        pat->seed = p->count > 4 ? (uint64_t)p->num[4] : 0;
        return "BigBird layout (BLOCK,WINDOW(odd),GLOBAL,RANDOM[,SEED])";
    case P_FIXED:
        pat->stride = (size_t)p->num[1];
        pat->summary = (size_t)p->num[2];
        return "fixed layout (BLOCK,STRIDE,SUMMARY with 1 <= SUMMARY <= STRIDE)";
    default: /* P_STRIDED */
        pat->stride = (size_t)p->num[1];
        return "strided layout (BLOCK,STRIDE)";
    }
}

/* bigbird:, fixed:, strided:: the library's generator (clattn_pattern_layout) over blocks of
 * BLOCK queries and keys, the same layout for every head. */
static int generated_layout(const bench_pattern *p, clattn_attention_desc *d, pattern_data *pd) {
    static const clattn_pattern_kind kinds[] = {
        [P_BIGBIRD] = CLATTN_PATTERN_BIGBIRD,
        [P_FIXED] = CLATTN_PATTERN_FIXED,
        [P_STRIDED] = CLATTN_PATTERN_STRIDED,
    };
    size_t block = (size_t)p->num[0];
    clattn_pattern_desc pat;
    clattn_pattern_desc_init(&pat, kinds[p->kind], (d->len_q + block - 1) / block,
                             (d->len_k + block - 1) / block);
    const char *what = layout_params(p, &pat);
    if (!(pd->layout = malloc(pat.blocks_q * pat.blocks_k))) {
        cli_error("bench", "--pattern %s: no memory for a layout of %zu x %zu blocks", p->text,
                  pat.blocks_q, pat.blocks_k);
        return 1;
    }
    if (clattn_pattern_layout(&pat, pd->layout) != CLATTN_SUCCESS) {
        cli_error("bench", "--pattern %s: not a valid %s", p->text, what);
        return 1;
    }
    d->block_layout = pd->layout;
    d->block_q = d->block_k = block;
    return 0;
}

/* blocks:FILE,BQ,BK: a 2-D or 3-D layout from a .npy file, as clattn run reads it. */
static int file_layout(const bench_pattern *p, clattn_attention_desc *d, pattern_data *pd) {
    npy_array a;
    char err[512];
    if (npy_read(p->file, &a, err, sizeof err) != CLATTN_SUCCESS) {
        cli_error("bench", "%s", err);
        return 1;
    }
    size_t bq = (size_t)p->num[0], bk = (size_t)p->num[1];
    size_t rows = (d->len_q + bq - 1) / bq, cols = (d->len_k + bk - 1) / bk;
    int ok = (a.ndim == 2 || (a.ndim == 3 && a.shape[0] == d->heads_q)) &&
             a.shape[a.ndim - 2] == rows && a.shape[a.ndim - 1] == cols &&
             (a.dtype == NPY_U8 || a.dtype == NPY_BOOL || a.dtype == NPY_I32);
    if (ok && (pd->layout = malloc(a.count)))
        for (size_t i = 0; i < a.count; i++)
            pd->layout[i] =
                a.dtype == NPY_I32 ? ((int32_t *)a.data)[i] != 0 : ((uint8_t *)a.data)[i] != 0;
    else
        cli_error("bench",
                  "%s: a |u1, |b1 or <i4 layout of shape [%zu, %zu] or [%zu, %zu, %zu] "
                  "is needed for Nq=%zu, Nk=%zu",
                  p->file, rows, cols, d->heads_q, rows, cols, d->len_q, d->len_k);
    d->block_layout = pd->layout;
    d->block_q = bq, d->block_k = bk;
    d->block_layout_per_head = a.ndim == 3;
    npy_free(&a);
    return pd->layout ? 0 : 1;
}

int bench_apply_pattern(const bench_pattern *p, clattn_attention_desc *d, pattern_data *pd) {
    switch (p->kind) {
    case P_FULL:
        return 0;
    case P_CAUSAL:
        d->causal = 1;
        return 0;
    case P_DILATED:              /* the numbers passed check_patterns */
        d->dilation = p->num[2]; /* fall through */
    case P_WINDOW:
        d->window_left = p->num[0];
        d->window_right = p->num[1];
        return 0;
    case P_LONGFORMER: { /* window of W each side; the first G positions are global */
        size_t g = (size_t)p->num[1];
        if (g > d->len_k) g = d->len_k;
        d->window_left = d->window_right = p->num[0];
        if (g && !(pd->globals = malloc(g * sizeof *pd->globals))) return 1;
        for (size_t i = 0; i < g; i++) pd->globals[i] = (int64_t)i;
        d->global_tokens = pd->globals;
        d->num_global_tokens = g;
        return 0;
    }
    case P_BIGBIRD:
    case P_FIXED:
    case P_STRIDED:
        return generated_layout(p, d, pd);
    case P_BLOCKS:
        return file_layout(p, d, pd);
    }
    return 1;
}
