// MUL_MAT on the CPU: dst[i, j, i2, i3] = dot(a row i of batch (i2/r2, i3/r3), b row j of batch (i2, i3)).
//
// 1. The activations b are converted once into the shared scratch, rows split
//    among threads: to the q8x layout where the type has q8x kernels
//    (ggml_cpu_q8x_pick: the 32-element block types, and q3_K..q6_K from
//    GGML_Q8X_GEMM_MIN_COLS columns on), else to the weight type's vec_dot_type
//    (an F16 / BF16 mat-vec on the AVX2 family: that rounding kept as f32, ggml_round_act).
// 2. After a barrier, the output is split among threads; every element is one
//    call of the same vec_dot kernel, so the result never depends on the
//    thread count or the split (nor on which thread claimed which rows).
// With GGML_PREC_HIGH the q8x types take the q8xh layout (the residual inside
// it), F16/BF16 the f32 rows; the other types convert each row twice: the row,
// then what its conversion lost (row - dequantized row), and every output is
// the sum of the two dots with the same weight row, still in L1 (vec_dot).
// Mat-vec streams each thread's runs of weight rows once (a long first
// share, then chunks claimed in turn: CLAIM_BYTES), each in memory order.
// Mat-mat walks tiles of weight rows x activation rows so that a tile of
// weights stays in L1/L2 while it meets several activation columns; with the
// q8x prompt kernels, a block of weight rows is unpacked once, and 4 x 4
// register tiles pass over chunks of K (see QROWS, QCOLS, gemm_groups).
#include <string.h>

#include <algorithm>

#include "gemm-amx.h"
#include "ggml-impl.h"
#include "ops.h"
#include "vec-dot-simd.h"

namespace {

constexpr int64_t ROW_TILE = 16;
constexpr int64_t COL_TILE = 8;
constexpr size_t ALIGN = GGML_DEFAULT_ALIGN;

inline size_t align_up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

struct plan {
    ggml_q8x_dot_t q8x_dot;            // non-null: a multi-column kernel (q8x or F16 activations)
    ggml_q8x_gemm_t q8x_gemm;          // non-null: its register-tiled form for row blocks
    ggml_q8x_unpack_t q8x_unpack;      // ... on rows unpacked by this
    ggml_q8x_pack_t q8x_pack;          // non-null: activation rows rewritten by this, for q8x_gemm (all rows through it) or else q8x_dot
    ggml_q8x_quantize_t q8x_quantize;  // non-null: the activation converter for q8x_dot
    int64_t gemm_groups;               // groups of 128 elements per q8x_gemm call
    ggml_type vdt;
    size_t vrow;     // bytes of one converted b row
    bool direct;     // b is used in place (F32 dot on contiguous F32 rows)
    bool gather;     // b rows are strided: copy each to a contiguous float row first
    size_t conv;     // bytes of converted activations at the start of wdata
    bool resid;      // GGML_PREC_HIGH: each b row is followed by its converted residual
    size_t bstride;  // bytes from one converted b row to the next (vrow, or 2 vrow with resid)
    ggml_vec_dot2_t dot2;  // non-null with resid: one call for the row and its residual
    ggml_vec_dot_t dot;    // the one-column kernel for vdt (ggml_cpu_act_dot)
    ggml_amx_gemm_t amx_gemm;      // non-null: the prompt batch runs on AMX tiles (mul_mat_amx)
    ggml_amx_unpack_t amx_unpack;  // ... on weight rows unpacked by this
    size_t amx_usz;                // bytes of one unpacked block of 16 weight rows
    int prefetch;                  // the weight prefetch of a walk by rows (ggml_cpu_prefetch_ahead)
};

void copy_row_f32(const float *x, void *y, int64_t k) { memcpy(y, x, sizeof(float) * (size_t)k); }

plan make_plan(const ggml_tensor *a, const ggml_tensor *b, const ggml_tensor *dst) {
    plan p = {};
    const ggml_cpu_type_traits *ta = ggml_get_cpu_type_traits(a->type);
    const bool high = ggml_prec_high(dst);
    p.vdt = ggml_cpu_act_type(ta, high);
    p.dot = ggml_cpu_act_dot(ta, high);
    const int64_t K = b->ne[0];
    p.vrow = ggml_row_size(p.vdt, K);
    const ggml_q8x_pick pick = ggml_cpu_q8x_pick(a->type, K, b->ne[1], high);
    p.q8x_dot = pick.dot;
    p.q8x_gemm = pick.gemm;
    p.q8x_unpack = pick.unpack;
    p.q8x_pack = pick.pack;
    p.q8x_quantize = pick.quantize;
    p.gemm_groups = pick.gemm_groups;
    if (pick.dot) p.vrow = pick.vrow;
    // GGML_PREC_HIGH with a q8xh kernel: the residual travels in the
    // activation layout itself (vec-dot-simd.h), one column per row.
    const bool hi_kernel = high && pick.dot;
    p.prefetch = ggml_cpu_prefetch_ahead(a->type, hi_kernel);
    // F16 weights keep their F16 activation rows (exact f32 rows at high
    // precision); only the kernel is the multi-column one. Mat-vec keeps
    // vec_dot, whose four accumulators hide the fma latency that a single
    // column's one accumulator would expose.
    const ggml_q8x_kernels *q = ta->vec_dot != ta->vec_dot_ref ? ggml_cpu_q8x() : nullptr;
    if (q && a->type == GGML_TYPE_F16 && b->ne[1] > 1) {
        p.q8x_dot = q->dot_f16;
        p.q8x_gemm = nullptr;
        p.q8x_unpack = nullptr;
        p.q8x_pack = nullptr;
        p.q8x_quantize = p.vdt == GGML_TYPE_F32 ? copy_row_f32 : ggml_round_act(GGML_TYPE_F16);
        p.vrow = sizeof(float) * (size_t)K;
    }
    // F16 / BF16 mat-vec: the row rounded to the weight format, as f32 where the kernels want it (ops.h)
    if (!high && b->ne[1] == 1 && ta->vec_dot_f32 && ta->round_act_f32 && ggml_round_act(a->type)) {
        p.q8x_quantize = ggml_round_act(a->type);
        p.dot = ta->vec_dot_f32;
        p.vrow = sizeof(float) * (size_t)K;
    }
    // the prompt kernels write contiguous outputs only
    if (dst->nb[0] != sizeof(float) && p.q8x_gemm) p.q8x_gemm = nullptr, p.q8x_unpack = nullptr, p.q8x_pack = nullptr;
    p.gather = b->nb[0] != sizeof(float);
    p.direct = p.vdt == GGML_TYPE_F32 && !p.gather && !p.q8x_dot;
    // other types with GGML_PREC_HIGH: each row is followed by its converted
    // residual, and each output is the sum of the two dots
    p.resid = high && !hi_kernel && p.vdt != GGML_TYPE_F32;
    p.bstride = p.resid ? 2 * p.vrow : p.vrow;
    p.dot2 = p.resid && ta->vec_dot != ta->vec_dot_ref ? ggml_cpu_dot_resid(a->type) : nullptr;
    // every multi-column kernel has its high-precision twin (a q8xh kernel, or
    // F16's f32 rows), so a residual only ever meets the one-column kernels
    if (p.resid && p.q8x_dot) ggml_abort("mul_mat: a multi-column kernel without its high-precision twin");
    p.conv = p.direct ? 0 : align_up(p.bstride * (size_t)(b->ne[1] * b->ne[2] * b->ne[3]));
    // Prompt batches of one weight matrix on AMX tiles: the activation
    // values the product has anyway (q8x, q8xh), packed in panels of 16 rows
    // (gemm-amx.h).
    const ggml_amx_kernels *amx = ta->vec_dot != ta->vec_dot_ref ? ggml_cpu_amx() : nullptr;
    const bool plain = a->ne[2] * a->ne[3] == 1 && b->ne[2] * b->ne[3] == 1 && !p.gather && dst->nb[0] == sizeof(float);
    if (amx && plain && pick.quantize && b->ne[1] >= GGML_AMX_MIN_COLS && (high ? amx->gemm_hi : amx->gemm)[a->type]) {
        p.amx_gemm = high ? amx->gemm_hi[a->type] : amx->gemm[a->type];
        p.amx_unpack = amx->unpack[a->type];
        p.amx_usz = align_up(ggml_amx_unpacked_size(K, amx->mins[a->type]));
        p.conv = align_up(ggml_amx_panel_size(K, high) * (size_t)((b->ne[1] + GGML_AMX_ROWS - 1) / GGML_AMX_ROWS));
    }
    return p;
}

}  // namespace

// The prompt kernels' blocking: a block of QROWS weight rows, unpacked once
// per thread and block, meets tiles of QCOLS activation rows, the family's
// gemm_groups of 128 elements at a time (8: the chunk's weights, activations
// and accumulators, 40-60 KB, about an L1, stay close while every register
// tile of the block passes over them; 8 groups measured faster than 4 on Zen 5).
constexpr int64_t QROWS = 16, QCOLS = 8;
static size_t unpack_bytes(int64_t K) {
    return align_up((size_t)QROWS * ggml_q8x_unpacked_size(K)) + sizeof(float) * 16 * QROWS * QCOLS;
}

// A product split by weight rows gives each thread an equal first share of
// 3/4 of them, then hands out the rest in chunks of about CLAIM_BYTES of
// weights (whole blocks of QROWS) claimed in turn (ggml_claim), so that the
// threads finish together: with a static split the one the host or the
// other's memory traffic slowed kept the other waiting at the barrier (Zen 3
// VM, 7B-shaped Q4_0 decode, 2 threads: 3.6-4.4% of the time). Every share
// is a run of rows in memory order for the weight prefetch; the long first
// ones keep the claims (a cache line the threads pass around) few. A
// sub-call (mul_mat_id's experts) keeps the static split.
constexpr int64_t CLAIM_BYTES = 64 * 1024;
namespace {
struct row_share {
    const ggml_compute_params *params;
    int64_t n;
    int64_t pool;  // rows [0, pool) go as equal first shares (ggml_split_range), the rest by claims
    int64_t step;  // rows a claim
    bool started = false;
    // the next range [*lo, *hi) of [0, n) this thread takes; false: none left
    bool next(int64_t *lo, int64_t *hi) {
        if (!started) {
            started = true;
            ggml_split_range(pool, params->ith, params->nth, lo, hi);
            if (*lo < *hi) return true;
        }
        if (pool >= n) return false;
        *lo = pool + ggml_claim(params, step);
        *hi = std::min(n, *lo + step);
        return *lo < n;
    }
};
// this thread's static share of [0, n), nothing claimed
row_share static_share(const ggml_compute_params *params, int64_t n) { return {params, n, n, 0}; }
row_share share_rows(const ggml_compute_params *params, int64_t n, size_t row_bytes) {
    const int nth = params->nth;
    if (nth == 1 || params->seq < 0) return static_share(params, n);
    const int64_t rows = std::max<int64_t>(1, (int64_t)(CLAIM_BYTES / std::max<size_t>(row_bytes, 1)));
    const int64_t step = (rows + QROWS - 1) / QROWS * QROWS;
    return {params, n, n * 3 / 4 / nth / QROWS * QROWS * nth, step};
}
}  // namespace

// Few activation rows (decoding): every thread converts all of them into its
// own copy instead of sharing the work, which saves a barrier per MUL_MAT
// (hundreds per token) for a few microseconds of duplicated conversion.
constexpr int64_t PRIVATE_ROWS = 4;

static bool private_conv(const ggml_tensor *b, int nth) {
    return nth > 1 && b->ne[1] * b->ne[2] * b->ne[3] <= PRIVATE_ROWS;
}

// AMX prompt batches: each thread unpacks AMX_GROUP blocks of 16 weight rows
// and takes each panel against all of them before the next, so a panel (80 KB
// for K = 4096) comes from L3 once per group instead of once per block, and
// the group's weights (~290 KB) stay in L2.
constexpr int64_t AMX_GROUP = 4;
// per thread: one converted activation row, then the unpacked weight blocks
static size_t amx_thread_bytes(const plan &p) { return align_up(p.vrow) + (size_t)AMX_GROUP * p.amx_usz; }

extern "C" size_t ggml_mul_mat_work_size(const ggml_tensor *node, int n_threads) {
    const ggml_tensor *a = node->src[0], *b = node->src[1];
    const plan p = make_plan(a, b, node);
    // AMX: the panels, then per thread a q8x row and AMX_GROUP unpacked weight blocks
    if (p.amx_gemm) return p.conv + (size_t)n_threads * amx_thread_bytes(p) + ALIGN;
    size_t w = private_conv(b, n_threads) ? p.conv * (size_t)n_threads : p.conv;
    const size_t frow = align_up(sizeof(float) * (size_t)b->ne[0]);
    if (p.gather) w += (size_t)n_threads * frow;
    if (p.resid) w += (size_t)n_threads * frow;
    if (p.q8x_gemm) w += (size_t)n_threads * unpack_bytes(b->ne[0]) + ALIGN;
    return w;
}

// A prompt batch on AMX tiles: the activation rows quantized to q8x (q8xh)
// and packed into panels of 16, rows split among threads; after a barrier,
// every thread unpacks its blocks of 16 weight rows once each, AMX_GROUP at a
// time, and takes them against every panel (or, with fewer weight blocks than
// threads, every thread takes all the blocks against its share of the
// panels). Each output is computed the same way whatever the split.
static void mul_mat_amx(const plan &p, const ggml_compute_params *params, ggml_tensor *dst) {
    const ggml_tensor *a = dst->src[0], *b = dst->src[1];
    const int64_t K = a->ne[0], M = a->ne[1], N = b->ne[1];
    const bool high = ggml_prec_high(dst);
    const int ith = params->ith, nth = params->nth;
    constexpr int64_t T = GGML_AMX_ROWS;
    const int64_t np = (N + T - 1) / T, nw = (M + T - 1) / T;  // activation panels, weight blocks
    const size_t psz = ggml_amx_panel_size(K, high);
    const uintptr_t base = ((uintptr_t)params->wdata + ALIGN - 1) / ALIGN * ALIGN;
    char *const panels = (char *)base;
    char *const qrow = panels + p.conv + (size_t)ith * amx_thread_bytes(p);
    char *const ubuf = qrow + align_up(p.vrow);
    const size_t usz = p.amx_usz;
    auto rows_of = [&](int64_t w) { return (int)std::min(T, M - w * T); };  // weight block w's rows

    int64_t r0, r1;
    ggml_split_range(np * T, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const bool row = r < N;
        if (row) p.q8x_quantize((const float *)((const char *)b->data + r * b->nb[1]), qrow, K);
        ggml_amx_pack(row ? qrow : nullptr, K, high, panels + (size_t)(r / T) * psz, (int)(r % T));
    }
    ggml_barrier(params->tp);

    const bool by_rows = nw >= nth;
    int64_t lo, hi;
    ggml_split_range(by_rows ? nw : np, ith, nth, &lo, &hi);
    const int64_t wb = by_rows ? lo : 0, we = by_rows ? hi : nw, pb = by_rows ? 0 : lo, pe = by_rows ? np : hi;
    if (wb >= we || pb >= pe) return;
    ggml_amx_begin(a->type);
    for (int64_t w0 = wb; w0 < we; w0 += AMX_GROUP) {
        const int64_t w1 = std::min(we, w0 + AMX_GROUP);
        for (int64_t w = w0; w < w1; w++)
            p.amx_unpack((const char *)a->data + w * T * a->nb[1], a->nb[1], rows_of(w), K, ubuf + (w - w0) * usz);
        for (int64_t j = pb; j < pe; j++)
            for (int64_t w = w0; w < w1; w++)
                p.amx_gemm(K, ubuf + (w - w0) * usz, panels + (size_t)j * psz,
                           (float *)((char *)dst->data + w * T * sizeof(float) + j * T * dst->nb[1]), dst->nb[1],
                           rows_of(w), (int)std::min(T, N - j * T));
    }
    ggml_amx_end();
}

extern "C" void ggml_compute_forward_mul_mat(const ggml_compute_params *params, ggml_tensor *dst) {
    const ggml_tensor *a = dst->src[0], *b = dst->src[1];
    const ggml_cpu_type_traits *ta = ggml_get_cpu_type_traits(a->type);
    if (!ta || !ta->vec_dot) ggml_abort("mul_mat: no dot kernel for type %s", ggml_type_name(a->type));
    const int64_t K = a->ne[0], M = a->ne[1], N = b->ne[1], B2 = b->ne[2], B3 = b->ne[3];
    if (K % ggml_blck_size(a->type))
        ggml_abort("mul_mat: K=%lld is not a multiple of the %s block size", (long long)K, ggml_type_name(a->type));
    const int64_t r2 = B2 / a->ne[2], r3 = B3 / a->ne[3];
    const plan p = make_plan(a, b, dst);
    if (p.amx_gemm) return mul_mat_amx(p, params, dst);
    const int ith = params->ith, nth = params->nth;
    const bool priv = private_conv(b, nth);
    char *const wbase = (char *)params->wdata;
    char *const wdata = priv ? wbase + (size_t)ith * p.conv : wbase;  // this thread's converted activations
    char *const wtmp = wbase + (priv ? (size_t)nth * p.conv : p.conv);  // gather rows after all copies

    // ---- 1. convert the activations once (or once per thread, see PRIVATE_ROWS) ----
    if (!p.direct) {
        const ggml_from_float_t from_float = p.q8x_quantize ? p.q8x_quantize
                                             : p.vdt == GGML_TYPE_F32 ? nullptr : ggml_get_cpu_type_traits(p.vdt)->from_float;
        if (p.vdt != GGML_TYPE_F32 && !from_float) ggml_abort("mul_mat: no converter to %s", ggml_type_name(p.vdt));
        const size_t frow = align_up(sizeof(float) * (size_t)K);
        float *tmp = p.gather ? (float *)(wtmp + (size_t)ith * frow) : nullptr;
        float *res = p.resid ? (float *)(wtmp + (size_t)(p.gather ? nth : 0) * frow + (size_t)ith * frow) : nullptr;
        int64_t r0 = 0, r1 = N * B2 * B3;
        if (!priv) ggml_split_range(N * B2 * B3, ith, nth, &r0, &r1);
        for (int64_t r = r0; r < r1; r++) {
            const int64_t j = r % N, i2 = (r / N) % B2, i3 = r / (N * B2);
            const char *src = (const char *)b->data + j * b->nb[1] + i2 * b->nb[2] + i3 * b->nb[3];
            const float *row = (const float *)src;
            if (p.gather) {
                for (int64_t k = 0; k < K; k++) tmp[k] = *(const float *)(src + k * b->nb[0]);
                row = tmp;
            }
            char *out = wdata + (size_t)r * p.bstride;
            if (from_float) ggml_convert_act(row, out, K, from_float, p.vdt, p.vrow, p.resid, res);
            else memcpy(out, row, sizeof(float) * (size_t)K);
            if (p.q8x_pack) p.q8x_pack(out, K);
        }
        if (!priv) ggml_barrier(params->tp);
    }

    // one output element: the dot with the row, plus the dot with its residual
    auto vec_dot = [&](int64_t k, float *s, const void *x, const void *y) {
        if (p.dot2) return p.dot2(k, s, x, y, p.vrow);
        ggml_vec_dot_resid(p.dot, k, s, x, y, p.vrow, p.resid);
    };
    auto arow = [&](int64_t i, int64_t i2, int64_t i3) {
        return (const char *)a->data + i * a->nb[1] + (i2 / r2) * a->nb[2] + (i3 / r3) * a->nb[3];
    };
    auto brow = [&](int64_t j, int64_t i2, int64_t i3) -> const char * {
        if (p.direct) return (const char *)b->data + j * b->nb[1] + i2 * b->nb[2] + i3 * b->nb[3];
        return wdata + (size_t)(((i3 * B2 + i2) * N) + j) * p.bstride;
    };
    auto out = [&](int64_t i, int64_t j, int64_t i2, int64_t i3) {
        return (float *)((char *)dst->data + i * dst->nb[0] + j * dst->nb[1] + i2 * dst->nb[2] + i3 * dst->nb[3]);
    };

    // ---- 2. the dot products ----
    // Split flattened (batch, row) space when it has enough rows for every
    // thread; otherwise (few weight rows, many columns) split the columns.
    const int64_t R = B2 * B3 * M;
    const bool by_rows = N == 1 || R >= 4 * (int64_t)nth;
    // rows in memory order: the kernels prefetch the weights ahead (vec-dot-simd.h)
    struct prefetch_scope {
        explicit prefetch_scope(int d) { ggml_prefetch_distance = d; }
        ~prefetch_scope() { ggml_prefetch_distance = 0; }
    } prefetch(by_rows ? p.prefetch : 0);
    if (p.q8x_dot) {
        // Columns go in fixed tiles of QCOLS from column 0 (a column split
        // moves whole tiles), so every element is computed the same way
        // whatever the thread count. A block of QROWS weight rows meets every
        // column tile in turn. With a prompt kernel (gemm), the block's rows,
        // in whole multiples of GEMM_ROWS, are unpacked once, and each column
        // tile runs in chunks of gemm_groups groups: every GEMM_ROWS x GEMM_COLS
        // register tile of the block passes over the chunk (weights,
        // activations and the tiles' accumulators in L1) before the next
        // chunk; each element is computed exactly as the one-row kernel would.
        // The other rows (and the other kernels) take the one-row kernel;
        // where the family rewrote the activation rows into its own order
        // (q8x_pack), which only its gemm reads, every row takes the gemm.
        constexpr int64_t GR = GGML_Q8X_GEMM_ROWS, GC = GGML_Q8X_GEMM_COLS;
        static_assert(QROWS % GR == 0 && QCOLS % GC == 0, "tiles of whole register tiles");
        const ggml_q8x_gemm_t gemm = p.q8x_gemm;
        const size_t usz = ggml_q8x_unpacked_size(K);
        // this thread's unpacked rows, after the gather and residual rows (work size: + ALIGN to align them)
        const uintptr_t uscratch = (uintptr_t)wtmp + (size_t)nth * align_up(sizeof(float) * (size_t)K) * (p.gather + p.resid);
        char *const ubuf = (char *)((uscratch + ALIGN - 1) / ALIGN * ALIGN) + (size_t)ith * unpack_bytes(K);
        float *const accs = (float *)(ubuf + align_up((size_t)QROWS * usz));  // one register tile's after another
        const int64_t ng = (K + 127) / 128;
        const size_t ygroup = p.vrow / (size_t)ng;  // bytes of an activation group
        const int64_t tiles = (N + QCOLS - 1) / QCOLS;
        int64_t lo, hi;
        const size_t ss = dst->nb[1];
        row_share share = by_rows ? share_rows(params, R, a->nb[1]) : static_share(params, tiles);
        while (share.next(&lo, &hi)) {
            const int64_t rbeg = by_rows ? lo : 0, rend = by_rows ? hi : R;
            const int64_t jbeg = by_rows ? 0 : lo * QCOLS, jend = by_rows ? N : std::min<int64_t>(N, hi * QCOLS);
            if (jbeg >= jend) break;
            for (int64_t r = rbeg; r < rend;) {
                const int64_t batch = r / M, i0 = r % M;
                const int64_t i2 = batch % B2, i3 = batch / B2;
                const int64_t i1 = std::min(M, i0 + (rend - r));
                for (int64_t ib = i0; ib < i1; ib += QROWS) {
                    const int64_t ie = std::min(i1, ib + QROWS);
                    // rows [ib, ig) go through gemm; with packed activation rows
                    // (which the one-row kernel cannot read) all of them, the last
                    // register tile filled up with zero rows (d = m = 0) to iu and
                    // its outputs written through a scratch tile
                    const int64_t ig = !gemm ? ib : p.q8x_pack ? ie : ib + (ie - ib) / GR * GR;
                    const int64_t iu = ib + (ig - ib + GR - 1) / GR * GR;
                    for (int64_t i = ib; i < ig; i++) p.q8x_unpack(K, arow(i, i2, i3), ubuf + (size_t)(i - ib) * usz);
                    if (iu > ig) memset(ubuf + (size_t)(ig - ib) * usz, 0, (size_t)(iu - ig) * usz);
                    for (int64_t j = jbeg; j < jend; j += QCOLS) {
                        const int nc = (int)std::min(QCOLS, jend - j);
                        const char *y = brow(j, i2, i3);
                        for (int64_t g0 = 0; g0 < ng && ig > ib; g0 += p.gemm_groups) {
                            const int64_t gn = std::min(p.gemm_groups, ng - g0);
                            const int flags = (g0 == 0 ? GGML_Q8X_ACC_FIRST : 0) | (g0 + gn == ng ? GGML_Q8X_ACC_LAST : 0);
                            float *acc = accs;
                            for (int64_t i = ib; i < ig; i += GR)
                                for (int c = 0; c < nc; c += (int)GC, acc += 16 * GR * GC) {
                                    const int cn = std::min((int)GC, nc - c);
                                    const bool pad = i + GR > ig;
                                    float tile[GR * GC];  // a padded tile's outputs, column c at c * GR
                                    gemm(gn, ubuf + (size_t)(i - ib) * usz + (size_t)g0 * 256, usz, y + (size_t)c * p.vrow + (size_t)g0 * ygroup,
                                         p.vrow, acc, pad ? tile : out(i, j + c, i2, i3), pad ? sizeof(float) * GR : ss, cn, flags);
                                    if (pad && (flags & GGML_Q8X_ACC_LAST))
                                        for (int cc = 0; cc < cn; cc++)
                                            for (int64_t rr = 0; rr < ig - i; rr++) *out(i + rr, j + c + cc, i2, i3) = tile[cc * GR + rr];
                                }
                        }
                        for (int64_t i = ig; i < ie; i++) p.q8x_dot(K, arow(i, i2, i3), y, p.vrow, out(i, j, i2, i3), ss, nc);
                    }
                }
                r += i1 - i0;
            }
        }
        return;
    }
    int64_t lo, hi;
    row_share share = by_rows ? share_rows(params, R, a->nb[1]) : static_share(params, N);
    while (share.next(&lo, &hi)) {
        const int64_t rbeg = by_rows ? lo : 0, rend = by_rows ? hi : R;
        const int64_t jbeg = by_rows ? 0 : lo, jend = by_rows ? N : hi;

        for (int64_t r = rbeg; r < rend;) {
            // rows [r, rr) lie in one batch
            const int64_t batch = r / M, i0 = r % M;
            const int64_t i2 = batch % B2, i3 = batch / B2;
            const int64_t i1 = std::min(M, i0 + (rend - r));
            if (N == 1) {
                const char *y = brow(0, i2, i3);
                for (int64_t i = i0; i < i1; i++) vec_dot(K, out(i, 0, i2, i3), arow(i, i2, i3), y);
            } else {
                for (int64_t ib = i0; ib < i1; ib += ROW_TILE) {
                    const int64_t ie = std::min(i1, ib + ROW_TILE);
                    for (int64_t jb = jbeg; jb < jend; jb += COL_TILE) {
                        const int64_t je = std::min(jend, jb + COL_TILE);
                        for (int64_t i = ib; i < ie; i++) {
                            const char *x = arow(i, i2, i3);
                            for (int64_t j = jb; j < je; j++) vec_dot(K, out(i, j, i2, i3), x, brow(j, i2, i3));
                        }
                    }
                }
            }
            r += i1 - i0;
        }
    }
}
