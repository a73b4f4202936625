/* Device buffers: one-off ones, the context's reusable workspace, and the set one call holds;
 * the copies between them and host memory, and the count of that traffic (clattn_transfers). */
#include "core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t buffer_size(cl_mem buffer) {
    size_t size = 0;
    if (!buffer || clGetMemObjectInfo(buffer, CL_MEM_SIZE, sizeof size, &size, NULL) != CL_SUCCESS)
        return 0;
    return size;
}

int buffer_read_only(cl_mem buffer) {
    cl_mem_flags flags = 0;
    return clGetMemObjectInfo(buffer, CL_MEM_FLAGS, sizeof flags, &flags, NULL) == CL_SUCCESS &&
           (flags & CL_MEM_READ_ONLY);
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
    if (host && (flags & CL_MEM_COPY_HOST_PTR)) {
        ctx->transfers.host_to_device_bytes += bytes;
        ctx->transfers.copies++;
    } else if (host && (flags & CL_MEM_USE_HOST_PTR)) {
        ctx->transfers.mapped_bytes += bytes;
    }
    return CLATTN_SUCCESS;
}

clattn_status buffer_write(clattn_context *ctx, cl_mem buffer, size_t offset, size_t bytes,
                           const void *host, const char *what) {
    cl_int err =
        clEnqueueWriteBuffer(ctx->queue, buffer, CL_TRUE, offset, bytes, host, 0, NULL, NULL);
    if (err != CL_SUCCESS) return ctx_cl_error(ctx, err, what);
    ctx->transfers.host_to_device_bytes += bytes;
    ctx->transfers.copies++;
    return CLATTN_SUCCESS;
}

clattn_status buffer_read(clattn_context *ctx, cl_mem buffer, size_t offset, size_t bytes,
                          void *host, const char *what) {
    cl_int err =
        clEnqueueReadBuffer(ctx->queue, buffer, CL_TRUE, offset, bytes, host, 0, NULL, NULL);
    if (err != CL_SUCCESS) return ctx_cl_error(ctx, err, what);
    ctx->transfers.device_to_host_bytes += bytes;
    ctx->transfers.copies++;
    return CLATTN_SUCCESS;
}

/* A test hook, compiled into test builds only (CLATTN_TEST_HOOKS): $CLATTN_TEST_NO_MAP=1 makes
 * buffer_from_host copy on every device, so that the copying path is tested on a CPU too. */
static int mapping_refused(void) {
#ifdef CLATTN_TEST_HOOKS
    const char *no_map = getenv("CLATTN_TEST_NO_MAP");
    return no_map && strcmp(no_map, "1") == 0;
#else
    return 0;
#endif
}

clattn_status buffer_from_host(clattn_context *ctx, cl_mem_flags access, size_t bytes,
                               const void *host, cl_mem *out, const char *what) {
    int map = ctx->host_unified_memory && bytes > 0 && !mapping_refused();
    cl_mem_flags flags = access | (map ? CL_MEM_USE_HOST_PTR : CL_MEM_COPY_HOST_PTR);
    return buffer_create(ctx, flags, bytes, (void *)host, out, what);
}

clattn_status buffer_to_host(clattn_context *ctx, cl_mem buffer, size_t bytes, void *host,
                             const char *what) {
    cl_mem_flags flags = 0;
    void *own = NULL;
    if (clGetMemObjectInfo(buffer, CL_MEM_FLAGS, sizeof flags, &flags, NULL) != CL_SUCCESS ||
        !(flags & CL_MEM_USE_HOST_PTR) ||
        clGetMemObjectInfo(buffer, CL_MEM_HOST_PTR, sizeof own, &own, NULL) != CL_SUCCESS ||
        own != host)
        return buffer_read(ctx, buffer, 0, bytes, host, what);
    cl_int err = CL_SUCCESS;
    void *mapped =
        clEnqueueMapBuffer(ctx->queue, buffer, CL_TRUE, CL_MAP_READ, 0, bytes, 0, NULL, NULL, &err);
    if (err == CL_SUCCESS) err = clEnqueueUnmapMemObject(ctx->queue, buffer, mapped, 0, NULL, NULL);
    if (err == CL_SUCCESS) err = clFinish(ctx->queue);
    return err == CL_SUCCESS ? CLATTN_SUCCESS : ctx_cl_error(ctx, err, what);
}

/* ---------------------------------------------------------------- transfer statistics */

void transfers_mark(clattn_context *ctx) {
    ctx->call_start = ctx->transfers;
}

void stats_record_transfers(clattn_context *ctx) {
    const clattn_transfers *now = &ctx->transfers, *start = &ctx->call_start;
    ctx->stats.host_to_device_bytes = now->host_to_device_bytes - start->host_to_device_bytes;
    ctx->stats.device_to_host_bytes = now->device_to_host_bytes - start->device_to_host_bytes;
    ctx->stats.mapped_bytes = now->mapped_bytes - start->mapped_bytes;
}

clattn_status clattn_transfers_init_sized(clattn_transfers *totals, size_t struct_size) {
    return struct_init_zeroed(totals, struct_size, sizeof *totals);
}

static clattn_status context_transfers_in_call(clattn_context *ctx, clattn_transfers *totals) {
    ctx_clear_error(ctx);
    clattn_transfers copy = ctx->transfers;
    copy.struct_size = sizeof copy;
    if (!totals || struct_write(totals, &copy, sizeof copy, sizeof copy))
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "totals is NULL or its struct_size is wrong: set it with "
                         "clattn_transfers_init");
    return CLATTN_SUCCESS;
}

clattn_status clattn_context_transfers(clattn_context *ctx, clattn_transfers *totals) {
    return IN_CONTEXT(ctx, context_transfers_in_call(ctx, totals));
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

clattn_status buffer_set_add_zeroed_word(clattn_context *ctx, buffer_set *set, cl_mem *out,
                                         const char *what) {
    cl_uint zero = 0;
    cl_mem buffer = NULL;
    *out = NULL;
    clattn_status status = buffer_create(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof zero,
                                         &zero, &buffer, what);
    if (status != CLATTN_SUCCESS) return status;
    set->bytes += sizeof zero;
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
