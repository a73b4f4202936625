/*
 * Command-line parsing for the clattn program: a table of options per subcommand, `--opt VALUE`
 * and `--opt=VALUE` forms, and value parsers that print one line naming the option and the bad
 * value. Usage errors exit with status 2 (EXIT_USAGE).
 */
#ifndef CLATTN_CLI_ARGS_H
#define CLATTN_CLI_ARGS_H

#include <clattn.h>

#include "message.h" /* cli_error, for the value parsers' callers too */

#include <stddef.h>
#include <stdint.h>

#define EXIT_USAGE  2
#define MAX_OPTIONS 48

typedef struct cli_option {
    const char *name;  /* without the dashes: "window" */
    const char *value; /* NULL for a flag, else the value's placeholder: "L,R" */
    const char *help;
} cli_option;

typedef struct cli_args {
    const char *command; /* "run", for messages */
    const cli_option *options;
    size_t num_options;
    const char *values[MAX_OPTIONS]; /* NULL when absent; "" for a flag that is present */
} cli_args;

/* Parses argv (after the subcommand). Prints one line and returns EXIT_USAGE on an unknown
 * option, a missing or empty value, a value given to a flag or a stray positional argument; a
 * separate word starting with "--" is never taken as a value ("--lse --causal" is "option --lse
 * needs a value"). Returns 0 on success, 1 when --help was asked (the usage has been printed). */
int args_parse(cli_args *args, const cli_option *options, size_t num_options, const char *command,
               int argc, char **argv);
const char *args_get(const cli_args *args, const char *name);
int args_has(const cli_args *args, const char *name);
/* Whether option `name` is a word of `list`: names separated by spaces or commas, each with or
 * without its "--" ("device dtypes", "--window, --seed"), as commands list the options that
 * apply to one of their actions or kinds. */
int args_listed(const char *list, const char *name);
void args_usage(const char *command, const char *synopsis, const cli_option *options,
                size_t num_options);

/* Bounds the subcommands share, so that run, pattern and bench accept the same numbers. */
#define MIN_WINDOW_SIDE    (-1) /* a window side in keys; -1 is unbounded */
#define MIN_DILATION       1
#define MIN_BLOCK_SIZE     1         /* a block of queries or keys */
#define MAX_BLOCK_SIZE     INT32_MAX /* the library's bound on a block layout's block sizes */
#define MIN_BAND_BLOCKS    1         /* a band width in blocks, which must also be odd */
#define MAX_PATTERN_STRIDE ((int64_t)1 << 60) /* clattn_pattern_layout's bound on a stride */

/* Checks one number of an option's value: >= min, and odd when `odd`. Prints
 * "clattn CMD: LABEL: expected an [odd] integer >= MIN, got 'VALUE'". @return 0 or -1. */
int check_number(const char *command, const char *label, int64_t value, int64_t min, int odd);
/* The same with an upper bound too ("from MIN to MAX"); max INT64_MAX is none. */
int check_number_range(const char *command, const char *label, int64_t value, int64_t min,
                       int64_t max, int odd);

/* Value parsers: on a bad value they print "clattn CMD: --NAME: <why>, got 'VALUE'" and
 * return -1 (the caller exits with EXIT_USAGE); 0 on success. */
int parse_size(const cli_args *args, const char *name, size_t min, size_t *out);
int parse_int64(const cli_args *args, const char *name, int64_t min, int64_t *out);
/* An integer from min to max ("expected an integer from MIN to MAX"). */
int parse_int64_range(const cli_args *args, const char *name, int64_t min, int64_t max,
                      int64_t *out);
int parse_float(const cli_args *args, const char *name, float *out);
/* "A,B" with each >= min */
int parse_pair(const cli_args *args, const char *name, int64_t min, int64_t *a, int64_t *b);
/* "A,B" with each from min to max */
int parse_pair_range(const cli_args *args, const char *name, int64_t min, int64_t max, int64_t *a,
                     int64_t *b);
/* "I,J,..." non-negative integers; *list is malloc'ed (free it) */
int parse_index_list(const cli_args *args, const char *name, int64_t **list, size_t *count);
/* One of `choices` (NULL-terminated); *index receives its position. */
int parse_choice(const cli_args *args, const char *name, const char *const *choices, int *index);
/* A row of the variant table by name (clattn devices --variants lists them), or "auto". */
int parse_variant(const cli_args *args, const char *name, clattn_variant *variant);
/* "a,b,c" split into up to `cap` strings copied into `storage` (each < 64 chars). */
int parse_word_list(const cli_args *args, const char *name, char storage[][64], size_t cap,
                    size_t *count);
/* "1,2,3" as sizes >= min, up to cap */
int parse_size_list(const cli_args *args, const char *name, size_t min, size_t *out, size_t cap,
                    size_t *count);

/* Whether two paths name the same file: equal text; when both exist, the same device and
 * inode; else the same resolved folder and name ("o.npy" and "./o.npy"), a dangling symbolic
 * link standing for the file it would create. */
int args_same_file(const char *a, const char *b);
/* Every output option (present ones) must name a file of its own: not another output's, not an
 * input's. Prints "clattn CMD: --A and --B name the same file 'X'". @return 0 or EXIT_USAGE. */
int args_check_outputs(const cli_args *args, const char *const *outputs, size_t num_outputs,
                       const char *const *inputs, size_t num_inputs);

#endif
