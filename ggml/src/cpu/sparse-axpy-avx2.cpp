// AVX2/FMA/F16C kernels of y += a * w for the column-sparse down projection
// (see sparse-axpy.h). Memory bound: one pass over the weight slice, the y
// slice stays in L1.
#include "sparse-axpy.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <math.h>

#include "ggml-quants.h"

namespace {

void axpy_f32(int64_t n, float *y, const float *w, float a) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(w + i), _mm256_loadu_ps(y + i)));
        _mm256_storeu_ps(y + i + 8, _mm256_fmadd_ps(va, _mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(y + i + 8)));
    }
    for (; i < n; i++) y[i] = fmaf(a, w[i], y[i]);
}

void axpy_f16(int64_t n, float *y, const ggml_fp16_t *w, float a) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i)));
        const __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i + 8)));
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, w0, _mm256_loadu_ps(y + i)));
        _mm256_storeu_ps(y + i + 8, _mm256_fmadd_ps(va, w1, _mm256_loadu_ps(y + i + 8)));
    }
    for (; i < n; i++) y[i] = fmaf(a, _cvtsh_ss(w[i]), y[i]);
}

inline void fma8_i8(float *y, __m128i q8, __m256 s) {  // 8 int8 in the low half of q8
    const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8));
    _mm256_storeu_ps(y, _mm256_fmadd_ps(s, q, _mm256_loadu_ps(y)));
}

void axpy_q8_0(int64_t nb, float *y, const void *vw, float a) {
    const block_q8_0 *w = (const block_q8_0 *)vw;
    for (int64_t b = 0; b < nb; b++, y += QK8_0) {
        const __m256 s = _mm256_set1_ps(a * _cvtsh_ss(w[b].d));
        const __m128i lo = _mm_loadu_si128((const __m128i *)w[b].qs);
        const __m128i hi = _mm_loadu_si128((const __m128i *)(w[b].qs + 16));
        fma8_i8(y, lo, s);
        fma8_i8(y + 8, _mm_srli_si128(lo, 8), s);
        fma8_i8(y + 16, hi, s);
        fma8_i8(y + 24, _mm_srli_si128(hi, 8), s);
    }
}

void axpy_q4_0(int64_t nb, float *y, const void *vw, float a) {
    const block_q4_0 *w = (const block_q4_0 *)vw;
    const __m128i mask = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    for (int64_t b = 0; b < nb; b++, y += QK4_0) {
        const __m256 s = _mm256_set1_ps(a * _cvtsh_ss(w[b].d));
        const __m128i q = _mm_loadu_si128((const __m128i *)w[b].qs);
        // element j < 16 is the low nibble of byte j, element 16 + j the high one
        const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, mask), eight);
        const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), mask), eight);
        fma8_i8(y, lo, s);
        fma8_i8(y + 8, _mm_srli_si128(lo, 8), s);
        fma8_i8(y + 16, hi, s);
        fma8_i8(y + 24, _mm_srli_si128(hi, 8), s);
    }
}

}  // namespace

void ggml_axpy_kernels_avx2(ggml_axpy_kernels *k) {
    k->f32 = axpy_f32;
    k->f16 = axpy_f16;
    k->q8_0 = axpy_q8_0;
    k->q4_0 = axpy_q4_0;
}
#endif
