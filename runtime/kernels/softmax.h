/*
 * The row softmax kernels of cl/softmax.cl (softmax_rows for clattn_softmax, softmax_masked for
 * the gemm path): one work-group of WG_SIZE work-items a row, WG_SIZE a power of two that the
 * kernel itself can run (its CL_KERNEL_WORK_GROUP_SIZE may be below the device's limit).
 */
#ifndef CLATTN_KERNELS_SOFTMAX_H
#define CLATTN_KERNELS_SOFTMAX_H

#include "core/core.h"

/* Builds kernel `name` with WG_SIZE the largest power of two within `cap`, the limits and the
 * kernel's own limit (rebuilding smaller while the kernel cannot run it), and the -D options
 * `dtypes` ("-DIN_DTYPE=0 -DOUT_DTYPE=0"). @return CLATTN_SUCCESS with *wg and *kernel,
 * CLATTN_ERR_UNSUPPORTED (no size runs, with the reason on ctx) or a build's failure. */
clattn_status softmax_kernel_get(clattn_context *ctx, const launch_limits *limits, size_t cap,
                                 const char *name, const char *dtypes, size_t *wg,
                                 cl_kernel *kernel);

#endif
