/* Status codes and the version: one table, OpenCL codes passed through, stable values. */
#include <criterion/criterion.h>

#include "clattn.h"

#include <stdio.h>
#include <string.h>

Test(status, opencl_codes_keep_their_values_and_names) {
    cr_assert_eq((int)CLATTN_CL_INVALID_VALUE, CL_INVALID_VALUE);
    cr_assert_eq((int)CLATTN_CL_OUT_OF_RESOURCES, CL_OUT_OF_RESOURCES);
    cr_assert_eq((int)CLATTN_CL_BUILD_PROGRAM_FAILURE, CL_BUILD_PROGRAM_FAILURE);
    cr_assert_str_eq(clattn_status_name(CLATTN_CL_INVALID_VALUE), "CL_INVALID_VALUE");
    cr_assert_str_eq(clattn_status_name((clattn_status)CL_INVALID_KERNEL_ARGS),
                     "CL_INVALID_KERNEL_ARGS");
}

Test(status, library_codes_have_their_own_range_and_names) {
    const clattn_status own[] = {
        CLATTN_ERR_INVALID_ARGUMENT, CLATTN_ERR_UNSUPPORTED, CLATTN_ERR_NO_DEVICE,
        CLATTN_ERR_OUT_OF_MEMORY,    CLATTN_ERR_BUILD,       CLATTN_ERR_IO,
        CLATTN_ERR_FORMAT,           CLATTN_ERR_BLAS,        CLATTN_ERR_TIMEOUT,
        CLATTN_ERR_COMM};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) {
        cr_assert(own[i] <= -7001 && own[i] > -7100, "code %d outside -7001..-7099", own[i]);
        cr_assert_eq(strncmp(clattn_status_name(own[i]), "CLATTN_ERR_", 11), 0);
        cr_assert_str_neq(clattn_status_string(own[i]), "unknown status");
    }
    cr_assert_str_eq(clattn_status_name(CLATTN_ERR_BUILD), "CLATTN_ERR_BUILD");
    cr_assert_str_eq(clattn_status_name(CLATTN_SUCCESS), "CLATTN_SUCCESS");
}

/* Every entry of the table has a distinct value, a name and a description. */
Test(status, table_is_complete_and_distinct) {
#define COLLECT(name, value, text) value,
    const int values[] = {CLATTN_STATUS_MAP(COLLECT)};
#undef COLLECT
    size_t n = sizeof values / sizeof values[0];
    for (size_t i = 0; i < n; i++) {
        cr_assert_str_neq(clattn_status_name((clattn_status)values[i]), "unknown status");
        cr_assert_str_neq(clattn_status_string((clattn_status)values[i]), "unknown status");
        for (size_t j = i + 1; j < n; j++) cr_assert_neq(values[i], values[j]);
    }
    cr_assert_str_eq(clattn_status_name((clattn_status)12345), "unknown status");
    cr_assert_str_eq(clattn_status_string((clattn_status)-999), "unknown status");
}

Test(status, version_matches_the_macros_and_the_build) {
    char expected[32];
    snprintf(expected, sizeof expected, "%d.%d.%d", CLATTN_VERSION_MAJOR, CLATTN_VERSION_MINOR,
             CLATTN_VERSION_PATCH);
    cr_assert_str_eq(clattn_version(), expected);
    cr_assert_str_eq(clattn_version(), CLATTN_VERSION_STRING);
    cr_assert_str_eq(clattn_version(), CLATTN_PROJECT_VERSION);
}
