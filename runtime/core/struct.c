/*
 * Public structs that start with struct_size (see "Structs that can grow" in clattn.h): a
 * caller built against an older header passes a shorter struct, one built against a newer
 * header a longer one. Reading takes what both know and zero (the default) for the rest;
 * writing stops at the caller's size.
 */
#include "core.h"

#include <string.h>

int struct_read(void *local, size_t local_size, const void *given, size_t given_size,
                size_t base_size) {
    memset(local, 0, local_size);
    if (given_size < base_size) return 1;
    const unsigned char *extra = (const unsigned char *)given + local_size;
    for (size_t i = local_size; i < given_size; i++) /* fields of a newer header we lack */
        if (extra[i - local_size] != 0) return 1;
    memcpy(local, given, given_size < local_size ? given_size : local_size);
    return 0;
}

int struct_write(void *caller, const void *local, size_t local_size, size_t base_size) {
    size_t given_size;
    memcpy(&given_size, caller, sizeof given_size);
    if (given_size < base_size) return 1;
    size_t n = given_size < local_size ? given_size : local_size;
    memcpy((unsigned char *)caller + sizeof given_size,
           (const unsigned char *)local + sizeof given_size, n - sizeof given_size);
    return 0;
}

int struct_init(void *caller, size_t given_size, const void *local, size_t local_size,
                size_t base_size) {
    if (!caller || given_size < base_size) return 1;
    memcpy(caller, local, given_size < local_size ? given_size : local_size);
    if (given_size > local_size) /* a newer header's fields: their defaults are zero */
        memset((unsigned char *)caller + local_size, 0, given_size - local_size);
    memcpy(caller, &given_size, sizeof given_size); /* struct_size comes first */
    return 0;
}

clattn_status struct_init_zeroed(void *caller, size_t given_size, size_t base_size) {
    if (!caller || given_size < base_size) return CLATTN_ERR_INVALID_ARGUMENT;
    memset(caller, 0, given_size);
    memcpy(caller, &given_size, sizeof given_size); /* struct_size comes first */
    return CLATTN_SUCCESS;
}
