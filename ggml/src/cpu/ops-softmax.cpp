// soft_max along dim 0 of softmax(a * scale + mask).
//
// mask (optional) is F32 [ne0, >= ne1]: row i1 of the mask applies to row i1
// of every (i2, i3) plane of a. A row whose logits are all -inf (fully masked)
// has no defined softmax; we write zeros for it rather than NaN.
//
// dst rows are contiguous (a fresh tensor): the scaled, masked logits are
// written there first, then exponentiated in place, so no scratch is needed
// and dst may alias a.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "vec-exp.h"

namespace {

constexpr int LANES = 8;

[[noreturn]] void fail(const char *what) {
    fprintf(stderr, "pinfer: soft_max: %s\n", what);
    abort();
}

// Row max over fixed lanes, combined in fixed order. A NaN wins, so that a
// NaN row propagates instead of passing for a fully masked (all -inf) one.
inline float max_nan(float a, float m) { return a > m || a != a ? a : m; }
float row_max(const float *y, int64_t n) {
    float m[LANES];
    for (int k = 0; k < LANES; k++) m[k] = -INFINITY;
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        for (int k = 0; k < LANES; k++) m[k] = max_nan(y[i + k], m[k]);
    }
    for (int k = 0; i < n; i++, k++) m[k] = max_nan(y[i], m[k]);
    float r = m[0];
    for (int k = 1; k < LANES; k++) r = max_nan(m[k], r);
    return r;
}

}  // namespace

extern "C" void ggml_compute_forward_soft_max(const ggml_compute_params *p, ggml_tensor *dst) {
    const ggml_tensor *a = dst->src[0];
    const ggml_tensor *mask = dst->src[1];
    if (a->type != GGML_TYPE_F32 || dst->type != GGML_TYPE_F32) fail("only F32 is supported");
    if (!ggml_are_same_shape(a, dst)) fail("dst must have src0's shape");
    if (dst->nb[0] != sizeof(float)) fail("dst rows must be contiguous");
    if (mask) {
        if (mask->type != GGML_TYPE_F32) fail("mask must be F32");
        if (mask->ne[0] != a->ne[0] || mask->ne[1] < a->ne[1]) fail("mask must be [ne0, >= ne1] of a");
    }
    float scale;
    memcpy(&scale, &dst->op_params[0], sizeof(scale));

    const int64_t n = dst->ne[0];
    const ggml_exp_sum_t exp_sum = ggml_cpu_exp_sum();
    int64_t r0, r1;
    ggml_split_range(ggml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t i1 = r % dst->ne[1];  // selects the mask row
        const char *x = (const char *)a->data + ggml_row_offset(dst, a, r);
        float *y = (float *)((char *)dst->data + ggml_row_offset(dst, dst, r));

        // y = x * scale (+ mask)
        if (a->nb[0] == sizeof(float)) {
            const float *xf = (const float *)x;
            for (int64_t i = 0; i < n; i++) y[i] = xf[i] * scale;
        } else {
            for (int64_t i = 0; i < n; i++) y[i] = *(const float *)(x + (size_t)i * a->nb[0]) * scale;
        }
        if (mask) {
            const char *mr = (const char *)mask->data + i1 * mask->nb[1];
            if (mask->nb[0] == sizeof(float)) {
                const float *m = (const float *)mr;
                for (int64_t i = 0; i < n; i++) y[i] += m[i];
            } else {
                for (int64_t i = 0; i < n; i++) y[i] += *(const float *)(mr + (size_t)i * mask->nb[0]);
            }
        }

        const float mx = row_max(y, n);
        if (mx == -INFINITY) {  // fully masked row
            memset(y, 0, (size_t)n * sizeof(float));
            continue;
        }
        const double sum = exp_sum(n, y, mx);  // y = exp(y - mx), SIMD where the CPU has it (vec-exp.h)
        const float inv = (float)(1.0 / sum);
        for (int64_t j = 0; j < n; j++) y[j] *= inv;
    }
}
