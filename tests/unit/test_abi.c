/*
 * The public structs can grow without breaking binaries built against an older header (the
 * struct_size scheme of clattn.h). This caller is compiled against a smaller copy of the desc and
 * of the stats, their first layout (the 0.1 fields, behind struct_size): what a program built
 * before count_tiles and tiles_counted were added passes. The calls must work, read nothing past
 * the caller's struct and write nothing past it. A larger struct (a newer header) is accepted
 * while its unknown bytes are zero.
 */
#include <criterion/criterion.h>

#include "util.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

/* clattn_attention_desc as its first layout declared it. */
typedef struct old_desc {
    size_t struct_size;
    size_t batch, heads_q, heads_kv, len_q, len_k, dim_qk, dim_v;
    clattn_dtype dtype, out_dtype;
    clattn_tensor q, k, v, o;
    float scale;
    int causal;
    int64_t window_left, window_right, dilation;
    const int64_t *global_tokens;
    size_t num_global_tokens;
    const uint8_t *block_layout;
    size_t block_q, block_k;
    int block_layout_per_head;
    cl_mem bias;
    const float *bias_host;
    clattn_tensor bias_strides;
    clattn_path path;
    clattn_variant variant;
    size_t gemm_budget_bytes;
} old_desc;

/* clattn_stats as its first layout declared it. */
typedef struct old_stats {
    size_t struct_size;
    clattn_path path;
    clattn_variant variant;
    uint64_t pairs;
    double density;
    uint64_t tiles_visited, tiles_total, device_bytes;
    unsigned block_m, block_n, chunks;
    double kernel_ms;
    char kernel[96];
} old_stats;

/* clattn_variant_info as 0.2 declared it. */
typedef struct old_variant_info {
    size_t struct_size;
    clattn_variant variant;
    clattn_path path;
    const char *name, *summary;
    int supported, used_by_auto;
    char reason[256], tuning[32];
} old_variant_info;

/* The copies are true prefixes of today's structs. */
_Static_assert(sizeof(old_variant_info) == CLATTN_VARIANT_INFO_BASE_SIZE,
               "0.2's variant info ends with tuning");
_Static_assert(sizeof(old_desc) == CLATTN_ATTENTION_DESC_BASE_SIZE,
               "the desc's first layout ends with gemm_budget_bytes");
_Static_assert(offsetof(old_desc, gemm_budget_bytes) ==
                   offsetof(clattn_attention_desc, gemm_budget_bytes),
               "the desc's first layout is a prefix of today's");
_Static_assert(offsetof(old_stats, kernel) == offsetof(clattn_stats, kernel),
               "the stats' first layout is a prefix of today's");
_Static_assert(sizeof(old_stats) < sizeof(clattn_stats), "fields were added to the stats");

enum { CANARY = 0xA5, B = 1, H = 2, N = 33, D = 16 };

/* A struct followed by canary bytes that nothing may touch. */
typedef struct guarded_desc {
    old_desc desc;
    unsigned char canary[64];
} guarded_desc;

typedef struct guarded_stats {
    old_stats stats;
    unsigned char canary[64];
} guarded_stats;

static int untouched(const unsigned char *canary, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (canary[i] != CANARY) return 0;
    return 1;
}

Test(abi, a_caller_built_against_the_first_layout_still_works) {
    guarded_desc g;
    memset(&g, CANARY, sizeof g);
    /* what clattn_attention_desc_init(&desc, ...) expands to in that caller */
    cr_assert_eq(clattn_attention_desc_init_sized((clattn_attention_desc *)&g.desc, sizeof g.desc,
                                                  CLATTN_LAYOUT_BSHD, B, H, H, N, N, D, D),
                 CLATTN_SUCCESS);
    cr_assert(untouched(g.canary, sizeof g.canary), "desc_init wrote past the caller's desc");
    cr_assert_eq(g.desc.struct_size, sizeof g.desc);
    g.desc.causal = 1;
    float q[B * N * H * D], k[B * N * H * D], v[B * N * H * D], o[B * N * H * D];
    float ref[B * N * H * D];
    fill_uniform(q, COUNT_OF(q), 1), fill_uniform(k, COUNT_OF(k), 2),
        fill_uniform(v, COUNT_OF(v), 3);
    const clattn_attention_desc *desc = (const clattn_attention_desc *)&g.desc;
    clattn_context **ctxs;
    test_contexts(&ctxs);
    ASSERT_OK(ctxs[0], clattn_attention_host(ctxs[0], desc, q, k, v, o, NULL));
    cr_assert_eq(clattn_attention_reference(desc, q, k, v, ref, NULL), CLATTN_SUCCESS);
    for (size_t i = 0; i < COUNT_OF(o); i++)
        cr_expect(fabsf(o[i] - ref[i]) <= TOL_F32_ATOL + TOL_F32_RTOL * fabsf(ref[i]),
                  "O[%zu] = %g, reference %g", i, (double)o[i], (double)ref[i]);

    guarded_stats s;
    memset(&s, CANARY, sizeof s);
    cr_assert_eq(clattn_stats_init_sized((clattn_stats *)&s.stats, sizeof s.stats), CLATTN_SUCCESS);
    ASSERT_OK(ctxs[0], clattn_context_last_stats(ctxs[0], (clattn_stats *)&s.stats));
    cr_assert(untouched(s.canary, sizeof s.canary), "last_stats wrote past the caller's stats");
    cr_expect_eq(s.stats.pairs, (uint64_t)H * N * (N + 1) / 2, "pairs %llu",
                 (unsigned long long)s.stats.pairs);
    cr_expect_neq(s.stats.path, CLATTN_PATH_AUTO);
    cr_expect_neq(s.stats.kernel[0], '\0');
}

/* A caller of 0.2 asks for a variant's description: it gets 0.2's fields, and the old name and
 * tuning axes (0.3) stay outside its struct. */
Test(abi, a_variant_info_of_0_2_is_filled_and_nothing_past_it) {
    struct {
        old_variant_info info;
        unsigned char canary[sizeof(clattn_variant_info)];
    } g;
    memset(&g, CANARY, sizeof g);
    cr_assert_eq(clattn_variant_info_init_sized((clattn_variant_info *)&g.info, sizeof g.info),
                 CLATTN_SUCCESS);
    clattn_context **ctxs;
    test_contexts(&ctxs);
    ASSERT_OK(ctxs[0], clattn_variant_describe(ctxs[0], CLATTN_VARIANT_LANES,
                                               (clattn_variant_info *)&g.info));
    cr_expect_str_eq(g.info.name, "lanes");
    cr_expect_eq(g.info.variant, CLATTN_VARIANT_LANES);
    cr_assert(untouched(g.canary, sizeof g.canary), "describe wrote past 0.2's variant info");
    clattn_variant_info now;
    clattn_variant_info_init(&now);
    ASSERT_OK(ctxs[0], clattn_variant_describe(ctxs[0], CLATTN_VARIANT_LANES, &now));
    cr_expect_str_eq(now.old_name, "cpu");
    cr_expect_gt(now.num_axes, 0, "lanes publishes what clattn tune searches");
    ((clattn_variant_info *)&g.info)->struct_size = CLATTN_VARIANT_INFO_BASE_SIZE - 1;
    cr_expect_eq(
        clattn_variant_describe(ctxs[0], CLATTN_VARIANT_LANES, (clattn_variant_info *)&g.info),
        CLATTN_ERR_INVALID_ARGUMENT);
}

Test(abi, sizes_below_the_first_layout_are_refused) {
    clattn_attention_desc d;
    cr_assert_eq(clattn_attention_desc_init_sized(&d, CLATTN_ATTENTION_DESC_BASE_SIZE - 1,
                                                  CLATTN_LAYOUT_BSHD, 1, 1, 1, 2, 2, 4, 4),
                 CLATTN_ERR_INVALID_ARGUMENT);
    clattn_attention_desc_init(&d, CLATTN_LAYOUT_BSHD, 1, 1, 1, 2, 2, 4, 4);
    d.struct_size = 8;
    char message[256];
    cr_expect_eq(clattn_attention_desc_check(&d, NULL, message, sizeof message),
                 CLATTN_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(message, "struct_size") != NULL, "%s", message);
    clattn_stats s;
    cr_expect_eq(clattn_stats_init_sized(&s, 4), CLATTN_ERR_INVALID_ARGUMENT);
}

/* A caller built against a newer header: more bytes, zero (their defaults) or not. */
Test(abi, a_newer_callers_unknown_fields_must_be_zero) {
    struct {
        clattn_attention_desc desc;
        uint64_t newer_fields[4];
    } newer;
    cr_assert_eq(clattn_attention_desc_init_sized(&newer.desc, sizeof newer, CLATTN_LAYOUT_BSHD, 1,
                                                  1, 1, 2, 2, 4, 4),
                 CLATTN_SUCCESS);
    cr_assert_eq(newer.newer_fields[3], 0, "init zeroes the fields it does not know");
    cr_expect_eq(clattn_attention_desc_check(&newer.desc, NULL, NULL, 0), CLATTN_SUCCESS);
    newer.newer_fields[2] = 1; /* a field this library cannot honour */
    cr_expect_eq(clattn_attention_desc_check(&newer.desc, NULL, NULL, 0),
                 CLATTN_ERR_INVALID_ARGUMENT);
}

/* A caller built against the 0.2 header, whose desc ends with kv_q8_0: the shard fields added
 * later are not read (an ordinary call), and the library writes nothing past the desc. */
Test(abi, a_caller_without_the_shard_fields_makes_ordinary_calls) {
    const size_t size_0_2 = offsetof(clattn_attention_desc, kv_q8_0) + sizeof(int);
    struct {
        clattn_attention_desc desc;
        unsigned char canary[64];
    } g;
    memset(&g, CANARY, sizeof g);
    cr_assert_eq(clattn_attention_desc_init_sized(&g.desc, size_0_2, CLATTN_LAYOUT_BSHD, 1, 1, 1, 4,
                                                  4, 8, 8),
                 CLATTN_SUCCESS);
    cr_assert_eq(g.desc.struct_size, size_0_2);
    cr_assert(untouched((const unsigned char *)&g.desc + size_0_2,
                        sizeof g.desc - size_0_2 + sizeof g.canary),
              "desc_init wrote past the 0.2 desc");
    g.desc.causal = 1;
    uint64_t pairs = 0;
    cr_assert_eq(clattn_attention_pairs(&g.desc, &pairs), CLATTN_SUCCESS);
    cr_expect_eq(pairs, 4 * 5 / 2, "the bytes past the 0.2 desc (0xA5) were read as a shard");
}
