/* Output files: replaced atomically when regular, written in place when a device or FIFO, a
 * command's outputs committed together, stale temporaries removed (see outfile.h). */
#define _XOPEN_SOURCE 700 /* realpath, beside the build's _POSIX_C_SOURCE */

#include "outfile.h"

#include "interrupt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
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

/* The file a new output at `path` creates: path itself, or where the symbolic links at path
 * lead when they lead nowhere yet (a dangling link's target is created, the link kept).
 * @return 0 or errno. */
static int new_file_path(const char *path, char out[PATH_MAX]) {
    char at[PATH_MAX], link[PATH_MAX];
    snprintf(at, sizeof at, "%s", path);
    for (int hops = 0; hops < 40; hops++) { /* Linux's limit on links followed */
        struct stat st;
        if (lstat(at, &st) != 0 || !S_ISLNK(st.st_mode)) {
            memcpy(out, at, sizeof at); /* no link (more): the file to create */
            return 0;
        }
        ssize_t n = readlink(at, link, sizeof link - 1);
        if (n < 0) return errno;
        link[n] = '\0';
        const char *slash = strrchr(at, '/');
        int dir_len = link[0] == '/' || !slash ? 0 : (int)(slash - at) + 1; /* relative: beside */
        if ((size_t)dir_len + (size_t)n >= sizeof at) return ENAMETOOLONG;
        memmove(at + dir_len, link, (size_t)n + 1);
    }
    return ELOOP;
}

int outfile_resolve(const char *path, outfile_target *target) {
    struct stat st, link;
    memset(target, 0, sizeof *target);
    if (!path) return EINVAL;
    if (strlen(path) >= sizeof target->path) return ENAMETOOLONG;
    snprintf(target->path, sizeof target->path, "%s", path);
    if (stat(path, &st) != 0) /* a new file */
        return errno == ENOENT ? new_file_path(path, target->path) : errno;
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

/* A character device or FIFO opened to be written where it is. Opening without blocking fails
 * at once (ENXIO) for a FIFO no process reads; then the writes block as usual (a slow reader).
 * @return the descriptor, or -1 with *e set. */
static int open_in_place(const char *path, int *e) {
    struct stat st;
    int fd = open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        *e = err == ENXIO && stat(path, &st) == 0 && S_ISFIFO(st.st_mode) ? OUTFILE_NO_READER : err;
        return -1;
    }
    int flags = fcntl(fd, F_GETFL);
    if (fstat(fd, &st) != 0 || !(S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)))
        *e = OUTFILE_CHANGED; /* never write into a regular file without the temporary one */
    else if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
        *e = errno;
    else
        return fd;
    close(fd);
    return -1;
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

/* ---------------------------------------------------------------- stale temporaries */

/* Decimal digits at s (at most 10, the value <= INT_MAX) into *value. @return the end, or
 * NULL when there are none. */
static const char *read_number(const char *s, long *value) {
    size_t n = 0;
    *value = 0;
    while (n < 10 && s[n] >= '0' && s[n] <= '9') *value = *value * 10 + (s[n++] - '0');
    return n == 0 || *value > INT_MAX || (s[n] >= '0' && s[n] <= '9') ? NULL : s + n;
}

/* The process that made a temporary whose name is its target's followed by `suffix`:
 * ".tmp.PID.N", ".run-PID" or ".run-PID.tmp.PID.N" (the same PID twice). @return PID, or 0
 * when the suffix is none of these. */
static long temporary_owner(const char *suffix) {
    long run_pid = 0, pid = 0, n = 0;
    if (strncmp(suffix, ".run-", 5) == 0) {
        if (!(suffix = read_number(suffix + 5, &run_pid))) return 0;
        if (!*suffix) return run_pid;
    }
    if (strncmp(suffix, ".tmp.", 5) != 0 || !(suffix = read_number(suffix + 5, &pid))) return 0;
    if (*suffix != '.' || !(suffix = read_number(suffix + 1, &n)) || *suffix) return 0;
    return run_pid && run_pid != pid ? 0 : pid;
}

/* No process `pid` exists (another user's live process answers EPERM, not ESRCH). */
static int process_gone(long pid) {
    return pid > 0 && kill((pid_t)pid, 0) == -1 && errno == ESRCH;
}

/* Removes the temporaries that processes now gone left beside `target` (a regular file's
 * path): regular files of this user, named as temporary_owner reads them. */
static void remove_stale_temporaries(const char *target) {
    char dir[PATH_MAX];
    const char *slash = strrchr(target, '/'), *name = slash ? slash + 1 : target;
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - target) + 1 : 1, slash ? target : ".");
    DIR *d = opendir(dir);
    if (!d) return;
    size_t len = strlen(name);
    for (struct dirent *e = readdir(d); e; e = readdir(d)) {
        struct stat st;
        if (strncmp(e->d_name, name, len) != 0) continue;
        long pid = temporary_owner(e->d_name + len);
        if (!process_gone(pid)) continue;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
            st.st_uid == geteuid())
            unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
}

/* ---------------------------------------------------------------- staging and committing */

int outfile_prepare(const char *path, outfile_staged *s) {
    static atomic_uint writes; /* n of path.tmp.<pid>.<n>: threads never share a name */
    memset(s, 0, sizeof *s);
    s->registration = -1;
    s->fd = -1;
    int e = outfile_resolve(path, &s->target);
    if (e != 0) return e;
    if (s->target.in_place) { /* opened now: a FIFO without a reader fails before any write */
        s->fd = open_in_place(s->target.path, &e);
        return e;
    }
    remove_stale_temporaries(s->target.path);
    snprintf(s->tmp, sizeof s->tmp, "%s.tmp.%ld.%u", s->target.path, (long)getpid(),
             atomic_fetch_add(&writes, 1));
    s->registration = interrupt_track(s->tmp);
    return 0;
}

int outfile_stage(outfile_staged *s, const outfile_part *parts, size_t num_parts) {
    for (size_t i = 0; i < num_parts; i++)
        if (parts[i].size && !parts[i].data) return EINVAL;
    if (s->target.in_place) {
        int e = s->fd < 0 ? EBADF : write_parts_fd(s->fd, parts, num_parts);
        if (s->fd >= 0 && close(s->fd) != 0 && e == 0) e = errno;
        s->fd = -1;
        return e;
    }
    int e = write_new_file(s->tmp, parts, num_parts);
    s->pending = e == 0;
    return e;
}

void outfile_mark_staged(outfile_staged *s) {
    s->pending = !s->target.in_place;
}

int outfile_commit(outfile_staged *s, size_t n, size_t *failed) {
    interrupt_section section;
    int e = 0;
    interrupt_defer_begin(&section);
    for (size_t i = 0; i < n && e == 0; i++) {
        if (!s[i].pending) continue;
        if (rename(s[i].tmp, s[i].target.path) != 0) {
            e = errno;
            *failed = i;
            break;
        }
        s[i].pending = 0;
    }
    interrupt_defer_end(&section);
    return e;
}

void outfile_discard(outfile_staged *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (s[i].pending) unlink(s[i].tmp);
        if (s[i].fd >= 0) close(s[i].fd);
        s[i].pending = 0, s[i].fd = -1;
        interrupt_untrack(s[i].registration);
        s[i].registration = -1;
    }
}

int outfile_write(const char *path, const outfile_part *parts, size_t num_parts) {
    outfile_staged s;
    size_t failed = 0;
    int e = outfile_prepare(path, &s);
    if (e == 0) e = outfile_stage(&s, parts, num_parts);
    if (e == 0) e = outfile_commit(&s, 1, &failed);
    outfile_discard(&s, 1);
    return e;
}
