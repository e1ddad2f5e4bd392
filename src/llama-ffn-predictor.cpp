// Predictor sparsity (PowerInfer's scheme): idx = fc2 · relu(fc1 · x) >
// threshold; gate, up and down only for the predicted neurons (approximate
// where the predictor misses). The list holds absolute neuron ids, so the
// parts of a hybrid layer read their own ranges of the same list.
#include "llama-ffn-impl.h"

namespace pinfer {

ggml_tensor *build_ffn_predict(ggml_context *ctx, const ffn_env &env, const layer_weights &w, ggml_tensor *x) {
    const model &m = env.m;
    const layer_weights &l = m.layers[(size_t)env.il];  // the verify / observe references read the host's dense FFN
    const ffn_act act = m.hp.act;
    const bool gated = l.ffn_gate != nullptr;
    ggml_tensor *idx = ggml_sparse_predict(ctx, w.fc1, w.fc2, x, m.sparse.threshold);
    if (!env.b) return idx;
    if (env.b->stats || env.b->verify) env.probe->idx = ffn_keep(idx);
    if (env.b->verify || env.observe) {  // the dense activation defines the true active set
        ggml_tensor *pre = ggml_mul_mat(ctx, gated ? l.ffn_gate : l.ffn_up, x);
        if (!gated && l.ffn_up_b) pre = ggml_add(ctx, pre, l.ffn_up_b);
        ggml_tensor *a = ffn_act_unary(ctx, pre, act);
        ggml_tensor *ref = a;
        if (gated && act == ffn_act::RELU_BOTH) {
            ggml_tensor *ud = ggml_mul_mat(ctx, l.ffn_up, x);
            if (l.ffn_up_b) ud = ggml_add(ctx, ud, l.ffn_up_b);
            ref = ggml_reglu(ctx, pre, ggml_relu(ctx, ud));
            if (env.observe) env.probe->up = ffn_keep(ud);
        }
        const float t = m.sparse.act_thresholds.size() == m.hp.n_layer ? m.sparse.act_thresholds[(size_t)env.il] : 0.0f;
        if (env.b->verify) env.probe->idx_true = ffn_keep(ggml_sparse_select_abs(ctx, ref, t));
        if (env.observe) env.probe->act = ffn_keep(a);
    }
    return idx;
}

ggml_tensor *build_ffn_predictor(ggml_context *ctx, const ffn_env &env, const ffn_part &p, ggml_tensor *x, ggml_tensor *idx) {
    const layer_weights &l = *p.w;
    const ffn_act act = env.m.hp.act;
    const bool gated = l.ffn_gate != nullptr;
    const ffn_bundle *bd = p.bundle;
    // The down projection of h [rows, T] (only [b, e) computed) over the list.
    auto down = [&](ggml_tensor *h) {
        if (l.ffn_down_t) return ggml_sparse_down(ctx, l.ffn_down_t, l.ffn_down, h, idx, p.b, p.e);
        if (p.whole()) return ggml_mul_mat(ctx, l.ffn_down, h);
        ggml_tensor *hv = ggml_cont(ctx, ggml_view_2d(ctx, h, p.e - p.b, h->ne[1], h->nb[1], (size_t)p.b * h->nb[0]));
        return ggml_mul_mat(ctx, ffn_cols(ctx, l.ffn_down, p.b, p.e), hv);
    };
    if (gated && bd && bd->rows == 3 && !l.ffn_up_b) {  // the fused op has no bias
        // decoding: the whole FFN in one op, one contiguous read per neuron
        if (x->ne[1] <= GGML_SPARSE_FFN_MAX_T) {
            const ggml_op op = act == ffn_act::SILU ? GGML_OP_SWIGLU : act == ffn_act::GELU ? GGML_OP_GEGLU : GGML_OP_REGLU;
            // the dense fallback reads the plain matrices: a device's bundle views are not plain
            const bool plain = l.ffn_gate != bd->gate;
            return ggml_sparse_ffn_bundle(ctx, bd->w, plain ? l.ffn_gate : nullptr, plain ? l.ffn_up : nullptr,
                                          plain ? l.ffn_down : nullptr, x, idx, p.b, p.e, op, act == ffn_act::RELU_BOTH);
        }
        ggml_tensor *g = ggml_mul_mat_sparse_rows(ctx, bd->gate, x, idx, p.b, p.e);  // prompts: row by row
        ggml_tensor *u = ggml_mul_mat_sparse_rows(ctx, bd->up, x, idx, p.b, p.e);
        return ggml_sparse_down(ctx, bd->down_t, l.ffn_down, ffn_act_gated(ctx, g, u, act), idx, p.b, p.e);
    }
    ggml_tensor *h;
    if (gated && bd) {  // one read per active neuron: its gate and up rows are adjacent
        ggml_tensor *gu = ggml_mul_mat_sparse_rows_bundle(ctx, bd->w, x, idx, p.b, p.e, 2);  // [rows, T, 2]
        ggml_tensor *g = ggml_view_2d(ctx, gu, gu->ne[0], gu->ne[1], gu->nb[1], 0);
        ggml_tensor *u = ffn_up_bias(ctx, p, ggml_view_2d(ctx, gu, gu->ne[0], gu->ne[1], gu->nb[1], gu->nb[2]), false);
        h = ffn_act_gated(ctx, g, u, act);
    } else if (gated) {
        ggml_tensor *g = ggml_mul_mat_sparse_rows(ctx, l.ffn_gate, x, idx, p.b, p.e);
        ggml_tensor *u = ffn_up_bias(ctx, p, ggml_mul_mat_sparse_rows(ctx, l.ffn_up, x, idx, p.b, p.e), false);
        h = ffn_act_gated(ctx, g, u, act);  // act(0) = 0 for every activation: inactive rows stay 0
    } else {
        ggml_tensor *u = ggml_mul_mat_sparse_rows(ctx, l.ffn_up, x, idx, p.b, p.e);
        ggml_tensor *bias = ffn_up_bias_active(ctx, p, x, idx);  // the bias of the active rows only: act(0) = 0 elsewhere
        h = ffn_act_unary(ctx, bias ? ggml_add(ctx, u, bias) : u, act);
    }
    return down(h);
}

}  // namespace pinfer
