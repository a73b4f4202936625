/*
 * clattn - portable attention on OpenCL.
 *
 * This header is the whole public API. It computes
 *
 *     O = softmax(scale * Q K^T + bias, over the allowed keys) V
 *
 * with the exact semantics of docs/semantics.md (masks, bottom-right causal alignment,
 * GQA/MQA, layouts, empty rows); docs/api.md is the guide to this header.
 *
 * Conventions
 * - Every function returns a clattn_status (0 is success). OpenCL's own error codes pass
 *   through with their values; the library's own codes live in a separate range (-7001...).
 * - Handles are opaque; every *_destroy accepts NULL.
 * - The library never exits or aborts; on an error it releases what the call acquired, and
 *   clattn_context_last_error() names the problem in one line.
 * - Sizes and offsets are in elements unless a name ends in _bytes.
 *
 * Structs that can grow (ABI)
 * - clattn_device_info, clattn_softmax_desc, clattn_attention_desc, clattn_stats,
 *   clattn_transfers, clattn_pattern_desc, clattn_mha_desc, clattn_mha_info, clattn_mha_stats
 *   and clattn_merge_desc start with
 *   `struct_size`, which the caller sets to sizeof the struct its header declares (the *_init
 *   functions do it). Later versions only append fields, whose zero
 *   value is their default, so a binary built against an older header keeps working: the
 *   library reads the fields its struct_size covers and takes the defaults for the rest, and
 *   writes an output struct only up to its struct_size. A struct_size larger than the library
 *   knows (a newer header) is accepted when the unknown bytes are zero, and refused with
 *   CLATTN_ERR_INVALID_ARGUMENT otherwise; so is one smaller than the first layout.
 * - The *_init macros pass sizeof the caller's struct to the *_init_sized functions, which
 *   write that many bytes and no more. Bindings without macros call the _sized functions.
 */
#ifndef CLATTN_H
#define CLATTN_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(CLATTN_SHARED_BUILD)
#define CLATTN_API __declspec(dllexport)
#elif defined(__GNUC__)
#define CLATTN_API __attribute__((visibility("default")))
#else
#define CLATTN_API
#endif

/* ---------------------------------------------------------------- version */

#define CLATTN_VERSION_MAJOR  0
#define CLATTN_VERSION_MINOR  2
#define CLATTN_VERSION_PATCH  0
#define CLATTN_VERSION_STRING "0.2.0"
#define CLATTN_VERSION_NUMBER                                                                      \
    (CLATTN_VERSION_MAJOR * 10000 + CLATTN_VERSION_MINOR * 100 + CLATTN_VERSION_PATCH)

/** @return the library's version as "MAJOR.MINOR.PATCH" (static storage). */
CLATTN_API const char *clattn_version(void);

/* ---------------------------------------------------------------- status */

/*
 * X(name, value, description). OpenCL codes keep their values and names; the library's own
 * codes sit in -7001..-7099. Values are stable: new codes are only ever appended.
 */
#define CLATTN_STATUS_MAP(X)                                                                       \
    X(SUCCESS, 0, "success")                                                                       \
    X(CL_DEVICE_NOT_FOUND, -1, "no OpenCL device of the requested type")                           \
    X(CL_DEVICE_NOT_AVAILABLE, -2, "OpenCL device not available")                                  \
    X(CL_COMPILER_NOT_AVAILABLE, -3, "OpenCL compiler not available")                              \
    X(CL_MEM_OBJECT_ALLOCATION_FAILURE, -4, "device memory allocation failed")                     \
    X(CL_OUT_OF_RESOURCES, -5, "device out of resources")                                          \
    X(CL_OUT_OF_HOST_MEMORY, -6, "OpenCL runtime out of host memory")                              \
    X(CL_PROFILING_INFO_NOT_AVAILABLE, -7, "profiling information not available")                  \
    X(CL_MEM_COPY_OVERLAP, -8, "overlapping memory copy")                                          \
    X(CL_IMAGE_FORMAT_MISMATCH, -9, "image format mismatch")                                       \
    X(CL_IMAGE_FORMAT_NOT_SUPPORTED, -10, "image format not supported")                            \
    X(CL_BUILD_PROGRAM_FAILURE, -11, "OpenCL program build failed")                                \
    X(CL_MAP_FAILURE, -12, "buffer map failed")                                                    \
    X(CL_MISALIGNED_SUB_BUFFER_OFFSET, -13, "misaligned sub-buffer offset")                        \
    X(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST, -14, "an event in the wait list failed")       \
    X(CL_COMPILE_PROGRAM_FAILURE, -15, "OpenCL program compile failed")                            \
    X(CL_LINKER_NOT_AVAILABLE, -16, "OpenCL linker not available")                                 \
    X(CL_LINK_PROGRAM_FAILURE, -17, "OpenCL program link failed")                                  \
    X(CL_DEVICE_PARTITION_FAILED, -18, "device partition failed")                                  \
    X(CL_KERNEL_ARG_INFO_NOT_AVAILABLE, -19, "kernel argument info not available")                 \
    X(CL_INVALID_VALUE, -30, "invalid value passed to OpenCL")                                     \
    X(CL_INVALID_DEVICE_TYPE, -31, "invalid device type")                                          \
    X(CL_INVALID_PLATFORM, -32, "invalid platform")                                                \
    X(CL_INVALID_DEVICE, -33, "invalid device")                                                    \
    X(CL_INVALID_CONTEXT, -34, "invalid OpenCL context")                                           \
    X(CL_INVALID_QUEUE_PROPERTIES, -35, "invalid queue properties")                                \
    X(CL_INVALID_COMMAND_QUEUE, -36, "invalid command queue")                                      \
    X(CL_INVALID_HOST_PTR, -37, "invalid host pointer")                                            \
    X(CL_INVALID_MEM_OBJECT, -38, "invalid buffer (cl_mem)")                                       \
    X(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR, -39, "invalid image format descriptor")                  \
    X(CL_INVALID_IMAGE_SIZE, -40, "invalid image size")                                            \
    X(CL_INVALID_SAMPLER, -41, "invalid sampler")                                                  \
    X(CL_INVALID_BINARY, -42, "invalid program binary")                                            \
    X(CL_INVALID_BUILD_OPTIONS, -43, "invalid build options")                                      \
    X(CL_INVALID_PROGRAM, -44, "invalid program")                                                  \
    X(CL_INVALID_PROGRAM_EXECUTABLE, -45, "program not built for the device")                      \
    X(CL_INVALID_KERNEL_NAME, -46, "kernel name not found in program")                             \
    X(CL_INVALID_KERNEL_DEFINITION, -47, "invalid kernel definition")                              \
    X(CL_INVALID_KERNEL, -48, "invalid kernel")                                                    \
    X(CL_INVALID_ARG_INDEX, -49, "invalid kernel argument index")                                  \
    X(CL_INVALID_ARG_VALUE, -50, "invalid kernel argument value")                                  \
    X(CL_INVALID_ARG_SIZE, -51, "invalid kernel argument size")                                    \
    X(CL_INVALID_KERNEL_ARGS, -52, "kernel arguments not set")                                     \
    X(CL_INVALID_WORK_DIMENSION, -53, "invalid work dimension")                                    \
    X(CL_INVALID_WORK_GROUP_SIZE, -54, "invalid work-group size")                                  \
    X(CL_INVALID_WORK_ITEM_SIZE, -55, "invalid work-item size")                                    \
    X(CL_INVALID_GLOBAL_OFFSET, -56, "invalid global offset")                                      \
    X(CL_INVALID_EVENT_WAIT_LIST, -57, "invalid event wait list")                                  \
    X(CL_INVALID_EVENT, -58, "invalid event")                                                      \
    X(CL_INVALID_OPERATION, -59, "invalid OpenCL operation")                                       \
    X(CL_INVALID_GL_OBJECT, -60, "invalid GL object")                                              \
    X(CL_INVALID_BUFFER_SIZE, -61, "invalid buffer size")                                          \
    X(CL_INVALID_MIP_LEVEL, -62, "invalid mip level")                                              \
    X(CL_INVALID_GLOBAL_WORK_SIZE, -63, "invalid global work size")                                \
    X(CL_INVALID_PROPERTY, -64, "invalid property")                                                \
    X(CL_INVALID_IMAGE_DESCRIPTOR, -65, "invalid image descriptor")                                \
    X(CL_INVALID_COMPILER_OPTIONS, -66, "invalid compiler options")                                \
    X(CL_INVALID_LINKER_OPTIONS, -67, "invalid linker options")                                    \
    X(CL_INVALID_DEVICE_PARTITION_COUNT, -68, "invalid device partition count")                    \
    X(CL_INVALID_PIPE_SIZE, -69, "invalid pipe size")                                              \
    X(CL_INVALID_DEVICE_QUEUE, -70, "invalid device queue")                                        \
    X(CL_INVALID_SPEC_ID, -71, "invalid specialization constant id")                               \
    X(CL_MAX_SIZE_RESTRICTION_EXCEEDED, -72, "size exceeds a device limit")                        \
    X(CL_PLATFORM_NOT_FOUND_KHR, -1001, "no OpenCL platform installed (ICD loader)")               \
    X(ERR_INVALID_ARGUMENT, -7001, "invalid argument")                                             \
    X(ERR_UNSUPPORTED, -7002, "not supported")                                                     \
    X(ERR_NO_DEVICE, -7003, "no OpenCL device found")                                              \
    X(ERR_OUT_OF_MEMORY, -7004, "out of memory")                                                   \
    X(ERR_BUILD, -7005, "kernel build failed")                                                     \
    X(ERR_IO, -7006, "file input/output failed")                                                   \
    X(ERR_FORMAT, -7007, "malformed input file")                                                   \
    X(ERR_BLAS, -7008, "CLBlast call failed")                                                      \
    X(ERR_TIMEOUT, -7009, "another process did not answer in time")                                \
    X(ERR_COMM, -7010, "communication between processes failed")

#define CLATTN_STATUS_ENUM_ENTRY(name, value, text) CLATTN_##name = (value),
/** Status of every call: CLATTN_SUCCESS, CLATTN_CL_* (OpenCL's codes and values) and
 *  CLATTN_ERR_* (the library's own). */
typedef enum clattn_status { CLATTN_STATUS_MAP(CLATTN_STATUS_ENUM_ENTRY) } clattn_status;
#undef CLATTN_STATUS_ENUM_ENTRY

/** @return the name of a status: "CLATTN_ERR_BUILD", or OpenCL's own name for its codes
 *  ("CL_INVALID_VALUE"); "unknown status" for a value not in the table. */
CLATTN_API const char *clattn_status_name(clattn_status status);

/** @return a one-line description of a status ("kernel build failed", ...). */
CLATTN_API const char *clattn_status_string(clattn_status status);

/* ---------------------------------------------------------------- devices */

/** What planning needs to know about one OpenCL device. */
typedef struct clattn_device_info {
    size_t struct_size;      /* sizeof(clattn_device_info): clattn_device_info_init */
    size_t index;            /* position in clattn's list of every device of every platform */
    unsigned platform_index; /* P of the "P:D" device spec */
    unsigned device_index;   /* D of the "P:D" device spec */
    cl_platform_id platform;
    cl_device_id device;
    char name[256];
    char vendor[256];
    char platform_name[256];
    char platform_version[256];
    char driver_version[256];
    char opencl_c_version[128]; /* e.g. "OpenCL C 1.2 PoCL" */
    cl_device_type type;
    cl_uint compute_units;
    cl_ulong global_mem_bytes;
    cl_ulong local_mem_bytes;
    cl_ulong max_alloc_bytes;
    size_t max_work_group_size;
    cl_uint preferred_vector_width_float;
    cl_uint preferred_vector_width_half;
    int has_fp16; /* cl_khr_fp16: half arithmetic (half storage works everywhere) */
    int has_fp64;
    int has_subgroups; /* cl_khr_subgroups, cl_intel_subgroups or OpenCL 3.0 subgroups */
    unsigned num_subgroup_sizes;
    size_t subgroup_sizes[8]; /* as reported: Intel's list, NVIDIA's warp, AMD's wavefront */
} clattn_device_info;

/** Zeroes `struct_size` bytes of *info and sets info->struct_size, before
 *  clattn_device_get_info or clattn_context_device_info fills it. clattn_device_info_init(info)
 *  passes sizeof *info. @return CLATTN_SUCCESS, or INVALID_ARGUMENT (NULL, a size below the
 *  first layout). */
CLATTN_API clattn_status clattn_device_info_init_sized(clattn_device_info *info,
                                                       size_t struct_size);
#define clattn_device_info_init(info) clattn_device_info_init_sized((info), sizeof *(info))

/** Counts every device of every platform the ICD loader knows. Devices are discovered once per
 *  process (the first call of any device function), and the answer is kept.
 *  @return CLATTN_SUCCESS, also when the count is 0 (no driver is registered); or the platform
 *  query's failure: CLATTN_CL_PLATFORM_NOT_FOUND_KHR when drivers are registered but none could
 *  be loaded (a memory limit, a broken installation), or another OpenCL error (then *count is
 *  0 and a later call tries again). */
CLATTN_API clattn_status clattn_device_count(size_t *count);

/** What device discovery found but could not use, in one line, for a message that says why
 *  there is no device (or not the one expected): each platform that loaded but offered no
 *  device, named, with the likely cause ("platform 'Portable Computing Language' loaded but
 *  offered no device: PoCL refuses its devices when it cannot create its kernel cache folder,
 *  /dev/null/.cache/pocl/kcache ..."; PoCL's cache folder and POCL_DEVICES, rusticl's
 *  RUSTICL_ENABLE), or, when no platform loaded at all, what to install and what the driver
 *  search did. "" when every platform offered a device, and when discovery failed (then
 *  clattn_device_count's status says why). Runs discovery if no device call has yet.
 *  @return the line (static storage, never NULL). */
CLATTN_API const char *clattn_device_discovery_summary(void);

/** Fills *info for device `index` of the flat list (0 <= index < count).
 *  @return CLATTN_SUCCESS, or CLATTN_ERR_INVALID_ARGUMENT for an index out of range. */
CLATTN_API clattn_status clattn_device_get_info(size_t index, clattn_device_info *info);

/** Resolves a device spec to device indices, in list order.
 *  spec: an index ("0"), "P:D" (platform P, device D: exactly two decimal integers around one
 *  colon), a type ("gpu", "cpu", "accelerator", "all"), or else a case-insensitive substring of
 *  the device or platform name (which may hold colons: "gfx90a:sramecc+:xnack-"). NULL or ""
 *  means $CLATTN_DEVICE when set, else the default: the first GPU, else the first device.
 *  Writes up to `capacity` indices; *count receives how many matched.
 *  @return CLATTN_SUCCESS with *count >= 1; CLATTN_ERR_NO_DEVICE when nothing is installed or
 *  nothing matches (an index out of range, "1:", ":0"); CLATTN_ERR_INVALID_ARGUMENT for a NULL
 *  count, or NULL indices with capacity > 0. */
CLATTN_API clattn_status clattn_device_select(const char *spec, size_t *indices, size_t capacity,
                                              size_t *count);

/* ---------------------------------------------------------------- driver search */

/*
 * GPU machines and containers often hold a driver's OpenCL library but no .icd file that
 * registers it with the ICD loader, so OpenCL sees no platform. Before the loader's first use,
 * clattn's device discovery (every clattn_device_* call, and clattn_context_create) looks for
 * NVIDIA's libnvidia-opencl.so.1, AMD's libamdocl64.so, Intel's libigdrcl.so and PoCL's
 * libpocl.so.2 in the dynamic linker's paths ($LD_LIBRARY_PATH, ld.so.cache, /lib, /usr/lib)
 * and in the folders the drivers' packages use (/usr/lib/x86_64-linux-gnu, /usr/lib64,
 * /usr/local/nvidia/lib64, /opt/rocm/lib, .../intel-opencl, ...). A library no .icd file of
 * the loader's vendors folder ($OCL_ICD_VENDORS when it is a folder, else $OPENCL_VENDOR_PATH,
 * else /etc/OpenCL/vendors) and no entry of $OCL_ICD_FILENAMES names, that loads (dlopen with
 * RTLD_NOW) and exports clGetExtensionFunctionAddress, is handed to the loader: clattn writes
 * a private vendors folder holding the registered .icd files and one for each such library,
 * points $OCL_ICD_VENDORS at it while the loader initialises (understood by ocl-icd and by
 * Khronos' loader), then restores the variable and removes the folder. clattn never calls
 * into a found library itself. At most one library per vendor is taken, the first found.
 *
 * CLATTN_NO_DRIVER_SEARCH=1 turns the search off; an $OCL_ICD_VENDORS that names one .icd
 * file or one library (not a folder) is a choice of that one ICD and is left as it is. The
 * search runs once per process, inside the first device call; it has no effect when the
 * program has used OpenCL before (the loader is initialised by then). It sets and restores
 * an environment variable, so a program whose other threads read the environment meanwhile
 * should make its first device call before starting them.
 */

/** A driver the search found and handed to the ICD loader. */
typedef struct clattn_driver_info {
    size_t struct_size;          /* sizeof(clattn_driver_info): clattn_driver_info_init */
    char vendor[32];             /* "NVIDIA", "AMD", "Intel" or "PoCL" */
    char library[1024];          /* absolute path of the library handed to the loader */
    char icd_file[64];           /* the name to register it under: "nvidia.icd" */
    unsigned num_platforms;      /* the loader's platforms that come from it (0: none) */
    cl_platform_id platforms[8]; /* those platforms: compare with clattn_device_info.platform */
} clattn_driver_info;

/** Zeroes `struct_size` bytes of *info and sets info->struct_size, before
 *  clattn_driver_get_info fills it. clattn_driver_info_init(info) passes sizeof *info.
 *  @return CLATTN_SUCCESS, or INVALID_ARGUMENT (NULL, a size below the first layout). */
CLATTN_API clattn_status clattn_driver_info_init_sized(clattn_driver_info *info,
                                                       size_t struct_size);
#define clattn_driver_info_init(info) clattn_driver_info_init_sized((info), sizeof *(info))

/** Counts the drivers the search found and handed to the ICD loader (running the search if
 *  no device call has yet). To register one permanently, write its `library` as the only line
 *  of /etc/OpenCL/vendors/`icd_file`.
 *  @return CLATTN_SUCCESS, also when the count is 0; INVALID_ARGUMENT for a NULL count. */
CLATTN_API clattn_status clattn_driver_count(size_t *count);

/** Fills *info for found driver `index` (0 <= index < count).
 *  @return CLATTN_SUCCESS, or CLATTN_ERR_INVALID_ARGUMENT for an index out of range, NULL, or a
 *  struct_size below the first layout. */
CLATTN_API clattn_status clattn_driver_get_info(size_t index, clattn_driver_info *info);

/** @return one line saying what the search did: off, skipped and why, found nothing (and
 *  where it looked), or how many drivers it handed to the loader, or why it could not
 *  (static storage, never NULL). */
CLATTN_API const char *clattn_driver_search_summary(void);

/* ---------------------------------------------------------------- context */

typedef struct clattn_context clattn_context;

/** Creates a context, an in-order profiling command queue and a program cache on device
 *  `device_index` (see clattn_device_select). The context owns everything it creates.
 *  @return CLATTN_SUCCESS or the OpenCL / library error; *ctx is NULL on failure. */
CLATTN_API clattn_status clattn_context_create(clattn_context **ctx, size_t device_index);

/** Wraps a caller's OpenCL objects (interop). The caller keeps ownership: clattn retains them
 *  while the clattn context lives and releases only its own references. Work is enqueued on
 *  `queue`, which must be in-order; if it lacks CL_QUEUE_PROFILING_ENABLE, kernel timings are
 *  unavailable. A context is used by one thread at a time.
 *  @return CLATTN_SUCCESS, CLATTN_ERR_INVALID_ARGUMENT (NULL handles, a queue of another
 *  device or of another cl_context) or CLATTN_ERR_UNSUPPORTED (an out-of-order queue). */
CLATTN_API clattn_status clattn_context_wrap(clattn_context **ctx, cl_context cl_ctx,
                                             cl_device_id device, cl_command_queue queue);

/** Releases the context and everything it owns. Accepts NULL. */
CLATTN_API void clattn_context_destroy(clattn_context *ctx);

/** Copies the context's device description into *info.
 *  @return CLATTN_SUCCESS or CLATTN_ERR_INVALID_ARGUMENT for NULL arguments. */
CLATTN_API clattn_status clattn_context_device_info(const clattn_context *ctx,
                                                    clattn_device_info *info);

/** @return the context's OpenCL context (owned by clattn unless wrapped). */
CLATTN_API cl_context clattn_context_cl_context(const clattn_context *ctx);

/** @return the queue clattn enqueues on (owned by clattn unless wrapped). */
CLATTN_API cl_command_queue clattn_context_queue(const clattn_context *ctx);

/** @return the build log of the last program build that failed, or "" (never NULL). */
CLATTN_API const char *clattn_context_build_log(const clattn_context *ctx);

/** @return a one-line description of the last failing call on this context, naming the
 *  argument, file or sizes involved, or "" (never NULL). */
CLATTN_API const char *clattn_context_last_error(const clattn_context *ctx);

/* ---------------------------------------------------------------- tensors */

typedef enum clattn_dtype {
    CLATTN_F32 = 0,  /* float32 */
    CLATTN_F16 = 1,  /* float16 storage; all arithmetic accumulates in float32 */
    CLATTN_BF16 = 2, /* bfloat16 storage (uint16 bit patterns); arithmetic in float32 */
    CLATTN_Q8_0 = 3, /* K and V only (a KV cache's dtype, desc->kv_q8_0): blocks of 32 values,
                        each a float16 scale d then 32 int8 q, value = d * q (34 bytes, ggml's
                        q8_0). Rows hold whole blocks: head dims, offsets and strides (in values)
                        are multiples of 32. */
    CLATTN_Q4_0 = 4  /* K and V only (from 0.3; a KV cache's dtype, desc->kv_q4_0): blocks of 32
                        values, each a float16 scale d then 16 bytes of 4-bit q, value j of the
                        block in the low nibble of byte j and value j + 16 in its high nibble,
                        value = (q - 8) * d (18 bytes, ggml's q4_0). Rows hold whole blocks, as
                        for q8_0. */
} clattn_dtype;

typedef enum clattn_layout {
    CLATTN_LAYOUT_BSHD = 0, /* [B, N, H, D]: FlashAttention, ggml */
    CLATTN_LAYOUT_BHSD = 1  /* [B, H, N, D]: PyTorch */
} clattn_layout;

/** Where one of Q, K, V, O lives in its buffer: element offset and strides in elements for
 *  (batch, head, sequence); the head-dim stride is 1. */
typedef struct clattn_tensor {
    size_t offset;
    size_t stride_batch;
    size_t stride_head;
    size_t stride_seq;
} clattn_tensor;

/* ---------------------------------------------------------------- softmax */

/** A row softmax over a [rows, cols] matrix: out[r][c] = exp(scale*x[r][c] - m) / sum, and
 *  lse[r] = log(sum_c exp(scale*x[r][c])) (natural log). */
typedef struct clattn_softmax_desc {
    size_t struct_size; /* sizeof(clattn_softmax_desc): clattn_softmax_desc_init */
    size_t rows, cols;
    clattn_dtype dtype;                /* storage of in and out */
    float scale;                       /* multiplies every input */
    size_t in_offset, in_row_stride;   /* elements */
    size_t out_offset, out_row_stride; /* elements; out may be in, exactly (in place) */
} clattn_softmax_desc;

/** Fills *desc for a dense float32 [rows, cols] matrix softmaxed in place with scale 1.
 *  @return CLATTN_SUCCESS or CLATTN_ERR_INVALID_ARGUMENT (NULL, a size of 0). */
CLATTN_API clattn_status clattn_softmax_desc_init_sized(clattn_softmax_desc *desc,
                                                        size_t struct_size, size_t rows,
                                                        size_t cols);
#define clattn_softmax_desc_init(desc, rows, cols)                                                 \
    clattn_softmax_desc_init_sized((desc), sizeof *(desc), (rows), (cols))

/** Enqueues the softmax. `lse` may be NULL (float32, `rows` entries from offset 0). `event` may
 *  be NULL; otherwise it receives the kernel's event (the caller releases it). out may be in
 *  exactly (the same memory, offset and row stride); otherwise, and for LSE, no two of them may
 *  share a byte (compared as clattn_attention compares its tensors).
 *  @return CLATTN_SUCCESS, CLATTN_ERR_INVALID_ARGUMENT (sizes, strides, buffers too small,
 *  overlapping outputs), CLATTN_ERR_BUILD, or an OpenCL error. */
CLATTN_API clattn_status clattn_softmax(clattn_context *ctx, const clattn_softmax_desc *desc,
                                        cl_mem in, cl_mem out, cl_mem lse, cl_event *event);

/* ---------------------------------------------------------------- attention */

typedef enum clattn_path {
    CLATTN_PATH_AUTO = 0,     /* the first variant of the table that serves the call */
    CLATTN_PATH_FUSED = 1,    /* one tiled kernel, online softmax */
    CLATTN_PATH_GEMM = 2,     /* CLBlast GEMM, masked softmax, CLBlast GEMM */
    CLATTN_PATH_REFERENCE = 3 /* the CPU reference (double accumulation) */
} clattn_path;

/** The kernel variants: the rows of the variant table, each on one path. AUTO takes the first
 *  row, in the table's order of preference, that serves the call on the device (restricted to
 *  desc->path when that is not AUTO); $CLATTN_KERNEL=NAME names a row for calls that leave
 *  variant at AUTO. New rows are only ever appended. `clattn devices --variants` lists them. */
typedef enum clattn_variant {
    CLATTN_VARIANT_AUTO = 0,      /* "auto" */
    CLATTN_VARIANT_LANES = 1,     /* "lanes": fused; a query tile a work-item, its rows in the lanes
                                     of 16-wide vectors (CPU compilers vectorise them) */
    CLATTN_VARIANT_ROWWISE = 2,   /* "rowwise": fused; a query row a work-item, K/V tiles in
                                     local memory */
    CLATTN_VARIANT_GEMM = 3,      /* "gemm": CLBlast GEMM, masked softmax, CLBlast GEMM */
    CLATTN_VARIANT_REFERENCE = 4, /* "reference": the CPU reference on host copies */
    CLATTN_VARIANT_SPLIT = 5,     /* "split": K/V read in place, key chunks side by side and
                                     merged (decoding, KV caches) */
    CLATTN_VARIANT_FLASH = 6,     /* "flash": fused; FlashAttention-2's partition, micro-tiles a
                                     work-item, K/V tiles double-buffered in local memory (0.2) */
    CLATTN_VARIANT_NV_MMA = 7     /* "nv_mma": fused; FlashAttention-2's partition on NVIDIA
                                     tensor cores (mma.sync through inline PTX), 16-bit storage */
} clattn_variant;

/* The names of 0.2, which named two variants like device types; they stay until 0.4, and the
 * names "cpu" and "gpu" are read as "lanes" and "rowwise" (clattn_variant_from_name,
 * $CLATTN_KERNEL, --variant, tuning.json). */
#define CLATTN_VARIANT_CPU CLATTN_VARIANT_LANES
#define CLATTN_VARIANT_GPU CLATTN_VARIANT_ROWWISE

/** @return the variant's name ("lanes", "gemm", ...), or "unknown" for a value not in the
 *  table. */
CLATTN_API const char *clattn_variant_name(clattn_variant variant);

/** Looks a variant up by name (case-sensitive; "auto" gives CLATTN_VARIANT_AUTO; the old names
 *  "cpu" and "gpu" give LANES and ROWWISE).
 *  @return CLATTN_SUCCESS, or CLATTN_ERR_INVALID_ARGUMENT for a name that is no row. */
CLATTN_API clattn_status clattn_variant_from_name(const char *name, clattn_variant *variant);

/** Everything about one attention call except the buffers. Start from
 *  clattn_attention_desc_init(), then set the fields you need. */
typedef struct clattn_attention_desc {
    size_t struct_size; /* sizeof(clattn_attention_desc): clattn_attention_desc_init sets it */
    /* sizes, all >= 1; heads_q % heads_kv == 0 */
    size_t batch, heads_q, heads_kv, len_q, len_k, dim_qk, dim_v;
    clattn_dtype dtype;     /* storage of Q, K, V */
    clattn_dtype out_dtype; /* storage of O; LSE is always float32 [B, Hq, Nq] */
    clattn_tensor q, k, v, o;
    float scale; /* 0 selects the default 1/sqrt(dim_qk) */

    /* which keys a query may see (docs/semantics.md section 2); p = i + len_k - len_q */
    int causal;                   /* j <= p */
    int64_t window_left;          /* p - left <= j; -1: unbounded */
    int64_t window_right;         /* j <= p + right; -1: unbounded */
    int64_t dilation;             /* >= 1; with a window: (p - j) mod dilation == 0 */
    const int64_t *global_tokens; /* host array of key positions in [0, len_k), or NULL */
    size_t num_global_tokens;
    const uint8_t *block_layout; /* host [L][ceil(Nq/block_q)][ceil(Nk/block_k)], nonzero =
                                    allowed; L = heads_q if block_layout_per_head else 1 */
    size_t block_q, block_k;
    int block_layout_per_head;

    /* additive float32 bias [b, h, i, j] at bias_offset + b*stride_batch + h*stride_head +
       i*stride_seq + j; zero strides broadcast; -inf masks. clattn_attention reads `bias`,
       clattn_attention_host reads `bias_host`. */
    cl_mem bias;
    const float *bias_host;
    clattn_tensor bias_strides;

    clattn_path path;         /* AUTO, or the path whose variants may serve the call */
    clattn_variant variant;   /* AUTO, or the one variant to run (it must be on `path`) */
    size_t gemm_budget_bytes; /* score buffer budget of the gemm path; 0: default */

    /* ---- added in 0.2 (a caller whose struct_size stops above gets the defaults) */
    int count_tiles; /* nonzero: the fused kernels count the key tiles they visit, themselves
                        (clattn_stats.tiles_counted); a slower build, for tests and studies */
    int kv_q8_0;     /* nonzero: K and V are stored as CLATTN_Q8_0 blocks (Q keeps dtype; K/V
                        offsets and strides stay in values). Only the split variant reads
                        them; the fused and gemm paths refuse. */

    /* ---- added in 0.3: one shard of a longer sequence (context parallelism: ring attention,
       clattn_attention_multi, libclattn_mpi). The call computes the partial result of query
       rows [q_start, q_start + len_q) of a sequence of full_len_q queries over keys
       [k_start, k_start + len_k) of a sequence of full_len_k keys, and every mask applies at
       those whole-sequence positions: query i sits at p = q_start + i + full_len_k - full_len_q
       and key j at k_start + j (docs/semantics.md section 2 of the whole call); global_tokens are
       whole-sequence key positions in [0, full_len_k); block_layout covers the whole
       sequences, [L][ceil(full_len_q/block_q)][ceil(full_len_k/block_k)]. The bias stays the
       call's own [b, h, i, j] (point bias_strides.offset at the shard's first element). A row
       that sees no key of the shard gets O = 0 and LSE = -inf, so the partials of a row over
       disjoint key shards merge exactly through their LSE. full_len_q = 0 means len_q
       (then q_start must be 0), full_len_k = 0 likewise; all four 0 is an ordinary call. KV
       cache calls and layers refuse shards. */
    size_t q_start, k_start;
    size_t full_len_q, full_len_k;
    int lse_parts; /* nonzero: LSE holds two float32 a row, [B, Hq, Nq, 2]: the row's largest
                      score m and log(sum over its keys of exp(s - m)), whose sum is the LSE.
                      A row with no key has (-inf, -inf). Merging partials needs them: float32
                      cannot hold m + log(...) exactly once |m| is large (a row whose every key
                      has a bias of -FLT_MAX has LSE = -FLT_MAX, whatever its key count). KV
                      cache calls and layers refuse it. */

    /* ---- added in 0.3 (issue 33): what the peers compute (docs/semantics.md section 7) */
    int kv_q4_0; /* nonzero: K and V are stored as CLATTN_Q4_0 blocks, as kv_q8_0 stores q8_0
                    (not both). */
    /* Score modifiers and sinks (docs/semantics.md section 8), each on every path and in the
       reference; not with shards (q_start, ...) or lse_parts. */
    float softcap; /* > 0: each scaled score t = scale * q.k becomes softcap * tanh(t / softcap),
                      in float32, before ALiBi, the bias and the masks (Gemma 2); 0: off */
    const float *alibi_slopes; /* host float32 [Hq] (or [B][Hq] with alibi_per_batch), or NULL:
                                  ALiBi adds -slope[h] * |p - j| to each score after
                                  soft-capping, p = i + Nk - Nq (bottom-right aligned, as
                                  causal), computed in the kernels; clattn_pattern_alibi_slopes
                                  gives the standard slopes */
    int alibi_per_batch;       /* nonzero: alibi_slopes is [B][Hq] */
    const float *sinks;        /* host float32 [Hq], or NULL: head h's sink logit joins each
                                  row's softmax denominator (exp(sink - m)), adds nothing to O and
                                  enters the LSE; an empty row gets O = 0 and LSE = sink (gpt-oss) */
} clattn_attention_desc;

/** The smallest struct_size a desc may have: the fields up to gemm_budget_bytes. */
#define CLATTN_ATTENTION_DESC_BASE_SIZE                                                            \
    (offsetof(clattn_attention_desc, gemm_budget_bytes) + sizeof(size_t))

/** Fills *desc with the sizes, dense strides for `layout` on all of Q, K, V, O, float32
 *  storage, the default scale, no mask, path AUTO.
 *  @return CLATTN_SUCCESS or CLATTN_ERR_INVALID_ARGUMENT (NULL, a size of 0, overflow). */
CLATTN_API clattn_status clattn_attention_desc_init_sized(
    clattn_attention_desc *desc, size_t struct_size, clattn_layout layout, size_t batch,
    size_t heads_q, size_t heads_kv, size_t len_q, size_t len_k, size_t dim_qk, size_t dim_v);
#define clattn_attention_desc_init(desc, ...)                                                      \
    clattn_attention_desc_init_sized((desc), sizeof *(desc), __VA_ARGS__)

/** Bytes each tensor of a call spans in its buffer, from its offset to its last element. */
typedef struct clattn_attention_extents {
    size_t q, k, v, o;
    size_t lse;  /* float32 [B, Hq, Nq] */
    size_t bias; /* 0 when the desc has no bias (neither `bias` nor `bias_host`) */
} clattn_attention_extents;

/** Checks a desc as every entry point does (sizes, heads, dtypes, scale, masks, strides,
 *  overflow) without a context or a device. `extents` (may be NULL) receives the bytes each
 *  tensor spans; `message` (may be NULL) receives one line naming the problem, or "".
 *  @return CLATTN_SUCCESS or CLATTN_ERR_INVALID_ARGUMENT. */
CLATTN_API clattn_status clattn_attention_desc_check(const clattn_attention_desc *desc,
                                                     clattn_attention_extents *extents,
                                                     char *message, size_t message_size);

/** The tolerance that clattn's tests and `clattn check` hold every device to, against the
 *  reference (docs/semantics.md, section 4), for a call storing Q, K and V as `dtype` and O as
 *  `out_dtype` (the looser of the two; a quantised type counts as float16): a value of O passes
 *  when |got - ref| <= atol + rtol * |ref|, a value of LSE when |got - ref| <= lse * max(1,
 *  |ref|); NaN, infinities and -inf must match exactly. Any pointer may be NULL (from 0.3).
 *  @return CLATTN_SUCCESS, or CLATTN_ERR_INVALID_ARGUMENT for a value that is no storage type. */
CLATTN_API clattn_status clattn_tolerance(clattn_dtype dtype, clattn_dtype out_dtype, double *atol,
                                          double *rtol, double *lse);

/** Counts the (b, h, i, j) pairs the desc's mask allows (docs/semantics.md section 2; the bias is
 * not counted), exactly and without visiting every pair.
 *  @return CLATTN_SUCCESS, CLATTN_ERR_INVALID_ARGUMENT (a bad desc, or a count that does not fit
 *  64 bits: *pairs is then UINT64_MAX) or CLATTN_ERR_OUT_OF_MEMORY. */
CLATTN_API clattn_status clattn_attention_pairs(const clattn_attention_desc *desc, uint64_t *pairs);

/** Writes which keys query rows [row0, row0 + rows) of query head `head` may see:
 *  allowed[r * len_k + j] = 1 or 0 (the bias is not applied). For a picture of a pattern, or a
 *  dense implementation's mask. @return CLATTN_SUCCESS, CLATTN_ERR_INVALID_ARGUMENT (a bad
 *  desc, a head or rows out of range) or CLATTN_ERR_OUT_OF_MEMORY. */
CLATTN_API clattn_status clattn_attention_mask(const clattn_attention_desc *desc, size_t head,
                                               size_t row0, size_t rows, uint8_t *allowed);

/** Converts `count` values between storage types on the host: float32, float16 (IEEE binary16)
 *  and, from 0.2, the others of clattn_dtype. Narrowing rounds to nearest even; NaN stays NaN.
 *  CLATTN_Q8_0 takes whole blocks (count a multiple of 32), quantised as ggml's
 *  quantize_row_q8_0_ref does it, bit for bit: d = max|x| / 127 over the block's finite values
 *  in float32, q = round(x * (1 / d)) half away from zero within +-127 (NaN stores 0), and d
 *  stored rounded to float16. CLATTN_Q4_0 likewise (from 0.3), as ggml's quantize_row_q4_0_ref:
 *  m the block's finite value of largest magnitude (the first, with its sign), d = m / -8,
 *  q = min(15, trunc(x * (1 / d) + 8.5)) (NaN stores 8, the value 0; infinities 0 or 15). A block
 * whose scale overflows float16 is refused, and then nothing is written (clattn_convert_check names
 * the block).
 *  @return CLATTN_SUCCESS or CLATTN_ERR_INVALID_ARGUMENT (NULL pointers, unknown dtypes, a
 *  quantised count that is not a multiple of 32, a block whose scale overflows). */
CLATTN_API clattn_status clattn_convert(clattn_dtype from, const void *src, clattn_dtype to,
                                        void *dst, size_t count);

/** Whether clattn_convert would take these values, and where it would refuse them, writing
 *  nothing. Converting to CLATTN_Q8_0 refuses a block whose scale overflows float16: the
 *  largest finite |x| of the block over 127 rounds to infinity, which happens from |x| =
 *  8321040 (about 8.3e6) up, and would turn the whole block into NaN; converting to
 *  CLATTN_Q4_0 likewise from |x| = 524160 (|m| / 8 rounds to infinity). `block` (may be NULL)
 *  receives the index of the first such block (values 32*block .. 32*block + 31), else
 *  SIZE_MAX. @return CLATTN_SUCCESS, or CLATTN_ERR_INVALID_ARGUMENT as clattn_convert would
 *  return it (a NULL src, unknown dtypes, a quantised count not a multiple of 32, such a
 *  block). */
CLATTN_API clattn_status clattn_convert_check(clattn_dtype from, const void *src, clattn_dtype to,
                                              size_t count, size_t *block);

/** Sets the strides of one tensor for a dense layout of `heads` heads, `len` rows and `dim`
 *  columns, at element offset `offset`. */
CLATTN_API clattn_status clattn_tensor_dense(clattn_tensor *t, clattn_layout layout, size_t heads,
                                             size_t len, size_t dim, size_t offset);

/** Enqueues attention on the context's queue. `lse` may be NULL. `event_out` may be NULL;
 *  otherwise it receives an event that completes with the call (the caller releases it).
 *  The bytes O and LSE span must not overlap those of any other tensor (compared in the memory
 *  that owns them: a sub-buffer counts as its parent at its origin, and buffers created with
 *  CL_MEM_USE_HOST_PTR by their host ranges); tensors may otherwise share one buffer.
 *  @return CLATTN_SUCCESS; CLATTN_ERR_INVALID_ARGUMENT (sizes, heads, strides, a tensor that
 *  does not fit its buffer, an output overlapping another tensor, overflow); CLATTN_ERR_UNSUPPORTED
 * (no path serves the call); CLATTN_ERR_BUILD; CLATTN_ERR_BLAS; or an OpenCL error. */
CLATTN_API clattn_status clattn_attention(clattn_context *ctx, const clattn_attention_desc *desc,
                                          cl_mem q, cl_mem k, cl_mem v, cl_mem o, cl_mem lse,
                                          cl_event *event_out);

/** Like clattn_attention on host memory: copies in, computes, copies out, waits. The host
 *  arrays hold each tensor's extent as its desc describes (offset and strides included).
 *  @return as clattn_attention. */
CLATTN_API clattn_status clattn_attention_host(clattn_context *ctx,
                                               const clattn_attention_desc *desc, const void *q,
                                               const void *k, const void *v, void *o, float *lse);

/** The CPU reference (double accumulation), no context needed. Host arrays as for
 *  clattn_attention_host; bias from desc->bias_host. To learn why a desc is refused ("every
 *  size must be >= 1 (B=2 Hq=0 ...)"), ask clattn_attention_desc_check.
 *  @return CLATTN_SUCCESS, CLATTN_ERR_INVALID_ARGUMENT or CLATTN_ERR_OUT_OF_MEMORY. */
CLATTN_API clattn_status clattn_attention_reference(const clattn_attention_desc *desc,
                                                    const void *q, const void *k, const void *v,
                                                    void *o, float *lse);

/** What the last attention call on a context did. */
typedef struct clattn_stats {
    size_t struct_size;        /* sizeof(clattn_stats): clattn_stats_init */
    clattn_path path;          /* the path that ran (never AUTO) */
    clattn_variant variant;    /* the variant that ran (never AUTO) */
    uint64_t pairs;            /* allowed (b, h, i, j) pairs of the pattern (bias not counted) */
    double density;            /* pairs / (B * Hq * Nq * Nk) */
    uint64_t tiles_visited;    /* key tiles the fused kernel walked, summed over query tiles */
    uint64_t tiles_total;      /* key tiles a dense walk would take */
    uint64_t device_bytes;     /* device memory the call allocated (peak, bytes) */
    unsigned block_m, block_n; /* tile shape of the fused kernel, or the gemm chunk rows */
    unsigned chunks;           /* gemm path: query chunks */
    double kernel_ms;          /* summed kernel execution time, when timing is on (else 0) */
    char kernel[96];           /* kernel and its specialisation, for logs */

    /* ---- added in 0.2 */
    uint64_t tiles_counted; /* key tiles the kernels counted themselves (desc.count_tiles) */
    /* Host-device traffic of the call, as clattn_transfers counts it: the host arrays of the
     * *_host entry points and the call's own tables (tile lists, block layouts) copied to the
     * device; O and LSE (and counters) copied back; and host memory the device used in place
     * (mapped, not copied: devices that share host memory). */
    uint64_t host_to_device_bytes;
    uint64_t device_to_host_bytes;
    uint64_t mapped_bytes;

    /* ---- from 0.3: verified dispatch (docs/verification.md) */
    int verdict;        /* clattn_verdict_kind of the variant that ran on this device and driver
                           (CLATTN_VERDICT_NONE: unverified, or the policy is trust) */
    char fallback[512]; /* why `auto` did not run a variant it prefers to the one that ran, one
                           "NAME: reason" each, "; " between them (refused, failed or timed out
                           in clattn check, unverified, did not build); "" when none */
} clattn_stats;

/** Zeroes `struct_size` bytes of *stats and sets stats->struct_size; clattn_stats_init(stats)
 *  passes sizeof *stats. @return CLATTN_SUCCESS or INVALID_ARGUMENT. */
CLATTN_API clattn_status clattn_stats_init_sized(clattn_stats *stats, size_t struct_size);
#define clattn_stats_init(stats) clattn_stats_init_sized((stats), sizeof *(stats))

/** Whether `variant` can serve `desc` on the context's device (desc NULL: whether it can run
 *  on the device at all). When it cannot, `reason` (may be NULL) receives why, in one line.
 *  @return CLATTN_SUCCESS (it can), CLATTN_ERR_UNSUPPORTED (it cannot), or
 *  CLATTN_ERR_INVALID_ARGUMENT (NULL context, an unknown variant, a bad desc). */
CLATTN_API clattn_status clattn_variant_supported(clattn_context *ctx, clattn_variant variant,
                                                  const clattn_attention_desc *desc, char *reason,
                                                  size_t reason_size);

/** What a variant is and how it stands on one device, for listings (clattn devices
 *  --variants). Variants are numbered from 1 up without gaps: iterate until
 *  clattn_variant_describe returns CLATTN_ERR_INVALID_ARGUMENT. */
/** One field of clattn_tuning that `clattn tune` searches for a variant, with the values it
 *  tries (from 0.3). */
typedef struct clattn_tuning_axis {
    const char *field; /* the field's name in clattn_tuning: "block_m", "tile_n", ... */
    unsigned count;    /* values[0 .. count) */
    unsigned values[8];
} clattn_tuning_axis;

typedef struct clattn_variant_info {
    size_t struct_size; /* sizeof(clattn_variant_info): clattn_variant_info_init */
    clattn_variant variant;
    clattn_path path;
    const char *name;    /* "lanes", "gemm", ... (static storage) */
    const char *summary; /* one line (static storage) */
    int supported;       /* it can run on the context's device */
    int used_by_auto;    /* `auto` tries it on this device (in the table's order) */
    char reason[256];    /* why it is not supported, or why `auto` passes it over; or "" */
    char tuning[32];     /* where its parameters come from: default, built-in, tuning.json */
    /* from 0.3 */
    const char *old_name; /* the name of 0.2 that is still read until 0.4, or NULL */
    size_t num_axes;      /* what `clattn tune` searches: axes[0 .. num_axes); 0: not tunable */
    clattn_tuning_axis axes[8];
} clattn_variant_info;

/** The size of 0.2's clattn_variant_info, which clattn_variant_describe still fills. */
#define CLATTN_VARIANT_INFO_BASE_SIZE offsetof(clattn_variant_info, old_name)

/** Zeroes `struct_size` bytes of *info and sets info->struct_size. */
CLATTN_API clattn_status clattn_variant_info_init_sized(clattn_variant_info *info,
                                                        size_t struct_size);
#define clattn_variant_info_init(info) clattn_variant_info_init_sized((info), sizeof *(info))

/** Describes variant `variant` on the context's device.
 *  @return CLATTN_SUCCESS, or CLATTN_ERR_INVALID_ARGUMENT (NULL, a bad struct_size, a value
 *  that is no variant). */
CLATTN_API clattn_status clattn_variant_describe(clattn_context *ctx, clattn_variant variant,
                                                 clattn_variant_info *info);

/* ---------------------------------------------------------------- tuning (from 0.2) */

/** The kernel parameters of a variant, as the tuning database holds them (built-in class
 *  defaults, then tuning.json in the cache folder, which `clattn tune` writes): tiles, work-group
 *  shapes, vector widths. A field a variant does not use is ignored. */
typedef struct clattn_tuning {
    size_t struct_size; /* sizeof(clattn_tuning): clattn_tuning_init */
    unsigned block_m;   /* query rows a tile (a work-group) */
    unsigned block_n;   /* keys a tile */
    unsigned wg_size;   /* work-items a work-group (gpu, gemm); 0: the variant's own rule */
    unsigned vector;    /* vector width */
    unsigned split;     /* decode kernels: key chunks a row; 0: from the compute units */
    unsigned tile_m;    /* flash: query rows of a work-item's micro-tile; nv_mma: row tiles of
                           16 a warp */
    unsigned tile_n;    /* flash: keys of a work-item's micro-tile */
    unsigned stages;    /* flash, nv_mma: key tiles in local memory, 1 or 2 (double buffering) */
    unsigned subgroups; /* flash: 1 reduces rows through subgroups where the device has them */
} clattn_tuning;

/** Where a variant's parameters come from. */
typedef enum clattn_tuning_source {
    CLATTN_TUNING_DEFAULT = 0,  /* the default of the device's class */
    CLATTN_TUNING_BUILT_IN = 1, /* a built-in entry for the device's vendor or name */
    CLATTN_TUNING_FILE = 2,     /* tuning.json's entry for the device and driver */
    CLATTN_TUNING_CONTEXT = 3   /* set on a context with clattn_context_set_tuning */
} clattn_tuning_source;

/** Zeroes `struct_size` bytes of *params and sets params->struct_size; clattn_tuning_init
 *  passes sizeof *params. @return CLATTN_SUCCESS or CLATTN_ERR_INVALID_ARGUMENT. */
CLATTN_API clattn_status clattn_tuning_init_sized(clattn_tuning *params, size_t struct_size);
#define clattn_tuning_init(params) clattn_tuning_init_sized((params), sizeof *(params))

/** The parameters `variant` takes on device `device_index` from the database (tuning.json's
 *  entry for the device and driver, else the built-in ones); `source` (may be NULL) says which.
 *  @return CLATTN_SUCCESS or CLATTN_ERR_INVALID_ARGUMENT (NULL, a bad struct_size, an unknown
 *  variant, a device index out of range). */
CLATTN_API clattn_status clattn_device_tuning(size_t device_index, clattn_variant variant,
                                              clattn_tuning *params, clattn_tuning_source *source);

/** The field of `params` named `field` ("block_m", ... as clattn_tuning_axis names them), or
 *  NULL for a name that is no field (from 0.3). */
CLATTN_API unsigned *clattn_tuning_field(clattn_tuning *params, const char *field);

/** Makes this context's calls to `variant` take `params` (a full set, as clattn_device_tuning
 *  gives it), ahead of the database; NULL returns to the database. For tuners: the planner
 *  still shrinks tiles that do not fit the device. A set the variant's kernel cannot take
 *  (out of range, or tiles its micro-tiles do not divide) is refused here, naming the field.
 *  @return CLATTN_SUCCESS or CLATTN_ERR_INVALID_ARGUMENT. */
CLATTN_API clattn_status clattn_context_set_tuning(clattn_context *ctx, clattn_variant variant,
                                                   const clattn_tuning *params);

/** Writes `params` as tuning.json's entry for the context's device, driver and `variant`,
 *  keeping the file's other entries (their unknown keys are not kept); the file is written to
 *  a temporary name and renamed. Later lookups, in this process and others, take it.
 *  @return CLATTN_SUCCESS, CLATTN_ERR_UNSUPPORTED (the cache folder is off), CLATTN_ERR_IO or
 *  CLATTN_ERR_INVALID_ARGUMENT; clattn_context_last_error says which file. */
CLATTN_API clattn_status clattn_tuning_save(clattn_context *ctx, clattn_variant variant,
                                            const clattn_tuning *params);

/** Writes the path of tuning.json (in the cache folder: $CLATTN_CACHE_DIR, else
 *  $XDG_CACHE_HOME/clattn, else ~/.cache/clattn) into path.
 *  @return CLATTN_SUCCESS, CLATTN_ERR_UNSUPPORTED when the cache folder is off, or
 *  CLATTN_ERR_INVALID_ARGUMENT (NULL, or too small). */
CLATTN_API clattn_status clattn_tuning_file(char *path, size_t size);

/* ---------------------------------------------------------------- the cache folder
 * Compiled kernels are kept in the cache folder ($CLATTN_CACHE_DIR, else
 * $XDG_CACHE_HOME/clattn, else ~/.cache/clattn; "off" disables it) beside tuning.json, one
 * file per program. The folder is bounded: after each write, entries are removed until they
 * total at most $CLATTN_CACHE_MAX_MB MiB (default 256): those of other clattn versions first,
 * then the least recently used. docs/kernel-cache.md explains the folder. */

/** What the cache folder's compiled kernels hold (tuning.json aside). */
typedef struct clattn_cache_info {
    size_t struct_size; /* sizeof(clattn_cache_info): clattn_cache_info_init */
    uint64_t bytes;     /* all entries */
    size_t entries;
    uint64_t other_version_bytes; /* of them, built by other clattn versions */
    size_t other_version_entries;
    int64_t oldest_use; /* last use of the least recently used entry, seconds since 1970; 0 when
                           there is none */
    int64_t newest_use;
    uint64_t limit_bytes; /* $CLATTN_CACHE_MAX_MB, by default 256 MiB */
} clattn_cache_info;

/** Zeroes `struct_size` bytes of *info and sets info->struct_size; clattn_cache_info_init(info)
 *  passes sizeof *info. @return CLATTN_SUCCESS or INVALID_ARGUMENT. */
CLATTN_API clattn_status clattn_cache_info_init_sized(clattn_cache_info *info, size_t struct_size);
#define clattn_cache_info_init(info) clattn_cache_info_init_sized((info), sizeof *(info))

/** Writes the cache folder's path into path (whether or not it exists yet).
 *  @return CLATTN_SUCCESS, CLATTN_ERR_UNSUPPORTED when the cache is off, or
 *  CLATTN_ERR_INVALID_ARGUMENT (NULL, or too small). */
CLATTN_API clattn_status clattn_cache_folder(char *path, size_t size);

/** Fills *info (initialised by clattn_cache_info_init). A folder not made yet holds nothing.
 *  @return CLATTN_SUCCESS, CLATTN_ERR_UNSUPPORTED (cache off), CLATTN_ERR_INVALID_ARGUMENT or
 *  CLATTN_ERR_IO (the folder cannot be read). */
CLATTN_API clattn_status clattn_cache_info_get(clattn_cache_info *info);

/** Removes entries until they total at most max_bytes, in the order the limit uses; `removed`
 *  (may be NULL) receives how many. clattn_cache_trim(0, ...) removes them all; tuning.json
 *  always stays. @return as clattn_cache_info_get; CLATTN_ERR_IO also when an entry could not
 *  be removed (the others are still removed and counted). */
CLATTN_API clattn_status clattn_cache_trim(uint64_t max_bytes, size_t *removed);

/** Builds ahead the programs that `auto` runs for inputs of `dtype` with head dimension
 *  `head_dim` on the context's device: prefill and decode shapes, without a mask and causal,
 *  storing them in the cache folder. @return as clattn_attention_host. */
CLATTN_API clattn_status clattn_cache_warm(clattn_context *ctx, clattn_dtype dtype,
                                           size_t head_dim);

/* ---------------------------------------------------------------- GEMMs (from 0.3) */

/** The ways clattn multiplies matrices: the attention layer's projections and the gemm
 *  attention path run on one of them. Like the attention variants, they are rows of a table
 *  in the order `auto` prefers (docs/variants.md, "The GEMM table"). */
typedef enum clattn_gemm {
    CLATTN_GEMM_AUTO = 0,    /* "auto": the first row that serves the call and suits the device */
    CLATTN_GEMM_CLBLAST = 1, /* "clblast": CLBlast's SGEMM; every device */
    CLATTN_GEMM_PANELS = 2   /* "panels": clattn's own kernel, register-blocked over packed panels
                                of B, 16-lane vectors; auto on CPU devices */
} clattn_gemm;

/** "auto", "clblast", "panels", or "unknown". */
CLATTN_API const char *clattn_gemm_name(clattn_gemm gemm);

/** Looks a GEMM row up by name ("auto" included).
 *  @return CLATTN_SUCCESS or CLATTN_ERR_INVALID_ARGUMENT. */
CLATTN_API clattn_status clattn_gemm_from_name(const char *name, clattn_gemm *gemm);

/** Makes the context's GEMMs run on `gemm` (CLATTN_GEMM_AUTO, the default, lets the table
 *  choose; $CLATTN_GEMM=NAME does the same for contexts that chose nothing). A layer keeps the
 *  row its weights were prepared for: set this before clattn_mha_create. A row that cannot
 *  serve a call makes the call fail with CLATTN_ERR_UNSUPPORTED and why; there is no silent
 *  fallback. @return CLATTN_SUCCESS or CLATTN_ERR_INVALID_ARGUMENT. */
CLATTN_API clattn_status clattn_context_set_gemm(clattn_context *ctx, clattn_gemm gemm);

/** What a GEMM row is and how it stands on one device (clattn devices --variants). */
typedef struct clattn_gemm_info {
    size_t struct_size; /* sizeof(clattn_gemm_info): clattn_gemm_info_init */
    clattn_gemm gemm;
    const char *name;    /* static storage */
    const char *summary; /* one line (static storage) */
    int supported;       /* it can run on the context's device */
    int used_by_auto;    /* `auto` picks it there (the first such row runs) */
    char reason[256];    /* why it is not supported or `auto` passes it over; or "" */
    char tuning[32];     /* where its parameters come from: default, built-in, tuning.json */
    size_t num_axes;     /* what `clattn tune --gemm` searches: axes[0 .. num_axes) */
    clattn_tuning_axis axes[8];
} clattn_gemm_info;

/** Zeroes `struct_size` bytes of *info and sets info->struct_size. */
CLATTN_API clattn_status clattn_gemm_info_init_sized(clattn_gemm_info *info, size_t struct_size);
#define clattn_gemm_info_init(info) clattn_gemm_info_init_sized((info), sizeof *(info))

/** Describes GEMM row `gemm` on the context's device. Rows are numbered from 1 up without gaps:
 *  iterate until it returns CLATTN_ERR_INVALID_ARGUMENT. */
CLATTN_API clattn_status clattn_gemm_describe(clattn_context *ctx, clattn_gemm gemm,
                                              clattn_gemm_info *info);

/** The tuning of a GEMM row, as for the attention variants (clattn_device_tuning,
 *  clattn_context_set_tuning, clattn_tuning_save): the fields each row reads are its axes
 *  (clattn_gemm_info). tuning.json keeps them under the row's name. */
CLATTN_API clattn_status clattn_device_gemm_tuning(size_t device_index, clattn_gemm gemm,
                                                   clattn_tuning *params,
                                                   clattn_tuning_source *source);
CLATTN_API clattn_status clattn_context_set_gemm_tuning(clattn_context *ctx, clattn_gemm gemm,
                                                        const clattn_tuning *params);
CLATTN_API clattn_status clattn_gemm_tuning_save(clattn_context *ctx, clattn_gemm gemm,
                                                 const clattn_tuning *params);

/** Measures the float32 fused multiply-add peak of the context's device now, in GFLOP/s: a
 *  kernel of independent FMA chains on 16-lane vectors, the median of 5 runs of about 50 ms.
 *  The bench reports GEMM and attention FLOP/s against it, measured in the same run (a busy
 *  machine lowers both). @return CLATTN_SUCCESS, or the build's or launch's status. */
CLATTN_API clattn_status clattn_context_fma_peak(clattn_context *ctx, double *gflops);
/* ---------------------------------------------------------------- verdicts (from 0.3) */

/** What `clattn check` found for a variant on one device, driver version, library version and
 *  set of kernel sources (docs/verification.md). */
typedef enum clattn_verdict_kind {
    CLATTN_VERDICT_NONE = 0,     /* none for this device, driver, library and kernel sources */
    CLATTN_VERDICT_PASSED = 1,   /* every case of the sweep passed */
    CLATTN_VERDICT_FAILED = 2,   /* a case failed: detail names the first */
    CLATTN_VERDICT_TIMED_OUT = 3 /* a build or run did not finish: detail names where */
} clattn_verdict_kind;

typedef struct clattn_verdict {
    size_t struct_size; /* sizeof(clattn_verdict): clattn_verdict_init */
    clattn_verdict_kind kind;
    char sweep[64];   /* what was run: "quick (35 cases)", "case 3 of quick", ... */
    char date[32];    /* when it was recorded, UTC: "2026-11-25T18:04:05Z" */
    char detail[256]; /* failed: the first failing case; timed out: the case that hung */
} clattn_verdict;

/** Zeroes `struct_size` bytes of *verdict and sets verdict->struct_size.
 *  @return CLATTN_SUCCESS or CLATTN_ERR_INVALID_ARGUMENT. */
CLATTN_API clattn_status clattn_verdict_init_sized(clattn_verdict *verdict, size_t struct_size);
#define clattn_verdict_init(verdict) clattn_verdict_init_sized((verdict), sizeof *(verdict))

/** The verdict on `variant` for the context's device and driver, this library's version and
 *  its kernel sources (kind NONE when there is none: a verdict reached on another driver,
 *  library or sources is not taken).
 *  @return CLATTN_SUCCESS or CLATTN_ERR_INVALID_ARGUMENT. */
CLATTN_API clattn_status clattn_verdict_get(clattn_context *ctx, clattn_variant variant,
                                            clattn_verdict *verdict);

/** Records a verdict on `variant` for the context's device and driver, this library and its
 *  kernel sources, dated now, into `file` (NULL: the store, verdicts.json in the cache folder),
 *  replacing the verdict with the same key. The file is written whole, then renamed.
 *  @return CLATTN_SUCCESS, CLATTN_ERR_UNSUPPORTED (file NULL and the cache folder off),
 *  CLATTN_ERR_IO or CLATTN_ERR_INVALID_ARGUMENT. */
CLATTN_API clattn_status clattn_verdict_record(clattn_context *ctx, clattn_variant variant,
                                               const clattn_verdict *verdict, const char *file);

/** Writes the path of the verdict store (verdicts.json in the cache folder) into path.
 *  @return CLATTN_SUCCESS, CLATTN_ERR_UNSUPPORTED (the cache folder is off) or
 *  CLATTN_ERR_INVALID_ARGUMENT. */
CLATTN_API clattn_status clattn_verdicts_file(char *path, size_t size);

/** Merges the verdicts of a report (`clattn check --report FILE`) into the store: those made by
 *  this library version on the same kernel sources; the others are left out and counted.
 *  `merged`, `ignored` and `why` may be NULL; on failure `why` says what failed, naming the file.
 *  @return CLATTN_SUCCESS, CLATTN_ERR_IO, CLATTN_ERR_UNSUPPORTED (the cache folder is off) or
 *  CLATTN_ERR_INVALID_ARGUMENT. */
CLATTN_API clattn_status clattn_verdicts_merge(const char *file, size_t *merged, size_t *ignored,
                                               char *why, size_t why_size);

/** How `auto` uses the verdicts (docs/verification.md). */
typedef enum clattn_verify_policy {
    CLATTN_VERIFY_FROM_ENV = 0, /* $CLATTN_VERIFY (trust, prefer-verified, require-verified,
                                   first-use), else PREFER */
    CLATTN_VERIFY_TRUST = 1,    /* the variant table's order; verdicts not read */
    CLATTN_VERIFY_PREFER = 2,   /* never a variant that failed or timed out; verified variants
                                   first, then unverified ones, each in the table's order */
    CLATTN_VERIFY_REQUIRE = 3   /* verified variants only; else CLATTN_ERR_UNSUPPORTED saying
                                   how to verify */
} clattn_verify_policy;

#define CLATTN_VERIFY_STRICT                                                                       \
    1u /* every fallback of auto is an error naming the reason (also                               \
          $CLATTN_STRICT=1) */
#define CLATTN_VERIFY_FIRST_USE                                                                    \
    2u /* the first auto call on a device and driver without                                       \
          verdicts runs `clattn check --quick` on the variants it                                  \
          would pick, in a child process (also                                                     \
          $CLATTN_VERIFY=first-use) */

/** Sets the context's policy and flags (CLATTN_VERIFY_STRICT, CLATTN_VERIFY_FIRST_USE).
 *  @return CLATTN_SUCCESS or CLATTN_ERR_INVALID_ARGUMENT. */
CLATTN_API clattn_status clattn_context_set_verify(clattn_context *ctx, clattn_verify_policy policy,
                                                   unsigned flags);

/** Turns kernel timing on or off. While on, each attention call waits for its kernels and
 *  records their summed execution time (OpenCL profiling events) in clattn_stats.kernel_ms.
 *  @return CLATTN_SUCCESS, or CLATTN_ERR_UNSUPPORTED for a wrapped queue without profiling. */
CLATTN_API clattn_status clattn_context_set_timing(clattn_context *ctx, int enabled);

/** Bytes moved between host memory and a context's device by clattn's calls on it, summed
 *  since the context was created (from 0.2): attention calls, KV cache appends, lengths and
 *  block tables, layers. Two readings give the traffic of the calls between them (a decoding
 *  step). Copies made by CLBlast on the device, and by the caller, are not clattn's. */
typedef struct clattn_transfers {
    size_t struct_size;            /* sizeof(clattn_transfers): clattn_transfers_init */
    uint64_t host_to_device_bytes; /* host memory copied to the device (buffers made from host
                                      arrays, writes) */
    uint64_t device_to_host_bytes; /* device memory copied to the host (reads) */
    uint64_t mapped_bytes;         /* host memory handed to the device to use in place
                                      (CL_MEM_USE_HOST_PTR) instead of a copy: on a device that
                                      shares host memory (CL_DEVICE_HOST_UNIFIED_MEMORY: CPUs,
                                      integrated GPUs), the *_host entry points map their
                                      arrays */
    uint64_t copies;               /* copy commands, either way */
} clattn_transfers;

/** Zeroes `struct_size` bytes of *totals and sets totals->struct_size; clattn_transfers_init
 *  passes sizeof *totals. @return CLATTN_SUCCESS or INVALID_ARGUMENT. */
CLATTN_API clattn_status clattn_transfers_init_sized(clattn_transfers *totals, size_t struct_size);
#define clattn_transfers_init(totals) clattn_transfers_init_sized((totals), sizeof *(totals))

/** Copies the context's transfer totals, up to totals->struct_size.
 *  @return CLATTN_SUCCESS or CLATTN_ERR_INVALID_ARGUMENT (NULL, a bad struct_size). */
CLATTN_API clattn_status clattn_context_transfers(clattn_context *ctx, clattn_transfers *totals);

/** Copies the statistics of the last successful attention call, up to stats->struct_size.
 *  @return CLATTN_SUCCESS or CLATTN_ERR_INVALID_ARGUMENT (NULL, a bad struct_size, or no call
 *  ran yet: clattn_context_last_error says which). */
CLATTN_API clattn_status clattn_context_last_stats(clattn_context *ctx, clattn_stats *stats);

/* ---------------------------------------------------------------- KV cache (docs/semantics.md
 * section 6) */

/** The keys and values of B sequences kept on the device for decoding, FlashAttention-2's
 *  flash_attn_with_kvcache semantics: sequence b has len[b] rows filled; appending writes new
 *  rows after them; attention over the cache sees, for sequence b, its first len[b] rows, and
 *  its queries are the last q_len[b] positions (docs/semantics.md section 2 per sequence, with Nk =
 * len[b]). Storage is contiguous, K [B, capacity, Hkv, Dqk] (or BHSD), or paged: a pool of pages
 *  [num_pages, page_size, Hkv, D] (or [num_pages, Hkv, page_size, D]) and a block table
 *  [B, max_pages] of int32 page indices: row t of sequence b is row t % page_size of page
 *  table[b][t / page_size]. */
typedef struct clattn_kv_cache clattn_kv_cache;

typedef struct clattn_kv_cache_desc {
    size_t struct_size; /* sizeof(clattn_kv_cache_desc): clattn_kv_cache_desc_init */
    size_t batch, heads_kv, dim_qk, dim_v;
    size_t capacity;      /* rows a sequence may hold (paged: max_pages * page_size) */
    clattn_dtype dtype;   /* storage of K and V: f32, f16, bf16, q8_0 or q4_0 (quantised: D
                             multiples of 32) */
    clattn_layout layout; /* BSHD: [.., rows, Hkv, D]; BHSD: [.., Hkv, rows, D] */
    size_t page_size;     /* 0: contiguous storage; else rows a page */
    size_t num_pages;     /* paged: pages in the pool */
} clattn_kv_cache_desc;

/** Fills *desc for contiguous float32 BSHD storage of `capacity` rows a sequence. */
CLATTN_API clattn_status clattn_kv_cache_desc_init_sized(clattn_kv_cache_desc *desc,
                                                         size_t struct_size, size_t batch,
                                                         size_t heads_kv, size_t dim_qk,
                                                         size_t dim_v, size_t capacity);
#define clattn_kv_cache_desc_init(desc, ...)                                                       \
    clattn_kv_cache_desc_init_sized((desc), sizeof *(desc), __VA_ARGS__)

/** Creates a cache on the context's device: its storage (zeroed), lengths 0, and for paged
 *  storage a block table of -1 (no page). The cache uses the context, which must outlive it.
 *  @return CLATTN_SUCCESS, CLATTN_ERR_INVALID_ARGUMENT (sizes, a paged capacity that is not a
 *  multiple of page_size), CLATTN_ERR_OUT_OF_MEMORY or an OpenCL error. */
CLATTN_API clattn_status clattn_kv_cache_create(clattn_context *ctx,
                                                const clattn_kv_cache_desc *desc,
                                                clattn_kv_cache **cache);

/** Wraps a caller's storage, as FlashAttention-2 takes plain tensors: k and v hold the
 *  contiguous caches or the page pools described by desc, at element offset 0 with the dense
 *  strides of desc->layout. clattn retains them while the cache lives; lengths start at
 *  `lengths` (host [batch], may be NULL for zeros; a paged cache starts empty, its lengths
 *  zeros, until clattn_kv_cache_set_block_table gives its rows pages). @return as
 *  clattn_kv_cache_create, and CLATTN_ERR_INVALID_ARGUMENT for buffers too small. */
CLATTN_API clattn_status clattn_kv_cache_wrap(clattn_context *ctx, const clattn_kv_cache_desc *desc,
                                              cl_mem k, cl_mem v, const int32_t *lengths,
                                              clattn_kv_cache **cache);

/** Releases the cache and what it owns. Accepts NULL. */
CLATTN_API void clattn_kv_cache_destroy(clattn_kv_cache *cache);

/** The cache's storage buffers (owned by the cache, or the caller's when wrapped). */
CLATTN_API clattn_status clattn_kv_cache_buffers(const clattn_kv_cache *cache, cl_mem *k,
                                                 cl_mem *v);

/** Sets the block table of a paged cache, host [batch][capacity / page_size]: page indices in
 *  [0, num_pages), or -1 for a page not given (rows there cannot be filled). Every entry is
 *  checked first; on an error nothing changes. @return CLATTN_SUCCESS,
 *  CLATTN_ERR_INVALID_ARGUMENT (an entry out of range, naming it; a contiguous cache). */
CLATTN_API clattn_status clattn_kv_cache_set_block_table(clattn_kv_cache *cache,
                                                         const int32_t *table);

/** Copies the lengths, host [batch]. */
CLATTN_API clattn_status clattn_kv_cache_lengths(const clattn_kv_cache *cache, int32_t *lengths);

/** Sets the lengths, host [batch] (to roll back speculative tokens, or for beam search): each
 *  in [0, capacity], and within the pages the block table gives. Rows past a length are kept
 *  but no longer seen. Checked first; on an error nothing changes. */
CLATTN_API clattn_status clattn_kv_cache_set_lengths(clattn_kv_cache *cache,
                                                     const int32_t *lengths);

/** New rows to append: K_new [B, len, Hkv, Dqk] and V_new [B, len, Hkv, Dv] at their tensors'
 *  offsets and strides (clattn_tensor_dense for dense ones), stored as `dtype`, a float type
 *  (converted to the cache's; quantised, a block at a time, for a q8_0 or q4_0 cache). new_len
 *  (host [B], may be NULL for `len` each) says how many of the len rows sequence b appends; len
 *  may be 0 (nothing is read or appended). */
typedef struct clattn_kv_rows {
    cl_mem k, v;
    clattn_tensor k_tensor, v_tensor;
    clattn_dtype dtype;
    size_t len;
    const int32_t *new_len;
} clattn_kv_rows;

/** Appends rows and advances the lengths. If any sequence would pass its capacity or its block
 *  table, fails with CLATTN_ERR_INVALID_ARGUMENT naming the sequence, and nothing is written to
 *  any sequence. Enqueued on the context's queue (in order with later calls). */
CLATTN_API clattn_status clattn_kv_cache_append(clattn_kv_cache *cache, const clattn_kv_rows *rows);

/** The same from host arrays: k_new [B, len, Hkv, Dqk], v_new [B, len, Hkv, Dv], dense in the
 *  cache's layout and dtype (float32 for a q8_0 or q4_0 cache). Waits for the copy. */
CLATTN_API clattn_status clattn_kv_cache_append_host(clattn_kv_cache *cache, const void *k_new,
                                                     const void *v_new, size_t len,
                                                     const int32_t *new_len);

/** Copies the whole storage (caches or page pools, dense in the cache's layout and dtype)
 *  from host arrays into the cache, or from the cache into host arrays (either may be NULL). */
CLATTN_API clattn_status clattn_kv_cache_write_host(clattn_kv_cache *cache, const void *k,
                                                    const void *v);
CLATTN_API clattn_status clattn_kv_cache_read_host(clattn_kv_cache *cache, void *k, void *v);

/** Attention of a query block over the cache: Q [B, Nq, Hq, Dqk] and O [B, Nq, Hq, Dv] as desc
 *  describes them (desc->batch, heads_kv, dim_qk and dim_v must match the cache; desc->len_k is
 *  ignored: sequence b has len[b] keys; desc->dtype is Q's storage, the cache's dtype K's and
 *  V's). q_len (host [B], may be NULL for Nq each) gives each sequence's valid query rows; rows
 *  i >= q_len[b] get O = 0 and LSE = -inf, as does a sequence of length 0. Every mask of
 * docs/semantics.md section 2 applies per sequence (a block layout is [ceil(Nq/BQ),
 * ceil(capacity/BK)]; a bias [b, h, i, j] covers j < capacity). LSE (may be NULL) is float32 [B,
 * Hq, Nq].
 *  @return as clattn_attention. */
CLATTN_API clattn_status clattn_kv_cache_attention(clattn_kv_cache *cache,
                                                   const clattn_attention_desc *desc, cl_mem q,
                                                   const int32_t *q_len, cl_mem o, cl_mem lse,
                                                   cl_event *event);

/** The same on host arrays (Q and O as desc describes them, bias from desc->bias_host); waits. */
CLATTN_API clattn_status clattn_kv_cache_attention_host(clattn_kv_cache *cache,
                                                        const clattn_attention_desc *desc,
                                                        const void *q, const int32_t *q_len,
                                                        void *o, float *lse);

/** The CPU reference of clattn_kv_cache_attention (double accumulation), reading the cache's
 *  storage back. For checking a device against the reference. */
CLATTN_API clattn_status clattn_kv_cache_reference(clattn_kv_cache *cache,
                                                   const clattn_attention_desc *desc, const void *q,
                                                   const int32_t *q_len, void *o, float *lse);

/* ---------------------------------------------------------------- shards and rings (from 0.3) */

/*
 * Context parallelism: a long sequence cut into shards, one a device (or a process), as ring
 * attention does it. Each part holds a shard of the query rows and one of the key/value rows;
 * the key/value shards go round the ring, and each part attends its query shard to every
 * key/value shard in turn (desc->q_start ... make each such call a shard of the whole call),
 * merging the partial results exactly through their LSE:
 *
 *     O = sum_c exp(LSE_c - LSE) O_c,   LSE = log sum_c exp(LSE_c)
 *
 * (a shard that sees no key has LSE_c = -inf and adds nothing). The rows each part ends with
 * are exactly the whole call's rows. libclattn_mpi (clattn_mpi.h) passes the shards between
 * processes with MPI; clattn_attention_multi passes them between the devices of one process.
 */

/** Merging a partial result into an accumulator, both of the same query rows: float32 O
 *  tensors [B, H, N, D] and float32 LSE tensors [B, H, N], each by element offset and strides
 *  (batch, head, sequence; LSE's dim is 1). With lse_parts, each LSE element is a pair (max,
 *  log sum) as desc->lse_parts gives them, offsets and strides counting pairs: the merge is then
 *  exact whatever the scores' magnitude, and the accumulator keeps the parts. */
typedef struct clattn_merge_desc {
    size_t struct_size; /* sizeof(clattn_merge_desc): clattn_merge_desc_init */
    size_t batch, heads, len, dim;
    clattn_tensor o, lse;           /* the accumulator, merged in place */
    clattn_tensor o_part, lse_part; /* the partial merged into it */
    int lse_parts;                  /* both LSEs are (max, log sum) pairs */
} clattn_merge_desc;

/** Fills *desc with the sizes, O and O_part dense in `layout` and both LSEs dense [B, H, N], all
 *  at offset 0. @return CLATTN_SUCCESS or CLATTN_ERR_INVALID_ARGUMENT (NULL, a size of 0,
 *  overflow). */
CLATTN_API clattn_status clattn_merge_desc_init_sized(clattn_merge_desc *desc, size_t struct_size,
                                                      clattn_layout layout, size_t batch,
                                                      size_t heads, size_t len, size_t dim);
#define clattn_merge_desc_init(desc, ...)                                                          \
    clattn_merge_desc_init_sized((desc), sizeof *(desc), __VA_ARGS__)

/** Enqueues the exact merge of (o_part, lse_part) into (o, lse) on the device, row by row:
 *  L = log(exp(lse) + exp(lse_part)), o = exp(lse - L) o + exp(lse_part - L) o_part, lse = L
 *  (with parts, the same with each LSE's sum kept apart from its max). A row whose part saw no
 *  key (-inf) is left as it is; an accumulator row may start at o = 0, lse = -inf (parts:
 *  (-inf, -inf)). `event` (may be NULL) receives the kernel's event.
 *  @return CLATTN_SUCCESS; CLATTN_ERR_INVALID_ARGUMENT (sizes, a tensor that does not fit its
 *  buffer, o or lse overlapping another tensor); or an OpenCL error. */
CLATTN_API clattn_status clattn_attention_merge(clattn_context *ctx, const clattn_merge_desc *desc,
                                                cl_mem o, cl_mem lse, cl_mem o_part,
                                                cl_mem lse_part, cl_event *event);

/** How a sequence is cut into the shards of R parts. */
typedef enum clattn_sharding {
    CLATTN_SHARDING_AUTO = 0,       /* zigzag for a causal call, else contiguous */
    CLATTN_SHARDING_CONTIGUOUS = 1, /* R chunks: part r holds chunk r */
    CLATTN_SHARDING_ZIGZAG = 2      /* 2R chunks: part r holds chunks r and 2R-1-r, so each part
                                       gets as much causal work as another (Megatron-LM's
                                       context parallelism, striped/zigzag ring attention) */
} clattn_sharding;

/** The rows of a sequence one part holds: up to two ranges of the whole sequence, in the order
 *  the part holds them (its shard arrays are those rows one after the other). */
typedef struct clattn_shard {
    size_t start[2], len[2]; /* len[1] = 0 for a contiguous shard; a range may be empty */
    size_t rows;             /* len[0] + len[1] (0 when the sequence is shorter than the chunks) */
} clattn_shard;

/** The query rows and key/value rows that part `part` of `parts` holds for the whole call
 *  `desc` (its len_q and len_k; the shard fields must be 0). Chunk c of C (C = parts, or 2 *
 *  parts for zigzag) starts at row floor(c * N / C), rounded down to a multiple of block_q
 *  (queries) or block_k (keys) when the desc has a block layout, so that shards start on block
 *  edges. AUTO is resolved from desc->causal. q_rows and k_rows may be NULL.
 *  @return CLATTN_SUCCESS or CLATTN_ERR_INVALID_ARGUMENT (a bad desc, parts = 0, part >= parts,
 *  an unknown sharding). */
CLATTN_API clattn_status clattn_attention_shards(const clattn_attention_desc *desc,
                                                 clattn_sharding sharding, size_t parts,
                                                 size_t part, clattn_shard *q_rows,
                                                 clattn_shard *k_rows);

/** One part of a ring attention on one context: its query shard and bias rows on the device,
 *  the float32 O and LSE it accumulates, and room for one key/value shard at a time. Each chunk
 *  of rows (a zigzag shard has two) has buffers of its own, so that no allocation is larger
 *  than a chunk: devices cap one allocation below their memory (PoCL at a quarter of it). */
typedef struct clattn_ring clattn_ring;

/** Starts part `part` of `parts` of the whole call `desc` (shard fields 0; every mask, GQA,
 *  float16/bfloat16 storage; not kv_q8_0). Shard arrays are dense in `layout`, their rows those
 *  clattn_attention_shards gives: q_shard [B, rows, Hq, Dqk] (BSHD; [B, Hq, rows, Dqk] for
 *  BHSD) in desc->dtype. The bias, when given, is the whole call's desc->bias_host with
 *  desc->bias_strides: the ring copies the rows of its query shard. Checks everything, then
 *  uploads the query shard and allocates the accumulators. The desc's host arrays (global
 *  tokens, block layout) must outlive the ring.
 *  @return CLATTN_SUCCESS, CLATTN_ERR_INVALID_ARGUMENT (naming the problem on ctx),
 *  CLATTN_ERR_UNSUPPORTED (kv_q8_0, kv_q4_0; softcap, alibi_slopes, sinks and lse_parts
 *  are INVALID_ARGUMENT: a part sees only some of a row's keys), CLATTN_ERR_OUT_OF_MEMORY or an
 *  OpenCL error. */
CLATTN_API clattn_status clattn_ring_create(clattn_context *ctx, const clattn_attention_desc *desc,
                                            clattn_layout layout, clattn_sharding sharding,
                                            size_t parts, size_t part, const void *q_shard,
                                            clattn_ring **ring);

/** Releases the ring. Accepts NULL. */
CLATTN_API void clattn_ring_destroy(clattn_ring *ring);

/** Attends the ring's query shard to the key/value shard of part `kv_part` (k_shard [B, rows,
 *  Hkv, Dqk] and v_shard [B, rows, Hkv, Dv], dense in the ring's layout and the desc's dtype;
 *  NULL when that shard has no rows) and merges the result into the accumulators. The shard
 *  is copied to the device before the call returns, so its arrays may be reused then. The
 *  (query chunk, key chunk) pairs that allow no pair are skipped. With `done` NULL the call
 *  waits for the device; otherwise *done receives an event that completes with the work (the
 *  caller releases it; NULL when nothing was enqueued), so a caller can move the next shard
 *  meanwhile. Each kv_part must be attended once before clattn_ring_finish.
 *  @return CLATTN_SUCCESS, CLATTN_ERR_INVALID_ARGUMENT (kv_part out of range or attended
 *  already, a NULL shard with rows), or an error of clattn_attention. */
CLATTN_API clattn_status clattn_ring_attend(clattn_ring *ring, size_t kv_part, const void *k_shard,
                                            const void *v_shard, cl_event *done);

/** Waits, and writes the part's rows of the whole call's result: o_shard [B, rows, Hq, Dv]
 *  dense in the ring's layout and desc->out_dtype, lse_shard float32 [B, Hq, rows] (may be
 *  NULL). @return CLATTN_SUCCESS, CLATTN_ERR_INVALID_ARGUMENT (a key/value part not yet
 *  attended), or an OpenCL error. */
CLATTN_API clattn_status clattn_ring_finish(clattn_ring *ring, void *o_shard, float *lse_shard);

/** The ring's work so far: the shard calls it ran (query chunk, key chunk pairs with an allowed
 *  pair) and the chunk pairs it skipped because their mask allows none; either pointer may be
 *  NULL. @return CLATTN_SUCCESS or CLATTN_ERR_INVALID_ARGUMENT (ring NULL). */
CLATTN_API clattn_status clattn_ring_counts(const clattn_ring *ring, size_t *calls,
                                            size_t *skipped);

/** The whole call on several devices of one process: the rows are sharded over the contexts
 *  (each on its own thread) and the key/value shards go round the ring, as clattn_ring does
 *  it; the result equals clattn_attention_host's within the contract's tolerances. Host arrays as
 *  clattn_attention_host takes them (the desc's tensors, offsets and strides; bias from
 *  desc->bias_host). Each device holds its query shard, its accumulators and one key/value
 *  shard at a time, so together they fit calls that one of them cannot hold. The contexts must
 *  be distinct (a context serves one thread at a time). Everything is checked before any
 *  device starts; o and lse are written only when every part succeeded. A failure is named in
 *  clattn_context_last_error(ctxs[0]), with the device that failed.
 *  @return CLATTN_SUCCESS, CLATTN_ERR_INVALID_ARGUMENT (also softcap, alibi_slopes, sinks and
 *  lse_parts, as clattn_ring_create), CLATTN_ERR_UNSUPPORTED (kv_q8_0, kv_q4_0),
 *  CLATTN_ERR_OUT_OF_MEMORY, or the first failing part's error. */
CLATTN_API clattn_status clattn_attention_multi(clattn_context *const *ctxs, size_t num_ctxs,
                                                const clattn_attention_desc *desc,
                                                clattn_sharding sharding, const void *q,
                                                const void *k, const void *v, void *o, float *lse);

/* ---------------------------------------------------------------- sparse patterns */

/** Block-sparse layouts of the standard patterns, for desc->block_layout. Block rows and
 *  columns are aligned to the end, like causal attention: block row a sits at block column
 *  a + (blocks_k - blocks_q). */
/** ALiBi's standard slopes for `heads` query heads (BLOOM's and FlashAttention-2's): with n
 *  the largest power of two <= heads, slope h = 2^(-8 (h + 1) / n) for h < n, and the heads past
 *  n take 2^(-4 (2 k + 1) / n) for k = 0, 1, ... (the odd powers of the next ladder). Written
 *  into slopes[heads] (float32). @return CLATTN_SUCCESS or CLATTN_ERR_INVALID_ARGUMENT (NULL,
 *  heads = 0). */
CLATTN_API clattn_status clattn_pattern_alibi_slopes(size_t heads, float *slopes);

typedef enum clattn_pattern_kind {
    CLATTN_PATTERN_SLIDING = 0,   /* |a' - b| <= window/2 (window: odd width in blocks) */
    CLATTN_PATTERN_BIGBIRD = 1,   /* sliding window + global + `random` random blocks a row */
    CLATTN_PATTERN_FIXED = 2,     /* Sparse Transformer "fixed": own stride-block + summaries */
    CLATTN_PATTERN_STRIDED = 3,   /* Sparse Transformer "strided": local band + every stride */
    CLATTN_PATTERN_LONGFORMER = 4 /* sliding window + the blocks of given global indices */
} clattn_pattern_kind;

/** A pattern's parameters; fields a kind does not use are ignored. */
typedef struct clattn_pattern_desc {
    size_t struct_size; /* sizeof(clattn_pattern_desc): clattn_pattern_desc_init */
    clattn_pattern_kind kind;
    size_t blocks_q, blocks_k;   /* layout shape: ceil(Nq/BQ), ceil(Nk/BK) */
    size_t window;               /* SLIDING, BIGBIRD, LONGFORMER: band width in blocks (odd) */
    size_t global;               /* BIGBIRD: the first `global` block rows and columns are dense */
    size_t random;               /* BIGBIRD: random blocks per block row (seeded) */
    uint64_t seed;               /* BIGBIRD */
    size_t stride;               /* FIXED, STRIDED: stride in blocks, 1 to 2^60 */
    size_t summary;              /* FIXED: summary blocks at the end of each stride */
    const size_t *global_blocks; /* LONGFORMER: block indices whose rows and columns are dense */
    size_t num_global_blocks;
    int causal; /* keep only blocks at or below the (end-aligned) diagonal */
} clattn_pattern_desc;

/** Fills *pattern with the kind and shape and zero parameters (then set those of the kind).
 *  @return CLATTN_SUCCESS or CLATTN_ERR_INVALID_ARGUMENT (NULL). */
CLATTN_API clattn_status clattn_pattern_desc_init_sized(clattn_pattern_desc *pattern,
                                                        size_t struct_size,
                                                        clattn_pattern_kind kind, size_t blocks_q,
                                                        size_t blocks_k);
#define clattn_pattern_desc_init(pattern, kind, blocks_q, blocks_k)                                \
    clattn_pattern_desc_init_sized((pattern), sizeof *(pattern), (kind), (blocks_q), (blocks_k))

/** Fills layout[blocks_q * blocks_k] (row-major, 1 = allowed) with the pattern.
 *  @return CLATTN_SUCCESS or CLATTN_ERR_INVALID_ARGUMENT naming nothing but the status (bad
 *  sizes, an even window, a zero stride, a summary larger than the stride, a global block out
 *  of range, NULL pointers). */
CLATTN_API clattn_status clattn_pattern_layout(const clattn_pattern_desc *pattern, uint8_t *layout);

/* ---------------------------------------------------------------- multi-head attention layer */

/** A whole multi-head attention layer (PyTorch's nn.MultiheadAttention, a transformer block's
 *  attention), with GQA/MQA, cross-attention and head pruning. For X [B, N, d_model] and, for
 *  cross-attention, X_kv [B, Nk, d_kv] (else X_kv = X, Nk = N):
 *
 *      Q = X W_q^T + b_q        [B, N, Hq, Dqk]    W_q [Hq*Dqk, d_model],  b_q [Hq*Dqk]
 *      K = X_kv W_k^T + b_k     [B, Nk, Hkv, Dqk]  W_k [Hkv*Dqk, d_kv],    b_k [Hkv*Dqk]
 *      V = X_kv W_v^T + b_v     [B, Nk, Hkv, Dv]   W_v [Hkv*Dv, d_kv],     b_v [Hkv*Dv]
 *      O = attention(Q, K, V)   [B, N, Hq, Dv]     docs/semantics.md sections 1 and 2, every mask
 *      Y = O W_o^T + b_o        [B, N, d_model]    W_o [d_model, Hq*Dv],   b_o [d_model]
 *
 *  Weights are row-major [out, in], as nn.Linear stores them: query head h owns rows
 *  [h*Dqk, (h+1)*Dqk) of W_q and columns [h*Dv, (h+1)*Dv) of W_o; kv head g owns rows
 *  [g*Dqk, (g+1)*Dqk) of W_k and [g*Dv, (g+1)*Dv) of W_v; query head h reads kv head
 *  h / (Hq/Hkv). nn.MultiheadAttention's in_proj_weight [3E, E] is W_q, W_k, W_v one after the
 *  other (one buffer, offsets 0, E*E and 2*E*E). Q, K, V and O are float32; the projections are
 *  CLBlast float32 GEMMs, the attention is clattn_attention.
 *
 *  Head pruning: a mask of the query heads kept. A pruned head costs nothing: the layer packs
 *  the rows and columns of the kept heads into its own float32 weights (at creation, and again
 *  when the mask changes), so that no projection row, attention head or output column is
 *  computed for it. The result equals the unpruned layer with the pruned heads' O set to zero
 *  before W_o. When the kept query heads give every kept kv head the same number of query heads,
 *  GQA is kept (kv heads without a kept query head are dropped too); otherwise each kept query
 *  head gets its own copy of its kv head's K and V rows (clattn_mha_info.kv_duplicated), which
 *  costs the K/V projection, the attention's K/V reads and a KV cache (kept query heads) /
 *  (kept kv heads) times the GQA cost. */
typedef struct clattn_mha clattn_mha;

/** One weight or bias: a host array, or a device buffer of the layer's context, holding the
 *  tensor dense from element `offset` on, in the desc's weight_dtype. Either is read once, at
 *  creation (the layer keeps a host copy in that type, to repack from when the head mask
 *  changes); a buffer's size is checked. Give at most one of host and buffer; an absent bias
 *  has neither. */
typedef struct clattn_mha_param {
    const void *host;
    cl_mem buffer;
    size_t offset; /* elements, into host or buffer */
} clattn_mha_param;

/** A layer's shape, weights and head mask. */
typedef struct clattn_mha_desc {
    size_t struct_size;                      /* sizeof(clattn_mha_desc): clattn_mha_desc_init */
    size_t d_model;                          /* width of X and Y */
    size_t heads_q, heads_kv, dim_qk, dim_v; /* heads_q a multiple of heads_kv */
    size_t d_kv; /* width of X_kv; 0: d_model (a layer with another width is cross-attention) */
    clattn_dtype weight_dtype;           /* storage of every weight and bias: f32, f16 or bf16 */
    clattn_mha_param w_q, w_k, w_v, w_o; /* required, shapes as above */
    clattn_mha_param b_q, b_k, b_v, b_o; /* optional, each on its own */
    const uint8_t *head_mask;            /* host [heads_q]: nonzero keeps the head; NULL: all */
} clattn_mha_desc;

/** Fills *desc with the sizes, float32 weights, none given yet, every head kept.
 *  @return CLATTN_SUCCESS or CLATTN_ERR_INVALID_ARGUMENT (NULL, a size below the first layout). */
CLATTN_API clattn_status clattn_mha_desc_init_sized(clattn_mha_desc *desc, size_t struct_size,
                                                    size_t d_model, size_t heads_q, size_t heads_kv,
                                                    size_t dim_qk, size_t dim_v);
#define clattn_mha_desc_init(desc, ...)                                                            \
    clattn_mha_desc_init_sized((desc), sizeof *(desc), __VA_ARGS__)

/** Creates a layer on the context (which must outlive it): checks the desc (sizes, which
 *  weights are given, buffer sizes, the head mask), reads the weights, and uploads the kept
 *  heads' weights packed and widened to float32 (float16 and bfloat16 exactly).
 *  @return CLATTN_SUCCESS; CLATTN_ERR_INVALID_ARGUMENT (a size, a missing weight or one given
 *  twice, a buffer smaller than its tensor, a head mask that keeps no head: the message names
 *  it); CLATTN_ERR_OUT_OF_MEMORY; or an OpenCL error. *mha is NULL on failure. */
CLATTN_API clattn_status clattn_mha_create(clattn_context *ctx, const clattn_mha_desc *desc,
                                           clattn_mha **mha);

/** Releases the layer and what it owns. Accepts NULL. Not a call on its context: it must not
 *  overlap one. */
CLATTN_API void clattn_mha_destroy(clattn_mha *mha);

/** Sets the heads kept, host [heads_q] (nonzero: kept; NULL: every head), and repacks the
 *  weights. A KV cache holds the rows of the kv heads kept when it was filled: after a mask
 *  that keeps other kv heads, start it again (clattn_kv_cache_set_lengths to zeros) and append
 *  the sequence anew. The layer cannot tell, so it reads the old rows when only which heads, not
 *  how many, changed (when the count changes, clattn_mha_info.attention_heads_kv, the cache no
 *  longer fits and its calls are refused). @return CLATTN_SUCCESS, or
 *  CLATTN_ERR_INVALID_ARGUMENT for a mask that keeps no head; on any error the layer keeps its
 *  previous mask and weights. */
CLATTN_API clattn_status clattn_mha_set_head_mask(clattn_mha *mha, const uint8_t *head_mask);

/** A layer as it stands. */
typedef struct clattn_mha_info {
    size_t struct_size; /* sizeof(clattn_mha_info): clattn_mha_info_init */
    size_t d_model, d_kv, heads_q, heads_kv, dim_qk, dim_v;
    clattn_dtype weight_dtype;
    size_t heads_kept;         /* query heads the mask keeps */
    size_t attention_heads_q;  /* = heads_kept */
    size_t attention_heads_kv; /* kv heads the attention reads (and a KV cache must have): the
                                  kept kv heads, or heads_kept when kv_duplicated */
    int kv_duplicated;         /* the kept heads broke GQA: K/V rows copied per query head */
    int has_bias;              /* any bias was given */
    uint64_t weight_bytes;     /* device memory of the packed float32 weights and biases */
} clattn_mha_info;

/** Zeroes `struct_size` bytes of *info and sets info->struct_size. */
CLATTN_API clattn_status clattn_mha_info_init_sized(clattn_mha_info *info, size_t struct_size);
#define clattn_mha_info_init(info) clattn_mha_info_init_sized((info), sizeof *(info))

/** Describes the layer, up to info->struct_size. @return CLATTN_SUCCESS or INVALID_ARGUMENT. */
CLATTN_API clattn_status clattn_mha_get_info(const clattn_mha *mha, clattn_mha_info *info);

/** Runs the layer. `call` is a clattn_attention_desc of the unpruned layer's attention, made
 *  with clattn_attention_desc_init(&call, CLATTN_LAYOUT_BSHD, B, Hq, Hkv, N, Nk, Dqk, Dv): its
 *  heads and dims must be the layer's; batch, len_q = N and len_k = Nk (= N without X_kv) give
 *  the shapes; dtype is the storage of X and X_kv, out_dtype Y's (f32, f16 or bf16); scale and
 *  every mask of docs/semantics.md section 2 apply, a per-head block layout or bias indexed by the
 * layer's original heads (a pruned head's are not read); path and variant choose the attention's
 *  variant. Its layout and tensors are not read: the layer lays Q, K, V and O out itself, and
 *  its K and V are float32, so kv_q8_0 must be 0 (a q8_0 KV cache stores them in 8 bits).
 *  x: dense [B, N, d_model]; x_kv: dense [B, Nk, d_kv], or NULL for self-attention; y: dense
 *  [B, N, d_model], written only by the output projection, not x's or x_kv's buffer (a call
 *  refused by its checks, or failing before the output projection, leaves it as it was). The
 *  bias is read from call->bias. `event` (may be NULL) completes with the call.
 *  @return CLATTN_SUCCESS; CLATTN_ERR_INVALID_ARGUMENT (heads or dims not the layer's, Nk != N
 *  without X_kv, X_kv missing for a layer with d_kv != d_model, a buffer too small for its
 *  shape, a bad mask, kv_q8_0 set: checked before anything is enqueued);
 *  CLATTN_ERR_UNSUPPORTED (a projection larger than CLBlast's int offsets);
 *  CLATTN_ERR_OUT_OF_MEMORY (a GEMM whose padded copies, which CLBlast may make, would not fit
 *  the device's largest allocation: CLBlast would abort); CLATTN_ERR_BLAS; or an error of
 *  clattn_attention. */
CLATTN_API clattn_status clattn_mha_forward(clattn_mha *mha, const clattn_attention_desc *call,
                                            cl_mem x, cl_mem x_kv, cl_mem y, cl_event *event);

/** The same on host arrays (the bias from call->bias_host); waits. */
CLATTN_API clattn_status clattn_mha_forward_host(clattn_mha *mha, const clattn_attention_desc *call,
                                                 const void *x, const void *x_kv, void *y);

/** Runs the layer for N new tokens a sequence over a KV cache (self-attention decoding and
 *  prefill, docs/semantics.md section 6): K and V of the new tokens' X [B, N, d_model] are appended
 * to the cache (sequence b appends new_len[b] of them; new_len host [B], NULL: N each), and their
 *  queries attend over the cache (the valid query rows of sequence b are its new_len[b]; rows
 *  past them are padding, with O = 0 and so Y = b_o). The cache must be on the layer's context
 *  with B sequences, attention_heads_kv heads and the layer's dims, of any storage type: the
 *  float32 K/V rows are converted by the append, and for a q8_0 cache (Dqk and Dv multiples of
 *  32) quantised on the device, so that Y carries K and V's 8-bit rounding.
 *  `call` as for clattn_mha_forward with len_q = N (len_k is not read: masks see each
 *  sequence's rows as clattn_kv_cache_attention does); the layer's d_kv must be d_model.
 *  Everything is checked before the append; an attention that fails after it sets the cache's
 *  lengths back. Appending one token at a time gives, row for row, what one causal
 *  clattn_mha_forward over the whole sequence gives.
 *  @return as clattn_mha_forward and clattn_kv_cache_append. */
CLATTN_API clattn_status clattn_mha_forward_cache(clattn_mha *mha, clattn_kv_cache *cache,
                                                  const clattn_attention_desc *call, cl_mem x,
                                                  const int32_t *new_len, cl_mem y,
                                                  cl_event *event);

/** Where the time of the last successful call went. */
typedef struct clattn_mha_stats {
    size_t struct_size; /* sizeof(clattn_mha_stats): clattn_mha_stats_init */
    /* While the context times (clattn_context_set_timing), each phase is waited for and its
     * wall time recorded; else these are 0. projection: widening X, the Q/K/V GEMMs (and the
     * append to a KV cache); output: the output GEMM and narrowing Y. */
    double projection_ms, attention_ms, output_ms;
    clattn_variant variant; /* the attention's variant */
    char kernel[96];        /* the attention's kernel (clattn_stats.kernel) */
    size_t attention_heads_q, attention_heads_kv;
    uint64_t projection_flops, output_flops; /* 2*M*N*K of the GEMMs */
    /* from 0.3: the GEMM rows that ran the projections and the output, and the output's
     * kernel with its parameters */
    clattn_gemm projection_gemm, output_gemm;
    char gemm_kernel[96];
} clattn_mha_stats;

/** Zeroes `struct_size` bytes of *stats and sets stats->struct_size. */
CLATTN_API clattn_status clattn_mha_stats_init_sized(clattn_mha_stats *stats, size_t struct_size);
#define clattn_mha_stats_init(stats) clattn_mha_stats_init_sized((stats), sizeof *(stats))

/** Copies the statistics of the layer's last successful call, up to stats->struct_size.
 *  @return CLATTN_SUCCESS or CLATTN_ERR_INVALID_ARGUMENT (NULL, no call yet). */
CLATTN_API clattn_status clattn_mha_last_stats(const clattn_mha *mha, clattn_mha_stats *stats);

/** The CPU reference of the layer, no context needed: the projections and the output in double,
 *  Q, K and V stored as float32 (the layer's definition), the attention by
 *  clattn_attention_reference over every head, the pruned heads' O set to zero, Y stored in
 *  call->out_dtype. Weights from `layer`'s host arrays (buffers are refused), the bias from
 *  call->bias_host; x, x_kv (may be NULL) and y as for clattn_mha_forward_host.
 *  @return CLATTN_SUCCESS, CLATTN_ERR_INVALID_ARGUMENT or CLATTN_ERR_OUT_OF_MEMORY. To learn
 *  why a desc is refused, create the layer on a context and read clattn_context_last_error. */
CLATTN_API clattn_status clattn_mha_reference(const clattn_mha_desc *layer,
                                              const clattn_attention_desc *call, const void *x,
                                              const void *x_kv, void *y);

#ifdef __cplusplus
}
#endif
#endif /* CLATTN_H */
