// AVX-512 softmax exponentials (vec-exp.h), 16 lanes; 2^t applied by scalef,
// which rounds results below the normal range to denormals (or 0) itself.
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#include "vec-exp.h"

// GCC 12's AVX-512 headers seed conversions with _mm512_undefined_*: false alarms.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace {

inline __m512 exp16(__m512 x) {
    // max(floor, x) keeps a NaN x and lifts -inf: exp(-104) is below the smallest denormal
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
    const __m512 t = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(GGML_EXP_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(t, _mm512_set1_ps(GGML_EXP_LN2_HI), x);
    r = _mm512_fnmadd_ps(t, _mm512_set1_ps(GGML_EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(GGML_EXP_TAYLOR[0]);
    for (int i = 1; i < 8; i++) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(GGML_EXP_TAYLOR[i]));
    return _mm512_scalef_ps(p, t);
}

}  // namespace

double ggml_exp_sum_avx512(int64_t n, float *y, float m) {
    const __m512 vm = _mm512_set1_ps(m);
    __m512d acc0 = _mm512_setzero_pd(), acc1 = _mm512_setzero_pd();
    int64_t i = 0;
    for (; i < n; i += 16) {  // the tail by masked loads and stores; its missing lanes add 0
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, y + i), vm)));
        _mm512_mask_storeu_ps(y + i, k, e);
        acc0 = _mm512_add_pd(acc0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        acc1 = _mm512_add_pd(acc1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(acc0, acc1));
}
#endif
