// Portable reference kernels of every tensor type: fp16/bf16 conversion,
// dequantization, quantization and scalar dot products.
//
// These are the single source of truth: every SIMD kernel is tested against
// them, and the legacy quantizers (Q4_0 .. Q8_0) are bit-exact with the
// reference quantizers of ggml / the gguf Python package, so files written by
// either decode and re-encode identically.
#include <float.h>
#include <math.h>
#include <string.h>

#include "ggml-quants.h"

// Bit-exactness with the reference quantizers needs x*id + c to round twice,
// as written: forbid fusing it into one FMA (GCC contracts by default).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

// ---------------------------------------------------------------------------
// fp16 / bf16
// ---------------------------------------------------------------------------

namespace {

inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// Exact fp16 -> fp32 by bit manipulation (used to build the lookup table).
float half_to_float_bits(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    const uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000 | (mant << 13));  // inf, nan (payload kept)
    if (exp != 0) return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));  // rebias 15 -> 127
    if (mant == 0) return bits_f32(sign);
    // Subnormal: normalise the mantissa; value = mant * 2^-24.
    int e = -1;
    do {
        mant <<= 1;
        e++;
    } while (!(mant & 0x400));
    return bits_f32(sign | ((uint32_t)(112 - e) << 23) | ((mant & 0x3ff) << 13));
}

struct fp16_table {
    float v[65536];
    fp16_table() {
        for (uint32_t i = 0; i < 65536; i++) v[i] = half_to_float_bits((uint16_t)i);
    }
};

const float *fp16_lut() {
    static const fp16_table t;
    return t.v;
}
// Filled before main() so the hot path never waits on the guarded static above.
const float *const g_fp16 = fp16_lut();

inline float fp16_to_f32(ggml_fp16_t h) { return g_fp16[h]; }

// fp32 -> fp16 with round-to-nearest-even, exact for subnormals, inf and nan.
inline ggml_fp16_t f32_to_fp16(float f) {
    const uint32_t x = f32_bits(f);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    const uint32_t ax = x & 0x7fffffff;
    if (ax >= 0x7f800000) {  // inf stays inf; nan stays a quiet nan with its top payload bits
        return sign | 0x7c00 | (ax > 0x7f800000 ? 0x200 | ((ax >> 13) & 0x3ff) : 0);
    }
    if (ax >= 0x477ff000) return sign | 0x7c00;  // >= 65520 (halfway above 65504): inf
    if (ax >= 0x38800000) {                      // normal half: rebias and round off 13 bits
        uint32_t r = ax - 0x38000000;
        r += 0xfff + ((r >> 13) & 1);
        return sign | (uint16_t)(r >> 13);
    }
    // Subnormal half: units of 2^-24. Below 2^-25 (or exactly it: tie to even 0) gives 0.
    const int e = (int)(ax >> 23);
    if (e < 102) return sign;
    const uint32_t m = (ax & 0x7fffff) | 0x800000;
    const int shift = 126 - e;  // 14..24
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    return sign | (uint16_t)q;
}

inline float bf16_to_f32(ggml_bf16_t h) { return bits_f32((uint32_t)h << 16); }

inline ggml_bf16_t f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffff) > 0x7f800000) return (ggml_bf16_t)((x >> 16) | 0x40);  // nan: force quiet
    x += 0x7fff + ((x >> 16) & 1);  // round to nearest even (no overflow: x <= 0xff800000)
    return (ggml_bf16_t)(x >> 16);
}

// Round half away from zero, like C roundf; nan maps to 0 and huge values are
// clamped so the conversion to int is always defined.
inline int nearest_int(float v) {
    if (!(v == v)) return 0;
    if (v > 1e9f) v = 1e9f;
    if (v < -1e9f) v = -1e9f;
    return (int)roundf(v);
}

inline int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

}  // namespace

extern "C" {

float ggml_fp16_to_fp32(ggml_fp16_t h) { return fp16_to_f32(h); }
ggml_fp16_t ggml_fp32_to_fp16(float f) { return f32_to_fp16(f); }
float ggml_bf16_to_fp32(ggml_bf16_t h) { return bf16_to_f32(h); }
ggml_bf16_t ggml_fp32_to_bf16(float f) { return f32_to_bf16(f); }

// ---------------------------------------------------------------------------
// Legacy 32-element blocks. The quantizers follow the reference algorithms of
// ggml exactly (the same float operations in the same order).
// ---------------------------------------------------------------------------

void quantize_row_q4_0_ref(const float *x, void *vy, int64_t n) {
    block_q4_0 *y = (block_q4_0 *)vy;
    for (int64_t i = 0; i < n / QK4_0; i++, x += QK4_0) {
        // The value of largest magnitude maps to -8, using the full signed range.
        float amax = 0, max = 0;
        for (int j = 0; j < QK4_0; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / -8;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            const float v0 = x[j] * id + 8.5f, v1 = x[j + QK4_0 / 2] * id + 8.5f;
            // truncation of a value >= 0.5 (nan -> 0), capped at 15
            const int q0 = v0 >= 15 ? 15 : (v0 > 0 ? (int)v0 : 0);
            const int q1 = v1 >= 15 ? 15 : (v1 > 0 ? (int)v1 : 0);
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void dequantize_row_q4_0(const void *vx, float *y, int64_t n) {
    const block_q4_0 *x = (const block_q4_0 *)vx;
    for (int64_t i = 0; i < n / QK4_0; i++, y += QK4_0) {
        const float d = fp16_to_f32(x[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            y[j] = d * (float)((x[i].qs[j] & 0xf) - 8);
            y[j + QK4_0 / 2] = d * (float)((x[i].qs[j] >> 4) - 8);
        }
    }
}

void quantize_row_q4_1_ref(const float *x, void *vy, int64_t n) {
    block_q4_1 *y = (block_q4_1 *)vy;
    for (int64_t i = 0; i < n / QK4_1; i++, x += QK4_1) {
        float min = x[0], max = x[0];
        for (int j = 1; j < QK4_1; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / 15;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        y[i].m = f32_to_fp16(min);
        for (int j = 0; j < QK4_1 / 2; j++) {
            const float v0 = (x[j] - min) * id + 0.5f, v1 = (x[j + QK4_1 / 2] - min) * id + 0.5f;
            const int q0 = v0 >= 15 ? 15 : (v0 > 0 ? (int)v0 : 0);
            const int q1 = v1 >= 15 ? 15 : (v1 > 0 ? (int)v1 : 0);
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void dequantize_row_q4_1(const void *vx, float *y, int64_t n) {
    const block_q4_1 *x = (const block_q4_1 *)vx;
    for (int64_t i = 0; i < n / QK4_1; i++, y += QK4_1) {
        const float d = fp16_to_f32(x[i].d), m = fp16_to_f32(x[i].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            y[j] = d * (float)(x[i].qs[j] & 0xf) + m;
            y[j + QK4_1 / 2] = d * (float)(x[i].qs[j] >> 4) + m;
        }
    }
}

// Q5: the low 4 bits of element j are packed like Q4 (j < 16 in the low
// nibble of qs[j], j >= 16 in the high nibble of qs[j-16]); the 5th bit of
// element j is bit j of the little-endian 32-bit word qh.
void quantize_row_q5_0_ref(const float *x, void *vy, int64_t n) {
    block_q5_0 *y = (block_q5_0 *)vy;
    for (int64_t i = 0; i < n / QK5_0; i++, x += QK5_0) {
        float amax = 0, max = 0;
        for (int j = 0; j < QK5_0; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / -16;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_0 / 2; j++) {
            const float v0 = x[j] * id + 16.5f, v1 = x[j + QK5_0 / 2] * id + 16.5f;
            const int q0 = v0 >= 31 ? 31 : (v0 > 0 ? (int)v0 : 0);
            const int q1 = v1 >= 31 ? 31 : (v1 > 0 ? (int)v1 : 0);
            y[i].qs[j] = (uint8_t)((q0 & 0xf) | ((q1 & 0xf) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + QK5_0 / 2);
        }
        for (int b = 0; b < 4; b++) y[i].qh[b] = (uint8_t)(qh >> (8 * b));
    }
}

static inline uint32_t load_qh(const uint8_t *qh) {
    return (uint32_t)qh[0] | ((uint32_t)qh[1] << 8) | ((uint32_t)qh[2] << 16) | ((uint32_t)qh[3] << 24);
}

void dequantize_row_q5_0(const void *vx, float *y, int64_t n) {
    const block_q5_0 *x = (const block_q5_0 *)vx;
    for (int64_t i = 0; i < n / QK5_0; i++, y += QK5_0) {
        const float d = fp16_to_f32(x[i].d);
        const uint32_t qh = load_qh(x[i].qh);
        for (int j = 0; j < QK5_0 / 2; j++) {
            const int q0 = (x[i].qs[j] & 0xf) | (((qh >> j) & 1) << 4);
            const int q1 = (x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
            y[j] = d * (float)(q0 - 16);
            y[j + QK5_0 / 2] = d * (float)(q1 - 16);
        }
    }
}

void quantize_row_q5_1_ref(const float *x, void *vy, int64_t n) {
    block_q5_1 *y = (block_q5_1 *)vy;
    for (int64_t i = 0; i < n / QK5_1; i++, x += QK5_1) {
        float min = x[0], max = x[0];
        for (int j = 1; j < QK5_1; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / 31;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        y[i].m = f32_to_fp16(min);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_1 / 2; j++) {
            const float v0 = (x[j] - min) * id + 0.5f, v1 = (x[j + QK5_1 / 2] - min) * id + 0.5f;
            const int q0 = v0 >= 31 ? 31 : (v0 > 0 ? (int)v0 : 0);
            const int q1 = v1 >= 31 ? 31 : (v1 > 0 ? (int)v1 : 0);
            y[i].qs[j] = (uint8_t)((q0 & 0xf) | ((q1 & 0xf) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + QK5_1 / 2);
        }
        for (int b = 0; b < 4; b++) y[i].qh[b] = (uint8_t)(qh >> (8 * b));
    }
}

void dequantize_row_q5_1(const void *vx, float *y, int64_t n) {
    const block_q5_1 *x = (const block_q5_1 *)vx;
    for (int64_t i = 0; i < n / QK5_1; i++, y += QK5_1) {
        const float d = fp16_to_f32(x[i].d), m = fp16_to_f32(x[i].m);
        const uint32_t qh = load_qh(x[i].qh);
        for (int j = 0; j < QK5_1 / 2; j++) {
            const int q0 = (x[i].qs[j] & 0xf) | (((qh >> j) & 1) << 4);
            const int q1 = (x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
            y[j] = d * (float)q0 + m;
            y[j + QK5_1 / 2] = d * (float)q1 + m;
        }
    }
}

void quantize_row_q8_0_ref(const float *x, void *vy, int64_t n) {
    block_q8_0 *y = (block_q8_0 *)vy;
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        float amax = 0;
        for (int j = 0; j < QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        for (int j = 0; j < QK8_0; j++) y[i].qs[j] = (int8_t)clampi(nearest_int(x[j] * id), -127, 127);
    }
}

void dequantize_row_q8_0(const void *vx, float *y, int64_t n) {
    const block_q8_0 *x = (const block_q8_0 *)vx;
    for (int64_t i = 0; i < n / QK8_0; i++, y += QK8_0) {
        const float d = fp16_to_f32(x[i].d);
        for (int j = 0; j < QK8_0; j++) y[j] = d * (float)x[i].qs[j];
    }
}

// Q8_1 is the activation format for Q4_1/Q5_1: like Q8_0 plus s = d*sum(qs),
// which lets a kernel apply the weight's offset m with one multiply.
void quantize_row_q8_1_ref(const float *x, void *vy, int64_t n) {
    block_q8_1 *y = (block_q8_1 *)vy;
    for (int64_t i = 0; i < n / QK8_1; i++, x += QK8_1) {
        float amax = 0;
        for (int j = 0; j < QK8_1; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < QK8_1; j++) {
            const int q = clampi(nearest_int(x[j] * id), -127, 127);
            y[i].qs[j] = (int8_t)q;
            sum += q;
        }
        y[i].d = f32_to_fp16(d);
        y[i].s = f32_to_fp16(d * (float)sum);
    }
}

void dequantize_row_q8_1(const void *vx, float *y, int64_t n) {
    const block_q8_1 *x = (const block_q8_1 *)vx;
    for (int64_t i = 0; i < n / QK8_1; i++, y += QK8_1) {
        const float d = fp16_to_f32(x[i].d);
        for (int j = 0; j < QK8_1; j++) y[j] = d * (float)x[i].qs[j];
    }
}

// Q8_K is the activation format for the K-quants: a float scale, and bsums[k]
// = sum of quants 16k..16k+15 so kernels can apply sub-block minimums cheaply.
// One block of x at scale d (id = its inverse, or 0).
static void q8_K_block(const float *x, float d, float id, block_q8_K *y) {
    y->d = d;
    for (int j = 0; j < QK_K; j++) y->qs[j] = (int8_t)clampi(nearest_int(x[j] * id), -127, 127);
    for (int k = 0; k < QK_K / 16; k++) {
        int s = 0;
        for (int j = 0; j < 16; j++) s += y->qs[16 * k + j];
        y->bsums[k] = (int16_t)s;
    }
}

void quantize_row_q8_K_ref(const float *x, void *vy, int64_t n) {
    block_q8_K *y = (block_q8_K *)vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float amax = 0;
        for (int j = 0; j < QK_K; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127;
        q8_K_block(x, d, d != 0 ? 1.0f / d : 0.0f, &y[i]);
    }
}

void quantize_row_q8_K_resid_ref(const float *r, const void *vq, void *vy, int64_t n) { ggml_q8_K_resid_rows(r, vq, vy, n, q8_K_block); }

void dequantize_row_q8_K(const void *vx, float *y, int64_t n) {
    const block_q8_K *x = (const block_q8_K *)vx;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        for (int j = 0; j < QK_K; j++) y[j] = x[i].d * (float)x[i].qs[j];
    }
}

}  // extern "C"

// ---------------------------------------------------------------------------
// K-quants: 256-element super-blocks of 16 or 32-element sub-blocks. Each
// sub-block has its own integer scale (and minimum) relative to the
// super-block's fp16 d (and dmin).
//
// Quantizer, in three steps:
//  1. per sub-block, search the float scale (and minimum) that minimises the
//     squared error: try a grid of inverse scales around the one that spans
//     the value range, round to integers for each, then solve the least-squares
//     scale (and offset) for those integers and keep the best;
//  2. quantize the sub-block scales (and minimums) against the super-block
//     d (and dmin), which are rounded to fp16 first;
//  3. re-quantize every element with its final, quantized scale (and minimum)
//     so the integers match what the decoder will actually apply.
// ---------------------------------------------------------------------------

namespace {

constexpr int kGridSteps = 12;      // candidates each side of the spanning scale
constexpr float kGridStep = 0.08f;  // in units of one quantization level

// Symmetric: x ~ s*q with q in [-nmax, nmax-1]. Returns s (may be negative:
// the sign picks which end of the asymmetric integer range the peak uses).
float search_scale_sym(const float *x, int n, int nmax) {
    float amax = 0, max = 0;
    for (int j = 0; j < n; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    if (amax == 0) return 0;
    float best_s = max / -(float)nmax, best = -1;
    for (int sign = -1; sign <= 1; sign += 2) {
        for (int k = -kGridSteps; k <= kGridSteps; k++) {
            const float levels = (sign < 0 ? (float)nmax : (float)(nmax - 1)) + kGridStep * (float)k;
            if (levels <= 0.5f) continue;
            const float iscale = (float)sign * levels / max;
            double sxq = 0, sqq = 0;
            for (int j = 0; j < n; j++) {
                const int q = clampi(nearest_int(x[j] * iscale), -nmax, nmax - 1);
                sxq += (double)x[j] * q;
                sqq += (double)q * q;
            }
            if (sqq == 0) continue;
            // error = sum x^2 - sxq^2/sqq at the least-squares scale sxq/sqq
            const double gain = sxq * sxq / sqq;
            if (gain > best) {
                best = gain;
                best_s = (float)(sxq / sqq);
            }
        }
    }
    return best_s;
}

// Affine: x ~ a*q - b with q in [0, nmax], a >= 0, b >= 0 (the decoder can
// only subtract a minimum). Returns a and b.
void search_scale_min(const float *x, int n, int nmax, float *a_out, float *b_out) {
    float min = x[0], max = x[0];
    for (int j = 1; j < n; j++) {
        min = fminf(min, x[j]);
        max = fmaxf(max, x[j]);
    }
    if (min > 0) min = 0;
    if (!(max > min)) {  // constant non-positive sub-block (or nan)
        *a_out = 0;
        *b_out = min == min ? -min : 0;
        return;
    }
    float best_a = (max - min) / (float)nmax, best_b = -min;
    double best_err = -1;
    for (int k = -kGridSteps; k <= kGridSteps; k++) {
        const float levels = (float)nmax + kGridStep * (float)k;
        if (levels <= 0.5f) continue;
        const float iscale = levels / (max - min);
        double sq = 0, sqq = 0, sx = 0, sxq = 0;
        for (int j = 0; j < n; j++) {
            const int q = clampi(nearest_int((x[j] - min) * iscale), 0, nmax);
            sq += q;
            sqq += (double)q * q;
            sx += x[j];
            sxq += (double)x[j] * q;
        }
        // least squares for x ~ a*q + c, with c <= 0 enforced
        const double det = n * sqq - sq * sq;
        if (det <= 0) continue;
        double a = (n * sxq - sq * sx) / det;
        double c = (sqq * sx - sq * sxq) / det;
        if (c > 0) {
            c = 0;
            a = sxq / sqq;
        }
        if (a <= 0) continue;
        double err = 0;
        for (int j = 0; j < n; j++) {
            const int q = clampi(nearest_int((x[j] - min) * iscale), 0, nmax);
            const double e = a * q + c - x[j];
            err += e * e;
        }
        if (best_err < 0 || err < best_err) {
            best_err = err;
            best_a = (float)a;
            best_b = (float)-c;
        }
    }
    *a_out = best_a;
    *b_out = best_b;
}

// The fp16 super-block scale d for which v/d is about smax: the nearest fp16
// to v/smax, moved up an ulp at a time while v/d would round past smax (only
// happens for subnormal d, where fp16 is coarse), and never 0 for nonzero v,
// so tiny data keeps the smallest scale the format has instead of vanishing.
ggml_fp16_t fp16_scale(float v, int smax) {
    if (v == 0 || v != v) return 0;
    ggml_fp16_t h = f32_to_fp16(v / (float)smax);
    while ((h & 0x7fff) < 0x7bff) {
        const float d = fp16_to_f32(h);
        if (d != 0 && fabsf(v / d) < (float)smax + 0.5f) break;
        h++;  // one ulp up in magnitude, for either sign
    }
    return h;
}

// Steps 1-3 for affine types: nsub = QK_K/sub sub-blocks with scales d*sc[k]
// and minimums dmin*m[k] (sc, m in [0, smax]), integers q in [0, nmax].
void quantize_affine_superblock(const float *x, int sub, int nmax, int smax, ggml_fp16_t *d16,
                                ggml_fp16_t *dmin16, uint8_t *sc, uint8_t *m, uint8_t *q) {
    const int nsub = QK_K / sub;
    float a[QK_K / 16], b[QK_K / 16];
    float amax = 0, bmax = 0;
    for (int k = 0; k < nsub; k++) {
        search_scale_min(x + k * sub, sub, nmax, &a[k], &b[k]);
        amax = fmaxf(amax, a[k]);
        bmax = fmaxf(bmax, b[k]);
    }
    *d16 = fp16_scale(amax, smax);
    *dmin16 = fp16_scale(bmax, smax);
    const float d = fp16_to_f32(*d16), dmin = fp16_to_f32(*dmin16);
    for (int k = 0; k < nsub; k++) {
        const float *xs = x + k * sub;
        sc[k] = (uint8_t)(d > 0 ? clampi(nearest_int(a[k] / d), 0, smax) : 0);
        if (sc[k] == 0) {
            // no usable scale (a tiny sub-block next to large ones): the block
            // decodes to -dmin*m, so make that its mean
            float mean = 0;
            for (int j = 0; j < sub; j++) mean += xs[j];
            mean /= (float)sub;
            m[k] = (uint8_t)(dmin > 0 ? clampi(nearest_int(-mean / dmin), 0, smax) : 0);
            memset(q + k * sub, 0, (size_t)sub);
            continue;
        }
        m[k] = (uint8_t)(dmin > 0 ? clampi(nearest_int(b[k] / dmin), 0, smax) : 0);
        const float is = 1.0f / (d * (float)sc[k]), minv = dmin * (float)m[k];
        for (int j = 0; j < sub; j++) q[k * sub + j] = (uint8_t)clampi(nearest_int((xs[j] + minv) * is), 0, nmax);
    }
}

// Steps 2-3 for symmetric types: signed sub-block scales against a signed d
// chosen so the largest one maps to -smax; returns the integers q + nmax.
void quantize_sym_superblock(const float *x, int sub, int nmax, int smax, ggml_fp16_t *d16, int *sc,
                             uint8_t *u) {
    const int nsub = QK_K / sub;
    float s[QK_K / 16];
    float amax = 0, max = 0;
    for (int k = 0; k < nsub; k++) {
        s[k] = search_scale_sym(x + k * sub, sub, nmax);
        if (fabsf(s[k]) > amax) {
            amax = fabsf(s[k]);
            max = s[k];
        }
    }
    *d16 = fp16_scale(-max, smax);
    const float d = fp16_to_f32(*d16);
    for (int k = 0; k < nsub; k++) {
        sc[k] = d != 0 ? clampi(nearest_int(s[k] / d), -smax, smax - 1) : 0;
        const float scale = d * (float)sc[k];
        const float is = scale != 0 ? 1.0f / scale : 0.0f;
        for (int j = 0; j < sub; j++) {
            u[k * sub + j] = (uint8_t)(clampi(nearest_int(x[k * sub + j] * is), -nmax, nmax - 1) + nmax);
        }
    }
}

// 6-bit scale/min packing of Q4_K and Q5_K: sub-blocks 0-3 in the low 6 bits
// of bytes 0-3 (scales) and 4-7 (mins); sub-blocks 4-7 keep their low nibbles
// in bytes 8-11 (scale low, min high) and their top 2 bits in the top 2 bits
// of bytes 0-3 (scales) and 4-7 (mins).
void pack_scales_k4(const uint8_t *sc, const uint8_t *m, uint8_t *out) {
    for (int j = 0; j < 4; j++) {
        out[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        out[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        out[j + 8] = (uint8_t)((sc[j + 4] & 0xf) | ((m[j + 4] & 0xf) << 4));
    }
}

inline void unpack_scale_k4(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// Q3_K: 16 6-bit scales (stored +32). Scale k keeps its low nibble in byte
// k%8 (low nibble for k < 8, high for k >= 8) and its top 2 bits in byte
// 8 + k%4 at bit 2*(k/4).
inline int unpack_scale_q3(const uint8_t *s, int k) {
    const int lo = k < 8 ? (s[k] & 0xf) : (s[k - 8] >> 4);
    const int hi = (s[8 + (k & 3)] >> (2 * (k >> 2))) & 3;
    return (lo | (hi << 4)) - 32;
}

// Element e of the 2-bit planes (Q2_K, Q3_K low bits): e = 128*j + 32*l + i
// lives in byte 32*j + i at bit 2*l.
inline int q2_plane(const uint8_t *qs, int e) { return (qs[32 * (e >> 7) + (e & 31)] >> (2 * ((e >> 5) & 3))) & 3; }
// Element e of a one-bit plane (Q3_K hmask, Q5_K qh): byte e%32, bit e/32.
inline int bit_plane(const uint8_t *h, int e) { return (h[e & 31] >> (e >> 5)) & 1; }
// Element e of the nibble planes of Q4_K/Q5_K: e = 64*c + 32*h + i lives in
// byte 32*c + i, nibble h.
inline int nib_plane_k4(const uint8_t *qs, int e) { return (qs[32 * (e >> 6) + (e & 31)] >> (4 * ((e >> 5) & 1))) & 0xf; }
// Q6_K low nibbles: e = 128*j + 64*h + k lives in ql[64*j + k], nibble h;
// high 2 bits: e = 128*j + 32*s + i lives in qh[32*j + i] at bit 2*s.
inline int q6_value(const block_q6_K *b, int e) {
    const int j = e >> 7, r = e & 127;
    const int lo = (b->ql[64 * j + (r & 63)] >> (4 * (r >> 6))) & 0xf;
    const int hi = (b->qh[32 * j + (r & 31)] >> (2 * (r >> 5))) & 3;
    return (lo | (hi << 4)) - 32;
}

}  // namespace

extern "C" {

void quantize_row_q2_K_ref(const float *x, void *vy, int64_t n) {
    block_q2_K *y = (block_q2_K *)vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t sc[16], m[16], q[QK_K];
        quantize_affine_superblock(x, 16, 3, 15, &y[i].d, &y[i].dmin, sc, m, q);
        for (int k = 0; k < 16; k++) y[i].scales[k] = (uint8_t)(sc[k] | (m[k] << 4));
        memset(y[i].qs, 0, sizeof(y[i].qs));
        for (int e = 0; e < QK_K; e++) y[i].qs[32 * (e >> 7) + (e & 31)] |= (uint8_t)(q[e] << (2 * ((e >> 5) & 3)));
    }
}

void dequantize_row_q2_K(const void *vx, float *y, int64_t n) {
    const block_q2_K *x = (const block_q2_K *)vx;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = fp16_to_f32(x[i].d), dmin = fp16_to_f32(x[i].dmin);
        for (int e = 0; e < QK_K; e++) {
            const uint8_t s = x[i].scales[e >> 4];
            y[e] = d * (float)(s & 0xf) * (float)q2_plane(x[i].qs, e) - dmin * (float)(s >> 4);
        }
    }
}

void quantize_row_q3_K_ref(const float *x, void *vy, int64_t n) {
    block_q3_K *y = (block_q3_K *)vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        int sc[16];
        uint8_t u[QK_K];  // q + 4, in [0, 7]
        quantize_sym_superblock(x, 16, 4, 32, &y[i].d, sc, u);
        memset(y[i].scales, 0, sizeof(y[i].scales));
        for (int k = 0; k < 16; k++) {
            const int v = sc[k] + 32;
            y[i].scales[k & 7] |= (uint8_t)((v & 0xf) << (k < 8 ? 0 : 4));
            y[i].scales[8 + (k & 3)] |= (uint8_t)((v >> 4) << (2 * (k >> 2)));
        }
        memset(y[i].qs, 0, sizeof(y[i].qs));
        memset(y[i].hmask, 0, sizeof(y[i].hmask));
        for (int e = 0; e < QK_K; e++) {
            y[i].qs[32 * (e >> 7) + (e & 31)] |= (uint8_t)((u[e] & 3) << (2 * ((e >> 5) & 3)));
            y[i].hmask[e & 31] |= (uint8_t)((u[e] >> 2) << (e >> 5));
        }
    }
}

void dequantize_row_q3_K(const void *vx, float *y, int64_t n) {
    const block_q3_K *x = (const block_q3_K *)vx;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = fp16_to_f32(x[i].d);
        for (int e = 0; e < QK_K; e++) {
            // the high bit set means no -4 offset
            const int q = q2_plane(x[i].qs, e) - (bit_plane(x[i].hmask, e) ? 0 : 4);
            y[e] = d * (float)unpack_scale_q3(x[i].scales, e >> 4) * (float)q;
        }
    }
}

void quantize_row_q4_K_ref(const float *x, void *vy, int64_t n) {
    block_q4_K *y = (block_q4_K *)vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t sc[8], m[8], q[QK_K];
        quantize_affine_superblock(x, 32, 15, 63, &y[i].d, &y[i].dmin, sc, m, q);
        pack_scales_k4(sc, m, y[i].scales);
        memset(y[i].qs, 0, sizeof(y[i].qs));
        for (int e = 0; e < QK_K; e++) y[i].qs[32 * (e >> 6) + (e & 31)] |= (uint8_t)(q[e] << (4 * ((e >> 5) & 1)));
    }
}

void dequantize_row_q4_K(const void *vx, float *y, int64_t n) {
    const block_q4_K *x = (const block_q4_K *)vx;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = fp16_to_f32(x[i].d), dmin = fp16_to_f32(x[i].dmin);
        for (int k = 0; k < 8; k++) {
            int sc, m;
            unpack_scale_k4(x[i].scales, k, &sc, &m);
            const float dl = d * (float)sc, ml = dmin * (float)m;
            for (int e = 32 * k; e < 32 * k + 32; e++) y[e] = dl * (float)nib_plane_k4(x[i].qs, e) - ml;
        }
    }
}

void quantize_row_q5_K_ref(const float *x, void *vy, int64_t n) {
    block_q5_K *y = (block_q5_K *)vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t sc[8], m[8], q[QK_K];
        quantize_affine_superblock(x, 32, 31, 63, &y[i].d, &y[i].dmin, sc, m, q);
        pack_scales_k4(sc, m, y[i].scales);
        memset(y[i].qs, 0, sizeof(y[i].qs));
        memset(y[i].qh, 0, sizeof(y[i].qh));
        for (int e = 0; e < QK_K; e++) {
            y[i].qs[32 * (e >> 6) + (e & 31)] |= (uint8_t)((q[e] & 0xf) << (4 * ((e >> 5) & 1)));
            y[i].qh[e & 31] |= (uint8_t)((q[e] >> 4) << (e >> 5));
        }
    }
}

void dequantize_row_q5_K(const void *vx, float *y, int64_t n) {
    const block_q5_K *x = (const block_q5_K *)vx;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = fp16_to_f32(x[i].d), dmin = fp16_to_f32(x[i].dmin);
        for (int k = 0; k < 8; k++) {
            int sc, m;
            unpack_scale_k4(x[i].scales, k, &sc, &m);
            const float dl = d * (float)sc, ml = dmin * (float)m;
            for (int e = 32 * k; e < 32 * k + 32; e++) {
                const int q = nib_plane_k4(x[i].qs, e) | (bit_plane(x[i].qh, e) << 4);
                y[e] = dl * (float)q - ml;
            }
        }
    }
}

void quantize_row_q6_K_ref(const float *x, void *vy, int64_t n) {
    block_q6_K *y = (block_q6_K *)vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        int sc[16];
        uint8_t u[QK_K];  // q + 32, in [0, 63]
        quantize_sym_superblock(x, 16, 32, 128, &y[i].d, sc, u);
        for (int k = 0; k < 16; k++) y[i].scales[k] = (int8_t)sc[k];
        memset(y[i].ql, 0, sizeof(y[i].ql));
        memset(y[i].qh, 0, sizeof(y[i].qh));
        for (int e = 0; e < QK_K; e++) {
            const int j = e >> 7, r = e & 127;
            y[i].ql[64 * j + (r & 63)] |= (uint8_t)((u[e] & 0xf) << (4 * (r >> 6)));
            y[i].qh[32 * j + (r & 31)] |= (uint8_t)((u[e] >> 4) << (2 * (r >> 5)));
        }
    }
}

void dequantize_row_q6_K(const void *vx, float *y, int64_t n) {
    const block_q6_K *x = (const block_q6_K *)vx;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = fp16_to_f32(x[i].d);
        for (int e = 0; e < QK_K; e++) y[e] = d * (float)x[i].scales[e >> 4] * (float)q6_value(&x[i], e);
    }
}

// ---------------------------------------------------------------------------
// Scalar dot products: integer sums per block, scaled in float once per
// block. The activation side's integers are always read from qs (never from
// the redundant s / bsums fields), so these stay correct by construction.
// ---------------------------------------------------------------------------

void ggml_vec_dot_q4_0_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q4_0 *x = (const block_q4_0 *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    float sum = 0;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int32_t isum = 0;
        for (int j = 0; j < QK8_0 / 2; j++) {
            isum += ((x[i].qs[j] & 0xf) - 8) * y[i].qs[j];
            isum += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + QK8_0 / 2];
        }
        sum += (float)isum * fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d);
    }
    *s = sum;
}

void ggml_vec_dot_q4_1_q8_1_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q4_1 *x = (const block_q4_1 *)vx;
    const block_q8_1 *y = (const block_q8_1 *)vy;
    float sum = 0;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        int32_t isum = 0, ysum = 0;
        for (int j = 0; j < QK8_1 / 2; j++) {
            isum += (x[i].qs[j] & 0xf) * y[i].qs[j] + (x[i].qs[j] >> 4) * y[i].qs[j + QK8_1 / 2];
            ysum += y[i].qs[j] + y[i].qs[j + QK8_1 / 2];
        }
        const float dy = fp16_to_f32(y[i].d);
        // (d*q + m) . (dy*qy) = d*dy*sum(q*qy) + m*dy*sum(qy)
        sum += (float)isum * fp16_to_f32(x[i].d) * dy + fp16_to_f32(x[i].m) * dy * (float)ysum;
    }
    *s = sum;
}

void ggml_vec_dot_q5_0_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q5_0 *x = (const block_q5_0 *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    float sum = 0;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const uint32_t qh = load_qh(x[i].qh);
        int32_t isum = 0;
        for (int j = 0; j < QK8_0 / 2; j++) {
            const int q0 = ((x[i].qs[j] & 0xf) | (((qh >> j) & 1) << 4)) - 16;
            const int q1 = ((x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
            isum += q0 * y[i].qs[j] + q1 * y[i].qs[j + QK8_0 / 2];
        }
        sum += (float)isum * fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d);
    }
    *s = sum;
}

void ggml_vec_dot_q5_1_q8_1_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q5_1 *x = (const block_q5_1 *)vx;
    const block_q8_1 *y = (const block_q8_1 *)vy;
    float sum = 0;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        const uint32_t qh = load_qh(x[i].qh);
        int32_t isum = 0, ysum = 0;
        for (int j = 0; j < QK8_1 / 2; j++) {
            const int q0 = (x[i].qs[j] & 0xf) | (((qh >> j) & 1) << 4);
            const int q1 = (x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
            isum += q0 * y[i].qs[j] + q1 * y[i].qs[j + QK8_1 / 2];
            ysum += y[i].qs[j] + y[i].qs[j + QK8_1 / 2];
        }
        const float dy = fp16_to_f32(y[i].d);
        sum += (float)isum * fp16_to_f32(x[i].d) * dy + fp16_to_f32(x[i].m) * dy * (float)ysum;
    }
    *s = sum;
}

void ggml_vec_dot_q8_0_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q8_0 *x = (const block_q8_0 *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    float sum = 0;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int32_t isum = 0;
        for (int j = 0; j < QK8_0; j++) isum += x[i].qs[j] * y[i].qs[j];
        sum += (float)isum * fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d);
    }
    *s = sum;
}

void ggml_vec_dot_q2_K_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q2_K *x = (const block_q2_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int32_t sumq = 0, summ = 0;  // sum sc*(q.qy) and sum m*sum(qy) over sub-blocks
        for (int k = 0; k < 16; k++) {
            int32_t dot = 0, ys = 0;
            for (int e = 16 * k; e < 16 * k + 16; e++) {
                dot += q2_plane(x[i].qs, e) * y[i].qs[e];
                ys += y[i].qs[e];
            }
            sumq += (x[i].scales[k] & 0xf) * dot;
            summ += (x[i].scales[k] >> 4) * ys;
        }
        sum += y[i].d * (fp16_to_f32(x[i].d) * (float)sumq - fp16_to_f32(x[i].dmin) * (float)summ);
    }
    *s = sum;
}

void ggml_vec_dot_q3_K_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q3_K *x = (const block_q3_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int32_t sumq = 0;
        for (int k = 0; k < 16; k++) {
            int32_t dot = 0;
            for (int e = 16 * k; e < 16 * k + 16; e++) {
                const int q = q2_plane(x[i].qs, e) - (bit_plane(x[i].hmask, e) ? 0 : 4);
                dot += q * y[i].qs[e];
            }
            sumq += unpack_scale_q3(x[i].scales, k) * dot;
        }
        sum += y[i].d * fp16_to_f32(x[i].d) * (float)sumq;
    }
    *s = sum;
}

void ggml_vec_dot_q4_K_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q4_K *x = (const block_q4_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int32_t sumq = 0, summ = 0;
        for (int k = 0; k < 8; k++) {
            int sc, m;
            unpack_scale_k4(x[i].scales, k, &sc, &m);
            int32_t dot = 0, ys = 0;
            for (int e = 32 * k; e < 32 * k + 32; e++) {
                dot += nib_plane_k4(x[i].qs, e) * y[i].qs[e];
                ys += y[i].qs[e];
            }
            sumq += sc * dot;
            summ += m * ys;
        }
        sum += y[i].d * (fp16_to_f32(x[i].d) * (float)sumq - fp16_to_f32(x[i].dmin) * (float)summ);
    }
    *s = sum;
}

void ggml_vec_dot_q5_K_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q5_K *x = (const block_q5_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int32_t sumq = 0, summ = 0;
        for (int k = 0; k < 8; k++) {
            int sc, m;
            unpack_scale_k4(x[i].scales, k, &sc, &m);
            int32_t dot = 0, ys = 0;
            for (int e = 32 * k; e < 32 * k + 32; e++) {
                const int q = nib_plane_k4(x[i].qs, e) | (bit_plane(x[i].qh, e) << 4);
                dot += q * y[i].qs[e];
                ys += y[i].qs[e];
            }
            sumq += sc * dot;
            summ += m * ys;
        }
        sum += y[i].d * (fp16_to_f32(x[i].d) * (float)sumq - fp16_to_f32(x[i].dmin) * (float)summ);
    }
    *s = sum;
}

void ggml_vec_dot_q6_K_q8_K_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const block_q6_K *x = (const block_q6_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int32_t sumq = 0;  // |sumq| <= 256 * 32 * 128 * 128 < 2^31
        for (int k = 0; k < 16; k++) {
            int32_t dot = 0;
            for (int e = 16 * k; e < 16 * k + 16; e++) dot += q6_value(&x[i], e) * y[i].qs[e];
            sumq += x[i].scales[k] * dot;
        }
        sum += y[i].d * fp16_to_f32(x[i].d) * (float)sumq;
    }
    *s = sum;
}

// Float dots accumulate in double: the reference should not add error of its own.
void ggml_vec_dot_f16_f16_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const ggml_fp16_t *x = (const ggml_fp16_t *)vx, *y = (const ggml_fp16_t *)vy;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)fp16_to_f32(x[i]) * (double)fp16_to_f32(y[i]);
    *s = (float)sum;
}

void ggml_vec_dot_bf16_bf16_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const ggml_bf16_t *x = (const ggml_bf16_t *)vx, *y = (const ggml_bf16_t *)vy;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)bf16_to_f32(x[i]) * (double)bf16_to_f32(y[i]);
    *s = (float)sum;
}

// F16 / BF16 weights against f32 activations (GGML_PREC_HIGH)
void ggml_vec_dot_f16_f32_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const ggml_fp16_t *x = (const ggml_fp16_t *)vx;
    const float *y = (const float *)vy;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)fp16_to_f32(x[i]) * (double)y[i];
    *s = (float)sum;
}

void ggml_vec_dot_bf16_f32_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const ggml_bf16_t *x = (const ggml_bf16_t *)vx;
    const float *y = (const float *)vy;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)bf16_to_f32(x[i]) * (double)y[i];
    *s = (float)sum;
}

void ggml_vec_dot_f32_f32_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const float *x = (const float *)vx, *y = (const float *)vy;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)x[i] * (double)y[i];
    *s = (float)sum;
}

}  // extern "C"

// ---------------------------------------------------------------------------
// Plain float types and the table hook.
// ---------------------------------------------------------------------------

namespace {

void f32_to_float(const void *x, float *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }
void f32_from_float(const float *x, void *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }
void f16_to_float(const void *vx, float *y, int64_t n) {
    const ggml_fp16_t *x = (const ggml_fp16_t *)vx;
    for (int64_t i = 0; i < n; i++) y[i] = fp16_to_f32(x[i]);
}
void f16_from_float(const float *x, void *vy, int64_t n) {
    ggml_fp16_t *y = (ggml_fp16_t *)vy;
    for (int64_t i = 0; i < n; i++) y[i] = f32_to_fp16(x[i]);
}
void bf16_to_float(const void *vx, float *y, int64_t n) {
    const ggml_bf16_t *x = (const ggml_bf16_t *)vx;
    for (int64_t i = 0; i < n; i++) y[i] = bf16_to_f32(x[i]);
}
void bf16_from_float(const float *x, void *vy, int64_t n) {
    ggml_bf16_t *y = (ggml_bf16_t *)vy;
    for (int64_t i = 0; i < n; i++) y[i] = f32_to_bf16(x[i]);
}

}  // namespace

extern "C" void ggml_types_init_ref_kernels(struct ggml_type_traits *table) {
    struct entry {
        ggml_type type;
        ggml_to_float_t to_float;
        ggml_from_float_t from_float;
    };
    static const entry entries[] = {
        {GGML_TYPE_F32, f32_to_float, f32_from_float},
        {GGML_TYPE_F16, f16_to_float, f16_from_float},
        {GGML_TYPE_BF16, bf16_to_float, bf16_from_float},
        {GGML_TYPE_Q4_0, dequantize_row_q4_0, quantize_row_q4_0_ref},
        {GGML_TYPE_Q4_1, dequantize_row_q4_1, quantize_row_q4_1_ref},
        {GGML_TYPE_Q5_0, dequantize_row_q5_0, quantize_row_q5_0_ref},
        {GGML_TYPE_Q5_1, dequantize_row_q5_1, quantize_row_q5_1_ref},
        {GGML_TYPE_Q8_0, dequantize_row_q8_0, quantize_row_q8_0_ref},
        {GGML_TYPE_Q8_1, dequantize_row_q8_1, quantize_row_q8_1_ref},
        {GGML_TYPE_Q2_K, dequantize_row_q2_K, quantize_row_q2_K_ref},
        {GGML_TYPE_Q3_K, dequantize_row_q3_K, quantize_row_q3_K_ref},
        {GGML_TYPE_Q4_K, dequantize_row_q4_K, quantize_row_q4_K_ref},
        {GGML_TYPE_Q5_K, dequantize_row_q5_K, quantize_row_q5_K_ref},
        {GGML_TYPE_Q6_K, dequantize_row_q6_K, quantize_row_q6_K_ref},
        {GGML_TYPE_Q8_K, dequantize_row_q8_K, quantize_row_q8_K_ref},
    };
    for (const entry &e : entries) {
        table[e.type].to_float = e.to_float;
        table[e.type].from_float_ref = e.from_float;
    }
}
