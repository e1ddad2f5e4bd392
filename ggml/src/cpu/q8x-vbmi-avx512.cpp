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
#include <initializer_list>

#include "q8x-dot.h"

namespace {

// Byte layouts: block size, offsets of d, m (-1: none), qh (-1: none) and
// qs, quants per block stored (16 nibble bytes or 32 int8), and the offset
// shift S: weight = d (u - 2^S), or d u + m where S < 0 (q8x-dot.h).
struct L_q4_0 { using B = block_q4_0; static constexpr int BS = 18, D = 0, M = -1, QH = -1, QS = 2, NQ = 16, S = 3; };
struct L_q4_1 { using B = block_q4_1; static constexpr int BS = 20, D = 0, M = 2, QH = -1, QS = 4, NQ = 16, S = -1; };
struct L_q5_0 { using B = block_q5_0; static constexpr int BS = 22, D = 0, M = -1, QH = 2, QS = 6, NQ = 16, S = 4; };
struct L_q5_1 { using B = block_q5_1; static constexpr int BS = 24, D = 0, M = 2, QH = 4, QS = 8, NQ = 16, S = -1; };
struct L_q8_0 { using B = block_q8_0; static constexpr int BS = 34, D = 0, M = -1, QH = -1, QS = 2, NQ = 32, S = 7; };

// Permute indices into the q8x order: byte 16 b + j of the result is byte
// j of block b's quants, plus `half` x 16 (q8_0's high halves), of the group
// (q8_0's last 8 high bytes, past the two-register table, wrap: the loader
// puts them in place itself).
template <class L>
constexpr std::array<uint8_t, 64> quant_index(int half) {
    std::array<uint8_t, 64> a{};
    for (int j = 0; j < 64; j++) a[j] = (uint8_t)(L::BS * (j / 16) + L::QS + 16 * half + j % 16);
    return a;
}
// Fifth bits: byte 16 b + j of the result is the qh byte holding element
// 16 half + j of block b; bit_index the bit within it.
template <class L>
constexpr std::array<uint8_t, 64> high_index(int half) {
    std::array<uint8_t, 64> a{};
    for (int j = 0; j < 64; j++) a[j] = (uint8_t)(L::BS * (j / 16) + (L::QH > 0 ? L::QH : 0) + 2 * half + (j % 16) / 8);
    return a;
}
constexpr std::array<uint8_t, 64> bit_index() {
    std::array<uint8_t, 64> a{};
    for (int j = 0; j < 64; j++) a[j] = (uint8_t)(1u << (j % 8));
    return a;
}
// fp16 words 0..15: d of block w / 4; words 16..31: m of block (w - 16) / 4.
template <class L>
constexpr std::array<uint8_t, 64> scale_index() {
    std::array<uint8_t, 64> a{};
    for (int w = 0; w < 32; w++) {
        const int off = w < 16 ? L::D : (L::M >= 0 ? L::M : L::D);
        a[2 * w] = (uint8_t)(L::BS * ((w % 16) / 4) + off);
        a[2 * w + 1] = (uint8_t)(L::BS * ((w % 16) / 4) + off + 1);
    }
    return a;
}

inline __m512i load_idx(const std::array<uint8_t, 64> &a) { return _mm512_loadu_si512(a.data()); }

template <class L>
struct XV {
    using B = typename L::B;
    static constexpr int S = L::S;
    static constexpr std::array<uint8_t, 64> ia = quant_index<L>(0), ib = quant_index<L>(1), is = scale_index<L>();
    static constexpr std::array<uint8_t, 64> iha = high_index<L>(0), ihb = high_index<L>(1), bits = bit_index();
    static constexpr bool partial_loads = true;
    // the nibble types' bytes past 64 (8 to 32 of them) are read by one load just as wide: a 64-byte
    // load there reaches across the next group's cache lines, which Zen 5 streams markedly slower
    static constexpr int REST = 4 * L::BS - 64, W = REST <= 8 ? 8 : REST <= 16 ? 16 : REST <= 32 ? 32 : 64;
    static constexpr int64_t SPAN = 64 + W;  // bytes a whole group's plain loads reach
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
    static void load(const B *x, __m512i *ua, __m512i *ub, __m512 *d, __m512 *m, int nblk = 4, int64_t avail = 0) {
        const uint8_t *p = (const uint8_t *)x;
        const int G = nblk * L::BS;  // valid bytes of the group
        auto ld = [&](int lo) {
            return avail >= lo + 64 ? _mm512_loadu_si512(p + lo) : _mm512_maskz_loadu_epi8(bytes_mask(lo, G), p + lo);
        };
        auto ld_rest = [&]() {
            if constexpr (W == 64) return ld(64);  // q8_0: a whole register's worth
            if (avail < 64 + W) return _mm512_maskz_loadu_epi8(bytes_mask(64, G), p + 64);
            if constexpr (W == 8) return _mm512_zextsi128_si512(_mm_loadl_epi64((const __m128i *)(p + 64)));
            else if constexpr (W == 16) return _mm512_zextsi128_si512(_mm_loadu_si128((const __m128i *)(p + 64)));
            else return _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(p + 64)));
        };
        __m512i a0 = ld(0), a1 = ld_rest();
        // one load each: left to itself GCC folds them into every permute as memory operands (Q8_0:
        // six 64-byte loads a group, three of them across cache lines; 71 -> 50 GB/s in cache)
        __asm__("" : "+v"(a0), "+v"(a1));
        if (L::NQ == 16) {
            const __m512i t = _mm512_permutex2var_epi8(a0, load_idx(ia), a1), m4 = _mm512_set1_epi8(0x0F);
            __m512i ta = _mm512_and_si512(t, m4), tb = _mm512_and_si512(_mm512_srli_epi16(t, 4), m4);
            if (L::QH >= 0) {
                const __m512i bv = load_idx(bits), sixteen = _mm512_set1_epi8(16);
                const __mmask64 ka = _mm512_test_epi8_mask(_mm512_permutex2var_epi8(a0, load_idx(iha), a1), bv);
                const __mmask64 kb = _mm512_test_epi8_mask(_mm512_permutex2var_epi8(a0, load_idx(ihb), a1), bv);
                ta = _mm512_mask_add_epi8(ta, ka, ta, sixteen);
                tb = _mm512_mask_add_epi8(tb, kb, tb, sixteen);
            }
            *ua = ta;
            *ub = tb;
        } else {  // q8_0: 136 bytes a group; the high halves' last 8 bytes (block 3's) by one 8-byte load,
                  // not by two more 64-byte loads across cache lines (Zen 5 streams Q8_0 at ~70% of
                  // the read bandwidth with those, ~90% without)
            const __m512i bias = _mm512_set1_epi8((char)0x80);
            *ua = _mm512_xor_si512(_mm512_permutex2var_epi8(a0, load_idx(ia), a1), bias);
            __m512i hb = _mm512_permutex2var_epi8(a0, load_idx(ib), a1);
            if (nblk == 4) hb = _mm512_mask_broadcastq_epi64(hb, 0x80, _mm_loadl_epi64((const __m128i *)(p + 128)));
            *ub = _mm512_xor_si512(hb, bias);  // a missing block 3 (d = 0) keeps the wrapped bytes: no effect
        }
        const __m512i sv = _mm512_permutex2var_epi8(a0, load_idx(is), a1);
        *d = _mm512_cvtph_ps(_mm512_castsi512_si256(sv));
        if (L::M >= 0) *m = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(sv, 1));
    }
};

ggml_q8x_kernels make_q8x_vbmi() {
    ggml_q8x_kernels q;
    memset(&q, 0, sizeof(q));
    q.quantize = ggml_q8x_quantize_avx512;
    q.dot_f16 = dot_f16_rows_n;
    q8x_set<XV<L_q4_0>>(&q, GGML_TYPE_Q4_0, 1);
    q8x_set<XV<L_q4_1>>(&q, GGML_TYPE_Q4_1, 1);
    q8x_set<XV<L_q5_0>>(&q, GGML_TYPE_Q5_0, 1);
    q8x_set<XV<L_q5_1>>(&q, GGML_TYPE_Q5_1, 1);
    q8x_set<XV<L_q8_0>>(&q, GGML_TYPE_Q8_0, 1);
    q.quantize_hi = ggml_q8xh_quantize_avx512;
    q8x_add_kquants(&q);
    return q;
}

}  // namespace

const ggml_q8x_kernels *ggml_cpu_q8x_avx512vbmi(void) {
    static const ggml_q8x_kernels q = make_q8x_vbmi();
    return &q;
}
