/* Device buffers: one-off ones, the context's reusable workspace, and the set one call holds. */
#include "core.h"

#include <stdio.h>
#include <string.h>

size_t buffer_size(cl_mem buffer) {
    size_t size = 0;
    if (!buffer || clGetMemObjectInfo(buffer, CL_MEM_SIZE, sizeof size, &size, NULL) != CL_SUCCESS)
        return 0;
    return size;
}

byte_range buffer_bytes(cl_mem buffer, size_t first_byte, size_t end_byte) {
    byte_range r = {buffer, first_byte, end_byte, 0, 0};
    cl_mem parent = NULL;
    size_t origin = 0;
    cl_mem_flags flags = 0;
    void *host = NULL;
    if (clGetMemObjectInfo(buffer, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof parent, &parent, NULL) ==
            CL_SUCCESS &&
        parent &&
        clGetMemObjectInfo(buffer, CL_MEM_OFFSET, sizeof origin, &origin, NULL) == CL_SUCCESS) {
        r.root = parent;
        r.begin += origin, r.end += origin;
    }
    if (clGetMemObjectInfo(buffer, CL_MEM_FLAGS, sizeof flags, &flags, NULL) == CL_SUCCESS &&
        (flags & CL_MEM_USE_HOST_PTR) &&
        clGetMemObjectInfo(buffer, CL_MEM_HOST_PTR, sizeof host, &host, NULL) == CL_SUCCESS && host)
        r.host_begin = (uintptr_t)host + first_byte, r.host_end = (uintptr_t)host + end_byte;
    return r;
}

int byte_ranges_overlap(const byte_range *a, const byte_range *b) {
    int device = a->root == b->root && a->begin < b->end && b->begin < a->end;
    int host =
        a->host_end && b->host_end && a->host_begin < b->host_end && b->host_begin < a->host_end;
    return device || host;
}

clattn_status buffer_create(clattn_context *ctx, cl_mem_flags flags, size_t bytes, void *host,
                            cl_mem *out, const char *what) {
    *out = NULL;
    if (bytes == 0) bytes = 4; /* OpenCL rejects empty buffers; keep a placeholder */
    if (bytes > ctx->device.max_alloc_bytes)
        return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY,
                         "allocating %s: %zu bytes exceed the device's largest allocation "
                         "(%llu bytes)",
                         what, bytes, (unsigned long long)ctx->device.max_alloc_bytes);
    cl_int err = CL_SUCCESS;
    *out = clCreateBuffer(ctx->cl_ctx, flags, bytes, host, &err);
    if (err != CL_SUCCESS) {
        *out = NULL;
        char detail[160];
        snprintf(detail, sizeof detail, "allocating %s (%zu bytes)", what, bytes);
        return ctx_cl_error(ctx, err, detail);
    }
    return CLATTN_SUCCESS;
}

clattn_status workspace_get(clattn_context *ctx, int slot, size_t bytes, cl_mem *out,
                            const char *what) {
    *out = NULL;
    if (ctx->workspace[slot] && ctx->workspace_bytes[slot] < bytes) {
        clReleaseMemObject(ctx->workspace[slot]);
        ctx->workspace[slot] = NULL;
    }
    if (!ctx->workspace[slot]) {
        clattn_status status =
            buffer_create(ctx, CL_MEM_READ_WRITE, bytes, NULL, &ctx->workspace[slot], what);
        if (status != CLATTN_SUCCESS) return status;
        ctx->workspace_bytes[slot] = bytes;
    }
    clRetainMemObject(ctx->workspace[slot]);
    *out = ctx->workspace[slot];
    return CLATTN_SUCCESS;
}

/* ---------------------------------------------------------------- the buffers of one call */

static clattn_status hold(clattn_context *ctx, buffer_set *set, cl_mem buffer, cl_mem *out,
                          const char *what) {
    if (set->count == BUFFER_SET_MAX) {
        clReleaseMemObject(buffer);
        return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "more than %d buffers for %s",
                         BUFFER_SET_MAX, what);
    }
    set->held[set->count++] = buffer;
    *out = buffer;
    return CLATTN_SUCCESS;
}

clattn_status buffer_set_placeholder(clattn_context *ctx, buffer_set *set, cl_mem *out) {
    if (!set->placeholder) {
        clattn_status status =
            buffer_create(ctx, CL_MEM_READ_WRITE, 16, NULL, &set->placeholder, "placeholder");
        if (status != CLATTN_SUCCESS) return status;
    }
    *out = set->placeholder;
    return CLATTN_SUCCESS;
}

clattn_status buffer_set_add(clattn_context *ctx, buffer_set *set, size_t count, size_t elem,
                             const void *host, cl_mem *out, const char *what) {
    size_t bytes = 0;
    *out = NULL;
    if (count == 0) return buffer_set_placeholder(ctx, set, out);
    if (size_mul(count, elem, &bytes))
        return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "the size of %s overflows", what);
    cl_mem_flags flags = host ? CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR : CL_MEM_READ_WRITE;
    cl_mem buffer = NULL;
    clattn_status status = buffer_create(ctx, flags, bytes, (void *)host, &buffer, what);
    if (status != CLATTN_SUCCESS) return status;
    set->bytes += bytes;
    return hold(ctx, set, buffer, out, what);
}

clattn_status buffer_set_workspace(clattn_context *ctx, buffer_set *set, int slot, size_t bytes,
                                   cl_mem *out, const char *what) {
    cl_mem buffer = NULL;
    clattn_status status = workspace_get(ctx, slot, bytes, &buffer, what);
    if (status != CLATTN_SUCCESS) return status;
    set->bytes += bytes;
    return hold(ctx, set, buffer, out, what);
}

void buffer_set_release(buffer_set *set) {
    for (unsigned i = 0; i < set->count; i++) clReleaseMemObject(set->held[i]);
    if (set->placeholder) clReleaseMemObject(set->placeholder);
    memset(set, 0, sizeof *set);
}
