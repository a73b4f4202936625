/*
 * The tuning database (tuning.h): lookups through a variant's built-in class defaults, and the
 * user's tuning.json, read with a small JSON reader and kept per process until the file changes.
 */
#include "plan/tuning.h"
#include "core/json.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

/* The fields of tuning_params by name, in order (TUNING_FIELDS). */
#define TUNING_FIELD_NAME(name, meaning) #name,
static const char *const param_names[] = {TUNING_FIELDS(TUNING_FIELD_NAME)};
#undef TUNING_FIELD_NAME

/* Field i (every field is an unsigned, in TUNING_FIELDS' order). */
static unsigned *param_field(tuning_params *p, size_t i) {
    return (unsigned *)p + i;
}
static unsigned param_value(const tuning_params *p, size_t i) {
    return ((const unsigned *)p)[i];
}

static void set_param(user_entry *e, const char *key, unsigned long value) {
    for (size_t i = 0; i < ARRAY_LEN(param_names); i++)
        if (strcmp(key, param_names[i]) == 0 && value <= 65536) {
            *param_field(&e->params, i) = (unsigned)value;
            e->set |= 1u << i;
        }
}

/* A key of an entry: the device, driver or variant string, a field's number, or skipped. */
static void read_value(json_reader *r, const char *key, void *entry) {
    user_entry *e = entry;
    char *target = strcmp(key, "device") == 0    ? e->device
                   : strcmp(key, "driver") == 0  ? e->driver
                   : strcmp(key, "variant") == 0 ? e->variant
                                                 : NULL;
    if (target) {
        json_read_string(r, target,
                         strcmp(key, "variant") == 0 ? sizeof e->variant : sizeof e->device);
    } else if (r->at < r->end && isdigit((unsigned char)*r->at)) {
        char *stop = NULL;
        set_param(e, key, strtoul(r->at, &stop, 10));
        r->at = stop;
    } else {
        json_skip_value(r, 1);
    }
}

/* One {"key": value, ...} of the entries array. */
static void read_entry(json_reader *r, void *entry) {
    memset(entry, 0, sizeof(user_entry));
    json_read_object(r, read_value, entry);
}

/* The process's copy of the file, re-read when its size or modification time changes. */
static pthread_mutex_t user_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char path[4096];
    struct timespec mtime;
    off_t size;
    user_entry *entries;
    size_t count;
    size_t fault; /* malformed near byte fault - 1; 0: read whole */
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
    if (text)
        user_file.entries = json_read_entries(text, got, sizeof *user_file.entries, read_entry,
                                              &user_file.count, &user_file.fault, "tuning.json");
    free(text);
}

static int entry_matches(const user_entry *e, const clattn_device_info *device,
                         const tuning_subject *subject) {
    int named = strcmp(e->variant, subject->name) == 0 ||
                (subject->old_name && strcmp(e->variant, subject->old_name) == 0);
    return named && strcmp(e->device, device->name) == 0 &&
           (!e->driver[0] || strcmp(e->driver, device->driver_version) == 0);
}

/* Applies the user's entry for this device, driver and variant, if any. @return 1 if one. */
static int apply_user_entry(const clattn_device_info *device, const tuning_subject *subject,
                            tuning_params *out) {
    char path[4200];
    int found = 0;
    if (!tuning_file_path(path, sizeof path)) return 0;
    pthread_mutex_lock(&user_lock);
    reload_if_changed(path);
    for (size_t i = 0; i < user_file.count && !found; i++) {
        const user_entry *e = &user_file.entries[i];
        if (!entry_matches(e, device, subject)) continue;
        for (size_t f = 0; f < ARRAY_LEN(param_names); f++)
            if (e->set & (1u << f)) *param_field(out, f) = param_value(&e->params, f);
        found = 1;
    }
    pthread_mutex_unlock(&user_lock);
    return found;
}

/* ---------------------------------------------------------------- writing the user's file */

/* An entry as one object: its device, driver and variant, then the fields it sets. */
static void write_entry(FILE *f, const void *entry) {
    const user_entry *e = entry;
    fputs("  {\"device\": ", f);
    json_write_string(f, e->device);
    fputs(", \"driver\": ", f);
    json_write_string(f, e->driver);
    fputs(", \"variant\": ", f);
    json_write_string(f, e->variant);
    for (size_t i = 0; i < ARRAY_LEN(param_names); i++)
        if (e->set & (1u << i))
            fprintf(f, ", \"%s\": %u", param_names[i], param_value(&e->params, i));
    fputc('}', f);
}

/* The file's entries but the one for (device, driver, variant), then `added`. malloc'ed. */
static user_entry *entries_with(const user_entry *added, size_t *count) {
    user_entry *all = malloc((user_file.count + 1) * sizeof *all);
    *count = 0;
    if (!all) return NULL;
    for (size_t i = 0; i < user_file.count; i++) {
        const user_entry *e = &user_file.entries[i];
        if (strcmp(e->device, added->device) == 0 && strcmp(e->driver, added->driver) == 0 &&
            strcmp(e->variant, added->variant) == 0)
            continue;
        all[(*count)++] = *e;
    }
    all[(*count)++] = *added;
    return all;
}

/* A tuning.json that a save would lose entries of, were it rewritten from what was read: one
 * that is not a regular file of under 16 MiB, or that is malformed (user_file, just reloaded). */
static clattn_status unreadable_file(const char *path, error_record *err) {
    struct stat st;
    if (lstat(path, &st) != 0) return CLATTN_SUCCESS; /* none yet */
    if (!S_ISREG(st.st_mode) || st.st_size >= (1 << 24))
        return error_set(err, CLATTN_ERR_IO,
                         "%s is not a regular file of under 16 MiB: not overwritten (move it "
                         "away to save)",
                         path);
    if (user_file.fault)
        return error_set(err, CLATTN_ERR_IO,
                         "%s is malformed, or holds more than %d entries, near byte %zu: not "
                         "overwritten, so that its other entries are not lost (mend it, or move "
                         "it away to save)",
                         path, JSON_MAX_ENTRIES, user_file.fault - 1);
    return CLATTN_SUCCESS;
}

clattn_status tuning_save(const clattn_device_info *device, const char *variant,
                          const tuning_params *params, error_record *err) {
    char path[4200], dir[4096];
    if (!program_cache_dir(dir, sizeof dir))
        return error_set(err, CLATTN_ERR_UNSUPPORTED,
                         "the cache folder is off (CLATTN_CACHE_DIR=off): no tuning.json to write");
    /* made 0700 when missing; refused when others could write to it, like the program cache */
    if (!program_cache_trusted_dir(dir, sizeof dir, 1) || !tuning_file_path(path, sizeof path))
        return error_set(err, CLATTN_ERR_IO,
                         "the cache folder %s cannot be made or is not private "
                         "(CLATTN_VERBOSE=1 says why): tuning.json not written",
                         dir);
    user_entry added;
    memset(&added, 0, sizeof added);
    snprintf(added.device, sizeof added.device, "%s", device->name);
    snprintf(added.driver, sizeof added.driver, "%s", device->driver_version);
    snprintf(added.variant, sizeof added.variant, "%s", variant);
    added.params = *params;
    added.set = (1u << ARRAY_LEN(param_names)) - 1;
    pthread_mutex_lock(&user_lock);
    int lock = file_lock(path); /* against other processes' saves, until the rename */
    if (lock < 0) {
        pthread_mutex_unlock(&user_lock);
        return error_set(err, CLATTN_ERR_IO, "locking %s.lock: %s", path, strerror(errno));
    }
    free(user_file.entries); /* read afresh under the lock */
    memset(&user_file, 0, sizeof user_file);
    reload_if_changed(path);
    clattn_status refused = unreadable_file(path, err);
    if (refused) {
        file_unlock(lock);
        pthread_mutex_unlock(&user_lock);
        return refused;
    }
    size_t count = 0, size = 0;
    user_entry *all = entries_with(&added, &count);
    char *text =
        all ? json_format_entries("clattn_tuning", all, count, sizeof *all, write_entry, &size)
            : NULL;
    int e = !text ? ENOMEM : write_file_atomic(path, text, size);
    free(all);
    free(text);
    free(user_file.entries); /* read again on the next lookup */
    memset(&user_file, 0, sizeof user_file);
    file_unlock(lock);
    pthread_mutex_unlock(&user_lock);
    if (e) return error_set(err, CLATTN_ERR_IO, "writing %s: %s", path, strerror(e));
    log_msg("tuning: wrote the %s entry of %s (%s) to %s", variant, device->name,
            device->driver_version, path);
    return CLATTN_SUCCESS;
}

/* ---------------------------------------------------------------- a context's own values */

#define CONTEXT_TUNING_MAX 16

typedef struct context_tuning {
    size_t count;
    struct {
        char variant[32];
        tuning_params params;
    } entries[CONTEXT_TUNING_MAX];
} context_tuning;

static void context_tuning_release(clattn_context *ctx) {
    void **slot = context_data(ctx, context_tuning_release);
    if (slot) free(*slot);
}

clattn_status tuning_set_context(clattn_context *ctx, const char *variant,
                                 const tuning_params *params) {
    void **slot = context_data(ctx, context_tuning_release);
    if (!slot) return CLATTN_ERR_OUT_OF_MEMORY;
    if (!*slot && !(*slot = calloc(1, sizeof(context_tuning)))) return CLATTN_ERR_OUT_OF_MEMORY;
    context_tuning *t = *slot;
    size_t at = 0;
    while (at < t->count && strcmp(t->entries[at].variant, variant) != 0) at++;
    if (!params) { /* clear: the last entry takes its place */
        if (at < t->count) t->entries[at] = t->entries[--t->count];
        return CLATTN_SUCCESS;
    }
    if (at == CONTEXT_TUNING_MAX) return CLATTN_ERR_OUT_OF_MEMORY;
    if (at == t->count) t->count++;
    snprintf(t->entries[at].variant, sizeof t->entries[at].variant, "%s", variant);
    t->entries[at].params = *params;
    return CLATTN_SUCCESS;
}

tuning_source tuning_lookup_context(clattn_context *ctx, const tuning_subject *subject,
                                    tuning_params *out) {
    void **slot = context_data(ctx, context_tuning_release);
    const context_tuning *t = slot ? *slot : NULL;
    for (size_t i = 0; t && i < t->count; i++)
        if (strcmp(t->entries[i].variant, subject->name) == 0) {
            *out = t->entries[i].params;
            return TUNING_CONTEXT;
        }
    return tuning_lookup(&ctx->device, subject, out);
}

/* ---------------------------------------------------------------- lookup */

tuning_source tuning_lookup(const clattn_device_info *device, const tuning_subject *subject,
                            tuning_params *out) {
    tuning_source source = TUNING_DEFAULT;
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < subject->num_defaults; i++) {
        const tuning_default *e = &subject->defaults[i];
        if (!(e->type & device->type) || !contains(device->vendor, e->vendor) ||
            !contains(device->name, e->name))
            continue;
        *out = e->params;
        source = *e->vendor || *e->name ? TUNING_BUILT_IN : TUNING_DEFAULT;
        break;
    }
    if (apply_user_entry(device, subject, out)) source = TUNING_USER;
    return source;
}

const char *tuning_source_name(tuning_source source) {
    static const char *const names[] = {"default", "built-in", "tuning.json", "context"};
    return names[source];
}
