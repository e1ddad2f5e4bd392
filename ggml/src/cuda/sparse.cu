// The neuron-aware ops on the device (semantics in ggml.h, CPU kernels in
// cpu/ops-sparse.cpp):
//   SPARSE_SELECT        the index list built here, in pinfer's layout: one
//                        block per column, an ordered compaction (ballot +
//                        block scan), so ids come out ascending.
//   MUL_MAT_SPARSE_ROWS  one launch, a warp per row of [b, e), g rows per neuron:
//                        in row order over a mostly-active range (the dense-prefix
//                        variant), else over the active ids of the list ∩ [b, e)
//                        (found by binary search of the sorted list).
//   SPARSE_DOWN          output-stationary over ffn_down_t: a thread owns an
//                        output element and walks the active ids in ascending
//                        order: every element is summed in the same order on
//                        every run, without atomics.
//   SPARSE_FFN           the fused bundle FFN: per active neuron a warp forms
//                        act(gate·x) · up'(up·x) into scratch, then the down
//                        part as SPARSE_DOWN over the bundle's down_t rows.
// Launch sizes never depend on the list's count (it stays on the device):
// grids are sized by the range or the list's capacity, and threads past the
// count exit.
#include <algorithm>

#include "ops.cuh"
#include "row-dot.cuh"

namespace pcuda {
namespace {

constexpr int SELECT_THREADS = 1024;

__global__ void select_kernel(int32_t *out, int64_t out_nb1, view p, float thr, bool abs_, int T) {
    __shared__ int warp_tot[SELECT_THREADS / 32];
    __shared__ int base_sh;
    const int col = blockIdx.x;  // 0..T-1 tokens, T: the union (T > 1)
    const int64_t n = p.ne[0];
    int32_t *list = (int32_t *)((char *)out + col * out_nb1);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (threadIdx.x == 0) base_sh = 0;
    __syncthreads();
    for (int64_t c0 = 0; c0 < n; c0 += SELECT_THREADS) {
        const int64_t i = c0 + threadIdx.x;
        bool f = false;
        if (i < n) {
            const int t0 = col < T ? col : 0, t1 = col < T ? col + 1 : T;
            for (int t = t0; t < t1 && !f; t++) {
                const float v = *(const float *)(p.data + i * p.nb[0] + t * p.nb[1]);
                f = (abs_ ? fabsf(v) : v) > thr;
            }
        }
        const unsigned ballot = __ballot_sync(0xffffffffu, f);
        if (lane == 0) warp_tot[warp] = __popc(ballot);
        __syncthreads();
        int before = base_sh;
        for (int w = 0; w < warp; w++) before += warp_tot[w];
        if (f) list[1 + before + __popc(ballot & ((1u << lane) - 1u))] = (int32_t)i;
        __syncthreads();
        if (threadIdx.x == 0) {
            int tot = 0;
            for (int w = 0; w < SELECT_THREADS / 32; w++) tot += warp_tot[w];
            base_sh += tot;
        }
        __syncthreads();
    }
    const int m = base_sh;
    if (threadIdx.x == 0) list[0] = m;
    for (int64_t i = m + threadIdx.x; i < n; i += SELECT_THREADS) list[1 + i] = -1;
}

// The list the ops consume (the last column) and the positions [lo, hi) of
// its ids inside [b, e).
struct list_range {
    const int32_t *ids;
    int lo, hi;
};
__device__ int lower_bound(const int32_t *ids, int m, int32_t v) {
    int lo = 0, hi = m;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (ids[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}
__device__ list_range read_list(const view &idx, int b, int e) {
    const int32_t *col = (const int32_t *)(idx.data + (idx.ne[1] - 1) * idx.nb[1]);
    int m = col[0];
    m = m < 0 ? 0 : (m > idx.ne[0] - 1 ? (int)(idx.ne[0] - 1) : m);  // the CPU aborts; the device clamps
    list_range r;
    r.ids = col + 1;
    r.lo = lower_bound(r.ids, m, b);
    r.hi = lower_bound(r.ids, m, e);
    return r;
}

// A warp's dots of one weight row with up to MATVEC_MAX_T columns of x (lane 0's out is used).
template <class W>
__device__ void row_dots(const char *row, const view &x, int nt, float *out) {
    warp_row_dots<W, MATVEC_MAX_T>(row, x.ne[0], x.data, x.nb[0], x.nb[1], nt, out);
}

constexpr int WARPS = 4;

// The rows of a range [b, e) come out in one launch, each written once: a
// warp per row of the range (the grid never depends on the list's count).
// Over a mostly-active range -- a hot prefix -- warp w computes row b + w
// (or writes its zeros): rows are read in order, as by the dense mat-vec.
// Otherwise warp w computes the w-th active id of the range, and zeroes row
// b + w if that row is inactive. ROW_ORDER_MIN_EIGHTHS is the crossover of the
// two (gpu-check.sh's sparse sweep measures both sides of it).
constexpr int ROW_ORDER_MIN_EIGHTHS = 7;  // row order at >= 7/8 of the range active

__device__ bool active_in(const list_range &l, int64_t r) {
    const int q = l.lo + lower_bound(l.ids + l.lo, l.hi - l.lo, (int32_t)r);
    return q < l.hi && l.ids[q] == r;
}

template <class W>
__device__ void row_out(const view &y, const view &w, const view &x, int64_t id, int g, bool zero) {
    float d[MATVEC_MAX_T];
    for (int j = 0; j < g; j++) {
        const char *row = w.data + (g * id + j) * w.nb[1];
        for (int64_t t0 = 0; t0 < x.ne[1]; t0 += MATVEC_MAX_T) {
            const int nt = (int)min((int64_t)MATVEC_MAX_T, x.ne[1] - t0);
            if (!zero) {
                view xt = x;
                xt.data += t0 * x.nb[1];
                row_dots<W>(row, xt, nt, d);
            }
            if ((threadIdx.x & 31) == 0)
                for (int t = 0; t < nt; t++) *(float *)(y.data + id * y.nb[0] + (t0 + t) * y.nb[1] + j * y.nb[2]) = zero ? 0.0f : d[t];
        }
    }
}

template <class W>
__global__ void rows_kernel(view y, view w, view x, view idx, int b, int e, int g) {
    const list_range l = read_list(idx, b, e);
    const int64_t k = (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5);
    if (k >= e - b) return;
    const int64_t r = b + k;
    const bool on = active_in(l, r);
    if ((int64_t)(l.hi - l.lo) * 8 >= (int64_t)(e - b) * ROW_ORDER_MIN_EIGHTHS) {
        row_out<W>(y, w, x, r, g, !on);
        return;
    }
    if (k < l.hi - l.lo) row_out<W>(y, w, x, l.ids[l.lo + k], g, false);
    if (!on) row_out<W>(y, w, x, r, g, true);
}

// y[:, t] = Σ_{ids in [b, e), ascending} h[pos or id, t] · wt_row(id): h is
// read at the neuron id (SPARSE_DOWN) or at the list position (SPARSE_FFN's
// scratch, h_pos); rows are w_row0 + stride * id.
template <class W>
__global__ void down_kernel(view y, view wt, int64_t row0, int64_t stride, const char *h, int64_t h_nb1, bool h_pos, view idx,
                            int b, int e) {
    const int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= y.ne[0]) return;
    const list_range l = read_list(idx, b, e);
    for (int64_t t0 = 0; t0 < y.ne[1]; t0 += MATVEC_MAX_T) {
        const int nt = (int)min((int64_t)MATVEC_MAX_T, y.ne[1] - t0);
        float acc[MATVEC_MAX_T];
#pragma unroll
        for (int t = 0; t < MATVEC_MAX_T; t++) acc[t] = 0.0f;
        for (int p = l.lo; p < l.hi; p++) {
            const int64_t id = l.ids[p];
            const float w = load_w<W>(wt.data + (row0 + stride * id) * wt.nb[1], j);
            const float *hc = (const float *)(h + (h_pos ? (int64_t)p * sizeof(float) : id * (int64_t)sizeof(float)));
#pragma unroll
            for (int t = 0; t < MATVEC_MAX_T; t++)
                if (t < nt) acc[t] += *(const float *)((const char *)hc + (t0 + t) * h_nb1) * w;
        }
        for (int t = 0; t < nt; t++) *(float *)(y.data + j * y.nb[0] + (t0 + t) * y.nb[1]) = acc[t];
    }
}

__device__ __forceinline__ float act_of(int act, float v) {
    if (act == GGML_OP_REGLU) return v > 0.0f ? v : 0.0f;
    if (act == GGML_OP_GEGLU) {
        const float u = __fmul_rn(__fmul_rn(0.7978845608028654f, v), __fadd_rn(1.0f, __fmul_rn(__fmul_rn(0.044715f, v), v)));
        return __fdiv_rn(v, __fadd_rn(1.0f, expf(__fmul_rn(-2.0f, u))));
    }
    return __fdiv_rn(v, __fadd_rn(1.0f, expf(-v)));  // SWIGLU: silu
}

// h[p, t] for the list positions p of the range: scratch laid out [cap, T].
template <class W>
__global__ void ffn_act_kernel(float *h, int64_t cap, view w, view x, view idx, int b, int e, int act, bool relu_up) {
    const list_range l = read_list(idx, b, e);
    const int64_t p = l.lo + (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5);
    if (p >= l.hi) return;
    const int64_t id = l.ids[p];
    const int nt = (int)x.ne[1];
    float g[MATVEC_MAX_T], u[MATVEC_MAX_T];
    row_dots<W>(w.data + (3 * id) * w.nb[1], x, nt, g);
    row_dots<W>(w.data + (3 * id + 1) * w.nb[1], x, nt, u);
    if ((threadIdx.x & 31) == 0)
        for (int t = 0; t < nt; t++) {
            const float up = relu_up ? (u[t] > 0.0f ? u[t] : 0.0f) : u[t];
            h[t * cap + p] = __fmul_rn(act_of(act, g[t]), up);
        }
}

int select(context &c, ggml_tensor *dst) {
    const ggml_tensor *p = dst->src[0];
    float thr;
    memcpy(&thr, &dst->op_params[0], sizeof(thr));
    const int T = (int)p->ne[1];
    if (T == 0) return 0;
    select_kernel<<<(unsigned)dst->ne[1], SELECT_THREADS, 0, c.compute>>>((int32_t *)dst->data, (int64_t)dst->nb[1], view_of(p), thr,
                                                                          dst->op_params[1] != 0, T);
    return launched("sparse_select") ? 0 : 1;
}

int rows(context &c, ggml_tensor *dst) {
    const ggml_tensor *w = dst->src[0], *x = dst->src[1], *idx = dst->src[2];
    const int b = dst->op_params[0], e = dst->op_params[1], g = dst->op_params[2];
    if (e <= b || dst->ne[1] == 0) return 0;
    with_format(w->type, [&](auto f) {
        rows_kernel<decltype(f)><<<blocks_for(e - b, WARPS), 32 * WARPS, 0, c.compute>>>(view_of(dst), view_of(w), view_of(x), view_of(idx), b,
                                                                                         e, g);
    });
    return launched("sparse_rows") ? 0 : 1;
}

int down(context &c, ggml_tensor *dst) {
    const ggml_tensor *wt = dst->src[0], *h = dst->src[1], *idx = dst->src[2];
    const int b = dst->op_params[0], e = dst->op_params[1];
    if (dst->ne[0] == 0 || dst->ne[1] == 0) return 0;
    with_format(wt->type, [&](auto f) {
        down_kernel<decltype(f)><<<blocks_for(dst->ne[0], 128), 128, 0, c.compute>>>(view_of(dst), view_of(wt), 0, 1, (const char *)h->data,
                                                                                      (int64_t)h->nb[1], false, view_of(idx), b, e);
    });
    return launched("sparse_down") ? 0 : 1;
}

int ffn(context &c, ggml_tensor *dst) {
    const ggml_tensor *w = dst->src[0], *x = dst->src[1], *idx = dst->src[2];
    const int b = dst->op_params[0], e = dst->op_params[1], act = dst->op_params[2];
    const bool relu_up = dst->op_params[3] != 0;
    const int64_t cap = idx->ne[0] - 1;  // list positions: h is indexed by position
    if (dst->ne[0] == 0 || dst->ne[1] == 0) return 0;
    const size_t bytes = op_scratch_bytes(dst);
    float *h = bytes ? (float *)scratch(c, bytes) : nullptr;
    if (bytes && !h) return 1;
    const int64_t in_range = std::min<int64_t>(e - b, cap);
    bool ok = true;
    with_format(w->type, [&](auto f) {
        using W = decltype(f);
        if (in_range > 0) {
            ffn_act_kernel<W><<<blocks_for(in_range, WARPS), 32 * WARPS, 0, c.compute>>>(h, cap, view_of(w), view_of(x), view_of(idx), b, e,
                                                                                        act, relu_up);
            ok = launched("sparse_ffn act");
        }
        if (ok)
            down_kernel<W><<<blocks_for(dst->ne[0], 128), 128, 0, c.compute>>>(view_of(dst), view_of(w), 2, 3, (const char *)h,
                                                                               cap * (int64_t)sizeof(float), true, view_of(idx), b, e);
    });
    return ok && launched("sparse_ffn down") ? 0 : 1;
}

}  // namespace

size_t op_scratch_bytes(const ggml_tensor *dst) {
    if (dst->op == GGML_OP_MUL_MAT && dst->src[1]->ne[1] > MATVEC_MAX_T)  // mat-mat: a scale per column of b
        return (size_t)(dst->ne[1] * dst->ne[2] * dst->ne[3]) * sizeof(float);
    if (dst->op != GGML_OP_SPARSE_FFN) return 0;
    return (size_t)(dst->src[2]->ne[0] - 1) * (size_t)dst->src[1]->ne[1] * sizeof(float);
}

int op_sparse(context &c, ggml_tensor *dst) {
    switch (dst->op) {
        case GGML_OP_SPARSE_SELECT: return select(c, dst);
        case GGML_OP_MUL_MAT_SPARSE_ROWS: return rows(c, dst);
        case GGML_OP_SPARSE_DOWN: return down(c, dst);
        case GGML_OP_SPARSE_FFN: return ffn(c, dst);
        default: ggml_backend_set_error("cuda: %s is not a sparse op", ggml_op_name(dst->op)); return 1;
    }
}

}  // namespace pcuda
