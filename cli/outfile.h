/*
 * How the program writes an output file, whatever the path names:
 *
 *  - a regular file, new or existing (through a symbolic link: the link's target), is written
 *    to a temporary file beside it and renamed over it, so a reader never sees half a file and
 *    a failed write leaves the old one as it was;
 *  - an existing character device (/dev/null, /dev/stdout) or FIFO is written in place, since
 *    renaming over it would replace the node with a regular file; a FIFO only while a process
 *    has it open for reading (a write never waits for a reader that may never come);
 *  - anything else (a folder, a block device, a socket) is refused.
 */
#ifndef CLATTN_CLI_OUTFILE_H
#define CLATTN_CLI_OUTFILE_H

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

/* The text of a code outfile_write or outfile_resolve returned. */
const char *outfile_strerror(int code);

#endif
