// Block layouts of the GGUF quantized types (byte-exact with the on-disk
// format) and the portable reference kernels for each type.
#pragma once

#include <float.h>

#include "ggml.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK_K 256
#define K_SCALE_SIZE 12

typedef struct { ggml_fp16_t d; uint8_t qs[QK4_0 / 2]; } block_q4_0;
typedef struct { ggml_fp16_t d, m; uint8_t qs[QK4_1 / 2]; } block_q4_1;
typedef struct { ggml_fp16_t d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; } block_q5_0;
typedef struct { ggml_fp16_t d, m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; } block_q5_1;
typedef struct { ggml_fp16_t d; int8_t qs[QK8_0]; } block_q8_0;
typedef struct { ggml_fp16_t d, s; int8_t qs[QK8_1]; } block_q8_1;  // s = d * sum(qs)
typedef struct { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; ggml_fp16_t d, dmin; } block_q2_K;
typedef struct { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; ggml_fp16_t d; } block_q3_K;
typedef struct { ggml_fp16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; } block_q4_K;
typedef struct { ggml_fp16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; } block_q5_K;
typedef struct { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; ggml_fp16_t d; } block_q6_K;
typedef struct { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; } block_q8_K;

#ifdef __cplusplus
static_assert(sizeof(block_q4_0) == 18, "q4_0");
static_assert(sizeof(block_q4_1) == 20, "q4_1");
static_assert(sizeof(block_q5_0) == 22, "q5_0");
static_assert(sizeof(block_q5_1) == 24, "q5_1");
static_assert(sizeof(block_q8_0) == 34, "q8_0");
static_assert(sizeof(block_q8_1) == 36, "q8_1");
static_assert(sizeof(block_q2_K) == 84, "q2_K");
static_assert(sizeof(block_q3_K) == 110, "q3_K");
static_assert(sizeof(block_q4_K) == 144, "q4_K");
static_assert(sizeof(block_q5_K) == 176, "q5_K");
static_assert(sizeof(block_q6_K) == 210, "q6_K");
static_assert(sizeof(block_q8_K) == 292, "q8_K");
#endif

// Reference (portable scalar) row kernels, one set per type: the single
// source of truth that every SIMD kernel is tested against.
#define GGML_DECLARE_REF(T) \
    void dequantize_row_##T(const void *x, float *y, int64_t n); \
    void quantize_row_##T##_ref(const float *x, void *y, int64_t n);
GGML_DECLARE_REF(q4_0) GGML_DECLARE_REF(q4_1) GGML_DECLARE_REF(q5_0) GGML_DECLARE_REF(q5_1)
GGML_DECLARE_REF(q8_0) GGML_DECLARE_REF(q8_1) GGML_DECLARE_REF(q2_K) GGML_DECLARE_REF(q3_K)
GGML_DECLARE_REF(q4_K) GGML_DECLARE_REF(q5_K) GGML_DECLARE_REF(q6_K) GGML_DECLARE_REF(q8_K)
#undef GGML_DECLARE_REF
// GGML_PREC_HIGH's q8_K residual: r (what the q8_K row q left of x) on the
// grid d/128 of q's own blocks, y.d = q.d / 128 (|y.qs| <= 64), so that 128
// dot(w, q) + dot(w, y) is one integer sum per block; zero quants where the
// step is below FLT_MIN.
void quantize_row_q8_K_resid_ref(const float *r, const void *q, void *y, int64_t n);

// Fills to_float and from_float_ref of the core type table (ggml-types.cpp).
void ggml_types_init_ref_kernels(struct ggml_type_traits *table);

// Scalar dot kernels: weight type x its vec_dot_type (the CPU's type table,
// cpu/cpu-type-traits.cpp, holds them).
void ggml_vec_dot_q4_0_q8_0_ref(int64_t n, float *s, const void *x, const void *y);
void ggml_vec_dot_q4_1_q8_1_ref(int64_t n, float *s, const void *x, const void *y);
void ggml_vec_dot_q5_0_q8_0_ref(int64_t n, float *s, const void *x, const void *y);
void ggml_vec_dot_q5_1_q8_1_ref(int64_t n, float *s, const void *x, const void *y);
void ggml_vec_dot_q8_0_q8_0_ref(int64_t n, float *s, const void *x, const void *y);
void ggml_vec_dot_q2_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void ggml_vec_dot_q3_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void ggml_vec_dot_q4_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void ggml_vec_dot_q5_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void ggml_vec_dot_q6_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void ggml_vec_dot_f16_f16_ref(int64_t n, float *s, const void *x, const void *y);
void ggml_vec_dot_bf16_bf16_ref(int64_t n, float *s, const void *x, const void *y);
void ggml_vec_dot_f32_f32_ref(int64_t n, float *s, const void *x, const void *y);
// F16 / BF16 weights x f32 activations (vec_dot_f32, GGML_PREC_HIGH)
void ggml_vec_dot_f16_f32_ref(int64_t n, float *s, const void *x, const void *y);
void ggml_vec_dot_bf16_f32_ref(int64_t n, float *s, const void *x, const void *y);

#ifdef __cplusplus
}
#endif

#ifdef __cplusplus
// The rows of GGML_PREC_HIGH's q8_K residual (quantize_row_q8_K_resid_ref):
// the one loop and grid rule of every converter, each passing its own block
// quantizer, block(x, d, 1 / d or 0, y).
template <class Block>
inline void ggml_q8_K_resid_rows(const float *r, const void *vq, void *vy, int64_t n, Block block) {
    const block_q8_K *q = (const block_q8_K *)vq;
    block_q8_K *y = (block_q8_K *)vy;
    for (int64_t i = 0; i < n / QK_K; i++, r += QK_K) {
        // a grid step below FLT_MIN (|x| < 1.9e-34 over the block) holds no residual: 1 / step would overflow
        const float step = q[i].d / 128;
        block(r, step, step >= FLT_MIN ? 1.0f / step : 0.0f, &y[i]);
    }
}
#endif
