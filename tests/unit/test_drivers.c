/* The driver search (runtime/core/drivers.c): a driver no .icd file registers is found and
 * handed to the ICD loader, once; the environment is left as it was and the private vendors
 * folder removed; a registered driver is not handed twice, but one whose entry does not load is
 * looked for; CLATTN_NO_DRIVER_SEARCH and an $OCL_ICD_VENDORS naming one ICD turn it off.
 * Criterion runs each test in its own process, so each sets what the search reads before the
 * process's first device call. */
#define _GNU_SOURCE /* dlinfo */

#include <criterion/criterion.h>

#include "clattn.h"

#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void make_folder(char *path, size_t size, const char *name) {
    snprintf(path, size, "/tmp/clattn-test-%s-XXXXXX", name);
    cr_assert(mkdtemp(path) != NULL, "cannot create a folder in /tmp");
}

static size_t entries_in(const char *folder) {
    size_t n = 0;
    DIR *d = opendir(folder);
    cr_assert(d != NULL);
    for (struct dirent *e = readdir(d); e; e = readdir(d))
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

/* Where the dynamic linker finds PoCL, resolved to the file itself; 0 when it has none. */
static int pocl_file(char *real, size_t size) {
    void *handle = dlopen("libpocl.so.2", RTLD_LAZY | RTLD_LOCAL);
    struct link_map *map = NULL;
    char resolved[PATH_MAX];
    if (!handle || dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || !realpath(map->l_name, resolved))
        return 0;
    snprintf(real, size, "%s", resolved);
    return 1;
}

/* The search's entry for PoCL, if it found one. */
static int found_pocl(clattn_driver_info *info) {
    size_t count = 0;
    cr_assert_eq(clattn_driver_count(&count), CLATTN_SUCCESS);
    for (size_t i = 0; i < count; i++) {
        clattn_driver_info_init(info);
        cr_assert_eq(clattn_driver_get_info(i, info), CLATTN_SUCCESS);
        if (strcmp(info->vendor, "PoCL") == 0) return 1;
    }
    return 0;
}

static size_t devices_of_platform(cl_platform_id platform) {
    size_t count = 0, matched = 0;
    clattn_device_count(&count);
    for (size_t i = 0; i < count; i++) {
        clattn_device_info info;
        clattn_device_info_init(&info);
        cr_assert_eq(clattn_device_get_info(i, &info), CLATTN_SUCCESS);
        matched += info.platform == platform;
    }
    return matched;
}

static void search_environment(const char *vendors, const char *tmpdir) {
    setenv("OCL_ICD_VENDORS", vendors, 1);
    if (tmpdir) setenv("TMPDIR", tmpdir, 1);
    unsetenv("OCL_ICD_FILENAMES");
    unsetenv("CLATTN_NO_DRIVER_SEARCH");
}

Test(drivers, an_unregistered_pocl_is_handed_to_the_loader_once) {
    char empty[64], tmp[64], real[PATH_MAX];
    make_folder(empty, sizeof empty, "vendors");
    make_folder(tmp, sizeof tmp, "tmpdir");
    search_environment(empty, tmp);
    size_t devices = 0;
    cr_assert_eq(clattn_device_count(&devices), CLATTN_SUCCESS);
    clattn_driver_info info;
    int found = found_pocl(&info);
    if (!found && !pocl_file(real, sizeof real))
        cr_skip_test("no PoCL on this machine for the search to find");
    cr_assert(found, "PoCL is installed but the search did not find it: %s",
              clattn_driver_search_summary());
    cr_assert_str_eq(info.icd_file, "pocl.icd");
    cr_assert(strstr(info.library, "libpocl.so.2") != NULL, "%s", info.library);
    cr_assert_eq(info.num_platforms, 1, "PoCL gave %u platforms", info.num_platforms);
    cr_assert_geq(devices_of_platform(info.platforms[0]), 1);
    cr_assert(strstr(clattn_driver_search_summary(), "handed to the ICD loader") != NULL, "%s",
              clattn_driver_search_summary());
    cr_assert_str_eq(getenv("OCL_ICD_VENDORS"), empty, "the variable was not restored");
    cr_assert_eq(entries_in(tmp), 0, "the private vendors folder was left in %s", tmp);
    rmdir(tmp);
    rmdir(empty);
}

/* Writes vendors/NAME, an .icd file of one line: `entry`, the driver's path; its path into icd. */
static void write_icd(char *icd, size_t size, const char *vendors, const char *name,
                      const char *entry) {
    snprintf(icd, size, "%s/%s", vendors, name);
    FILE *f = fopen(icd, "w");
    cr_assert(f != NULL);
    fprintf(f, "%s\n", entry);
    fclose(f);
}

/* Registers PoCL with one .icd file naming `entry`, runs the search and checks that PoCL is
 * not handed to the loader a second time. */
static void check_registered_pocl_is_left_alone(const char *vendors, const char *entry) {
    char icd[128];
    write_icd(icd, sizeof icd, vendors, "pocl-registered.icd", entry);
    search_environment(vendors, NULL);
    size_t devices = 0;
    cr_assert_eq(clattn_device_count(&devices), CLATTN_SUCCESS);
    clattn_driver_info info;
    cr_assert(!found_pocl(&info), "PoCL, registered as %s, was found again at %s", entry,
              info.library);
    cr_assert_geq(devices, 1, "PoCL registered as %s gave no device", entry);
    unlink(icd);
}

Test(drivers, a_driver_registered_by_a_versioned_name_is_not_handed_twice) {
    char vendors[64], real[PATH_MAX];
    if (!pocl_file(real, sizeof real)) cr_skip_test("no PoCL on this machine");
    make_folder(vendors, sizeof vendors, "vendors");
    const char *name = strrchr(real, '/') + 1; /* libpocl.so.2.x.y, as Debian's pocl.icd */
    check_registered_pocl_is_left_alone(vendors, name);
    rmdir(vendors);
}

Test(drivers, a_driver_registered_under_another_path_is_not_handed_twice) {
    char vendors[64], real[PATH_MAX], link[128];
    if (!pocl_file(real, sizeof real)) cr_skip_test("no PoCL on this machine");
    make_folder(vendors, sizeof vendors, "vendors");
    snprintf(link, sizeof link, "%s/opencl-cpu-driver.so", vendors); /* no name in common */
    cr_assert_eq(symlink(real, link), 0);
    check_registered_pocl_is_left_alone(vendors, link);
    unlink(link);
    rmdir(vendors);
}

/* .icd files naming PoCL by a path to nothing and by a name the linker does not find register
 * nothing (the loader skips them without a word): the search goes on, finds PoCL where the
 * linker has it and hands it to the loader. (On an H100 machine an entry for NVIDIA's library
 * that the loader did not load kept the search from looking for it.) */
Test(drivers, a_registered_driver_that_does_not_load_is_looked_for) {
    char vendors[64], real[PATH_MAX], missing[128], unknown[128];
    if (!pocl_file(real, sizeof real)) cr_skip_test("no PoCL on this machine");
    make_folder(vendors, sizeof vendors, "vendors");
    write_icd(missing, sizeof missing, vendors, "pocl-moved.icd", "/nonexistent/libpocl.so.2");
    write_icd(unknown, sizeof unknown, vendors, "pocl-unknown.icd", "libpocl.so.2.999.0");
    search_environment(vendors, NULL);
    size_t devices = 0;
    cr_assert_eq(clattn_device_count(&devices), CLATTN_SUCCESS);
    clattn_driver_info info;
    cr_assert(found_pocl(&info), "the search did not look for PoCL: %s",
              clattn_driver_search_summary());
    cr_assert_geq(devices, 1, "the PoCL it found gave no device");
    unlink(missing), unlink(unknown);
    rmdir(vendors);
}

Test(drivers, no_driver_search_turns_it_off) {
    char empty[64];
    make_folder(empty, sizeof empty, "vendors");
    search_environment(empty, NULL);
    setenv("CLATTN_NO_DRIVER_SEARCH", "1", 1);
    size_t devices = 1, drivers = 1;
    cr_assert_eq(clattn_device_count(&devices), CLATTN_SUCCESS);
    cr_assert_eq(clattn_driver_count(&drivers), CLATTN_SUCCESS);
    cr_assert_eq(devices, 0, "an empty vendors folder without the search gives no device");
    cr_assert_eq(drivers, 0);
    cr_assert(strstr(clattn_driver_search_summary(), "CLATTN_NO_DRIVER_SEARCH") != NULL);
    size_t index, matched = 0;
    cr_assert_eq(clattn_device_select(NULL, &index, 1, &matched), CLATTN_ERR_NO_DEVICE);
    const char *why = clattn_device_discovery_summary();
    cr_assert(strstr(why, "no OpenCL platform") && strstr(why, "pocl-opencl-icd") &&
                  strstr(why, "CLATTN_NO_DRIVER_SEARCH"),
              "no platform: the summary should say what to install and what the search did: %s",
              why);
    rmdir(empty);
}

/* ---- a platform that loads but offers no device (issue 29): PoCL alone, registered by one
 * .icd file, then made to refuse its devices. */

/* Registers only PoCL (the search off) and checks that discovery finds no device and that
 * clattn_device_discovery_summary names the platform and the cause `cause`. */
static void expect_pocl_without_devices(const char *cause) {
    char vendors[64], real[PATH_MAX], icd[128];
    if (!pocl_file(real, sizeof real)) cr_skip_test("no PoCL on this machine");
    make_folder(vendors, sizeof vendors, "vendors");
    write_icd(icd, sizeof icd, vendors, "pocl.icd", real);
    search_environment(vendors, NULL);
    setenv("CLATTN_NO_DRIVER_SEARCH", "1", 1);
    size_t devices = 1, index = 0, matched = 0;
    cr_assert_eq(clattn_device_count(&devices), CLATTN_SUCCESS);
    cr_assert_eq(devices, 0, "PoCL offered a device although it should refuse them");
    cr_assert_eq(clattn_device_select(NULL, &index, 1, &matched), CLATTN_ERR_NO_DEVICE);
    const char *why = clattn_device_discovery_summary();
    cr_assert(strstr(why, "platform 'Portable Computing Language' loaded but offered no device"),
              "the summary does not name the platform: %s", why);
    cr_assert(strstr(why, cause), "the summary lacks '%s': %s", cause, why);
    cr_assert(!strstr(why, "pocl-opencl-icd") && !strstr(why, "driver search"),
              "PoCL loaded, yet the summary advises installing it: %s", why);
    unlink(icd);
    rmdir(vendors);
}

Test(drivers, pocl_devices_naming_no_device_is_named) {
    setenv("POCL_DEVICES", "bogus", 1);
    expect_pocl_without_devices("POCL_DEVICES=bogus");
}

Test(drivers, an_unwritable_home_is_named_as_pocls_cache) {
    unsetenv("POCL_DEVICES");
    unsetenv("POCL_CACHE_DIR");
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", "/dev/null", 1);
    expect_pocl_without_devices("/dev/null/.cache/pocl/kcache");
}

Test(drivers, an_unwritable_xdg_cache_home_is_named_as_pocls_cache) {
    unsetenv("POCL_DEVICES");
    unsetenv("POCL_CACHE_DIR");
    setenv("XDG_CACHE_HOME", "/proc/self", 1);
    expect_pocl_without_devices("/proc/self/pocl/kcache");
}

Test(drivers, one_icd_named_by_ocl_icd_vendors_is_left_alone) {
    search_environment("/nonexistent/only-this.icd", NULL);
    size_t drivers = 1;
    cr_assert_eq(clattn_driver_count(&drivers), CLATTN_SUCCESS);
    cr_assert_eq(drivers, 0);
    cr_assert(strstr(clattn_driver_search_summary(), "skipped") != NULL, "%s",
              clattn_driver_search_summary());
}

Test(drivers, bad_arguments_are_refused) {
    clattn_driver_info info;
    cr_assert_eq(clattn_driver_count(NULL), CLATTN_ERR_INVALID_ARGUMENT);
    cr_assert_eq(clattn_driver_info_init_sized(NULL, sizeof info), CLATTN_ERR_INVALID_ARGUMENT);
    cr_assert_eq(clattn_driver_info_init_sized(&info, sizeof(size_t)), CLATTN_ERR_INVALID_ARGUMENT);
    cr_assert_eq(clattn_driver_get_info(0, NULL), CLATTN_ERR_INVALID_ARGUMENT);
    size_t count = 0;
    cr_assert_eq(clattn_driver_count(&count), CLATTN_SUCCESS);
    clattn_driver_info_init(&info);
    cr_assert_eq(clattn_driver_get_info(count, &info), CLATTN_ERR_INVALID_ARGUMENT);
    info.struct_size = 8;
    cr_assert_eq(clattn_driver_get_info(0, &info), CLATTN_ERR_INVALID_ARGUMENT);
    cr_assert(clattn_driver_search_summary()[0] != '\0');
}
