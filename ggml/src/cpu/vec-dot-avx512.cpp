// AVX-512 (F/BW/VL/DQ/VNNI) kernels for the hot types: two 32-element blocks
// per 512-bit register, integer dots with vpdpbusd (u8 x s8 -> s32). Types
// not listed here keep their AVX2 kernels.
// GCC 12 warns on the deliberately undefined registers inside its own
// AVX-512 intrinsic headers; silence that false positive here only.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <string.h>

#include <initializer_list>
#include <type_traits>

#include "ggml-quants.h"
#include "kquant-scales.h"
#include "vec-dot-simd.h"
#include "q8x-dot.h"

namespace {

inline float fp16(ggml_fp16_t h) { return _cvtsh_ss(h); }

inline __m512i load2_256(const void *a, const void *b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}

// Packed nibbles of two q4 blocks -> 64 bytes in element order (a_lo a_hi b_lo b_hi).
inline __m512i unpack2_nibbles(const uint8_t *qa, const uint8_t *qb) {
    const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)qa)),
                                              _mm_loadu_si128((const __m128i *)qb), 1);
    __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);
    z = _mm512_and_si512(z, _mm512_set1_epi8(0x0F));
    return _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
}

// dx*dy of four consecutive block pairs, spread over two registers of 16
// lanes (8 lanes per block, matching two blocks per register). The fp16
// scales are converted four at a time: scalar conversions would cost more
// than the integer dot product itself.
template <typename BX, typename BY>
inline void scales4(const BX *x, const BY *y, __m512 *s01, __m512 *s23) {
    auto ld = [](const void *p) { int v; memcpy(&v, p, 4); return v; };  // d + 2 bytes after it
    const __m128i vx = _mm_setr_epi32(ld(&x[0].d), ld(&x[1].d), ld(&x[2].d), ld(&x[3].d));
    const __m128i vy = _mm_setr_epi32(ld(&y[0].d), ld(&y[1].d), ld(&y[2].d), ld(&y[3].d));
    const __m256 f = _mm256_cvtph_ps(_mm_blend_epi16(vx, _mm_slli_epi32(vy, 16), 0xAA));  // dx0 dy0 dx1 dy1 ...
    const __m512 p = _mm512_castps256_ps512(_mm256_mul_ps(f, _mm256_movehdup_ps(f)));       // lanes 0,2,4,6
    *s01 = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2), p);
    *s23 = _mm512_permutexvar_ps(_mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6), p);
}

inline __m256i unpack_nibbles(const uint8_t *qs) {
    const __m128i v = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0F));
}

// x (unsigned nibbles 0..15) . y - 8 * sum(y) = (x - 8) . y
void vec_dot_q4_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q4_0 *x = (const block_q4_0 *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    const int64_t nb = n / QK8_0;
    const __m512i eight = _mm512_set1_epi8(8);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    const int ahead = ggml_prefetch_distance;
    int64_t i = 0;
    for (; i + 3 < nb; i += 4) {
        ggml_prefetch_chunk(x + i, 4 * (int)sizeof(*x), ahead);
        const __m512i ya = load2_256(y[i].qs, y[i + 1].qs), yb = load2_256(y[i + 2].qs, y[i + 3].qs);
        const __m512i xa = unpack2_nibbles(x[i].qs, x[i + 1].qs), xb = unpack2_nibbles(x[i + 2].qs, x[i + 3].qs);
        const __m512i z = _mm512_setzero_si512();
        const __m512i pa = _mm512_sub_epi32(_mm512_dpbusd_epi32(z, xa, ya), _mm512_dpbusd_epi32(z, eight, ya));
        const __m512i pb = _mm512_sub_epi32(_mm512_dpbusd_epi32(z, xb, yb), _mm512_dpbusd_epi32(z, eight, yb));
        __m512 sa, sb;
        scales4(x + i, y + i, &sa, &sb);
        acc0 = _mm512_fmadd_ps(sa, _mm512_cvtepi32_ps(pa), acc0);
        acc1 = _mm512_fmadd_ps(sb, _mm512_cvtepi32_ps(pb), acc1);
    }
    __m256 acc2 = _mm256_setzero_ps();
    for (; i < nb; i++) {
        const __m256i yv = _mm256_loadu_si256((const __m256i *)y[i].qs), z = _mm256_setzero_si256();
        const __m256i p = _mm256_sub_epi32(_mm256_dpbusd_epi32(z, unpack_nibbles(x[i].qs), yv),
                                           _mm256_dpbusd_epi32(z, _mm256_set1_epi8(8), yv));
        acc2 = _mm256_fmadd_ps(_mm256_set1_ps(fp16(x[i].d) * fp16(y[i].d)), _mm256_cvtepi32_ps(p), acc2);
    }
    *s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + _mm512_reduce_add_ps(_mm512_insertf32x8(_mm512_setzero_ps(), acc2, 0));
}

// x + 128 is unsigned: (x + 128) . y - 128 * sum(y) = x . y
void vec_dot_q8_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q8_0 *x = (const block_q8_0 *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    const int64_t nb = n / QK8_0;
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    const int ahead = ggml_prefetch_distance;
    int64_t i = 0;
    for (; i + 3 < nb; i += 4) {
        ggml_prefetch_chunk(x + i, 4 * (int)sizeof(*x), ahead);
        const __m512i ya = load2_256(y[i].qs, y[i + 1].qs), yb = load2_256(y[i + 2].qs, y[i + 3].qs);
        const __m512i xa = _mm512_xor_si512(load2_256(x[i].qs, x[i + 1].qs), bias);
        const __m512i xb = _mm512_xor_si512(load2_256(x[i + 2].qs, x[i + 3].qs), bias);
        const __m512i z = _mm512_setzero_si512();
        const __m512i pa = _mm512_sub_epi32(_mm512_dpbusd_epi32(z, xa, ya), _mm512_dpbusd_epi32(z, bias, ya));
        const __m512i pb = _mm512_sub_epi32(_mm512_dpbusd_epi32(z, xb, yb), _mm512_dpbusd_epi32(z, bias, yb));
        __m512 sa, sb;
        scales4(x + i, y + i, &sa, &sb);
        acc0 = _mm512_fmadd_ps(sa, _mm512_cvtepi32_ps(pa), acc0);
        acc1 = _mm512_fmadd_ps(sb, _mm512_cvtepi32_ps(pb), acc1);
    }
    __m256 acc2 = _mm256_setzero_ps();
    for (; i < nb; i++) {
        const __m256i b = _mm256_set1_epi8((char)0x80), z = _mm256_setzero_si256();
        const __m256i yv = _mm256_loadu_si256((const __m256i *)y[i].qs);
        const __m256i xv = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)x[i].qs), b);
        const __m256i p = _mm256_sub_epi32(_mm256_dpbusd_epi32(z, xv, yv), _mm256_dpbusd_epi32(z, b, yv));
        acc2 = _mm256_fmadd_ps(_mm256_set1_ps(fp16(x[i].d) * fp16(y[i].d)), _mm256_cvtepi32_ps(p), acc2);
    }
    *s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + _mm512_reduce_add_ps(_mm512_insertf32x8(_mm512_setzero_ps(), acc2, 0));
}

// ---------------------------------------------------------------- K-quants
//
// Each kernel takes NR activation rows (1; or 2 with GGML_PREC_HIGH: a row
// and its q8_K residual vrow bytes further on, ops.h) and returns the sum of
// the NR dots: the weights of a superblock are unpacked once for both.
// maddubs (u x s8 pairs fit in s16), then madd by the sub-block scales
// (vpermw of the superblock's scale words), accumulated in s32 per
// superblock as in the reference; the mins / fixed offsets go through the
// activation block sums.

// Constant index vectors, built once: element e of entry r is `f(r, e)`
// (32 words, or 64 bytes, per entry).
template <typename E, int (*F)(int, int)>
struct const_index {
    static constexpr int N = 64 / (int)sizeof(E);
    alignas(64) E w[4][N];
    const_index() {
        for (int r = 0; r < 4; r++)
            for (int i = 0; i < N; i++) w[r][i] = (E)F(r, i);
    }
    __m512i operator[](int r) const { return _mm512_load_si512(w[r]); }
};
template <int (*F)(int, int)> using word_index = const_index<int16_t, F>;
template <int (*F)(int, int)> using byte_index = const_index<int8_t, F>;
// q4_K / q5_K register r: elements 64 (r / 2) + 32 (r % 2) + ... in element order, sub-blocks of 32
inline int idx_4bit(int r, int w) { return 2 * r + w / 16; }
// q6_K register r: sub-blocks of 16
inline int idx_6bit(int r, int w) { return 4 * r + w / 8; }

template <int NR>
inline const block_q8_K *act_row(const void *vy, size_t vrow, int r) {
    return (const block_q8_K *)((const char *)vy + (size_t)r * vrow);
}

// v shifted in 16-bit lanes so that the bits from `from` up of each byte land
// at `to` up (a field inside one byte takes no bit of the word's other byte).
inline __m512i move_bits(__m512i v, int from, int to) {
    return from < to ? _mm512_slli_epi16(v, to - from) : from > to ? _mm512_srli_epi16(v, from - to) : v;
}

// sumi + the superblock's sub-block dots against one activation row:
// register k (64 weights u[k]) by maddubs, then vpdpwssd by its scale words
// sc[k]. (Two chains of two instead of one of four measured the same.)
inline __m512i dot_regs(const block_q8_K *y, const __m512i *u, const __m512i *sc, __m512i sumi) {
    for (int k = 0; k < 4; k++) sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(u[k], _mm512_loadu_si512(y->qs + 64 * k)), sc[k]);
    return sumi;
}

// One activation row's part of a superblock with scales and mins (q2_K,
// q4_K, q5_K): d dy sumi into acc, dmin dy (mins . bsums) into accm, with dm
// = (d, dmin) from fp16_pair.
inline void add_scaled_min(const block_q8_K *y, __m512i sumi, __m256i mn, __m128 dm, __m512 *acc, __m256 *accm) {
    const __m256i mins = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y->bsums), mn);
    const __m128 s = _mm_mul_ps(dm, _mm_set1_ps(y->d));
    *acc = _mm512_fmadd_ps(_mm512_broadcastss_ps(s), _mm512_cvtepi32_ps(sumi), *acc);
    *accm = _mm256_fmadd_ps(_mm256_permutexvar_ps(_mm256_set1_epi32(1), _mm256_castps128_ps256(s)), _mm256_cvtepi32_ps(mins), *accm);
}

// GGML_PREC_HIGH (NR = 2): the q8_K residual row lies on the grid d/128 of
// the row's blocks (ggml_cpu_from_resid), so 128 S + S2 is one integer sum
// per lane, scaled once by the residual's d (a conversion and an fma per row
// fewer; Zen 4 VM, one thread in cache: q2_K to q5_K `high` +3-4%). A lane
// here sums 16 products (32 in the AVX2 kernels) of |sc u| <= 63 x 31 and
// |q| <= 127 with q2_K to q5_K, whose 128-fold stays below 2^31; not so
// q6_K (|sc u| <= 128 x 63, and its -32 offset sum besides): it keeps a float
// step per row.
inline __m512i fold_resid(__m512i s, __m512i s2) { return _mm512_add_epi32(_mm512_slli_epi32(s, 7), s2); }
// add_scaled_min for the NR rows' superblock sums (the residual folded in)
template <int NR>
inline void add_scaled_mins(const block_q8_K *const *y, const __m512i *sumi, __m256i mn, __m128 dm, __m512 *acc, __m256 *accm) {
    if (NR == 1) return add_scaled_min(y[0], sumi[0], mn, dm, acc, accm);
    auto mins = [&](int r) { return _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y[r]->bsums), mn); };
    const __m128 s = _mm_mul_ps(dm, _mm_set1_ps(y[NR - 1]->d));
    *acc = _mm512_fmadd_ps(_mm512_broadcastss_ps(s), _mm512_cvtepi32_ps(fold_resid(sumi[0], sumi[NR - 1])), *acc);
    *accm = _mm256_fmadd_ps(_mm256_permutexvar_ps(_mm256_set1_epi32(1), _mm256_castps128_ps256(s)),
                            _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_slli_epi32(mins(0), 7), mins(NR - 1))), *accm);
}

// q2_K / q3_K register m holds elements 64m .. 64m + 63 in order, so the
// activations are plain 64-byte loads. Byte l of the quants' half h = m / 2
// holds element 128h + 32j + l at shift 2j: the 32 bytes of that half, as
// they are (low 256 bits) and shifted by 2 (high), give register 2h (j = 0,
// 1) and, shifted by 4, register 2h + 1 (j = 2, 3), with immediate shifts
// (a per-lane vpsrlvw of the broadcast bytes before; with q3_K's hmask laid
// out the same way, Zen 4 VM, one thread in cache: q3_K `fast` 14.5 -> 15.2
// GB/s, `high` 11.35 -> 11.9; 2 threads streaming 79% -> 82% of the read
// bandwidth; q2_K level). Word w's sub-block of 16 is 4m + w / 8.
inline __m512i half_2bit(const uint8_t *qs, int h) {
    const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * h));
    return _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 2), 1);
}
// register m's quants in their low 2 bits (the bits above unmasked), from half_2bit(qs, m / 2)
inline __m512i shifted_2bit(__m512i half, int m) { return m & 1 ? _mm512_srli_epi16(half, 4) : half; }
inline __m512i quants_2bit(__m512i half, int m) { return _mm512_and_si512(shifted_2bit(half, m), _mm512_set1_epi8(3)); }

// q2_K's 16 mins (the high nibbles of its scale bytes sv) as words.
inline __m256i q2k_mins(__m128i sv) { return _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sv, 4), _mm_set1_epi8(0x0F))); }

// q2_K: 16 sub-blocks of 16, 4-bit scales and mins; u = 2-bit quants.
template <int NR>
void dot_q2_K(int64_t n, float *s, const void *vx, const void *vy, size_t vrow) {
    static const word_index<idx_6bit> idx;
    const block_q2_K *x = (const block_q2_K *)vx;
    const int64_t nb = n / QK_K;
    __m512 acc = _mm512_setzero_ps();
    __m256 accm = _mm256_setzero_ps();
    const int ahead = ggml_prefetch_distance;
    for (int64_t i = 0; i < nb; i++) {
        ggml_prefetch_chunk(x + i, (int)sizeof(*x), ahead);
        const __m128i sv = _mm_loadu_si128((const __m128i *)x[i].scales);
        const __m512i sc = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(sv, _mm_set1_epi8(0x0F))));
        const __m256i mn = q2k_mins(sv);
        __m512i u[4], scm[4];
        const __m512i hq[2] = {half_2bit(x[i].qs, 0), half_2bit(x[i].qs, 1)};
        for (int m = 0; m < 4; m++) {
            u[m] = quants_2bit(hq[m / 2], m);
            scm[m] = _mm512_permutexvar_epi16(idx[m], sc);
        }
        const block_q8_K *y[NR];
        __m512i sumi[NR];
        for (int r = 0; r < NR; r++) {
            y[r] = act_row<NR>(vy, vrow, r) + i;
            sumi[r] = dot_regs(y[r], u, scm, _mm512_setzero_si512());
        }
        add_scaled_mins<NR>(y, sumi, mn, fp16_pair(&x[i].d), &acc, &accm);
    }
    *s = _mm512_reduce_add_ps(acc) - _mm512_reduce_add_ps(_mm512_zextps256_ps512(accm));
}

// q2_K with VBMI (Ice Lake, Zen 4 and later): sc * u <= 45 fits a byte, so
// the scale goes into the weights once per superblock instead of into every
// row's sums: a table of the products sc_k * u, looked up by u, gives the
// scaled weights, which vpdpbusd takes straight (no maddubs + vpdpwssd per
// row). In-cache, one thread (Xeon VM): 10.3 -> 11.4 GB/s `fast`, 7.5 -> 8.3
// with the residual row. Register m's 128-bit lane L is sub-block 4m + L, so
// the table's lane L holds sc_{4m+L} * u at byte 4m + u for every m and each
// register's lookup is an in-lane vpshufb of index 4m + u (a vpermb over one
// 64-byte table before: level to +2% in cache on the Zen 4 VM). The table
// itself is two vpermb and a ternary-logic op: each byte's scale byte, its
// nibble merged with 16 u into an index into the constant products.
inline int q2k_table_scale(int, int b) { return 4 * (b % 16 / 4) + b / 16; }  // byte b (lane L = b / 16, 4m + u = b % 16): scale 4m + L
inline int q2k_table_u(int, int b) { return 16 * (b % 4); }                   // ... and u = b % 4, as 16 u
inline int q2k_product(int, int i) { return (i % 16) * (i / 16); }            // byte 16 u + sc: sc u
inline int q2k_lane_base(int m, int) { return 4 * m; }                        // register m's table bytes: 4m + u
template <int NR>
__attribute__((target("avx512vbmi"))) void dot_q2_K_vbmi(int64_t n, float *s, const void *vx, const void *vy, size_t vrow) {
    static const byte_index<q2k_table_scale> tsc;
    static const byte_index<q2k_table_u> tu;
    static const byte_index<q2k_product> prod;
    static const byte_index<q2k_lane_base> base;
    const block_q2_K *x = (const block_q2_K *)vx;
    const int64_t nb = n / QK_K;
    const __m512i three = _mm512_set1_epi8(3);
    __m512 acc = _mm512_setzero_ps();
    __m256 accm = _mm256_setzero_ps();
    const int ahead = ggml_prefetch_distance;
    for (int64_t i = 0; i < nb; i++) {
        ggml_prefetch_chunk(x + i, (int)sizeof(*x), ahead);
        const __m128i sv = _mm_loadu_si128((const __m128i *)x[i].scales);
        // byte 4m + u of the table's lane L: sc_k u (k = 4m + L), looked up in the constant products by 16 u + sc_k
        const __m512i sk = _mm512_permutexvar_epi8(tsc[0], _mm512_castsi128_si512(sv));
        const __m512i table = _mm512_permutexvar_epi8(_mm512_ternarylogic_epi32(sk, _mm512_set1_epi8(0x0F), tu[0], 0xEA), prod[0]);  // (a & b) | c
        const __m256i mn = q2k_mins(sv);
        __m512i w[4];
        const __m512i hq[2] = {half_2bit(x[i].qs, 0), half_2bit(x[i].qs, 1)};
        for (int m = 0; m < 4; m++) {
            const __m512i ix = _mm512_ternarylogic_epi32(shifted_2bit(hq[m / 2], m), three, base[m], 0xEA);  // (a & b) | c
            w[m] = _mm512_shuffle_epi8(table, ix);
        }
        const block_q8_K *y[NR];
        __m512i sumi[NR];
        for (int r = 0; r < NR; r++) {
            y[r] = act_row<NR>(vy, vrow, r) + i;
            sumi[r] = _mm512_setzero_si512();
            for (int m = 0; m < 4; m++) sumi[r] = _mm512_dpbusd_epi32(sumi[r], w[m], _mm512_loadu_si512(y[r]->qs + 64 * m));
        }
        add_scaled_mins<NR>(y, sumi, mn, fp16_pair(&x[i].d), &acc, &accm);
    }
    *s = _mm512_reduce_add_ps(acc) - _mm512_reduce_add_ps(_mm512_zextps256_ps512(accm));
}

// q3_K: u = 2 low bits | hmask bit << 2 (0..7), value u - 4; 16 sub-blocks
// of 16 with 6-bit scales stored plus 32. The 4 comes off in integers
// through the block sums. hmask bit c of byte l is element 32c + l: register
// m takes bits 2m (low 256 bits) and 2m + 1 (high) of the 32 hmask bytes,
// laid out as half_2bit lays the quants (the high copy shifted right by 1),
// so one immediate shift of that pair puts both at bit 2 (left by 2 for m =
// 0, right by 2m - 2 otherwise; word shifts of at most 5 bits in all bring
// nothing from the other byte into bit 2), merged with the low bits by one
// ternary-logic op.
template <int NR>
void dot_q3_K(int64_t n, float *s, const void *vx, const void *vy, size_t vrow) {
    static const word_index<idx_6bit> idx;
    const block_q3_K *x = (const block_q3_K *)vx;
    const int64_t nb = n / QK_K;
    const __m512i four = _mm512_set1_epi8(4);
    __m512 acc = _mm512_setzero_ps();
    const int ahead = ggml_prefetch_distance;
    for (int64_t i = 0; i < nb; i++) {
        ggml_prefetch_chunk(x + i, (int)sizeof(*x), ahead);
        const __m256i sc16 = q3k_scales16(x[i].scales);
        const __m256i off16 = _mm256_mullo_epi16(sc16, _mm256_set1_epi16(-4));  // the -4 of every value, per sub-block
        const __m512i sc = _mm512_castsi256_si512(sc16);
        const __m256i h = _mm256_loadu_si256((const __m256i *)x[i].hmask);
        const __m512i hm = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 1), 1);
        const __m512i hq[2] = {half_2bit(x[i].qs, 0), half_2bit(x[i].qs, 1)};
        __m512i u[4], scm[4];
        for (int m = 0; m < 4; m++) {
            const __m512i hb = m == 0 ? _mm512_slli_epi16(hm, 2) : m == 1 ? hm : _mm512_srli_epi16(hm, 2 * m - 2);
            u[m] = _mm512_ternarylogic_epi32(quants_2bit(hq[m / 2], m), hb, four, 0xF8);  // a | (b & 4)
            scm[m] = _mm512_permutexvar_epi16(idx[m], sc);
        }
        const block_q8_K *y[NR];
        __m512i sumi[NR];
        for (int r = 0; r < NR; r++) {
            y[r] = act_row<NR>(vy, vrow, r) + i;
            // - 4 sum_k sc_k bsums_k, in lanes 0..7
            sumi[r] = _mm512_zextsi256_si512(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y[r]->bsums), off16));
            sumi[r] = dot_regs(y[r], u, scm, sumi[r]);
        }
        const __m512i si = NR == 2 ? fold_resid(sumi[0], sumi[NR - 1]) : sumi[0];
        acc = _mm512_fmadd_ps(_mm512_set1_ps(y[NR - 1]->d * fp16(x[i].d)), _mm512_cvtepi32_ps(si), acc);
    }
    *s = _mm512_reduce_add_ps(acc);
}

// q4_K (Q5 = false) and q5_K (Q5 = true, a fifth bit per quant, u = 0..31):
// 8 sub-blocks of 32 with 6-bit scales and mins. A 64-byte load of the
// packed quants holds elements [64h, 64h+64) as low nibbles (first 32) and
// high nibbles (next 32) of two 32-byte halves; a 128-bit lane shuffle puts
// them in element order, so y is read with plain 64-byte loads.
template <bool Q5, int NR>
void dot_q45_K(int64_t n, float *s, const void *vx, const void *vy, size_t vrow) {
    static const word_index<idx_4bit> idx;
    using BX = typename std::conditional<Q5, block_q5_K, block_q4_K>::type;
    const BX *x = (const BX *)vx;
    const int64_t nb = n / QK_K;
    const __m512i m4 = _mm512_set1_epi8(0x0F), b4 = _mm512_set1_epi8(0x10);
    __m512 acc = _mm512_setzero_ps();
    __m256 accm = _mm256_setzero_ps();
    const int ahead = ggml_prefetch_distance;
    for (int64_t i = 0; i < nb; i++) {
        ggml_prefetch_chunk(x + i, (int)sizeof(*x), ahead);
        const __m128i sm = scales_q45(x[i].scales);
        const __m512i sc = _mm512_castsi128_si512(_mm_cvtepu8_epi16(sm));
        const __m256i mn = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm));  // min of sub-block k / 2 at word k
        __m512i u[4], scr[4];
        // q5_K fifth bits: bit (e / 32) of qh[e % 32]; the second copy is shifted by one so that
        // one shift by 4h (2h + 1 for the second register) serves both 32-element halves
        __m512i q2 = _mm512_setzero_si512();
        if (Q5) {
            const __m256i qh = _mm256_loadu_si256((const __m256i *)((const block_q5_K *)(const void *)(x + i))->qh);
            q2 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 1), 1);
        }
        for (int h = 0; h < 2; h++) {
            const __m512i q = _mm512_loadu_si512(x[i].qs + 64 * h);
            const __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
            u[2 * h] = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(1, 0, 1, 0));
            u[2 * h + 1] = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(3, 2, 3, 2));
            if (Q5) {  // the bit shifted straight to bit 4 (no bit of the word's other byte reaches it), merged by u | (b & 16)
                u[2 * h] = _mm512_ternarylogic_epi32(u[2 * h], move_bits(q2, 4 * h, 4), b4, 0xF8);
                u[2 * h + 1] = _mm512_ternarylogic_epi32(u[2 * h + 1], move_bits(q2, 4 * h + 2, 4), b4, 0xF8);
            }
        }
        for (int k = 0; k < 4; k++) scr[k] = _mm512_permutexvar_epi16(idx[k], sc);
        const block_q8_K *y[NR];
        __m512i sumi[NR];
        for (int r = 0; r < NR; r++) {
            y[r] = act_row<NR>(vy, vrow, r) + i;
            sumi[r] = dot_regs(y[r], u, scr, _mm512_setzero_si512());
        }
        add_scaled_mins<NR>(y, sumi, mn, fp16_pair(&x[i].d), &acc, &accm);  // mn[j]: sub-block j / 2's min, against bsums[j]
    }
    *s = _mm512_reduce_add_ps(acc) - _mm512_reduce_add_ps(_mm512_zextps256_ps512(accm));
}

// q6_K: 16 sub-blocks of 16 with int8 scales; u = 4 low bits | 2 high bits
// << 4 (0..63), value u - 32: the 32 is taken off through the block sums in
// integers, so each superblock is one exact s32 sum as in the reference.
template <int NR>
void dot_q6_K(int64_t n, float *s, const void *vx, const void *vy, size_t vrow) {
    static const word_index<idx_6bit> idx;
    const block_q6_K *x = (const block_q6_K *)vx;
    const int64_t nb = n / QK_K;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(3);
    __m512 acc = _mm512_setzero_ps();
    const int ahead = ggml_prefetch_distance;
    for (int64_t i = 0; i < nb; i++) {
        ggml_prefetch_chunk(x + i, (int)sizeof(*x), ahead);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        const __m256i off16 = _mm256_mullo_epi16(sc16, _mm256_set1_epi16(-32));  // the -32 of every value (|.| <= 4096)
        const __m512i sc = _mm512_castsi256_si512(sc16);
        __m512i u[4], scr[4];
        for (int h = 0; h < 2; h++) {
            const __m512i l = _mm512_loadu_si512(x[i].ql + 64 * h);
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h));
            // high-bit pairs of the first 32 elements in bits 0-1, of the next 32 in bits 2-3 (>> 2)
            const __m512i q2 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
            u[2 * h] = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_slli_epi16(_mm512_and_si512(q2, m3), 4));
            u[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                           _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(q2, 4), m3), 4));
        }
        for (int k = 0; k < 4; k++) scr[k] = _mm512_permutexvar_epi16(idx[k], sc);
        const float xd = fp16(x[i].d);
        for (int r = 0; r < NR; r++) {
            const block_q8_K *y = act_row<NR>(vy, vrow, r) + i;
            __m512i sumi = _mm512_zextsi256_si512(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y->bsums), off16));
            sumi = dot_regs(y, u, scr, sumi);
            acc = _mm512_fmadd_ps(_mm512_set1_ps(y->d * xd), _mm512_cvtepi32_ps(sumi), acc);
        }
    }
    *s = _mm512_reduce_add_ps(acc);
}

void vec_dot_q2_K_q8_K(int64_t n, float *s, const void *x, const void *y) { dot_q2_K<1>(n, s, x, y, 0); }
void vec_dot_q2_K_q8_K_vbmi(int64_t n, float *s, const void *x, const void *y) { dot_q2_K_vbmi<1>(n, s, x, y, 0); }
void vec_dot_q3_K_q8_K(int64_t n, float *s, const void *x, const void *y) { dot_q3_K<1>(n, s, x, y, 0); }
void vec_dot_q4_K_q8_K(int64_t n, float *s, const void *x, const void *y) { dot_q45_K<false, 1>(n, s, x, y, 0); }
void vec_dot_q5_K_q8_K(int64_t n, float *s, const void *x, const void *y) { dot_q45_K<true, 1>(n, s, x, y, 0); }
void vec_dot_q6_K_q8_K(int64_t n, float *s, const void *x, const void *y) { dot_q6_K<1>(n, s, x, y, 0); }

// Plain float types: 64 elements per iteration in four accumulators, a
// masked load for the tail. load(i, m, w) reads 16 elements of the weights
// (w = 0) or the activations (w = 1), both of the weight type; with F32ACT
// the activations are f32 rows instead (vec_dot_f32, GGML_PREC_HIGH).
// w: the weights, wsize bytes an element (prefetched).
template <bool F32ACT, typename Load>
inline float dot_float(int64_t n, Load load, const void *w, int wsize, const void *vy) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    auto act = [&](int64_t i, __mmask16 m) {
        if (F32ACT) return _mm512_maskz_loadu_ps(m, (const float *)vy + i);
        return load(i, m, 1);
    };
    const int ahead = ggml_prefetch_distance;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        ggml_prefetch_chunk((const char *)w + i * wsize, 64 * wsize, ahead);
        a0 = _mm512_fmadd_ps(load(i, 0xFFFF, 0), act(i, 0xFFFF), a0);
        a1 = _mm512_fmadd_ps(load(i + 16, 0xFFFF, 0), act(i + 16, 0xFFFF), a1);
        a2 = _mm512_fmadd_ps(load(i + 32, 0xFFFF, 0), act(i + 32, 0xFFFF), a2);
        a3 = _mm512_fmadd_ps(load(i + 48, 0xFFFF, 0), act(i + 48, 0xFFFF), a3);
    }
    for (; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        a0 = _mm512_fmadd_ps(load(i, m, 0), act(i, m), a0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

template <bool F32ACT>
void dot_f16(int64_t n, float *s, const void *vx, const void *vy) {
    const ggml_fp16_t *p[2] = {(const ggml_fp16_t *)vx, (const ggml_fp16_t *)vy};
    *s = dot_float<F32ACT>(n, [&](int64_t i, __mmask16 m, int w) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p[w] + i)); },
                           vx, 2, vy);
}
template <bool F32ACT>
void dot_bf16(int64_t n, float *s, const void *vx, const void *vy) {
    const ggml_bf16_t *p[2] = {(const ggml_bf16_t *)vx, (const ggml_bf16_t *)vy};
    *s = dot_float<F32ACT>(n, [&](int64_t i, __mmask16 m, int w) {
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p[w] + i)), 16));
    }, vx, 2, vy);
}
void vec_dot_f32(int64_t n, float *s, const void *vx, const void *vy) {
    const float *x = (const float *)vx;
    *s = dot_float<true>(n, [&](int64_t i, __mmask16 m, int) { return _mm512_maskz_loadu_ps(m, x + i); }, vx, 4, vy);
}
void vec_dot_f16(int64_t n, float *s, const void *x, const void *y) { dot_f16<false>(n, s, x, y); }
void vec_dot_bf16(int64_t n, float *s, const void *x, const void *y) { dot_bf16<false>(n, s, x, y); }
void vec_dot_f16_f32(int64_t n, float *s, const void *x, const void *y) { dot_f16<true>(n, s, x, y); }
void vec_dot_bf16_f32(int64_t n, float *s, const void *x, const void *y) { dot_bf16<true>(n, s, x, y); }

// ---------------------------------------------------------------- q8x

// roundf (half away from zero) of 16 floats, NaN -> 0, clamped to [-127, 127]
// as the reference quantizer does.
inline __m512i round_q8(__m512 v) {
    const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m512 one = _mm512_set1_ps(1.0f);
    const __mmask16 half = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, t)), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    const __m512 r = _mm512_mask_add_ps(t, half, t, _mm512_or_ps(_mm512_and_ps(v, _mm512_set1_ps(-0.0f)), one));
    const __m512 c = _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
    return _mm512_maskz_cvttps_epi32(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), c);
}

}  // namespace

namespace {

// The q8x layout (H = false) and the q8xh layout (H = true: plus the residual
// on the grid df/128), vec-dot-simd.h. q and df are Q8_0's in both.
template <bool H>
void quantize_q8x(const float *x, void *vy, int64_t k) {
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
            if (blk >= nb) {  // zero padding: contributes 0 to every dot
                for (int h = 0; h < 2; h++) {
                    memset(qa + 64 * h + 16 * b, 0, 16);
                    if (H) memset(ra + 64 * h + 16 * b, 0, 16);
                }
                _mm_storeu_ps(dy + 4 * b, _mm_setzero_ps());
                _mm_storeu_ps(sd + 4 * b, _mm_setzero_ps());
                _mm_storeu_si128((__m128i *)(ns + 4 * b), _mm_setzero_si128());
                continue;
            }
            const float *xb = x + 32 * blk;
            const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
            const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
            const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            const float df = _cvtsh_ss(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT));
            const __m512 vid = _mm512_set1_ps(id);
            const __m512i q0 = round_q8(_mm512_mul_ps(v0, vid)), q1 = round_q8(_mm512_mul_ps(v1, vid));
            _mm_storeu_si128((__m128i *)(qa + 16 * b), _mm512_cvtepi32_epi8(q0));
            _mm_storeu_si128((__m128i *)(qa + 64 + 16 * b), _mm512_cvtepi32_epi8(q1));
            // t0, t1: per element of each half 128 q + q2 (H) or q
            __m512i t0 = q0, t1 = q1;
            float step = df;
            if (H) {  // the residual x - df q on the grid df/128 (|q2| <= ~72)
                const __m512 vdf = _mm512_set1_ps(df), vir = _mm512_set1_ps(df != 0.0f ? 128.0f / df : 0.0f);
                const __m512 r0 = _mm512_fnmadd_ps(vdf, _mm512_cvtepi32_ps(q0), v0);
                const __m512 r1 = _mm512_fnmadd_ps(vdf, _mm512_cvtepi32_ps(q1), v1);
                const __m512i e0 = round_q8(_mm512_mul_ps(r0, vir)), e1 = round_q8(_mm512_mul_ps(r1, vir));
                _mm_storeu_si128((__m128i *)(ra + 16 * b), _mm512_cvtepi32_epi8(e0));
                _mm_storeu_si128((__m128i *)(ra + 64 + 16 * b), _mm512_cvtepi32_epi8(e1));
                t0 = _mm512_add_epi32(_mm512_slli_epi32(q0, 7), e0);
                t1 = _mm512_add_epi32(_mm512_slli_epi32(q1, 7), e1);
                step = df / 128.0f;  // exact: a power-of-two division
            }
            // sums of four: every element of 128-bit lane l holds that of elements 4l..4l+3
            auto four = [](__m512i t) {
                t = _mm512_add_epi32(t, _mm512_shuffle_epi32(t, _MM_PERM_BADC));
                return _mm512_add_epi32(t, _mm512_shuffle_epi32(t, _MM_PERM_CDAB));
            };
            const __m512i f0 = four(t0), f1 = four(t1);
            // lane l of a dot register: elements 4l..4l+3 of both halves
            const __m128i ls = _mm512_castsi512_si128(_mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
                                                                                _mm512_add_epi32(f0, f1)));
            // the half sums of eight, lanes in the order of vec-dot-simd.h: half 0's 0..7, half 1's, half 0's 8..15, half 1's
            const __m512i pa = _mm512_setr_epi32(0, 16, 8, 24, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
            const __m512i pb = _mm512_add_epi32(pa, _mm512_set1_epi32(4));
            const __m128i hs = _mm_add_epi32(_mm512_castsi512_si128(_mm512_permutex2var_epi32(f0, pa, f1)),
                                             _mm512_castsi512_si128(_mm512_permutex2var_epi32(f0, pb, f1)));
            _mm_storeu_si128((__m128i *)(ns + 4 * b), _mm_sub_epi32(_mm_setzero_si128(), ls));
            _mm_storeu_ps(sd + 4 * b, _mm_mul_ps(_mm_set1_ps(step), _mm_cvtepi32_ps(hs)));
            _mm_storeu_ps(dy + 4 * b, _mm_set1_ps(step));
        }
    }
}

}  // namespace

void ggml_q8x_quantize_avx512(const float *x, void *vy, int64_t k) { quantize_q8x<false>(x, vy, k); }
void ggml_q8xh_quantize_avx512(const float *x, void *vy, int64_t k) { quantize_q8x<true>(x, vy, k); }


namespace {

// Weight-side unpacking of four consecutive blocks into the q8x order
// (q8x-dot.h): unsigned quants of the low and high halves, scales d (and
// minimums m) per 32-bit lane, lane l belonging to block l / 4.
inline __m512 lanes4(__m128 v) {  // value b in lanes 4b..4b+3
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3), _mm512_castps128_ps512(v));
}
inline __m128 fp16x4(ggml_fp16_t a, ggml_fp16_t b, ggml_fp16_t c, ggml_fp16_t e) {
    return _mm_cvtph_ps(_mm_setr_epi16((short)a, (short)b, (short)c, (short)e, 0, 0, 0, 0));
}
// The 16 bytes at p0..p3 in the four 128-bit lanes of one register.
inline __m512i load4x16(const void *p0, const void *p1, const void *p2, const void *p3) {
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p0));
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)p1), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)p2), 2);
    return _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)p3), 3);
}
template <class B>
inline void nibbles4(const B *x, __m512i *ua, __m512i *ub) {
    const __m512i v = load4x16(x[0].qs, x[1].qs, x[2].qs, x[3].qs), m4 = _mm512_set1_epi8(0x0F);
    *ua = _mm512_and_si512(v, m4);
    *ub = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
}
// fifth bits: bit j of qh is element j; the low 16 bits go with ua, the high with ub
template <class B>
inline void high4(const B *x, __m512i *ua, __m512i *ub) {
    uint64_t lo = 0, hi = 0;
    for (int b = 0; b < 4; b++) {
        uint32_t h;
        memcpy(&h, x[b].qh, 4);
        lo |= (uint64_t)(h & 0xFFFF) << (16 * b);
        hi |= (uint64_t)(h >> 16) << (16 * b);
    }
    const __m512i sixteen = _mm512_set1_epi8(16);
    *ua = _mm512_mask_add_epi8(*ua, (__mmask64)lo, *ua, sixteen);
    *ub = _mm512_mask_add_epi8(*ub, (__mmask64)hi, *ub, sixteen);
}
template <class B>
inline void dm4(const B *x, __m512 *d, __m512 *m) {
    const __m256 f = _mm256_cvtph_ps(_mm_setr_epi16((short)x[0].d, (short)x[1].d, (short)x[2].d, (short)x[3].d,
                                                    (short)x[0].m, (short)x[1].m, (short)x[2].m, (short)x[3].m));
    *d = lanes4(_mm256_castps256_ps128(f));
    *m = lanes4(_mm256_extractf128_ps(f, 1));
}

struct X_q4_0 {
    using B = block_q4_0;
    static constexpr int S = 3;  // weight = d (u - 8)
    static void load(const B *x, __m512i *ua, __m512i *ub, __m512 *d, __m512 *) {
        nibbles4(x, ua, ub);
        *d = lanes4(fp16x4(x[0].d, x[1].d, x[2].d, x[3].d));
    }
};
struct X_q4_1 {
    using B = block_q4_1;
    static constexpr int S = -1;  // weight = d u + m
    static void load(const B *x, __m512i *ua, __m512i *ub, __m512 *d, __m512 *m) {
        nibbles4(x, ua, ub);
        dm4(x, d, m);
    }
};
struct X_q5_0 {
    using B = block_q5_0;
    static constexpr int S = 4;  // weight = d (u - 16)
    static void load(const B *x, __m512i *ua, __m512i *ub, __m512 *d, __m512 *) {
        nibbles4(x, ua, ub);
        high4(x, ua, ub);
        *d = lanes4(fp16x4(x[0].d, x[1].d, x[2].d, x[3].d));
    }
};
struct X_q5_1 {
    using B = block_q5_1;
    static constexpr int S = -1;
    static void load(const B *x, __m512i *ua, __m512i *ub, __m512 *d, __m512 *m) {
        nibbles4(x, ua, ub);
        high4(x, ua, ub);
        dm4(x, d, m);
    }
};
struct X_q8_0 {  // int8 + 128 is unsigned; weight = d (u - 128)
    using B = block_q8_0;
    static constexpr int S = 7;
    static void load(const B *x, __m512i *ua, __m512i *ub, __m512 *d, __m512 *) {
        const __m512i bias = _mm512_set1_epi8((char)0x80);
        *ua = _mm512_xor_si512(load4x16(x[0].qs, x[1].qs, x[2].qs, x[3].qs), bias);
        *ub = _mm512_xor_si512(load4x16(x[0].qs + 16, x[1].qs + 16, x[2].qs + 16, x[3].qs + 16), bias);
        *d = lanes4(fp16x4(x[0].d, x[1].d, x[2].d, x[3].d));
    }
};

ggml_q8x_kernels make_q8x() {
    ggml_q8x_kernels q;
    memset(&q, 0, sizeof(q));
    q.quantize = ggml_q8x_quantize_avx512;
    q.dot_f16 = dot_f16_rows_n;
    q8x_set<X_q4_0>(&q, GGML_TYPE_Q4_0, 1);
    q8x_set<X_q4_1>(&q, GGML_TYPE_Q4_1, 1);
    q8x_set<X_q5_0>(&q, GGML_TYPE_Q5_0, 1);
    q8x_set<X_q5_1>(&q, GGML_TYPE_Q5_1, 1);
    q8x_set<X_q8_0>(&q, GGML_TYPE_Q8_0, 1);
    q.quantize_hi = ggml_q8xh_quantize_avx512;
    q8x_add_kquants(&q);
    return q;
}

}  // namespace

const ggml_q8x_kernels *ggml_cpu_q8x_avx512(void) {
    static const ggml_q8x_kernels q = make_q8x();
    return &q;
}

void ggml_cpu_set_dot_resid_avx512(ggml_vec_dot2_t *t, bool has_vbmi) {
    t[GGML_TYPE_Q2_K] = has_vbmi ? dot_q2_K_vbmi<2> : dot_q2_K<2>;
    t[GGML_TYPE_Q3_K] = dot_q3_K<2>;
    t[GGML_TYPE_Q4_K] = dot_q45_K<false, 2>;
    t[GGML_TYPE_Q5_K] = dot_q45_K<true, 2>;
    t[GGML_TYPE_Q6_K] = dot_q6_K<2>;
}

void ggml_cpu_set_kernels_avx512(struct ggml_cpu_type_traits *t, bool has_bf16, bool has_vbmi) {
    ggml_cpu_set_kernels_avx2(t);
    t[GGML_TYPE_Q4_0].vec_dot = vec_dot_q4_0_q8_0;
    t[GGML_TYPE_Q8_0].vec_dot = vec_dot_q8_0_q8_0;
    t[GGML_TYPE_Q2_K].vec_dot = has_vbmi ? vec_dot_q2_K_q8_K_vbmi : vec_dot_q2_K_q8_K;
    t[GGML_TYPE_Q3_K].vec_dot = vec_dot_q3_K_q8_K;
    t[GGML_TYPE_Q4_K].vec_dot = vec_dot_q4_K_q8_K;
    t[GGML_TYPE_Q5_K].vec_dot = vec_dot_q5_K_q8_K;
    t[GGML_TYPE_Q6_K].vec_dot = vec_dot_q6_K_q8_K;
    t[GGML_TYPE_F32].vec_dot = vec_dot_f32;
    t[GGML_TYPE_F16].vec_dot = vec_dot_f16;
    // bf16 -> f32 is a shift, exact; vdpbf16ps would round the products
    // differently and the kernel is memory-bound anyway, so has_bf16 is unused.
    t[GGML_TYPE_BF16].vec_dot = vec_dot_bf16;
    t[GGML_TYPE_F16].vec_dot_f32 = vec_dot_f16_f32;
    t[GGML_TYPE_BF16].vec_dot_f32 = vec_dot_bf16_f32;
    // fast mat-vec on F16 / BF16 activation rows: a K = 11008 row of f32
    // activations (44 KB) left Zen 5's 48 KB L1 to the weight stream, F16
    // then streaming at 70-76% of the read, 85-90% on F16 rows
    t[GGML_TYPE_F16].round_act_f32 = t[GGML_TYPE_BF16].round_act_f32 = false;
}
