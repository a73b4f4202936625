/* Whole files written atomically (the program cache's entries, tuning.json), and folders. */
#define _POSIX_C_SOURCE 200809L /* getpid */

#include "core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    snprintf(tmp, len, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&writes, 1));
    int e = write_new_file(tmp, data, size);
    if (e == 0 && rename(tmp, path) != 0) {
        e = errno;
        unlink(tmp);
    }
    free(tmp);
    return e;
}

int make_dirs(const char *path) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(tmp, 0755) == 0 || errno == EEXIST ? 0 : -1;
}
