/* Output files: replaced atomically when regular, written in place when a device or FIFO (see
 * outfile.h). */
#define _XOPEN_SOURCE 700 /* realpath, beside the build's _POSIX_C_SOURCE */

#include "outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *outfile_strerror(int code) {
    switch (code) {
    case OUTFILE_NOT_WRITABLE:
        return "not a regular file, character device or FIFO (a block device or a socket): "
               "refusing to write into it";
    case OUTFILE_NO_READER:
        return "a FIFO that no process is reading: refusing to wait for a reader";
    case OUTFILE_CHANGED:
        return "it changed from one kind of file to another while it was being written";
    default:
        return strerror(code);
    }
}

int outfile_resolve(const char *path, outfile_target *target) {
    struct stat st, link;
    memset(target, 0, sizeof *target);
    if (!path) return EINVAL;
    if (strlen(path) >= sizeof target->path) return ENAMETOOLONG;
    snprintf(target->path, sizeof target->path, "%s", path);
    if (stat(path, &st) != 0) return errno == ENOENT ? 0 : errno; /* a new file */
    if (S_ISDIR(st.st_mode)) return EISDIR;
    if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
        target->in_place = 1;
        return 0;
    }
    if (!S_ISREG(st.st_mode)) return OUTFILE_NOT_WRITABLE;
    if (lstat(path, &link) != 0 || !S_ISLNK(link.st_mode)) return 0;
    char *real = realpath(path, NULL); /* replace the link's target, not the link */
    if (!real) return errno;
    int fits = strlen(real) < sizeof target->path;
    if (fits) snprintf(target->path, sizeof target->path, "%s", real);
    free(real);
    return fits ? 0 : ENAMETOOLONG;
}

/* Writes every part to fd. @return 0 or errno. */
static int write_parts_fd(int fd, const outfile_part *parts, size_t num_parts) {
    for (size_t i = 0; i < num_parts; i++) {
        const unsigned char *at = parts[i].data;
        size_t left = parts[i].size;
        while (left > 0) {
            ssize_t n = write(fd, at, left);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) return n < 0 ? errno : EIO;
            at += n, left -= (size_t)n;
        }
    }
    return 0;
}

/* A character device or FIFO, written where it is. Opening without blocking fails at once
 * (ENXIO) for a FIFO no process reads; then the writes block as usual (a slow reader). */
static int write_in_place(const char *path, const outfile_part *parts, size_t num_parts) {
    struct stat st;
    int fd = open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return e == ENXIO && stat(path, &st) == 0 && S_ISFIFO(st.st_mode) ? OUTFILE_NO_READER : e;
    }
    int e = 0, flags = fcntl(fd, F_GETFL);
    if (fstat(fd, &st) != 0 || !(S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)))
        e = OUTFILE_CHANGED; /* never write into a regular file without the temporary one */
    else if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
        e = errno;
    if (e == 0) e = write_parts_fd(fd, parts, num_parts);
    if (close(fd) != 0 && e == 0) e = errno;
    return e;
}

/* Creates `path` (never one that exists, nor through a link) holding the parts; removes it on
 * failure. @return 0 or errno. */
static int write_new_file(const char *path, const outfile_part *parts, size_t num_parts) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0) return errno;
    int e = write_parts_fd(fd, parts, num_parts);
    if (close(fd) != 0 && e == 0) e = errno;
    if (e != 0) unlink(path);
    return e;
}

/* `path.tmp.<pid>.<n>`, n counting this process's writes so that threads writing the same path
 * never share a temporary file, renamed over `path` once complete. */
static int write_replacing(const char *path, const outfile_part *parts, size_t num_parts) {
    static atomic_uint writes;
    size_t len = strlen(path) + 48;
    char *tmp = malloc(len);
    if (!tmp) return ENOMEM;
    snprintf(tmp, len, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&writes, 1));
    int e = write_new_file(tmp, parts, num_parts);
    if (e == 0 && rename(tmp, path) != 0) {
        e = errno;
        unlink(tmp);
    }
    free(tmp);
    return e;
}

int outfile_write(const char *path, const outfile_part *parts, size_t num_parts) {
    outfile_target target;
    for (size_t i = 0; i < num_parts; i++)
        if (parts[i].size && !parts[i].data) return EINVAL;
    int e = outfile_resolve(path, &target);
    if (e != 0) return e;
    return target.in_place ? write_in_place(target.path, parts, num_parts)
                           : write_replacing(target.path, parts, num_parts);
}
