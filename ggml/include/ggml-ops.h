// The one table of graph operations. Every per-op fact lives in its row, and
// everything that used to be a hand-kept list is generated from it: the enum
// ggml_op (ggml.h), ggml_op_name / ggml_get_op_traits (ggml.cpp), the view
// test (ggml-impl.h), the CPU forward and work-size tables (cpu/), the
// precision marking of weight products (llama-context.cpp) and the Python
// graph binding's op lookup and input counts. Adding an op is adding a row
// (plus its constructor and kernel): a missing kernel is a link error.
//
// X(NAME, name, n_src_min, n_src_max, view, prec, work)
//   NAME        GGML_OP_<NAME>; also the string ggml_op_name returns
//   name        lower case: the CPU kernel ggml_compute_forward_<name>, the
//               work-size function ggml_<name>_work_size, the Python op name
//   n_src_*     sources the op reads, required .. at most (the rest optional)
//   view        1: only reinterprets memory, nothing to compute (no kernel)
//   prec        1: a weight product that honours ggml_set_prec (GGML_PREC_HIGH)
//   work        1: needs scratch from the executor's work buffer
#pragma once

#define GGML_OP_LIST(X)                                                                        \
    X(NONE, none, 0, 0, 1, 0, 0)                /* a leaf: data set by the caller */           \
    X(DUP, dup, 1, 1, 0, 0, 0)                  /* same-type contiguous copy (cont) */         \
    X(CPY, cpy, 2, 2, 0, 0, 0)                  /* copy src0 into src1 (a view), converting */ \
    X(ADD, add, 2, 2, 0, 0, 0)                                                                 \
    X(MUL, mul, 2, 2, 0, 0, 0)                                                                 \
    X(SCALE, scale, 1, 1, 0, 0, 0)                                                             \
    X(RMS_NORM, rms_norm, 1, 1, 0, 0, 0)                                                       \
    X(NORM, norm, 1, 1, 0, 0, 0)                                                               \
    X(MUL_MAT, mul_mat, 2, 2, 0, 1, 1)                                                         \
    X(GET_ROWS, get_rows, 2, 2, 0, 0, 0)                                                       \
    X(ROPE, rope, 2, 3, 0, 0, 1)                /* src2: optional per-pair frequency factors */ \
    X(SOFT_MAX, soft_max, 1, 2, 0, 0, 0)        /* src1: optional mask */                      \
    X(RELU, relu, 1, 1, 0, 0, 0)                                                               \
    X(SILU, silu, 1, 1, 0, 0, 0)                                                               \
    X(GELU, gelu, 1, 1, 0, 0, 0)                                                               \
    X(TANH, tanh, 1, 1, 0, 0, 0)                /* soft-capping: c * tanh(x / c) */            \
    X(SWIGLU, swiglu, 2, 2, 0, 0, 0)            /* silu(a) * b */                              \
    X(REGLU, reglu, 2, 2, 0, 0, 0)              /* relu(a) * b */                              \
    X(GEGLU, geglu, 2, 2, 0, 0, 0)              /* gelu(a) * b */                              \
    X(ARGMAX, argmax, 1, 1, 0, 0, 0)                                                           \
    X(VIEW, view, 1, 1, 1, 0, 0)                                                               \
    X(RESHAPE, reshape, 1, 1, 1, 0, 0)                                                         \
    X(PERMUTE, permute, 1, 1, 1, 0, 0)                                                         \
    X(TRANSPOSE, transpose, 1, 1, 1, 0, 0)                                                     \
    X(SPARSE_SELECT, sparse_select, 1, 1, 0, 0, 1)  /* score > threshold -> index list */      \
    X(MUL_MAT_SPARSE_ROWS, mul_mat_sparse_rows, 3, 3, 0, 1, 1)  /* row-sparse (gate/up) */     \
    X(SPARSE_DOWN, sparse_down, 3, 4, 0, 1, 1)  /* column-sparse down on ffn_down_t */         \
    X(SPARSE_MASK, sparse_mask, 1, 1, 0, 0, 0)  /* a where |a| > threshold, else 0 */          \
    X(SPARSE_FFN, sparse_ffn, 3, 6, 0, 1, 1)    /* fused gated FFN over a neuron bundle */     \
    X(TOP_K, top_k, 1, 1, 0, 0, 0)              /* ids of each row's k largest, descending */  \
    X(MUL_MAT_ID, mul_mat_id, 3, 4, 0, 1, 1)    /* routed experts' products; src3: row mask */
