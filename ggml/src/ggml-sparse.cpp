// Constructors of the neuron-aware (sparse FFN) operations. The CPU kernels
// are in cpu/ops-sparse.cpp (which refuse a weight type they have no dot
// kernel for); the index-list layout is documented in ggml.h.
//
// op_params: SPARSE_SELECT {f32 threshold, i32 abs}; SPARSE_MASK {f32 threshold}; MUL_MAT_SPARSE_ROWS {i32 begin,
// i32 end, i32 g}; SPARSE_FFN {i32 begin, i32 end, i32 act, i32 relu_up}; SPARSE_DOWN {i32 begin, i32 end, i32 mode}: mode 0 = the policy
// the dense policy of the computing backend picks the path, 1 = always sparse, 2 = dense
// whenever w_down is given and the range is aligned (tests set it).
#include <cstring>
#include <initializer_list>

#include "ggml-impl.h"

// The list may span more neurons than the weight holds (ggml.h: neuron ranges).
static void check_idx(const char *op, const ggml_tensor *idx) {
    if (idx->type != GGML_TYPE_I32) ggml_abort("%s: idx must be I32", op);
    if (idx->ne[0] < 1 || idx->ne[0] - 1 > INT32_MAX) ggml_abort("%s: idx must have 1..2^31 rows", op);
    if (idx->nb[0] != sizeof(int32_t)) ggml_abort("%s: idx must be contiguous in dim 0", op);
    if (idx->ne[2] != 1 || idx->ne[3] != 1) ggml_abort("%s: idx must be 2-D", op);
}

static void set_range(const char *op, ggml_tensor *r, int64_t begin, int64_t end, int64_t n) {
    if (begin < 0 || begin > end || end > n) {
        ggml_abort("%s: range [%lld, %lld) not inside [0, %lld]", op, (long long)begin, (long long)end, (long long)n);
    }
    if (n > INT32_MAX) ggml_abort("%s: n=%lld too large", op, (long long)n);
    r->op_params[0] = (int32_t)begin;
    r->op_params[1] = (int32_t)end;
}

static ggml_tensor *sparse_select_impl(ggml_context *ctx, ggml_tensor *p, float threshold, bool abs) {
    if (p->type != GGML_TYPE_F32 || p->nb[0] != sizeof(float)) ggml_abort("sparse_select: p must be F32 with contiguous rows");
    if (p->ne[2] != 1 || p->ne[3] != 1) ggml_abort("sparse_select: p must be 2-D [n, T]");
    if (p->ne[0] >= INT32_MAX) ggml_abort("sparse_select: n too large");
    const int64_t T = p->ne[1];
    ggml_tensor *r = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, p->ne[0] + 1, T == 1 ? 1 : T + 1);
    r->op = GGML_OP_SPARSE_SELECT;
    r->src[0] = p;
    memcpy(&r->op_params[0], &threshold, sizeof(threshold));
    r->op_params[1] = abs ? 1 : 0;
    return r;
}

ggml_tensor *ggml_sparse_select(ggml_context *ctx, ggml_tensor *p, float threshold) {
    return sparse_select_impl(ctx, p, threshold, false);
}

ggml_tensor *ggml_sparse_select_abs(ggml_context *ctx, ggml_tensor *p, float threshold) {
    return sparse_select_impl(ctx, p, threshold, true);
}

ggml_tensor *ggml_sparse_mask(ggml_context *ctx, ggml_tensor *a, float threshold) {
    if (a->type != GGML_TYPE_F32 || a->nb[0] != sizeof(float)) ggml_abort("sparse_mask: a must be F32 with contiguous rows");
    if (a->ne[2] != 1 || a->ne[3] != 1) ggml_abort("sparse_mask: a must be 2-D [n, T]");
    ggml_tensor *r = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, a->ne[0], a->ne[1]);
    r->op = GGML_OP_SPARSE_MASK;
    r->src[0] = a;
    memcpy(&r->op_params[0], &threshold, sizeof(threshold));
    return r;
}

ggml_tensor *ggml_sparse_predict(ggml_context *ctx, ggml_tensor *fc1, ggml_tensor *fc2, ggml_tensor *x, float threshold) {
    if (fc1->ne[0] != x->ne[0]) ggml_abort("sparse_predict: fc1 [d, r] and x [d, T] differ in d");
    if (fc2->ne[0] != fc1->ne[1]) ggml_abort("sparse_predict: fc2 [r, n] and fc1 [d, r] differ in r");
    if (x->ne[2] != 1 || x->ne[3] != 1) ggml_abort("sparse_predict: x must be 2-D [d, T]");
    ggml_tensor *h = ggml_relu(ctx, ggml_mul_mat(ctx, fc1, x));
    return ggml_sparse_select(ctx, ggml_mul_mat(ctx, fc2, h), threshold);
}

ggml_tensor *ggml_mul_mat_sparse_rows_bundle(ggml_context *ctx, ggml_tensor *w, ggml_tensor *x, ggml_tensor *idx,
                                             int64_t begin, int64_t end, int g) {
    const char *op = g == 1 ? "mul_mat_sparse_rows" : "mul_mat_sparse_rows_bundle";
    if (!ggml_is_contiguous_rows(w) || w->ne[2] != 1 || w->ne[3] != 1) ggml_abort("%s: w must be 2-D with contiguous rows", op);
    if (x->type != GGML_TYPE_F32 || x->nb[0] != sizeof(float)) ggml_abort("%s: x must be F32 with contiguous rows", op);
    if (x->ne[0] != w->ne[0] || x->ne[2] != 1 || x->ne[3] != 1) ggml_abort("%s: x must be [d, T] with w [d, n]", op);
    if (g < 1 || w->ne[1] % g) ggml_abort("%s: w has %lld rows, not a multiple of g = %d", op, (long long)w->ne[1], g);
    const int64_t n = w->ne[1] / g;
    check_idx(op, idx);
    ggml_tensor *r = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, n, x->ne[1], g);
    r->op = GGML_OP_MUL_MAT_SPARSE_ROWS;
    r->src[0] = w;
    r->src[1] = x;
    r->src[2] = idx;
    set_range(op, r, begin, end, n);
    r->op_params[2] = g;
    return r;
}

ggml_tensor *ggml_mul_mat_sparse_rows(ggml_context *ctx, ggml_tensor *w, ggml_tensor *x, ggml_tensor *idx,
                                      int64_t begin, int64_t end) {
    return ggml_mul_mat_sparse_rows_bundle(ctx, w, x, idx, begin, end, 1);
}

ggml_tensor *ggml_sparse_ffn_bundle(ggml_context *ctx, ggml_tensor *w, ggml_tensor *w_gate, ggml_tensor *w_up,
                                   ggml_tensor *w_down, ggml_tensor *x, ggml_tensor *idx, int64_t begin, int64_t end,
                                   ggml_op act, bool relu_up) {
    const char *op = "sparse_ffn_bundle";
    const ggml_type_traits *tr = ggml_get_type_traits(w->type);
    if (!tr->to_float) ggml_abort("%s: weight type %s has no to_float", op, tr->name);
    if (!ggml_is_contiguous_rows(w) || w->ne[2] != 1 || w->ne[3] != 1) ggml_abort("%s: w must be 2-D with contiguous rows", op);
    if (w->ne[1] % 3) ggml_abort("%s: w has %lld rows, not 3 per neuron", op, (long long)w->ne[1]);
    const int64_t n = w->ne[1] / 3;
    for (const ggml_tensor *p : {w_gate, w_up})
        if (p && (p->type != w->type || p->ne[0] != w->ne[0] || p->ne[1] != n || p->ne[2] != 1 || p->ne[3] != 1 ||
                  !ggml_is_contiguous_rows(p)))
            ggml_abort("%s: w_gate and w_up must be [d, n] of w's type", op);
    if (x->type != GGML_TYPE_F32 || x->nb[0] != sizeof(float)) ggml_abort("%s: x must be F32 with contiguous rows", op);
    if (x->ne[0] != w->ne[0] || x->ne[2] != 1 || x->ne[3] != 1) ggml_abort("%s: x must be [d, T] with w [d, 3n]", op);
    if (x->ne[1] > GGML_SPARSE_FFN_MAX_T) ggml_abort("%s: %lld tokens, at most %d", op, (long long)x->ne[1], GGML_SPARSE_FFN_MAX_T);
    if (act != GGML_OP_SWIGLU && act != GGML_OP_REGLU && act != GGML_OP_GEGLU) ggml_abort("%s: act must be a gated op", op);
    check_idx(op, idx);
    if (w_down) {
        if (w_down->ne[0] != n || w_down->ne[1] != w->ne[0] || w_down->ne[2] != 1 || w_down->ne[3] != 1 ||
            !ggml_is_contiguous_rows(w_down))
            ggml_abort("%s: w_down must be 2-D [n, d] with contiguous rows for w [d, 3n]", op);
    }
    ggml_tensor *r = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, w->ne[0], x->ne[1]);
    r->op = GGML_OP_SPARSE_FFN;
    r->src[0] = w;
    r->src[1] = x;
    r->src[2] = idx;
    r->src[3] = w_down;
    r->src[4] = w_gate;
    r->src[5] = w_up;
    set_range(op, r, begin, end, n);
    r->op_params[2] = (int32_t)act;
    r->op_params[3] = relu_up ? 1 : 0;
    return r;
}

ggml_tensor *ggml_sparse_down(ggml_context *ctx, ggml_tensor *wt, ggml_tensor *wd, ggml_tensor *h, ggml_tensor *idx,
                              int64_t begin, int64_t end) {
    const char *op = "sparse_down";
    const ggml_type_traits *tr = ggml_get_type_traits(wt->type);
    if (!tr->to_float) ggml_abort("%s: weight type %s cannot be dequantized", op, tr->name);
    if (!ggml_is_contiguous_rows(wt) || wt->ne[2] != 1 || wt->ne[3] != 1) ggml_abort("%s: wt must be 2-D with contiguous rows", op);
    if (h->type != GGML_TYPE_F32 || h->nb[0] != sizeof(float)) ggml_abort("%s: h must be F32 with contiguous rows", op);
    if (h->ne[0] != wt->ne[1] || h->ne[2] != 1 || h->ne[3] != 1) ggml_abort("%s: h must be [n, T] with wt [d, n]", op);
    check_idx(op, idx);
    if (wd) {
        if (wd->ne[0] != wt->ne[1] || wd->ne[1] != wt->ne[0] || wd->ne[2] != 1 || wd->ne[3] != 1 || !ggml_is_contiguous_rows(wd))
            ggml_abort("%s: w_down must be 2-D [n, d] with contiguous rows for wt [d, n]", op);
    }
    ggml_tensor *r = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, wt->ne[0], h->ne[1]);
    r->op = GGML_OP_SPARSE_DOWN;
    r->src[0] = wt;
    r->src[1] = h;
    r->src[2] = idx;
    r->src[3] = wd;
    set_range(op, r, begin, end, wt->ne[1]);
    return r;
}
