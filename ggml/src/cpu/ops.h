// CPU op kernels. Each kernel is called by every worker of the pool with its
// index ith in [0, nth) and must write only its own share of dst, so that the
// result never depends on the thread count.
#pragma once

#include <math.h>

#include "ggml-cpu.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ggml_compute_params {
    int ith, nth;
    void *wdata;   // shared scratch of ggml_op_work_size() bytes
    size_t wsize;
    struct ggml_threadpool *tp;
    ggml_sparse_dense_policy dense_policy;  // the pool's crossover (SPARSE_DOWN, SPARSE_FFN)
    int seq;  // the node's place in the run (its work counter, ggml_claim), or -1: a sub-call that splits statically
};

// Dynamic work sharing inside one op: the start of the next `step` items of
// the node's own counter (0, step, 2 step, ... across all its threads, fresh
// for every node). Threads that take chunks in turn finish together even
// when one is slowed by the host or the other's memory traffic, where a
// static split leaves the faster one waiting at the barrier. Call only with
// params->seq >= 0, and only once per op (one counter a node).
int64_t ggml_claim(const struct ggml_compute_params *params, int64_t step);

// Wait until all workers of the pool reach this point (inside one op).
void ggml_barrier(struct ggml_threadpool *tp);

// Scratch bytes an op needs for n_threads workers (0 for most ops).
size_t ggml_op_work_size(const struct ggml_tensor *node, int n_threads);

// Split [0, n) into nth nearly equal chunks; chunk ith is [*begin, *end).
static inline void ggml_split_range(int64_t n, int ith, int nth, int64_t *begin, int64_t *end) {
    const int64_t per = (n + nth - 1) / nth;
    *begin = per * ith < n ? per * ith : n;
    *end = *begin + per < n ? *begin + per : n;
}

// Byte offset in t of row r, where r counts rows over dims 1..3 of `shape`
// (t has shape's dims 1..3 and any strides): how kernels walk their rows.
static inline size_t ggml_row_offset(const struct ggml_tensor *shape, const struct ggml_tensor *t, int64_t r) {
    const int64_t i1 = r % shape->ne[1];
    const int64_t i2 = (r / shape->ne[1]) % shape->ne[2];
    const int64_t i3 = r / (shape->ne[1] * shape->ne[2]);
    return (size_t)i1 * t->nb[1] + (size_t)i2 * t->nb[2] + (size_t)i3 * t->nb[3];
}

// Activation rows of the weight products (mul-mat.cpp, ops-sparse.cpp):
// out = from_float(x) (vrow bytes, type vdt); with GGML_PREC_HIGH (high !=
// 0) also, at out + vrow, the residual x - to_float(out) the first rounding
// lost, converted as any row or on the type's own grid (ggml_cpu_from_resid:
// q8_K's d/128), so that dot(w, out) + dot(w, out + vrow) sees x to about 16
// bits. scratch: k floats (only read with high). act-convert.cpp.
void ggml_convert_act(const float *x, void *out, int64_t k, ggml_from_float_t from_float, enum ggml_type vdt,
                      size_t vrow, bool high, float *scratch);
// The fast F16 / BF16 mat-vec (mul-mat.cpp): the activation row rounded to
// the weight format but stored as f32, for the f32-activation kernel
// (vec_dot_f32): the same products as the F16 x F16 kernel with one format
// conversion per product instead of two (the half-rate vcvtph2ps of Zen 1
// made F16 x F16 compute-bound), where the kernels ask for it (the traits'
// round_act_f32). nullptr for other types. act-convert.cpp.
ggml_from_float_t ggml_round_act(enum ggml_type type);
// *s = dot(x, y), plus with resid the dot with the converted residual that
// ggml_convert_act stored at y + vrow.
static inline void ggml_vec_dot_resid(ggml_vec_dot_t dot, int64_t k, float *s, const void *x, const void *y, size_t vrow,
                                      bool resid) {
    dot(k, s, x, y);
    if (resid) {
        float r;
        dot(k, &r, x, (const char *)y + vrow);
        *s += r;
    }
}
// The precision a weight-product node asks for (ggml_set_prec).
static inline bool ggml_prec_high(const struct ggml_tensor *node) {
    return node->op_params[GGML_MAX_OP_PARAMS - 1] == GGML_PREC_HIGH;
}
// What a weight product of type t converts its activations to, and the dot
// kernel it then calls: at high precision a type with an f32-activation kernel
// keeps the f32 rows (nothing to convert, no residual); else vec_dot_type.
static inline enum ggml_type ggml_cpu_act_type(const struct ggml_cpu_type_traits *t, bool high) {
    return high && t->vec_dot_f32 ? GGML_TYPE_F32 : t->vec_dot_type;
}
static inline ggml_vec_dot_t ggml_cpu_act_dot(const struct ggml_cpu_type_traits *t, bool high) {
    return high && t->vec_dot_f32 ? t->vec_dot_f32 : t->vec_dot;
}

// The activation functions (elementwise ops and the fused sparse FFN). Each
// is written so it stays accurate over the whole float range (no
// cancellation, no overflow to NaN).
static inline float op_relu(float x) { return x > 0.0f ? x : 0.0f; }
static inline float op_silu(float x) { return x / (1.0f + expf(-x)); }
// GELU, tanh approximation: 0.5x(1 + tanh(u)), u = sqrt(2/pi)(x + 0.044715x^3).
// Since 0.5(1 + tanh(u)) == 1/(1 + exp(-2u)), we evaluate the latter: the
// former loses all precision for x << 0 where tanh(u) rounds to -1.
static inline float op_gelu(float x) {
    const float k = 0.7978845608028654f;  // sqrt(2/pi)
    const float u = k * x * (1.0f + 0.044715f * x * x);
    return x / (1.0f + expf(-2.0f * u));
}

// The kernels of the op table (ggml-ops.h): every op that is not a view has
// ggml_compute_forward_<name>, every op with the work flag ggml_<name>_work_size.
#define GGML_CPU_FORWARD_DECL_0(name) \
    void ggml_compute_forward_##name(const struct ggml_compute_params *params, struct ggml_tensor *dst);
#define GGML_CPU_FORWARD_DECL_1(name)  // a view: no kernel
#define GGML_CPU_WORK_DECL_0(name)
#define GGML_CPU_WORK_DECL_1(name) size_t ggml_##name##_work_size(const struct ggml_tensor *node, int n_threads);
#define GGML_CPU_DECL_ROW(NAME, name, n_src_min, n_src_max, view, prec, work) \
    GGML_CPU_FORWARD_DECL_##view(name) GGML_CPU_WORK_DECL_##work(name)
GGML_OP_LIST(GGML_CPU_DECL_ROW)
#undef GGML_CPU_DECL_ROW

#ifdef __cplusplus
}
#endif
