/*
 * The kernels' parameter block has one source (runtime/plan/params.h): the host's struct comes
 * from its X-macro list, the kernels' struct is generated from the same list at build time.
 * A kernel reads every field back by name; each must be where the host put it.
 */
#include <criterion/criterion.h>

#include "plan/params.h"
#include "util.h"

Test(params, every_field_reads_back_from_a_kernel) {
    clattn_context **ctxs;
    size_t devices = test_contexts(&ctxs);
    attn_params P;
    cl_long next = 1000;
    size_t count = sizeof P / sizeof(cl_long);
#define FILL(name, comment) P.name = next++ * 7919;
    ATTN_PARAMS(FILL)
#undef FILL
    for (size_t dev = 0; dev < devices; dev++) {
        clattn_context *ctx = ctxs[dev];
        static const char *const files[] = {"attn_params.cl", "params_check.cl"};
        cl_kernel kernel = NULL;
        ASSERT_OK(ctx, kernel_get(ctx, files, 2, "", "read_params", &kernel));
        cl_int err = CL_SUCCESS;
        cl_context cl = clattn_context_cl_context(ctx);
        cl_mem in = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof P, &P, &err);
        cl_mem out =
            clCreateBuffer(cl, CL_MEM_WRITE_ONLY, (count + 1) * sizeof(cl_long), NULL, &err);
        cr_assert_eq(err, CL_SUCCESS);
        clSetKernelArg(kernel, 0, sizeof in, &in);
        clSetKernelArg(kernel, 1, sizeof out, &out);
        size_t one = 1;
        cr_assert_eq(clEnqueueNDRangeKernel(clattn_context_queue(ctx), kernel, 1, NULL, &one, NULL,
                                            0, NULL, NULL),
                     CL_SUCCESS);
        cl_long got[256];
        cr_assert_leq(count + 1, sizeof got / sizeof got[0]);
        clEnqueueReadBuffer(clattn_context_queue(ctx), out, CL_TRUE, 0,
                            (count + 1) * sizeof(cl_long), got, 0, NULL, NULL);
        size_t f = 0;
#define EXPECT(name, comment)                                                                      \
    cr_expect_eq(got[f], P.name, "field %s: the kernel read %lld, the host wrote %lld", #name,     \
                 (long long)got[f], (long long)P.name);                                            \
    f++;
        ATTN_PARAMS(EXPECT)
#undef EXPECT
        cr_expect_eq(f, count, "every field of the struct is in the list");
        cr_expect_eq(got[count], (cl_long)sizeof P, "sizeof(attn_params): kernel %lld, host %zu",
                     (long long)got[count], sizeof P);
        clReleaseMemObject(in);
        clReleaseMemObject(out);
    }
}
