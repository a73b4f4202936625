/*
 * Reads the parameter block back, field by field by name, so that a test can check that the
 * host's struct (runtime/plan/params.h) and the kernels' (the generated attn_params.cl) agree on
 * every field's place: out[f] is field f of the list, out[ATTN_PARAMS_COUNT] the struct's size.
 * Built after attn_params.cl.
 */
__kernel void read_params(__constant attn_params *P, __global long *out) {
    ATTN_PARAMS_READ_BACK(P, out);
    out[ATTN_PARAMS_COUNT] = (long)sizeof(attn_params);
}
