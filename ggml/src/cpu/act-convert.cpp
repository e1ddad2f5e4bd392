// Conversion of activation rows for the weight products, with the optional
// residual pass of GGML_PREC_HIGH (ops.h).
#include "ops.h"
#include "vec-dot-simd.h"

extern "C" void ggml_convert_act(const float *x, void *out, int64_t k, ggml_from_float_t from_float, enum ggml_type vdt,
                                 size_t vrow, bool high, float *scratch) {
    from_float(x, out, k);
    if (!high) return;
    ggml_get_type_traits(vdt)->to_float(out, scratch, k);
    for (int64_t i = 0; i < k; i++) scratch[i] = x[i] - scratch[i];
    const ggml_from_resid_t resid = ggml_cpu_from_resid(vdt);
    if (resid) resid(scratch, out, (char *)out + vrow, k);
    else from_float(scratch, (char *)out + vrow, k);
}

namespace {
// x rounded to type T and widened back, in L1-sized chunks
template <ggml_type T>
void round_act(const float *x, void *vy, int64_t k) {
    static const ggml_from_float_t narrow = ggml_get_cpu_type_traits(T)->from_float;
    static const ggml_to_float_t widen = ggml_get_type_traits(T)->to_float;
    constexpr int64_t CHUNK = 512;
    uint16_t buf[CHUNK];
    float *y = (float *)vy;
    for (int64_t i = 0; i < k; i += CHUNK) {
        const int64_t n = k - i < CHUNK ? k - i : CHUNK;
        narrow(x + i, buf, n);
        widen(buf, y + i, n);
    }
}
}  // namespace

extern "C" ggml_from_float_t ggml_round_act(ggml_type type) {
    switch (type) {
        case GGML_TYPE_F16: return round_act<GGML_TYPE_F16>;
        case GGML_TYPE_BF16: return round_act<GGML_TYPE_BF16>;
        default: return nullptr;
    }
}
