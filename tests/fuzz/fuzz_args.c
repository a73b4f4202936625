/*
 * libFuzzer target: the program's option parser and value parsers (cli/args.c) on arbitrary
 * command lines. The input is split at NUL bytes into argv; args_parse runs with `clattn run`'s
 * kind of option table, then every value parser on every value given. Each must return a
 * result or a usage error, never crash, overrun or leak. Built and run by tests/fuzz/run.sh
 * (which drops the usage errors' lines, "clattn fuzz: ...", from the output).
 */
#include "args.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cli_option options[] = {
    {"q", "Q.npy", ""},        {"window", "L,R", ""}, {"dilation", "N", ""}, {"global", "I,J", ""},
    {"block-size", "B,B", ""}, {"scale", "S", ""},    {"path", "P", ""},     {"device", "SPEC", ""},
    {"list", "A,B", ""},       {"causal", NULL, ""},  {"help", NULL, ""},
};
#define NUM_OPTIONS (sizeof options / sizeof options[0])
#define MAX_ARGS    64

/* Every parser on the option's value, whatever the option was meant for. */
static void parse_values(const cli_args *args, const char *name) {
    int64_t a = 0, b = 0, *list = NULL;
    size_t n = 0, sizes[8], count = 0;
    float f = 0;
    int choice = 0;
    char words[4][64];
    static const char *const choices[] = {"auto", "fused", "gemm", NULL};
    parse_int64(args, name, -1, &a);
    parse_int64_range(args, name, 1, INT32_MAX, &a);
    parse_size(args, name, 1, &n);
    parse_float(args, name, &f);
    parse_pair(args, name, -1, &a, &b);
    parse_pair_range(args, name, 1, INT32_MAX, &a, &b);
    if (parse_index_list(args, name, &list, &count) == 0) free(list);
    parse_choice(args, name, choices, &choice);
    parse_word_list(args, name, words, 4, &count);
    parse_size_list(args, name, 0, sizes, 8, &count);
    args_same_file(args_get(args, name), "o.npy");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1), *argv[MAX_ARGS];
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    int argc = 0;
    for (char *at = text; argc < MAX_ARGS && at <= text + size; at += strlen(at) + 1)
        argv[argc++] = at;
    cli_args args;
    if (args_parse(&args, options, NUM_OPTIONS, "fuzz", argc, argv) == 0)
        for (size_t i = 0; i < NUM_OPTIONS; i++)
            if (options[i].value && args_has(&args, options[i].name))
                parse_values(&args, options[i].name);
    free(text);
    return 0;
}
