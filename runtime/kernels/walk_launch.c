/* See walk_launch.h. */
#include "kernels/walk_launch.h"
#include "plan/params.h"

#include <stdio.h>
#include <string.h>

/* rows * stride + dim <= INT32_MAX, where a product or sum that overflows int64 (a caller's
 * stride can be any int64) does not fit. */
static int span_fits_int32(int64_t rows, int64_t stride, int64_t dim) {
    int64_t span;
    return !__builtin_mul_overflow(rows, stride, &span) &&
           !__builtin_add_overflow(span, dim, &span) && span <= INT32_MAX;
}

int walk_tile_offsets_fit(const attn_problem *pb, unsigned block_n, long classes) {
    const int64_t rows = (int64_t)(block_n - 1) * classes;
    return span_fits_int32(rows, (int64_t)pb->k.stride_seq, (int64_t)pb->dim_qk) &&
           span_fits_int32(rows, (int64_t)pb->v.stride_seq, (int64_t)pb->dim_v);
}

static void fill_params(const variant_plan *plan, const walk_launch *w, attn_params *P) {
    const attn_problem *pb = plan->problem;
    const tile_geometry *g = w->geometry;
    params_from_problem(pb, plan->write_lse, P);
    P->has_global = g->globals_matter;
    P->num_global = g->globals_matter ? pb->mask.num_globals : 0;
    P->classes = g->classes;
    P->tiles_per_class = g->tiles_per_class;
    P->use_tile_list = pb->mask.layout != NULL;
    P->num_listed_rows = (cl_long)w->lists->host->num_rows;
}

/* The buffers of one call (the lists live in the context's cache). */
typedef struct call_buffers {
    buffer_set set;
    cl_mem params, params_rows, counter, placeholder;
} call_buffers;

static clattn_status launch(clattn_context *ctx, const walk_launch *w, const attn_buffers *buf,
                            const call_buffers *cb, cl_mem params, float scale, size_t tiles,
                            size_t heads, cl_event *event) {
    const device_lists *l = w->lists;
    cl_mem lse = buf->lse ? buf->lse : cb->placeholder;
    cl_mem bias = buf->bias ? buf->bias : cb->placeholder;
    kernel_args a = {w->kernel, 0, CL_SUCCESS};
    KARG(a, params);
    KARG(a, buf->q);
    KARG(a, buf->k);
    KARG(a, buf->v);
    KARG(a, buf->o);
    KARG(a, lse);
    KARG(a, bias);
    KARG(a, l->gpos);
    KARG(a, l->is_global);
    KARG(a, l->layout);
    KARG(a, l->tile_ptr);
    KARG(a, l->tile_idx);
    KARG(a, l->row_list);
    KARG(a, scale);
    if (cb->counter) KARG(a, cb->counter);
    char what[64];
    snprintf(what, sizeof what, "%s: attention arguments", w->name);
    if (a.err != CL_SUCCESS) return ctx_cl_error(ctx, a.err, what);
    size_t global[2] = {tiles * w->group_size, heads}, local[2] = {w->group_size, 1};
    snprintf(what, sizeof what, "%s: attention", w->name);
    return kernel_launch(ctx, w->kernel, 2, global, local, event, what);
}

/* The window pass (with the global keys), then the rows at global positions. */
static clattn_status run_passes(clattn_context *ctx, const attn_problem *pb, const walk_launch *w,
                                const attn_buffers *buf, const call_buffers *cb, cl_event *event) {
    const tile_geometry *g = w->geometry;
    size_t heads = pb->batch * pb->heads_q, rows = w->lists->host->num_rows;
    int global_rows = g->globals_matter && rows > 0;
    clattn_status status =
        launch(ctx, w, buf, cb, cb->params, pb->scale, (size_t)(g->classes * g->tiles_per_class),
               heads, global_rows ? NULL : event);
    if (!status && global_rows)
        status = launch(ctx, w, buf, cb, cb->params_rows, pb->scale,
                        (rows + w->block_m - 1) / w->block_m, heads, event);
    return status;
}

static void fill_stats(const attn_problem *pb, const walk_launch *w, uint64_t bytes,
                       clattn_stats *s) {
    s->tiles_visited = w->lists->walk_tiles * pb->batch;
    s->pairs = w->lists->pairs * pb->batch;
    s->tiles_total = pb->batch * pb->heads_q * tiles_dense_walk(pb, w->geometry);
    s->block_m = w->block_m;
    s->block_n = w->block_n;
    s->device_bytes = bytes + w->lists->bytes;
}

clattn_status walk_launch_run(clattn_context *ctx, const variant_plan *plan, const walk_launch *w,
                              const attn_buffers *buf, cl_event *event, clattn_stats *stats) {
    const attn_problem *pb = plan->problem;
    call_buffers cb;
    attn_params P, P_rows;
    memset(&cb, 0, sizeof cb);
    fill_params(plan, w, &P);
    P_rows = P;
    P_rows.row_mode = 1;
    clattn_status s = params_buffer_add(ctx, &cb.set, &P, pb, &cb.params);
    if (!s) s = params_buffer_add(ctx, &cb.set, &P_rows, pb, &cb.params_rows);
    if (!s && pb->count_tiles)
        s = buffer_set_add_zeroed_word(ctx, &cb.set, &cb.counter, "tile counter");
    if (!s) s = buffer_set_placeholder(ctx, &cb.set, &cb.placeholder);
    if (!s) s = run_passes(ctx, pb, w, buf, &cb, event);
    if (!s && cb.counter) {
        cl_uint counted = 0;
        char what[64];
        snprintf(what, sizeof what, "%s: reading the tile count", w->name);
        s = buffer_read(ctx, cb.counter, 0, sizeof counted, &counted, what);
        stats->tiles_counted = counted;
    }
    if (!s) fill_stats(pb, w, cb.set.bytes, stats);
    buffer_set_release(&cb.set);
    return s;
}
