// Row normalisations along dim 0: rms_norm (x / sqrt(mean(x^2) + eps)) and
// norm ((x - mean) / sqrt(var + eps)).
//
// Sums are accumulated in double over a fixed number of lanes (explicit
// partial sums the compiler can keep in vector registers), then combined in a
// fixed order: the result depends only on the row, never on the thread split.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

namespace {

constexpr int LANES = 8;

[[noreturn]] void fail(const char *op, const char *what) {
    fprintf(stderr, "pinfer: %s: %s\n", op, what);
    abort();
}

inline double combine(const double *acc) {
    // Fixed pairwise order.
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// Loads element i of a row with element stride nb0 bytes; CONTIG makes the
// stride a compile-time constant so the loops vectorize.
template <bool CONTIG>
inline float ld(const char *row, size_t nb0, int64_t i) {
    return CONTIG ? ((const float *)row)[i] : *(const float *)(row + (size_t)i * nb0);
}

template <bool CONTIG>
double sum_sq(const char *x, size_t nb0, int64_t n) {
    double acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        for (int k = 0; k < LANES; k++) {
            const double v = ld<CONTIG>(x, nb0, i + k);
            acc[k] += v * v;
        }
    }
    for (int k = 0; i < n; i++, k++) {
        const double v = ld<CONTIG>(x, nb0, i);
        acc[k] += v * v;
    }
    return combine(acc);
}

template <bool CONTIG>
double sum_centered_sq(const char *x, size_t nb0, int64_t n, double mean) {
    double acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        for (int k = 0; k < LANES; k++) {
            const double v = ld<CONTIG>(x, nb0, i + k) - mean;
            acc[k] += v * v;
        }
    }
    for (int k = 0; i < n; i++, k++) {
        const double v = ld<CONTIG>(x, nb0, i) - mean;
        acc[k] += v * v;
    }
    return combine(acc);
}

template <bool CONTIG>
double sum(const char *x, size_t nb0, int64_t n) {
    double acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        for (int k = 0; k < LANES; k++) acc[k] += ld<CONTIG>(x, nb0, i + k);
    }
    for (int k = 0; i < n; i++, k++) acc[k] += ld<CONTIG>(x, nb0, i);
    return combine(acc);
}

template <bool CONTIG>
void rms_row(const char *x, size_t xnb0, float *y, size_t ynb0, int64_t n, float eps) {
    const double ms = sum_sq<CONTIG>(x, xnb0, n) / (double)n;
    const float s = (float)(1.0 / sqrt(ms + (double)eps));
    if (CONTIG) {
        const float *xf = (const float *)x;
        for (int64_t i = 0; i < n; i++) y[i] = xf[i] * s;
    } else {
        for (int64_t i = 0; i < n; i++) *(float *)((char *)y + (size_t)i * ynb0) = ld<false>(x, xnb0, i) * s;
    }
}

template <bool CONTIG>
void norm_row(const char *x, size_t xnb0, float *y, size_t ynb0, int64_t n, float eps) {
    const double mean = sum<CONTIG>(x, xnb0, n) / (double)n;
    const double var = sum_centered_sq<CONTIG>(x, xnb0, n, mean) / (double)n;
    const double s = 1.0 / sqrt(var + (double)eps);
    // Centre and scale in double: x - mean cancels when x is close to mean.
    if (CONTIG) {
        const float *xf = (const float *)x;
        for (int64_t i = 0; i < n; i++) y[i] = (float)(((double)xf[i] - mean) * s);
    } else {
        for (int64_t i = 0; i < n; i++) {
            *(float *)((char *)y + (size_t)i * ynb0) = (float)(((double)ld<false>(x, xnb0, i) - mean) * s);
        }
    }
}

template <class Row, class RowStrided>
void forward(const ggml_compute_params *p, ggml_tensor *dst, const char *name, Row row, RowStrided row_strided) {
    const ggml_tensor *a = dst->src[0];
    if (a->type != GGML_TYPE_F32 || dst->type != GGML_TYPE_F32) fail(name, "only F32 is supported");
    if (!ggml_are_same_shape(a, dst)) fail(name, "dst must have src0's shape");
    float eps;
    memcpy(&eps, &dst->op_params[0], sizeof(eps));
    const int64_t n = dst->ne[0];
    int64_t r0, r1;
    ggml_split_range(ggml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const char *x = (const char *)a->data + ggml_row_offset(dst, a, r);
        float *y = (float *)((char *)dst->data + ggml_row_offset(dst, dst, r));
        if (a->nb[0] == sizeof(float) && dst->nb[0] == sizeof(float)) {
            row(x, a->nb[0], y, dst->nb[0], n, eps);
        } else {
            row_strided(x, a->nb[0], y, dst->nb[0], n, eps);
        }
    }
}

}  // namespace

extern "C" {

void ggml_compute_forward_rms_norm(const ggml_compute_params *p, ggml_tensor *dst) {
    forward(p, dst, "rms_norm", rms_row<true>, rms_row<false>);
}

void ggml_compute_forward_norm(const ggml_compute_params *p, ggml_tensor *dst) {
    forward(p, dst, "norm", norm_row<true>, norm_row<false>);
}

}  // extern "C"
