// Elementwise kernels: add/mul (with broadcast of src1), scale, relu, silu,
// gelu and the gated forms silu(a)*b, relu(a)*b, gelu(a)*b.
//
// Work is split by rows of dst; every element is computed by the same
// expression whatever the thread count, so results are bit-identical for any
// nth. Contiguous rows take a plain loop the compiler can vectorize; strided
// rows (views, permutes) take the same expression through byte strides.
// Kernels read each element before writing the same position, so running
// in place (dst aliasing src0) is safe.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

namespace {

[[noreturn]] void fail(const char *op, const char *what) {
    fprintf(stderr, "pinfer: %s: %s\n", op, what);
    abort();
}

void require_f32(const char *op, const ggml_tensor *t) {
    if (t->type != GGML_TYPE_F32) fail(op, "only F32 tensors are supported");
}

inline float at(const char *row, size_t nb0, int64_t i) { return *(const float *)(row + (size_t)i * nb0); }
inline float &at(char *row, size_t nb0, int64_t i) { return *(float *)(row + (size_t)i * nb0); }

// The activation functions op_relu, op_silu, op_gelu are in ops.h.

// dst = f(src0) elementwise; dst has src0's shape.
template <class F>
void map_unary(const ggml_compute_params *p, ggml_tensor *dst, const char *name, F f) {
    const ggml_tensor *a = dst->src[0];
    require_f32(name, a);
    require_f32(name, dst);
    const int64_t ne0 = dst->ne[0];
    int64_t r0, r1;
    ggml_split_range(ggml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const char *ar = (const char *)a->data + ggml_row_offset(dst, a, r);
        char *dr = (char *)dst->data + ggml_row_offset(dst, dst, r);
        if (a->nb[0] == sizeof(float) && dst->nb[0] == sizeof(float)) {
            const float *x = (const float *)ar;
            float *y = (float *)dr;
            for (int64_t i = 0; i < ne0; i++) y[i] = f(x[i]);
        } else {
            for (int64_t i = 0; i < ne0; i++) at(dr, dst->nb[0], i) = f(at(ar, a->nb[0], i));
        }
    }
}

// dst = f(src0, src1) elementwise with src1 repeated over src0's shape
// (ggml_can_repeat(src1, src0)).
template <class F>
void map_binary(const ggml_compute_params *p, ggml_tensor *dst, const char *name, F f) {
    const ggml_tensor *a = dst->src[0];
    const ggml_tensor *b = dst->src[1];
    require_f32(name, a);
    require_f32(name, b);
    require_f32(name, dst);
    if (!ggml_can_repeat(b, a)) fail(name, "src1 cannot be broadcast to src0");
    const int64_t ne0 = dst->ne[0], nb_0 = b->ne[0];
    int64_t r0, r1;
    ggml_split_range(ggml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t i1 = r % dst->ne[1];
        const int64_t i2 = (r / dst->ne[1]) % dst->ne[2];
        const int64_t i3 = r / (dst->ne[1] * dst->ne[2]);
        const char *ar = (const char *)a->data + ggml_row_offset(dst, a, r);
        char *dr = (char *)dst->data + ggml_row_offset(dst, dst, r);
        const char *br = (const char *)b->data + (size_t)(i1 % b->ne[1]) * b->nb[1] +
                         (size_t)(i2 % b->ne[2]) * b->nb[2] + (size_t)(i3 % b->ne[3]) * b->nb[3];
        if (a->nb[0] == sizeof(float) && b->nb[0] == sizeof(float) && dst->nb[0] == sizeof(float)) {
            const float *x = (const float *)ar;
            const float *y = (const float *)br;
            float *z = (float *)dr;
            // src1's row repeats ne0/nb_0 times along the row.
            for (int64_t j = 0; j < ne0; j += nb_0) {
                for (int64_t i = 0; i < nb_0; i++) z[j + i] = f(x[j + i], y[i]);
            }
        } else {
            for (int64_t i = 0; i < ne0; i++) {
                at(dr, dst->nb[0], i) = f(at(ar, a->nb[0], i), at(br, b->nb[0], i % nb_0));
            }
        }
    }
}

// dst = g(a) * b for same-shaped a, b.
template <class G>
void map_gated(const ggml_compute_params *p, ggml_tensor *dst, const char *name, G g) {
    const ggml_tensor *a = dst->src[0];
    const ggml_tensor *b = dst->src[1];
    require_f32(name, a);
    require_f32(name, b);
    require_f32(name, dst);
    if (!ggml_are_same_shape(a, b)) fail(name, "a and b must have the same shape");
    const int64_t ne0 = dst->ne[0];
    int64_t r0, r1;
    ggml_split_range(ggml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const char *ar = (const char *)a->data + ggml_row_offset(dst, a, r);
        const char *br = (const char *)b->data + ggml_row_offset(dst, b, r);
        char *dr = (char *)dst->data + ggml_row_offset(dst, dst, r);
        if (a->nb[0] == sizeof(float) && b->nb[0] == sizeof(float) && dst->nb[0] == sizeof(float)) {
            const float *x = (const float *)ar;
            const float *y = (const float *)br;
            float *z = (float *)dr;
            for (int64_t i = 0; i < ne0; i++) z[i] = g(x[i]) * y[i];
        } else {
            for (int64_t i = 0; i < ne0; i++) {
                at(dr, dst->nb[0], i) = g(at(ar, a->nb[0], i)) * at(br, b->nb[0], i);
            }
        }
    }
}

}  // namespace

extern "C" {

void ggml_compute_forward_add(const ggml_compute_params *p, ggml_tensor *dst) {
    map_binary(p, dst, "add", [](float x, float y) { return x + y; });
}

void ggml_compute_forward_mul(const ggml_compute_params *p, ggml_tensor *dst) {
    map_binary(p, dst, "mul", [](float x, float y) { return x * y; });
}

void ggml_compute_forward_scale(const ggml_compute_params *p, ggml_tensor *dst) {
    float s;
    memcpy(&s, &dst->op_params[0], sizeof(s));
    map_unary(p, dst, "scale", [s](float x) { return x * s; });
}

void ggml_compute_forward_relu(const ggml_compute_params *p, ggml_tensor *dst) {
    map_unary(p, dst, "relu", op_relu);
}

void ggml_compute_forward_silu(const ggml_compute_params *p, ggml_tensor *dst) {
    map_unary(p, dst, "silu", op_silu);
}

void ggml_compute_forward_gelu(const ggml_compute_params *p, ggml_tensor *dst) {
    map_unary(p, dst, "gelu", op_gelu);
}

void ggml_compute_forward_tanh(const ggml_compute_params *p, ggml_tensor *dst) {
    map_unary(p, dst, "tanh", [](float x) { return tanhf(x); });
}

void ggml_compute_forward_swiglu(const ggml_compute_params *p, ggml_tensor *dst) {
    map_gated(p, dst, "swiglu", op_silu);
}

void ggml_compute_forward_reglu(const ggml_compute_params *p, ggml_tensor *dst) {
    map_gated(p, dst, "reglu", op_relu);
}

void ggml_compute_forward_geglu(const ggml_compute_params *p, ggml_tensor *dst) {
    map_gated(p, dst, "geglu", op_gelu);
}

}  // extern "C"
