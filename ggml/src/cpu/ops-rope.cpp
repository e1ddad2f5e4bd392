// Rotary position embedding.
//
// a [head_dim, n_head, n_tokens, ne3] F32, pos I32 [n_tokens]. For pair i in
// [0, n_dims/2): theta_i = pos * freq_scale * freq_base^(-2i/n_dims) / f_i
// (f = src2, the optional frequency factors; 1 without), and the pair
// (x0, x1) becomes m (x0 cos - x1 sin, x0 sin + x1 cos), m = attn_factor. The pair is
// (2i, 2i+1) in normal mode and (i, i + n_dims/2) in NeoX mode; dims from
// n_dims up are copied unchanged.
//
// The angles are computed in double (as a float64 reference would), cached
// per token in the worker's slice of the scratch buffer, and reused by every
// head of that token. The rotation itself is done in double and rounded once.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

namespace {

[[noreturn]] void fail(const char *what) {
    fprintf(stderr, "pinfer: rope: %s\n", what);
    abort();
}

// Per-worker scratch: n_dims floats (cos then sin), padded to a cache line.
size_t slice_bytes(int n_dims) { return ((size_t)n_dims * sizeof(float) + 63) / 64 * 64; }

struct rope_freqs {
    double base, scale, mscale;
    const float *factors;  // n_dims/2 divisors of the angle, or nullptr
};

void angles_one(int32_t pos, int i, int n_dims, const rope_freqs &f, float *c, float *s) {
    double theta = (double)pos * f.scale * pow(f.base, -2.0 * i / n_dims);
    if (f.factors) theta /= (double)f.factors[i];
    *c = (float)(f.mscale * cos(theta));
    *s = (float)(f.mscale * sin(theta));
}

void angles(int32_t pos, int n_dims, const rope_freqs &f, float *cs, float *sn) {
    for (int i = 0; i < n_dims / 2; i++) angles_one(pos, i, n_dims, f, &cs[i], &sn[i]);
}

}  // namespace

extern "C" size_t ggml_rope_work_size(const ggml_tensor *node, int n_threads) {
    return (size_t)n_threads * slice_bytes(node->op_params[0]);
}

extern "C" void ggml_compute_forward_rope(const ggml_compute_params *p, ggml_tensor *dst) {
    const ggml_tensor *a = dst->src[0];
    const ggml_tensor *pos = dst->src[1];
    const int n_dims = dst->op_params[0];
    const int mode = dst->op_params[1];
    float freq_base, freq_scale, attn_factor;
    memcpy(&freq_base, &dst->op_params[2], sizeof(float));
    memcpy(&freq_scale, &dst->op_params[3], sizeof(float));
    memcpy(&attn_factor, &dst->op_params[4], sizeof(float));
    const ggml_tensor *ff = dst->src[2];

    if (a->type != GGML_TYPE_F32 || dst->type != GGML_TYPE_F32) fail("only F32 is supported");
    if (!ggml_are_same_shape(a, dst)) fail("dst must have src0's shape");
    if (pos->type != GGML_TYPE_I32 || pos->ne[0] != a->ne[2]) fail("pos must be I32 [n_tokens] (ne[2] of a)");
    if (mode != GGML_ROPE_NORMAL && mode != GGML_ROPE_NEOX) fail("mode must be 0 (normal) or 2 (NeoX)");
    if (n_dims <= 0 || n_dims % 2 != 0 || n_dims > a->ne[0]) fail("n_dims must be even and in (0, head_dim]");
    if (ff && (ff->type != GGML_TYPE_F32 || !ggml_is_contiguous(ff) || ggml_nelements(ff) < n_dims / 2))
        fail("freq_factors must be contiguous F32 [n_dims/2]");
    const rope_freqs fr = {freq_base, freq_scale, attn_factor, ff ? (const float *)ff->data : nullptr};

    const int64_t ne0 = dst->ne[0], ne1 = dst->ne[1], ne2 = dst->ne[2];
    const int half = n_dims / 2;
    const bool neox = mode == GGML_ROPE_NEOX;

    // Angles of the current token, reused by all its heads. The executor
    // sizes the scratch via ggml_op_work_size; a caller that did not gets a
    // stack cache, or for very wide heads per-pair recomputation.
    float *cs = nullptr;
    float stack_cache[2 * 256];
    if (p->wdata && p->wsize >= ggml_rope_work_size(dst, p->nth)) {
        cs = (float *)((char *)p->wdata + (size_t)p->ith * slice_bytes(n_dims));
    } else if (n_dims <= 256) {
        cs = stack_cache;
    }
    int64_t cached = -1;  // token (i2 + i3 * ne2) whose angles are in cs

    int64_t r0, r1;
    ggml_split_range(ggml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t i1 = r % ne1;
        const int64_t i2 = (r / ne1) % ne2;
        const int64_t i3 = r / (ne1 * ne2);
        const int32_t ps = *(const int32_t *)((const char *)pos->data + i2 * pos->nb[0]);
        if (cs && cached != i2 + i3 * ne2) {
            angles(ps, n_dims, fr, cs, cs + half);
            cached = i2 + i3 * ne2;
        }
        const char *x = (const char *)a->data + i1 * a->nb[1] + i2 * a->nb[2] + i3 * a->nb[3];
        char *y = (char *)dst->data + i1 * dst->nb[1] + i2 * dst->nb[2] + i3 * dst->nb[3];
        const size_t xs = a->nb[0], ys = dst->nb[0];
        if (cs && xs == sizeof(float) && ys == sizeof(float)) {
            const float *xf = (const float *)x;
            float *yf = (float *)y;
            const float *c = cs, *s = cs + half;
            if (neox) {
                for (int i = 0; i < half; i++) {
                    const double x0 = xf[i], x1 = xf[i + half];
                    yf[i] = (float)(x0 * c[i] - x1 * s[i]);
                    yf[i + half] = (float)(x0 * s[i] + x1 * c[i]);
                }
            } else {
                for (int i = 0; i < half; i++) {
                    const double x0 = xf[2 * i], x1 = xf[2 * i + 1];
                    yf[2 * i] = (float)(x0 * c[i] - x1 * s[i]);
                    yf[2 * i + 1] = (float)(x0 * s[i] + x1 * c[i]);
                }
            }
        } else {
            for (int i = 0; i < half; i++) {
                float c, s;
                if (cs) {
                    c = cs[i];
                    s = cs[half + i];
                } else {
                    angles_one(ps, i, n_dims, fr, &c, &s);
                }
                const int64_t j0 = neox ? i : 2 * i, j1 = neox ? i + half : 2 * i + 1;
                const double x0 = *(const float *)(x + j0 * xs);
                const double x1 = *(const float *)(x + j1 * xs);
                *(float *)(y + j0 * ys) = (float)(x0 * c - x1 * s);
                *(float *)(y + j1 * ys) = (float)(x0 * s + x1 * c);
            }
        }
        if (x != y || xs != ys) {
            for (int64_t j = n_dims; j < ne0; j++) *(float *)(y + j * ys) = *(const float *)(x + j * xs);
        }
    }
}
