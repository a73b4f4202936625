/* test_gemm.c: being written. */
#include <criterion/criterion.h>
