// Row normalisations: rms_norm (x / sqrt(mean(x^2) + eps)) and norm
// ((x - mean) / sqrt(var + eps)). One block per row; sums in double, reduced
// in a fixed tree, the final scaling in the CPU kernel's precision.
#include "ops.cuh"
#include "reduce.cuh"

namespace pcuda {
namespace {

__global__ void norm_kernel(view dst, view a, bool rms, float eps) {
    __shared__ double sh[ROW_THREADS];
    const int64_t r = blockIdx.x, n = a.ne[0];
    const char *x = a.data + row_offset(dst, a, r);
    char *y = dst.data + row_offset(dst, dst, r);
    auto ld = [&](int64_t i) { return (double)*(const float *)(x + i * a.nb[0]); };
    if (rms) {
        double s = 0;
        for (int64_t i = threadIdx.x; i < n; i += ROW_THREADS) s += ld(i) * ld(i);
        const double ms = block_sum(s, sh) / (double)n;
        const float k = (float)(1.0 / sqrt(ms + (double)eps));
        for (int64_t i = threadIdx.x; i < n; i += ROW_THREADS)
            *(float *)(y + i * dst.nb[0]) = __fmul_rn(*(const float *)(x + i * a.nb[0]), k);
    } else {
        double s = 0;
        for (int64_t i = threadIdx.x; i < n; i += ROW_THREADS) s += ld(i);
        const double mean = block_sum(s, sh) / (double)n;
        double v = 0;
        for (int64_t i = threadIdx.x; i < n; i += ROW_THREADS) v += (ld(i) - mean) * (ld(i) - mean);
        const double k = 1.0 / sqrt(block_sum(v, sh) / (double)n + (double)eps);
        for (int64_t i = threadIdx.x; i < n; i += ROW_THREADS) *(float *)(y + i * dst.nb[0]) = (float)((ld(i) - mean) * k);
    }
}

}  // namespace

int op_norm(context &c, ggml_tensor *dst) {
    float eps;
    memcpy(&eps, &dst->op_params[0], sizeof(eps));
    const int64_t rows = ggml_nrows(dst);
    if (rows == 0) return 0;
    norm_kernel<<<(unsigned)rows, ROW_THREADS, 0, c.compute>>>(view_of(dst), view_of(dst->src[0]), dst->op == GGML_OP_RMS_NORM, eps);
    return launched("norm") ? 0 : 1;
}

}  // namespace pcuda
