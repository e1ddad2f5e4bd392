// AVX2 + FMA + F16C dot kernels and activation quantizers. Integer dot
// products use maddubs (u8 x s8 -> s16 pairs) then madd (-> s32); the
// quantized weight values are small enough that the s16 pairs never saturate.
#include <immintrin.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include <initializer_list>
#include <type_traits>

#include "ggml-quants.h"
#include "int-dot-avx2.h"
#include "vec-dot-simd.h"

namespace {

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

// One q8_K block of x at scale d (id: its inverse, or 0), as the reference.
void q8_K_block(const float *x, float d, float id, block_q8_K *y) {
    y->d = d;
    for (int c = 0; c < QK_K / 32; c++) quant32(x + 32 * c, id, y->qs + 32 * c);
    for (int k = 0; k < QK_K / 16; k++) {
        const __m128i v = _mm_loadu_si128((const __m128i *)(y->qs + 16 * k));
        y->bsums[k] = (int16_t)hsum_i32(_mm256_madd_epi16(_mm256_cvtepi8_epi16(v), _mm256_set1_epi16(1)));
    }
}

void quantize_row_q8_K(const float *x, void *vy, int64_t n) {
    block_q8_K *y = (block_q8_K *)vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        __m256 m = abs_ps(_mm256_loadu_ps(x));
        for (int k = 1; k < QK_K / 8; k++) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + 8 * k)));
        const float amax = hmax(m), d = amax / 127.0f;
        q8_K_block(x, d, d != 0.0f ? 1.0f / d : 0.0f, &y[i]);
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
            auto value = [&](int a) { return H ? 128 * q[a] + e[a] : q[a]; };
            for (int l = 0; l < 4; l++) {  // lane l of a dot register: elements 4l..4l+3 of both halves
                int32_t ls = 0, hs = 0;
                for (int i = 0; i < 4; i++) ls += value(4 * l + i) + value(16 + 4 * l + i);
                for (int i = 0; i < 8; i++) hs += value(16 * (l % 2) + 8 * (l / 2) + i);  // half l % 2, elements 8 (l / 2) ..
                ns[4 * b + l] = -ls;
                dy[4 * b + l] = step;
                sd[4 * b + l] = step * (float)hs;
            }
        }
    }
}
void q8x_quantize_avx2(const float *x, void *y, int64_t k) { quantize_q8x_avx2<false>(x, y, k); }
void q8xh_quantize_avx2(const float *x, void *y, int64_t k) { quantize_q8x_avx2<true>(x, y, k); }

// F16 weights x fp16-rounded activations stored as f32 (q8x dot_f16), N
// columns (1..8) at once: each stretch of 8 weights converted once for all of
// them, one accumulator a column (N >= 4 of them hide the fma latency; one
// column alone comes only at the edges of a product), the N sums reduced
// together by horizontal adds. Every column's arithmetic is the same whatever
// N and its neighbours: lanes ((0+1)+(2+3))+((4+5)+(6+7)), then the tail, so
// the bits do not depend on the thread count. In prompts' attention (k = 128
// and n_kv) the old kernel's conversion per column and its reduction per
// column were most of the work.
template <int N>
void dot_f16_cols(int64_t k, const ggml_fp16_t *x, const char *vy, size_t ys, float *s, size_t ss) {
    const float *y[N];
    __m256 a[8];
    for (int c = 0; c < 8; c++) a[c] = _mm256_setzero_ps();
    for (int c = 0; c < N; c++) y[c] = (const float *)(vy + c * ys);
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
        const __m256 xv = load_f16(x + i);
        for (int c = 0; c < N; c++) a[c] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(y[c] + i), a[c]);
    }
    // hadd(hadd(a0, a1), hadd(a2, a3)): columns 0..3 by lane, each 128-bit half one half of the sums
    const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    const __m256 u1 = N > 4 ? _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7])) : u0;
    alignas(32) float r[8];
    _mm256_store_ps(r, _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31)));
    for (int c = 0; c < N; c++) {
        for (int64_t j = i; j < k; j++) r[c] += fp16(x[j]) * y[c][j];
        *(float *)((char *)s + c * ss) = r[c];
    }
}

void dot_f16_rows_avx2(int64_t k, const void *vx, const void *vy, size_t ys, float *s, size_t ss, int nc) {
    using fn = void (*)(int64_t, const ggml_fp16_t *, const char *, size_t, float *, size_t);
    static constexpr fn cols[9] = {nullptr,          dot_f16_cols<1>, dot_f16_cols<2>, dot_f16_cols<3>, dot_f16_cols<4>,
                                   dot_f16_cols<5>, dot_f16_cols<6>, dot_f16_cols<7>, dot_f16_cols<8>};
    for (int c = 0; c < nc; c += 8)
        cols[std::min(8, nc - c)](k, (const ggml_fp16_t *)vx, (const char *)vy + c * ys, ys, (float *)((char *)s + c * ss), ss);
}

ggml_q8x_kernels make_q8x_avx2() {
    ggml_q8x_kernels q;
    memset(&q, 0, sizeof(q));
    q.quantize = q8x_quantize_avx2;
    q.quantize_hi = q8xh_quantize_avx2;
    q.dot_f16 = dot_f16_rows_avx2;
    set_int_dots(nullptr, nullptr, &q);
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

void ggml_cpu_set_dot_resid_avx2(ggml_vec_dot2_t *t) { set_int_dots(nullptr, t, nullptr); }

// GGML_PREC_HIGH's q8_K residual on the grid of the row's blocks (ggml-quants.h)
void ggml_quantize_resid_q8_K_avx2(const float *r, const void *vq, void *vy, int64_t n) { ggml_q8_K_resid_rows(r, vq, vy, n, q8_K_block); }

void ggml_cpu_set_kernels_avx2(struct ggml_cpu_type_traits *t) {
    t[GGML_TYPE_Q4_0].vec_dot = vec_dot_q4_0_q8_0;
    t[GGML_TYPE_Q4_1].vec_dot = vec_dot_q4_1_q8_1;
    t[GGML_TYPE_Q5_0].vec_dot = vec_dot_q5_0_q8_0;
    t[GGML_TYPE_Q5_1].vec_dot = vec_dot_q5_1_q8_1;
    t[GGML_TYPE_Q8_0].vec_dot = vec_dot_q8_0_q8_0;
    set_int_dots(t, nullptr, nullptr);
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
