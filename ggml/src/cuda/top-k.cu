// top_k along dim 0: F32 [n, T] -> I32 [k, T], largest first, ties to the
// lower id, NaN never chosen over a number (the CPU's rule). One thread per
// column: k passes over n, both a handful (a mixture of experts' router).
#include "ops.cuh"

namespace pcuda {
namespace {

__global__ void top_k_kernel(view dst, view a) {
    const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= a.ne[1]) return;
    const char *x = a.data + r * a.nb[1];
    char *out = dst.data + r * dst.nb[1];
    for (int64_t j = 0; j < dst.ne[0]; j++) {
        int32_t best = -1;
        float bv = 0.0f;
        for (int64_t i = 0; i < a.ne[0]; i++) {
            bool taken = false;
            for (int64_t q = 0; q < j && !taken; q++) taken = *(const int32_t *)(out + q * dst.nb[0]) == i;
            if (taken) continue;
            const float v = *(const float *)(x + i * a.nb[0]);
            if (best < 0 || v > bv || (isnan(bv) && !isnan(v))) {
                best = (int32_t)i;
                bv = v;
            }
        }
        *(int32_t *)(out + j * dst.nb[0]) = best;
    }
}

}  // namespace

int op_top_k(context &c, ggml_tensor *dst) {
    const int64_t rows = dst->ne[1];
    if (rows == 0) return 0;
    top_k_kernel<<<blocks_for(rows, 128), 128, 0, c.compute>>>(view_of(dst), view_of(dst->src[0]));
    return launched("top_k") ? 0 : 1;
}

}  // namespace pcuda
