// soft_max along dim 0 of softmax(a * scale + mask), mask F32 [ne0, >= ne1]
// broadcast over dims 2, 3; a fully masked row gives zeros (as on the CPU).
// One block per row: the scaled, masked logits go to dst first, then the max,
// the exponentials and their double sum, all reduced in a fixed tree.
#include "ops.cuh"
#include "reduce.cuh"

namespace pcuda {
namespace {

__global__ void soft_max_kernel(view dst, view a, view mask, bool has_mask, float scale) {
    __shared__ float shf[ROW_THREADS];
    __shared__ double shd[ROW_THREADS];
    const int64_t r = blockIdx.x, n = dst.ne[0];
    const char *x = a.data + row_offset(dst, a, r);
    float *y = (float *)(dst.data + row_offset(dst, dst, r));  // rows contiguous (checked by supports_op)
    const char *m = has_mask ? mask.data + (r % dst.ne[1]) * mask.nb[1] : nullptr;
    float mx = -INFINITY;
    for (int64_t i = threadIdx.x; i < n; i += ROW_THREADS) {
        float v = __fmul_rn(*(const float *)(x + i * a.nb[0]), scale);
        if (m) v = __fadd_rn(v, *(const float *)(m + i * mask.nb[0]));
        y[i] = v;
        mx = fmaxf(mx, v);
    }
    mx = block_max(mx, shf);
    if (mx == -INFINITY) {
        for (int64_t i = threadIdx.x; i < n; i += ROW_THREADS) y[i] = 0.0f;
        return;
    }
    double s = 0;
    for (int64_t i = threadIdx.x; i < n; i += ROW_THREADS) {
        y[i] = expf(y[i] - mx);
        s += y[i];
    }
    const float inv = (float)(1.0 / block_sum(s, shd));
    for (int64_t i = threadIdx.x; i < n; i += ROW_THREADS) y[i] = __fmul_rn(y[i], inv);
}

}  // namespace

int op_soft_max(context &c, ggml_tensor *dst) {
    float scale;
    memcpy(&scale, &dst->op_params[0], sizeof(scale));
    const int64_t rows = ggml_nrows(dst);
    if (rows == 0) return 0;
    const ggml_tensor *mask = dst->src[1];
    soft_max_kernel<<<(unsigned)rows, ROW_THREADS, 0, c.compute>>>(view_of(dst), view_of(dst->src[0]),
                                                                   view_of(mask ? mask : dst), mask != nullptr, scale);
    return launched("soft_max") ? 0 : 1;
}

}  // namespace pcuda
