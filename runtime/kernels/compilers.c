/*
 * Compilers that cannot build a kernel of clattn's in reasonable time (compilers.h). Each entry
 * names the platform (CL_PLATFORM_NAME), the variant, and what was measured, with the driver
 * version it was measured on; docs/devices.md (Mesa rusticl) tells the story.
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
 * (plain) and 60 s (general) at head dim 64, but computes wrong results: case 2 of the quick
 * sweep (Nq=113 Nk=203 D=64, no mask) gave O[0] = -0.0800 against the reference's -0.0600, where
 * PoCL and oclgrind pass it (cases 0 and 1 passed); so it stays refused. The split
 * kernels (cl/split.cl), in the same style on a smaller scale, take half a minute to two
 * minutes per specialisation there (Mesa's shader cache keeps them afterwards). And for the
 * flash kernel it reports CL_KERNEL_LOCAL_MEM_SIZE at about twice the __local arrays the kernel
 * declares (51480 bytes for bm32 bn32 at head dim 32, 9624 for bm16 bn8, 4504 for bm8 bn4),
 * and flash's planner, which fits its tiles to the kernel's own report (kernels/flash.c,
 * fit_to_kernel), shrinks them until none is left: every call fails to plan. Newer Mesa is
 * untested: the entries hold for every rusticl until one is shown to build them.
 */
#include "kernels/compilers.h"

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
     "Mesa rusticl builds its kernel in about a minute but computes wrong results with it "
     "(clattn check --quick case 2 on Mesa 22.3.6; before 2026-11-27 the build never finished)"},
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
