/*
 * libFuzzer target: the masks of docs/semantics.md section 2 that take indices and sizes from the caller -
 * block layouts (block sizes, per-head layouts, the pattern generators of
 * clattn_pattern_layout), global tokens, windows and dilation, with causal - on small calls
 * (B <= 2, Hq <= 4, Nq and Nk <= 12). Mostly valid values, hostile one time in sixteen. Checks:
 * - clattn_pattern_layout refuses bad sizes and parameters, gives the same layout twice, and
 *   its sliding window and causal rule hold block for block;
 * - clattn_attention_desc_check, clattn_attention_pairs and clattn_attention_mask agree: the
 *   pairs counted equal the mask's ones, a hostile head or row range is refused;
 * - clattn_attention on the device (a variant the input picks, the tensors' offsets and strides
 *   from the input, guarded buffers) equals clattn_attention_reference, and a query row the
 *   mask leaves empty has LSE -inf.
 * Host arrays (layouts, global tokens, masks) are exactly the size the API documents. Built and
 * run by tests/fuzz/run.sh.
 */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_N = 12, MAX_ARRAY = 1 << 16 };

/* ceil(n / block), 1 for a block of 0 (refused then). */
static size_t blocks(size_t n, size_t block) {
    return block ? n / block + (n % block != 0) : 1;
}

/* a * b, or 0 when it passes MAX_ARRAY (a size too large for the harness to back). */
static size_t small_product(size_t a, size_t b) {
    return a && b > MAX_ARRAY / a ? 0 : a * b <= MAX_ARRAY ? a * b : 0;
}

/* ---------------------------------------------------------------- pattern generators */

static void take_pattern(fuzz_input *in, clattn_pattern_desc *p, size_t rows, size_t cols,
                         size_t **global_blocks) {
    clattn_pattern_desc_init(p, (clattn_pattern_kind)take_index32(in, 0, 4),
                             take_count(in, rows, rows), take_count(in, cols, cols));
    p->window = take_count(in, 1, 7);
    p->global = take_count(in, 0, 3);
    p->random = take_count(in, 0, 3);
    p->seed = take_byte(in);
    p->stride = take_count(in, 1, 4);
    p->summary = take_count(in, 0, 3);
    p->causal = take_flag(in);
    size_t n = take_size(in, 0, 3), list[3];
    for (size_t i = 0; i < n; i++) list[i] = take_count(in, 0, cols ? cols - 1 : 0);
    *global_blocks = exact_copy(list, n * sizeof *list);
    p->global_blocks = *global_blocks, p->num_global_blocks = n;
}

/* The sliding window and causal rules, block for block (block row a sits at column
 * a + blocks_k - blocks_q). */
static void expect_pattern_rules(const clattn_pattern_desc *p, const uint8_t *layout) {
    for (size_t a = 0; a < p->blocks_q; a++)
        for (size_t b = 0; b < p->blocks_k; b++) {
            long long diag = (long long)(a + p->blocks_k) - (long long)p->blocks_q;
            int got = layout[a * p->blocks_k + b] != 0, above = (long long)b > diag;
            if (p->causal && above && got)
                fuzz_fail("pattern %d: causal, but block (%zu, %zu) above the diagonal is set",
                          (int)p->kind, a, b);
            int in_band = llabs((long long)b - diag) <= (long long)(p->window / 2);
            if (p->kind == CLATTN_PATTERN_SLIDING && got != (in_band && !(p->causal && above)))
                fuzz_fail("sliding pattern: block (%zu, %zu) is %d, window %zu", a, b, got,
                          p->window);
        }
}

/* The generator on its own. @return the layout (the caller frees it) when it was accepted. */
static uint8_t *run_pattern(const clattn_pattern_desc *p) {
    size_t bytes = small_product(p->blocks_q, p->blocks_k);
    uint8_t *first = bytes ? malloc(bytes) : NULL, *again = bytes ? malloc(bytes) : NULL;
    clattn_status s = clattn_pattern_layout(p, first);
    fuzz_trace("  clattn_pattern_layout(kind %d, %zu x %zu): %s", (int)p->kind, p->blocks_q,
               p->blocks_k, clattn_status_name(s));
    if (s != CLATTN_SUCCESS && s != CLATTN_ERR_INVALID_ARGUMENT)
        fuzz_fail("clattn_pattern_layout returned %s", clattn_status_name(s));
    if (!s && !first)
        fuzz_fail("clattn_pattern_layout accepted %zu x %zu blocks", p->blocks_q, p->blocks_k);
    if (!s && (clattn_pattern_layout(p, again) || memcmp(first, again, bytes)))
        fuzz_fail("clattn_pattern_layout gave two layouts for one desc");
    if (!s) expect_pattern_rules(p, first);
    free(again);
    if (s) free(first);
    return s ? NULL : first;
}

/* ---------------------------------------------------------------- the call */

typedef struct call_masks {
    int64_t *global;
    uint8_t *layout;
    size_t *global_blocks;
} call_masks;

static void masks_free(call_masks *m) {
    free(m->global), free(m->layout), free(m->global_blocks);
}

/* A block layout [L][rows][cols]: none, bits from the input, or a pattern (for every head). */
static void take_block_layout(fuzz_input *in, clattn_attention_desc *d, call_masks *m) {
    size_t mode = take_size(in, 0, 2);
    if (!mode) return;
    d->block_q = take_count(in, 1, 6), d->block_k = take_count(in, 1, 6);
    d->block_layout_per_head = take_flag(in);
    size_t rows = blocks(d->len_q, d->block_q), cols = blocks(d->len_k, d->block_k);
    size_t heads = d->block_layout_per_head ? d->heads_q : 1;
    size_t one = rows * cols, bytes = heads * one;
    m->layout = malloc(bytes);
    if (mode == 1) {
        for (size_t i = 0; i < bytes; i++) m->layout[i] = take_flag(in);
    } else {
        clattn_pattern_desc p;
        take_pattern(in, &p, rows, cols, &m->global_blocks);
        uint8_t *pattern = run_pattern(&p);
        int fits = pattern && p.blocks_q == rows && p.blocks_k == cols;
        for (size_t h = 0; h < heads; h++)
            fits ? memcpy(m->layout + h * one, pattern, one) : memset(m->layout + h * one, 1, one);
        free(pattern);
    }
    d->block_layout = m->layout;
}

/* One time in four, the offset and strides of each of Q, K, V and O from the input (small, or
 * hostile); else dense. */
static void take_strides(fuzz_input *in, clattn_attention_desc *d) {
    if (take_size(in, 0, 3) != 0) return;
    clattn_tensor *tensors[] = {&d->q, &d->k, &d->v, &d->o};
    for (int i = 0; i < 4; i++) {
        clattn_tensor *t = tensors[i];
        t->offset = take_count(in, 0, 8);
        t->stride_batch = take_count(in, 0, 2 * t->stride_batch + 2);
        t->stride_head = take_count(in, 0, 2 * t->stride_head + 2);
        t->stride_seq = take_count(in, 0, 2 * t->stride_seq + 2);
    }
}

/* Shapes up to B=2, Hq=4, N=12, float32, every mask with indices from the input, and (one
 * time in four) the tensors' offsets and strides. */
static void take_call(fuzz_input *in, clattn_attention_desc *d, call_masks *m) {
    static const size_t dims[] = {32, 20, 32, 17}; /* one kernel bucket */
    size_t hkv = take_size(in, 1, 2), group = take_size(in, 1, 2);
    clattn_attention_desc_init(d, take_flag(in) ? CLATTN_LAYOUT_BHSD : CLATTN_LAYOUT_BSHD,
                               take_size(in, 1, 2), hkv * group, hkv, take_size(in, 1, MAX_N),
                               take_size(in, 1, MAX_N), take_choice(in, dims, 4),
                               take_choice(in, dims, 4));
    d->scale = 0.25f;
    d->causal = take_flag(in);
    if (take_flag(in)) {
        d->window_left = take_index64(in, -1, MAX_N);
        d->window_right = take_index64(in, -1, MAX_N);
    }
    if (take_flag(in)) d->dilation = take_index64(in, 1, 3);
    size_t n = take_size(in, 0, 3);
    int64_t tokens[3];
    for (size_t i = 0; i < n; i++) tokens[i] = take_index64(in, 0, (int64_t)d->len_k - 1);
    m->global = exact_copy(tokens, n * sizeof *tokens);
    d->global_tokens = m->global, d->num_global_tokens = n;
    take_block_layout(in, d, m);
    take_strides(in, d);
    static const clattn_variant variants[] = {
        CLATTN_VARIANT_AUTO,  CLATTN_VARIANT_LANES, CLATTN_VARIANT_ROWWISE,  CLATTN_VARIANT_SPLIT,
        CLATTN_VARIANT_FLASH, CLATTN_VARIANT_GEMM,  CLATTN_VARIANT_REFERENCE};
    d->variant = variants[take_size(in, 0, 6)];
    if (d->variant == CLATTN_VARIANT_GEMM) d->gemm_budget_bytes = take_size(in, 0, 16) * 256;
}

/* ---------------------------------------------------------------- host checks */

/* pairs against the mask's ones, head by head; a head or row range out of the call is refused
 * (0 rows may go either way). *empty
 * gets, for every (h, i), whether the row allows no key. */
static void expect_mask_agrees(fuzz_input *in, const clattn_attention_desc *d, uint8_t *empty) {
    uint64_t pairs = 0, ones = 0;
    clattn_status s = clattn_attention_pairs(d, &pairs);
    if (s)
        fuzz_fail("clattn_attention_pairs refused a desc the checker took: %s",
                  clattn_status_name(s));
    uint8_t *allowed = malloc(d->len_q * d->len_k);
    for (size_t h = 0; h < d->heads_q; h++) {
        if (clattn_attention_mask(d, h, 0, d->len_q, allowed))
            fuzz_fail("clattn_attention_mask refused head %zu", h);
        for (size_t i = 0; i < d->len_q; i++) {
            size_t row = 0;
            for (size_t j = 0; j < d->len_k; j++) row += allowed[i * d->len_k + j] != 0;
            ones += row, empty[h * d->len_q + i] = row == 0;
        }
    }
    free(allowed);
    if (pairs != ones * d->batch)
        fuzz_fail("clattn_attention_pairs counts %llu pairs, the mask %llu",
                  (unsigned long long)pairs, (unsigned long long)(ones * d->batch));
    size_t head = take_count(in, 0, d->heads_q - 1), row0 = take_count(in, 0, d->len_q - 1);
    size_t rows = take_count(in, 1, d->len_q), bytes = small_product(rows, d->len_k);
    int in_range = head < d->heads_q && row0 < d->len_q && rows <= d->len_q - row0;
    uint8_t *some = bytes ? malloc(bytes) : NULL;
    s = clattn_attention_mask(d, head, row0, rows, some);
    if (rows && s != (in_range ? CLATTN_SUCCESS : CLATTN_ERR_INVALID_ARGUMENT))
        fuzz_fail("clattn_attention_mask(head %zu, rows %zu + %zu) of Hq=%zu Nq=%zu: %s", head,
                  row0, rows, d->heads_q, d->len_q, clattn_status_name(s));
    free(some);
}

/* ---------------------------------------------------------------- the device */

/* Q, K, V values k/64 in [-1, 1) by index, as float32, `bytes` long. */
static float *make_input(size_t bytes, size_t salt) {
    size_t count = bytes / 4;
    float *x = malloc(bytes ? bytes : 4);
    for (size_t i = 0; i < count; i++) x[i] = (float)((i * 7 + salt * 13) % 128) / 64.0f - 1.0f;
    return x;
}

/* O and LSE of the device against the reference's, and LSE -inf on every empty row. */
static void compare_call(const clattn_attention_desc *d, const clattn_attention_extents *ext,
                         guarded_buffer *o, guarded_buffer *lse, const float *o_ref,
                         const float *lse_ref, const uint8_t *empty) {
    float *got = malloc(ext->o);
    guarded_read(o, got);
    expect_close("O against the reference", got, o_ref, ext->o / 4, 1e-4, 1e-3);
    guarded_read(lse, got);
    expect_close("LSE against the reference", got, lse_ref, ext->lse / 4, 1e-4, 1e-4);
    free(got);
    for (size_t b = 0; b < d->batch; b++) /* LSE is dense [B, Hq, Nq] */
        for (size_t h = 0; h < d->heads_q; h++)
            for (size_t i = 0; i < d->len_q; i++) {
                float l = lse_ref[(b * d->heads_q + h) * d->len_q + i];
                if (empty[h * d->len_q + i] != (isinf(l) && l < 0))
                    fuzz_fail("row (%zu, %zu, %zu): the mask %s it empty, the reference's LSE is "
                              "%g",
                              b, h, i, empty[h * d->len_q + i] ? "leaves" : "does not leave", l);
            }
}

static void run_call(const clattn_attention_desc *d, const clattn_attention_extents *ext,
                     const uint8_t *empty) {
    clattn_context *ctx = fuzz_context();
    float *host[3] = {make_input(ext->q, 1), make_input(ext->k, 2), make_input(ext->v, 3)};
    size_t bytes[3] = {ext->q, ext->k, ext->v};
    guarded_buffer in[3], o, lse;
    for (int t = 0; t < 3; t++) guarded_create(&in[t], bytes[t], host[t]);
    guarded_create(&o, ext->o, NULL);
    guarded_create(&lse, ext->lse, NULL);
    clattn_status s =
        clattn_attention(ctx, d, in[0].inner, in[1].inner, in[2].inner, o.inner, lse.inner, NULL);
    clFinish(clattn_context_queue(ctx));
    expect_status(ctx, s, d->variant != CLATTN_VARIANT_AUTO, "clattn_attention");
    float *o_ref = malloc(ext->o), *lse_ref = malloc(ext->lse);
    memset(o_ref, 0x7f, ext->o); /* as the device's O starts */
    clattn_status r = clattn_attention_reference(d, host[0], host[1], host[2], o_ref, lse_ref);
    fuzz_trace("  clattn_attention_reference: %s", clattn_status_name(r));
    if (r) fuzz_fail("the reference refused a desc the checker took: %s", clattn_status_name(r));
    for (int t = 0; t < 3; t++) guarded_check(&in[t], "an input"), guarded_release(&in[t]);
    guarded_check(&o, "O"), guarded_check(&lse, "LSE");
    if (!s) compare_call(d, ext, &o, &lse, o_ref, lse_ref, empty);
    if (s == CLATTN_ERR_INVALID_ARGUMENT)
        fuzz_fail("clattn_attention refused a desc the checker took: %s",
                  clattn_context_last_error(ctx));
    guarded_release(&o), guarded_release(&lse);
    free(o_ref), free(lse_ref);
    for (int t = 0; t < 3; t++) free(host[t]);
}

/* ---------------------------------------------------------------- the target */

static void run_input(fuzz_input *in) {
    clattn_attention_desc d;
    call_masks m = {NULL, NULL, NULL};
    take_call(in, &d, &m);
    fuzz_trace("call: B=%zu Hq=%zu Hkv=%zu Nq=%zu Nk=%zu D=%zu/%zu causal=%d window=(%lld,%lld) "
               "dilation=%lld globals=%zu blocks=%zux%zu%s variant=%s",
               d.batch, d.heads_q, d.heads_kv, d.len_q, d.len_k, d.dim_qk, d.dim_v, d.causal,
               (long long)d.window_left, (long long)d.window_right, (long long)d.dilation,
               d.num_global_tokens, d.block_q, d.block_k,
               d.block_layout_per_head ? " per head" : "", clattn_variant_name(d.variant));
    clattn_attention_extents ext;
    char message[512];
    clattn_status s = clattn_attention_desc_check(&d, &ext, message, sizeof message);
    fuzz_trace("  clattn_attention_desc_check: %s %s", clattn_status_name(s), message);
    if (s != CLATTN_SUCCESS && (s != CLATTN_ERR_INVALID_ARGUMENT || !message[0]))
        fuzz_fail("clattn_attention_desc_check: %s without a message", clattn_status_name(s));
    if (s != CLATTN_SUCCESS) {
        uint64_t pairs;
        if (clattn_attention_pairs(&d, &pairs) != CLATTN_ERR_INVALID_ARGUMENT)
            fuzz_fail("clattn_attention_pairs took a desc the checker refused: %s", message);
        masks_free(&m);
        return;
    }
    uint8_t *empty = malloc(d.heads_q * d.len_q);
    expect_mask_agrees(in, &d, empty);
    size_t most = 1 << 24; /* bytes: hostile strides that the checker took may span more */
    if (ext.q <= most && ext.k <= most && ext.v <= most && ext.o <= most) run_call(&d, &ext, empty);
    free(empty);
    masks_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_run(run_input, data, size);
    return 0;
}
