/* A growable text buffer for the program's CSV and JSON outputs, written whole and atomically
 * (a temporary file renamed into place) so that no output is ever half-written, alone or as a
 * set committed together; and the folders outputs go into. */
#ifndef CLATTN_HOSTIO_TEXTBUF_H
#define CLATTN_HOSTIO_TEXTBUF_H

#include "clattn.h"

#include <stddef.h>

typedef struct textbuf {
    char *data;
    size_t len, cap;
    int failed; /* an allocation failed: the text is incomplete */
} textbuf;

void textbuf_printf(textbuf *t, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* A JSON string literal, quoted and escaped. */
void textbuf_json_string(textbuf *t, const char *s);
/* A JSON object describing device `index` of clattn's device list (nothing when it is not
 * one). */
void textbuf_json_device(textbuf *t, size_t index);
/* Writes the text to `path` atomically; prints "clattn CMD: PATH: why" on failure.
 * @return 0 or 1. */
int textbuf_write(const textbuf *t, const char *path, const char *command);
void textbuf_free(textbuf *t);

/* Outputs of one command written together, all or none (outfile.h): each staged beside its
 * target, then all renamed in one section that SIGINT and SIGTERM wait for. A file may also
 * come from another program (output_set_reserve names where it writes). After a failure,
 * said on stderr as "clattn CMD: PATH: why", nothing more is staged. */
typedef struct output_set {
    const char *command;
    struct outfile_staged *files;
    char **paths; /* copies of the paths, for messages */
    size_t count, capacity;
    int failed;
} output_set;

void output_set_init(output_set *set, const char *command);
/* Stages `text` as PATH's new content. @return 0 or 1 (said). */
int output_set_text(output_set *set, const char *path, const textbuf *text);
/* Prepares PATH for another program to write: @return the name it should write (a
 * temporary, or PATH itself when a device or FIFO), or NULL (said). output_set_made then
 * marks it written; a file reserved and not made is left out of the commit. */
const char *output_set_reserve(output_set *set, const char *path);
void output_set_made(output_set *set);
/* Commits what is staged (unless something failed), removes what is left, frees the set.
 * @return 0, or 1 when anything failed (said). */
int output_set_commit(output_set *set);

/* The paths of the files written into an output folder are formatted in buffers of
 * OUTPUT_PATH_MAX bytes, with names of at most OUTPUT_NAME_MAX bytes: make_output_dir refuses a
 * folder whose name would not leave them room. */
#define OUTPUT_PATH_MAX 1024
#define OUTPUT_NAME_MAX 64

/* Creates the folder `dir` named by --`option` (its parent must exist), or accepts it when it
 * already is one; prints "clattn CMD: --OPTION DIR: why" otherwise (a name longer than
 * OUTPUT_PATH_MAX - OUTPUT_NAME_MAX bytes is refused). Outputs call it before the work, so that
 * a bad folder fails at once. @return 0 or 1. */
int make_output_dir(const char *command, const char *option, const char *dir);

/* Checks, before the work, that the file named by --`option` can be written later: it is not
 * a folder and its folder exists. Prints "clattn CMD: --OPTION PATH: why". @return 0 or 1. */
int check_output_file(const char *command, const char *option, const char *path);

#endif
