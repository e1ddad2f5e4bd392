// Every op on every backend against the CPU: a table of cases (each op,
// every weight type where it applies, odd / strided / broadcast shapes, the
// sparse ops with neuron ranges [b, e) and index lists, T = 1, 5, 40), each
// run on a backend under test and on a reference, compared at a stated
// per-case tolerance (normalised mean squared error, and exact equality for
// index lists). Pairs: cpu-scalar vs cpu-simd, sim vs cpu, and cuda vs cpu
// where the build has CUDA and a device is present (one PASS / FAIL line per
// case: tools/gpu-check.sh keeps the table). A new backend is one more pair.
//
// Also here: the contracts of the backend layer itself -- the CPU backend
// refuses device memory, sim refuses host memory outside a transfer, budgets
// hold, events order two queues.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ggml-backend-sim.h"
#ifdef PINFER_CUDA
#include "ggml-backend-cuda.h"
#endif
#include "ggml-cpu.h"
#include "ggml-backend.h"
#include "ggml.h"

static int g_fail = 0, g_cases = 0;
static bool g_op_seen[GGML_OP_COUNT];  // ops the cases' graphs ran
#define CHECK(cond, ...)                                             \
    do {                                                             \
        if (!(cond)) {                                               \
            if (++g_fail < 40) {                                     \
                fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
                fprintf(stderr, __VA_ARGS__);                        \
                fprintf(stderr, "\n");                               \
            }                                                        \
        }                                                            \
    } while (0)

// ---------------------------------------------------------------- inputs

// The leafs of one case with their host bytes, made from a seed so that every
// run of the case sees the same values.
struct inputs {
    std::mt19937 rng;
    std::vector<std::pair<ggml_tensor *, std::vector<uint8_t>>> leafs;
    ggml_context *ctx;

    inputs(ggml_context *c, uint32_t seed) : rng(seed), ctx(c) {}

    float u(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); }

    ggml_tensor *add(ggml_tensor *t, std::vector<uint8_t> bytes) {
        leafs.push_back({t, std::move(bytes)});
        return t;
    }
    ggml_tensor *f32(int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1, int64_t ne3 = 1, float lo = -1, float hi = 1) {
        ggml_tensor *t = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, ne0, ne1, ne2, ne3);
        std::vector<uint8_t> b(ggml_nbytes(t));
        float *f = (float *)b.data();
        for (int64_t i = 0; i < ggml_nelements(t); i++) f[i] = u(lo, hi);
        return add(t, std::move(b));
    }
    // A weight matrix [K, M] of type t, quantized by the reference quantizer.
    ggml_tensor *weights(ggml_type type, int64_t K, int64_t M) {
        std::vector<float> f((size_t)(K * M));
        for (float &v : f) v = u(-1, 1);
        ggml_tensor *t = ggml_new_tensor_2d(ctx, type, K, M);
        std::vector<uint8_t> b(ggml_nbytes(t));
        ggml_quantize_chunk(type, f.data(), b.data(), M, K);
        return add(t, std::move(b));
    }
    ggml_tensor *i32(const std::vector<int32_t> &v, int64_t ne0, int64_t ne1 = 1) {
        ggml_tensor *t = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, ne0, ne1);
        std::vector<uint8_t> b(v.size() * 4);
        memcpy(b.data(), v.data(), b.size());
        return add(t, std::move(b));
    }
    // Expert ids I32 [k, T]: k distinct experts of E per token, at random.
    ggml_tensor *expert_ids(int64_t E, int64_t k, int64_t T) {
        std::vector<int32_t> v;
        for (int64_t t = 0; t < T; t++) {
            std::vector<int32_t> e((size_t)E);
            for (int64_t i = 0; i < E; i++) e[(size_t)i] = (int32_t)i;
            std::shuffle(e.begin(), e.end(), rng);
            v.insert(v.end(), e.begin(), e.begin() + k);
        }
        return i32(v, k, T);
    }
    // An active index list over n neurons for T tokens (ggml.h layout), each
    // neuron active with probability p; the last column is the union.
    ggml_tensor *index_list(int64_t n, int64_t T, double p) {
        const int64_t C = T == 1 ? 1 : T + 1;
        std::vector<int32_t> v((size_t)((n + 1) * C), -1);
        std::vector<char> any((size_t)n, 0);
        for (int64_t t = 0; t < T; t++) {
            int32_t m = 0;
            for (int64_t i = 0; i < n; i++)
                if (u(0, 1) < p) {
                    v[(size_t)(t * (n + 1) + 1 + m++)] = (int32_t)i;
                    any[(size_t)i] = 1;
                }
            v[(size_t)(t * (n + 1))] = m;
        }
        if (C > 1) {
            int32_t m = 0;
            for (int64_t i = 0; i < n; i++)
                if (any[(size_t)i]) v[(size_t)(T * (n + 1) + 1 + m++)] = (int32_t)i;
            v[(size_t)(T * (n + 1))] = m;
        }
        return i32(v, n + 1, C);
    }
};

// ---------------------------------------------------------------- cases

struct op_case {
    std::string name;
    double tol;  // max NMSE between backends (0: bit-identical required)
    std::function<ggml_tensor *(inputs &)> build;
};

static const ggml_type k_weight_types[] = {GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q4_0,
                                           GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0,
                                           GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K,
                                           GGML_TYPE_Q6_K};

static std::vector<op_case> make_cases() {
    std::vector<op_case> cs;
    auto add = [&](std::string name, double tol, std::function<ggml_tensor *(inputs &)> f) {
        cs.push_back({std::move(name), tol, std::move(f)});
    };
    for (int64_t T : {1, 5, 40}) {
        const std::string t = " T=" + std::to_string(T);
        add("add broadcast" + t, 0, [T](inputs &in) { return ggml_add(in.ctx, in.f32(37, T, 3), in.f32(37, 1, 3)); });
        add("mul broadcast" + t, 0, [T](inputs &in) { return ggml_mul(in.ctx, in.f32(64, T), in.f32(64)); });
        add("scale" + t, 0, [T](inputs &in) { return ggml_scale(in.ctx, in.f32(33, T), 0.37f); });
        add("rms_norm" + t, 1e-10, [T](inputs &in) { return ggml_rms_norm(in.ctx, in.f32(96, T), 1e-5f); });
        add("norm" + t, 1e-10, [T](inputs &in) { return ggml_norm(in.ctx, in.f32(96, T), 1e-5f); });
        add("relu" + t, 0, [T](inputs &in) { return ggml_relu(in.ctx, in.f32(70, T)); });
        add("silu" + t, 1e-10, [T](inputs &in) { return ggml_silu(in.ctx, in.f32(70, T, 1, 1, -6, 6)); });
        add("gelu" + t, 1e-8, [T](inputs &in) { return ggml_gelu(in.ctx, in.f32(70, T, 1, 1, -6, 6)); });
        add("tanh" + t, 1e-8, [T](inputs &in) { return ggml_tanh(in.ctx, in.f32(70, T, 1, 1, -6, 6)); });
        add("swiglu" + t, 1e-10, [T](inputs &in) { return ggml_swiglu(in.ctx, in.f32(48, T), in.f32(48, T)); });
        add("reglu" + t, 0, [T](inputs &in) { return ggml_reglu(in.ctx, in.f32(48, T), in.f32(48, T)); });
        add("geglu" + t, 1e-8, [T](inputs &in) { return ggml_geglu(in.ctx, in.f32(48, T), in.f32(48, T)); });
        add("soft_max mask scale" + t, 1e-10, [T](inputs &in) {
            return ggml_soft_max_ext(in.ctx, in.f32(T + 7, T, 4, 1, -3, 3), in.f32(T + 7, T, 1, 1, -2, 0), 0.125f);
        });
        add("argmax" + t, 0, [T](inputs &in) { return ggml_argmax(in.ctx, in.f32(101, T)); });
        add("top_k" + t, 0, [T](inputs &in) { return ggml_top_k(in.ctx, in.f32(8, T), 2); });
        add("top_k k=n" + t, 0, [T](inputs &in) { return ggml_top_k(in.ctx, in.f32(6, T), 6); });
        add("get_rows batched (router weights)" + t, 0, [T](inputs &in) {
            ggml_tensor *p = ggml_reshape_3d(in.ctx, in.f32(8, T), 1, 8, T);
            return ggml_get_rows(in.ctx, p, in.expert_ids(8, 2, T));
        });
        for (int mode : {GGML_ROPE_NORMAL, GGML_ROPE_NEOX})
            add(std::string("rope ") + (mode ? "neox" : "normal") + t, 1e-9, [T, mode](inputs &in) {
                std::vector<int32_t> pos((size_t)T);
                for (int64_t i = 0; i < T; i++) pos[(size_t)i] = (int32_t)(3 * i + 11);
                return ggml_rope(in.ctx, in.f32(64, 3, T), in.i32(pos, T), 48, mode, 10000.0f, 1.0f);
            });
        add("rope freq factors" + t, 1e-9, [T](inputs &in) {
            std::vector<int32_t> pos((size_t)T);
            for (int64_t i = 0; i < T; i++) pos[(size_t)i] = (int32_t)(5 * i + 2);
            return ggml_rope_ext(in.ctx, in.f32(32, 2, T), in.i32(pos, T), in.f32(16, 1, 1, 1, 1, 8), 32, GGML_ROPE_NEOX,
                                 50000.0f, 1.0f, 1.2f);
        });
        add("cpy f32->f16 of a transpose" + t, 0, [T](inputs &in) {
            ggml_tensor *a = in.f32(T, 29);
            ggml_tensor *dst = ggml_new_tensor_2d(in.ctx, GGML_TYPE_F16, 29, T);
            in.add(dst, std::vector<uint8_t>(ggml_nbytes(dst), 0));
            return ggml_cont(in.ctx, ggml_cpy(in.ctx, ggml_transpose(in.ctx, a), dst));
        });
        add("cont of a permute" + t, 0, [T](inputs &in) {
            return ggml_cont(in.ctx, ggml_permute(in.ctx, in.f32(8, T, 3), 0, 2, 1, 3));
        });
        add("sparse_select" + t, 0, [T](inputs &in) { return ggml_sparse_select(in.ctx, in.f32(77, T), 0.2f); });
        add("sparse_select_abs" + t, 0, [T](inputs &in) { return ggml_sparse_select_abs(in.ctx, in.f32(77, T), 0.5f); });
        add("sparse_mask" + t, 0, [T](inputs &in) { return ggml_sparse_mask(in.ctx, in.f32(77, T), 0.3f); });
        for (ggml_type wt : k_weight_types) {
            const int64_t K = ggml_blck_size(wt) == 256 ? 256 : 96, M = 19;
            const std::string w = std::string(" ") + ggml_type_name(wt) + t;
            // K-quant batches on the q8x prompt kernels (ggml_cpu_act_format)
            // meet activations on the q8_0 grid, the scalar path q8_K ones: two
            // 8-bit quantizations of the same rows (NMSE ~2e-5 apart); one
            // token, and every other type, the same quantization on both sides.
            const char *fmt = ggml_cpu_act_format(wt, K, T, false);
            const bool regrid = fmt && strcmp(fmt, "q8x") == 0 && ggml_get_cpu_type_traits(wt)->vec_dot_type == GGML_TYPE_Q8_K;
            const double tol = regrid ? 1e-4 : 1e-9;
            add("mul_mat" + w, tol, [=](inputs &in) { return ggml_mul_mat(in.ctx, in.weights(wt, K, M), in.f32(K, T)); });
            add("mul_mat prec high" + w, 1e-8, [=](inputs &in) {  // the scalar path dots a converted residual row
                ggml_tensor *r = ggml_mul_mat(in.ctx, in.weights(wt, K, M), in.f32(K, T));
                ggml_set_prec(r, GGML_PREC_HIGH);
                return r;
            });
            add("mul_mat broadcast, strided b" + w, tol, [=](inputs &in) {
                ggml_tensor *a = ggml_reshape_3d(in.ctx, in.weights(wt, K, 2 * M), K, M, 2);
                ggml_tensor *b = ggml_permute(in.ctx, in.f32(K, 4, T), 0, 2, 1, 3);  // [K, T, 4], strided
                return ggml_mul_mat(in.ctx, a, b);
            });
            if (T > 8 && (wt == GGML_TYPE_F32 || wt == GGML_TYPE_Q8_0))  // a prompt batch whose columns span 1e-4 .. 1e5 (F16 rows take x as half on the CPU)
                add("mul_mat wide-range activations" + w, tol, [=](inputs &in) {
                    ggml_tensor *x = in.f32(K, T);
                    float *f = (float *)in.leafs.back().second.data();
                    for (int64_t i = 0; i < K * T; i++) f[i] *= (i / K) % 3 == 0 ? 1e5f : (i / K) % 3 == 1 ? 1e-4f : 1.0f;
                    return ggml_mul_mat(in.ctx, in.weights(wt, K, M), x);
                });
            // a mixture of experts: 4 experts, 2 per token, routed at random (some get none, some many)
            for (int64_t B1 : {1, 2})
                add("mul_mat_id b1=" + std::to_string(B1) + w, tol, [=](inputs &in) {
                    ggml_tensor *as = ggml_reshape_3d(in.ctx, in.weights(wt, K, 4 * M), K, M, 4);
                    return ggml_mul_mat_id(in.ctx, as, in.f32(K, B1, T), in.expert_ids(4, 2, T));
                });
            add("mul_mat_id masked" + w, tol, [=](inputs &in) {  // the sparse experts' up rows
                ggml_tensor *as = ggml_reshape_3d(in.ctx, in.weights(wt, K, 4 * M), K, M, 4);
                ggml_tensor *mask = ggml_relu(in.ctx, ggml_reshape_3d(in.ctx, in.f32(M, 2 * T, 1, 1, -1.0f, 0.5f), M, 2, T));
                return ggml_mul_mat_id_masked(in.ctx, as, in.f32(K, 1, T), in.expert_ids(4, 2, T), mask);
            });
            add("mul_mat_id prec high" + w, 1e-8, [=](inputs &in) {
                ggml_tensor *as = ggml_reshape_3d(in.ctx, in.weights(wt, K, 3 * M), K, M, 3);
                ggml_tensor *r = ggml_mul_mat_id(in.ctx, as, in.f32(K, 1, T), in.expert_ids(3, 2, T));
                ggml_set_prec(r, GGML_PREC_HIGH);
                return r;
            });
            add("get_rows" + w, 0, [=](inputs &in) {
                return ggml_get_rows(in.ctx, in.weights(wt, K, M), in.i32({3, 0, 18, 3, 7}, 5));
            });
            const int64_t n = 64;  // neurons
            for (auto range : {std::pair<int64_t, int64_t>{0, n}, {0, 32}, {32, n}, {20, 20}}) {
                const int64_t b = range.first, e = range.second;
                const std::string r = " [" + std::to_string(b) + "," + std::to_string(e) + ")" + w;
                // rows outside [b, e) are not written (another device owns them): compare [b, e)
                if (e > b) {
                    add("mul_mat_sparse_rows" + r, tol, [=](inputs &in) {
                        ggml_tensor *y = ggml_mul_mat_sparse_rows(in.ctx, in.weights(wt, K, n), in.f32(K, T),
                                                                  in.index_list(n, T, 0.3), b, e);
                        return ggml_cont(in.ctx, ggml_view_2d(in.ctx, y, e - b, T, y->nb[1], (size_t)b * y->nb[0]));
                    });
                    add("mul_mat_sparse_rows_bundle g=2" + r, tol, [=](inputs &in) {
                        ggml_tensor *y = ggml_mul_mat_sparse_rows_bundle(in.ctx, in.weights(wt, K, 2 * n), in.f32(K, T),
                                                                         in.index_list(n, T, 0.3), b, e, 2);
                        return ggml_cont(in.ctx, ggml_view_3d(in.ctx, y, e - b, T, 2, y->nb[1], y->nb[2], (size_t)b * y->nb[0]));
                    });
                }
                if (b % ggml_blck_size(wt) == 0 && e % ggml_blck_size(wt) == 0 && n % ggml_blck_size(wt) == 0)
                    add("sparse_down" + r, 1e-10, [=](inputs &in) {
                        return ggml_sparse_down(in.ctx, in.weights(wt, K, n), nullptr, in.f32(n, T), in.index_list(n, T, 0.3), b, e);
                    });
            }
            if (T <= GGML_SPARSE_FFN_MAX_T)
                for (auto range : {std::pair<int64_t, int64_t>{0, n}, {32, n}})
                    add("sparse_ffn_bundle [" + std::to_string(range.first) + "," + std::to_string(range.second) + ")" + w,
                        tol, [=](inputs &in) {
                            return ggml_sparse_ffn_bundle(in.ctx, in.weights(wt, K, 3 * n), nullptr, nullptr, nullptr,
                                                          in.f32(K, T), in.index_list(n, T, 0.25), range.first, range.second,
                                                          GGML_OP_SWIGLU, false);
                        });
            // a mostly-active range (a hot prefix): a device may take the rows in order
            add("mul_mat_sparse_rows mostly active [8,64)" + w, tol, [=](inputs &in) {
                ggml_tensor *y = ggml_mul_mat_sparse_rows(in.ctx, in.weights(wt, K, n), in.f32(K, T), in.index_list(n, T, 0.95), 8, n);
                return ggml_cont(in.ctx, ggml_view_2d(in.ctx, y, n - 8, T, y->nb[1], (size_t)8 * y->nb[0]));
            });
            add("mul_mat_sparse_rows_bundle g=2 mostly active" + w, tol, [=](inputs &in) {
                return ggml_mul_mat_sparse_rows_bundle(in.ctx, in.weights(wt, K, 2 * n), in.f32(K, T), in.index_list(n, T, 0.95), 0,
                                                       n, 2);
            });
            // a device's compact copy of the hot prefix [0, 32): the list spans all n
            add("mul_mat_sparse_rows, compact prefix" + w, tol, [=](inputs &in) {
                return ggml_mul_mat_sparse_rows(in.ctx, in.weights(wt, K, 32), in.f32(K, T), in.index_list(n, T, 0.3), 0, 32);
            });
            if (T <= GGML_SPARSE_FFN_MAX_T)
                add("sparse_ffn_bundle, compact prefix" + w, tol, [=](inputs &in) {
                    return ggml_sparse_ffn_bundle(in.ctx, in.weights(wt, K, 3 * 32), nullptr, nullptr, nullptr, in.f32(K, T),
                                                  in.index_list(n, T, 0.25), 0, 32, GGML_OP_REGLU, false);
                });
        }
        // a head's attention as the graph builds it (a device fuses the three nodes when decoding):
        // grouped-query heads, F16 and F32 caches, more positions than one chunk, masked tails
        for (ggml_type kt : {GGML_TYPE_F16, GGML_TYPE_F32})
            add(std::string("attention ") + ggml_type_name(kt) + " cache" + t, 1e-9, [T, kt](inputs &in) {
                const int64_t hd = 64, n_kv = 300, n_hkv = 2, n_head = 4;
                ggml_tensor *K = ggml_reshape_3d(in.ctx, in.weights(kt, hd, n_kv * n_hkv), hd, n_kv, n_hkv);
                ggml_tensor *V = ggml_reshape_3d(in.ctx, in.weights(kt, n_kv, hd * n_hkv), n_kv, hd, n_hkv);
                ggml_tensor *Q = ggml_permute(in.ctx, in.f32(hd, n_head, T), 0, 2, 1, 3);  // [hd, T, n_head], strided
                ggml_tensor *mask = ggml_new_tensor_2d(in.ctx, GGML_TYPE_F32, n_kv, T);
                std::vector<uint8_t> mb(ggml_nbytes(mask));
                float *m = (float *)mb.data();
                for (int64_t t = 0; t < T; t++)
                    for (int64_t j = 0; j < n_kv; j++) m[t * n_kv + j] = j <= 260 + t ? in.u(-1, 0) : -INFINITY;
                in.add(mask, std::move(mb));
                ggml_tensor *p = ggml_soft_max_ext(in.ctx, ggml_mul_mat(in.ctx, K, Q), mask, 0.125f);
                return ggml_mul_mat(in.ctx, V, p);
            });
        add("sparse_predict" + t, 1e-9, [T](inputs &in) {
            return ggml_sparse_predict(in.ctx, in.weights(GGML_TYPE_F16, 64, 16), in.weights(GGML_TYPE_F16, 16, 50),
                                       in.f32(64, T), 0.0f);
        });
    }
    return cs;
}

// ---------------------------------------------------------------- running

struct target {
    const char *name;
    ggml_backend_t be;   // the backend that computes the case (the CPU backend for cpu runs)
    bool scalar;         // CPU kernels forced to the portable path
};

// Runs one case on t; returns the output bytes and its type.
// high: every weight product at GGML_PREC_HIGH (the reference of a device
// whose activations are never quantized).
static bool run_case(const op_case &c, const target &t, ggml_backend_t cpu, std::vector<uint8_t> &out, ggml_type &type,
                     bool high = false) {
    ggml_init_params ip = {64ull << 20, nullptr, true};
    ggml_context *ctx = ggml_init(ip);
    ggml_set_backend(ctx, t.be);
    inputs in(ctx, 1234);
    ggml_tensor *r = c.build(in);
    ggml_set_output(r);
    ggml_cgraph *g = ggml_new_graph(ctx);
    ggml_build_forward_expand(g, r);
    for (int i = 0; i < ggml_graph_n_nodes(g); i++) {
        ggml_tensor *node = ggml_graph_node(g, i);
        g_op_seen[node->op] = true;
        if (high && ggml_op_takes_prec(node->op)) ggml_set_prec(node, GGML_PREC_HIGH);
    }
    // the leafs in the target's memory, through the buffer API
    size_t total = 0;
    for (auto &l : in.leafs) total += (ggml_nbytes(l.first) + 255) / 256 * 256;
    ggml_backend_buffer_t buf = ggml_backend_buft_alloc_buffer(ggml_backend_get_default_buffer_type(t.be), total);
    size_t offs = 0;
    for (auto &l : in.leafs) {
        ggml_backend_tensor_alloc(buf, l.first, offs);
        ggml_backend_tensor_set(l.first, l.second.data(), 0, l.second.size());
        offs += (ggml_nbytes(l.first) + 255) / 256 * 256;
    }
    ggml_backend_t bes[2] = {t.be, cpu};
    ggml_backend_sched *s = t.be == cpu ? ggml_backend_sched_new(&cpu, 1) : ggml_backend_sched_new(bes, 2);
    ggml_cpu_force_scalar(t.scalar);
    bool ok = ggml_backend_sched_alloc_graph(s, g);
    for (int i = 0; ok && i < ggml_graph_n_nodes(g); i++)  // planned: a device's answer may depend on the memory
        if (!ggml_backend_supports_op(t.be, ggml_graph_node(g, i))) {
            fprintf(stderr, "  %s on %s: %s is not supported\n", c.name.c_str(), t.name, ggml_op_name(ggml_graph_node(g, i)->op));
            ok = false;
        }
    ok = ok && ggml_backend_sched_graph_compute(s, g) == 0;
    ggml_cpu_force_scalar(0);
    if (ok) {
        out.resize(ggml_nbytes(r));
        type = r->type;
        ggml_backend_tensor_get(r, out.data(), 0, out.size());
    } else {
        fprintf(stderr, "  %s on %s: %s\n", c.name.c_str(), t.name, ggml_backend_last_error());
    }
    ggml_backend_sched_free(s);
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    return ok;
}

// Returns true when the outputs agree; *nmse gets the error (integers: 0 or 1).
static bool compare(const op_case &c, const char *pair, const std::vector<uint8_t> &a, const std::vector<uint8_t> &b,
                    ggml_type type, double *nmse_out = nullptr) {
    g_cases++;
    double dummy;
    double &nmse_r = nmse_out ? *nmse_out : dummy;
    nmse_r = 1;
    if (a.size() != b.size()) {
        CHECK(false, "%s (%s): output sizes differ", c.name.c_str(), pair);
        return false;
    }
    if (type != GGML_TYPE_F32) {  // index lists, argmax: exactly
        CHECK(a == b, "%s (%s): integer outputs differ", c.name.c_str(), pair);
        nmse_r = a == b ? 0 : 1;
        return a == b;
    }
    const float *x = (const float *)a.data(), *y = (const float *)b.data();
    const size_t n = a.size() / 4;
    double err = 0, ref = 0;
    for (size_t i = 0; i < n; i++) {
        if (std::isnan(x[i]) != std::isnan(y[i])) {
            CHECK(false, "%s (%s): NaN at %zu", c.name.c_str(), pair, i);
            return false;
        }
        err += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        ref += (double)x[i] * x[i];
    }
    const double nmse = ref > 0 ? err / ref : err;
    nmse_r = nmse;
    CHECK(nmse <= c.tol, "%s (%s): NMSE %.3g above the tolerance %.3g", c.name.c_str(), pair, nmse, c.tol);
    return nmse <= c.tol;
}

#ifdef PINFER_CUDA
// A device against the CPU at high precision, one table line per case. The
// device's activations are FP32, the CPU's at high precision about 16 bits:
// a case with a weight product is held to max(its tolerance, 1e-8).
// only: the cases whose name starts with it (all when empty).
static void test_device_ops(ggml_backend_t cpu, ggml_backend_t dev, const char *name, const std::string &only = "") {
    std::vector<op_case> cases;
    for (op_case &c : make_cases())
        if (c.name.rfind(only, 0) == 0) cases.push_back(std::move(c));
    const target ref{"cpu", cpu, false}, devt{name, dev, false};
    int pass = 0, fail = 0;
    for (const op_case &c : cases) {
        std::vector<uint8_t> a, b;
        ggml_type ta = GGML_TYPE_F32, tb = GGML_TYPE_F32;
        const bool oka = run_case(c, ref, cpu, a, ta, true), okb = run_case(c, devt, cpu, b, tb, true);
        bool ok = oka && okb;
        double nmse = -1;
        CHECK(ok, "%s: failed to run (%s vs cpu)", c.name.c_str(), name);
        if (ok) {
            op_case cc = c;
            const bool product = c.name.rfind("mul_mat", 0) == 0 || c.name.rfind("sparse_down", 0) == 0 ||
                                 c.name.rfind("sparse_ffn", 0) == 0 || c.name.rfind("sparse_predict", 0) == 0 ||
                                 c.name.rfind("attention", 0) == 0;
            if (product && cc.tol > 0) cc.tol = std::max(cc.tol, 1e-8);
            const std::string pair = std::string(name) + " vs cpu";
            ok = compare(cc, pair.c_str(), a, b, ta, &nmse);
        }
        (ok ? pass : fail)++;
        printf("%s %-4s %-60s nmse %.3g\n", name, ok ? "PASS" : "FAIL", c.name.c_str(), nmse);
    }
    printf("%s vs cpu: %d PASS, %d FAIL of %zu cases\n", name, pass, fail, cases.size());
}
#endif

static void test_ops(ggml_backend_t cpu, ggml_backend_t sim) {
    const std::vector<op_case> cases = make_cases();
    // (under test, reference): the reference is always the CPU
    const target cpu_simd{"cpu", cpu, false}, cpu_scalar{"cpu-scalar", cpu, true}, simt{"sim", sim, false};
    const std::pair<target, target> pairs[] = {{cpu_scalar, cpu_simd}, {simt, cpu_simd}};
    for (const op_case &c : cases)
        for (const auto &pr : pairs) {
            std::vector<uint8_t> a, b;
            ggml_type ta = GGML_TYPE_F32, tb = GGML_TYPE_F32;
            const bool oka = run_case(c, pr.second, cpu, a, ta), okb = run_case(c, pr.first, cpu, b, tb);
            CHECK(oka && okb, "%s: failed to run (%s vs %s)", c.name.c_str(), pr.first.name, pr.second.name);
            if (oka && okb) {
                const std::string pair = std::string(pr.first.name) + " vs " + pr.second.name;
                // the pair sim/cpu runs the same kernels: it must agree bit for bit whatever the stated tolerance
                op_case cc = c;
                if (pr.first.be == sim) cc.tol = 0;
                compare(cc, pair.c_str(), a, b, ta);
            }
        }
}

// ---------------------------------------------------------------- contracts

static void test_contracts(ggml_backend_t cpu) {
    ggml_backend_sim_params sp = ggml_backend_sim_default_params();
    sp.memory_bytes = 1 << 20;
    ggml_backend_t sim = ggml_backend_sim_init(sp);
    ggml_backend_buffer_type_t dev = ggml_backend_get_default_buffer_type(sim);
    CHECK(!ggml_backend_buft_is_host(dev), "sim memory must be non-host");
    // budget: 1 MiB holds 768 KiB once, not twice
    ggml_backend_buffer_t b1 = ggml_backend_buft_alloc_buffer(dev, 768 << 10);
    CHECK(b1 != nullptr, "768 KiB in a 1 MiB budget");
    ggml_backend_buffer_t b2 = ggml_backend_buft_alloc_buffer(dev, 768 << 10);
    CHECK(b2 == nullptr, "a second 768 KiB must exceed the budget");
    CHECK(strstr(ggml_backend_last_error(), "over the memory budget") != nullptr, "error names the budget: %s",
          ggml_backend_last_error());
    ggml_backend_buffer_free(b1);
    b2 = ggml_backend_buft_alloc_buffer(dev, 768 << 10);
    CHECK(b2 != nullptr, "freed memory returns to the budget");

    // the CPU backend refuses a node reading device memory
    ggml_init_params ip = {1 << 20, nullptr, true};
    ggml_context *ctx = ggml_init(ip);
    ggml_tensor *x = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 256);
    ggml_backend_tensor_alloc(b2, x, 0);
    std::vector<float> v(256);
    for (int i = 0; i < 256; i++) v[(size_t)i] = (float)i - 100;
    ggml_backend_tensor_set(x, v.data(), 0, sizeof(float) * 256);
    ggml_tensor *y = ggml_relu(ctx, x);  // built for the CPU (no backend set)
    ggml_cgraph *g = ggml_new_graph(ctx);
    ggml_build_forward_expand(g, y);
    ggml_backend_sched *s = ggml_backend_sched_new(&cpu, 1);
    CHECK(ggml_backend_sched_alloc_graph(s, g), "plan");
    CHECK(ggml_backend_sched_graph_compute(s, g) != 0, "the CPU must refuse device memory");
    CHECK(strstr(ggml_backend_last_error(), "a transfer is missing") != nullptr, "error: %s", ggml_backend_last_error());
    ggml_backend_sched_free(s);

    // with a transfer it runs: device -> host copy made by the device, relu on the CPU
    ggml_context *ctx2 = ggml_init(ip);
    ggml_tensor *x2 = ggml_new_tensor_1d(ctx2, GGML_TYPE_F32, 256);
    ggml_backend_tensor_alloc(b2, x2, 4096);
    ggml_backend_tensor_set(x2, v.data(), 0, sizeof(float) * 256);
    ggml_set_backend(ctx2, sim);
    ggml_tensor *xh = ggml_transfer(ctx2, ggml_scale(ctx2, x2, 2.0f), true);
    ggml_set_backend(ctx2, nullptr);
    ggml_tensor *y2 = ggml_relu(ctx2, xh);
    ggml_set_backend(ctx2, sim);
    ggml_tensor *y2d = ggml_transfer(ctx2, y2, false);  // back up
    ggml_tensor *z = ggml_add(ctx2, y2d, x2);
    ggml_set_output(z);
    ggml_cgraph *g2 = ggml_new_graph(ctx2);
    ggml_build_forward_expand(g2, z);
    ggml_backend_t bes[2] = {sim, cpu};
    s = ggml_backend_sched_new(bes, 2);
    ggml_backend_sim_reset_counters(sim);
    CHECK(ggml_backend_sched_alloc_graph(s, g2), "plan: %s", ggml_backend_last_error());
    CHECK(ggml_backend_sched_graph_compute(s, g2) == 0, "compute: %s", ggml_backend_last_error());
    std::vector<float> out(256);
    ggml_backend_tensor_get(z, out.data(), 0, sizeof(float) * 256);
    for (int i = 0; i < 256; i++) CHECK(out[(size_t)i] == fmaxf(0.0f, 2.0f * v[(size_t)i]) + v[(size_t)i], "value %d", i);
    ggml_backend_sim_counters c;
    ggml_backend_sim_get_counters(sim, &c);
    CHECK(c.bytes_d2h >= 1024 && c.bytes_h2d >= 1024, "counted both copies: %llu / %llu", (unsigned long long)c.bytes_d2h,
          (unsigned long long)c.bytes_h2d);
    ggml_backend_sched_stats st;
    ggml_backend_sched_get_stats(s, &st);
    CHECK(st.n_segments == 3 && st.n_event_waits == 1, "segments %d, waits %d", st.n_segments, st.n_event_waits);
    ggml_backend_sched_free(s);

    // sim refuses a compute node on host memory (no transfer)
    ggml_context *ctx3 = ggml_init(ip);
    ggml_tensor *h = ggml_new_tensor_1d(ctx3, GGML_TYPE_F32, 16);
    std::vector<float> hv(16, 1.0f);
    h->data = hv.data();  // caller-owned host memory
    ggml_set_backend(ctx3, sim);
    ggml_tensor *hy = ggml_scale(ctx3, h, 3.0f);
    ggml_cgraph *g3 = ggml_new_graph(ctx3);
    ggml_build_forward_expand(g3, hy);
    s = ggml_backend_sched_new(bes, 2);
    CHECK(ggml_backend_sched_alloc_graph(s, g3), "plan");
    CHECK(ggml_backend_sched_graph_compute(s, g3) != 0, "sim must refuse host memory");
    CHECK(strstr(ggml_backend_last_error(), "host memory") != nullptr, "error: %s", ggml_backend_last_error());
    ggml_backend_sched_free(s);

    // events: the host waits for the device's queue to pass a point
    ggml_backend_event_t ev = ggml_backend_event_new(sim);
    ggml_backend_event_record(ev);
    ggml_backend_event_synchronize(ev);
    CHECK(ggml_backend_event_query(ev), "a synchronized event has been reached");
    ggml_backend_event_free(ev);

    ggml_free(ctx);
    ggml_free(ctx2);
    ggml_free(ctx3);
    ggml_backend_buffer_free(b2);
    ggml_backend_free(sim);
}

#ifdef PINFER_CUDA
// The CUDA backend's own contracts: its budget holds, a transfer there and
// back runs through both streams (values and counted bytes), a strided
// source arrives compact, its events order the host after its queue.
static void test_device_contracts(ggml_backend_t cpu) {
    ggml_backend_t dev = ggml_backend_cuda_init(0, 1 << 20);
    CHECK(dev != nullptr, "cuda init with a 1 MiB budget: %s", ggml_backend_last_error());
    if (!dev) return;
    ggml_backend_buffer_type_t bt = ggml_backend_get_default_buffer_type(dev);
    CHECK(!ggml_backend_buft_is_host(bt), "cuda memory must be non-host");
    CHECK(ggml_backend_buft_is_host(ggml_backend_get_host_buffer_type(dev)), "its pinned memory is host memory");
    ggml_backend_buffer_t b1 = ggml_backend_buft_alloc_buffer(bt, 768 << 10);
    ggml_backend_buffer_t b2 = ggml_backend_buft_alloc_buffer(bt, 768 << 10);
    CHECK(b1 && !b2, "1 MiB holds 768 KiB once");
    ggml_backend_buffer_free(b1);

    ggml_init_params ip = {1 << 20, nullptr, true};
    ggml_context *ctx = ggml_init(ip);
    std::vector<float> v(256), m(16 * 8);
    for (int i = 0; i < 256; i++) v[(size_t)i] = (float)i - 100;
    for (size_t i = 0; i < m.size(); i++) m[i] = (float)i * 0.5f;
    ggml_tensor *x = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 256);  // host, caller-owned
    x->data = v.data();
    ggml_tensor *mh = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 16, 8);
    mh->data = m.data();
    ggml_set_backend(ctx, dev);
    ggml_tensor *xd = ggml_transfer(ctx, x, false);
    // columns 4..11 of an 8 x 16 matrix: a strided source, one 2-D copy
    ggml_tensor *cols = ggml_transfer(ctx, ggml_view_2d(ctx, mh, 8, 8, mh->nb[1], 4 * sizeof(float)), false);
    ggml_tensor *xh = ggml_transfer(ctx, ggml_scale(ctx, xd, 2.0f), true);
    ggml_tensor *ch = ggml_transfer(ctx, ggml_scale(ctx, cols, 1.0f), true);
    ggml_set_backend(ctx, nullptr);
    ggml_tensor *y = ggml_relu(ctx, xh);
    ggml_tensor *yc = ggml_scale(ctx, ch, 1.0f);
    ggml_set_output(y);
    ggml_set_output(yc);
    ggml_cgraph *g = ggml_new_graph(ctx);
    ggml_build_forward_expand(g, y);
    ggml_build_forward_expand(g, yc);
    ggml_backend_t bes[2] = {dev, cpu};
    ggml_backend_sched *s = ggml_backend_sched_new(bes, 2);
    ggml_backend_cuda_reset_counters(dev);
    CHECK(ggml_backend_sched_alloc_graph(s, g), "plan: %s", ggml_backend_last_error());
    CHECK(ggml_backend_sched_graph_compute(s, g) == 0, "compute: %s", ggml_backend_last_error());
    std::vector<float> out(256), oc(64);
    ggml_backend_tensor_get(y, out.data(), 0, sizeof(float) * 256);
    ggml_backend_tensor_get(yc, oc.data(), 0, sizeof(float) * 64);
    for (int i = 0; i < 256; i++) CHECK(out[(size_t)i] == fmaxf(0.0f, 2.0f * v[(size_t)i]), "cuda round trip value %d", i);
    for (int r = 0; r < 8; r++)
        for (int k = 0; k < 8; k++) CHECK(oc[(size_t)(r * 8 + k)] == m[(size_t)(r * 16 + 4 + k)], "strided column copy %d,%d", r, k);
    ggml_backend_sim_counters c;
    ggml_backend_cuda_get_counters(dev, &c);
    CHECK(c.bytes_h2d >= 1024 + 256 && c.bytes_d2h >= 1024 + 256, "counted copies: %llu / %llu", (unsigned long long)c.bytes_h2d,
          (unsigned long long)c.bytes_d2h);
    ggml_backend_sched_free(s);

    ggml_backend_event_t ev = ggml_backend_event_new(dev);
    ggml_backend_event_record(ev);
    ggml_backend_event_synchronize(ev);
    CHECK(ggml_backend_event_query(ev), "a synchronized CUDA event has been reached");
    ggml_backend_event_free(ev);
    ggml_free(ctx);
    ggml_backend_buffer_free(b2);
    ggml_backend_free(dev);
}
#endif

int main() {
    ggml_backend_t cpu = ggml_backend_cpu_init(2);
    ggml_backend_sim_params sp = ggml_backend_sim_default_params();
    sp.n_threads = 1;
    ggml_backend_t sim = ggml_backend_sim_init(sp);
    test_ops(cpu, sim);
    // every op of the op table that computes something is covered by a case
    for (int op = 0; op < GGML_OP_COUNT; op++)
        CHECK(ggml_get_op_traits((ggml_op)op)->is_view || g_op_seen[op], "no case runs op %s", ggml_op_name((ggml_op)op));
    test_contracts(cpu);
#ifdef PINFER_CUDA
    if (ggml_backend_cuda_device_count() > 0) {
        ggml_backend_t cuda = ggml_backend_cuda_init(0, 0);
        CHECK(cuda != nullptr, "cuda init: %s", ggml_backend_last_error());
        if (cuda) {
            test_device_ops(cpu, cuda, "cuda");
            ggml_backend_cuda_set_fused_attention(cuda, false);  // the three nodes one by one, too
            test_device_ops(cpu, cuda, "cuda-unfused", "attention");
            test_device_contracts(cpu);
            ggml_backend_free(cuda);
        }
    } else {
        printf("no CUDA device: cuda rows skipped (%s)\n", ggml_backend_cuda_unavailable_reason());
    }
#else
    printf("no CUDA device: cuda rows skipped (built without PINFER_CUDA)\n");
#endif
    ggml_backend_free(sim);
    ggml_backend_free(cpu);
    printf("test-backend-ops: %d comparisons on %s kernels\n", g_cases, ggml_cpu_backend_name());
    if (g_fail) {
        fprintf(stderr, "%d checks failed\n", g_fail);
        return 1;
    }
    return 0;
}
