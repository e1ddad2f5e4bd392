// pinfer-bench: speed measurements that print ratios against a baseline
// measured in the same run.
//
//   pinfer-bench matvec [--types f16,q8_0,q4_0,q4_K,q6_K] [--threads 1,2] [--gib 2] [--reps 5]
//                       [--precision fast,high] [--cached] [--cols N] [--shape both|up|down]
//   pinfer-bench model -m FILE [-p 64,512] [-n 64] [-t 2] [-r 3]
//
// matvec: y = W x with LLaMA-7B FFN shapes (4096x11008 and 11008x4096, or
// only one of them: --shape up, rows of 4096; --shape down, rows of 11008),
// cycling through enough distinct weight matrices (--gib of them per type) to
// defeat the last-level cache, computed by ggml_graph_compute on a persistent
// thread pool, at each --precision (high: GGML_PREC_HIGH on every product,
// the q8xh activations where the type has them). Reports the effective GB/s
// of weight bytes read beside a plain memory-read bandwidth (vector sum over
// the same buffer, same thread count), the CPU model and the kernel variant
// (PINFER_CPU=avxvnni or avx2 runs the AVX2 family on an AVX-512 CPU, with or
// without AVX-VNNI). --cols N > 1:
// the prompt-side product Y = W X with N activation columns instead, reported
// in GMAC/s (multiply-adds per second; on one thread in process CPU time).
//
// model: end to end through the C API (src/pinfer.h). "pp P": one decode of a
// P-token prompt into an empty KV cache (tok/s = P / time); "tg N": N decodes
// of one token each into an empty cache (tok/s = N / time). Best of -r
// repetitions after one warm-up, the same protocol as llama-bench's pp/tg.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ggml-cpu.h"
#include "pinfer.h"
#include "bench-read.h"

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

// ---- plain read bandwidth: every thread sums its slice (bench-read.h) ----

// The CPU model as /proc/cpuinfo names it ("unknown" elsewhere).
std::string cpu_model() {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return "unknown";
    char line[512];
    std::string name = "unknown";
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *c = strchr(line, ':');
        if (!c) continue;
        name = c + 1;
        while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
        while (!name.empty() && name.front() == ' ') name.erase(0, 1);
        break;
    }
    fclose(f);
    return name;
}

// Best of `passes` full reads of buf with nt threads, in GB/s.
double read_bandwidth(const uint8_t *buf, size_t bytes, int nt, int passes) {
    double best = 0;
    std::vector<uint64_t> sink(nt);
    for (int pass = 0; pass < passes; pass++) {
        const size_t per = bytes / nt / 4096 * 4096;
        const double t0 = now();
        std::vector<std::thread> th;
        for (int i = 1; i < nt; i++) th.emplace_back([&, i] { sink[i] = bench_sum_bytes(buf + per * i, per); });
        sink[0] = bench_sum_bytes(buf, per);
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
    double gbs, read_gbs, gmacs;
};

// Fill buf with n_mat weight matrices of type t (alternating the two shapes),
// build one graph of n_mat mat-vecs and time it on the pool (nt threads).
// Each pass is followed by a plain read of the same buffer with as many
// threads, so that both see the same machine state (the memory bandwidth of
// a shared VM moves from second to second); best of reps of each.
// cached: the kernels' compute ceiling instead: 64 mat-vecs over one matrix
// of 4096 x R (R: about 1 MiB of weights, resident in L2), so memory plays no
// part (the read column is then the DRAM read, for scale).
matvec_result bench_matvec(ggml_type t, uint8_t *buf, size_t bytes, ggml_threadpool *tp, int nt, int reps, bool high,
                           bool cached, int64_t N, const std::string &shape) {
    const int64_t D = 4096;
    const int64_t F = cached ? std::max<int64_t>(64, ((int64_t)1 << 20) / (int64_t)ggml_row_size(t, D) / 64 * 64) : 11008;
    const size_t mat_bytes = ggml_row_size(t, D) * F;  // same for both shapes
    const size_t stride = (mat_bytes + 4095) / 4096 * 4096;
    const int n_mat = cached ? 64 : (int)(bytes / stride);

    // random quantized data: a block of 64 quantized rows of length D, repeated
    // (whole blocks, so every matrix holds valid blocks of type t)
    const int64_t trows = 64;
    std::vector<float> f((size_t)(D * trows));
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    for (auto &v : f) v = nd(rng);
    std::vector<uint8_t> tmpl(ggml_row_size(t, D) * trows);
    ggml_quantize_chunk(t, f.data(), tmpl.data(), trows, D);
    for (int m = 0; m < (cached ? 1 : n_mat); m++) {
        uint8_t *dst = buf + (size_t)m * stride;
        for (size_t off = 0; off < mat_bytes; off += tmpl.size())
            memcpy(dst + off, tmpl.data(), std::min(tmpl.size(), mat_bytes - off));
    }

    ggml_init_params wp = {ggml_tensor_overhead() * (size_t)(n_mat + 8), nullptr, true};
    ggml_context *wctx = ggml_init(wp);
    ggml_init_params ip = {ggml_tensor_overhead() * 4 + sizeof(float) * (size_t)((D + F) * N) + 1024, nullptr, false};
    ggml_context *ictx = ggml_init(ip);
    ggml_tensor *xd = ggml_new_tensor_2d(ictx, GGML_TYPE_F32, D, N);
    ggml_tensor *xf = ggml_new_tensor_2d(ictx, GGML_TYPE_F32, F, N);
    for (int64_t i = 0; i < D * N; i++) ((float *)xd->data)[i] = nd(rng);
    for (int64_t i = 0; i < F * N; i++) ((float *)xf->data)[i] = nd(rng);

    const size_t gsize = (size_t)n_mat * 4 + 64;
    ggml_init_params gp = {ggml_tensor_overhead() * (size_t)(n_mat + 8) + ggml_graph_overhead() * 2 + gsize * 64, nullptr, true};
    ggml_context *gctx = ggml_init(gp);
    ggml_cgraph *g = ggml_new_graph_custom(gctx, gsize);
    for (int m = 0; m < n_mat; m++) {
        // up/gate: [D in, F out]; down: [F in, D out]; alternating unless --shape picks one
        const bool up = cached || shape == "up" || (shape == "both" && m % 2 == 0);
        ggml_tensor *w = ggml_new_tensor_2d(wctx, t, up ? D : F, up ? F : D);
        w->data = buf + (cached ? 0 : (size_t)m * stride);
        ggml_tensor *y = ggml_mul_mat(gctx, w, up ? xd : xf);
        if (high) ggml_set_prec(y, GGML_PREC_HIGH);
        ggml_build_forward_expand(g, y);
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
    // cached on one thread: CPU time (the kernel's speed while it runs, even
    // when other jobs take the core away from it part of the time)
    auto clock = [&] {
        if (!((cached || N > 1) && nt == 1)) return now();
        timespec ts;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
        return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    };
    double best = 1e30, rd = 0;
    for (int r = 0; r < reps; r++) {
        const double t0 = clock();
        ggml_graph_compute(g, tp);
        best = std::min(best, clock() - t0);
        rd = std::max(rd, read_bandwidth(buf, bytes, nt, 1));
    }
    ggml_gallocr_free(ga);
    ggml_free(gctx);
    ggml_free(ictx);
    ggml_free(wctx);
    return {n_mat, (double)mat_bytes * n_mat / best / 1e9, rd, (double)D * F * N * n_mat / best / 1e9};
}

int cmd_matvec(int argc, char **argv) {
    std::vector<std::string> types = {"f16", "q8_0", "q4_0", "q4_K", "q6_K"};
    std::vector<int> threads = {1, 2};
    std::vector<std::string> precisions = {"fast", "high"};
    std::string shape = "both";
    bool cached = false;
    double gib = 2.0;
    int64_t cols = 1;
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
        else if (a == "--precision") precisions = split(val());
        else if (a == "--cached") cached = true;
        else if (a == "--cols") cols = atoll(val().c_str());
        else if (a == "--shape") shape = val();
        else {
            fprintf(stderr, "pinfer-bench matvec: unknown option '%s'\n", a.c_str());
            return 2;
        }
    }
    std::vector<ggml_type> tv;
    for (const auto &s : types) {
        const int t = ggml_type_from_name(s.c_str());
        const ggml_cpu_type_traits *tr = t < 0 ? nullptr : ggml_get_cpu_type_traits((ggml_type)t);
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
    if (shape != "both" && shape != "up" && shape != "down") {
        fprintf(stderr, "pinfer-bench: bad --shape '%s' (both, up or down)\n", shape.c_str());
        return 2;
    }
    for (const auto &p : precisions)
        if (p != "fast" && p != "high") {
            fprintf(stderr, "pinfer-bench: bad --precision '%s' (fast, high or both: fast,high)\n", p.c_str());
            return 2;
        }
    if (!(gib > 0.01 && gib < 1024) || reps < 1 || cols < 1 || cols > 4096) {
        fprintf(stderr, "pinfer-bench: bad --gib, --reps or --cols\n");
        return 2;
    }
    const size_t bytes = (size_t)(gib * (double)(1ull << 30)) / 4096 * 4096;
    uint8_t *buf = (uint8_t *)aligned_alloc(4096, bytes);
    if (!buf) {
        fprintf(stderr, "pinfer-bench: cannot allocate %.2f GiB\n", gib);
        return 1;
    }
    memset(buf, 1, bytes);  // fault the pages in before timing

    printf("matvec: y = W x, W in LLaMA-7B FFN shapes %s, %.2f GiB of weights per type, best of %d passes, each followed by a plain read\n",
           shape == "up" ? "4096x11008 (rows of 4096)" : shape == "down" ? "11008x4096 (rows of 11008)" : "4096x11008 / 11008x4096", gib,
           reps);
    printf("cpu: %s; kernels: %s\n", cpu_model().c_str(), ggml_cpu_kernel_variant());
    if (cached)
        printf("--cached: 64 mat-vecs over one L2-resident 4096 x R matrix per type (the kernels' compute ceiling; "
               "1 thread: timed in process CPU time)\n");
    if (cols > 1)
        printf("--cols %lld: Y = W X with %lld activation columns, GMAC/s (1 thread: in process CPU time)\n", (long long)cols,
               (long long)cols);
    printf("%-8s %-6s %-5s %9s %12s %12s %7s%s\n", "threads", "type", "prec", "matrices", "weight GB/s", "read GB/s", "ratio",
           cols > 1 ? "   GMAC/s" : "");
    for (int nt : threads) {
        ggml_threadpool *tp = ggml_threadpool_new(nt);
        for (ggml_type t : tv)
            for (const auto &prec : precisions) {
                const matvec_result r = bench_matvec(t, buf, bytes, tp, nt, reps, prec == "high", cached, cols, shape);
                const double rd = r.read_gbs;
                printf("%-8d %-6s %-5s %9d %12.2f %12.2f %6.0f%%", nt, ggml_type_name(t), prec.c_str(), r.n_mat, r.gbs, rd,
                       100.0 * r.gbs / rd);
                if (cols > 1) printf(" %8.1f", r.gmacs);
                printf("\n");
                fflush(stdout);
            }
        ggml_threadpool_free(tp);
    }
    free(buf);
    return 0;
}

// ---- model: prompt processing and generation through the C API ----

int cmd_model(int argc, char **argv) {
    std::string path;
    std::vector<int> prompts = {64, 512};
    int n_gen = 64, n_threads = 2, reps = 3;
    std::string precision = "high";
    for (int i = 0; i < argc; i++) {
        const std::string a = argv[i];
        auto val = [&]() -> std::string {
            if (i + 1 >= argc) {
                fprintf(stderr, "pinfer-bench: %s needs a value\n", a.c_str());
                exit(2);
            }
            return argv[++i];
        };
        if (a == "-m") path = val();
        else if (a == "-p") {
            prompts.clear();
            for (const auto &s : split(val())) prompts.push_back(atoi(s.c_str()));
        } else if (a == "-n") n_gen = atoi(val().c_str());
        else if (a == "-t") n_threads = atoi(val().c_str());
        else if (a == "-r") reps = atoi(val().c_str());
        else if (a == "--precision") precision = val();
        else {
            fprintf(stderr, "pinfer-bench model: unknown option '%s'\n", a.c_str());
            return 2;
        }
    }
    if (path.empty()) {
        fprintf(stderr, "pinfer-bench model: -m FILE is required\n");
        return 2;
    }
    int max_p = 1;
    for (int p : prompts) {
        if (p < 2 || p > 65536) {
            fprintf(stderr, "pinfer-bench model: bad prompt length %d (need 2..65536)\n", p);
            return 2;
        }
        max_p = std::max(max_p, p);
    }
    if (n_gen < 0 || n_threads < 1 || reps < 1) {
        fprintf(stderr, "pinfer-bench model: bad -n, -t or -r\n");
        return 2;
    }
    if (pinfer_precision_from_name(precision.c_str()) < 0) {
        fprintf(stderr, "pinfer-bench model: bad --precision '%s' (high or fast)\n", precision.c_str());
        return 2;
    }
    pinfer_model *model = pinfer_model_load(path.c_str());
    if (!model) {
        fprintf(stderr, "pinfer-bench: %s\n", pinfer_last_error());
        return 1;
    }
    pinfer_context_params cp = pinfer_context_default_params();
    cp.n_ctx = (uint32_t)std::max(max_p, n_gen) + 16;
    cp.n_batch = (uint32_t)max_p;
    cp.n_threads = n_threads;
    cp.precision = pinfer_precision_from_name(precision.c_str());
    pinfer_context *ctx = pinfer_context_new(model, cp);
    if (!ctx) {
        fprintf(stderr, "pinfer-bench: %s\n", pinfer_last_error());
        pinfer_model_free(model);
        return 1;
    }
    // deterministic pseudo-random tokens (the speed does not depend on them)
    const int32_t n_vocab = pinfer_model_n_vocab(model);
    std::vector<pinfer_token> toks((size_t)std::max(max_p, n_gen));
    std::mt19937 rng(42);
    for (auto &t : toks) t = (pinfer_token)(rng() % (uint32_t)n_vocab);

    double cpu_s = 0;  // process CPU time of the last run (all threads)
    auto cpu_now = [] {
        timespec ts;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
        return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    };
    auto run = [&](int n_prompt, int n_single) -> double {
        pinfer_kv_truncate(ctx, 0);
        const double c0 = cpu_now(), t0 = now();
        if (n_prompt > 0 && pinfer_decode(ctx, toks.data(), n_prompt, false) != 0) return -1;
        for (int i = 0; i < n_single; i++)
            if (pinfer_decode(ctx, &toks[(size_t)i], 1, false) != 0) return -1;
        const double dt = now() - t0;
        cpu_s = cpu_now() - c0;
        return dt;
    };
    printf("model: %s (%s), %d threads, kernels %s, best of %d after a warm-up\n", path.c_str(), pinfer_model_desc(model),
           n_threads, ggml_cpu_backend_name(), reps);
    // cpu%: CPU time of all threads / (wall time x threads) in the best run;
    // well under 100% means other processes took the cores.
    printf("%-8s %10s %10s %6s\n", "test", "tok/s", "ms", "cpu%");
    auto report = [&](const char *kind, int n, int np, int ns) -> bool {
        double best = 1e30, best_cpu = 0;
        for (int r = 0; r <= reps; r++) {  // r == 0 is the warm-up
            const double dt = run(np, ns);
            if (dt < 0) {
                fprintf(stderr, "pinfer-bench: decode failed: %s\n", pinfer_last_error());
                return false;
            }
            if (r > 0 && dt < best) { best = dt; best_cpu = cpu_s; }
        }
        char name[32];
        snprintf(name, sizeof(name), "%s%d", kind, n);
        printf("%-8s %10.2f %10.2f %5.0f%%\n", name, n / best, best * 1e3, 100.0 * best_cpu / (best * n_threads));
        fflush(stdout);
        return true;
    };
    bool ok = true;
    for (int p : prompts) ok = ok && report("pp", p, p, 0);
    if (n_gen > 0) ok = ok && report("tg", n_gen, 0, n_gen);
    pinfer_context_free(ctx);
    pinfer_model_free(model);
    return ok ? 0 : 1;
}

void usage() {
    fprintf(stderr,
            "usage: pinfer-bench matvec [--types f16,q8_0,q4_0,q4_K,q6_K] [--threads 1,2] [--gib 2] [--reps 5]\n"
            "                           [--precision fast,high] [--cached] [--cols N] [--shape both|up|down]\n"
            "                           (PINFER_CPU=avxvnni|avx2: the AVX2 kernels)\n"
            "       pinfer-bench model -m FILE [-p 64,512] [-n 64] [-t 2] [-r 3]\n");
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 2) {
        usage();
        return 2;
    }
    const std::string cmd = argv[1];
    if (cmd == "matvec") return cmd_matvec(argc - 2, argv + 2);
    if (cmd == "model") return cmd_model(argc - 2, argv + 2);
    if (cmd == "-h" || cmd == "--help") {
        usage();
        return 0;
    }
    fprintf(stderr, "pinfer-bench: unknown command '%s'\n", cmd.c_str());
    usage();
    return 2;
}
