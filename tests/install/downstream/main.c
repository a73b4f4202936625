/* A downstream program: attention on the default device, checked against the reference. */
#include <clattn.h>

#include <math.h>
#include <stdio.h>

int main(void) {
    enum { B = 1, H = 2, N = 5, D = 8 };
    float q[B * N * H * D], k[B * N * H * D], v[B * N * H * D], o[B * N * H * D],
        ref[B * N * H * D];
    for (int i = 0; i < B * N * H * D; i++) {
        q[i] = (float)sin(i), k[i] = (float)cos(i), v[i] = (float)sin(2 * i);
    }
    clattn_attention_desc desc;
    clattn_attention_desc_init(&desc, CLATTN_LAYOUT_BSHD, B, H, H, N, N, D, D);
    desc.causal = 1;
    size_t device = 0, count = 0;
    clattn_context *ctx = NULL;
    clattn_status status = clattn_device_select(NULL, &device, 1, &count);
    if (status == CLATTN_SUCCESS) status = clattn_context_create(&ctx, device);
    if (status == CLATTN_SUCCESS) status = clattn_attention_host(ctx, &desc, q, k, v, o, NULL);
    if (status == CLATTN_SUCCESS) status = clattn_attention_reference(&desc, q, k, v, ref, NULL);
    if (status != CLATTN_SUCCESS) {
        fprintf(stderr, "downstream: %s: %s\n", clattn_status_name(status),
                clattn_context_last_error(ctx));
        clattn_context_destroy(ctx);
        return 1;
    }
    int bad = 0;
    for (int i = 0; i < B * N * H * D; i++)
        bad += fabsf(o[i] - ref[i]) > 2e-5f + 2e-4f * fabsf(ref[i]);
    clattn_context_destroy(ctx);
    printf("clattn %s downstream: %s\n", clattn_version(), bad ? "MISMATCH" : "ok");
    return bad != 0;
}
