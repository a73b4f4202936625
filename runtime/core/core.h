/*
 * The core layer: what every other layer of the runtime builds on and the public header does
 * not show. The context's insides, error records, logging, checked size arithmetic, buffers,
 * kernel launches and timing, the program cache, and the reading and writing of public structs
 * that carry a struct_size. Nothing here knows about attention; layers above include this file,
 * never the other way round.
 */
#ifndef CLATTN_CORE_H
#define CLATTN_CORE_H

#include "clattn.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#if defined(__GNUC__)
#define PRINTF_LIKE(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define PRINTF_LIKE(fmt, args)
#endif

/* ---- error records (error.c) */

/* One line naming what went wrong. Checks below the API write into a record, not a context, so
 * that a call without a context (clattn_attention_desc_check) gets the same message. */
typedef struct error_record {
    char text[1024];
} error_record;

/* Writes the message into `record` (which may be NULL) and returns `status`, so that error
 * paths read `return error_set(err, CLATTN_ERR_..., "Q has %zu heads", n);`. */
clattn_status error_set(error_record *record, clattn_status status, const char *fmt, ...)
    PRINTF_LIKE(3, 4);

/* CLATTN_VERBOSE=1 turns logging on; messages go to stderr prefixed "clattn: ". */
int log_enabled(void);
void log_msg(const char *fmt, ...) PRINTF_LIKE(1, 2);

/* Seconds on a monotonic clock. */
double seconds_now(void);

/* ---- public structs with a struct_size (struct.c) */

/* Copies a caller's struct of `given_size` bytes (its struct_size) into `local` of
 * `local_size` bytes: bytes the caller's struct lacks stay zero, the defaults of fields added
 * after its header. @return 0, or 1 when given_size is below `base_size` (the first layout) or
 * a larger struct than ours has nonzero bytes we do not know. */
int struct_read(void *local, size_t local_size, const void *given, size_t given_size,
                size_t base_size);
/* Copies `local` into a caller's output struct, no further than its struct_size (its first
 * member), which stays as the caller set it. @return 0, or 1 when that is below base_size. */
int struct_write(void *caller, const void *local, size_t local_size, size_t base_size);
/* The *_init_sized functions: writes `local` (a struct with its defaults) into a caller's struct
 * of given_size bytes, zeroes what a newer header has beyond ours, and sets struct_size.
 * @return 0, or 1 for NULL or a size below base_size. */
int struct_init(void *caller, size_t given_size, const void *local, size_t local_size,
                size_t base_size);
/* The *_init_sized functions of structs whose defaults are all zero (the info and stats
 * structs a getter fills): the caller's struct of given_size bytes zeroed, struct_size set.
 * @return CLATTN_SUCCESS, or CLATTN_ERR_INVALID_ARGUMENT for NULL or a size below base_size. */
clattn_status struct_init_zeroed(void *caller, size_t given_size, size_t base_size);

/* ---- storage types */

/* float32, float16, bfloat16: what Q, O and softmax inputs may be */
static inline int dtype_known(clattn_dtype t) {
    return t == CLATTN_F32 || t == CLATTN_F16 || t == CLATTN_BF16;
}

/* ggml's quantised blocks, which K and V may also be stored as: 32 values, a float16 scale d,
 * then 32 int8 q (q8_0, value d * q) or 16 bytes of 4-bit q, value j's low nibble of byte j and
 * value j + 16's high nibble (q4_0, value (q - 8) * d). */
#define Q8_BLOCK       32 /* values a block, both types */
#define Q8_BLOCK_BYTES 34
#define Q4_BLOCK_BYTES 18

static inline int dtype_is_quantised(clattn_dtype t) {
    return t == CLATTN_Q8_0 || t == CLATTN_Q4_0;
}

/* the float types and the quantised ones, which K and V may also be */
static inline int kv_dtype_known(clattn_dtype t) {
    return dtype_known(t) || dtype_is_quantised(t);
}

/* Bytes a value of a float type takes (not for the quantised types: see dtype_bytes). */
static inline size_t dtype_size(clattn_dtype t) {
    return t == CLATTN_F32 ? 4 : 2;
}

/* Bytes a block of a quantised type takes. */
static inline size_t quant_block_bytes(clattn_dtype t) {
    return t == CLATTN_Q4_0 ? Q4_BLOCK_BYTES : Q8_BLOCK_BYTES;
}

/* Bytes `values` values take (for a quantised type, a multiple of Q8_BLOCK). */
static inline size_t dtype_bytes(clattn_dtype t, size_t values) {
    return dtype_is_quantised(t) ? values / Q8_BLOCK * quant_block_bytes(t)
                                 : values * dtype_size(t);
}

/* Value i of an array of a float type, as float32 (convert.c). */
float dtype_load_float(clattn_dtype dtype, const void *src, size_t i);

/* Whether a block of 32 values cannot be stored as quantised type `t`: its float16 scale
 * rounds to infinity (q8_0: the largest finite |x| over 127, from a finite |x| of Q8_MAX_VALUE
 * up; q4_0: the finite value of largest magnitude over -8, from Q4_MAX_VALUE up). Such a block
 * would dequantise to NaN throughout, so it is refused (convert.c). */
int quant_scale_overflows(clattn_dtype t, const float *block);
#define Q8_MAX_VALUE 8321040.0 /* the smallest float32 m with float16(m / 127) = inf */
#define Q4_MAX_VALUE 524160.0  /* the smallest float32 m with float16(m / 8) = inf */

/* The smallest finite |x| that makes a block of quantised type t overflow. */
static inline double quant_max_value(clattn_dtype t) {
    return t == CLATTN_Q4_0 ? Q4_MAX_VALUE : Q8_MAX_VALUE;
}

/* "f32", "f16", "bf16", "q8_0", "q4_0" */
static inline const char *dtype_name(clattn_dtype t) {
    return t == CLATTN_F16    ? "f16"
           : t == CLATTN_BF16 ? "bf16"
           : t == CLATTN_Q8_0 ? "q8_0"
           : t == CLATTN_Q4_0 ? "q4_0"
                              : "f32";
}

/* ---- checked size arithmetic: return 1 on overflow */

static inline int size_mul(size_t a, size_t b, size_t *out) {
    return __builtin_mul_overflow(a, b, out);
}
static inline int size_add(size_t a, size_t b, size_t *out) {
    return __builtin_add_overflow(a, b, out);
}

/* ---- the context (context.c) */

struct program_entry; /* program.c: one built program and its kernels */

/* Buffers a context keeps from call to call (workspace_get), by purpose. */
enum {
    WORKSPACE_PACKED_K,
    WORKSPACE_PACKED_V,
    WORKSPACE_V_FLAGS,
    WORKSPACE_GEMM_PANELS, /* the panels GEMM row: B packed per call */
    WORKSPACE_SLOTS
};

/* Something a layer above keeps per context and releases when the context goes: the layer
 * registers it once (context_on_destroy), so the core needs to know nothing of it. */
typedef void (*context_cleanup)(clattn_context *ctx);
#define MAX_CONTEXT_CLEANUPS 8

struct clattn_context {
    clattn_device_info device;
    cl_context cl_ctx;
    cl_command_queue queue;
    int wrapped;   /* cl_ctx and queue belong to the caller; we hold one reference each */
    int profiling; /* the queue records event timestamps */
    struct program_entry *programs; /* in-memory program cache, newest first */
    unsigned programs_built;        /* from source, in this context */
    unsigned programs_loaded;       /* from the disk cache, in this context */
    char *build_log;                /* of the last failed build, or NULL */
    error_record error;             /* the last failing call's message */
    clattn_stats stats;
    int has_stats;
    int timing;         /* sum kernel times into stats.kernel_ms (waits for each call) */
    int in_attention;   /* inside clattn_attention: the events timing keeps */
    cl_event timed[32]; /* the current call's kernels while timing */
    unsigned num_timed;
    double timed_ms;       /* kernel time of events already summed (the list was full) */
    unsigned timed_events; /* events timing_finish summed for the last call (tests read it) */
    unsigned summed;       /* events summed so far in the current call */
    cl_mem workspace[WORKSPACE_SLOTS]; /* buffers kept between calls (workspace_get) */
    size_t workspace_bytes[WORKSPACE_SLOTS];
    context_cleanup cleanups[MAX_CONTEXT_CLEANUPS];
    void *cleanup_data[MAX_CONTEXT_CLEANUPS]; /* what each layer keeps (context_data) */
    unsigned num_cleanups;
    clattn_transfers transfers;  /* host-device traffic of every call (buffers.c counts) */
    clattn_transfers call_start; /* the totals when the current attention call began */
    int host_unified_memory;     /* CL_DEVICE_HOST_UNIFIED_MEMORY: host arrays are mapped */
    int serialize_launches;      /* the device runs kernels in the enqueuing thread: launch_lock */
    atomic_int in_call;          /* a thread is inside a public call on it (context_enter) */
    int launched_in_call;        /* the current call has enqueued a kernel (launch_within) */
    int verify_policy;           /* clattn_verify_policy (FROM_ENV: $CLATTN_VERIFY) */
    unsigned verify_flags;       /* CLATTN_VERIFY_STRICT, CLATTN_VERIFY_FIRST_USE */
    int first_use_checked;       /* self-verification ran (or was not needed) on this context */
};

/* A context serves one thread at a time. Public calls on a context run between context_enter
 * and context_leave; in every build, context_enter finds a second thread inside a call on the
 * same context, says so once on stderr and returns 1 (the call then returns
 * CLATTN_ERR_INVALID_ARGUMENT and touches nothing of the context); else it returns 0. */
int context_enter(clattn_context *ctx);
void context_leave(clattn_context *ctx);
/* context_leave(ctx), then `status`: the second half of IN_CONTEXT. A call that fails after it
 * enqueued a kernel (a pack, a first pass) first waits for the queue to drain, so that nothing
 * it started still reads or writes the caller's memory once it returns. */
clattn_status context_left(clattn_context *ctx, clattn_status status);
/* A public call's work on a context, as an expression: CLATTN_ERR_INVALID_ARGUMENT for a NULL
 * ctx or one another thread is inside, else `call` (giving the call's clattn_status) evaluated
 * between context_enter and context_leave:
 *     return IN_CONTEXT(ctx, describe_in_call(ctx, gemm, info)); */
#define IN_CONTEXT(ctx, call)                                                                      \
    ((!(ctx) || context_enter(ctx)) ? CLATTN_ERR_INVALID_ARGUMENT : context_left((ctx), (call)))

/* Records the message on ctx (ctx may be NULL) and returns `status`. */
clattn_status ctx_error(clattn_context *ctx, clattn_status status, const char *fmt, ...)
    PRINTF_LIKE(3, 4);
/* For OpenCL failures: "<what>: CL_<NAME> (<code>)". Returns the OpenCL code as status. */
clattn_status ctx_cl_error(clattn_context *ctx, cl_int err, const char *what);
void ctx_clear_error(clattn_context *ctx);

/* PoCL 3.1's "basic" device runs each kernel in the thread that enqueues it, and its cache of
 * loaded kernels is not safe for two such threads at once (an assertion in
 * pocl_release_dlhandle_cache aborts the process, on contexts of their own). On such a device
 * every launch, clattn's and CLBlast's, holds one process-wide lock; elsewhere these do
 * nothing. */
void launch_lock(const clattn_context *ctx);
void launch_unlock(const clattn_context *ctx);

/* Registers `cleanup` to run when ctx is destroyed, once per function. @return 1 when it is
 * registered now, 0 when it already was, -1 when the list is full (a bug: raise the limit). */
int context_on_destroy(clattn_context *ctx, context_cleanup cleanup);
/* The pointer a layer keeps on ctx under its cleanup, registering the cleanup on first use
 * (*slot starts NULL; the cleanup frees what it points to). NULL when the list is full. */
void **context_data(clattn_context *ctx, context_cleanup cleanup);
/* What context_data keeps on ctx under `cleanup`, or NULL where nothing was registered yet;
 * registers nothing. */
void *context_data_find(const clattn_context *ctx, context_cleanup cleanup);

/* ---- devices (device.c) */

clattn_status device_describe(cl_platform_id platform, cl_device_id device,
                              clattn_device_info *info);
/* A wrapped device's place in the process's discovery: info->index, platform_index and
 * device_index of the listed device that is info->device, or index SIZE_MAX when discovery does
 * not list it (then no "--device N" names it). */
void device_place(clattn_device_info *info);

/* The likely cause of a platform that loaded but offered no device, by its CL_PLATFORM_NAME:
 * one clause, naming what to check (no_device.c). */
void platform_no_device_cause(const char *platform_name, char *out, size_t size);

/* ---- programs and kernels (program.c) */

/* A program is built from the concatenation of `files` (names of embedded sources: the files
 * of cl/ and the generated ones, e.g. "common.cl") with `defines` ("-DHEAD_DIM=64 ...").
 * -cl-std follows the device. Programs live in the context's memory cache and in the disk
 * cache; kernels are created once per program and name. */
clattn_status kernel_get(clattn_context *ctx, const char *const *files, size_t num_files,
                         const char *defines, const char *kernel_name, cl_kernel *kernel);
void program_cache_release(clattn_context *ctx);
/* FNV-1a of every kernel source the library builds (the embedded ones, or those of
 * $CLATTN_KERNEL_DIR where it holds them): what a verdict of `clattn check` was reached on. */
uint64_t kernel_sources_hash(void);
/* The cache folder in use, or NULL when disabled ($CLATTN_CACHE_DIR=off). Writes into buf. */
const char *program_cache_dir(char *buf, size_t size);
/* The path of file `name` in the cache folder (NULL: the folder itself), whether or not it
 * exists, into the caller's buffer, as clattn_cache_folder, clattn_tuning_file and
 * clattn_verdicts_file give it. @return CLATTN_SUCCESS, CLATTN_ERR_UNSUPPORTED when the folder
 * is off, or CLATTN_ERR_INVALID_ARGUMENT for no buffer or one too short. */
clattn_status program_cache_path(const char *name, char *path, size_t size);
/* The cache folder when it may be read (and, with `create`, written): enabled, made 0700 when
 * `create`, and private (folder_is_private), as its real path, links resolved, which is what
 * was judged. NULL otherwise; a folder refused is also said once per process on stderr, with
 * why. */
const char *program_cache_trusted_dir(char *buf, size_t size, int create);

/* The cache folder's compiled kernels as a whole (cache_folder.c). */
typedef struct cache_usage {
    uint64_t bytes, other_version_bytes;
    size_t entries, other_version_entries;
    int64_t oldest_use, newest_use; /* seconds since 1970; 0 without entries */
} cache_usage;
/* Whether a file name is a compiled-kernel entry's (16 hex digits, ".clbin"). */
int cache_entry_name(const char *name, size_t len);
/* $CLATTN_CACHE_MAX_MB in bytes (MiB, fractions allowed), by default 256 MiB. */
uint64_t cache_limit_bytes(void);
/* Marks an entry as used now (its modification time), for the least-recently-used order. */
void cache_entry_touch(const char *path);
/* What the folder's entries hold. @return 0, or errno. A missing folder holds nothing. */
int cache_usage_get(const char *dir, cache_usage *usage);
/* Removes entries until they total at most limit_bytes: other clattn versions first, then the
 * least recently used. @return 0, or the errno of the first entry that could not be removed
 * (the others are still tried); *removed counts the entries removed. */
int cache_trim(const char *dir, uint64_t limit_bytes, size_t *removed);

/* Writes `size` bytes to `path` through a temporary file in the same folder and a rename, so
 * that a reader never sees half a file (file.c). @return 0, or errno. */
int write_file_atomic(const char *path, const void *data, size_t size);
/* Holds `path`.lock (made 0600 when missing, never through a link) locked against the other
 * processes that update `path` the same way, for a read, merge and rewrite (flock). @return the
 * lock's descriptor for file_unlock, or -1 with errno. */
int file_lock(const char *path);
void file_unlock(int fd);
/* Removes from `dir` what write_file_atomic's writers left there when they were killed: files
 * named TARGET.tmp.PID.N where is_target(TARGET, its length) accepts TARGET, regular files of
 * this process's user, and PID a process that does not exist (kill(PID, 0) fails with ESRCH;
 * a live process's file is never touched). @return how many were removed. */
size_t remove_stale_temporaries(const char *dir, int (*is_target)(const char *name, size_t len));
/* Reads a whole regular file (NUL-terminated; *size bytes) of at most max_size bytes. The open
 * never blocks (a FIFO named like the file is refused, not waited on) and, unless
 * follow_links, never goes through a symbolic link. @return the data, or NULL with errno. */
char *read_regular_file(const char *path, size_t max_size, int follow_links, size_t *size);
/* Whether a folder may hold what this process loads and runs (compiled kernels, tuning), as ssh
 * judges its files: a folder owned by the process's user and writable by no one else, below
 * folders owned by root or the user that others cannot write to (unless sticky, like /tmp).
 * Its real path (links resolved), which was judged, goes to `resolved` (may be NULL): work
 * through it, so that a link swapped after the check changes nothing.
 * @return 1, or 0 with the reason in `why`. */
int folder_is_private(const char *path, char *why, size_t size, char *resolved,
                      size_t resolved_size);
/* mkdir -p; the folders it creates are 0700. @return 0 or -1 (errno). */
int make_private_dirs(const char *path);

/* Sets kernel arguments in order and keeps the first error. */
typedef struct kernel_args {
    cl_kernel kernel;
    cl_uint next;
    cl_int err;
} kernel_args;
void kernel_arg(kernel_args *args, size_t size, const void *value);
#define KARG(args, value) kernel_arg(&(args), sizeof(value), &(value))

/* ---- what a work-group may use (limits.c)
 *
 * A device states one work-group limit and one local memory size, but a compiled kernel may
 * allow fewer work-items (CL_KERNEL_WORK_GROUP_SIZE: registers; Intel and mobile GPUs) and may
 * declare more local memory than the planner counted. Planners fit their tiles to
 * launch_limits, which start as the device's (plans take them as an input, so a test can plan
 * against lower ones); after a build, launch_limits_narrow folds in the kernel's own, and the
 * planner fits again. kernel_launch refuses what still does not fit, with the reason, so a
 * launch never fails on a limit. */
typedef struct launch_limits {
    size_t work_group_size;   /* work-items a work-group */
    uint64_t local_mem_bytes; /* local memory a work-group */
} launch_limits;

/* What a compiled kernel reports for the device. */
typedef struct kernel_limits {
    size_t work_group_size;     /* CL_KERNEL_WORK_GROUP_SIZE */
    uint64_t local_mem_bytes;   /* CL_KERNEL_LOCAL_MEM_SIZE: what it uses, arguments included */
    uint64_t private_mem_bytes; /* CL_KERNEL_PRIVATE_MEM_SIZE: a work-item's (logged) */
} kernel_limits;

/* The device's limits. */
launch_limits launch_limits_of_device(const clattn_device_info *device);
/* Queries a kernel's limits on ctx's device (a query that fails leaves the device's). */
void kernel_limits_get(const clattn_context *ctx, cl_kernel kernel, kernel_limits *out);
/* Folds the kernel's limits into *limits for a plan of `group` work-items that the planner
 * fitted by counting `counted` bytes of local memory against limits->local_mem_bytes: the
 * kernel's work-group limit, and, when the kernel uses more local memory than the budget, a
 * budget smaller by what the count missed (so below `counted`: the next fit is smaller).
 * @return 1 when the plan does not fit and the limits were narrowed (fit again), else 0. */
int launch_limits_narrow(launch_limits *limits, size_t group, uint64_t counted,
                         const kernel_limits *kernel);

/* Loop iterations a work-item may run, all its loops together, before the device ends every
 * loop early without an error; 0 where no such limit is known. Mesa's llvmpipe (rusticl's CPU
 * device) has 65535 (gallivm's LP_MAX_TGSI_LOOP_ITERATIONS, a guard against endless shaders):
 * past it each loop runs at most once more and the kernel goes on to write wrong results.
 * Planners keep a work-item's loops within it (kernels/compilers.c, gemm/panels.c). */
unsigned long device_loop_budget(const clattn_device_info *device);

/* Enqueues a kernel; records the failure on ctx. While timing, the kernel's event is kept for
 * timing_finish. A local size above the kernel's CL_KERNEL_WORK_GROUP_SIZE, or a kernel whose
 * local memory exceeds the device's, is refused with CLATTN_ERR_UNSUPPORTED and the numbers,
 * not enqueued. */
clattn_status kernel_launch(clattn_context *ctx, cl_kernel kernel, cl_uint dims,
                            const size_t *global, const size_t *local, cl_event *event,
                            const char *what);

/* kernel_launch with work-groups of LAUNCH_GROUP_X work-items along dimension 0 (1 along the
 * others) and dimension 0 rounded up to whole groups, for the helper kernels that would leave
 * the size to the driver: PoCL compiles a kernel once for each work-group size it meets, and the
 * size it picks itself follows the global size, so each new length would compile the kernel
 * again. The kernel skips the work-items past its own size along dimension 0. A kernel that
 * allows fewer work-items a group is launched with the size left to the driver. (Not used for
 * convert.cl's widen_rows and narrow_rows: padded, with their bounds test, they made a float16
 * gemm call 5 % slower on PoCL; bench/README.md.) */
#define LAUNCH_GROUP_X 64
clattn_status kernel_launch_padded(clattn_context *ctx, cl_kernel kernel, cl_uint dims,
                                   const size_t *global, cl_event *event, const char *what);

/* Keeps an event of the current attention call for timing_finish (no-op unless timing, and
 * outside clattn_attention: clattn_softmax's kernels are not an attention call's); a full list is
 * waited for and summed first, so a call may launch any number of kernels. */
void timing_track(clattn_context *ctx, cl_event event);
/* Waits for the call's kernels and returns their summed execution time in ms (0 when not
 * timing); releases the kept events. */
double timing_finish(clattn_context *ctx);

/* ---- buffers (buffers.c) */

/* A buffer of at least `bytes` that the context keeps between calls (allocated, or grown, on
 * demand), so that repeated calls do not allocate and first-touch their scratch memory each
 * time. *out is a new reference the caller releases; the queue is in-order, so the next call's
 * writes wait for this call's kernels. */
clattn_status workspace_get(clattn_context *ctx, int slot, size_t bytes, cl_mem *out,
                            const char *what);

/* Size of a buffer in bytes, or 0 for an invalid one. */
size_t buffer_size(cl_mem buffer);
/* Whether a buffer was created CL_MEM_READ_ONLY, so that no kernel may write it. */
int buffer_read_only(cl_mem buffer);
/* The bytes [begin, end) of a buffer's range in the memory object that owns them (a sub-buffer's
 * parent, at the sub-buffer's origin) and, for memory the caller lent with CL_MEM_USE_HOST_PTR,
 * in the host address space, so that two ranges compare however the caller made them. */
typedef struct byte_range {
    cl_mem root;
    size_t begin, end;
    uintptr_t host_begin, host_end; /* 0, 0 without a host pointer */
} byte_range;
byte_range buffer_bytes(cl_mem buffer, size_t first_byte, size_t end_byte);
/* Whether two ranges share a byte, on the device or in host memory. */
int byte_ranges_overlap(const byte_range *a, const byte_range *b);
/* Creates a buffer and records failures as "allocating <what> (<bytes> bytes)". A buffer
 * made from host memory counts in ctx->transfers: CL_MEM_COPY_HOST_PTR as bytes copied to the
 * device, CL_MEM_USE_HOST_PTR as bytes mapped. */
clattn_status buffer_create(clattn_context *ctx, cl_mem_flags flags, size_t bytes, void *host,
                            cl_mem *out, const char *what);
/* A buffer over `bytes` of a caller's host array, for one call that waits for its commands
 * before it returns: on a device that shares host memory (ctx->host_unified_memory: CPUs,
 * integrated GPUs) the array itself, which the device reads and writes in place
 * (CL_MEM_USE_HOST_PTR: mapped, not copied); elsewhere a copy (CL_MEM_COPY_HOST_PTR). `access`
 * is CL_MEM_READ_ONLY or CL_MEM_READ_WRITE. Results come back with buffer_to_host. */
clattn_status buffer_from_host(clattn_context *ctx, cl_mem_flags access, size_t bytes,
                               const void *host, cl_mem *out, const char *what);
/* Brings the first `bytes` of a buffer to host memory at `host`, waiting: a buffer made over
 * that very memory (buffer_from_host on a shared-memory device) is mapped and unmapped, which
 * makes the device's writes visible without a copy; any other is read (buffer_read). */
clattn_status buffer_to_host(clattn_context *ctx, cl_mem buffer, size_t bytes, void *host,
                             const char *what);
/* Blocking copies between a buffer (from byte `offset`) and host memory, counted in
 * ctx->transfers; a failure is recorded as "<what>: CL_<NAME> (<code>)". */
clattn_status buffer_write(clattn_context *ctx, cl_mem buffer, size_t offset, size_t bytes,
                           const void *host, const char *what);
clattn_status buffer_read(clattn_context *ctx, cl_mem buffer, size_t offset, size_t bytes,
                          void *host, const char *what);

/* The transfer fields of an attention call's statistics: transfers_mark where the call begins
 * (before it copies anything), stats_record_transfers once it succeeded (after its reads), which
 * writes the traffic since the mark into ctx->stats. */
void transfers_mark(clattn_context *ctx);
void stats_record_transfers(clattn_context *ctx);

/* The buffers one call allocates, released together; `bytes` sums what they took. A one-word
 * placeholder stands in for absent optional arguments (OpenCL wants a buffer there). */
#define BUFFER_SET_MAX 24
typedef struct buffer_set {
    cl_mem held[BUFFER_SET_MAX];
    unsigned count;
    cl_mem placeholder;
    uint64_t bytes;
} buffer_set;

/* A buffer of count * elem bytes (copied from `host` when given, else read-write), held by the
 * set; count 0 gives the placeholder. Size overflow is CLATTN_ERR_OUT_OF_MEMORY. */
clattn_status buffer_set_add(clattn_context *ctx, buffer_set *set, size_t count, size_t elem,
                             const void *host, cl_mem *out, const char *what);
/* A 32-bit word that starts at zero and that kernels write (a tile counter, a flag), held by
 * the set. Read-write: a buffer created read-only from host memory must not be written. */
clattn_status buffer_set_add_zeroed_word(clattn_context *ctx, buffer_set *set, cl_mem *out,
                                         const char *what);
/* The context's workspace buffer of `slot`, held by the set and counted in its bytes. */
clattn_status buffer_set_workspace(clattn_context *ctx, buffer_set *set, int slot, size_t bytes,
                                   cl_mem *out, const char *what);
/* The placeholder itself (created on first use). */
clattn_status buffer_set_placeholder(clattn_context *ctx, buffer_set *set, cl_mem *out);
void buffer_set_release(buffer_set *set);

#endif /* CLATTN_CORE_H */
