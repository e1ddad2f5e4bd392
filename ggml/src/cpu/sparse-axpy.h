// Internal: y += a * w over one slice of a weight row, the inner loop of the
// column-sparse down projection. The SIMD family lives in sparse-axpy-avx2.cpp
// (compiled with its own -m flags); ops-sparse.cpp holds the scalar versions.
//
// Every kernel computes each y element as one fused multiply-add of a scale and
// the decoded weight (the scalar versions as a multiply then an add), so an
// element's result never depends on where a slice starts: thread splits of the
// output cannot change the bits.
#pragma once
#include <stdint.h>

#include "ggml.h"

struct ggml_axpy_kernels {
    void (*f32)(int64_t n, float *y, const float *w, float a);
    void (*f16)(int64_t n, float *y, const ggml_fp16_t *w, float a);
    void (*q8_0)(int64_t nblocks, float *y, const void *w, float a);  // blocks of 32
    void (*q4_0)(int64_t nblocks, float *y, const void *w, float a);
};

#if defined(__x86_64__) || defined(_M_X64)
// AVX2 + FMA + F16C kernels; only call after checking the CPU supports them.
void ggml_axpy_kernels_avx2(struct ggml_axpy_kernels *k);
#endif
