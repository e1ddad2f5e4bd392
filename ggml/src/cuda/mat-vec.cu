// Mat-vec (decoding: up to MATVEC_MAX_T columns of b): dst[m, t] = a_m · b_t
// over the planes (a broadcast over dims 2, 3 as i2 / r2, i3 / r3). One warp
// per two weight rows (row-dot.cuh: weights dequantized in registers, FP32
// activations -- at least --precision high --, a fixed reduction order). One
// template for every weight format (cuda-common.cuh, groups.cuh).
#include "ops.cuh"
#include "row-dot.cuh"

namespace pcuda {
namespace {

constexpr int WARPS = 4;  // warps per block
constexpr int ROWS = 2;   // rows per warp: the activations are read once for both

template <class W, int NT>
__global__ void mat_vec_kernel(view dst, view a, view b, int64_t r2, int64_t r3) {
    const int64_t m0 = ((int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5)) * ROWS;
    const int64_t i2 = blockIdx.y % dst.ne[2], i3 = blockIdx.y / dst.ne[2];
    if (m0 >= dst.ne[0]) return;  // the whole warp: m0 is per warp
    const char *base = a.data + (i2 / r2) * a.nb[2] + (i3 / r3) * a.nb[3];
    const char *rows[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) rows[r] = base + min(m0 + r, dst.ne[0] - 1) * a.nb[1];  // a last odd row: computed twice, written once
    const int nt = (int)dst.ne[1];
    float acc[ROWS][NT];
    warp_rows_dots<W, NT, ROWS>(rows, a.nb[1], a.ne[0], b.data + i2 * b.nb[2] + i3 * b.nb[3], b.nb[0], b.nb[1], nt, acc);
    if ((threadIdx.x & 31) == 0)
#pragma unroll
        for (int r = 0; r < ROWS; r++)
#pragma unroll
            for (int t = 0; t < NT; t++)
                if (t < nt && m0 + r < dst.ne[0])
                    *(float *)(dst.data + (m0 + r) * dst.nb[0] + t * dst.nb[1] + i2 * dst.nb[2] + i3 * dst.nb[3]) = acc[r][t];
}

template <class W>
void launch(context &c, view d, view a, view b, int64_t r2, int64_t r3, int64_t M, int64_t planes, int nt) {
    const dim3 grid(blocks_for(M, WARPS * ROWS), (unsigned)planes);
    // one instance per small column count keeps the accumulators in registers
    if (nt == 1) mat_vec_kernel<W, 1><<<grid, 32 * WARPS, 0, c.compute>>>(d, a, b, r2, r3);
    else if (nt == 2) mat_vec_kernel<W, 2><<<grid, 32 * WARPS, 0, c.compute>>>(d, a, b, r2, r3);
    else if (nt <= 4) mat_vec_kernel<W, 4><<<grid, 32 * WARPS, 0, c.compute>>>(d, a, b, r2, r3);
    else mat_vec_kernel<W, MATVEC_MAX_T><<<grid, 32 * WARPS, 0, c.compute>>>(d, a, b, r2, r3);
}

}  // namespace

int mat_vec(context &c, const ggml_tensor *a, const ggml_tensor *b, ggml_tensor *dst) {
    const int64_t M = dst->ne[0], planes = dst->ne[2] * dst->ne[3];
    if (M == 0 || planes == 0 || dst->ne[1] == 0) return 0;
    const int64_t r2 = b->ne[2] / a->ne[2], r3 = b->ne[3] / a->ne[3];
    with_format(a->type, [&](auto w) { launch<decltype(w)>(c, view_of(dst), view_of(a), view_of(b), r2, r3, M, planes, (int)dst->ne[1]); });
    return launched("mat_vec") ? 0 : 1;
}

int op_mul_mat(context &c, ggml_tensor *dst) {
    const ggml_tensor *a = dst->src[0], *b = dst->src[1];
    return b->ne[1] <= MATVEC_MAX_T ? mat_vec(c, a, b, dst) : mat_mat(c, a, b, dst);
}

}  // namespace pcuda
