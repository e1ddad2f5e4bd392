// AVX2/FMA/F16C kernels of y += Σ_r a_r * w_r for the column-sparse down
// projection (see sparse-axpy.h). Up to four rows per pass: y is loaded and
// stored once per pass, the rows' decoded values meet it in registers.
#include "sparse-axpy.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <math.h>

#include "ggml-quants.h"

namespace {

template <int NR>
void f32_rows(int64_t n, float *y, const void *const *vw, const float *a) {
    const float *w[NR];
    __m256 va[NR];
    for (int r = 0; r < NR; r++) w[r] = (const float *)vw[r], va[r] = _mm256_set1_ps(a[r]);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 acc = _mm256_loadu_ps(y + i);
        for (int r = 0; r < NR; r++) acc = _mm256_fmadd_ps(va[r], _mm256_loadu_ps(w[r] + i), acc);
        _mm256_storeu_ps(y + i, acc);
    }
    for (; i < n; i++)
        for (int r = 0; r < NR; r++) y[i] = fmaf(a[r], w[r][i], y[i]);
}

template <int NR>
void f16_rows(int64_t n, float *y, const void *const *vw, const float *a) {
    const ggml_fp16_t *w[NR];
    __m256 va[NR];
    for (int r = 0; r < NR; r++) w[r] = (const ggml_fp16_t *)vw[r], va[r] = _mm256_set1_ps(a[r]);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 acc = _mm256_loadu_ps(y + i);
        for (int r = 0; r < NR; r++)
            acc = _mm256_fmadd_ps(va[r], _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w[r] + i))), acc);
        _mm256_storeu_ps(y + i, acc);
    }
    for (; i < n; i++)
        for (int r = 0; r < NR; r++) y[i] = fmaf(a[r], _cvtsh_ss(w[r][i]), y[i]);
}

inline __m256 i8x8_to_ps(__m128i q) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)); }

// Block kernels: decode 32 int8 values per row into q[r][0..1] (two 16-byte
// halves), then four 8-wide groups of y take one FMA per row each.
template <int NR, typename Decode>
void blocks_rows(int64_t nb, float *y, const void *const *vw, const float *a, size_t bsize) {
    for (int64_t b = 0; b < nb; b++, y += 32) {
        __m256 s[NR];
        __m128i q[NR][2];
        for (int r = 0; r < NR; r++) {
            const char *blk = (const char *)vw[r] + b * bsize;
            s[r] = _mm256_set1_ps(a[r] * _cvtsh_ss(*(const ggml_fp16_t *)blk));
            Decode::run(blk, q[r]);
        }
        for (int g = 0; g < 4; g++) {
            __m256 acc = _mm256_loadu_ps(y + 8 * g);
            for (int r = 0; r < NR; r++) {
                const __m128i h = q[r][g >> 1];
                acc = _mm256_fmadd_ps(s[r], i8x8_to_ps((g & 1) ? _mm_srli_si128(h, 8) : h), acc);
            }
            _mm256_storeu_ps(y + 8 * g, acc);
        }
    }
}

struct decode_q8_0 {
    static inline __attribute__((always_inline)) void run(const char *blk, __m128i q[2]) {
    const block_q8_0 *x = (const block_q8_0 *)blk;
    q[0] = _mm_loadu_si128((const __m128i *)x->qs);
    q[1] = _mm_loadu_si128((const __m128i *)(x->qs + 16));
    }
};

struct decode_q4_0 {
    static inline __attribute__((always_inline)) void run(const char *blk, __m128i q[2]) {
    // element j < 16 is the low nibble of byte j, element 16 + j the high one
    const block_q4_0 *x = (const block_q4_0 *)blk;
    const __m128i mask = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    const __m128i v = _mm_loadu_si128((const __m128i *)x->qs);
    q[0] = _mm_sub_epi8(_mm_and_si128(v, mask), eight);
    q[1] = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), mask), eight);
    }
};

template <template <int> class K>
void dispatch_rows(int64_t n, float *y, const void *const *w, const float *a, int nr) {
    switch (nr) {
        case 1: K<1>::run(n, y, w, a); break;
        case 2: K<2>::run(n, y, w, a); break;
        case 3: K<3>::run(n, y, w, a); break;
        default: K<4>::run(n, y, w, a); break;
    }
}

template <int NR> struct F32K { static void run(int64_t n, float *y, const void *const *w, const float *a) { f32_rows<NR>(n, y, w, a); } };
template <int NR> struct F16K { static void run(int64_t n, float *y, const void *const *w, const float *a) { f16_rows<NR>(n, y, w, a); } };
template <int NR> struct Q80K {
    static void run(int64_t n, float *y, const void *const *w, const float *a) {
        blocks_rows<NR, decode_q8_0>(n / 32, y, w, a, sizeof(block_q8_0));
    }
};
template <int NR> struct Q40K {
    static void run(int64_t n, float *y, const void *const *w, const float *a) {
        blocks_rows<NR, decode_q4_0>(n / 32, y, w, a, sizeof(block_q4_0));
    }
};

}  // namespace

void ggml_axpy_kernels_avx2(ggml_axpy_kernels *k) {
    k->f32 = dispatch_rows<F32K>;
    k->f16 = dispatch_rows<F16K>;
    k->q8_0 = dispatch_rows<Q80K>;
    k->q4_0 = dispatch_rows<Q40K>;
}
#endif
