// pinfer-gpu-bench: the CUDA backend's device report and microbenchmarks,
// each printed beside the baseline measured in the same run (tools/gpu-check.sh
// runs them on a lent GPU).
//
//   pinfer-gpu-bench info                 device, driver, memory (exit 1 without a device)
//   pinfer-gpu-bench micro [--reps N]     dense mat-vec GB/s per type vs the device's copy
//                                         bandwidth; sparse rows, down_t and the fused FFN at
//                                         5..100% active vs dense; decode attention fused vs
//                                         unfused; pinned copy latency 4-64 KiB;
//                                         event round trip
//   pinfer-gpu-bench budgets -m FILE      bytes of the file's FFN tensors and of the rest, per
//                                         layer (the budgets of gpu-check.sh's hybrid runs)
//
// Shapes are LLaMA-7B's FFN (d = 4096, n = 11008). Times are host wall clock
// over many launches after a synchronize, so they include launch overhead.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <chrono>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "gguf.h"
#ifdef PINFER_CUDA
#include <cuda_runtime.h>

#include "ggml-backend-cuda.h"
#endif

static int budgets(const char *path) {
    char err[256];
    gguf_context *g = gguf_open(path, err, sizeof(err));
    if (!g) {
        fprintf(stderr, "pinfer-gpu-bench: %s: %s\n", path, err);
        return 1;
    }
    uint64_t ffn = 0, rest = 0;
    for (int64_t i = 0; i < gguf_get_n_tensors(g); i++) {
        const char *name = gguf_get_tensor_name(g, i);
        (strstr(name, ".ffn_") && !strstr(name, "norm") ? ffn : rest) += gguf_get_tensor_size(g, i);
    }
    printf("ffn_bytes %llu\nother_bytes %llu\n", (unsigned long long)ffn, (unsigned long long)rest);
    gguf_free(g);
    return 0;
}

#ifdef PINFER_CUDA

using clk = std::chrono::steady_clock;
static double secs(clk::time_point a, clk::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// One graph on the device: leafs in one device buffer (filled with a byte
// pattern), nodes planned by the scheduler; run() times reps computes.
struct bench_graph {
    ggml_backend_t dev, cpu;
    ggml_context *ctx;
    std::vector<ggml_tensor *> leafs;
    ggml_cgraph *g = nullptr;
    ggml_backend_sched *s = nullptr;
    ggml_backend_buffer_t buf = nullptr;

    bench_graph(ggml_backend_t d, ggml_backend_t c) : dev(d), cpu(c) {
        ggml_init_params ip = {16u << 20, nullptr, true};
        ctx = ggml_init(ip);
        ggml_set_backend(ctx, dev);
    }
    ~bench_graph() {
        ggml_backend_sched_free(s);
        ggml_backend_buffer_free(buf);
        ggml_free(ctx);
    }
    ggml_tensor *leaf(ggml_type t, int64_t ne0, int64_t ne1) {
        ggml_tensor *x = ggml_new_tensor_2d(ctx, t, ne0, ne1);
        leafs.push_back(x);
        return x;
    }
    // fills a leaf with host data (an index list)
    void set(ggml_tensor *t, const void *data) { ggml_backend_tensor_set(t, data, 0, ggml_nbytes(t)); }
    bool plan(std::vector<ggml_tensor *> outs) {
        g = ggml_new_graph(ctx);
        for (ggml_tensor *o : outs) {
            ggml_set_output(o);
            ggml_build_forward_expand(g, o);
        }
        size_t total = 0;
        for (ggml_tensor *l : leafs) total += (ggml_nbytes(l) + 255) / 256 * 256;
        buf = ggml_backend_buft_alloc_buffer(ggml_backend_get_default_buffer_type(dev), total);
        if (!buf) return false;
        size_t off = 0;
        for (ggml_tensor *l : leafs) {
            ggml_backend_tensor_alloc(buf, l, off);
            ggml_backend_tensor_memset(l, l->type == GGML_TYPE_I32 ? 0 : 0x11, 0, ggml_nbytes(l));
            off += (ggml_nbytes(l) + 255) / 256 * 256;
        }
        ggml_backend_t bes[2] = {dev, cpu};
        s = ggml_backend_sched_new(bes, 2);
        return s && ggml_backend_sched_alloc_graph(s, g);
    }
    double run(int reps) {  // seconds per compute
        if (ggml_backend_sched_graph_compute(s, g)) return -1;  // warm-up
        const auto t0 = clk::now();
        for (int r = 0; r < reps; r++)
            if (ggml_backend_sched_graph_compute(s, g)) return -1;
        return secs(t0, clk::now()) / reps;
    }
};

static double copy_bandwidth() {  // device-to-device copy of 1 GiB: read + write bytes per second
    const size_t n = (size_t)1 << 30;
    void *a = nullptr, *b = nullptr;
    if (cudaMalloc(&a, n) != cudaSuccess || cudaMalloc(&b, n) != cudaSuccess) return 0;
    cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
    cudaDeviceSynchronize();
    const auto t0 = clk::now();
    for (int r = 0; r < 5; r++) cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
    cudaDeviceSynchronize();
    const double dt = secs(t0, clk::now()) / 5;
    cudaFree(a);
    cudaFree(b);
    return 2.0 * n / dt;
}

// An index list over n with a fraction `frac` active (evenly spread, ascending).
static std::vector<int32_t> list_of(int64_t n, double frac) {
    std::vector<int32_t> v((size_t)n + 1, -1);
    const int64_t m = (int64_t)(frac * n + 0.5);
    v[0] = (int32_t)m;
    for (int64_t k = 0; k < m; k++) v[(size_t)k + 1] = (int32_t)(k * n / m);
    return v;
}

static int micro(int reps) {
    ggml_backend_t dev = ggml_backend_cuda_init(0, 0);
    if (!dev) {
        fprintf(stderr, "pinfer-gpu-bench: %s\n", ggml_backend_last_error());
        return 1;
    }
    ggml_backend_t cpu = ggml_backend_cpu_init(1);
    const int64_t d = 4096, n = 11008;
    const double bw = copy_bandwidth();
    printf("device copy bandwidth (d2d, read+write): %.1f GB/s\n", bw / 1e9);

    // 16 products a graph over 4 matrices in turn (beyond the L2): the graph's launch and sync are a small part
    constexpr int MATS = 4, PRODUCTS = 16;
    printf("\n# dense mat-vec y = W x, W [%lld, %lld], %d products a graph over %d matrices in turn (beyond L2)\n", (long long)d,
           (long long)n, PRODUCTS, MATS);
    printf("%-6s %10s %10s %8s\n", "type", "us/matvec", "GB/s", "of copy");
    const ggml_type types[] = {GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
                               GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    for (ggml_type t : types) {
        bench_graph bg(dev, cpu);
        ggml_tensor *x = bg.leaf(GGML_TYPE_F32, d, 1);
        std::vector<ggml_tensor *> outs;
        size_t bytes = 0;
        ggml_tensor *w[MATS];
        for (int i = 0; i < MATS; i++) w[i] = bg.leaf(t, d, n);
        for (int i = 0; i < PRODUCTS; i++) {
            bytes += ggml_nbytes(w[i % MATS]);
            outs.push_back(ggml_mul_mat(bg.ctx, w[i % MATS], x));
        }
        if (!bg.plan(outs)) {
            printf("%-6s plan failed: %s\n", ggml_type_name(t), ggml_backend_last_error());
            continue;
        }
        const double s = bg.run(reps);
        if (s < 0) {
            printf("%-6s failed: %s\n", ggml_type_name(t), ggml_backend_last_error());
            continue;
        }
        printf("%-6s %10.1f %10.1f %7.0f%%\n", ggml_type_name(t), s / PRODUCTS * 1e6, bytes / s / 1e9, 100.0 * (bytes / s) / bw);
    }

    printf("\n# sparse FFN ops (Q4_0, d = %lld, n = %lld) vs the dense mat-vec of the same matrix\n", (long long)d, (long long)n);
    printf("%-8s %12s %12s %12s %12s\n", "active", "rows us", "down_t us", "ffn us", "dense us");
    for (double frac : {0.05, 0.10, 0.25, 0.50, 0.75, 1.0}) {
        double t_rows = -1, t_down = -1, t_ffn = -1, t_dense = -1;
        const std::vector<int32_t> list = list_of(n, frac);
        {
            bench_graph bg(dev, cpu);
            ggml_tensor *w = bg.leaf(GGML_TYPE_Q4_0, d, n), *x = bg.leaf(GGML_TYPE_F32, d, 1);
            ggml_tensor *idx = bg.leaf(GGML_TYPE_I32, n + 1, 1);
            ggml_tensor *y = ggml_mul_mat_sparse_rows(bg.ctx, w, x, idx, 0, n);
            if (bg.plan({y})) {
                bg.set(idx, list.data());
                t_rows = bg.run(reps);
            }
        }
        {
            bench_graph bg(dev, cpu);
            ggml_tensor *wt = bg.leaf(GGML_TYPE_Q4_0, d, n), *h = bg.leaf(GGML_TYPE_F32, n, 1);
            ggml_tensor *idx = bg.leaf(GGML_TYPE_I32, n + 1, 1);
            ggml_tensor *y = ggml_sparse_down(bg.ctx, wt, nullptr, h, idx, 0, n);
            if (bg.plan({y})) {
                bg.set(idx, list.data());
                t_down = bg.run(reps);
            }
        }
        {
            bench_graph bg(dev, cpu);
            ggml_tensor *w = bg.leaf(GGML_TYPE_Q4_0, d, 3 * n), *x = bg.leaf(GGML_TYPE_F32, d, 1);
            ggml_tensor *idx = bg.leaf(GGML_TYPE_I32, n + 1, 1);
            ggml_tensor *y = ggml_sparse_ffn_bundle(bg.ctx, w, nullptr, nullptr, nullptr, x, idx, 0, n, GGML_OP_REGLU, false);
            if (bg.plan({y})) {
                bg.set(idx, list.data());
                t_ffn = bg.run(reps);
            }
        }
        {
            bench_graph bg(dev, cpu);
            ggml_tensor *w = bg.leaf(GGML_TYPE_Q4_0, d, n), *x = bg.leaf(GGML_TYPE_F32, d, 1);
            if (bg.plan({ggml_mul_mat(bg.ctx, w, x)})) t_dense = bg.run(reps);
        }
        printf("%7.0f%% %12.1f %12.1f %12.1f %12.1f\n", frac * 100, t_rows * 1e6, t_down * 1e6, t_ffn * 1e6, t_dense * 1e6);
    }

    printf("\n# decode attention, one token: hd 128, 32 query heads on 8 KV heads, F16 cache\n");
    printf("%-8s %12s %12s %8s\n", "n_kv", "fused us", "unfused us", "cache GB/s");
    for (int64_t n_kv : {512, 4096, 16384}) {
        const int64_t hd = 128, n_head = 32, n_hkv = 8;
        double t[2] = {-1, -1};
        for (int fused = 1; fused >= 0; fused--) {
            ggml_backend_cuda_set_fused_attention(dev, fused != 0);
            bench_graph bg(dev, cpu);
            ggml_tensor *K = ggml_reshape_3d(bg.ctx, bg.leaf(GGML_TYPE_F16, hd, n_kv * n_hkv), hd, n_kv, n_hkv);
            ggml_tensor *V = ggml_reshape_3d(bg.ctx, bg.leaf(GGML_TYPE_F16, n_kv, hd * n_hkv), n_kv, hd, n_hkv);
            ggml_tensor *Q = ggml_reshape_3d(bg.ctx, bg.leaf(GGML_TYPE_F32, hd, n_head), hd, 1, n_head);
            ggml_tensor *mask = bg.leaf(GGML_TYPE_F32, n_kv, 1);
            ggml_tensor *p = ggml_soft_max_ext(bg.ctx, ggml_mul_mat(bg.ctx, K, Q), mask, 0.088f);
            if (bg.plan({ggml_mul_mat(bg.ctx, V, p)})) t[fused] = bg.run(reps);
        }
        ggml_backend_cuda_set_fused_attention(dev, true);
        const double cache = 2.0 * 2 * hd * n_kv * n_hkv;  // K and V bytes read
        printf("%-8lld %12.1f %12.1f %8.0f\n", (long long)n_kv, t[1] * 1e6, t[0] * 1e6, t[1] > 0 ? cache / t[1] / 1e9 : 0.0);
    }

    printf("\n# pinned copy latency: one transfer node per compute (host <-> device)\n");
    printf("%-8s %10s %10s\n", "KiB", "h2d us", "d2h us");
    for (int kib : {4, 8, 16, 32, 64}) {
        double t[2] = {-1, -1};
        for (int dir = 0; dir < 2; dir++) {
            ggml_init_params ip = {1u << 20, nullptr, true};
            ggml_context *ctx = ggml_init(ip);
            ggml_backend_buffer_t hb = ggml_backend_buft_alloc_buffer(ggml_backend_get_host_buffer_type(dev), (size_t)kib << 10);
            ggml_backend_buffer_t db = ggml_backend_buft_alloc_buffer(ggml_backend_get_default_buffer_type(dev), (size_t)kib << 10);
            ggml_tensor *src = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, (int64_t)kib * 256);
            ggml_backend_tensor_alloc(dir == 0 ? hb : db, src, 0);
            ggml_set_backend(ctx, dev);
            ggml_tensor *y = ggml_transfer(ctx, src, dir == 1);
            ggml_set_output(y);
            ggml_cgraph *g = ggml_new_graph(ctx);
            ggml_build_forward_expand(g, y);
            ggml_backend_t bes[2] = {dev, cpu};
            ggml_backend_sched *s = ggml_backend_sched_new(bes, 2);
            if (s && ggml_backend_sched_alloc_graph(s, g) && ggml_backend_sched_graph_compute(s, g) == 0) {
                const auto t0 = clk::now();
                for (int r = 0; r < 200; r++) ggml_backend_sched_graph_compute(s, g);
                t[dir] = secs(t0, clk::now()) / 200;
            }
            ggml_backend_sched_free(s);
            ggml_backend_buffer_free(hb);
            ggml_backend_buffer_free(db);
            ggml_free(ctx);
        }
        printf("%-8d %10.1f %10.1f\n", kib, t[0] * 1e6, t[1] * 1e6);
    }

    ggml_backend_event_t ev = ggml_backend_event_new(dev);
    ggml_backend_event_record(ev);
    ggml_backend_event_synchronize(ev);
    const auto t0 = clk::now();
    for (int r = 0; r < 1000; r++) {
        ggml_backend_event_record(ev);
        ggml_backend_event_synchronize(ev);
    }
    printf("\nevent round trip (record on the device, host waits): %.1f us\n", secs(t0, clk::now()) / 1000 * 1e6);
    ggml_backend_event_free(ev);
    ggml_backend_free(cpu);
    ggml_backend_free(dev);
    return 0;
}

static int info() {
    const int n = ggml_backend_cuda_device_count();
    if (n == 0) {
        printf("no CUDA device: %s\n", ggml_backend_cuda_unavailable_reason());
        return 1;
    }
    for (int i = 0; i < n; i++) {
        ggml_backend_cuda_device_info d;
        if (!ggml_backend_cuda_get_device_info(i, &d)) continue;
        printf("device %d: %s, compute capability %d.%d, %d SMs, %.1f of %.1f GiB free, driver %d.%d, runtime %d.%d\n", i, d.name,
               d.cc_major, d.cc_minor, d.n_sm, d.free_bytes / 1073741824.0, d.total_bytes / 1073741824.0, d.driver_version / 1000,
               d.driver_version % 1000 / 10, d.runtime_version / 1000, d.runtime_version % 1000 / 10);
    }
    return 0;
}
#endif

int main(int argc, char **argv) {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "budgets") {
        if (argc != 4 || strcmp(argv[2], "-m") != 0) {
            fprintf(stderr, "usage: pinfer-gpu-bench budgets -m FILE\n");
            return 2;
        }
        return budgets(argv[3]);
    }
#ifdef PINFER_CUDA
    if (cmd == "info") return info();
    if (cmd == "micro") {
        int reps = 50;
        for (int i = 2; i < argc; i++) {
            if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
                reps = atoi(argv[++i]);
                if (reps < 1) {
                    fprintf(stderr, "pinfer-gpu-bench: --reps must be >= 1\n");
                    return 2;
                }
            } else {
                fprintf(stderr, "pinfer-gpu-bench: unknown option %s\n", argv[i]);
                return 2;
            }
        }
        return micro(reps);
    }
#else
    if (cmd == "info" || cmd == "micro") {
        fprintf(stderr, "pinfer-gpu-bench: this build has no CUDA backend (build with -DPINFER_CUDA=ON)\n");
        return 1;
    }
#endif
    fprintf(stderr, "usage: pinfer-gpu-bench info | micro [--reps N] | budgets -m FILE\n");
    return 2;
}
