// MUL_MAT_ID (mixture of experts): dst[:, s, t] = as[:, :, ids[s, t]] . b[:, s % B1, t].
// One warp per (weight row, routed column), the mat-vec's row dot
// (row-dot.cuh: any weight format dequantized in registers, FP32
// activations, a fixed reduction order), so a routed column gets the same
// result as the mat-vec of its expert. Prompts run the same kernel: only the
// routed experts' rows are read, though not yet on the tensor cores. With a
// mask (src[3]) an element whose mask is 0 is written 0 without reading its row.
#include "ops.cuh"
#include "row-dot.cuh"

namespace pcuda {
namespace {

constexpr int WARPS = 4;  // warps (rows) per block

template <class W>
__global__ void mul_mat_id_kernel(view dst, view as, view b, view ids, view mask) {
    const int64_t m = (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5);
    if (m >= dst.ne[0]) return;  // the whole warp: m is per warp
    const int64_t n_used = ids.ne[0], s = blockIdx.y % n_used, t = blockIdx.y / n_used;
    const int32_t e = *(const int32_t *)(ids.data + s * ids.nb[0] + t * ids.nb[1]);
    float *y = (float *)(dst.data + m * dst.nb[0] + s * dst.nb[1] + t * dst.nb[2]);
    if (e < 0 || e >= as.ne[2]) {  // the CPU aborts; a device writes NaN so the result shows it
        if ((threadIdx.x & 31) == 0) *y = __int_as_float(0x7fc00000);
        return;
    }
    if (mask.data && *(const float *)(mask.data + m * mask.nb[0] + s * mask.nb[1] + t * mask.nb[2]) == 0.0f) {
        if ((threadIdx.x & 31) == 0) *y = 0.0f;
        return;
    }
    const char *row = as.data + e * as.nb[2] + m * as.nb[1];
    const char *x = b.data + (s % b.ne[1]) * b.nb[1] + t * b.nb[2];
    float acc[1];
    warp_row_dots<W, 1>(row, as.nb[1], as.ne[0], x, b.nb[0], 0, 1, acc);
    if ((threadIdx.x & 31) == 0) *y = acc[0];
}

}  // namespace

int op_mul_mat_id(context &c, ggml_tensor *dst) {
    const ggml_tensor *as = dst->src[0], *b = dst->src[1], *ids = dst->src[2];
    view mask{};
    if (dst->src[3]) mask = view_of(dst->src[3]);
    const int64_t M = dst->ne[0], cols = ids->ne[0] * ids->ne[1];
    if (M == 0 || cols == 0) return 0;
    const dim3 grid(blocks_for(M, WARPS), (unsigned)cols);
    with_format(as->type, [&](auto w) {
        mul_mat_id_kernel<decltype(w)><<<grid, 32 * WARPS, 0, c.compute>>>(view_of(dst), view_of(as), view_of(b), view_of(ids), mask);
    });
    return launched("mul_mat_id") ? 0 : 1;
}

}  // namespace pcuda
