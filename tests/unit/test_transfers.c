/*
 * Host-device traffic statistics (clattn_stats' transfer fields, clattn_context_transfers):
 * what an attention call on host arrays copies or maps, that a call on device buffers copies
 * none of its tensors, and that a decoding step over a KV cache moves the same bytes whatever
 * the length of the cache (only the new rows, the query and the output), while the same step
 * without a cache re-sends the whole past.
 */
#include <criterion/criterion.h>

#include "util.h"

#include <stdlib.h>
#include <string.h>

enum { B = 2, HQ = 4, HKV = 2, D = 32 };

static clattn_transfers totals(clattn_context *ctx) {
    clattn_transfers t;
    clattn_transfers_init(&t);
    ASSERT_OK(ctx, clattn_context_transfers(ctx, &t));
    return t;
}

/* Bytes moved to the device, copied or mapped. */
static uint64_t to_device(const clattn_transfers *t) {
    return t->host_to_device_bytes + t->mapped_bytes;
}

/* A causal float32 call in BSHD of B=2 Hq=4 and `hkv` key heads, Nq = Nk = n, D=32. */
static clattn_attention_desc causal_desc(size_t hkv, size_t n) {
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, B, HQ, hkv, n, n, D, D);
    d.causal = 1;
    return d;
}

static clattn_stats last_stats(clattn_context *ctx) {
    clattn_stats s;
    clattn_stats_init(&s);
    ASSERT_OK(ctx, clattn_context_last_stats(ctx, &s));
    return s;
}

Test(transfers, an_attention_call_on_host_arrays_moves_its_tensors) {
    enum { N = 40 };
    size_t q_count = (size_t)B * N * HQ * D, kv_count = (size_t)B * N * HKV * D;
    float *q = malloc(q_count * 4), *k = malloc(kv_count * 4), *v = malloc(kv_count * 4);
    float *o = malloc(q_count * 4), lse[B * HQ * N];
    fill_uniform(q, q_count, 1), fill_uniform(k, kv_count, 2), fill_uniform(v, kv_count, 3);
    clattn_attention_desc d = causal_desc(HKV, N);
    clattn_context **ctxs;
    size_t n = test_contexts(&ctxs);
    for (size_t c = 0; c < n; c++) {
        clattn_transfers before = totals(ctxs[c]);
        ASSERT_OK(ctxs[c], clattn_attention_host(ctxs[c], &d, q, k, v, o, lse));
        clattn_transfers after = totals(ctxs[c]);
        clattn_stats s = last_stats(ctxs[c]);
        uint64_t tensors = 4 * (2 * q_count + 2 * kv_count); /* Q, K, V in; O in (its gaps) */
        cr_expect_geq(s.host_to_device_bytes + s.mapped_bytes, tensors,
                      "device %zu: %llu bytes copied and %llu mapped, below Q, K, V and O's %llu",
                      c, (unsigned long long)s.host_to_device_bytes,
                      (unsigned long long)s.mapped_bytes, (unsigned long long)tensors);
        uint64_t results = 4 * (q_count + (uint64_t)B * HQ * N);
        cr_expect(s.device_to_host_bytes == results || s.mapped_bytes > 0,
                  "device %zu: %llu bytes read back, O and LSE are %llu", c,
                  (unsigned long long)s.device_to_host_bytes, (unsigned long long)results);
        cr_expect_eq(after.host_to_device_bytes - before.host_to_device_bytes,
                     s.host_to_device_bytes, "the totals grow by the call's own count");
        cr_expect_eq(after.mapped_bytes - before.mapped_bytes, s.mapped_bytes);
        cr_expect_eq(after.device_to_host_bytes - before.device_to_host_bytes,
                     s.device_to_host_bytes);
    }
    free(q), free(k), free(v), free(o);
}

Test(transfers, a_call_on_device_buffers_copies_none_of_its_tensors) {
    enum { N = 24 };
    size_t bytes = (size_t)B * N * HQ * D * 4;
    float *host = malloc(bytes);
    fill_uniform(host, bytes / 4, 4);
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, B, HQ, HQ, N, N, D, D);
    clattn_context **ctxs;
    size_t n = test_contexts(&ctxs);
    for (size_t c = 0; c < n; c++) {
        cl_context cl = clattn_context_cl_context(ctxs[c]);
        cl_int err = CL_SUCCESS;
        cl_mem x = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, host, &err);
        cl_mem o = clCreateBuffer(cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
        cr_assert_eq(err, CL_SUCCESS);
        ASSERT_OK(ctxs[c], clattn_attention(ctxs[c], &d, x, x, x, o, NULL, NULL));
        clFinish(clattn_context_queue(ctxs[c]));
        clattn_stats s = last_stats(ctxs[c]);
        cr_expect_lt(s.host_to_device_bytes + s.mapped_bytes, bytes,
                     "device %zu: %llu bytes copied, %llu mapped: no tensor should be", c,
                     (unsigned long long)s.host_to_device_bytes,
                     (unsigned long long)s.mapped_bytes);
        cr_expect_eq(s.device_to_host_bytes, 0, "device %zu read %llu bytes back", c,
                     (unsigned long long)s.device_to_host_bytes);
        clReleaseMemObject(x), clReleaseMemObject(o);
    }
    free(host);
}

/* The traffic of one decoding step (append one row a sequence, attend) over a cache holding
 * `filled` rows a sequence. */
static clattn_transfers decode_step(clattn_context *ctx, clattn_kv_cache *cache, size_t filled) {
    int32_t lengths[B] = {(int32_t)filled, (int32_t)filled - 3};
    ASSERT_OK(ctx, clattn_kv_cache_set_lengths(cache, lengths));
    float k[B * HKV * D], v[B * HKV * D], q[B * HQ * D], o[B * HQ * D];
    fill_uniform(k, B * HKV * D, 5), fill_uniform(v, B * HKV * D, 6);
    fill_uniform(q, B * HQ * D, 7);
    clattn_attention_desc d = causal_desc(HKV, 1);
    clattn_transfers before = totals(ctx);
    ASSERT_OK(ctx, clattn_kv_cache_append_host(cache, k, v, 1, NULL));
    ASSERT_OK(ctx, clattn_kv_cache_attention_host(cache, &d, q, NULL, o, NULL));
    clattn_transfers after = totals(ctx), step;
    clattn_transfers_init(&step);
    step.host_to_device_bytes = after.host_to_device_bytes - before.host_to_device_bytes;
    step.device_to_host_bytes = after.device_to_host_bytes - before.device_to_host_bytes;
    step.mapped_bytes = after.mapped_bytes - before.mapped_bytes;
    step.copies = after.copies - before.copies;
    return step;
}

Test(transfers, a_decoding_step_moves_the_same_bytes_at_any_cache_length) {
    enum { CAPACITY = 1024 };
    clattn_context **ctxs;
    size_t n = test_contexts(&ctxs);
    for (size_t c = 0; c < n; c++) {
        clattn_kv_cache_desc cd;
        clattn_kv_cache_desc_init(&cd, B, HKV, D, D, CAPACITY);
        cd.page_size = 64, cd.num_pages = B * CAPACITY / 64;
        clattn_kv_cache *cache = NULL;
        ASSERT_OK(ctxs[c], clattn_kv_cache_create(ctxs[c], &cd, &cache));
        int32_t table[B * CAPACITY / 64];
        for (int i = 0; i < B * CAPACITY / 64; i++) table[i] = i;
        ASSERT_OK(ctxs[c], clattn_kv_cache_set_block_table(cache, table));
        clattn_transfers short_step = decode_step(ctxs[c], cache, 16);
        clattn_transfers long_step = decode_step(ctxs[c], cache, 900);
        uint64_t rows = 4 * (2 * B * HKV * D + 2 * B * HQ * D); /* new K, V rows; Q; O */
        cr_expect_eq(to_device(&long_step), to_device(&short_step),
                     "device %zu: %llu bytes to the device at 900 rows, %llu at 16", c,
                     (unsigned long long)to_device(&long_step),
                     (unsigned long long)to_device(&short_step));
        cr_expect_eq(long_step.device_to_host_bytes, short_step.device_to_host_bytes);
        cr_expect_geq(to_device(&long_step), rows / 2, "the new rows and Q went to the device");
        cr_expect_lt(to_device(&long_step), 2 * rows + 1024,
                     "device %zu: a step sent %llu bytes; the new rows, Q and O are %llu", c,
                     (unsigned long long)to_device(&long_step), (unsigned long long)rows);
        clattn_kv_cache_destroy(cache);
    }
}

/* Whether buffer_from_host maps on this context's device: it shares host memory, and the test
 * hook that makes it copy ($CLATTN_TEST_NO_MAP=1, the ctest run transfers_copying) is off. */
static int maps_host_arrays(clattn_context *ctx) {
    clattn_device_info info;
    clattn_device_info_init(&info);
    clattn_context_device_info(ctx, &info);
    cl_bool unified = CL_FALSE;
    clGetDeviceInfo(info.device, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL);
    const char *no_map = getenv("CLATTN_TEST_NO_MAP");
    return unified == CL_TRUE && !(no_map && strcmp(no_map, "1") == 0);
}

Test(transfers, host_arrays_are_mapped_where_the_device_shares_host_memory) {
    enum { N = 33 };
    size_t count = (size_t)B * N * HQ * D;
    float *q = malloc(count * 4), *k = malloc(count * 4), *v = malloc(count * 4);
    float *o = malloc(count * 4);
    fill_uniform(q, count, 8), fill_uniform(k, count, 9), fill_uniform(v, count, 10);
    clattn_attention_desc d;
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, B, HQ, HQ, N, N, D, D);
    uint64_t tensors = 4 * 4 * (uint64_t)count; /* Q, K, V, O */
    clattn_context **ctxs;
    size_t n = test_contexts(&ctxs);
    for (size_t c = 0; c < n; c++) {
        ASSERT_OK(ctxs[c], clattn_attention_host(ctxs[c], &d, q, k, v, o, NULL));
        clattn_stats s = last_stats(ctxs[c]);
        if (maps_host_arrays(ctxs[c])) {
            cr_expect_eq(s.mapped_bytes, tensors, "device %zu mapped %llu bytes, not Q, K, V, O", c,
                         (unsigned long long)s.mapped_bytes);
            cr_expect_lt(s.host_to_device_bytes, tensors / 4, "device %zu copied %llu bytes", c,
                         (unsigned long long)s.host_to_device_bytes);
            cr_expect_eq(s.device_to_host_bytes, 0, "O is mapped back, not read");
        } else {
            cr_expect_eq(s.mapped_bytes, 0);
            cr_expect_geq(s.host_to_device_bytes, tensors);
            cr_expect_eq(s.device_to_host_bytes, 4 * (uint64_t)count, "O is read back");
        }
    }
    free(q), free(k), free(v), free(o);
}

/* O written over Q's own host array: the kernels must read Q as it was, so O is copied (not
 * mapped) there, and the result is that of separate arrays. */
Test(transfers, an_output_over_an_input_is_not_mapped) {
    enum { N = 19 };
    size_t count = (size_t)B * N * HQ * D;
    float *q = malloc(count * 4), *kv = malloc(count * 4), *o = malloc(count * 4);
    float *in_place = malloc(count * 4);
    fill_uniform(q, count, 11), fill_uniform(kv, count, 12);
    clattn_attention_desc d = causal_desc(HQ, N);
    clattn_context **ctxs;
    size_t n = test_contexts(&ctxs);
    for (size_t c = 0; c < n; c++) {
        ASSERT_OK(ctxs[c], clattn_attention_host(ctxs[c], &d, q, kv, kv, o, NULL));
        memcpy(in_place, q, count * 4);
        ASSERT_OK(ctxs[c], clattn_attention_host(ctxs[c], &d, in_place, kv, kv, in_place, NULL));
        cr_expect_eq(memcmp(in_place, o, count * 4), 0, "device %zu: O over Q differs", c);
        if (maps_host_arrays(ctxs[c]))
            cr_expect_eq(last_stats(ctxs[c]).mapped_bytes, 3 * 4 * (uint64_t)count,
                         "Q, K and V mapped (K and V one array, mapped twice), O copied");
    }
    free(q), free(kv), free(o), free(in_place);
}

Test(transfers, bad_arguments_are_refused) {
    clattn_transfers t;
    cr_expect_eq(clattn_transfers_init_sized(&t, 4), CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect_eq(clattn_transfers_init_sized(NULL, sizeof t), CLATTN_ERR_INVALID_ARGUMENT);
    clattn_context **ctxs;
    test_contexts(&ctxs);
    cr_expect_eq(clattn_context_transfers(NULL, &t), CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect_eq(clattn_context_transfers(ctxs[0], NULL), CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(clattn_context_last_error(ctxs[0]), "clattn_transfers_init") != NULL, "%s",
              clattn_context_last_error(ctxs[0]));
    memset(&t, 0, sizeof t);
    t.struct_size = 3;
    cr_expect_eq(clattn_context_transfers(ctxs[0], &t), CLATTN_ERR_INVALID_ARGUMENT);
}
