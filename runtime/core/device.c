/*
 * Device discovery and selection. Every platform the ICD loader reports and every device of
 * each is flattened into one list (platform order, then device order); a device's index in
 * that list is what clattn_context_create takes. Selection follows docs/semantics.md section 5.
 *
 * Discovery runs once per process, under a lock, and is kept: the platforms and devices do not
 * change while a process runs (POCL_DEVICES and the ICD files are read once by the drivers
 * anyway), and PoCL 3.1 crashes when two threads query its devices for the first time at once.
 */
#include "core.h"
#include "drivers.h"

#include <ctype.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>

/* Vendor queries for subgroup sizes (values from cl_ext.h, repeated for older headers). */
#define QUERY_SUB_GROUP_SIZES_INTEL 0x4108
#define QUERY_WARP_SIZE_NV          0x4003
#define QUERY_WAVEFRONT_WIDTH_AMD   0x4043
#define QUERY_MAX_NUM_SUB_GROUPS    0x105C

typedef struct device_list {
    size_t count;
    cl_platform_id platform[256];
    cl_device_id device[256];
    unsigned platform_index[256];
    unsigned device_index[256];
    size_t num_platforms, num_empty; /* platforms loaded; those of them with no device */
    cl_platform_id empty[32];
} device_list;

/* Whether the ICD loader has drivers to load: libraries in $OCL_ICD_FILENAMES, or .icd files in
 * $OCL_ICD_VENDORS (a folder, or one file) or else /etc/OpenCL/vendors. */
static int drivers_registered(void) {
    const char *files = getenv("OCL_ICD_FILENAMES"), *vendors = getenv("OCL_ICD_VENDORS");
    struct stat st;
    if (files && *files) return 1;
    const char *dir = vendors && *vendors ? vendors : "/etc/OpenCL/vendors";
    if (stat(dir, &st) != 0) return 0;
    if (!S_ISDIR(st.st_mode)) return S_ISREG(st.st_mode);
    DIR *d = opendir(dir);
    int found = 0;
    for (struct dirent *e; d && !found && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        found = len > 4 && strcmp(e->d_name + len - 4, ".icd") == 0;
    }
    if (d) closedir(d);
    return found;
}

/* Fills *list with every device of every platform. No platform registered is not an error (an
 * empty list); drivers registered of which none loads is CL_PLATFORM_NOT_FOUND_KHR, since the
 * loader cannot tell them apart (a driver that fails to load under a memory limit, or a broken
 * installation); other failures of the queries pass through. */
static clattn_status list_devices(device_list *list) {
    cl_platform_id platforms[32];
    cl_uint num_platforms = 0;
    list->count = list->num_platforms = list->num_empty = 0;
    drivers_prepare(); /* unregistered drivers, before the ICD loader's first use */
    cl_int err = clGetPlatformIDs(ARRAY_LEN(platforms), platforms, &num_platforms);
    if (err == CLATTN_CL_PLATFORM_NOT_FOUND_KHR || (err == CL_SUCCESS && num_platforms == 0))
        return drivers_registered() ? CLATTN_CL_PLATFORM_NOT_FOUND_KHR : CLATTN_SUCCESS;
    if (err != CL_SUCCESS) return (clattn_status)err;
    if (num_platforms > ARRAY_LEN(platforms)) num_platforms = ARRAY_LEN(platforms);
    list->num_platforms = num_platforms;
    for (cl_uint p = 0; p < num_platforms; p++) {
        cl_device_id devices[64];
        cl_uint num_devices = 0;
        err = clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, ARRAY_LEN(devices), devices,
                             &num_devices);
        if (err == CL_DEVICE_NOT_FOUND || (err == CL_SUCCESS && num_devices == 0)) {
            list->empty[list->num_empty++] = platforms[p]; /* loaded, but offers no device */
            continue;
        }
        if (err != CL_SUCCESS) return (clattn_status)err;
        if (num_devices > ARRAY_LEN(devices)) num_devices = ARRAY_LEN(devices);
        for (cl_uint d = 0; d < num_devices && list->count < ARRAY_LEN(list->device); d++) {
            list->platform[list->count] = platforms[p];
            list->device[list->count] = devices[d];
            list->platform_index[list->count] = p;
            list->device_index[list->count] = d;
            list->count++;
        }
    }
    return CLATTN_SUCCESS;
}

static void query_string(cl_device_id device, cl_device_info what, char *out, size_t size) {
    out[0] = '\0';
    if (clGetDeviceInfo(device, what, size, out, NULL) != CL_SUCCESS) out[0] = '\0';
    out[size - 1] = '\0';
}

static void query_platform_string(cl_platform_id platform, cl_platform_info what, char *out,
                                  size_t size) {
    out[0] = '\0';
    if (clGetPlatformInfo(platform, what, size, out, NULL) != CL_SUCCESS) out[0] = '\0';
    out[size - 1] = '\0';
}

/* Reads a scalar device property; leaves *out zeroed when the device does not know it. */
static void query_value(cl_device_id device, cl_device_info what, void *out, size_t size) {
    memset(out, 0, size);
    if (clGetDeviceInfo(device, what, size, out, NULL) != CL_SUCCESS) memset(out, 0, size);
}

static int has_extension(const char *extensions, const char *name) {
    size_t len = strlen(name);
    for (const char *at = strstr(extensions, name); at; at = strstr(at + 1, name)) {
        int starts = at == extensions || at[-1] == ' ';
        int ends = at[len] == '\0' || at[len] == ' ';
        if (starts && ends) return 1;
    }
    return 0;
}

/* Subgroup support and sizes: the standard query where present, else what vendors report. */
static void describe_subgroups(cl_device_id device, const char *extensions,
                               clattn_device_info *info) {
    cl_uint max_subgroups = 0;
    query_value(device, QUERY_MAX_NUM_SUB_GROUPS, &max_subgroups, sizeof max_subgroups);
    info->has_subgroups = max_subgroups > 0 || has_extension(extensions, "cl_khr_subgroups") ||
                          has_extension(extensions, "cl_intel_subgroups");
    size_t sizes[8] = {0};
    size_t bytes = 0;
    if (has_extension(extensions, "cl_intel_required_subgroup_size") &&
        clGetDeviceInfo(device, QUERY_SUB_GROUP_SIZES_INTEL, sizeof sizes, sizes, &bytes) ==
            CL_SUCCESS) {
        info->num_subgroup_sizes = (unsigned)(bytes / sizeof(size_t));
        if (info->num_subgroup_sizes > ARRAY_LEN(sizes)) info->num_subgroup_sizes = 8;
        memcpy(info->subgroup_sizes, sizes, info->num_subgroup_sizes * sizeof(size_t));
        return;
    }
    cl_uint width = 0;
    if (has_extension(extensions, "cl_nv_device_attribute_query"))
        query_value(device, QUERY_WARP_SIZE_NV, &width, sizeof width);
    else if (has_extension(extensions, "cl_amd_device_attribute_query"))
        query_value(device, QUERY_WAVEFRONT_WIDTH_AMD, &width, sizeof width);
    if (width > 0) {
        info->subgroup_sizes[0] = width;
        info->num_subgroup_sizes = 1;
    }
}

clattn_status device_describe(cl_platform_id platform, cl_device_id device,
                              clattn_device_info *info) {
    memset(info, 0, sizeof *info);
    info->struct_size = sizeof *info;
    info->platform = platform;
    info->device = device;
    query_string(device, CL_DEVICE_NAME, info->name, sizeof info->name);
    query_string(device, CL_DEVICE_VENDOR, info->vendor, sizeof info->vendor);
    query_string(device, CL_DRIVER_VERSION, info->driver_version, sizeof info->driver_version);
    query_string(device, CL_DEVICE_OPENCL_C_VERSION, info->opencl_c_version,
                 sizeof info->opencl_c_version);
    query_platform_string(platform, CL_PLATFORM_NAME, info->platform_name,
                          sizeof info->platform_name);
    query_platform_string(platform, CL_PLATFORM_VERSION, info->platform_version,
                          sizeof info->platform_version);
    query_value(device, CL_DEVICE_TYPE, &info->type, sizeof info->type);
    query_value(device, CL_DEVICE_MAX_COMPUTE_UNITS, &info->compute_units,
                sizeof info->compute_units);
    query_value(device, CL_DEVICE_GLOBAL_MEM_SIZE, &info->global_mem_bytes,
                sizeof info->global_mem_bytes);
    query_value(device, CL_DEVICE_LOCAL_MEM_SIZE, &info->local_mem_bytes,
                sizeof info->local_mem_bytes);
    query_value(device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, &info->max_alloc_bytes,
                sizeof info->max_alloc_bytes);
    query_value(device, CL_DEVICE_MAX_WORK_GROUP_SIZE, &info->max_work_group_size,
                sizeof info->max_work_group_size);
    query_value(device, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT, &info->preferred_vector_width_float,
                sizeof(cl_uint));
    query_value(device, CL_DEVICE_PREFERRED_VECTOR_WIDTH_HALF, &info->preferred_vector_width_half,
                sizeof(cl_uint));

    size_t ext_size = 0;
    if (clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS, 0, NULL, &ext_size) != CL_SUCCESS)
        ext_size = 0;
    char *extensions = calloc(ext_size + 1, 1);
    if (!extensions) return CLATTN_ERR_OUT_OF_MEMORY;
    if (ext_size > 0) clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS, ext_size, extensions, NULL);
    info->has_fp16 = has_extension(extensions, "cl_khr_fp16");
    info->has_fp64 = has_extension(extensions, "cl_khr_fp64");
    describe_subgroups(device, extensions, info);
    free(extensions);
    return CLATTN_SUCCESS;
}

/* ---------------------------------------------------------------- the process's discovery */

static pthread_mutex_t discovery_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int done;                 /* discovery succeeded; a failure is tried again next time */
    device_list list;         /* every device */
    clattn_device_info *info; /* [list.count] their descriptions */
    char summary[2048];       /* clattn_device_discovery_summary */
} discovered;

/* What discovery could not use, in one line: each platform that loaded but offered no device,
 * with its likely cause; or, when no platform loaded, what to install. "" otherwise. */
static void summarise(const device_list *list, char *out, size_t size) {
    size_t used = 0;
    out[0] = '\0';
    if (list->num_platforms == 0) {
        snprintf(out, size,
                 "no OpenCL platform: install an OpenCL driver (on Debian, apt-get install "
                 "pocl-opencl-icd for the CPU); driver search: %s",
                 clattn_driver_search_summary());
        return;
    }
    for (size_t p = 0; p < list->num_empty && used < size; p++) {
        char name[256], cause[1536];
        query_platform_string(list->empty[p], CL_PLATFORM_NAME, name, sizeof name);
        platform_no_device_cause(name, cause, sizeof cause);
        used += (size_t)snprintf(out + used, size - used,
                                 "%splatform '%s' loaded but offered no device: %s", p ? "; " : "",
                                 name, cause);
    }
}

/* Lists and describes every device, once. */
static clattn_status discover(void) {
    device_list *list = &discovered.list;
    clattn_status status = list_devices(list);
    clattn_device_info *info = NULL;
    if (status == CLATTN_SUCCESS && list->count > 0) {
        info = calloc(list->count, sizeof *info);
        if (!info) status = CLATTN_ERR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; status == CLATTN_SUCCESS && i < list->count; i++) {
        status = device_describe(list->platform[i], list->device[i], &info[i]);
        info[i].index = i;
        info[i].platform_index = list->platform_index[i];
        info[i].device_index = list->device_index[i];
    }
    if (status != CLATTN_SUCCESS) {
        free(info);
        list->count = 0;
        return status;
    }
    discovered.info = info;
    summarise(list, discovered.summary, sizeof discovered.summary);
    discovered.done = 1;
    return CLATTN_SUCCESS;
}

/* The process's devices: *list points at the kept discovery. */
static clattn_status devices(const device_list **list) {
    pthread_mutex_lock(&discovery_lock);
    clattn_status status = discovered.done ? CLATTN_SUCCESS : discover();
    pthread_mutex_unlock(&discovery_lock);
    *list = &discovered.list;
    return status;
}

void device_place(clattn_device_info *info) {
    const device_list *list = NULL;
    info->index = SIZE_MAX;
    if (devices(&list) != CLATTN_SUCCESS) return;
    for (size_t i = 0; i < list->count; i++)
        if (list->device[i] == info->device) {
            info->index = i;
            info->platform_index = list->platform_index[i];
            info->device_index = list->device_index[i];
            return;
        }
}

clattn_status clattn_device_count(size_t *count) {
    if (!count) return CLATTN_ERR_INVALID_ARGUMENT;
    const device_list *list = NULL;
    clattn_status status = devices(&list);
    *count = status == CLATTN_SUCCESS ? list->count : 0;
    return status;
}

const char *clattn_device_discovery_summary(void) {
    const device_list *list = NULL;
    return devices(&list) == CLATTN_SUCCESS ? discovered.summary : "";
}

clattn_status clattn_device_info_init_sized(clattn_device_info *info, size_t struct_size) {
    return struct_init_zeroed(info, struct_size, sizeof *info);
}

clattn_status clattn_device_get_info(size_t index, clattn_device_info *info) {
    if (!info || info->struct_size < sizeof *info) /* no field has been added since 0.2 */
        return CLATTN_ERR_INVALID_ARGUMENT;
    const device_list *list = NULL;
    clattn_status status = devices(&list);
    if (status != CLATTN_SUCCESS) return status;
    if (index >= list->count) return CLATTN_ERR_INVALID_ARGUMENT;
    struct_write(info, &discovered.info[index], sizeof *info, sizeof *info);
    return CLATTN_SUCCESS;
}

/* ---------------------------------------------------------------- selection */

static int is_number(const char *s) {
    if (!*s) return 0;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s)) return 0;
    return 1;
}

static int contains_nocase(const char *haystack, const char *needle) {
    size_t n = strlen(needle);
    for (; *haystack; haystack++) {
        size_t i = 0;
        while (i < n && haystack[i] &&
               tolower((unsigned char)haystack[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n) return 1;
    }
    return n == 0;
}

static int equals_nocase(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return 0;
    return *a == *b;
}

/* The kind of spec a string is, and its parsed parts. */
typedef enum { SPEC_DEFAULT, SPEC_INDEX, SPEC_PAIR, SPEC_TYPE, SPEC_NAME } spec_kind;
typedef struct device_spec {
    spec_kind kind;
    unsigned long index, platform, device;
    cl_device_type type;
    const char *name;
} device_spec;

/* "P:D": exactly two decimal integers around one colon. Anything else with a colon is a name
 * substring (AMD names such as "gfx90a:sramecc+:xnack-"). @return 1 when it is a pair. */
static int parse_platform_device(const char *text, device_spec *spec) {
    const char *colon = strchr(text, ':');
    char left[32];
    size_t len = colon ? (size_t)(colon - text) : 0;
    if (!colon || len == 0 || len >= sizeof left || !is_number(colon + 1)) return 0;
    memcpy(left, text, len);
    left[len] = '\0';
    if (!is_number(left)) return 0;
    spec->kind = SPEC_PAIR;
    spec->platform = strtoul(left, NULL, 10);
    spec->device = strtoul(colon + 1, NULL, 10);
    return 1;
}

/* Every text is a spec: one that is not an index, a pair or a type is a name substring. */
static void parse_spec(const char *text, device_spec *spec) {
    memset(spec, 0, sizeof *spec);
    static const struct {
        const char *word;
        cl_device_type type;
    } types[] = {{"gpu", CL_DEVICE_TYPE_GPU},
                 {"cpu", CL_DEVICE_TYPE_CPU},
                 {"accelerator", CL_DEVICE_TYPE_ACCELERATOR},
                 {"all", CL_DEVICE_TYPE_ALL}};
    if (!text || !*text || equals_nocase(text, "default")) return;
    if (is_number(text)) {
        spec->kind = SPEC_INDEX;
        spec->index = strtoul(text, NULL, 10);
        return;
    }
    if (parse_platform_device(text, spec)) return;
    for (size_t i = 0; i < ARRAY_LEN(types); i++) {
        if (equals_nocase(text, types[i].word)) {
            spec->kind = SPEC_TYPE;
            spec->type = types[i].type;
            return;
        }
    }
    spec->kind = SPEC_NAME;
    spec->name = text;
}

static int spec_matches(const device_spec *spec, const device_list *list, size_t i) {
    switch (spec->kind) {
    case SPEC_INDEX:
        return spec->index == i;
    case SPEC_PAIR:
        return spec->platform == list->platform_index[i] && spec->device == list->device_index[i];
    case SPEC_TYPE:
        return (discovered.info[i].type & spec->type) != 0;
    case SPEC_NAME:
        return contains_nocase(discovered.info[i].name, spec->name) ||
               contains_nocase(discovered.info[i].platform_name, spec->name);
    case SPEC_DEFAULT:
        break;
    }
    return 0;
}

/* Default: the first GPU, else the first device of any type. */
static size_t default_device(const device_list *list) {
    for (size_t i = 0; i < list->count; i++)
        if (discovered.info[i].type & CL_DEVICE_TYPE_GPU) return i;
    return 0;
}

clattn_status clattn_device_select(const char *spec_text, size_t *indices, size_t capacity,
                                   size_t *count) {
    if (!count || (capacity > 0 && !indices)) return CLATTN_ERR_INVALID_ARGUMENT;
    *count = 0;
    if (!spec_text || !*spec_text) spec_text = getenv("CLATTN_DEVICE");
    device_spec spec;
    parse_spec(spec_text, &spec);
    const device_list *list = NULL;
    clattn_status status = devices(&list);
    if (status != CLATTN_SUCCESS) return status;
    if (list->count == 0) return CLATTN_ERR_NO_DEVICE;
    if (spec.kind == SPEC_DEFAULT) {
        if (capacity > 0) indices[0] = default_device(list);
        *count = 1;
        return CLATTN_SUCCESS;
    }
    for (size_t i = 0; i < list->count; i++) {
        if (!spec_matches(&spec, list, i)) continue;
        if (*count < capacity) indices[*count] = i;
        (*count)++;
    }
    return *count > 0 ? CLATTN_SUCCESS : CLATTN_ERR_NO_DEVICE;
}
