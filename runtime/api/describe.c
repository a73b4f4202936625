/*
 * The entry points that need no device: checking a desc, counting and drawing its mask, the
 * tolerance of the contract, and the CPU reference on host arrays. Each builds the problem the
 * way clattn_attention does, so a desc is judged the same everywhere.
 */
#include "reference/reference.h"

#include <stdio.h>
#include <string.h>

clattn_status clattn_attention_desc_check(const clattn_attention_desc *desc,
                                          clattn_attention_extents *extents, char *message,
                                          size_t message_size) {
    error_record err = {""};
    attn_problem pb;
    clattn_status status = problem_build(desc, BIAS_FROM_EITHER, &err, &pb);
    if (status == CLATTN_SUCCESS && extents) *extents = pb.extents;
    if (message && message_size) snprintf(message, message_size, "%s", err.text);
    problem_release(&pb);
    return status;
}

clattn_status clattn_tolerance(clattn_dtype dtype, clattn_dtype out_dtype, double *atol,
                               double *rtol, double *lse) {
    /* |got - ref| <= atol + rtol * |ref|, by storage type; the loosest of the call's types */
    static const struct {
        clattn_dtype dtype;
        double atol, rtol;
    } table[] = {{CLATTN_F32, 2e-5, 2e-4},
                 {CLATTN_F16, 2e-3, 4e-3},
                 {CLATTN_Q8_0, 2e-3, 4e-3},
                 {CLATTN_Q4_0, 2e-3, 4e-3},
                 {CLATTN_BF16, 4e-3, 1e-2}};
    double a = -1, r = -1, a2 = -1, r2 = -1;
    for (size_t i = 0; i < ARRAY_LEN(table); i++) {
        if (table[i].dtype == dtype) a = table[i].atol, r = table[i].rtol;
        if (table[i].dtype == out_dtype) a2 = table[i].atol, r2 = table[i].rtol;
    }
    if (a < 0 || a2 < 0) return CLATTN_ERR_INVALID_ARGUMENT;
    if (atol) *atol = a > a2 ? a : a2;
    if (rtol) *rtol = r > r2 ? r : r2;
    if (lse) *lse = 1e-4;
    return CLATTN_SUCCESS;
}

clattn_status clattn_attention_pairs(const clattn_attention_desc *desc, uint64_t *pairs) {
    attn_problem pb;
    if (!pairs) return CLATTN_ERR_INVALID_ARGUMENT;
    clattn_status status = problem_build(desc, BIAS_FROM_EITHER, NULL, &pb);
    if (status == CLATTN_SUCCESS)
        *pairs = mask_count_pairs(&pb.mask, (int64_t)pb.batch, (int64_t)pb.heads_q);
    if (status == CLATTN_SUCCESS && *pairs == UINT64_MAX) /* 2^64 - 1 pairs take no real call */
        status = CLATTN_ERR_INVALID_ARGUMENT;
    problem_release(&pb);
    return status;
}

clattn_status clattn_attention_mask(const clattn_attention_desc *desc, size_t head, size_t row0,
                                    size_t rows, uint8_t *allowed) {
    attn_problem pb;
    clattn_status status = problem_build(desc, BIAS_FROM_EITHER, NULL, &pb);
    if (status == CLATTN_SUCCESS &&
        (!allowed || head >= pb.heads_q || row0 > pb.len_q || rows > pb.len_q - row0))
        status = CLATTN_ERR_INVALID_ARGUMENT;
    for (size_t r = 0; status == CLATTN_SUCCESS && r < rows; r++)
        for (size_t j = 0; j < pb.len_k; j++)
            allowed[r * pb.len_k + j] =
                (uint8_t)mask_allowed(&pb.mask, (int64_t)head, (int64_t)(row0 + r), (int64_t)j);
    problem_release(&pb);
    return status;
}

clattn_status clattn_attention_reference(const clattn_attention_desc *desc, const void *q,
                                         const void *k, const void *v, void *o, float *lse) {
    attn_problem pb;
    clattn_status status = problem_build(desc, BIAS_FROM_HOST, NULL, &pb);
    if (status == CLATTN_SUCCESS)
        status = reference_attention_store(&pb, q, k, v, pb.bias_host, o, lse, NULL);
    problem_release(&pb);
    return status;
}
