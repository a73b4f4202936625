/*
 * A small JSON reader and writer for the library's own files (tuning.json, verdicts.json):
 * objects, arrays, strings and numbers read in place from a text in memory, with a failure flag
 * instead of errors (what it does not know it skips); and the files' text written back, an
 * entry a line.
 */
#ifndef CLATTN_JSON_H
#define CLATTN_JSON_H

#include <stddef.h>
#include <stdio.h>

typedef struct json_reader {
    const char *at, *end;
    int failed; /* set by the first thing that did not parse; later calls keep it */
} json_reader;

void json_skip_space(json_reader *r);
/* Takes character c after any space, or sets failed. @return 1 when it was there. */
int json_expect(json_reader *r, char c);
/* A string into out (escapes \" \\ \/ \n \t kept simple; others copied as they are),
 * truncated to size. @return 1, or 0 with failed set. */
int json_read_string(json_reader *r, char *out, size_t size);
/* Skips one value of any kind (for keys not known). */
void json_skip_value(json_reader *r, int depth);
/* After an item of an object or array: space, a comma if there is one, space. */
void json_next_item(json_reader *r);
/* One {"key": value, ...} object: read_value is called with each key (up to 63 bytes) and the
 * reader at its value, which it reads, or skips with json_skip_value. Stops at the first fault
 * (failed set). */
void json_read_object(json_reader *r,
                      void (*read_value)(json_reader *r, const char *key, void *target),
                      void *target);
/* The entries of a file's text {"entries": [E, ...], ...} (other keys skipped): read_entry reads
 * one E into `entry`, entry_size bytes. A malformed text, or one of more than JSON_MAX_ENTRIES
 * entries (the files hold dozens; thousands of empty ones would take memory far past the file's
 * size, and written back could pass the readers' size limit), keeps the entries before the fault
 * and logs "<what>: malformed near byte N"; *fault (when not NULL) is then N + 1, else 0.
 * @return the entries, malloc'ed (NULL when none), and their *count. */
#define JSON_MAX_ENTRIES 4096
void *json_read_entries(const char *text, size_t size, size_t entry_size,
                        void (*read_entry)(json_reader *r, void *entry), size_t *count,
                        size_t *fault, const char *what);

/* A JSON string: quotes and backslashes escaped, control characters dropped. */
void json_write_string(FILE *f, const char *text);
/* The text json_read_entries reads: {"<format>": 1, "written_by": "clattn <version>", "entries":
 * [...]}, write_entry writing each of the `count` entries (entry_size bytes apart) as one
 * object on its own line. @return the text, malloc'ed, and its *size; NULL when out of memory. */
char *json_format_entries(const char *format, const void *entries, size_t count, size_t entry_size,
                          void (*write_entry)(FILE *f, const void *entry), size_t *size);

#endif
