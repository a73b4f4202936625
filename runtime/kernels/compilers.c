/*
 * Compilers that cannot build a kernel of clattn's in reasonable time, and devices that cut
 * loops short (compilers.h). Each entry names the platform (CL_PLATFORM_NAME), the variant, and
 * what was measured, with the driver version it was measured on; docs/devices.md (Mesa
 * rusticl) tells the story.
 *
 * Mesa's rusticl (llvmpipe) compiles a kernel when it is created (clCreateKernel), through NIR
 * and then LLVM for llvmpipe's SIMD lanes (8 work-items at 256 bits): a float16 value becomes
 * 16 scalars in each lane, and a private array of float16 indexed in unrolled loops becomes
 * that many SSA values. The lanes kernel (cl/lanes.cl), written for PoCL's vectoriser with
 * Q^T, O^T and S^T as private float16 arrays, did not come back from clCreateKernel on Mesa
 * 22.3.6 within 5 minutes (also at head dim 16), its process at 2 GB and deep in a recursive
 * NIR pass (gdb: mesa_rust::compiler::nir::NirShader::pass0 under clCreateKernel). Bisected:
 * its polynomial exp2 on float16 alone costs 30 to 40 s there (tests/compilers/
 * rusticl_exp2_poly.cl), and the kernel inlined it six times. Since its tile code is inlined
 * once and calls without features get a plain build (2026-11-27), it builds there in about 40 s
 * (plain) and 60 s (general) at head dim 64, but its work-items walk too few keys within
 * llvmpipe's loop budget (below) to be of use; so it stays refused. The split
 * kernels (cl/split.cl), in the same style on a smaller scale, take half a minute to two
 * minutes per specialisation there (Mesa's shader cache keeps them afterwards). And for the
 * flash kernel it reports CL_KERNEL_LOCAL_MEM_SIZE at about twice the __local arrays the kernel
 * declares (51480 bytes for bm32 bn32 at head dim 32, 9624 for bm16 bn8, 4504 for bm8 bn4),
 * and flash's planner, which fits its tiles to the kernel's own report (kernels/flash.c,
 * fit_to_kernel), shrinks them until none is left: every call fails to plan. Newer Mesa is
 * untested: the entries hold for every rusticl until one is shown to build them.
 *
 * llvmpipe also ends every loop of a work-item once its loops have run 65535 iterations in all,
 * silently (core.h, device_loop_budget). That is why lanes computed wrong results there: it
 * passes at 128 keys and fails at 160 (bm16 bn32, head dim 64). Every kernel whose work-item
 * walks a row's keys meets it on long rows: rowwise, split and the gemm path's GEMM all
 * returned wrong outputs at Nk = 8192 (2026-11-27, Mesa 22.3.6). loop_costs bounds what a key
 * costs each of them, so that rowwise and the gemm path decline longer rows and split cuts
 * them into chunks that fit.
 */
#include "kernels/compilers.h"
#include "gemm/gemm.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct compiler_limit {
    const char *platform; /* CL_PLATFORM_NAME, exactly */
    const char *variant;
    int never_finishes; /* 1: refused; 0: slow, left to the calls only it serves */
    const char *seen;   /* what was measured, and on which driver */
} compiler_limit;

static const compiler_limit limits[] = {
    {"rusticl", "lanes", 1,
     "Mesa rusticl builds its kernel in about a minute, but llvmpipe ends a work-item's "
     "loops after 65535 iterations in all, which the kernel passes beyond 128 keys at head dim "
     "64 (wrong results on Mesa 22.3.6)"},
    {"rusticl", "flash", 1,
     "Mesa rusticl reports about twice the local memory its kernel declares "
     "(CL_KERNEL_LOCAL_MEM_SIZE 51480 bytes for a 32x32 tile of about 25 KB on Mesa 22.3.6), so "
     "no tile fits"},
    {"rusticl", "split", 0,
     "Mesa rusticl compiles its kernels slowly (half a minute to two minutes a shape on Mesa "
     "22.3.6; Mesa's shader cache keeps them)"},
};

static const compiler_limit *find_limit(const clattn_device_info *device, const char *variant) {
    for (size_t i = 0; i < ARRAY_LEN(limits); i++)
        if (strcmp(device->platform_name, limits[i].platform) == 0 &&
            strcmp(variant, limits[i].variant) == 0)
            return &limits[i];
    return NULL;
}

int compiler_refuses(const clattn_device_info *device, const char *variant, char *why,
                     size_t size) {
    const compiler_limit *limit = find_limit(device, variant);
    if (!limit || !limit->never_finishes) return 0;
    snprintf(why, size, "%s", limit->seen);
    return 1;
}

int compiler_is_slow(const clattn_device_info *device, const char *variant, char *why,
                     size_t size) {
    const compiler_limit *limit = find_limit(device, variant);
    if (!limit || limit->never_finishes) return 0;
    snprintf(why, size, "%s", limit->seen);
    return 1;
}

int compiler_builds_prefetch(const clattn_device_info *device) {
    return strcmp(device->platform_name, "Portable Computing Language") == 0 &&
           (device->type & CL_DEVICE_TYPE_CPU);
}

/* A bound on the loop iterations one key costs a work-item: per 16 columns of head dim (Dqk and
 * Dv together, head dim 64 at least), twice the cost the first failing length implies on Mesa
 * 22.3.6 (rowwise: 384 keys passed, 512 failed at head dim 64, 192 and 256 at 128: 16 to 21 a
 * key and 16 columns; split, 8 rows a work-item: 512 and 1024 at 64, 128 and 256 at 256: 8 to
 * 16); or a fixed cost for the gemm path, whose GEMM (gemm/panels.c) shrinks its blocks to the
 * budget: a key is a k step of its smallest block, PANELS_SMALLEST_BLOCK_STEP (16 micro-tiles a
 * work-item at head dim 64: 128 keys passed, 192 failed, 21 to 32 iterations a step). */
typedef struct loop_cost {
    const char *variant;
    unsigned per_key;     /* iterations a key, whatever the head dims */
    unsigned per_columns; /* iterations a key and 16 head-dim columns */
} loop_cost;

static const loop_cost loop_costs[] = {
    {"rowwise", 0, 32},
    {"split", 0, 32},
    {"gemm", PANELS_SMALLEST_BLOCK_STEP, 0},
};

size_t loop_budget_keys(const clattn_device_info *device, const char *variant, size_t dim_qk,
                        size_t dim_v) {
    unsigned long budget = device_loop_budget(device);
    if (!budget) return SIZE_MAX;
    const loop_cost *cost = NULL;
    for (size_t i = 0; i < ARRAY_LEN(loop_costs); i++)
        if (strcmp(variant, loop_costs[i].variant) == 0) cost = &loop_costs[i];
    size_t columns = (dim_qk + 15) / 16 + (dim_v + 15) / 16;
    if (columns < 8) columns = 8; /* below head dim 64 the fixed loops weigh more: unmeasured */
    return cost ? budget / (cost->per_key + cost->per_columns * columns) : 0;
}

int loop_budget_allows(const clattn_device_info *device, const char *variant, size_t keys,
                       size_t dim_qk, size_t dim_v, char *why, size_t size) {
    size_t most = loop_budget_keys(device, variant, dim_qk, dim_v);
    if (keys <= most) return 1;
    snprintf(why, size,
             "%s ends a work-item's loops after %lu iterations in all, without an error; %s "
             "walks at most %zu keys a work-item within that at head dims %zu/%zu (this call: "
             "%zu keys)",
             device->name, device_loop_budget(device), variant, most, dim_qk, dim_v, keys);
    return 0;
}

int loop_budget_leaves_only(const clattn_device_info *device, const char *variant, size_t keys,
                            size_t dim_qk, size_t dim_v) {
    for (size_t i = 0; i < ARRAY_LEN(loop_costs); i++)
        if (strcmp(variant, loop_costs[i].variant) != 0 &&
            keys <= loop_budget_keys(device, loop_costs[i].variant, dim_qk, dim_v))
            return 0;
    return 1;
}
