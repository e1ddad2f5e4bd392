// Internal: prompt batches of MUL_MAT on AMX tiles (Intel Sapphire Rapids and
// later, once the OS grants the tile state: cpu-features.h).
//
// A tile product takes 16 weight rows x 32 elements (int8, the A tile) and
// 16 activation rows x 32 elements (int8, the B tile, in the VNNI order
// below) into 16 x 16 int32 sums per block of 32: every block's sum is exact,
// then scaled in floats by the weight block's scale and the activation
// block's (and the stored minimum's term), the arithmetic of the q8x kernels
// with another float summation order. The activation values are q8x's (q8xh's
// with GGML_PREC_HIGH: q and the residual q2 as two B tiles, 128 C(q) + C(q2)
// in int32), so the reference the tests hold them to is unchanged.
//
// Activations: "panels" of 16 rows, converted by the q8x quantizer and packed
// (ggml_amx_pack); per block b of 32 elements, at b * panel block bytes:
//   int8  q[8][16][4]   q[i][n][j] = element 4 i + j of the block, row n
//   int8  r[8][16][4]   (high) the residual q2, the same order
//   float d[16]         the q8x scale of row n (df, or df / 128 with high)
//   float sd[16]        d * the sum of the row's block (128 q + q2 with high)
// Weights: 16 rows unpacked by the type's ggml_amx_unpack_t:
//   int8  q[K/32][16][32]  block b of row m's values v (element order)
//   float dw[K/32][16]     weight = dw v + mw per block of 32
//   float mw[K/32][16]     (zero for the types with a fixed offset: v is signed)
// or, for the types with sub-blocks of 16 (split: q3_K, q6_K), weight = dw v
// in elements 0..15 of the block and mw v in 16..31: each half is a tile
// product of its own (16 elements; a configuration of its own, ggml_amx_begin);
// q2_K: weight = dw v + mw v2 with v = sc u (the sub-block scale folded in)
// and v2 the sub-block's min, in a second q[K/32][16][32] after mw.
// The missing rows of a partial panel (weights or activations) are zeros.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "ggml.h"

#define GGML_AMX_ROWS 16  // weight rows and activation rows of a tile
// From this many activation rows on, the tiles beat the q8x prompt kernels
// (the float scaling per block costs the same for 1 or 16 rows).
#define GGML_AMX_MIN_COLS 16

static inline size_t ggml_amx_panel_block(bool high) { return high ? 1152 : 640; }
static inline size_t ggml_amx_panel_size(int64_t k, bool high) { return (size_t)(k / 32) * ggml_amx_panel_block(high); }
// q, dw, mw, and with mins (q2_K) the second q
static inline size_t ggml_amx_unpacked_size(int64_t k, bool mins) {
    return (mins ? 2 : 1) * (size_t)GGML_AMX_ROWS * (size_t)k + (size_t)(k / 32) * 128;
}

// Packs a q8x (q8xh with high) row of k elements as row n of a panel; NULL
// writes zeros (a panel's rows past the last activation row).
void ggml_amx_pack(const void *q8x_row, int64_t k, bool high, void *panel, int n);
// nr (1..16) weight rows, row_stride bytes apart, into u (64-byte aligned,
// ggml_amx_unpacked_size(k, mins[type]) bytes).
typedef void (*ggml_amx_unpack_t)(const void *rows, size_t row_stride, int nr, int64_t k, void *u);
// dst[m * 4 bytes + n * dst_stride] = dot(weight row m, activation row n) for
// m < nr, n < nc, from unpacked weights u and a panel. Needs the tiles of
// ggml_amx_begin on this thread.
typedef void (*ggml_amx_gemm_t)(int64_t k, const void *u, const void *panel, float *dst, size_t dst_stride, int nr, int nc);

struct ggml_amx_kernels {
    ggml_amx_unpack_t unpack[GGML_TYPE_COUNT];  // NULL: the type has no tile kernel
    ggml_amx_gemm_t gemm[GGML_TYPE_COUNT];
    ggml_amx_gemm_t gemm_hi[GGML_TYPE_COUNT];  // q8xh activations
    bool split[GGML_TYPE_COUNT];               // sub-blocks of 16: tiles of half a block
    bool mins[GGML_TYPE_COUNT];                // the mins' second weight tile (q2_K)
};
// The tile kernels (call only once ggml_cpu_amx_request granted the state).
const struct ggml_amx_kernels *ggml_cpu_amx_kernels(void);
// The kernels dispatch picked (NULL: no AMX, or capped by PINFER_CPU).
const struct ggml_amx_kernels *ggml_cpu_amx(void);
// Per thread, around a run of gemm calls for weight type t: load the tile
// configuration of t's kernels, then release the tiles (so the OS need not
// save them at every switch).
void ggml_amx_begin(enum ggml_type t);
void ggml_amx_end(void);
