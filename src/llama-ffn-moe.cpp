// The mixture-of-experts FFN (Mixtral): a router picks n_expert_used of the
// layer's n_expert FFNs per token, and the token's output is their weighted sum.
//
//   logits = router x                  [n_expert, T]
//   ids    = top-k(logits)             [k, T], k = n_expert_used
//   w      = softmax(logits[ids])      [k, T]
//   y      = sum_s w_s * down_e(act(gate_e x) * up_e x),  e = ids[s]
//
// Mixtral takes the softmax over all experts, keeps the top k and divides by
// their sum: the same weights as a softmax over the k chosen logits, which is
// what is computed here. Only the chosen experts' matrices are read
// (ggml_mul_mat_id), whichever experts the tokens of a batch route to.
//
// Sparse experts (the context's mode): the routed experts' gate is dense,
// their up rows only where the neuron is active (ggml_mul_mat_id_masked) --
// exact: relu(gate x) > 0, the same function as dense; threshold: |act(gate
// x)| > t_l (pinfer.sparse.act_thresholds), approximate. The down product
// stays dense over the routed experts (a column-sparse down needs each
// expert's transposed down matrix: future work).
#include "llama-ffn-impl.h"

namespace pinfer {

ggml_tensor *build_moe_ffn(ggml_context *ctx, ffn_build *b, const model &m, const layer_weights &l, int il, ggml_tensor *x) {
    const int64_t d = x->ne[0], T = x->ne[1], X = m.hp.n_expert, k = m.hp.n_expert_used;
    ggml_tensor *logits = ggml_mul_mat(ctx, l.ffn_gate_inp, x);  // [X, T]
    ggml_tensor *ids = ggml_top_k(ctx, logits, (int)k);          // [k, T]
    if (b && b->stats) b->probes[(size_t)il].experts = ffn_keep(ids);
    ggml_tensor *chosen = ggml_get_rows(ctx, ggml_reshape_3d(ctx, logits, 1, X, T), ids);  // [1, k, T]
    ggml_tensor *w = ggml_soft_max_ext(ctx, ggml_reshape_2d(ctx, chosen, k, T), nullptr, 1.0f);
    ggml_tensor *x3 = ggml_reshape_3d(ctx, x, d, 1, T);
    ggml_tensor *gate = ggml_mul_mat_id(ctx, l.ffn_gate_exps, x3, ids);  // [n_ff, k, T]
    const sparse_mode mode = b ? b->mode : sparse_mode::OFF;
    ggml_tensor *h;
    if (mode == sparse_mode::EXACT) {
        ggml_tensor *a = ggml_relu(ctx, gate);
        ggml_tensor *up = ggml_mul_mat_id_masked(ctx, l.ffn_up_exps, x3, ids, a);
        h = ggml_mul(ctx, a, m.hp.act == ffn_act::RELU_BOTH ? ggml_relu(ctx, up) : up);
        if (b->stats) b->probes[(size_t)il].expert_act = ffn_keep(a);
    } else if (mode == sparse_mode::THRESHOLD) {
        ggml_tensor *a2 = ggml_reshape_2d(ctx, ffn_act_unary(ctx, gate, m.hp.act), gate->ne[0], k * T);
        ggml_tensor *masked = ggml_sparse_mask(ctx, a2, m.sparse.act_thresholds[(size_t)il]);
        if (b->stats) ffn_keep(masked);  // the node itself: the planner keeps its memory, not a view's
        ggml_tensor *a = ggml_reshape_3d(ctx, masked, gate->ne[0], k, T);
        ggml_tensor *up = ggml_mul_mat_id_masked(ctx, l.ffn_up_exps, x3, ids, a);
        h = ggml_mul(ctx, a, m.hp.act == ffn_act::RELU_BOTH ? ggml_relu(ctx, up) : up);
        if (b->stats) b->probes[(size_t)il].expert_act = a;
    } else {
        ggml_tensor *up = ggml_mul_mat_id(ctx, l.ffn_up_exps, x3, ids);
        h = ffn_act_gated(ctx, gate, up, m.hp.act);
    }
    ggml_tensor *y = ggml_mul_mat_id(ctx, l.ffn_down_exps, h, ids);  // [d, k, T]
    y = ggml_mul(ctx, y, ggml_reshape_3d(ctx, w, 1, k, T));
    ggml_tensor *sum = nullptr;
    for (int64_t s = 0; s < k; s++) {
        ggml_tensor *ys = ggml_view_2d(ctx, y, d, T, y->nb[2], (size_t)s * y->nb[1]);
        sum = sum ? ggml_add(ctx, sum, ys) : ys;
    }
    return k == 1 ? ggml_cont(ctx, sum) : sum;
}

}  // namespace pinfer
