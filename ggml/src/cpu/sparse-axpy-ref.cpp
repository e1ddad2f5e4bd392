// The portable axpy kernels of the column-sparse down projection
// (sparse-axpy.h): multiply, then add; rows in the order given.
#include "ggml-quants.h"
#include "sparse-axpy.h"

namespace {

void axpy_f32_ref(int64_t n, float *y, const void *const *w, const float *a, int nr) {
    for (int r = 0; r < nr; r++)
        for (int64_t i = 0; i < n; i++) y[i] += a[r] * ((const float *)w[r])[i];
}
void axpy_f16_ref(int64_t n, float *y, const void *const *w, const float *a, int nr) {
    for (int r = 0; r < nr; r++)
        for (int64_t i = 0; i < n; i++) y[i] += a[r] * ggml_fp16_to_fp32(((const ggml_fp16_t *)w[r])[i]);
}
void axpy_q8_0_ref(int64_t n, float *y, const void *const *w, const float *a, int nr) {
    for (int r = 0; r < nr; r++) {
        const block_q8_0 *x = (const block_q8_0 *)w[r];
        for (int64_t b = 0; b < n / QK8_0; b++) {
            const float s = a[r] * ggml_fp16_to_fp32(x[b].d);
            for (int j = 0; j < QK8_0; j++) y[b * QK8_0 + j] += s * (float)x[b].qs[j];
        }
    }
}
void axpy_q4_0_ref(int64_t n, float *y, const void *const *w, const float *a, int nr) {
    for (int r = 0; r < nr; r++) {
        const block_q4_0 *x = (const block_q4_0 *)w[r];
        for (int64_t b = 0; b < n / QK4_0; b++) {
            const float s = a[r] * ggml_fp16_to_fp32(x[b].d);
            float *yb = y + b * QK4_0;
            for (int j = 0; j < QK4_0 / 2; j++) {
                yb[j] += s * (float)((x[b].qs[j] & 0x0F) - 8);
                yb[j + QK4_0 / 2] += s * (float)((x[b].qs[j] >> 4) - 8);
            }
        }
    }
}

}  // namespace

void ggml_axpy_kernels_ref(struct ggml_axpy_kernels *k) {
    k->f32 = axpy_f32_ref;
    k->f16 = axpy_f16_ref;
    k->q8_0 = axpy_q8_0_ref;
    k->q4_0 = axpy_q4_0_ref;
}
