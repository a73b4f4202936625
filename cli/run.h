/* What `clattn run`, its KV cache mode (run_cache.c) and `clattn layer` share. */
#ifndef CLATTN_CLI_RUN_H
#define CLATTN_CLI_RUN_H

#include "args.h"
#include "conformance.h"
#include "npy.h"
#include "outfile.h"

#include <limits.h>

struct cache_run; /* run_cache.c: the cache inputs and outputs */

/* What the command holds while it runs. */
typedef struct run_state {
    npy_array q, k, v, bias, layout;
    npy_array ref;      /* --compare REF.npy, read and checked before computing */
    npy_array ref_lse;  /* --compare-lse REF.npy, likewise */
    float *bias_f32;    /* the bias widened to float32, when it was stored as float16 */
    uint8_t *layout_u8; /* the layout as 0/1 bytes */
    int64_t *globals;
    clattn_attention_desc desc;
    clattn_layout layout_kind;
    void *o;
    float *lse;
    struct cache_run *cache; /* --cache-len: K and V are caches (docs/semantics.md section 6) */
    npy_array alibi, sinks;  /* --alibi-slopes, --sinks */
    float *alibi_standard;   /* --alibi: the standard slopes */
} run_state;

/* One file a run writes. */
typedef struct run_output {
    const char *option, *path;
    npy_dtype dtype;
    size_t ndim;
    const size_t *shape;
    const void *data;
} run_output;

#define RUN_MAX_OUTPUTS 4 /* --out, --lse, --k-cache-out, --v-cache-out */

/* run_inputs.c: reads the file of an option (one line naming the problem on failure); a 4-D
 * tensor's sizes in the layout; an array's storage type (<u2: bfloat16 bits); an array rounded
 * to another storage type in place. Each returns 0, or 1 after printing the problem. */
int run_load(const cli_args *args, const char *option, npy_array *out);
int run_tensor_dims(const cli_args *args, const char *option, const npy_array *a,
                    clattn_layout layout, size_t dims[4]);
clattn_dtype run_storage_of(npy_dtype dtype);
int run_convert_array(npy_array *a, clattn_dtype from, clattn_dtype to);
/* run_inputs.c too: "[2, 37, 2, 32]" into buf. */
void run_format_shape(const size_t *shape, size_t ndim, char *buf, size_t size);

/* cmd_run.c: the mask, scale and path options (--causal --window --dilation --global --block-layout
 * --block-size --bias --scale --out-dtype --path --variant) into s->desc, whose sizes are set;
 * `clattn layer` takes them as `clattn run` does. @return 0, 1 or EXIT_USAGE. */
int run_setup_mask(const cli_args *args, run_state *s);
/* run_modifiers.c: --softcap --alibi --alibi-slopes --sinks into s->desc (docs/semantics.md
 * section 8). @return 0, 1 or EXIT_USAGE. */
int run_setup_modifiers(const cli_args *args, run_state *s);
#define RUN_MODIFIER_OPTIONS                                                                       \
    {"softcap", "C", "soft-cap the scaled scores: C * tanh(s / C) (Gemma 2)"},                     \
        {"alibi", NULL, "ALiBi with the standard slopes of Hq heads (BLOOM's)"},                   \
        {"alibi-slopes", "S.npy", "ALiBi with these slopes, <f4 [Hq] or [B,Hq]"}, {                \
        "sinks", "S.npy", "attention sinks, one logit a query head, <f4 [Hq] (gpt-oss)"            \
    }
/* Writes every regular output to a temporary name beside it, then the devices and FIFOs in
 * place (outfile.h), then renames the temporaries in one section that SIGINT and SIGTERM wait
 * for (interrupt.h): a failure before the renames removes them and leaves existing files
 * untouched; a folder, block device or socket is refused before anything is written. Only a
 * rename failing after another succeeded (not seen on one file system) leaves the earlier
 * ones. At most RUN_MAX_OUTPUTS. Messages start "clattn COMMAND:". @return 0 or 1. */
int run_write_all(const char *command, const run_output *outs, size_t n);
/* Frees what a run_state holds. */
void run_release(run_state *s);

/* cmd_run.c, for the sharded modes: the options checked (usage errors print and return
 * EXIT_USAGE; s->layout_kind set); the inputs read and checked into s (Q, K, V, the cache, the
 * mask, --compare's reference); the outputs written from s->o and s->lse (all or none); --compare.
 * Each returns 0, or 1 (or EXIT_USAGE) after printing the problem. */
int run_check_args(const cli_args *args, run_state *s);
int run_prepare(const cli_args *args, run_state *s);
int run_write_outputs(const cli_args *args, const run_state *s);
int run_compare_outputs(const cli_args *args, const run_state *s); /* --compare, --compare-lse */
/* Says how a comparison with --OPTION's file (compare: O or Y; compare-lse: LSE) went: out of
 * host memory (not `compared`), values outside the tolerance (an error naming the first, and
 * that --out was written all the same), or all within it. @return 0 when all were within. */
int run_report_comparison(const char *command, const char *option, const cli_args *args,
                          int compared, size_t count, const case_result *r);

/* run_multi.c: --devices, --distributed, --sharding and --timeout with what they exclude
 * (--cache-len, --kv-storage, each other); --sharding's value. @return 0 or EXIT_USAGE. */
int run_check_shard_args(const cli_args *args);
int run_sharding(const cli_args *args, clattn_sharding *sharding);
/* --devices A,B,...: the call as a ring over a context a device (clattn_attention_multi) into
 * s->o and s->lse. @return 0 or 1. */
int run_multi_compute(const cli_args *args, run_state *s, char *where, size_t where_size);
/* run_mpi.c: the whole of `clattn run --distributed` on this rank (a stub without MPI). */
int run_distributed(const cli_args *args, run_state *s);

/* run_cache.c: the options of the cache mode, their checks, reading, computing and outputs. */
#define CACHE_RUN_OPTIONS                                                                          \
    {"cache-len", "L.npy",                                                                         \
     "<i4 [B]: K and V are caches of these lengths (docs/semantics.md section 6)"},                \
        {"k-new", "KN.npy", "with --cache-len: rows to append, [B,Nnew,Hkv,Dqk]"},                 \
        {"v-new", "VN.npy", "with --cache-len: rows to append, [B,Nnew,Hkv,Dv]"},                  \
        {"new-len", "NL.npy", "<i4 [B]: how many of the new rows each sequence appends"},          \
        {"q-len", "QL.npy", "<i4 [B]: valid query rows of each sequence (default Nq)"},            \
        {"page-table", "T.npy", "<i4 [B,pages]: K and V are page pools [pages,P,Hkv,D]"},          \
        {"page-size", "P", "rows a page (with --page-table)"},                                     \
        {"k-cache-out", "KC.npy", "write the K cache (or pool) after the append"}, {               \
        "v-cache-out", "VC.npy", "write the V cache (or pool) after the append"                    \
    }

int cache_check_args(const cli_args *args);
int cache_load(const cli_args *args, run_state *s);
int cache_compute(const cli_args *args, run_state *s, char *where, size_t where_size);
void cache_outputs(const cli_args *args, const run_state *s, run_output *outs, size_t *n);
void cache_release(run_state *s);

#endif
