/*
 * The cache folder's compiled kernels as a whole (program.c writes and reads them one by one):
 * what they hold, a size limit kept with the least recently used entries removed first, and
 * clearing. An entry's modification time is its last use: program.c touches it on every hit.
 *
 * Trimming removes the entries of other clattn versions first (no build of this library reads
 * them again), then this version's by last use. Removing never races with a reader: a reader
 * holds the whole file after one read of an open descriptor, and an unlinked file stays
 * readable through it. Two processes trimming at once may remove a little more than needed.
 */
#define _XOPEN_SOURCE 700 /* utimensat, beside the build's _POSIX_C_SOURCE */

#include "cache_entry.h"
#include "core.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_LIMIT_MB 256.0

typedef struct entry_file {
    char name[32]; /* 16 hex digits and ".clbin" */
    uint64_t bytes;
    int64_t last_use;  /* seconds since 1970: the file's modification time */
    int other_version; /* built by another clattn version */
} entry_file;

int cache_entry_name(const char *name, size_t len) {
    if (len != 22 || strncmp(name + 16, ".clbin", 6) != 0) return 0;
    for (size_t i = 0; i < 16; i++)
        if (!isxdigit((unsigned char)name[i])) return 0;
    return 1;
}

uint64_t cache_limit_bytes(void) {
    const char *text = getenv("CLATTN_CACHE_MAX_MB");
    double mb = DEFAULT_LIMIT_MB;
    if (text && *text) {
        char *end = NULL;
        double value = strtod(text, &end);
        if (end && *end == '\0' && value >= 0 && value < 1e12)
            mb = value;
        else
            log_msg("CLATTN_CACHE_MAX_MB=%s is not a size in MiB; using %.0f", text, mb);
    }
    return (uint64_t)(mb * 1048576.0);
}

void cache_entry_touch(const char *path) {
    if (utimensat(AT_FDCWD, path, NULL, AT_SYMLINK_NOFOLLOW) != 0)
        log_msg("cannot mark %s as used: %s", path, strerror(errno));
}

/* Whether the entry at `path` names another clattn version in its key's first line
 * ("clattn VERSION\n"); unreadable or damaged entries count as other versions too. */
static int built_by_other_version(const char *path) {
    static const char expected[] = "clattn " CLATTN_VERSION_STRING "\n";
    unsigned char head[CACHE_HEADER_BYTES + sizeof expected];
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return 1;
    ssize_t got = read(fd, head, sizeof head);
    close(fd);
    size_t want = CACHE_HEADER_BYTES + strlen(expected);
    return got < (ssize_t)want || memcmp(head, CACHE_MAGIC, 8) != 0 ||
           memcmp(head + CACHE_HEADER_BYTES, expected, strlen(expected)) != 0;
}

/* The folder's entries (regular files named as entries), in *files (malloc'ed, *count).
 * @return 0, or errno (a folder that does not exist is ENOENT). */
static int list_entries(const char *dir, int read_versions, entry_file **files, size_t *count) {
    *files = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (!d) return errno;
    size_t cap = 0;
    int err = 0;
    char path[4200];
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        struct stat st;
        if (!cache_entry_name(e->d_name, strlen(e->d_name))) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (*count == cap) {
            cap = cap ? 2 * cap : 64;
            entry_file *grown = realloc(*files, cap * sizeof **files);
            if (!grown) {
                err = ENOMEM;
                break;
            }
            *files = grown;
        }
        entry_file *f = &(*files)[(*count)++];
        snprintf(f->name, sizeof f->name, "%s", e->d_name);
        f->bytes = (uint64_t)st.st_size;
        f->last_use = (int64_t)st.st_mtime;
        f->other_version = read_versions && built_by_other_version(path);
    }
    closedir(d);
    if (err) {
        free(*files);
        *files = NULL;
        *count = 0;
    }
    return err;
}

int cache_usage_get(const char *dir, cache_usage *usage) {
    entry_file *files;
    size_t count;
    memset(usage, 0, sizeof *usage);
    int err = list_entries(dir, 1, &files, &count);
    if (err) return err == ENOENT ? 0 : err;
    for (size_t i = 0; i < count; i++) {
        const entry_file *f = &files[i];
        usage->entries++;
        usage->bytes += f->bytes;
        usage->other_version_entries += (size_t)f->other_version;
        usage->other_version_bytes += f->other_version ? f->bytes : 0;
        if (i == 0 || f->last_use < usage->oldest_use) usage->oldest_use = f->last_use;
        if (i == 0 || f->last_use > usage->newest_use) usage->newest_use = f->last_use;
    }
    free(files);
    return 0;
}

/* Removal order: other versions first, then the least recently used. */
static int removal_order(const void *a, const void *b) {
    const entry_file *x = a, *y = b;
    if (x->other_version != y->other_version) return y->other_version - x->other_version;
    return (x->last_use > y->last_use) - (x->last_use < y->last_use);
}

/* Unlinks `name` in `dir`; an entry another process removed first counts as removed.
 * @return 0, or errno. */
static int remove_entry(const char *dir, const char *name) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (unlink(path) == 0 || errno == ENOENT) return 0;
    int err = errno;
    log_msg("cannot remove cache entry %s: %s", path, strerror(err));
    return err;
}

int cache_trim(const char *dir, uint64_t limit_bytes, size_t *removed) {
    entry_file *files;
    size_t count;
    uint64_t total = 0;
    *removed = 0;
    int err = list_entries(dir, 0, &files, &count);
    if (err) return err == ENOENT ? 0 : err;
    for (size_t i = 0; i < count; i++) total += files[i].bytes;
    if (total > limit_bytes) { /* only now are the entries' versions worth reading */
        char path[4200];
        for (size_t i = 0; i < count; i++) {
            snprintf(path, sizeof path, "%s/%s", dir, files[i].name);
            files[i].other_version = built_by_other_version(path);
        }
        qsort(files, count, sizeof *files, removal_order);
    }
    int first_failure = 0; /* the others are still tried */
    for (size_t i = 0; i < count && total > limit_bytes; i++) {
        int failed = remove_entry(dir, files[i].name);
        if (failed) {
            first_failure = first_failure ? first_failure : failed;
            continue;
        }
        total -= files[i].bytes;
        (*removed)++;
    }
    free(files);
    if (*removed) log_msg("cache %s trimmed: %zu entries removed", dir, *removed);
    return first_failure;
}
