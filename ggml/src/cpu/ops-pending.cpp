// Temporary: kernels whose modules have not landed yet abort loudly.
// Removed as the ops and mul-mat modules are merged.
#include "ggml-impl.h"
#include "ops.h"

#define PENDING(name) \
    void ggml_compute_forward_##name(const ggml_compute_params *, ggml_tensor *) { ggml_abort(#name " kernel not built yet"); }
extern "C" {
PENDING(dup) PENDING(cpy) PENDING(add) PENDING(mul) PENDING(scale) PENDING(rms_norm) PENDING(norm)
PENDING(get_rows) PENDING(rope) PENDING(soft_max) PENDING(relu) PENDING(silu)
PENDING(gelu) PENDING(swiglu) PENDING(reglu) PENDING(geglu) PENDING(argmax)
size_t ggml_op_work_size(const ggml_tensor *node, int n_threads) {
    return node->op == GGML_OP_MUL_MAT ? ggml_mul_mat_work_size(node, n_threads) : 0;
}
}
