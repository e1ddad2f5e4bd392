// Internal: the exponentials of a softmax row, y[i] = exp(y[i] - m) in place,
// returning their sum (accumulated in double). SIMD families live in
// vec-exp-avx2.cpp / vec-exp-avx512.cpp (compiled with their own -m flags);
// vec-exp-ref.cpp holds the scalar one (libm expf).
//
// The SIMD exp: x = t ln2 + r with t = round(x log2 e) and |r| <= ln2 / 2
// (ln2 split in two for an exact-enough r), e^r by its Taylor polynomial of
// degree 7 (truncation below 5e-9 relative), times 2^t. Within a few ulp of
// expf; exp(-inf) = 0, a NaN stays NaN (a NaN row propagates), and results
// under the normal range go to 0 (AVX2) or are denormals (AVX-512 scalef).
// Each row is one thread's: the bits never depend on the thread count.
#pragma once
#include <stdint.h>

typedef double (*ggml_exp_sum_t)(int64_t n, float *y, float m);

// The SIMD families' constants: log2 e, ln 2 split so that t * its high part
// is exact for the t of float exponents, and e^r's Taylor coefficients from
// r^7 down to r^0, for Horner's scheme.
static const float GGML_EXP_LOG2E = 1.44269504088896341f;
static const float GGML_EXP_LN2_HI = 0.693145751953125f, GGML_EXP_LN2_LO = 1.42860682030941723212e-6f;
static const float GGML_EXP_TAYLOR[8] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};

double ggml_exp_sum_ref(int64_t n, float *y, float m);
#if defined(__x86_64__) || defined(_M_X64)
// Only call after checking the CPU supports the family.
double ggml_exp_sum_avx2(int64_t n, float *y, float m);    // AVX2 + FMA
double ggml_exp_sum_avx512(int64_t n, float *y, float m);  // AVX-512 F/DQ
#endif
// The kernel picked for this CPU (cpu-type-traits.cpp); the scalar one
// under ggml_cpu_force_scalar.
ggml_exp_sum_t ggml_cpu_exp_sum(void);
