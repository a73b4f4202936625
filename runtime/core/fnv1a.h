/* FNV-1a, 64 bits: the program cache's keys and checksums (program.c) and the tile lists'
 * cache keys (kernels/tile_cache.c). Not for anything an attacker chooses to collide. */
#ifndef CLATTN_FNV1A_H
#define CLATTN_FNV1A_H

#include <stddef.h>
#include <stdint.h>

#define FNV1A_SEED 14695981039346656037ull

/* hash extended by `size` bytes of data (start from FNV1A_SEED). */
static inline uint64_t fnv1a(uint64_t hash, const void *data, size_t size) {
    const unsigned char *bytes = data;
    for (size_t i = 0; i < size; i++) hash = (hash ^ bytes[i]) * 1099511628211ull;
    return hash;
}

#endif
