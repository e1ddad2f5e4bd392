// Scratch each op needs from the executor's shared work buffer.
#include "ops.h"

extern "C" size_t ggml_rope_work_size(const struct ggml_tensor *node, int n_threads);  // ops-rope.cpp

extern "C" size_t ggml_op_work_size(const ggml_tensor *node, int n_threads) {
    switch (node->op) {
        case GGML_OP_MUL_MAT: return ggml_mul_mat_work_size(node, n_threads);
        case GGML_OP_ROPE: return ggml_rope_work_size(node, n_threads);
        case GGML_OP_SPARSE_SELECT: return ggml_sparse_select_work_size(node, n_threads);
        case GGML_OP_MUL_MAT_SPARSE_ROWS: return ggml_mul_mat_sparse_rows_work_size(node, n_threads);
        case GGML_OP_SPARSE_DOWN: return ggml_sparse_down_work_size(node, n_threads);
        case GGML_OP_SPARSE_FFN: return ggml_sparse_ffn_work_size(node, n_threads);
        default: return 0;  // all other ops work in place on dst
    }
}
