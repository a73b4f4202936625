/* See args.h. */
#define _XOPEN_SOURCE 700 /* realpath, beside the build's _POSIX_C_SOURCE */
#include "args.h"
#include "outfile.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const cli_option *find_option(const cli_args *args, const char *name, size_t len,
                                     size_t *index) {
    for (size_t i = 0; i < args->num_options; i++) {
        if (strlen(args->options[i].name) == len &&
            strncmp(args->options[i].name, name, len) == 0) {
            *index = i;
            return &args->options[i];
        }
    }
    return NULL;
}

/* An option's value must be there and non-empty; a separate word starting with "--" is the next
 * option, not a value (a value that starts with "--" is written --opt=VALUE). @return 0 or -1. */
static int check_value(const char *command, const cli_option *opt, const char *value,
                       int separate) {
    if (!opt->value) return 0;
    if (!value || (separate && strncmp(value, "--", 2) == 0)) {
        cli_error(command, "option --%s needs a value (%s)%s%s%s", opt->name, opt->value,
                  value ? "; got the option '" : "", value ? value : "", value ? "'" : "");
        return -1;
    }
    if (!*value) {
        cli_error(command, "option --%s needs a value (%s), got an empty one", opt->name,
                  opt->value);
        return -1;
    }
    return 0;
}

int args_parse(cli_args *args, const cli_option *options, size_t num_options, const char *command,
               int argc, char **argv) {
    memset(args, 0, sizeof *args);
    args->command = command;
    args->options = options;
    args->num_options = num_options < MAX_OPTIONS ? num_options : MAX_OPTIONS;
    for (int a = 0; a < argc; a++) {
        const char *word = argv[a];
        if (strcmp(word, "--help") == 0 || strcmp(word, "-h") == 0) return 1;
        if (strncmp(word, "--", 2) != 0) {
            cli_error(command, "unexpected argument '%s' (options start with --)", word);
            return EXIT_USAGE;
        }
        const char *name = word + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name), index = 0;
        const cli_option *opt = find_option(args, name, len, &index);
        if (!opt) {
            cli_error(command, "unknown option --%.*s (see clattn help %s)", (int)len, name,
                      command);
            return EXIT_USAGE;
        }
        if (!opt->value && eq) {
            cli_error(command, "--%s takes no value, got '%s'", opt->name, eq + 1);
            return EXIT_USAGE;
        }
        const char *value = !opt->value ? "" : eq ? eq + 1 : a + 1 < argc ? argv[++a] : NULL;
        if (check_value(command, opt, value, !eq) != 0) return EXIT_USAGE;
        args->values[index] = value;
    }
    return 0;
}

const char *args_get(const cli_args *args, const char *name) {
    size_t index = 0;
    return find_option(args, name, strlen(name), &index) ? args->values[index] : NULL;
}

int args_has(const cli_args *args, const char *name) {
    return args_get(args, name) != NULL;
}

int args_listed(const char *list, const char *name) {
    size_t len = strlen(name);
    for (const char *at = strstr(list, name); len && at; at = strstr(at + 1, name)) {
        const char *word = at - list >= 2 && strncmp(at - 2, "--", 2) == 0 ? at - 2 : at;
        int starts = word == list || word[-1] == ' ' || word[-1] == ',';
        if (starts && (at[len] == '\0' || at[len] == ' ' || at[len] == ',')) return 1;
    }
    return 0;
}

void args_usage(const char *command, const char *synopsis, const cli_option *options,
                size_t num_options) {
    char left[MAX_OPTIONS][96];
    int width = 0;
    for (size_t i = 0; i < num_options && i < MAX_OPTIONS; i++) {
        int len = snprintf(left[i], sizeof left[i], "--%s%s%s", options[i].name,
                           options[i].value ? " " : "", options[i].value ? options[i].value : "");
        if (len > width) width = len;
    }
    printf("usage: clattn %s %s\n\noptions:\n", command, synopsis);
    for (size_t i = 0; i < num_options && i < MAX_OPTIONS; i++)
        printf("  %-*s  %s\n", width, left[i], options[i].help);
}

static int bad_value(const cli_args *args, const char *name, const char *why) {
    cli_error(args->command, "--%s: %s, got '%s'", name, why, args_get(args, name));
    return -1;
}

/* Parses a whole decimal integer from [s, end); 0 on success. */
static int to_int64(const char *s, const char *end, int64_t *out) {
    char buf[32];
    size_t len = (size_t)(end - s);
    if (len == 0 || len >= sizeof buf) return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    for (size_t i = 0; i < len; i++)
        if (!isdigit((unsigned char)buf[i]) && !(i == 0 && buf[i] == '-' && len > 1)) return -1;
    errno = 0;
    long long v = strtoll(buf, NULL, 10);
    if (errno == ERANGE) return -1;
    *out = v;
    return 0;
}

/* ">= MIN" or "from MIN to MAX" (max INT64_MAX: no upper bound) */
static void describe_range(char *buf, size_t size, int64_t min, int64_t max) {
    if (max == INT64_MAX)
        snprintf(buf, size, ">= %lld", (long long)min);
    else
        snprintf(buf, size, "from %lld to %lld", (long long)min, (long long)max);
}

int check_number_range(const char *command, const char *label, int64_t value, int64_t min,
                       int64_t max, int odd) {
    if (value >= min && value <= max && (!odd || value % 2 != 0)) return 0;
    char range[64];
    describe_range(range, sizeof range, min, max);
    cli_error(command, "%s: expected an%s integer %s, got '%lld'", label, odd ? " odd" : "", range,
              (long long)value);
    return -1;
}

int check_number(const char *command, const char *label, int64_t value, int64_t min, int odd) {
    return check_number_range(command, label, value, min, INT64_MAX, odd);
}

int parse_int64_range(const cli_args *args, const char *name, int64_t min, int64_t max,
                      int64_t *out) {
    const char *s = args_get(args, name);
    char range[64], why[96], label[64];
    describe_range(range, sizeof range, min, max);
    snprintf(why, sizeof why, "expected an integer %s", range);
    snprintf(label, sizeof label, "--%s", name);
    if (!s || to_int64(s, s + strlen(s), out) != 0) return bad_value(args, name, why);
    return check_number_range(args->command, label, *out, min, max, 0);
}

int parse_int64(const cli_args *args, const char *name, int64_t min, int64_t *out) {
    return parse_int64_range(args, name, min, INT64_MAX, out);
}

int parse_size(const cli_args *args, const char *name, size_t min, size_t *out) {
    int64_t v = 0;
    if (parse_int64(args, name, (int64_t)min, &v) != 0) return -1;
    *out = (size_t)v;
    return 0;
}

int parse_float(const cli_args *args, const char *name, float *out) {
    const char *s = args_get(args, name);
    char *end = NULL;
    errno = 0;
    double v = s ? strtod(s, &end) : 0.0;
    int underflow = errno == ERANGE && v == 0.0 && s && *s && !*end; /* strtod's tiny values */
    if (underflow || (s && !*end && v != 0.0 && isfinite(v) && (float)v == 0.0f))
        return bad_value(args, name,
                         "rounds to 0 in float32 (the smallest positive float32 is 1.4e-45)");
    if (!s || !*s || *end || errno == ERANGE || !isfinite(v) || !isfinite((float)v))
        return bad_value(args, name, "expected a finite number (float32: up to 3.4e38)");
    *out = (float)v;
    return 0;
}

int parse_pair_range(const cli_args *args, const char *name, int64_t min, int64_t max, int64_t *a,
                     int64_t *b) {
    const char *s = args_get(args, name), *comma = s ? strchr(s, ',') : NULL;
    char range[64], why[96];
    describe_range(range, sizeof range, min, max);
    snprintf(why, sizeof why, "expected A,B with integers %s", range);
    if (!comma || to_int64(s, comma, a) != 0 || to_int64(comma + 1, s + strlen(s), b) != 0 ||
        *a < min || *b < min || *a > max || *b > max)
        return bad_value(args, name, why);
    return 0;
}

int parse_pair(const cli_args *args, const char *name, int64_t min, int64_t *a, int64_t *b) {
    return parse_pair_range(args, name, min, INT64_MAX, a, b);
}

int parse_index_list(const cli_args *args, const char *name, int64_t **list, size_t *count) {
    const char *s = args_get(args, name);
    size_t cap = 1;
    for (const char *c = s; *c; c++) cap += *c == ',';
    *list = malloc(cap * sizeof **list);
    *count = 0;
    if (!*list) return bad_value(args, name, "out of memory");
    for (const char *start = s;;) {
        const char *end = strchr(start, ',');
        if (!end) end = start + strlen(start);
        int64_t v = 0;
        if (to_int64(start, end, &v) != 0 || v < 0) {
            free(*list);
            *list = NULL;
            return bad_value(args, name, "expected a comma-separated list of integers >= 0");
        }
        (*list)[(*count)++] = v;
        if (!*end) break;
        start = end + 1;
    }
    return 0;
}

int parse_choice(const cli_args *args, const char *name, const char *const *choices, int *index) {
    const char *s = args_get(args, name);
    char why[160] = "expected one of";
    for (int i = 0; choices[i]; i++) {
        if (strcmp(s, choices[i]) == 0) {
            *index = i;
            return 0;
        }
        strncat(why, i ? "|" : " ", sizeof why - strlen(why) - 1);
        strncat(why, choices[i], sizeof why - strlen(why) - 1);
    }
    return bad_value(args, name, why);
}

int parse_variant(const cli_args *args, const char *name, clattn_variant *variant) {
    if (clattn_variant_from_name(args_get(args, name), variant) == CLATTN_SUCCESS) return 0;
    return bad_value(args, name, "no variant (see clattn devices --variants)");
}

/* A list longer than the caller holds: the limit is named. */
static int too_many(const cli_args *args, const char *name, size_t cap) {
    char why[64];
    snprintf(why, sizeof why, "a list of at most %zu values", cap);
    return bad_value(args, name, why);
}

int parse_word_list(const cli_args *args, const char *name, char storage[][64], size_t cap,
                    size_t *count) {
    const char *s = args_get(args, name);
    *count = 0;
    for (const char *start = s;;) {
        const char *end = strchr(start, ',');
        if (!end) end = start + strlen(start);
        size_t len = (size_t)(end - start);
        if (*count == cap) return too_many(args, name, cap);
        if (len == 0 || len >= 64)
            return bad_value(args, name, "expected a comma-separated list of names");
        memcpy(storage[*count], start, len);
        storage[(*count)++][len] = '\0';
        if (!*end) break;
        start = end + 1;
    }
    return 0;
}

int parse_size_list(const cli_args *args, const char *name, size_t min, size_t *out, size_t cap,
                    size_t *count) {
    const char *s = args_get(args, name);
    char why[96];
    snprintf(why, sizeof why, "expected a comma-separated list of integers >= %zu", min);
    *count = 0;
    for (const char *start = s;;) {
        const char *end = strchr(start, ',');
        if (!end) end = start + strlen(start);
        int64_t v = 0;
        if (*count == cap) return too_many(args, name, cap);
        if (to_int64(start, end, &v) != 0 || v < (int64_t)min) return bad_value(args, name, why);
        out[(*count)++] = (size_t)v;
        if (!*end) break;
        start = end + 1;
    }
    return 0;
}

/* `path` as its folder's real path and its name, so that "o.npy" and "./o.npy" compare equal
 * before the file exists. @return 0, or -1 when the folder does not resolve. */
static int resolve_path(const char *path, char *out, size_t size) {
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX], real[PATH_MAX];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    if (!realpath(dir, real)) return -1;
    snprintf(out, size, "%s/%s", real, slash ? slash + 1 : path);
    return 0;
}

int args_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    char ra[2 * PATH_MAX], rb[2 * PATH_MAX];
    if (strcmp(a, b) == 0) return 1;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    outfile_target ta, tb; /* where a new file would go: a dangling link's target */
    if (outfile_resolve(a, &ta) == 0) a = ta.path;
    if (outfile_resolve(b, &tb) == 0) b = tb.path;
    return resolve_path(a, ra, sizeof ra) == 0 && resolve_path(b, rb, sizeof rb) == 0 &&
           strcmp(ra, rb) == 0;
}

int args_check_outputs(const cli_args *args, const char *const *outputs, size_t num_outputs,
                       const char *const *inputs, size_t num_inputs) {
    for (size_t o = 0; o < num_outputs; o++) {
        const char *out = args_get(args, outputs[o]);
        for (size_t i = 0; out && i < num_outputs + num_inputs; i++) {
            const char *other = i < num_outputs ? outputs[i] : inputs[i - num_outputs];
            const char *path = args_get(args, other);
            if (i <= o || !path || !args_same_file(out, path)) continue;
            cli_error(args->command, "--%s and --%s name the same file '%s'%s", outputs[o], other,
                      out, i < num_outputs ? "" : " (an output would overwrite an input)");
            return EXIT_USAGE;
        }
    }
    return 0;
}
