/*
 * The verdict store: what `clattn check` found for each variant on a device, beside the tuning
 * database in the cache folder (verdicts.json, docs/verification.md):
 *
 *   {"clattn_verdicts": 1, "entries": [
 *     {"device": "llvmpipe (LLVM 15.0.6, 256 bits)", "platform": "rusticl", "driver": "22.3.6",
 *      "library": "0.2.0", "sources": "5f0c...", "variant": "flash", "verdict": "passed",
 *      "sweep": "quick (35 cases)", "date": "2026-11-25T18:04:05Z", "detail": ""}]}
 *
 * An entry holds for its device name, platform, driver version, library version and the hash
 * of the kernel sources only: a verdict reached on another driver, library or sources is never
 * taken. A report (`clattn check --report`) has the same form, and merging one takes the
 * entries of this library's version and sources.
 */
#ifndef CLATTN_VERDICTS_H
#define CLATTN_VERDICTS_H

#include "core/core.h"

typedef struct verdict_entry {
    char device[256], platform[128], driver[128], library[32], sources[20], variant[32];
    char verdict[16]; /* "passed", "failed", "timed out" */
    char sweep[64], date[32], detail[256];
} verdict_entry;

/* The store's path (in the cache folder), or NULL when the cache folder is off or not private. */
const char *verdicts_file_path(char *buf, size_t size);

/* Fills e's key for `variant` on the device, with this library's version and sources. */
void verdict_key(const clattn_device_info *device, const char *variant, verdict_entry *e);

/* The store's entry with e's key (e's verdict fields filled). @return 1 when there is one. */
int verdict_find(verdict_entry *e);

/* Writes e into `file` (NULL: the store), replacing the entry with its key; the file is written
 * whole to a temporary and renamed. */
clattn_status verdict_write(const char *file, const verdict_entry *e, error_record *err);

/* Adds to the store the entries of `file` made by this library version on these kernel
 * sources; counts those taken and those left out. */
clattn_status verdicts_merge(const char *file, size_t *merged, size_t *ignored, error_record *err);

/* "passed" ... for a clattn_verdict_kind, and back (NONE for a word that is none). */
const char *verdict_kind_name(clattn_verdict_kind kind);
clattn_verdict_kind verdict_kind_of(const char *name);

#endif
