/* clattn devices: every platform and device, with what planning looks at and, for a device
 * whose driver the library's driver search found, where it came from and how to register it;
 * and the device selection helpers the other subcommands share. */
#include "args.h"
#include "commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *type_name(cl_device_type type) {
    if (type & CL_DEVICE_TYPE_GPU) return "gpu";
    if (type & CL_DEVICE_TYPE_CPU) return "cpu";
    if (type & CL_DEVICE_TYPE_ACCELERATOR) return "accelerator";
    return "other";
}

static void format_bytes(cl_ulong bytes, char *out, size_t size) {
    if (bytes >= (1ull << 30))
        snprintf(out, size, "%.1f GiB", (double)bytes / (1ull << 30));
    else if (bytes >= (1ull << 20))
        snprintf(out, size, "%.1f MiB", (double)bytes / (1ull << 20));
    else
        snprintf(out, size, "%.0f KiB", (double)bytes / 1024.0);
}

static void print_device(const clattn_device_info *d, int is_default) {
    char global[32], local[32], alloc[32], subgroups[64] = "no";
    format_bytes(d->global_mem_bytes, global, sizeof global);
    format_bytes(d->local_mem_bytes, local, sizeof local);
    format_bytes(d->max_alloc_bytes, alloc, sizeof alloc);
    if (d->has_subgroups || d->num_subgroup_sizes) {
        snprintf(subgroups, sizeof subgroups, "%s", d->has_subgroups ? "yes" : "sizes");
        for (unsigned i = 0; i < d->num_subgroup_sizes; i++) {
            size_t used = strlen(subgroups);
            snprintf(subgroups + used, sizeof subgroups - used, "%s%zu", i ? "," : " ",
                     d->subgroup_sizes[i]);
        }
    }
    char pair[16];
    snprintf(pair, sizeof pair, "%u:%u", d->platform_index, d->device_index);
    printf("%-3zu %-5s %-4s %-44.44s %4u %10s %9s %10s %5zu %5u/%-3u %-4s %s%s\n", d->index, pair,
           type_name(d->type), d->name, d->compute_units, global, local, alloc,
           d->max_work_group_size, d->preferred_vector_width_float, d->preferred_vector_width_half,
           d->has_fp16 ? "yes" : "no", subgroups, is_default ? "  (default)" : "");
    printf("    platform %s (%s), driver %s, %s\n", d->platform_name, d->platform_version,
           d->driver_version, d->opencl_c_version);
}

/* Whether tuning.json tunes the device (clattn tune): the variants it has entries for. */
static void print_tuned(const clattn_device_info *d) {
    char tuned[256] = "";
    for (int v = 1;; v++) {
        clattn_tuning params;
        clattn_tuning_source source = CLATTN_TUNING_DEFAULT;
        clattn_tuning_init(&params);
        if (clattn_device_tuning(d->index, (clattn_variant)v, &params, &source) != CLATTN_SUCCESS)
            break;
        size_t used = strlen(tuned);
        if (source == CLATTN_TUNING_FILE)
            snprintf(tuned + used, sizeof tuned - used, "%s%s", used ? ", " : "",
                     clattn_variant_name((clattn_variant)v));
    }
    if (*tuned)
        printf("    tuned: %s (tuning.json, for this driver)\n", tuned);
    else
        printf("    tuned: no (built-in defaults; clattn tune measures this device)\n");
}

/* The found driver a platform comes from, or NULL when the ICD loader registers its own. */
static int found_driver_of(cl_platform_id platform, clattn_driver_info *out) {
    size_t count = 0;
    clattn_driver_count(&count);
    for (size_t i = 0; i < count; i++) {
        clattn_driver_info_init(out);
        if (clattn_driver_get_info(i, out) != CLATTN_SUCCESS) continue;
        for (unsigned p = 0; p < out->num_platforms && p < 8; p++)
            if (out->platforms[p] == platform) return 1;
    }
    return 0;
}

/* One line under a device whose driver the search found: where it is, how to register it. */
static void print_found_by_search(const clattn_device_info *d) {
    clattn_driver_info driver;
    if (!found_driver_of(d->platform, &driver)) return;
    printf("    found by search: %s (%s), which no .icd file registers; register it with: "
           "echo %s > /etc/OpenCL/vendors/%s\n",
           driver.library, driver.vendor, driver.library, driver.icd_file);
}

/* Drivers the search found that gave the loader no platform (a library without its GPU or
 * kernel module, say): said once, after the table. */
static void print_drivers_without_devices(void) {
    size_t count = 0;
    clattn_driver_count(&count);
    for (size_t i = 0; i < count; i++) {
        clattn_driver_info driver;
        clattn_driver_info_init(&driver);
        if (clattn_driver_get_info(i, &driver) == CLATTN_SUCCESS && driver.num_platforms == 0)
            printf("found by search: %s (%s), but the ICD loader got no platform from it\n",
                   driver.library, driver.vendor);
    }
}

/* Under a variant's line: its old name, and what `clattn tune` searches. */
static void print_variant_notes(const clattn_variant_info *info) {
    if (info->old_name)
        printf("    %-10s old name \"%s\" still works until 0.4\n", "", info->old_name);
    if (!info->num_axes) return;
    printf("    %-10s clattn tune searches", "");
    for (size_t a = 0; a < info->num_axes; a++) {
        printf("%s %s ", a ? "," : "", info->axes[a].field);
        for (unsigned i = 0; i < info->axes[a].count; i++)
            printf("%s%u", i ? "/" : "", info->axes[a].values[i]);
    }
    printf("\n");
}

/* Every row of the GEMM table on the context's device, as the variants are listed. */
static void print_gemms(clattn_context *ctx) {
    printf("    %-10s %-4s %-4s %-11s %s\n", "gemm", "runs", "auto", "tuning",
           "what it is / why not (the layer's projections, the gemm path)");
    for (int g = 1;; g++) {
        clattn_gemm_info info;
        clattn_gemm_info_init(&info);
        if (clattn_gemm_describe(ctx, (clattn_gemm)g, &info) != CLATTN_SUCCESS) break;
        printf("    %-10s %-4s %-4s %-11s %s\n", info.name, info.supported ? "yes" : "no",
               info.used_by_auto ? "yes" : "no", info.tuning,
               info.reason[0] ? info.reason : info.summary);
        if (!info.num_axes) continue;
        printf("    %-10s clattn tune --gemm %s searches", "", info.name);
        for (size_t a = 0; a < info.num_axes; a++) {
            printf("%s %s ", a ? "," : "", info.axes[a].field);
            for (unsigned i = 0; i < info.axes[a].count; i++)
                printf("%s%u", i ? "/" : "", info.axes[a].values[i]);
        }
        printf("\n");
    }
}

/* Under a variant's line: its verdict on this device and driver (docs/verification.md). */
static void print_verdict(clattn_context *ctx, const clattn_variant_info *info) {
    clattn_verdict v;
    clattn_verdict_init(&v);
    if (clattn_verdict_get(ctx, info->variant, &v) != CLATTN_SUCCESS) return;
    if (v.kind == CLATTN_VERDICT_NONE) {
        printf("    %-10s verdict: none on this driver and library (clattn check verifies it)\n",
               "");
        return;
    }
    const char *kind = v.kind == CLATTN_VERDICT_PASSED   ? "passed"
                       : v.kind == CLATTN_VERDICT_FAILED ? "failed"
                                                         : "timed out";
    printf("    %-10s verdict: %s on %s (%s)%s%s\n", "", kind, v.date, v.sweep,
           *v.detail ? ": " : "", v.detail);
}

/* Every row of the variant table on one device: whether it runs there, whether `auto` tries
 * it, where its tuning comes from, and why not when it does not; its verdict. */
static int print_variants(size_t device) {
    clattn_context *ctx = NULL;
    clattn_status status = clattn_context_create(&ctx, device);
    if (status != CLATTN_SUCCESS) {
        printf("    variants: cannot open the device: %s\n", clattn_status_name(status));
        return 1;
    }
    printf("    %-10s %-4s %-4s %-11s %s\n", "variant", "runs", "auto", "tuning",
           "what it is / why not");
    for (int v = 1; strcmp(clattn_variant_name((clattn_variant)v), "unknown") != 0; v++) {
        clattn_variant_info info;
        clattn_variant_info_init(&info);
        if (clattn_variant_describe(ctx, (clattn_variant)v, &info) != CLATTN_SUCCESS) break;
        printf("    %-10s %-4s %-4s %-11s %s\n", info.name, info.supported ? "yes" : "no",
               info.used_by_auto ? "yes" : "no", info.tuning,
               info.reason[0] ? info.reason : info.summary);
        print_verdict(ctx, &info);
        print_variant_notes(&info);
    }
    print_gemms(ctx);
    clattn_context_destroy(ctx);
    return 0;
}

/* No device: the library's account of why (platforms that loaded but offered none, each with
 * its likely cause, or, with no platform, what to install and what the driver search did),
 * which found drivers gave no platform, or the platform query failed (named, with the likely
 * cause). @return 1. */
static int report_no_devices(const char *command, clattn_status status) {
    char silent[1024] = "";
    size_t count = 0, used = 0;
    clattn_driver_count(&count);
    for (size_t i = 0; i < count && used < sizeof silent; i++) {
        clattn_driver_info driver;
        clattn_driver_info_init(&driver);
        if (clattn_driver_get_info(i, &driver) == CLATTN_SUCCESS && driver.num_platforms == 0)
            used += (size_t)snprintf(silent + used, sizeof silent - used,
                                     "; %s gave the loader no platform", driver.library);
    }
    if (status == CLATTN_SUCCESS || status == CLATTN_ERR_NO_DEVICE)
        cli_error(command, "no OpenCL device found: %s%s", clattn_device_discovery_summary(),
                  silent);
    else if (status == CLATTN_CL_PLATFORM_NOT_FOUND_KHR)
        cli_error(command,
                  "the OpenCL platform query failed: %s (%d): drivers are registered but none "
                  "could be loaded (out of memory or a memory limit such as ulimit -v, or a "
                  "broken driver; OCL_ICD_DEBUG=7 shows why)",
                  clattn_status_name(status), (int)status);
    else
        cli_error(command, "the OpenCL platform query failed: %s (%d)", clattn_status_name(status),
                  (int)status);
    return 1;
}

/* devices --verdicts FILE: a report's verdicts of this library and kernel sources into the
 * store. @return 0 or 1 (said). */
static int merge_verdicts(const char *file) {
    size_t merged = 0, ignored = 0;
    char why[1024] = "", store[4096] = "";
    clattn_status status = clattn_verdicts_merge(file, &merged, &ignored, why, sizeof why);
    if (status != CLATTN_SUCCESS) {
        cli_error("devices", "--verdicts %s: %s (%s)", file,
                  *why ? why : clattn_status_string(status), clattn_status_name(status));
        return 1;
    }
    clattn_verdicts_file(store, sizeof store);
    printf("verdicts: merged %zu from %s into %s; %zu left out (another library version or "
           "other kernel sources)\n",
           merged, file, store, ignored);
    return 0;
}

int cmd_devices(int argc, char **argv) {
    static const cli_option options[] = {
        {"variants", NULL,
         "also list the kernel variants and GEMM rows each device runs, why not, and verdicts"},
        {"verdicts", "FILE",
         "merge the verdicts of a report (clattn check --report) into this machine's store"},
        {"help", NULL, "show this help"}};
    cli_args args;
    int parsed = args_parse(&args, options, 3, "devices", argc, argv);
    if (parsed == 1) {
        args_usage("devices", "[--variants] [--verdicts FILE.json]", options, 3);
        printf("\nLists every OpenCL platform and device. Select one elsewhere with --device "
               "INDEX, P:D,\na name substring, or gpu|cpu|accelerator|all "
               "(or the CLATTN_DEVICE variable).\n"
               "A device whose driver no .icd file registers, found by clattn's driver search,\n"
               "says where its library is and how to register it (CLATTN_NO_DRIVER_SEARCH=1 "
               "turns the search off).\n");
        return 0;
    }
    if (parsed) return parsed;
    if (args_has(&args, "verdicts") && merge_verdicts(args_get(&args, "verdicts")) != 0) return 1;
    size_t count = 0, chosen = 0, matched = 0;
    int failed = 0;
    clattn_status status = clattn_device_count(&count);
    if (status != CLATTN_SUCCESS || count == 0) return report_no_devices("devices", status);
    clattn_device_select(NULL, &chosen, 1, &matched);
    printf("%-3s %-5s %-4s %-44s %4s %10s %9s %10s %5s %9s %-4s %s\n", "#", "P:D", "type", "name",
           "CUs", "global", "local", "max alloc", "WG", "vec f/h", "fp16", "subgroups");
    for (size_t i = 0; i < count; i++) {
        clattn_device_info info;
        clattn_device_info_init(&info);
        if (clattn_device_get_info(i, &info) != CLATTN_SUCCESS) continue;
        print_device(&info, matched && chosen == i);
        print_tuned(&info);
        print_found_by_search(&info);
        if (args_has(&args, "variants") && print_variants(i) != 0) failed = 1;
    }
    print_drivers_without_devices();
    const char *without = clattn_device_discovery_summary(); /* platforms that offered none */
    if (*without) printf("without a device: %s\n", without);
    return failed;
}

int cli_select_devices(const char *command, const char *spec, size_t *indices, size_t capacity,
                       size_t *count) {
    size_t total = 0;
    clattn_status status = clattn_device_count(&total);
    if (status != CLATTN_SUCCESS || total == 0) return report_no_devices(command, status);
    const char *shown = spec && *spec ? spec : getenv("CLATTN_DEVICE");
    status = clattn_device_select(spec, indices, capacity, count);
    if (status != CLATTN_SUCCESS) { /* every text is a spec: this one names no device here */
        cli_error(command, "no device matches '%s' (%zu devices; see clattn devices)",
                  shown ? shown : "", total);
        return 1;
    }
    if (*count > capacity) *count = capacity;
    return 0;
}

int cli_open_context(const char *command, const char *spec, clattn_context **ctx) {
    size_t index = 0, count = 0;
    *ctx = NULL;
    int rc = cli_select_devices(command, spec, &index, 1, &count);
    if (rc != 0) return rc;
    clattn_status status = clattn_context_create(ctx, index);
    if (status != CLATTN_SUCCESS) {
        cli_error(command, "cannot open device %zu: %s (%s)", index, clattn_status_string(status),
                  clattn_status_name(status));
        return 1;
    }
    return 0;
}
