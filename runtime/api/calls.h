/* What the API's entry points share: a checked problem run on its buffers, and a KV cache's
 * accessors. */
#ifndef CLATTN_API_CALLS_H
#define CLATTN_API_CALLS_H

#include "kernels/dispatch.h"

/* Checks the buffers against the problem's extents, then hands the call to the dispatcher
 * (kernels/dispatch.h). @return the call's status; the message is on ctx. */
clattn_status attention_on_buffers(clattn_context *ctx, const attn_problem *pb,
                                   const attn_buffers *b, cl_event *event);

/* An output's buffer over its host array (O, LSE of the *_host entry points): mapped where the
 * device shares host memory (buffer_from_host), unless its bytes overlap one of the `count`
 * inputs' (the kernels must not write what they read: then a copy, as on other devices). It
 * holds the array's current contents either way, so gaps between strided rows come back as
 * they were. */
clattn_status host_output_buffer(clattn_context *ctx, size_t bytes, void *host,
                                 const void *const *inputs, const size_t *input_bytes, size_t count,
                                 cl_mem *out, const char *what);

/* A KV cache's context and desc (api/kv_cache.c), for the layer above that appends to it and
 * attends over it (runtime/mha/): it checks a cache against itself before changing anything. */
clattn_context *kv_cache_context(const clattn_kv_cache *cache);
const clattn_kv_cache_desc *kv_cache_desc(const clattn_kv_cache *cache);
/* The bytes of the cache's K storage (out[0]) and V storage (out[1]). */
void kv_cache_storage(const clattn_kv_cache *cache, byte_range out[2]);

/* clattn_attention and the cache's calls of the same names, for a caller already inside a call
 * on the context (the layer's, which entered it: context_enter): they do not enter it again. */
clattn_status attention_in_call(clattn_context *ctx, const clattn_attention_desc *d, cl_mem q,
                                cl_mem k, cl_mem v, cl_mem o, cl_mem lse, cl_event *event);
clattn_status kv_cache_append_in_call(clattn_kv_cache *c, const clattn_kv_rows *rows);
clattn_status kv_cache_set_lengths_in_call(clattn_kv_cache *c, const int32_t *lengths);
clattn_status kv_cache_lengths_in_call(const clattn_kv_cache *c, int32_t *lengths);
clattn_status kv_cache_attention_in_call(clattn_kv_cache *c, const clattn_attention_desc *desc,
                                         cl_mem q, const int32_t *q_len, cl_mem o, cl_mem lse,
                                         cl_event *event);
/* What kv_cache_attention_in_call would refuse before it runs anything: the desc against the
 * cache, and a variant the call names that does not serve calls over a cache. The layer asks
 * before it appends, so that a refused call leaves the cache's rows as they were. */
clattn_status kv_cache_attention_check(clattn_kv_cache *c, const clattn_attention_desc *desc,
                                       const int32_t *q_len);

/* Tuning parameters as the caller sees them (clattn_tuning's fields; struct_size untouched). */
void tuning_to_public(const tuning_params *in, clattn_tuning *out);

/* A row's check of tuning parameters on a device (attn_variant's and gemm_row's tuning_valid). */
typedef int tuning_valid_fn(const tuning_params *t, const clattn_device_info *device, char *why,
                            size_t size);

/* A caller's tuning parameters into *out, when they were initialised (clattn_tuning_init) and
 * `valid` (NULL: any) takes them on the context's device; else CLATTN_ERR_INVALID_ARGUMENT,
 * its message naming the row (api/tuning.c). */
clattn_status tuning_from_caller(clattn_context *ctx, const char *row, tuning_valid_fn *valid,
                                 const clattn_tuning *params, tuning_params *out);

/* The parameters a lookup found, and where from, written into the caller's structs (a
 * struct_size of at least this library's, checked by the caller; source may be NULL). */
void tuning_to_caller(const tuning_params *found, tuning_source from, clattn_tuning *params,
                      clattn_tuning_source *source);

#endif
