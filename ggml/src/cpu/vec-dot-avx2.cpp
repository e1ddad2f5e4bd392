// AVX2 + FMA + F16C dot kernels and activation quantizers. Integer dot
// products use maddubs (u8 x s8 -> s16 pairs) then madd (-> s32); the
// quantized weight values are small enough that the s16 pairs never saturate.
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include <initializer_list>
#include <type_traits>

#include "ggml-quants.h"
#include "kquant-scales.h"
#include "vec-dot-simd.h"

namespace {

inline float fp16(ggml_fp16_t h) { return _cvtsh_ss(h); }

inline float hsum(__m256 v) {
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

inline int hsum_i32(__m256i v) {
    __m128i r = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 0x4e));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 0xb1));
    return _mm_cvtsi128_si32(r);
}

// 16 bytes of packed nibbles -> 32 bytes: low nibbles first, then high ones
// (the element order of every 32-element 4-bit block).
inline __m256i unpack_nibbles(const uint8_t *qs) {
    const __m128i v = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0F));
}

// Byte j = 0xFF where bit j of m is set.
inline __m256i bits_to_bytes(uint32_t m) {
    const __m256i sel = _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL, 0x0303030303030303LL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)m), sel);
    v = _mm256_or_si256(v, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfeLL));
    return _mm256_cmpeq_epi8(v, _mm256_set1_epi64x(-1));
}

// u8 x s8 -> 8 s32 sums of 4 products.
inline __m256i dot_u8s8(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
// s8 x s8: move the sign of x onto y so that maddubs sees |x| as unsigned.
inline __m256i dot_s8s8(__m256i x, __m256i y) { return dot_u8s8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x)); }

// ---------------------------------------------------------------- 32-blocks

void vec_dot_q4_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q4_0 *x = (const block_q4_0 *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    const int64_t nb = n / QK8_0;
    const __m256i off = _mm256_set1_epi8(8);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    const int ahead = ggml_prefetch_distance;
    for (; i + 1 < nb; i += 2) {
        ggml_prefetch_chunk(x + i, 2 * (int)sizeof(*x), ahead);
        const __m256i p0 = dot_s8s8(_mm256_sub_epi8(unpack_nibbles(x[i].qs), off), _mm256_loadu_si256((const __m256i *)y[i].qs));
        const __m256i p1 = dot_s8s8(_mm256_sub_epi8(unpack_nibbles(x[i + 1].qs), off), _mm256_loadu_si256((const __m256i *)y[i + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(fp16(x[i].d) * fp16(y[i].d)), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(fp16(x[i + 1].d) * fp16(y[i + 1].d)), _mm256_cvtepi32_ps(p1), acc1);
    }
    for (; i < nb; i++) {
        const __m256i p0 = dot_s8s8(_mm256_sub_epi8(unpack_nibbles(x[i].qs), off), _mm256_loadu_si256((const __m256i *)y[i].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(fp16(x[i].d) * fp16(y[i].d)), _mm256_cvtepi32_ps(p0), acc0);
    }
    *s = hsum(_mm256_add_ps(acc0, acc1));
}

void vec_dot_q4_1_q8_1(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q4_1 *x = (const block_q4_1 *)vx;
    const block_q8_1 *y = (const block_q8_1 *)vy;
    const int64_t nb = n / QK8_1;
    // m * dy * sum(qy) from the exact integer sum, not the rounded fp16 s
    const __m256i ones = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    const int ahead = ggml_prefetch_distance;
    for (int64_t i = 0; i < nb; i++) {
        ggml_prefetch_chunk(x + i, (int)sizeof(*x), ahead);
        const __m256i yv = _mm256_loadu_si256((const __m256i *)y[i].qs);
        const __m256i p = dot_u8s8(unpack_nibbles(x[i].qs), yv);
        const float dy = fp16(y[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(fp16(x[i].d) * dy), _mm256_cvtepi32_ps(p), acc);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(fp16(x[i].m) * dy), _mm256_cvtepi32_ps(dot_u8s8(ones, yv)), acc);
    }
    *s = hsum(acc);
}

void vec_dot_q5_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q5_0 *x = (const block_q5_0 *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    const int64_t nb = n / QK8_0;
    __m256 acc = _mm256_setzero_ps();
    const int ahead = ggml_prefetch_distance;
    for (int64_t i = 0; i < nb; i++) {
        ggml_prefetch_chunk(x + i, (int)sizeof(*x), ahead);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        // value = (nibble | high<<4) - 16 = nibble - (high ? 0 : 16)
        const __m256i hi = _mm256_andnot_si256(bits_to_bytes(qh), _mm256_set1_epi8(16));
        const __m256i q = _mm256_sub_epi8(unpack_nibbles(x[i].qs), hi);
        const __m256i p = dot_s8s8(q, _mm256_loadu_si256((const __m256i *)y[i].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(fp16(x[i].d) * fp16(y[i].d)), _mm256_cvtepi32_ps(p), acc);
    }
    *s = hsum(acc);
}

void vec_dot_q5_1_q8_1(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q5_1 *x = (const block_q5_1 *)vx;
    const block_q8_1 *y = (const block_q8_1 *)vy;
    const int64_t nb = n / QK8_1;
    const __m256i ones = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    const int ahead = ggml_prefetch_distance;
    for (int64_t i = 0; i < nb; i++) {
        ggml_prefetch_chunk(x + i, (int)sizeof(*x), ahead);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        const __m256i hi = _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(16));
        const __m256i q = _mm256_or_si256(unpack_nibbles(x[i].qs), hi);
        const __m256i yv = _mm256_loadu_si256((const __m256i *)y[i].qs);
        const __m256i p = dot_u8s8(q, yv);
        const float dy = fp16(y[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(fp16(x[i].d) * dy), _mm256_cvtepi32_ps(p), acc);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(fp16(x[i].m) * dy), _mm256_cvtepi32_ps(dot_u8s8(ones, yv)), acc);
    }
    *s = hsum(acc);
}

void vec_dot_q8_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q8_0 *x = (const block_q8_0 *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    const int64_t nb = n / QK8_0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    const int ahead = ggml_prefetch_distance;
    for (; i + 1 < nb; i += 2) {
        ggml_prefetch_chunk(x + i, 2 * (int)sizeof(*x), ahead);
        const __m256i p0 = dot_s8s8(_mm256_loadu_si256((const __m256i *)x[i].qs), _mm256_loadu_si256((const __m256i *)y[i].qs));
        const __m256i p1 = dot_s8s8(_mm256_loadu_si256((const __m256i *)x[i + 1].qs), _mm256_loadu_si256((const __m256i *)y[i + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(fp16(x[i].d) * fp16(y[i].d)), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(fp16(x[i + 1].d) * fp16(y[i + 1].d)), _mm256_cvtepi32_ps(p1), acc1);
    }
    for (; i < nb; i++) {
        const __m256i p0 = dot_s8s8(_mm256_loadu_si256((const __m256i *)x[i].qs), _mm256_loadu_si256((const __m256i *)y[i].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(fp16(x[i].d) * fp16(y[i].d)), _mm256_cvtepi32_ps(p0), acc0);
    }
    *s = hsum(_mm256_add_ps(acc0, acc1));
}

// ---------------------------------------------------------------- K-quants
//
// NR activation rows as in the AVX-512 kernels (2 with GGML_PREC_HIGH: a row
// and its residual vrow bytes on, vec-dot-simd.h): the weights of a
// superblock are unpacked once. maddubs then madd by the sub-block scales;
// the scales are spread into dword pairs in vector ops (scalar extraction and
// one broadcast per chunk cost more than the dot products).

inline const block_q8_K *act_row(const void *vy, size_t vrow, int r) {
    return (const block_q8_K *)((const char *)vy + (size_t)r * vrow);
}

// 16 int16 scales w (sub-blocks of 16 elements) -> for chunk c (32 elements)
// the madd operand: scale 2c in the low 128-bit lane, 2c + 1 in the high one.
struct scales16 {
    __m256i a, b;  // a: dwords s0..s3 | s8..s11, b: s4..s7 | s12..s15 (each word of the dword = s)
    explicit scales16(__m256i w) : a(_mm256_unpacklo_epi16(w, w)), b(_mm256_unpackhi_epi16(w, w)) {}
    __m256i chunk(int c) const {
        const __m256i &src = (c / 2) % 2 ? b : a;
        const int i = 4 * (c / 4) + 2 * (c % 2);
        return _mm256_permutevar8x32_epi32(src, _mm256_setr_epi32(i, i, i, i, i + 1, i + 1, i + 1, i + 1));
    }
};
// 8 scales of sub-blocks of 32 (bytes 0..7 of sm): for 32-element chunk j one broadcast word
inline __m256i scale8(__m128i w8, int j) {  // w8: 8 int16
    return _mm256_broadcastw_epi16(_mm_srli_si128(w8, 2 * j));
}
inline __m256i scale8_idx(__m128i w8, int j) {
    switch (j) {
        case 0: return scale8(w8, 0);
        case 1: return scale8(w8, 1);
        case 2: return scale8(w8, 2);
        case 3: return scale8(w8, 3);
        case 4: return scale8(w8, 4);
        case 5: return scale8(w8, 5);
        case 6: return scale8(w8, 6);
        default: return scale8(w8, 7);
    }
}

template <int NR>
void dot_q2_K(int64_t n, float *s, const void *vx, const void *vy, size_t vrow) {
    const block_q2_K *x = (const block_q2_K *)vx;
    const int64_t nb = n / QK_K;
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    const int ahead = ggml_prefetch_distance;
    for (int64_t i = 0; i < nb; i++) {
        ggml_prefetch_chunk(x + i, (int)sizeof(*x), ahead);
        const __m128i sv = _mm_loadu_si128((const __m128i *)x[i].scales);
        const scales16 sc(_mm256_cvtepu8_epi16(_mm_and_si128(sv, _mm_set1_epi8(0x0F))));
        const __m256i mn = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sv, 4), _mm_set1_epi8(0x0F)));
        __m256i u[8], scl[8];
        for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            for (int j = 0; j < 4; j++) u[4 * h + j] = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
        }
        for (int c = 0; c < 8; c++) scl[c] = sc.chunk(c);
        const float xd = fp16(x[i].d), xm = fp16(x[i].dmin);
        for (int r = 0; r < NR; r++) {
            const block_q8_K *y = act_row(vy, vrow, r) + i;
            __m256i sumi = _mm256_setzero_si256();
            for (int c = 0; c < 8; c++)
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(u[c], _mm256_loadu_si256((const __m256i *)(y->qs + 32 * c))), scl[c]));
            const __m256i mins = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y->bsums), mn);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(y->d * xd), _mm256_cvtepi32_ps(sumi), acc);
            accm = _mm256_fmadd_ps(_mm256_set1_ps(y->d * xm), _mm256_cvtepi32_ps(mins), accm);
        }
    }
    *s = hsum(acc) - hsum(accm);
}

template <int NR>
void dot_q3_K(int64_t n, float *s, const void *vx, const void *vy, size_t vrow) {
    const block_q3_K *x = (const block_q3_K *)vx;
    const int64_t nb = n / QK_K;
    const __m256i m3 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
    __m256 acc = _mm256_setzero_ps();
    const int ahead = ggml_prefetch_distance;
    for (int64_t i = 0; i < nb; i++) {
        ggml_prefetch_chunk(x + i, (int)sizeof(*x), ahead);
        const __m256i w16 = q3k_scales16(x[i].scales);
        const scales16 sc(w16);
        const __m256i hm = _mm256_loadu_si256((const __m256i *)x[i].hmask);
        __m256i u[8], scl[8];
        for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            for (int j = 0; j < 4; j++) {
                const int c = 4 * h + j;
                // u = low 2 bits | hmask bit c moved straight to bit 2 (0..7); value = u - 4.
                // A word shift by at most 5 brings nothing from the other byte into bit 2.
                const __m256i hs = c == 0 ? _mm256_slli_epi16(hm, 2) : c == 1 ? _mm256_slli_epi16(hm, 1) : _mm256_srli_epi16(hm, c - 2);
                u[c] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3), _mm256_and_si256(hs, four));
            }
        }
        for (int c = 0; c < 8; c++) scl[c] = sc.chunk(c);
        const float xd = fp16(x[i].d);
        for (int r = 0; r < NR; r++) {
            const block_q8_K *y = act_row(vy, vrow, r) + i;
            // - 4 sum_k sc_k bsums_k in integers
            __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(),
                                            _mm256_slli_epi32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y->bsums), w16), 2));
            for (int c = 0; c < 8; c++)
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(u[c], _mm256_loadu_si256((const __m256i *)(y->qs + 32 * c))), scl[c]));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(y->d * xd), _mm256_cvtepi32_ps(sumi), acc);
        }
    }
    *s = hsum(acc);
}

// q4_K, q5_K (Q5: a fifth bit per quant): sub-blocks of 32 with scales and mins.
template <bool Q5, int NR>
void dot_q45_K(int64_t n, float *s, const void *vx, const void *vy, size_t vrow) {
    using BX = typename std::conditional<Q5, block_q5_K, block_q4_K>::type;
    const BX *x = (const BX *)vx;
    const int64_t nb = n / QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    const int ahead = ggml_prefetch_distance;
    for (int64_t i = 0; i < nb; i++) {
        ggml_prefetch_chunk(x + i, (int)sizeof(*x), ahead);
        const __m128i sm = scales_q45(x[i].scales);
        const __m128i w8 = _mm_cvtepu8_epi16(sm);
        const __m256i mn = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm));  // min of sub-block k / 2 at word k
        __m256i qh = _mm256_setzero_si256();
        if (Q5) qh = _mm256_loadu_si256((const __m256i *)((const block_q5_K *)(const void *)(x + i))->qh);
        __m256i u[8], scl[8];
        for (int j = 0; j < 4; j++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * j));
            u[2 * j] = _mm256_and_si256(q, m4);
            u[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (Q5) {
                u[2 * j] = _mm256_or_si256(u[2 * j], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one), 4));
                u[2 * j + 1] = _mm256_or_si256(u[2 * j + 1], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one), 4));
            }
        }
        for (int c = 0; c < 8; c++) scl[c] = scale8_idx(w8, c);
        const float xd = fp16(x[i].d), xm = fp16(x[i].dmin);
        for (int r = 0; r < NR; r++) {
            const block_q8_K *y = act_row(vy, vrow, r) + i;
            __m256i sumi = _mm256_setzero_si256();
            for (int c = 0; c < 8; c++)
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(u[c], _mm256_loadu_si256((const __m256i *)(y->qs + 32 * c))), scl[c]));
            const __m256i mins = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y->bsums), mn);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(y->d * xd), _mm256_cvtepi32_ps(sumi), acc);
            accm = _mm256_fmadd_ps(_mm256_set1_ps(y->d * xm), _mm256_cvtepi32_ps(mins), accm);
        }
    }
    *s = hsum(acc) - hsum(accm);
}

// q6_K: u = 4 low bits | 2 high bits << 4 (0..63), value u - 32 (through the
// block sums in integers); 16 sub-blocks of 16 with int8 scales.
template <int NR>
void dot_q6_K(int64_t n, float *s, const void *vx, const void *vy, size_t vrow) {
    const block_q6_K *x = (const block_q6_K *)vx;
    const int64_t nb = n / QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    const int ahead = ggml_prefetch_distance;
    for (int64_t i = 0; i < nb; i++) {
        ggml_prefetch_chunk(x + i, (int)sizeof(*x), ahead);
        const __m256i w16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        const scales16 sc(w16);
        __m256i u[8], scl[8];
        for (int h = 0; h < 2; h++) {
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h));
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h));
            u[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4));
            u[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4));
            u[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4));
            u[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4));
        }
        for (int c = 0; c < 8; c++) scl[c] = sc.chunk(c);
        const float xd = fp16(x[i].d);
        for (int r = 0; r < NR; r++) {
            const block_q8_K *y = act_row(vy, vrow, r) + i;
            __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(),
                                            _mm256_slli_epi32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y->bsums), w16), 5));
            for (int c = 0; c < 8; c++)
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(u[c], _mm256_loadu_si256((const __m256i *)(y->qs + 32 * c))), scl[c]));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(y->d * xd), _mm256_cvtepi32_ps(sumi), acc);
        }
    }
    *s = hsum(acc);
}

void vec_dot_q2_K_q8_K(int64_t n, float *s, const void *x, const void *y) { dot_q2_K<1>(n, s, x, y, 0); }
void vec_dot_q3_K_q8_K(int64_t n, float *s, const void *x, const void *y) { dot_q3_K<1>(n, s, x, y, 0); }
void vec_dot_q4_K_q8_K(int64_t n, float *s, const void *x, const void *y) { dot_q45_K<false, 1>(n, s, x, y, 0); }
void vec_dot_q5_K_q8_K(int64_t n, float *s, const void *x, const void *y) { dot_q45_K<true, 1>(n, s, x, y, 0); }
void vec_dot_q6_K_q8_K(int64_t n, float *s, const void *x, const void *y) { dot_q6_K<1>(n, s, x, y, 0); }

// ---------------------------------------------------------------- floats

void vec_dot_f32(int64_t n, float *s, const void *vx, const void *vy) {
    const float *x = (const float *)vx, *y = (const float *)vy;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    const int ahead = ggml_prefetch_distance;
    for (; i + 32 <= n; i += 32) {
        ggml_prefetch_chunk(x + i, 32 * (int)sizeof(*x), ahead);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
    float r = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) r += x[i] * y[i];
    *s = r;
}

inline __m256 load_f16(const ggml_fp16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

void vec_dot_f16(int64_t n, float *s, const void *vx, const void *vy) {
    const ggml_fp16_t *x = (const ggml_fp16_t *)vx, *y = (const ggml_fp16_t *)vy;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    const int ahead = ggml_prefetch_distance;
    for (; i + 32 <= n; i += 32) {
        ggml_prefetch_chunk(x + i, 32 * (int)sizeof(*x), ahead);
        a0 = _mm256_fmadd_ps(load_f16(x + i), load_f16(y + i), a0);
        a1 = _mm256_fmadd_ps(load_f16(x + i + 8), load_f16(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(load_f16(x + i + 16), load_f16(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(load_f16(x + i + 24), load_f16(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load_f16(x + i), load_f16(y + i), a0);
    float r = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) r += fp16(x[i]) * fp16(y[i]);
    *s = r;
}

inline __m256 load_bf16(const ggml_bf16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
inline float bf16(ggml_bf16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

void vec_dot_bf16(int64_t n, float *s, const void *vx, const void *vy) {
    const ggml_bf16_t *x = (const ggml_bf16_t *)vx, *y = (const ggml_bf16_t *)vy;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    const int ahead = ggml_prefetch_distance;
    for (; i + 32 <= n; i += 32) {
        ggml_prefetch_chunk(x + i, 32 * (int)sizeof(*x), ahead);
        a0 = _mm256_fmadd_ps(load_bf16(x + i), load_bf16(y + i), a0);
        a1 = _mm256_fmadd_ps(load_bf16(x + i + 8), load_bf16(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(load_bf16(x + i + 16), load_bf16(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(load_bf16(x + i + 24), load_bf16(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load_bf16(x + i), load_bf16(y + i), a0);
    float r = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) r += bf16(x[i]) * bf16(y[i]);
    *s = r;
}

// F16 / BF16 weights against f32 activations (vec_dot_f32, GGML_PREC_HIGH):
// the rows are exact, no residual to load.
template <typename L>
inline float dot_float_f32(int64_t n, const void *w, int wsize, const float *y, L load) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const int ahead = ggml_prefetch_distance;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        ggml_prefetch_chunk((const char *)w + i * wsize, 32 * wsize, ahead);
        a0 = _mm256_fmadd_ps(load(i), _mm256_loadu_ps(y + i), a0);
        a1 = _mm256_fmadd_ps(load(i + 8), _mm256_loadu_ps(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(load(i + 16), _mm256_loadu_ps(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(load(i + 24), _mm256_loadu_ps(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load(i), _mm256_loadu_ps(y + i), a0);
    return hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}
void vec_dot_f16_f32(int64_t n, float *s, const void *vx, const void *vy) {
    const ggml_fp16_t *x = (const ggml_fp16_t *)vx;
    const float *y = (const float *)vy;
    float r = dot_float_f32(n, vx, 2, y, [&](int64_t i) { return load_f16(x + i); });
    for (int64_t i = n / 8 * 8; i < n; i++) r += fp16(x[i]) * y[i];
    *s = r;
}
void vec_dot_bf16_f32(int64_t n, float *s, const void *vx, const void *vy) {
    const ggml_bf16_t *x = (const ggml_bf16_t *)vx;
    const float *y = (const float *)vy;
    float r = dot_float_f32(n, vx, 2, y, [&](int64_t i) { return load_bf16(x + i); });
    for (int64_t i = n / 8 * 8; i < n; i++) r += bf16(x[i]) * y[i];
    *s = r;
}

// ---------------------------------------------------------------- quantizers

// roundf (half away from zero), as the reference quantizers round.
inline __m256 round_away(__m256 v) {
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 sign = _mm256_and_ps(v, _mm256_set1_ps(-0.0f));
    const __m256 half = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(v, t)), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    return _mm256_add_ps(t, _mm256_and_ps(half, _mm256_or_ps(sign, _mm256_set1_ps(1.0f))));
}

inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

inline float hmax(__m256 v) {
    __m128 r = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_max_ps(r, _mm_movehl_ps(r, r));
    r = _mm_max_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

// Quantize 32 floats with scale id into 32 int8 (in element order); returns
// the sum of the quants.
inline int quant32(const float *x, float id, int8_t *q) {
    const __m256 vid = _mm256_set1_ps(id);
    __m256i i32[4];
    for (int k = 0; k < 4; k++) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), vid);
        v = round_away(v);
        i32[k] = _mm256_cvtps_epi32(v);
    }
    const __m256i s = _mm256_add_epi32(_mm256_add_epi32(i32[0], i32[1]), _mm256_add_epi32(i32[2], i32[3]));
    // packs interleave 128-bit lanes; the permute restores element order
    __m256i p16a = _mm256_packs_epi32(i32[0], i32[1]), p16b = _mm256_packs_epi32(i32[2], i32[3]);
    __m256i p8 = _mm256_packs_epi16(p16a, p16b);
    p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, p8);
    return hsum_i32(s);
}

void quantize_row_q8_0(const float *x, void *vy, int64_t n) {
    block_q8_0 *y = (block_q8_0 *)vy;
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        __m256 m = abs_ps(_mm256_loadu_ps(x));
        for (int k = 1; k < 4; k++) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + 8 * k)));
        const float amax = hmax(m), d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        quant32(x, id, y[i].qs);
    }
}

void quantize_row_q8_1(const float *x, void *vy, int64_t n) {
    block_q8_1 *y = (block_q8_1 *)vy;
    for (int64_t i = 0; i < n / QK8_1; i++, x += QK8_1) {
        __m256 m = abs_ps(_mm256_loadu_ps(x));
        for (int k = 1; k < 4; k++) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + 8 * k)));
        const float amax = hmax(m), d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        const int sum = quant32(x, id, y[i].qs);
        y[i].s = _cvtss_sh((float)sum * d, _MM_FROUND_TO_NEAREST_INT);
    }
}

void quantize_row_q8_K(const float *x, void *vy, int64_t n) {
    block_q8_K *y = (block_q8_K *)vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        __m256 m = abs_ps(_mm256_loadu_ps(x));
        for (int k = 1; k < QK_K / 8; k++) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + 8 * k)));
        const float amax = hmax(m), d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = d;
        for (int c = 0; c < QK_K / 32; c++) quant32(x + 32 * c, id, y[i].qs + 32 * c);
        for (int k = 0; k < QK_K / 16; k++) {
            const __m128i v = _mm_loadu_si128((const __m128i *)(y[i].qs + 16 * k));
            y[i].bsums[k] = (int16_t)hsum_i32(_mm256_madd_epi16(_mm256_cvtepi8_epi16(v), _mm256_set1_epi16(1)));
        }
    }
}

// fp32 -> fp16 with round-to-nearest-even (the hardware conversion is exact
// for subnormals, inf and nan like the reference).
void f16_from_float(const float *x, void *vy, int64_t n) {
    ggml_fp16_t *y = (ggml_fp16_t *)vy;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

// ---------------------------------------------------------------- q8x

// The q8x / q8xh activation layouts (vec-dot-simd.h) in 256-bit registers:
// the same bytes the AVX-512 quantizers write, q and df from this family's
// own q8_0 quantizer (byte-identical to the reference).
inline __m256i round_q8_avx2(__m256 v) {  // round half away, clamp to +-127, NaN -> 0
    const __m256 r = _mm256_min_ps(_mm256_max_ps(round_away(v), _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
    return _mm256_cvttps_epi32(_mm256_and_ps(r, _mm256_cmp_ps(v, v, _CMP_ORD_Q)));
}

template <bool H>
void quantize_q8x_avx2(const float *x, void *vy, int64_t k) {
    constexpr size_t GROUP = H ? GGML_Q8XH_GROUP : GGML_Q8X_GROUP;
    constexpr size_t DY = H ? 256 : 128, NS = DY + 64, SD = DY + 128;
    const int64_t nb = k / 32, ng = (nb + 3) / 4;
    uint8_t *y = (uint8_t *)vy;
    for (int64_t g = 0; g < ng; g++) {
        uint8_t *grp = y + g * GROUP;
        int8_t *qa = (int8_t *)grp, *ra = (int8_t *)grp + 128;
        float *dy = (float *)(grp + DY), *sd = (float *)(grp + SD);
        int32_t *ns = (int32_t *)(grp + NS);
        for (int b = 0; b < 4; b++) {
            const int64_t blk = 4 * g + b;
            int8_t q[32], e[32];
            float step = 0.0f;
            if (blk < nb) {
                block_q8_0 t;
                quantize_row_q8_0(x + 32 * blk, &t, 32);
                memcpy(q, t.qs, 32);
                const float df = fp16(t.d);
                step = df;
                if (H) {  // the residual x - df q on the grid df/128
                    const __m256 vdf = _mm256_set1_ps(df), vir = _mm256_set1_ps(df != 0.0f ? 128.0f / df : 0.0f);
                    for (int c = 0; c < 4; c++) {
                        const __m256 qf = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + 8 * c))));
                        const __m256 r = _mm256_fnmadd_ps(vdf, qf, _mm256_loadu_ps(x + 32 * blk + 8 * c));
                        alignas(32) int32_t v[8];
                        _mm256_store_si256((__m256i *)v, round_q8_avx2(_mm256_mul_ps(r, vir)));
                        for (int j = 0; j < 8; j++) e[8 * c + j] = (int8_t)v[j];
                    }
                    step = df / 128.0f;  // exact: a power-of-two division
                }
            } else {  // zero padding: contributes 0 to every dot
                memset(q, 0, 32);
                memset(e, 0, 32);
            }
            memcpy(qa + 16 * b, q, 16);
            memcpy(qa + 64 + 16 * b, q + 16, 16);
            if (H) {
                memcpy(ra + 16 * b, e, 16);
                memcpy(ra + 64 + 16 * b, e + 16, 16);
            }
            int32_t st = 0;
            for (int l = 0; l < 4; l++) {
                int32_t ls = 0;
                for (int i = 0; i < 4; i++) {
                    const int a = 4 * l + i, c = 16 + 4 * l + i;
                    ls += H ? 128 * (q[a] + q[c]) + e[a] + e[c] : q[a] + q[c];
                }
                ns[4 * b + l] = -ls;
                st += ls;
                dy[4 * b + l] = step;
                sd[4 * b + l] = 0.0f;
            }
            sd[4 * b] = step * (float)st;
        }
    }
}
void q8x_quantize_avx2(const float *x, void *y, int64_t k) { quantize_q8x_avx2<false>(x, y, k); }
void q8xh_quantize_avx2(const float *x, void *y, int64_t k) { quantize_q8x_avx2<true>(x, y, k); }

// Weight-side unpacking of four blocks into the q8x order, two registers a
// half: u[h] (low halves of blocks 2h, 2h+1), v[h] (high halves), d and m per
// lane (lane l of half h: block 2h + l / 4). S: the fixed offset shift
// (weight = d (u - 2^S)), -1 with a stored minimum (d u + m); SIGNED: int8
// weights (q8_0), which maddubs takes as |w| against sign(w) y.
inline __m256 lanes4x(__m128 v, int h) {
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), h ? _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3)
                                                                : _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
}
inline __m128 fp16x4_avx2(ggml_fp16_t a, ggml_fp16_t b, ggml_fp16_t c, ggml_fp16_t e) {
    const uint64_t v = (uint64_t)a | ((uint64_t)b << 16) | ((uint64_t)c << 32) | ((uint64_t)e << 48);
    return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)v));
}
inline __m256i load2x16(const void *a, const void *b) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)a)), _mm_loadu_si128((const __m128i *)b), 1);
}
template <class B>
inline void nibbles4x(const B *x, __m256i *u, __m256i *v) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int h = 0; h < 2; h++) {
        const __m256i t = load2x16(x[2 * h].qs, x[2 * h + 1].qs);
        u[h] = _mm256_and_si256(t, m4);
        v[h] = _mm256_and_si256(_mm256_srli_epi16(t, 4), m4);
    }
}
// Fifth bits: bit j of qh -> 16 in byte j. The qh words of blocks 2h and
// 2h + 1 in one broadcast qword; one byte shuffle per register takes the qh
// byte of each element (low halves: bits 0-15, high halves: 16-31), then the
// element's own bit is tested against a per-byte mask.
template <class B>
inline void high4x(const B *x, __m256i *u, __m256i *v) {
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL), sixteen = _mm256_set1_epi8(16);
    const __m256i lo = _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0404040404040404LL, 0x0505050505050505LL);
    const __m256i hi = _mm256_setr_epi64x(0x0202020202020202LL, 0x0303030303030303LL, 0x0606060606060606LL, 0x0707070707070707LL);
    for (int h = 0; h < 2; h++) {
        uint32_t a, b;
        memcpy(&a, x[2 * h].qh, 4);
        memcpy(&b, x[2 * h + 1].qh, 4);
        const __m256i q = _mm256_set1_epi64x((long long)((uint64_t)a | ((uint64_t)b << 32)));
        auto spread = [&](__m256i sel) {
            const __m256i t = _mm256_and_si256(_mm256_shuffle_epi8(q, sel), bit);
            return _mm256_and_si256(_mm256_cmpeq_epi8(t, bit), sixteen);
        };
        u[h] = _mm256_or_si256(u[h], spread(lo));
        v[h] = _mm256_or_si256(v[h], spread(hi));
    }
}
template <class B>
inline void d4x(const B *x, __m256 *d) {
    const __m128 f = fp16x4_avx2(x[0].d, x[1].d, x[2].d, x[3].d);
    d[0] = lanes4x(f, 0);
    d[1] = lanes4x(f, 1);
}
template <class B>
inline void m4x(const B *x, __m256 *m) {
    const __m128 f = fp16x4_avx2(x[0].m, x[1].m, x[2].m, x[3].m);
    m[0] = lanes4x(f, 0);
    m[1] = lanes4x(f, 1);
}

struct X2_q4_0 {
    using B = block_q4_0;
    static constexpr int S = 3;
    static constexpr bool SIGNED = false;
    static void load(const B *x, __m256i *u, __m256i *v, __m256 *d, __m256 *) { nibbles4x(x, u, v); d4x(x, d); }
};
struct X2_q4_1 {
    using B = block_q4_1;
    static constexpr int S = -1;
    static constexpr bool SIGNED = false;
    static void load(const B *x, __m256i *u, __m256i *v, __m256 *d, __m256 *m) { nibbles4x(x, u, v); d4x(x, d); m4x(x, m); }
};
struct X2_q5_0 {
    using B = block_q5_0;
    static constexpr int S = 4;
    static constexpr bool SIGNED = false;
    static void load(const B *x, __m256i *u, __m256i *v, __m256 *d, __m256 *) { nibbles4x(x, u, v); high4x(x, u, v); d4x(x, d); }
};
struct X2_q5_1 {
    using B = block_q5_1;
    static constexpr int S = -1;
    static constexpr bool SIGNED = false;
    static void load(const B *x, __m256i *u, __m256i *v, __m256 *d, __m256 *m) {
        nibbles4x(x, u, v);
        high4x(x, u, v);
        d4x(x, d);
        m4x(x, m);
    }
};
struct X2_q8_0 {
    using B = block_q8_0;
    static constexpr int S = -1;
    static constexpr bool SIGNED = true;
    static void load(const B *x, __m256i *u, __m256i *v, __m256 *d, __m256 *) {
        for (int h = 0; h < 2; h++) {
            u[h] = load2x16(x[2 * h].qs, x[2 * h + 1].qs);
            v[h] = load2x16(x[2 * h].qs + 16, x[2 * h + 1].qs + 16);
        }
        d4x(x, d);
    }
};

// u8 x s8 -> s32 sums of four (maddubs pairs then madd with ones); with SIGNED
// the weights w are int8: |w| against sign(w) y.
template <bool SIGNED>
inline __m256i dot4(__m256i w, __m256i aw, __m256i y) {
    if (SIGNED) return _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(y, w)), _mm256_set1_epi16(1));
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, y), _mm256_set1_epi16(1));
}

// One weight row against NC (1..4) activation rows, as dot_q8x (q8x-dot.h):
// the same layout and per-column arithmetic, 256 bits at a time.
template <class X, int NC, bool H>
void dot_q8x_avx2(int64_t k, const void *vx, const void *vy, size_t ys, float *s, size_t ss) {
    constexpr size_t GROUP = H ? GGML_Q8XH_GROUP : GGML_Q8X_GROUP;
    constexpr size_t DY = H ? 256 : 128, NS = DY + 64, SD = DY + 128;
    constexpr bool OFF = X::S >= 0, MIN = X::S < 0 && !X::SIGNED;
    using B = typename X::B;
    const B *x = (const B *)vx;
    const int64_t nb = k / 32, ng = (nb + 3) / 4;
    __m256 acc[NC], accm[NC];
    for (int c = 0; c < NC; c++) acc[c] = accm[c] = _mm256_setzero_ps();
    const uint8_t *y0 = (const uint8_t *)vy;
    B tail[4];
    const int ahead = ggml_prefetch_distance;
    for (int64_t g = 0; g < ng; g++) {
        const B *xg = x + 4 * g;
        if (nb - 4 * g < 4) {  // the last partial group: zero blocks (d = m = 0) from a copy
            memset(tail, 0, sizeof(tail));
            memcpy(tail, xg, sizeof(B) * (size_t)(nb - 4 * g));
            xg = tail;
        }
        ggml_prefetch_chunk(x + 4 * g, 4 * (int)sizeof(B), ahead);
        __m256i u[2], v[2], au[2], av[2];
        __m256 dx[2], mx[2];
        X::load(xg, u, v, dx, mx);
        if (X::SIGNED)
            for (int h = 0; h < 2; h++) au[h] = _mm256_sign_epi8(u[h], u[h]), av[h] = _mm256_sign_epi8(v[h], v[h]);
        const uint8_t *yg = y0 + g * GROUP;
        for (int c = 0; c < NC; c++) {
            const uint8_t *yc = yg + c * ys;
            for (int h = 0; h < 2; h++) {
                auto ld = [&](size_t off) { return _mm256_loadu_si256((const __m256i *)(yc + off + 32 * h)); };
                // dot(u, y[o0]) + dot(v, y[o1]) in s32 lanes of four. Unsigned quants
                // (u <= 31): each maddubs pair is at most 2 * 31 * 127, so the two
                // pair vectors add exactly in s16 before one madd (by `mul`: 128 for
                // the q8xh row, which takes the shift of its sum into the madd).
                auto dot8 = [&](size_t o0, size_t o1, short mul) {
                    if (X::SIGNED) {
                        const __m256i p = _mm256_add_epi32(dot4<true>(u[h], au[h], ld(o0)), dot4<true>(v[h], av[h], ld(o1)));
                        return mul == 1 ? p : _mm256_slli_epi32(p, 7);
                    }
                    return _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(u[h], ld(o0)), _mm256_maddubs_epi16(v[h], ld(o1))),
                                             _mm256_set1_epi16(mul));
                };
                __m256i p = H ? _mm256_add_epi32(dot8(0, 64, 128), dot8(128, 192, 1)) : dot8(0, 64, 1);
                if (OFF) p = _mm256_add_epi32(p, _mm256_slli_epi32(ld(NS), X::S > 0 ? X::S : 0));
                const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(p), _mm256_loadu_ps((const float *)(yc + DY + 32 * h)));
                acc[c] = _mm256_fmadd_ps(f, dx[h], acc[c]);
                if (MIN) accm[c] = _mm256_fmadd_ps(mx[h], _mm256_loadu_ps((const float *)(yc + SD + 32 * h)), accm[c]);
            }
        }
    }
    for (int c = 0; c < NC; c++) *(float *)((char *)s + c * ss) = hsum(MIN ? _mm256_add_ps(acc[c], accm[c]) : acc[c]);
}

// nc 1..8: up to four columns per pass (16 registers), each column computed
// the same way whatever the tile.
template <class X, bool H>
void dot_q8x_avx2_n(int64_t k, const void *x, const void *y, size_t ys, float *s, size_t ss, int nc) {
    for (int c0 = 0; c0 < nc; c0 += 4) {
        const void *yc = (const char *)y + c0 * ys;
        float *sc = (float *)((char *)s + c0 * ss);
        switch (nc - c0 >= 4 ? 4 : nc - c0) {
            case 1: dot_q8x_avx2<X, 1, H>(k, x, yc, ys, sc, ss); break;
            case 2: dot_q8x_avx2<X, 2, H>(k, x, yc, ys, sc, ss); break;
            case 3: dot_q8x_avx2<X, 3, H>(k, x, yc, ys, sc, ss); break;
            default: dot_q8x_avx2<X, 4, H>(k, x, yc, ys, sc, ss); break;
        }
    }
}

// F16 weights x fp16-rounded activations stored as f32 (q8x dot_f16).
void dot_f16_rows_avx2(int64_t k, const void *vx, const void *vy, size_t ys, float *s, size_t ss, int nc) {
    const ggml_fp16_t *x = (const ggml_fp16_t *)vx;
    for (int c = 0; c < nc; c++) {
        const float *y = (const float *)((const char *)vy + c * ys);
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;
        int64_t i = 0;
        for (; i + 16 <= k; i += 16) {
            a0 = _mm256_fmadd_ps(load_f16(x + i), _mm256_loadu_ps(y + i), a0);
            a1 = _mm256_fmadd_ps(load_f16(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
        }
        float r = hsum(_mm256_add_ps(a0, a1));
        for (; i < k; i++) r += fp16(x[i]) * y[i];
        *(float *)((char *)s + c * ss) = r;
    }
}
void f16r_convert_avx2(const float *x, void *vy, int64_t k) {
    float *y = (float *)vy;
    int64_t i = 0;
    for (; i + 8 <= k; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
    for (; i < k; i++) y[i] = fp16(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT));
}

ggml_q8x_kernels make_q8x_avx2() {
    ggml_q8x_kernels q;
    memset(&q, 0, sizeof(q));
    q.quantize = q8x_quantize_avx2;
    q.quantize_hi = q8xh_quantize_avx2;
    q.dot_f16 = dot_f16_rows_avx2;
    q.f16r_convert = f16r_convert_avx2;
    q.dot[GGML_TYPE_Q4_0] = dot_q8x_avx2_n<X2_q4_0, false>;
    q.dot[GGML_TYPE_Q4_1] = dot_q8x_avx2_n<X2_q4_1, false>;
    q.dot[GGML_TYPE_Q5_0] = dot_q8x_avx2_n<X2_q5_0, false>;
    q.dot[GGML_TYPE_Q5_1] = dot_q8x_avx2_n<X2_q5_1, false>;
    q.dot[GGML_TYPE_Q8_0] = dot_q8x_avx2_n<X2_q8_0, false>;
    q.dot_hi[GGML_TYPE_Q4_0] = dot_q8x_avx2_n<X2_q4_0, true>;
    q.dot_hi[GGML_TYPE_Q4_1] = dot_q8x_avx2_n<X2_q4_1, true>;
    q.dot_hi[GGML_TYPE_Q5_0] = dot_q8x_avx2_n<X2_q5_0, true>;
    q.dot_hi[GGML_TYPE_Q5_1] = dot_q8x_avx2_n<X2_q5_1, true>;
    q.dot_hi[GGML_TYPE_Q8_0] = dot_q8x_avx2_n<X2_q8_0, true>;
    // mat-vec too: in cache, one column, faster than this family's vec_dot
    // for every type (Xeon VM: q4_0 14 vs 8, q8_0 25 vs 20 GB/s)
    for (ggml_type t : {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0}) q.min_cols[t] = 1;
    return q;
}

}  // namespace

const ggml_q8x_kernels *ggml_cpu_q8x_avx2(void) {
    static const ggml_q8x_kernels q = make_q8x_avx2();
    return &q;
}

void ggml_cpu_set_dot_resid_avx2(ggml_vec_dot2_t *t) {
    t[GGML_TYPE_Q2_K] = dot_q2_K<2>;
    t[GGML_TYPE_Q3_K] = dot_q3_K<2>;
    t[GGML_TYPE_Q4_K] = dot_q45_K<false, 2>;
    t[GGML_TYPE_Q5_K] = dot_q45_K<true, 2>;
    t[GGML_TYPE_Q6_K] = dot_q6_K<2>;
}

void ggml_cpu_set_kernels_avx2(struct ggml_cpu_type_traits *t) {
    t[GGML_TYPE_Q4_0].vec_dot = vec_dot_q4_0_q8_0;
    t[GGML_TYPE_Q4_1].vec_dot = vec_dot_q4_1_q8_1;
    t[GGML_TYPE_Q5_0].vec_dot = vec_dot_q5_0_q8_0;
    t[GGML_TYPE_Q5_1].vec_dot = vec_dot_q5_1_q8_1;
    t[GGML_TYPE_Q8_0].vec_dot = vec_dot_q8_0_q8_0;
    t[GGML_TYPE_Q2_K].vec_dot = vec_dot_q2_K_q8_K;
    t[GGML_TYPE_Q3_K].vec_dot = vec_dot_q3_K_q8_K;
    t[GGML_TYPE_Q4_K].vec_dot = vec_dot_q4_K_q8_K;
    t[GGML_TYPE_Q5_K].vec_dot = vec_dot_q5_K_q8_K;
    t[GGML_TYPE_Q6_K].vec_dot = vec_dot_q6_K_q8_K;
    t[GGML_TYPE_F32].vec_dot = vec_dot_f32;
    t[GGML_TYPE_F16].vec_dot = vec_dot_f16;
    t[GGML_TYPE_BF16].vec_dot = vec_dot_bf16;
    t[GGML_TYPE_F16].vec_dot_f32 = vec_dot_f16_f32;
    t[GGML_TYPE_BF16].vec_dot_f32 = vec_dot_bf16_f32;
    t[GGML_TYPE_Q8_0].from_float = quantize_row_q8_0;
    t[GGML_TYPE_Q8_1].from_float = quantize_row_q8_1;
    t[GGML_TYPE_Q8_K].from_float = quantize_row_q8_K;
    t[GGML_TYPE_F16].from_float = f16_from_float;
}
