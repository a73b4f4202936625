/* The format of the cache folder's compiled-kernel entries, shared by program.c (which writes
 * and reads them) and cache_folder.c (which trims and clears them):
 *
 *     magic "CLATTNPC" | u32 format | u32 key bytes | u64 binary bytes | u64 checksum | key |
 *     binary
 *
 * in files named by 16 hex digits and ".clbin". The key's first line is "clattn VERSION". */
#ifndef CLATTN_CACHE_ENTRY_H
#define CLATTN_CACHE_ENTRY_H

#define CACHE_MAGIC        "CLATTNPC"
#define CACHE_FORMAT       1u
#define CACHE_HEADER_BYTES 32u

#endif
