/*
 * The tuning database (tuning.h): built-in entries, class defaults, and the user's tuning.json,
 * read with a small JSON reader and kept per process until the file changes.
 */
#include "plan/tuning.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---------------------------------------------------------------- built-in entries */

/* A device matches when its type has a bit of `type` and its vendor and name contain the given
 * texts (empty matches all). The first match wins, so specific entries come first and each
 * variant ends with the default of every class. */
typedef struct tuning_entry {
    const char *variant;
    cl_device_type type;
    const char *vendor, *name;
    tuning_params params;
} tuning_entry;

static const tuning_entry built_in[] = {
    /* fused cpu: BLOCK_M rows in registers a work-item, BLOCK_N keys a tile, 16-wide vectors */
    {"cpu", CL_DEVICE_TYPE_ALL, "", "", {8, 32, 1, 16, 0}},
    /* fused gpu: a row a work-item, BLOCK_M rows a work-group, K/V tiles in local memory */
    {"gpu", CL_DEVICE_TYPE_ALL, "", "", {64, 32, 64, 1, 0}},
    /* split: up to block_m query rows a work-item (also the most a kv head may have for auto to
       pick it), chunks of at least block_n keys, wg_size work-items a compute unit */
    {"split", CL_DEVICE_TYPE_ALL, "", "", {16, 256, 4, 16, 0}},
    /* gemm: the masked softmax's work-group (a power of two up to this) */
    {"gemm", CL_DEVICE_TYPE_ALL, "", "", {0, 0, 256, 1, 0}},
    {"reference", CL_DEVICE_TYPE_ALL, "", "", {0, 0, 0, 0, 0}},
};

static int contains(const char *text, const char *part) {
    return !*part || strstr(text, part) != NULL;
}

/* ---------------------------------------------------------------- the user's file */

/* One entry of tuning.json: which device, driver and variant, and the values it sets
 * (`set` has a bit per field of tuning_params, in order). */
typedef struct user_entry {
    char device[256], driver[256], variant[32];
    tuning_params params;
    unsigned set;
} user_entry;

typedef struct json_reader {
    const char *at, *end;
    int failed;
} json_reader;

static void skip_space(json_reader *r) {
    while (r->at < r->end && isspace((unsigned char)*r->at)) r->at++;
}

static int expect(json_reader *r, char c) {
    skip_space(r);
    if (r->at < r->end && *r->at == c) {
        r->at++;
        return 1;
    }
    r->failed = 1;
    return 0;
}

/* A string into out (escapes \" \\ \/ \n \t kept simple; others copied as they are). */
static int read_string(json_reader *r, char *out, size_t size) {
    size_t n = 0;
    if (!expect(r, '"')) return 0;
    while (r->at < r->end && *r->at != '"') {
        char c = *r->at++;
        if (c == '\\' && r->at < r->end) {
            c = *r->at++;
            c = c == 'n' ? '\n' : c == 't' ? '\t' : c;
        }
        if (n + 1 < size) out[n++] = c;
    }
    out[n] = '\0';
    return expect(r, '"');
}

/* Skips one value of any kind (for keys we do not know). */
static void skip_value(json_reader *r, int depth) {
    skip_space(r);
    if (r->at >= r->end || depth > 32) {
        r->failed = 1;
        return;
    }
    char c = *r->at;
    char text[8];
    if (c == '"') {
        read_string(r, text, sizeof text);
    } else if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        r->at++;
        skip_space(r);
        while (!r->failed && r->at < r->end && *r->at != close) {
            if (c == '{' && read_string(r, text, sizeof text)) expect(r, ':');
            skip_value(r, depth + 1);
            skip_space(r);
            if (r->at < r->end && *r->at == ',') r->at++;
            skip_space(r);
        }
        expect(r, close);
    } else {
        while (r->at < r->end && !strchr(",}] \t\r\n", *r->at)) r->at++;
    }
}

static const char *const param_names[] = {"block_m", "block_n", "wg_size", "vector", "split"};

static void set_param(user_entry *e, const char *key, unsigned long value) {
    unsigned *fields[] = {&e->params.block_m, &e->params.block_n, &e->params.wg_size,
                          &e->params.vector, &e->params.split};
    for (size_t i = 0; i < ARRAY_LEN(param_names); i++)
        if (strcmp(key, param_names[i]) == 0 && value <= 65536) {
            *fields[i] = (unsigned)value;
            e->set |= 1u << i;
        }
}

/* One {"key": value, ...} of the entries array. */
static void read_entry(json_reader *r, user_entry *e) {
    memset(e, 0, sizeof *e);
    if (!expect(r, '{')) return;
    skip_space(r);
    while (!r->failed && r->at < r->end && *r->at != '}') {
        char key[64];
        if (!read_string(r, key, sizeof key) || !expect(r, ':')) return;
        skip_space(r);
        char *target = strcmp(key, "device") == 0    ? e->device
                       : strcmp(key, "driver") == 0  ? e->driver
                       : strcmp(key, "variant") == 0 ? e->variant
                                                     : NULL;
        if (target) {
            read_string(r, target,
                        strcmp(key, "variant") == 0 ? sizeof e->variant : sizeof e->device);
        } else if (r->at < r->end && isdigit((unsigned char)*r->at)) {
            char *stop = NULL;
            set_param(e, key, strtoul(r->at, &stop, 10));
            r->at = stop;
        } else {
            skip_value(r, 1);
        }
        skip_space(r);
        if (r->at < r->end && *r->at == ',') r->at++;
        skip_space(r);
    }
    expect(r, '}');
}

/* Reads the entries of a tuning file's text; *count of them, malloc'ed (NULL when none). */
static user_entry *parse_entries(const char *text, size_t size, size_t *count) {
    json_reader r = {text, text + size, 0};
    user_entry *entries = NULL;
    *count = 0;
    if (!expect(&r, '{')) return NULL;
    skip_space(&r);
    while (!r.failed && r.at < r.end && *r.at != '}') {
        char key[64];
        if (!read_string(&r, key, sizeof key) || !expect(&r, ':')) break;
        if (strcmp(key, "entries") != 0) {
            skip_value(&r, 1);
        } else if (expect(&r, '[')) {
            skip_space(&r);
            while (!r.failed && r.at < r.end && *r.at != ']') {
                user_entry *grown = realloc(entries, (*count + 1) * sizeof *entries);
                if (!grown) break;
                entries = grown;
                read_entry(&r, &entries[*count]);
                if (!r.failed) (*count)++;
                skip_space(&r);
                if (r.at < r.end && *r.at == ',') r.at++;
                skip_space(&r);
            }
            expect(&r, ']');
        }
        skip_space(&r);
        if (r.at < r.end && *r.at == ',') r.at++;
        skip_space(&r);
    }
    if (r.failed)
        log_msg("tuning.json: malformed near byte %zu; entries after it ignored",
                (size_t)(r.at - text));
    return entries;
}

/* The process's copy of the file, re-read when its size or modification time changes. */
static pthread_mutex_t user_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char path[4096];
    struct timespec mtime;
    off_t size;
    user_entry *entries;
    size_t count;
} user_file;

const char *tuning_file_path(char *buf, size_t size) {
    char dir[4096];
    if (!program_cache_trusted_dir(dir, sizeof dir, 0)) return NULL; /* a folder others write */
    snprintf(buf, size, "%s/tuning.json", dir);
    return buf;
}

/* The file is read only when it is a regular file of under 16 MiB, not through a link. */
static void reload_if_changed(const char *path) {
    struct stat st;
    int exists = lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size < (1 << 24);
    if (exists && strcmp(path, user_file.path) == 0 && st.st_size == user_file.size &&
        st.st_mtim.tv_sec == user_file.mtime.tv_sec &&
        st.st_mtim.tv_nsec == user_file.mtime.tv_nsec)
        return;
    free(user_file.entries);
    memset(&user_file, 0, sizeof user_file);
    if (!exists) return;
    snprintf(user_file.path, sizeof user_file.path, "%s", path);
    user_file.mtime = st.st_mtim;
    user_file.size = st.st_size;
    size_t got = 0;
    char *text = read_regular_file(path, (size_t)1 << 24, 0, &got);
    if (text) user_file.entries = parse_entries(text, got, &user_file.count);
    free(text);
}

/* Applies the user's entry for this device, driver and variant, if any. @return 1 if one. */
static int apply_user_entry(const clattn_device_info *device, const char *variant,
                            tuning_params *out) {
    char path[4200];
    int found = 0;
    if (!tuning_file_path(path, sizeof path)) return 0;
    pthread_mutex_lock(&user_lock);
    reload_if_changed(path);
    for (size_t i = 0; i < user_file.count && !found; i++) {
        const user_entry *e = &user_file.entries[i];
        if (strcmp(e->device, device->name) != 0 || strcmp(e->variant, variant) != 0 ||
            (e->driver[0] && strcmp(e->driver, device->driver_version) != 0))
            continue;
        unsigned *dst[] = {&out->block_m, &out->block_n, &out->wg_size, &out->vector, &out->split};
        const unsigned src[] = {e->params.block_m, e->params.block_n, e->params.wg_size,
                                e->params.vector, e->params.split};
        for (size_t f = 0; f < ARRAY_LEN(dst); f++)
            if (e->set & (1u << f)) *dst[f] = src[f];
        found = 1;
    }
    pthread_mutex_unlock(&user_lock);
    return found;
}

/* ---------------------------------------------------------------- lookup */

tuning_source tuning_lookup(const clattn_device_info *device, const char *variant,
                            tuning_params *out) {
    tuning_source source = TUNING_DEFAULT;
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < ARRAY_LEN(built_in); i++) {
        const tuning_entry *e = &built_in[i];
        if (strcmp(e->variant, variant) != 0 || !(e->type & device->type) ||
            !contains(device->vendor, e->vendor) || !contains(device->name, e->name))
            continue;
        *out = e->params;
        source = *e->vendor || *e->name ? TUNING_BUILT_IN : TUNING_DEFAULT;
        break;
    }
    if (apply_user_entry(device, variant, out)) source = TUNING_USER;
    return source;
}

const char *tuning_source_name(tuning_source source) {
    static const char *const names[] = {"default", "built-in", "tuning.json"};
    return names[source];
}
