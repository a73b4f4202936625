/* See textbuf.h. */
#include "textbuf.h"

#include "message.h"
#include "npy.h" /* write_output_atomic */
#include "outfile.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int reserve(textbuf *t, size_t extra) {
    if (t->failed) return 0;
    if (t->len + extra + 1 <= t->cap) return 1;
    size_t cap = t->cap ? t->cap : 4096;
    while (cap < t->len + extra + 1) cap *= 2;
    char *data = realloc(t->data, cap);
    if (!data) {
        t->failed = 1;
        return 0;
    }
    t->data = data;
    t->cap = cap;
    return 1;
}

void textbuf_printf(textbuf *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (need < 0 || !reserve(t, (size_t)need)) return;
    va_start(ap, fmt);
    vsnprintf(t->data + t->len, (size_t)need + 1, fmt, ap);
    va_end(ap);
    t->len += (size_t)need;
}

void textbuf_json_string(textbuf *t, const char *s) {
    textbuf_printf(t, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            textbuf_printf(t, "\\%c", c);
        else if (c < 0x20)
            textbuf_printf(t, "\\u%04x", c);
        else
            textbuf_printf(t, "%c", c);
    }
    textbuf_printf(t, "\"");
}

void textbuf_json_device(textbuf *t, size_t index) {
    clattn_device_info d;
    clattn_device_info_init(&d);
    if (clattn_device_get_info(index, &d) != CLATTN_SUCCESS) return;
    textbuf_printf(t, "{\"index\": %zu, \"name\": ", d.index);
    textbuf_json_string(t, d.name);
    textbuf_printf(t, ", \"vendor\": ");
    textbuf_json_string(t, d.vendor);
    textbuf_printf(t, ", \"platform\": ");
    textbuf_json_string(t, d.platform_name);
    textbuf_printf(t, ", \"platform_version\": ");
    textbuf_json_string(t, d.platform_version);
    textbuf_printf(t, ", \"driver\": ");
    textbuf_json_string(t, d.driver_version);
    textbuf_printf(t, ", \"opencl_c\": ");
    textbuf_json_string(t, d.opencl_c_version);
    textbuf_printf(t,
                   ", \"type\": \"%s\", \"compute_units\": %u, \"global_mem_bytes\": %llu, "
                   "\"local_mem_bytes\": %llu, \"max_alloc_bytes\": %llu, "
                   "\"max_work_group_size\": %zu, \"fp16\": %s, \"subgroups\": %s}",
                   d.type & CL_DEVICE_TYPE_GPU   ? "gpu"
                   : d.type & CL_DEVICE_TYPE_CPU ? "cpu"
                                                 : "other",
                   d.compute_units, (unsigned long long)d.global_mem_bytes,
                   (unsigned long long)d.local_mem_bytes, (unsigned long long)d.max_alloc_bytes,
                   d.max_work_group_size, d.has_fp16 ? "true" : "false",
                   d.has_subgroups ? "true" : "false");
}

int textbuf_write(const textbuf *t, const char *path, const char *command) {
    if (t->failed) {
        cli_error(command, "%s: out of memory while formatting", path);
        return 1;
    }
    int err = write_output_atomic(path, t->data ? t->data : "", t->len);
    if (err) {
        cli_error(command, "%s: cannot write: %s", path, outfile_strerror(err));
        return 1;
    }
    return 0;
}

/* ---------------------------------------------------------------- sets of outputs */

void output_set_init(output_set *set, const char *command) {
    memset(set, 0, sizeof *set);
    set->command = command;
}

/* The next file of the set, prepared (outfile_prepare). NULL after a failure (said). */
static outfile_staged *set_prepare(output_set *set, const char *path) {
    if (set->failed) return NULL;
    if (set->count == set->capacity) {
        size_t capacity = set->capacity ? 2 * set->capacity : 8;
        outfile_staged *files = realloc(set->files, capacity * sizeof *files);
        if (files) set->files = files;
        char **paths = files ? realloc(set->paths, capacity * sizeof *paths) : NULL;
        if (paths) set->paths = paths, set->capacity = capacity;
        if (!paths) {
            cli_error(set->command, "%s: out of memory", path);
            set->failed = 1;
            return NULL;
        }
    }
    outfile_staged *file = &set->files[set->count];
    int e = outfile_prepare(path, file);
    set->paths[set->count++] = strdup(path); /* file: prepared, or cleared: discardable */
    if (e == 0) return file;
    cli_error(set->command, "%s: cannot write: %s", path,
              e == EISDIR ? "is a folder, not a file" : outfile_strerror(e));
    set->failed = 1;
    return NULL;
}

int output_set_text(output_set *set, const char *path, const textbuf *text) {
    outfile_staged *file = set_prepare(set, path);
    if (!file) return 1;
    outfile_part part = {text->data ? text->data : "", text->len};
    int e = text->failed ? ENOMEM : outfile_stage(file, &part, 1);
    if (e == 0) return 0;
    cli_error(set->command, "%s: %s", path,
              text->failed ? "out of memory while formatting" : outfile_strerror(e));
    set->failed = 1;
    return 1;
}

const char *output_set_reserve(output_set *set, const char *path) {
    outfile_staged *file = set_prepare(set, path);
    if (!file) return NULL;
    return file->target.in_place ? file->target.path : file->tmp;
}

void output_set_made(output_set *set) {
    if (set->count) outfile_mark_staged(&set->files[set->count - 1]);
}

int output_set_commit(output_set *set) {
    size_t failed = 0;
    int e = set->failed ? 0 : outfile_commit(set->files, set->count, &failed);
    if (e != 0)
        cli_error(set->command, "%s: cannot write: %s",
                  set->paths[failed] ? set->paths[failed] : "an output", strerror(e));
    outfile_discard(set->files, set->count);
    int rc = set->failed || e != 0;
    for (size_t i = 0; i < set->count; i++) free(set->paths[i]);
    free(set->files);
    free(set->paths);
    memset(set, 0, sizeof *set);
    return rc;
}

int check_output_file(const char *command, const char *option, const char *path) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        cli_error(command, "--%s %s: is a folder, not a file", option, path);
        return 1;
    }
    const char *slash = strrchr(path, '/');
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + 1 : 1, slash ? path : ".");
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        cli_error(command, "--%s %s: the folder %s does not exist", option, path, dir);
        return 1;
    }
    return 0;
}

void textbuf_free(textbuf *t) {
    free(t->data);
    memset(t, 0, sizeof *t);
}

int make_output_dir(const char *command, const char *option, const char *dir) {
    const size_t longest = OUTPUT_PATH_MAX - OUTPUT_NAME_MAX;
    if (strlen(dir) > longest) {
        cli_error(command,
                  "--%s: the folder's name is %zu bytes long; at most %zu leave room for "
                  "the names of the files written into it",
                  option, strlen(dir), longest);
        return 1;
    }
    struct stat st;
    if (mkdir(dir, 0755) == 0) return 0;
    int e = errno;
    if (e == EEXIST && stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) return 0;
    cli_error(command, "--%s %s: %s%s", option, dir,
              e == EEXIST ? "exists and is not a folder" : "cannot create the folder: ",
              e == EEXIST ? "" : strerror(e));
    return 1;
}
