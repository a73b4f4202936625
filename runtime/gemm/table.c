/*
 * The GEMM table (gemm.h): its rows in `auto`'s order, the choice of a row for a call, the
 * rows' tuning through the database, and running a call on its row. Adding a GEMM row adds a
 * line here and a file beside this one (docs/variants.md, "The GEMM table").
 */
#include "gemm/gemm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const gemm_row gemm_panels, gemm_clblast;

static const gemm_row *const table[] = {
    &gemm_panels,  /* CPU devices: clattn's own kernel */
    &gemm_clblast, /* every device */
};

const gemm_row *const *gemm_table(size_t *count) {
    *count = ARRAY_LEN(table);
    return table;
}

const gemm_row *gemm_find(clattn_gemm id) {
    for (size_t i = 0; i < ARRAY_LEN(table); i++)
        if (table[i]->id == id) return table[i];
    return NULL;
}

const gemm_row *gemm_named(const char *name) {
    for (size_t i = 0; name && i < ARRAY_LEN(table); i++)
        if (strcmp(table[i]->name, name) == 0) return table[i];
    return NULL;
}

gemm_desc gemm_desc_single(size_t m, size_t n, size_t k, const char *what) {
    gemm_desc g;
    memset(&g, 0, sizeof g);
    g.m = m, g.n = n, g.k = k;
    g.count = g.heads = g.group = 1;
    g.alpha = 1.0f;
    g.what = what;
    return g;
}

/* ---------------------------------------------------------------- tuning */

static tuning_subject subject_of(const gemm_row *row) {
    tuning_subject s = {row->name, NULL, row->defaults, row->num_defaults};
    return s;
}

tuning_source gemm_tuning(clattn_context *ctx, const gemm_row *row, tuning_params *out) {
    tuning_subject subject = subject_of(row);
    return tuning_lookup_context(ctx, &subject, out);
}

tuning_source gemm_tuning_on(const clattn_device_info *device, const gemm_row *row,
                             tuning_params *out) {
    tuning_subject subject = subject_of(row);
    return tuning_lookup(device, &subject, out);
}

/* ---------------------------------------------------------------- the context's choice */

static void choice_release(clattn_context *ctx) {
    void **slot = context_data(ctx, choice_release);
    if (slot) free(*slot);
}

clattn_status gemm_set_choice(clattn_context *ctx, clattn_gemm gemm) {
    void **slot = context_data(ctx, choice_release);
    if (!slot) return CLATTN_ERR_OUT_OF_MEMORY;
    if (!*slot && !(*slot = calloc(1, sizeof(clattn_gemm)))) return CLATTN_ERR_OUT_OF_MEMORY;
    *(clattn_gemm *)*slot = gemm;
    return CLATTN_SUCCESS;
}

/* The row named for ctx (its own choice, else $CLATTN_GEMM), NULL for auto. */
static clattn_status named_row(clattn_context *ctx, const gemm_row **row) {
    void **slot = context_data(ctx, choice_release);
    clattn_gemm chosen = slot && *slot ? *(clattn_gemm *)*slot : CLATTN_GEMM_AUTO;
    *row = NULL;
    if (chosen != CLATTN_GEMM_AUTO) {
        *row = gemm_find(chosen);
        return CLATTN_SUCCESS;
    }
    const char *env = getenv("CLATTN_GEMM");
    if (!env || !*env || strcmp(env, "auto") == 0) return CLATTN_SUCCESS;
    if (!(*row = gemm_named(env)))
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "CLATTN_GEMM=%s: no such GEMM row (auto, clblast, panels)", env);
    return CLATTN_SUCCESS;
}

clattn_status gemm_choose(clattn_context *ctx, const gemm_desc *g, const gemm_row **row) {
    char why[512] = "";
    clattn_status status = named_row(ctx, row);
    if (status != CLATTN_SUCCESS) return status;
    if (*row) {
        if ((*row)->check(ctx, g, why, sizeof why) == CLATTN_SUCCESS) return CLATTN_SUCCESS;
        return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED, "%s: the %s GEMM cannot run it: %s",
                         g && g->what ? g->what : "GEMM", (*row)->name, why);
    }
    for (size_t i = 0; i < ARRAY_LEN(table); i++)
        if (table[i]->check(ctx, g, why, sizeof why) == CLATTN_SUCCESS &&
            table[i]->suits(&ctx->device, why, sizeof why)) {
            *row = table[i];
            return CLATTN_SUCCESS;
        }
    /* CLBlast, the last row, runs everywhere: reaching here is a call none can run */
    return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED, "%s: no GEMM row can run it: %s",
                     g && g->what ? g->what : "GEMM", why);
}

/* ---------------------------------------------------------------- weights and calls */

clattn_status gemm_weights_make(clattn_context *ctx, const void *w, clattn_dtype dtype, size_t n,
                                size_t k, gemm_weights *out) {
    const gemm_row *row = NULL;
    memset(out, 0, sizeof *out);
    clattn_status status = gemm_choose(ctx, NULL, &row);
    if (status != CLATTN_SUCCESS) return status;
    tuning_params t;
    gemm_tuning(ctx, row, &t);
    char why[512] = "";
    if (row->tuning_valid && !row->tuning_valid(&t, NULL, why, sizeof why))
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "the %s GEMM's tuning: %s", row->name,
                         why);
    status = row->weights_make(ctx, &t, w, dtype, n, k, out);
    if (status != CLATTN_SUCCESS) {
        gemm_weights_release(out);
        return status;
    }
    out->row = row, out->tuning = t, out->n = n, out->k = k;
    return CLATTN_SUCCESS;
}

void gemm_weights_release(gemm_weights *w) {
    if (w->buffer) clReleaseMemObject(w->buffer);
    memset(w, 0, sizeof *w);
}

/* The row and parameters a call runs with: the weights' own, else the choice's. */
static clattn_status row_of(clattn_context *ctx, const gemm_desc *g, const gemm_row **row,
                            tuning_params *t) {
    if (g->weights) {
        *row = g->weights->row, *t = g->weights->tuning;
        return CLATTN_SUCCESS;
    }
    clattn_status status = gemm_choose(ctx, g, row);
    if (status == CLATTN_SUCCESS) gemm_tuning(ctx, *row, t);
    return status;
}

clattn_status gemm_check(clattn_context *ctx, const gemm_desc *g) {
    const gemm_row *row = NULL;
    tuning_params t;
    char why[512] = "";
    clattn_status status = row_of(ctx, g, &row, &t);
    if (status == CLATTN_SUCCESS) status = row->check(ctx, g, why, sizeof why);
    if (status != CLATTN_SUCCESS && *why)
        status =
            ctx_error(ctx, status, "%s: the %s GEMM cannot run it: %s", g->what, row->name, why);
    return status;
}

clattn_status gemm_run(clattn_context *ctx, const gemm_desc *g, gemm_ran *ran) {
    const gemm_row *row = NULL;
    tuning_params t;
    clattn_status status = gemm_check(ctx, g);
    if (status == CLATTN_SUCCESS) status = row_of(ctx, g, &row, &t);
    if (status == CLATTN_SUCCESS) status = row->run(ctx, &t, g);
    if (status == CLATTN_SUCCESS && ran) {
        ran->gemm = row->id;
        row->describe(&t, g, ran->kernel, sizeof ran->kernel);
    }
    return status;
}
