// pinfer-bench: speed measurements that print ratios against a baseline
// measured in the same run.
//
//   pinfer-bench matvec [--types f16,q8_0,q4_0,q4_K,q6_K] [--threads 1,2] [--gib 2] [--reps 5]
//
// matvec: y = W x with LLaMA-7B FFN shapes (4096x11008 and 11008x4096),
// cycling through enough distinct weight matrices (--gib of them per type) to
// defeat the last-level cache, computed by ggml_graph_compute on a persistent
// thread pool. Reports the effective GB/s of weight bytes read beside a plain
// memory-read bandwidth (vector sum over the same buffer, same thread count).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ggml.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<std::string> split(const std::string &s) {
    std::vector<std::string> out;
    size_t p = 0;
    while (p <= s.size()) {
        const size_t q = std::min(s.find(',', p), s.size());
        if (q > p) out.push_back(s.substr(p, q - p));
        p = q + 1;
    }
    return out;
}

// ---- plain read bandwidth: every thread sums its slice, 4 streams of 256-bit loads ----
#if defined(__x86_64__)
__attribute__((target("avx2"))) uint64_t sum_avx2(const uint8_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t r[4];
    _mm256_storeu_si256((__m256i *)r, a0);
    return r[0] + r[1] + r[2] + r[3];
}
#endif

uint64_t sum_plain(const uint8_t *p, size_t n) {
    const uint64_t *q = (const uint64_t *)p;
    uint64_t a = 0, b = 0;
    for (size_t i = 0; i + 2 <= n / 8; i += 2) { a += q[i]; b += q[i + 1]; }
    return a + b;
}

uint64_t sum_slice(const uint8_t *p, size_t n) {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) return sum_avx2(p, n);
#endif
    return sum_plain(p, n);
}

// Best of `passes` full reads of buf with nt threads, in GB/s.
double read_bandwidth(const uint8_t *buf, size_t bytes, int nt, int passes) {
    double best = 0;
    std::vector<uint64_t> sink(nt);
    for (int pass = 0; pass < passes; pass++) {
        const size_t per = bytes / nt / 4096 * 4096;
        const double t0 = now();
        std::vector<std::thread> th;
        for (int i = 1; i < nt; i++) th.emplace_back([&, i] { sink[i] = sum_slice(buf + per * i, per); });
        sink[0] = sum_slice(buf, per);
        for (auto &t : th) t.join();
        const double dt = now() - t0;
        best = std::max(best, (double)per * nt / dt / 1e9);
    }
    uint64_t s = 0;
    for (uint64_t v : sink) s += v;
    if (s == 42) printf(" ");  // keep the sums alive
    return best;
}

struct matvec_result {
    int n_mat;
    double gbs;
};

// Fill buf with n_mat weight matrices of type t (alternating the two shapes),
// build one graph of n_mat mat-vecs and time it on the pool.
matvec_result bench_matvec(ggml_type t, uint8_t *buf, size_t bytes, ggml_threadpool *tp, int reps) {
    const int64_t D = 4096, F = 11008;
    const size_t mat_bytes = ggml_row_size(t, D) * F;  // same for both shapes
    const size_t stride = (mat_bytes + 4095) / 4096 * 4096;
    const int n_mat = (int)(bytes / stride);

    // random quantized data: a block of 64 quantized rows of length D, repeated
    // (whole blocks, so every matrix holds valid blocks of type t)
    const int64_t trows = 64;
    std::vector<float> f((size_t)(D * trows));
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    for (auto &v : f) v = nd(rng);
    std::vector<uint8_t> tmpl(ggml_row_size(t, D) * trows);
    ggml_quantize_chunk(t, f.data(), tmpl.data(), trows, D);
    for (int m = 0; m < n_mat; m++) {
        uint8_t *dst = buf + (size_t)m * stride;
        for (size_t off = 0; off < mat_bytes; off += tmpl.size())
            memcpy(dst + off, tmpl.data(), std::min(tmpl.size(), mat_bytes - off));
    }

    ggml_init_params wp = {ggml_tensor_overhead() * (size_t)(n_mat + 8), nullptr, true};
    ggml_context *wctx = ggml_init(wp);
    ggml_init_params ip = {ggml_tensor_overhead() * 4 + sizeof(float) * (size_t)(D + F) + 1024, nullptr, false};
    ggml_context *ictx = ggml_init(ip);
    ggml_tensor *xd = ggml_new_tensor_1d(ictx, GGML_TYPE_F32, D);
    ggml_tensor *xf = ggml_new_tensor_1d(ictx, GGML_TYPE_F32, F);
    for (int64_t i = 0; i < D; i++) ((float *)xd->data)[i] = nd(rng);
    for (int64_t i = 0; i < F; i++) ((float *)xf->data)[i] = nd(rng);

    const size_t gsize = (size_t)n_mat * 4 + 64;
    ggml_init_params gp = {ggml_tensor_overhead() * (size_t)(n_mat + 8) + ggml_graph_overhead() * 2 + gsize * 64, nullptr, true};
    ggml_context *gctx = ggml_init(gp);
    ggml_cgraph *g = ggml_new_graph_custom(gctx, gsize);
    for (int m = 0; m < n_mat; m++) {
        const bool up = m % 2 == 0;  // up/gate: [D in, F out]; down: [F in, D out]
        ggml_tensor *w = ggml_new_tensor_2d(wctx, t, up ? D : F, up ? F : D);
        w->data = buf + (size_t)m * stride;
        ggml_build_forward_expand(g, ggml_mul_mat(gctx, w, up ? xd : xf));
    }
    ggml_gallocr *ga = ggml_gallocr_new();
    if (!ggml_gallocr_alloc_graph(ga, g)) {
        fprintf(stderr, "pinfer-bench: out of memory planning the graph\n");
        exit(1);
    }
    if (ggml_graph_compute(g, tp) != 0) {  // warm-up (also grows the work buffer once)
        fprintf(stderr, "pinfer-bench: graph compute failed\n");
        exit(1);
    }
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        const double t0 = now();
        ggml_graph_compute(g, tp);
        best = std::min(best, now() - t0);
    }
    ggml_gallocr_free(ga);
    ggml_free(gctx);
    ggml_free(ictx);
    ggml_free(wctx);
    return {n_mat, (double)mat_bytes * n_mat / best / 1e9};
}

int cmd_matvec(int argc, char **argv) {
    std::vector<std::string> types = {"f16", "q8_0", "q4_0", "q4_K", "q6_K"};
    std::vector<int> threads = {1, 2};
    double gib = 2.0;
    int reps = 5;
    for (int i = 0; i < argc; i++) {
        const std::string a = argv[i];
        auto val = [&]() -> std::string {
            if (i + 1 >= argc) {
                fprintf(stderr, "pinfer-bench: %s needs a value\n", a.c_str());
                exit(2);
            }
            return argv[++i];
        };
        if (a == "--types") types = split(val());
        else if (a == "--threads") {
            threads.clear();
            for (const auto &s : split(val())) threads.push_back(atoi(s.c_str()));
        } else if (a == "--gib") gib = atof(val().c_str());
        else if (a == "--reps") reps = atoi(val().c_str());
        else {
            fprintf(stderr, "pinfer-bench matvec: unknown option '%s'\n", a.c_str());
            return 2;
        }
    }
    std::vector<ggml_type> tv;
    for (const auto &s : types) {
        const int t = ggml_type_from_name(s.c_str());
        const ggml_type_traits *tr = t < 0 ? nullptr : ggml_get_type_traits((ggml_type)t);
        if (!tr || !tr->vec_dot) {
            fprintf(stderr, "pinfer-bench: '%s' is not a weight type with a dot kernel\n", s.c_str());
            return 2;
        }
        tv.push_back((ggml_type)t);
    }
    for (int nt : threads)
        if (nt < 1 || nt > 1024) {
            fprintf(stderr, "pinfer-bench: bad thread count %d\n", nt);
            return 2;
        }
    if (!(gib > 0.01 && gib < 1024) || reps < 1) {
        fprintf(stderr, "pinfer-bench: bad --gib or --reps\n");
        return 2;
    }
    const size_t bytes = (size_t)(gib * (double)(1ull << 30)) / 4096 * 4096;
    uint8_t *buf = (uint8_t *)aligned_alloc(4096, bytes);
    if (!buf) {
        fprintf(stderr, "pinfer-bench: cannot allocate %.2f GiB\n", gib);
        return 1;
    }
    memset(buf, 1, bytes);  // fault the pages in before timing

    printf("matvec: y = W x, W in LLaMA-7B FFN shapes 4096x11008 / 11008x4096, %.2f GiB of weights per type, "
           "kernels %s, best of %d passes\n", gib, ggml_cpu_backend_name(), reps);
    printf("%-8s %-6s %9s %12s %12s %7s\n", "threads", "type", "matrices", "weight GB/s", "read GB/s", "ratio");
    for (int nt : threads) {
        ggml_threadpool *tp = ggml_threadpool_new(nt);
        for (ggml_type t : tv) {
            const matvec_result r = bench_matvec(t, buf, bytes, tp, reps);
            // the baseline right after, over the same buffer, so both see the same machine state
            const double rd = read_bandwidth(buf, bytes, nt, reps);
            printf("%-8d %-6s %9d %12.2f %12.2f %6.0f%%\n", nt, ggml_type_name(t), r.n_mat, r.gbs, rd, 100.0 * r.gbs / rd);
            fflush(stdout);
        }
        ggml_threadpool_free(tp);
    }
    free(buf);
    return 0;
}

void usage() {
    fprintf(stderr,
            "usage: pinfer-bench matvec [--types f16,q8_0,q4_0,q4_K,q6_K] [--threads 1,2] [--gib 2] [--reps 5]\n");
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 2) {
        usage();
        return 2;
    }
    const std::string cmd = argv[1];
    if (cmd == "matvec") return cmd_matvec(argc - 2, argv + 2);
    if (cmd == "-h" || cmd == "--help") {
        usage();
        return 0;
    }
    fprintf(stderr, "pinfer-bench: unknown command '%s'\n", cmd.c_str());
    usage();
    return 2;
}
