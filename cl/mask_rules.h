/*
 * docs/semantics.md section 2, which keys a query may see, written once in the common subset of C99
 * and OpenCL C. The host includes this file (runtime/plan/mask.h, with MASK_RULES_HOST defined);
 * the build embeds it into the kernel programs as "mask_rules.h", ahead of cl/common.cl. So the
 * reference, the planners, the pair counts and every kernel apply the same rules.
 *
 * Positions: query i sits at key position p = i + offset, offset = len_k - len_q (queries are
 * aligned to the end of the keys). A window side of -1 is unbounded.
 *
 *     allowed = causal_ok AND layout_ok AND (window_ok OR key_global OR row_global)
 */
#ifndef CLATTN_MASK_RULES_H
#define CLATTN_MASK_RULES_H

#ifdef MASK_RULES_HOST
#include <stdint.h>
typedef int64_t mask_int;
#define MASK_RULE static inline
#elif defined(__OPENCL_C_VERSION__) && __OPENCL_C_VERSION__ >= 120
typedef long mask_int;
#define MASK_RULE static inline __attribute__((always_inline))
#else
typedef long mask_int;
#define MASK_RULE inline __attribute__((always_inline))
#endif

/* a / b rounded towards minus infinity (b > 0). */
MASK_RULE mask_int mask_floor_div(mask_int a, mask_int b) {
    mask_int q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

/* causal: j <= p */
MASK_RULE int mask_causal_ok(int causal, mask_int p, mask_int j) {
    return !causal || j <= p;
}

/* window with dilation: p - left <= j <= p + right, and (p - j) mod dilation == 0 */
MASK_RULE int mask_window_ok(mask_int p, mask_int j, mask_int left, mask_int right,
                             mask_int dilation) {
    if (left >= 0 && j < p - left) return 0;
    if (right >= 0 && j > p + right) return 0;
    return (p - j) % dilation == 0;
}

MASK_RULE int mask_combine(int causal_ok, int layout_ok, int window_ok, int key_global,
                           int row_global) {
    return causal_ok && layout_ok && (window_ok || key_global || row_global);
}

/* A window side's reach in class-local keys: side / classes, or -1 (unbounded) for an unbounded
 * side or outside the window pass (`windowed` 0). */
MASK_RULE mask_int mask_reach(int windowed, mask_int side, mask_int classes) {
    return windowed && side >= 0 ? side / classes : -1;
}

/* mask_class_range's range for a row whose class-local index is `own`, with the window's reach
 * in class-local keys already divided (left / classes, right / classes; -1: unbounded), so that a
 * caller with many rows of one class divides once. */
MASK_RULE void mask_reach_range(mask_int own, mask_int class_keys, mask_int left_reach,
                                mask_int right_reach, int causal, mask_int *lo, mask_int *hi) {
    *lo = 0;
    *hi = class_keys - 1;
    if (left_reach >= 0 && own - left_reach > *lo) *lo = own - left_reach;
    if (right_reach >= 0 && own + right_reach < *hi) *hi = own + right_reach;
    if (causal && own < *hi) *hi = own;
}

/*
 * The keys a position p may see among the keys of class r: j = r + m * classes for the
 * class-local indices m in [0, class_keys). Classes group keys by dilation (classes =
 * dilation, or 1 when there is no grouping, which makes m = j). Returns [*lo, *hi] in class-local
 * indices (empty when *lo > *hi), bounded by the window when `windowed` (exactly the window's keys
 * of class r when r is p's own class) and by causality. The ends need no dilation test.
 */
MASK_RULE void mask_class_range(mask_int p, mask_int r, mask_int classes, mask_int class_keys,
                                mask_int left, mask_int right, int causal, int windowed,
                                mask_int *lo, mask_int *hi) {
    const mask_int own = mask_floor_div(p - r, classes); /* p's class-local index, or below it */
    mask_reach_range(own, class_keys, mask_reach(windowed, left, classes),
                     mask_reach(windowed, right, classes), causal, lo, hi);
}

#endif /* CLATTN_MASK_RULES_H */
