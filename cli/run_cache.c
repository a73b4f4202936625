/*
 * `clattn run --cache-len`: attention over a KV cache (docs/semantics.md sections 5 and 6), so that
 * any device can be checked against .npy files. --k and --v are the caches [B, capacity, Hkv, D]
 * (in the layout), or with --page-table page pools [pages, page_size, Hkv, D]; --cache-len
 * gives each sequence's filled rows; --k-new/--v-new rows are appended first (--new-len of
 * them a sequence); --q-len the valid query rows. --k-cache-out/--v-cache-out write the
 * caches after the append.
 */
#include "commands.h"
#include "common.h"
#include "conformance.h"
#include "run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cache_run {
    npy_array lengths, k_new, v_new, new_len, q_len, table;
    size_t page_size, num_pages, capacity, new_rows;
    void *k_out, *v_out; /* the storage after the append, for --k-cache-out/--v-cache-out */
} cache_run;

int cache_check_args(const cli_args *args) {
    static const char *const needs_cache[] = {"k-new",       "v-new",      "new-len",
                                              "q-len",       "page-table", "page-size",
                                              "k-cache-out", "v-cache-out"};
    for (size_t i = 0; !args_has(args, "cache-len") && i < ARRAY_LEN(needs_cache); i++)
        if (args_has(args, needs_cache[i])) {
            cli_error("run", "--%s needs --cache-len", needs_cache[i]);
            return 1;
        }
    static const char *const pairs[][2] = {
        {"k-new", "v-new"}, {"page-table", "page-size"}, {"k-cache-out", "v-cache-out"}};
    for (size_t i = 0; i < ARRAY_LEN(pairs); i++)
        if (args_has(args, pairs[i][0]) != args_has(args, pairs[i][1])) {
            cli_error("run", "--%s and --%s go together", pairs[i][0], pairs[i][1]);
            return 1;
        }
    if (args_has(args, "new-len") && !args_has(args, "k-new")) {
        cli_error("run", "--new-len needs --k-new and --v-new");
        return 1;
    }
    if (args_has(args, "k-cache-out") && args_has(args, "kv-storage")) {
        cli_error("run", "--k-cache-out: a quantised cache (--kv-storage) has no .npy form");
        return 1;
    }
    return 0;
}

/* An <i4 array of `ndim` dimensions whose first is B. */
static int load_lengths(const cli_args *args, const char *option, size_t ndim, size_t batch,
                        npy_array *out) {
    if (!args_has(args, option)) return 0;
    if (run_load(args, option, out)) return 1;
    if (out->dtype != NPY_I32 || out->ndim != ndim || out->shape[0] != batch) {
        cli_error("run", "--%s %s: expected <i4 [B=%zu%s], got %s %zu-D", option,
                  args_get(args, option), batch, ndim == 2 ? ", pages" : "",
                  npy_dtype_name(out->dtype), out->ndim);
        return 1;
    }
    return 0;
}

/* --k-new and --v-new: [B, Nnew, Hkv, D] in the layout, one dtype, rounded to the storage as K
 * was (<u2 bfloat16 bits with --storage bf16 only); float32 for a q8_0 cache, which quantises
 * them itself. */
static int load_new_rows(const cli_args *args, run_state *s) {
    cache_run *c = s->cache;
    const clattn_attention_desc *d = &s->desc;
    size_t kn[4], vn[4];
    if (!args_has(args, "k-new")) return 0;
    if (run_load(args, "k-new", &c->k_new) || run_load(args, "v-new", &c->v_new) ||
        run_tensor_dims(args, "k-new", &c->k_new, s->layout_kind, kn) ||
        run_tensor_dims(args, "v-new", &c->v_new, s->layout_kind, vn))
        return 1;
    clattn_dtype file_dtype = run_storage_of(c->k_new.dtype);
    if (kn[0] != d->batch || vn[0] != d->batch || kn[1] != vn[1] || kn[2] != d->heads_kv ||
        vn[2] != d->heads_kv || kn[3] != d->dim_qk || vn[3] != d->dim_v ||
        c->v_new.dtype != c->k_new.dtype ||
        (file_dtype == CLATTN_BF16 && d->dtype != CLATTN_BF16)) {
        cli_error("run",
                  "--k-new/--v-new: expected one dtype (<u2 only with --storage bf16) and "
                  "[B=%zu, Nnew, Hkv=%zu, Dqk=%zu / Dv=%zu] in the layout",
                  d->batch, d->heads_kv, d->dim_qk, d->dim_v);
        return 1;
    }
    c->new_rows = kn[1];
    clattn_dtype rows = d->kv_q8_0 || d->kv_q4_0 ? CLATTN_F32 : d->dtype;
    if (run_convert_array(&c->k_new, file_dtype, rows) ||
        run_convert_array(&c->v_new, file_dtype, rows)) {
        cli_error("run", "out of host memory for the new rows");
        return 1;
    }
    return load_lengths(args, "new-len", 1, d->batch, &c->new_len);
}

/* The storage's shape: contiguous [B, capacity, ...] or pools [pages, page_size, ...]. */
static int storage_shape(const cli_args *args, run_state *s) {
    cache_run *c = s->cache;
    const clattn_attention_desc *d = &s->desc;
    size_t rows = d->len_k; /* K's sequence dimension, as setup_shapes read it */
    if (!args_has(args, "page-table")) {
        c->capacity = rows;
        return 0;
    }
    if (parse_size(args, "page-size", 1, &c->page_size) != 0) return EXIT_USAGE;
    if (load_lengths(args, "page-table", 2, d->batch, &c->table)) return 1;
    c->num_pages = s->k.shape[0];
    if (rows != c->page_size || s->v.shape[0] != c->num_pages) {
        cli_error("run",
                  "--k/--v: page pools must be [pages, page_size=%zu, Hkv, D], got %zu rows "
                  "a page",
                  c->page_size, rows);
        return 1;
    }
    c->capacity = c->table.shape[1] * c->page_size;
    return 0;
}

int cache_load(const cli_args *args, run_state *s) {
    if (!args_has(args, "cache-len")) return 0;
    if (!(s->cache = calloc(1, sizeof *s->cache))) {
        cli_error("run", "out of host memory for the cache");
        return 1;
    }
    cache_run *c = s->cache;
    int rc = load_lengths(args, "cache-len", 1, s->desc.batch, &c->lengths);
    if (!rc) rc = storage_shape(args, s);
    if (!rc) rc = load_new_rows(args, s);
    if (!rc) rc = load_lengths(args, "q-len", 1, s->desc.batch, &c->q_len);
    s->desc.len_k = c->capacity; /* a bias and a block layout cover the capacity */
    return rc;
}

/* The cache on the device, filled from the files, the rows appended. */
static clattn_status fill_cache(clattn_context *ctx, const run_state *s, clattn_kv_cache **out) {
    const cache_run *c = s->cache;
    const clattn_attention_desc *d = &s->desc;
    clattn_kv_cache_desc cd;
    clattn_kv_cache_desc_init(&cd, d->batch, d->heads_kv, d->dim_qk, d->dim_v, c->capacity);
    cd.dtype = d->kv_q4_0   ? CLATTN_Q4_0
               : d->kv_q8_0 ? CLATTN_Q8_0
                            : d->dtype,
    cd.layout = s->layout_kind;
    cd.page_size = c->page_size, cd.num_pages = c->num_pages;
    clattn_status status = clattn_kv_cache_create(ctx, &cd, out);
    if (!status) status = clattn_kv_cache_write_host(*out, s->k.data, s->v.data);
    if (!status && c->page_size) status = clattn_kv_cache_set_block_table(*out, c->table.data);
    if (!status) status = clattn_kv_cache_set_lengths(*out, c->lengths.data);
    if (!status && c->k_new.data)
        status = clattn_kv_cache_append_host(*out, c->k_new.data, c->v_new.data, c->new_rows,
                                             c->new_len.data);
    return status;
}

int cache_compute(const cli_args *args, run_state *s, char *where, size_t where_size) {
    cache_run *c = s->cache;
    const clattn_attention_desc *d = &s->desc;
    clattn_context *ctx = NULL;
    clattn_kv_cache *cache = NULL;
    int rc = cli_open_context("run", args_get(args, "device"), &ctx);
    if (rc != 0) return rc;
    clattn_status status = fill_cache(ctx, s, &cache);
    const int32_t *q_len = c->q_len.data;
    if (!status && d->path == CLATTN_PATH_REFERENCE)
        status = clattn_kv_cache_reference(cache, d, s->q.data, q_len, s->o, s->lse);
    else if (!status)
        status = clattn_kv_cache_attention_host(cache, d, s->q.data, q_len, s->o, s->lse);
    if (!status && args_has(args, "k-cache-out")) {
        c->k_out = malloc(s->k.count * (d->dtype == CLATTN_F32 ? 4 : 2) + 1);
        c->v_out = malloc(s->v.count * (d->dtype == CLATTN_F32 ? 4 : 2) + 1);
        status = c->k_out && c->v_out ? clattn_kv_cache_read_host(cache, c->k_out, c->v_out)
                                      : CLATTN_ERR_OUT_OF_MEMORY;
    }
    clattn_stats stats;
    clattn_stats_init(&stats);
    if (status != CLATTN_SUCCESS)
        cli_report("run", "kv cache", status, ctx);
    else if (d->path == CLATTN_PATH_REFERENCE)
        snprintf(where, where_size, "reference over the cache (CPU)");
    else if (clattn_context_last_stats(ctx, &stats) == CLATTN_SUCCESS)
        snprintf(where, where_size, "%s over the cache", stats.kernel);
    clattn_kv_cache_destroy(cache);
    clattn_context_destroy(ctx);
    return status == CLATTN_SUCCESS ? 0 : 1;
}

void cache_outputs(const cli_args *args, const run_state *s, run_output *outs, size_t *n) {
    const cache_run *c = s->cache;
    if (!c || !args_has(args, "k-cache-out")) return;
    npy_dtype dtype = (npy_dtype)npy_dtype_of(s->desc.dtype);
    run_output k = {.option = "k-cache-out",
                    .path = args_get(args, "k-cache-out"),
                    .dtype = dtype,
                    .ndim = 4,
                    .shape = s->k.shape,
                    .data = c->k_out};
    run_output v = k;
    v.option = "v-cache-out", v.path = args_get(args, "v-cache-out"), v.data = c->v_out;
    v.shape = s->v.shape; /* Dv may differ from Dqk */
    outs[(*n)++] = k;
    outs[(*n)++] = v;
}

void cache_release(run_state *s) {
    cache_run *c = s->cache;
    if (!c) return;
    npy_array *all[] = {&c->lengths, &c->k_new, &c->v_new, &c->new_len, &c->q_len, &c->table};
    for (size_t i = 0; i < ARRAY_LEN(all); i++) npy_free(all[i]);
    free(c->k_out);
    free(c->v_out);
    free(c);
    s->cache = NULL;
}
