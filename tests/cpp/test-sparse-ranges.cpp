// Compact weights (a device's hot prefix [0, k)) with an index list over all
// n > k neurons: every sparse op must skip the ids outside its range without
// reading their rows. Each weight ends exactly at a PROT_NONE page, so a read
// of a row >= k faults; the results are checked against double-precision sums.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <random>
#include <vector>

#include "ggml.h"
#include "check.h"
#include "guarded.h"

static const int64_t d = 64, n = 96, k = 40;  // list over n neurons, weights of k

static std::vector<float> randv(size_t count, std::mt19937 &rng) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> v(count);
    for (float &f : v) f = nd(rng);
    return v;
}

static ggml_tensor *tensor_on(ggml_context *ctx, int64_t ne0, int64_t ne1, void *data) {
    ggml_tensor *t = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, ne0, ne1);
    t->data = data;
    return t;
}

static bool close_to(const float *y, const std::vector<double> &ref, double tol) {
    double mag = 1e-30;
    for (double r : ref) mag = fmax(mag, fabs(r));
    for (size_t i = 0; i < ref.size(); i++)
        if (fabs(y[i] - ref[i]) > tol * mag) return false;
    return true;
}

int main() {
    std::mt19937 rng(3);
    std::vector<int32_t> act;  // every third neuron of all n: ids beyond k too
    for (int64_t i = 0; i < n; i += 3) act.push_back((int32_t)i);
    std::vector<int32_t> in_k;
    for (int32_t i : act)
        if (i < k) in_k.push_back(i);

    for (int64_t T : {1, 5}) {
        const std::vector<float> gate = randv((size_t)(k * d), rng), up = randv((size_t)(k * d), rng),
                                 down_t = randv((size_t)(k * d), rng), x = randv((size_t)(T * d), rng),
                                 h = randv((size_t)(T * k), rng);
        std::vector<float> gu((size_t)(2 * k * d)), gud((size_t)(3 * k * d));
        for (int64_t i = 0; i < k; i++) {
            const float *rows[3] = {&gate[i * d], &up[i * d], &down_t[i * d]};
            for (int j = 0; j < 3; j++) {
                memcpy(&gud[(3 * i + j) * d], rows[j], d * sizeof(float));
                if (j < 2) memcpy(&gu[(2 * i + j) * d], rows[j], d * sizeof(float));
            }
        }
        guarded g_gate(gate), g_gu(gu), g_gud(gud), g_down(down_t);

        ggml_init_params ip = {(size_t)4 << 20, nullptr, false};
        ggml_context *ctx = ggml_init(ip);
        ggml_tensor *xt = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, d, T), *ht = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, T);
        memcpy(xt->data, x.data(), x.size() * sizeof(float));
        memcpy(ht->data, h.data(), h.size() * sizeof(float));
        ggml_tensor *idx = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, n + 1, 1);
        int32_t *ip32 = (int32_t *)idx->data;
        ip32[0] = (int32_t)act.size();
        for (size_t i = 0; i < act.size(); i++) ip32[1 + i] = act[i];

        ggml_tensor *rows = ggml_mul_mat_sparse_rows(ctx, tensor_on(ctx, d, k, g_gate.data), xt, idx, 0, k);
        ggml_tensor *bundle = ggml_mul_mat_sparse_rows_bundle(ctx, tensor_on(ctx, d, 2 * k, g_gu.data), xt, idx, 0, k, 2);
        ggml_tensor *down = ggml_sparse_down(ctx, tensor_on(ctx, d, k, g_down.data), nullptr, ht, idx, 0, k);
        ggml_tensor *ffn = ggml_sparse_ffn_bundle(ctx, tensor_on(ctx, d, 3 * k, g_gud.data), nullptr, nullptr, nullptr, xt, idx,
                                                  0, k, GGML_OP_SWIGLU, false);
        CHECK(rows->ne[0] == k && bundle->ne[0] == k && bundle->ne[2] == 2, "outputs follow the weight's %lld neurons", (long long)k);
        ggml_cgraph *gr = ggml_new_graph(ctx);
        for (ggml_tensor *t : {rows, bundle, down, ffn}) ggml_build_forward_expand(gr, t);
        CHECK(ggml_graph_compute_with_threads(gr, 3) == 0, "compute");

        auto dot = [&](const std::vector<float> &w, int64_t i, int64_t t) {
            double s = 0;
            for (int64_t j = 0; j < d; j++) s += (double)w[i * d + j] * x[t * d + j];
            return s;
        };
        for (int64_t t = 0; t < T; t++) {
            std::vector<double> rg(in_k.size()), ru(in_k.size()), ydown(d, 0.0), yffn(d, 0.0);
            std::vector<float> got_g, got_u, got_b;
            for (size_t a = 0; a < in_k.size(); a++) {
                const int64_t i = in_k[a];
                rg[a] = dot(gate, i, t);
                ru[a] = dot(up, i, t);
                got_g.push_back(((const float *)((const char *)rows->data + t * rows->nb[1]))[i]);
                got_b.push_back(((const float *)((const char *)bundle->data + t * bundle->nb[1]))[i]);
                got_u.push_back(((const float *)((const char *)bundle->data + t * bundle->nb[1] + bundle->nb[2]))[i]);
                const double hv = rg[a] / (1 + exp(-rg[a])) * ru[a];
                for (int64_t j = 0; j < d; j++) {
                    ydown[j] += (double)h[t * k + i] * down_t[i * d + j];
                    yffn[j] += hv * down_t[i * d + j];
                }
            }
            CHECK(close_to(got_g.data(), rg, 1e-5), "mul_mat_sparse_rows T=%lld token %lld", (long long)T, (long long)t);
            CHECK(close_to(got_b.data(), rg, 1e-5) && close_to(got_u.data(), ru, 1e-5), "bundle T=%lld token %lld", (long long)T,
                  (long long)t);
            CHECK(close_to((const float *)((const char *)down->data + t * down->nb[1]), ydown, 1e-5), "sparse_down T=%lld token %lld",
                  (long long)T, (long long)t);
            CHECK(close_to((const float *)((const char *)ffn->data + t * ffn->nb[1]), yffn, 1e-5), "sparse_ffn T=%lld token %lld",
                  (long long)T, (long long)t);
        }
        ggml_free(ctx);
    }
    if (g_fail) {
        fprintf(stderr, "%d checks failed\n", g_fail);
        return 1;
    }
    printf("test-sparse-ranges: all checks passed\n");
    return 0;
}
