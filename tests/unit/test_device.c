/* Device discovery, selection per docs/semantics.md section 5, and contexts (own and wrapped). */
#include <criterion/criterion.h>

#include "clattn.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Test(device, every_device_is_described) {
    size_t count = 0;
    cr_assert_eq(clattn_device_count(&count), CLATTN_SUCCESS);
    cr_assert_geq(count, 1, "no OpenCL device: install pocl-opencl-icd");
    for (size_t i = 0; i < count; i++) {
        clattn_device_info info;
        clattn_device_info_init(&info);
        cr_assert_eq(clattn_device_get_info(i, &info), CLATTN_SUCCESS);
        cr_assert_eq(info.index, i);
        cr_assert_neq(info.name[0], '\0');
        cr_assert_neq(info.platform_name[0], '\0');
        cr_assert_eq(strncmp(info.opencl_c_version, "OpenCL C ", 9), 0, "%s",
                     info.opencl_c_version);
        cr_assert_gt(info.global_mem_bytes, 0);
        cr_assert_gt(info.max_alloc_bytes, 0);
        cr_assert_geq(info.global_mem_bytes, info.max_alloc_bytes);
        cr_assert_geq(info.max_work_group_size, 1);
        cr_assert_geq(info.compute_units, 1);
        cr_assert_neq(info.type, 0);
    }
    clattn_device_info info;
    clattn_device_info_init(&info);
    cr_assert_eq(clattn_device_get_info(count, &info), CLATTN_ERR_INVALID_ARGUMENT);
    cr_assert_eq(clattn_device_get_info(0, NULL), CLATTN_ERR_INVALID_ARGUMENT);
}

/* CLATTN_TEST_POCL_DEVICES (set by CTest next to POCL_DEVICES) says how many PoCL devices
 * this run must see: 1 normally, 2 with POCL_DEVICES="pthread pthread". */
/* How many devices of a type, or of the PoCL platform (type 0). */
static size_t count_devices(cl_device_type type) {
    size_t count = 0, found = 0;
    clattn_device_count(&count);
    for (size_t i = 0; i < count; i++) {
        clattn_device_info info;
        clattn_device_info_init(&info);
        clattn_device_get_info(i, &info);
        found += type ? (info.type & type) != 0
                      : strstr(info.platform_name, "Portable Computing Language") != NULL;
    }
    return found;
}

Test(device, pocl_devices_match_the_environment) {
    const char *expect = getenv("CLATTN_TEST_POCL_DEVICES");
    cr_assert(expect != NULL, "run through ctest, which sets CLATTN_TEST_POCL_DEVICES");
    size_t pocl = count_devices(0);
    if (pocl == 0) cr_skip_test("no PoCL device on this machine (only other vendors' drivers)");
    cr_assert_eq(pocl, (size_t)atoi(expect));
}

Test(device, selection_by_index_pair_type_and_name) {
    size_t count = 0, idx[16], n = 0;
    clattn_device_count(&count);
    unsetenv("CLATTN_DEVICE");
    cr_assert_eq(clattn_device_select("0", idx, 16, &n), CLATTN_SUCCESS);
    cr_assert(n == 1 && idx[0] == 0);
    cr_assert_eq(clattn_device_select("all", idx, 16, &n), CLATTN_SUCCESS);
    cr_assert_eq(n, count);
    clattn_device_info last;
    clattn_device_info_init(&last);
    clattn_device_get_info(count - 1, &last);
    char pair[32];
    snprintf(pair, sizeof pair, "%u:%u", last.platform_index, last.device_index);
    cr_assert_eq(clattn_device_select(pair, idx, 16, &n), CLATTN_SUCCESS);
    cr_assert(n == 1 && idx[0] == count - 1, "%s selected %zu devices", pair, n);
}

Test(device, selection_by_type_and_name) {
    size_t idx[16], n = 0, cpus = count_devices(CL_DEVICE_TYPE_CPU);
    if (cpus == 0 || count_devices(0) == 0)
        cr_skip_test("needs a CPU device of PoCL (this machine has %zu CPU devices)", cpus);
    unsetenv("CLATTN_DEVICE");
    cr_assert_eq(clattn_device_select("CPU", idx, 16, &n), CLATTN_SUCCESS);
    cr_assert_eq(n, cpus);
    for (size_t i = 0; i < n; i++) {
        clattn_device_info info;
        clattn_device_info_init(&info);
        clattn_device_get_info(idx[i], &info);
        cr_assert(info.type & CL_DEVICE_TYPE_CPU);
    }
    cr_assert_eq(clattn_device_select("portable COMPUTING", idx, 16, &n), CLATTN_SUCCESS);
    cr_assert_eq(n, count_devices(0));
}

Test(device, default_is_first_gpu_else_first_device) {
    size_t count = 0, idx = 99, n = 0;
    unsetenv("CLATTN_DEVICE");
    clattn_device_count(&count);
    cr_assert_eq(clattn_device_select(NULL, &idx, 1, &n), CLATTN_SUCCESS);
    size_t expected = 0;
    for (size_t i = count; i-- > 0;) {
        clattn_device_info info;
        clattn_device_info_init(&info);
        clattn_device_get_info(i, &info);
        if (info.type & CL_DEVICE_TYPE_GPU) expected = i;
    }
    cr_assert_eq(idx, expected);
    cr_assert_eq(clattn_device_select("", &idx, 1, &n), CLATTN_SUCCESS);
    cr_assert_eq(idx, expected);
}

Test(device, environment_variable_selects) {
    size_t count = 0, idx = 99, n = 0;
    clattn_device_count(&count);
    char last[16];
    snprintf(last, sizeof last, "%zu", count - 1);
    setenv("CLATTN_DEVICE", last, 1);
    cr_assert_eq(clattn_device_select(NULL, &idx, 1, &n), CLATTN_SUCCESS);
    cr_assert_eq(idx, count - 1);
    setenv("CLATTN_DEVICE", "no-such-device-anywhere", 1);
    cr_assert_eq(clattn_device_select(NULL, &idx, 1, &n), CLATTN_ERR_NO_DEVICE);
    cr_assert_eq(clattn_device_select("0", &idx, 1, &n), CLATTN_SUCCESS, "an explicit spec wins");
}

Test(device, bad_specs_are_reported) {
    size_t idx = 0, n = 0;
    unsetenv("CLATTN_DEVICE");
    cr_assert_eq(clattn_device_select("no-such-device-anywhere", &idx, 1, &n),
                 CLATTN_ERR_NO_DEVICE);
    cr_assert_eq(n, 0);
    cr_assert_eq(clattn_device_select("999", &idx, 1, &n), CLATTN_ERR_NO_DEVICE);
    /* Not two integers around one colon: a name substring, which names no device here. */
    cr_assert_eq(clattn_device_select("1:", &idx, 1, &n), CLATTN_ERR_NO_DEVICE);
    cr_assert_eq(clattn_device_select(":0", &idx, 1, &n), CLATTN_ERR_NO_DEVICE);
    cr_assert_eq(clattn_device_select("0:0:0", &idx, 1, &n), CLATTN_ERR_NO_DEVICE);
    cr_assert_eq(clattn_device_select("0", NULL, 1, &n), CLATTN_ERR_INVALID_ARGUMENT);
    cr_assert_eq(clattn_device_select("0", &idx, 1, NULL), CLATTN_ERR_INVALID_ARGUMENT);
}

/* AMD names hold colons ("gfx90a:sramecc+:xnack-"): a spec with a colon that is not P:D is a
 * name substring, matched like any other. */
Test(device, names_with_colons_are_substrings) {
    size_t idx = 99, n = 0;
    unsetenv("CLATTN_DEVICE");
    clattn_device_info info;
    clattn_device_info_init(&info);
    cr_assert_eq(clattn_device_get_info(0, &info), CLATTN_SUCCESS);
    cr_assert_eq(clattn_device_select("gfx90a:sramecc+:xnack-", &idx, 1, &n), CLATTN_ERR_NO_DEVICE);
    char pair[32];
    snprintf(pair, sizeof pair, "%u:%u", info.platform_index, info.device_index);
    cr_assert_eq(clattn_device_select(pair, &idx, 1, &n), CLATTN_SUCCESS);
    cr_assert_eq(idx, 0);
    /* the platform name followed by ':' is no device's name: proves the colon is kept in the
     * substring rather than splitting it */
    char colon[300];
    snprintf(colon, sizeof colon, "%.8s:", info.platform_name);
    cr_assert_eq(clattn_device_select(colon, &idx, 1, &n), CLATTN_ERR_NO_DEVICE, "%s", colon);
}

Test(device, context_lifetime) {
    clattn_context *ctx = NULL;
    cr_assert_eq(clattn_context_create(&ctx, 0), CLATTN_SUCCESS);
    cr_assert_not_null(clattn_context_queue(ctx));
    cr_assert_not_null(clattn_context_cl_context(ctx));
    cr_assert_str_eq(clattn_context_build_log(ctx), "");
    cr_assert_str_eq(clattn_context_last_error(ctx), "");
    clattn_stats stats;
    clattn_stats_init(&stats);
    cr_assert_eq(clattn_context_last_stats(ctx, &stats), CLATTN_ERR_INVALID_ARGUMENT);
    clattn_context_destroy(ctx);
    clattn_context_destroy(NULL);
    cr_assert_eq(clattn_context_create(NULL, 0), CLATTN_ERR_INVALID_ARGUMENT);
    size_t count = 0;
    clattn_device_count(&count);
    ctx = (clattn_context *)1;
    cr_assert_eq(clattn_context_create(&ctx, count), CLATTN_ERR_INVALID_ARGUMENT);
    cr_assert_null(ctx);
}

/* Interop: the caller's context and queue stay the caller's. */
Test(device, wrapped_context_leaves_ownership_with_the_caller) {
    caller_objects mine, other;
    cr_assert_eq(caller_objects_create(&mine, 0), CL_SUCCESS);
    cl_command_queue queue = mine.queue;

    clattn_context *ctx = NULL;
    cr_assert_eq(clattn_context_wrap(&ctx, mine.context, mine.device, queue), CLATTN_SUCCESS);
    cr_assert_eq(clattn_context_queue(ctx), queue);
    cr_assert_eq(clattn_context_cl_context(ctx), mine.context);
    clattn_context_destroy(ctx);

    cl_uint refs = 0;
    cr_assert_eq(clGetCommandQueueInfo(queue, CL_QUEUE_REFERENCE_COUNT, sizeof refs, &refs, NULL),
                 CL_SUCCESS);
    cr_assert_eq(refs, 1, "clattn must release exactly the references it took");
    cr_assert_eq(
        clGetContextInfo(mine.context, CL_CONTEXT_REFERENCE_COUNT, sizeof refs, &refs, NULL),
        CL_SUCCESS);
    cr_assert_geq(refs, 1);

    cr_assert_eq(clattn_context_wrap(&ctx, mine.context, NULL, queue), CLATTN_ERR_INVALID_ARGUMENT);
    cr_assert_eq(clattn_context_wrap(&ctx, NULL, mine.device, queue), CLATTN_ERR_INVALID_ARGUMENT);
    cr_assert_null(ctx);

    cr_assert_eq(caller_objects_create(&other, 0), CL_SUCCESS);
    cr_assert_eq(clattn_context_wrap(&ctx, other.context, mine.device, queue),
                 CLATTN_ERR_INVALID_ARGUMENT, "a queue of another cl_context must be refused");
    cr_assert_null(ctx);
    caller_objects_release(&other);
    caller_objects_release(&mine);
}

/* A wrapped context describes its device as clattn's list does, its index and P:D included:
 * first-use verification and messages name the device by them (every wrapped device was 0). */
Test(device, a_wrapped_context_knows_its_device_index) {
    size_t count = 0;
    cr_assert_eq(clattn_device_count(&count), CLATTN_SUCCESS);
    for (size_t i = 0; i < count; i++) {
        clattn_device_info listed, wrapped;
        clattn_device_info_init(&listed), clattn_device_info_init(&wrapped);
        cr_assert_eq(clattn_device_get_info(i, &listed), CLATTN_SUCCESS);
        cl_int err = CL_SUCCESS;
        cl_context cl = clCreateContext(NULL, 1, &listed.device, NULL, NULL, &err);
        cl_command_queue queue = cl ? clCreateCommandQueue(cl, listed.device, 0, &err) : NULL;
        cr_assert(queue != NULL, "device %zu: %d", i, (int)err);
        clattn_context *ctx = NULL;
        cr_assert_eq(clattn_context_wrap(&ctx, cl, listed.device, queue), CLATTN_SUCCESS);
        cr_assert_eq(clattn_context_device_info(ctx, &wrapped), CLATTN_SUCCESS);
        cr_expect(wrapped.index == i && wrapped.platform_index == listed.platform_index &&
                      wrapped.device_index == listed.device_index,
                  "device %zu wrapped as %zu (%u:%u)", i, wrapped.index, wrapped.platform_index,
                  wrapped.device_index);
        clattn_context_destroy(ctx);
        clReleaseCommandQueue(queue), clReleaseContext(cl);
    }
}

/* clattn enqueues in order; a caller's out-of-order queue is refused rather than misused. */
Test(device, out_of_order_queues_are_refused) {
    caller_objects mine;
    cl_int err = caller_objects_create(&mine, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE);
    if (err == CL_SUCCESS) {
        clattn_context *ctx = NULL;
        cr_assert_eq(clattn_context_wrap(&ctx, mine.context, mine.device, mine.queue),
                     CLATTN_ERR_UNSUPPORTED);
        cr_assert_null(ctx);
    } else {
        cr_assert_eq(err, CL_INVALID_QUEUE_PROPERTIES, "%d", err); /* the device has none */
    }
    caller_objects_release(&mine);
}
