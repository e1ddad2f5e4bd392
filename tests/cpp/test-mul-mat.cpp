// ggml_mul_mat through the graph executor against a float64 reference, for
// every weight type: odd M/N/K, broadcasting over dims 2/3, strided
// (transposed or permuted) activations, and 1..4 threads bit-identical.
//
// The kernel converts the activations to the weight type's vec_dot_type, so
// the reference is the float64 dot of the dequantized weights with the
// dequantized, reference-quantized activations: it checks the plumbing to
// float rounding. A looser check against the exact activations bounds the
// total error too. With GGML_PREC_HIGH the reference activations are the
// converted row plus its converted residual (for the types with q8xh kernels on
// the SIMD families: the residual on the grid df/128 that layout defines; for
// q8_K on the grid d/128 of its blocks; F16 and BF16 weights take the f32
// activations as they are), and the bound against the exact product is 60x
// tighter.

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <random>
#include <vector>

#include "ggml-cpu.h"

static int g_fail = 0;
#define CHECK(cond, ...)                                             \
    do {                                                             \
        if (!(cond)) {                                               \
            if (++g_fail < 30) {                                     \
                fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
                fprintf(stderr, __VA_ARGS__);                        \
                fprintf(stderr, "\n");                               \
            }                                                        \
        }                                                            \
    } while (0)

static std::mt19937 rng(42);

static float randn() {
    static std::normal_distribution<float> nd(0.0f, 1.0f);
    return nd(rng);
}

enum b_layout { B_CONTIG, B_TRANSPOSED, B_PERMUTED };

// round half away from zero, clamped to int8 (the activation quantizers' rule)
static float round_q8(float v) {
    const float r = v < 0 ? -floorf(-v + 0.5f) : floorf(v + 0.5f);
    return fminf(127.0f, fmaxf(-127.0f, r));
}

// The values a q8xh activation row stands for (vec-dot-simd.h): per block of 32,
// q as Q8_0 quantizes it, the residual on the grid df/128.
static void q8xh_values(const float *x, float *out, int64_t k) {
    for (int64_t b = 0; b < k / 32; b++) {
        const float *xb = x + 32 * b;
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(xb[i]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        const float df = ggml_fp16_to_fp32(ggml_fp32_to_fp16(d));
        const float ir = df != 0.0f ? 128.0f / df : 0.0f;
        for (int i = 0; i < 32; i++) {
            const float q = round_q8(xb[i] * id);
            const float q2 = round_q8(fmaf(-df, q, xb[i]) * ir);
            out[32 * b + i] = (float)((double)(df / 128.0f) * (128.0 * q + q2));
        }
    }
}

// The values of q8_K's residual row (GGML_PREC_HIGH): res on the grid d/128
// of the q8_K row q's blocks (each block: the float d first, 292 bytes).
static void q8K_resid_values(const float *res, const uint8_t *q, float *out, int64_t k) {
    const size_t bs = ggml_row_size(GGML_TYPE_Q8_K, 256);
    for (int64_t b = 0; b < k / 256; b++) {
        float d;
        memcpy(&d, q + b * bs, sizeof d);
        const float ir = d != 0.0f ? 128.0f / d : 0.0f;
        for (int i = 0; i < 256; i++) out[256 * b + i] = (float)((double)(d / 128.0f) * round_q8(res[256 * b + i] * ir));
    }
}

// Does this product run on a q8x (or, high, q8xh) kernel? The CPU backend's
// one rule (ggml_cpu_act_format). q8x rows hold the q8_0 values (also for
// q4_K / q5_K, whose vec_dot_type is q8_K).
static bool uses_q8x(ggml_type t, int64_t K, int64_t N, bool high) {
    const char *f = ggml_cpu_act_format(t, K, N, high);
    return f && strcmp(f, high ? "q8xh" : "q8x") == 0;
}

// a [K, M, A2, A3] of type t, b [K, N, B2, B3] F32 in the given layout.
static void run_case(ggml_type t, int64_t K, int64_t M, int64_t N, int64_t A2, int64_t A3, int64_t B2, int64_t B3,
                     b_layout lay, bool high = false) {
    const ggml_type_traits *tr = ggml_get_type_traits(t);
    // GGML_PREC_HIGH: F16 and BF16 weights meet the f32 activations themselves
    const bool f32_high = high && (t == GGML_TYPE_F16 || t == GGML_TYPE_BF16);
    const ggml_type vdt = f32_high ? GGML_TYPE_F32 : ggml_get_cpu_type_traits(t)->vec_dot_type;
    const ggml_type_traits *tv = ggml_get_type_traits(vdt);

    ggml_init_params ip = {(size_t)64 << 20, nullptr, false};
    ggml_context *ctx = ggml_init(ip);

    // weights: quantized from random floats with the reference quantizer
    ggml_tensor *a = ggml_new_tensor_4d(ctx, t, K, M, A2, A3);
    std::vector<float> af((size_t)(K * M * A2 * A3));
    for (auto &v : af) v = randn();
    const int64_t arows = M * A2 * A3;
    for (int64_t r = 0; r < arows; r++)
        tr->from_float_ref(af.data() + r * K, (char *)a->data + r * a->nb[1], K);
    std::vector<float> ad(af.size());  // dequantized weights
    for (int64_t r = 0; r < arows; r++) tr->to_float((char *)a->data + r * a->nb[1], ad.data() + r * K, K);

    // activations: logical b[k, j, i2, i3] = bl[((i3*B2 + i2)*N + j)*K + k]
    std::vector<float> bl((size_t)(K * N * B2 * B3));
    for (auto &v : bl) v = randn();
    ggml_tensor *b = nullptr;
    if (lay == B_CONTIG) {
        b = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, K, N, B2, B3);
        memcpy(b->data, bl.data(), bl.size() * sizeof(float));
    } else if (lay == B_TRANSPOSED) {  // stored [N, K, B2, B3], transposed view: nb[0] != 4
        ggml_tensor *s = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, N, K, B2, B3);
        float *p = (float *)s->data;
        for (int64_t bt = 0; bt < B2 * B3; bt++)
            for (int64_t j = 0; j < N; j++)
                for (int64_t k = 0; k < K; k++) p[(bt * K + k) * N + j] = bl[(bt * N + j) * K + k];
        b = ggml_transpose(ctx, s);
    } else {  // stored [K, B2, N, B3], permuted view swapping dims 1 and 2
        ggml_tensor *s = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, K, B2, N, B3);
        float *p = (float *)s->data;
        for (int64_t i3 = 0; i3 < B3; i3++)
            for (int64_t i2 = 0; i2 < B2; i2++)
                for (int64_t j = 0; j < N; j++)
                    memcpy(p + ((i3 * N + j) * B2 + i2) * K, &bl[((i3 * B2 + i2) * N + j) * K], K * sizeof(float));
        b = ggml_permute(ctx, s, 0, 2, 1, 3);
    }

    ggml_tensor *out = ggml_mul_mat(ctx, a, b);
    if (high) ggml_set_prec(out, GGML_PREC_HIGH);
    CHECK(out->type == GGML_TYPE_F32 && out->ne[0] == M && out->ne[1] == N && out->ne[2] == B2 && out->ne[3] == B3,
          "result shape");
    ggml_cgraph *g = ggml_new_graph(ctx);
    ggml_build_forward_expand(g, out);

    // reference: activations quantized to vec_dot_type with the reference quantizer, then dequantized
    std::vector<float> bq(bl.size());
    if (vdt == GGML_TYPE_F32) {
        bq = bl;
    } else {
        std::vector<uint8_t> tmp(ggml_row_size(vdt, K));
        std::vector<float> res(K), deq(K);
        for (size_t r = 0; r < bl.size() / K; r++) {
            if (high && uses_q8x(t, K, N, true)) {
                q8xh_values(bl.data() + r * K, bq.data() + r * K, K);
                continue;
            }
            if (!high && uses_q8x(t, K, N, false)) {
                std::vector<uint8_t> q8(ggml_row_size(GGML_TYPE_Q8_0, K));
                ggml_get_type_traits(GGML_TYPE_Q8_0)->from_float_ref(bl.data() + r * K, q8.data(), K);
                ggml_get_type_traits(GGML_TYPE_Q8_0)->to_float(q8.data(), bq.data() + r * K, K);
                continue;
            }
            tv->from_float_ref(bl.data() + r * K, tmp.data(), K);
            tv->to_float(tmp.data(), bq.data() + r * K, K);
            if (!high) continue;
            for (int64_t k = 0; k < K; k++) res[k] = bl[r * K + k] - bq[r * K + k];
            if (vdt == GGML_TYPE_Q8_K) {
                q8K_resid_values(res.data(), tmp.data(), deq.data(), K);
            } else {
                tv->from_float_ref(res.data(), tmp.data(), K);
                tv->to_float(tmp.data(), deq.data(), K);
            }
            for (int64_t k = 0; k < K; k++) bq[r * K + k] += deq[k];
        }
    }

    std::vector<float> first;
    for (int nt = 1; nt <= 4; nt++) {
        memset(out->data, 0xff, ggml_nbytes(out));  // NaN: catch unwritten outputs
        CHECK(ggml_graph_compute_with_threads(g, nt) == 0, "compute failed");
        const float *o = (const float *)out->data;
        std::vector<float> got(o, o + M * N * B2 * B3);
        if (nt == 1) {
            first = got;
            const int64_t r2 = B2 / A2, r3 = B3 / A3;
            double worst = 0;
            for (int64_t i3 = 0; i3 < B3; i3++)
                for (int64_t i2 = 0; i2 < B2; i2++)
                    for (int64_t j = 0; j < N; j++)
                        for (int64_t i = 0; i < M; i++) {
                            const float *ar = &ad[(((i3 / r3) * A2 + i2 / r2) * M + i) * K];
                            const size_t bo = (size_t)((i3 * B2 + i2) * N + j) * K;
                            double ref = 0, mag = 0, exact = 0, emag = 0;
                            for (int64_t k = 0; k < K; k++) {
                                ref += (double)ar[k] * bq[bo + k];
                                // with high the two dots are summed: bound by both parts' magnitudes
                                mag += fabs((double)ar[k] * bq[bo + k]) + (high ? fabs((double)ar[k] * bl[bo + k]) : 0.0);
                                exact += (double)ar[k] * bl[bo + k];
                                emag += fabs((double)ar[k] * bl[bo + k]);
                            }
                            const float v = got[((i3 * B2 + i2) * N + j) * M + i];
                            const double err = fabs(v - ref);
                            worst = fmax(worst, err / (mag + 1e-30));
                            CHECK(err <= 3e-6 * mag + 1e-30, "%s K=%lld M=%lld N=%lld layout %d: out[%lld,%lld,%lld,%lld]=%.8g ref %.8g",
                                  tr->name, (long long)K, (long long)M, (long long)N, (int)lay, (long long)i, (long long)j,
                                  (long long)i2, (long long)i3, v, ref);
                            // activation rounding (8-bit or half precision) bounds the total error
                            CHECK(fabs(v - exact) <= (high ? 3e-4 : 2e-2) * emag + 1e-30, "%s%s: far from the exact product",
                                  tr->name, high ? " (high precision)" : "");
                        }
            (void)worst;
        } else {
            CHECK(memcmp(first.data(), got.data(), got.size() * sizeof(float)) == 0,
                  "%s K=%lld M=%lld N=%lld: %d threads differ from 1 thread", tr->name, (long long)K, (long long)M,
                  (long long)N, nt);
        }
    }
    ggml_free(ctx);
}

int main() {
    const ggml_type types[] = {GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
                               GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,
                               GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    printf("kernels: %s\n", ggml_cpu_backend_name());
    int cases = 0;
    for (int scalar = 0; scalar <= 1; scalar++) {
        ggml_cpu_force_scalar(scalar);
        for (ggml_type t : types) {
            const int64_t bs = ggml_blck_size(t);
            const int64_t Ks[] = {bs == 1 ? 67 : bs, bs == 1 ? 256 : 3 * bs};
            for (int64_t K : Ks) {
                // mat-vec, odd mat-mat, enough rows that every thread gets a tile
                run_case(t, K, 37, 1, 1, 1, 1, 1, B_CONTIG);
                run_case(t, K, 19, 7, 1, 1, 1, 1, B_CONTIG);
                run_case(t, K, 3, 21, 1, 1, 1, 1, B_TRANSPOSED);  // few rows: split over columns
                run_case(t, K, 5, 3, 2, 1, 4, 3, B_PERMUTED);     // broadcast a over dims 2 and 3
                run_case(t, K, 33, 1, 1, 1, 2, 2, B_TRANSPOSED);  // batched mat-vec, strided b
                // GGML_PREC_HIGH: mat-vec, mat-mat across the column tiles, strided, broadcast
                run_case(t, K, 37, 1, 1, 1, 1, 1, B_CONTIG, true);
                run_case(t, K, 19, 11, 1, 1, 1, 1, B_CONTIG, true);
                run_case(t, K, 3, 21, 1, 1, 1, 1, B_TRANSPOSED, true);
                run_case(t, K, 5, 3, 2, 1, 4, 3, B_PERMUTED, true);
                // prompt batches (AMX tiles where the CPU has them): partial blocks of 16 rows and
                // columns; 101 rows are a full group of unpacked weight blocks and a partial one
                run_case(t, K, 101, 40, 1, 1, 1, 1, B_CONTIG);
                run_case(t, K, 37, 40, 1, 1, 1, 1, B_CONTIG, true);
                cases += 11;
            }
            // long rows (a mat-vec past L1, as a 7B model's down projection), the last group of four
            // blocks partial for the 32-element types (133 blocks)
            const int64_t KL = bs == 256 ? 17 * 256 : 133 * 32;
            run_case(t, KL, 37, 1, 1, 1, 1, 1, B_CONTIG);
            run_case(t, KL, 37, 1, 1, 1, 1, 1, B_CONTIG, true);
            // rows enough for a static first share and several claimed chunks of ~64 KiB each
            // (mul-mat.cpp CLAIM_BYTES): a mat-vec, and a prompt batch through the gemm kernels
            run_case(t, KL, 600, 1, 1, 1, 1, 1, B_CONTIG);
            run_case(t, KL, 300, 9, 1, 1, 1, 1, B_CONTIG, true);
            cases += 4;
        }
    }
    ggml_cpu_force_scalar(0);
    printf("%d mul_mat cases (x4 thread counts), %d failures\n", cases, g_fail);
    return g_fail ? 1 : 0;
}
