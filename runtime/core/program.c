/*
 * Building OpenCL programs and caching them: in memory per context, and on disk across
 * processes. A program is the concatenation of some files of cl/ (embedded in the library, or
 * read from $CLATTN_KERNEL_DIR while developing) built with options that follow the device.
 *
 * Disk cache entries live in $CLATTN_CACHE_DIR, else $XDG_CACHE_HOME/clattn, else
 * ~/.cache/clattn ("off" disables it), in the format of cache_entry.h,
 * where the key spells out everything the binary depends on (library version, source hash,
 * options, device, driver and platform version) and the checksum (FNV-1a 64) covers key and
 * binary. An entry that is short, damaged or made for another key is ignored and rewritten.
 * Writes go to a temporary file that is renamed into place; the temporaries of processes killed
 * while writing are removed at the folder's first use by a later process. A hit marks the
 * entry used, and a write trims the folder to its limit (cache_folder.c).
 */
#include "cache_entry.h"
#include "core.h"
#include "embedded.h"
#include "fnv1a.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_KERNELS_PER_PROGRAM 8

struct program_entry {
    struct program_entry *next;
    char *key; /* files and options: identifies the program within the context */
    cl_program program;
    const char *kernel_names[MAX_KERNELS_PER_PROGRAM];
    cl_kernel kernels[MAX_KERNELS_PER_PROGRAM];
    size_t num_kernels;
};

/* ---------------------------------------------------------------- small helpers */

/* Bounds on what is read whole: a kernel source, a cache entry (a device binary). */
#define MAX_SOURCE_BYTES ((size_t)64 << 20)
#define MAX_ENTRY_BYTES  ((size_t)1 << 30)

static const struct embedded_kernel *embedded(const char *file) {
    for (const struct embedded_kernel *k = clattn_embedded_kernels; k->name; k++)
        if (strcmp(k->name, file) == 0) return k;
    return NULL;
}

/* The text of one source: from $CLATTN_KERNEL_DIR when that is set and holds it (a file of
 * cl/ must be there; one the build generates may be, and is embedded otherwise), else the
 * embedded copy. */
static clattn_status kernel_source(clattn_context *ctx, const char *file, char **text) {
    *text = NULL;
    const struct embedded_kernel *k = embedded(file);
    const char *dir = getenv("CLATTN_KERNEL_DIR");
    if (dir && *dir) {
        char path[4096];
        size_t size = 0;
        snprintf(path, sizeof path, "%s/%s", dir, file);
        *text = read_regular_file(path, MAX_SOURCE_BYTES, 1, &size);
        if (*text) return CLATTN_SUCCESS;
        if (!k || !k->generated || errno != ENOENT)
            return ctx_error(ctx, CLATTN_ERR_IO, "CLATTN_KERNEL_DIR: cannot read %s: %s", path,
                             strerror(errno));
    }
    if (!k) return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT, "no embedded kernel file %s", file);
    *text = malloc(k->size + 1);
    if (!*text) return CLATTN_ERR_OUT_OF_MEMORY;
    memcpy(*text, k->source, k->size + 1);
    return CLATTN_SUCCESS;
}

static uint64_t embedded_hash;
static void hash_embedded(void) {
    uint64_t hash = FNV1A_SEED;
    for (const struct embedded_kernel *k = clattn_embedded_kernels; k->name; k++) {
        hash = fnv1a(hash, k->name, strlen(k->name) + 1);
        hash = fnv1a(hash, k->source, k->size);
    }
    embedded_hash = hash;
}

/* FNV-1a over the names, sizes, modification times and inodes of the files of
 * $CLATTN_KERNEL_DIR that stand for embedded sources: while it holds, so does their hash. */
static uint64_t kernel_dir_stamp(const char *dir) {
    uint64_t stamp = fnv1a(FNV1A_SEED, dir, strlen(dir) + 1);
    for (const struct embedded_kernel *k = clattn_embedded_kernels; k->name; k++) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, k->name);
        if (stat(path, &st) != 0) continue;
        const int64_t fields[4] = {st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec, st.st_ino};
        stamp = fnv1a(fnv1a(stamp, k->name, strlen(k->name) + 1), fields, sizeof fields);
    }
    return stamp;
}

static uint64_t kernel_dir_hash(const char *dir) {
    uint64_t hash = FNV1A_SEED;
    for (const struct embedded_kernel *k = clattn_embedded_kernels; k->name; k++) {
        char path[4096], *text = NULL;
        size_t size = 0;
        snprintf(path, sizeof path, "%s/%s", dir, k->name);
        text = read_regular_file(path, MAX_SOURCE_BYTES, 1, &size);
        hash = fnv1a(hash, k->name, strlen(k->name) + 1);
        hash = text ? fnv1a(hash, text, size) : fnv1a(hash, k->source, k->size);
        free(text);
    }
    return hash;
}

uint64_t kernel_sources_hash(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static uint64_t dir_stamp, dir_hash; /* the last folder's, read again when its stamp moves */
    static int dir_hashed;
    const char *dir = getenv("CLATTN_KERNEL_DIR");
    if (!dir || !*dir) { /* the embedded sources (the same hash as below), once a process */
        pthread_once(&once, hash_embedded);
        return embedded_hash;
    }
    /* every call asks (verdicts are looked up per call): reading the files each time cost a
       call on this CPU about 2 ms */
    const uint64_t stamp = kernel_dir_stamp(dir);
    pthread_mutex_lock(&lock);
    if (!dir_hashed || stamp != dir_stamp) dir_hash = kernel_dir_hash(dir);
    dir_stamp = stamp, dir_hashed = 1;
    const uint64_t hash = dir_hash;
    pthread_mutex_unlock(&lock);
    return hash;
}

/* Concatenates the sources of `files`, each starting on a new line. */
static clattn_status program_source(clattn_context *ctx, const char *const *files, size_t n,
                                    char **out) {
    *out = NULL;
    size_t total = 1;
    char *parts[8] = {0};
    clattn_status status = CLATTN_SUCCESS;
    if (n > ARRAY_LEN(parts)) return CLATTN_ERR_INVALID_ARGUMENT;
    for (size_t i = 0; i < n && status == CLATTN_SUCCESS; i++) {
        status = kernel_source(ctx, files[i], &parts[i]);
        if (status == CLATTN_SUCCESS) total += strlen(parts[i]) + 1;
    }
    if (status == CLATTN_SUCCESS) {
        *out = malloc(total);
        if (!*out) status = CLATTN_ERR_OUT_OF_MEMORY;
    }
    if (status == CLATTN_SUCCESS) {
        (*out)[0] = '\0';
        for (size_t i = 0; i < n; i++) {
            strcat(*out, parts[i]);
            strcat(*out, "\n");
        }
    }
    for (size_t i = 0; i < n; i++) free(parts[i]);
    return status;
}

/* "-cl-std=CLx.y" from the device's "OpenCL C x.y ..." string, then the defines. */
static void build_options(const clattn_device_info *device, const char *defines, char *out,
                          size_t size) {
    int major = 0, minor = 0;
    out[0] = '\0';
    if (sscanf(device->opencl_c_version, "OpenCL C %d.%d", &major, &minor) == 2 && major >= 1)
        snprintf(out, size, "-cl-std=CL%d.%d ", major, minor);
    size_t used = strlen(out);
    snprintf(out + used, size - used, "%s", defines ? defines : "");
}

/* ---------------------------------------------------------------- disk cache */

/* A folder name that does not fit is no folder: cut short, it would name another one. */
static const char *whole_or_off(int written, char *buf, size_t size, const char *from) {
    if (written >= 0 && (size_t)written < size) return buf;
    log_msg("the kernel cache is off: the folder named by %s is %d bytes long, past %zu", from,
            written, size - 1);
    return NULL;
}

const char *program_cache_dir(char *buf, size_t size) {
    const char *dir = getenv("CLATTN_CACHE_DIR");
    if (dir && strcmp(dir, "off") == 0) return NULL;
    if (dir && *dir)
        return whole_or_off(snprintf(buf, size, "%s", dir), buf, size, "CLATTN_CACHE_DIR");
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    if (xdg && *xdg)
        return whole_or_off(snprintf(buf, size, "%s/clattn", xdg), buf, size, "XDG_CACHE_HOME");
    if (home && *home)
        return whole_or_off(snprintf(buf, size, "%s/.cache/clattn", home), buf, size, "HOME");
    return NULL;
}

clattn_status program_cache_path(const char *name, char *path, size_t size) {
    char dir[4096], buf[4200];
    if (!path || size == 0) return CLATTN_ERR_INVALID_ARGUMENT;
    if (!program_cache_dir(dir, sizeof dir)) return CLATTN_ERR_UNSUPPORTED;
    if (name)
        snprintf(buf, sizeof buf, "%s/%s", dir, name);
    else
        snprintf(buf, sizeof buf, "%s", dir);
    if (strlen(buf) >= size) return CLATTN_ERR_INVALID_ARGUMENT;
    memcpy(path, buf, strlen(buf) + 1);
    return CLATTN_SUCCESS;
}

/* The files of the cache folder: kernel binaries (16 hex digits, ".clbin", cache_entry_init),
 * tuning.json (plan/tuning.c) and verdicts.json (plan/verdicts.c). */
static int is_cache_file(const char *name, size_t len) {
    if (len == 11 && strncmp(name, "tuning.json", 11) == 0) return 1;
    if (len == 13 && strncmp(name, "verdicts.json", 13) == 0) return 1;
    return cache_entry_name(name, len);
}

/* Once per folder and process, at its first use: the temporaries that killed processes left
 * there (a build whose binary was being written, a `clattn tune` saving tuning.json). */
static void sweep_cache_dir(const char *dir) {
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static char swept[4096];
    pthread_mutex_lock(&lock);
    if (strcmp(swept, dir) != 0) {
        size_t removed = remove_stale_temporaries(dir, is_cache_file);
        if (removed) log_msg("removed %zu temporaries of dead processes from %s", removed, dir);
        snprintf(swept, sizeof swept, "%s", dir);
    }
    pthread_mutex_unlock(&lock);
}

const char *program_cache_trusted_dir(char *buf, size_t size, int create) {
    static atomic_int warned;
    char why[512];
    if (!program_cache_dir(buf, size)) return NULL;
    if (create && make_private_dirs(buf) != 0) {
        log_msg("cache folder %s cannot be created (%s); not caching", buf, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (!create && stat(buf, &st) != 0 && errno == ENOENT) return NULL; /* nothing cached yet */
    if (folder_is_private(buf, why, sizeof why, buf, size)) {
        sweep_cache_dir(buf);
        return buf;
    }
    log_msg("not using the cache folder %s: %s", buf, why);
    if (!atomic_exchange(&warned, 1)) /* said once: a cache that never warms up, with the cause */
        fprintf(stderr,
                "clattn: not using the cache folder %s: %s; compiled kernels and tuning.json "
                "there could be another user's (CLATTN_CACHE_DIR names another folder, or off)\n",
                buf, why);
    return NULL;
}

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

typedef struct cache_entry {
    char path[4200];
    char *key;
    size_t key_len;
} cache_entry;

/* Describes the entry for a program: its file path and the key text it must hold. */
static clattn_status cache_entry_init(clattn_context *ctx, const char *source, const char *options,
                                      cache_entry *entry) {
    char dir[4096];
    entry->key = NULL;
    if (!program_cache_dir(dir, sizeof dir)) return CLATTN_ERR_UNSUPPORTED;
    const clattn_device_info *d = &ctx->device;
    size_t cap = strlen(options) + strlen(d->name) + strlen(d->driver_version) +
                 strlen(d->platform_version) + strlen(d->platform_name) + 256;
    entry->key = malloc(cap);
    if (!entry->key) return CLATTN_ERR_OUT_OF_MEMORY;
    snprintf(entry->key, cap,
             "clattn %s\nsource-fnv64 %016llx\noptions %s\ndevice %s\ndriver %s\nplatform %s %s\n",
             CLATTN_VERSION_STRING, (unsigned long long)fnv1a(FNV1A_SEED, source, strlen(source)),
             options, d->name, d->driver_version, d->platform_name, d->platform_version);
    entry->key_len = strlen(entry->key);
    snprintf(entry->path, sizeof entry->path, "%s/%016llx.clbin", dir,
             (unsigned long long)fnv1a(FNV1A_SEED, entry->key, entry->key_len));
    return CLATTN_SUCCESS;
}

/* The entry's file in `dir` (the trusted folder's real path; NULL: none) into path[4200].
 * @return path, or NULL. */
static const char *entry_path_in(const cache_entry *entry, const char *dir, char *path) {
    const char *name = strrchr(entry->path, '/');
    if (!dir || !name) return NULL;
    snprintf(path, 4200, "%s%s", dir, name);
    return path;
}

/* Returns the binary stored for the entry, or NULL (missing, damaged, foreign, not a regular
 * file, or in a folder others could have written). The key stored in the entry must be this
 * program's key, byte for byte: an entry renamed or copied from another program is a miss. */
static unsigned char *cache_read(const cache_entry *entry, size_t *binary_size) {
    size_t size = 0;
    char dir[4096], path[4200];
    if (!entry_path_in(entry, program_cache_trusted_dir(dir, sizeof dir, 0), path)) return NULL;
    unsigned char *data = (unsigned char *)read_regular_file(path, MAX_ENTRY_BYTES, 0, &size);
    if (!data) {
        if (errno != ENOENT) log_msg("cache entry %s ignored (%s)", path, strerror(errno));
        return NULL;
    }
    const char *why = NULL;
    uint64_t key_len = 0, bin_len = 0;
    if (size < CACHE_HEADER_BYTES || memcmp(data, CACHE_MAGIC, 8) != 0)
        why = "bad magic";
    else if (get_u32(data + 8) != CACHE_FORMAT)
        why = "other format version";
    else {
        key_len = get_u32(data + 12);
        bin_len = get_u64(data + 16);
        if (key_len > size || bin_len > size || CACHE_HEADER_BYTES + key_len + bin_len != size)
            why = "truncated or oversized";
        else if (key_len != entry->key_len ||
                 memcmp(data + CACHE_HEADER_BYTES, entry->key, key_len) != 0)
            why = "made for another key";
        else if (fnv1a(FNV1A_SEED, data + CACHE_HEADER_BYTES, key_len + bin_len) !=
                 get_u64(data + 24))
            why = "checksum mismatch";
    }
    if (why) {
        log_msg("cache entry %s ignored (%s); rebuilding", path, why);
        free(data);
        return NULL;
    }
    memmove(data, data + CACHE_HEADER_BYTES + key_len, bin_len);
    *binary_size = bin_len;
    cache_entry_touch(path);
    return data;
}

/* Writes header, key and binary as one file, atomically (file.c). */
static void cache_write(const cache_entry *entry, const unsigned char *binary, size_t size) {
    char dir[4096], path[4200];
    if (!entry_path_in(entry, program_cache_trusted_dir(dir, sizeof dir, 1), path)) return;
    size_t total = CACHE_HEADER_BYTES + entry->key_len + size;
    unsigned char *file = malloc(total);
    if (!file) return;
    memcpy(file, CACHE_MAGIC, 8);
    put_u32(file + 8, CACHE_FORMAT);
    put_u32(file + 12, (uint32_t)entry->key_len);
    put_u64(file + 16, size);
    put_u64(file + 24, fnv1a(fnv1a(FNV1A_SEED, entry->key, entry->key_len), binary, size));
    memcpy(file + CACHE_HEADER_BYTES, entry->key, entry->key_len);
    memcpy(file + CACHE_HEADER_BYTES + entry->key_len, binary, size);
    int err = write_file_atomic(path, file, total);
    free(file);
    if (err) {
        log_msg("cannot write cache entry %s: %s", path, strerror(err));
        return;
    }
    log_msg("cached %s (%zu bytes)", path, size);
    size_t removed = 0;
    err = cache_trim(dir, cache_limit_bytes(), &removed);
    if (err) log_msg("cannot trim the cache folder %s: %s", dir, strerror(err));
}

/* ---------------------------------------------------------------- building */

static void keep_build_log(clattn_context *ctx, cl_program program) {
    size_t size = 0;
    free(ctx->build_log);
    ctx->build_log = NULL;
    if (clGetProgramBuildInfo(program, ctx->device.device, CL_PROGRAM_BUILD_LOG, 0, NULL, &size) !=
        CL_SUCCESS)
        return;
    ctx->build_log = calloc(size + 1, 1);
    if (ctx->build_log)
        clGetProgramBuildInfo(program, ctx->device.device, CL_PROGRAM_BUILD_LOG, size,
                              ctx->build_log, NULL);
}

/* A test hook, compiled into test builds only (CLATTN_TEST_HOOKS): $CLATTN_TEST_FAIL_BUILD=<file>
 * makes every build using that file fail. */
static int simulated_failure(const char *const *files, size_t n) {
#ifdef CLATTN_TEST_HOOKS
    const char *fail = getenv("CLATTN_TEST_FAIL_BUILD");
    for (size_t i = 0; fail && *fail && i < n; i++)
        if (strcmp(files[i], fail) == 0) return 1;
#endif
    return 0;
}

static clattn_status build_from_source(clattn_context *ctx, const char *source, const char *options,
                                       const char *label, cl_program *out) {
    cl_int err = CL_SUCCESS;
    double t0 = seconds_now();
    *out = clCreateProgramWithSource(ctx->cl_ctx, 1, &source, NULL, &err);
    if (err != CL_SUCCESS) return ctx_cl_error(ctx, err, "creating program");
    err = clBuildProgram(*out, 1, &ctx->device.device, options, NULL, NULL);
    if (err != CL_SUCCESS) {
        keep_build_log(ctx, *out);
        clReleaseProgram(*out);
        *out = NULL;
        /* Out of memory or resources is not the kernel's fault: passed through as such. */
        int kernel_fault = err == CL_BUILD_PROGRAM_FAILURE || err == CL_INVALID_BUILD_OPTIONS ||
                           err == CL_COMPILER_NOT_AVAILABLE;
        return ctx_error(ctx, kernel_fault ? CLATTN_ERR_BUILD : (clattn_status)err,
                         "building %s [%s] failed: %s (%d); see the build log", label, options,
                         clattn_status_name((clattn_status)err), (int)err);
    }
    log_msg("built %s [%s] in %.2f s", label, options, seconds_now() - t0);
    return CLATTN_SUCCESS;
}

static cl_program build_from_binary(clattn_context *ctx, const unsigned char *binary, size_t size,
                                    const char *options) {
    cl_int err = CL_SUCCESS, binary_status = CL_SUCCESS;
    cl_program program = clCreateProgramWithBinary(ctx->cl_ctx, 1, &ctx->device.device, &size,
                                                   &binary, &binary_status, &err);
    if (err != CL_SUCCESS || binary_status != CL_SUCCESS) {
        if (program) clReleaseProgram(program);
        return NULL;
    }
    if (clBuildProgram(program, 1, &ctx->device.device, options, NULL, NULL) != CL_SUCCESS) {
        clReleaseProgram(program);
        return NULL;
    }
    return program;
}

static void store_binary(cl_program program, const cache_entry *entry) {
    size_t size = 0;
    if (clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) !=
            CL_SUCCESS ||
        size == 0)
        return;
    unsigned char *binary = malloc(size);
    if (binary &&
        clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof binary, &binary, NULL) == CL_SUCCESS)
        cache_write(entry, binary, size);
    free(binary);
}

/* Whether the driver keeps compiled programs on disk itself, so that clattn keeps no copy.
 * PoCL does (its kernel cache, unless POCL_KERNEL_CACHE=0), and asking it for a program's
 * binary compiles every kernel of the program once more, for any work-group size, beside the
 * code it compiles for each launch's size: a third of a cold `check` went to that. */
static int driver_keeps_programs(const clattn_device_info *device) {
    const char *pocl_cache = getenv("POCL_KERNEL_CACHE");
    return strstr(device->platform_name, "Portable Computing Language") != NULL &&
           !(pocl_cache && strcmp(pocl_cache, "0") == 0);
}

/* Builds a program, through the disk cache when it is enabled and the driver keeps none. */
static clattn_status program_build(clattn_context *ctx, const char *const *files, size_t n,
                                   const char *options, const char *label, cl_program *out) {
    char *source = NULL;
    cache_entry entry = {{0}, NULL, 0};
    clattn_status status = program_source(ctx, files, n, &source);
    if (status != CLATTN_SUCCESS) return status;
    int cached = !driver_keeps_programs(&ctx->device) &&
                 cache_entry_init(ctx, source, options, &entry) == CLATTN_SUCCESS;
    *out = NULL;
    if (cached) {
        size_t size = 0;
        unsigned char *binary = cache_read(&entry, &size);
        if (binary) {
            *out = build_from_binary(ctx, binary, size, options);
            log_msg(*out ? "cache hit %s [%s]: %s"
                         : "cache entry %s [%s] rejected by the "
                           "driver: %s",
                    label, options, entry.path);
            free(binary);
        }
    }
    if (*out) ctx->programs_loaded++;
    if (!*out) {
        status = build_from_source(ctx, source, options, label, out);
        if (status == CLATTN_SUCCESS) ctx->programs_built++;
        if (status == CLATTN_SUCCESS && cached) store_binary(*out, &entry);
    }
    free(entry.key);
    free(source);
    return status;
}

/* ---------------------------------------------------------------- the in-memory cache */

static struct program_entry *find_program(clattn_context *ctx, const char *key) {
    for (struct program_entry *e = ctx->programs; e; e = e->next)
        if (strcmp(e->key, key) == 0) return e;
    return NULL;
}

static clattn_status program_get(clattn_context *ctx, const char *const *files, size_t n,
                                 const char *defines, struct program_entry **out) {
    char options[2048], key[4096], label[256] = "";
    build_options(&ctx->device, defines, options, sizeof options);
    for (size_t i = 0; i < n; i++) {
        strncat(label, files[i], sizeof label - strlen(label) - 2);
        if (i + 1 < n) strcat(label, "+");
    }
    snprintf(key, sizeof key, "%s|%s", label, options);
    if ((*out = find_program(ctx, key))) return CLATTN_SUCCESS;

    if (simulated_failure(files, n)) {
        free(ctx->build_log);
        ctx->build_log = strdup("simulated build failure (CLATTN_TEST_FAIL_BUILD)");
        return ctx_error(ctx, CLATTN_ERR_BUILD,
                         "building %s failed: simulated by "
                         "CLATTN_TEST_FAIL_BUILD",
                         label);
    }
    struct program_entry *entry = calloc(1, sizeof *entry);
    if (!entry || !(entry->key = strdup(key))) {
        free(entry);
        return CLATTN_ERR_OUT_OF_MEMORY;
    }
    clattn_status status = program_build(ctx, files, n, options, label, &entry->program);
    if (status != CLATTN_SUCCESS) {
        free(entry->key);
        free(entry);
        return status;
    }
    entry->next = ctx->programs;
    ctx->programs = entry;
    *out = entry;
    return CLATTN_SUCCESS;
}

clattn_status kernel_get(clattn_context *ctx, const char *const *files, size_t num_files,
                         const char *defines, const char *kernel_name, cl_kernel *kernel) {
    struct program_entry *entry = NULL;
    *kernel = NULL;
    clattn_status status = program_get(ctx, files, num_files, defines, &entry);
    if (status != CLATTN_SUCCESS) return status;
    for (size_t i = 0; i < entry->num_kernels; i++) {
        if (strcmp(entry->kernel_names[i], kernel_name) == 0) {
            *kernel = entry->kernels[i];
            return CLATTN_SUCCESS;
        }
    }
    if (entry->num_kernels == MAX_KERNELS_PER_PROGRAM)
        return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED, "too many kernels in one program");
    cl_int err = CL_SUCCESS;
    cl_kernel k = clCreateKernel(entry->program, kernel_name, &err);
    if (err != CL_SUCCESS) return ctx_cl_error(ctx, err, kernel_name);
    entry->kernel_names[entry->num_kernels] = kernel_name; /* callers pass string literals */
    entry->kernels[entry->num_kernels++] = k;
    *kernel = k;
    return CLATTN_SUCCESS;
}

void program_cache_release(clattn_context *ctx) {
    struct program_entry *e = ctx->programs;
    while (e) {
        struct program_entry *next = e->next;
        for (size_t i = 0; i < e->num_kernels; i++) clReleaseKernel(e->kernels[i]);
        clReleaseProgram(e->program);
        free(e->key);
        free(e);
        e = next;
    }
    ctx->programs = NULL;
}
