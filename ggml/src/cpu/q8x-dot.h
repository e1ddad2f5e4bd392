// Internal to the AVX-512 kernel files: the q8x multi-column dot product,
// shared by the plain AVX-512 and the AVX-512 VBMI translation units, which
// differ only in how a group of four weight blocks is unpacked (X::load).
// Include only from a file compiled with AVX-512 F/BW/VL/DQ/VNNI enabled.
#pragma once
#include <immintrin.h>
#include <string.h>

#include <algorithm>
#include <type_traits>

#include "ggml-quants.h"
#include "kquant-scales.h"
#include "vec-dot-simd.h"

// Quantizers of the q8x and q8xh activation layouts (vec-dot-avx512.cpp).
void ggml_q8x_quantize_avx512(const float *x, void *y, int64_t k);
void ggml_q8xh_quantize_avx512(const float *x, void *y, int64_t k);

namespace {

// Loader dispatch for a row's last partial group (SFINAE on partial_loads).
template <class X>
constexpr auto has_partial_loads(int) -> decltype(X::partial_loads, bool()) { return X::partial_loads; }
template <class X>
constexpr bool has_partial_loads(long) { return false; }
// Group g of a row of nb blocks, left of them from x on: loaders with
// partial_loads get the number of valid blocks and avail, the bytes they may
// read (the row's rest, or X::SPAN, as much as a whole group's loads reach:
// a constant that folds their checks away); the others a zero-padded copy
// for the last partial group.
template <class X>
inline auto load_group(const typename X::B *x, const typename X::B *, int64_t left, int64_t avail, __m512i *ua, __m512i *ub, __m512 *d,
                       __m512 *m, int) -> decltype(X::partial_loads, void()) {
    X::load(x, ua, ub, d, m, left < 4 ? (int)left : 4, avail);
}
template <class X>
inline void load_group(const typename X::B *x, const typename X::B *tail, int64_t left, int64_t, __m512i *ua, __m512i *ub, __m512 *d,
                       __m512 *m, long) {
    X::load(left >= 4 ? x : tail, ua, ub, d, m);
}
template <class X>
constexpr auto span_of(int) -> decltype(X::SPAN, int64_t()) { return X::SPAN; }
template <class X>
constexpr int64_t span_of(long) { return 4 * (int64_t)sizeof(typename X::B); }

// One unpacked group of four weight blocks (see q8x_tile), as registers or
// as the 256 bytes it takes in an unpacked row (q8x_unpack).
struct q8x_wgroup {
    __m512i ua, ub;
    __m512 d, m;
};
static_assert(sizeof(q8x_wgroup) == 256, "ggml_q8x_unpacked_size: 256 bytes a group");

// The q8x tile core: NR weight rows against NC activation rows, the result of
// row r and column c to s[r] + c * ss bytes. load(r, g, &w, full) gives group
// g of row r (full: std::true_type for g < nfull, whose loads need no check
// for the row's end) unpacked into the q8x order (vec-dot-simd.h): ua, ub the
// unsigned quants u of the four blocks' low and high halves, d and m per lane so that
// weight = d (u + o) for the types with a fixed offset o = -2^S (m unused),
// or d u + m (S < 0). Per column, the activations are loaded once for all NR
// rows (a register tile: NR x NC accumulators); per row and column: two
// vpdpbusd into one register whose lane l is block l / 4, started at the
// offset in integers (ns << S) plus the bits of the float 1.5 2^23, so that
// the sum's bits read as a float are 1.5 2^23 + sum exactly (|sum| < 2^22)
// and one fmsub with the activation scale dy (an fp16 value: 1.5 2^23 dy is
// exact) gives round(sum dy) with no conversion instruction; then one fma
// with the weight scale. The stored minimum's m . sd joins the group's term
// before one add into the same accumulator (one register per element keeps a
// 4 x 4 tile in the 32 vector registers; the add keeps the mat-vec's chain
// through it short: Zen 5 Q4_1 +20% in cache against two fmas). Each element's arithmetic is the same whatever NR and
// NC are, so its result never depends on how rows and columns were tiled
// (mat-vec, prompt batches and every thread split agree).
// H: activations in the q8xh layout: per column the integer dot of the
// weights with 128 q + q2 (shift, two more vpdpbusd) in place of q; its sum
// fits the exact float range only for |u + o| <= 31 (not q8_0: a conversion).
// SPLIT (q6_K: sub-blocks of 16): a block's low and high halves have their
// own scales (d and m of the group): two sums, each started at its half's
// offset (the low half's q sum from one more vpdpbusd per column, the high
// half's the rest of ns), two fmsubs and two fmas.
// The accumulators can also continue from and be left in memory (acc: NR x
// NC vectors of 16 floats, 64-byte aligned; GGML_Q8X_ACC_* in flags), so a
// row can be run in chunks of groups with the same arithmetic.
template <int S, int NR, int NC, bool H, bool WIDE, bool SPLIT, class Load>
__attribute__((always_inline)) inline void q8x_tile(int64_t ng, int64_t nfull, Load &&load, const uint8_t *y0, size_t ys, float *s,
                                                    size_t ss, float *accv = nullptr,
                                                    int flags = GGML_Q8X_ACC_FIRST | GGML_Q8X_ACC_LAST) {
    constexpr size_t GROUP = H ? GGML_Q8XH_GROUP : GGML_Q8X_GROUP;
    constexpr size_t DY = H ? 256 : 128, NS = DY + 64, SD = DY + 128;  // offsets of the scales and sums
    constexpr bool OFF = S >= 0, MAGIC = !(H && WIDE);
    constexpr float FM = 12582912.0f;  // 1.5 2^23, bits 0x4B400000
    const __m512i magic = _mm512_set1_epi32(MAGIC ? 0x4B400000 : 0);
    __m512 acc[NR][NC];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++)
            acc[r][c] = flags & GGML_Q8X_ACC_FIRST ? _mm512_setzero_ps() : _mm512_load_ps(accv + 16 * (r * NC + c));
    auto step = [&](int64_t g, auto full) __attribute__((always_inline)) {
        q8x_wgroup w[NR];
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) load(r, g, &w[r], full);
        const uint8_t *yg = y0 + g * GROUP;
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) {
            const uint8_t *yc = yg + c * ys;
            const __m512i ns = OFF ? _mm512_slli_epi32(_mm512_loadu_si512(yc + NS), OFF ? S : 0) : _mm512_setzero_si512();
            const __m512i qa = _mm512_loadu_si512(yc), qb = _mm512_loadu_si512(yc + 64);
            const __m512 dy = _mm512_loadu_ps((const float *)(yc + DY));
            const __m512 dm = _mm512_mul_ps(dy, _mm512_set1_ps(FM));
            const __m512i init = H ? magic : _mm512_add_epi32(ns, magic);
            const __m512i hinit = _mm512_add_epi32(ns, magic);
            __m512i inita = magic, initb = magic;  // SPLIT: the halves' offsets (ns << S split as -(sa << S) + the rest)
            if (SPLIT) {
                const __m512i ones = _mm512_set1_epi8(1);
                __m512i sa = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, qa);
                if (H) sa = _mm512_add_epi32(_mm512_slli_epi32(sa, 7), _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(yc + 128)));
                sa = _mm512_slli_epi32(sa, OFF ? S : 0);
                inita = _mm512_sub_epi32(magic, sa);
                initb = _mm512_add_epi32(hinit, sa);
            }
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                if (SPLIT) {
                    __m512i pa, pb;
                    if (!H) {
                        pa = _mm512_dpbusd_epi32(inita, w[r].ua, qa);
                        pb = _mm512_dpbusd_epi32(initb, w[r].ub, qb);
                    } else {
                        pa = _mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w[r].ua, qa), 7);
                        pb = _mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w[r].ub, qb), 7);
                        pa = _mm512_add_epi32(_mm512_dpbusd_epi32(inita, w[r].ua, _mm512_loadu_si512(yc + 128)), pa);
                        pb = _mm512_add_epi32(_mm512_dpbusd_epi32(initb, w[r].ub, _mm512_loadu_si512(yc + 192)), pb);
                    }
                    acc[r][c] = _mm512_fmadd_ps(_mm512_fmsub_ps(_mm512_castsi512_ps(pa), dy, dm), w[r].d, acc[r][c]);
                    acc[r][c] = _mm512_fmadd_ps(_mm512_fmsub_ps(_mm512_castsi512_ps(pb), dy, dm), w[r].m, acc[r][c]);
                    continue;
                }
                __m512i p;
                if (!H) {
                    p = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(init, w[r].ua, qa), w[r].ub, qb);
                } else {  // 128 dot(u, q) + dot(u, q2) + offset: |.| < 2^24 per lane, exact in int32;
                          // two independent chains of two vpdpbusd (not one of four: a shorter
                          // critical path per group leaves the out-of-order window to the loads)
                    const __m512i p1 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w[r].ua, qa), w[r].ub, qb);
                    const __m512i p2 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(OFF || MAGIC ? hinit : _mm512_setzero_si512(), w[r].ua,
                                                                               _mm512_loadu_si512(yc + 128)),
                                                           w[r].ub, _mm512_loadu_si512(yc + 192));
                    p = _mm512_add_epi32(_mm512_slli_epi32(p1, 7), p2);
                }
                const __m512 f = MAGIC ? _mm512_fmsub_ps(_mm512_castsi512_ps(p), dy, dm) : _mm512_mul_ps(_mm512_cvtepi32_ps(p), dy);
                if (OFF) acc[r][c] = _mm512_fmadd_ps(f, w[r].d, acc[r][c]);
                else  // the group's f d + m sd, then one add: the chain through acc is an add, not two fmas
                    acc[r][c] = _mm512_add_ps(acc[r][c], _mm512_fmadd_ps(f, w[r].d, _mm512_mul_ps(w[r].m, _mm512_loadu_ps((const float *)(yc + SD)))));
            }
        }
    };
    // the groups before nfull take the loader's unchecked form (no branch on the row's end)
    int64_t g = 0;
    for (; g < nfull; g++) step(g, std::true_type());
    for (; g < ng; g++) step(g, std::false_type());
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) {
            if (flags & GGML_Q8X_ACC_LAST) *(float *)((char *)(s + r) + c * ss) = _mm512_reduce_add_ps(acc[r][c]);
            else _mm512_store_ps(accv + 16 * (r * NC + c), acc[r][c]);
        }
}

// The fixed-offset types without split halves (q4_0, q5_0, q8_0) take the
// folded form of the tile, q8x_tile_fold: a block's four lanes are summed in
// the integers before the float step, so that the scale multiplications run
// once per block and column instead of once per lane (the prompt kernel was
// bound by them: about 30% of its multiply-pipe work). Per weight row and
// set of four columns, the columns' integer sums are folded into one register,
// lane 4 b + c holding block b of column c (unpack and add, on the shuffle
// and integer pipes), then one fmsub and one fma for the four columns, into
// one accumulator. A set of one column folds its register onto itself (two
// shuffles: every lane of block b holds the block's sum), and the mat-vec
// folds two groups into one register (pair, below). Every way, an element's
// float arithmetic is, per group and block: f = round(S dy)
// from the exact integer sum S (the magic bits, started in lane 4 b only), acc
// += f d; and the result is (b0 + b2) + (b1 + b3) of the four block lanes: the
// same bits whatever NR, NC and the thread split are.
template <int S, bool SPLIT>
constexpr bool folded_tile() { return S >= 0 && !SPLIT; }
// The float step f = round(S dy): the register tiles (NR > 1) through the
// magic bits (one fmsub a row, the product FM dy shared by the rows) where a
// block's |S| < 2^22 (q8x; q8xh only for |u + o| <= 8, q4_0), otherwise, and
// in the one-row kernel (one op less a group), a conversion and a multiply:
// the same value (the conversion is exact for |S| < 2^24, all but q8_0's q8xh
// sums, which both kernels then round alike).
// PF: the mat-vec's pairs of groups on rows packed by pack_pair_fields,
// which puts a pair's offsets, folded, and its scales in two lines: a pair
// then reads ten lines, not twelve, and no shift or blend. Where the magic
// bits fit, the offsets carry them and its float step is one fmsub too.
// Whether a block's |S| < 2^22, so that the magic bits fit: q8x; q8xh only
// for |u + o| <= 8 (q4_0).
template <int S, bool H>
constexpr bool magic_fits() { return !H || S <= 3; }
// A pair of groups' lane sums a, b folded per block: block b's totals of a
// in lanes 4b and 4b + 2, of b in 4b + 1 and 4b + 3.
inline __m512i fold_pair(__m512i a, __m512i b) {
    const __m512i s = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
    return _mm512_add_epi32(s, _mm512_shuffle_epi32(s, _MM_PERM_BADC));
}
// The pair's block scales in the same lanes (field dy of groups ya, yb).
inline __m512 pair_scales(const uint8_t *ya, const uint8_t *yb, size_t dy) {
    return _mm512_mask_blend_ps(0xAAAA, _mm512_loadu_ps((const float *)(ya + dy)), _mm512_loadu_ps((const float *)(yb + dy)));
}
template <int S, int NR, int NC, bool H, bool PF = false, class Load>
__attribute__((always_inline)) inline void q8x_tile_fold(int64_t ng, int64_t nfull, Load &&load, const uint8_t *y0, size_t ys, float *s,
                                                         size_t ss, float *accv, int flags) {
    constexpr size_t GROUP = H ? GGML_Q8XH_GROUP : GGML_Q8X_GROUP;
    constexpr size_t DY = H ? 256 : 128, NS = DY + 64, SD = DY + 128;
    constexpr bool MAGIC = NR > 1 && magic_fits<S, H>();
    constexpr int SETS = (NC + 3) / 4;
    constexpr float FM = 12582912.0f;  // 1.5 2^23, bits 0x4B400000
    // the magic bits in lane 4 b of each block only: the fold adds them once
    const __m512i magic0 = _mm512_maskz_mov_epi32(0x1111, _mm512_set1_epi32(MAGIC ? 0x4B400000 : 0));
    __m512 acc[NR][SETS];
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 2
        for (int t = 0; t < SETS; t++)
            acc[r][t] = flags & GGML_Q8X_ACC_FIRST ? _mm512_setzero_ps() : _mm512_load_ps(accv + 16 * (r * SETS + t));
    // one group of one row and column: per lane, the integer dot from init
    auto dot = [&](const q8x_wgroup &w, const uint8_t *yc, __m512i init) __attribute__((always_inline)) {
        const __m512i qa = _mm512_loadu_si512(yc), qb = _mm512_loadu_si512(yc + 64);
        if (!H) return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(init, w.ua, qa), w.ub, qb);
        // 128 dot(u, q) + dot(u, q2) + offset, as q8x_tile
        const __m512i p1 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w.ua, qa), w.ub, qb);
        const __m512i p2 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(init, w.ua, _mm512_loadu_si512(yc + 128)), w.ub, _mm512_loadu_si512(yc + 192));
        return _mm512_add_epi32(_mm512_slli_epi32(p1, 7), p2);
    };
    auto start = [&](const uint8_t *yc) __attribute__((always_inline)) {
        const __m512i i = _mm512_slli_epi32(_mm512_loadu_si512(yc + NS), S);
        return MAGIC ? _mm512_add_epi32(i, magic0) : i;
    };
    // The mat-vec (one row, one column) folds two groups at a time into one
    // register (lanes 4 b and 4 b + 1: groups g and g + 1, five ops where
    // each group alone takes four) and runs the float steps of both on it:
    // lane 4 b takes group g's, then, the register's lanes swapped, g + 1's.
    auto pair = [&](int64_t g, auto full) __attribute__((always_inline)) {
        q8x_wgroup w0, w1;
        load(0, g, &w0, full);
        load(0, g + 1, &w1, full);
        const uint8_t *ya = y0 + g * GROUP, *yb = ya + GROUP;
        const __m512i z = _mm512_setzero_si512();
        const __m512i p0 = dot(w0, ya, PF ? z : start(ya)), p1 = dot(w1, yb, PF ? z : start(yb));
        __m512i sum = fold_pair(p0, p1);
        __m512 dy;
        if (PF) {  // the offsets in the lanes of the folded sums, and the scales as the blend below gives them
            sum = _mm512_add_epi32(sum, _mm512_loadu_si512(ya + SD));
            dy = _mm512_loadu_ps((const float *)(yb + SD));
        } else {
            dy = pair_scales(ya, yb, DY);
        }
        constexpr bool PM = PF ? magic_fits<S, H>() : MAGIC;
        const __m512 f = PM ? _mm512_fmsub_ps(_mm512_castsi512_ps(sum), dy, _mm512_mul_ps(dy, _mm512_set1_ps(FM)))
                            : _mm512_mul_ps(_mm512_cvtepi32_ps(sum), dy);
        acc[0][0] = _mm512_fmadd_ps(f, w0.d, acc[0][0]);
        acc[0][0] = _mm512_fmadd_ps(_mm512_permute_ps(f, 0xB1), w1.d, acc[0][0]);
    };
    auto step = [&](int64_t g, auto full) __attribute__((always_inline)) {
        q8x_wgroup w[NR];
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) load(r, g, &w[r], full);
        const uint8_t *yg = y0 + g * GROUP;
#pragma GCC unroll 2
        for (int t = 0; t < SETS; t++) {
            const int n = NC - 4 * t < 4 ? NC - 4 * t : 4;  // columns in this set
            const uint8_t *yc[4];
            __m512i init[4];
            __m512 dy = _mm512_setzero_ps();  // lane 4 b + c: column c's scale of block b (one column: every lane its own)
#pragma GCC unroll 4
            for (int c = 0; c < n; c++) {
                yc[c] = yg + (4 * t + c) * ys;
                init[c] = start(yc[c]);
                const __m512 dyc = _mm512_loadu_ps((const float *)(yc[c] + DY));
                dy = c == 0 ? dyc : _mm512_mask_blend_ps((__mmask16)(0x1111 << c), dy, dyc);
            }
            const __m512 dm = _mm512_mul_ps(dy, _mm512_set1_ps(FM));
#pragma GCC unroll 8
            for (int r = 0; r < NR; r++) {
                __m512i p[4];
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) {
                    if (c >= n) {
                        p[c] = _mm512_setzero_si512();
                        continue;
                    }
                    p[c] = dot(w[r], yc[c], init[c]);
                }
                __m512i sum;
                if (n == 1) {  // onto itself: lanes k and k ^ 2, then k and k ^ 1
                    sum = _mm512_add_epi32(p[0], _mm512_shuffle_epi32(p[0], _MM_PERM_BADC));
                    sum = _mm512_add_epi32(sum, _mm512_shuffle_epi32(sum, _MM_PERM_CDAB));
                } else {  // per block: column pairs' lanes k + (k ^ 2), then the columns' totals side by side
                    const __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(p[0], p[1]), _mm512_unpackhi_epi32(p[0], p[1]));
                    const __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(p[2], p[3]), _mm512_unpackhi_epi32(p[2], p[3]));
                    sum = _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
                }
                const __m512 f = MAGIC ? _mm512_fmsub_ps(_mm512_castsi512_ps(sum), dy, dm) : _mm512_mul_ps(_mm512_cvtepi32_ps(sum), dy);
                acc[r][t] = _mm512_fmadd_ps(f, w[r].d, acc[r][t]);
            }
        }
    };
    int64_t g = 0;
    if (NR == 1 && NC == 1)
        for (; g + 2 <= nfull; g += 2) pair(g, std::true_type());
    for (; g < nfull; g++) step(g, std::true_type());
    for (; g < ng; g++) step(g, std::false_type());
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 2
        for (int t = 0; t < SETS; t++) {
            if (!(flags & GGML_Q8X_ACC_LAST)) {
                _mm512_store_ps(accv + 16 * (r * SETS + t), acc[r][t]);
                continue;
            }
            // lane c: (b0 + b2) + (b1 + b3) of column c
            const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(acc[r][t]), _mm512_extractf32x8_ps(acc[r][t], 1));
            float v[4];
            _mm_storeu_ps(v, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
            const int n = NC - 4 * t < 4 ? NC - 4 * t : 4;
#pragma GCC unroll 4
            for (int c = 0; c < n; c++) *(float *)((char *)(s + r) + (4 * t + c) * ss) = v[c];
        }
}

// Whether a loader's blocks have halves with their own scales (X::SPLIT).
template <class X>
constexpr auto split_of(int) -> decltype(X::SPLIT, bool()) { return X::SPLIT; }
template <class X>
constexpr bool split_of(long) { return false; }

// Whether a loader's weights reach |u + o| > 31 (q8_0; q2_K's sc u, X::WIDE).
template <class X>
constexpr auto wide_of(int) -> decltype(X::WIDE, bool()) { return X::WIDE; }
template <class X>
constexpr bool wide_of(long) { return false; }
template <class X>
constexpr bool wide_quants() { return X::S >= 7 || wide_of<X>(0); }

// Loaders of K-quant superblocks (X::group(x, g, w): group g of a row) or of
// groups of four 32-element blocks (X::load, through load_group).
template <class X>
constexpr auto superblock_loader(int) -> decltype(&X::group, bool()) { return true; }
template <class X>
constexpr bool superblock_loader(long) { return false; }

// Reads a weight row group by group for the one-row kernel and the
// unpacking, prefetching ahead of it (ggml_prefetch_distance). A row's last
// partial group of 32-element blocks reads zero blocks (d = m = 0): loaders
// with masked loads (partial_loads) read them as zeros in place, the others
// from a zero-padded copy.
template <class X>
struct row_reader {
    using B = typename X::B;
    static constexpr bool SB = superblock_loader<X>(0);
    const B *x;
    int64_t nb, ng;  // 32-element blocks (superblocks for SB), groups
    int ahead = ggml_prefetch_distance;
    B tail[SB ? 1 : 4];
    row_reader(const void *vx, int64_t k) : x((const B *)vx) {
        nb = SB ? k / 256 : k / 32;
        ng = SB ? 2 * nb : (nb + 3) / 4;
        if (!SB && !has_partial_loads<X>(0) && nb % 4) {
            memset(tail, 0, sizeof(tail));
            memcpy(tail, x + nb / 4 * 4, sizeof(B) * (size_t)(nb % 4));
        }
    }
    // Inlined into the tile loop by force: left to itself GCC called the
    // larger loaders (q5_1, q8_0 with VBMI) out of line once per group, the
    // group and the accumulators then going through memory (Q8_0 mat-vec 25%
    // slower in cache).
    // Groups before nfull hold four whole blocks (every superblock half does)
    // and have at least span_of<X> bytes of the row from their start.
    int64_t nfull() const {
        if (SB) return ng;
        const int64_t bs = (int64_t)sizeof(B), bytes = nb * bs, span = span_of<X>(0);
        return bytes < span ? 0 : std::min(nb / 4, (bytes - span) / (4 * bs) + 1);
    }
    template <class Full>
    __attribute__((always_inline)) void operator()(int64_t g, q8x_wgroup *w, Full) const {
        if constexpr (SB) {
            ggml_prefetch_chunk((const char *)x + g * (int64_t)sizeof(B) / 2, (int)sizeof(B) / 2, ahead);
            X::group(x, g, w);
        } else {
            ggml_prefetch_chunk(x + 4 * g, 4 * (int)sizeof(B), ahead);
            // a whole group in the row: the constant "4 blocks left" folds the loaders' end checks away
            const int64_t left = Full::value ? 4 : nb - 4 * g;
            load_group<X>(x + 4 * g, tail, left, Full::value ? span_of<X>(0) : left * (int64_t)sizeof(B), &w->ua, &w->ub, &w->d,
                          &w->m, 0);
        }
    }
};

// One weight row in its own format against NC activation rows (PF: rows
// packed by pack_pair_fields, a folded type).
template <class X, int NC, bool H, bool PF = false>
void dot_q8x(int64_t k, const void *vx, const void *vy, size_t ys, float *s, size_t ss) {
    const row_reader<X> row(vx, k);
    auto load = [&](int, int64_t g, q8x_wgroup *w, auto full) { row(g, w, full); };
    if constexpr (folded_tile<X::S, split_of<X>(0)>())
        q8x_tile_fold<X::S, 1, NC, H, PF>(row.ng, row.nfull(), load, (const uint8_t *)vy, ys, s, ss, nullptr,
                                                        GGML_Q8X_ACC_FIRST | GGML_Q8X_ACC_LAST);
    else
        q8x_tile<X::S, 1, NC, H, wide_quants<X>(), split_of<X>(0)>(row.ng, row.nfull(), load, (const uint8_t *)vy, ys, s, ss);
}

// One weight row against nc (1..8) activation rows.
template <class X, bool H = false, bool PF = false>
void dot_q8x_n(int64_t k, const void *x, const void *y, size_t ys, float *s, size_t ss, int nc) {
    switch (nc) {
        case 1: return dot_q8x<X, 1, H, PF>(k, x, y, ys, s, ss);
        case 2: return dot_q8x<X, 2, H, PF>(k, x, y, ys, s, ss);
        case 3: return dot_q8x<X, 3, H, PF>(k, x, y, ys, s, ss);
        case 4: return dot_q8x<X, 4, H, PF>(k, x, y, ys, s, ss);
        case 5: return dot_q8x<X, 5, H, PF>(k, x, y, ys, s, ss);
        case 6: return dot_q8x<X, 6, H, PF>(k, x, y, ys, s, ss);
        case 7: return dot_q8x<X, 7, H, PF>(k, x, y, ys, s, ss);
        default: return dot_q8x<X, 8, H, PF>(k, x, y, ys, s, ss);
    }
}

// The rows of the folded types' one-row kernel (PF): for each pair of groups
// g, g + 1 (g even), in the sd fields of the two (which no folded kernel
// reads), the pair's offsets as the kernel's fold would sum them (ns << S
// over a block's lanes, plus the magic bits where magic_fits: block b's of
// g in lane 4b, of g + 1 in lane 4b + 1), then the pair's scales dy as the
// plain kernel blends them. A pair's fields then take two lines instead of
// four (q8xh rows of 11008 elements touch 27.5 KB, not 33, of the 32 KB L1d
// that the weights stream through: Zen 4 VM, `high` Q4_0 down projection
// 79% -> 85% of the read, median of four alternating rounds; 1 thread in
// cache level). Every other field stays as it was, so the columns and groups
// outside the pairs read the plain layout.
template <class X, bool H>
void pack_pair_fields(void *vy, int64_t k) {
    constexpr size_t GROUP = H ? GGML_Q8XH_GROUP : GGML_Q8X_GROUP, DY = H ? 256 : 128, NS = DY + 64, SD = DY + 128;
    const __m512i magic = _mm512_set1_epi32(magic_fits<X::S, H>() ? 0x4B400000 : 0);
    uint8_t *y = (uint8_t *)vy;
    const int64_t ng = (k + 127) / 128;
    for (int64_t g = 0; g + 1 < ng; g += 2) {
        const uint8_t *ya = y + g * GROUP, *yb = ya + GROUP;
        // (sum ns) << S as the lanes' (ns << S) wrap in the kernel's adds
        const __m512i ns = fold_pair(_mm512_loadu_si512(ya + NS), _mm512_loadu_si512(yb + NS));
        _mm512_storeu_si512(y + g * GROUP + SD, _mm512_add_epi32(_mm512_slli_epi32(ns, X::S), magic));
        _mm512_storeu_ps((float *)(y + (g + 1) * GROUP + SD), pair_scales(ya, yb, DY));
    }
}

// A weight row unpacked once, group by group (ggml_q8x_unpacked_size), for
// the prompt kernels, which meet every row once per column tile: the
// unpacking is then paid once per row block and prompt, not once per tile.
template <class X>
void unpack_q8x(int64_t k, const void *vx, void *vu) {
    const row_reader<X> row(vx, k);
    q8x_wgroup *u = (q8x_wgroup *)vu;
    for (int64_t g = 0; g < row.ng; g++) {
        q8x_wgroup w;
        w.m = _mm512_setzero_ps();
        row(g, &w, std::false_type());
        _mm512_store_si512(&u[g].ua, w.ua);
        _mm512_store_si512(&u[g].ub, w.ub);
        _mm512_store_ps(&u[g].d, w.d);
        _mm512_store_ps(&u[g].m, w.m);
    }
}

// GGML_Q8X_GEMM_ROWS unpacked rows (u, u + us bytes, ...) against NC
// activation rows, ng groups of them (one chunk of the rows; acc, flags: see
// q8x_tile): the same arithmetic per element as dot_q8x.
template <class X, int NC, bool H>
void gemm_q8xu(int64_t ng, const void *vu, size_t us, const void *vy, size_t ys, float *acc, float *s, size_t ss, int flags) {
    auto load = [&](int r, int64_t g, q8x_wgroup *w, auto) {
        const q8x_wgroup *u = (const q8x_wgroup *)((const char *)vu + r * us) + g;
        w->ua = _mm512_load_si512(&u->ua);
        w->ub = _mm512_load_si512(&u->ub);
        w->d = _mm512_load_ps(&u->d);
        if (X::S < 0 || split_of<X>(0)) w->m = _mm512_load_ps(&u->m);
    };
    if constexpr (folded_tile<X::S, split_of<X>(0)>())
        q8x_tile_fold<X::S, GGML_Q8X_GEMM_ROWS, NC, H>(ng, ng, load, (const uint8_t *)vy, ys, s, ss, acc, flags);
    else
        q8x_tile<X::S, GGML_Q8X_GEMM_ROWS, NC, H, wide_quants<X>(), split_of<X>(0)>(ng, ng, load, (const uint8_t *)vy, ys, s, ss, acc,
                                                                                      flags);
}
template <class X, bool H = false>
void gemm_q8x_n(int64_t ng, const void *u, size_t us, const void *y, size_t ys, float *acc, float *s, size_t ss, int nc, int flags) {
    static_assert(GGML_Q8X_GEMM_COLS == 4, "one case per column count");
    switch (nc) {
        case 1: return gemm_q8xu<X, 1, H>(ng, u, us, y, ys, acc, s, ss, flags);
        case 2: return gemm_q8xu<X, 2, H>(ng, u, us, y, ys, acc, s, ss, flags);
        case 3: return gemm_q8xu<X, 3, H>(ng, u, us, y, ys, acc, s, ss, flags);
        default: return gemm_q8xu<X, 4, H>(ng, u, us, y, ys, acc, s, ss, flags);
    }
}
template <class X>
void gemm_q8xh_n(int64_t ng, const void *u, size_t us, const void *y, size_t ys, float *acc, float *s, size_t ss, int nc, int flags) {
    gemm_q8x_n<X, true>(ng, u, us, y, ys, acc, s, ss, nc, flags);
}
template <class X>
void dot_q8xh_n(int64_t k, const void *x, const void *y, size_t ys, float *s, size_t ss, int nc) {
    dot_q8x_n<X, true>(k, x, y, ys, s, ss, nc);
}

// Per 32-bit lane l of a group (four blocks, block l / 4) of superblock half
// h: the sub-block index 4h + l / 4, and that index as a bit in every byte
// (the qh / hmask bit of the lane's block). bytes_test: which of 16 bytes at
// p, repeated in the four lanes, have that bit.
inline __m512i lane_blocks(int h) {
    return _mm512_add_epi32(_mm512_set1_epi32(4 * h), _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
}
inline __m512i lane_block_bits(int h) { return _mm512_sllv_epi32(_mm512_set1_epi32(0x01010101), lane_blocks(h)); }
inline __mmask64 bytes_test(const uint8_t *p, __m512i bit) {
    return _mm512_test_epi8_mask(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)p)), bit);
}

// ---- K-quants with sub-blocks of 32 (q4_K, q5_K) in the q8x form ----
// Sub-block j of a superblock, weight = (d sc_j) u - (dmin m_j), is a
// q4_1-like block with scale d sc_j and minimum -dmin m_j (both exact in
// f32): group g of a row is half g % 2 of superblock g / 2, its sub-blocks
// 4 (g % 2) .. + 3. The 64 quant bytes of a half hold sub-block 4h + b's
// elements 0..15 in 128-bit lane 2 (b / 2) and 16..31 in lane 2 (b / 2) + 1,
// as low (b even) or high (b odd) nibbles; q5_K's fifth bit of element l of
// sub-block j is bit j of qh[l].
template <bool Q5>
struct XK {
    using B = typename std::conditional<Q5, block_q5_K, block_q4_K>::type;
    static constexpr int S = -1;
    static void group(const B *x, int64_t g, q8x_wgroup *w) {
        const B *b = x + (g >> 1);
        const int h = (int)(g & 1);
        const __m512i q = _mm512_loadu_si512(b->qs + 64 * h);
        const __m512i cnt = _mm512_setr_epi32(0, 0, 0, 0, 0x40004, 0x40004, 0x40004, 0x40004, 0, 0, 0, 0, 0x40004, 0x40004,
                                              0x40004, 0x40004);  // words: nibble shift 0 / 4 / 0 / 4 by lane
        const __m512i m4 = _mm512_set1_epi8(0x0F);
        w->ua = _mm512_and_si512(_mm512_srlv_epi16(_mm512_shuffle_i64x2(q, q, 0xA0), cnt), m4);  // lanes 0 0 2 2
        w->ub = _mm512_and_si512(_mm512_srlv_epi16(_mm512_shuffle_i64x2(q, q, 0xF5), cnt), m4);  // lanes 1 1 3 3
        if (Q5) {
            const __m512i bit = lane_block_bits(h), sixteen = _mm512_set1_epi8(16);
            const uint8_t *qh = ((const block_q5_K *)(const void *)b)->qh;
            w->ua = _mm512_mask_add_epi8(w->ua, bytes_test(qh, bit), w->ua, sixteen);
            w->ub = _mm512_mask_add_epi8(w->ub, bytes_test(qh + 16, bit), w->ub, sixteen);
        }
        // scales_q45: bytes 0..7 the sub-blocks' scales, 8..15 their mins
        const __m512i s32 = _mm512_cvtepu8_epi32(scales_q45(b->scales));
        const __m512i ix = lane_blocks(h);
        w->d = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_permutexvar_epi32(ix, s32)), _mm512_set1_ps(_cvtsh_ss(b->d)));
        w->m = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_permutexvar_epi32(_mm512_add_epi32(ix, _mm512_set1_epi32(8)), s32)),
                             _mm512_set1_ps(-_cvtsh_ss(b->dmin)));
    }
};

// Sub-blocks of 16 (SPLIT): scale words s32 (16 int32, one per sub-block) of a
// superblock with scale d -> half h's per-lane scales: d of lane l the low
// half's of block l / 4, m the high half's.
inline void half_scales(__m512i s32, int h, float d, q8x_wgroup *w) {
    const __m512i ix = _mm512_add_epi32(_mm512_set1_epi32(8 * h), _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6));
    const __m512 vd = _mm512_set1_ps(d);
    w->d = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_permutexvar_epi32(ix, s32)), vd);
    w->m = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_permutexvar_epi32(_mm512_add_epi32(ix, _mm512_set1_epi32(1)), s32)), vd);
}
// Word shift counts 2b in 128-bit lane b (the 2-bit fields of four blocks).
inline __m512i shifts_2b() {
    return _mm512_setr_epi32(0, 0, 0, 0, 0x20002, 0x20002, 0x20002, 0x20002, 0x40004, 0x40004, 0x40004, 0x40004, 0x60006, 0x60006,
                             0x60006, 0x60006);
}

// q6_K: group g is half g % 2 of superblock g / 2; its block b's element l
// has the low nibble (b / 2 ? high : low) of ql[64 h + 32 (b % 2) + l] and the
// two high bits (qh[32 h + l] >> 2 b) & 3, so u = 0..63 and weight = d sc (u - 32)
// with sc the int8 scale of the block's half (elements 0..15: scales[8 h + 2 b],
// 16..31: the next one): SPLIT, d the low halves' scales, m the high halves'.
struct XK6 {
    using B = block_q6_K;
    static constexpr int S = 5;
    static constexpr bool SPLIT = true;
    static void group(const B *x, int64_t g, q8x_wgroup *w) {
        const B *b = x + (g >> 1);
        const int h = (int)(g & 1);
        const __m512i ql = _mm512_loadu_si512(b->ql + 64 * h);
        const __m512i cnt = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0x40004, 0x40004, 0x40004, 0x40004, 0x40004, 0x40004, 0x40004,
                                              0x40004);  // words: nibble shift 0 / 0 / 4 / 4 by lane
        const __m512i m4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(3);
        // the high bits, shifted to 0..1 by 2b per lane (a word shift of at most 6 keeps each byte's bits 0..1 its own)
        const __m512i hcnt = shifts_2b();
        const uint8_t *qh = b->qh + 32 * h;
        const __m512i ha = _mm512_and_si512(_mm512_srlv_epi16(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)qh)), hcnt), m3);
        const __m512i hb = _mm512_and_si512(_mm512_srlv_epi16(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(qh + 16))), hcnt), m3);
        const __m512i la = _mm512_and_si512(_mm512_srlv_epi16(_mm512_shuffle_i64x2(ql, ql, 0x88), cnt), m4);  // lanes 0 2 0 2
        const __m512i lb = _mm512_and_si512(_mm512_srlv_epi16(_mm512_shuffle_i64x2(ql, ql, 0xDD), cnt), m4);  // lanes 1 3 1 3
        w->ua = _mm512_or_si512(la, _mm512_slli_epi16(ha, 4));
        w->ub = _mm512_or_si512(lb, _mm512_slli_epi16(hb, 4));
        half_scales(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b->scales)), h, _cvtsh_ss(b->d), w);
    }
};

// q3_K: group g is half h = g % 2 of superblock g / 2; its block b's element
// l has the two low bits (qs[32 h + l] >> 2 b) & 3 and the third bit, worth 4,
// bit 4 h + b of hmask[l]: u = 0..7, weight = d sc (u - 4) with sc the 6-bit
// scale (minus 32) of the block's half (16 elements): SPLIT as q6_K.
struct XK3 {
    using B = block_q3_K;
    static constexpr int S = 2;
    static constexpr bool SPLIT = true;
    static void group(const B *x, int64_t g, q8x_wgroup *w) {
        const B *b = x + (g >> 1);
        const int h = (int)(g & 1);
        const __m512i cnt = shifts_2b();
        const __m512i m3 = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
        const __m512i bit = lane_block_bits(h);
        const uint8_t *qs = b->qs + 32 * h;
        auto half = [&](int o) {  // elements o .. o + 15 of the four blocks
            const __m512i lo = _mm512_and_si512(_mm512_srlv_epi16(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(qs + o))), cnt), m3);
            return _mm512_mask_add_epi8(lo, bytes_test(b->hmask + o, bit), lo, four);
        };
        w->ua = half(0);
        w->ub = half(16);
        half_scales(_mm512_cvtepi16_epi32(q3k_scales16(b->scales)), h, _cvtsh_ss(b->d), w);
    }
};

// q2_K: group g is half h = g % 2 of superblock g / 2; its block b's element
// l has u = (qs[32 h + l] >> 2 b) & 3 and weight d sc u - dmin m, sc and m the
// low and high nibbles of scales[8 h + 2 b] for elements 0..15 and of the
// next byte for 16..31. sc u <= 45 fits a byte, so the scale goes into the
// quants (one word multiply: a 128-bit lane is one half with one scale, and
// no product carries into the next byte): d is the superblock's, and m the
// halves' -dmin m in the lanes of the activations' half sums sd (lanes 4b,
// 4b + 2: the low half's, vec-dot-simd.h); WIDE for q8xh.
struct XK2 {
    using B = block_q2_K;
    static constexpr int S = -1;
    static constexpr bool WIDE = true;
    static void group(const B *x, int64_t g, q8x_wgroup *w) {
        const B *b = x + (g >> 1);
        const int h = (int)(g & 1);
        const __m512i cnt = shifts_2b(), m3 = _mm512_set1_epi8(3);  // cnt: also word index 2b in lane b
        const uint8_t *qs = b->qs + 32 * h;
        const __m128i s8 = _mm_loadl_epi64((const __m128i *)(b->scales + 8 * h)), m4 = _mm_set1_epi8(0x0F);
        const __m512i sc = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_and_si128(s8, m4)));
        auto half = [&](int o) {  // elements o .. o + 15 of the four blocks, times their scale (byte 2b + o / 16)
            const __m512i u = _mm512_and_si512(_mm512_srlv_epi16(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(qs + o))), cnt), m3);
            return _mm512_mullo_epi16(u, _mm512_permutexvar_epi16(_mm512_add_epi16(cnt, _mm512_set1_epi16((short)(o / 16))), sc));
        };
        w->ua = half(0);
        w->ub = half(16);
        w->d = _mm512_set1_ps(_cvtsh_ss(b->d));
        const __m512i mn = _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(s8, 4), m4));  // min of half j at dword j
        const __m512i ix = _mm512_setr_epi32(0, 1, 0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 6, 7, 6, 7);
        w->m = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_permutexvar_epi32(ix, mn)), _mm512_set1_ps(-_cvtsh_ss(b->dmin)));
    }
};

// The K-quants take the q8x kernels for prompt batches; mat-vec
// and a few columns keep their q8_K kernels (min_cols).
// Every kernel of loader X for type t, from min_cols activation rows on.
template <class X>
void q8x_set(ggml_q8x_kernels *q, ggml_type t, int min_cols) {
    q->min_cols[t] = min_cols;
    q->dot[t] = dot_q8x_n<X>;
    q->dot_hi[t] = dot_q8xh_n<X>;
    if constexpr (folded_tile<X::S, split_of<X>(0)>()) {
        q->dot_own[t] = dot_q8x_n<X, false, true>;
        q->dot_own_hi[t] = dot_q8x_n<X, true, true>;
        q->dot_pack[t] = pack_pair_fields<X, false>;
        q->dot_pack_hi[t] = pack_pair_fields<X, true>;
    }
    q->unpack[t] = unpack_q8x<X>;
    q->gemm[t] = gemm_q8x_n<X>;
    q->gemm_hi[t] = gemm_q8xh_n<X>;
}
inline void q8x_add_kquants(ggml_q8x_kernels *q) {
    q8x_set<XK2>(q, GGML_TYPE_Q2_K, GGML_Q8X_GEMM_MIN_COLS);
    q8x_set<XK3>(q, GGML_TYPE_Q3_K, GGML_Q8X_GEMM_MIN_COLS);
    q8x_set<XK<false>>(q, GGML_TYPE_Q4_K, GGML_Q8X_GEMM_MIN_COLS);
    q8x_set<XK<true>>(q, GGML_TYPE_Q5_K, GGML_Q8X_GEMM_MIN_COLS);
    q8x_set<XK6>(q, GGML_TYPE_Q6_K, GGML_Q8X_GEMM_MIN_COLS);
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
