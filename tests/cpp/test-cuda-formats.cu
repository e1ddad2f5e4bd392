// The CUDA backend's weight formats (ggml/src/cuda/cuda-common.cuh: element e
// of a row, the code every CUDA kernel dequantizes with) against the CPU's
// dequantizers, bit for bit, for every type the backend supports; and the
// 8-element groups of the fast path (groups.cuh: d * q + mn at the group's
// positions) against the elements. Host code of the same functions: runs
// wherever the CUDA build does, GPU or not.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <random>
#include <vector>

#include "cuda-common.cuh"
#include "groups.cuh"
#include "ggml-cpu.h"

static int g_fail = 0;

template <class W>
static void check(ggml_type t) {
    const int64_t K = 512, rows = 3;  // two super-blocks per row
    std::mt19937 rng(7 + (int)t);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    std::vector<float> src((size_t)(K * rows));
    for (float &v : src) v = u(rng);
    std::vector<uint8_t> q(ggml_row_size(t, K) * rows);
    ggml_quantize_chunk(t, src.data(), q.data(), rows, K);
    if ((size_t)W::BYTES * (K / W::QK) != ggml_row_size(t, K)) {
        fprintf(stderr, "FAIL %s: device block size %d x %lld != row size %zu\n", ggml_type_name(t), W::BYTES,
                (long long)(K / W::QK), ggml_row_size(t, K));
        g_fail++;
        return;
    }
    std::vector<float> ref((size_t)K);
    int bad = 0;
    for (int64_t r = 0; r < rows; r++) {
        const char *row = (const char *)q.data() + r * ggml_row_size(t, K);
        if (t == GGML_TYPE_F32) memcpy(ref.data(), row, sizeof(float) * K);
        else ggml_get_type_traits(t)->to_float(row, ref.data(), K);
        for (int64_t i = 0; i < K; i++) {
            const float d = pcuda::load_w<W>(row, i);
            if (memcmp(&d, &ref[(size_t)i], sizeof(float)) != 0 && bad++ < 3)
                fprintf(stderr, "FAIL %s row %lld element %lld: device %.9g, CPU %.9g\n", ggml_type_name(t), (long long)r,
                        (long long)i, d, ref[(size_t)i]);
        }
    }
    if (bad) g_fail++;
    if constexpr (pcuda::g8_of<W>::ok) {  // every group of every row against the element path
        using G = pcuda::g8_of<W>;
        int gbad = 0;
        for (int64_t r = 0; r < rows; r++) {
            const char *row = (const char *)q.data() + r * ggml_row_size(t, K);
            for (int64_t gi = 0; gi < K / 8; gi++) {
                const int64_t blk = gi / G::G;
                const int s = (int)(gi % G::G);
                float v[8], d = 1.0f, mn = 0.0f;
                G::group((const uint8_t *)row + blk * G::GB, s, v, d, mn);
                const int64_t p0 = blk * G::QKG + (G::HALF == 16 ? 4 * s : 8 * s);
                for (int i = 0; i < 8; i++) {
                    const int64_t e = p0 + (i < 4 ? i : G::HALF + i - 4);
                    const double got = (G::SCALE ? (double)d * v[i] : v[i]) + (G::MIN ? mn : 0.0);
                    const double want = pcuda::load_w<W>(row, e);
                    if (fabs(got - want) > 1e-6 * (fabs(want) + fabs(d) + fabs(mn)) && gbad++ < 3)
                        fprintf(stderr, "FAIL %s row %lld group %lld element %lld: group %.9g, element %.9g\n", ggml_type_name(t),
                                (long long)r, (long long)gi, (long long)e, got, want);
                }
            }
        }
        if (gbad) g_fail++;
    }
}

int main() {
    int n = 0;
    const ggml_type types[] = {GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
                               GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,
                               GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    for (ggml_type t : types) {
        const bool known = pcuda::with_format(t, [&](auto w) { check<decltype(w)>(t); });
        if (!known) {
            fprintf(stderr, "FAIL %s: no device format\n", ggml_type_name(t));
            g_fail++;
        }
        n++;
    }
    printf("test-cuda-formats: %d weight formats against the CPU's dequantizers\n", n);
    return g_fail ? 1 : 0;
}
