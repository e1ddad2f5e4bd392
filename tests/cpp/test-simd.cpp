// Every SIMD kernel family this CPU can run (AVX2 and AVX-512 separately,
// whatever dispatch picked) against the portable scalar reference: dot
// products on random data over many lengths, and activation quantizers
// byte for byte.
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <random>
#include <vector>

#include "ggml-cpu.h"
#include "ggml-quants.h"
#include "cpu-features.h"
#include "gemm-amx.h"
#include "guarded.h"
#include "ops.h"
#include "vec-dot-simd.h"
#include "vec-exp.h"

static int g_fail = 0;
#define CHECK(cond, ...)                                         \
    do {                                                         \
        if (!(cond)) {                                           \
            g_fail++;                                            \
            if (g_fail < 30) {                                   \
                fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
                fprintf(stderr, __VA_ARGS__);                    \
                fprintf(stderr, "\n");                           \
            }                                                    \
        }                                                        \
    } while (0)

static std::mt19937 rng(1234);

static std::vector<float> randn(int64_t n, float scale = 1.0f) {
    std::normal_distribution<float> nd(0.0f, scale);
    std::vector<float> v(n);
    for (auto &x : v) x = nd(rng);
    return v;
}

// A CPU kernel table (ggml-cpu.h); formats come from the core table.
struct table {
    ggml_cpu_type_traits t[GGML_TYPE_COUNT];
};

static const ggml_type_traits &core(ggml_type t) { return *ggml_get_type_traits(t); }

// A table holding only the reference kernels.
static table ref_table() {
    table tab;
    memset(&tab, 0, sizeof(tab));
    ggml_cpu_force_scalar(1);
    for (int i = 0; i < GGML_TYPE_COUNT; i++) {
        const ggml_cpu_type_traits *tr = ggml_get_cpu_type_traits((ggml_type)i);
        if (tr) tab.t[i] = *tr;
    }
    ggml_cpu_force_scalar(0);
    return tab;
}

static const ggml_type k_weight_types[] = {
    GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_Q2_K,
    GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_F32,
};

// Quantize with the reference quantizer of type t.
static std::vector<uint8_t> quantize_ref(const table &ref, ggml_type t, const std::vector<float> &x) {
    std::vector<uint8_t> q(ggml_row_size(t, (int64_t)x.size()) + 64);
    core(t).from_float_ref(x.data(), q.data(), (int64_t)x.size());
    return q;
}

static std::vector<float> dequant(const table &ref, ggml_type t, const std::vector<uint8_t> &q, int64_t n) {
    std::vector<float> y(n);
    core(t).to_float(q.data(), y.data(), n);
    return y;
}

static void test_dots(const char *family, const table &ref, const table &fast) {
    int n_simd = 0;
    for (ggml_type t : k_weight_types) {
        const ggml_cpu_type_traits &R = ref.t[t], &F = fast.t[t];
        const ggml_type_traits &C = core(t);
        if (F.vec_dot == R.vec_dot_ref) {
            printf("  %-6s %-5s: no SIMD kernel (reference)\n", family, C.name);
            continue;
        }
        n_simd++;
        const int64_t bs = C.blck_size;
        std::vector<int64_t> lens;
        if (bs == 1) {
            for (int64_t n = 1; n <= 80; n++) lens.push_back(n);
            for (int64_t n : {127, 128, 129, 255, 256, 1000, 4096, 4099, 11008}) lens.push_back(n);
        } else {
            const int64_t nbs[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 31, 33, 64, 128};
            for (int64_t nb : nbs)
                if (nb * bs <= 16384) lens.push_back(nb * bs);
        }
        int cases = 0;
        double worst = 0;
        for (int64_t n : lens) {
            for (int rep = 0; rep < 3; rep++) {
                const std::vector<float> xf = randn(n, rep == 2 ? 1e-3f : 1.0f), yf = randn(n, rep == 1 ? 30.0f : 1.0f);
                const std::vector<uint8_t> xq = quantize_ref(ref, t, xf), yq = quantize_ref(ref, R.vec_dot_type, yf);
                float s_ref = 0, s_fast = 0;
                R.vec_dot_ref(n, &s_ref, xq.data(), yq.data());
                F.vec_dot(n, &s_fast, xq.data(), yq.data());
                // error bound from the magnitude of the terms (float accumulation order differs)
                const std::vector<float> xd = dequant(ref, t, xq, n), yd = dequant(ref, R.vec_dot_type, yq, n);
                double mag = 0;
                for (int64_t i = 0; i < n; i++) mag += fabs((double)xd[i] * yd[i]);
                const double err = fabs((double)s_ref - s_fast), tol = 2e-6 * mag + 1e-30;
                if (mag > 0) worst = fmax(worst, err / mag);
                CHECK(err <= tol, "%s %s n=%lld rep=%d: ref %.9g simd %.9g (|err| %.3g > tol %.3g)", family, C.name,
                      (long long)n, rep, s_ref, s_fast, err, tol);
                cases++;
                // the GGML_PREC_HIGH kernel against f32 activations (F16, BF16)
                CHECK((F.vec_dot_f32 != nullptr) == (R.vec_dot_f32 != nullptr), "%s %s: vec_dot_f32 present in one table only",
                      family, C.name);
                if (F.vec_dot_f32 && R.vec_dot_f32 && F.vec_dot_f32 != R.vec_dot_f32) {
                    float h_ref = 0, h_fast = 0;
                    R.vec_dot_f32(n, &h_ref, xq.data(), yf.data());
                    F.vec_dot_f32(n, &h_fast, xq.data(), yf.data());
                    double hmag = 0;
                    for (int64_t i = 0; i < n; i++) hmag += fabs((double)xd[i] * yf[i]);
                    CHECK(fabs((double)h_ref - h_fast) <= 2e-6 * hmag + 1e-30, "%s %s vec_dot_f32 n=%lld: ref %.9g simd %.9g",
                          family, C.name, (long long)n, h_ref, h_fast);
                    cases++;
                }
            }
        }
        // q8_0 weights may hold -128 (valid on disk, never produced by the quantizer)
        if (t == GGML_TYPE_Q8_0) {
            std::vector<block_q8_0> xb(8), yb(8);
            std::uniform_int_distribution<int> bi(-128, 127), yi(-127, 127);
            for (int b = 0; b < 8; b++) {
                xb[b].d = ggml_fp32_to_fp16(0.01f * (b + 1));
                yb[b].d = ggml_fp32_to_fp16(0.02f);
                for (int j = 0; j < 32; j++) { xb[b].qs[j] = (int8_t)(j % 3 ? bi(rng) : -128); yb[b].qs[j] = (int8_t)yi(rng); }
            }
            float s_ref, s_fast;
            R.vec_dot_ref(256, &s_ref, xb.data(), yb.data());
            F.vec_dot(256, &s_fast, xb.data(), yb.data());
            double mag = 0;  // the tolerance against sum |x y|, as above (s_ref itself may be a cancellation)
            for (int b = 0; b < 8; b++)
                for (int j = 0; j < 32; j++) mag += fabs((double)ggml_fp16_to_fp32(xb[b].d) * xb[b].qs[j] * ggml_fp16_to_fp32(yb[b].d) * yb[b].qs[j]);
            CHECK(fabs((double)s_ref - s_fast) <= 2e-6 * mag + 1e-30, "%s q8_0 with -128: ref %g simd %g", family, s_ref, s_fast);
        }
        printf("  %-6s %-5s: %d cases, worst |err|/sum|x*y| = %.2e\n", family, C.name, cases, worst);
    }
    CHECK(n_simd > 0, "%s: no SIMD kernels installed", family);
}

// q8_K's residual row as GGML_PREC_HIGH stores it, written out here from the
// spec: the grid d/128 of the row q's blocks, d' = d / 128, int8 quants
// rounded half away from zero, bsums.
static void q8K_resid_spec(const float *r, const uint8_t *q, uint8_t *y, int64_t n) {
    const size_t bs = ggml_row_size(GGML_TYPE_Q8_K, 256);
    for (int64_t b = 0; b < n / 256; b++) {
        float d;
        memcpy(&d, q + b * bs, sizeof d);
        const float d2 = d / 128.0f, id = d2 >= FLT_MIN ? 128.0f / d : 0.0f;  // no residual below FLT_MIN
        uint8_t *blk = y + b * bs;
        memcpy(blk, &d2, sizeof d2);
        int8_t *qs = (int8_t *)(blk + sizeof(float));
        for (int i = 0; i < 256; i++) {
            const float v = r[256 * b + i] * id;
            qs[i] = (int8_t)fminf(127.0f, fmaxf(-127.0f, v < 0 ? -floorf(-v + 0.5f) : floorf(v + 0.5f)));
        }
        for (int k = 0; k < 16; k++) {
            int s = 0;
            for (int i = 0; i < 16; i++) s += qs[16 * k + i];
            const int16_t s16 = (int16_t)s;
            memcpy(blk + sizeof(float) + 256 + 2 * k, &s16, 2);
        }
    }
}

// The q8_K residual converters (reference and SIMD) against the spec, byte for byte.
static void test_resid_q8K(const char *family, ggml_from_resid_t f) {
    int cases = 0;
    for (int64_t nb : {1, 2, 5, 16, 43}) {
        const int64_t n = 256 * nb;
        for (int rep = 0; rep < 4; rep++) {
            // tiny blocks: a step below FLT_MIN (no residual), one just above it
            std::vector<float> x = randn(n, rep == 1 ? 1e4f : rep == 3 ? 1e-35f : 1.0f);
            if (rep == 3 && nb > 1)
                for (int64_t i = 256; i < 512; i++) x[i] *= 1e3f;
            if (rep == 2)
                for (int64_t i = 0; i < 256; i++) x[i] = 0.0f;  // an all-zero block: d = 0
            const size_t row = ggml_row_size(GGML_TYPE_Q8_K, n);
            std::vector<uint8_t> q(row), a(row), b(row);
            std::vector<float> xd(n), res(n);
            core(GGML_TYPE_Q8_K).from_float_ref(x.data(), q.data(), n);
            core(GGML_TYPE_Q8_K).to_float(q.data(), xd.data(), n);
            for (int64_t i = 0; i < n; i++) res[i] = x[i] - xd[i];
            q8K_resid_spec(res.data(), q.data(), a.data(), n);
            f(res.data(), q.data(), b.data(), n);
            CHECK(memcmp(a.data(), b.data(), row) == 0, "%s q8_K residual n=%lld rep=%d: blocks differ", family, (long long)n, rep);
            for (int64_t i = 0; i < nb; i++) {  // the grid holds the residual: |q2| <= 64
                const int8_t *qs = (const int8_t *)(b.data() + i * 292 + 4);
                for (int j = 0; j < 256; j++) CHECK(qs[j] >= -64 && qs[j] <= 64, "%s q8_K residual quant %d", family, qs[j]);
            }
            cases++;
        }
    }
    printf("  %-6s q8_K residual: %d cases byte-identical to the spec\n", family, cases);
}

// The fused GGML_PREC_HIGH kernels: one weight row against an activation row
// and its residual (vrow bytes after it, q8_K's on its grid d/128) = the sum of
// the two reference dots.
static void test_dot_resid(const char *family, const table &ref, const ggml_vec_dot2_t *d2) {
    int n_types = 0;
    for (ggml_type t : k_weight_types) {
        if (!d2[t]) continue;
        n_types++;
        const ggml_cpu_type_traits &R = ref.t[t];
        const int64_t bs = core(t).blck_size;
        int cases = 0;
        for (int64_t nb : {1, 2, 3, 5, 16, 17, 43}) {
            const int64_t n = nb * (bs == 1 ? 64 : bs) + (bs == 1 ? nb % 7 : 0);
            const std::vector<float> xf = randn(n), yf = randn(n, nb % 2 ? 30.0f : 1.0f);
            const std::vector<uint8_t> xq = quantize_ref(ref, t, xf);
            // the row, then its residual at an odd-sized stride
            const size_t vrow = ggml_row_size(R.vec_dot_type, n) + 8;
            std::vector<uint8_t> y(2 * vrow + 64);
            core(R.vec_dot_type).from_float_ref(yf.data(), y.data(), n);
            const std::vector<float> yd = dequant(ref, R.vec_dot_type, y, n);
            std::vector<float> res(n);
            for (int64_t i = 0; i < n; i++) res[i] = yf[i] - yd[i];
            if (R.vec_dot_type == GGML_TYPE_Q8_K) q8K_resid_spec(res.data(), y.data(), y.data() + vrow, n);
            else core(R.vec_dot_type).from_float_ref(res.data(), y.data() + vrow, n);
            float s0 = 0, s1 = 0, got = 0;
            R.vec_dot_ref(n, &s0, xq.data(), y.data());
            R.vec_dot_ref(n, &s1, xq.data(), y.data() + vrow);
            d2[t](n, &got, xq.data(), y.data(), vrow);
            const std::vector<float> xd = dequant(ref, t, xq, n);
            double mag = 0;
            for (int64_t i = 0; i < n; i++) mag += fabs((double)xd[i] * yf[i]);
            const double want = (double)s0 + s1, err = fabs(want - got);
            CHECK(err <= 2e-6 * mag + 1e-30, "%s dot_resid %s n=%lld: ref %.9g fused %.9g", family, core(t).name, (long long)n, want, got);
            cases++;
        }
        printf("  %-6s %-5s: fused row + residual, %d cases\n", family, core(t).name, cases);
    }
    CHECK(n_types > 0, "%s: no fused residual kernels", family);
}

static void test_quantizers(const char *family, const table &ref, const table &fast) {
    const ggml_type types[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q8_1, GGML_TYPE_Q8_K, GGML_TYPE_F16, GGML_TYPE_BF16};
    for (ggml_type t : types) {
        const ggml_cpu_type_traits &F = fast.t[t];
        const ggml_type_traits &C = core(t);
        if (F.from_float == C.from_float_ref) {
            printf("  %-6s %-5s: quantizer is the reference\n", family, C.name);
            continue;
        }
        const int64_t bs = C.blck_size == 1 ? 1 : C.blck_size;
        int cases = 0;
        for (int64_t nb : {1, 2, 3, 7, 16, 17}) {
            const int64_t n = nb * (bs == 1 ? 37 : bs);
            for (int rep = 0; rep < 4; rep++) {
                std::vector<float> x = randn(n, rep == 1 ? 1e4f : 1.0f);
                if (rep == 2) {  // exact .5 ties after scaling (amax 127 -> scale 1) and an all-zero block
                    for (int64_t i = 0; i < n; i++) x[i] = (float)((int)(i % 200) - 100) + 0.5f;
                    for (int64_t i = 0; i < n; i += 32) x[i] = (i / 32) % 2 ? 127.0f : -127.0f;
                    for (int64_t i = 0; i < std::min<int64_t>(n, bs); i++) if (nb > 1) x[i] = 0.0f;
                }
                if (rep == 3 && bs == 1) {  // subnormal, huge, inf, nan for the float converters
                    const float sp[] = {1e-6f, -3e-8f, 70000.0f, -1e30f, INFINITY, -INFINITY, 0.0f, -0.0f, 65504.0f, 65520.0f};
                    for (int64_t i = 0; i < n; i++) x[i] = sp[i % 10];
                }
                std::vector<uint8_t> a(ggml_row_size(t, n)), b(ggml_row_size(t, n));
                C.from_float_ref(x.data(), a.data(), n);
                F.from_float(x.data(), b.data(), n);
                CHECK(memcmp(a.data(), b.data(), a.size()) == 0, "%s quantize %s n=%lld rep=%d: blocks differ", family, C.name,
                      (long long)n, rep);
                cases++;
            }
        }
        printf("  %-6s %-5s: quantizer, %d cases byte-identical\n", family, C.name, cases);
    }
}

// The one-row kernels on rows in a family's own order (dot_own, dot_own_hi
// on rows rewritten by dot_pack, dot_pack_hi): for 1..8 columns at a stride
// larger than a row, every output has the bits of dot (dot_hi) on the rows as
// they are (which test_q8x checks against the reference), nothing between
// the outputs is written, and no kernel reads past a weight row.
static void test_q8x_own(const char *family, const table &ref, const ggml_q8x_kernels *q) {
    for (int hi = 0; hi < 2; hi++) {
        const ggml_q8x_dot_t *own = hi ? q->dot_own_hi : q->dot_own, *dot = hi ? q->dot_hi : q->dot;
        const ggml_q8x_pack_t *pack = hi ? q->dot_pack_hi : q->dot_pack;
        const ggml_q8x_quantize_t quant = hi ? q->quantize_hi : q->quantize;
        for (int ti = 0; ti < GGML_TYPE_COUNT; ti++) {
            if (!own[ti]) continue;
            const ggml_type t = (ggml_type)ti;
            CHECK(dot[ti] && pack[ti], "%s %s %s: an own-row kernel without the plain one or its pack", family, hi ? "q8xh" : "q8x", core(t).name);
            if (!dot[ti] || !pack[ti]) continue;
            int cases = 0;
            for (int64_t nb : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 18, 48}) {
                const int64_t n = 32 * nb;
                if (n % ggml_blck_size(t)) continue;
                const std::vector<uint8_t> xq = quantize_ref(ref, t, randn(n, nb % 3 ? 1.0f : 1e-3f));
                const guarded gx(xq.data(), ggml_row_size(t, n));
                for (int nc = 1; nc <= 8; nc++) {
                    const size_t ys = (hi ? ggml_q8xh_row_size(n) : ggml_q8x_row_size(n)) + 64;
                    std::vector<uint8_t> y(ys * nc);
                    for (int c = 0; c < nc; c++) quant(randn(n, c == 2 ? 30.0f : 1.0f).data(), y.data() + c * ys, n);
                    std::vector<uint8_t> yp(y);
                    for (int c = 0; c < nc; c++) pack[t](yp.data() + c * ys, n);
                    std::vector<float> want(2 * nc, -1.0f), got(2 * nc, -1.0f);
                    dot[t](n, xq.data(), y.data(), ys, want.data(), 2 * sizeof(float), nc);
                    own[t](n, gx.data, yp.data(), ys, got.data(), 2 * sizeof(float), nc);
                    for (int c = 0; c < nc; c++, cases++) {
                        CHECK(memcmp(&want[2 * c], &got[2 * c], sizeof(float)) == 0, "%s %s %s n=%lld nc=%d col %d: own rows %.9g != %.9g", family,
                              hi ? "q8xh" : "q8x", core(t).name, (long long)n, nc, c, got[2 * c], want[2 * c]);
                        CHECK(got[2 * c + 1] == -1.0f, "%s %s own rows: wrote between outputs", family, core(t).name);
                    }
                }
            }
            printf("  %-6s %-4s %-5s: %d outputs on own rows equal to the plain kernel's\n", family, hi ? "q8xh" : "q8x", core(t).name, cases);
        }
    }
}

// The q8x activation layout and its multi-column dot kernels (used by
// MUL_MAT): the quantizer must give exactly q8_0's quants and scales, and each
// of nc columns must match the reference dot with q8_0/q8_1 activations.
static void test_q8x(const char *family, const table &ref, const ggml_q8x_kernels *q) {
    // quantizer vs the reference q8_0 quantizer, incl. the zero padding of the last group
    int qcases = 0;
    for (int64_t nb : {1, 2, 3, 4, 5, 7, 18, 48}) {
        const int64_t n = 32 * nb;
        for (int rep = 0; rep < 3; rep++) {
            std::vector<float> x = randn(n, rep == 1 ? 1e4f : 1.0f);
            if (rep == 2) {  // .5 ties after scaling, and an all-zero block
                for (int64_t i = 0; i < n; i++) x[i] = (float)((int)(i % 200) - 100) + 0.5f;
                for (int64_t i = 0; i < n; i += 32) x[i] = (i / 32) % 2 ? 127.0f : -127.0f;
                for (int64_t i = 0; i < 32; i++) x[i] = 0.0f;
            }
            std::vector<block_q8_0> r((size_t)nb);
            core(GGML_TYPE_Q8_0).from_float_ref(x.data(), r.data(), n);
            std::vector<uint8_t> y(ggml_q8x_row_size(n), 0xAB);
            q->quantize(x.data(), y.data(), n);
            for (int64_t b = 0; b < (nb + 3) / 4 * 4; b++) {
                const uint8_t *g = y.data() + (b / 4) * GGML_Q8X_GROUP;
                const int bl = (int)(b % 4);
                const int8_t *qa = (const int8_t *)g + 16 * bl, *qb = qa + 64;
                const float *dy = (const float *)(g + 128) + 4 * bl, *sd = (const float *)(g + 256) + 4 * bl;
                const int32_t *ns = (const int32_t *)(g + 192) + 4 * bl;
                if (b >= nb) {  // padding
                    bool zero = true;
                    for (int j = 0; j < 16; j++) zero = zero && qa[j] == 0 && qb[j] == 0;
                    for (int j = 0; j < 4; j++) zero = zero && dy[j] == 0.0f && sd[j] == 0.0f && ns[j] == 0;
                    CHECK(zero, "%s q8x n=%lld: padding block %lld is not zero", family, (long long)n, (long long)b);
                    continue;
                }
                const float d = ggml_fp16_to_fp32(r[b].d);
                bool same = memcmp(qa, r[b].qs, 16) == 0 && memcmp(qb, r[b].qs + 16, 16) == 0;
                for (int l = 0; l < 4; l++) {
                    int ls = 0, hs = 0;  // lane l's eight q; eight of half l % 2 (elements 8 (l / 2) on)
                    for (int i = 0; i < 4; i++) ls += r[b].qs[4 * l + i] + r[b].qs[16 + 4 * l + i];
                    for (int i = 0; i < 8; i++) hs += r[b].qs[16 * (l % 2) + 8 * (l / 2) + i];
                    same = same && dy[l] == d && ns[l] == -ls && sd[l] == d * (float)hs;
                }
                CHECK(same, "%s q8x n=%lld rep=%d block %lld differs from q8_0", family, (long long)n, rep, (long long)b);
            }
            qcases++;
        }
    }
    printf("  %-6s q8x  : quantizer, %d cases identical to q8_0\n", family, qcases);

    for (int ti = 0; ti < GGML_TYPE_COUNT; ti++) {
        if (!q->dot[ti]) continue;
        const ggml_type t = (ggml_type)ti;
        const ggml_cpu_type_traits &R = ref.t[t];
        const ggml_type_traits &C = core(t);
        int cases = 0;
        double worst = 0;
        // The K-quants (sub-blocks of 32 as q4_1-like blocks) meet q8x rows, which
        // hold exactly the q8_0 values: the reference is the float64 dot of the
        // dequantized weights and q8_0 activations, not their q8_K vec_dot.
        const bool kq = R.vec_dot_type == GGML_TYPE_Q8_K;
        for (int64_t nb : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 18, 48}) {
            const int64_t n = 32 * nb;
            if (n % ggml_blck_size(t)) continue;
            for (int nc = 1; nc <= 8; nc++) {
                const int rep = (int)(nb + nc) % 3;
                const std::vector<float> xf = randn(n, rep == 2 ? 1e-3f : 1.0f);
                const std::vector<uint8_t> xq = quantize_ref(ref, t, xf);
                const size_t ys = ggml_q8x_row_size(n) + 64;  // a stride larger than the row
                std::vector<uint8_t> yx(ys * nc);
                std::vector<std::vector<float>> yf(nc);
                for (int c = 0; c < nc; c++) {
                    yf[c] = randn(n, rep == 1 ? 30.0f : 1.0f);
                    q->quantize(yf[c].data(), yx.data() + c * ys, n);
                }
                std::vector<float> out(2 * nc + 1, -1.0f);
                q->dot[t](n, xq.data(), yx.data(), ys, out.data(), 2 * sizeof(float), nc);
                const std::vector<float> xd = dequant(ref, t, xq, n);
                for (int c = 0; c < nc; c++) {
                    const ggml_type yt = kq ? GGML_TYPE_Q8_0 : R.vec_dot_type;
                    const std::vector<uint8_t> yq = quantize_ref(ref, yt, yf[c]);
                    const std::vector<float> yd = dequant(ref, yt, yq, n);
                    double mag = 0, exact = 0;
                    for (int64_t i = 0; i < n; i++) mag += fabs((double)xd[i] * yd[i]), exact += (double)xd[i] * yd[i];
                    float s_ref = (float)exact;
                    if (!kq) R.vec_dot_ref(n, &s_ref, xq.data(), yq.data());
                    const double err = fabs((double)s_ref - out[2 * c]), tol = 2e-6 * mag + 1e-30;
                    if (mag > 0) worst = fmax(worst, err / mag);
                    CHECK(err <= tol, "%s q8x %s n=%lld nc=%d col %d: ref %.9g simd %.9g (|err| %.3g > tol %.3g)", family,
                          C.name, (long long)n, nc, c, s_ref, out[2 * c], err, tol);
                    cases++;
                }
                for (int c = 0; c < nc; c++) CHECK(out[2 * c + 1] == -1.0f, "%s q8x %s: wrote between outputs", family, C.name);
                if (nc == 1) {  // the row ending at an unreadable page: no kernel reads past it (a read faults)
                    const guarded gx(xq.data(), ggml_row_size(t, n));  // the row alone (xq has padding)
                    float at_end = 0;
                    q->dot[t](n, gx.data, yx.data(), ys, &at_end, 0, 1);
                    CHECK(memcmp(&at_end, &out[0], sizeof(float)) == 0, "%s q8x %s n=%lld: the row at a page end %.9g != %.9g", family,
                          C.name, (long long)n, at_end, out[0]);
                    if (q->dot_hi[t]) {
                        std::vector<uint8_t> yh(ggml_q8xh_row_size(n));
                        q->quantize_hi(yf[0].data(), yh.data(), n);
                        float hi[2] = {0, 0};
                        q->dot_hi[t](n, xq.data(), yh.data(), 0, &hi[0], 0, 1);
                        q->dot_hi[t](n, gx.data, yh.data(), 0, &hi[1], 0, 1);
                        CHECK(memcmp(&hi[0], &hi[1], sizeof(float)) == 0, "%s q8xh %s n=%lld: the row at a page end", family, C.name,
                              (long long)n);
                    }
                    if (q->unpack[t]) {  // into two 64-byte aligned rows
                        const size_t usz = ggml_q8x_unpacked_size(n);
                        std::vector<uint8_t> ubuf(2 * usz + 64);
                        uint8_t *u = ubuf.data() + (64 - (uintptr_t)ubuf.data() % 64) % 64;
                        q->unpack[t](n, xq.data(), u);
                        q->unpack[t](n, gx.data, u + usz);
                        CHECK(memcmp(u, u + usz, usz) == 0, "%s q8x %s n=%lld: unpacking the row at a page end", family, C.name, (long long)n);
                    }
                }
                // the same column alone gives the same bits (tiling never changes a result)
                float alone = 0;
                q->dot[t](n, xq.data(), yx.data() + (nc - 1) * ys, ys, &alone, 0, 1);
                CHECK(memcmp(&alone, &out[2 * (nc - 1)], sizeof(float)) == 0, "%s q8x %s n=%lld: column %d alone %.9g != in a tile of %d %.9g",
                      family, C.name, (long long)n, nc - 1, alone, nc, out[2 * (nc - 1)]);
            }
        }
        printf("  %-6s q8x %-5s: %d cases, worst |err|/sum|x*y| = %.2e\n", family, C.name, cases, worst);
    }
    test_q8x_own(family, ref, q);

    // F16 rows x F16 rows through the same multi-column interface
    const ggml_cpu_type_traits &R = ref.t[GGML_TYPE_F16];
    const ggml_type_traits &C = core(GGML_TYPE_F16);
    int cases = 0;
    for (int64_t n : {1, 5, 15, 16, 17, 64, 100, 512, 577}) {
        for (int nc = 1; nc <= 8; nc++) {
            const std::vector<float> xf = randn(n);
            std::vector<ggml_fp16_t> x(n), y((size_t)(n + 3) * nc);
            std::vector<float> yr((size_t)(n + 3) * nc);
            C.from_float_ref(xf.data(), x.data(), n);
            const size_t ys = sizeof(float) * (size_t)(n + 3);
            std::vector<float> out(nc, -1.0f);
            for (int c = 0; c < nc; c++) {
                const std::vector<float> yf = randn(n);
                C.from_float_ref(yf.data(), y.data() + (size_t)(n + 3) * c, n);
                ggml_round_act(GGML_TYPE_F16)(yf.data(), yr.data() + (size_t)(n + 3) * c, n);
                for (int64_t i = 0; i < n; i++)  // exactly the fp16 values, widened
                    CHECK(yr[(size_t)(n + 3) * c + i] == ggml_fp16_to_fp32(y[(size_t)(n + 3) * c + i]), "%s round_act n=%lld: element %lld", family,
                          (long long)n, (long long)i);
            }
            q->dot_f16(n, x.data(), yr.data(), ys, out.data(), sizeof(float), nc);
            for (int c = 0; c < nc; c++) {
                const ggml_fp16_t *yc = y.data() + (size_t)(n + 3) * c;
                float s_ref = 0;
                R.vec_dot_ref(n, &s_ref, x.data(), yc);
                double mag = 0;
                for (int64_t i = 0; i < n; i++) mag += fabs((double)ggml_fp16_to_fp32(x[i]) * ggml_fp16_to_fp32(yc[i]));
                CHECK(fabs((double)s_ref - out[c]) <= 2e-6 * mag + 1e-30, "%s q8x f16 n=%lld nc=%d col %d: ref %.9g simd %.9g", family,
                      (long long)n, nc, c, s_ref, out[c]);
                float one = -1.0f;  // the same bits as the column alone (mul-mat's tiles depend on the thread count)
                q->dot_f16(n, x.data(), yr.data() + (size_t)(n + 3) * c, ys, &one, sizeof(float), 1);
                CHECK(memcmp(&one, &out[c], sizeof(float)) == 0, "%s q8x f16 n=%lld nc=%d col %d: %.9g alone, %.9g among %d", family,
                      (long long)n, nc, c, one, out[c], nc);
                cases++;
            }
        }
    }
    printf("  %-6s multi f16 : %d cases\n", family, cases);
}

// The register-tiled prompt kernels (gemm, gemm_hi on rows unpacked by
// unpack, run in chunks of 1-3 groups): every element of a
// GGML_Q8X_GEMM_ROWS x nc tile, unpacked rows and columns at strides larger
// than a row, has the bits of the one-row
// kernel (dot, dot_hi) run on that packed row and column alone (which
// test_q8x and test-mul-mat check against the reference), the gemm's
// columns rewritten by the family's gemm_pack where it has one, and nothing
// between the outputs is written.
static void test_q8x_gemm(const char *family, const table &ref, const ggml_q8x_kernels *q) {
    const int R = GGML_Q8X_GEMM_ROWS;
    for (int hi = 0; hi < 2; hi++) {
        const ggml_q8x_gemm_t *gemm = hi ? q->gemm_hi : q->gemm;
        const ggml_q8x_dot_t *dot = hi ? q->dot_hi : q->dot;
        const ggml_q8x_quantize_t quant = hi ? q->quantize_hi : q->quantize;
        const ggml_q8x_pack_t *pack = hi ? q->gemm_pack_hi : q->gemm_pack;
        for (int ti = 0; ti < GGML_TYPE_COUNT; ti++) {
            if (!gemm[ti]) continue;
            const ggml_type t = (ggml_type)ti;
            CHECK(dot[ti] && q->unpack[ti], "%s gemm %s without its one-row kernel or unpacker", family, core(t).name);
            if (!dot[ti] || !q->unpack[ti]) continue;
            int cases = 0;
            for (int64_t nb : {1, 3, 4, 5, 9, 16, 18, 40, 48, 72}) {
                const int64_t n = 32 * nb;
                if (n % ggml_blck_size(t)) continue;
                const size_t xs = ggml_row_size(t, n) + 40;  // a stride larger than the row
                const size_t ys = (hi ? ggml_q8xh_row_size(n) : ggml_q8x_row_size(n)) + 64;
                std::vector<uint8_t> x(xs * R);
                for (int r = 0; r < R; r++) {
                    const std::vector<uint8_t> xq = quantize_ref(ref, t, randn(n, r == 1 ? 1e-3f : 1.0f));
                    memcpy(x.data() + r * xs, xq.data(), ggml_row_size(t, n));
                }
                const size_t us = ggml_q8x_unpacked_size(n) + 128;  // 64-byte multiple, larger than a row
                std::vector<uint8_t> ubytes(us * R + 64);
                uint8_t *u = ubytes.data() + (64 - (uintptr_t)ubytes.data() % 64) % 64;
                for (int r = 0; r < R; r++) q->unpack[t](n, x.data() + r * xs, u + r * us);
                alignas(64) float acc[16 * GGML_Q8X_GEMM_ROWS * GGML_Q8X_GEMM_COLS];
                for (int nc = 1; nc <= GGML_Q8X_GEMM_COLS; nc++) {
                    std::vector<uint8_t> y(ys * nc);
                    for (int c = 0; c < nc; c++) quant(randn(n, c == 2 ? 30.0f : 1.0f).data(), y.data() + c * ys, n);
                    std::vector<uint8_t> yg(y);  // the gemm's rows, in the family's own order where it has one
                    if (pack[t])
                        for (int c = 0; c < nc; c++) pack[t](yg.data() + c * ys, n);
                    const int os = 2 * R + 1;  // floats from one output column to the next
                    std::vector<float> out((size_t)os * nc, -1.0f);
                    // in chunks of `chunk` groups (the accumulators kept in acc between calls)
                    const int64_t ng = (n + 127) / 128, chunk = 1 + (nb + nc) % 3;
                    for (int64_t g0 = 0; g0 < ng; g0 += chunk) {
                        const int64_t gn = std::min(chunk, ng - g0);
                        const int flags = (g0 == 0 ? GGML_Q8X_ACC_FIRST : 0) | (g0 + gn == ng ? GGML_Q8X_ACC_LAST : 0);
                        gemm[t](gn, u + g0 * 256, us, yg.data() + g0 * (ys - 64) / ng, ys, acc, out.data(), os * sizeof(float), nc, flags);
                    }
                    for (int c = 0; c < nc; c++) {
                        for (int r = 0; r < R; r++) {
                            float alone = 0;
                            dot[t](n, x.data() + r * xs, y.data() + c * ys, ys, &alone, 0, 1);
                            const float got = out[(size_t)os * c + r];
                            CHECK(memcmp(&alone, &got, sizeof(float)) == 0, "%s gemm%s %s n=%lld nc=%d: row %d col %d %.9g != alone %.9g",
                                  family, hi ? "_hi" : "", core(t).name, (long long)n, nc, r, c, got, alone);
                            cases++;
                        }
                        for (int r = R; r < os; r++)
                            CHECK(out[(size_t)os * c + r] == -1.0f, "%s gemm %s: wrote between outputs", family, core(t).name);
                    }
                }
            }
            printf("  %-6s gemm%-3s %-5s: %d elements equal to the one-row kernel%s\n", family, hi ? "_hi" : "", core(t).name, cases,
                   pack[t] ? " (packed rows)" : "");
        }
    }
}

// The softmax exponentials (vec-exp.h): each y[i] = exp(x[i] - m) within a
// few ulp of the float64 exp (results below the normal range may flush to
// 0), exp(-inf) = 0 exactly, a NaN stays NaN, the returned sum is the sum of
// the written values, and nothing past the row is written.
static void test_exp_sum(const char *family, ggml_exp_sum_t f) {
    int cases = 0;
    double worst = 0;
    for (int64_t n : {1, 5, 8, 9, 15, 16, 17, 31, 100, 1000}) {
        for (int rep = 0; rep < 3; rep++) {
            std::vector<float> x = randn(n, rep == 2 ? 30.0f : 5.0f);
            if (rep == 1)  // masked positions and the far tail of the range
                for (int64_t i = 0; i < n; i++) x[i] = i % 3 == 0 ? -INFINITY : i % 3 == 1 ? -86.0f - (float)(i % 20) : x[i];
            float m = -INFINITY;
            for (float v : x) m = fmaxf(m, v);
            if (m == -INFINITY) m = 0.0f;
            std::vector<float> y(x);
            y.resize((size_t)n + 16, 7.0f);  // sentinels past the row
            const double sum = f(n, y.data(), m);
            double exact = 0, written = 0;
            for (int64_t i = 0; i < n; i++) {
                const float d = x[i] - m;  // the kernels' argument: the difference rounded to float
                const double e = exp((double)d);
                exact += e;
                written += y[i];
                const double err = fabs(y[i] - e);
                if (e > 1.2e-38) worst = fmax(worst, err / e);
                CHECK(err <= 6e-7 * e || (e < 1.2e-38 && err < 1.2e-38), "%s exp_sum n=%lld: exp(%.9g) = %.9g, float64 %.9g", family,
                      (long long)n, (double)d, y[i], e);
                if (x[i] == -INFINITY) CHECK(y[i] == 0.0f, "%s exp_sum: exp(-inf) = %g", family, y[i]);
            }
            for (size_t i = (size_t)n; i < y.size(); i++) CHECK(y[i] == 7.0f, "%s exp_sum n=%lld: wrote past the row", family, (long long)n);
            CHECK(fabs(sum - written) <= 1e-12 * written, "%s exp_sum n=%lld: sum %.17g, of the written values %.17g", family, (long long)n,
                  sum, written);
            CHECK(fabs(sum - exact) <= 1e-6 * exact, "%s exp_sum n=%lld: sum %.17g, float64 %.17g", family, (long long)n, sum, exact);
            cases++;
        }
    }
    std::vector<float> nan_row = {0.0f, NAN, -1.0f, 2.0f, NAN, 0.5f, -3.0f, 1.0f, 0.0f, NAN};
    f((int64_t)nan_row.size(), nan_row.data(), NAN);  // a row whose max is NaN
    for (float v : nan_row) CHECK(v != v, "%s exp_sum: a NaN row gave %g", family, v);
    printf("  %-6s exp  : %d rows, worst relative error %.2e\n", family, cases, worst);
}

int main() {
    const table ref = ref_table();
    printf("dispatch picked: %s\n", ggml_cpu_backend_name());
    int families = 0;

    // What dispatch installed (any CPU, any architecture).
    table best;
    memcpy(&best, &ref, sizeof(best));
    for (int i = 0; i < GGML_TYPE_COUNT; i++) {
        const ggml_cpu_type_traits *tr = ggml_get_cpu_type_traits((ggml_type)i);
        if (tr) best.t[i] = *tr;
    }
    test_exp_sum("ref", ggml_exp_sum_ref);
    test_resid_q8K("ref", quantize_row_q8_K_resid_ref);
    test_exp_sum("best", ggml_cpu_exp_sum());
    if (strcmp(ggml_cpu_backend_name(), "scalar") != 0) {
        test_dots("best", ref, best);
        if (ggml_cpu_q8x()) test_q8x("best", ref, ggml_cpu_q8x());
        if (ggml_cpu_q8x()) test_q8x_gemm("best", ref, ggml_cpu_q8x());
        test_quantizers("best", ref, best);
        families++;
    }

#ifdef GGML_SIMD_X86
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
                      __builtin_cpu_supports("bmi2");
    const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512vnni");
    // dispatch must pick the widest family the CPU has, capped by PINFER_CPU (cpu-type-traits.cpp)
    const char *cap = getenv("PINFER_CPU");
    const int allow = !cap || !*cap || strcmp(cap, "amx") == 0 || strcmp(cap, "avx512") == 0 ? 3
                      : strcmp(cap, "avxvnni") == 0                ? 2
                      : strcmp(cap, "avx2") == 0                   ? 1
                                                                   : 0;
    const char *want = avx512 && allow >= 3 ? "avx512" : avx2 && allow >= 1 ? "avx2" : "scalar";
    CHECK(strcmp(ggml_cpu_backend_name(), want) == 0, "dispatch picked %s, expected %s (PINFER_CPU=%s)", ggml_cpu_backend_name(),
          want, cap ? cap : "");
    CHECK((strcmp(want, "scalar") != 0) == (ggml_cpu_q8x() != nullptr), "q8x kernels %s with family %s",
          ggml_cpu_q8x() ? "installed" : "missing", want);
    {  // vendor and family as the kernel reports them (/proc/cpuinfo)
        FILE *ci = fopen("/proc/cpuinfo", "r");
        if (ci) {
            char line[256], vendor[64] = "";
            int family = -1;
            while (fgets(line, sizeof line, ci) && (family < 0 || !vendor[0])) {
                if (!vendor[0]) sscanf(line, "vendor_id : %63s", vendor);
                if (family < 0) sscanf(line, "cpu family : %d", &family);
            }
            fclose(ci);
            const ggml_cpu_features &f = *ggml_cpu_get_features();
            CHECK(f.amd == (strcmp(vendor, "AuthenticAMD") == 0) && f.family == family, "cpu vendor %s family %d, detected amd=%d family %d",
                  vendor, family, (int)f.amd, f.family);
            const int q4 = ggml_cpu_prefetch_ahead(GGML_TYPE_Q4_0, false), q4h = ggml_cpu_prefetch_ahead(GGML_TYPE_Q4_0, true);
            printf("cpu: %s family %d (0x%X); weight prefetch: Q4_0 %d, Q8_0 %d, F16 %d bytes ahead, into %s; q8xh kernels: %s\n", vendor,
                   family, (unsigned)family, q4 & ~GGML_PREFETCH_FLAGS, ggml_cpu_prefetch_ahead(GGML_TYPE_Q8_0, false) & ~GGML_PREFETCH_FLAGS,
                   ggml_cpu_prefetch_ahead(GGML_TYPE_F16, false) & ~GGML_PREFETCH_FLAGS, q4 & GGML_PREFETCH_L2 ? "L2" : "L1",
                   q4h & GGML_PREFETCH_NEAR ? "also into L1 nearer" : "the same");
            // whole lines ahead (which leaves bits 0 and 1 free for the flags), at most 16 KiB; the near
            // pass into L1 only beside a far one into L2, and nearer than it
            for (int t = 0; t < GGML_TYPE_COUNT; t++) {
                if (!ggml_get_type_traits((ggml_type)t)) continue;
                for (bool hi : {false, true}) {
                    const int a = ggml_cpu_prefetch_ahead((ggml_type)t, hi), d = a & ~GGML_PREFETCH_FLAGS;
                    CHECK(d > 0 && d % 64 == 0 && d <= 16384, "prefetch distance %d of %s", d, ggml_type_name((ggml_type)t));
                    CHECK(!(a & GGML_PREFETCH_NEAR) || ((a & GGML_PREFETCH_L2) && d > GGML_PREFETCH_NEAR_BYTES),
                          "near prefetch of %s: flags %d, distance %d", ggml_type_name((ggml_type)t), a & GGML_PREFETCH_FLAGS, d);
                }
            }
        }
    }
    // the AMX tiles only at the amx level (the default), on a CPU with them, once the OS grants them
    const bool tiles = avx512 && allow >= 3 && (!cap || !*cap || strcmp(cap, "amx") == 0) && ggml_cpu_amx_request();
    CHECK(tiles == (ggml_cpu_amx() != nullptr), "AMX kernels %s (PINFER_CPU=%s)", ggml_cpu_amx() ? "installed" : "missing",
          cap ? cap : "");
    if (avx2) {
        table t2 = ref;
        ggml_cpu_set_kernels_avx2(t2.t);
        test_dots("avx2", ref, t2);
        test_quantizers("avx2", ref, t2);
        test_q8x("avx2", ref, ggml_cpu_q8x_avx2());
        test_q8x_gemm("avx2", ref, ggml_cpu_q8x_avx2());
        std::vector<ggml_vec_dot2_t> d2(GGML_TYPE_COUNT, nullptr);
        ggml_cpu_set_dot_resid_avx2(d2.data());
        test_dot_resid("avx2", ref, d2.data());
        test_resid_q8K("avx2", ggml_quantize_resid_q8_K_avx2);
        test_exp_sum("avx2", ggml_exp_sum_avx2);
        families++;
        if (ggml_cpu_get_features()->avxvnni) {
            table tv = t2;
            ggml_cpu_set_kernels_avxvnni(tv.t);
            test_dots("avxvnni", ref, tv);
            test_q8x("avxvnni", ref, ggml_cpu_q8x_avxvnni());
            test_q8x_gemm("avxvnni", ref, ggml_cpu_q8x_avxvnni());
            std::vector<ggml_vec_dot2_t> dv(GGML_TYPE_COUNT, nullptr);
            ggml_cpu_set_dot_resid_avxvnni(dv.data());
            test_dot_resid("avxvnni", ref, dv.data());
            families++;
        } else {
            printf("SKIP avxvnni kernels: CPU lacks AVX-VNNI\n");
        }
    } else {
        printf("SKIP avx2 family: CPU lacks AVX2/FMA/F16C\n");
    }
    if (avx512) {
        table t5 = ref;
        ggml_cpu_set_kernels_avx512(t5.t, __builtin_cpu_supports("avx512bf16"), false);
        test_dots("avx512", ref, t5);
        test_quantizers("avx512", ref, t5);
        test_q8x("avx512", ref, ggml_cpu_q8x_avx512());
        test_q8x_gemm("avx512", ref, ggml_cpu_q8x_avx512());
        std::vector<ggml_vec_dot2_t> d2(GGML_TYPE_COUNT, nullptr);
        ggml_cpu_set_dot_resid_avx512(d2.data(), false);
        test_dot_resid("avx512", ref, d2.data());
        test_exp_sum("avx512", ggml_exp_sum_avx512);
        families++;
        if (__builtin_cpu_supports("avx512vbmi")) {
            table tv = ref;
            ggml_cpu_set_kernels_avx512(tv.t, __builtin_cpu_supports("avx512bf16"), true);
            test_dots("vbmi", ref, tv);
            std::vector<ggml_vec_dot2_t> dv(GGML_TYPE_COUNT, nullptr);
            ggml_cpu_set_dot_resid_avx512(dv.data(), true);
            test_dot_resid("vbmi", ref, dv.data());
            test_q8x("vbmi", ref, ggml_cpu_q8x_avx512vbmi());
            test_q8x_gemm("vbmi", ref, ggml_cpu_q8x_avx512vbmi());
            families++;
        } else {
            printf("SKIP avx512vbmi kernels: CPU lacks AVX-512 VBMI\n");
        }
    } else {
        printf("SKIP avx512 family: CPU lacks AVX-512 F/BW/VL/DQ/VNNI\n");
    }
#endif
    printf("%d kernel families tested, %d failures\n", families, g_fail);
    return g_fail ? 1 : 0;
}
