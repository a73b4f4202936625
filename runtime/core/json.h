/*
 * A small JSON reader for the library's own files (tuning.json, verdicts.json): objects,
 * arrays, strings and numbers read in place from a text in memory, with a failure flag
 * instead of errors. What it does not know it skips.
 */
#ifndef CLATTN_JSON_H
#define CLATTN_JSON_H

#include <stddef.h>

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

#endif
