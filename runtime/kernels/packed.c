/* The fused variants' shared host code (packed.h): planning, buffers, packing and launches. */
#include "kernels/packed.h"

#include "kernels/compilers.h"
#include "plan/params.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int packed_supports(const attn_problem *pb, const packed_kind *kind, char *why, size_t size) {
    if (pb && problem_is_cache(pb)) {
        snprintf(why, size, "packs K and V per call: not over a KV cache (the split variant is)");
        return 0;
    }
    if (pb && dtype_is_quantised(pb->kv.dtype)) {
        snprintf(why, size, "packs float K and V: not %s (the split variant reads it)",
                 dtype_name(pb->kv.dtype));
        return 0;
    }
    if (!pb || (pb->dim_qk <= kind->max_head_dim && pb->dim_v <= kind->max_head_dim)) return 1;
    snprintf(why, size, "head dims up to %u are compiled (Dqk=%zu, Dv=%zu)", kind->max_head_dim,
             pb->dim_qk, pb->dim_v);
    return 0;
}

/* ---------------------------------------------------------------- planning */

/* Bytes a key tile's rows may span when they are read in place though not contiguous: at most
 * half of a 32 KiB L1, so that rows a power of two apart, which share few cache sets, still fit
 * (16 rows of [B, N, 4, 64]: 8% faster than packing them on a (128,128) window; 32 rows of them
 * made full attention a third slower on PoCL). */
#define IN_PLACE_MAX_SPAN (16 << 10)

/* Whether a tensor's key rows, a class's every `step` floats apart, can be read in place for
 * tiles of block_n keys. */
static int rows_fit_in_place(size_t step, size_t dim, unsigned block_n) {
    return step == dim || step * block_n * sizeof(float) <= IN_PLACE_MAX_SPAN;
}

/* Whether the kernel can read K and V where they lie: a kind that reads K as rows, float32 rows
 * of exactly the padded head dims, and a class's rows (every classes-th key of a dilated
 * window) contiguous or close enough (rows_fit_in_place), so that the caller's rows are the
 * packed rows but for their step. Packing would then only copy them; the kernel reads them in
 * place instead, and only each class's last partial tile (which would run past its last key) is
 * made per call. */
static int reads_in_place(const attn_problem *pb, const packed_state *st) {
    size_t classes = (size_t)st->geometry.classes;
    return st->kind->key_rows && pb->dtype == CLATTN_F32 && pb->kv.dtype == CLATTN_F32 &&
           pb->dim_qk == st->dqk_pad && pb->dim_v == st->dv_pad &&
           rows_fit_in_place(classes * pb->k.stride_seq, pb->dim_qk, st->block_n) &&
           rows_fit_in_place(classes * pb->v.stride_seq, pb->dim_v, st->block_n);
}

/* Whether the call has a program of its own for global tokens (packed_kind.global_program). */
static int global_program(const attn_problem *pb, const packed_state *st) {
    return st->kind->global_program && pb->mask.num_globals > 0;
}

/* Global rows a call folds into its window pass at most (cl/lanes.cl's FEW_ROWS). */
#define FOLD_MAX_ROWS 4

/* The partials of folded rows: [B*Hq][tiles_per_class][FOLD_MAX_ROWS][2 + dv_pad] floats. */
static size_t partial_floats(const attn_problem *pb, const packed_state *st) {
    return pb->batch * pb->heads_q * (size_t)st->geometry.tiles_per_class * FOLD_MAX_ROWS *
           (2 + (size_t)st->dv_pad);
}

/* Whether the window tiles fold the global rows in (cl/lanes.cl, "folded into the window
 * pass"): a kind that can, one class (no dilation the tiles separate), at most FOLD_MAX_ROWS
 * listed rows, what its few-row tiles take (no bias, block layout or score modifiers), and
 * partials no larger than K and V. Each tile then sums those rows over its own keys, which its
 * window walk has just read, and a merge follows, where the global-row pass would walk every
 * key of the head again for them (2.5 % of Longformer's time, 128 with 4 global tokens, at
 * N = 16384 on one core: bench/README.md). */
static int folds_rows(const attn_problem *pb, const packed_state *st) {
    const tile_geometry *g = &st->geometry;
    size_t rows = st->lists->host->num_rows;
    size_t kv_floats = pb->batch * pb->heads_kv * (size_t)pb->mask.len_k * (pb->dim_qk + pb->dim_v);
    return st->kind->fold_rows && global_program(pb, st) && g->globals_matter && g->classes == 1 &&
           rows > 0 && rows <= FOLD_MAX_ROWS && !pb->has_bias && !pb->mask.layout &&
           pb->softcap == 0.0f && !pb->alibi_slopes && partial_floats(pb, st) <= kv_floats;
}

static uint64_t device_bytes(const attn_problem *pb, const packed_state *st);
static clattn_status get_kernels(clattn_context *ctx, const attn_problem *pb,
                                 const packed_state *st, cl_kernel *pack, cl_kernel *attention,
                                 cl_kernel *merge);

/* Rounds of fitting against a kernel's own limits before the plan gives up. */
#define FIT_ROUNDS 8

/* Fits the tuned tile to the plan's limits, then to the compiled kernel's own: while the
 * kernel allows fewer work-items a work-group than the tile has rows, or uses more local
 * memory than the limits, the limits are narrowed and the tuned tile fitted again (the kernels
 * are built here; run() finds them in the context's cache). A tile of one work-item without
 * local memory (lanes) fits every kernel, and is not built here. */
static clattn_status fit_to_kernel(clattn_context *ctx, const variant_plan *plan,
                                   packed_state *st) {
    launch_limits limits = plan->limits;
    for (int round = 0; round < FIT_ROUNDS; round++) {
        st->block_m = plan->tuning.block_m, st->block_n = plan->tuning.block_n;
        clattn_status status = st->kind->fit(ctx, plan, &limits, st);
        if (status != CLATTN_SUCCESS || (st->group_size == 1 && st->local_counted == 0))
            return status;
        cl_kernel pack = NULL, attention = NULL;
        status = get_kernels(ctx, plan->problem, st, &pack, &attention, NULL);
        if (status != CLATTN_SUCCESS) return status;
        kernel_limits k;
        kernel_limits_get(ctx, attention, &k);
        if (!launch_limits_narrow(&limits, st->group_size, st->local_counted, &k))
            return CLATTN_SUCCESS;
        log_msg("%s: bm%u bn%u does not fit the kernel (work-groups up to %zu, %llu bytes of "
                "local memory, %llu of private memory a work-item); fitting again",
                plan->variant->name, st->block_m, st->block_n, k.work_group_size,
                (unsigned long long)k.local_mem_bytes, (unsigned long long)k.private_mem_bytes);
    }
    return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED,
                     "%s: no tile fits the kernel's own limits after %d tries (work-groups of %zu, "
                     "%llu bytes of local memory left)",
                     plan->variant->name, FIT_ROUNDS, limits.work_group_size,
                     (unsigned long long)limits.local_mem_bytes);
}

clattn_status packed_plan(clattn_context *ctx, variant_plan *plan, const packed_kind *kind) {
    const attn_problem *pb = plan->problem;
    packed_state *st = calloc(1, sizeof *st);
    if (!st) return ctx_error(ctx, CLATTN_ERR_OUT_OF_MEMORY, "fused: plan");
    plan->state = st;
    st->kind = kind;
    st->block_m = plan->tuning.block_m;
    st->block_n = plan->tuning.block_n;
    if (st->block_m < 1 || st->block_m > TILES_MAX_BLOCK_M || st->block_n < 16 ||
        st->block_n % 16 != 0) /* the tuned tile, checked once: fits only shrink it */
        return ctx_error(ctx, CLATTN_ERR_INVALID_ARGUMENT,
                         "%s: the tuning entry's tiles (block_m %u, block_n %u) are out of range "
                         "(block_m 1 to %d, block_n a multiple of 16)",
                         plan->variant->name, st->block_m, st->block_n, TILES_MAX_BLOCK_M);
    st->dqk_pad = tiles_wide_head_dim_bucket(pb->dim_qk); /* supports() bounded them */
    st->dv_pad = tiles_wide_head_dim_bucket(pb->dim_v);
    attn_params P;
    params_from_problem(pb, plan->write_lse, &P);
    if (global_program(pb, st)) P.has_global = 0; /* its plain build reads the globals' fields */
    st->plain = params_plain(&P);
    clattn_status status = fit_to_kernel(ctx, plan, st);
    if (status != CLATTN_SUCCESS) return status;
    tiles_plan_geometry(pb, st->block_m, st->block_n, &st->geometry);
    st->in_place = reads_in_place(pb, st);
    status = tile_cache_get(ctx, pb, &st->geometry, &st->entry, &st->lists);
    if (status == CLATTN_SUCCESS) st->fold_rows = folds_rows(pb, st);
    if (status == CLATTN_SUCCESS) plan->device_bytes = device_bytes(pb, st);
    return status;
}

void packed_release(variant_plan *plan) {
    packed_state *st = plan->state;
    if (!st) return;
    tile_cache_put(st->entry);
    free(st);
}

/* ---------------------------------------------------------------- device buffers */

/* kp, vp: the packed K and V, or (in place) the caller's; kt, vt: the last partial tiles read in
 * place (the placeholder otherwise). */
typedef struct packed_buffers {
    buffer_set set;
    cl_mem params, params_rows, kp, vp, vbad, kt, vt, kg, vg, vbad_g, gpos, is_global, layout,
        tile_ptr, tile_idx, row_list, tile_count, partials;
} packed_buffers;

/* Packed key bytes: B*Hkv*slots*pad floats, checked for overflow. */
static size_t packed_bytes(const attn_problem *pb, int64_t slots, unsigned pad) {
    size_t n = 0;
    if (size_mul(pb->batch * pb->heads_kv, (size_t)slots, &n) || size_mul(n, pad, &n) ||
        size_mul(n, sizeof(float), &n))
        return SIZE_MAX;
    return n;
}

/* About what a call allocates: the packed K and V with their flags (the global keys' too);
 * saturating. The lists are the context's, made while planning. */
static uint64_t device_bytes(const attn_problem *pb, const packed_state *st) {
    const tile_geometry *g = &st->geometry;
    int64_t slots = g->classes * g->class_slots + (int64_t)pb->mask.num_globals + g->block_n;
    uint64_t flags = (uint64_t)pb->batch * pb->heads_kv * (uint64_t)slots;
    if (st->in_place) { /* the globals with their flags, and the classes' last tiles */
        slots = (int64_t)pb->mask.num_globals + g->block_n + g->classes * g->block_n;
        flags = (uint64_t)pb->batch * pb->heads_kv * (uint64_t)pb->mask.num_globals;
    }
    size_t k = packed_bytes(pb, slots, st->dqk_pad), v = packed_bytes(pb, slots, st->dv_pad);
    if (k == SIZE_MAX || v == SIZE_MAX) return UINT64_MAX;
    return (uint64_t)k + v + flags + (st->fold_rows ? partial_floats(pb, st) * sizeof(float) : 0);
}

/* The packed K and V of the class-grouped keys, or (in place) the caller's K and V and the
 * packed last partial tiles. */
static clattn_status make_key_rows(clattn_context *ctx, const attn_problem *pb,
                                   const packed_state *st, const attn_buffers *buf,
                                   packed_buffers *fb) {
    buffer_set *set = &fb->set;
    if (st->in_place) {
        int64_t tails = st->geometry.classes * st->block_n; /* a tile a class */
        fb->kp = buf->k, fb->vp = buf->v;
        clattn_status s = buffer_set_add(ctx, set, packed_bytes(pb, tails, st->dqk_pad), 1, NULL,
                                         &fb->kt, "K tails");
        if (!s)
            s = buffer_set_add(ctx, set, packed_bytes(pb, tails, st->dv_pad), 1, NULL, &fb->vt,
                               "V tails");
        return s;
    }
    int64_t slots = st->geometry.classes * st->geometry.class_slots;
    clattn_status s = buffer_set_workspace(
        ctx, set, WORKSPACE_PACKED_K, packed_bytes(pb, slots, st->dqk_pad), &fb->kp, "packed K");
    if (!s)
        s = buffer_set_workspace(ctx, set, WORKSPACE_PACKED_V, packed_bytes(pb, slots, st->dv_pad),
                                 &fb->vp, "packed V");
    if (!s) s = buffer_set_add(ctx, set, 0, 1, NULL, &fb->kt, "K tails");
    if (!s) s = buffer_set_add(ctx, set, 0, 1, NULL, &fb->vt, "V tails");
    return s;
}

/* The keys' rows (make_key_rows), the V flags, and the packed global keys with their flags. */
static clattn_status make_packed(clattn_context *ctx, const attn_problem *pb,
                                 const packed_state *st, const attn_buffers *buf,
                                 int64_t global_slots, packed_buffers *fb) {
    buffer_set *set = &fb->set;
    int64_t slots = st->geometry.classes * st->geometry.class_slots;
    size_t kv = pb->batch * pb->heads_kv;
    clattn_status s = make_key_rows(ctx, pb, st, buf, fb);
    /* one flag byte per packed slot: its V row holds a NaN or an infinity */
    if (!s && st->in_place)
        s = buffer_set_add(ctx, set, 0, 1, NULL, &fb->vbad, "V flags");
    else if (!s)
        s = buffer_set_workspace(ctx, set, WORKSPACE_V_FLAGS, kv * (size_t)slots, &fb->vbad,
                                 "V flags");
    if (!s)
        s = buffer_set_add(ctx, set, global_slots ? packed_bytes(pb, global_slots, st->dqk_pad) : 0,
                           1, NULL, &fb->kg, "global K");
    if (!s)
        s = buffer_set_add(ctx, set, global_slots ? packed_bytes(pb, global_slots, st->dv_pad) : 0,
                           1, NULL, &fb->vg, "global V");
    if (!s)
        s = buffer_set_add(ctx, set, kv * (size_t)global_slots, 1, NULL, &fb->vbad_g, "V flags");
    return s;
}

/* The parameter blocks and the tile counter; the lists are the cached entry's. */
static clattn_status make_lists(clattn_context *ctx, const attn_problem *pb, const packed_state *st,
                                const attn_params *P, const attn_params *P_rows,
                                packed_buffers *fb) {
    const device_lists *l = st->lists;
    buffer_set *set = &fb->set;
    fb->gpos = l->gpos, fb->is_global = l->is_global, fb->layout = l->layout;
    fb->tile_ptr = l->tile_ptr, fb->tile_idx = l->tile_idx, fb->row_list = l->row_list;
    clattn_status s = params_buffer_add(ctx, set, P, pb, &fb->params);
    if (!s) s = params_buffer_add(ctx, set, P_rows, pb, &fb->params_rows);
    if (!s && pb->count_tiles)
        s = buffer_set_add_zeroed_word(ctx, set, &fb->tile_count, "tile counter");
    if (!s && global_program(pb, st)) /* written before it is read: no host copy */
        s = buffer_set_add(ctx, set, st->fold_rows ? partial_floats(pb, st) : 0, sizeof(float),
                           NULL, &fb->partials, "global-row partials");
    return s;
}

/* ---------------------------------------------------------------- launching */

static void fill_params(const variant_plan *plan, const packed_state *st, attn_params *P,
                        attn_params *P_rows) {
    const attn_problem *pb = plan->problem;
    const tile_geometry *g = &st->geometry;
    params_from_problem(pb, plan->write_lse, P);
    P->has_global = g->globals_matter;
    P->num_global = g->globals_matter ? pb->mask.num_globals : 0;
    P->class_slots = g->class_slots;
    P->classes = g->classes;
    P->global_slots = (P->num_global + g->block_n - 1) / g->block_n * g->block_n;
    P->tiles_per_class = g->tiles_per_class;
    P->use_tile_list = pb->mask.layout != NULL;
    P->num_listed_rows = (cl_long)st->lists->host->num_rows; /* the row pass's, or folded */
    P->fold_rows = st->fold_rows;
    *P_rows = *P;
    P_rows->row_mode = 1;
}

/* The packing and the attention kernel come from one program: a cold first call then builds one
 * program, not two (each build costs PoCL about 0.1 s besides its code). */
static clattn_status get_kernels(clattn_context *ctx, const attn_problem *pb,
                                 const packed_state *st, cl_kernel *pack, cl_kernel *attention,
                                 cl_kernel *merge) {
    const char *files[] = {ATTN_PRELUDE, "tile_walk.cl", "pack.cl", st->kind->kernel_file};
    char defines[288];
    /* the attention kernel reads float32 K and V and takes Q's storage from the parameters
     * (P->q_dtype; float32 in a plain build); the packing takes its tile shape and K's and V's
     * storage at run time */
    snprintf(defines, sizeof defines,
             "-DBLOCK_N=%u -DDQK_PAD=%u -DDV_PAD=%u -DBLOCK_M=%u -DCOUNT_TILES=%d -DIN_PLACE=%d"
             "%s%s%s",
             st->block_n, st->dqk_pad, st->dv_pad, st->block_m, pb->count_tiles, st->in_place,
             st->plain ? " -DPLAIN_CALL=1" : "", global_program(pb, st) ? " -DGLOBAL_TOKENS=1" : "",
             compiler_builds_prefetch(&ctx->device) ? " -DPREFETCH=1" : "");
    clattn_status status = kernel_get(ctx, files, ARRAY_LEN(files), defines, "pack_keys", pack);
    if (status == CLATTN_SUCCESS)
        status =
            kernel_get(ctx, files, ARRAY_LEN(files), defines, st->kind->kernel_name, attention);
    if (status == CLATTN_SUCCESS && merge && st->fold_rows)
        status = kernel_get(ctx, files, ARRAY_LEN(files), defines, "merge_global_rows", merge);
    return status;
}

/* What pack_keys makes (cl/pack.cl's modes). */
enum pack_mode { PACK_CLASSES, PACK_GLOBALS, PACK_TAIL };

/* What every packing launch of a call shares: the kernel, the tile shape and the inputs, over
 * kv_heads = B * Hkv (b, kv head) pairs. */
typedef struct pack_call {
    clattn_context *ctx;
    cl_kernel kernel;
    const packed_state *st;
    const packed_buffers *fb;
    const attn_buffers *buf;
    size_t kv_heads;
} pack_call;

/* One pass of pack_keys over `slots` key slots a (b, kv head), into K rows kp, V rows vp and V
 * flags vbad. */
static clattn_status launch_pack(const pack_call *c, enum pack_mode mode, int64_t slots, cl_mem kp,
                                 cl_mem vp, cl_mem vbad) {
    const packed_state *st = c->st;
    cl_int mode_arg = mode, block_n = (cl_int)st->block_n, dqk_pad = (cl_int)st->dqk_pad;
    cl_int dv_pad = (cl_int)st->dv_pad, key_rows = st->kind->key_rows;
    cl_long count = slots;
    kernel_args a = {c->kernel, 0, CL_SUCCESS};
    KARG(a, c->fb->params);
    KARG(a, c->buf->k);
    KARG(a, c->buf->v);
    KARG(a, c->fb->gpos);
    KARG(a, mode_arg);
    KARG(a, count);
    KARG(a, block_n);
    KARG(a, dqk_pad);
    KARG(a, dv_pad);
    KARG(a, key_rows);
    KARG(a, kp);
    KARG(a, vp);
    KARG(a, vbad);
    if (a.err != CL_SUCCESS) return ctx_cl_error(c->ctx, a.err, "fused: pack arguments");
    size_t global[2] = {(size_t)slots, c->kv_heads};
    return kernel_launch_padded(c->ctx, c->kernel, 2, global, NULL, "fused: packing K and V");
}

/* Both passes in one launch (tile_walk.cl's PASS_PARAMS): row_tiles work-groups of the
 * global-row pass, then window_tiles of the window pass, for each of the `heads`. */
static clattn_status launch_attention(clattn_context *ctx, cl_kernel kernel, const packed_state *st,
                                      const packed_buffers *fb, const attn_buffers *buf,
                                      size_t row_tiles, size_t window_tiles, size_t heads,
                                      float q_scale, cl_event *event) {
    cl_mem lse = buf->lse ? buf->lse : fb->set.placeholder;
    cl_mem bias = buf->bias ? buf->bias : fb->set.placeholder;
    cl_long rows_arg = (cl_long)row_tiles;
    kernel_args a = {kernel, 0, CL_SUCCESS};
    KARG(a, fb->params);
    KARG(a, fb->params_rows);
    KARG(a, rows_arg);
    KARG(a, buf->q);
    KARG(a, fb->kp);
    KARG(a, fb->vp);
    KARG(a, fb->vbad);
    KARG(a, fb->kt);
    KARG(a, fb->vt);
    KARG(a, fb->kg);
    KARG(a, fb->vg);
    KARG(a, fb->vbad_g);
    KARG(a, fb->gpos);
    KARG(a, buf->o);
    KARG(a, lse);
    KARG(a, bias);
    KARG(a, fb->is_global);
    KARG(a, fb->layout);
    KARG(a, fb->tile_ptr);
    KARG(a, fb->tile_idx);
    KARG(a, fb->row_list);
    KARG(a, q_scale);
    if (fb->tile_count) KARG(a, fb->tile_count);
    if (fb->partials) KARG(a, fb->partials);
    if (a.err != CL_SUCCESS) return ctx_cl_error(ctx, a.err, "fused: attention arguments");
    size_t global[2] = {(row_tiles + window_tiles) * st->group_size, heads};
    size_t local[2] = {st->group_size, 1};
    return kernel_launch(ctx, kernel, 2, global, local, event, "fused: attention");
}

/* The class-grouped keys packed with their V flags, or (in place) each class's last partial
 * tile (packed whole, whether or not the class has one); V rows read in place are not flagged:
 * the kernel checks those of the tiles where a non-finite value matters (cl/lanes.cl). */
static clattn_status pack_keys(const pack_call *c) {
    const packed_state *st = c->st;
    const packed_buffers *fb = c->fb;
    const tile_geometry *g = &st->geometry;
    if (!st->in_place)
        return launch_pack(c, PACK_CLASSES, g->classes * g->class_slots, fb->kp, fb->vp, fb->vbad);
    return launch_pack(c, PACK_TAIL, g->classes * st->block_n, fb->kt, fb->vt, fb->vbad);
}

/* The folded rows' merge (cl/lanes.cl's merge_global_rows): a work-item a listed row and
 * (b, h). */
static clattn_status launch_merge(clattn_context *ctx, cl_kernel kernel, const packed_buffers *fb,
                                  const attn_buffers *buf, size_t heads, cl_event *event) {
    cl_mem lse = buf->lse ? buf->lse : fb->set.placeholder;
    kernel_args a = {kernel, 0, CL_SUCCESS};
    KARG(a, fb->params);
    KARG(a, fb->row_list);
    KARG(a, fb->partials);
    KARG(a, buf->o);
    KARG(a, lse);
    if (a.err != CL_SUCCESS) return ctx_cl_error(ctx, a.err, "fused: merge arguments");
    size_t global[2] = {FOLD_MAX_ROWS, heads};
    return kernel_launch(ctx, kernel, 2, global, NULL, event, "fused: merging the global rows");
}

static clattn_status run_kernels(clattn_context *ctx, const attn_problem *pb,
                                 const packed_state *st, const packed_buffers *fb,
                                 const attn_params *P, const attn_buffers *buf, cl_event *event) {
    cl_kernel pack = NULL, attention = NULL, merge = NULL;
    clattn_status status = get_kernels(ctx, pb, st, &pack, &attention, &merge);
    const tile_geometry *g = &st->geometry;
    size_t heads = pb->batch * pb->heads_q, row_tiles = 0; /* tiles of the global-row pass */
    if (g->globals_matter && !st->fold_rows)
        row_tiles = (st->lists->host->num_rows + g->block_m - 1) / g->block_m;
    const pack_call packing = {ctx, pack, st, fb, buf, pb->batch * pb->heads_kv};
    if (!status) status = pack_keys(&packing);
    if (!status && P->global_slots > 0)
        status = launch_pack(&packing, PACK_GLOBALS, P->global_slots, fb->kg, fb->vg, fb->vbad_g);
    if (!status)
        status = launch_attention(ctx, attention, st, fb, buf, row_tiles,
                                  (size_t)(g->classes * g->tiles_per_class), heads, pb->scale,
                                  st->fold_rows ? NULL : event);
    if (!status && st->fold_rows) status = launch_merge(ctx, merge, fb, buf, heads, event);
    return status;
}

/* ---------------------------------------------------------------- statistics */

/* The kernels' own count of the tiles they visited (waits for the call). */
static clattn_status read_tile_count(clattn_context *ctx, const packed_buffers *fb,
                                     uint64_t *count) {
    cl_uint value = 0;
    clattn_status s =
        buffer_read(ctx, fb->tile_count, 0, sizeof value, &value, "fused: reading tile count");
    *count = value;
    return s;
}

static void fill_stats(const variant_plan *plan, const packed_state *st, uint64_t bytes,
                       clattn_stats *s) {
    const attn_problem *pb = plan->problem;
    uint64_t per_batch = st->lists->walk_tiles; /* over every query head */
    if (st->fold_rows) { /* the window tiles walk the rows' keys instead of the row pass */
        per_batch -= pb->heads_q * tiles_count_row_pass(pb, &st->geometry, st->lists->host);
        per_batch += pb->heads_q * tiles_count_folded_rows(pb, &st->geometry, st->lists->host);
    }
    s->tiles_visited = per_batch * pb->batch;
    s->tiles_total = pb->batch * pb->heads_q * tiles_dense_walk(pb, &st->geometry);
    s->pairs = st->lists->pairs * pb->batch;
    s->block_m = st->block_m;
    s->block_n = st->block_n;
    s->device_bytes = bytes + st->lists->bytes;
    snprintf(s->kernel, sizeof s->kernel, "fused-%s bm%u bn%u d%u/%u %s%s%s%s%s",
             plan->variant->name, st->block_m, st->block_n, st->dqk_pad, st->dv_pad,
             dtype_name(pb->dtype), st->plain ? " plain" : "",
             global_program(pb, st) ? " global tokens" : "", st->fold_rows ? " folded rows" : "",
             st->in_place ? " in place" : "");
}

clattn_status packed_run(clattn_context *ctx, const variant_plan *plan, const attn_buffers *buf,
                         cl_event *event, clattn_stats *stats) {
    const attn_problem *pb = plan->problem;
    const packed_state *st = plan->state;
    packed_buffers fb;
    attn_params P, P_rows;
    memset(&fb, 0, sizeof fb);
    fill_params(plan, st, &P, &P_rows);
    clattn_status status = make_packed(ctx, pb, st, buf, P.global_slots, &fb);
    if (!status) status = make_lists(ctx, pb, st, &P, &P_rows, &fb);
    cl_mem placeholder = NULL; /* stands in for an absent LSE or bias */
    if (!status) status = buffer_set_placeholder(ctx, &fb.set, &placeholder);
    if (!status) status = run_kernels(ctx, pb, st, &fb, &P, buf, event);
    if (!status && fb.tile_count) status = read_tile_count(ctx, &fb, &stats->tiles_counted);
    if (!status) {
        fill_stats(plan, st, fb.set.bytes, stats);
        log_msg("fused: %s, %llu of %llu key tiles", stats->kernel,
                (unsigned long long)stats->tiles_visited, (unsigned long long)stats->tiles_total);
    }
    buffer_set_release(&fb.set);
    return status;
}
