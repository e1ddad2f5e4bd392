// Block-wide reductions in a fixed order (a tree over the threads' partial
// results), so a row gives the same result every run.
#pragma once

#include "cuda-common.cuh"

namespace pcuda {

constexpr int ROW_THREADS = 256;  // threads per row of the row kernels

// Sum over the block of ROW_THREADS threads; every thread gets the result.
template <class T>
__device__ T block_sum(T v, T *shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (int s = ROW_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    const T r = shared[0];
    __syncthreads();
    return r;
}

__device__ inline float block_max(float v, float *shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (int s = ROW_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) shared[threadIdx.x] = fmaxf(shared[threadIdx.x], shared[threadIdx.x + s]);
        __syncthreads();
    }
    const float r = shared[0];
    __syncthreads();
    return r;
}

// Row r of a tensor counted over dims 1..3 of shape (ggml_row_offset on the CPU).
__device__ __forceinline__ int64_t row_offset(const view &shape, const view &t, int64_t r) {
    const int64_t i1 = r % shape.ne[1], i2 = (r / shape.ne[1]) % shape.ne[2], i3 = r / (shape.ne[1] * shape.ne[2]);
    return i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
}

}  // namespace pcuda
