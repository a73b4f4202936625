/* test_pattern.c: being written. */
#include <criterion/criterion.h>
