/*
 * How the program writes an output file, whatever the path names:
 *
 *  - a regular file, new or existing (through a symbolic link: the link's target), is written
 *    to a temporary file beside it, TARGET.tmp.PID.N, and renamed over it, so a reader never
 *    sees half a file and a failed write leaves the old one as it was;
 *  - an existing character device (/dev/null, /dev/stdout) or FIFO is written in place, since
 *    renaming over it would replace the node with a regular file; a FIFO only while a process
 *    has it open for reading (a write never waits for a reader that may never come);
 *  - anything else (a folder, a block device, a socket) is refused.
 *
 * The outputs of one command are staged, then committed together: the renames run in one
 * section that SIGINT and SIGTERM wait for (interrupt.h), and the temporaries are registered
 * so that a signal removes them. A temporary that a killed process left (SIGKILL, a crash) is
 * removed by the next write of the same output: beside TARGET, the regular files of this user
 * named TARGET.tmp.PID.N, or TARGET.run-PID and TARGET.run-PID.tmp.PID.N (what `clattn run`
 * staged before), where no process PID exists (kill(PID, 0) fails with ESRCH).
 */
#ifndef CLATTN_HOSTIO_OUTFILE_H
#define CLATTN_HOSTIO_OUTFILE_H

#include <limits.h>
#include <stddef.h>

/* Refusals, beside errno values (which are positive). */
#define OUTFILE_NOT_WRITABLE (-2) /* a folder, block device or socket */
#define OUTFILE_NO_READER    (-3) /* a FIFO that no process reads */
#define OUTFILE_CHANGED      (-4) /* the path changed type between the check and the write */

/* Where an output goes and how. */
typedef struct outfile_target {
    int in_place;        /* a character device or FIFO: written where it is */
    char path[PATH_MAX]; /* the file to write: a symbolic link's target for a regular file */
} outfile_target;

/* Decides how `path` is written. @return 0, or an errno value or OUTFILE_* code. */
int outfile_resolve(const char *path, outfile_target *target);

/* One piece of an output, written in order. */
typedef struct outfile_part {
    const void *data;
    size_t size;
} outfile_part;

/* Writes the parts to `path` as the header comment says. @return 0, or an errno value or
 * OUTFILE_* code (outfile_strerror says what it means); temporary files are removed. */
int outfile_write(const char *path, const outfile_part *parts, size_t num_parts);

/* One file of a set written together: prepared, staged, then committed with the others. */
typedef struct outfile_staged {
    outfile_target target;
    char tmp[PATH_MAX + 64]; /* a regular file's temporary, beside the target; "" in place */
    int registration;        /* of tmp with interrupt_track, or -1 */
    int pending;             /* tmp holds the output, not yet renamed */
    int fd;                  /* in place: the device or FIFO, open from prepare to stage; or -1 */
} outfile_staged;

/* Resolves `path` (outfile_resolve); for a regular file, removes the stale temporaries beside
 * it and names and registers a new temporary, not created yet; a device or FIFO is opened (a
 * FIFO that no process reads is refused now, before any output of the set is written).
 * @return 0 or a code. */
int outfile_prepare(const char *path, outfile_staged *s);
/* Writes the parts into the temporary (then pending), or in place for a device or FIFO.
 * @return 0 or a code; a failed temporary is removed. */
int outfile_stage(outfile_staged *s, const outfile_part *parts, size_t num_parts);
/* Marks a temporary that something else (another program) wrote as pending. */
void outfile_mark_staged(outfile_staged *s);
/* Renames every pending temporary over its target, in order, in one section that SIGINT and
 * SIGTERM wait for. Stops at the first failure. @return 0, or errno with *failed its index. */
int outfile_commit(outfile_staged *s, size_t n, size_t *failed);
/* Removes the temporaries still pending, closes what is open, and ends every registration. */
void outfile_discard(outfile_staged *s, size_t n);

/* The text of a code outfile_write or outfile_resolve returned. */
const char *outfile_strerror(int code);

#endif
