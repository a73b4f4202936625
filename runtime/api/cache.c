/* The cache folder as the public API shows it: its path, what it holds, trimming, and building
 * ahead (clattn_cache_warm). The folder's entries are core/program.c's; cache_folder.c bounds
 * them. */
#include "core/core.h"

#include <stdlib.h>
#include <string.h>

clattn_status clattn_cache_info_init_sized(clattn_cache_info *info, size_t struct_size) {
    return struct_init_zeroed(info, struct_size, sizeof *info);
}

clattn_status clattn_cache_folder(char *path, size_t size) {
    return program_cache_path(NULL, path, size);
}

clattn_status clattn_cache_info_get(clattn_cache_info *info) {
    char dir[4096];
    cache_usage usage;
    clattn_cache_info local;
    if (!info) return CLATTN_ERR_INVALID_ARGUMENT;
    if (!program_cache_dir(dir, sizeof dir)) return CLATTN_ERR_UNSUPPORTED;
    if (cache_usage_get(dir, &usage) != 0) return CLATTN_ERR_IO;
    memset(&local, 0, sizeof local);
    local.struct_size = sizeof local;
    local.bytes = usage.bytes;
    local.entries = usage.entries;
    local.other_version_bytes = usage.other_version_bytes;
    local.other_version_entries = usage.other_version_entries;
    local.oldest_use = usage.oldest_use;
    local.newest_use = usage.newest_use;
    local.limit_bytes = cache_limit_bytes();
    return struct_write(info, &local, sizeof local, sizeof local) ? CLATTN_ERR_INVALID_ARGUMENT
                                                                  : CLATTN_SUCCESS;
}

clattn_status clattn_cache_trim(uint64_t max_bytes, size_t *removed) {
    char dir[4096];
    size_t count = 0;
    if (!program_cache_dir(dir, sizeof dir)) return CLATTN_ERR_UNSUPPORTED;
    int err = cache_trim(dir, max_bytes, &count);
    if (removed) *removed = count;
    return err ? CLATTN_ERR_IO : CLATTN_SUCCESS;
}

/* ---------------------------------------------------------------- building ahead */

/* One attention call on zeros: B=1, Hq=2 over Hkv=1 (grouped, as most models are),
 * len_q x len_k, head_dim both ways, dtype in and out. What auto runs for it is built. */
static clattn_status warm_call(clattn_context *ctx, clattn_dtype dtype, size_t head_dim,
                               size_t len_q, size_t len_k, int causal) {
    clattn_attention_desc desc;
    clattn_status status = clattn_attention_desc_init(&desc, CLATTN_LAYOUT_BHSD, 1, 2, 1, len_q,
                                                      len_k, head_dim, head_dim);
    if (status != CLATTN_SUCCESS) return status;
    desc.dtype = desc.out_dtype = dtype;
    desc.causal = causal;
    size_t value = dtype_size(dtype);
    void *q = calloc(2 * len_q * head_dim, value), *kv = calloc(len_k * head_dim, value);
    void *o = calloc(2 * len_q * head_dim, value);
    if (!q || !kv || !o)
        status = ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "clattn_cache_warm: no host memory");
    else
        status = clattn_attention_host(ctx, &desc, q, kv, kv, o, NULL);
    free(q);
    free(kv);
    free(o);
    return status;
}

clattn_status clattn_cache_warm(clattn_context *ctx, clattn_dtype dtype, size_t head_dim) {
    /* prefill and decode, the shapes whose auto choices differ (a decode row splits its keys) */
    static const size_t shapes[][2] = {{512, 512}, {1, 4096}};
    if (!ctx) return CLATTN_ERR_INVALID_ARGUMENT;
    if (dtype != CLATTN_F32 && dtype != CLATTN_F16 && dtype != CLATTN_BF16)
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "clattn_cache_warm: dtype %d is not f32, f16 or bf16", (int)dtype);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int causal = 0; causal <= 1; causal++) {
            clattn_status status =
                warm_call(ctx, dtype, head_dim, shapes[s][0], shapes[s][1], causal);
            if (status != CLATTN_SUCCESS) return status;
        }
    return CLATTN_SUCCESS;
}
