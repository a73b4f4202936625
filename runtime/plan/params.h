/*
 * The parameter block of an attention call, written once: ATTN_PARAMS lists every field. The C
 * struct below is generated from the list by the preprocessor, and the OpenCL C struct of the
 * kernels from the same list at build time (cmake/gen_params.cmake writes "attn_params.cl",
 * embedded with the kernels). Every field is a 64-bit integer, so both sides agree on the layout;
 * tests/unit/test_params.c reads every field back from a kernel. Kernels read the block from a
 * small constant buffer. Positions: query i sits at key position p = i + offset.
 *
 * Each entry is X, then the field's name and a comment string; the build script reads the
 * entries with a pattern, so a comment must not hold a semicolon (a CMake list separator).
 */
#ifndef CLATTN_PARAMS_H
#define CLATTN_PARAMS_H

#include "plan/problem.h"

#define ATTN_PARAMS(X)                                                                             \
    X(batch, "B")                                                                                  \
    X(heads_q, "Hq")                                                                               \
    X(heads_kv, "Hkv")                                                                             \
    X(len_q, "Nq")                                                                                 \
    X(len_k, "Nk")                                                                                 \
    X(dim_qk, "Dqk")                                                                               \
    X(dim_v, "Dv")                                                                                 \
    X(offset, "query i sits at key position p = i + offset (len_k - len_q, or a shard offset)")    \
    X(q_offset, "Q: element offset and strides (batch, head, sequence)")                           \
    X(q_stride_b, "")                                                                              \
    X(q_stride_h, "")                                                                              \
    X(q_stride_s, "")                                                                              \
    X(k_offset, "K")                                                                               \
    X(k_stride_b, "")                                                                              \
    X(k_stride_h, "")                                                                              \
    X(k_stride_s, "")                                                                              \
    X(v_offset, "V")                                                                               \
    X(v_stride_b, "")                                                                              \
    X(v_stride_h, "")                                                                              \
    X(v_stride_s, "")                                                                              \
    X(o_offset, "O")                                                                               \
    X(o_stride_b, "")                                                                              \
    X(o_stride_h, "")                                                                              \
    X(o_stride_s, "")                                                                              \
    X(bias_offset, "bias [b, h, i, j]: zero strides broadcast")                                    \
    X(bias_stride_b, "")                                                                           \
    X(bias_stride_h, "")                                                                           \
    X(bias_stride_s, "")                                                                           \
    X(has_bias, "")                                                                                \
    X(causal, "mask (docs/semantics.md section 2), resolved as in plan/mask.h")                    \
    X(left, "window sides, -1 unbounded")                                                          \
    X(right, "")                                                                                   \
    X(dilation, "")                                                                                \
    X(has_global, "global keys in gpos[]. Flags is_global[len_k + len_q] (plan/mask.h)")           \
    X(num_global, "")                                                                              \
    X(has_layout, "block layout [layout heads][blocks_q][blocks_k]")                               \
    X(layout_per_head, "")                                                                         \
    X(block_q, "")                                                                                 \
    X(block_k, "")                                                                                 \
    X(blocks_q, "")                                                                                \
    X(blocks_k, "")                                                                                \
    X(class_slots, "fused: packed key slots per class (a multiple of BLOCK_N)")                    \
    X(classes, "fused: dilation, or 1 when classes would be shorter than a key tile")              \
    X(global_slots, "fused: packed slots of the global keys (a multiple of BLOCK_N)")              \
    X(tiles_per_class, "fused: query tiles per class")                                             \
    X(row_mode, "fused: 0 query tiles of a class, 1 the rows listed in row_list")                  \
    X(num_listed_rows, "fused")                                                                    \
    X(fold_rows, "lanes: window tiles sum the listed rows over their own keys (packed.c)")         \
    X(use_tile_list, "fused: key tiles from tile_ptr/tile_idx instead of the window range")        \
    X(write_lse, "0 no LSE. 1 LSE. 2 (max, log sum) pairs")                                        \
    X(per_sequence, "lengths from seq_len[] and q_len[] (KV caches), else len_k and len_q")        \
    X(page_size, "0: K and V are [B, len_k, ...] tensors, else page pools (block_table)")          \
    X(max_pages, "block table entries a sequence")                                                 \
    X(group, "Hq / Hkv: query heads that share a kv head")                                         \
    X(chunks, "split: key chunks a row, merged afterwards (1: no merge)")                          \
    X(chunk_len, "split: keys a chunk")                                                            \
    X(row_blocks, "split: blocks of query rows of one (b, kv head)")                               \
    X(softcap, "float32 bits of the soft cap in the low 32 bits, 0 off (docs/semantics.md 8)")     \
    X(has_sinks, "sinks[Hq] follow the block (params_extras)")                                     \
    X(alibi, "0 none, 1 slopes[Hq], 2 slopes[B][Hq] after the sinks")                              \
    X(q_dtype, "Q's storage, a clattn_dtype (read by lanes and rowwise: tile_walk.cl's load_as)")  \
    X(kv_dtype, "K's and V's storage, a clattn_dtype (read by the packing: pack.cl)")              \
    X(out_dtype, "O's storage, a clattn_dtype (common.cl's store_o)")

/* The sources that every attention kernel program starts with, in this order: the parameter
 * block, the mask rules (cl/mask_rules.h) and cl/common.cl. A kernel's own files follow. */
#define ATTN_PRELUDE "attn_params.cl", "mask_rules.h", "common.cl"

#define ATTN_PARAM_FIELD(name, comment) cl_long name;
typedef struct attn_params {
    ATTN_PARAMS(ATTN_PARAM_FIELD)
} attn_params;
#undef ATTN_PARAM_FIELD

/* The sizes, strides and mask fields of a call; the fused planner sets the rest. */
void params_from_problem(const attn_problem *pb, int write_lse, attn_params *p);

/* Whether p (params_from_problem's) leaves at zero every field that a plain program
 * (cl/common.cl's PLAIN_CALL) compiles out: float32 storage, no bias, block layout, global
 * token, per-sequence length or page (score modifiers and sinks are read in every program).
 * The fused planner may narrow has_global and set use_tile_list (only with a layout) and
 * row_mode and fold_rows (only with globals): a plain call keeps them zero, but for lanes'
 * program for global tokens, whose plain build reads has_global, row_mode and fold_rows. */
int params_plain(const attn_params *p);

/* The block a kernel reads as its __constant attn_params: the struct, then (when the call has
 * them) float32 sinks [Hq] and ALiBi slopes [Hq] or [B][Hq] (common.cl reads them past the
 * struct). Fills *block (caller-owned, params_block_bytes(pb) bytes). */
size_t params_block_bytes(const attn_problem *pb);
void params_block(const attn_params *p, const attn_problem *pb, void *block);

/* The block as a read-only buffer of `set` (buffer_set_add). */
clattn_status params_buffer_add(clattn_context *ctx, buffer_set *set, const attn_params *p,
                                const attn_problem *pb, cl_mem *out);

#endif
