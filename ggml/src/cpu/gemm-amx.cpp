// The AMX tile kernels of MUL_MAT's prompt batches (gemm-amx.h). Compiled
// with AVX-512 and AMX-TILE / AMX-INT8; called only on a CPU that has them and
// once the OS granted the tile state (cpu-type-traits.cpp).
#include "gemm-amx.h"

#include <immintrin.h>
#include <string.h>

#include <initializer_list>

#include "ggml-quants.h"
#include "kquant-scales.h"
#include "vec-dot-simd.h"

namespace {

// The tiles: W the weights (16 rows x 32 bytes), Q and R the activations'
// q and residual (8 rows x 64 bytes: 16 rows x 32 elements in the VNNI
// order), C0..C3 the sums (16 x 16 int32), two per block in flight so that
// the next block's products run while this one's are scaled. The types with
// sub-blocks of 16 (split) take half a block a product: W 16 rows x 16
// bytes, Q and R 4 rows x 64 bytes. (Macros: the tile intrinsics paste their
// tile numbers into the instruction text.)
#define TW 0
#define TQ 1
#define TR 2
#define TC0 4
#define TC1 5
#define TC2 6
#define TC3 7

// tilestored of a sums tile (16 x 64 bytes) that names the 1 KB it writes:
// the intrinsic's "memory" clobber made the compiler keep every accumulator
// on the stack around it (a load and a store per fma: 37 ns a block, not 28).
#define TILE_STORE_SUMS(t, p) TILE_STORE_SUMS_(t, p)
#define TILE_STORE_SUMS_(t, p)                                                                    \
    __asm__ volatile("{tilestored\t%%tmm" #t ", (%1,%2,1)|tilestored\t[%1+%2*1], %%tmm" #t "}" \
                     : "=m"(*(int32_t(*)[256])(p))                                              \
                     : "r"((void *)(p)), "r"(64L))

struct alignas(64) tile_config {  // palette 1 (Intel SDM, LDTILECFG)
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

tile_config make_config(bool split) {
    tile_config c = {};
    c.palette = 1;
    c.rows[TW] = 16, c.colsb[TW] = split ? 16 : 32;
    for (int t : {TQ, TR}) c.rows[t] = split ? 4 : 8, c.colsb[t] = 64;
    for (int t : {TC0, TC1, TC2, TC3}) c.rows[t] = 16, c.colsb[t] = 64;
    return c;
}

// The unpacked rows are block-major: block b of row m at QB b + 32 m, so a
// block's weight tile is 512 contiguous bytes (rows K bytes apart fell in one
// L1 set for K = 4096).
constexpr size_t QB = 32 * GGML_AMX_ROWS;

inline float fp16(ggml_fp16_t h) { return _cvtsh_ss(h); }

// q2_K's second weight tile (the mins): after the values and the scales,
// the same block-major order (row m of block b at QB b + 32 m from it).
inline int8_t *second_tiles(int8_t *q, int64_t nb) { return q + (QB + 128) * nb; }
inline const int8_t *second_tiles(const int8_t *q, int64_t nb) { return q + (QB + 128) * nb; }

// ---- weight rows -> int8 values in element order, a scale and a minimum per 32 ----
// Each writes one row: q[QB b] (32 bytes), dw[16 b], mw[16 b] for its blocks b.

// 16 packed nibble bytes -> 32 values: low nibbles (elements 0..15), then high
inline __m256i nibbles_lohi(const uint8_t *qs) {
    const __m128i v = _mm_loadu_si128((const __m128i *)qs), m = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}
// bit j of a 32-bit word as 0x10 in byte j
inline __m256i fifth_bits(const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, 4);
    return _mm256_maskz_set1_epi8((__mmask32)h, 0x10);
}

void row_q4_0(const void *vx, int64_t nb, int8_t *q, float *dw, float *mw) {
    const block_q4_0 *x = (const block_q4_0 *)vx;
    for (int64_t b = 0; b < nb; b++) {
        _mm256_storeu_si256((__m256i *)(q + QB * b), _mm256_sub_epi8(nibbles_lohi(x[b].qs), _mm256_set1_epi8(8)));
        dw[16 * b] = fp16(x[b].d), mw[16 * b] = 0.0f;
    }
}
void row_q4_1(const void *vx, int64_t nb, int8_t *q, float *dw, float *mw) {
    const block_q4_1 *x = (const block_q4_1 *)vx;
    for (int64_t b = 0; b < nb; b++) {
        _mm256_storeu_si256((__m256i *)(q + QB * b), nibbles_lohi(x[b].qs));
        dw[16 * b] = fp16(x[b].d), mw[16 * b] = fp16(x[b].m);
    }
}
void row_q5_0(const void *vx, int64_t nb, int8_t *q, float *dw, float *mw) {
    const block_q5_0 *x = (const block_q5_0 *)vx;
    for (int64_t b = 0; b < nb; b++) {
        const __m256i v = _mm256_or_si256(nibbles_lohi(x[b].qs), fifth_bits(x[b].qh));
        _mm256_storeu_si256((__m256i *)(q + QB * b), _mm256_sub_epi8(v, _mm256_set1_epi8(16)));
        dw[16 * b] = fp16(x[b].d), mw[16 * b] = 0.0f;
    }
}
void row_q5_1(const void *vx, int64_t nb, int8_t *q, float *dw, float *mw) {
    const block_q5_1 *x = (const block_q5_1 *)vx;
    for (int64_t b = 0; b < nb; b++) {
        _mm256_storeu_si256((__m256i *)(q + QB * b), _mm256_or_si256(nibbles_lohi(x[b].qs), fifth_bits(x[b].qh)));
        dw[16 * b] = fp16(x[b].d), mw[16 * b] = fp16(x[b].m);
    }
}
void row_q8_0(const void *vx, int64_t nb, int8_t *q, float *dw, float *mw) {
    const block_q8_0 *x = (const block_q8_0 *)vx;
    for (int64_t b = 0; b < nb; b++) {
        memcpy(q + QB * b, x[b].qs, 32);
        dw[16 * b] = fp16(x[b].d), mw[16 * b] = 0.0f;
    }
}
// q4_K / q5_K: sub-block j of a superblock is the low (j even) or high (j
// odd) nibbles of 32 bytes, weight = d sc_j u - dmin m_j.
template <bool Q5>
void row_q45_K(const void *vx, int64_t nb, int8_t *q, float *dw, float *mw) {
    const int64_t ns = nb / 8;
    for (int64_t s = 0; s < ns; s++) {
        const uint8_t *blk = (const uint8_t *)vx + s * (Q5 ? sizeof(block_q5_K) : sizeof(block_q4_K));
        const block_q4_K *x4 = (const block_q4_K *)blk;
        const block_q5_K *x5 = (const block_q5_K *)blk;
        const float d = fp16(Q5 ? x5->d : x4->d), dmin = fp16(Q5 ? x5->dmin : x4->dmin);
        alignas(16) uint8_t sm[16];
        _mm_store_si128((__m128i *)sm, scales_q45(Q5 ? x5->scales : x4->scales));
        const uint8_t *qs = Q5 ? x5->qs : x4->qs;
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        __m256i hb = Q5 ? _mm256_loadu_si256((const __m256i *)x5->qh) : _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
            __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            if (Q5) {  // bit 2c (low sub-block) and 2c + 1 of each qh byte, moved to bit 4
                const __m256i one = _mm256_set1_epi8(1);
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(hb, one), 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 1), one), 4));
                hb = _mm256_srli_epi16(hb, 2);
            }
            int8_t *o = q + QB * (8 * s + 2 * c);
            _mm256_storeu_si256((__m256i *)o, lo);
            _mm256_storeu_si256((__m256i *)(o + QB), hi);
        }
        for (int j = 0; j < 8; j++) {
            dw[16 * (8 * s + j)] = d * (float)sm[j];
            mw[16 * (8 * s + j)] = -(dmin * (float)sm[8 + j]);
        }
    }
}

// q6_K / q3_K (split): block j of superblock half h is elements 32 j .. of
// the half's 128 (the layouts of XK6 / XK3 in q8x-dot.h), value v = u - 32
// (q6_K: four bits of ql, two of qh) or u - 4 (q3_K: two bits of qs, the
// hmask bit worth 4); dw the scale of its elements 0..15, mw of 16..31.
void row_q6_K(const void *vx, int64_t nb, int8_t *q, float *dw, float *mw) {
    const block_q6_K *x = (const block_q6_K *)vx;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
    for (int64_t s = 0; s < nb / 8; s++) {
        const float d = fp16(x[s].d);
        for (int h = 0; h < 2; h++) {
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(x[s].qh + 32 * h));
            for (int j = 0; j < 4; j++) {
                const __m256i ql = _mm256_loadu_si256((const __m256i *)(x[s].ql + 64 * h + 32 * (j % 2)));
                const __m256i lo = _mm256_and_si256(j < 2 ? ql : _mm256_srli_epi16(ql, 4), m4);
                const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), m3);
                const __m256i v = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), _mm256_set1_epi8(32));
                const int64_t b = 8 * s + 4 * h + j;
                _mm256_storeu_si256((__m256i *)(q + QB * b), v);
                dw[16 * b] = d * (float)x[s].scales[8 * h + 2 * j];
                mw[16 * b] = d * (float)x[s].scales[8 * h + 2 * j + 1];
            }
        }
    }
}
void row_q3_K(const void *vx, int64_t nb, int8_t *q, float *dw, float *mw) {
    const block_q3_K *x = (const block_q3_K *)vx;
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    for (int64_t s = 0; s < nb / 8; s++) {
        const float d = fp16(x[s].d);
        alignas(32) int16_t sc[16];
        _mm256_store_si256((__m256i *)sc, q3k_scales16(x[s].scales));
        const __m256i hm = _mm256_loadu_si256((const __m256i *)x[s].hmask);
        for (int h = 0; h < 2; h++) {
            const __m256i qs = _mm256_loadu_si256((const __m256i *)(x[s].qs + 32 * h));
            for (int j = 0; j < 4; j++) {
                const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * j), m3);
                const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + j), one);
                const __m256i v = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hb, 2)), _mm256_set1_epi8(4));
                const int64_t b = 8 * s + 4 * h + j;
                _mm256_storeu_si256((__m256i *)(q + QB * b), v);
                dw[16 * b] = d * (float)sc[8 * h + 2 * j];
                mw[16 * b] = d * (float)sc[8 * h + 2 * j + 1];
            }
        }
    }
}

// q2_K: block j of superblock half h (sub-blocks 8 h + 2 j and the next,
// 16 elements each) has u = (qs[32 h + l] >> 2 j) & 3, weight = d sc u -
// dmin m with the sub-block's 4-bit scale sc and min m: the scale goes into
// the values (sc u <= 45, one in-lane table lookup per half), the min into
// the second tile (m per element), so a block is two products of 32: dw = d,
// mw = -dmin.
void row_q2_K(const void *vx, int64_t nb, int8_t *q, float *dw, float *mw) {
    const block_q2_K *x = (const block_q2_K *)vx;
    int8_t *q2 = second_tiles(q, nb);
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int64_t s = 0; s < nb / 8; s++) {
        const float d = fp16(x[s].d), dmin = fp16(x[s].dmin);
        for (int h = 0; h < 2; h++) {
            const __m256i qs = _mm256_loadu_si256((const __m256i *)(x[s].qs + 32 * h));
            for (int j = 0; j < 4; j++) {
                const uint8_t a = x[s].scales[8 * h + 2 * j], c = x[s].scales[8 * h + 2 * j + 1];
                const int sa = a & 15, sc = c & 15;
                // sc u for u = 0..3 in each 128-bit lane (lane 0: elements 0..15)
                const __m256i tbl = _mm256_setr_epi8(0, sa, 2 * sa, 3 * sa, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                                     0, sc, 2 * sc, 3 * sc, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
                const __m256i u = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * j), m3);
                const int64_t b = 8 * s + 4 * h + j;
                _mm256_storeu_si256((__m256i *)(q + QB * b), _mm256_shuffle_epi8(tbl, u));
                _mm256_storeu_si256((__m256i *)(q2 + QB * b), _mm256_set_m128i(_mm_set1_epi8((char)(c >> 4)), _mm_set1_epi8((char)(a >> 4))));
                dw[16 * b] = d;
                mw[16 * b] = -dmin;
            }
        }
    }
}

typedef void (*row_fn)(const void *x, int64_t nb, int8_t *q, float *dw, float *mw);

template <row_fn ROW, bool MINS>
void unpack(const void *rows, size_t row_stride, int nr, int64_t k, void *vu) {
    const int64_t nb = k / 32;
    int8_t *q = (int8_t *)vu;
    float *dw = (float *)(q + GGML_AMX_ROWS * k), *mw = dw + GGML_AMX_ROWS * nb;
    for (int m = 0; m < nr; m++) ROW((const char *)rows + (size_t)m * row_stride, nb, q + 32 * m, dw + m, mw + m);
    for (int m = nr; m < GGML_AMX_ROWS; m++) {  // zeros: finite sums, never stored
        for (int64_t b = 0; b < nb; b++) {
            memset(q + QB * b + 32 * m, 0, 32);
            if (MINS) memset(second_tiles(q, nb) + QB * b + 32 * m, 0, 32);
            dw[16 * b + m] = mw[16 * b + m] = 0.0f;
        }
    }
}

// ---- the product ----
// Per block b: C = W_b Q_b (and C' = W_b R_b) in tiles, then per weight row
// m, a vector over the 16 activation rows:
//   acc[m] += float(C[m] (or 128 C[m] + C'[m])) * (dw[b][m] d[b]) + mw[b][m] sd[b]
// (the last term only for the types with a stored minimum: MIN). Two
// products a block (gemm_pair): C1 scaled by dw[b][m] d[b], C2 by mw[b][m] d[b].

// The sums of one tile product as a vector per weight row m (with H, 128 C + C')
template <bool H>
inline __m512i sums_row(const int32_t *c, const int32_t *c2, int m) {
    const __m512i v = _mm512_load_si512(c + 16 * m);
    return H ? _mm512_add_epi32(_mm512_slli_epi32(v, 7), _mm512_load_si512(c2 + 16 * m)) : v;
}

template <bool H, bool MIN>
inline void scale_block(const int32_t *c, const int32_t *c2, const float *dwb, const float *mwb, const uint8_t *pb, __m512 *acc) {
    constexpr size_t DOFF = H ? 1024 : 512;
    const __m512 d = _mm512_load_ps((const float *)(pb + DOFF)), sd = _mm512_load_ps((const float *)(pb + DOFF + 64));
#pragma GCC unroll 16
    for (int m = 0; m < 16; m++) {
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums_row<H>(c, c2, m)), _mm512_mul_ps(_mm512_set1_ps(dwb[m]), d), acc[m]);
        if (MIN) acc[m] = _mm512_fmadd_ps(_mm512_set1_ps(mwb[m]), sd, acc[m]);
    }
}

// c[0], c[1]: the first product's sums (q, residual), c[2], c[3] the second's.
template <bool H>
inline void scale_pair(const int32_t (*c)[256], const float *dwb, const float *mwb, const uint8_t *pb, __m512 *acc) {
    const __m512 d = _mm512_load_ps((const float *)(pb + (H ? 1024 : 512)));
#pragma GCC unroll 16
    for (int m = 0; m < 16; m++) {
        const __m512 lo = _mm512_mul_ps(_mm512_cvtepi32_ps(sums_row<H>(c[0], c[1], m)), _mm512_set1_ps(dwb[m]));
        acc[m] = _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_cvtepi32_ps(sums_row<H>(c[2], c[3], m)), _mm512_set1_ps(mwb[m]), lo), d, acc[m]);
    }
}

// acc[m] holds weight row m for the 16 activation rows: transpose through
// memory, one activation row's nr outputs at a time
inline void store_rows(const __m512 *acc, float *dst, size_t ds, int nr, int nc) {
    alignas(64) float t[256];
#pragma GCC unroll 16
    for (int m = 0; m < 16; m++) _mm512_store_ps(t + 16 * m, acc[m]);
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(16));
    const __mmask16 rows = (__mmask16)((1u << nr) - 1);
    for (int n = 0; n < nc; n++)
        _mm512_mask_storeu_ps((char *)dst + (size_t)n * ds, rows, _mm512_i32gather_ps(idx, t + n, 4));
}

// One tile product C(CQ) = W Q and with H C(CR) = W R: the W tile from w
// (rows 32 bytes apart), Q from q, R from r. (A macro: the tile numbers must
// be literals.)
#define TILE_PRODUCTS(CQ, CR, w, q, r) \
    do {                               \
        _tile_loadd(TW, (w), 32);      \
        _tile_loadd(TQ, (q), 64);      \
        _tile_zero(CQ);                \
        _tile_dpbssd(CQ, TW, TQ);      \
        if (H) {                       \
            _tile_loadd(TR, (r), 64);  \
            _tile_zero(CR);            \
            _tile_dpbssd(CR, TW, TR);  \
        }                              \
    } while (0)

template <bool H, bool MIN>
void gemm(int64_t k, const void *vu, const void *vp, float *dst, size_t ds, int nr, int nc) {
    const int64_t nb = k / 32;
    const int8_t *wq = (const int8_t *)vu;
    const float *dw = (const float *)(wq + GGML_AMX_ROWS * k), *mw = dw + GGML_AMX_ROWS * nb;
    const uint8_t *pan = (const uint8_t *)vp;
    constexpr size_t BLK = H ? 1152 : 640;
    alignas(64) int32_t c[4][256];
    __m512 acc[16];  // in registers only if every loop over it is unrolled
#pragma GCC unroll 16
    for (int m = 0; m < 16; m++) acc[m] = _mm512_setzero_ps();
#define BLOCK_PRODUCTS(CQ, CR, bb) TILE_PRODUCTS(CQ, CR, wq + QB * (bb), pan + (bb) * BLK, pan + (bb) * BLK + 512)
#define BLOCK_SCALE(CQ, CR, i, bb)                                                                 \
    do {                                                                                           \
        TILE_STORE_SUMS(CQ, c[i]);                                                                 \
        if (H) TILE_STORE_SUMS(CR, c[(i) + 1]);                                                    \
        scale_block<H, MIN>(c[i], c[(i) + 1], dw + 16 * (bb), mw + 16 * (bb), pan + (bb) * BLK, acc); \
    } while (0)
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {  // two blocks: the second's tile products overlap the first's scaling
        BLOCK_PRODUCTS(TC0, TC1, b);
        BLOCK_PRODUCTS(TC2, TC3, b + 1);
        BLOCK_SCALE(TC0, TC1, 0, b);
        BLOCK_SCALE(TC2, TC3, 2, b + 1);
    }
    if (b < nb) {
        BLOCK_PRODUCTS(TC0, TC1, b);
        BLOCK_SCALE(TC0, TC1, 0, b);
    }
#undef BLOCK_PRODUCTS
#undef BLOCK_SCALE
    store_rows(acc, dst, ds, nr, nc);
}

// Two tile products a block, scaled by dw and mw (scale_pair). SPLIT (the
// split tile configuration): the block's low half (W bytes 0..15 of each
// row, Q / R rows 0..3) and its high half (W bytes 16..31, rows 4..7);
// otherwise (q2_K) the whole block against its two weight tiles. Without H
// the four sums tiles hold two blocks, with H one (each product's q and
// residual).
template <bool H, bool SPLIT>
void gemm_pair(int64_t k, const void *vu, const void *vp, float *dst, size_t ds, int nr, int nc) {
    const int64_t nb = k / 32;
    const int8_t *wq = (const int8_t *)vu;
    const float *dw = (const float *)(wq + GGML_AMX_ROWS * k), *mw = dw + GGML_AMX_ROWS * nb;
    const int8_t *wq2 = SPLIT ? wq + 16 : second_tiles(wq, nb);  // the second product's weights
    constexpr size_t Y2 = SPLIT ? 256 : 0;                        // ... and its activation rows
    const uint8_t *pan = (const uint8_t *)vp;
    constexpr size_t BLK = H ? 1152 : 640;
    alignas(64) int32_t c[4][256];
    __m512 acc[16];
#pragma GCC unroll 16
    for (int m = 0; m < 16; m++) acc[m] = _mm512_setzero_ps();
#define PAIR_PRODUCTS(CQ, CR, CQ2, CR2, bb)                                                  \
    do {                                                                                     \
        TILE_PRODUCTS(CQ, CR, wq + QB * (bb), pan + (bb) * BLK, pan + (bb) * BLK + 512);      \
        TILE_PRODUCTS(CQ2, CR2, wq2 + QB * (bb), pan + (bb) * BLK + Y2, pan + (bb) * BLK + 512 + Y2); \
    } while (0)
    if (H) {
        for (int64_t b = 0; b < nb; b++) {
            PAIR_PRODUCTS(TC0, TC1, TC2, TC3, b);
            TILE_STORE_SUMS(TC0, c[0]);
            TILE_STORE_SUMS(TC1, c[1]);
            TILE_STORE_SUMS(TC2, c[2]);
            TILE_STORE_SUMS(TC3, c[3]);
            scale_pair<H>(c, dw + 16 * b, mw + 16 * b, pan + b * BLK, acc);
        }
    } else {
        // two blocks in the four tiles; their sums pass through c[0] and c[2] in turn
        for (int64_t b = 0; b < nb; b += 2) {
            const bool two = b + 1 < nb;
            PAIR_PRODUCTS(TC0, TC0, TC1, TC1, b);
            if (two) PAIR_PRODUCTS(TC2, TC2, TC3, TC3, b + 1);
            TILE_STORE_SUMS(TC0, c[0]);
            TILE_STORE_SUMS(TC1, c[2]);
            scale_pair<H>(c, dw + 16 * b, mw + 16 * b, pan + b * BLK, acc);
            if (two) {
                TILE_STORE_SUMS(TC2, c[0]);
                TILE_STORE_SUMS(TC3, c[2]);
                scale_pair<H>(c, dw + 16 * (b + 1), mw + 16 * (b + 1), pan + (b + 1) * BLK, acc);
            }
        }
    }
#undef PAIR_PRODUCTS
    store_rows(acc, dst, ds, nr, nc);
}

template <row_fn ROW, bool MIN>
void set(ggml_amx_kernels *k, ggml_type t) {
    k->unpack[t] = unpack<ROW, false>;
    k->gemm[t] = gemm<false, MIN>;
    k->gemm_hi[t] = gemm<true, MIN>;
}
template <row_fn ROW, bool SPLIT>
void set_pair(ggml_amx_kernels *k, ggml_type t) {
    // a pair of products a block: the halves (split), or values and mins
    k->unpack[t] = unpack<ROW, !SPLIT>;
    k->gemm[t] = gemm_pair<false, SPLIT>;
    k->gemm_hi[t] = gemm_pair<true, SPLIT>;
    k->split[t] = SPLIT;
    k->mins[t] = !SPLIT;
}

ggml_amx_kernels make_kernels() {
    ggml_amx_kernels k = {};
    set<row_q4_0, false>(&k, GGML_TYPE_Q4_0);
    set<row_q4_1, true>(&k, GGML_TYPE_Q4_1);
    set<row_q5_0, false>(&k, GGML_TYPE_Q5_0);
    set<row_q5_1, true>(&k, GGML_TYPE_Q5_1);
    set<row_q8_0, false>(&k, GGML_TYPE_Q8_0);
    set_pair<row_q2_K, false>(&k, GGML_TYPE_Q2_K);
    set_pair<row_q3_K, true>(&k, GGML_TYPE_Q3_K);
    set<row_q45_K<false>, true>(&k, GGML_TYPE_Q4_K);
    set<row_q45_K<true>, true>(&k, GGML_TYPE_Q5_K);
    set_pair<row_q6_K, true>(&k, GGML_TYPE_Q6_K);
    return k;
}

}  // namespace

void ggml_amx_pack(const void *q8x_row, int64_t k, bool high, void *panel, int n) {
    const int64_t nb = k / 32;
    const size_t blk = ggml_amx_panel_block(high), group = high ? GGML_Q8XH_GROUP : GGML_Q8X_GROUP;
    const size_t dy = high ? 256 : 128;  // the q8x / q8xh offsets (vec-dot-simd.h): ns at dy + 64
    const size_t doff = high ? 1024 : 512;
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *o = (uint8_t *)panel + b * blk;
        if (!q8x_row) {
            for (int i = 0; i < (high ? 16 : 8); i++) memset(o + 64 * i + 4 * n, 0, 4);
            memset(o + doff + 4 * n, 0, 4);
            memset(o + doff + 64 + 4 * n, 0, 4);
            continue;
        }
        // q8x: block l of a group keeps elements 0..15 at 16 l, 16..31 at 64 + 16 l
        const uint8_t *g = (const uint8_t *)q8x_row + (b / 4) * group;
        const int l = (int)(b % 4);
        for (int i = 0; i < 8; i++) {
            memcpy(o + 64 * i + 4 * n, g + (i < 4 ? 16 * l + 4 * i : 64 + 16 * l + 4 * (i - 4)), 4);
            if (high) memcpy(o + 512 + 64 * i + 4 * n, g + 128 + (i < 4 ? 16 * l + 4 * i : 64 + 16 * l + 4 * (i - 4)), 4);
        }
        memcpy(o + doff + 4 * n, g + dy + 16 * l, 4);
        // the block's sum from the lanes' (ns: minus each, exact), times d as q8x's half sums are
        int32_t ns[4];
        memcpy(ns, g + dy + 64 + 16 * l, sizeof(ns));
        float d, sd;
        memcpy(&d, g + dy + 16 * l, 4);
        sd = d * (float)-(ns[0] + ns[1] + ns[2] + ns[3]);
        memcpy(o + doff + 64 + 4 * n, &sd, 4);
    }
}

const ggml_amx_kernels *ggml_cpu_amx_kernels(void) {
    static const ggml_amx_kernels k = make_kernels();
    return &k;
}

void ggml_amx_begin(enum ggml_type t) {
    static const tile_config plain = make_config(false), split = make_config(true);
    _tile_loadconfig(ggml_cpu_amx_kernels()->split[t] ? &split : &plain);
}

void ggml_amx_end(void) { _tile_release(); }
