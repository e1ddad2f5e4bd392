// The dense-vs-sparse crossover is the computing pool's policy
// (ggml_threadpool_set_sparse_dense_policy): SPARSE_DOWN and SPARSE_FFN take
// the dense path exactly when the pool's policy says so. The plain ffn_down
// given to them is all zeros, so the result shows which path ran; the sparse
// result is checked against a double-precision sum.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <random>
#include <vector>

#include "ggml-cpu.h"
#include "check.h"

static int64_t g_calls = 0;
static bool always_dense(int64_t, int64_t, int64_t) { return g_calls++, true; }
static bool never_dense(int64_t, int64_t, int64_t) { return g_calls++, false; }

static const int64_t d = 64, n = 128;

struct fixture {
    ggml_context *ctx;
    ggml_tensor *wt, *wd, *h, *idx, *bundle, *wg, *wu, *x;
    std::vector<float> wtv, hv, xv, gv, uv;
};

static void fill(ggml_tensor *t, std::vector<float> &v, std::mt19937 &rng) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    v.resize((size_t)ggml_nelements(t));
    for (float &f : v) f = nd(rng);
    memcpy(t->data, v.data(), v.size() * sizeof(float));
}

// Index list (one column) of every neuron.
static void all_active(ggml_tensor *idx) {
    int32_t *p = (int32_t *)idx->data;
    p[0] = (int32_t)n;
    for (int64_t i = 0; i < n; i++) p[1 + i] = (int32_t)i;
}

static fixture make() {
    fixture f;
    ggml_init_params ip = {(size_t)8 << 20, nullptr, false};
    f.ctx = ggml_init(ip);
    std::mt19937 rng(7);
    f.wt = ggml_new_tensor_2d(f.ctx, GGML_TYPE_F32, d, n);  // ffn_down_t
    f.wd = ggml_new_tensor_2d(f.ctx, GGML_TYPE_F32, n, d);  // ffn_down: zeros
    memset(f.wd->data, 0, ggml_nbytes(f.wd));
    f.h = ggml_new_tensor_2d(f.ctx, GGML_TYPE_F32, n, 1);
    f.idx = ggml_new_tensor_2d(f.ctx, GGML_TYPE_I32, n + 1, 1);
    all_active(f.idx);
    fill(f.wt, f.wtv, rng);
    fill(f.h, f.hv, rng);
    f.wg = ggml_new_tensor_2d(f.ctx, GGML_TYPE_F32, d, n);
    f.wu = ggml_new_tensor_2d(f.ctx, GGML_TYPE_F32, d, n);
    fill(f.wg, f.gv, rng);
    fill(f.wu, f.uv, rng);
    f.bundle = ggml_new_tensor_2d(f.ctx, GGML_TYPE_F32, d, 3 * n);  // gate_i, up_i, down_t_i
    for (int64_t i = 0; i < n; i++) {
        float *b = (float *)f.bundle->data + 3 * i * d;
        memcpy(b, f.gv.data() + i * d, d * sizeof(float));
        memcpy(b + d, f.uv.data() + i * d, d * sizeof(float));
        memcpy(b + 2 * d, f.wtv.data() + i * d, d * sizeof(float));
    }
    f.x = ggml_new_tensor_2d(f.ctx, GGML_TYPE_F32, d, 1);
    fill(f.x, f.xv, rng);
    return f;
}

static std::vector<float> compute(ggml_context *ctx, ggml_tensor *y, ggml_threadpool *tp) {
    ggml_cgraph *g = ggml_new_graph(ctx);
    ggml_build_forward_expand(g, y);
    CHECK(ggml_graph_compute(g, tp) == 0, "compute failed");
    std::vector<float> out((size_t)ggml_nelements(y));
    memcpy(out.data(), y->data, out.size() * sizeof(float));
    return out;
}

static bool all_zero(const std::vector<float> &v) {
    for (float f : v)
        if (f != 0.0f) return false;
    return true;
}

int main() {
    fixture f = make();
    // double references of the sparse paths over every neuron
    std::vector<double> down_ref(d, 0.0), ffn_ref(d, 0.0);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < d; j++) down_ref[j] += (double)f.hv[i] * f.wtv[i * d + j];
    for (int64_t i = 0; i < n; i++) {
        double g = 0, u = 0;
        for (int64_t k = 0; k < d; k++) {
            g += (double)f.gv[i * d + k] * f.xv[k];
            u += (double)f.uv[i * d + k] * f.xv[k];
        }
        const double hi = g / (1 + exp(-g)) * u;
        for (int64_t j = 0; j < d; j++) ffn_ref[j] += hi * f.wtv[i * d + j];
    }
    auto near = [](const std::vector<float> &y, const std::vector<double> &ref) {
        double err = 0, mag = 0;
        for (size_t j = 0; j < y.size(); j++) {
            err = fmax(err, fabs(y[j] - ref[j]));
            mag = fmax(mag, fabs(ref[j]));
        }
        return mag > 0 && err <= 1e-4 * mag;
    };

    for (int nt : {1, 3}) {
        ggml_threadpool *tp = ggml_threadpool_new(nt);
        ggml_tensor *down = ggml_sparse_down(f.ctx, f.wt, f.wd, f.h, f.idx, 0, n);
        ggml_tensor *ffn = ggml_sparse_ffn_bundle(f.ctx, f.bundle, f.wg, f.wu, f.wd, f.x, f.idx, 0, n, GGML_OP_SWIGLU, false);

        // the CPU's own policy: every neuron active -> dense (the zero ffn_down)
        CHECK(ggml_cpu_sparse_should_use_dense(n, n, 1), "the CPU policy calls full density dense");
        CHECK(all_zero(compute(f.ctx, down, tp)), "default policy, sparse_down: the dense path did not run");
        CHECK(all_zero(compute(f.ctx, ffn, tp)), "default policy, sparse_ffn: the dense path did not run");

        ggml_threadpool_set_sparse_dense_policy(tp, never_dense);
        g_calls = 0;
        CHECK(near(compute(f.ctx, down, tp), down_ref), "never dense, sparse_down: not the sparse sum");
        CHECK(near(compute(f.ctx, ffn, tp), ffn_ref), "never dense, sparse_ffn: not the sparse sum");
        CHECK(g_calls > 0, "the pool's policy was not asked");

        ggml_threadpool_set_sparse_dense_policy(tp, always_dense);
        CHECK(all_zero(compute(f.ctx, down, tp)), "always dense, sparse_down: the sparse path ran");
        CHECK(all_zero(compute(f.ctx, ffn, tp)), "always dense, sparse_ffn: the sparse path ran");

        ggml_threadpool_set_sparse_dense_policy(tp, nullptr);  // back to the CPU's
        CHECK(all_zero(compute(f.ctx, down, tp)), "reset policy, sparse_down: the dense path did not run");
        ggml_threadpool_free(tp);
    }
    ggml_free(f.ctx);
    if (g_fail) {
        fprintf(stderr, "%d checks failed\n", g_fail);
        return 1;
    }
    printf("test-sparse-policy: all checks passed\n");
    return 0;
}
