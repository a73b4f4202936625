/*
 * The verdict store (verdicts.h): verdicts.json read with the small JSON reader, kept per
 * process until the file changes, and written whole through a temporary and a rename.
 */
#include "plan/verdicts.h"
#include "core/json.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

/* The fields of an entry, every one a string, by their names in the file. */
#define FIELD(name)                                                                                \
    { #name, offsetof(verdict_entry, name), sizeof(((verdict_entry *)0)->name) }
static const struct {
    const char *name;
    size_t offset, size;
} fields[] = {FIELD(device),  FIELD(platform), FIELD(driver), FIELD(library), FIELD(sources),
              FIELD(variant), FIELD(verdict),  FIELD(sweep),  FIELD(date),    FIELD(detail)};
#undef FIELD
#define KEY_FIELDS 6 /* device .. variant: what an entry is for */

static char *field_of(verdict_entry *e, size_t i) {
    return (char *)e + fields[i].offset;
}

static const char *field_value(const verdict_entry *e, size_t i) {
    return (const char *)e + fields[i].offset;
}

static int same_key(const verdict_entry *a, const verdict_entry *b) {
    for (size_t i = 0; i < KEY_FIELDS; i++)
        if (strcmp(field_value(a, i), field_value(b, i)) != 0) return 0;
    return 1;
}

const char *verdict_kind_name(clattn_verdict_kind kind) {
    return kind == CLATTN_VERDICT_PASSED      ? "passed"
           : kind == CLATTN_VERDICT_FAILED    ? "failed"
           : kind == CLATTN_VERDICT_TIMED_OUT ? "timed out"
                                              : "none";
}

clattn_verdict_kind verdict_kind_of(const char *name) {
    for (int k = CLATTN_VERDICT_PASSED; k <= CLATTN_VERDICT_TIMED_OUT; k++)
        if (strcmp(name, verdict_kind_name((clattn_verdict_kind)k)) == 0)
            return (clattn_verdict_kind)k;
    return CLATTN_VERDICT_NONE;
}

/* ---------------------------------------------------------------- reading */

/* A key of an entry: a field's string, or skipped. */
static void read_value(json_reader *r, const char *key, void *entry) {
    size_t i = 0;
    while (i < ARRAY_LEN(fields) && strcmp(key, fields[i].name) != 0) i++;
    if (i < ARRAY_LEN(fields) && r->at < r->end && *r->at == '"')
        json_read_string(r, field_of(entry, i), fields[i].size);
    else
        json_skip_value(r, 1);
}

static void read_entry(json_reader *r, void *entry) {
    memset(entry, 0, sizeof(verdict_entry));
    json_read_object(r, read_value, entry);
}

/* A file's entries (none when it does not exist), and in *fault where it is malformed (byte
 * + 1; 0: read whole). @return 0, or an errno. */
/* The entries of a store or report at `path`; *marked (when not NULL): whether the text holds
 * the format's key, "clattn_verdicts", which every file written here and every report has. */
static int read_entries(const char *path, verdict_entry **entries, size_t *count, size_t *fault,
                        int *marked) {
    size_t size = 0;
    *entries = NULL, *count = 0, *fault = 0;
    char *text = read_regular_file(path, (size_t)1 << 24, 0, &size);
    if (marked) *marked = 0;
    if (!text) return errno == ENOENT ? 0 : errno;
    if (marked) *marked = strstr(text, "\"clattn_verdicts\"") != NULL;
    *entries =
        json_read_entries(text, size, sizeof **entries, read_entry, count, fault, "verdicts");
    free(text);
    return 0;
}

const char *verdicts_file_path(char *buf, size_t size) {
    char dir[4096];
    if (!program_cache_trusted_dir(dir, sizeof dir, 0)) return NULL;
    snprintf(buf, size, "%s/verdicts.json", dir);
    return buf;
}

void verdict_key(const clattn_device_info *device, const char *variant, verdict_entry *e) {
    memset(e, 0, sizeof *e);
    snprintf(e->device, sizeof e->device, "%s", device->name);
    snprintf(e->platform, sizeof e->platform, "%s", device->platform_name);
    snprintf(e->driver, sizeof e->driver, "%s", device->driver_version);
    snprintf(e->library, sizeof e->library, "%s", CLATTN_VERSION_STRING);
    snprintf(e->sources, sizeof e->sources, "%016llx", (unsigned long long)kernel_sources_hash());
    snprintf(e->variant, sizeof e->variant, "%s", variant);
}

/* The process's copy of the store, read again when its size or modification time changes. */
static pthread_mutex_t store_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char path[4200];
    struct timespec mtime;
    off_t size;
    verdict_entry *entries;
    size_t count;
} store;

static void reload_store(const char *path) {
    struct stat st;
    int exists = lstat(path, &st) == 0 && S_ISREG(st.st_mode);
    if (exists && strcmp(path, store.path) == 0 && st.st_size == store.size &&
        st.st_mtim.tv_sec == store.mtime.tv_sec && st.st_mtim.tv_nsec == store.mtime.tv_nsec)
        return;
    free(store.entries);
    memset(&store, 0, sizeof store);
    if (!exists) return;
    snprintf(store.path, sizeof store.path, "%s", path);
    store.mtime = st.st_mtim, store.size = st.st_size;
    size_t fault; /* lookups take the entries before a fault */
    read_entries(path, &store.entries, &store.count, &fault, NULL);
}

int verdict_find(verdict_entry *e) {
    char path[4200];
    int found = 0;
    if (!verdicts_file_path(path, sizeof path)) return 0;
    pthread_mutex_lock(&store_lock);
    reload_store(path);
    for (size_t i = store.count; i-- > 0 && !found;)
        if (same_key(&store.entries[i], e)) *e = store.entries[i], found = 1;
    pthread_mutex_unlock(&store_lock);
    return found && verdict_kind_of(e->verdict) != CLATTN_VERDICT_NONE;
}

/* ---------------------------------------------------------------- writing */

/* An entry as one object, its fields in order. */
static void write_entry(FILE *f, const void *entry) {
    for (size_t k = 0; k < ARRAY_LEN(fields); k++) {
        fprintf(f, "%s\"%s\": ", k ? ", " : "  {", fields[k].name);
        json_write_string(f, field_value(entry, k));
    }
    fputc('}', f);
}

/* Writes `entries` with each of `added` put in place of the entry with its key (or at the end). */
static int write_with(const char *path, verdict_entry *entries, size_t count,
                      const verdict_entry *added, size_t num_added) {
    verdict_entry *all = malloc((count + num_added + 1) * sizeof *all);
    if (!all) return ENOMEM;
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        int replaced = 0;
        for (size_t a = 0; a < num_added && !replaced; a++)
            replaced = same_key(&entries[i], &added[a]);
        if (!replaced) all[n++] = entries[i];
    }
    for (size_t a = 0; a < num_added; a++) all[n++] = added[a];
    size_t size = 0;
    char *text = json_format_entries("clattn_verdicts", all, n, sizeof *all, write_entry, &size);
    int e = text ? write_file_atomic(path, text, size) : ENOMEM;
    free(text);
    free(all);
    return e;
}

/* The store's path, its folder made private when missing. */
static clattn_status store_path(char *path, size_t size, error_record *err) {
    char dir[4096];
    if (!program_cache_dir(dir, sizeof dir))
        return error_set(err, CLATTN_ERR_UNSUPPORTED,
                         "the cache folder is off (CLATTN_CACHE_DIR=off): no verdict store");
    if (!program_cache_trusted_dir(dir, sizeof dir, 1) || !verdicts_file_path(path, size))
        return error_set(err, CLATTN_ERR_IO,
                         "the cache folder %s cannot be made or is not private "
                         "(CLATTN_VERBOSE=1 says why): no verdict store",
                         dir);
    return CLATTN_SUCCESS;
}

static clattn_status add_entries(const char *file, const verdict_entry *added, size_t num_added,
                                 error_record *err) {
    char path[4200];
    const int shared = !file; /* the store, which other processes update too; not a report */
    if (shared) {
        clattn_status status = store_path(path, sizeof path, err);
        if (status != CLATTN_SUCCESS) return status;
        file = path;
    }
    pthread_mutex_lock(&store_lock);
    verdict_entry *entries = NULL;
    size_t count = 0, fault = 0;
    int lock = shared ? file_lock(file) : -1; /* against the others' updates, until the rename */
    int e = shared && lock < 0 ? errno : read_entries(file, &entries, &count, &fault, NULL);
    if (!e && !fault) e = write_with(file, entries, count, added, num_added);
    file_unlock(lock);
    free(entries);
    free(store.entries); /* read again at the next lookup */
    memset(&store, 0, sizeof store);
    pthread_mutex_unlock(&store_lock);
    if (fault)
        return error_set(err, CLATTN_ERR_IO,
                         "%s is malformed, or holds more than %d entries, near byte %zu: not "
                         "overwritten, so that its other verdicts are not lost (mend it, or move "
                         "it away)",
                         file, JSON_MAX_ENTRIES, fault - 1);
    if (e) return error_set(err, CLATTN_ERR_IO, "updating %s: %s", file, strerror(e));
    return CLATTN_SUCCESS;
}

clattn_status verdict_write(const char *file, const verdict_entry *e, error_record *err) {
    return add_entries(file, e, 1, err);
}

clattn_status verdicts_merge(const char *file, size_t *merged, size_t *ignored, error_record *err) {
    verdict_entry *entries = NULL, mine;
    size_t count = 0, kept = 0, fault = 0;
    int marked = 0;
    int e = read_entries(file, &entries, &count, &fault, &marked);
    if (e) return error_set(err, CLATTN_ERR_IO, "reading %s: %s", file, strerror(e));
    if (!fault && !marked && access(file, F_OK) == 0) { /* JSON, but another kind of file */
        free(entries);
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "%s is not a verdicts report (clattn check --report): it has no "
                         "\"clattn_verdicts\" key",
                         file);
    }
    if (fault) {
        free(entries);
        return error_set(err, CLATTN_ERR_INVALID_ARGUMENT,
                         "%s is not a verdicts report (clattn check --report): malformed, or "
                         "more than %d entries, near byte %zu",
                         file, JSON_MAX_ENTRIES, fault - 1);
    }
    if (count == 0 && !entries) {
        struct stat st;
        if (stat(file, &st) != 0)
            return error_set(err, CLATTN_ERR_IO, "reading %s: %s", file, strerror(errno));
    }
    clattn_device_info none;
    memset(&none, 0, sizeof none);
    verdict_key(&none, "", &mine); /* this library's version and sources */
    for (size_t i = 0; i < count; i++)
        if (strcmp(entries[i].library, mine.library) == 0 &&
            strcmp(entries[i].sources, mine.sources) == 0 &&
            verdict_kind_of(entries[i].verdict) != CLATTN_VERDICT_NONE && entries[i].device[0])
            entries[kept++] = entries[i];
    clattn_status status = kept ? add_entries(NULL, entries, kept, err) : CLATTN_SUCCESS;
    if (merged) *merged = status == CLATTN_SUCCESS ? kept : 0;
    if (ignored) *ignored = count - kept;
    free(entries);
    return status;
}
