// The CPU backend's side of the tensor types: the kernels it picked for this
// CPU (dot products, the fast activation converters) and what each weight
// type's activations are converted to. The core type table (ggml.h) holds
// formats only; a device backend has its own kernels and never reads these.
#pragma once

#include "ggml.h"

#ifdef __cplusplus
extern "C" {
#endif

// s = dot(x, y) over n elements; x is of the weight type, y of its vec_dot_type.
typedef void (*ggml_vec_dot_t)(int64_t n, float *s, const void *x, const void *y);

struct ggml_cpu_type_traits {
    ggml_from_float_t from_float;  // fastest converter from float (byte-identical to from_float_ref)
    ggml_vec_dot_t vec_dot;        // fastest dot kernel (NULL: not a weight type on the CPU)
    ggml_vec_dot_t vec_dot_ref;    // portable scalar dot kernel
    enum ggml_type vec_dot_type;   // what activations are converted to
    // GGML_PREC_HIGH: dot against the f32 activations themselves (F16, BF16:
    // exact, and one load an element fewer than a row and its residual);
    // NULL: the high path converts a row and its residual (ops.h)
    ggml_vec_dot_t vec_dot_f32;
    // F16 / BF16 mat-vec at fast precision: the activation row rounded to the
    // weight format but kept as f32 for vec_dot_f32 (one conversion per
    // product, where conversions are dear: the AVX2 family, Zen 1 above all);
    // false: vec_dot on weight-format rows, half the bytes, so a long row stays
    // in L1 (AVX-512). The same products either way.
    bool round_act_f32;
};

// NULL where ggml_get_type_traits is NULL. Under ggml_cpu_force_scalar: the
// portable reference kernels.
const struct ggml_cpu_type_traits *ggml_get_cpu_type_traits(enum ggml_type type);

// What a weight product of type t converts its k x ncols activations to, with
// GGML_PREC_HIGH (high) or not: "q8x" (the q8_0 values, in the q8x kernels'
// layout), "q8xh" (q8_0 plus the residual on the grid d/128), or the name of
// the type each row is converted to (with high, a row then its converted
// residual, except "f32": the rows as they are). NULL for an unknown type.
const char *ggml_cpu_act_format(enum ggml_type t, int64_t k, int64_t ncols, bool high);
// Which kernel family the runtime picked for this CPU ("avx512", "avx2", "scalar").
const char *ggml_cpu_backend_name(void);
// Force the portable scalar kernels (for tests): 1 = scalar, 0 = best available.
void ggml_cpu_force_scalar(int on);
// The kernel family in words (which q8x weight loader, whether PINFER_CPU
// capped it), for benchmark reports.
const char *ggml_cpu_kernel_variant(void);

// The CPU's dense-vs-sparse crossover (ggml_sparse_dense_policy): densities
// measured with pinfer-bench-sparse (docs/sparse-bench.md).
bool ggml_cpu_sparse_should_use_dense(int64_t n_active, int64_t n, int64_t T);
// The policy the sparse kernels of this pool ask (NULL: the CPU's). A backend
// that runs CPU kernels on its own pool in place of a device (the simulator)
// sets the device's crossover here.
void ggml_threadpool_set_sparse_dense_policy(struct ggml_threadpool *tp, ggml_sparse_dense_policy policy);

// Quantize nrows rows of n_per_row floats into dst with the fastest
// converter; returns bytes written.
size_t ggml_quantize_chunk(enum ggml_type type, const float *src, void *dst, int64_t nrows, int64_t n_per_row);

#ifdef __cplusplus
}
#endif
