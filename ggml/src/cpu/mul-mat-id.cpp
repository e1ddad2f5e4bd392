// MUL_MAT_ID on the CPU: the products of a mixture of experts' routed expert
// matrices. The tokens of a batch are grouped by expert, and each expert's
// group is one ordinary MUL_MAT (mul-mat.cpp) of that expert's plane with the
// group's activation columns: every weight type, both precisions and the
// same kernels as the dense product, and each expert's weights are streamed
// once per batch however many of its tokens route to it.
//
// A group of one column (decoding: every routed expert has one token) reads
// its column of b and writes its column of dst in place; larger groups are
// gathered into contiguous scratch first and scattered back after. Each
// group has its own share of the work buffer, so the groups follow each
// other without a barrier between them; gather and scatter add one each.
//
// With a mask (src[3]), dst[m, s, t] is computed only where the mask is
// nonzero: every column is converted once to the weight type's vec_dot_type,
// then each thread takes a share of each routed expert's rows and reads a row
// only when one of the expert's columns needs it, one vec_dot per needed
// element (so a masked result never depends on the thread count either).
#include <string.h>

#include <algorithm>

#include "ggml-impl.h"
#include "gemm-amx.h"
#include "ops.h"
#include "vec-dot-simd.h"

namespace {

constexpr size_t ALIGN = GGML_DEFAULT_ALIGN;
inline size_t align_up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

struct routing {
    const ggml_tensor *dst, *as, *b, *ids;
    int64_t K, M, E, n_used, T, B1;
    int32_t id(int64_t s, int64_t t) const {
        return *(const int32_t *)((const char *)ids->data + s * ids->nb[0] + t * ids->nb[1]);
    }
    const char *bcol(int64_t s, int64_t t) const { return (const char *)b->data + (s % B1) * b->nb[1] + t * b->nb[2]; }
    char *dcol(int64_t s, int64_t t) const { return (char *)dst->data + s * dst->nb[1] + t * dst->nb[2]; }
};

routing routing_of(const ggml_tensor *dst) {
    routing r;
    r.dst = dst;
    r.as = dst->src[0];
    r.b = dst->src[1];
    r.ids = dst->src[2];
    r.K = r.as->ne[0];
    r.M = r.as->ne[1];
    r.E = r.as->ne[2];
    r.n_used = r.ids->ne[0];
    r.T = r.ids->ne[1];
    r.B1 = r.b->ne[1];
    return r;
}

// The MUL_MAT node of one expert's group of n columns: a = plane e of as,
// b and dst at the given memory (column strides bnb1 / dnb1).
struct group_node {
    ggml_tensor a, b, d;
    group_node(const routing &r, int64_t e, int64_t n, const void *bdata, size_t bnb0, size_t bnb1, void *ddata,
               size_t dnb1) {
        memset(&a, 0, sizeof(a));
        a.type = r.as->type;
        a.ne[0] = r.K;
        a.ne[1] = r.M;
        a.ne[2] = a.ne[3] = 1;
        a.nb[0] = r.as->nb[0];
        a.nb[1] = r.as->nb[1];
        a.nb[2] = a.nb[3] = r.as->nb[1] * (size_t)r.M;
        a.data = (char *)r.as->data + (size_t)e * r.as->nb[2];
        memset(&b, 0, sizeof(b));
        b.type = GGML_TYPE_F32;
        b.ne[0] = r.K;
        b.ne[1] = n;
        b.ne[2] = b.ne[3] = 1;
        b.nb[0] = bnb0;
        b.nb[1] = bnb1;
        b.nb[2] = b.nb[3] = bnb1 * (size_t)n;
        b.data = (void *)bdata;
        memset(&d, 0, sizeof(d));
        d.type = GGML_TYPE_F32;
        d.op = GGML_OP_MUL_MAT;
        d.ne[0] = r.M;
        d.ne[1] = n;
        d.ne[2] = d.ne[3] = 1;
        d.nb[0] = r.dst->nb[0];
        d.nb[1] = dnb1;
        d.nb[2] = d.nb[3] = dnb1 * (size_t)n;
        d.data = ddata;
        d.src[0] = &a;
        d.src[1] = &b;
        memcpy(d.op_params, r.dst->op_params, sizeof(d.op_params));  // the precision
    }
};

// Columns routed to expert e (a token lists an expert at most once per slot).
int64_t group_size(const routing &r, int64_t e) {
    int64_t n = 0;
    for (int64_t t = 0; t < r.T; t++)
        for (int64_t s = 0; s < r.n_used; s++) n += r.id(s, t) == e;
    return n;
}

void check(const routing &r) {
    if (r.dst->type != GGML_TYPE_F32 || r.dst->ne[0] != r.M || r.dst->ne[1] != r.n_used || r.dst->ne[2] != r.T)
        ggml_abort("mul_mat_id: dst must be F32 [M, n_used, T]");
    if (r.b->ne[2] != r.T || (r.B1 != 1 && r.B1 != r.n_used)) ggml_abort("mul_mat_id: b must be [K, 1 or n_used, T]");
    for (int64_t t = 0; t < r.T; t++)
        for (int64_t s = 0; s < r.n_used; s++)
            if (r.id(s, t) < 0 || r.id(s, t) >= r.E)
                ggml_abort("mul_mat_id: expert id %d out of range [0, %lld)", r.id(s, t), (long long)r.E);
}

size_t mm_work(const routing &r, int64_t n, int nth) {
    const group_node g(r, 0, n, nullptr, sizeof(float), sizeof(float) * (size_t)r.K, nullptr, sizeof(float) * (size_t)r.M);
    return align_up(ggml_mul_mat_work_size(&g.d, nth));
}

// ---- the masked product ----

struct masked_plan {
    ggml_vec_dot_t dot;
    ggml_from_float_t from_float;  // nullptr: F32 activations used in place
    ggml_type vdt;                 // what the rows are converted to
    size_t vrow, stride;
    bool resid;
};

masked_plan masked_plan_of(const routing &r) {
    const ggml_cpu_type_traits *ta = ggml_get_cpu_type_traits(r.as->type);
    if (!ta || !ta->vec_dot) ggml_abort("mul_mat_id: no dot kernel for type %s", ggml_type_name(r.as->type));
    masked_plan p;
    const bool high = ggml_prec_high(r.dst);
    p.dot = ggml_cpu_act_dot(ta, high);  // the activation rule of every weight product (ops.h)
    const ggml_type vdt = ggml_cpu_act_type(ta, high);
    p.from_float = vdt == GGML_TYPE_F32 ? nullptr : ggml_get_cpu_type_traits(vdt)->from_float;
    p.vdt = vdt;
    p.vrow = ggml_row_size(vdt, r.K);
    p.resid = high && vdt != GGML_TYPE_F32;
    p.stride = align_up(p.resid ? 2 * p.vrow : p.vrow);
    return p;
}

size_t masked_work(const routing &r, int nth) {
    const masked_plan p = masked_plan_of(r);
    return p.stride * (size_t)(r.n_used * r.T) + 2 * (size_t)nth * align_up(sizeof(float) * (size_t)r.K);
}

void masked_forward(const ggml_compute_params *params, const routing &r) {
    const masked_plan p = masked_plan_of(r);
    const ggml_tensor *mask = r.dst->src[3];
    const int ith = params->ith, nth = params->nth;
    const int64_t cols = r.n_used * r.T;
    char *const conv = (char *)params->wdata;
    const size_t frow = align_up(sizeof(float) * (size_t)r.K) / sizeof(float);
    float *const tmp = (float *)(conv + p.stride * (size_t)cols) + (size_t)(2 * ith) * frow;  // a gathered column
    float *const res = tmp + frow;                                                            // its residual
    // 1. every column converted once (column c = slot s of token t, c = t * n_used + s)
    int64_t c0, c1;
    ggml_split_range(cols, ith, nth, &c0, &c1);
    for (int64_t c = c0; c < c1; c++) {
        const char *src = r.bcol(c % r.n_used, c / r.n_used);
        const float *x = (const float *)src;
        if (r.b->nb[0] != sizeof(float) || !p.from_float) {
            for (int64_t k = 0; k < r.K; k++) tmp[k] = *(const float *)(src + k * r.b->nb[0]);
            x = tmp;
        }
        char *out = conv + (size_t)c * p.stride;
        if (p.from_float) ggml_convert_act(x, out, r.K, p.from_float, p.vdt, p.vrow, p.resid, res);
        else memcpy(out, x, sizeof(float) * (size_t)r.K);
    }
    ggml_barrier(params->tp);
    // 2. per routed expert, this thread's rows; a row is read when a column needs it
    auto needed = [&](int64_t m, int64_t s, int64_t t) {
        return *(const float *)((const char *)mask->data + m * mask->nb[0] + s * mask->nb[1] + t * mask->nb[2]) != 0.0f;
    };
    int64_t m0, m1;
    ggml_split_range(r.M, ith, nth, &m0, &m1);
    for (int64_t e = 0; e < r.E; e++) {
        if (group_size(r, e) == 0) continue;
        for (int64_t m = m0; m < m1; m++) {
            const char *row = (const char *)r.as->data + (size_t)e * r.as->nb[2] + (size_t)m * r.as->nb[1];
            for (int64_t t = 0; t < r.T; t++)
                for (int64_t s = 0; s < r.n_used; s++) {
                    if (r.id(s, t) != e) continue;
                    float *y = (float *)(r.dcol(s, t) + m * r.dst->nb[0]);
                    if (!needed(m, s, t)) {
                        *y = 0.0f;
                        continue;
                    }
                    ggml_vec_dot_resid(p.dot, r.K, y, row, conv + (size_t)(t * r.n_used + s) * p.stride, p.vrow, p.resid);
                }
        }
    }
}

}  // namespace

// Scratch: the gathered columns of b and of dst (every routed column at
// most), then the groups' MUL_MAT work one after the other. The routing is
// unknown when the buffer is planned, so each group is bounded by the largest
// of a one-column, a few-column and the prompt-kernel products (their fixed
// unpacking scratch: from GGML_Q8X_GEMM_MIN_COLS columns on, and from
// GGML_AMX_MIN_COLS on the AMX tiles), plus one product over all columns (the
// columns' own share).
extern "C" size_t ggml_mul_mat_id_work_size(const ggml_tensor *node, int n_threads) {
    const routing r = routing_of(node);
    if (node->src[3]) return masked_work(r, n_threads);
    const int64_t cols = r.n_used * r.T;
    const size_t gathered = align_up(sizeof(float) * (size_t)(r.K * cols)) + align_up(sizeof(float) * (size_t)(r.M * cols));
    size_t per_group = 0;
    for (int64_t n : {(int64_t)1, (int64_t)4, (int64_t)GGML_Q8X_GEMM_MIN_COLS, (int64_t)GGML_AMX_MIN_COLS})
        per_group = std::max(per_group, mm_work(r, std::min(cols, n), n_threads));
    per_group += 3 * ALIGN;
    return gathered + (size_t)std::min(r.E, cols) * per_group + mm_work(r, cols, n_threads);
}

extern "C" void ggml_compute_forward_mul_mat_id(const ggml_compute_params *params, ggml_tensor *dst) {
    const routing r = routing_of(dst);
    if (params->ith == 0) check(r);
    if (dst->src[3]) return masked_forward(params, r);
    const int64_t cols = r.n_used * r.T;
    char *const wb = (char *)params->wdata;
    float *const bg = (float *)wb;  // gathered b columns, group after group
    float *const dg = (float *)(wb + align_up(sizeof(float) * (size_t)(r.K * cols)));
    char *work = (char *)dg + align_up(sizeof(float) * (size_t)(r.M * cols));
    const size_t bcol = sizeof(float) * (size_t)r.K, dcol = sizeof(float) * (size_t)r.M;
    const int ith = params->ith, nth = params->nth;

    // 1. gather: thread ith copies the columns of the experts it owns (e % nth)
    bool gathered = false;
    int64_t off = 0;  // first gathered column of expert e
    for (int64_t e = 0; e < r.E; e++) {
        const int64_t n = group_size(r, e);
        if (n > 1) {
            gathered = true;
            if (e % nth == ith) {
                int64_t c = off;
                for (int64_t t = 0; t < r.T; t++)
                    for (int64_t s = 0; s < r.n_used; s++) {
                        if (r.id(s, t) != e) continue;
                        const char *src = r.bcol(s, t);
                        float *out = bg + (size_t)c * r.K;
                        if (r.b->nb[0] == sizeof(float)) memcpy(out, src, bcol);
                        else for (int64_t k = 0; k < r.K; k++) out[k] = *(const float *)(src + k * r.b->nb[0]);
                        c++;
                    }
            }
            off += n;
        }
    }
    if (gathered) ggml_barrier(params->tp);

    // 2. one MUL_MAT per routed expert, all threads in it
    off = 0;
    for (int64_t e = 0; e < r.E; e++) {
        const int64_t n = group_size(r, e);
        if (n == 0) continue;
        ggml_compute_params sub = *params;
        sub.seq = -1;  // several products in one node: one counter cannot serve them
        if (n == 1) {
            int64_t s1 = 0, t1 = 0;
            for (int64_t t = 0; t < r.T; t++)
                for (int64_t s = 0; s < r.n_used; s++)
                    if (r.id(s, t) == e) s1 = s, t1 = t;
            const group_node g(r, e, 1, r.bcol(s1, t1), r.b->nb[0], bcol, r.dcol(s1, t1), dcol);
            sub.wdata = work;
            sub.wsize = ggml_mul_mat_work_size(&g.d, nth);
            work += align_up(sub.wsize) + ALIGN;
            ggml_compute_forward_mul_mat(&sub, const_cast<ggml_tensor *>(&g.d));
        } else {
            const group_node g(r, e, n, bg + (size_t)off * r.K, sizeof(float), bcol, dg + (size_t)off * r.M, dcol);
            sub.wdata = work;
            sub.wsize = ggml_mul_mat_work_size(&g.d, nth);
            work += align_up(sub.wsize) + ALIGN;
            ggml_compute_forward_mul_mat(&sub, const_cast<ggml_tensor *>(&g.d));
            off += n;
        }
    }
    if (!gathered) return;

    // 3. scatter the gathered groups' results to their columns of dst
    ggml_barrier(params->tp);
    off = 0;
    for (int64_t e = 0; e < r.E; e++) {
        const int64_t n = group_size(r, e);
        if (n <= 1) continue;
        if (e % nth == ith) {
            int64_t c = off;
            for (int64_t t = 0; t < r.T; t++)
                for (int64_t s = 0; s < r.n_used; s++) {
                    if (r.id(s, t) != e) continue;
                    const float *src = dg + (size_t)c * r.M;
                    char *out = r.dcol(s, t);
                    if (dst->nb[0] == sizeof(float)) memcpy(out, src, dcol);
                    else for (int64_t m = 0; m < r.M; m++) *(float *)(out + m * dst->nb[0]) = src[m];
                    c++;
                }
        }
        off += n;
    }
}
