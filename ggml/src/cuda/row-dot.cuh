// A warp's dots of one weight row with up to NT activation columns, shared by
// the mat-vec and the sparse row kernels. Lane l takes the 32-element chunks
// l, l + 32, ... of the row: a chunk is one block of the 32-element formats
// and one sub-block of the K-quants, so the block header is read once per
// chunk, neighbouring lanes read neighbouring blocks, and every weight is
// dequantized in registers and multiplied with FP32 activations. Lane
// partials are then summed by a fixed butterfly: the same result every run.
#pragma once

#include "cuda-common.cuh"

namespace pcuda {

constexpr int CHUNK = 32;

// acc[t] (on every lane) = row · x_t for t < nt; x_t at x + t * x_nb1, elements x_nb0 apart.
template <class W, int NT>
__device__ __forceinline__ void warp_row_dots(const char *row, int64_t K, const char *x, int64_t x_nb0, int64_t x_nb1, int nt,
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

}  // namespace pcuda
