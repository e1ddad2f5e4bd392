// Element-by-element ops: add / mul (src1 broadcast), scale, relu / silu /
// gelu, tanh, the gated forms act(a) * b, and sparse_mask. One thread per element;
// the float operations are those of the CPU kernels (ops.h), so results match
// bit for bit where the CPU's do (no contraction into fused multiply-adds).
#include "ops.cuh"

namespace pcuda {
namespace {

__device__ __forceinline__ float relu(float x) { return x > 0.0f ? x : 0.0f; }
__device__ __forceinline__ float silu(float x) { return __fdiv_rn(x, __fadd_rn(1.0f, expf(-x))); }
__device__ __forceinline__ float gelu(float x) {  // tanh form, as 1 / (1 + exp(-2u)) (ops.h)
    const float u = __fmul_rn(__fmul_rn(0.7978845608028654f, x), __fadd_rn(1.0f, __fmul_rn(__fmul_rn(0.044715f, x), x)));
    return __fdiv_rn(x, __fadd_rn(1.0f, expf(__fmul_rn(-2.0f, u))));
}

enum kind { ADD, MUL, SCALE, RELU, SILU, GELU, TANH, SWIGLU, REGLU, GEGLU, MASK };

__device__ __forceinline__ int64_t offset(const view &v, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return i0 * v.nb[0] + i1 * v.nb[1] + i2 * v.nb[2] + i3 * v.nb[3];
}

__global__ void map_kernel(view dst, view a, view b, int k, float param, int64_t n) {
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n) return;
    const int64_t i0 = e % dst.ne[0], i1 = (e / dst.ne[0]) % dst.ne[1];
    const int64_t i2 = (e / (dst.ne[0] * dst.ne[1])) % dst.ne[2], i3 = e / (dst.ne[0] * dst.ne[1] * dst.ne[2]);
    const float x = *(const float *)(a.data + offset(a, i0, i1, i2, i3));
    float y = 0, r;
    if (k == ADD || k == MUL)
        y = *(const float *)(b.data + offset(b, i0 % b.ne[0], i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]));
    else if (k >= SWIGLU && k <= GEGLU)
        y = *(const float *)(b.data + offset(b, i0, i1, i2, i3));
    switch (k) {
        case ADD: r = __fadd_rn(x, y); break;
        case MUL: r = __fmul_rn(x, y); break;
        case SCALE: r = __fmul_rn(x, param); break;
        case RELU: r = relu(x); break;
        case SILU: r = silu(x); break;
        case GELU: r = gelu(x); break;
        case TANH: r = tanhf(x); break;
        case SWIGLU: r = __fmul_rn(silu(x), y); break;
        case REGLU: r = __fmul_rn(relu(x), y); break;
        case GEGLU: r = __fmul_rn(gelu(x), y); break;
        default: r = fabsf(x) > param ? x : 0.0f; break;  // MASK
    }
    *(float *)(dst.data + offset(dst, i0, i1, i2, i3)) = r;
}

}  // namespace

int op_elementwise(context &c, ggml_tensor *dst) {
    int k;
    float param = 0;
    switch (dst->op) {
        case GGML_OP_ADD: k = ADD; break;
        case GGML_OP_MUL: k = MUL; break;
        case GGML_OP_SCALE: k = SCALE; memcpy(&param, &dst->op_params[0], sizeof(float)); break;
        case GGML_OP_RELU: k = RELU; break;
        case GGML_OP_SILU: k = SILU; break;
        case GGML_OP_GELU: k = GELU; break;
        case GGML_OP_TANH: k = TANH; break;
        case GGML_OP_SWIGLU: k = SWIGLU; break;
        case GGML_OP_REGLU: k = REGLU; break;
        case GGML_OP_GEGLU: k = GEGLU; break;
        case GGML_OP_SPARSE_MASK: k = MASK; memcpy(&param, &dst->op_params[0], sizeof(float)); break;
        default: ggml_backend_set_error("cuda: %s is not elementwise", ggml_op_name(dst->op)); return 1;
    }
    const int64_t n = ggml_nelements(dst);
    if (n == 0) return 0;
    const view b = dst->src[1] ? view_of(dst->src[1]) : view_of(dst->src[0]);
    map_kernel<<<blocks_for(n, 256), 256, 0, c.compute>>>(view_of(dst), view_of(dst->src[0]), b, k, param, n);
    return launched("elementwise") ? 0 : 1;
}

}  // namespace pcuda
