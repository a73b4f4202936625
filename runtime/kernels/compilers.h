/*
 * What is known of OpenCL implementations that cannot run one of clattn's kernels as written
 * (compilers.c): a table of (platform, variant) whose compiler does not build it in reasonable
 * time, with what was seen and where, and the devices that cut a work-item's loops short. A
 * variant's supports() asks them, so that `auto` never picks a kernel the device does not
 * finish or runs wrongly, and `clattn devices --variants` shows the reason.
 */
#ifndef CLATTN_COMPILERS_H
#define CLATTN_COMPILERS_H

#include "core/core.h"

/* Whether the device's compiler is known not to finish building `variant`'s kernel ("lanes",
 * ...); then writes why into `why`. */
int compiler_refuses(const clattn_device_info *device, const char *variant, char *why, size_t size);

/* Whether the device's compiler is known to build `variant`'s kernels only slowly (minutes a
 * specialisation); then writes why into `why`. `auto` leaves such a variant to the calls no
 * other variant serves. */
int compiler_is_slow(const clattn_device_info *device, const char *variant, char *why, size_t size);

/* Whether the device's compiler turns clang's __builtin_prefetch into the CPU's prefetch
 * instruction (PoCL on a CPU), so that a kernel may ask for lines ahead (cl/lanes.cl,
 * PREFETCH). Elsewhere the builtin may not get through SPIR-V (rusticl), be unknown (GPU
 * compilers) or be an IR call to interpret (oclgrind). */
int compiler_builds_prefetch(const clattn_device_info *device);

/* The most keys one work-item of `variant` ("rowwise", "split", "gemm") may walk at these head
 * dims within the device's loop budget (core.h, device_loop_budget); SIZE_MAX where the device
 * has none. */
size_t loop_budget_keys(const clattn_device_info *device, const char *variant, size_t dim_qk,
                        size_t dim_v);

/* Whether a work-item of `variant` that walks `keys` keys stays within the device's loop
 * budget; when not, writes why into `why`. */
int loop_budget_allows(const clattn_device_info *device, const char *variant, size_t keys,
                       size_t dim_qk, size_t dim_v, char *why, size_t size);

/* Whether `variant` is the only one of the budgeted walks (those loop_budget_keys knows) whose
 * work-items stay within the device's loop budget over `keys` keys: every other one exceeds it. */
int loop_budget_leaves_only(const clattn_device_info *device, const char *variant, size_t keys,
                            size_t dim_qk, size_t dim_v);

#endif
