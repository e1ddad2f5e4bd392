// q8x dot kernels for CPUs with AVX-512 VBMI (Ice Lake, Zen 4 and later):
// a group of four weight blocks is read with two or three vector loads and
// spread into the two registers of unsigned quants and the scale vector by
// byte permutes (vpermb / vpermt2b), instead of one load and insert per block
// and scalar inserts for each fp16 scale: half the instructions per group on
// the weight side, which is what mat-vec pays per byte of weights.
#pragma GCC target("avx512vbmi")
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <array>

#include "q8x-dot.h"

namespace {

// Byte layouts: block size, offsets of d, m (-1: none), qh (-1: none) and
// qs, quants per block stored (16 nibble bytes or 32 int8), the offset in
// bytes where the second pair of blocks' window starts (q8_0's four blocks
// span 136 bytes, more than one two-register table), and m = mul * d for the
// types without a stored minimum.
struct L_q4_0 { using B = block_q4_0; static constexpr int BS = 18, D = 0, M = -1, QH = -1, QS = 2, NQ = 16, OB = 0; static constexpr float MUL = -8.0f; };
struct L_q4_1 { using B = block_q4_1; static constexpr int BS = 20, D = 0, M = 2, QH = -1, QS = 4, NQ = 16, OB = 0; static constexpr float MUL = 0.0f; };
struct L_q5_0 { using B = block_q5_0; static constexpr int BS = 22, D = 0, M = -1, QH = 2, QS = 6, NQ = 16, OB = 0; static constexpr float MUL = -16.0f; };
struct L_q5_1 { using B = block_q5_1; static constexpr int BS = 24, D = 0, M = 2, QH = 4, QS = 8, NQ = 16, OB = 0; static constexpr float MUL = 0.0f; };
struct L_q8_0 { using B = block_q8_0; static constexpr int BS = 34, D = 0, M = -1, QH = -1, QS = 2, NQ = 32, OB = 64; static constexpr float MUL = -128.0f; };

// Permute indices gathering the quants of blocks 2*pair, 2*pair+1 (nibble
// types: each block's 16 bytes twice, low nibbles then high nibbles).
template <class L>
constexpr std::array<uint8_t, 64> quant_index(int pair) {
    std::array<uint8_t, 64> a{};
    for (int j = 0; j < 64; j++) {
        const int blk = 2 * pair + j / 32, e = j % 32;
        a[j] = (uint8_t)(L::BS * blk + L::QS + (L::NQ == 16 ? e % 16 : e) - (pair ? L::OB : 0));
    }
    return a;
}
// d of blocks 0..3 (bytes 0..7), then m of blocks 0..3 (bytes 8..15).
template <class L>
constexpr std::array<uint8_t, 64> scale_index() {
    std::array<uint8_t, 64> a{};
    for (int b = 0; b < 4; b++) {
        a[2 * b] = (uint8_t)(L::BS * b + L::D);
        a[2 * b + 1] = (uint8_t)(L::BS * b + L::D + 1);
        if (L::M >= 0) {
            a[8 + 2 * b] = (uint8_t)(L::BS * b + L::M);
            a[8 + 2 * b + 1] = (uint8_t)(L::BS * b + L::M + 1);
        }
    }
    return a;
}

inline __m512i load_idx(const std::array<uint8_t, 64> &a) { return _mm512_loadu_si512(a.data()); }

template <class L>
struct XV {
    using B = typename L::B;
    static constexpr std::array<uint8_t, 64> ia = quant_index<L>(0), ib = quant_index<L>(1), is = scale_index<L>();
    static constexpr bool partial_loads = true;
    // bytes [lo, lo + 64) of a group of nbytes: all-ones mask bits for the valid ones
    static __mmask64 bytes_mask(int lo, int nbytes) {
        const int k = nbytes - lo;
        return k >= 64 ? ~(__mmask64)0 : k <= 0 ? (__mmask64)0 : (__mmask64)((1ull << k) - 1);
    }
    // nblk (1..4) valid blocks; the missing ones read as zeros (d = m = 0),
    // so a row's last partial group needs no copy and reads nothing past the
    // row. avail: bytes of the row from x on. Plain loads wherever the row
    // still has the bytes (masked loads stream from DRAM markedly slower on
    // Zen 5); masks only near the end of the row.
    static void load(const B *x, __m512i *ua, __m512i *ub, __m128 *d, __m128 *m, int nblk = 4, int64_t avail = 0) {
        const uint8_t *p = (const uint8_t *)x;
        const int G = nblk * L::BS;  // valid bytes of the group
        auto ld = [&](int lo) {
            return avail >= lo + 64 ? _mm512_loadu_si512(p + lo) : _mm512_maskz_loadu_epi8(bytes_mask(lo, G), p + lo);
        };
        const __m512i a0 = ld(0), a1 = ld(64);
        __m512i ta = _mm512_permutex2var_epi8(a0, load_idx(ia), a1), tb;
        if (L::OB) {
            const __m512i a2 = ld(128);
            tb = _mm512_permutex2var_epi8(a1, load_idx(ib), a2);
        } else {
            tb = _mm512_permutex2var_epi8(a0, load_idx(ib), a1);
        }
        if (L::NQ == 16) {
            // bytes 16..31 and 48..63 hold the high nibbles
            const __m512i m4 = _mm512_set1_epi8(0x0F);
            ta = _mm512_and_si512(_mm512_mask_srli_epi16(ta, 0xFF00FF00u, ta, 4), m4);
            tb = _mm512_and_si512(_mm512_mask_srli_epi16(tb, 0xFF00FF00u, tb, 4), m4);
            if (L::QH >= 0) {
                uint32_t qh[4] = {0, 0, 0, 0};
                for (int b = 0; b < 4; b++)
                    if (b < nblk) memcpy(&qh[b], p + b * L::BS + L::QH, 4);
                ta = _mm512_mask_add_epi8(ta, (__mmask64)((uint64_t)qh[0] | ((uint64_t)qh[1] << 32)), ta, _mm512_set1_epi8(16));
                tb = _mm512_mask_add_epi8(tb, (__mmask64)((uint64_t)qh[2] | ((uint64_t)qh[3] << 32)), tb, _mm512_set1_epi8(16));
            }
        } else {
            const __m512i bias = _mm512_set1_epi8((char)0x80);
            ta = _mm512_xor_si512(ta, bias);
            tb = _mm512_xor_si512(tb, bias);
        }
        const __m128i sv = _mm512_castsi512_si128(_mm512_permutex2var_epi8(a0, load_idx(is), a1));
        if (L::M >= 0) {
            const __m256 f = _mm256_cvtph_ps(sv);
            *d = _mm256_castps256_ps128(f);
            *m = _mm256_extractf128_ps(f, 1);
        } else {
            *d = _mm_cvtph_ps(sv);
            *m = _mm_mul_ps(*d, _mm_set1_ps(L::MUL));
        }
        *ua = ta;
        *ub = tb;
    }
};

ggml_q8x_kernels make_q8x_vbmi() {
    ggml_q8x_kernels q;
    memset(&q, 0, sizeof(q));
    q.quantize = ggml_q8x_quantize_avx512;
    q.matvec[GGML_TYPE_Q4_1] = q.matvec[GGML_TYPE_Q5_0] = q.matvec[GGML_TYPE_Q5_1] = true;
    q.dot_f16 = dot_f16_rows_n;
    q.f16r_convert = ggml_f16r_convert_avx512;
    q.dot[GGML_TYPE_Q4_0] = dot_q8x_n<XV<L_q4_0>>;
    q.dot[GGML_TYPE_Q4_1] = dot_q8x_n<XV<L_q4_1>>;
    q.dot[GGML_TYPE_Q5_0] = dot_q8x_n<XV<L_q5_0>>;
    q.dot[GGML_TYPE_Q5_1] = dot_q8x_n<XV<L_q5_1>>;
    q.dot[GGML_TYPE_Q8_0] = dot_q8x_n<XV<L_q8_0>>;
    q.quantize_hi = ggml_q8xh_quantize_avx512;
    q.dot_hi[GGML_TYPE_Q4_0] = dot_q8xh_n<XV<L_q4_0>>;
    q.dot_hi[GGML_TYPE_Q4_1] = dot_q8xh_n<XV<L_q4_1>>;
    q.dot_hi[GGML_TYPE_Q5_0] = dot_q8xh_n<XV<L_q5_0>>;
    q.dot_hi[GGML_TYPE_Q5_1] = dot_q8xh_n<XV<L_q5_1>>;
    q.dot_hi[GGML_TYPE_Q8_0] = dot_q8xh_n<XV<L_q8_0>>;
    return q;
}

}  // namespace

const ggml_q8x_kernels *ggml_cpu_q8x_avx512vbmi(void) {
    static const ggml_q8x_kernels q = make_q8x_vbmi();
    return &q;
}
