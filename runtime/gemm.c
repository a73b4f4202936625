/* The gemm path: in progress. */
#include "paths.h"

clattn_status gemm_attention(clattn_context *ctx, const clattn_attention_desc *d,
                             const attention_buffers *buf, cl_event *event) {
    return ctx_error(ctx, CLATTN_ERR_UNSUPPORTED, "the gemm path is not built yet");
}
