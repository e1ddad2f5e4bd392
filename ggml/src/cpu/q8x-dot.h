// Internal to the AVX-512 kernel files: the q8x multi-column dot product,
// shared by the plain AVX-512 and the AVX-512 VBMI translation units, which
// differ only in how a group of four weight blocks is unpacked (X::load).
// Include only from a file compiled with AVX-512 F/BW/VL/DQ/VNNI enabled.
#pragma once
#include <immintrin.h>
#include <string.h>

#include "ggml-quants.h"
#include "vec-dot-simd.h"

// Quantizers of the q8x and q8xh activation layouts (vec-dot-avx512.cpp).
void ggml_q8x_quantize_avx512(const float *x, void *y, int64_t k);
void ggml_q8xh_quantize_avx512(const float *x, void *y, int64_t k);
// Activations for dot_f16: fp16-rounded values stored as f32.
void ggml_f16r_convert_avx512(const float *x, void *y, int64_t k);

namespace {

// Loader dispatch for a row's last partial group (SFINAE on partial_loads).
template <class X>
constexpr auto has_partial_loads(int) -> decltype(X::partial_loads, bool()) { return X::partial_loads; }
template <class X>
constexpr bool has_partial_loads(long) { return false; }
// Group g of a row of nb blocks: loaders with partial_loads get the number of
// valid blocks and the bytes left in the row; the others a zero-padded copy
// for the last partial group.
template <class X>
inline auto load_group(const typename X::B *x, const typename X::B *, int64_t left, __m512i *ua, __m512i *ub, __m512 *d, __m512 *m, int)
    -> decltype(X::partial_loads, void()) {
    X::load(x, ua, ub, d, m, left < 4 ? (int)left : 4, left * (int64_t)sizeof(typename X::B));
}
template <class X>
inline void load_group(const typename X::B *x, const typename X::B *tail, int64_t left, __m512i *ua, __m512i *ub, __m512 *d, __m512 *m, long) {
    X::load(left >= 4 ? x : tail, ua, ub, d, m);
}

// One weight row against NC activation rows. A loader X unpacks a group of
// four weight blocks once into the q8x order (vec-dot-simd.h): ua, ub the
// unsigned quants u of the blocks' low and high halves, d and m per lane so
// that weight = d (u + o) for the types with a fixed offset o = -2^X::S
// (m unused), or d u + m (X::S < 0). Per column: two vpdpbusd into one
// register whose lane l is block l / 4, the offset in integers (ns << S),
// one conversion, the activation then weight scales, one fma; the stored
// minimum goes through m . sd into a second accumulator. Each column's
// arithmetic is the same whatever NC is, so the result of an element never
// depends on how columns were tiled.
// H: activations in the q8xh layout: per column the integer dot of the
// weights with 128 q + q2 (shift, two more vpdpbusd) in place of q.
template <class X, int NC, bool H = false>
void dot_q8x(int64_t k, const void *vx, const void *vy, size_t ys, float *s, size_t ss) {
    constexpr size_t GROUP = H ? GGML_Q8XH_GROUP : GGML_Q8X_GROUP;
    constexpr size_t DY = H ? 256 : 128, NS = DY + 64, SD = DY + 128;  // offsets of the scales and sums
    constexpr bool OFF = X::S >= 0;
    using B = typename X::B;
    const B *x = (const B *)vx;
    const int64_t nb = k / 32, ng = (nb + 3) / 4;
    __m512 acc[NC], accm[NC];
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) acc[c] = accm[c] = _mm512_setzero_ps();
    const uint8_t *y0 = (const uint8_t *)vy;
    // A last partial group reads zero blocks (d = m = 0): loaders with masked
    // loads (partial_loads) read them as zeros in place, the others from a copy.
    const int64_t nfull = nb / 4;
    B tail[4];
    if (!has_partial_loads<X>(0) && nfull < ng) {
        memset(tail, 0, sizeof(tail));
        memcpy(tail, x + 4 * nfull, sizeof(B) * (size_t)(nb - 4 * nfull));
    }
    const int ahead = ggml_prefetch_distance;
    for (int64_t g = 0; g < ng; g++) {
        ggml_prefetch_chunk(x + 4 * g, 4 * (int)sizeof(B), ahead);
        __m512i ua, ub;
        __m512 dx, mx;
        load_group<X>(x + 4 * g, tail, nb - 4 * g, &ua, &ub, &dx, &mx, 0);
        const uint8_t *yg = y0 + g * GROUP;
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) {
            const uint8_t *yc = yg + c * ys;
            const __m512i ns = OFF ? _mm512_slli_epi32(_mm512_loadu_si512(yc + NS), X::S > 0 ? X::S : 0) : _mm512_setzero_si512();
            __m512i p;
            if (!H) {
                p = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(ns, ua, _mm512_loadu_si512(yc)), ub, _mm512_loadu_si512(yc + 64));
            } else {  // 128 dot(u, q) + dot(u, q2) + offset: |.| < 2^24 per lane, exact in int32 and in the f32 conversion
                p = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ua, _mm512_loadu_si512(yc)), ub,
                                        _mm512_loadu_si512(yc + 64));
                p = _mm512_slli_epi32(p, 7);
                p = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(p, ua, _mm512_loadu_si512(yc + 128)), ub, _mm512_loadu_si512(yc + 192));
                if (OFF) p = _mm512_add_epi32(p, ns);
            }
            const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(p), _mm512_loadu_ps((const float *)(yc + DY)));
            acc[c] = _mm512_fmadd_ps(f, dx, acc[c]);
            if (!OFF) accm[c] = _mm512_fmadd_ps(mx, _mm512_loadu_ps((const float *)(yc + SD)), accm[c]);
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) *(float *)((char *)s + c * ss) = _mm512_reduce_add_ps(OFF ? acc[c] : _mm512_add_ps(acc[c], accm[c]));
}

template <class X, bool H = false>
void dot_q8x_n(int64_t k, const void *x, const void *y, size_t ys, float *s, size_t ss, int nc) {
    switch (nc) {
        case 1: return dot_q8x<X, 1, H>(k, x, y, ys, s, ss);
        case 2: return dot_q8x<X, 2, H>(k, x, y, ys, s, ss);
        case 3: return dot_q8x<X, 3, H>(k, x, y, ys, s, ss);
        case 4: return dot_q8x<X, 4, H>(k, x, y, ys, s, ss);
        case 5: return dot_q8x<X, 5, H>(k, x, y, ys, s, ss);
        case 6: return dot_q8x<X, 6, H>(k, x, y, ys, s, ss);
        case 7: return dot_q8x<X, 7, H>(k, x, y, ys, s, ss);
        default: return dot_q8x<X, 8, H>(k, x, y, ys, s, ss);
    }
}
template <class X>
void dot_q8xh_n(int64_t k, const void *x, const void *y, size_t ys, float *s, size_t ss, int nc) {
    dot_q8x_n<X, true>(k, x, y, ys, s, ss, nc);
}

// F16 weights x activations rounded to fp16 but stored as f32 (the rounding
// makes them exactly the F16 activations vec_dot_f16 sees; widening them once
// when converting saves a conversion per weight row): one weight row against
// NC activation rows, the weight chunk converted once per 16 elements and
// reused by every column. Each column has one accumulator and the same order
// whatever NC is.
template <int NC>
void dot_f16_rows(int64_t k, const void *vx, const void *vy, size_t ys, float *s, size_t ss) {
    const ggml_fp16_t *x = (const ggml_fp16_t *)vx;
    __m512 acc[NC];
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < k; i += 16) {
        const __mmask16 m = k - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (k - i)) - 1);
        const __m512 xv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i));
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) {
            const float *yc = (const float *)((const char *)vy + c * ys) + i;
            acc[c] = _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(m, yc), acc[c]);
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) *(float *)((char *)s + c * ss) = _mm512_reduce_add_ps(acc[c]);
}

inline void dot_f16_rows_n(int64_t k, const void *x, const void *y, size_t ys, float *s, size_t ss, int nc) {
    switch (nc) {
        case 1: return dot_f16_rows<1>(k, x, y, ys, s, ss);
        case 2: return dot_f16_rows<2>(k, x, y, ys, s, ss);
        case 3: return dot_f16_rows<3>(k, x, y, ys, s, ss);
        case 4: return dot_f16_rows<4>(k, x, y, ys, s, ss);
        case 5: return dot_f16_rows<5>(k, x, y, ys, s, ss);
        case 6: return dot_f16_rows<6>(k, x, y, ys, s, ss);
        case 7: return dot_f16_rows<7>(k, x, y, ys, s, ss);
        default: return dot_f16_rows<8>(k, x, y, ys, s, ss);
    }
}

}  // namespace
