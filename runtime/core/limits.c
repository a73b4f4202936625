/*
 * What a work-group may use (core.h, "what a work-group may use"): the device's limits, a
 * compiled kernel's own, and how the one narrows the other. Per-kernel limits are below the
 * device's where a kernel needs many registers (Intel's and mobile GPUs' compilers report a
 * smaller CL_KERNEL_WORK_GROUP_SIZE) or where the compiler adds local memory of its own.
 */
#include "core.h"

#include <string.h>

/* Mesa's llvmpipe: gallivm's LP_MAX_TGSI_LOOP_ITERATIONS. */
#define LLVMPIPE_LOOP_BUDGET 65535UL

unsigned long device_loop_budget(const clattn_device_info *device) {
    if (strcmp(device->platform_name, "rusticl") == 0 && strncmp(device->name, "llvmpipe", 8) == 0)
        return LLVMPIPE_LOOP_BUDGET;
    return 0;
}

launch_limits launch_limits_of_device(const clattn_device_info *device) {
    launch_limits l = {device->max_work_group_size, device->local_mem_bytes};
    return l;
}

void kernel_limits_get(const clattn_context *ctx, cl_kernel kernel, kernel_limits *out) {
    cl_device_id device = ctx->device.device;
    size_t group = 0;
    cl_ulong local = 0, priv = 0;
    out->work_group_size = ctx->device.max_work_group_size;
    out->local_mem_bytes = out->private_mem_bytes = 0;
    if (clGetKernelWorkGroupInfo(kernel, device, CL_KERNEL_WORK_GROUP_SIZE, sizeof group, &group,
                                 NULL) == CL_SUCCESS &&
        group > 0)
        out->work_group_size = group;
    if (clGetKernelWorkGroupInfo(kernel, device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof local, &local,
                                 NULL) == CL_SUCCESS)
        out->local_mem_bytes = local;
    if (clGetKernelWorkGroupInfo(kernel, device, CL_KERNEL_PRIVATE_MEM_SIZE, sizeof priv, &priv,
                                 NULL) == CL_SUCCESS)
        out->private_mem_bytes = priv;
}

int launch_limits_narrow(launch_limits *limits, size_t group, uint64_t counted,
                         const kernel_limits *kernel) {
    int narrowed = 0;
    if (kernel->work_group_size < limits->work_group_size) {
        limits->work_group_size = kernel->work_group_size;
        narrowed = group > kernel->work_group_size;
    }
    if (kernel->local_mem_bytes > limits->local_mem_bytes) {
        /* the kernel uses `missed` bytes more than the planner counted (counted fit the
         * budget, so missed > 0): the budget shrinks by that much, below `counted` */
        uint64_t missed =
            kernel->local_mem_bytes -
            (counted < kernel->local_mem_bytes ? counted : kernel->local_mem_bytes - 1);
        limits->local_mem_bytes =
            limits->local_mem_bytes > missed ? limits->local_mem_bytes - missed : 0;
        narrowed = 1;
    }
    return narrowed;
}
