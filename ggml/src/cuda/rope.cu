// Rotary position embedding, normal (adjacent pairs) and NeoX (halves):
// a [head_dim, n_head, n_tokens] F32, pos I32 [n_tokens]; the first n_dims of
// each head rotate by pos * freq_scale * freq_base^(-2i / n_dims) / f_i (f:
// the optional frequency factors), scaled by attn_factor; the rest are copied. Angles in double as on the CPU (ops-rope.cpp).
#include "ops.cuh"

namespace pcuda {
namespace {

__global__ void rope_kernel(view dst, view a, const int32_t *pos, const float *ff, int n_dims, bool neox, double base,
                            double scale, double mscale) {
    const int64_t ne0 = dst.ne[0], rows = dst.ne[1] * dst.ne[2] * dst.ne[3];
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t per_row = n_dims / 2 + (ne0 - n_dims);  // pairs, then the copied tail
    if (e >= rows * per_row) return;
    const int64_t r = e / per_row, k = e % per_row;
    const int64_t i1 = r % dst.ne[1], i2 = (r / dst.ne[1]) % dst.ne[2], i3 = r / (dst.ne[1] * dst.ne[2]);
    const char *x = a.data + i1 * a.nb[1] + i2 * a.nb[2] + i3 * a.nb[3];
    char *y = dst.data + i1 * dst.nb[1] + i2 * dst.nb[2] + i3 * dst.nb[3];
    const int half = n_dims / 2;
    if (k < half) {
        const int i = (int)k;
        double theta = (double)pos[i2] * scale * pow(base, -2.0 * i / n_dims);
        if (ff) theta /= (double)ff[i];
        const float c = (float)(mscale * cos(theta)), s = (float)(mscale * sin(theta));
        const int64_t j0 = neox ? i : 2 * i, j1 = neox ? i + half : 2 * i + 1;
        const double x0 = *(const float *)(x + j0 * a.nb[0]), x1 = *(const float *)(x + j1 * a.nb[0]);
        *(float *)(y + j0 * dst.nb[0]) = (float)(x0 * c - x1 * s);
        *(float *)(y + j1 * dst.nb[0]) = (float)(x0 * s + x1 * c);
    } else {
        const int64_t j = n_dims + (k - half);
        *(float *)(y + j * dst.nb[0]) = *(const float *)(x + j * a.nb[0]);
    }
}

}  // namespace

int op_rope(context &c, ggml_tensor *dst) {
    const int n_dims = dst->op_params[0], mode = dst->op_params[1];
    float base, scale, mscale;
    memcpy(&base, &dst->op_params[2], sizeof(float));
    memcpy(&scale, &dst->op_params[3], sizeof(float));
    memcpy(&mscale, &dst->op_params[4], sizeof(float));
    const float *ff = dst->src[2] ? (const float *)dst->src[2]->data : nullptr;
    const int64_t n = ggml_nrows(dst) * (n_dims / 2 + (dst->ne[0] - n_dims));
    if (n == 0) return 0;
    rope_kernel<<<blocks_for(n, 256), 256, 0, c.compute>>>(view_of(dst), view_of(dst->src[0]), (const int32_t *)dst->src[1]->data, ff,
                                                           n_dims, mode == GGML_ROPE_NEOX, base, scale, mscale);
    return launched("rope") ? 0 : 1;
}

}  // namespace pcuda
