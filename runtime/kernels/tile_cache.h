/*
 * The lists a tiled kernel walks (plan/tiles.h: the global key positions and flags, the rows at
 * global positions, a block layout and its key-tile lists), on the device, built once per
 * pattern and tile geometry and kept in the context, so that calls that repeat a mask neither
 * rebuild the lists on the host nor upload them again. The context keeps TILE_CACHE_ENTRIES
 * entries and drops the least recently used; an entry is found by a hash of everything its
 * lists depend on (sizes, causality, window, dilation, global tokens, layout bytes and shape,
 * tile geometry) and then compared in full, never trusted on the hash alone. The entry also
 * keeps the pattern's pair count, so that no call walks the mask again for its statistics.
 */
#ifndef CLATTN_TILE_CACHE_H
#define CLATTN_TILE_CACHE_H

#include "plan/tiles.h"

#define TILE_CACHE_ENTRIES 8

typedef struct tile_cache_entry tile_cache_entry;

/* An entry's lists, on the host and the device. */
typedef struct device_lists {
    const tile_lists *host;
    cl_mem gpos, is_global, layout, tile_ptr, tile_idx, row_list; /* a placeholder where absent */
    uint64_t walk_tiles; /* key tiles the passes visit for one batch entry, all query heads */
    uint64_t pairs;      /* allowed pairs of one batch entry, all query heads (the statistics) */
    uint64_t bytes;      /* device memory the lists take */
} device_lists;

/* The lists of pb's mask for geometry g on ctx's device, from the cache or built now. *entry
 * holds a reference, which tile_cache_put drops (the entry stays valid until then).
 * @return CLATTN_SUCCESS, CLATTN_ERR_OUT_OF_MEMORY or an OpenCL error (on ctx). */
clattn_status tile_cache_get(clattn_context *ctx, const attn_problem *pb, const tile_geometry *g,
                             tile_cache_entry **entry, const device_lists **lists);
void tile_cache_put(tile_cache_entry *entry);

/* How many lookups of ctx's cache found their lists, and how many built them (tests). */
void tile_cache_counts(clattn_context *ctx, unsigned *hits, unsigned *built);

#endif
