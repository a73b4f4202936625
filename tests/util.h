/*
 * Helpers shared by the Criterion tests: seeded inputs, docs/semantics.md section 4 comparisons
 * that print the first mismatches, and a context on every device found.
 */
#ifndef CLATTN_TEST_UTIL_H
#define CLATTN_TEST_UTIL_H

#include "clattn.h"
#include "conformance.h"

#include <stddef.h>
#include <stdint.h>

/* The contract's tolerances, the library's (clattn_tolerance), which clattn check uses too:
 * |got - ref| <= atol + rtol * |ref|. */
double tolerance_atol(clattn_dtype dtype);
double tolerance_rtol(clattn_dtype dtype);
#define TOL_F32_ATOL tolerance_atol(CLATTN_F32)
#define TOL_F32_RTOL tolerance_rtol(CLATTN_F32)
#define TOL_F16_ATOL tolerance_atol(CLATTN_F16)
#define TOL_F16_RTOL tolerance_rtol(CLATTN_F16)

/* Uniform in [-1, 1], reproducible from the seed. */
void fill_uniform(float *x, size_t n, uint64_t seed);
/* Same, stored as float16 (the reference then reads the rounded values). */
void fill_uniform_f16(uint16_t *x, size_t n, uint64_t seed);

/* Counts elements outside atol + rtol*|ref| (NaN and infinities must match exactly) and
 * prints the first mismatch with its index. */
size_t compare_outputs(const char *label, const float *got, const double *ref, size_t n,
                       double atol, double rtol);

/* Contexts on every device found (created on first use in this process, kept until exit). */
size_t test_contexts(clattn_context ***contexts);

/* A context on device 0 that believes its device has `local` bytes of local memory and
 * work-groups of at most `items` (0: the device's own): the planner shrinks tuned tiles to fit,
 * or says nothing fits. The caller destroys it. */
clattn_context *small_device(cl_ulong local, size_t items);

/* A caller's own OpenCL objects, for the interop tests of clattn_context_wrap: a cl_context
 * on device 0 and a command queue on it. */
typedef struct caller_objects {
    cl_device_id device;
    cl_context context;
    cl_command_queue queue; /* NULL when the device refused the queue's properties */
} caller_objects;

/* Creates them (aborts when the context cannot be made). @return the queue's creation status:
 * CL_SUCCESS, or the device's refusal of `properties`. */
cl_int caller_objects_create(caller_objects *c, cl_command_queue_properties properties);
/* Releases the queue and the context, the caller's references. */
void caller_objects_release(caller_objects *c);

/* The rows of the variant table on `path` that ctx's device supports (clattn_variant_describe;
 * nv_mma needs tensor cores), at most `cap` of them into out. @return how many. */
size_t variants_on_path(clattn_context *ctx, clattn_path path, clattn_variant *out, size_t cap);
/* Whether the device supports the variant and auto uses it there (clattn_variant_describe). */
int auto_uses(clattn_context *ctx, clattn_variant variant);
/* The row auto runs for head dims past 256 (trusting the table's order): split for `queries` up
 * to 11 a head where it serves, else lanes or flash where auto uses them, else split, else
 * gemm. */
clattn_variant auto_row_for_wide(clattn_context *ctx, size_t queries);

/* The rows of the GEMM table that run on ctx's device (clattn_gemm_describe), at most `cap` of
 * them into out. @return how many. */
size_t gemm_rows_on(clattn_context *ctx, clattn_gemm *out, size_t cap);

/* On every device: expects the GEMM table to list at least two rows there, and for each row sets
 * the context's GEMM to it, calls check(ctx, row, &cases[c]) for each of the `count` cases (an
 * array of `case_size`-byte cases), and sets the GEMM back to CLATTN_GEMM_AUTO. */
typedef void gemm_row_check(clattn_context *ctx, clattn_gemm row, const void *one_case);
void for_each_gemm_row(gemm_row_check *check, const void *cases, size_t case_size, size_t count);

/* Runs every case on every device through `path` with `variant` (AUTO on the fused path: every
 * row of the variant table on that path, split included) and fails the test, naming the case,
 * device and first mismatch, when a case errs or leaves the tolerance. Returns the number of
 * failing runs. */
size_t check_cases(const attn_case *cases, size_t count, clattn_path path, clattn_variant variant);

/* Writes MASK_KINDS cases, one of each mask kind (causal; a dilated window; global rows and keys;
 * a causal block layout; a full bias; a window with NaN in V; a NaN key under a padding bias) on
 * one shape, B=2 Hq=4 Hkv=2 Nq=67 Nk=93 D=32 (lengths no multiple of a tile), seeds from `seed`.
 * @return MASK_KINDS. */
#define MASK_KINDS 7
size_t mask_kind_cases(attn_case *cases, unsigned seed);

/* check_cases on the fused (every row), gemm and auto paths: every case passes on each. */
void expect_every_path_passes(const attn_case *cases, size_t count);

/* n values (a multiple of 32) uniform in [-amplitude, amplitude], quantised to `dtype`
 * (CLATTN_Q8_0: 34 bytes a block of 32, CLATTN_Q4_0: 18). The caller frees them. */
uint8_t *random_quantised(clattn_dtype dtype, size_t n, float amplitude, uint64_t seed);

/* Makes a fresh folder /tmp/clattn-<name>-XXXXXX (its path into folder, `size` bytes) and makes
 * it this process's cache folder (CLATTN_CACHE_DIR), where tuning.json and verdicts live. */
void fresh_cache_dir(char *folder, size_t size, const char *name);
/* Removes the folder and everything in it (rm -rf), expecting that to succeed. */
void remove_cache_dir(const char *folder);
/* Writes `text` as <folder>/tuning.json. */
void write_tuning_json(const char *folder, const char *text);

/* The small call the tuning and verification tests run: B=1 Hq=2 Hkv=1 Nq=45 Nk=70 D=32,
 * causal, through `path` with `variant`, compared with the reference (in the result). */
case_result run_small_causal(clattn_context *ctx, clattn_path path, clattn_variant variant);

/* Runs c on the fused path with `variant` and expects the status `want` with a message that
 * contains `words`. */
void expect_case_refused(clattn_context *ctx, const attn_case *c, clattn_variant variant,
                         clattn_status want, const char *words);

/* Sets t (NULL: back to the database's) for `variant` on every test context. */
void set_tuning_everywhere(clattn_variant variant, const clattn_tuning *t);

/* Expects clattn_context_set_tuning to refuse t for `variant` with "NAME: FIELD is out of
 * range", and the context to keep its parameters: a small call still runs. */
void expect_tuning_refused(clattn_context *ctx, clattn_variant variant, const clattn_tuning *t,
                           const char *field);

/* Criterion assertion on a status, printing the context's last error when it fails. */
#define ASSERT_OK(ctx, call)                                                                       \
    do {                                                                                           \
        clattn_status status_ = (call);                                                            \
        cr_assert_eq(status_, CLATTN_SUCCESS, "%s -> %s: %s", #call, clattn_status_name(status_),  \
                     clattn_context_last_error(ctx));                                              \
    } while (0)

#endif
