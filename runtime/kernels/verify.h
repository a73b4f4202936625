/*
 * Verified dispatch (verify.c): the policy a call runs under (the context's, else
 * $CLATTN_VERIFY and $CLATTN_STRICT), a row's verdict on the context's device as `auto` reads
 * it, and self-verification on first use, which runs `clattn check` on the rows `auto` would
 * pick in a child process and lets it record their verdicts (docs/verification.md).
 */
#ifndef CLATTN_VERIFY_H
#define CLATTN_VERIFY_H

#include "kernels/variant.h"

typedef struct verify_settings {
    clattn_verify_policy policy; /* TRUST, PREFER or REQUIRE */
    int strict;                  /* every fallback is an error */
    int first_use;               /* verify the rows auto would pick on the first call */
} verify_settings;

/* The context's settings, with $CLATTN_VERIFY and $CLATTN_STRICT for what it leaves unset. */
verify_settings verify_settings_of(const clattn_context *ctx);

/* The row's verdict on ctx's device and driver (NONE under TRUST); for FAILED and TIMED_OUT
 * writes why auto does not run it, with the date and the case. */
clattn_verdict_kind verify_row(const clattn_context *ctx, const attn_variant *row, char *why,
                               size_t size);

/* Once per context: runs `clattn check --quick` on the rows (names, `count` of them) that have
 * no verdict, in a child process ($CLATTN_PROGRAM, else `clattn` on PATH), which records their
 * verdicts. Logs what it did; a program that cannot be started leaves the rows unverified. */
void verify_first_use(clattn_context *ctx, const char *const *rows, size_t count);

#endif
