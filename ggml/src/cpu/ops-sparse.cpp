// CPU kernels of the neuron-aware operations (constructors in ggml-sparse.cpp,
// index-list layout in ggml.h).
//
// SPARSE_SELECT: neurons split among threads; each thread counts its actives,
//   then (after a barrier) writes them at the offset given by the counts of the
//   threads before it, so the lists come out sorted without a merge.
// MUL_MAT_SPARSE_ROWS: the activations are converted once per token to the
//   weight type's vec_dot_type (for T <= 2 by every thread privately, which
//   saves a barrier); the ACTIVE LIST (not the index range) is split evenly among
//   threads, so every thread reads the same number of weight rows. Each thread
//   also zero-fills the inactive outputs between its first and last active id.
//   Each output is one vec_dot call, the same as in the dense MUL_MAT. A bundle
//   (g rows per neuron, adjacent) is walked the same way, an active neuron being
//   one contiguous run of g rows; plane j of dst gets the dots with row g*i+j.
// SPARSE_DOWN: the OUTPUT dimension d is split among threads (slices aligned to
//   the weight block). Every thread walks the whole active list in ascending
//   order and accumulates h_i * wt_i[slice] into its own slice of y: accumulators
//   are private, no reduction is needed, and every element is summed in the
//   same order for any thread count, so results are bit-identical for 1..N
//   threads (no lock-free shared sums as in PowerInfer's CPU kernel).
//   Rows are decoded on the fly: fused kernels for F32/F16/Q8_0/Q4_0 when T = 1,
//   otherwise to_float into a per-thread buffer and then f32 axpys per token;
//   either way up to four rows per pass over the y slice (sparse-axpy.h).
//   Given the plain ffn_down (src[3]) and a density at which the dense matvec
//   wins (the pool's dense policy, ggml_sparse_dense_policy), it runs that instead: h with inactive
//   entries zeroed, converted once, one vec_dot per output over [begin, end).
// Scattered rows are prefetched in software several rows ahead; at decode the
// TLB dominates with 4 KiB pages (docs/sparse-bench.md: weights want 2 MiB pages).
#include <math.h>
#include <string.h>

#include <algorithm>

#include "cpu-features.h"
#include "ggml-impl.h"
#include "ggml-quants.h"
#include "ops.h"
#include "sparse-axpy.h"
#include "vec-dot-simd.h"

namespace {

constexpr size_t ALIGN = GGML_DEFAULT_ALIGN;
inline size_t align_up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

// The axpy kernel for rows of a weight type: fused decode-and-add on the raw
// rows (*direct) for one token and the types that have one, else the f32
// kernel on rows decoded with to_float first.
ggml_axpy_t pick_axpy(ggml_type type, int64_t T, bool *direct) {
    const ggml_axpy_kernels &k = *ggml_cpu_axpy();
    *direct = true;
    if (type == GGML_TYPE_F32) return k.f32;
    if (T == 1) {
        switch (type) {
            case GGML_TYPE_F16: return k.f16;
            case GGML_TYPE_Q8_0: return k.q8_0;
            case GGML_TYPE_Q4_0: return k.q4_0;
            default: break;
        }
    }
    *direct = false;
    return k.f32;
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

// Active rows are scattered: the hardware prefetcher only finds a row after it
// has missed on it. Fetch whole rows about PREFETCH_BYTES ahead so that several
// rows are in flight at once (memory-level parallelism instead of latency);
// 2..16 rows, tuned with pinfer-bench-sparse on Q4_0/Q8_0/F16.
constexpr size_t PREFETCH_BYTES = 20 * 1024;
inline int64_t prefetch_rows(size_t row_bytes) {
    return std::min<int64_t>(16, std::max<int64_t>(2, (int64_t)(PREFETCH_BYTES / std::max<size_t>(row_bytes, 1))));
}
// Whether this CPU takes lines of weight type t into L2 only
// (ggml_cpu_prefetch_ahead's GGML_PREFETCH_L2; Zen 4 predictor-mode decoding
// +5-17%). Asked once per op: the scattered rows here never run a q8xh
// kernel's dense stream, the only one with a near pass into L1.
inline bool prefetch_l2(ggml_type t) { return ggml_cpu_prefetch_ahead(t, false) & GGML_PREFETCH_L2; }
inline void prefetch_bytes(const char *p, size_t n, bool l2) {
    for (size_t o = 0; o < n; o += 64) ggml_prefetch_line(p + o, l2);
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
    const bool use_abs = dst->op_params[1] != 0;
    const int64_t n = p->ne[0], T = p->ne[1], C = dst->ne[1];
    const int ith = params->ith, nth = params->nth;
    int64_t *counts = (int64_t *)params->wdata;  // [nth][C]
    int64_t i0, i1;
    ggml_split_range(n, ith, nth, &i0, &i1);
    auto prow = [&](int64_t t) { return (const float *)((const char *)p->data + t * p->nb[1]); };
    auto on = [&](float v) { return (use_abs ? fabsf(v) : v) > thr; };
    auto active_any = [&](int64_t i) {
        for (int64_t t = 0; t < T; t++)
            if (on(prow(t)[i])) return true;
        return false;
    };

    for (int64_t c = 0; c < C; c++) {
        int64_t k = 0;
        if (c < T) {
            const float *x = prow(c);
            for (int64_t i = i0; i < i1; i++) k += on(x[i]);
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
                if (on(x[i])) *ids++ = (int32_t)i;
        } else {
            for (int64_t i = i0; i < i1; i++)
                if (active_any(i)) *ids++ = (int32_t)i;
        }
        if (ith == 0) out[0] = (int32_t)total;
        if (ith == nth - 1)
            for (int64_t j = 1 + total; j <= n; j++) out[j] = -1;  // defined bytes past the list
    }
}

// ---------------------------------------------------------------- mask

extern "C" void ggml_compute_forward_sparse_mask(const ggml_compute_params *params, ggml_tensor *dst) {
    const ggml_tensor *a = dst->src[0];
    float thr;
    memcpy(&thr, &dst->op_params[0], sizeof(thr));
    const int64_t n = a->ne[0], T = a->ne[1];
    int64_t t0, t1;
    ggml_split_range(T, params->ith, params->nth, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) {
        const float *x = (const float *)((const char *)a->data + t * a->nb[1]);
        float *y = (float *)((char *)dst->data + t * dst->nb[1]);
        for (int64_t i = 0; i < n; i++) y[i] = fabsf(x[i]) > thr ? x[i] : 0.0f;
    }
}

// ---------------------------------------------------------------- row-sparse matvec

namespace {

struct rows_plan {
    ggml_type vdt;
    size_t vrow;   // bytes of one converted activation row
    size_t xstride;  // bytes per token: vrow, or 2 vrow with the GGML_PREC_HIGH residual
    bool high;
    bool convert;
    // The kernel the dense MUL_MAT picks for the same product (mul-mat.cpp),
    // so that an active output is the very same dot: a q8x kernel (q8xh with
    // GGML_PREC_HIGH, the residual included) where the type has one (for one
    // token: where the family streams mat-vec with it), up to eight tokens a
    // call; else vec_dot, or the fused row + residual kernel.
    ggml_q8x_dot_t q8x_dot;
    ggml_q8x_quantize_t q8x_quantize;
    ggml_q8x_pack_t q8x_pack;  // non-null: q8x_dot's rows rewritten by it after q8x_quantize
    ggml_vec_dot2_t dot2;
    ggml_vec_dot_t dot;  // the one-token kernel for vdt (ggml_cpu_act_dot)
    bool priv;     // every thread converts all tokens into its own area: no barrier
};

// Decode (few tokens): a private conversion costs less than a barrier, which on
// a busy machine can cost a scheduler time slice.
constexpr int64_t PRIVATE_CONVERT_MAX_T = 2;

rows_plan make_rows_plan(const ggml_tensor *dst) {
    const ggml_tensor *w = dst->src[0], *x = dst->src[1];
    rows_plan p;
    const ggml_cpu_type_traits *tw = ggml_get_cpu_type_traits(w->type);
    if (!tw->vec_dot) ggml_abort("%s: no dot kernel for weight type %s", ggml_op_name(dst->op), ggml_type_name(w->type));
    const bool high = ggml_prec_high(dst);
    p.vdt = ggml_cpu_act_type(tw, high);
    p.dot = ggml_cpu_act_dot(tw, high);
    p.vrow = ggml_row_size(p.vdt, x->ne[0]);
    p.convert = p.vdt != GGML_TYPE_F32;
    p.high = p.convert && high;  // converted at high precision: the q8xh layout, or a residual row
    const ggml_q8x_pick pick = ggml_cpu_q8x_pick(w->type, x->ne[0], x->ne[1], p.high);
    p.q8x_dot = p.convert ? pick.dot : nullptr;
    p.q8x_quantize = pick.quantize;
    p.q8x_pack = p.q8x_dot && !pick.gemm ? pick.pack : nullptr;  // a gemm's pack is for its rows only
    if (p.q8x_dot) p.vrow = pick.vrow;
    p.dot2 = p.high && !p.q8x_dot && tw->vec_dot != tw->vec_dot_ref ? ggml_cpu_dot_resid(w->type) : nullptr;
    p.xstride = p.high && !p.q8x_dot ? 2 * p.vrow : p.vrow;  // the q8xh layout carries the residual itself
    p.priv = x->ne[1] <= PRIVATE_CONVERT_MAX_T;
    return p;
}

}  // namespace

namespace {

// Converts the activations x [K, T] as rows_plan says, once per token (every
// worker privately for few tokens, else split among workers and a barrier).
// Returns where converted token 0 starts (token t at + t * p.xstride); for F32
// activations (nothing to convert) returns nullptr.
const char *convert_rows(const char *op, const ggml_compute_params *params, const rows_plan &p, const ggml_tensor *x) {
    if (!p.convert) return nullptr;
    const int64_t K = x->ne[0], T = x->ne[1];
    const int ith = params->ith, nth = params->nth;
    char *wdata = (char *)params->wdata;
    const ggml_cpu_type_traits *tv = ggml_get_cpu_type_traits(p.vdt);
    if (!tv->from_float) ggml_abort("%s: no converter to %s", op, ggml_type_name(p.vdt));
    const ggml_from_float_t from_float = p.q8x_dot ? p.q8x_quantize : tv->from_float;
    const bool resid = p.high && !p.q8x_dot;  // q8xh rows need no second pass
    const size_t one = align_up(p.xstride * (size_t)T);
    float *scratch = (float *)(wdata + (p.priv ? (size_t)nth : 1) * one) + (size_t)ith * (align_up(sizeof(float) * (size_t)K) / sizeof(float));
    int64_t t0 = 0, t1 = T;
    if (p.priv) wdata += (size_t)ith * one;
    else ggml_split_range(T, ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) {
        ggml_convert_act((const float *)((const char *)x->data + t * x->nb[1]), wdata + (size_t)t * p.xstride, K,
                         from_float, p.vdt, p.vrow, resid, scratch);
        if (p.q8x_pack) p.q8x_pack(wdata + (size_t)t * p.xstride, K);
    }
    if (!p.priv) ggml_barrier(params->tp);
    return wdata;
}

// Bytes convert_rows needs (the caller's own scratch goes after them).
size_t convert_rows_size(const rows_plan &p, const ggml_tensor *x, int n_threads) {
    if (!p.convert) return 0;
    const size_t one = align_up(p.xstride * (size_t)x->ne[1]);
    const size_t scratch = p.high ? (size_t)n_threads * align_up(sizeof(float) * (size_t)x->ne[0]) : 0;
    return (p.priv ? (size_t)n_threads * one : one) + scratch;
}

// out[t * out_stride bytes] = dot(weight row, token t) for t < T, each the same
// computation as in the dense MUL_MAT (conv: convert_rows' result).
void row_dots(const rows_plan &p, int64_t K, const char *wrow, const char *conv,
              const ggml_tensor *x, float *out, size_t out_stride, int64_t T) {
    auto xrow = [&](int64_t t) -> const void * {
        return conv ? (const void *)(conv + (size_t)t * p.xstride) : (const void *)((const char *)x->data + t * x->nb[1]);
    };
    auto o = [&](int64_t t) { return (float *)((char *)out + t * out_stride); };
    if (p.q8x_dot) {  // q8x / q8xh: up to eight tokens per call
        for (int64_t t0 = 0; t0 < T; t0 += 8) p.q8x_dot(K, wrow, xrow(t0), p.xstride, o(t0), out_stride, (int)std::min<int64_t>(8, T - t0));
        return;
    }
    for (int64_t t = 0; t < T; t++) {
        if (p.dot2) p.dot2(K, o(t), wrow, xrow(t), p.vrow);
        else ggml_vec_dot_resid(p.dot, K, o(t), wrow, xrow(t), p.vrow, p.high);
    }
}

}  // namespace

extern "C" size_t ggml_mul_mat_sparse_rows_work_size(const ggml_tensor *node, int n_threads) {
    return convert_rows_size(make_rows_plan(node), node->src[1], n_threads);
}

extern "C" void ggml_compute_forward_mul_mat_sparse_rows(const ggml_compute_params *params, ggml_tensor *dst) {
    const char *op = "mul_mat_sparse_rows";
    const ggml_tensor *w = dst->src[0], *x = dst->src[1], *idx = dst->src[2];
    const int64_t K = w->ne[0], T = x->ne[1];
    const int64_t begin = dst->op_params[0], end = dst->op_params[1];
    const int ith = params->ith, nth = params->nth;
    const rows_plan p = make_rows_plan(dst);
    const char *conv = convert_rows(op, params, p, x);
    const int g = dst->op_params[2] > 0 ? dst->op_params[2] : 1;
    auto outg = [&](int64_t i, int64_t t, int j) {
        return (float *)((char *)dst->data + t * dst->nb[1] + j * dst->nb[2]) + i;
    };

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
            for (int j = 0; j < g; j++)
                for (int64_t t = 0; t < T; t++) memset(outg(z0, t, j), 0, sizeof(float) * (size_t)(z1 - z0));
    };

    const size_t wbytes = (size_t)g * ggml_row_size(w->type, K);  // one neuron: g adjacent rows
    auto wrow_of = [&](int64_t a) { return (const char *)w->data + (int64_t)l.ids[a] * g * w->nb[1]; };
    // Scattered rows need software prefetch; a contiguous run of active rows is
    // one sequential stream that the hardware prefetcher already follows.
    const bool contiguous = a1 > a0 && l.ids[a1 - 1] - l.ids[a0] == a1 - 1 - a0;
    // (the distance counts rows, and each row is fetched just before the row it
    // pairs with is computed: one neuron's g rows at once overfill the queue)
    const size_t rbytes = wbytes / (size_t)g;
    const int64_t ahead = contiguous ? 0 : std::max<int64_t>(1, prefetch_rows(rbytes) / g);
    const bool l2 = prefetch_l2(w->type);
    for (int64_t a = a0; a < std::min(a1, a0 + ahead); a++) prefetch_bytes(wrow_of(a), wbytes, l2);
    int64_t cur = lo;
    for (int64_t a = a0; a < a1; a++) {
        const int64_t i = l.ids[a];
        if (i < cur || i >= hi) bad_list(op, i);
        zero(cur, i);
        for (int j = 0; j < g; j++) {
            if (ahead && a + ahead < a1) prefetch_bytes(wrow_of(a + ahead) + j * rbytes, rbytes, l2);
            const char *wrow = (const char *)w->data + (i * g + j) * w->nb[1];
            row_dots(p, K, wrow, conv, x, outg(i, 0, j), dst->nb[1], T);
        }
        cur = i + 1;
    }
    zero(cur, hi);
}

// ---------------------------------------------------------------- column-sparse down

namespace {

// Output slices are multiples of this many elements (and of the block size).
int64_t down_unit(ggml_type type) { return std::max<int64_t>(64, ggml_blck_size(type)); }

// The dense path of SPARSE_DOWN: h (inactive entries zeroed) converted to
// w_down's vec_dot_type, then one dot product per output over [begin, end).
struct down_dense_plan {
    bool ok = false;
    ggml_type vdt = GGML_TYPE_F32;
    int64_t len = 0;
    size_t vrow = 0;
    bool high = false;  // GGML_PREC_HIGH: each converted h row is followed by its residual
    size_t hstride = 0;  // bytes per token: vrow or 2 vrow
    ggml_vec_dot_t dot = nullptr;  // the kernel for vdt (ggml_cpu_act_dot)
};

down_dense_plan make_down_dense_plan(const ggml_tensor *wd, int64_t begin, int64_t end, bool high) {
    down_dense_plan p;
    if (!wd) return p;
    const ggml_cpu_type_traits *td = ggml_get_cpu_type_traits(wd->type);
    if (!td->vec_dot) ggml_abort("sparse_down: no dot kernel for w_down type %s", ggml_type_name(wd->type));
    p.vdt = ggml_cpu_act_type(td, high);
    p.dot = ggml_cpu_act_dot(td, high);
    const int64_t blck = std::max(ggml_blck_size(wd->type), ggml_blck_size(p.vdt));
    p.len = end - begin;
    p.ok = p.len > 0 && begin % blck == 0 && end % blck == 0;
    p.vrow = ggml_row_size(p.vdt, p.len);
    p.high = p.vdt != GGML_TYPE_F32 && high;
    p.hstride = p.high ? 2 * p.vrow : p.vrow;
    return p;
}

down_dense_plan make_down_dense_plan(const ggml_tensor *dst) {
    return make_down_dense_plan(dst->src[3], dst->op_params[0], dst->op_params[1], ggml_prec_high(dst));
}

// Scratch of dense_down for T tokens and nth workers.
size_t dense_down_size(const down_dense_plan &p, int64_t T, int nth) {
    return align_up(p.hstride * (size_t)T) + (size_t)nth * 2 * align_up(sizeof(float) * (size_t)p.len);
}

}  // namespace

extern "C" size_t ggml_sparse_down_work_size(const ggml_tensor *node, int n_threads) {
    const ggml_tensor *wt = node->src[0];
    const size_t sparse = (size_t)n_threads * GGML_AXPY_MAX_ROWS * align_up(sizeof(float) * (size_t)wt->ne[0]);
    const down_dense_plan p = make_down_dense_plan(node);
    const size_t dense = p.ok ? dense_down_size(p, node->src[1]->ne[1], n_threads) : 0;
    return std::max(sparse, dense);
}

namespace {

// The dense path of the down projection: h (row t at h + t * h_stride bytes;
// only the active entries are read, the others taken as 0) converted to
// w_down's vec_dot_type, then one dot product per output over [begin, end) of
// w_down [n, d]; y row t at y + t * y_stride bytes. conv: dense_down_size bytes.
void dense_down(const ggml_compute_params *params, const ggml_tensor *wd, int64_t begin, int64_t end, const active_list &l,
                const down_dense_plan &p, const float *h, size_t h_stride, int64_t T, char *y, size_t y_stride, char *conv,
                const char *op) {
    const int64_t d = wd->ne[1];
    const int ith = params->ith, nth = params->nth;
    const size_t frow = align_up(sizeof(float) * (size_t)p.len);
    float *tmp = (float *)(conv + align_up(p.hstride * (size_t)T) + (size_t)ith * 2 * frow);
    float *scratch = (float *)((char *)tmp + frow);
    int64_t t0, t1;
    ggml_split_range(T, ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) {
        const float *ht = (const float *)((const char *)h + t * h_stride);
        memset(tmp, 0, sizeof(float) * (size_t)p.len);
        int64_t prev = begin - 1;
        for (int64_t a = l.lo; a < l.hi; a++) {
            const int64_t i = l.ids[a];
            if (i <= prev || i >= end) bad_list(op, i);
            prev = i;
            tmp[i - begin] = ht[i];
        }
        char *out = conv + (size_t)t * p.hstride;
        if (p.vdt == GGML_TYPE_F32) memcpy(out, tmp, sizeof(float) * (size_t)p.len);
        else ggml_convert_act(tmp, out, p.len, ggml_get_cpu_type_traits(p.vdt)->from_float, p.vdt, p.vrow, p.high, scratch);
    }
    ggml_barrier(params->tp);
    int64_t j0, j1;
    ggml_split_range(d, ith, nth, &j0, &j1);
    const size_t woff = ggml_row_size(wd->type, begin);
    for (int64_t j = j0; j < j1; j++) {
        const char *row = (const char *)wd->data + j * wd->nb[1] + woff;
        for (int64_t t = 0; t < T; t++)
            ggml_vec_dot_resid(p.dot, p.len, (float *)(y + t * y_stride) + j, row, conv + (size_t)t * p.hstride, p.vrow,
                               p.high);
    }
}

void sparse_down_dense(const ggml_compute_params *params, ggml_tensor *dst, const active_list &l, const down_dense_plan &p) {
    const ggml_tensor *h = dst->src[1];
    dense_down(params, dst->src[3], dst->op_params[0], dst->op_params[1], l, p, (const float *)h->data, h->nb[1], h->ne[1],
               (char *)dst->data, dst->nb[1], (char *)params->wdata, "sparse_down");
}

}  // namespace

extern "C" void ggml_compute_forward_sparse_down(const ggml_compute_params *params, ggml_tensor *dst) {
    const char *op = "sparse_down";
    const ggml_tensor *wt = dst->src[0], *h = dst->src[1], *idx = dst->src[2];
    const ggml_type_traits *tw = ggml_get_type_traits(wt->type);
    const int64_t d = wt->ne[0], T = h->ne[1];
    const int64_t begin = dst->op_params[0], end = dst->op_params[1];
    const int ith = params->ith, nth = params->nth;

    const active_list l = read_list(op, idx, begin, end);
    const down_dense_plan dp = make_down_dense_plan(dst);
    const int mode = dst->op_params[2];
    if (dp.ok && (mode == 2 || (mode == 0 && params->dense_policy(l.hi - l.lo, end - begin, T)))) {
        sparse_down_dense(params, dst, l, dp);
        return;
    }

    const int64_t unit = down_unit(wt->type);
    int64_t u0, u1;
    ggml_split_range((d + unit - 1) / unit, ith, nth, &u0, &u1);
    const int64_t k0 = std::min(d, u0 * unit), k1 = std::min(d, u1 * unit), len = k1 - k0;
    if (len <= 0) return;
    const size_t woff = (size_t)(k0 / tw->blck_size) * tw->type_size;  // slice start inside a row

    auto yrow = [&](int64_t t) { return (float *)((char *)dst->data + t * dst->nb[1]) + k0; };
    auto hval = [&](int64_t i, int64_t t) { return ((const float *)((const char *)h->data + t * h->nb[1]))[i]; };
    for (int64_t t = 0; t < T; t++) memset(yrow(t), 0, sizeof(float) * (size_t)len);

    const size_t bstride = align_up(sizeof(float) * (size_t)d) / sizeof(float);
    float *buf = (float *)((char *)params->wdata + (size_t)ith * GGML_AXPY_MAX_ROWS * bstride * sizeof(float));
    // Rows are applied GGML_AXPY_MAX_ROWS at a time (fewer stores of y); the
    // grouping only depends on the list, and grouped rows give the same bits.
    bool direct;
    const ggml_axpy_t kern = pick_axpy(wt->type, T, &direct);
    const size_t sbytes = (size_t)(len / tw->blck_size) * tw->type_size;  // this thread's slice of a row
    auto slice_of = [&](int64_t a) { return (const char *)wt->data + (int64_t)l.ids[a] * wt->nb[1] + woff; };
    const int64_t ahead = prefetch_rows(sbytes);
    const bool l2 = prefetch_l2(wt->type);
    for (int64_t a = l.lo; a < std::min(l.hi, l.lo + ahead); a++) prefetch_bytes(slice_of(a), sbytes, l2);

    const void *rows[GGML_AXPY_MAX_ROWS];
    int64_t gid[GGML_AXPY_MAX_ROWS];
    float av[GGML_AXPY_MAX_ROWS];
    int nr = 0;
    auto flush = [&]() {
        if (nr == 0) return;
        for (int64_t t = 0; t < T; t++) {
            for (int r = 0; r < nr; r++) av[r] = hval(gid[r], t);
            kern(len, yrow(t), rows, av, nr);
        }
        nr = 0;
    };
    int64_t prev = begin - 1;
    for (int64_t a = l.lo; a < l.hi; a++) {
        const int64_t i = l.ids[a];
        if (i <= prev || i >= end) bad_list(op, i);
        prev = i;
        if (a + ahead < l.hi) prefetch_bytes(slice_of(a + ahead), sbytes, l2);
        bool any = false;  // a neuron with h = 0 for every token adds nothing (relu zeros)
        for (int64_t t = 0; t < T && !any; t++) any = hval(i, t) != 0.0f;
        if (!any) continue;
        const char *row = slice_of(a);
        if (direct) {
            rows[nr] = row;
        } else {
            float *dq = buf + (size_t)nr * bstride;
            tw->to_float(row, dq, len);
            rows[nr] = dq;
        }
        gid[nr++] = i;
        if (nr == GGML_AXPY_MAX_ROWS) flush();
    }
    flush();
}
// ---------------------------------------------------------------- fused FFN over a neuron bundle

namespace {

// Parts of the active list with their own accumulator: a function of the list
// length only, so the summation order never depends on the thread count.
constexpr int64_t FFN_PART_ROWS = 16;
constexpr int FFN_MAX_PARTS = 8;
int ffn_parts(int64_t m) { return (int)std::max<int64_t>(1, std::min<int64_t>(FFN_MAX_PARTS, m / FFN_PART_ROWS)); }

// Scratch after convert_rows': the accumulators of parts 1.. ([d, T] each; part
// 0 sums into dst), then per worker GGML_AXPY_MAX_ROWS decoded down rows.
size_t ffn_acc_offset(const rows_plan &p, const ggml_tensor *x, int nth) { return align_up(convert_rows_size(p, x, nth)); }

}  // namespace

// Past the crossover density (given ffn_down, src[3]): h of every active
// neuron into [n, T] scratch after the accumulators, then dense_down's scratch.
size_t ffn_dense_offset(const ggml_tensor *node, int nth) {
    const ggml_tensor *w = node->src[0], *x = node->src[1];
    const size_t row = align_up(sizeof(float) * (size_t)w->ne[0]);
    return ffn_acc_offset(make_rows_plan(node), x, nth) + (size_t)(FFN_MAX_PARTS - 1) * (size_t)x->ne[1] * row +
           (size_t)nth * GGML_AXPY_MAX_ROWS * row;
}

extern "C" size_t ggml_sparse_ffn_work_size(const ggml_tensor *node, int n_threads) {
    const ggml_tensor *w = node->src[0], *x = node->src[1];
    const int64_t n = w->ne[1] / 3, T = x->ne[1];
    const down_dense_plan dp = make_down_dense_plan(node->src[3], node->op_params[0], node->op_params[1], ggml_prec_high(node));
    const size_t dense = dp.ok ? align_up(sizeof(float) * (size_t)(n * T)) + dense_down_size(dp, T, n_threads) : 0;
    return ffn_dense_offset(node, n_threads) + dense;
}

// Each part: for its neurons in ascending order, the gate and up dots (as the
// row-sparse op computes them), h = act(g) * up'(u), and y_part += h * down_t_i
// with the axpy kernels of SPARSE_DOWN (up to four rows per pass over y). A
// neuron's three rows are adjacent, fetched row by row a few neurons ahead.
// Parts go to workers round-robin; then y = part 0 + part 1 + ... in order.
// Past the crossover density (the pool's dense policy) with ffn_down
// given, the parts only compute h, and the down projection is the dense
// mat-vec of SPARSE_DOWN's dense path (down_t rows are not read).
extern "C" void ggml_compute_forward_sparse_ffn(const ggml_compute_params *params, ggml_tensor *dst) {
    const char *op = "sparse_ffn_bundle";
    const ggml_tensor *w = dst->src[0], *x = dst->src[1], *idx = dst->src[2];
    const ggml_to_float_t w_to_float = ggml_get_type_traits(w->type)->to_float;
    const ggml_tensor *wg = dst->src[4], *wu = dst->src[5];  // plain gate and up: the dense fallback's
    const int64_t d = w->ne[0], n = w->ne[1] / 3, T = x->ne[1];
    const int ith = params->ith, nth = params->nth;
    const int64_t begin = dst->op_params[0], end = dst->op_params[1];
    const ggml_op act = (ggml_op)dst->op_params[2];
    const bool relu_up = dst->op_params[3] != 0;
    const rows_plan p = make_rows_plan(dst);
    const char *conv = convert_rows(op, params, p, x);

    const active_list l = read_list(op, idx, begin, end);  // ids outside [begin, end) are never read
    const int64_t m = l.hi - l.lo;
    const int P = ffn_parts(m);
    const down_dense_plan dp = make_down_dense_plan(dst->src[3], begin, end, ggml_prec_high(dst));
    const bool dense = dp.ok && wg && wu && params->dense_policy(m, end - begin, T);
    float *hd = (float *)((char *)params->wdata + ffn_dense_offset(dst, nth));  // [n, T] when dense
    const size_t bstride = align_up(sizeof(float) * (size_t)d) / sizeof(float);
    float *acc = (float *)((char *)params->wdata + ffn_acc_offset(p, x, nth));
    float *buf = acc + (size_t)(FFN_MAX_PARTS - 1) * (size_t)T * bstride + (size_t)ith * GGML_AXPY_MAX_ROWS * bstride;
    auto target = [&](int part, int64_t t) {
        return part == 0 ? (float *)((char *)dst->data + t * dst->nb[1]) : acc + ((size_t)(part - 1) * T + t) * bstride;
    };
    auto activate = [&](float g) { return act == GGML_OP_SWIGLU ? op_silu(g) : act == GGML_OP_GEGLU ? op_gelu(g) : op_relu(g); };

    bool direct;
    const ggml_axpy_t kern = pick_axpy(w->type, T, &direct);
    const size_t rbytes = ggml_row_size(w->type, d);
    // The gate and up rows of active entry a: adjacent in the bundle, or (dense
    // fallback) in the plain matrices, which a dense-ish list streams in order.
    auto gate_row = [&](int64_t a) {
        return dense ? (const char *)wg->data + (int64_t)l.ids[a] * wg->nb[1] : (const char *)w->data + (int64_t)l.ids[a] * 3 * w->nb[1];
    };
    auto up_row = [&](int64_t a) {
        return dense ? (const char *)wu->data + (int64_t)l.ids[a] * wu->nb[1] : gate_row(a) + w->nb[1];
    };
    auto down_row = [&](int64_t a) { return gate_row(a) + 2 * w->nb[1]; };
    // scattered neurons are prefetched a few ahead; a contiguous run is one
    // stream per matrix that the hardware prefetcher follows by itself
    const bool contiguous = m > 0 && l.ids[l.hi - 1] - l.ids[l.lo] == m - 1;
    const int64_t ahead = contiguous ? 0 : std::max<int64_t>(1, prefetch_rows(rbytes) / 3);
    const bool l2 = prefetch_l2(w->type);

    for (int part = ith; part < P; part += nth) {
        const int64_t a_begin = l.lo + m * part / P, a_end = l.lo + m * (part + 1) / P;
        if (!dense)
            for (int64_t t = 0; t < T; t++) memset(target(part, t), 0, sizeof(float) * (size_t)d);
        for (int64_t a = a_begin; a < std::min(a_end, a_begin + ahead); a++) {
            prefetch_bytes(gate_row(a), rbytes, l2);
            prefetch_bytes(up_row(a), rbytes, l2);
            if (!dense) prefetch_bytes(down_row(a), rbytes, l2);
        }
        const void *rows[GGML_AXPY_MAX_ROWS];
        float hv[GGML_AXPY_MAX_ROWS][GGML_SPARSE_FFN_MAX_T];
        int nr = 0;
        auto flush = [&]() {
            if (nr == 0) return;
            float av[GGML_AXPY_MAX_ROWS];
            for (int64_t t = 0; t < T; t++) {
                for (int r = 0; r < nr; r++) av[r] = hv[r][t];
                kern(d, target(part, t), rows, av, nr);
            }
            nr = 0;
        };
        int64_t prev = a_begin == l.lo ? begin - 1 : l.ids[a_begin - 1];  // the part before checks that one
        for (int64_t a = a_begin; a < a_end; a++) {
            const int64_t i = l.ids[a];
            if (i <= prev || i >= end) bad_list(op, i);
            prev = i;
            const bool pf = ahead && a + ahead < a_end;
            float g[GGML_SPARSE_FFN_MAX_T], u[GGML_SPARSE_FFN_MAX_T];
            if (pf) prefetch_bytes(gate_row(a + ahead), rbytes, l2);
            row_dots(p, d, gate_row(a), conv, x, g, sizeof(float), T);
            if (pf) prefetch_bytes(up_row(a + ahead), rbytes, l2);
            row_dots(p, d, up_row(a), conv, x, u, sizeof(float), T);
            if (dense) {
                for (int64_t t = 0; t < T; t++) hd[t * n + i] = activate(g[t]) * (relu_up ? op_relu(u[t]) : u[t]);
                continue;
            }
            if (pf) prefetch_bytes(down_row(a + ahead), rbytes, l2);
            bool any = false;  // a neuron with h = 0 for every token adds nothing
            for (int64_t t = 0; t < T; t++) {
                hv[nr][t] = activate(g[t]) * (relu_up ? op_relu(u[t]) : u[t]);
                any = any || hv[nr][t] != 0.0f;
            }
            if (!any) continue;
            const char *down = down_row(a);
            if (direct) {
                rows[nr] = down;
            } else {
                float *dq = buf + (size_t)nr * bstride;
                w_to_float(down, dq, d);
                rows[nr] = dq;
            }
            if (++nr == GGML_AXPY_MAX_ROWS) flush();
        }
        flush();
    }
    if (dense) {
        ggml_barrier(params->tp);  // every part's h is written
        dense_down(params, dst->src[3], begin, end, l, dp, hd, sizeof(float) * (size_t)n, T, (char *)dst->data, dst->nb[1],
                   (char *)hd + align_up(sizeof(float) * (size_t)(n * T)), op);
        return;
    }
    if (P == 1) return;
    ggml_barrier(params->tp);
    int64_t j0, j1;  // y = part 0 + part 1 + ... (in part order), columns split among workers
    ggml_split_range(d, ith, nth, &j0, &j1);
    for (int64_t t = 0; t < T; t++) {
        float *y = target(0, t);
        for (int part = 1; part < P; part++) {
            const float *src = target(part, t);
            for (int64_t j = j0; j < j1; j++) y[j] += src[j];
        }
    }
}
