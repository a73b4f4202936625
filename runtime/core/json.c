/* The small JSON reader (json.h). */
#include "core/json.h"

#include <ctype.h>
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

/* Skips one value of any kind (for keys we do not know). */
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
            if (c == '{' && json_read_string(r, text, sizeof text)) json_expect(r, ':');
            json_skip_value(r, depth + 1);
            json_skip_space(r);
            if (r->at < r->end && *r->at == ',') r->at++;
            json_skip_space(r);
        }
        json_expect(r, close);
    } else {
        while (r->at < r->end && !strchr(",}] \t\r\n", *r->at)) r->at++;
    }
}
