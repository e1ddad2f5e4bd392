// Conversion of activation rows for the weight products, with the optional
// residual pass of GGML_PREC_HIGH (ops.h).
#include "ops.h"

extern "C" void ggml_convert_act(const float *x, void *out, int64_t k, ggml_from_float_t from_float,
                                 ggml_to_float_t to_float, size_t vrow, bool high, float *scratch) {
    from_float(x, out, k);
    if (!high) return;
    to_float(out, scratch, k);
    for (int64_t i = 0; i < k; i++) scratch[i] = x[i] - scratch[i];
    from_float(scratch, (char *)out + vrow, k);
}
