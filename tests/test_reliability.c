/*
 * The library where it once gave wrong answers in silence or a stale message (the reliability
 * issue): every failing call on a context leaves its own message.
 */
#include <criterion/criterion.h>

#include "util.h"

#include <stdio.h>
#include <string.h>

static clattn_context *first_context(void) {
    clattn_context **ctxs;
    test_contexts(&ctxs);
    return ctxs[0];
}

/* ---------------------------------------------------------------- messages */

/* Makes the context's last error a known one, then expects `call` to fail with a message of
 * its own that mentions `text`. */
#define EXPECT_OWN_MESSAGE(ctx, call, text)                                                        \
    do {                                                                                           \
        cr_assert_neq(clattn_attention(ctx, NULL, NULL, NULL, NULL, NULL, NULL, NULL),             \
                      CLATTN_SUCCESS);                                                             \
        cr_assert(strstr(clattn_context_last_error(ctx), "desc is NULL") != NULL);                 \
        clattn_status status_ = (call);                                                            \
        cr_expect_neq(status_, CLATTN_SUCCESS, "%s succeeded", #call);                             \
        cr_expect(strstr(clattn_context_last_error(ctx), text) != NULL,                            \
                  "%s: last error '%s' does not mention '%s'", #call,                              \
                  clattn_context_last_error(ctx), text);                                           \
    } while (0)

Test(errors, every_failing_call_on_a_context_leaves_its_own_message) {
    clattn_context *ctx = first_context();
    clattn_variant_info info;
    clattn_variant_info_init(&info);
    char reason[128];
    EXPECT_OWN_MESSAGE(ctx, clattn_context_last_stats(ctx, NULL), "stats is NULL");
    EXPECT_OWN_MESSAGE(ctx, clattn_softmax(ctx, NULL, NULL, NULL, NULL, NULL), "softmax");
    EXPECT_OWN_MESSAGE(ctx, clattn_variant_describe(ctx, (clattn_variant)999, &info),
                       "variant 999");
    EXPECT_OWN_MESSAGE(ctx, clattn_variant_describe(ctx, CLATTN_VARIANT_GEMM, NULL), "info");
    EXPECT_OWN_MESSAGE(
        ctx, clattn_variant_supported(ctx, (clattn_variant)999, NULL, reason, sizeof reason),
        "variant 999");
}
