// Internal to the AVX2 family: its integer dot kernels (the K-quants and the
// q8x dot), written once for two instruction sets. vec-dot-avx2.cpp compiles
// them for plain AVX2 (Haswell .. Zen 3), int-dot-avxvnni.cpp with AVX-VNNI
// as well (the consumer Intel CPUs without AVX-512 from Alder Lake on, Zen 5):
// there a u8 x s8 dot of four (maddubs, madd with ones, add) is one vpdpbusd,
// and an s16 pair product added to an accumulator (madd, add) one vpdpwssd.
// The sums are the same integers either way (no maddubs pair saturates).
// Internal linkage: each file keeps its own copy, compiled for its own ISA.
#pragma once
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include <initializer_list>
#include <type_traits>

#include "ggml-quants.h"
#include "kquant-scales.h"
#include "vec-dot-simd.h"

#ifdef __AVXVNNI__
#define GGML_AVX2_VNNI 1
#else
#define GGML_AVX2_VNNI 0
#endif

namespace {

inline float fp16(ggml_fp16_t h) { return _cvtsh_ss(h); }

inline float hsum(__m256 v) {
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

// v shifted in 16-bit lanes so that the bits from `from` up of each byte land
// at `to` up: a field inside one byte never takes bits of the other byte of
// its word (the caller masks the field).
inline __m256i move_bits(__m256i v, int from, int to) {
    return from < to ? _mm256_slli_epi16(v, to - from) : from > to ? _mm256_srli_epi16(v, from - to) : v;
}

// The constants of the q8x tiles' loops, made once per call and (hide)
// hidden from GCC: in the one-row kernels it otherwise rebuilt such set1
// vectors inside the loop from a general register (mov, vmovd, vpbroadcast:
// two vector uops each, every group) rather than keep them in registers
// (Zen 4 VM, AVX2 forced, one thread in cache: Q4_0 mat-vec `high` 14.2 ->
// 14.7 GB/s, Q4_1 13.1 -> 14.3). Not in the prompt tiles, whose rows take
// the registers: there the rebuilds were the cheaper choice (hidden, 64
// columns in cache ran 1-3% slower).
struct loop_consts {
    __m256i one = _mm256_set1_epi16(1), w128 = _mm256_set1_epi16(128), b1 = _mm256_set1_epi8(1);
    __m256i magic;  // the float 1.5 2^23's bits, or 0 (scaled_sum)
    __m256 fm = _mm256_set1_ps(12582912.0f);  // 1.5 2^23
    loop_consts(bool magic_bits, bool hide) : magic(_mm256_set1_epi32(magic_bits ? 0x4B400000 : 0)) {
        if (hide) __asm__("" : "+x"(one), "+x"(w128), "+x"(b1), "+x"(magic), "+x"(fm));
    }
    __m256i words(bool hi) const { return hi ? w128 : one; }  // the madd multiplier: 128 for the q8xh row's q
};

// acc + per s32 lane the sum of four u8 x s8 products (ones: 16 words of 1)
inline __m256i dpbusd(__m256i acc, __m256i u, __m256i s, __m256i ones) {
#if GGML_AVX2_VNNI
    (void)ones;
    return _mm256_dpbusd_avx_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), ones));
#endif
}
// acc + per s32 lane the sum of two s16 x s16 products
inline __m256i dpwssd(__m256i acc, __m256i a, __m256i b) {
#if GGML_AVX2_VNNI
    return _mm256_dpwssd_avx_epi32(acc, a, b);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

// ---------------------------------------------------------------- K-quants
//
// NR activation rows as in the AVX-512 kernels (2 with GGML_PREC_HIGH: a row
// and its residual vrow bytes on, vec-dot-simd.h): the weights of a
// superblock are unpacked once. maddubs then dpwssd by the sub-block scales;
// the scales are spread into dword pairs in vector ops (scalar extraction and
// one broadcast per chunk cost more than the dot products).

inline const block_q8_K *act_row(const void *vy, size_t vrow, int r) {
    return (const block_q8_K *)((const char *)vy + (size_t)r * vrow);
}

// For q2_K, q4_K and q5_K a chunk's madd operand (a scale word per element
// pair) comes from one in-lane byte shuffle of a per-superblock source, its
// index vector a constant (a memory operand), instead of a lane-crossing
// permute or a shift and a broadcast per chunk (port 5 only on Intel): +4-7%
// in cache. word_idx: every word of a lane takes word c of that lane;
// byte_idx: the low lane zero-extends byte 2c, the high lane byte 2c + 1.
// shuf_table<N>: N constant byte-shuffle index vectors, byte j of lane L of
// vector c being f(c, L, j).
template <int N>
struct shuf_table {
    alignas(32) int8_t b[N][32];
    template <class F>
    constexpr explicit shuf_table(F f) : b() {
        for (int c = 0; c < N; c++)
            for (int j = 0; j < 32; j++) b[c][j] = (int8_t)f(c, j / 16, j % 16);
    }
    __m256i operator[](int c) const { return _mm256_load_si256((const __m256i *)b[c]); }
};
inline constexpr shuf_table<8> word_idx([](int c, int, int j) { return 2 * c + j % 2; });
inline constexpr shuf_table<8> byte_idx([](int c, int lane, int j) { return j % 2 ? -128 : 2 * c + lane; });

// 16 int16 scales w (sub-blocks of 16 elements) -> for chunk c (32 elements)
// the madd operand: scale 2c in the low 128-bit lane, 2c + 1 in the high one.
// (The even and odd scales split across the lanes once, then one shuffle per
// chunk as for q2_K below, measured the same for q3_K and 7% slower for q6_K.)
struct scales16 {
    __m256i a, b;  // a: dwords s0..s3 | s8..s11, b: s4..s7 | s12..s15 (each word of the dword = s)
    explicit scales16(__m256i w) : a(_mm256_unpacklo_epi16(w, w)), b(_mm256_unpackhi_epi16(w, w)) {}
    __m256i chunk(int c) const {
        const __m256i &src = (c / 2) % 2 ? b : a;
        const int i = 4 * (c / 4) + 2 * (c % 2);
        return _mm256_permutevar8x32_epi32(src, _mm256_setr_epi32(i, i, i, i, i + 1, i + 1, i + 1, i + 1));
    }
};
// q2_K: the 16 scales are the low nibbles of its scale bytes, zero-extended
// straight from the bytes by the shuffle.
struct scales16_u4 {
    __m256i src;
    explicit scales16_u4(const uint8_t *p) : src(_mm256_and_si256(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p)), _mm256_set1_epi8(0x0F))) {}
    __m256i chunk(int c) const { return _mm256_shuffle_epi8(src, byte_idx[c]); }
};
// 8 scales of sub-blocks of 32 (w8: 8 int16): for chunk j the one word in every word.
struct scales8 {
    __m256i src;
    explicit scales8(__m128i w8) : src(_mm256_broadcastsi128_si256(w8)) {}
    __m256i chunk(int c) const { return _mm256_shuffle_epi8(src, word_idx[c]); }
};

// sumi[r] + the superblock's sub-block dots of activation row r: chunk c
// (32 weights u(c), unpacked once for all rows) against the row's
// activations 32c .. 32c + 31, scaled by scl(c) (a scale per 16-element
// lane). Chunk by chunk, not all eight unpacked first: with two rows the
// eight chunks and their scales took every register and were spilled.
template <int NR, class U, class SC>
inline void dot_chunks(const block_q8_K *const *y, U &&u, SC &&scl, __m256i *sumi) {
    for (int c = 0; c < 8; c++) {
        const __m256i w = u(c), sc = scl(c);
        for (int r = 0; r < NR; r++)
            sumi[r] = dpwssd(sumi[r], _mm256_maddubs_epi16(w, _mm256_loadu_si256((const __m256i *)(y[r]->qs + 32 * c))), sc);
    }
}
// The NR activation rows' superblock i.
template <int NR>
inline void act_rows(const void *vy, size_t vrow, int64_t i, const block_q8_K **y) {
    for (int r = 0; r < NR; r++) y[r] = act_row(vy, vrow, r) + i;
}
// One activation row's part of a superblock with scales and mins (q2_K,
// q4_K, q5_K): d dy sumi into acc, dmin dy (mins . bsums) into accm, with dm
// = (d, dmin) from fp16_pair.
inline void add_scaled_min(const block_q8_K *y, __m256i sumi, __m256i mn, __m128 dm, __m256 *acc, __m256 *accm) {
    const __m256i mins = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y->bsums), mn);
    const __m256 s = _mm256_castps128_ps256(_mm_mul_ps(dm, _mm_set1_ps(y->d)));
    *acc = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(s, _mm256_setzero_si256()), _mm256_cvtepi32_ps(sumi), *acc);
    *accm = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(s, _mm256_set1_epi32(1)), _mm256_cvtepi32_ps(mins), *accm);
}
// GGML_PREC_HIGH (NR = 2): the residual row folded into the row's sums in
// integers, 128 S + S2, and scaled once by the residual's d (its grid is
// d/128 of the row's blocks; lane bounds as in vec-dot-avx512.cpp: q2_K to
// q5_K, not q6_K). Zen 4 VM, AVX2 forced, one thread in cache: `high` q2_K
// 9.0 -> 9.3 GB/s, q3_K 9.7 -> 10.0, q4_K 12.9 -> 13.7, q5_K 14.6 -> 14.9.
inline __m256i fold_resid(__m256i s, __m256i s2) { return _mm256_add_epi32(_mm256_slli_epi32(s, 7), s2); }
template <int NR>
inline void add_scaled_mins(const block_q8_K *const *y, const __m256i *sumi, __m256i mn, __m128 dm, __m256 *acc, __m256 *accm) {
    if (NR == 1) return add_scaled_min(y[0], sumi[0], mn, dm, acc, accm);
    auto mins = [&](int r) { return _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y[r]->bsums), mn); };
    const __m256 s = _mm256_castps128_ps256(_mm_mul_ps(dm, _mm_set1_ps(y[NR - 1]->d)));
    *acc = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(s, _mm256_setzero_si256()), _mm256_cvtepi32_ps(fold_resid(sumi[0], sumi[NR - 1])), *acc);
    *accm = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(s, _mm256_set1_epi32(1)), _mm256_cvtepi32_ps(fold_resid(mins(0), mins(NR - 1))), *accm);
}
// Types with a fixed offset o per value (q3_K: -4 = -(1 << 2), q6_K: -32):
// row r's sumi starts at o sum_k sc_k bsums_k (w16: the 16 scales), in integers.
inline __m256i offset_sum(const block_q8_K *y, __m256i w16, int shift) {
    return _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y->bsums), w16), shift));
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
        const scales16_u4 sc(x[i].scales);
        const __m256i mn = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sv, 4), _mm_set1_epi8(0x0F)));
        const __m256i q[2] = {_mm256_loadu_si256((const __m256i *)x[i].qs), _mm256_loadu_si256((const __m256i *)(x[i].qs + 32))};
        const block_q8_K *y[NR];
        act_rows<NR>(vy, vrow, i, y);
        __m256i sumi[NR];
        for (int r = 0; r < NR; r++) sumi[r] = _mm256_setzero_si256();
        dot_chunks<NR>(
            y, [&](int c) { return _mm256_and_si256(_mm256_srli_epi16(q[c / 4], 2 * (c % 4)), m3); }, [&](int c) { return sc.chunk(c); }, sumi);
        add_scaled_mins<NR>(y, sumi, mn, fp16_pair(&x[i].d), &acc, &accm);
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
        const __m256i q[2] = {_mm256_loadu_si256((const __m256i *)x[i].qs), _mm256_loadu_si256((const __m256i *)(x[i].qs + 32))};
        // u = low 2 bits | hmask bit c moved straight to bit 2 (0..7); value = u - 4.
        // A word shift by at most 5 brings nothing from the other byte into bit 2.
        auto u = [&](int c) {
            const __m256i hs = c == 0 ? _mm256_slli_epi16(hm, 2) : c == 1 ? _mm256_slli_epi16(hm, 1) : _mm256_srli_epi16(hm, c - 2);
            return _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q[c / 4], 2 * (c % 4)), m3), _mm256_and_si256(hs, four));
        };
        const block_q8_K *y[NR];
        act_rows<NR>(vy, vrow, i, y);
        __m256i sumi[NR];
        for (int r = 0; r < NR; r++) sumi[r] = offset_sum(y[r], w16, 2);
        dot_chunks<NR>(y, u, [&](int c) { return sc.chunk(c); }, sumi);
        const __m256i si = NR == 2 ? fold_resid(sumi[0], sumi[NR - 1]) : sumi[0];
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[NR - 1]->d * fp16(x[i].d)), _mm256_cvtepi32_ps(si), acc);
    }
    *s = hsum(acc);
}

// q4_K, q5_K (Q5: a fifth bit per quant): sub-blocks of 32 with scales and mins.
template <bool Q5, int NR>
void dot_q45_K(int64_t n, float *s, const void *vx, const void *vy, size_t vrow) {
    using BX = typename std::conditional<Q5, block_q5_K, block_q4_K>::type;
    const BX *x = (const BX *)vx;
    const int64_t nb = n / QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    const int ahead = ggml_prefetch_distance;
    for (int64_t i = 0; i < nb; i++) {
        ggml_prefetch_chunk(x + i, (int)sizeof(*x), ahead);
        const __m128i sm = scales_q45(x[i].scales);
        const scales8 sc(_mm_cvtepu8_epi16(sm));
        const __m256i mn = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm));  // min of sub-block k / 2 at word k
        __m256i qh = _mm256_setzero_si256();
        if (Q5) qh = _mm256_loadu_si256((const __m256i *)((const block_q5_K *)(const void *)(x + i))->qh);
        // chunk c: the low (c even) or high nibbles of quant bytes 32 (c / 2) ..;
        // q5_K: bit c of qh is the fifth bit of chunk c
        auto u = [&](int c) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * (c / 2)));
            const __m256i lo = _mm256_and_si256(c % 2 ? _mm256_srli_epi16(q, 4) : q, m4);
            return Q5 ? _mm256_or_si256(lo, _mm256_and_si256(move_bits(qh, c, 4), b4)) : lo;
        };
        const block_q8_K *y[NR];
        act_rows<NR>(vy, vrow, i, y);
        __m256i sumi[NR];
        for (int r = 0; r < NR; r++) sumi[r] = _mm256_setzero_si256();
        dot_chunks<NR>(y, u, [&](int c) { return sc.chunk(c); }, sumi);
        add_scaled_mins<NR>(y, sumi, mn, fp16_pair(&x[i].d), &acc, &accm);
    }
    *s = hsum(acc) - hsum(accm);
}

// q6_K: u = 4 low bits | 2 high bits << 4 (0..63), value u - 32 (through the
// block sums in integers); 16 sub-blocks of 16 with int8 scales.
template <int NR>
void dot_q6_K(int64_t n, float *s, const void *vx, const void *vy, size_t vrow) {
    const block_q6_K *x = (const block_q6_K *)vx;
    const int64_t nb = n / QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    __m256 acc = _mm256_setzero_ps();
    const int ahead = ggml_prefetch_distance;
    for (int64_t i = 0; i < nb; i++) {
        ggml_prefetch_chunk(x + i, (int)sizeof(*x), ahead);
        const __m256i w16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        const scales16 sc(w16);
        // chunk c = 4h + k: low nibbles (k < 2) or high nibbles of ql bytes 64h + 32 (k % 2) ..,
        // its high-bit pair bits 2k, 2k + 1 of qh bytes 32h ..
        auto u = [&](int c) {
            const int h = c / 4, k = c % 4;
            const __m256i l = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h + 32 * (k % 2)));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h));
            return _mm256_or_si256(_mm256_and_si256(k < 2 ? l : _mm256_srli_epi16(l, 4), m4), _mm256_and_si256(move_bits(qh, 2 * k, 4), m30));
        };
        const block_q8_K *y[NR];
        act_rows<NR>(vy, vrow, i, y);
        __m256i sumi[NR];
        for (int r = 0; r < NR; r++) sumi[r] = offset_sum(y[r], w16, 5);
        dot_chunks<NR>(y, u, [&](int c) { return sc.chunk(c); }, sumi);
        const float xd = fp16(x[i].d);
        for (int r = 0; r < NR; r++) acc = _mm256_fmadd_ps(_mm256_set1_ps(y[r]->d * xd), _mm256_cvtepi32_ps(sumi[r]), acc);
    }
    *s = hsum(acc);
}

void vec_dot_q2_K_q8_K(int64_t n, float *s, const void *x, const void *y) { dot_q2_K<1>(n, s, x, y, 0); }
void vec_dot_q3_K_q8_K(int64_t n, float *s, const void *x, const void *y) { dot_q3_K<1>(n, s, x, y, 0); }
void vec_dot_q4_K_q8_K(int64_t n, float *s, const void *x, const void *y) { dot_q45_K<false, 1>(n, s, x, y, 0); }
void vec_dot_q5_K_q8_K(int64_t n, float *s, const void *x, const void *y) { dot_q45_K<true, 1>(n, s, x, y, 0); }
void vec_dot_q6_K_q8_K(int64_t n, float *s, const void *x, const void *y) { dot_q6_K<1>(n, s, x, y, 0); }

// Weight-side unpacking of four blocks into the q8x order, two registers a
// half: u[h] (low halves of blocks 2h, 2h+1), v[h] (high halves), d and m per
// lane (lane l of half h: block 2h + l / 4; the folded tiles' types: d and
// m in their order, folded4x). S: the fixed offset shift (weight = d (u -
// 2^S)), -1 with a stored minimum (d u + m); BITS: the quants' width (the
// folded tiles' types); SIGNED: int8 weights (q8_0), which maddubs takes as
// |w| against sign(w) y.
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
// A 32-byte load at block 2h of a group holds block 2h in its low lane and
// the head of block 2h + 1 (from byte sizeof(B) on) in its high lane, so a
// byte shuffle can take a field of each element's own block: byte o of
// block 2h + L is byte o + L (sizeof(B) - 16) of lane L.
template <class B>
inline __m256i heads2(const B *x) {
    static_assert(sizeof(B) >= 16 && sizeof(B) <= 24, "two blocks' fields in one 32-byte load within the group");
    return _mm256_loadu_si256((const __m256i *)(const void *)x);
}
// Fifth bits: bit j of qh -> 16 in byte j. One shuffle per register takes
// each element's qh byte (low halves: bytes 0-1 of qh, high halves: 2-3)
// from that load (+5-10% in cache against two scalar loads, a shift and a
// broadcast per block pair), then the element's own bit is tested against
// a per-byte mask.
template <class B>
inline void high4x(const B *x, __m256i *u, __m256i *v) {
    // sel[0]: qh bytes 0-1 for the low halves, sel[1]: bytes 2-3 for the high ones
    static constexpr int Q = offsetof(B, qh), NEXT = (int)sizeof(B) - 16;
    static constexpr shuf_table<2> sel([](int k, int lane, int j) { return Q + 2 * k + j / 8 + lane * NEXT; });
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL), sixteen = _mm256_set1_epi8(16);
    for (int h = 0; h < 2; h++) {
        const __m256i q = heads2(x + 2 * h);
        auto spread = [&](__m256i idx) {
            const __m256i t = _mm256_and_si256(_mm256_shuffle_epi8(q, idx), bit);
            return _mm256_and_si256(_mm256_cmpeq_epi8(t, bit), sixteen);
        };
        u[h] = _mm256_or_si256(u[h], spread(sel[0]));
        v[h] = _mm256_or_si256(v[h], spread(sel[1]));
    }
}
template <class B>
inline void d4x(const B *x, __m256 *d) {
    const __m128 f = fp16x4_avx2(x[0].d, x[1].d, x[2].d, x[3].d);
    d[0] = lanes4x(f, 0);
    d[1] = lanes4x(f, 1);
}
// Four blocks' scales f in the folded tiles' order (q8x_tile2_fold): lane L
// of a 128-bit lane holds block L's at positions 0 and 2, block 2 + L's at 1
// and 3; both registers the same.
inline void folded4x(__m128 f, __m256 *d) {
    d[0] = d[1] = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(f), _mm256_setr_epi32(0, 2, 0, 2, 1, 3, 1, 3));
}
template <class B>
inline void d4x_folded(const B *x, __m256 *d) { folded4x(fp16x4_avx2(x[0].d, x[1].d, x[2].d, x[3].d), d); }
template <class B>
inline void m4x_folded(const B *x, __m256 *m) { folded4x(fp16x4_avx2(x[0].m, x[1].m, x[2].m, x[3].m), m); }

struct X2_q4_0 {
    using B = block_q4_0;
    static constexpr int S = 3, BITS = 4;
    static constexpr bool SIGNED = false;
    static void load(const B *x, __m256i *u, __m256i *v, __m256 *d, __m256 *) { nibbles4x(x, u, v); d4x_folded(x, d); }
};
struct X2_q4_1 {
    using B = block_q4_1;
    static constexpr int S = -1, BITS = 4;
    static constexpr bool SIGNED = false;
    static void load(const B *x, __m256i *u, __m256i *v, __m256 *d, __m256 *m) { nibbles4x(x, u, v); d4x_folded(x, d); m4x_folded(x, m); }
};
struct X2_q5_0 {
    using B = block_q5_0;
    static constexpr int S = 4, BITS = 5;
    static constexpr bool SIGNED = false;
    static void load(const B *x, __m256i *u, __m256i *v, __m256 *d, __m256 *) { nibbles4x(x, u, v); high4x(x, u, v); d4x_folded(x, d); }
};
struct X2_q5_1 {
    using B = block_q5_1;
    static constexpr int S = -1, BITS = 5;
    static constexpr bool SIGNED = false;
    static void load(const B *x, __m256i *u, __m256i *v, __m256 *d, __m256 *m) {
        nibbles4x(x, u, v);
        high4x(x, u, v);
        d4x_folded(x, d);
        m4x_folded(x, m);
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

// 16 bytes at p in both lanes, shifted right by n0 (low lane) and n1 (high
// lane) bits per dword, or left by -n0, -n1 when n0 < 0: bit k of a byte then
// comes from that byte's bit k + n for the k the caller keeps.
inline __m256i bcast_shift(const uint8_t *p, int n0, int n1) {
    const __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
    if (n0 < 0) return _mm256_sllv_epi32(q, _mm256_setr_epi32(-n0, -n0, -n0, -n0, -n1, -n1, -n1, -n1));
    return _mm256_srlv_epi32(q, _mm256_setr_epi32(n0, n0, n0, n0, n1, n1, n1, n1));
}

// K-quants with sub-blocks of 32 (q4_K, q5_K) in the q8x form, as the
// AVX-512 loaders (q8x-dot.h): group g is half h = g % 2 of superblock g / 2,
// its blocks the sub-blocks 4h .. 4h + 3, each q4_1-like with scale d sc and
// minimum -dmin m (exact in f32). Bytes 32c .. 32c + 31 of the half's quants
// hold sub-block 4h + 2c (low nibbles) and 4h + 2c + 1 (high nibbles), element
// l at byte l: 16 of them broadcast to both lanes and shifted right by 0 (low
// lane) and 4 (high lane) are one register of the q8x order. q5_K's fifth bit
// of element l of sub-block j is bit j of qh[l], moved to bit 4 by one dword
// shift per register (left by 4 - j for j < 4, right by j - 4 else: bit 4 of a
// byte then comes from that byte).
template <bool Q5>
struct X2K {
    using B = typename std::conditional<Q5, block_q5_K, block_q4_K>::type;
    static constexpr int S = -1, BITS = Q5 ? 5 : 4;
    static constexpr bool SIGNED = false;
    static constexpr bool BY_GROUP = true;
    static void group(const B *x, int64_t g, __m256i *u, __m256i *v, __m256 *d, __m256 *m) {
        const B *b = x + (g >> 1);
        const int h = (int)(g & 1);
        const uint8_t *qs = b->qs + 64 * h;
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        for (int c = 0; c < 2; c++) {
            u[c] = _mm256_and_si256(bcast_shift(qs + 32 * c, 0, 4), m4);
            v[c] = _mm256_and_si256(bcast_shift(qs + 32 * c + 16, 0, 4), m4);
        }
        if (Q5) {
            const uint8_t *qh = ((const block_q5_K *)(const void *)b)->qh;
            const __m256i sixteen = _mm256_set1_epi8(16);
            for (int c = 0; c < 2; c++) {  // lanes: sub-blocks j = 4h + 2c, 4h + 2c + 1, bit j to bit 4
                const int n = 4 * h + 2 * c - 4;
                u[c] = _mm256_or_si256(u[c], _mm256_and_si256(bcast_shift(qh, n, n + 1), sixteen));
                v[c] = _mm256_or_si256(v[c], _mm256_and_si256(bcast_shift(qh + 16, n, n + 1), sixteen));
            }
        }
        // scales_q45: bytes 0..7 the sub-blocks' scales, 8..15 their mins
        const __m128i sm = scales_q45(b->scales), sh = h ? _mm_srli_si128(sm, 4) : sm;
        const __m128 sc = _mm_mul_ps(_mm_cvtepi32_ps(_mm_cvtepu8_epi32(sh)), _mm_set1_ps(fp16(b->d)));
        const __m128 mn = _mm_mul_ps(_mm_cvtepi32_ps(_mm_cvtepu8_epi32(_mm_srli_si128(sh, 8))), _mm_set1_ps(-fp16(b->dmin)));
        folded4x(sc, d);
        folded4x(mn, m);
    }
};

// Sub-blocks of 16 (SPLIT: q6_K, q3_K): a block's low and high halves have
// their own scales, d the low halves', m the high halves'. h8: the 8
// sub-block scales (times the superblock's d) of superblock half h -> lane l
// of register c: block 2c + l / 4 of the group, sub-block 8h + 2 (2c + l / 4)
// (+ 1 for m).
inline void half_scales2(__m256 h8, __m256 *d, __m256 *m) {
    for (int c = 0; c < 2; c++) {
        const int i = 4 * c;
        d[c] = _mm256_permutevar8x32_ps(h8, _mm256_setr_epi32(i, i, i, i, i + 2, i + 2, i + 2, i + 2));
        m[c] = _mm256_permutevar8x32_ps(h8, _mm256_setr_epi32(i + 1, i + 1, i + 1, i + 1, i + 3, i + 3, i + 3, i + 3));
    }
}
// q6_K in the q8x form, as XK6 (q8x-dot.h): group g is half h = g % 2 of
// superblock g / 2; its block b's element l has the low nibble (b / 2 ? high
// : low) of ql[64 h + 32 (b % 2) + l] and the two high bits (qh[32 h + l] >>
// 2 b) & 3: u = 0..63, weight = d sc (u - 32), sc the int8 scale of the
// block's half (scales[8 h + 2 b], then + 1).
struct X2K6 {
    using B = block_q6_K;
    static constexpr int S = 5;
    static constexpr bool SIGNED = false, BY_GROUP = true, SPLIT = true;
    static void group(const B *x, int64_t g, __m256i *u, __m256i *v, __m256 *d, __m256 *m) {
        const B *b = x + (g >> 1);
        const int h = (int)(g & 1);
        const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
        const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
        for (int c = 0; c < 2; c++) {  // blocks 2c (low lane), 2c + 1 (high lane)
            auto quants = [&](int l) {     // elements l .. l + 15
                const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(load2x16(ql + l, ql + 32 + l), 4 * c), m4);
                const __m256i hi = _mm256_and_si256(bcast_shift(qh + l, 4 * c, 4 * c + 2), m3);
                return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
            };
            u[c] = quants(0);
            v[c] = quants(16);
        }
        const __m128i s8 = _mm_loadl_epi64((const __m128i *)(b->scales + 8 * h));
        half_scales2(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(s8)), _mm256_set1_ps(fp16(b->d))), d, m);
    }
};

// q3_K, as XK3: block b's element l has the two low bits (qs[32 h + l] >> 2 b)
// & 3 and the third bit, worth 4, bit 4 h + b of hmask[l]: u = 0..7, weight =
// d sc (u - 4), sc the 6-bit scale (minus 32) of the block's half.
struct X2K3 {
    using B = block_q3_K;
    static constexpr int S = 2;
    static constexpr bool SIGNED = false, BY_GROUP = true, SPLIT = true;
    static void group(const B *x, int64_t g, __m256i *u, __m256i *v, __m256 *d, __m256 *m) {
        const B *b = x + (g >> 1);
        const int h = (int)(g & 1);
        const uint8_t *qs = b->qs + 32 * h;
        const __m256i m3 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
        for (int c = 0; c < 2; c++) {  // blocks 2c, 2c + 1: low bits at shift 2b, the hmask bit 4h + b moved to bit 2
            const int n = 4 * h + 2 * c - 2;
            auto quants = [&](int l) {
                const __m256i lo = _mm256_and_si256(bcast_shift(qs + l, 4 * c, 4 * c + 2), m3);
                return _mm256_or_si256(lo, _mm256_and_si256(bcast_shift(b->hmask + l, n, n + 1), four));
            };
            u[c] = quants(0);
            v[c] = quants(16);
        }
        const __m256i s16 = q3k_scales16(b->scales);
        const __m128i half = h ? _mm256_extracti128_si256(s16, 1) : _mm256_castsi256_si128(s16);
        half_scales2(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(half)), _mm256_set1_ps(fp16(b->d))), d, m);
    }
};

// q2_K, as XK2: block b's element l has u = (qs[32 h + l] >> 2 b) & 3 and
// weight d sc u - dmin m (sc, m: the nibbles of scales[8 h + 2 b], then + 1,
// for elements 0..15 and 16..31); sc u <= 45 is the quant (a word multiply:
// a 128-bit lane is one half with one scale), d the superblock's, m the
// halves' -dmin m in the lanes of the activations' half sums sd (WIDE for q8xh).
// half_idx[2c + i]: scale byte 2 (2c + L) + i (block 2c + L, half i) as the
// words of lane L.
inline constexpr shuf_table<4> half_idx([](int c, int lane, int j) { return j % 2 ? -128 : 4 * (c / 2) + 2 * lane + c % 2; });
struct X2K2 {
    using B = block_q2_K;
    static constexpr int S = -1;
    static constexpr bool SIGNED = false, BY_GROUP = true, WIDE = true;
    static void group(const B *x, int64_t g, __m256i *u, __m256i *v, __m256 *d, __m256 *m) {
        const B *b = x + (g >> 1);
        const int h = (int)(g & 1);
        const uint8_t *qs = b->qs + 32 * h;
        const __m128i s8 = _mm_loadl_epi64((const __m128i *)(b->scales + 8 * h)), m4 = _mm_set1_epi8(0x0F);
        const __m256i sc = _mm256_broadcastsi128_si256(_mm_and_si128(s8, m4));
        const __m256i m3 = _mm256_set1_epi8(3);
        const __m256 mn = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(s8, 4), m4))),
                                        _mm256_set1_ps(-fp16(b->dmin)));  // half j's at lane j
        for (int c = 0; c < 2; c++) {  // blocks 2c, 2c + 1: the bits at shift 2b
            auto quants = [&](int i) {
                const __m256i q = _mm256_and_si256(bcast_shift(qs + 16 * i, 4 * c, 4 * c + 2), m3);
                return _mm256_mullo_epi16(q, _mm256_shuffle_epi8(sc, half_idx[2 * c + i]));
            };
            u[c] = quants(0);
            v[c] = quants(1);
            d[c] = _mm256_set1_ps(fp16(b->d));
            m[c] = _mm256_permutevar8x32_ps(mn, _mm256_setr_epi32(4 * c, 4 * c + 1, 4 * c, 4 * c + 1, 4 * c + 2, 4 * c + 3, 4 * c + 2, 4 * c + 3));
        }
    }
};

// Whether a loader reads K-quant superblocks by group (X::group, marked
// X::BY_GROUP) rather than four 32-element blocks at a time (X::load).
template <class X, class = void>
struct by_group : std::false_type {};
template <class X>
struct by_group<X, std::void_t<decltype(X::BY_GROUP)>> : std::integral_constant<bool, X::BY_GROUP> {};
// Whether a loader's blocks have halves with their own scales (X::SPLIT).
template <class X, class = void>
struct split_halves : std::false_type {};
template <class X>
struct split_halves<X, std::void_t<decltype(X::SPLIT)>> : std::integral_constant<bool, X::SPLIT> {};

// Whether a loader's unsigned quants reach 32 (q2_K's sc u, X::WIDE).
template <class X, class = void>
struct wide_quants : std::false_type {};
template <class X>
struct wide_quants<X, std::void_t<decltype(X::WIDE)>> : std::integral_constant<bool, X::WIDE> {};

// One group of four weight blocks unpacked into the q8x order: u (low
// halves), v (high halves), d and m by half h of the group; as registers, or
// as the 256 bytes it takes in an unpacked row (the AVX-512 q8x_wgroup layout).
struct wgroup2 {
    __m256i u[2], v[2];
    __m256 d[2], m[2];
};
static_assert(sizeof(wgroup2) == 256, "ggml_q8x_unpacked_size: 256 bytes a group");

// Group g of a packed row of nb 32-element blocks (or of K-quant superblock
// halves) into w, prefetching ahead of it. Inlined by force, as row_reader
// (q8x-dot.h): GCC otherwise called the q5 loaders out of line once a group
// (AVX-VNNI Q5_1 mat-vec 30% slower in cache).
template <class X>
__attribute__((always_inline)) inline void load_group2(const typename X::B *x, int64_t nb, int64_t g, wgroup2 *w) {
    using B = typename X::B;
    const int ahead = ggml_prefetch_distance;
    w->m[0] = w->m[1] = _mm256_setzero_ps();
    if constexpr (by_group<X>::value) {  // half a superblock, never partial (k % 256 == 0)
        ggml_prefetch_chunk((const char *)x + g * (int64_t)sizeof(B) / 2, (int)sizeof(B) / 2, ahead);
        X::group(x, g, w->u, w->v, w->d, w->m);
    } else {
        const B *xg = x + 4 * g;
        B tail[4];
        if (nb - 4 * g < 4) {  // the last partial group: zero blocks (d = m = 0) from a copy
            memset(tail, 0, sizeof(tail));
            memcpy(tail, xg, sizeof(B) * (size_t)(nb - 4 * g));
            xg = tail;
        }
        ggml_prefetch_chunk(x + 4 * g, 4 * (int)sizeof(B), ahead);
        X::load(xg, w->u, w->v, w->d, w->m);
    }
}

// Unsigned quants (u <= 45: q2_K's sc u, the others 31): dot(u, y0) +
// dot(v, y1) in s32 lanes of four, times 128 when hi (the q8xh row's q), plus
// i: started at i with VNNI (then from 0 when hi), otherwise with i added.
// Without VNNI each maddubs pair is at most 2 * 45 * 128, so the two pair
// vectors add exactly in s16 before one madd, which takes the multiplier too.
__attribute__((always_inline)) inline __m256i udot8(__m256i u, __m256i v, __m256i y0, __m256i y1, bool hi, __m256i i, const loop_consts &k) {
    if (GGML_AVX2_VNNI) {
        const __m256i p = dpbusd(dpbusd(hi ? _mm256_setzero_si256() : i, u, y0, k.one), v, y1, k.one);
        return hi ? _mm256_add_epi32(_mm256_slli_epi32(p, 7), i) : p;
    }
    const __m256i p = _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(u, y0), _mm256_maddubs_epi16(v, y1)), k.words(hi));
    return _mm256_add_epi32(p, i);
}

// The float step of a block sum p: round(p dy), through the magic bits
// (p started at 1.5 2^23's bits; dm = 1.5 2^23 dy) or by a conversion.
template <bool MAGIC>
__attribute__((always_inline)) inline __m256 scaled_sum(__m256i p, __m256 dy, __m256 dm) {
    return MAGIC ? _mm256_fmsub_ps(_mm256_castsi256_ps(p), dy, dm) : _mm256_mul_ps(_mm256_cvtepi32_ps(p), dy);
}
// A folded tile's group into its accumulator: f d, or (!OFF) f d + m sd
// and then one add, so that the chain through acc is an add.
template <bool OFF>
__attribute__((always_inline)) inline __m256 add_group(__m256 acc, __m256 f, const wgroup2 *w, __m256 sd) {
    return OFF ? _mm256_fmadd_ps(f, w->d[0], acc) : _mm256_add_ps(acc, _mm256_fmadd_ps(f, w->d[0], _mm256_mul_ps(w->m[0], sd)));
}

// The q8x tile core of this family, as q8x_tile (q8x-dot.h) 256 bits at a
// time: NR weight rows against NC activation rows (one activation group and
// its scales loaded once for all NR rows, a weight group once for all NC
// columns), the result of row r and column c to s[r] + c * ss bytes, or the
// accumulators to and from accv (16 floats an element: acc, then accm;
// element (r, c) at vector r * ars + c) as GGML_Q8X_ACC_* in flags say.
// Per element, row and column the same arithmetic whatever NR and NC are:
// the integer dot of a half's u and v with the activations, started at the
// offset (ns << S) plus the bits of the float 1.5 2^23, read as a float and
// taken times dy by one fmsub (round(sum dy), the value a conversion and a
// multiply give, since |sum| < 2^22: u + o <= 31 and q8xh's |128 q + q2| <=
// 16320; q8_0 with q8xh goes through a conversion), then one fma with the
// weight scale, and the stored minimum through m . sd into accm. SPLIT
// (q3_K, q6_K: sub-blocks of 16): a block's low and high halves have their
// own scales (d and m) and offsets (the low half's q sum from one more dot per
// column, the high half's the rest of ns): two such sums, fmsubs and fmas.
// WIDE quants (q2_K's sc u <= 45) with q8xh pass 2^22: a conversion, as q8_0.
template <class X, int NR, int NC, bool H, class Load>
__attribute__((always_inline)) inline void q8x_tile2(int64_t ng, Load &&load, const uint8_t *y0, size_t ys, float *s, size_t ss,
                                                     float *accv, int ars, int flags) {
    constexpr size_t GROUP = H ? GGML_Q8XH_GROUP : GGML_Q8X_GROUP;
    constexpr size_t DY = H ? 256 : 128, NS = DY + 64, SD = DY + 128;
    constexpr bool OFF = X::S >= 0, MIN = X::S < 0 && !X::SIGNED, MAGIC = !(H && (X::SIGNED || wide_quants<X>::value));
    constexpr bool SPLIT = split_halves<X>::value;
    const loop_consts k(MAGIC, NR == 1 && !X::SIGNED);  // q8_0 (SIGNED) kept its constants: hidden, 2% slower
    const __m256i magic = k.magic;
    __m256 acc[NR][NC], accm[NR][NC];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) {
            float *a = accv + 16 * (r * ars + c);
            const bool first = flags & GGML_Q8X_ACC_FIRST;
            acc[r][c] = first ? _mm256_setzero_ps() : _mm256_load_ps(a);
            accm[r][c] = first || !MIN ? _mm256_setzero_ps() : _mm256_load_ps(a + 8);
        }
    for (int64_t g = 0; g < ng; g++) {
        wgroup2 tmp[NR];
        const wgroup2 *w[NR];
        __m256i au[NR][2], av[NR][2];  // SIGNED: |w| (once a group, not once a column)
        for (int r = 0; r < NR; r++) {
            w[r] = load(r, g, &tmp[r]);
            if (X::SIGNED)
                for (int h = 0; h < 2; h++) au[r][h] = _mm256_sign_epi8(w[r]->u[h], w[r]->u[h]), av[r][h] = _mm256_sign_epi8(w[r]->v[h], w[r]->v[h]);
        }
        const uint8_t *yg = y0 + g * GROUP;
        for (int c = 0; c < NC; c++) {
            const uint8_t *yc = yg + c * ys;
            for (int h = 0; h < 2; h++) {
                auto ld = [&](size_t off) { return _mm256_loadu_si256((const __m256i *)(yc + off + 32 * h)); };
                const __m256 dy = _mm256_loadu_ps((const float *)(yc + DY + 32 * h));
                const __m256 dm = _mm256_mul_ps(dy, k.fm);  // 1.5 2^23 dy, exact (dy is an fp16 value)
                const __m256i init = OFF ? _mm256_add_epi32(_mm256_slli_epi32(ld(NS), OFF ? X::S : 0), magic) : magic;
                __m256i inita = magic, initb = init;  // SPLIT: the halves' offsets (ns << S split as -(sa << S) + the rest)
                if (SPLIT) {
                    __m256i sa = dpbusd(_mm256_setzero_si256(), k.b1, ld(0), k.one);
                    if (H) sa = _mm256_add_epi32(_mm256_slli_epi32(sa, 7), dpbusd(_mm256_setzero_si256(), k.b1, ld(128), k.one));
                    sa = _mm256_slli_epi32(sa, OFF ? X::S : 0);
                    inita = _mm256_sub_epi32(magic, sa);
                    initb = _mm256_add_epi32(init, sa);
                }
                for (int r = 0; r < NR; r++) {
                    const __m256i u = w[r]->u[h], v = w[r]->v[h];
                    // dot(u, y[o0]) + dot(v, y[o1]) in s32 lanes of four plus i, the
                    // dot times 128 for the q8xh row (hi)
                    auto dot8 = [&](size_t o0, size_t o1, bool hi, __m256i i) {
                        if (X::SIGNED) {  // int8 weights: |w| against sign(w) y
                            const __m256i p = dpbusd(dpbusd(_mm256_setzero_si256(), au[r][h], _mm256_sign_epi8(ld(o0), u), k.one), av[r][h],
                                                     _mm256_sign_epi8(ld(o1), v), k.one);
                            return _mm256_add_epi32(hi ? _mm256_slli_epi32(p, 7) : p, i);
                        }
                        return udot8(u, v, ld(o0), ld(o1), hi, i, k);
                    };
                    if (SPLIT) {  // one register's dot (y at o, the q8xh residual at o2), started at i
                        auto dot4 = [&](__m256i q, size_t o, size_t o2, __m256i i) {
                            if (GGML_AVX2_VNNI)
                                return H ? _mm256_add_epi32(_mm256_slli_epi32(dpbusd(_mm256_setzero_si256(), q, ld(o), k.one), 7), dpbusd(i, q, ld(o2), k.one))
                                         : dpbusd(i, q, ld(o), k.one);
                            __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(q, ld(o)), k.words(H));
                            if (H) p = _mm256_add_epi32(p, _mm256_madd_epi16(_mm256_maddubs_epi16(q, ld(o2)), k.one));
                            return _mm256_add_epi32(p, i);
                        };
                        const __m256i pa = dot4(u, 0, 128, inita), pb = dot4(v, 64, 192, initb);
                        acc[r][c] = _mm256_fmadd_ps(scaled_sum<MAGIC>(pa, dy, dm), w[r]->d[h], acc[r][c]);
                        acc[r][c] = _mm256_fmadd_ps(scaled_sum<MAGIC>(pb, dy, dm), w[r]->m[h], acc[r][c]);
                        continue;
                    }
                    const __m256i p = H ? dot8(0, 64, true, dot8(128, 192, false, init)) : dot8(0, 64, false, init);
                    acc[r][c] = _mm256_fmadd_ps(scaled_sum<MAGIC>(p, dy, dm), w[r]->d[h], acc[r][c]);
                    if (MIN) accm[r][c] = _mm256_fmadd_ps(w[r]->m[h], _mm256_loadu_ps((const float *)(yc + SD + 32 * h)), accm[r][c]);
                }
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) {
            if (flags & GGML_Q8X_ACC_LAST) {
                *(float *)((char *)(s + r) + c * ss) = hsum(MIN ? _mm256_add_ps(acc[r][c], accm[r][c]) : acc[r][c]);
            } else {
                float *a = accv + 16 * (r * ars + c);
                _mm256_store_ps(a, acc[r][c]);
                _mm256_store_ps(a + 8, accm[r][c]);
            }
        }
}

// The folded tiles' accumulators: a register a row and column pair, kept
// in accv between the calls of one output (flags), and at the last call
// reduced: column 0 of the pair is (b0 + b1) + (b2 + b3) at lane 0, column 1
// at lane 2.
template <int NR, int NC>
__attribute__((always_inline)) inline void tile2_load(__m256 (*acc)[(NC + 1) / 2], const float *accv, int ars, int flags) {
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < (NC + 1) / 2; t++)
            acc[r][t] = flags & GGML_Q8X_ACC_FIRST ? _mm256_setzero_ps() : _mm256_load_ps(accv + 16 * (r * ars + 2 * t));
}
template <int NR, int NC>
__attribute__((always_inline)) inline void tile2_store(__m256 (*acc)[(NC + 1) / 2], float *s, size_t ss, float *accv, int ars, int flags) {
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < (NC + 1) / 2; t++) {
            if (!(flags & GGML_Q8X_ACC_LAST)) {
                _mm256_store_ps(accv + 16 * (r * ars + 2 * t), acc[r][t]);
                continue;
            }
            const __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc[r][t]), _mm256_extractf128_ps(acc[r][t], 1));
            const __m128 v = _mm_add_ps(h, _mm_movehdup_ps(h));
            *(float *)((char *)(s + r) + 2 * t * ss) = _mm_cvtss_f32(v);
            if (NC - 2 * t >= 2) *(float *)((char *)(s + r) + (2 * t + 1) * ss) = _mm_cvtss_f32(_mm_movehl_ps(v, v));
        }
}

// The 32-element types and q4_K, q5_K (not q8_0's signed weights, nor
// q2_K, q3_K, q6_K with their sub-blocks of 16), marked by X::BITS (the
// quants' width), take the folded form of the tile, as the AVX-512 family
// (q8x_tile_fold): the integer sums of a block's four lanes are added before
// the float step, so that it runs once per block and column instead of once
// per lane (the multiply-class pipes, which the integer dots also take, were
// the prompt kernel's limit). A column's two half registers fold into one,
// lane L of a 128-bit lane: block L at positions 0 and 2, block 2 + L at 1
// and 3 (unpack and add); a pair of columns folds into one register, the
// second column at positions 2 and 3, a column alone onto itself (a shuffle
// and an add). Per group and block: f = round(S dy) from the exact integer
// sum S (by the magic bits where |S| < 2^22: q8x, and q8xh for |u + o| <= 8;
// otherwise a conversion, exact for |S| < 2^24, and a multiply: the same
// value), acc += f d, or with a stored minimum acc += f d + m sd, sd the
// block's activation sums folded in floats the same way; the result (b0 +
// b1) + (b2 + b3) of the block lanes: the same bits whatever NR, NC and the
// tile are. The offsets (ns << S) fold once per column and group, outside
// the rows.
template <class X, class = void>
struct folded_tile2 : std::false_type {};
template <class X>
struct folded_tile2<X, std::void_t<decltype(X::BITS)>> : std::true_type {};
// Whether the folded tiles take a block sum's float step through the magic bits.
template <class X, bool H>
constexpr bool fold_magic() { return !H || (X::S >= 0 && X::S <= 3); }
// Where a packed activation row (pack_q8x_avx2, pack_fields_avx2) keeps its
// folded fields: at F (after the quants, and q8xh's residual quants) dy,
// then FM dy, ns, sd, 32 bytes each.
template <bool H>
constexpr size_t il_fields() { return H ? 256 : 128; }
// PF: the activation rows' fields come folded, their offsets shifted and
// with the magic bits (pack_fields_avx2): no fold of them, and no early join.
template <class X, int NR, int NC, bool H, bool PF, class Load>
__attribute__((always_inline)) inline void q8x_tile2_fold(int64_t ng, Load &&load, const uint8_t *y0, size_t ys, float *s, size_t ss,
                                                          float *accv, int ars, int flags) {
    constexpr size_t GROUP = H ? GGML_Q8XH_GROUP : GGML_Q8X_GROUP;
    constexpr size_t DY = H ? 256 : 128, NS = DY + 64, SD = DY + 128, F = il_fields<H>();
    constexpr bool OFF = X::S >= 0, MAGIC = fold_magic<X, H>();
    constexpr int SETS = (NC + 1) / 2;
    const loop_consts k(MAGIC, NR == 1);
    const __m256i magic = k.magic;
    __m256 acc[NR][SETS];
    tile2_load<NR, NC>(acc, accv, ars, flags);
    // The folds, adding s32 lanes, or (w16) the s16 words of each dword: a
    // column's halves, positions k and k ^ 2 of each side by side; two
    // columns' folded halves into one register, or one onto itself.
    auto add = [](__m256i a, __m256i b, bool w16) { return w16 ? _mm256_add_epi16(a, b) : _mm256_add_epi32(a, b); };
    auto halves = [&](__m256i a, __m256i b, bool w16) { return add(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b), w16); };
    auto pair = [&](__m256i a, __m256i b, bool w16) { return add(_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b), w16); };
    auto self = [&](__m256i a, bool w16) { return add(a, _mm256_shuffle_epi32(a, _MM_SHUFFLE(1, 0, 3, 2)), w16); };
    // Quants below 16 (q4_0, q4_1, q4_K) without VNNI: the folds on the maddubs pair
    // sums in s16 (a word then holds at most 16 products, |.| <= 16 15 128 <
    // 2^15), both words of a dword from one block, so that one madd per row
    // and set (not one per half and column) makes the block sums.
    constexpr bool NARROW = !GGML_AVX2_VNNI && X::BITS == 4;
    // the stored minimum's term: the activations' half sums sd folded per block as the integers (in floats)
    auto halves_ps = [](__m256 a, __m256 b) { return _mm256_add_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b)); };
    auto pair_ps = [](__m256 a, __m256 b) {
        return _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(a), _mm256_castps_pd(b))),
                             _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(a), _mm256_castps_pd(b))));
    };
    auto self_ps = [](__m256 a) { return _mm256_add_ps(a, _mm256_permute_ps(a, _MM_SHUFFLE(1, 0, 3, 2))); };
    for (int64_t g = 0; g < ng; g++) {
        wgroup2 tmp[NR];
        const wgroup2 *w[NR];
        for (int r = 0; r < NR; r++) w[r] = load(r, g, &tmp[r]);
        const uint8_t *yg = y0 + g * GROUP;
        for (int t = 0; t < SETS; t++) {
            const int n = NC - 2 * t < 2 ? 1 : 2;  // columns in this set
            const uint8_t *yc[2] = {yg + 2 * t * ys, yg + (2 * t + n - 1) * ys};
            auto ld = [&](int c, size_t off) { return _mm256_loadu_si256((const __m256i *)(yc[c] + off)); };
            auto ldf = [&](int c, size_t off) { return _mm256_loadu_ps((const float *)(yc[c] + off)); };
            auto ns = [&](int c, int h) { return ld(c, NS + 32 * h); };
            auto shift = [&](__m256i v) { return _mm256_slli_epi32(v, OFF ? X::S : 0); };  // the offsets: ns << S
            auto offs = [&](int c, int h) { return OFF ? shift(ns(c, h)) : _mm256_setzero_si256(); };  // a half's, unfolded (early)
            const bool early = !PF && NR == 1 && n == 1;  // one row and column: the offsets (magic in one lane a block) join before the fold
            // Every row's integer sums first, then the column scales and
            // offsets, then the float steps: the integer chains no longer wait
            // behind the previous row's fmsub and fma, nor on the offsets'
            // folds (Zen 3, 4-row prompt tile: pp128 +5% `fast`, +12% `high`).
            __m256i sums[NR];
            for (int r = 0; r < NR; r++) {
                auto dot = [&](int c, int h, __m256i i) {  // half h of column c, plus i
                    const __m256i u = w[r]->u[h], v = w[r]->v[h];
                    if (!H) return udot8(u, v, ld(c, 32 * h), ld(c, 64 + 32 * h), false, i, k);
                    return udot8(u, v, ld(c, 32 * h), ld(c, 64 + 32 * h), true, udot8(u, v, ld(c, 128 + 32 * h), ld(c, 192 + 32 * h), false, i, k), k);
                };
                __m256i sum;
                if (NARROW && !early) {  // the fold on the s16 pair sums, one madd after it
                    auto x16 = [&](int c, int h, size_t o) {
                        return _mm256_add_epi16(_mm256_maddubs_epi16(w[r]->u[h], ld(c, o + 32 * h)), _mm256_maddubs_epi16(w[r]->v[h], ld(c, o + 64 + 32 * h)));
                    };
                    auto fold = [&](size_t o) {
                        const __m256i f0 = halves(x16(0, 0, o), x16(0, 1, o), true);
                        return n == 2 ? pair(f0, halves(x16(1, 0, o), x16(1, 1, o), true), true) : self(f0, true);
                    };
                    sum = _mm256_madd_epi16(fold(0), k.words(H));
                    if (H) sum = _mm256_add_epi32(sum, _mm256_madd_epi16(fold(128), k.one));
                } else if (early) {
                    const __m256i m = _mm256_blend_epi32(_mm256_setzero_si256(), magic, 0x11);
                    sum = self(halves(dot(0, 0, _mm256_add_epi32(offs(0, 0), m)), dot(0, 1, _mm256_add_epi32(offs(0, 1), m)), false), false);
                } else {
                    const __m256i z = _mm256_setzero_si256();
                    const __m256i f0 = halves(dot(0, 0, z), dot(0, 1, z), false);
                    sum = n == 2 ? pair(f0, halves(dot(1, 0, z), dot(1, 1, z), false), false) : self(f0, false);
                }
                sums[r] = sum;
            }
            // the scales in the folded order, and (more than one row, or a pair) the offsets folded with the magic bits
            __m256 dy, dm, sd = _mm256_setzero_ps();
            __m256i off = _mm256_setzero_si256();
            if (PF) {  // a pair's: column 0 at positions 0 and 1 of each 128-bit lane, column 1 at 2 and 3
                auto both = [&](size_t o) { return n == 2 ? _mm256_blend_ps(ldf(0, o), ldf(1, o), 0xCC) : ldf(0, o); };
                dy = both(F), dm = both(F + 32), off = _mm256_castps_si256(both(F + 64));
                if (!OFF) sd = both(F + 96);
            } else if (n == 2) {
                const __m256 a = _mm256_blend_ps(ldf(0, DY), ldf(0, DY + 32), 0x22), b = _mm256_blend_ps(ldf(1, DY), ldf(1, DY + 32), 0x88);
                dy = _mm256_blend_ps(a, b, 0xCC);
                off = _mm256_add_epi32(OFF ? shift(pair(halves(ns(0, 0), ns(0, 1), false), halves(ns(1, 0), ns(1, 1), false), false)) : off, magic);
                if (!OFF) sd = pair_ps(halves_ps(ldf(0, SD), ldf(0, SD + 32)), halves_ps(ldf(1, SD), ldf(1, SD + 32)));
            } else {
                dy = _mm256_unpacklo_ps(ldf(0, DY), ldf(0, DY + 32));
                if (!early) off = _mm256_add_epi32(OFF ? shift(self(halves(ns(0, 0), ns(0, 1), false), false)) : off, magic);
                if (!OFF) sd = self_ps(halves_ps(ldf(0, SD), ldf(0, SD + 32)));
            }
            if (!PF) dm = _mm256_mul_ps(dy, k.fm);  // 1.5 2^23 dy, exact
            for (int r = 0; r < NR; r++) {
                const __m256i sum = early ? sums[r] : _mm256_add_epi32(sums[r], off);
                acc[r][t] = add_group<OFF>(acc[r][t], scaled_sum<MAGIC>(sum, dy, dm), w[r], sd);
            }
        }
    }
    tile2_store<NR, NC>(acc, s, ss, accv, ars, flags);
}

// The prompt kernels of the folded types without VNNI (the s16 folds of
// NARROW, q8x_tile2_fold) on the family's own order of both operands (IL):
// the unpacked weights (unpack_q8x_avx2) and the activation rows
// (pack_q8x_avx2) hold the dwords of a group's blocks 0 and 2 (1 and 3 in
// the high 128-bit lane) alternating, u'[0] = unpacklo_epi32(u[0], u[1]),
// u'[1] its unpackhi, so that a column's four maddubs products add
// vertically into the folded order, with no unpack between the two halves
// (two per row and column in q8x_tile2_fold), and the activations' block
// scales dy, FM dy, offsets ns and minimum sums sd come per column already
// folded (one blend per column pair instead of 17 folding instructions a
// set). The integer block sums and every float step are those of
// q8x_tile2_fold (and so of dot_q8x_avx2): the same bits (test-simd). Zen 3,
// Q4_0 4 x 4 tile of 8 groups in L1: 1.17x the folded tile's rate.
template <class X>
constexpr bool il_order() { return !GGML_AVX2_VNNI && folded_tile2<X>::value; }
template <class X, int NR, int NC, bool H, class Load>
__attribute__((always_inline)) inline void q8x_tile2_il(int64_t ng, Load &&load, const uint8_t *y0, size_t ys, float *s, size_t ss,
                                                        float *accv, int ars, int flags) {
    constexpr size_t GROUP = H ? GGML_Q8XH_GROUP : GGML_Q8X_GROUP, F = il_fields<H>();
    constexpr bool OFF = X::S >= 0, MAGIC = fold_magic<X, H>();
    constexpr bool W16 = X::BITS == 4;  // a column pair's block sums in s16 (16 products a word); 5 bits: 8
    constexpr int SETS = (NC + 1) / 2;
    const loop_consts k(MAGIC, false);
    const __m256i magic = k.magic;
    __m256 acc[NR][SETS];
    tile2_load<NR, NC>(acc, accv, ars, flags);
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *yg = y0 + g * GROUP;
        for (int t = 0; t < SETS; t++) {
            const int n = NC - 2 * t < 2 ? 1 : 2;  // columns in this set
            const uint8_t *yc[2] = {yg + 2 * t * ys, yg + (2 * t + n - 1) * ys};
            auto ld = [&](int c, size_t off) { return _mm256_loadu_si256((const __m256i *)(yc[c] + off)); };
            auto ldf = [&](int c, size_t off) { return _mm256_loadu_ps((const float *)(yc[c] + off)); };
            // a pair's fields: column 0 at positions 0 and 1 of each 128-bit lane, column 1 at 2 and 3
            auto both = [&](size_t off) { return n == 2 ? _mm256_blend_ps(ldf(0, off), ldf(1, off), 0xCC) : ldf(0, off); };
            __m256i sums[NR];
            for (int r = 0; r < NR; r++) {
                wgroup2 tmp;
                const wgroup2 *w = load(r, g, &tmp);
                // column c's block sums of quants plane o (q, or q8xh's residual at 128), 8 products a word
                auto col = [&](int c, size_t o) {
                    const __m256i a = _mm256_add_epi16(_mm256_maddubs_epi16(w->u[0], ld(c, o)), _mm256_maddubs_epi16(w->v[0], ld(c, o + 64)));
                    const __m256i b = _mm256_add_epi16(_mm256_maddubs_epi16(w->u[1], ld(c, o + 32)), _mm256_maddubs_epi16(w->v[1], ld(c, o + 96)));
                    return _mm256_add_epi16(a, b);
                };
                // the set's sums of plane o times mul: the pair's qwords side by side (or a column onto itself), added
                auto set = [&](size_t o, bool hi) {
                    const __m256i m = k.words(hi), f0 = col(0, o);
                    auto fold = [&](__m256i a, __m256i b, bool w16) {
                        const __m256i lo = _mm256_unpacklo_epi64(a, b), hi = _mm256_unpackhi_epi64(a, b);
                        return w16 ? _mm256_add_epi16(lo, hi) : _mm256_add_epi32(lo, hi);
                    };
                    if (W16) return _mm256_madd_epi16(fold(f0, n == 2 ? col(1, o) : f0, true), m);
                    const __m256i d0 = _mm256_madd_epi16(f0, m);
                    return fold(d0, n == 2 ? _mm256_madd_epi16(col(1, o), m) : d0, false);
                };
                sums[r] = H ? _mm256_add_epi32(set(0, true), set(128, false)) : set(0, false);
            }
            const __m256 dy = both(F), dm = both(F + 32);
            const __m256i off = OFF ? _mm256_add_epi32(_mm256_slli_epi32(_mm256_castps_si256(both(F + 64)), OFF ? X::S : 0), magic) : magic;
            const __m256 sd = OFF ? _mm256_setzero_ps() : both(F + 96);
            for (int r = 0; r < NR; r++) {
                wgroup2 tmp;
                const wgroup2 *w = load(r, g, &tmp);
                acc[r][t] = add_group<OFF>(acc[r][t], scaled_sum<MAGIC>(_mm256_add_epi32(sums[r], off), dy, dm), w, sd);
            }
        }
    }
    tile2_store<NR, NC>(acc, s, ss, accv, ars, flags);
}

// A q8x (H: q8xh) row's fields folded in place, per group at il_fields
// those of one column: dy and FM dy in the folded order (unpacklo of the
// halves), ns and sd folded per block as q8x_tile2_fold folds them for one
// column (the sums in either order: exact integers, and float pairs whose
// additions commute), ns shifted left by `shift` (none: -1, nothing of it
// taken) and plus `magic`. IL: the quants (and residual quants)
// dword-interleaved as the unpacked weights of q8x_tile2_il, else left.
template <bool H, bool IL>
void fold_row_avx2(void *vy, int64_t k, int shift, int32_t magic) {
    constexpr size_t GROUP = H ? GGML_Q8XH_GROUP : GGML_Q8X_GROUP, Q = H ? 256 : 128, DY = Q, NS = DY + 64, SD = DY + 128, F = il_fields<H>();
    uint8_t *y = (uint8_t *)vy;
    for (int64_t g = 0; g < (k + 127) / 128; g++) {
        uint8_t *yg = y + g * GROUP;
        auto ld = [&](size_t o) { return _mm256_loadu_si256((const __m256i *)(yg + o)); };
        auto st = [&](size_t o, __m256i v) { _mm256_storeu_si256((__m256i *)(yg + o), v); };
        const __m256 dy = _mm256_unpacklo_ps(_mm256_castsi256_ps(ld(DY)), _mm256_castsi256_ps(ld(DY + 32)));
        __m256i ns = _mm256_add_epi32(_mm256_unpacklo_epi32(ld(NS), ld(NS + 32)), _mm256_unpackhi_epi32(ld(NS), ld(NS + 32)));
        ns = _mm256_add_epi32(ns, _mm256_shuffle_epi32(ns, _MM_SHUFFLE(1, 0, 3, 2)));
        ns = shift < 0 ? _mm256_setzero_si256() : _mm256_sll_epi32(ns, _mm_cvtsi32_si128(shift));
        const __m256 s0 = _mm256_castsi256_ps(ld(SD)), s1 = _mm256_castsi256_ps(ld(SD + 32));
        __m256 sd = _mm256_add_ps(_mm256_unpacklo_ps(s0, s1), _mm256_unpackhi_ps(s0, s1));
        sd = _mm256_add_ps(sd, _mm256_permute_ps(sd, _MM_SHUFFLE(1, 0, 3, 2)));
        if (IL) {
            __m256i q[Q / 32];
            for (size_t i = 0; i < Q / 32; i++) q[i] = ld(32 * i);
            for (size_t i = 0; i < Q / 32; i += 2) {  // each 64-byte plane: its two registers interleaved
                st(32 * i, _mm256_unpacklo_epi32(q[i], q[i + 1]));
                st(32 * i + 32, _mm256_unpackhi_epi32(q[i], q[i + 1]));
            }
        }
        _mm256_storeu_ps((float *)(yg + F), dy);
        _mm256_storeu_ps((float *)(yg + F + 32), _mm256_mul_ps(dy, _mm256_set1_ps(12582912.0f)));
        st(F + 64, _mm256_add_epi32(ns, _mm256_set1_epi32(magic)));
        _mm256_storeu_ps((float *)(yg + F + 96), sd);
    }
}
// q8x_tile2_il's rows: interleaved, the offsets as they are.
template <bool H>
void pack_q8x_avx2(void *vy, int64_t k) { fold_row_avx2<H, true>(vy, k, 0, 0); }
// Loader X's one-row kernel with PF: the quants where they are, the offsets
// as it adds them (ns << S with the magic bits, or the magic bits alone).
template <class X, bool H>
void pack_fields_avx2(void *vy, int64_t k) {
    fold_row_avx2<H, false>(vy, k, X::S >= 0 ? X::S : -1, fold_magic<X, H>() ? 0x4B400000 : 0);
}

// One weight row in its own format against NC (1..4) activation rows (PF:
// as pack_fields_avx2 left them, for a folded type).
template <class X, int NC, bool H, bool PF = false>
void dot_q8x_avx2(int64_t k, const void *vx, const void *vy, size_t ys, float *s, size_t ss) {
    const typename X::B *x = (const typename X::B *)vx;
    const int64_t nb = k / 32, ng = (nb + 3) / 4;
    auto load = [&](int, int64_t g, wgroup2 *w) {
        load_group2<X>(x, nb, g, w);
        return (const wgroup2 *)w;
    };
    if constexpr (folded_tile2<X>::value)
        q8x_tile2_fold<X, 1, NC, H, PF>(ng, load, (const uint8_t *)vy, ys, s, ss, nullptr, 0, GGML_Q8X_ACC_FIRST | GGML_Q8X_ACC_LAST);
    else
        q8x_tile2<X, 1, NC, H>(ng, load, (const uint8_t *)vy, ys, s, ss, nullptr, 0, GGML_Q8X_ACC_FIRST | GGML_Q8X_ACC_LAST);
}

// A weight row unpacked once, group by group (ggml_q8x_unpacked_size), for
// the prompt kernels: the unpacking is paid once per row block and prompt,
// not once per column tile.
template <class X>
void unpack_q8x_avx2(int64_t k, const void *vx, void *vu) {
    const typename X::B *x = (const typename X::B *)vx;
    const int64_t nb = k / 32, ng = (nb + 3) / 4;
    wgroup2 *u = (wgroup2 *)vu;
    for (int64_t g = 0; g < ng; g++) {
        load_group2<X>(x, nb, g, &u[g]);
        if constexpr (il_order<X>()) {  // q8x_tile2_il's order: blocks 0 and 2 (1 and 3) by alternate dwords
            const __m256i u0 = u[g].u[0], u1 = u[g].u[1], v0 = u[g].v[0], v1 = u[g].v[1];
            u[g].u[0] = _mm256_unpacklo_epi32(u0, u1), u[g].u[1] = _mm256_unpackhi_epi32(u0, u1);
            u[g].v[0] = _mm256_unpacklo_epi32(v0, v1), u[g].v[1] = _mm256_unpackhi_epi32(v0, v1);
        }
    }
}

// GGML_Q8X_GEMM_ROWS unpacked rows (u, u + us bytes, ...) against nc (1..4)
// activation rows, ng groups of them (acc, flags: see q8x_tile2), as register
// tiles of all the rows by one column (8 accumulators of the 16 registers; a
// column's activations and scales loaded once for the rows: in cache, faster
// than tiles of two rows by two columns): each element computed as
// dot_q8x_avx2 computes it.
template <class X, bool H>
void gemm_q8x_avx2_n(int64_t ng, const void *vu, size_t us, const void *vy, size_t ys, float *acc, float *s, size_t ss, int nc, int flags) {
    auto load = [&](int r, int64_t g, wgroup2 *) { return (const wgroup2 *)((const char *)vu + (size_t)r * us) + g; };
    if constexpr (folded_tile2<X>::value) {  // tiles of all the rows by two columns (IL: on packed rows)
        const uint8_t *y = (const uint8_t *)vy;
        auto tile = [&](auto cols, int c) {
            constexpr int NC = decltype(cols)::value;
            float *sc = (float *)((char *)s + c * ss);
            if constexpr (il_order<X>())
                q8x_tile2_il<X, GGML_Q8X_GEMM_ROWS, NC, H>(ng, load, y + c * ys, ys, sc, ss, acc + 16 * c, nc, flags);
            else
                q8x_tile2_fold<X, GGML_Q8X_GEMM_ROWS, NC, H, false>(ng, load, y + c * ys, ys, sc, ss, acc + 16 * c, nc, flags);
        };
        int c = 0;
        for (; c + 2 <= nc; c += 2) tile(std::integral_constant<int, 2>(), c);
        if (c < nc) tile(std::integral_constant<int, 1>(), c);
        return;
    }
    for (int c = 0; c < nc; c++)
        q8x_tile2<X, GGML_Q8X_GEMM_ROWS, 1, H>(ng, load, (const uint8_t *)vy + c * ys, ys, (float *)((char *)s + c * ss), ss, acc + 16 * c, nc,
                                               flags);
}

// nc 1..8: up to four columns per pass (16 registers), each column computed
// the same way whatever the tile.
template <class X, bool H, bool PF = false>
void dot_q8x_avx2_n(int64_t k, const void *x, const void *y, size_t ys, float *s, size_t ss, int nc) {
    for (int c0 = 0; c0 < nc; c0 += 4) {
        const void *yc = (const char *)y + c0 * ys;
        float *sc = (float *)((char *)s + c0 * ss);
        switch (nc - c0 >= 4 ? 4 : nc - c0) {
            case 1: dot_q8x_avx2<X, 1, H, PF>(k, x, yc, ys, sc, ss); break;
            case 2: dot_q8x_avx2<X, 2, H, PF>(k, x, yc, ys, sc, ss); break;
            case 3: dot_q8x_avx2<X, 3, H, PF>(k, x, yc, ys, sc, ss); break;
            default: dot_q8x_avx2<X, 4, H, PF>(k, x, yc, ys, sc, ss); break;
        }
    }
}


// Every q8x kernel of loader X for type t: the one-row dot, and (gemm) the
// prompt kernels. q8_0 goes without them: its tile keeps |w| of every row
// beside the weights, more than the 16 registers hold, and in cache (64
// columns) it ran 10-25% slower than four columns of the one-row kernel.
template <class X>
void q8x_set2(ggml_q8x_kernels *q, ggml_type t, bool gemm = true) {
    q->dot[t] = dot_q8x_avx2_n<X, false>;
    q->dot_hi[t] = dot_q8x_avx2_n<X, true>;
    q->unpack[t] = gemm ? unpack_q8x_avx2<X> : nullptr;
    q->gemm[t] = gemm ? gemm_q8x_avx2_n<X, false> : nullptr;
    q->gemm_hi[t] = gemm ? gemm_q8x_avx2_n<X, true> : nullptr;
    q->gemm_pack[t] = gemm && il_order<X>() ? pack_q8x_avx2<false> : nullptr;
    q->gemm_pack_hi[t] = gemm && il_order<X>() ? pack_q8x_avx2<true> : nullptr;
    // the one-row kernel on rows whose fields are folded once per token: the
    // NARROW folds without the early join, no field folds per group (Zen 3,
    // one thread in L2, against fdee1f6: Q4_0 `fast` 12.0-12.9 -> 13.8-15.1
    // GB/s, Q5_1 10.0 -> 11.7-12.1, `high` level to +10%)
    if constexpr (il_order<X>()) {
        q->dot_own[t] = dot_q8x_avx2_n<X, false, true>;
        q->dot_own_hi[t] = dot_q8x_avx2_n<X, true, true>;
        q->dot_pack[t] = pack_fields_avx2<X, false>;
        q->dot_pack_hi[t] = pack_fields_avx2<X, true>;
    }
}

// The slots these kernels fill: the K-quants' vec_dot, the fused row +
// residual dots, and the q8x kernels (one-row dot, unpack, prompt gemm) of
// the 32-element types and the K-quants (q2_K, q3_K and q6_K for prompt
// batches only: min_cols).
inline void set_int_dots(ggml_cpu_type_traits *t, ggml_vec_dot2_t *dot2, ggml_q8x_kernels *q) {
    if (t) {
        t[GGML_TYPE_Q2_K].vec_dot = vec_dot_q2_K_q8_K;
        t[GGML_TYPE_Q3_K].vec_dot = vec_dot_q3_K_q8_K;
        t[GGML_TYPE_Q4_K].vec_dot = vec_dot_q4_K_q8_K;
        t[GGML_TYPE_Q5_K].vec_dot = vec_dot_q5_K_q8_K;
        t[GGML_TYPE_Q6_K].vec_dot = vec_dot_q6_K_q8_K;
    }
    if (dot2) {
        dot2[GGML_TYPE_Q2_K] = dot_q2_K<2>;
        dot2[GGML_TYPE_Q3_K] = dot_q3_K<2>;
        dot2[GGML_TYPE_Q4_K] = dot_q45_K<false, 2>;
        dot2[GGML_TYPE_Q5_K] = dot_q45_K<true, 2>;
        dot2[GGML_TYPE_Q6_K] = dot_q6_K<2>;
    }
    if (q) {
        q8x_set2<X2_q4_0>(q, GGML_TYPE_Q4_0);
        q8x_set2<X2_q4_1>(q, GGML_TYPE_Q4_1);
        q8x_set2<X2_q5_0>(q, GGML_TYPE_Q5_0);
        q8x_set2<X2_q5_1>(q, GGML_TYPE_Q5_1);
        q8x_set2<X2_q8_0>(q, GGML_TYPE_Q8_0, false);
        q8x_set2<X2K<false>>(q, GGML_TYPE_Q4_K);
        q8x_set2<X2K<true>>(q, GGML_TYPE_Q5_K);
        q8x_set2<X2K2>(q, GGML_TYPE_Q2_K);
        q8x_set2<X2K3>(q, GGML_TYPE_Q3_K);
        q8x_set2<X2K6>(q, GGML_TYPE_Q6_K);
        q->min_cols[GGML_TYPE_Q2_K] = q->min_cols[GGML_TYPE_Q3_K] = q->min_cols[GGML_TYPE_Q6_K] = GGML_Q8X_GEMM_MIN_COLS;
        // `high` prompts in chunks of 32 groups, measured: Zen 3, 7B-shaped
        // Q4_0 pp512 `high` +13% against 8 (likely: twice the integer work
        // per chunk, so its data leaving L1 costs less); `fast` 0 to -6%
        // with 16 or 32, so it keeps 8
        q->gemm_groups[1] = 32;
        // q4_K, q5_K from 2 columns on (min_cols 0): in cache, 2 columns of q5_K
        // and the `high` products are 15-40% faster than two q8_K dots, q4_K
        // `fast` even
    }
}

}  // namespace
