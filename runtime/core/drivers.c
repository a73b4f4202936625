/*
 * The driver search. GPU machines and containers often hold a driver's OpenCL library without
 * the .icd file that registers it with the ICD loader. Before the loader's first use this file
 * looks for the drivers clattn knows (driver_kinds) in the dynamic linker's paths and in the
 * folders their packages use, skips those the loader registers already, checks that each
 * candidate loads and exports the ICD entry point, and hands the rest to the loader: a private
 * vendors folder holding the registered .icd files plus one per found driver, named by
 * $OCL_ICD_VENDORS while the loader initialises. (Debian 12's ocl-icd 2.3.1 does not read
 * $OCL_ICD_FILENAMES at all, and later loaders differ on whether it adds to the vendors folder
 * or replaces it; a folder in $OCL_ICD_VENDORS means the same to ocl-icd and Khronos' loader.)
 * The variable is restored and the folder removed as soon as the loader has read it. Found
 * libraries are only opened and looked up, never called: the loader does that.
 */
#define _GNU_SOURCE /* dlinfo and dladdr */

#include "drivers.h"
#include "core.h"

#include <dirent.h>
#include <dlfcn.h>
#include <glob.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STANDARD_VENDORS_DIR "/etc/OpenCL/vendors"
#define PATH_SIZE            1024
#define MAX_REGISTERED       64
#define FOUND_PREFIX         "clattn-found-"

/* A driver the search knows: the library its package installs, the .icd name its package
 * registers it under, and the folders (glob patterns) its packages put it in. */
typedef struct driver_kind {
    const char *vendor;
    const char *library;
    const char *icd_file;
    const char *folders[6];
} driver_kind;

static const driver_kind driver_kinds[] = {
    {"NVIDIA",
     "libnvidia-opencl.so.1",
     "nvidia.icd",
     {"/usr/local/nvidia/lib64", "/usr/local/nvidia/lib",
      "/usr/lib/x86_64-linux-gnu/nvidia/current", "/usr/lib64/nvidia", "/usr/lib/nvidia", NULL}},
    {"AMD",
     "libamdocl64.so",
     "amdocl64.icd",
     {"/opt/rocm/lib", "/opt/rocm-*/lib", "/opt/rocm/opencl/lib", "/opt/rocm/opencl/lib/x86_64",
      "/opt/amdgpu-pro/lib/x86_64-linux-gnu", NULL}},
    {"Intel",
     "libigdrcl.so",
     "intel.icd",
     {"/usr/lib/x86_64-linux-gnu/intel-opencl", "/usr/lib64/intel-opencl",
      "/usr/local/lib/intel-opencl", "/opt/intel/opencl", NULL}},
    {"PoCL", "libpocl.so.2", "pocl.icd", {NULL}},
};

/* The distributions' library folders, searched for every driver after its own: a container may
 * have a driver mounted in one that the dynamic linker's cache does not list. */
static const char *const common_folders[] = {"/usr/lib/x86_64-linux-gnu",
                                             "/lib/x86_64-linux-gnu",
                                             "/usr/lib64",
                                             "/lib64",
                                             "/usr/lib",
                                             "/lib",
                                             "/usr/local/lib",
                                             "/usr/local/lib64"};

/* What the loader registers already: the libraries named by the .icd files of its vendors
 * folder (icd_name set) and by $OCL_ICD_FILENAMES (icd_name ""). */
typedef struct registry {
    char dir[PATH_SIZE];
    size_t count;
    char icd_name[MAX_REGISTERED][256];
    char library[MAX_REGISTERED][PATH_SIZE];
    int loads[MAX_REGISTERED]; /* 0: an entry for a driver the search knows that does not open */
} registry;

typedef struct found_driver {
    const driver_kind *kind;
    char path[PATH_SIZE];
    dev_t dev; /* the file's identity, to recognise it in dladdr's answers */
    ino_t ino;
    unsigned num_platforms;
    cl_platform_id platforms[8];
} found_driver;

typedef enum { LOOKUP_NONE, LOOKUP_REGISTERED, LOOKUP_FOUND } lookup_result;

/* Written once, under search_once; read-only afterwards. */
static pthread_once_t search_once = PTHREAD_ONCE_INIT;
static found_driver found[ARRAY_LEN(driver_kinds)];
static size_t num_found;
static char summary[1024];

/* ---------------------------------------------------------------- what the loader registers */

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* The first line of a small text file, without its line end. @return 0, or 1 when unreadable
 * or empty. */
static int read_first_line(const char *path, char *out, size_t size) {
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    int ok = fgets(out, (int)size, f) != NULL;
    fclose(f);
    if (!ok) return 1;
    out[strcspn(out, "\r\n")] = '\0';
    return out[0] == '\0';
}

/* Whether file name `name` is `library` or a versioned file of it ("libpocl.so.2.10.0" for
 * "libpocl.so.2"). */
static int names_library(const char *name, const char *library) {
    size_t len = strlen(library);
    return strncmp(name, library, len) == 0 && (name[len] == '\0' || name[len] == '.');
}

/* Whether the loader can open an entry that names a driver the search knows (others are not its
 * business: 1). ocl-icd skips an entry that does not open without a word, so such an entry
 * registers nothing, and the search goes on to look for the driver (on an H100 machine an entry
 * for NVIDIA's library that the loader did not load kept the GPU out). The library is opened
 * lazily and kept open (the loader opens it next anyway). */
static int entry_loads(const char *library) {
    for (size_t k = 0; k < ARRAY_LEN(driver_kinds); k++) {
        if (!names_library(base_name(library), driver_kinds[k].library)) continue;
        dlerror();
        if (dlopen(library, RTLD_LAZY | RTLD_LOCAL)) return 1;
        const char *error = dlerror();
        log_msg("driver search: a registered %s does not load (%s); looking for it elsewhere",
                library, error ? error : "dlopen failed");
        return 0;
    }
    return 1;
}

static void registry_add(registry *reg, const char *icd_name, const char *library) {
    if (reg->count == MAX_REGISTERED || !*library) return;
    snprintf(reg->icd_name[reg->count], sizeof reg->icd_name[0], "%s", icd_name);
    snprintf(reg->library[reg->count], sizeof reg->library[0], "%s", library);
    reg->loads[reg->count] = entry_loads(library);
    reg->count++;
}

static void registry_read_folder(registry *reg) {
    DIR *dir = opendir(reg->dir);
    if (!dir) return; /* no vendors folder: nothing is registered */
    for (struct dirent *e = readdir(dir); e; e = readdir(dir)) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".icd") != 0) continue;
        char path[2 * PATH_SIZE], library[PATH_SIZE];
        snprintf(path, sizeof path, "%s/%s", reg->dir, e->d_name);
        if (read_first_line(path, library, sizeof library) == 0)
            registry_add(reg, e->d_name, library);
    }
    closedir(dir);
}

static void registry_read_filenames(registry *reg) {
    const char *list = getenv("OCL_ICD_FILENAMES");
    while (list && *list) {
        size_t len = strcspn(list, ":");
        char library[PATH_SIZE];
        snprintf(library, sizeof library, "%.*s", (int)len, list);
        registry_add(reg, "", library);
        list += len + (list[len] == ':');
    }
}

/* Finds the loader's vendors folder as ocl-icd does and reads what it registers.
 * @return 0, or 1 when $OCL_ICD_VENDORS names one ICD (an .icd file, or a library) rather than
 * a folder: that is a choice the search leaves alone. A path that does not exist counts as an
 * empty folder. */
static int registry_read(registry *reg) {
    const char *vendors = getenv("OCL_ICD_VENDORS");
    const char *vendor_path = getenv("OPENCL_VENDOR_PATH");
    memset(reg, 0, sizeof *reg);
    if (vendors && *vendors) {
        struct stat st;
        int exists = stat(vendors, &st) == 0;
        size_t len = strlen(vendors);
        int names_icd = len >= 4 && strcmp(vendors + len - 4, ".icd") == 0;
        if ((exists && !S_ISDIR(st.st_mode)) || (!exists && (names_icd || !strchr(vendors, '/'))))
            return 1;
        snprintf(reg->dir, sizeof reg->dir, "%s", vendors);
    } else {
        snprintf(reg->dir, sizeof reg->dir, "%s",
                 vendor_path && *vendor_path ? vendor_path : STANDARD_VENDORS_DIR);
    }
    registry_read_folder(reg);
    registry_read_filenames(reg);
    return 0;
}

/* Whether an entry of the loader that opens names a library called `library` (a file name), so
 * that the search need not look for it. */
static int registry_names(const registry *reg, const char *library) {
    for (size_t i = 0; i < reg->count; i++)
        if (reg->loads[i] && names_library(base_name(reg->library[i]), library)) return 1;
    return 0;
}

/* Whether the loader registers the file at `path` already: an entry naming it, its target or
 * the same file in its folder (two copies of one driver in a process do not go well). */
static int registry_holds(const registry *reg, const char *path) {
    char real[PATH_MAX], sibling[2 * PATH_SIZE];
    const char *real_name = realpath(path, real) ? base_name(real) : base_name(path);
    for (size_t i = 0; i < reg->count; i++) {
        const char *entry = reg->library[i];
        if (!reg->loads[i]) continue;
        if (names_library(base_name(entry), base_name(path)) ||
            names_library(base_name(entry), real_name))
            return 1;
        if (strchr(entry, '/')) {
            if (same_file(entry, path)) return 1;
        } else {
            snprintf(sibling, sizeof sibling, "%.*s%s", (int)(base_name(path) - path), path, entry);
            if (same_file(sibling, path)) return 1;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- looking for drivers */

/* Opens a candidate with every symbol bound now, so that a broken library fails here rather
 * than later, and checks that it exports the entry point ICD loaders use
 * (clGetExtensionFunctionAddress; PoCL exports clIcdGetPlatformIDsKHR only through it).
 * @return the handle, kept open for the loader, or NULL with the reason in `why`. */
static void *probe_library(const char *name, char *why, size_t why_size) {
    dlerror();
    void *handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *error = dlerror();
        snprintf(why, why_size, "%s", error ? error : "dlopen failed");
        return NULL;
    }
    if (!dlsym(handle, "clGetExtensionFunctionAddress")) {
        snprintf(why, why_size, "exports no clGetExtensionFunctionAddress: not an OpenCL driver");
        dlclose(handle);
        return NULL;
    }
    return handle;
}

static lookup_result accept_driver(const driver_kind *kind, const char *path, const registry *reg,
                                   found_driver *out) {
    struct stat st;
    if (registry_holds(reg, path)) {
        log_msg("driver search: %s is registered already", path);
        return LOOKUP_REGISTERED;
    }
    if (stat(path, &st) != 0) return LOOKUP_NONE;
    memset(out, 0, sizeof *out);
    out->kind = kind;
    snprintf(out->path, sizeof out->path, "%s", path);
    out->dev = st.st_dev;
    out->ino = st.st_ino;
    log_msg("driver search: found %s's %s, not registered with the ICD loader", kind->vendor, path);
    return LOOKUP_FOUND;
}

/* Where the dynamic linker finds the library ($LD_LIBRARY_PATH, ld.so.cache, /lib, /usr/lib). */
static lookup_result lookup_with_linker(const driver_kind *kind, const registry *reg,
                                        found_driver *out) {
    char why[512];
    void *handle = probe_library(kind->library, why, sizeof why);
    if (!handle) {
        log_msg("driver search: %s not usable from the linker's paths: %s", kind->library, why);
        return LOOKUP_NONE;
    }
    struct link_map *map = NULL;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || !map || !map->l_name || !map->l_name[0])
        return LOOKUP_NONE;
    return accept_driver(kind, map->l_name, reg, out);
}

/* The first usable library matching root + folder pattern + "/" + library. */
static lookup_result lookup_in_folder(const char *root, const char *folder, const driver_kind *kind,
                                      const registry *reg, found_driver *out) {
    char pattern[2 * PATH_SIZE];
    snprintf(pattern, sizeof pattern, "%s%s/%s", root, folder, kind->library);
    glob_t paths;
    if (glob(pattern, 0, NULL, &paths) != 0) return LOOKUP_NONE; /* nothing there */
    lookup_result result = LOOKUP_NONE;
    for (size_t i = 0; i < paths.gl_pathc && result == LOOKUP_NONE; i++) {
        char why[512];
        if (registry_holds(reg, paths.gl_pathv[i])) {
            result = LOOKUP_REGISTERED;
        } else if (probe_library(paths.gl_pathv[i], why, sizeof why)) {
            result = accept_driver(kind, paths.gl_pathv[i], reg, out);
        } else {
            log_msg("driver search: skipping %s: %s", paths.gl_pathv[i], why);
        }
    }
    globfree(&paths);
    return result;
}

/* Test builds may move the folders under a root and leave the linker out
 * ($CLATTN_TEST_DRIVER_ROOT), so that a test can stand in for a GPU machine's layout. */
static const char *test_root(void) {
#ifdef CLATTN_TEST_HOOKS
    const char *root = getenv("CLATTN_TEST_DRIVER_ROOT");
    if (root && *root) return root;
#endif
    return NULL;
}

static lookup_result lookup_driver(const driver_kind *kind, const registry *reg,
                                   found_driver *out) {
    if (registry_names(reg, kind->library)) return LOOKUP_REGISTERED;
    const char *root = test_root();
    lookup_result result = root ? LOOKUP_NONE : lookup_with_linker(kind, reg, out);
    for (size_t i = 0; result == LOOKUP_NONE && kind->folders[i]; i++)
        result = lookup_in_folder(root ? root : "", kind->folders[i], kind, reg, out);
    for (size_t i = 0; result == LOOKUP_NONE && i < ARRAY_LEN(common_folders); i++)
        result = lookup_in_folder(root ? root : "", common_folders[i], kind, reg, out);
    return result;
}

/* ---------------------------------------------------------------- handing them to the loader */

static int write_icd(const char *dir, const char *name, const char *library) {
    char path[2 * PATH_SIZE];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return 1;
    int failed = fprintf(f, "%s\n", library) < 0;
    failed |= fclose(f) != 0;
    return failed;
}

static void remove_folder(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        for (struct dirent *e = readdir(d); e; e = readdir(d)) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            char path[2 * PATH_SIZE];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

/* Makes the private vendors folder: a copy of every registered .icd file and one per found
 * driver. @return 0 with its path in `dir`, or 1 with the reason in `why`. */
static int make_vendors_folder(const registry *reg, char *dir, size_t size, char *why,
                               size_t why_size) {
    const char *tmp = getenv("TMPDIR");
    const char *bases[] = {tmp && *tmp ? tmp : "/tmp", "/tmp", "/dev/shm"};
    int made = 0;
    for (size_t i = 0; i < ARRAY_LEN(bases) && !made; i++) {
        snprintf(dir, size, "%s/clattn-icd-XXXXXX", bases[i]);
        made = mkdtemp(dir) != NULL;
    }
    if (!made) {
        snprintf(why, why_size, "cannot create a folder in $TMPDIR, /tmp or /dev/shm");
        return 1;
    }
    int failed = 0;
    for (size_t i = 0; i < reg->count; i++)
        if (reg->icd_name[i][0]) failed |= write_icd(dir, reg->icd_name[i], reg->library[i]);
    for (size_t i = 0; i < num_found; i++) {
        char name[128];
        snprintf(name, sizeof name, FOUND_PREFIX "%s", found[i].kind->icd_file);
        failed |= write_icd(dir, name, found[i].path);
    }
    if (failed) {
        snprintf(why, why_size, "cannot write .icd files in %s", dir);
        remove_folder(dir);
        return 1;
    }
    return 0;
}

/* Points $OCL_ICD_VENDORS at `dir` while the loader initialises (its first call reads the
 * vendors folder, once per process), then restores the variable as it was.
 * @return 0, or 1 when the variable could not be set or restored. */
static int init_loader_from(const char *dir) {
    const char *old = getenv("OCL_ICD_VENDORS");
    char *saved = old ? strdup(old) : NULL;
    char value[PATH_SIZE + 2];
    snprintf(value, sizeof value, "%s/", dir); /* older Khronos loaders want the slash */
    if ((old && !saved) || setenv("OCL_ICD_VENDORS", value, 1) != 0) {
        free(saved);
        return 1;
    }
    cl_uint platforms = 0;
    cl_int err = clGetPlatformIDs(0, NULL, &platforms);
    log_msg("driver search: the ICD loader read %s: %u platforms (%d)", value, platforms, (int)err);
    int failed = saved ? setenv("OCL_ICD_VENDORS", saved, 1) : unsetenv("OCL_ICD_VENDORS");
    free(saved);
    return failed != 0;
}

/* The found driver a platform comes from: the library holding the platform object, its
 * dispatch table or the table's first function (cl_khr_icd: an ICD object starts with a
 * pointer to its dispatch table). NULL when it comes from elsewhere. */
static found_driver *driver_of_platform(cl_platform_id platform) {
    void *const *dispatch = *(void *const *const *)platform;
    const void *addresses[3] = {platform, dispatch, dispatch ? dispatch[0] : NULL};
    for (size_t a = 0; a < ARRAY_LEN(addresses); a++) {
        Dl_info info;
        struct stat st;
        if (!addresses[a] || !dladdr(addresses[a], &info) || !info.dli_fname) continue;
        if (stat(info.dli_fname, &st) != 0) continue;
        for (size_t i = 0; i < num_found; i++)
            if (found[i].dev == st.st_dev && found[i].ino == st.st_ino) return &found[i];
    }
    return NULL;
}

static void map_platforms(void) {
    cl_platform_id platforms[32];
    cl_uint count = 0;
    if (clGetPlatformIDs(ARRAY_LEN(platforms), platforms, &count) != CL_SUCCESS) return;
    if (count > ARRAY_LEN(platforms)) count = ARRAY_LEN(platforms);
    for (cl_uint p = 0; p < count; p++) {
        found_driver *driver = driver_of_platform(platforms[p]);
        if (driver && driver->num_platforms < ARRAY_LEN(driver->platforms))
            driver->platforms[driver->num_platforms++] = platforms[p];
    }
}

/* ---------------------------------------------------------------- the search */

static int search_disabled(void) {
    const char *v = getenv("CLATTN_NO_DRIVER_SEARCH");
    return v && *v && strcmp(v, "0") != 0;
}

static void hand_to_loader(const registry *reg) {
    char dir[PATH_SIZE], why[PATH_SIZE + 64];
    const char *plural = num_found == 1 ? "" : "s";
    if (make_vendors_folder(reg, dir, sizeof dir, why, sizeof why) != 0) {
        num_found = 0;
        snprintf(summary, sizeof summary,
                 "found drivers that %s does not register but could not hand them to the ICD "
                 "loader: %s",
                 reg->dir, why);
        return;
    }
    int failed = init_loader_from(dir);
    remove_folder(dir);
    map_platforms();
    snprintf(summary, sizeof summary, "found %zu driver%s that %s does not register%s", num_found,
             plural, reg->dir,
             failed ? " (but could not set $OCL_ICD_VENDORS for the ICD loader)"
                    : ", handed to the ICD loader");
}

static void search(void) {
    static registry reg; /* large; used only here, once */
    if (search_disabled()) {
        snprintf(summary, sizeof summary, "off (CLATTN_NO_DRIVER_SEARCH is set)");
        return;
    }
    if (registry_read(&reg) != 0) {
        snprintf(summary, sizeof summary,
                 "skipped: OCL_ICD_VENDORS=%s names one ICD, which the loader loads alone",
                 getenv("OCL_ICD_VENDORS"));
        return;
    }
    for (size_t k = 0; k < ARRAY_LEN(driver_kinds); k++)
        if (lookup_driver(&driver_kinds[k], &reg, &found[num_found]) == LOOKUP_FOUND) num_found++;
    if (num_found == 0) {
        snprintf(summary, sizeof summary,
                 "looked for NVIDIA, AMD, Intel and PoCL drivers that %s does not register, "
                 "and found none",
                 reg.dir);
        return;
    }
    hand_to_loader(&reg);
}

void drivers_prepare(void) {
    pthread_once(&search_once, search);
}

/* ---------------------------------------------------------------- public */

clattn_status clattn_driver_info_init_sized(clattn_driver_info *info, size_t struct_size) {
    return struct_init_zeroed(info, struct_size, sizeof *info);
}

clattn_status clattn_driver_count(size_t *count) {
    if (!count) return CLATTN_ERR_INVALID_ARGUMENT;
    drivers_prepare();
    *count = num_found;
    return CLATTN_SUCCESS;
}

clattn_status clattn_driver_get_info(size_t index, clattn_driver_info *info) {
    if (!info || info->struct_size < sizeof *info) /* the first layout */
        return CLATTN_ERR_INVALID_ARGUMENT;
    drivers_prepare();
    if (index >= num_found) return CLATTN_ERR_INVALID_ARGUMENT;
    const found_driver *d = &found[index];
    clattn_driver_info local;
    memset(&local, 0, sizeof local);
    local.struct_size = sizeof local;
    snprintf(local.vendor, sizeof local.vendor, "%s", d->kind->vendor);
    snprintf(local.library, sizeof local.library, "%s", d->path);
    snprintf(local.icd_file, sizeof local.icd_file, "%s", d->kind->icd_file);
    local.num_platforms = d->num_platforms;
    memcpy(local.platforms, d->platforms, sizeof local.platforms);
    struct_write(info, &local, sizeof local, sizeof local);
    return CLATTN_SUCCESS;
}

const char *clattn_driver_search_summary(void) {
    drivers_prepare();
    return summary;
}
