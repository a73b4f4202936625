/*
 * The kernels layer: every way to compute attention is a row of one table (variants.c),
 *
 *     {name, supports(problem, device) -> yes | reason, plan(problem, tuning) -> plan, run(plan)}
 *
 * in the order `auto` prefers them. The dispatcher (api/attention.c) walks the table and never
 * names a variant; a new kernel is one new file with its row, plus the row in the table.
 */
#ifndef CLATTN_VARIANT_H
#define CLATTN_VARIANT_H

#include "plan/problem.h"
#include "plan/tuning.h"

/* The buffers of a call; lse and bias may be NULL. A KV cache also passes its device copies of
 * the lengths and the block table (NULL: the variant uploads problem->kv's host arrays). */
typedef struct attn_buffers {
    cl_mem q, k, v, o, lse, bias;
    cl_mem seq_len, q_len, block_table;
    uint64_t host_copies; /* bytes of them clattn_attention_host made (its copies of the arrays) */
} attn_buffers;

struct attn_variant;

/* clattn_stats.pairs before the dispatcher knows them. */
#define PAIRS_UNKNOWN UINT64_MAX

/* A variant's plan of one call: the problem, its tuning entry, and the variant's own state. */
typedef struct variant_plan {
    const struct attn_variant *variant;
    const attn_problem *problem;
    tuning_params tuning;
    tuning_source tuning_from;
    int write_lse;
    launch_limits limits;  /* what a work-group may use: the device's, or lower (tests) */
    uint64_t device_bytes; /* about what the call will allocate on the device (plan sets it) */
    void *state;           /* the variant's, released by its release() */
} variant_plan;

typedef struct attn_variant {
    clattn_variant id;
    const char *name;     /* "lanes", "gemm", ...: clattn_variant_name, --variant, $CLATTN_KERNEL */
    const char *old_name; /* the name of 0.2, still read until 0.4 (tuning.json too), or NULL */
    clattn_path path;
    const char *summary; /* one line for listings */

    /* Its tuning: the built-in defaults by device class (the first entry that matches the
     * device wins, and the last matches every device), and the fields `clattn tune` searches
     * with the values it tries (none: nothing to tune). */
    const tuning_default *defaults;
    size_t num_defaults;
    const clattn_tuning_axis *axes;
    size_t num_axes;
    /* Whether its kernel can take a tuning entry (NULL: any); writes why not. With a device,
     * also whether the entry runs there as given, with no tile shrunk to fit (a tuner's
     * candidate: clattn_context_set_tuning refuses what fails either); without one, the
     * planner's check, which shrinks what does not fit later. */
    int (*tuning_valid)(const tuning_params *t, const clattn_device_info *device, char *why,
                        size_t size);

    /* Whether the variant can serve the problem (NULL: any call) on ctx's device. When it
     * cannot, writes why into `why` and returns 0. Cheap and host-only. */
    int (*supports)(const clattn_context *ctx, const attn_problem *pb, char *why, size_t size);
    /* Whether `auto` should pick it for this call (pb; NULL: calls in general) on this device
     * when it supports the call: a variant may run everywhere but suit only some devices or
     * shapes. When not, writes why. */
    int (*suits)(const clattn_device_info *device, const attn_problem *pb, char *why, size_t size);
    /* Plans the call into plan->state. May still find it cannot serve the call
     * (CLATTN_ERR_UNSUPPORTED, with the reason on ctx). */
    clattn_status (*plan)(clattn_context *ctx, variant_plan *plan);
    /* Enqueues the call; fills the variant's part of *stats (tiles, block sizes, kernel, and
     * the pattern's pairs when it knows them: else they stay PAIRS_UNKNOWN and are counted). */
    clattn_status (*run)(clattn_context *ctx, const variant_plan *plan, const attn_buffers *buf,
                         cl_event *event, clattn_stats *stats);
    void (*release)(variant_plan *plan);
} attn_variant;

/* The table, in the order `auto` prefers; *count rows. */
const attn_variant *const *variant_table(size_t *count);
/* The row of a variant, or NULL. */
const attn_variant *variant_find(clattn_variant id);
/* The row named `name` (or, until 0.4, its old name), or NULL. */
const attn_variant *variant_named(const char *name);

/* The variant's tuning on ctx's device: the context's own, else tuning.json's, else the row's
 * built-in defaults. @return where it came from. */
tuning_source variant_tuning(clattn_context *ctx, const attn_variant *variant, tuning_params *out);
/* The same on a device, without a context. */
tuning_source variant_tuning_on(const clattn_device_info *device, const attn_variant *variant,
                                tuning_params *out);

/* Looks up the tuning of `variant` on ctx's device into the plan, plans against the device's
 * launch limits, and on failure releases what planning made. */
clattn_status variant_plan_make(clattn_context *ctx, const attn_variant *variant,
                                const attn_problem *pb, int write_lse, variant_plan *plan);
/* The same against `limits` (at most the device's): a work-group limit or local memory below
 * the device's, as a kernel or another device may have them. */
clattn_status variant_plan_make_limited(clattn_context *ctx, const attn_variant *variant,
                                        const attn_problem *pb, int write_lse,
                                        const launch_limits *limits, variant_plan *plan);
void variant_plan_release(variant_plan *plan);

#endif
