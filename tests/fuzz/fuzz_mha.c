/*
 * libFuzzer target: the attention layer (clattn_mha_*) on the device, with shapes, weights and
 * head masks from the input. The input is a layer - d_model, heads, head dims, d_kv, weight
 * dtype, each weight and bias a host array or a guarded device buffer at an offset (a buffer one
 * byte short, a weight missing or given twice, one time in sixteen) and a head mask - then up
 * to MAX_OPS operations: a new head mask, a forward call (clattn_mha_forward: B, N, Nk, dtypes,
 * causal, a window), and a call over a KV cache (clattn_mha_forward_cache with new_len).
 * Checks:
 * - a layer breaking a rule is refused and a valid one accepted; clattn_mha_get_info tells the
 *   shapes and the heads kept; a refused head mask leaves the layer as it was;
 * - Y equals clattn_mha_reference, and nothing is written past Y;
 * - over the cache, the lengths advance by new_len (or stay, on a refusal), and the valid rows
 *   of Y equal the reference over each sequence's whole history, causal as the call says.
 * Built and run by tests/fuzz/run.sh.
 */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_OPS = 6, MAX_B = 2, MAX_N = 4, MAX_HISTORY = 16 };

/* One weight or bias: its values in host memory (always, for the reference), and what the
 * layer is given: the host array, a guarded buffer, both, or neither. */
typedef struct param {
    void *host; /* offset + count values of the weight dtype */
    guarded_buffer buffer;
    size_t offset, count;
    int given_host, given_buffer;
} param;

typedef struct layer_under_test {
    clattn_mha_desc desc; /* as created, the head mask the current one */
    param params[8];      /* w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o */
    uint8_t *mask;        /* [heads_q], or NULL */
    clattn_mha *mha;
    clattn_kv_cache *cache; /* made at the first call over a cache */
    int cache_stale;        /* the head mask changed since the cache was filled */
    float *history[MAX_B];  /* the X rows each sequence appended, [len][d_model] */
    int32_t lengths[MAX_B]; /* the cache's lengths, as the model has them */
    size_t cache_batch, cache_capacity;
    clattn_dtype cache_dtype;
} layer_under_test;

static size_t elem_size(clattn_dtype dtype) {
    return dtype == CLATTN_F32 ? 4 : 2;
}

/* Values k/64 in [-1, 1) by index, stored as dtype (exact in every float type). */
static void *make_values(clattn_dtype dtype, size_t count, size_t salt) {
    float *x = malloc((count ? count : 1) * sizeof *x);
    void *out = malloc((count ? count : 1) * 4);
    for (size_t i = 0; i < count; i++) x[i] = (float)((i * 5 + salt * 11) % 128) / 64.0f - 1.0f;
    clattn_convert(CLATTN_F32, x, (unsigned)dtype <= 2 ? dtype : CLATTN_F32, out, count);
    free(x);
    return out;
}

/* ---------------------------------------------------------------- the layer */

/* Element counts of w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o (0 when a product overflows). */
static void param_counts(const clattn_mha_desc *d, size_t counts[8]) {
    size_t d_kv = d->d_kv ? d->d_kv : d->d_model;
    size_t rows[8] = {
        d->heads_q * d->dim_qk, d->heads_kv * d->dim_qk, d->heads_kv * d->dim_v, d->d_model,
        d->heads_q * d->dim_qk, d->heads_kv * d->dim_qk, d->heads_kv * d->dim_v, d->d_model};
    size_t cols[4] = {d->d_model, d_kv, d_kv, d->heads_q * d->dim_v};
    for (int i = 0; i < 8; i++) counts[i] = i < 4 ? rows[i] * cols[i] : rows[i];
}

static clattn_mha_param *slot_of(clattn_mha_desc *d, int which) {
    clattn_mha_param *slots[8] = {&d->w_q, &d->w_k, &d->w_v, &d->w_o,
                                  &d->b_q, &d->b_k, &d->b_v, &d->b_o};
    return slots[which];
}

/* How the layer gets one param: host or buffer (one time in sixteen both, or, for a weight,
 * neither), an offset, a buffer one byte short one time in sixteen. @return 0 when it is
 * given in a way that must be refused. */
static int take_param(fuzz_input *in, layer_under_test *l, int which, size_t count) {
    param *p = &l->params[which];
    size_t elem = elem_size(l->desc.weight_dtype);
    p->count = count, p->offset = take_size(in, 0, 3);
    int present = which < 4 || take_flag(in), how = take_byte(in), ok = 1;
    p->given_buffer = present && (how & 1);
    p->given_host = present && !(how & 1);
    if (how >= 240) { /* hostile: both given, or a weight given neither way */
        ok = 0;
        p->given_host = p->given_buffer = which < 4 && (how & 2) ? 0 : 1;
        if (which >= 4) p->given_host = p->given_buffer = 1;
    }
    p->host = make_values(l->desc.weight_dtype, p->offset + count, (size_t)which);
    if (p->given_buffer) {
        size_t bytes = (p->offset + count) * elem;
        size_t short_by = take_byte(in) >= 240 && bytes > 1; /* a byte */
        guarded_create(&p->buffer, bytes - short_by, p->host);
        ok &= !short_by;
    }
    clattn_mha_param *slot = slot_of(&l->desc, which);
    slot->host = p->given_host ? exact_copy(p->host, (p->offset + count) * elem) : NULL;
    slot->buffer = p->given_buffer ? p->buffer.inner : NULL;
    slot->offset = p->offset;
    return ok;
}

/* A head mask [heads_q] (NULL one time in four); *kept counts the heads it keeps. */
static uint8_t *take_mask(fuzz_input *in, size_t heads, size_t *kept) {
    *kept = heads;
    if (take_size(in, 0, 3) == 0) return NULL;
    uint8_t *mask = malloc(heads);
    *kept = 0;
    for (size_t h = 0; h < heads; h++) *kept += (mask[h] = take_byte(in) % 3 != 0);
    return mask;
}

static void release_params(layer_under_test *l) {
    for (int i = 0; i < 8; i++) {
        free(l->params[i].host);
        free((void *)slot_of(&l->desc, i)->host);
        guarded_release(&l->params[i].buffer);
    }
}

/* The layer's sizes: small, one time in sixteen each hostile (0, one past, or huge). @return
 * whether they are small enough to back with weights. */
static int take_sizes(fuzz_input *in, clattn_mha_desc *d) {
    size_t hkv = take_count(in, 1, 2), group = take_size(in, 1, 3);
    size_t hq = hkv <= 2 ? hkv * group + (take_byte(in) >= 240) : hkv; /* + 1: not a multiple */
    clattn_mha_desc_init(d, take_count(in, 1, 8), hq, hkv, take_count(in, 1, 16),
                         take_count(in, 1, 16));
    d->d_kv = take_flag(in) ? take_count(in, 1, 8) : 0;
    d->weight_dtype = (clattn_dtype)take_index32(in, 0, 2);
    return d->d_model <= 16 && hq <= 16 && hkv <= 16 && d->dim_qk <= 16 && d->dim_v <= 16 &&
           d->d_kv <= 16;
}

/* The layer the input describes; 0 when the library (rightly) refused it. */
static int make_layer(fuzz_input *in, layer_under_test *l) {
    clattn_context *ctx = fuzz_context();
    clattn_mha_desc *d = &l->desc;
    int small = take_sizes(in, d);
    int valid = small && d->d_model && d->heads_q && d->heads_kv && d->dim_qk && d->dim_v &&
                d->heads_q % d->heads_kv == 0 && (unsigned)d->weight_dtype <= 2;
    size_t counts[8], kept = 0;
    param_counts(d, counts);
    for (int i = 0; small && i < 8; i++) valid &= take_param(in, l, i, counts[i]);
    if (small) l->mask = take_mask(in, d->heads_q, &kept);
    d->head_mask = l->mask;
    valid &= kept > 0;
    clattn_status s = clattn_mha_create(ctx, d, &l->mha);
    fuzz_trace("layer: d_model=%zu d_kv=%zu Hq=%zu Hkv=%zu D=%zu/%zu weights=%d kept=%zu: %s",
               d->d_model, d->d_kv, d->heads_q, d->heads_kv, d->dim_qk, d->dim_v,
               (int)d->weight_dtype, kept, clattn_status_name(s));
    expect_status(ctx, s, 0, "clattn_mha_create");
    if (!s && !valid) fuzz_fail("clattn_mha_create accepted a layer that breaks a rule");
    if (s && valid)
        fuzz_fail("clattn_mha_create refused a valid layer: %s", clattn_context_last_error(ctx));
    if ((s == CLATTN_SUCCESS) != (l->mha != NULL))
        fuzz_fail("clattn_mha_create: status %d, layer %p", (int)s, (void *)l->mha);
    return !s;
}

/* get_info against the desc and the heads the mask keeps. */
static void expect_info(const layer_under_test *l) {
    clattn_mha_info info;
    clattn_mha_info_init(&info);
    if (clattn_mha_get_info(l->mha, &info)) fuzz_fail("clattn_mha_get_info refused");
    size_t kept = l->desc.heads_q;
    for (size_t h = 0; l->mask && h < l->desc.heads_q; h++) kept -= !l->mask[h];
    const clattn_mha_desc *d = &l->desc;
    if (info.d_model != d->d_model || info.heads_q != d->heads_q || info.heads_kv != d->heads_kv ||
        info.dim_qk != d->dim_qk || info.dim_v != d->dim_v || info.heads_kept != kept ||
        info.attention_heads_q != kept || info.d_kv != (d->d_kv ? d->d_kv : d->d_model))
        fuzz_fail("clattn_mha_get_info: d_model %zu d_kv %zu Hq %zu Hkv %zu kept %zu/%zu",
                  info.d_model, info.d_kv, info.heads_q, info.heads_kv, info.heads_kept, kept);
}

/* ---------------------------------------------------------------- operations */

static void op_set_mask(fuzz_input *in, layer_under_test *l) {
    size_t kept = 0;
    uint8_t *mask = take_mask(in, l->desc.heads_q, &kept);
    clattn_status s = clattn_mha_set_head_mask(l->mha, mask);
    expect_status(fuzz_context(), s, 0, "clattn_mha_set_head_mask");
    if ((s == CLATTN_SUCCESS) != (kept > 0))
        fuzz_fail("clattn_mha_set_head_mask: %s for a mask keeping %zu heads",
                  clattn_status_name(s), kept);
    if (s) return free(mask), expect_info(l);
    free(l->mask);
    l->mask = mask, l->desc.head_mask = mask;
    l->cache_stale = 1; /* the cache's K/V rows were made under the old mask */
    expect_info(l);
}

/* The desc for the reference: every param from its host copy. */
static clattn_mha_desc host_desc(const layer_under_test *l) {
    clattn_mha_desc d = l->desc;
    for (int i = 0; i < 8; i++) {
        const param *p = &l->params[i];
        clattn_mha_param *slot = slot_of(&d, i);
        slot->host = p->given_host || p->given_buffer ? p->host : NULL;
        slot->buffer = NULL, slot->offset = p->offset;
    }
    return d;
}

/* Y against the reference: tolerance scaled by the largest |Y|, widened by `loose` (the
 * K/V rounding of a 16-bit cache). */
static void expect_y(const char *what, const float *got, const float *want, size_t count,
                     clattn_dtype dtype, double loose) {
    double largest = 1, rtol = dtype == CLATTN_F32 ? 1e-3 : dtype == CLATTN_F16 ? 4e-3 : 2e-2;
    for (size_t i = 0; i < count; i++)
        if (isfinite(want[i]) && fabs(want[i]) > largest) largest = fabs(want[i]);
    expect_close(what, got, want, count, (rtol + loose) * largest, rtol);
}

/* A call of the layer: B, N, Nk, X's and Y's dtypes, causal, a window; one time in sixteen one
 * field hostile. */
static void take_call(fuzz_input *in, const layer_under_test *l, size_t batch, int over_cache,
                      clattn_attention_desc *call) {
    const clattn_mha_desc *d = &l->desc;
    size_t n = take_size(in, 1, MAX_N),
           nk = over_cache || take_flag(in) ? n : take_size(in, 1, MAX_N);
    clattn_attention_desc_init(call, CLATTN_LAYOUT_BSHD, batch, d->heads_q, d->heads_kv, n, nk,
                               d->dim_qk, d->dim_v);
    call->dtype = (clattn_dtype)take_index32(in, 0, 2);
    call->out_dtype = (clattn_dtype)take_index32(in, 0, 2);
    call->causal = take_flag(in);
    if (take_flag(in)) {
        call->window_left = take_index64(in, -1, MAX_N);
        call->window_right = take_index64(in, -1, MAX_N);
    }
    if (take_byte(in) < 240) return;
    size_t *fields[] = {&call->batch,  &call->heads_q, &call->heads_kv,
                        &call->dim_qk, &call->dim_v,   &call->len_k};
    *fields[take_size(in, 0, 5)] = take_count(in, 1, 4);
}

/* Whether the call's X, X_kv and Y can be backed (a hostile batch may not). */
static int call_small(const clattn_attention_desc *call) {
    return call->batch <= MAX_B && call->len_q <= MAX_N && call->len_k <= MAX_N &&
           (unsigned)call->dtype <= 2 && (unsigned)call->out_dtype <= 2;
}

static void op_forward(fuzz_input *in, layer_under_test *l) {
    clattn_context *ctx = fuzz_context();
    clattn_attention_desc call;
    take_call(in, l, take_size(in, 1, MAX_B), 0, &call);
    size_t d_kv = l->desc.d_kv ? l->desc.d_kv : l->desc.d_model;
    int cross = l->desc.d_kv != 0 || call.len_k != call.len_q || take_flag(in);
    int short_x = take_byte(in) >= 240;
    if (!call_small(&call)) return;
    size_t x_count = call.batch * call.len_q * l->desc.d_model,
           kv_count = call.batch * call.len_k * d_kv;
    size_t y_bytes = call.batch * call.len_q * l->desc.d_model * elem_size(call.out_dtype);
    void *x = make_values(call.dtype, x_count, 20),
         *x_kv = cross ? make_values(call.dtype, kv_count, 21) : NULL;
    guarded_buffer xb, kvb, yb;
    short_x &= x_count > 0;
    guarded_create(&xb, x_count * elem_size(call.dtype) - (short_x ? 1 : 0), x);
    guarded_create(&kvb, cross ? kv_count * elem_size(call.dtype) : 0, x_kv);
    guarded_create(&yb, y_bytes, NULL);
    clattn_status s = clattn_mha_forward(l->mha, &call, xb.inner, kvb.inner, yb.inner, NULL);
    clFinish(clattn_context_queue(ctx));
    expect_status(ctx, s, 0, "clattn_mha_forward");
    if (!s && short_x) fuzz_fail("clattn_mha_forward accepted an X buffer too small");
    clattn_mha_desc ref_desc = host_desc(l);
    void *y_ref = malloc(y_bytes), *x_host = exact_copy(x, x_count * elem_size(call.dtype));
    void *kv_host = cross ? exact_copy(x_kv, kv_count * elem_size(call.dtype)) : NULL;
    clattn_status r = clattn_mha_reference(&ref_desc, &call, x_host, kv_host, y_ref);
    fuzz_trace("  clattn_mha_reference: %s", clattn_status_name(r));
    if (r != CLATTN_SUCCESS && r != CLATTN_ERR_INVALID_ARGUMENT)
        fuzz_fail("clattn_mha_reference returned %s", clattn_status_name(r));
    if (!short_x && (s == CLATTN_SUCCESS) != (r == CLATTN_SUCCESS))
        fuzz_fail("clattn_mha_forward returned %s, the reference %s", clattn_status_name(s),
                  clattn_status_name(r));
    guarded_check(&xb, "X"), guarded_check(&kvb, "X_kv"), guarded_check(&yb, "Y");
    if (!s && !r) {
        void *y = malloc(y_bytes);
        guarded_read(&yb, y);
        size_t count = y_bytes / elem_size(call.out_dtype);
        float *got = widen(call.out_dtype, y, count), *want = widen(call.out_dtype, y_ref, count);
        expect_y("Y against the reference", got, want, count, call.out_dtype, 0);
        free(got), free(want), free(y);
    }
    guarded_release(&xb), guarded_release(&kvb), guarded_release(&yb);
    free(x), free(x_kv), free(x_host), free(kv_host), free(y_ref);
}

/* ---------------------------------------------------------------- over a KV cache */

/* The cache, at the first call over one: B sequences of the heads the attention reads (one
 * more one time in sixteen), the layer's dims, any dtype, contiguous or paged (every page
 * given). @return 0 when it was (rightly) refused. */
static int make_cache(fuzz_input *in, layer_under_test *l) {
    clattn_mha_info info;
    clattn_mha_info_init(&info);
    clattn_mha_get_info(l->mha, &info);
    size_t batch = take_size(in, 1, MAX_B),
           heads = info.attention_heads_kv + (take_byte(in) >= 240);
    clattn_kv_cache_desc d;
    clattn_kv_cache_desc_init(&d, batch, heads, l->desc.dim_qk, l->desc.dim_v,
                              2 * take_size(in, 1, MAX_HISTORY / 2));
    d.dtype = (clattn_dtype)take_size(in, 0, 3); /* q8_0 is refused: dims up to 16 */
    if (take_flag(in)) d.page_size = 2, d.num_pages = batch * d.capacity / 2;
    clattn_status s = clattn_kv_cache_create(fuzz_context(), &d, &l->cache);
    expect_status(fuzz_context(), s, 0, "clattn_kv_cache_create");
    if (s) return 0;
    if (d.page_size) {
        int32_t table[MAX_B * MAX_HISTORY / 2];
        for (size_t i = 0; i < d.num_pages; i++) table[i] = (int32_t)(d.num_pages - 1 - i);
        if (clattn_kv_cache_set_block_table(l->cache, table))
            fuzz_fail("a full block table refused");
    }
    l->cache_batch = batch, l->cache_capacity = d.capacity, l->cache_dtype = d.dtype;
    l->cache_stale = 0;
    return 1;
}

/* Row i of Y[b] for a sequence's new rows: the reference over its whole history (X rows, f32),
 * last `count` rows. */
static void expect_history(const layer_under_test *l, const clattn_attention_desc *call, size_t b,
                           size_t count, const float *y_b) {
    size_t total = (size_t)l->lengths[b], d_model = l->desc.d_model;
    clattn_attention_desc one = *call;
    one.batch = 1, one.len_q = one.len_k = total, one.dtype = CLATTN_F32;
    clattn_mha_desc ref_desc = host_desc(l);
    void *y_ref = malloc(total * d_model * 4);
    if (clattn_mha_reference(&ref_desc, &one, l->history[b], NULL, y_ref))
        fuzz_fail("the reference refused sequence %zu's history of %zu rows", b, total);
    float *want = widen(call->out_dtype,
                        (char *)y_ref + (total - count) * d_model * elem_size(call->out_dtype),
                        count * d_model);
    clattn_dtype dtype = l->cache_dtype;
    double loose = dtype == CLATTN_BF16 ? 4e-2 : dtype == CLATTN_F16 ? 5e-3 : 0;
    expect_y("Y over the cache against the reference over the history", y_b, want, count * d_model,
             call->out_dtype, loose);
    free(want), free(y_ref);
}

/* Rows i >= new_len[b] of Y are padding: b_o (0 without it), stored as Y's dtype. */
static void expect_padding(const layer_under_test *l, clattn_dtype out, const float *row) {
    size_t n = l->desc.d_model;
    const param *b_o = &l->params[7];
    int has = b_o->given_host || b_o->given_buffer;
    float *bias = has ? widen(l->desc.weight_dtype,
                              (char *)b_o->host + b_o->offset * elem_size(l->desc.weight_dtype), n)
                      : calloc(n, sizeof(float));
    void *stored = malloc(n * 4);
    clattn_convert(CLATTN_F32, bias, out, stored, n);
    float *want = widen(out, stored, n);
    expect_close("a padding row of Y against b_o", row, want, n, 1e-6, 0);
    free(bias), free(stored), free(want);
}

/* new_len: NULL (N each) or [B] values in [0, N], some hostile; counts[b] the rows appended
 * (0 for a value out of range). @return whether every value is in range and fits. */
static int take_new_len(fuzz_input *in, const layer_under_test *l, size_t n, int32_t **new_len,
                        int32_t *counts) {
    *new_len = take_flag(in) ? malloc(l->cache_batch * sizeof **new_len) : NULL;
    int ok = 1;
    for (size_t b = 0; b < l->cache_batch; b++) {
        counts[b] = *new_len ? ((*new_len)[b] = take_index32(in, 0, (int32_t)n)) : (int32_t)n;
        if (counts[b] < 0 || (size_t)counts[b] > n) ok = 0, counts[b] = 0;
    }
    return ok;
}

/* The history and the comparisons after an accepted call over the cache. */
static void model_forward_cache(layer_under_test *l, const clattn_attention_desc *call,
                                const float *x, const int32_t *counts, const void *y) {
    size_t d_model = l->desc.d_model, out = elem_size(call->out_dtype);
    for (size_t b = 0; b < l->cache_batch; b++) {
        size_t total = (size_t)l->lengths[b] + (size_t)counts[b];
        l->history[b] = realloc(l->history[b], (total ? total : 1) * d_model * sizeof(float));
        memcpy(l->history[b] + (size_t)l->lengths[b] * d_model, x + b * call->len_q * d_model,
               (size_t)counts[b] * d_model * sizeof(float));
        l->lengths[b] = (int32_t)total;
        const char *y_b = (const char *)y + b * call->len_q * d_model * out;
        float *got = widen(call->out_dtype, y_b, call->len_q * d_model);
        if (!l->cache_stale && counts[b]) expect_history(l, call, b, (size_t)counts[b], got);
        for (size_t i = (size_t)counts[b]; i < call->len_q; i++)
            expect_padding(l, call->out_dtype, got + i * d_model);
        free(got);
    }
}

static void op_forward_cache(fuzz_input *in, layer_under_test *l) {
    if (!l->cache && !make_cache(in, l)) return;
    clattn_context *ctx = fuzz_context();
    clattn_attention_desc call;
    take_call(in, l, l->cache_batch, 1, &call);
    int32_t *new_len = NULL, counts[MAX_B], lengths[MAX_B];
    int valid = take_new_len(in, l, call.len_q, &new_len, counts);
    for (size_t b = 0; b < l->cache_batch; b++)
        valid &= (size_t)l->lengths[b] + (size_t)counts[b] <= l->cache_capacity;
    if (!call_small(&call)) return free(new_len);
    size_t x_count = call.batch * call.len_q * l->desc.d_model;
    size_t y_bytes = x_count * elem_size(call.out_dtype);
    void *x = make_values(call.dtype, x_count, 30);
    guarded_buffer xb, yb;
    guarded_create(&xb, x_count * elem_size(call.dtype), x);
    guarded_create(&yb, y_bytes, NULL);
    clattn_status s =
        clattn_mha_forward_cache(l->mha, l->cache, &call, xb.inner, new_len, yb.inner, NULL);
    clFinish(clattn_context_queue(ctx));
    expect_status(ctx, s, 0, "clattn_mha_forward_cache");
    if (!s && !valid)
        fuzz_fail("clattn_mha_forward_cache accepted new_len out of range or past the cache");
    guarded_check(&xb, "X"), guarded_check(&yb, "Y");
    clattn_kv_cache_lengths(l->cache, lengths);
    if (!s) {
        void *y = malloc(y_bytes);
        float *xf = widen(call.dtype, x, x_count);
        guarded_read(&yb, y);
        model_forward_cache(l, &call, xf, counts, y);
        free(y), free(xf);
    }
    for (size_t b = 0; b < l->cache_batch; b++)
        if (lengths[b] != l->lengths[b])
            fuzz_fail(
                "after clattn_mha_forward_cache (%s): sequence %zu has length %d, expected %d",
                clattn_status_name(s), b, lengths[b], l->lengths[b]);
    guarded_release(&xb), guarded_release(&yb);
    free(x), free(new_len);
}

/* ---------------------------------------------------------------- the target */

static void run_input(fuzz_input *in) {
    layer_under_test l;
    memset(&l, 0, sizeof l);
    if (make_layer(in, &l)) {
        expect_info(&l);
        static const struct {
            const char *name;
            void (*run)(fuzz_input *in, layer_under_test *l);
        } ops[] = {{"set_head_mask", op_set_mask},
                   {"forward", op_forward},
                   {"forward_cache", op_forward_cache}};
        for (unsigned op = 1; op <= MAX_OPS && fuzz_more(in); op++) {
            size_t which = take_size(in, 0, 2);
            fuzz_trace("op %u: %s", op, ops[which].name);
            ops[which].run(in, &l);
        }
    }
    clattn_kv_cache_destroy(l.cache);
    clattn_mha_destroy(l.mha);
    release_params(&l);
    free(l.mask);
    for (size_t b = 0; b < MAX_B; b++) free(l.history[b]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_run(run_input, data, size);
    return 0;
}
