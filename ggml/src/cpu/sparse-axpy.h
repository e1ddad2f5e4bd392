// Internal: y += Σ_r a[r] * w_r over one slice of nr (1..4) weight rows, the
// inner loop of the column-sparse down projection. SIMD families live in
// sparse-axpy-avx2.cpp / sparse-axpy-avx512.cpp (compiled with their own -m
// flags); sparse-axpy-ref.cpp holds the scalar versions.
//
// Rows are applied in the order given, each y element getting one fused
// multiply-add per row (scalar: multiply then add), so taking rows one, two or
// four at a time gives the same bits, and an element's result never depends on
// where a slice starts: thread splits of the output cannot change the result.
#pragma once
#include <stdint.h>

#include "ggml.h"

#define GGML_AXPY_MAX_ROWS 4

// n: elements of the slice (a multiple of 32 for the block types).
typedef void (*ggml_axpy_t)(int64_t n, float *y, const void *const *w, const float *a, int nr);

struct ggml_axpy_kernels {
    ggml_axpy_t f32, f16, q8_0, q4_0;
};

// The portable kernels (sparse-axpy-ref.cpp).
void ggml_axpy_kernels_ref(struct ggml_axpy_kernels *k);
#if defined(__x86_64__) || defined(_M_X64)
// Only call after checking the CPU supports the family.
void ggml_axpy_kernels_avx2(struct ggml_axpy_kernels *k);    // AVX2 + FMA + F16C
void ggml_axpy_kernels_avx512(struct ggml_axpy_kernels *k);  // AVX-512 F/BW/VL
#endif
// The kernels picked for this CPU (cpu-type-traits.cpp); the portable ones
// under ggml_cpu_force_scalar.
const struct ggml_axpy_kernels *ggml_cpu_axpy(void);
