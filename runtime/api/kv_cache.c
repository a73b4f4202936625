/*
 * The KV cache object (docs/semantics.md section 6): it owns, or wraps, the device storage of B
 * sequences' keys and values - contiguous [B, capacity, Hkv, D], or a pool of pages with a block
 * table - and their lengths (host copy, and a device copy for the kernels). Appends write new rows
 * after each sequence's length (cl/kv_cache.cl); attention over the cache is a call like any other,
 * whose problem reads K and V through the cache's view, served by the variant table.
 *
 * Every change is checked in full before anything is written, so a refused call leaves the
 * cache exactly as it was.
 */
#include "api/calls.h"
#include "kernels/dispatch.h"
#include "plan/params.h"
#include "reference/reference.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct clattn_kv_cache {
    clattn_context *ctx;
    clattn_kv_cache_desc desc;
    int wrapped;                      /* k and v are the caller's */
    size_t max_pages;                 /* paged: capacity / page_size */
    clattn_tensor k_tensor, v_tensor; /* addressing of the storage (pages are "batch" entries) */
    size_t k_bytes, v_bytes;
    cl_mem k, v;
    int32_t *lengths; /* host [B] */
    cl_mem lengths_buf;
    int32_t *table; /* host [B][max_pages], paged */
    cl_mem table_buf;
    int32_t *shared_pages; /* pages the table names for more than one sequence, ascending */
    size_t shared_count;
};

/* ---------------------------------------------------------------- creating */

static clattn_status check_desc(clattn_context *ctx, const clattn_kv_cache_desc *given,
                                clattn_kv_cache_desc *d) {
    if (!given || struct_read(d, sizeof *d, given, given->struct_size, sizeof *d))
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "kv cache: desc is NULL or its struct_size is wrong: start from "
                         "clattn_kv_cache_desc_init");
    if (!d->batch || !d->heads_kv || !d->dim_qk || !d->dim_v || !d->capacity ||
        d->capacity > INT32_MAX)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "kv cache: sizes must be >= 1, capacity < 2^31 (B=%zu Hkv=%zu Dqk=%zu "
                         "Dv=%zu capacity=%zu)",
                         d->batch, d->heads_kv, d->dim_qk, d->dim_v, d->capacity);
    if (!kv_dtype_known(d->dtype) ||
        (d->layout != CLATTN_LAYOUT_BSHD && d->layout != CLATTN_LAYOUT_BHSD))
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "kv cache: unknown dtype or layout");
    if (dtype_is_quantised(d->dtype) && (d->dim_qk % Q8_BLOCK || d->dim_v % Q8_BLOCK))
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "kv cache: %s rows are whole blocks of %d: Dqk=%zu and Dv=%zu must be "
                         "multiples of %d",
                         dtype_name(d->dtype), Q8_BLOCK, d->dim_qk, d->dim_v, Q8_BLOCK);
    if (d->page_size && (d->capacity % d->page_size || !d->num_pages || d->num_pages > INT32_MAX))
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "kv cache: a paged capacity (%zu) must be a multiple of page_size (%zu), "
                         "with 1 to 2^31-1 pages (got %zu)",
                         d->capacity, d->page_size, d->num_pages);
    return CLATTN_SUCCESS;
}

/* The storage's addressing and size: [entries][rows][Hkv][D] (or [entries][Hkv][rows][D]),
 * entries being sequences (contiguous) or pages. The bookkeeping's size is checked too: a paged
 * cache's batch does not enter its storage, but its lengths [B] and table [B][max_pages] do. */
static clattn_status plan_storage(clattn_context *ctx, clattn_kv_cache *c) {
    const clattn_kv_cache_desc *d = &c->desc;
    size_t entries = d->page_size ? d->num_pages : d->batch;
    size_t rows = d->page_size ? d->page_size : d->capacity, elem = dtype_size(d->dtype);
    c->max_pages = d->page_size ? d->capacity / d->page_size : 0;
    size_t k_elements = 0, v_elements = 0, table_entries = 0, table_bytes = 0;
    if (size_mul(d->batch, c->max_pages ? c->max_pages : 1, &table_entries) ||
        size_mul(table_entries, sizeof(int32_t), &table_bytes) ||
        clattn_tensor_dense(&c->k_tensor, d->layout, d->heads_kv, rows, d->dim_qk, 0) ||
        clattn_tensor_dense(&c->v_tensor, d->layout, d->heads_kv, rows, d->dim_v, 0) ||
        size_mul(entries, c->k_tensor.stride_batch, &k_elements) ||
        size_mul(k_elements, elem, &c->k_bytes) ||
        size_mul(entries, c->v_tensor.stride_batch, &v_elements) ||
        size_mul(v_elements, elem, &c->v_bytes))
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "kv cache: the storage size overflows");
    c->k_bytes =
        dtype_bytes(d->dtype, k_elements); /* elem bounds the blocks (34/32, 18/32) above */
    c->v_bytes = dtype_bytes(d->dtype, v_elements);
    return CLATTN_SUCCESS;
}

/* The host lengths (from `lengths` or zero), the block table (-1: no page) and their device
 * copies. */
static clattn_status make_bookkeeping(clattn_context *ctx, clattn_kv_cache *c,
                                      const int32_t *lengths) {
    size_t b = c->desc.batch, entries = b * c->max_pages;
    c->lengths = calloc(b, sizeof *c->lengths);
    c->table = malloc((entries ? entries : 1) * sizeof *c->table);
    if (!c->lengths || !c->table) return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "kv cache");
    if (lengths) memcpy(c->lengths, lengths, b * sizeof *c->lengths);
    for (size_t i = 0; i < entries; i++) c->table[i] = -1;
    cl_mem_flags copy = CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR;
    clattn_status s = buffer_create(ctx, copy, b * 4, c->lengths, &c->lengths_buf, "lengths");
    if (!s)
        s = buffer_create(ctx, copy, (entries ? entries : 1) * 4, c->table, &c->table_buf,
                          "block table");
    return s;
}

clattn_status clattn_kv_cache_desc_init_sized(clattn_kv_cache_desc *desc, size_t struct_size,
                                              size_t batch, size_t heads_kv, size_t dim_qk,
                                              size_t dim_v, size_t capacity) {
    clattn_kv_cache_desc d;
    memset(&d, 0, sizeof d);
    d.batch = batch, d.heads_kv = heads_kv, d.dim_qk = dim_qk, d.dim_v = dim_v;
    d.capacity = capacity;
    return struct_init(desc, struct_size, &d, sizeof d, sizeof d) ? CLATTN_ERR_INVALID_ARGUMENT
                                                                  : CLATTN_SUCCESS;
}

/* A cache with its storage planned and its bookkeeping made; storage buffers still to come. */
static clattn_status cache_start(clattn_context *ctx, const clattn_kv_cache_desc *desc,
                                 const int32_t *lengths, clattn_kv_cache **out) {
    clattn_kv_cache *c = calloc(1, sizeof *c);
    if (!c) return CLATTN_ERR_OUT_OF_MEMORY;
    c->ctx = ctx;
    clattn_status s = check_desc(ctx, desc, &c->desc);
    if (!s) s = plan_storage(ctx, c);
    for (size_t b = 0; !s && lengths && b < c->desc.batch; b++)
        if (c->desc.page_size && lengths[b] != 0) /* its rows have no pages yet */
            s = ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                          "kv cache: length %d of sequence %zu: a paged cache starts empty "
                          "(lengths NULL or 0; set the block table, then the lengths)",
                          lengths[b], b);
        else if (lengths[b] < 0 || (size_t)lengths[b] > c->desc.capacity)
            s = ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                          "kv cache: length %d of sequence %zu is not in [0, %zu]", lengths[b], b,
                          c->desc.capacity);
    if (!s) s = make_bookkeeping(ctx, c, lengths);
    if (s) clattn_kv_cache_destroy(c);
    *out = s ? NULL : c;
    return s;
}

static clattn_status create_in_call(clattn_context *ctx, const clattn_kv_cache_desc *desc,
                                    clattn_kv_cache **cache) {
    if (!cache) return CLATTN_ERR_INVALID_ARGUMENT; /* (IN_CONTEXT checked ctx) */
    ctx_clear_error(ctx);
    clattn_kv_cache *c = NULL;
    clattn_status s = cache_start(ctx, desc, NULL, &c);
    if (!s) s = buffer_create(ctx, CL_MEM_READ_WRITE, c->k_bytes, NULL, &c->k, "K cache");
    if (!s) s = buffer_create(ctx, CL_MEM_READ_WRITE, c->v_bytes, NULL, &c->v, "V cache");
    const unsigned char zero = 0;
    cl_int err = CL_SUCCESS;
    if (!s) err = clEnqueueFillBuffer(ctx->queue, c->k, &zero, 1, 0, c->k_bytes, 0, NULL, NULL);
    if (!s && !err)
        err = clEnqueueFillBuffer(ctx->queue, c->v, &zero, 1, 0, c->v_bytes, 0, NULL, NULL);
    if (!s && err) s = ctx_cl_error(ctx, err, "kv cache: zeroing the storage");
    if (s) clattn_kv_cache_destroy(c);
    *cache = s ? NULL : c;
    return s;
}

clattn_status clattn_kv_cache_create(clattn_context *ctx, const clattn_kv_cache_desc *desc,
                                     clattn_kv_cache **cache) {
    return IN_CONTEXT(ctx, create_in_call(ctx, desc, cache));
}

static clattn_status wrap_in_call(clattn_context *ctx, const clattn_kv_cache_desc *desc, cl_mem k,
                                  cl_mem v, const int32_t *lengths, clattn_kv_cache **cache) {
    if (!cache) return CLATTN_ERR_INVALID_ARGUMENT; /* (IN_CONTEXT checked ctx) */
    ctx_clear_error(ctx);
    clattn_kv_cache *c = NULL;
    clattn_status s = cache_start(ctx, desc, lengths, &c);
    if (!s && (buffer_size(k) < c->k_bytes || buffer_size(v) < c->v_bytes))
        s = ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                      "kv cache: the storage needs %zu bytes of K and %zu of V; the buffers hold "
                      "%zu and %zu",
                      c->k_bytes, c->v_bytes, buffer_size(k), buffer_size(v));
    for (int i = 0; !s && i < 2; i++)
        if (buffer_read_only(i ? v : k))
            s = ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                          "kv cache: the %s storage was created CL_MEM_READ_ONLY; appends write "
                          "it (CL_MEM_READ_WRITE)",
                          i ? "V" : "K");
    if (!s) {
        byte_range kr = buffer_bytes(k, 0, c->k_bytes), vr = buffer_bytes(v, 0, c->v_bytes);
        if (byte_ranges_overlap(&kr, &vr))
            s = ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                          "kv cache: the K and V storage share memory (bytes [%zu, %zu) and "
                          "[%zu, %zu)): an append would write one over the other",
                          kr.begin, kr.end, vr.begin, vr.end);
    }
    if (!s) {
        clRetainMemObject(k), clRetainMemObject(v);
        c->k = k, c->v = v, c->wrapped = 1;
    } else {
        clattn_kv_cache_destroy(c);
        c = NULL;
    }
    *cache = c;
    return s;
}

clattn_status clattn_kv_cache_wrap(clattn_context *ctx, const clattn_kv_cache_desc *desc, cl_mem k,
                                   cl_mem v, const int32_t *lengths, clattn_kv_cache **cache) {
    return IN_CONTEXT(ctx, wrap_in_call(ctx, desc, k, v, lengths, cache));
}

void clattn_kv_cache_destroy(clattn_kv_cache *c) {
    if (!c) return;
    cl_mem all[] = {c->k, c->v, c->lengths_buf, c->table_buf};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        if (all[i]) clReleaseMemObject(all[i]);
    free(c->lengths);
    free(c->table);
    free(c->shared_pages);
    free(c);
}

clattn_context *kv_cache_context(const clattn_kv_cache *c) {
    return c->ctx;
}

const clattn_kv_cache_desc *kv_cache_desc(const clattn_kv_cache *c) {
    return &c->desc;
}

void kv_cache_storage(const clattn_kv_cache *c, byte_range out[2]) {
    out[0] = buffer_bytes(c->k, 0, c->k_bytes);
    out[1] = buffer_bytes(c->v, 0, c->v_bytes);
}

clattn_status clattn_kv_cache_buffers(const clattn_kv_cache *c, cl_mem *k, cl_mem *v) {
    if (!c) return CLATTN_ERR_INVALID_ARGUMENT;
    if (k) *k = c->k;
    if (v) *v = c->v;
    return CLATTN_SUCCESS;
}

/* ---------------------------------------------------------------- lengths and pages */

/* Whether rows [first, end) of sequence b have pages (always, for contiguous storage); else
 * names the first row without one. Every page that the rows touch is checked: from the page of
 * `first`, which need not start a page, to the page of `end - 1`. */
static int rows_have_pages(const clattn_kv_cache *c, const int32_t *table, size_t b, size_t first,
                           size_t end, size_t *missing) {
    size_t size = c->desc.page_size;
    if (!size || first >= end) return 1;
    for (size_t page = first / size; page <= (end - 1) / size; page++) {
        if (table[b * c->max_pages + page] < 0) {
            *missing = page * size > first ? page * size : first;
            return 0;
        }
    }
    return 1;
}

/* Writes `count` values from `from` into the device buffer (waiting, so `from` may change right
 * after) and, once that succeeded, into their host copy `kept` (the cache's lengths or table): a
 * failed write leaves both as they were. */
static clattn_status upload(clattn_kv_cache *c, cl_mem buffer, int32_t *kept, const int32_t *from,
                            size_t count, const char *what) {
    clattn_status s = buffer_write(c->ctx, buffer, 0, count * sizeof *from, from, what);
    if (!s && kept != from) memcpy(kept, from, count * sizeof *from);
    return s;
}

/* A block table's entry: `page` at [seq][slot]. */
typedef struct table_entry {
    int32_t page;
    size_t seq, slot;
} table_entry;

static int by_page(const void *a, const void *b) {
    const table_entry *x = a, *y = b;
    if (x->page != y->page) return x->page < y->page ? -1 : 1;
    if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1;
    return x->slot < y->slot ? -1 : x->slot > y->slot;
}

static int by_value(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* Refuses a table that names a page twice in one sequence's row (two places of the sequence
 * would be one row of storage); else *shared gets the pages that several sequences name
 * (prefixes they share), ascending, each once (NULL when none). */
static clattn_status find_shared_pages(clattn_kv_cache *c, const int32_t *table, int32_t **shared,
                                       size_t *count) {
    size_t entries = c->desc.batch * c->max_pages, used = 0;
    table_entry *e = malloc((entries ? entries : 1) * sizeof *e);
    *shared = malloc((entries ? entries : 1) * sizeof **shared), *count = 0;
    if (!e || !*shared) {
        free(e), free(*shared), *shared = NULL;
        return ctx_error(c->ctx, CLATTN_ERR_OUT_OF_MEMORY, "kv cache: checking the block table");
    }
    for (size_t i = 0; i < entries; i++)
        if (table[i] >= 0) e[used++] = (table_entry){table[i], i / c->max_pages, i % c->max_pages};
    qsort(e, used, sizeof *e, by_page);
    clattn_status s = CLATTN_SUCCESS;
    for (size_t i = 1; !s && i < used; i++) {
        if (e[i].page != e[i - 1].page) continue;
        if (e[i].seq == e[i - 1].seq)
            s = ctx_error(c->ctx, CLATTN_ERR_INVALID_ARGUMENT,
                          "kv cache: block table entries [%zu][%zu] and [%zu][%zu] name the same "
                          "page %d: one sequence's rows need pages of their own",
                          e[i].seq, e[i - 1].slot, e[i].seq, e[i].slot, e[i].page);
        else if (*count == 0 || (*shared)[*count - 1] != e[i].page)
            (*shared)[(*count)++] = e[i].page;
    }
    free(e);
    if (s || *count == 0) free(*shared), *shared = NULL;
    return s;
}

/* The first sequence other than `except` whose table names `page`. */
static size_t sequence_naming(const clattn_kv_cache *c, int32_t page, size_t except) {
    for (size_t i = 0; i < c->desc.batch * c->max_pages; i++)
        if (c->table[i] == page && i / c->max_pages != except) return i / c->max_pages;
    return except;
}

/* An append into rows [first, end) of sequence b writes no page that another sequence names
 * too: a shared page holds rows both sequences read. */
static clattn_status check_private_pages(const clattn_kv_cache *c, size_t b, size_t first,
                                         size_t end) {
    size_t size = c->desc.page_size;
    if (!c->shared_count || first >= end) return CLATTN_SUCCESS;
    for (size_t slot = first / size; slot <= (end - 1) / size; slot++) {
        int32_t page = c->table[b * c->max_pages + slot];
        if (!bsearch(&page, c->shared_pages, c->shared_count, sizeof page, by_value)) continue;
        return ctx_error(c->ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "kv cache append: sequence %zu: row %zu is in page %d, which sequence "
                         "%zu's block table names too; an append would change that sequence's "
                         "rows (give sequence %zu a page of its own)",
                         b, slot * size > first ? slot * size : first, page,
                         sequence_naming(c, page, b), b);
    }
    return CLATTN_SUCCESS;
}

static clattn_status set_block_table_in_call(clattn_kv_cache *c, const int32_t *table) {
    ctx_clear_error(c->ctx);
    if (!c->desc.page_size || !table)
        return ctx_error(c->ctx, CLATTN_ERR_INVALID_ARGUMENT, "kv cache: %s",
                         table ? "a contiguous cache has no block table"
                               : "the block table is NULL");
    for (size_t b = 0; b < c->desc.batch; b++) {
        for (size_t p = 0; p < c->max_pages; p++) {
            int32_t page = table[b * c->max_pages + p];
            if (page < -1 || page >= (int64_t)c->desc.num_pages)
                return ctx_error(c->ctx, CLATTN_ERR_INVALID_ARGUMENT,
                                 "kv cache: block table entry [%zu][%zu] = %d is not a page in "
                                 "[0, %zu) nor -1",
                                 b, p, page, c->desc.num_pages);
        }
        size_t missing = 0;
        if (!rows_have_pages(c, table, b, 0, (size_t)c->lengths[b], &missing))
            return ctx_error(c->ctx, CLATTN_ERR_INVALID_ARGUMENT,
                             "kv cache: sequence %zu holds %d rows but the new table gives row "
                             "%zu no page",
                             b, c->lengths[b], missing);
    }
    int32_t *shared = NULL;
    size_t shared_count = 0;
    clattn_status s = find_shared_pages(c, table, &shared, &shared_count);
    if (!s)
        s = upload(c, c->table_buf, c->table, table, c->desc.batch * c->max_pages,
                   "kv cache: table");
    if (s) {
        free(shared);
        return s;
    }
    free(c->shared_pages);
    c->shared_pages = shared, c->shared_count = shared_count;
    return CLATTN_SUCCESS;
}

clattn_status clattn_kv_cache_set_block_table(clattn_kv_cache *c, const int32_t *table) {
    return c ? IN_CONTEXT(c->ctx, set_block_table_in_call(c, table)) : CLATTN_ERR_INVALID_ARGUMENT;
}

clattn_status kv_cache_lengths_in_call(const clattn_kv_cache *c, int32_t *lengths) {
    if (!lengths) return CLATTN_ERR_INVALID_ARGUMENT;
    memcpy(lengths, c->lengths, c->desc.batch * sizeof *lengths);
    return CLATTN_SUCCESS;
}

/* A call like the others: another thread's append or set_lengths does not tear the copy. */
clattn_status clattn_kv_cache_lengths(const clattn_kv_cache *c, int32_t *lengths) {
    return c ? IN_CONTEXT(c->ctx, kv_cache_lengths_in_call(c, lengths))
             : CLATTN_ERR_INVALID_ARGUMENT;
}

clattn_status kv_cache_set_lengths_in_call(clattn_kv_cache *c, const int32_t *lengths) {
    ctx_clear_error(c->ctx);
    if (!lengths) return ctx_error(c->ctx, CLATTN_ERR_INVALID_ARGUMENT, "kv cache: lengths NULL");
    for (size_t b = 0; b < c->desc.batch; b++) {
        size_t missing = 0;
        if (lengths[b] < 0 || (size_t)lengths[b] > c->desc.capacity)
            return ctx_error(c->ctx, CLATTN_ERR_INVALID_ARGUMENT,
                             "kv cache: length %d of sequence %zu is not in [0, %zu]", lengths[b],
                             b, c->desc.capacity);
        if (!rows_have_pages(c, c->table, b, 0, (size_t)lengths[b], &missing))
            return ctx_error(c->ctx, CLATTN_ERR_INVALID_ARGUMENT,
                             "kv cache: sequence %zu: row %zu of length %d has no page in the "
                             "block table",
                             b, missing, lengths[b]);
    }
    return upload(c, c->lengths_buf, c->lengths, lengths, c->desc.batch, "kv cache: lengths");
}

clattn_status clattn_kv_cache_set_lengths(clattn_kv_cache *c, const int32_t *lengths) {
    return c ? IN_CONTEXT(c->ctx, kv_cache_set_lengths_in_call(c, lengths))
             : CLATTN_ERR_INVALID_ARGUMENT;
}

/* ---------------------------------------------------------------- appending */

/* The new rows' buffers (r->len of them, at least one): large enough for their tensors, and
 * sharing no byte with the storage, which the append writes. */
static clattn_status check_new_rows(clattn_kv_cache *c, const clattn_kv_rows *r) {
    clattn_context *ctx = c->ctx;
    const clattn_kv_cache_desc *d = &c->desc;
    clattn_attention_desc span; /* the extents of [B, len, Hkv, D] through the checker */
    clattn_attention_desc_init(&span, CLATTN_LAYOUT_BSHD, d->batch, d->heads_kv, d->heads_kv,
                               r->len, r->len, d->dim_qk, d->dim_v);
    span.dtype = span.out_dtype = r->dtype;
    span.k = r->k_tensor, span.v = r->v_tensor;
    clattn_attention_extents ext;
    char message[512];
    if (clattn_attention_desc_check(&span, &ext, message, sizeof message) != CLATTN_SUCCESS)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "kv cache append: %s", message);
    if (buffer_size(r->k) < ext.k || buffer_size(r->v) < ext.v)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "kv cache append: %zu new rows need %zu bytes of K and %zu of V; the "
                         "buffers hold %zu and %zu",
                         r->len, ext.k, ext.v, buffer_size(r->k), buffer_size(r->v));
    size_t elem = dtype_size(r->dtype);
    byte_range rows[2] = {buffer_bytes(r->k, r->k_tensor.offset * elem, ext.k),
                          buffer_bytes(r->v, r->v_tensor.offset * elem, ext.v)};
    byte_range storage[2];
    kv_cache_storage(c, storage);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            if (byte_ranges_overlap(&rows[i], &storage[j]))
                return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                                 "kv cache append: the new rows of %s share memory with the "
                                 "cache's %s storage, which the append writes",
                                 i ? "V" : "K", j ? "V" : "K");
    return CLATTN_SUCCESS;
}

/* The rows to append, checked against the cache: buffers large enough (none are read for zero
 * rows), new_len in [0, len], and every sequence's new rows within its capacity and its pages.
 * *counts gets new_len. */
static clattn_status check_append(clattn_kv_cache *c, const clattn_kv_rows *r, int32_t *counts) {
    clattn_context *ctx = c->ctx;
    const clattn_kv_cache_desc *d = &c->desc;
    if (!r || !r->k || !r->v || !dtype_known(r->dtype))
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "kv cache append: rows, their buffers or dtype missing");
    clattn_status s = r->len ? check_new_rows(c, r) : CLATTN_SUCCESS;
    if (s) return s;
    for (size_t b = 0; b < d->batch; b++) {
        counts[b] = r->new_len ? r->new_len[b] : (int32_t)r->len;
        size_t end = (size_t)c->lengths[b] + (size_t)counts[b], missing = 0;
        if (counts[b] < 0 || (size_t)counts[b] > r->len)
            return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                             "kv cache append: new_len[%zu] = %d is not in [0, %zu]", b, counts[b],
                             r->len);
        if (end > d->capacity)
            return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                             "kv cache append: sequence %zu holds %d rows; %d more pass its "
                             "capacity of %zu",
                             b, c->lengths[b], counts[b], d->capacity);
        if (!rows_have_pages(c, c->table, b, (size_t)c->lengths[b], end, &missing))
            return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                             "kv cache append: sequence %zu: row %zu has no page in the block "
                             "table",
                             b, missing);
        s = check_private_pages(c, b, (size_t)c->lengths[b], end);
        if (s) return s;
    }
    return CLATTN_SUCCESS;
}

/* Offset and strides of a tensor as four long kernel arguments. */
static void karg_tensor(kernel_args *a, const clattn_tensor *t) {
    cl_long v[4] = {(cl_long)t->offset, (cl_long)t->stride_batch, (cl_long)t->stride_head,
                    (cl_long)t->stride_seq};
    for (int i = 0; i < 4; i++) kernel_arg(a, sizeof v[i], &v[i]);
}

/* The parameter block of the append kernels: the cache's addressing. */
static void append_params(const clattn_kv_cache *c, attn_params *P) {
    const clattn_kv_cache_desc *d = &c->desc;
    memset(P, 0, sizeof *P);
    P->batch = (cl_long)d->batch, P->heads_kv = (cl_long)d->heads_kv;
    P->dim_qk = (cl_long)d->dim_qk, P->dim_v = (cl_long)d->dim_v;
    P->k_offset = 0, P->k_stride_b = (cl_long)c->k_tensor.stride_batch;
    P->k_stride_h = (cl_long)c->k_tensor.stride_head;
    P->k_stride_s = (cl_long)c->k_tensor.stride_seq;
    P->v_offset = 0, P->v_stride_b = (cl_long)c->v_tensor.stride_batch;
    P->v_stride_h = (cl_long)c->v_tensor.stride_head;
    P->v_stride_s = (cl_long)c->v_tensor.stride_seq;
    P->page_size = (cl_long)d->page_size, P->max_pages = (cl_long)c->max_pages;
}

/* One append kernel of cl/kv_cache.cl ("append_rows" or "check_rows"), its arguments up to
 * the new rows set: parameters, (lengths,) new lengths, (block table,) K_new, V_new. */
typedef struct append_call {
    cl_kernel kernel;
    kernel_args args;
    size_t global[3]; /* (max(Dqk, Dv), or its blocks when quantised, len, B * Hkv) */
} append_call;

static clattn_status append_kernel(clattn_kv_cache *c, const clattn_kv_rows *r, buffer_set *set,
                                   const int32_t *counts, const char *name, append_call *call) {
    static const char *const files[] = {ATTN_PRELUDE, "kv_cache.cl"};
    const clattn_kv_cache_desc *d = &c->desc;
    int blocks = dtype_is_quantised(d->dtype), writes = strcmp(name, "append_rows") == 0;
    attn_params P;
    append_params(c, &P);
    cl_mem params = NULL, new_len = NULL;
    char defines[64];
    snprintf(defines, sizeof defines, "-DIN_DTYPE=%d -D%s=%d", (int)r->dtype,
             blocks ? "KV_DTYPE" : "OUT_DTYPE", (int)d->dtype); /* quantised: whole blocks */
    clattn_status s = buffer_set_add(c->ctx, set, 1, sizeof P, &P, &params, "parameters");
    if (!s) s = buffer_set_add(c->ctx, set, d->batch, 4, counts, &new_len, "new lengths");
    if (!s) s = kernel_get(c->ctx, files, ARRAY_LEN(files), defines, name, &call->kernel);
    if (s) return s;
    kernel_args a = {call->kernel, 0, CL_SUCCESS};
    KARG(a, params);
    if (writes) KARG(a, c->lengths_buf);
    KARG(a, new_len);
    if (writes) KARG(a, c->table_buf);
    KARG(a, r->k);
    karg_tensor(&a, &r->k_tensor);
    KARG(a, r->v);
    karg_tensor(&a, &r->v_tensor);
    call->args = a;
    size_t widest = d->dim_qk > d->dim_v ? d->dim_qk : d->dim_v;
    call->global[0] = blocks ? widest / Q8_BLOCK : widest;
    call->global[1] = r->len, call->global[2] = d->batch * d->heads_kv;
    return CLATTN_SUCCESS;
}

static clattn_status launch_append(clattn_kv_cache *c, const clattn_kv_rows *r, buffer_set *set,
                                   const int32_t *counts) {
    append_call call;
    clattn_status s = append_kernel(c, r, set, counts, "append_rows", &call);
    if (s) return s;
    KARG(call.args, c->k);
    KARG(call.args, c->v);
    if (call.args.err != CL_SUCCESS)
        return ctx_cl_error(c->ctx, call.args.err, "kv cache append: arguments");
    return kernel_launch_padded(c->ctx, call.kernel, 3, call.global, NULL, "kv cache append");
}

/* ---------------------------------------------------------------- q8_0, q4_0: blocks they cannot
 * store */

/* The first block of row `row` of kv head `kvh` of sequence b of one new-rows tensor (host,
 * r->dtype) whose scale in quantised type `to` overflows, or SIZE_MAX; *max gets its largest
 * |x|. */
static size_t overflowing_block(clattn_dtype to, const clattn_kv_rows *r, const void *data,
                                const clattn_tensor *t, size_t dim, size_t b, size_t kvh,
                                size_t row, float *max) {
    size_t at = t->offset + b * t->stride_batch + kvh * t->stride_head + row * t->stride_seq;
    float x[Q8_BLOCK];
    for (size_t block = 0; block < dim / Q8_BLOCK; block++) {
        *max = 0.0f;
        for (size_t i = 0; i < Q8_BLOCK; i++) {
            x[i] = dtype_load_float(r->dtype, data, at + block * Q8_BLOCK + i);
            if (isfinite(x[i]) && fabsf(x[i]) > *max) *max = fabsf(x[i]);
        }
        if (quant_scale_overflows(to, x)) return block;
    }
    return SIZE_MAX;
}

/* Refuses the append, naming the first new block (host copies k and v of the rows) whose
 * float16 scale overflows, in the order sequence, new row, kv head, K then V; else SUCCESS. */
static clattn_status refuse_overflowing_block(clattn_kv_cache *c, const clattn_kv_rows *r,
                                              const void *k, const void *v, const int32_t *counts) {
    const clattn_kv_cache_desc *d = &c->desc;
    float max = 0.0f;
    for (size_t b = 0; b < d->batch; b++)
        for (size_t row = 0; row < (size_t)counts[b]; row++)
            for (size_t kvh = 0; kvh < d->heads_kv; kvh++)
                for (int which = 0; which < 2; which++) {
                    size_t block = overflowing_block(
                        d->dtype, r, which ? v : k, which ? &r->v_tensor : &r->k_tensor,
                        which ? d->dim_v : d->dim_qk, b, kvh, row, &max);
                    if (block != SIZE_MAX)
                        return ctx_error(
                            c->ctx, CLATTN_ERR_INVALID_ARGUMENT,
                            "kv cache append: sequence %zu, new row %zu, kv head %zu: %s block "
                            "%zu (dims %zu..%zu) holds |x| = %g, at or above %.0f, where its "
                            "%s scale overflows float16 and the block would be NaN; nothing "
                            "was appended",
                            b, row, kvh, which ? "V" : "K", block, block * Q8_BLOCK,
                            block * Q8_BLOCK + Q8_BLOCK - 1, (double)max, quant_max_value(d->dtype),
                            dtype_name(d->dtype));
                }
    return CLATTN_SUCCESS;
}

/* Reads a buffer of new rows back whole, for naming a block. */
static clattn_status read_rows(clattn_kv_cache *c, cl_mem buffer, void **out) {
    size_t bytes = buffer_size(buffer);
    *out = malloc(bytes ? bytes : 1);
    if (!*out)
        return ctx_error(c->ctx, CLATTN_ERR_OUT_OF_MEMORY, "kv cache append: %zu bytes", bytes);
    return buffer_read(c->ctx, buffer, 0, bytes, *out, "kv cache append: reading new rows back");
}

/* q8_0 rows on the device: check_rows flags a block whose scale overflows, before anything is
 * written; then the rows are read back to name it. Waits for the flag (4 bytes; the append
 * waits for its lengths' upload anyway). */
static clattn_status check_device_rows(clattn_kv_cache *c, const clattn_kv_rows *r, buffer_set *set,
                                       const int32_t *counts) {
    cl_int overflow = 0;
    cl_mem flag = NULL;
    append_call call;
    clattn_status s = append_kernel(c, r, set, counts, "check_rows", &call);
    if (!s) s = buffer_set_add_zeroed_word(c->ctx, set, &flag, "overflow flag");
    if (s) return s;
    KARG(call.args, flag);
    if (call.args.err != CL_SUCCESS)
        return ctx_cl_error(c->ctx, call.args.err, "kv cache append check: arguments");
    s = kernel_launch_padded(c->ctx, call.kernel, 3, call.global, NULL, "kv cache append check");
    if (!s)
        s = buffer_read(c->ctx, flag, 0, sizeof overflow, &overflow,
                        "kv cache append check: its flag");
    if (s || !overflow) return s;
    void *k = NULL, *v = NULL;
    s = read_rows(c, r->k, &k);
    if (!s) s = read_rows(c, r->v, &v);
    if (!s) s = refuse_overflowing_block(c, r, k, v, counts);
    if (!s) /* the device saw one the host does not: refuse all the same */
        s = ctx_error(c->ctx, CLATTN_ERR_INVALID_ARGUMENT,
                      "kv cache append: a new block's %s scale overflows float16 (a value at "
                      "or above %.0f); nothing was appended",
                      dtype_name(c->desc.dtype), quant_max_value(c->desc.dtype));
    free(k), free(v);
    return s;
}

/* Appends after the checks; k_host and v_host are the rows' host copies when the caller gave
 * host arrays (a q8_0 cache checks those, without a kernel), else NULL. */
static clattn_status append(clattn_kv_cache *c, const clattn_kv_rows *rows, const void *k_host,
                            const void *v_host) {
    int32_t *counts = malloc(c->desc.batch * sizeof *counts);
    if (!counts) return ctx_error(c->ctx, CLATTN_ERR_OUT_OF_MEMORY, "kv cache append");
    buffer_set set;
    memset(&set, 0, sizeof set);
    int blocks = dtype_is_quantised(c->desc.dtype);
    clattn_status s = check_append(c, rows, counts);
    if (!s && rows->len && blocks)
        s = k_host ? refuse_overflowing_block(c, rows, k_host, v_host, counts)
                   : check_device_rows(c, rows, &set, counts);
    if (!s && rows->len) s = launch_append(c, rows, &set, counts);
    if (!s) {
        for (size_t b = 0; b < c->desc.batch; b++) counts[b] += c->lengths[b]; /* new lengths */
        s = upload(c, c->lengths_buf, c->lengths, counts, c->desc.batch, "kv cache: lengths");
    }
    buffer_set_release(&set);
    free(counts);
    return s;
}

clattn_status kv_cache_append_in_call(clattn_kv_cache *c, const clattn_kv_rows *rows) {
    ctx_clear_error(c->ctx);
    return append(c, rows, NULL, NULL);
}

clattn_status clattn_kv_cache_append(clattn_kv_cache *c, const clattn_kv_rows *rows) {
    return c ? IN_CONTEXT(c->ctx, kv_cache_append_in_call(c, rows)) : CLATTN_ERR_INVALID_ARGUMENT;
}

static clattn_status append_host_in_call(clattn_kv_cache *c, const void *k_new, const void *v_new,
                                         size_t len, const int32_t *new_len) {
    ctx_clear_error(c->ctx);
    const clattn_kv_cache_desc *d = &c->desc;
    clattn_dtype dtype = dtype_is_quantised(d->dtype) ? CLATTN_F32 : d->dtype; /* quantised here */
    clattn_kv_rows rows = {NULL, NULL, {0}, {0}, dtype, len, new_len};
    size_t elem = dtype_size(dtype);
    clattn_status s = CLATTN_SUCCESS;
    if (!k_new || !v_new || !len)
        return ctx_error(c->ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "kv cache append: no rows (k_new, v_new NULL or len 0)");
    if (clattn_tensor_dense(&rows.k_tensor, d->layout, d->heads_kv, len, d->dim_qk, 0) ||
        clattn_tensor_dense(&rows.v_tensor, d->layout, d->heads_kv, len, d->dim_v, 0))
        return ctx_error(c->ctx, CLATTN_ERR_INVALID_ARGUMENT, "kv cache append: sizes overflow");
    s = buffer_from_host(c->ctx, CL_MEM_READ_ONLY, d->batch * rows.k_tensor.stride_batch * elem,
                         k_new, &rows.k, "new K rows");
    if (!s)
        s = buffer_from_host(c->ctx, CL_MEM_READ_ONLY, d->batch * rows.v_tensor.stride_batch * elem,
                             v_new, &rows.v, "new V rows");
    if (!s) s = append(c, &rows, k_new, v_new);
    if (rows.k) clReleaseMemObject(rows.k);
    if (rows.v) clReleaseMemObject(rows.v);
    return s;
}

clattn_status clattn_kv_cache_append_host(clattn_kv_cache *c, const void *k_new, const void *v_new,
                                          size_t len, const int32_t *new_len) {
    return c ? IN_CONTEXT(c->ctx, append_host_in_call(c, k_new, v_new, len, new_len))
             : CLATTN_ERR_INVALID_ARGUMENT;
}

static clattn_status copy_storage(clattn_kv_cache *c, void *k, void *v, int write) {
    ctx_clear_error(c->ctx);
    const char *what = "kv cache: copying the storage";
    clattn_status s = CLATTN_SUCCESS;
    if (k)
        s = write ? buffer_write(c->ctx, c->k, 0, c->k_bytes, k, what)
                  : buffer_read(c->ctx, c->k, 0, c->k_bytes, k, what);
    if (v && !s)
        s = write ? buffer_write(c->ctx, c->v, 0, c->v_bytes, v, what)
                  : buffer_read(c->ctx, c->v, 0, c->v_bytes, v, what);
    return s;
}

clattn_status clattn_kv_cache_write_host(clattn_kv_cache *c, const void *k, const void *v) {
    return c ? IN_CONTEXT(c->ctx, copy_storage(c, (void *)k, (void *)v, 1))
             : CLATTN_ERR_INVALID_ARGUMENT;
}

clattn_status clattn_kv_cache_read_host(clattn_kv_cache *c, void *k, void *v) {
    return c ? IN_CONTEXT(c->ctx, copy_storage(c, k, v, 0)) : CLATTN_ERR_INVALID_ARGUMENT;
}

/* ---------------------------------------------------------------- attention */

/* The call over the cache as a problem: the desc checked with Nk = capacity and dense
 * [B, capacity, Hkv, D] K and V, then K and V read through the cache's view. */
static clattn_status cache_problem(clattn_kv_cache *c, const clattn_attention_desc *given,
                                   const int32_t *q_len, bias_source bias, attn_problem *pb) {
    clattn_context *ctx = c->ctx;
    const clattn_kv_cache_desc *cd = &c->desc;
    clattn_attention_desc d;
    memset(pb, 0, sizeof *pb);
    if (!given ||
        struct_read(&d, sizeof d, given, given->struct_size, CLATTN_ATTENTION_DESC_BASE_SIZE))
        return problem_build(given, bias, &ctx->error, pb); /* names the problem */
    d.struct_size = sizeof d;
    if (mask_desc_is_shard(&d) || d.lse_parts)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "kv cache attention: a cache call is no shard and has no LSE parts "
                         "(q_start=%zu k_start=%zu full_len_q=%zu full_len_k=%zu lse_parts=%d must "
                         "be 0)",
                         d.q_start, d.k_start, d.full_len_q, d.full_len_k, d.lse_parts);
    if (d.batch != cd->batch || d.heads_kv != cd->heads_kv || d.dim_qk != cd->dim_qk ||
        d.dim_v != cd->dim_v)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "kv cache attention: the desc has B=%zu Hkv=%zu Dqk=%zu Dv=%zu, the "
                         "cache B=%zu Hkv=%zu Dqk=%zu Dv=%zu",
                         d.batch, d.heads_kv, d.dim_qk, d.dim_v, cd->batch, cd->heads_kv,
                         cd->dim_qk, cd->dim_v);
    clattn_dtype asked = d.kv_q4_0 ? CLATTN_Q4_0 : d.kv_q8_0 ? CLATTN_Q8_0 : cd->dtype;
    if (asked != cd->dtype)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "kv cache attention: the desc says K and V are %s (kv_q8_0=%d "
                         "kv_q4_0=%d); the cache stores them as %s, and its dtype is what the "
                         "call reads (leave both flags 0)",
                         dtype_name(asked), d.kv_q8_0, d.kv_q4_0, dtype_name(cd->dtype));
    d.kv_q8_0 = d.kv_q4_0 = 0; /* K and V are read through the cache's view, below */
    for (size_t b = 0; q_len && b < cd->batch; b++)
        if (q_len[b] < 0 || (size_t)q_len[b] > d.len_q)
            return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                             "kv cache attention: q_len[%zu] = %d is not in [0, Nq=%zu]", b,
                             q_len[b], d.len_q);
    d.len_k = cd->capacity;
    clattn_tensor_dense(&d.k, cd->layout, cd->heads_kv, cd->capacity, cd->dim_qk, 0);
    clattn_tensor_dense(&d.v, cd->layout, cd->heads_kv, cd->capacity, cd->dim_v, 0);
    clattn_status s = problem_build(&d, bias, &ctx->error, pb);
    if (s != CLATTN_SUCCESS) return s;
    pb->k = c->k_tensor, pb->v = c->v_tensor;
    pb->extents.k = c->k_bytes, pb->extents.v = c->v_bytes;
    kv_view view = {cd->dtype, c->lengths, q_len, cd->page_size, c->max_pages, c->table};
    pb->kv = view;
    return CLATTN_SUCCESS;
}

clattn_status kv_cache_attention_check(clattn_kv_cache *c, const clattn_attention_desc *desc,
                                       const int32_t *q_len) {
    attn_problem pb;
    clattn_status s = cache_problem(c, desc, q_len, BIAS_FROM_BUFFER, &pb);
    if (s == CLATTN_SUCCESS) s = dispatch_named_serves(c->ctx, &pb);
    problem_release(&pb);
    return s;
}

clattn_status kv_cache_attention_in_call(clattn_kv_cache *c, const clattn_attention_desc *desc,
                                         cl_mem q, const int32_t *q_len, cl_mem o, cl_mem lse,
                                         cl_event *event) {
    ctx_clear_error(c->ctx);
    transfers_mark(c->ctx);
    if (event) *event = NULL;
    attn_problem pb;
    clattn_status s = cache_problem(c, desc, q_len, BIAS_FROM_BUFFER, &pb);
    if (s == CLATTN_SUCCESS) {
        attn_buffers b = {
            q,    c->k,         c->v, o, lse, pb.has_bias ? desc->bias : NULL, c->lengths_buf,
            NULL, c->table_buf, 0};
        s = attention_on_buffers(c->ctx, &pb, &b, event);
    }
    if (s == CLATTN_SUCCESS) stats_record_transfers(c->ctx);
    problem_release(&pb);
    return s;
}

clattn_status clattn_kv_cache_attention(clattn_kv_cache *c, const clattn_attention_desc *desc,
                                        cl_mem q, const int32_t *q_len, cl_mem o, cl_mem lse,
                                        cl_event *event) {
    if (event) *event = NULL;
    return c ? IN_CONTEXT(c->ctx, kv_cache_attention_in_call(c, desc, q, q_len, o, lse, event))
             : CLATTN_ERR_INVALID_ARGUMENT;
}

static clattn_status attention_host_in_call(clattn_kv_cache *c, const clattn_attention_desc *desc,
                                            const void *q, const int32_t *q_len, void *o,
                                            float *lse) {
    clattn_context *ctx = c->ctx;
    ctx_clear_error(ctx);
    transfers_mark(ctx);
    attn_problem pb;
    clattn_status s = cache_problem(c, desc, q_len, BIAS_FROM_HOST, &pb);
    cl_mem qb = NULL, ob = NULL, lb = NULL, bias = NULL;
    const clattn_attention_extents *ext = &pb.extents;
    const void *bias_host = !s && pb.has_bias ? pb.bias_host : NULL;
    const void *inputs[] = {q, bias_host, o};
    const size_t input_bytes[] = {ext->q, bias_host ? ext->bias : 0, ext->o};
    if (!s && (!q || !o))
        s = ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "kv cache attention: q or o is NULL");
    if (!s) s = buffer_from_host(ctx, CL_MEM_READ_ONLY, ext->q, q, &qb, "Q");
    if (!s) s = host_output_buffer(ctx, ext->o, o, inputs, input_bytes, 2, &ob, "O");
    if (!s && lse) s = host_output_buffer(ctx, ext->lse, lse, inputs, input_bytes, 3, &lb, "LSE");
    if (!s && bias_host)
        s = buffer_from_host(ctx, CL_MEM_READ_ONLY, ext->bias, bias_host, &bias, "bias");
    attn_buffers b = {qb, c->k, c->v, ob, lb, bias, c->lengths_buf, NULL, c->table_buf, 0};
    if (!s) s = attention_on_buffers(ctx, &pb, &b, NULL);
    const char *reading = "kv cache attention: reading results";
    if (!s) s = buffer_to_host(ctx, ob, ext->o, o, reading);
    if (!s && lse) s = buffer_to_host(ctx, lb, ext->lse, lse, reading);
    if (!s) stats_record_transfers(ctx);
    cl_mem all[] = {qb, ob, lb, bias};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        if (all[i]) clReleaseMemObject(all[i]);
    problem_release(&pb);
    return s;
}

clattn_status clattn_kv_cache_attention_host(clattn_kv_cache *c, const clattn_attention_desc *desc,
                                             const void *q, const int32_t *q_len, void *o,
                                             float *lse) {
    return c ? IN_CONTEXT(c->ctx, attention_host_in_call(c, desc, q, q_len, o, lse))
             : CLATTN_ERR_INVALID_ARGUMENT;
}

static clattn_status reference_in_call(clattn_kv_cache *c, const clattn_attention_desc *desc,
                                       const void *q, const int32_t *q_len, void *o, float *lse) {
    ctx_clear_error(c->ctx);
    attn_problem pb;
    void *k = malloc(c->k_bytes), *v = malloc(c->v_bytes);
    clattn_status s = cache_problem(c, desc, q_len, BIAS_FROM_HOST, &pb);
    if (!s && (!k || !v)) s = ctx_error(c->ctx, CLATTN_ERR_OUT_OF_MEMORY, "kv cache: host copy");
    if (!s) s = copy_storage(c, k, v, 0);
    if (!s) s = reference_attention_store(&pb, q, k, v, pb.bias_host, o, lse, &c->ctx->error);
    free(k);
    free(v);
    problem_release(&pb);
    return s;
}

clattn_status clattn_kv_cache_reference(clattn_kv_cache *c, const clattn_attention_desc *desc,
                                        const void *q, const int32_t *q_len, void *o, float *lse) {
    return c ? IN_CONTEXT(c->ctx, reference_in_call(c, desc, q, q_len, o, lse))
             : CLATTN_ERR_INVALID_ARGUMENT;
}
