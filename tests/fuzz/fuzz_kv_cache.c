/*
 * libFuzzer target: the KV cache (clattn_kv_cache_*) on the device, under a sequence of calls
 * that the input chooses. The input is a cache (contiguous or paged, every dtype and layout,
 * created or wrapping the harness's guarded buffers), then up to MAX_OPS operations: a new block
 * table, new lengths, an append of device rows (any dtype, offsets and strides, new_len), an
 * append of host rows, and attention over the cache (q_len, causal, windows, global tokens,
 * block layouts). Indices and sizes are mostly valid, and hostile one time in sixteen.
 *
 * A model on the host holds what the cache must hold: lengths, table, and every value of the
 * storage. After each call:
 * - a call that breaks a rule of the cache (a page index out of range, a page twice in a
 *   sequence's row, a row without a page, an append into a page another sequence names, a
 *   length past the capacity, new_len out of [0, len]) must be refused, and a plainly valid one
 *   accepted; a refused call must change nothing;
 * - the storage read back equals the model, value for value (q8_0, q4_0 within their quantum),
 *   and the guard bytes around wrapped storage are intact;
 * - attention equals clattn_kv_cache_reference, and writes nothing past O and LSE.
 * Built and run by tests/fuzz/run.sh.
 */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_OPS = 12, QBLOCK = 32, Q8_BLOCK_BYTES = 34, Q4_BLOCK_BYTES = 18 };

/* What the cache must hold. Storage is [entries][rows][Hkv][D] (BSHD) or [entries][Hkv][rows][D]
 * (BHSD), entries being sequences (contiguous) or pages, for K and for V. */
typedef struct model {
    clattn_kv_cache_desc d;
    size_t entries, rows, max_pages;
    float *values[2], *tol[2]; /* K, V: expected value, allowed error */
    size_t count[2], bytes[2]; /* values and storage bytes of K and V */
    int32_t *lengths, *table;  /* [B], [B][max_pages] */
} model;

typedef struct cache_under_test {
    clattn_kv_cache *cache;
    guarded_buffer storage[2]; /* K, V when wrapped */
    model m;
} cache_under_test;

static size_t dim_of(const model *m, int kv) {
    return kv ? m->d.dim_v : m->d.dim_qk;
}

/* Index of value (entry, row, head, x) of K (kv 0) or V (kv 1). */
static size_t storage_index(const model *m, int kv, size_t entry, size_t row, size_t head,
                            size_t x) {
    size_t h = m->d.heads_kv, dim = dim_of(m, kv);
    return m->d.layout == CLATTN_LAYOUT_BSHD ? ((entry * m->rows + row) * h + head) * dim + x
                                             : ((entry * h + head) * m->rows + row) * dim + x;
}

/* Whether row j of sequence b has a page (always, contiguous); *entry and *row where it lives. */
static int locate(const model *m, size_t b, size_t j, size_t *entry, size_t *row) {
    if (!m->d.page_size) return *entry = b, *row = j, 1;
    int32_t page = m->table[b * m->max_pages + j / m->d.page_size];
    *entry = (size_t)page, *row = j % m->d.page_size;
    return page >= 0;
}

static int quantised(clattn_dtype dtype) { return dtype == CLATTN_Q8_0 || dtype == CLATTN_Q4_0; }

static size_t storage_bytes(clattn_dtype dtype, size_t values) {
    static const size_t size[] = {4, 2, 2};
    if (dtype == CLATTN_Q8_0) return values / QBLOCK * Q8_BLOCK_BYTES;
    if (dtype == CLATTN_Q4_0) return values / QBLOCK * Q4_BLOCK_BYTES;
    return values * size[dtype];
}

/* The largest error of a stored value in a block whose largest magnitude is block_max: q8_0
 * rounds to block_max/127, q4_0 to block_max/8 (its top level, +7 of -8, clamps a whole step);
 * 1% more for the float16 scale. */
static float quantum(clattn_dtype dtype, float block_max) {
    return (dtype == CLATTN_Q8_0 ? block_max / 127.0f : block_max / 8.0f) * 1.01f;
}

/* ---------------------------------------------------------------- the cache and its model */

/* Whether the library must accept the desc (1), must refuse it (0), or may do either (-1: sizes
 * so large that the storage may not fit). */
static int desc_valid(const clattn_kv_cache_desc *d) {
    if (!d->batch || !d->heads_kv || !d->dim_qk || !d->dim_v || !d->capacity ||
        d->capacity > INT32_MAX || (unsigned)d->dtype > CLATTN_Q4_0 || (unsigned)d->layout > 1)
        return 0;
    if (quantised(d->dtype) && (d->dim_qk % QBLOCK || d->dim_v % QBLOCK)) return 0;
    if (d->page_size && (d->capacity % d->page_size || !d->num_pages || d->num_pages > INT32_MAX))
        return 0;
    size_t small = 64; /* every size the harness takes in range is below this */
    if (d->batch > small || d->heads_kv > small || d->capacity > small || d->num_pages > small ||
        d->dim_qk > small || d->dim_v > small)
        return -1;
    return 1;
}

static void model_init(model *m, const clattn_kv_cache_desc *d, const int32_t *lengths) {
    memset(m, 0, sizeof *m);
    m->d = *d;
    m->entries = d->page_size ? d->num_pages : d->batch;
    m->rows = d->page_size ? d->page_size : d->capacity;
    m->max_pages = d->page_size ? d->capacity / d->page_size : 0;
    for (int kv = 0; kv < 2; kv++) {
        m->count[kv] = m->entries * m->rows * d->heads_kv * dim_of(m, kv);
        m->bytes[kv] = storage_bytes(d->dtype, m->count[kv]);
        m->values[kv] = calloc(m->count[kv], sizeof(float));
        m->tol[kv] = calloc(m->count[kv], sizeof(float));
    }
    m->lengths = calloc(d->batch, sizeof *m->lengths);
    m->table = malloc((m->max_pages ? d->batch * m->max_pages : 1) * sizeof *m->table);
    if (lengths) memcpy(m->lengths, lengths, d->batch * sizeof *lengths);
    for (size_t i = 0; i < d->batch * m->max_pages; i++) m->table[i] = -1;
}

static void model_free(model *m) {
    for (int kv = 0; kv < 2; kv++) free(m->values[kv]), free(m->tol[kv]);
    free(m->lengths);
    free(m->table);
}

/* Storage for a wrapped cache: values -125..125 by index, stored as the dtype; the model takes
 * what they read back as (q8_0 and q4_0 round them). */
static void wrap_storage(cache_under_test *c, size_t short_by) {
    model *m = &c->m;
    for (int kv = 0; kv < 2; kv++) {
        float *x = malloc(m->count[kv] * sizeof *x);
        void *stored = malloc(m->bytes[kv] ? m->bytes[kv] : 1);
        for (size_t i = 0; i < m->count[kv]; i++) x[i] = (float)((i * 7 + kv) % 251) - 125.0f;
        clattn_convert(CLATTN_F32, x, m->d.dtype, stored, m->count[kv]);
        clattn_convert(m->d.dtype, stored, CLATTN_F32, m->values[kv], m->count[kv]);
        guarded_create(&c->storage[kv], m->bytes[kv] - (short_by < m->bytes[kv] ? short_by : 0),
                       stored);
        free(x);
        free(stored);
    }
}

/* Initial lengths for a wrapped cache: NULL (zeros), or [B] values, some hostile. *ok says
 * whether the library must take them (a paged cache starts empty). */
static int32_t *take_lengths(fuzz_input *in, const clattn_kv_cache_desc *d, int *ok) {
    *ok = 1;
    if (!take_flag(in)) return NULL;
    int32_t *lengths = malloc(d->batch * sizeof *lengths);
    for (size_t b = 0; b < d->batch; b++) {
        lengths[b] = take_index32(in, 0, (int32_t)d->capacity);
        *ok &= lengths[b] >= 0 && (size_t)lengths[b] <= d->capacity &&
               (!d->page_size || lengths[b] == 0);
    }
    return lengths;
}

/* Head dims 17 to 32 share one kernel build (the 32 bucket); q8_0 and q4_0 take 32 only. The kernels'
 * other axes (dtypes, rows a work-item) already make some 30 builds. */
static clattn_kv_cache_desc take_cache_desc(fuzz_input *in) {
    static const size_t dims[] = {32, 17, 32, 20, 0, 31, 32, 24};
    clattn_kv_cache_desc d;
    clattn_kv_cache_desc_init(&d, take_count(in, 1, 3), take_count(in, 1, 2),
                              take_choice(in, dims, 8), take_choice(in, dims, 8), 1);
    d.dtype = (clattn_dtype)take_index32(in, 0, CLATTN_Q4_0);
    d.layout = (clattn_layout)take_index32(in, 0, 1);
    if (take_flag(in)) {
        d.page_size = take_count(in, 1, 8);
        d.num_pages = take_count(in, 1, 8);
        d.capacity = d.page_size * take_size(in, 1, 4) + (take_byte(in) >= 240);
    } else {
        d.capacity = take_count(in, 1, 24);
    }
    return d;
}

/* The cache the input describes, and its model; 0 when the library (rightly) refused it. */
static int make_cache(fuzz_input *in, cache_under_test *c) {
    clattn_kv_cache_desc d = take_cache_desc(in);
    fuzz_trace("cache: B=%zu Hkv=%zu D=%zu/%zu capacity=%zu dtype=%d layout=%d page_size=%zu "
               "pages=%zu",
               d.batch, d.heads_kv, d.dim_qk, d.dim_v, d.capacity, (int)d.dtype, (int)d.layout,
               d.page_size, d.num_pages);
    int valid = desc_valid(&d), wrap = take_flag(in) && valid == 1, lengths_ok = 1;
    size_t short_by = take_byte(in) >= 240; /* wrapped storage one byte too small */
    int32_t *lengths = wrap ? take_lengths(in, &d, &lengths_ok) : NULL;
    clattn_context *ctx = fuzz_context();
    clattn_status s;
    if (valid == 1) model_init(&c->m, &d, lengths_ok ? lengths : NULL);
    if (wrap) {
        wrap_storage(c, short_by);
        s = clattn_kv_cache_wrap(ctx, &d, c->storage[0].inner, c->storage[1].inner, lengths,
                                 &c->cache);
        valid = valid && lengths_ok && !short_by;
    } else {
        s = clattn_kv_cache_create(ctx, &d, &c->cache);
    }
    expect_status(ctx, s, 0, wrap ? "clattn_kv_cache_wrap" : "clattn_kv_cache_create");
    if (!s && valid == 0) fuzz_fail("a kv cache that breaks a rule was accepted");
    if (s && valid == 1)
        fuzz_fail("a valid kv cache was refused: %s", clattn_context_last_error(ctx));
    free(lengths);
    if (!s && valid == 1) return 1;
    clattn_kv_cache_destroy(c->cache); /* refused, or accepted with sizes too large to model */
    for (int kv = 0; kv < 2; kv++) guarded_release(&c->storage[kv]);
    model_free(&c->m);
    return 0;
}

/* ---------------------------------------------------------------- checks after each call */

static void expect_storage(cache_under_test *c, const char *after) {
    model *m = &c->m;
    void *raw[2];
    for (int kv = 0; kv < 2; kv++) raw[kv] = malloc(m->bytes[kv]);
    clattn_status s = clattn_kv_cache_read_host(c->cache, raw[0], raw[1]);
    if (s) fuzz_fail("reading the storage back after %s: %s", after, clattn_status_name(s));
    for (int kv = 0; kv < 2; kv++) {
        float *got = widen(m->d.dtype, raw[kv], m->count[kv]);
        for (size_t i = 0; i < m->count[kv]; i++) {
            float want = m->values[kv][i], tol = m->tol[kv][i];
            if (!(fabsf(got[i] - want) <= tol))
                fuzz_fail("after %s: %s storage value %zu of %zu is %g, expected %g", after,
                          kv ? "V" : "K", i, m->count[kv], got[i], want);
        }
        free(got);
        free(raw[kv]);
        if (c->storage[kv].whole) guarded_check(&c->storage[kv], kv ? "V storage" : "K storage");
    }
    int32_t *lengths = malloc(m->d.batch * sizeof *lengths);
    clattn_kv_cache_lengths(c->cache, lengths);
    for (size_t b = 0; b < m->d.batch; b++)
        if (lengths[b] != m->lengths[b])
            fuzz_fail("after %s: sequence %zu has length %d, expected %d", after, b, lengths[b],
                      m->lengths[b]);
    free(lengths);
}

/* Whether rows [first, end) of sequence b all have pages in `table`. */
static int rows_have_pages(const model *m, const int32_t *table, size_t b, size_t first,
                           size_t end) {
    for (size_t j = first; m->d.page_size && j < end; j++)
        if (table[b * m->max_pages + j / m->d.page_size] < 0) return 0;
    return 1;
}

/* Whether a sequence's row of `table` names a page twice. */
static int page_twice_in_a_row(const model *m, const int32_t *table) {
    for (size_t b = 0; b < m->d.batch; b++)
        for (size_t p = 0; p < m->max_pages; p++)
            for (size_t q = p + 1; q < m->max_pages; q++)
                if (table[b * m->max_pages + p] >= 0 &&
                    table[b * m->max_pages + p] == table[b * m->max_pages + q])
                    return 1;
    return 0;
}

/* Whether rows [first, end) of sequence b lie in a page that another sequence names too. */
static int rows_in_shared_page(const model *m, size_t b, size_t first, size_t end) {
    for (size_t j = first; m->d.page_size && j < end; j++) {
        int32_t page = m->table[b * m->max_pages + j / m->d.page_size];
        for (size_t i = 0; page >= 0 && i < m->d.batch * m->max_pages; i++)
            if (i / m->max_pages != b && m->table[i] == page) return 1;
    }
    return 0;
}

/* The library's answer against the model's: a call that breaks a rule must be refused, a
 * plainly valid one (`must_accept`) accepted. */
static void expect_verdict(clattn_status s, int valid, int must_accept, const char *call) {
    expect_status(fuzz_context(), s, 0, call);
    if (!s && !valid) fuzz_fail("%s accepted a call that breaks a rule of the cache", call);
    if (s && valid && must_accept)
        fuzz_fail("%s refused a valid call: %s", call, clattn_context_last_error(fuzz_context()));
}

/* ---------------------------------------------------------------- table and lengths */

static void op_set_table(fuzz_input *in, cache_under_test *c, unsigned op) {
    (void)op;
    model *m = &c->m;
    size_t n = m->d.batch * m->max_pages;
    int32_t *table = malloc((n ? n : 1) * sizeof *table);
    int valid = m->d.page_size != 0;
    for (size_t i = 0; i < n; i++) {
        table[i] = take_index32(in, -1, (int32_t)m->d.num_pages - 1);
        valid &= table[i] >= -1 && table[i] < (int64_t)m->d.num_pages;
    }
    for (size_t b = 0; valid && b < m->d.batch; b++)
        valid = rows_have_pages(m, table, b, 0, (size_t)m->lengths[b]);
    valid = valid && !page_twice_in_a_row(m, table);
    int32_t *exact = exact_copy(table, n * sizeof *table); /* NULL for a contiguous cache */
    clattn_status s = clattn_kv_cache_set_block_table(c->cache, exact);
    expect_verdict(s, valid, 1, "clattn_kv_cache_set_block_table");
    if (!s) memcpy(m->table, table, n * sizeof *table);
    free(exact);
    free(table);
}

static void op_set_lengths(fuzz_input *in, cache_under_test *c, unsigned op) {
    (void)op;
    model *m = &c->m;
    int32_t *lengths = malloc(m->d.batch * sizeof *lengths);
    int valid = 1;
    for (size_t b = 0; b < m->d.batch; b++) {
        lengths[b] = take_index32(in, 0, (int32_t)m->d.capacity);
        valid &= lengths[b] >= 0 && (size_t)lengths[b] <= m->d.capacity &&
                 rows_have_pages(m, m->table, b, 0, (size_t)lengths[b]);
    }
    clattn_status s = clattn_kv_cache_set_lengths(c->cache, lengths);
    expect_verdict(s, valid, 1, "clattn_kv_cache_set_lengths");
    if (!s) memcpy(m->lengths, lengths, m->d.batch * sizeof *lengths);
    free(lengths);
}

/* ---------------------------------------------------------------- appends */

/* New rows as the caller gives them: [B, len, Hkv, D] tensors of K and V in `dtype`, values
 * -127..127 (exact in every float type) by element index and operation. */
typedef struct new_rows {
    clattn_dtype dtype;
    size_t len;
    clattn_tensor t[2];
    size_t count[2]; /* values each buffer holds */
    float *values[2];
    int32_t *new_len; /* exactly [B], or NULL */
} new_rows;

/* The highest value index that tensor kv reads for the rows appended (+1), or 0. */
static size_t rows_extent(const model *m, const new_rows *r, int kv, const int32_t *counts) {
    size_t end = 0, dim = dim_of(m, kv);
    const clattn_tensor *t = &r->t[kv];
    for (size_t b = 0; b < m->d.batch; b++) {
        if (counts[b] <= 0) continue;
        size_t last = t->offset + b * t->stride_batch + (m->d.heads_kv - 1) * t->stride_head +
                      (size_t)(counts[b] - 1) * t->stride_seq + dim;
        if (last > end) end = last;
    }
    return end;
}

/* The model of an accepted append: rows lengths[b] + t of each sequence take row t. */
static void model_append(model *m, const new_rows *r, const int32_t *counts) {
    for (int kv = 0; kv < 2; kv++) {
        size_t dim = dim_of(m, kv);
        const clattn_tensor *t = &r->t[kv];
        for (size_t b = 0; b < m->d.batch; b++)
            for (size_t i = 0; i < (size_t)counts[b]; i++)
                for (size_t h = 0; h < m->d.heads_kv; h++) {
                    size_t entry = 0, row = 0;
                    if (!locate(m, b, (size_t)m->lengths[b] + i, &entry, &row))
                        continue; /* failed already as accepted; the storage check goes on */
                    const float *src = r->values[kv] + t->offset + b * t->stride_batch +
                                       h * t->stride_head + i * t->stride_seq;
                    for (size_t x = 0; x < dim; x++) {
                        size_t at = storage_index(m, kv, entry, row, h, x);
                        float block_max = 0; /* q8_0, q4_0: the largest |value| of x's block */
                        for (size_t y = x - x % QBLOCK;
                             quantised(m->d.dtype) && y < x - x % QBLOCK + QBLOCK; y++)
                            block_max = fmaxf(block_max, fabsf(src[y]));
                        m->values[kv][at] = src[x];
                        m->tol[kv][at] = quantum(m->d.dtype, block_max);
                    }
                }
    }
    for (size_t b = 0; b < m->d.batch; b++) m->lengths[b] += counts[b];
}

/* The cache-side rules: new_len in [0, len], within the capacity and the pages, and no page
 * written that another sequence names too. */
static int append_valid(const model *m, const new_rows *r, int32_t *counts) {
    int valid = 1;
    for (size_t b = 0; b < m->d.batch; b++) {
        counts[b] = r->new_len ? r->new_len[b] : (int32_t)r->len;
        if (counts[b] < 0 || (size_t)counts[b] > r->len) {
            valid = 0, counts[b] = 0;
            continue;
        }
        size_t end = (size_t)m->lengths[b] + (size_t)counts[b];
        valid &= end <= m->d.capacity && rows_have_pages(m, m->table, b, m->lengths[b], end) &&
                 !rows_in_shared_page(m, b, m->lengths[b], end);
    }
    return valid;
}

/* A tensor's strides: dense in a layout, or (one time in four) each stride and the offset
 * taken from the input, small or hostile. */
static void take_tensor(fuzz_input *in, const model *m, new_rows *r, int kv) {
    size_t dim = dim_of(m, kv);
    clattn_layout layout = take_flag(in) ? CLATTN_LAYOUT_BHSD : CLATTN_LAYOUT_BSHD;
    clattn_tensor_dense(&r->t[kv], layout, m->d.heads_kv, r->len, dim, take_size(in, 0, 3));
    if (take_size(in, 0, 3) == 0) {
        clattn_tensor *t = &r->t[kv];
        t->offset = take_count(in, 0, 8);
        t->stride_batch = take_count(in, 0, 2 * t->stride_batch + 2);
        t->stride_head = take_count(in, 0, 2 * t->stride_head + 2);
        t->stride_seq = take_count(in, 0, 2 * t->stride_seq + 2);
    }
}

/* The values tensor kv spans (+1), or 0 when that passes 2^20 (hostile offsets or strides). */
static size_t tensor_span(const model *m, const new_rows *r, int kv) {
    const clattn_tensor *t = &r->t[kv];
    size_t limit = 1 << 20, span = dim_of(m, kv);
    size_t far[4] = {1, m->d.batch - 1, m->d.heads_kv - 1, r->len ? r->len - 1 : 0};
    size_t stride[4] = {t->offset, t->stride_batch, t->stride_head, t->stride_seq};
    for (int i = 0; i < 4; i++) {
        if (stride[i] && far[i] > limit / stride[i]) return 0;
        span += far[i] * stride[i];
        if (span > limit) return 0;
    }
    return span;
}

/* Buffers for the tensors: their span (where `may_short`, one value less one time in
 * sixteen), or one value when the span is too large (the call must be refused then:
 * *too_large), and the values in them. */
static void fill_rows(fuzz_input *in, const model *m, new_rows *r, unsigned op, int may_short,
                      int *too_large) {
    *too_large = 0;
    for (int kv = 0; kv < 2; kv++) {
        size_t span = tensor_span(m, r, kv);
        *too_large |= !span;
        r->count[kv] = span ? span - (may_short && take_byte(in) >= 240 && span > 1) : 1;
        r->values[kv] = malloc(r->count[kv] * sizeof(float));
        for (size_t i = 0; i < r->count[kv]; i++)
            r->values[kv][i] = (float)((i * 13 + op * 29 + (size_t)kv * 5) % 255) - 127.0f;
    }
}

static void rows_free(new_rows *r) {
    free(r->values[0]), free(r->values[1]), free(r->new_len);
}

/* new_len: NULL (len each), or [B] values in [0, len], some hostile. */
static void take_new_len(fuzz_input *in, const model *m, new_rows *r) {
    r->new_len = NULL;
    if (!take_flag(in)) return;
    r->new_len = malloc(m->d.batch * sizeof *r->new_len);
    for (size_t b = 0; b < m->d.batch; b++) r->new_len[b] = take_index32(in, 0, (int32_t)r->len);
}

/* An append of device rows (clattn_kv_cache_append). */
static void op_append(fuzz_input *in, cache_under_test *c, unsigned op) {
    model *m = &c->m;
    new_rows r;
    memset(&r, 0, sizeof r);
    r.dtype = (clattn_dtype)take_index32(in, 0, 2);
    r.len = take_size(in, 0, 6);
    take_tensor(in, m, &r, 0);
    take_tensor(in, m, &r, 1);
    take_new_len(in, m, &r);
    int too_large = 0;
    fill_rows(in, m, &r, op, 1, &too_large);
    int32_t *counts = malloc(m->d.batch * sizeof *counts);
    int valid = append_valid(m, &r, counts), dtype_ok = (unsigned)r.dtype <= 2;
    guarded_buffer buf[2];
    for (int kv = 0; kv < 2; kv++) {
        void *stored = malloc(r.count[kv] * 4);
        clattn_convert(CLATTN_F32, r.values[kv], dtype_ok ? r.dtype : CLATTN_F32, stored,
                       r.count[kv]);
        guarded_create(&buf[kv], storage_bytes(dtype_ok ? r.dtype : CLATTN_F32, r.count[kv]),
                       stored);
        free(stored);
    }
    clattn_kv_rows rows = {buf[0].inner, buf[1].inner, r.t[0], r.t[1], r.dtype, r.len, r.new_len};
    clattn_status s = clattn_kv_cache_append(c->cache, &rows);
    int fits = r.len == 0 || /* zero rows read nothing */
               (!too_large && rows_extent(m, &r, 0, counts) <= r.count[0] &&
                rows_extent(m, &r, 1, counts) <= r.count[1]);
    expect_verdict(s, valid && dtype_ok, 0, "clattn_kv_cache_append");
    if (!s && !fits) fuzz_fail("clattn_kv_cache_append accepted rows past their buffers");
    clFinish(clattn_context_queue(fuzz_context()));
    if (!s) model_append(m, &r, counts);
    for (int kv = 0; kv < 2; kv++) guarded_check(&buf[kv], "new rows"), guarded_release(&buf[kv]);
    free(counts);
    rows_free(&r);
}

/* An append of host rows (clattn_kv_cache_append_host): dense in the cache's layout, stored as
 * its dtype (float32 for q8_0 and q4_0), in arrays of exactly that size. */
static void op_append_host(fuzz_input *in, cache_under_test *c, unsigned op) {
    model *m = &c->m;
    new_rows r;
    memset(&r, 0, sizeof r);
    r.dtype = quantised(m->d.dtype) ? CLATTN_F32 : m->d.dtype;
    r.len = take_size(in, 0, 6);
    for (int kv = 0; kv < 2; kv++)
        clattn_tensor_dense(&r.t[kv], m->d.layout, m->d.heads_kv, r.len ? r.len : 1, dim_of(m, kv),
                            0);
    take_new_len(in, m, &r);
    int too_large = 0; /* never: dense rows */
    fill_rows(in, m, &r, op, 0, &too_large);
    int32_t *counts = malloc(m->d.batch * sizeof *counts);
    int valid = append_valid(m, &r, counts) && r.len > 0;
    void *stored[2];
    for (int kv = 0; kv < 2; kv++) {
        stored[kv] = malloc(r.count[kv] * 4);
        clattn_convert(CLATTN_F32, r.values[kv], r.dtype, stored[kv], r.count[kv]);
    }
    size_t bytes = storage_bytes(r.dtype, 1);
    void *k = exact_copy(stored[0], r.count[0] * bytes);
    void *v = exact_copy(stored[1], r.count[1] * bytes);
    clattn_status s = clattn_kv_cache_append_host(c->cache, k, v, r.len, r.new_len);
    expect_verdict(s, valid, 1, "clattn_kv_cache_append_host");
    if (!s) model_append(m, &r, counts);
    free(k), free(v), free(stored[0]), free(stored[1]), free(counts);
    rows_free(&r);
}

/* ---------------------------------------------------------------- attention over the cache */

/* ceil(n / block), 1 for a block of 0 (the desc is refused then). */
static size_t blocks(size_t n, size_t block) {
    return block ? n / block + (n % block != 0) : 1;
}

/* Masks of docs/semantics.md section 2 on the desc: causal, a window, global tokens, a block layout (arrays
 * exactly as large as the desc says; freed by the caller through *global and *layout). */
static void take_masks(fuzz_input *in, const model *m, clattn_attention_desc *d, int64_t **global,
                       uint8_t **layout) {
    d->causal = take_flag(in);
    if (take_flag(in)) {
        d->window_left = take_index64(in, -1, 6);
        d->window_right = take_index64(in, -1, 6);
    }
    size_t n = take_size(in, 0, 2);
    int64_t tokens[2];
    for (size_t i = 0; i < n; i++) tokens[i] = take_index64(in, 0, (int64_t)m->d.capacity - 1);
    *global = exact_copy(tokens, n * sizeof *tokens);
    d->global_tokens = *global, d->num_global_tokens = n;
    if (!take_flag(in)) return;
    d->block_q = take_count(in, 1, 4), d->block_k = take_count(in, 1, 8);
    d->block_layout_per_head = take_flag(in);
    size_t rows = blocks(d->len_q, d->block_q), cols = blocks(m->d.capacity, d->block_k);
    size_t heads = d->block_layout_per_head ? d->heads_q : 1, bytes = heads * rows * cols;
    if (heads > 64 || rows > 64 || cols > 64) return; /* a hostile size: no layout */
    *layout = malloc(bytes ? bytes : 1);
    for (size_t i = 0; i < bytes; i++) (*layout)[i] = take_flag(in);
    d->block_layout = *layout;
}

/* A desc for attention over the cache: the cache's shape, 1 or 2 query heads a kv head, up to
 * 4 query rows, float32 Q and O (other dtypes would multiply the kernel builds; the test suite
 * covers them); one time in sixteen, one field hostile. */
static void take_desc(fuzz_input *in, const model *m, clattn_attention_desc *d) {
    const clattn_kv_cache_desc *c = &m->d;
    size_t group = take_size(in, 1, 2), len_q = take_size(in, 1, 4);
    clattn_layout layout = take_flag(in) ? CLATTN_LAYOUT_BHSD : CLATTN_LAYOUT_BSHD;
    clattn_attention_desc_init(d, layout, c->batch, c->heads_kv * group, c->heads_kv, len_q, 1,
                               c->dim_qk, c->dim_v);
    d->scale = 1.0f / (8.0f * (float)c->dim_qk); /* scores within about +-16 */
    static const clattn_variant variants[] = {CLATTN_VARIANT_AUTO, CLATTN_VARIANT_SPLIT,
                                              CLATTN_VARIANT_REFERENCE, CLATTN_VARIANT_LANES};
    d->variant = variants[take_size(in, 0, 3)];
    if (take_byte(in) < 240) return;
    size_t *fields[] = {&d->batch,         &d->heads_q,        &d->heads_kv, &d->len_q,
                        &d->dim_qk,        &d->dim_v,          &d->q.offset, &d->q.stride_seq,
                        &d->o.stride_head, &d->o.stride_batch, &d->len_k};
    *fields[take_size(in, 0, 10)] = take_count(in, 1, 4);
}

/* Q values k/64, k in -64..64 (exact in float16), stored as dtype in `bytes` bytes. */
static void *make_q(clattn_dtype dtype, size_t bytes, unsigned op) {
    size_t count = bytes / (dtype == CLATTN_F32 ? 4 : 2);
    float *x = malloc((count ? count : 1) * sizeof *x);
    void *q = malloc(bytes ? bytes : 1);
    for (size_t i = 0; i < count; i++) x[i] = (float)((i * 11 + op * 3) % 129) / 64.0f - 1.0f;
    clattn_convert(CLATTN_F32, x, dtype, q, count);
    free(x);
    return q;
}

/* The extents of the call's Q, O and LSE, as the library checks the desc over the cache (K and
 * V dense over the capacity). @return 0 when the desc is refused or too large to run. */
static int call_extents(const model *m, const clattn_attention_desc *d,
                        clattn_attention_extents *ext) {
    clattn_attention_desc over = *d;
    over.len_k = m->d.capacity;
    clattn_tensor_dense(&over.k, m->d.layout, m->d.heads_kv, m->d.capacity, m->d.dim_qk, 0);
    clattn_tensor_dense(&over.v, m->d.layout, m->d.heads_kv, m->d.capacity, m->d.dim_v, 0);
    if (clattn_attention_desc_check(&over, ext, NULL, 0) != CLATTN_SUCCESS) return 0;
    return ext->q <= (1 << 20) && ext->o <= (1 << 20) && ext->lse <= (1 << 20);
}

/* O and LSE of the device call against clattn_kv_cache_reference's. */
static void compare_outputs(const clattn_attention_desc *d, const clattn_attention_extents *ext,
                            guarded_buffer *o, guarded_buffer *lse, const void *o_ref,
                            const float *lse_ref) {
    size_t elem = d->out_dtype == CLATTN_F32 ? 4 : 2, count = ext->o / elem;
    void *o_got = malloc(ext->o);
    guarded_read(o, o_got);
    float *got = widen(d->out_dtype, o_got, count), *want = widen(d->out_dtype, o_ref, count);
    double rtol = d->out_dtype == CLATTN_F32 ? 1e-4 : 2e-3; /* a float16 ulp either way */
    expect_close("O against the reference", got, want, count, 2e-3, rtol);
    free(got), free(want), free(o_got);
    if (!lse->bytes) return;
    float *lse_got = malloc(ext->lse);
    guarded_read(lse, lse_got);
    expect_close("LSE against the reference", lse_got, lse_ref, ext->lse / 4, 1e-3, 1e-4);
    free(lse_got);
}

/* The device call and the reference on one desc: equal statuses, equal results. */
static void run_attention(cache_under_test *c, const clattn_attention_desc *d,
                          const clattn_attention_extents *ext, int short_q, const int32_t *q_len,
                          int with_lse, unsigned op) {
    clattn_context *ctx = fuzz_context();
    void *q = make_q(d->dtype, ext->q, op);
    guarded_buffer qb, ob, lb;
    guarded_create(&qb, ext->q - (short_q && ext->q > 1), q);
    guarded_create(&ob, ext->o, NULL);
    guarded_create(&lb, with_lse ? ext->lse : 0, NULL);
    clattn_status s =
        clattn_kv_cache_attention(c->cache, d, qb.inner, q_len, ob.inner, lb.inner, NULL);
    clFinish(clattn_context_queue(ctx));
    expect_status(ctx, s, d->variant != CLATTN_VARIANT_AUTO, "clattn_kv_cache_attention");
    if (!s && short_q) fuzz_fail("clattn_kv_cache_attention accepted a Q buffer too small");
    void *q_host = exact_copy(q, ext->q), *o_ref = malloc(ext->o);
    float *lse_ref = with_lse ? malloc(ext->lse) : NULL;
    memset(o_ref, 0x7f, ext->o); /* as the device's O starts */
    clattn_status r = clattn_kv_cache_reference(c->cache, d, q_host, q_len, o_ref, lse_ref);
    expect_status(ctx, r, 0, "clattn_kv_cache_reference");
    if (!short_q && s != CLATTN_ERR_UNSUPPORTED && (s == CLATTN_SUCCESS) != (r == CLATTN_SUCCESS))
        fuzz_fail("the device call returned %s and the reference %s", clattn_status_name(s),
                  clattn_status_name(r));
    guarded_check(&qb, "Q"), guarded_check(&ob, "O"), guarded_check(&lb, "LSE");
    if (!s && !r) compare_outputs(d, ext, &ob, &lb, o_ref, lse_ref);
    guarded_release(&qb), guarded_release(&ob), guarded_release(&lb);
    free(q), free(q_host), free(o_ref), free(lse_ref);
}

static void op_attention(fuzz_input *in, cache_under_test *c, unsigned op) {
    const model *m = &c->m;
    clattn_attention_desc d;
    take_desc(in, m, &d);
    int64_t *global = NULL;
    uint8_t *layout = NULL;
    take_masks(in, m, &d, &global, &layout);
    int32_t *q_len = NULL;
    if (take_flag(in)) {
        q_len = malloc(m->d.batch * sizeof *q_len);
        int32_t most = d.len_q < 64 ? (int32_t)d.len_q : 64;
        for (size_t b = 0; b < m->d.batch; b++) q_len[b] = take_index32(in, 0, most);
    }
    int short_q = take_byte(in) >= 240, with_lse = take_flag(in);
    clattn_attention_extents ext;
    if (call_extents(m, &d, &ext)) {
        run_attention(c, &d, &ext, short_q, q_len, with_lse, op);
    } else { /* refused by the checker: the call must refuse it too, before reading buffers */
        clattn_status s = clattn_kv_cache_attention(c->cache, &d, NULL, q_len, NULL, NULL, NULL);
        if (expect_status(fuzz_context(), s, 1, "clattn_kv_cache_attention") == CLATTN_SUCCESS)
            fuzz_fail("clattn_kv_cache_attention accepted NULL buffers");
    }
    free(global), free(layout), free(q_len);
}

/* ---------------------------------------------------------------- the target */

static void run_input(fuzz_input *in) {
    cache_under_test c;
    memset(&c, 0, sizeof c);
    if (!make_cache(in, &c)) return;
    expect_storage(&c, "creating the cache");
    static const struct {
        const char *name;
        void (*run)(fuzz_input *in, cache_under_test *c, unsigned op);
    } ops[] = {{"set_block_table", op_set_table},
               {"set_lengths", op_set_lengths},
               {"append", op_append},
               {"append_host", op_append_host},
               {"attention", op_attention}};
    for (unsigned op = 1; op <= MAX_OPS && fuzz_more(in); op++) {
        size_t which = take_size(in, 0, 4);
        fuzz_trace("op %u: %s", op, ops[which].name);
        ops[which].run(in, &c, op);
        expect_storage(&c, ops[which].name);
    }
    clattn_kv_cache_destroy(c.cache);
    for (int kv = 0; kv < 2; kv++) guarded_release(&c.storage[kv]);
    model_free(&c.m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_run(run_input, data, size);
    return 0;
}
