/*
 * What is known of OpenCL compilers that cannot build one of clattn's kernels in reasonable
 * time (compilers.c): a table of (platform, variant) with what was seen and where. A variant's
 * supports() asks it, so that `auto` never picks a kernel the device's compiler does not
 * finish, and `clattn devices --variants` shows the reason.
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

#endif
