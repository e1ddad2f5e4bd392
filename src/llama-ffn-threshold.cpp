// Threshold sparsity for SwiGLU / GeGLU FFNs (CATS/TEAL-style, approximate):
// gate dense, active = |act(gate x)| > t_l (pinfer.sparse.act_thresholds),
// up and down only for the active neurons.
#include "llama-ffn-impl.h"

namespace pinfer {

ggml_tensor *build_ffn_threshold(ggml_context *ctx, const ffn_env &env, const ffn_part &p, ggml_tensor *x) {
    const layer_weights &l = *p.w;
    const ffn_act act = env.m.hp.act;
    const bool gated = l.ffn_gate != nullptr;
    const int64_t n = p.e - p.b;
    const float t = env.m.sparse.act_thresholds[(size_t)env.il];
    ggml_tensor *pre = ggml_mul_mat(ctx, ffn_rows(ctx, gated ? l.ffn_gate : l.ffn_up, p.b, p.e), x);
    if (!gated) pre = ffn_up_bias(ctx, p, pre, true);
    ggml_tensor *a = ffn_act_unary(ctx, pre, act);
    if (env.observe) env.probe->act = ffn_keep(a);
    ggml_tensor *idx = ggml_sparse_select_abs(ctx, a, t);
    if (env.b && env.b->stats) env.probe->idx = ffn_keep(idx);
    ggml_tensor *am = ggml_sparse_mask(ctx, a, t);  // per token: a batch computes the union
    ggml_tensor *h = am;
    if (gated) {
        ggml_tensor *u = ffn_up_bias(ctx, p, ggml_mul_mat_sparse_rows(ctx, ffn_rows(ctx, l.ffn_up, p.b, p.e), x, idx, 0, n), true);
        if (env.observe && act == ffn_act::RELU_BOTH) env.probe->up = ffn_keep(u);
        h = ggml_mul(ctx, am, act == ffn_act::RELU_BOTH ? ggml_relu(ctx, u) : u);
    }
    return ffn_down_local(ctx, p, h, idx);
}

}  // namespace pinfer
