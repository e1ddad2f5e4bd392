// AVX2 + FMA + F16C dot kernels and activation quantizers. Integer dot
// products use maddubs (u8 x s8 -> s16 pairs) then madd (-> s32); the
// quantized weight values are small enough that the s16 pairs never saturate.
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "ggml-quants.h"
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

// Eight 32-element chunks, each covering two 16-element sub-blocks with their
// own scale: sum over chunks of scale[k] * dot(u, y) in s32.
inline __m256i scaled_chunk(__m256i u, const int8_t *y, const int8_t *sc2) {
    const __m256i prod = _mm256_maddubs_epi16(u, _mm256_loadu_si256((const __m256i *)y));
    const __m256i scl = _mm256_set_m128i(_mm_set1_epi16(sc2[1]), _mm_set1_epi16(sc2[0]));
    return _mm256_madd_epi16(prod, scl);
}

inline int bsum_dot(const int16_t *bsums, const int8_t *sc) {
    int s = 0;
    for (int k = 0; k < 16; k++) s += bsums[k] * sc[k];
    return s;
}

void vec_dot_q2_K_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q2_K *x = (const block_q2_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    const int64_t nb = n / QK_K;
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    float accm = 0;
    const int ahead = ggml_prefetch_distance;
    for (int64_t i = 0; i < nb; i++) {
        ggml_prefetch_chunk(x + i, (int)sizeof(*x), ahead);
        int8_t sc[16], mn[16];
        for (int k = 0; k < 16; k++) { sc[k] = x[i].scales[k] & 0xF; mn[k] = x[i].scales[k] >> 4; }
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            for (int j = 0; j < 4; j++) {
                const int c = 4 * h + j;
                const __m256i u = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
                sumi = _mm256_add_epi32(sumi, scaled_chunk(u, y[i].qs + 32 * c, sc + 2 * c));
            }
        }
        const float d = y[i].d * fp16(x[i].d), dmin = y[i].d * fp16(x[i].dmin);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        accm += dmin * (float)bsum_dot(y[i].bsums, mn);
    }
    *s = hsum(acc) - accm;
}

// 16 6-bit scales of q3_K, stored minus 32.
inline void q3k_scales(const uint8_t *p, int8_t *out) {
    uint32_t a[4];
    memcpy(a, p, 12);
    const uint32_t k1 = 0x03030303, k2 = 0x0f0f0f0f, t = a[2];
    a[2] = ((a[0] >> 4) & k2) | (((t >> 4) & k1) << 4);
    a[3] = ((a[1] >> 4) & k2) | (((t >> 6) & k1) << 4);
    a[0] = (a[0] & k2) | (((t >> 0) & k1) << 4);
    a[1] = (a[1] & k2) | (((t >> 2) & k1) << 4);
    memcpy(out, a, 16);
    for (int k = 0; k < 16; k++) out[k] = (int8_t)(out[k] - 32);
}

void vec_dot_q3_K_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q3_K *x = (const block_q3_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    const int64_t nb = n / QK_K;
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    const int ahead = ggml_prefetch_distance;
    for (int64_t i = 0; i < nb; i++) {
        ggml_prefetch_chunk(x + i, (int)sizeof(*x), ahead);
        int8_t sc[16];
        q3k_scales(x[i].scales, sc);
        const __m256i hm = _mm256_loadu_si256((const __m256i *)x[i].hmask);
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            for (int j = 0; j < 4; j++) {
                const int c = 4 * h + j;
                // u = low 2 bits | hmask bit << 2 (0..7); value = u - 4
                const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, c), one);
                const __m256i u = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3), _mm256_slli_epi16(hb, 2));
                sumi = _mm256_add_epi32(sumi, scaled_chunk(u, y[i].qs + 32 * c, sc + 2 * c));
            }
        }
        const int off = 4 * bsum_dot(y[i].bsums, sc);
        const float d = y[i].d * fp16(x[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        acc = _mm256_add_ps(acc, _mm256_setr_ps(-d * (float)off, 0, 0, 0, 0, 0, 0, 0));
    }
    *s = hsum(acc);
}

// 8 scales and 8 mins (6 bits each) of q4_K / q5_K.
inline void q4k_scales(const uint8_t *q, uint8_t *sc, uint8_t *mn) {
    for (int j = 0; j < 4; j++) {
        sc[j] = q[j] & 63;
        mn[j] = q[j + 4] & 63;
        sc[j + 4] = (q[j + 8] & 0xF) | ((q[j] >> 6) << 4);
        mn[j + 4] = (q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4);
    }
}

inline int mins_dot(const int16_t *bsums, const uint8_t *mn) {
    int s = 0;
    for (int j = 0; j < 8; j++) s += mn[j] * (bsums[2 * j] + bsums[2 * j + 1]);
    return s;
}

void vec_dot_q4_K_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q4_K *x = (const block_q4_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    const int64_t nb = n / QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();
    float accm = 0;
    const int ahead = ggml_prefetch_distance;
    for (int64_t i = 0; i < nb; i++) {
        ggml_prefetch_chunk(x + i, (int)sizeof(*x), ahead);
        uint8_t sc[8], mn[8];
        q4k_scales(x[i].scales, sc, mn);
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * j));
            const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            const __m256i plo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * j)));
            const __m256i phi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * j + 32)));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(plo, _mm256_set1_epi16(sc[2 * j])));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(phi, _mm256_set1_epi16(sc[2 * j + 1])));
        }
        const float d = y[i].d * fp16(x[i].d), dmin = y[i].d * fp16(x[i].dmin);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        accm += dmin * (float)mins_dot(y[i].bsums, mn);
    }
    *s = hsum(acc) - accm;
}

void vec_dot_q5_K_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q5_K *x = (const block_q5_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    const int64_t nb = n / QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    float accm = 0;
    const int ahead = ggml_prefetch_distance;
    for (int64_t i = 0; i < nb; i++) {
        ggml_prefetch_chunk(x + i, (int)sizeof(*x), ahead);
        uint8_t sc[8], mn[8];
        q4k_scales(x[i].scales, sc, mn);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)x[i].qh);
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * j));
            const __m256i hl = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one), 4);
            const __m256i hh = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one), 4);
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4), hl);
            const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), hh);
            const __m256i plo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * j)));
            const __m256i phi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * j + 32)));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(plo, _mm256_set1_epi16(sc[2 * j])));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(phi, _mm256_set1_epi16(sc[2 * j + 1])));
        }
        const float d = y[i].d * fp16(x[i].d), dmin = y[i].d * fp16(x[i].dmin);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        accm += dmin * (float)mins_dot(y[i].bsums, mn);
    }
    *s = hsum(acc) - accm;
}

void vec_dot_q6_K_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q6_K *x = (const block_q6_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    const int64_t nb = n / QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    const int ahead = ggml_prefetch_distance;
    for (int64_t i = 0; i < nb; i++) {
        ggml_prefetch_chunk(x + i, (int)sizeof(*x), ahead);
        const int8_t *sc = x[i].scales;
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h));
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h));
            // u in 0..63; value = u - 32 (the offset is applied through bsums)
            const __m256i u[4] = {
                _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4)),
                _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4)),
            };
            for (int j = 0; j < 4; j++) {
                const int c = 4 * h + j;
                sumi = _mm256_add_epi32(sumi, scaled_chunk(u[j], y[i].qs + 32 * c, sc + 2 * c));
            }
        }
        const int off = 32 * bsum_dot(y[i].bsums, sc);
        const float d = y[i].d * fp16(x[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        acc = _mm256_add_ps(acc, _mm256_setr_ps(-d * (float)off, 0, 0, 0, 0, 0, 0, 0));
    }
    *s = hsum(acc);
}

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

}  // namespace

void ggml_cpu_set_kernels_avx2(struct ggml_type_traits *t) {
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
    t[GGML_TYPE_Q8_0].from_float = quantize_row_q8_0;
    t[GGML_TYPE_Q8_1].from_float = quantize_row_q8_1;
    t[GGML_TYPE_Q8_K].from_float = quantize_row_q8_K;
    t[GGML_TYPE_F16].from_float = f16_from_float;
}
