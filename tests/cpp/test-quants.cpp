// Reference kernels without Python: fp16 conversion against an exact double
// model, round-trip error of every quantizer, and every dot kernel against a
// double-precision dot of the dequantized operands.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "ggml-cpu.h"
#include "ggml-quants.h"

static int g_failures = 0;
#define CHECK(cond, ...)                                   \
    do {                                                   \
        if (!(cond)) {                                     \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                  \
            fprintf(stderr, "\n");                         \
            g_failures++;                                  \
        }                                                  \
    } while (0)

// fp16 value of bits h, computed in double from the definition.
static double half_value(uint16_t h) {
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    const double v = e == 0 ? std::ldexp((double)m, -24) : std::ldexp(1.0 + m / 1024.0, e - 15);
    return (h & 0x8000) ? -v : v;
}

static void test_fp16() {
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = ggml_fp16_to_fp32((ggml_fp16_t)h);
        const bool nan = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff);
        if (nan) {
            CHECK(std::isnan(f), "fp16 %04x should be nan", h);
            CHECK(std::isnan(ggml_fp16_to_fp32(ggml_fp32_to_fp16(f))), "nan round trip %04x", h);
            continue;
        }
        if (((h >> 10) & 0x1f) == 0x1f) {
            CHECK(std::isinf(f) && std::signbit(f) == bool(h & 0x8000), "fp16 %04x should be inf", h);
        } else {
            CHECK((double)f == half_value((uint16_t)h) && std::signbit(f) == bool(h & 0x8000), "fp16 %04x", h);
        }
        CHECK(ggml_fp32_to_fp16(f) == h, "fp16 round trip %04x", h);
        // the midpoint to the next value rounds to the even one of the two
        if ((h & 0x7fff) < 0x7bff) {
            const double mid = (half_value((uint16_t)h) + half_value((uint16_t)(h + 1))) / 2;
            const uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
            CHECK(ggml_fp32_to_fp16((float)mid) == even, "tie above %04x", h);
        }
    }
    CHECK(ggml_fp32_to_fp16(65520.0f) == 0x7c00, "65520 -> inf");
    CHECK(ggml_fp32_to_fp16(65519.0f) == 0x7bff, "65519 -> 65504");
    CHECK(ggml_fp32_to_bf16(1.0f + 1.0f / 256) == 0x3f80, "bf16 tie to even");
    CHECK(ggml_fp32_to_bf16(1.0f + 3.0f / 256) == 0x3f82, "bf16 tie to even (up)");
    CHECK(std::isnan(ggml_bf16_to_fp32(ggml_fp32_to_bf16(NAN))), "bf16 nan");
}

static double rel_rms(const std::vector<float> &a, const std::vector<float> &b) {
    double e = 0, s = 0;
    for (size_t i = 0; i < a.size(); i++) {
        e += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        s += double(b[i]) * b[i];
    }
    return std::sqrt(e / s);
}

static void test_types() {
    struct tcase {
        ggml_type type;
        double bound;  // relative rms round-trip error of Gaussian data
    };
    const tcase cases[] = {
        {GGML_TYPE_F32, 0},      {GGML_TYPE_F16, 1e-3},   {GGML_TYPE_BF16, 5e-3},  {GGML_TYPE_Q4_0, 0.11},
        {GGML_TYPE_Q4_1, 0.10},  {GGML_TYPE_Q5_0, 0.055}, {GGML_TYPE_Q5_1, 0.05},  {GGML_TYPE_Q8_0, 0.008},
        {GGML_TYPE_Q8_1, 0.008}, {GGML_TYPE_Q2_K, 0.30},  {GGML_TYPE_Q3_K, 0.16},  {GGML_TYPE_Q4_K, 0.078},
        {GGML_TYPE_Q5_K, 0.04},  {GGML_TYPE_Q6_K, 0.019}, {GGML_TYPE_Q8_K, 0.008},
    };
    std::mt19937 rng(42);
    std::normal_distribution<float> gauss;
    const int64_t n = 4096;
    std::vector<float> x(n), a(n), back(n), wf(n), af(n);
    for (const tcase &c : cases) {
        const ggml_type_traits *tr = ggml_get_type_traits(c.type);
        const ggml_cpu_type_traits *ct = ggml_get_cpu_type_traits(c.type);
        CHECK(tr && tr->to_float && tr->from_float_ref && ct && ct->from_float, "%d kernels", (int)c.type);
        if (!tr || !tr->to_float || !tr->from_float_ref) continue;
        for (auto &v : x) v = gauss(rng) * 0.7f;
        for (auto &v : a) v = gauss(rng) * 2.0f;
        std::vector<uint8_t> q(ggml_row_size(c.type, n));
        tr->from_float_ref(x.data(), q.data(), n);
        tr->to_float(q.data(), back.data(), n);
        const double err = rel_rms(back, x);
        CHECK(err <= c.bound, "%s round trip error %.5f > %.5f", tr->name, err, c.bound);

        if (!ct->vec_dot_ref) continue;
        const ggml_type_traits *ta = ggml_get_type_traits(ct->vec_dot_type);
        std::vector<uint8_t> qa(ggml_row_size(ct->vec_dot_type, n));
        ta->from_float_ref(a.data(), qa.data(), n);
        tr->to_float(q.data(), wf.data(), n);
        ta->to_float(qa.data(), af.data(), n);
        double exact = 0, mag = 0;
        for (int64_t i = 0; i < n; i++) {
            exact += double(wf[i]) * af[i];
            mag += std::fabs(double(wf[i]) * af[i]);
        }
        float got = 0, fast = 0;
        ct->vec_dot_ref(n, &got, q.data(), qa.data());
        ct->vec_dot(n, &fast, q.data(), qa.data());
        CHECK(std::fabs(got - exact) <= 2e-6 * mag, "%s dot %.7g vs %.7g", tr->name, got, exact);
        CHECK(std::fabs(fast - got) <= 1e-5 * mag, "%s fast dot %.7g vs ref %.7g", tr->name, fast, got);
    }
}

int main() {
    test_fp16();
    test_types();
    if (g_failures) {
        fprintf(stderr, "%d failure(s)\n", g_failures);
        return 1;
    }
    printf("test-quants: ok\n");
    return 0;
}
