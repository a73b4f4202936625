/* The row softmax kernels' work-group fit (softmax.h), shared by clattn_softmax (api/softmax.c)
 * and the gemm path's masked softmax. */
#include "kernels/softmax.h"
#include "plan/params.h"

#include <stdio.h>

/* The largest power of two at most n (n >= 1), else 1. */
static size_t pow2_at_most(uint64_t n) {
    size_t p = 1;
    while (p * 2 <= n) p *= 2;
    return p;
}

clattn_status softmax_kernel_get(clattn_context *ctx, const launch_limits *limits, size_t cap,
                                 const char *name, const char *dtypes, size_t *wg,
                                 cl_kernel *kernel) {
    static const char *const files[] = {ATTN_PRELUDE, "softmax.cl"};
    launch_limits lim = *limits;
    for (;;) {
        /* a work-item's scratch float in local memory; cap and limits as they stand */
        uint64_t most = cap < lim.work_group_size ? cap : lim.work_group_size;
        if (lim.local_mem_bytes / sizeof(float) < most) most = lim.local_mem_bytes / sizeof(float);
        *wg = pow2_at_most(most);
        char defines[128];
        snprintf(defines, sizeof defines, "-DWG_SIZE=%zu %s", *wg, dtypes);
        clattn_status status = kernel_get(ctx, files, ARRAY_LEN(files), defines, name, kernel);
        if (status != CLATTN_SUCCESS) return status;
        kernel_limits k;
        kernel_limits_get(ctx, *kernel, &k);
        if (!launch_limits_narrow(&lim, *wg, *wg * sizeof(float), &k)) return CLATTN_SUCCESS;
        log_msg("%s: work-groups of %zu do not fit the kernel (its limit %zu, %llu bytes of "
                "local memory); trying smaller",
                name, *wg, k.work_group_size, (unsigned long long)k.local_mem_bytes);
        if (*wg == 1)
            return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED,
                             "%s: the kernel cannot run even one work-item a work-group "
                             "(CL_KERNEL_WORK_GROUP_SIZE %zu, %llu bytes of local memory)",
                             name, k.work_group_size, (unsigned long long)k.local_mem_bytes);
    }
}
