// Mat-mat for prompts (more than MATVEC_MAX_T columns of b) on the tensor
// cores, no cuBLAS: a block computes a 32 x 32 tile of dst with four warps of
// 16 x 16 wmma products. Each K step of 16 dequantizes the weight tile and
// loads the activation tile into shared memory, both split into two halves,
// v = hi + lo (hi = half(v), lo = half(v - hi)), and accumulates
// hi·hi + lo·hi + hi·lo in FP32: about 22 bits of each operand, so the result
// is at the mat-vec's precision rather than FP16's (the lo·lo term, ~2^-22
// relative, is dropped). Each dst element is one warp's fixed sequence of
// MMAs over K: deterministic. Each column of b is first scaled by a power of
// two that puts its largest magnitude in [2^13, 2^14) (undone on the result,
// exactly): no activation overflows the half range, and small ones keep their
// low half out of the subnormals. Weights are used as they are.
#include <mma.h>

#include "ops.cuh"

namespace pcuda {
namespace {

using namespace nvcuda;

constexpr int TM = 32, TN = 32, TK = 16;
constexpr int SCALE_THREADS = 256;

// scale[plane * N + n] = 2^(13 - e), where 2^e <= max_k |b[k, n]| < 2^(e+1); 1 for a zero column.
__global__ void column_scale_kernel(float *scale, view b) {
    __shared__ float red[SCALE_THREADS];
    const int64_t n = blockIdx.x, plane = blockIdx.y, N = b.ne[1];
    const char *col = b.data + n * b.nb[1] + (plane % b.ne[2]) * b.nb[2] + (plane / b.ne[2]) * b.nb[3];
    float m = 0.0f;
    for (int64_t k = threadIdx.x; k < b.ne[0]; k += SCALE_THREADS) m = fmaxf(m, fabsf(*(const float *)(col + k * b.nb[0])));
    red[threadIdx.x] = m;
    __syncthreads();
    for (int s = SCALE_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        const float mx = red[0];
        scale[plane * N + n] = mx > 0.0f && isfinite(mx) ? ldexpf(1.0f, 13 - ilogbf(mx)) : 1.0f;
    }
}

__device__ __forceinline__ void split(float v, __half *hi, __half *lo) {
    const __half h = __float2half_rn(v);
    *hi = h;
    *lo = __float2half_rn(v - __half2float(h));
}

template <class W>
__global__ void __launch_bounds__(128) mat_mat_kernel(view dst, view a, view b, int64_t r2, int64_t r3, const float *scale) {
    __shared__ __align__(32) __half a_hi[TM * TK], a_lo[TM * TK];  // row-major M x K
    __shared__ __align__(32) __half b_hi[TN * TK], b_lo[TN * TK];  // col-major K x N
    __shared__ __align__(32) float c_sh[4][16 * 16];
    const int64_t M = dst.ne[0], N = dst.ne[1], K = a.ne[0];
    const int64_t m0 = (int64_t)blockIdx.x * TM, n0 = (int64_t)blockIdx.y * TN;
    const int64_t i2 = blockIdx.z % dst.ne[2], i3 = blockIdx.z / dst.ne[2];
    const char *ap = a.data + (i2 / r2) * a.nb[2] + (i3 / r3) * a.nb[3];
    const char *bp = b.data + i2 * b.nb[2] + i3 * b.nb[3];
    const float *sc = scale + (int64_t)blockIdx.z * N;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm = warp & 1, wn = warp >> 1;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa_hi, fa_lo;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb_hi, fb_lo;

    for (int64_t k0 = 0; k0 < K; k0 += TK) {
        for (int e = threadIdx.x; e < TM * TK; e += blockDim.x) {
            const int mm = e / TK, kk = e % TK;
            const int64_t gm = m0 + mm, gk = k0 + kk;
            const float v = gm < M && gk < K ? load_w<W>(ap + gm * a.nb[1], gk) : 0.0f;
            split(v, &a_hi[e], &a_lo[e]);
        }
        for (int e = threadIdx.x; e < TN * TK; e += blockDim.x) {
            const int nn = e / TK, kk = e % TK;
            const int64_t gn = n0 + nn, gk = k0 + kk;
            const float v = gn < N && gk < K ? __fmul_rn(*(const float *)(bp + gn * b.nb[1] + gk * b.nb[0]), sc[gn]) : 0.0f;
            split(v, &b_hi[e], &b_lo[e]);
        }
        __syncthreads();
        wmma::load_matrix_sync(fa_hi, a_hi + wm * 16 * TK, TK);
        wmma::load_matrix_sync(fa_lo, a_lo + wm * 16 * TK, TK);
        wmma::load_matrix_sync(fb_hi, b_hi + wn * 16 * TK, TK);
        wmma::load_matrix_sync(fb_lo, b_lo + wn * 16 * TK, TK);
        wmma::mma_sync(acc, fa_hi, fb_hi, acc);
        wmma::mma_sync(acc, fa_lo, fb_hi, acc);
        wmma::mma_sync(acc, fa_hi, fb_lo, acc);
        __syncthreads();
    }
    wmma::store_matrix_sync(c_sh[warp], acc, 16, wmma::mem_col_major);
    __syncwarp();
    for (int e = lane; e < 256; e += 32) {
        const int mm = e % 16, nn = e / 16;
        const int64_t gm = m0 + wm * 16 + mm, gn = n0 + wn * 16 + nn;
        if (gm < M && gn < N)
            *(float *)(dst.data + gm * dst.nb[0] + gn * dst.nb[1] + i2 * dst.nb[2] + i3 * dst.nb[3]) =
                __fdiv_rn(c_sh[warp][nn * 16 + mm], sc[gn]);  // a power of two: exact
    }
}

}  // namespace

int mat_mat(context &c, const ggml_tensor *a, const ggml_tensor *b, ggml_tensor *dst) {
    const int64_t M = dst->ne[0], N = dst->ne[1], planes = dst->ne[2] * dst->ne[3];
    if (M == 0 || N == 0 || planes == 0) return 0;
    const int64_t r2 = b->ne[2] / a->ne[2], r3 = b->ne[3] / a->ne[3];
    float *scale = (float *)scratch(c, op_scratch_bytes(dst));
    if (!scale) return 1;
    column_scale_kernel<<<dim3((unsigned)N, (unsigned)planes), SCALE_THREADS, 0, c.compute>>>(scale, view_of(b));
    if (!launched("mat_mat column scale")) return 1;
    const dim3 grid(blocks_for(M, TM), blocks_for(N, TN), (unsigned)planes);
    with_format(a->type, [&](auto w) {
        mat_mat_kernel<decltype(w)><<<grid, 128, 0, c.compute>>>(view_of(dst), view_of(a), view_of(b), r2, r3, scale);
    });
    return launched("mat_mat") ? 0 : 1;
}

}  // namespace pcuda
