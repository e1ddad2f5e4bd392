// AVX2 softmax exponentials (vec-exp.h), 8 lanes; 2^t built in the exponent
// bits, so results below about 2^-126 (x < -87.3) are flushed to 0.
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <string.h>

#include "vec-exp.h"

namespace {

inline __m256 exp8(__m256 x) {
    // max(floor, x) keeps a NaN x (maxps returns its second operand then) and lifts -inf
    x = _mm256_max_ps(_mm256_set1_ps(-88.0f), x);
    const __m256 t = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(GGML_EXP_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(t, _mm256_set1_ps(GGML_EXP_LN2_HI), x);
    r = _mm256_fnmadd_ps(t, _mm256_set1_ps(GGML_EXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(GGML_EXP_TAYLOR[0]);
    for (int i = 1; i < 8; i++) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(GGML_EXP_TAYLOR[i]));
    // 2^t in the exponent field: t >= -127 after the floor, and t = -127 gives the bits of +0
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(t), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

}  // namespace

double ggml_exp_sum_avx2(int64_t n, float *y, float m) {
    const __m256 vm = _mm256_set1_ps(m);
    __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
    auto step = [&](float *p) {
        const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(p), vm));
        _mm256_storeu_ps(p, e);
        acc0 = _mm256_add_pd(acc0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        acc1 = _mm256_add_pd(acc1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    };
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) step(y + i);
    if (i < n) {  // the tail through a buffer padded with -inf (exp 0: adds nothing)
        float buf[8];
        for (int k = 0; k < 8; k++) buf[k] = -__builtin_inff();
        memcpy(buf, y + i, sizeof(float) * (size_t)(n - i));
        step(buf);
        memcpy(y + i, buf, sizeof(float) * (size_t)(n - i));
    }
    alignas(32) double s[8];
    _mm256_store_pd(s, acc0);
    _mm256_store_pd(s + 4, acc1);
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}
#endif
