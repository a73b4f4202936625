/* Whole files, for the cache folder (program.c, plan/tuning.c): written atomically, read only
 * when regular, the temporaries of killed writers removed, and the folder itself trusted only
 * when no one else can write to it. */
#define _XOPEN_SOURCE 700 /* realpath, beside the build's _POSIX_C_SOURCE */

#include "core.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* Writes all of `data` to a new file (never one that exists, nor through a link), 0600.
 * @return 0 or errno; the file is removed on failure. */
static int write_new_file(const char *path, const void *data, size_t size) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return errno;
    const unsigned char *at = data;
    int e = 0;
    while (size > 0 && e == 0) {
        ssize_t n = write(fd, at, size);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            e = n < 0 ? errno : EIO;
        else
            at += n, size -= (size_t)n;
    }
    if (close(fd) != 0 && e == 0) e = errno;
    if (e != 0) unlink(path);
    return e;
}

/* `path.tmp.<pid>.<n>`, n counting this process's writes so that threads writing the same path
 * never share a temporary file, renamed over `path` once complete. */
int write_file_atomic(const char *path, const void *data, size_t size) {
    if (!path || (size && !data)) return EINVAL;
    size_t len = strlen(path) + 48;
    char *tmp = malloc(len);
    if (!tmp) return ENOMEM;
    static atomic_uint writes;
    int e = EEXIST;
    for (int tries = 0; e == EEXIST && tries < 16; tries++) { /* one left by a killed namesake */
        snprintf(tmp, len, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&writes, 1));
        e = write_new_file(tmp, data, size);
    }
    if (e == 0 && rename(tmp, path) != 0) {
        e = errno;
        unlink(tmp);
    }
    free(tmp);
    return e;
}

int file_lock(const char *path) {
    size_t len = strlen(path) + 8;
    char *name = malloc(len);
    if (!name) {
        errno = ENOMEM;
        return -1;
    }
    snprintf(name, len, "%s.lock", path);
    int fd = open(name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    free(name);
    if (fd < 0) return -1;
    while (flock(fd, LOCK_EX) != 0)
        if (errno != EINTR) {
            int e = errno;
            close(fd);
            errno = e;
            return -1;
        }
    return fd;
}

void file_unlock(int fd) {
    if (fd >= 0) close(fd); /* releases the lock */
}

/* Decimal digits at s (at most 10, the value <= INT_MAX) into *value. @return the end, or
 * NULL when there are none. */
static const char *read_number(const char *s, long *value) {
    size_t n = 0;
    *value = 0;
    while (n < 10 && s[n] >= '0' && s[n] <= '9') *value = *value * 10 + (s[n++] - '0');
    return n == 0 || *value > INT_MAX || (s[n] >= '0' && s[n] <= '9') ? NULL : s + n;
}

/* The process that wrote `name`, a temporary of write_file_atomic (TARGET.tmp.PID.N) for a
 * TARGET that is_target accepts. @return PID, or 0 when the name is not such a temporary. */
static long temporary_owner(const char *name, int (*is_target)(const char *, size_t)) {
    const char *tmp = strstr(name, ".tmp.");
    long pid = 0, n = 0;
    if (!tmp || !is_target(name, (size_t)(tmp - name))) return 0;
    const char *at = read_number(tmp + 5, &pid);
    if (!at || *at != '.' || !(at = read_number(at + 1, &n)) || *at) return 0;
    return pid;
}

size_t remove_stale_temporaries(const char *dir, int (*is_target)(const char *name, size_t len)) {
    DIR *d = opendir(dir);
    size_t removed = 0;
    if (!d) return 0;
    for (struct dirent *e = readdir(d); e; e = readdir(d)) {
        struct stat st;
        long pid = temporary_owner(e->d_name, is_target);
        if (pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
            st.st_uid == geteuid() && unlinkat(dirfd(d), e->d_name, 0) == 0)
            removed++;
    }
    closedir(d);
    return removed;
}

/* Reads at most max_size bytes of an open file descriptor that is a regular file. */
static char *read_open_file(int fd, size_t max_size, size_t *size) {
    struct stat st;
    if (fstat(fd, &st) != 0) return NULL;
    if (!S_ISREG(st.st_mode) || st.st_size < 0 || (uint64_t)st.st_size > max_size) {
        errno = S_ISREG(st.st_mode) ? EFBIG : EINVAL;
        return NULL;
    }
    size_t len = (size_t)st.st_size, got = 0;
    char *data = malloc(len + 1);
    if (!data) return NULL;
    while (got < len) {
        ssize_t n = read(fd, data + got, len - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break; /* shrank while read: what is there, the checks decide */
        got += (size_t)n;
    }
    data[got] = '\0';
    *size = got;
    return data;
}

char *read_regular_file(const char *path, size_t max_size, int follow_links, size_t *size) {
    int flags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | (follow_links ? 0 : O_NOFOLLOW);
    int fd = open(path, flags); /* O_NONBLOCK: a FIFO under this name never blocks the open */
    if (fd < 0) return NULL;
    char *data = read_open_file(fd, max_size, size);
    int e = errno;
    close(fd);
    errno = e;
    return data;
}

/* Who may change what is in a folder: its owner, and anyone with write permission (group or
 * others) unless the sticky bit restricts them to their own files. */
static int others_may_write(const struct stat *st) {
    return (st->st_mode & (S_IWGRP | S_IWOTH)) && !(st->st_mode & S_ISVTX);
}

/* The folders above `real` (an absolute path without links): each owned by root or us, and
 * not open to others' writes (a sticky /tmp is fine). */
static int parents_private(char *real, uid_t uid, char *why, size_t size) {
    struct stat st;
    for (char *slash = strrchr(real, '/'); slash; slash = strrchr(real, '/')) {
        *slash = '\0';
        const char *dir = *real ? real : "/";
        if (stat(dir, &st) != 0) continue;
        if ((st.st_uid != 0 && st.st_uid != uid) || others_may_write(&st)) {
            snprintf(why, size, "the folder above it, %s, is %s", dir,
                     others_may_write(&st) ? "writable by others" : "owned by another user");
            return 0;
        }
        if (!*real) break;
    }
    return 1;
}

int folder_is_private(const char *path, char *why, size_t size, char *resolved,
                      size_t resolved_size) {
    struct stat st;
    char *real = realpath(path, NULL);
    uid_t uid = geteuid();
    int ok = real && stat(real, &st) == 0;
    if (!ok)
        snprintf(why, size, "cannot examine it: %s", strerror(errno));
    else if (!S_ISDIR(st.st_mode))
        snprintf(why, size, "not a folder"), ok = 0;
    else if (st.st_uid != uid)
        snprintf(why, size, "owned by uid %u, not by this process's uid %u", (unsigned)st.st_uid,
                 (unsigned)uid),
            ok = 0;
    else if (st.st_mode & (S_IWGRP | S_IWOTH))
        snprintf(why, size, "writable by others (mode %03o): chmod go-w", st.st_mode & 0777),
            ok = 0;
    if (ok && resolved && strlen(real) >= resolved_size)
        snprintf(why, size, "its real path is longer than %zu bytes", resolved_size - 1), ok = 0;
    else if (ok && resolved)
        memcpy(resolved, real, strlen(real) + 1); /* before parents_private cuts it short */
    if (ok) ok = parents_private(real, uid, why, size);
    free(real);
    return ok;
}

int make_private_dirs(const char *path) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) return -1;
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0700) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(tmp, 0700) == 0 || errno == EEXIST ? 0 : -1;
}
