// The kernels' launchers: one per op (or family), each enqueued on the
// context's compute stream. They return 0, or non-zero with the error set.
#pragma once

#include "cuda-common.cuh"

namespace pcuda {

int op_elementwise(context &c, ggml_tensor *dst);  // add, mul, scale, activations, gated, sparse_mask
int op_norm(context &c, ggml_tensor *dst);         // rms_norm, norm
int op_soft_max(context &c, ggml_tensor *dst);
int op_argmax(context &c, ggml_tensor *dst);
int op_rope(context &c, ggml_tensor *dst);
int op_copy(context &c, ggml_tensor *dst);  // dup, cpy
int op_get_rows(context &c, ggml_tensor *dst);
int op_mul_mat(context &c, ggml_tensor *dst);  // mat-vec for T <= MATVEC_MAX_T, else mat-mat
int op_sparse(context &c, ggml_tensor *dst);   // sparse_select, mul_mat_sparse_rows, sparse_down, sparse_ffn
int op_top_k(context &c, ggml_tensor *dst);
int op_mul_mat_id(context &c, ggml_tensor *dst);  // mixture of experts: the routed experts' products

constexpr int MATVEC_MAX_T = 8;  // columns of b a mat-vec launch keeps in registers

// The two products mul_mat uses (mat-vec.cu, mat-mat.cu): dst = a^T b over planes.
int mat_vec(context &c, const ggml_tensor *a, const ggml_tensor *b, ggml_tensor *dst);
int mat_mat(context &c, const ggml_tensor *a, const ggml_tensor *b, ggml_tensor *dst);

// Work memory for one op (sparse_ffn's per-neuron activations, mat-mat's
// column scales); grows the
// context's scratch between launches (the stream is drained first).
void *scratch(context &c, size_t bytes);
size_t op_scratch_bytes(const ggml_tensor *dst);

}  // namespace pcuda
