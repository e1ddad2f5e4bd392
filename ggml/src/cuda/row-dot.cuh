// A warp's dots of R weight rows with up to NT activation columns, shared by
// the mat-vec, the sparse row kernels and mul_mat_id. Two paths, one result
// up to summation order:
// - groups (groups.cuh; every format whose rows fit it): lane l takes the
//   8-element groups l, l + 32, ... of the row, so a warp reads 32 neighbouring
//   groups of weights and 1 KiB of neighbouring activations at a time; each
//   group is decoded from a few loads and dotted with FP32 activations (the
//   activations once for all R rows);
// - elements (any other shape or alignment): lane l takes the 32-element
//   chunks l, l + 32, ..., one element at a time.
// Lane partials are then summed by a fixed butterfly: the same result every run.
#pragma once

#include "cuda-common.cuh"
#include "groups.cuh"

namespace pcuda {

constexpr int CHUNK = 32;

template <class W, int NT>
__device__ __forceinline__ void warp_row_dots_elem(const char *row, int64_t K, const char *x, int64_t x_nb0, int64_t x_nb1, int nt,
                                                   float *acc) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    for (int64_t c0 = (int64_t)lane * CHUNK; c0 < K; c0 += 32 * CHUNK) {
        const bool full = c0 + CHUNK <= K;
#pragma unroll 8
        for (int e = 0; e < CHUNK; e++) {
            const int64_t i = c0 + e;
            if (!full && i >= K) break;
            const float w = load_w<W>(row, i);
#pragma unroll
            for (int t = 0; t < NT; t++)
                if (t < nt) acc[t] += w * *(const float *)(x + t * x_nb1 + i * x_nb0);
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = warp_sum(acc[t]);
}

// The 8 activations of a group at element p0 (4) and p0 + half (4).
__device__ __forceinline__ void load_x8(const char *x, int64_t x_nb0, bool vec, int64_t p0, int half, float *v) {
    if (vec) {
        const float4 a = *(const float4 *)(x + p0 * 4), b = *(const float4 *)(x + (p0 + half) * 4);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = *(const float *)(x + (p0 + (i < 4 ? i : half + i - 4)) * x_nb0);
    }
}

template <class W, int NT, int R>
__device__ __forceinline__ void warp_rows_dots_g8(const char *const *rows, int64_t K, const char *x, int64_t x_nb0, int64_t x_nb1,
                                                  int nt, float (&acc)[R][NT]) {
    using G = g8_of<W>;
    const int lane = threadIdx.x & 31;
    // activations as float4 where they are 16-byte aligned (group positions are multiples of 4)
    const bool vec = x_nb0 == 4 && (uintptr_t)x % 16 == 0 && (nt == 1 || x_nb1 % 16 == 0);
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = 0.0f;
    const int64_t n_g = K / 8;
#pragma unroll 2
    for (int64_t gi = lane; gi < n_g; gi += 32) {
        const int64_t blk = gi / G::G;
        const int s = (int)(gi % G::G);
        float q[R][8], d[R], mn[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            d[r] = 1.0f, mn[r] = 0.0f;
            G::group((const uint8_t *)rows[r] + blk * G::GB, s, q[r], d[r], mn[r]);
        }
        const int64_t p0 = blk * G::QKG + (G::HALF == 16 ? 4 * s : 8 * s);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= nt) break;
            float v[8];
            load_x8(x + t * x_nb1, x_nb0, vec, p0, G::HALF, v);
            float sx = 0.0f;
            if constexpr (G::MIN) sx = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
#pragma unroll
            for (int r = 0; r < R; r++) {
                float sq = q[r][0] * v[0];
#pragma unroll
                for (int i = 1; i < 8; i++) sq = fmaf(q[r][i], v[i], sq);
                if constexpr (G::SCALE) acc[r][t] = fmaf(d[r], sq, acc[r][t]);
                else acc[r][t] += sq;
                if constexpr (G::MIN) acc[r][t] = fmaf(mn[r], sx, acc[r][t]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = warp_sum(acc[r][t]);
}

// acc[r][t] (on every lane) = rows[r] · x_t for t < nt; x_t at x + t * x_nb1, elements x_nb0 apart.
// The rows are nb1 bytes apart in their tensor (alignment of the group path).
template <class W, int NT, int R>
__device__ __forceinline__ void warp_rows_dots(const char *const *rows, int64_t nb1, int64_t K, const char *x, int64_t x_nb0,
                                               int64_t x_nb1, int nt, float (&acc)[R][NT]) {
    bool fits = true;
#pragma unroll
    for (int r = 0; r < R; r++) fits = fits && g8_fits<W>(rows[r], K, nb1);
    if constexpr (g8_of<W>::ok) {
        if (fits) {
            warp_rows_dots_g8<W, NT, R>(rows, K, x, x_nb0, x_nb1, nt, acc);
            return;
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) warp_row_dots_elem<W, NT>(rows[r], K, x, x_nb0, x_nb1, nt, acc[r]);
}

// One row: acc[t] = row · x_t.
template <class W, int NT>
__device__ __forceinline__ void warp_row_dots(const char *row, int64_t nb1, int64_t K, const char *x, int64_t x_nb0, int64_t x_nb1,
                                              int nt, float *acc) {
    float a[1][NT];
    const char *rows[1] = {row};
    warp_rows_dots<W, NT, 1>(rows, nb1, K, x, x_nb0, x_nb1, nt, a);
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = a[0][t];
}

}  // namespace pcuda
