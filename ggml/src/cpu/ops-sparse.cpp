// CPU kernels of the neuron-aware operations (constructors in ggml-sparse.cpp,
// index-list layout in ggml.h).
//
// SPARSE_SELECT: neurons split among threads; each thread counts its actives,
//   then (after a barrier) writes them at the offset given by the counts of the
//   threads before it, so the lists come out sorted without a merge.
// MUL_MAT_SPARSE_ROWS: the activations are converted once to the weight type's
//   vec_dot_type; the ACTIVE LIST (not the index range) is split evenly among
//   threads, so every thread reads the same number of weight rows. Each thread
//   also zero-fills the inactive outputs between its first and last active id.
// SPARSE_DOWN: the OUTPUT dimension d is split among threads (slices aligned to
//   the weight block). Every thread walks the whole active list in ascending
//   order and accumulates h_i * wt_i[slice] into its own slice of y: accumulators
//   are private, no reduction is needed, and every element is summed in the
//   same order for any thread count, so results are bit-identical for 1..N
//   threads (no lock-free shared sums as in PowerInfer's CPU kernel).
//   Rows are decoded on the fly: fused kernels for F32/F16/Q8_0/Q4_0 when T = 1,
//   otherwise to_float into a per-thread buffer and then one f32 axpy per token.
#include <string.h>

#include <algorithm>

#include "ggml-impl.h"
#include "ggml-quants.h"
#include "ops.h"
#include "sparse-axpy.h"

namespace {

constexpr size_t ALIGN = GGML_DEFAULT_ALIGN;
inline size_t align_up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

// ---- scalar axpy kernels (multiply, then add) ----
void axpy_f32_ref(int64_t n, float *y, const float *w, float a) {
    for (int64_t i = 0; i < n; i++) y[i] += a * w[i];
}
void axpy_f16_ref(int64_t n, float *y, const ggml_fp16_t *w, float a) {
    for (int64_t i = 0; i < n; i++) y[i] += a * ggml_fp16_to_fp32(w[i]);
}
void axpy_q8_0_ref(int64_t nb, float *y, const void *vw, float a) {
    const block_q8_0 *w = (const block_q8_0 *)vw;
    for (int64_t b = 0; b < nb; b++, y += QK8_0) {
        const float s = a * ggml_fp16_to_fp32(w[b].d);
        for (int j = 0; j < QK8_0; j++) y[j] += s * (float)w[b].qs[j];
    }
}
void axpy_q4_0_ref(int64_t nb, float *y, const void *vw, float a) {
    const block_q4_0 *w = (const block_q4_0 *)vw;
    for (int64_t b = 0; b < nb; b++, y += QK4_0) {
        const float s = a * ggml_fp16_to_fp32(w[b].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            y[j] += s * (float)((w[b].qs[j] & 0x0F) - 8);
            y[j + QK4_0 / 2] += s * (float)((w[b].qs[j] >> 4) - 8);
        }
    }
}

struct axpy_table {
    ggml_axpy_kernels ref = {axpy_f32_ref, axpy_f16_ref, axpy_q8_0_ref, axpy_q4_0_ref};
    ggml_axpy_kernels best = ref;
    axpy_table() {
#if defined(__x86_64__) || defined(_M_X64)
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
            ggml_axpy_kernels_avx2(&best);
#endif
    }
};

const ggml_axpy_kernels &axpy_kernels() {
    static const axpy_table table;
    // Follow ggml_cpu_force_scalar so tests can exercise the portable path.
    return strcmp(ggml_cpu_backend_name(), "scalar") == 0 ? table.ref : table.best;
}

// The list the sparse ops consume: the last column of idx (the union for a batch).
struct active_list {
    const int32_t *ids;
    int64_t lo, hi;  // positions in ids of the actives inside [begin, end)
};

active_list read_list(const char *op, const ggml_tensor *idx, int64_t begin, int64_t end) {
    const int32_t *col = (const int32_t *)((const char *)idx->data + (idx->ne[1] - 1) * idx->nb[1]);
    const int64_t m = col[0];
    if (m < 0 || m > idx->ne[0] - 1) ggml_abort("%s: index list count %lld outside [0, %lld]", op, (long long)m, (long long)(idx->ne[0] - 1));
    const int32_t *ids = col + 1;
    active_list l;
    l.ids = ids;
    l.lo = std::lower_bound(ids, ids + m, (int32_t)begin) - ids;
    l.hi = std::lower_bound(ids, ids + m, (int32_t)end) - ids;
    return l;
}

[[noreturn]] void bad_list(const char *op, int64_t id) {
    ggml_abort("%s: index list is not strictly ascending inside the range (id %lld)", op, (long long)id);
}

}  // namespace

// ---------------------------------------------------------------- select

extern "C" size_t ggml_sparse_select_work_size(const ggml_tensor *node, int n_threads) {
    return (size_t)n_threads * (size_t)node->ne[1] * sizeof(int64_t);
}

extern "C" void ggml_compute_forward_sparse_select(const ggml_compute_params *params, ggml_tensor *dst) {
    const ggml_tensor *p = dst->src[0];
    float thr;
    memcpy(&thr, &dst->op_params[0], sizeof(thr));
    const int64_t n = p->ne[0], T = p->ne[1], C = dst->ne[1];
    const int ith = params->ith, nth = params->nth;
    int64_t *counts = (int64_t *)params->wdata;  // [nth][C]
    int64_t i0, i1;
    ggml_split_range(n, ith, nth, &i0, &i1);
    auto prow = [&](int64_t t) { return (const float *)((const char *)p->data + t * p->nb[1]); };
    auto active_any = [&](int64_t i) {
        for (int64_t t = 0; t < T; t++)
            if (prow(t)[i] > thr) return true;
        return false;
    };

    for (int64_t c = 0; c < C; c++) {
        int64_t k = 0;
        if (c < T) {
            const float *x = prow(c);
            for (int64_t i = i0; i < i1; i++) k += x[i] > thr;
        } else {
            for (int64_t i = i0; i < i1; i++) k += active_any(i);
        }
        counts[ith * C + c] = k;
    }
    ggml_barrier(params->tp);

    for (int64_t c = 0; c < C; c++) {
        int64_t off = 0, total = 0;
        for (int t = 0; t < nth; t++) {
            if (t < ith) off += counts[t * C + c];
            total += counts[t * C + c];
        }
        int32_t *out = (int32_t *)((char *)dst->data + c * dst->nb[1]);
        int32_t *ids = out + 1 + off;
        if (c < T) {
            const float *x = prow(c);
            for (int64_t i = i0; i < i1; i++)
                if (x[i] > thr) *ids++ = (int32_t)i;
        } else {
            for (int64_t i = i0; i < i1; i++)
                if (active_any(i)) *ids++ = (int32_t)i;
        }
        if (ith == 0) out[0] = (int32_t)total;
        if (ith == nth - 1)
            for (int64_t j = 1 + total; j <= n; j++) out[j] = -1;  // defined bytes past the list
    }
}

// ---------------------------------------------------------------- row-sparse matvec

namespace {

struct rows_plan {
    ggml_type vdt;
    size_t vrow;  // bytes of one converted activation row
    bool convert;
};

rows_plan make_rows_plan(const ggml_tensor *w, const ggml_tensor *x) {
    rows_plan p;
    p.vdt = ggml_get_type_traits(w->type)->vec_dot_type;
    p.vrow = ggml_row_size(p.vdt, x->ne[0]);
    p.convert = p.vdt != GGML_TYPE_F32;
    return p;
}

}  // namespace

extern "C" size_t ggml_mul_mat_sparse_rows_work_size(const ggml_tensor *node, int n_threads) {
    (void)n_threads;
    const rows_plan p = make_rows_plan(node->src[0], node->src[1]);
    return p.convert ? align_up(p.vrow * (size_t)node->src[1]->ne[1]) : 0;
}

extern "C" void ggml_compute_forward_mul_mat_sparse_rows(const ggml_compute_params *params, ggml_tensor *dst) {
    const char *op = "mul_mat_sparse_rows";
    const ggml_tensor *w = dst->src[0], *x = dst->src[1], *idx = dst->src[2];
    const ggml_type_traits *tw = ggml_get_type_traits(w->type);
    const int64_t K = w->ne[0], T = x->ne[1];
    const int64_t begin = dst->op_params[0], end = dst->op_params[1];
    const int ith = params->ith, nth = params->nth;
    const rows_plan p = make_rows_plan(w, x);
    char *wdata = (char *)params->wdata;

    if (p.convert) {  // activations -> vec_dot_type, once per token
        const ggml_from_float_t from_float = ggml_get_type_traits(p.vdt)->from_float;
        if (!from_float) ggml_abort("%s: no converter to %s", op, ggml_type_name(p.vdt));
        int64_t t0, t1;
        ggml_split_range(T, ith, nth, &t0, &t1);
        for (int64_t t = t0; t < t1; t++)
            from_float((const float *)((const char *)x->data + t * x->nb[1]), wdata + (size_t)t * p.vrow, K);
        ggml_barrier(params->tp);
    }
    auto xrow = [&](int64_t t) -> const void * {
        return p.convert ? (const void *)(wdata + (size_t)t * p.vrow) : (const void *)((const char *)x->data + t * x->nb[1]);
    };
    auto out = [&](int64_t i, int64_t t) { return (float *)((char *)dst->data + t * dst->nb[1]) + i; };

    const active_list l = read_list(op, idx, begin, end);
    int64_t a0, a1;
    ggml_split_range(l.hi - l.lo, ith, nth, &a0, &a1);
    a0 += l.lo;
    a1 += l.lo;
    // This thread owns the index range [lo, hi): from its first active id (the
    // range start for thread 0) up to the next thread's first active id.
    const int64_t lo = ith == 0 ? begin : (a0 < l.hi ? l.ids[a0] : end);
    const int64_t hi = ith == nth - 1 ? end : (a1 < l.hi ? l.ids[a1] : end);
    auto zero = [&](int64_t z0, int64_t z1) {
        if (z1 > z0)
            for (int64_t t = 0; t < T; t++) memset(out(z0, t), 0, sizeof(float) * (size_t)(z1 - z0));
    };

    const ggml_vec_dot_t vec_dot = tw->vec_dot;
    int64_t cur = lo;
    for (int64_t a = a0; a < a1; a++) {
        const int64_t i = l.ids[a];
        if (i < cur || i >= hi) bad_list(op, i);
        zero(cur, i);
        const char *wrow = (const char *)w->data + i * w->nb[1];
        for (int64_t t = 0; t < T; t++) vec_dot(K, out(i, t), wrow, xrow(t));
        cur = i + 1;
    }
    zero(cur, hi);
}

// ---------------------------------------------------------------- column-sparse down

namespace {

// Output slices are multiples of this many elements (and of the block size).
int64_t down_unit(ggml_type type) { return std::max<int64_t>(64, ggml_blck_size(type)); }

}  // namespace

extern "C" size_t ggml_sparse_down_work_size(const ggml_tensor *node, int n_threads) {
    const ggml_tensor *wt = node->src[0];
    return (size_t)n_threads * align_up(sizeof(float) * (size_t)wt->ne[0]);
}

extern "C" void ggml_compute_forward_sparse_down(const ggml_compute_params *params, ggml_tensor *dst) {
    const char *op = "sparse_down";
    const ggml_tensor *wt = dst->src[0], *h = dst->src[1], *idx = dst->src[2];
    const ggml_type_traits *tw = ggml_get_type_traits(wt->type);
    const int64_t d = wt->ne[0], T = h->ne[1];
    const int64_t begin = dst->op_params[0], end = dst->op_params[1];
    const int ith = params->ith, nth = params->nth;

    const int64_t unit = down_unit(wt->type);
    int64_t u0, u1;
    ggml_split_range((d + unit - 1) / unit, ith, nth, &u0, &u1);
    const int64_t k0 = std::min(d, u0 * unit), k1 = std::min(d, u1 * unit), len = k1 - k0;
    if (len <= 0) return;
    const size_t woff = (size_t)(k0 / tw->blck_size) * tw->type_size;  // slice start inside a row

    auto yrow = [&](int64_t t) { return (float *)((char *)dst->data + t * dst->nb[1]) + k0; };
    auto hval = [&](int64_t i, int64_t t) { return ((const float *)((const char *)h->data + t * h->nb[1]))[i]; };
    for (int64_t t = 0; t < T; t++) memset(yrow(t), 0, sizeof(float) * (size_t)len);

    const active_list l = read_list(op, idx, begin, end);
    const ggml_axpy_kernels &k = axpy_kernels();
    float *buf = (float *)((char *)params->wdata + (size_t)ith * align_up(sizeof(float) * (size_t)d));
    const ggml_type type = wt->type;
    const bool fused = T == 1 && (type == GGML_TYPE_F32 || type == GGML_TYPE_F16 || type == GGML_TYPE_Q8_0 ||
                                  type == GGML_TYPE_Q4_0);
    int64_t prev = begin - 1;
    for (int64_t a = l.lo; a < l.hi; a++) {
        const int64_t i = l.ids[a];
        if (i <= prev || i >= end) bad_list(op, i);
        prev = i;
        const char *row = (const char *)wt->data + i * wt->nb[1] + woff;
        if (a + 1 < l.hi) {  // the next row is a jump in memory: start fetching it
            const char *next = (const char *)wt->data + (int64_t)l.ids[a + 1] * wt->nb[1] + woff;
            __builtin_prefetch(next);
            __builtin_prefetch(next + 64);
        }
        if (fused) {
            const float a1 = hval(i, 0);
            if (a1 == 0.0f) continue;  // adds nothing (relu zeros are common)
            float *y = yrow(0);
            switch (type) {
                case GGML_TYPE_F32: k.f32(len, y, (const float *)row, a1); break;
                case GGML_TYPE_F16: k.f16(len, y, (const ggml_fp16_t *)row, a1); break;
                case GGML_TYPE_Q8_0: k.q8_0(len / QK8_0, y, row, a1); break;
                default: k.q4_0(len / QK4_0, y, row, a1); break;
            }
            continue;
        }
        bool any = false;
        for (int64_t t = 0; t < T && !any; t++) any = hval(i, t) != 0.0f;
        if (!any) continue;
        const float *w = (const float *)row;
        if (type != GGML_TYPE_F32) {
            tw->to_float(row, buf, len);
            w = buf;
        }
        for (int64_t t = 0; t < T; t++) {
            const float at = hval(i, t);
            if (at != 0.0f) k.f32(len, yrow(t), w, at);
        }
    }
}

// ---------------------------------------------------------------- policy

extern "C" bool ggml_sparse_should_use_dense(int64_t n_active, int64_t n, int64_t T) {
    if (n <= 0) return true;
    const double density = (double)n_active / (double)n;
    // Crossover densities measured with pinfer-bench-sparse (docs/sparse-bench.md).
    return density >= (T <= 1 ? 1.0 : 0.5);
}
