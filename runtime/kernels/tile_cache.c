/* The per-context cache of device tile lists (tile_cache.h). */
#include "kernels/tile_cache.h"

#include "core/fnv1a.h"

#include <stdlib.h>
#include <string.h>

/* What an entry's lists depend on besides the global tokens and the layout bytes. Every field is
 * an int64_t, so the struct has no padding and compares with memcmp. */
typedef struct tile_key {
    int64_t len_q, len_k, offset, heads_q, causal, left, right, dilation, num_globals, flag_bytes;
    int64_t layout_heads, block_q, block_k, blocks_q, blocks_k;
    int64_t block_m, block_n, classes, tiles_per_class, globals_matter;
} tile_key;

struct tile_cache_entry {
    uint64_t hash, last_use;
    tile_key key;
    int64_t *globals; /* copies of the mask's arrays, compared in full */
    uint8_t *flags;   /* is_global (a shard's global rows are in no other array) */
    uint8_t *layout;
    size_t layout_bytes;
    tile_lists host;
    device_lists dev;
    cl_mem held[7]; /* the buffers of dev, and the placeholder */
    unsigned refs;  /* the cache's, and each plan's */
};

typedef struct tile_cache {
    tile_cache_entry *entries[TILE_CACHE_ENTRIES];
    uint64_t clock;
    unsigned hits, built;
} tile_cache;

/* ---------------------------------------------------------------- keys */

static size_t layout_bytes(const mask_spec *m, int64_t layout_heads) {
    return m->layout ? (size_t)(layout_heads * m->blocks_q * m->blocks_k) : 0;
}

static void make_key(const attn_problem *pb, const tile_geometry *g, tile_key *k) {
    const mask_spec *m = &pb->mask;
    memset(k, 0, sizeof *k);
    k->len_q = m->len_q, k->len_k = m->len_k, k->offset = m->offset;
    k->heads_q = (int64_t)pb->heads_q;
    k->causal = m->causal, k->left = m->left, k->right = m->right, k->dilation = m->dilation;
    k->num_globals = m->num_globals, k->flag_bytes = (int64_t)mask_flag_bytes(m);
    if (m->layout) {
        k->layout_heads = m->layout_per_head ? (int64_t)pb->heads_q : 1;
        k->block_q = m->block_q, k->block_k = m->block_k;
        k->blocks_q = m->blocks_q, k->blocks_k = m->blocks_k;
    }
    k->block_m = g->block_m, k->block_n = g->block_n, k->classes = g->classes;
    k->tiles_per_class = g->tiles_per_class, k->globals_matter = g->globals_matter;
}

static uint64_t key_hash(const tile_key *k, const mask_spec *m) {
    uint64_t h = fnv1a(FNV1A_SEED, k, sizeof *k);
    h = fnv1a(h, m->globals, (size_t)m->num_globals * sizeof *m->globals);
    h = fnv1a(h, m->is_global, mask_flag_bytes(m));
    return fnv1a(h, m->layout, layout_bytes(m, k->layout_heads));
}

static int entry_is(const tile_cache_entry *e, uint64_t hash, const tile_key *k,
                    const mask_spec *m) {
    return e->hash == hash && memcmp(&e->key, k, sizeof *k) == 0 &&
           (!k->num_globals ||
            memcmp(e->globals, m->globals, (size_t)k->num_globals * sizeof *m->globals) == 0) &&
           (!k->flag_bytes || memcmp(e->flags, m->is_global, (size_t)k->flag_bytes) == 0) &&
           (!e->layout_bytes || memcmp(e->layout, m->layout, e->layout_bytes) == 0);
}

/* ---------------------------------------------------------------- entries */

static void entry_release(tile_cache_entry *e) {
    if (!e || --e->refs > 0) return;
    for (size_t i = 0; i < ARRAY_LEN(e->held); i++)
        if (e->held[i]) clReleaseMemObject(e->held[i]);
    tiles_release_lists(&e->host);
    free(e->globals);
    free(e->flags);
    free(e->layout);
    free(e);
}

/* A device copy of count * elem bytes of `host`, or the placeholder when there are none. */
static clattn_status upload(clattn_context *ctx, tile_cache_entry *e, size_t count, size_t elem,
                            const void *host, cl_mem *out, const char *what) {
    if (count == 0 || !host) {
        *out = e->held[0];
        return CLATTN_SUCCESS;
    }
    size_t slot = 1;
    while (slot < ARRAY_LEN(e->held) && e->held[slot]) slot++;
    clattn_status status = buffer_create(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, count * elem,
                                         (void *)host, &e->held[slot], what);
    if (status == CLATTN_SUCCESS) {
        *out = e->held[slot];
        e->dev.bytes += count * elem;
    }
    return status;
}

/* The device lists of a new entry: the host lists uploaded. */
static clattn_status entry_upload(clattn_context *ctx, const attn_problem *pb,
                                  tile_cache_entry *e) {
    const mask_spec *m = &pb->mask;
    const tile_lists *l = &e->host;
    device_lists *d = &e->dev;
    int globals = (int)e->key.globals_matter;
    clattn_status s = buffer_create(ctx, CL_MEM_READ_WRITE, 16, NULL, &e->held[0], "placeholder");
    if (!s)
        s = upload(ctx, e, globals ? (size_t)m->num_globals : 0, 4, l->gpos, &d->gpos,
                   "global list");
    if (!s)
        s = upload(ctx, e, globals ? mask_flag_bytes(m) : 0, 1, m->is_global, &d->is_global,
                   "global flags");
    if (!s) s = upload(ctx, e, e->layout_bytes, 1, m->layout, &d->layout, "block layout");
    if (!s)
        s = upload(ctx, e, l->tile_ptr ? l->num_lists + 1 : 0, 4, l->tile_ptr, &d->tile_ptr,
                   "tile lists");
    if (!s) s = upload(ctx, e, l->num_entries, 4, l->tile_idx, &d->tile_idx, "tile lists");
    if (!s) s = upload(ctx, e, l->num_rows, 4, l->row_list, &d->row_list, "global rows");
    return s;
}

/* Key tiles of one batch entry's walk, over every query head. */
static uint64_t walk_tiles(const attn_problem *pb, const tile_geometry *g, const tile_lists *l) {
    if (!pb->mask.layout_per_head || !pb->mask.layout)
        return tiles_count_walk(pb, g, l, 0) * pb->heads_q;
    uint64_t total = 0;
    for (size_t h = 0; h < pb->heads_q; h++) total += tiles_count_walk(pb, g, l, (int64_t)h);
    return total;
}

static clattn_status entry_build(clattn_context *ctx, const attn_problem *pb,
                                 const tile_geometry *g, const tile_key *k, uint64_t hash,
                                 tile_cache_entry **out) {
    const mask_spec *m = &pb->mask;
    tile_cache_entry *e = calloc(1, sizeof *e);
    if (!e) return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "tile lists: an entry");
    e->refs = 1, e->hash = hash, e->key = *k;
    e->layout_bytes = layout_bytes(m, k->layout_heads);
    e->globals = malloc((size_t)(m->num_globals + 1) * sizeof *e->globals);
    e->flags = malloc(mask_flag_bytes(m) + 1);
    e->layout = malloc(e->layout_bytes + 1);
    clattn_status s =
        e->globals && e->flags && e->layout
            ? CLATTN_SUCCESS
            : ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "tile lists: copying the mask");
    if (!s) {
        if (m->num_globals)
            memcpy(e->globals, m->globals, (size_t)m->num_globals * sizeof *m->globals);
        if (mask_flag_bytes(m)) memcpy(e->flags, m->is_global, mask_flag_bytes(m));
        if (e->layout_bytes) memcpy(e->layout, m->layout, e->layout_bytes);
        s = tiles_build_lists(pb, g, &ctx->error, &e->host);
    }
    if (!s) s = entry_upload(ctx, pb, e);
    if (s) {
        entry_release(e);
        return s;
    }
    e->dev.host = &e->host;
    e->dev.walk_tiles = walk_tiles(pb, g, &e->host);
    e->dev.pairs = mask_count_pairs(m, 1, (int64_t)pb->heads_q);
    *out = e;
    return CLATTN_SUCCESS;
}

/* ---------------------------------------------------------------- the cache */

static void tile_cache_release(clattn_context *ctx) {
    void **slot = context_data(ctx, tile_cache_release);
    tile_cache *c = slot ? *slot : NULL;
    if (!c) return;
    for (size_t i = 0; i < TILE_CACHE_ENTRIES; i++) entry_release(c->entries[i]);
    free(c);
    *slot = NULL;
}

static tile_cache *cache_of(clattn_context *ctx) {
    void **slot = context_data(ctx, tile_cache_release);
    if (slot && !*slot) *slot = calloc(1, sizeof(tile_cache));
    return slot ? *slot : NULL;
}

/* The slot a new entry takes: an empty one, else the least recently used (released). */
static size_t victim(tile_cache *c) {
    size_t oldest = 0;
    for (size_t i = 0; i < TILE_CACHE_ENTRIES; i++) {
        if (!c->entries[i]) return i;
        if (c->entries[i]->last_use < c->entries[oldest]->last_use) oldest = i;
    }
    entry_release(c->entries[oldest]);
    c->entries[oldest] = NULL;
    return oldest;
}

clattn_status tile_cache_get(clattn_context *ctx, const attn_problem *pb, const tile_geometry *g,
                             tile_cache_entry **entry, const device_lists **lists) {
    tile_cache *c = cache_of(ctx);
    *entry = NULL;
    if (!c) return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "tile lists: the context's cache");
    tile_key k;
    make_key(pb, g, &k);
    uint64_t hash = key_hash(&k, &pb->mask);
    tile_cache_entry *e = NULL;
    for (size_t i = 0; i < TILE_CACHE_ENTRIES && !e; i++)
        if (c->entries[i] && entry_is(c->entries[i], hash, &k, &pb->mask)) e = c->entries[i];
    if (e) {
        c->hits++;
    } else {
        clattn_status s = entry_build(ctx, pb, g, &k, hash, &e);
        if (s) return s;
        c->entries[victim(c)] = e;
        c->built++;
    }
    e->last_use = ++c->clock;
    e->refs++;
    *entry = e;
    *lists = &e->dev;
    return CLATTN_SUCCESS;
}

void tile_cache_put(tile_cache_entry *entry) {
    entry_release(entry);
}

void tile_cache_counts(clattn_context *ctx, unsigned *hits, unsigned *built) {
    tile_cache *c = cache_of(ctx);
    *hits = c ? c->hits : 0;
    *built = c ? c->built : 0;
}
