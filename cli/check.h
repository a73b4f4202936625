/*
 * What `clattn check`'s files share: the sweep of cases, the plan of (device, path, variant)
 * rows with each case's outcome, and the two ways a row runs. The parent runs each row in a
 * child process of its own (check_child.c) with a time limit, so that a kernel that hangs or
 * crashes the driver costs its row only; the child runs the row's cases in its process
 * (cmd_check.c) and reports each one to the parent on a pipe, one line a case:
 *
 *     start I            case I begins (the parent's progress, and where a hang is)
 *     end I OK WORST MS  case I ended: OK is 1 (passed), 0 (failed) or 2 (not served), WORST
 *                        its largest |error| / tolerance
 *     dump-failures N    at the end: inputs --dump could not write
 */
#ifndef CLATTN_CLI_CHECK_H
#define CLATTN_CLI_CHECK_H

#include "conformance.h"

#include <clattn.h>
#include <stddef.h>

#define MAX_CASES    160
#define MAX_VARIANTS 16 /* rows of the variant table --variant can name */
#define MAX_DEVICES  16
#define MAX_RUNS     64 /* (device, path, variant) rows */

/* Default time limit of a row: a fixed part for opening the device and building kernels, and a
 * part per case (each case may build kernels of its own shapes). */
#define ROW_SECONDS_FIXED    300
#define ROW_SECONDS_PER_CASE 15

typedef struct sweep {
    attn_case cases[MAX_CASES];
    size_t count;
} sweep;

typedef enum case_outcome {
    CASE_NOT_REACHED = 0, /* the row stopped before it (or --case left it out) */
    CASE_PASSED,
    CASE_FAILED,
    CASE_TIMED_OUT, /* running when the row's time ran out */
    CASE_CRASHED,   /* running when the row's process died */
    CASE_NOT_SERVED /* the variant refused it (CLATTN_ERR_UNSUPPORTED: head dims or features it
                       does not take, no tile that fits the device), as auto then passes it by */
} case_outcome;

typedef struct case_record {
    unsigned char outcome; /* case_outcome */
    float worst, ms;
} case_record;

typedef enum row_outcome {
    ROW_COMPLETED = 0, /* every case ran (each passed or failed) */
    ROW_TIMED_OUT,     /* killed at the time limit */
    ROW_CRASHED,       /* its process died of a signal */
    ROW_BROKEN         /* its process could not run it (the device did not open, ...) */
} row_outcome;

typedef struct run_row {
    size_t device;
    clattn_path path;
    clattn_variant variant;
    size_t passed, failed, not_served;
    double worst, ms;
    row_outcome outcome;
    int signal;       /* ROW_CRASHED: the signal */
    int exit_status;  /* ROW_BROKEN: the child's exit status */
    long stopped_in;  /* the case that was running when the row stopped, or -1 */
    double timeout_s; /* the row's time limit (0: none, run in this process) */
    case_record cases[MAX_CASES];
} run_row;

/* A (device, variant) that was not run: the device refused it, or the options left it out. */
typedef struct not_run_row {
    size_t device;
    clattn_variant variant;
    int required; /* named by --require: the check fails */
    char reason[256];
} not_run_row;

typedef struct check_plan {
    size_t devices[MAX_DEVICES], num_devices;
    clattn_path paths[3];
    size_t num_paths;
    int variants[MAX_VARIANTS]; /* by clattn_variant: chosen with --variant (all when none) */
    int variants_named;         /* --variant was given */
    int required[MAX_VARIANTS]; /* by clattn_variant: named by --require */
    long only_case;             /* -1: all */
    int quick;                  /* the quick sweep: its case numbers differ from the full one's */
    const char *storage_name;   /* --storage: every case's Q, K and V in it ("f16"), or NULL */
    int verbose;
    const char *dump_dir;
    double timeout_s;      /* --timeout; 0: the default, scaled to the sweep */
    int child_fd;          /* a child running one row: where it reports; else -1 */
    int in_process;        /* --in-process: every row here, without a time limit */
    size_t jobs;           /* --jobs: rows run at once, each in its own process */
    int record;            /* record the rows' verdicts in the store (not --no-record) */
    const char *report;    /* --report FILE: also write them there (at the end) */
    char report_tmp[4200]; /* where they gather until then */
    int report_incomplete; /* a row's verdict could not be added: FILE is not written */
    size_t recorded;       /* verdicts recorded in the store */
    int record_failed;     /* a verdict could not be recorded (said once) */
    run_row rows[MAX_RUNS];
    size_t num_rows;
    not_run_row not_run[MAX_RUNS];
    size_t num_not_run;
    size_t required_not_run; /* rows of not_run that --require named */
    size_t failures;
    size_t dump_failures; /* inputs --dump (or --report) could not write */
} check_plan;

const char *check_path_name(clattn_path path);

/* The cases of the sweep the plan runs (one with --case). */
size_t check_cases_run(const check_plan *plan, const sweep *s);

/* "case 3 (B=1 Hq=2 ...)", or "opening the device" for -1. */
void check_case_name(const sweep *s, long index, char *out, size_t size);

/* Whether rows can run in child processes here (the program can find its own file). */
int check_children_possible(void);

/* Called as each row ends, in the order the rows end. */
typedef void (*check_row_done)(void *arg, run_row *row);

/* Runs rows[0..n) in child processes, `jobs` at once: `clattn check` again, for one row each,
 * with --child-fd. Fills each row's cases, counts and outcome; failures count in
 * plan->failures (a timed-out or crashed row is one more), and says on stderr how a row that
 * did not complete stopped. */
void check_run_rows_children(check_plan *plan, const sweep *s, run_row *rows, size_t n,
                             size_t jobs, check_row_done done, void *arg);

#endif
