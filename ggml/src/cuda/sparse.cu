// The neuron-aware ops on the device (semantics in ggml.h, CPU kernels in
// cpu/ops-sparse.cpp):
//   SPARSE_SELECT        the index list built here, in pinfer's layout: one
//                        block per column, an ordered compaction (ballot +
//                        block scan), so ids come out ascending.
//   MUL_MAT_SPARSE_ROWS  one launch, a warp per row of [b, e), g rows per neuron:
//                        in row order over a mostly-active range (the dense-prefix
//                        variant), else over the active ids of the list ∩ [b, e)
//                        (found by binary search of the sorted list).
//   SPARSE_DOWN          output-stationary over ffn_down_t: a thread owns 8
//                        outputs (a group, groups.cuh) and walks one chunk of
//                        the active ids in ascending order; the chunks' partial
//                        sums are added in chunk order (the element path for
//                        other shapes: a thread per output, all ids). Every
//                        element is summed in the same order on every run,
//                        without atomics.
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
__device__ void row_dots(const char *row, int64_t nb1, const view &x, int nt, float *out) {
    warp_row_dots<W, MATVEC_MAX_T>(row, nb1, x.ne[0], x.data, x.nb[0], x.nb[1], nt, out);
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
                row_dots<W>(row, w.nb[1], xt, nt, d);
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

// The group path of the same sum (groups.cuh): thread i owns the 8 outputs of
// group i of a down_t row, and the range's ids are split into P chunks in
// list order (blockIdx.y), so the device fills up even when the outputs are
// few. Chunk c writes its partial sums to part[c, t, :]; down_reduce adds
// the P partials in chunk order: a fixed order on every run, no atomics.
template <class W, int NT>
__global__ void down_g8_kernel(float *part, int P, view wt, int64_t row0, int64_t stride, const char *h, int64_t h_nb1, bool h_pos,
                               view idx, int b, int e, int64_t D, int64_t T) {
    using G = g8_of<W>;
    const int64_t gi = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (gi >= D / 8) return;
    const int c = (int)blockIdx.y;
    const list_range l = read_list(idx, b, e);
    const int64_t n = l.hi - l.lo;
    const int p_beg = l.lo + (int)(n * c / P), p_end = l.lo + (int)(n * (c + 1) / P);
    const int64_t blk = gi / G::G;
    const int s = (int)(gi % G::G);
    const int64_t p0 = blk * G::QKG + (G::HALF == 16 ? 4 * s : 8 * s);
    const char *wblk = wt.data + row0 * wt.nb[1] + blk * G::GB;
    for (int64_t t0 = 0; t0 < T; t0 += NT) {
        const int nt = (int)min((int64_t)NT, T - t0);
        float acc[NT][8];
#pragma unroll
        for (int t = 0; t < NT; t++)
#pragma unroll
            for (int i = 0; i < 8; i++) acc[t][i] = 0.0f;
#pragma unroll 4
        for (int p = p_beg; p < p_end; p++) {
            const int64_t id = l.ids[p];
            float q[8], d = 1.0f, mn = 0.0f;
            G::group((const uint8_t *)wblk + stride * id * wt.nb[1], s, q, d, mn);
#pragma unroll
            for (int i = 0; i < 8; i++) {
                if constexpr (G::MIN) q[i] = fmaf(d, q[i], mn);
                else if constexpr (G::SCALE) q[i] = d * q[i];
            }
            const char *hc = h + (h_pos ? (int64_t)p : id) * (int64_t)sizeof(float) + t0 * h_nb1;
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t >= nt) break;
                const float hv = *(const float *)(hc + t * h_nb1);
#pragma unroll
                for (int i = 0; i < 8; i++) acc[t][i] = fmaf(hv, q[i], acc[t][i]);
            }
        }
        for (int t = 0; t < nt; t++) {
            float *o = part + ((int64_t)c * T + t0 + t) * D + p0;
            *(float4 *)o = make_float4(acc[t][0], acc[t][1], acc[t][2], acc[t][3]);
            *(float4 *)(o + G::HALF) = make_float4(acc[t][4], acc[t][5], acc[t][6], acc[t][7]);
        }
    }
}

__global__ void down_reduce_kernel(view y, const float *part, int P, int64_t D, int64_t T) {
    const int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= D * T) return;
    const int64_t j = k % D, t = k / D;
    float sum = 0.0f;
    for (int c = 0; c < P; c++) sum += part[((int64_t)c * T + t) * D + j];
    *(float *)(y.data + j * y.nb[0] + t * y.nb[1]) = sum;
}

// Chunks of the group path for a range of n ids, T columns and D outputs: about
// 16 ids a chunk, at most 128 chunks and 16 MiB of partial sums.
int down_chunks(int64_t n, int64_t T, int64_t D) {
    int64_t P = std::min<int64_t>(128, std::max<int64_t>(1, (n + 15) / 16));
    const int64_t cap = ((int64_t)16 << 20) / std::max<int64_t>(1, T * D * (int64_t)sizeof(float));
    return (int)std::max<int64_t>(1, std::min(P, cap));
}
size_t down_part_bytes(int P, int64_t T, int64_t D) { return ((size_t)P * T * D * sizeof(float) + 255) / 256 * 256; }

// How many ids of the list can fall in the op's range [b, e): its length, at most the list's capacity.
int64_t ids_in_range(const ggml_tensor *dst) {
    return std::min<int64_t>(std::max(dst->op_params[1] - dst->op_params[0], 0), dst->src[2]->ne[0] - 1);
}

// Whether the down rows of wt (D elements each) take the group path.
bool down_g8(const ggml_tensor *wt, int64_t D) {
    bool ok = false;
    with_format(wt->type, [&](auto f) { ok = g8_fits<decltype(f)>(wt->data, D, (int64_t)wt->nb[1]); });
    return ok && D % 8 == 0;
}

// SPARSE_FFN's per-neuron activations h [cap, T] (256-byte aligned; the partial sums follow).
size_t ffn_h_bytes(const ggml_tensor *dst) {
    return ((size_t)(dst->src[2]->ne[0] - 1) * (size_t)dst->src[1]->ne[1] * sizeof(float) + 255) / 256 * 256;
}

// y = the down sum over [b, e): the group path (with its partials in part) or the element kernel.
template <class W>
bool launch_down(context &c, float *part, const ggml_tensor *dst, const ggml_tensor *wt, int64_t row0, int64_t stride, const char *h,
                 int64_t h_nb1, bool h_pos, const ggml_tensor *idx, int b, int e, int64_t n_range) {
    const int64_t D = dst->ne[0], T = dst->ne[1];
    if (!part) {
        down_kernel<W><<<blocks_for(D, 128), 128, 0, c.compute>>>(view_of(dst), view_of(wt), row0, stride, h, h_nb1, h_pos, view_of(idx), b,
                                                                  e);
        return launched("sparse down");
    }
    if constexpr (g8_of<W>::ok) {
        const int P = down_chunks(n_range, T, D);
        const dim3 grid(blocks_for(D / 8, 128), (unsigned)P);
        if (T == 1)
            down_g8_kernel<W, 1><<<grid, 128, 0, c.compute>>>(part, P, view_of(wt), row0, stride, h, h_nb1, h_pos, view_of(idx), b, e, D, T);
        else
            down_g8_kernel<W, MATVEC_MAX_T><<<grid, 128, 0, c.compute>>>(part, P, view_of(wt), row0, stride, h, h_nb1, h_pos, view_of(idx), b,
                                                                         e, D, T);
        if (!launched("sparse down (groups)")) return false;
        down_reduce_kernel<<<blocks_for(D * T, 256), 256, 0, c.compute>>>(view_of(dst), part, P, D, T);
        return launched("sparse down (sum)");
    }
    return false;
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
    const char *rows[2] = {w.data + (3 * id) * w.nb[1], w.data + (3 * id + 1) * w.nb[1]};  // gate, up: x read once
    float gu[2][MATVEC_MAX_T];
    warp_rows_dots<W, MATVEC_MAX_T, 2>(rows, w.nb[1], x.ne[0], x.data, x.nb[0], x.nb[1], nt, gu);
    if ((threadIdx.x & 31) == 0)
        for (int t = 0; t < nt; t++) {
            const float up = relu_up ? (gu[1][t] > 0.0f ? gu[1][t] : 0.0f) : gu[1][t];
            h[t * cap + p] = __fmul_rn(act_of(act, gu[0][t]), up);
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
    const int64_t n_range = ids_in_range(dst);
    float *part = nullptr;
    if (down_g8(wt, dst->ne[0])) {
        part = (float *)scratch(c, op_scratch_bytes(dst));
        if (!part) return 1;
    }
    bool ok = false;
    with_format(wt->type, [&](auto f) {
        ok = launch_down<decltype(f)>(c, part, dst, wt, 0, 1, (const char *)h->data, (int64_t)h->nb[1], false, idx, b, e, n_range);
    });
    return ok ? 0 : 1;
}

int ffn(context &c, ggml_tensor *dst) {
    const ggml_tensor *w = dst->src[0], *x = dst->src[1], *idx = dst->src[2];
    const int b = dst->op_params[0], e = dst->op_params[1], act = dst->op_params[2];
    const bool relu_up = dst->op_params[3] != 0;
    const int64_t cap = idx->ne[0] - 1;  // list positions: h is indexed by position
    if (dst->ne[0] == 0 || dst->ne[1] == 0) return 0;
    const size_t bytes = op_scratch_bytes(dst), h_bytes = ffn_h_bytes(dst);
    char *work = bytes ? (char *)scratch(c, bytes) : nullptr;
    if (bytes && !work) return 1;
    float *h = (float *)work, *part = bytes > h_bytes ? (float *)(work + h_bytes) : nullptr;
    const int64_t in_range = ids_in_range(dst);
    bool ok = true;
    with_format(w->type, [&](auto f) {
        using W = decltype(f);
        if (in_range > 0) {
            ffn_act_kernel<W><<<blocks_for(in_range, WARPS), 32 * WARPS, 0, c.compute>>>(h, cap, view_of(w), view_of(x), view_of(idx), b, e,
                                                                                        act, relu_up);
            ok = launched("sparse_ffn act");
        }
        if (ok) ok = launch_down<W>(c, part, dst, w, 2, 3, (const char *)h, cap * (int64_t)sizeof(float), true, idx, b, e, in_range);
    });
    return ok ? 0 : 1;
}

}  // namespace

size_t op_scratch_bytes(const ggml_tensor *dst) {
    if (dst->op == GGML_OP_MUL_MAT && dst->src[1]->ne[1] > MATVEC_MAX_T)  // mat-mat: a scale per column of b
        return (size_t)(dst->ne[1] * dst->ne[2] * dst->ne[3]) * sizeof(float);
    if (dst->op != GGML_OP_SPARSE_FFN && dst->op != GGML_OP_SPARSE_DOWN) return 0;
    const ggml_tensor *w = dst->src[0];
    const size_t part =
        down_g8(w, dst->ne[0]) ? down_part_bytes(down_chunks(ids_in_range(dst), dst->ne[1], dst->ne[0]), dst->ne[1], dst->ne[0]) : 0;
    return (dst->op == GGML_OP_SPARSE_FFN ? ffn_h_bytes(dst) : 0) + part;
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
