// pinfer-bench-sparse: one FFN layer, neuron-sparse vs dense, timed in the same run.
//
//   pinfer-bench-sparse [--types q4_0,q8_0,f16] [--threads 2] [--gib 2] [--reps 7]
//                       [--sparsity 0,50,80,90,95,98] [--batch 1] [--skew 0] [--d 4096] [--n 11008]
//                       [--hugepages 0]
//
// A decode step through L layers at LLaMA-7B FFN shape (d=4096, n=11008):
//   dense:    y = W_down · (W_gate·x ⊙ W_up·x)                       (mul_mat x3)
//   fused:    sparse_ffn_bundle over the neuron bundle (rows gate_0, up_0,
//             down_t_0, gate_1, ...: one contiguous read per active neuron, the
//             whole FFN in one op): what predictor mode runs when decoding a
//             file with ffn_down_t (model::prepare_sparse_weights)
//   separate: gate and up as two mul_mat_sparse_rows on the plain matrices,
//             then y = sparse_down on ffn_down_t (exact and threshold modes'
//             op set; predictor mode's for prompts)
// with an rms_norm between layers. L is chosen so the weights of all layers
// (gate, up, down, down_t and the bundle) fill --gib GiB: every step streams
// weights from DRAM, not the last-level cache. Each layer gets its own random
// active set of the requested sparsity, drawn afresh every repetition; --skew s
// draws neuron i with weight (i+1)^-s (a hot-first power law; 0 = uniform). With
// --batch T > 1 the sparsity is that of the union of the batch.
//
// "separate" gives sparse_down the dense ffn_down too, so it switches to it
// above the crossover density (ggml_cpu_sparse_should_use_dense), as shipped.
// The three runs alternate within every repetition, each on its own copy of
// the weights (no run finds another's rows in the cache), so all see the same
// machine load; the table reports the best repetition per layer and the
// dense/sparse ratios of the best and of the median repetitions.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench-read.h"
#include "ggml-cpu.h"

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

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

// Best of the repetitions: on a shared machine the minimum is the run least
// disturbed by other jobs (ratios of medians are printed too).
double best(const std::vector<double> &v) { return *std::min_element(v.begin(), v.end()); }
double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

struct opts {
    std::vector<std::string> types = {"q4_0", "q8_0", "f16"};
    std::vector<double> sparsity = {0, 50, 80, 90, 95, 98};
    int threads = 2, reps = 7, batch = 1;
    bool hugepages = false;
    double gib = 2.0, skew = 0.0;
    int64_t d = 4096, n = 11008;
};

// k distinct ids of [0, n), id i drawn with weight (i+1)^-skew, sorted.
std::vector<int32_t> draw_active(int64_t n, int64_t k, double skew, std::mt19937_64 &rng) {
    std::uniform_real_distribution<double> u(1e-12, 1.0);
    std::vector<std::pair<double, int32_t>> keys((size_t)n);
    for (int64_t i = 0; i < n; i++) {  // Efraimidis-Spirakis: largest log(u)/w wins
        const double w = std::pow((double)(i + 1), -skew);
        keys[(size_t)i] = {std::log(u(rng)) / w, (int32_t)i};
    }
    std::nth_element(keys.begin(), keys.begin() + k, keys.end(), [](auto &a, auto &b) { return a.first > b.first; });
    std::vector<int32_t> ids;
    for (int64_t j = 0; j < k; j++) ids.push_back(keys[(size_t)j].second);
    std::sort(ids.begin(), ids.end());
    return ids;
}

// One weight template per shape, replicated into every layer (distinct memory
// is what defeats the cache; the values do not change the timing).
void fill_template(ggml_type t, std::vector<uint8_t> &out, int64_t rows, int64_t cols, std::mt19937_64 &rng) {
    std::normal_distribution<float> nd(0.0f, 0.02f);
    std::vector<float> f((size_t)(rows * cols));
    for (float &v : f) v = nd(rng);
    out.resize(ggml_row_size(t, cols) * (size_t)rows);
    ggml_quantize_chunk(t, f.data(), out.data(), rows, cols);
}

// Plain reads, no arithmetic: the ceiling the kernels work against. Every
// chunk of lens[c] bytes at chunks[c] is summed; the chunks are split evenly
// among nt threads in order. Returns GB/s.
double raw_read(const std::vector<const uint8_t *> &chunks, const std::vector<size_t> &lens, int nt) {
    std::vector<uint64_t> sink((size_t)nt, 0);
    auto work = [&](int th) {
        const size_t c0 = chunks.size() * th / nt, c1 = chunks.size() * (th + 1) / nt;
        uint64_t a = 0;
        for (size_t c = c0; c < c1; c++) a += bench_sum_bytes(chunks[c], lens[c]);
        sink[(size_t)th] = a;
    };
    size_t total = 0;
    for (size_t l : lens) total += l;
    const double t0 = now();
    std::vector<std::thread> th;
    for (int i = 1; i < nt; i++) th.emplace_back(work, i);
    work(0);
    for (auto &t : th) t.join();
    const double dt = now() - t0;
    uint64_t s = 0;
    for (uint64_t v : sink) s += v;
    if (s == 42) printf(" ");  // keep the sums alive
    return (double)total / dt / 1e9;
}

struct result {
    double dense_ms, sparse_ms;
};

struct layer_weights {
    ggml_tensor *gate, *up, *down, *down_t, *bundle;
};

bool bench_type(ggml_type t, const opts &o, ggml_threadpool *tp) {
    const int64_t d = o.d, n = o.n, T = o.batch;
    const size_t mat = ggml_row_size(t, d) * (size_t)n;  // every FFN matrix has d*n elements
    const size_t layer_bytes = 7 * mat;  // gate, up, down, down_t, the gate/up/down_t bundle
    const int L = std::max<int>(2, (int)std::ceil(o.gib * 1073741824.0 / (double)layer_bytes));
    std::mt19937_64 rng(1234);
    std::vector<uint8_t> t_rows_d, t_rows_n;  // [n rows of d] and [d rows of n]
    fill_template(t, t_rows_d, n, d, rng);
    fill_template(t, t_rows_n, d, n, rng);
    const size_t huge = 2u << 20;
    const size_t total = (layer_bytes * (size_t)L + huge - 1) / huge * huge;
    uint8_t *buf = (uint8_t *)aligned_alloc(huge, total);
    if (!buf) {
        fprintf(stderr, "out of memory for %d layers of %.1f MiB\n", L, layer_bytes / 1048576.0);
        return false;
    }
    // Random rows touch a new 4 KiB page each: with --hugepages the TLB cost goes away.
    madvise(buf, total, o.hugepages ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);

    ggml_init_params wp = {ggml_tensor_overhead() * (size_t)(5 * L + 8), nullptr, true};
    ggml_context *wctx = ggml_init(wp);
    std::vector<layer_weights> lw((size_t)L);
    for (int l = 0; l < L; l++) {
        uint8_t *base = buf + (size_t)l * layer_bytes;
        lw[l].gate = ggml_new_tensor_2d(wctx, t, d, n);
        lw[l].up = ggml_new_tensor_2d(wctx, t, d, n);
        lw[l].down_t = ggml_new_tensor_2d(wctx, t, d, n);
        lw[l].down = ggml_new_tensor_2d(wctx, t, n, d);
        lw[l].bundle = ggml_new_tensor_2d(wctx, t, d, 3 * n);
        memcpy(base, t_rows_d.data(), mat);
        memcpy(base + mat, t_rows_d.data(), mat);
        memcpy(base + 2 * mat, t_rows_d.data(), mat);
        memcpy(base + 3 * mat, t_rows_n.data(), mat);
        const size_t row = ggml_row_size(t, d);
        for (int64_t i = 0; i < n; i++)  // the bundle interleaves the rows of gate, up and down_t
            for (int j = 0; j < 3; j++) memcpy(base + 4 * mat + (3 * i + j) * row, t_rows_d.data() + i * row, row);
        lw[l].gate->data = base;
        lw[l].up->data = base + mat;
        lw[l].down_t->data = base + 2 * mat;
        lw[l].down->data = base + 3 * mat;
        lw[l].bundle->data = base + 4 * mat;
    }

    ggml_init_params ip = {ggml_tensor_overhead() * (size_t)(L + 8) + sizeof(float) * (size_t)(d * T) +
                               sizeof(int32_t) * (size_t)((n + 1) * L) + 64 * (size_t)(L + 8),
                           nullptr, false};
    ggml_context *ictx = ggml_init(ip);
    ggml_tensor *x = ggml_new_tensor_2d(ictx, GGML_TYPE_F32, d, T);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int64_t i = 0; i < d * T; i++) ((float *)x->data)[i] = nd(rng);
    std::vector<ggml_tensor *> idx((size_t)L);
    for (int l = 0; l < L; l++) idx[l] = ggml_new_tensor_2d(ictx, GGML_TYPE_I32, n + 1, 1);

    const size_t gsize = 16 * (size_t)L + 64;
    auto build = [&](ggml_context *gctx, bool sparse, bool fused) {
        ggml_cgraph *g = ggml_new_graph_custom(gctx, gsize);
        ggml_tensor *cur = x;
        for (int l = 0; l < L; l++) {
            ggml_tensor *y;
            if (sparse && fused) {
                y = ggml_sparse_ffn_bundle(gctx, lw[l].bundle, lw[l].gate, lw[l].up, lw[l].down, cur, idx[l], 0, n, GGML_OP_SWIGLU,
                                           false);
            } else if (sparse) {
                ggml_tensor *gt = ggml_mul_mat_sparse_rows(gctx, lw[l].gate, cur, idx[l], 0, n);
                ggml_tensor *ut = ggml_mul_mat_sparse_rows(gctx, lw[l].up, cur, idx[l], 0, n);
                y = ggml_sparse_down(gctx, lw[l].down_t, lw[l].down, ggml_swiglu(gctx, gt, ut), idx[l], 0, n);
            } else {
                ggml_tensor *h = ggml_swiglu(gctx, ggml_mul_mat(gctx, lw[l].gate, cur), ggml_mul_mat(gctx, lw[l].up, cur));
                y = ggml_mul_mat(gctx, lw[l].down, h);
            }
            cur = ggml_rms_norm(gctx, y, 1e-6f);  // keeps values sane through the chain
        }
        ggml_set_output(cur);
        ggml_build_forward_expand(g, cur);
        return g;
    };
    ggml_init_params gparams = {ggml_tensor_overhead() * gsize * 3 + ggml_graph_overhead() * 4 + gsize * 64, nullptr, true};
    ggml_context *gctx = ggml_init(gparams);
    ggml_cgraph *gd = build(gctx, false, false), *gs = build(gctx, true, true), *gp = build(gctx, true, false);
    ggml_gallocr *ad = ggml_gallocr_new(), *as = ggml_gallocr_new(), *ap = ggml_gallocr_new();
    if (!ggml_gallocr_alloc_graph(ad, gd) || !ggml_gallocr_alloc_graph(as, gs) || !ggml_gallocr_alloc_graph(ap, gp)) {
        fprintf(stderr, "graph allocation failed\n");
        return false;
    }

    printf("\n%s: %d layers of %.1f MiB (%.2f GiB), T=%lld, threads=%d, skew=%.2f, %s pages\n", ggml_type_name(t), L,
           layer_bytes / 1048576.0, layer_bytes * (double)L / 1073741824.0, (long long)T, o.threads, o.skew,
           o.hugepages ? "2 MiB" : "4 KiB");
    printf("| sparsity | active | dense ms/layer | fused ms/layer | dense/fused | (medians) | separate ms/layer | dense/separate | (medians) |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (double sp : o.sparsity) {
        const int64_t k = std::max<int64_t>(0, std::min<int64_t>(n, (int64_t)std::llround(n * (1.0 - sp / 100.0))));
        std::vector<double> td, ts, tq;
        for (int r = 0; r < o.reps + 1; r++) {  // the first round warms up
            // Fresh active sets every repetition (as tokens change them): the
            // active rows of all layers must not sit in the LLC from the last round.
            for (int l = 0; l < L; l++) {
                const std::vector<int32_t> ids = draw_active(n, k, o.skew, rng);
                int32_t *p = (int32_t *)idx[l]->data;
                p[0] = (int32_t)k;
                for (int64_t j = 0; j < n; j++) p[1 + j] = j < k ? ids[(size_t)j] : -1;
            }
            const double t0 = now();
            ggml_graph_compute(gd, tp);
            const double t1 = now();
            ggml_graph_compute(gs, tp);
            const double t2 = now();
            ggml_graph_compute(gp, tp);
            const double t3 = now();
            if (r == 0) continue;
            td.push_back((t1 - t0) / L);
            ts.push_back((t2 - t1) / L);
            tq.push_back((t3 - t2) / L);
        }
        const double md = best(td) * 1e3, ms = best(ts) * 1e3, mq = best(tq) * 1e3;
        printf("| %.0f%% | %lld | %.3f | %.3f | %.2fx | %.2fx | %.3f | %.2fx | %.2fx |\n", sp, (long long)k, md, ms, md / ms,
               median(td) / median(ts), mq, md / mq, median(td) / median(tq));
        fflush(stdout);
    }

    // The memory system's own ratio at 90%: streaming the three dense matrices
    // vs reading the bundle's active neurons (three adjacent rows each) of
    // every layer, plain sums, no arithmetic.
    {
        const int64_t k = (int64_t)std::llround(n * 0.1);
        const size_t row = ggml_row_size(t, d);
        std::vector<const uint8_t *> dc, sc;
        std::vector<size_t> dl, sl;
        for (int l = 0; l < L; l++) {
            for (const ggml_tensor *m : {lw[l].gate, lw[l].up, lw[l].down}) {
                dc.push_back((const uint8_t *)m->data);
                dl.push_back(mat);
            }
            const std::vector<int32_t> ids = draw_active(n, k, o.skew, rng);
            for (int32_t i : ids) {
                sc.push_back((const uint8_t *)lw[l].bundle->data + 3 * (size_t)i * row);
                sl.push_back(3 * row);
            }
        }
        double bd = 0, bs = 0;
        for (int r = 0; r < 3; r++) {
            bd = std::max(bd, raw_read(dc, dl, o.threads));
            bs = std::max(bs, raw_read(sc, sl, o.threads));
        }
        printf("raw reads (%d threads, sums only): dense matrices %.1f GB/s, 10%% of the neurons' rows %.1f GB/s: "
               "the memory system alone allows dense/sparse <= %.2fx at 90%%\n", o.threads, bd, bs, 10.0 * bs / bd);
    }

    ggml_gallocr_free(ad);
    ggml_gallocr_free(as);
    ggml_gallocr_free(ap);
    ggml_free(gctx);
    ggml_free(ictx);
    ggml_free(wctx);
    free(buf);
    return true;
}

int usage() {
    fprintf(stderr,
            "usage: pinfer-bench-sparse [--types q4_0,q8_0,f16] [--threads 2] [--gib 2] [--reps 7]\n"
            "                           [--sparsity 0,50,80,90,95,98] [--batch 1] [--skew 0] [--d 4096] [--n 11008]\n"
            "                           [--hugepages 0]\n");
    return 2;
}

}  // namespace

int main(int argc, char **argv) {
    opts o;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (i + 1 >= argc) return usage();
        const std::string v = argv[++i];
        try {
            if (a == "--types") o.types = split(v);
            else if (a == "--threads") o.threads = std::stoi(v);
            else if (a == "--gib") o.gib = std::stod(v);
            else if (a == "--reps") o.reps = std::stoi(v);
            else if (a == "--batch") o.batch = std::stoi(v);
            else if (a == "--skew") o.skew = std::stod(v);
            else if (a == "--hugepages") o.hugepages = std::stoi(v) != 0;
            else if (a == "--d") o.d = std::stoll(v);
            else if (a == "--n") o.n = std::stoll(v);
            else if (a == "--sparsity") {
                o.sparsity.clear();
                for (const std::string &s : split(v)) o.sparsity.push_back(std::stod(s));
            } else return usage();
        } catch (...) {
            fprintf(stderr, "bad value '%s' for %s\n", v.c_str(), a.c_str());
            return 2;
        }
    }
    if (o.threads < 1 || o.reps < 1 || o.batch < 1 || o.gib <= 0 || o.d < 256 || o.n < 1 || o.d % 256) {
        fprintf(stderr, "bad options: need threads, reps, batch >= 1, gib > 0, d a multiple of 256\n");
        return 2;
    }
    for (double s : o.sparsity)
        if (s < 0 || s > 100) {
            fprintf(stderr, "sparsity must be in [0, 100]\n");
            return 2;
        }
    printf("pinfer-bench-sparse: FFN d=%lld n=%lld, cpu kernels %s\n", (long long)o.d, (long long)o.n, ggml_cpu_backend_name());
    ggml_threadpool *tp = ggml_threadpool_new(o.threads);
    int rc = 0;
    for (const std::string &name : o.types) {
        const int t = ggml_type_from_name(name.c_str());
        const ggml_type_traits *tr = t < 0 ? nullptr : ggml_get_type_traits((ggml_type)t);
        const ggml_cpu_type_traits *ct = t < 0 ? nullptr : ggml_get_cpu_type_traits((ggml_type)t);
        if (!tr || !ct->vec_dot || !tr->to_float || !ct->from_float) {
            fprintf(stderr, "unsupported weight type '%s'\n", name.c_str());
            rc = 2;
            continue;
        }
        if (o.n % tr->blck_size) {
            fprintf(stderr, "%s: n=%lld is not a multiple of the block size (dense down needs it)\n", name.c_str(), (long long)o.n);
            rc = 2;
            continue;
        }
        if (!bench_type((ggml_type)t, o, tp)) rc = 1;
    }
    ggml_threadpool_free(tp);
    return rc;
}
