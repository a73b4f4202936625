/*
 * Builds one OpenCL C file on the first device of the first platform and creates one kernel of
 * it, saying how long clBuildProgram and clCreateKernel took: for kernels that a driver compiles
 * slowly or never finishes (the .cl files beside it say which and where). Not a test: no timing is
 * asserted anywhere. Exit status 0 when both succeeded.
 * Usage: create_kernel FILE.cl KERNEL [BUILD OPTIONS]
 */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static char *read_source(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    return text;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: create_kernel FILE.cl KERNEL [BUILD OPTIONS]\n");
        return 2;
    }
    const char *source = read_source(argv[1]);
    cl_platform_id platform;
    cl_device_id device;
    cl_int err = CL_SUCCESS;
    char name[256] = "";
    if (!source || clGetPlatformIDs(1, &platform, NULL) != CL_SUCCESS ||
        clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL) != CL_SUCCESS) {
        fprintf(stderr, "create_kernel: no source (%s) or no OpenCL device\n", argv[1]);
        return 1;
    }
    clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof name, name, NULL);
    cl_context context = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    cl_program program = clCreateProgramWithSource(context, 1, &source, NULL, &err);
    double t0 = seconds_now();
    err = clBuildProgram(program, 1, &device, argc > 3 ? argv[3] : "", NULL, NULL);
    double t1 = seconds_now();
    printf("%s: clBuildProgram %d in %.2f s\n", name, (int)err, t1 - t0);
    fflush(stdout);
    cl_kernel kernel = err == CL_SUCCESS ? clCreateKernel(program, argv[2], &err) : NULL;
    if (kernel) printf("clCreateKernel %d in %.2f s\n", (int)err, seconds_now() - t1);
    if (kernel) clReleaseKernel(kernel);
    clReleaseProgram(program);
    clReleaseContext(context);
    return err == CL_SUCCESS ? 0 : 1;
}
