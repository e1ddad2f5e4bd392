// Copies: dup (a contiguous copy of a view) and cpy (into another tensor's
// memory, F32 <-> F16 / BF16 / F32), element by element over the logical
// order of both shapes; a quantized type copies whole rows between
// same-shaped tensors. get_rows dequantizes rows of any weight type to F32.
#include "ops.cuh"

namespace pcuda {
namespace {

__device__ __forceinline__ int64_t offset_of(const view &v, int64_t e) {
    int64_t off = 0;
    for (int d = 0; d < 4; d++) {
        off += (e % v.ne[d]) * v.nb[d];
        e /= v.ne[d];
    }
    return off;
}

__device__ __forceinline__ float load_f(int t, const char *p) {
    return t == GGML_TYPE_F32 ? *(const float *)p : t == GGML_TYPE_F16 ? fp16(*(const uint16_t *)p) : bf16(*(const uint16_t *)p);
}
__device__ __forceinline__ void store_f(int t, char *p, float v) {
    if (t == GGML_TYPE_F32) *(float *)p = v;
    else if (t == GGML_TYPE_F16) *(uint16_t *)p = __half_as_ushort(__float2half_rn(v));
    else *(uint16_t *)p = to_bf16(v);
}

__global__ void copy_elems(view dst, view src, int64_t n) {
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n) return;
    const char *s = src.data + offset_of(src, e);
    char *d = dst.data + offset_of(dst, e);
    if (src.type == dst.type && src.type == GGML_TYPE_I32) *(int32_t *)d = *(const int32_t *)s;
    else store_f(dst.type, d, load_f(src.type, s));
}

// Rows of bytes (quantized same-type copies): one block per row.
__global__ void copy_rows(view dst, view src, int64_t row_bytes) {
    const int64_t r = blockIdx.x;
    const int64_t i1 = r % src.ne[1], i2 = (r / src.ne[1]) % src.ne[2], i3 = r / (src.ne[1] * src.ne[2]);
    const char *s = src.data + i1 * src.nb[1] + i2 * src.nb[2] + i3 * src.nb[3];
    char *d = dst.data + i1 * dst.nb[1] + i2 * dst.nb[2] + i3 * dst.nb[3];
    for (int64_t i = threadIdx.x; i < row_bytes; i += blockDim.x) d[i] = s[i];
}

template <class W>
__global__ void get_rows_kernel(view dst, view a, view idx, int64_t n_rows) {
    const int64_t r = blockIdx.x;  // dst row: (j, i1, i2) over idx's shape
    const int64_t n = idx.ne[0];
    const int64_t j = r % n, i1 = (r / n) % idx.ne[1], i2 = r / (n * idx.ne[1]);
    const int32_t row = *(const int32_t *)(idx.data + j * idx.nb[0] + i1 * idx.nb[1] + i2 * idx.nb[2]);
    float *y = (float *)(dst.data + j * dst.nb[1] + i1 * dst.nb[2] + i2 * dst.nb[3]);
    if (row < 0 || row >= n_rows) {  // the CPU aborts; a device writes NaN so the result shows it
        for (int64_t i = threadIdx.x; i < a.ne[0]; i += blockDim.x) y[i] = __int_as_float(0x7fc00000);
        return;
    }
    const char *x = a.data + row * a.nb[1] + (i1 % a.ne[2]) * a.nb[2] + (i2 % a.ne[3]) * a.nb[3];
    for (int64_t i = threadIdx.x; i < a.ne[0]; i += blockDim.x) y[i] = load_w<W>(x, i);
}

}  // namespace

int op_copy(context &c, ggml_tensor *dst) {
    const ggml_tensor *src = dst->src[0];
    const int64_t n = ggml_nelements(src);
    if (n == 0) return 0;
    if (ggml_get_type_traits(src->type)->is_quantized) {  // same type and shape (supports_op)
        copy_rows<<<(unsigned)ggml_nrows(src), 128, 0, c.compute>>>(view_of(dst), view_of(src), (int64_t)ggml_row_size(src->type, src->ne[0]));
        return launched("copy_rows") ? 0 : 1;
    }
    copy_elems<<<blocks_for(n, 256), 256, 0, c.compute>>>(view_of(dst), view_of(src), n);
    return launched("copy") ? 0 : 1;
}

int op_get_rows(context &c, ggml_tensor *dst) {
    const ggml_tensor *a = dst->src[0], *idx = dst->src[1];
    const int64_t rows = ggml_nrows(dst);
    if (rows == 0) return 0;
    with_format(a->type, [&](auto w) {
        get_rows_kernel<decltype(w)><<<(unsigned)rows, 128, 0, c.compute>>>(view_of(dst), view_of(a), view_of(idx), a->ne[1]);
    });
    return launched("get_rows") ? 0 : 1;
}

}  // namespace pcuda
