// argmax along dim 0 -> I32, one index per row; ties go to the first maximum
// (the CPU's rule). One block per row, reduced as (value, index) pairs.
#include "ops.cuh"
#include "reduce.cuh"

namespace pcuda {
namespace {

__device__ __forceinline__ bool better(float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); }

__global__ void argmax_kernel(int32_t *dst, view a) {
    __shared__ float sv[ROW_THREADS];
    __shared__ int si[ROW_THREADS];
    const int64_t r = blockIdx.x;
    const char *x = a.data + row_offset(a, a, r);
    float bv = -INFINITY;
    int bi = INT32_MAX;
    for (int64_t i = threadIdx.x; i < a.ne[0]; i += ROW_THREADS) {
        const float v = *(const float *)(x + i * a.nb[0]);
        if (bi == INT32_MAX || better(v, (int)i, bv, bi)) {
            bv = v;
            bi = (int)i;
        }
    }
    sv[threadIdx.x] = bv;
    si[threadIdx.x] = bi;
    __syncthreads();
    for (int s = ROW_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) {
            const int o = threadIdx.x + s;
            if (si[o] != INT32_MAX && (si[threadIdx.x] == INT32_MAX || better(sv[o], si[o], sv[threadIdx.x], si[threadIdx.x]))) {
                sv[threadIdx.x] = sv[o];
                si[threadIdx.x] = si[o];
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) dst[r] = si[0] == INT32_MAX ? 0 : si[0];
}

}  // namespace

int op_argmax(context &c, ggml_tensor *dst) {
    const int64_t rows = ggml_nrows(dst->src[0]);
    if (rows == 0) return 0;
    argmax_kernel<<<(unsigned)rows, ROW_THREADS, 0, c.compute>>>((int32_t *)dst->data, view_of(dst->src[0]));
    return launched("argmax") ? 0 : 1;
}

}  // namespace pcuda
