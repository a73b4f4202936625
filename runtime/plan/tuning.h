/*
 * The tuning database: tile sizes, work-group sizes and vector widths of each kernel variant,
 * per device. Planners ask it and hard-code no number. Like CLBlast's database, it has entries
 * for devices measured and a default per device class; a user file, tuning.json in the cache
 * folder (written by `clattn tune`), overrides an entry for one device and driver:
 *
 *   {"clattn_tuning": 1, "entries": [
 *     {"device": "NVIDIA H100 80GB HBM3", "driver": "580.65", "variant": "gpu",
 *      "block_m": 64, "block_n": 32, "wg_size": 64, "vector": 1}]}
 *
 * A field an entry leaves out keeps the built-in value. Unknown keys are ignored.
 */
#ifndef CLATTN_TUNING_H
#define CLATTN_TUNING_H

#include "core/core.h"

typedef struct tuning_params {
    unsigned block_m; /* query rows a tile */
    unsigned block_n; /* keys a tile */
    unsigned wg_size; /* work-items a work-group; 0: the variant's own rule */
    unsigned vector;  /* vector width the kernel is specialised for; 0: its own */
    unsigned split;   /* decode kernels: key chunks a row; 0: from the compute units */
} tuning_params;

/* Where a lookup's values came from. */
typedef enum tuning_source {
    TUNING_DEFAULT,  /* the default of the device's class */
    TUNING_BUILT_IN, /* a built-in entry for this device */
    TUNING_USER      /* tuning.json in the cache folder */
} tuning_source;

/* The parameters of `variant` (a row name: "cpu", "gpu", "gemm", ...) on `device`.
 * @return where they came from. */
tuning_source tuning_lookup(const clattn_device_info *device, const char *variant,
                            tuning_params *out);

/* "default", "built-in" or "tuning.json". */
const char *tuning_source_name(tuning_source source);

/* The path of the user's tuning file, or NULL when the cache folder is off or not private
 * (program_cache_trusted_dir). */
const char *tuning_file_path(char *buf, size_t size);

#endif
