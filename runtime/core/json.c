/* The small JSON reader and writer (json.h). */
#include "core/json.h"
#include "core/core.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

void json_skip_space(json_reader *r) {
    while (r->at < r->end && isspace((unsigned char)*r->at)) r->at++;
}

int json_expect(json_reader *r, char c) {
    json_skip_space(r);
    if (r->at < r->end && *r->at == c) {
        r->at++;
        return 1;
    }
    r->failed = 1;
    return 0;
}

/* A string into out (escapes \" \\ \/ \n \t kept simple; others copied as they are). */
int json_read_string(json_reader *r, char *out, size_t size) {
    size_t n = 0;
    if (!json_expect(r, '"')) return 0;
    while (r->at < r->end && *r->at != '"') {
        char c = *r->at++;
        if (c == '\\' && r->at < r->end) {
            c = *r->at++;
            c = c == 'n' ? '\n' : c == 't' ? '\t' : c;
        }
        if (n + 1 < size) out[n++] = c;
    }
    out[n] = '\0';
    return json_expect(r, '"');
}

/* Fails the reader when a loop's step left it where it was (a value that does not start as a
 * value should, such as a '}' inside an array): such a loop would never end. */
static void fail_unless_moved(json_reader *r, const char *before) {
    if (r->at == before) r->failed = 1;
}

/* Skips one value of any kind (for keys we do not know); fails on one that is empty (a NUL byte
 * or a closing bracket where a value should be). */
void json_skip_value(json_reader *r, int depth) {
    json_skip_space(r);
    if (r->at >= r->end || depth > 32) {
        r->failed = 1;
        return;
    }
    char c = *r->at;
    char text[8];
    if (c == '"') {
        json_read_string(r, text, sizeof text);
    } else if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        r->at++;
        json_skip_space(r);
        while (!r->failed && r->at < r->end && *r->at != close) {
            const char *before = r->at;
            if (c == '{' && json_read_string(r, text, sizeof text)) json_expect(r, ':');
            json_skip_value(r, depth + 1);
            json_skip_space(r);
            if (r->at < r->end && *r->at == ',') r->at++;
            json_skip_space(r);
            fail_unless_moved(r, before);
        }
        json_expect(r, close);
    } else {
        const char *start = r->at;
        while (r->at < r->end && *r->at != '\0' && !strchr(",}] \t\r\n", *r->at)) r->at++;
        fail_unless_moved(r, start);
    }
}

void json_next_item(json_reader *r) {
    json_skip_space(r);
    if (r->at < r->end && *r->at == ',') r->at++;
    json_skip_space(r);
}

void json_read_object(json_reader *r,
                      void (*read_value)(json_reader *r, const char *key, void *target),
                      void *target) {
    if (!json_expect(r, '{')) return;
    json_skip_space(r);
    while (!r->failed && r->at < r->end && *r->at != '}') {
        const char *before = r->at;
        char key[64];
        if (!json_read_string(r, key, sizeof key) || !json_expect(r, ':')) return;
        json_skip_space(r);
        read_value(r, key, target);
        json_next_item(r);
        fail_unless_moved(r, before);
    }
    json_expect(r, '}');
}

/* The array's entries, from its '[' on, appended to *entries (*count of them, room for
 * *capacity); more than JSON_MAX_ENTRIES is a fault. */
static void read_array(json_reader *r, size_t entry_size,
                       void (*read_entry)(json_reader *r, void *entry), void **entries,
                       size_t *count, size_t *capacity) {
    if (!json_expect(r, '[')) return;
    json_skip_space(r);
    while (!r->failed && r->at < r->end && *r->at != ']') {
        const char *before = r->at;
        if (*count == JSON_MAX_ENTRIES) {
            r->failed = 1;
            break;
        }
        if (*count == *capacity) {
            size_t more = *capacity ? 2 * *capacity : 16;
            void *grown = realloc(*entries, more * entry_size);
            if (!grown) break;
            *entries = grown, *capacity = more;
        }
        read_entry(r, (unsigned char *)*entries + *count * entry_size);
        if (!r->failed) (*count)++;
        json_next_item(r);
        fail_unless_moved(r, before);
    }
    json_expect(r, ']');
}

/* What json_read_entries reads into: the entries array, and how to read one entry. */
typedef struct entries_target {
    size_t entry_size;
    void (*read_entry)(json_reader *r, void *entry);
    void *entries;
    size_t count, capacity;
} entries_target;

static void read_file_value(json_reader *r, const char *key, void *target) {
    entries_target *t = target;
    if (strcmp(key, "entries") == 0)
        read_array(r, t->entry_size, t->read_entry, &t->entries, &t->count, &t->capacity);
    else
        json_skip_value(r, 1);
}

void *json_read_entries(const char *text, size_t size, size_t entry_size,
                        void (*read_entry)(json_reader *r, void *entry), size_t *count,
                        size_t *fault, const char *what) {
    json_reader r = {text, text + size, 0};
    entries_target t = {entry_size, read_entry, NULL, 0, 0};
    json_read_object(&r, read_file_value, &t);
    if (r.failed)
        log_msg("%s: malformed near byte %zu; entries after it ignored", what,
                (size_t)(r.at - text));
    if (fault) *fault = r.failed ? (size_t)(r.at - text) + 1 : 0;
    *count = t.count;
    return t.entries;
}

/* ---------------------------------------------------------------- writing */

void json_write_string(FILE *f, const char *text) {
    fputc('"', f);
    for (const char *c = text; *c; c++) {
        if (*c == '"' || *c == '\\')
            fprintf(f, "\\%c", *c);
        else if ((unsigned char)*c >= 0x20)
            fputc(*c, f);
    }
    fputc('"', f);
}

char *json_format_entries(const char *format, const void *entries, size_t count, size_t entry_size,
                          void (*write_entry)(FILE *f, const void *entry), size_t *size) {
    char *text = NULL;
    FILE *f = open_memstream(&text, size);
    if (!f) return NULL;
    fprintf(f, "{\"%s\": 1, \"written_by\": \"clattn " CLATTN_VERSION_STRING "\", \"entries\": [\n",
            format);
    for (size_t i = 0; i < count; i++) {
        write_entry(f, (const char *)entries + i * entry_size);
        fputs(i + 1 < count ? ",\n" : "\n", f);
    }
    fputs("]}\n", f);
    return fclose(f) == 0 ? text : (free(text), NULL);
}
