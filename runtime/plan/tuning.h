/*
 * The tuning database's mechanism: tile sizes, work-group shapes, vector widths and the like of
 * each kernel variant, per device. Planners ask it and hard-code no number. Like CLBlast's
 * database, a variant has entries for device classes (vendor and type) and a default for every
 * device, which its row keeps beside its kernel (kernels/); a user file,
 * tuning.json in the cache folder (written by `clattn tune` through tuning_save), overrides an
 * entry for one device and driver, and a context may override both for its own calls
 * (clattn_context_set_tuning, which the tuner uses to try candidates):
 *
 *   {"clattn_tuning": 1, "entries": [
 *     {"device": "NVIDIA H100 80GB HBM3", "driver": "580.65", "variant": "flash",
 *      "block_m": 64, "block_n": 32, "tile_m": 4, "tile_n": 4, "vector": 4, "stages": 2,
 *      "subgroups": 0}]}
 *
 * A field an entry leaves out keeps the built-in value. Unknown keys are ignored.
 */
#ifndef CLATTN_TUNING_H
#define CLATTN_TUNING_H

#include "core/core.h"

/* X(field, meaning): every field of an entry, in the order of tuning_params and of
 * clattn_tuning (include/clattn.h). */
#define TUNING_FIELDS(X)                                                                           \
    X(block_m, "query rows a tile (a work-group)")                                                 \
    X(block_n, "keys a tile")                                                                      \
    X(wg_size, "work-items a work-group; 0: the variant's own rule")                               \
    X(vector, "vector width the kernel is specialised for; 0: its own")                            \
    X(split, "decode kernels: key chunks a row; 0: from the compute units")                        \
    X(tile_m, "flash: query rows of a work-item's micro-tile; nv_mma: row tiles of 16 a warp")     \
    X(tile_n, "flash: keys of a work-item's micro-tile")                                           \
    X(stages, "flash, nv_mma: key tiles staged in local memory (2: double buffering)")             \
    X(subgroups, "flash: 1 reduces rows through subgroups where the device has them")

#define TUNING_FIELD(name, meaning) unsigned name;
typedef struct tuning_params {
    TUNING_FIELDS(TUNING_FIELD)
} tuning_params;
#undef TUNING_FIELD

/* Where a lookup's values came from. */
typedef enum tuning_source {
    TUNING_DEFAULT,  /* the default of the device's class */
    TUNING_BUILT_IN, /* a built-in entry for this device's vendor or name */
    TUNING_USER,     /* tuning.json in the cache folder */
    TUNING_CONTEXT   /* set on the context (clattn_context_set_tuning) */
} tuning_source;

/* An axis of the tuner's search: TUNING_AXIS(block_m, 16, 32, 64). */
#define TUNING_AXIS(field, ...)                                                                    \
    {                                                                                              \
#field, sizeof((unsigned[]){__VA_ARGS__}) / sizeof(unsigned), {                            \
            __VA_ARGS__                                                                            \
        }                                                                                          \
    }

/* A variant's built-in parameters for a device class: a device matches when its type has a
 * bit of `type` and its vendor and name contain the given texts (empty matches all). */
typedef struct tuning_default {
    cl_device_type type;
    const char *vendor, *name;
    tuning_params params;
} tuning_default;

/* What the database knows of a variant (its row, kernels/, holds these): its names, either of
 * which a tuning.json entry may carry (the first is the one written), and its built-in
 * defaults, the first that matches a device winning (the last should match every device). */
typedef struct tuning_subject {
    const char *name, *old_name;
    const tuning_default *defaults;
    size_t num_defaults;
} tuning_subject;

/* The subject's parameters on `device`: its built-in defaults, then tuning.json's entry for
 * the device and driver. @return where they came from. */
tuning_source tuning_lookup(const clattn_device_info *device, const tuning_subject *subject,
                            tuning_params *out);

/* The same, with the context's own setting first. */
tuning_source tuning_lookup_context(clattn_context *ctx, const tuning_subject *subject,
                                    tuning_params *out);

/* Sets (params) or clears (NULL) the context's own parameters of `variant` (its name).
 * @return CLATTN_SUCCESS or CLATTN_ERR_OUT_OF_MEMORY. */
clattn_status tuning_set_context(clattn_context *ctx, const char *variant,
                                 const tuning_params *params);

/* Writes `params` as the tuning.json entry of (device name, driver, variant), keeping the
 * file's other entries, through a temporary file and a rename. @return CLATTN_SUCCESS,
 * CLATTN_ERR_UNSUPPORTED (the cache folder is off) or CLATTN_ERR_IO (message in err). */
clattn_status tuning_save(const clattn_device_info *device, const char *variant,
                          const tuning_params *params, error_record *err);

/* "default", "built-in", "tuning.json" or "context". */
const char *tuning_source_name(tuning_source source);

/* The path of the user's tuning file, or NULL when the cache folder is off or not private
 * (program_cache_trusted_dir). */
const char *tuning_file_path(char *buf, size_t size);

#endif
