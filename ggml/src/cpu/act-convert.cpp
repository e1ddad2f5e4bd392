// Conversion of activation rows for the weight products, with the optional
// residual pass of GGML_PREC_HIGH (ops.h).
#include <string.h>

#include "ggml-impl.h"
#include "ops.h"
#include "vec-dot-simd.h"

extern "C" void ggml_convert_act(const float *x, void *out, int64_t k, ggml_from_float_t from_float,
                                 ggml_to_float_t to_float, size_t vrow, bool high, float *scratch) {
    from_float(x, out, k);
    if (!high) return;
    to_float(out, scratch, k);
    for (int64_t i = 0; i < k; i++) scratch[i] = x[i] - scratch[i];
    from_float(scratch, (char *)out + vrow, k);
}

extern "C" void ggml_q8x_to_float(const void *x, float *y, int64_t k) {
    if (k % 32) ggml_abort("q8x_to_float: k=%lld is not a multiple of 32", (long long)k);
    const char *src = (const char *)x;
    for (int64_t blk = 0; blk < k / 32; blk++) {
        const char *grp = src + (blk / 4) * GGML_Q8X_GROUP;  // qs[128], then dy[32]: 8 copies per block
        const int8_t *qs = (const int8_t *)grp + 32 * (blk % 4);
        float d;
        memcpy(&d, grp + 128 + sizeof(float) * 8 * (blk % 4), sizeof(d));
        for (int i = 0; i < 32; i++) y[32 * blk + i] = d * (float)qs[i];
    }
}
