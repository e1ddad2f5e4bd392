// Exact sparsity for ReLU-family FFNs: gate (ungated: up) dense, then up and
// down only for the neurons whose ReLU is positive -- the same function as
// dense; results differ only by summation order.
#include "llama-ffn-impl.h"

namespace pinfer {

ggml_tensor *build_ffn_exact(ggml_context *ctx, const ffn_env &env, const ffn_part &p, ggml_tensor *x) {
    const layer_weights &l = *p.w;
    const ffn_act act = env.m.hp.act;
    const bool gated = l.ffn_gate != nullptr;
    const int64_t n = p.e - p.b;
    // ReLU is positive exactly where its input is: select on the raw gate (up)
    ggml_tensor *pre = ggml_mul_mat(ctx, ffn_rows(ctx, gated ? l.ffn_gate : l.ffn_up, p.b, p.e), x);
    if (!gated) pre = ffn_up_bias(ctx, p, pre, true);  // the bias moves the ReLU's zero: select after it
    ggml_tensor *idx = ggml_sparse_select(ctx, pre, 0.0f);
    if (env.b && env.b->stats) env.probe->idx = ffn_keep(idx);
    if (env.observe) env.probe->act = ffn_keep(ggml_relu(ctx, pre));
    ggml_tensor *h;
    if (gated) {
        ggml_tensor *u = ffn_up_bias(ctx, p, ggml_mul_mat_sparse_rows(ctx, ffn_rows(ctx, l.ffn_up, p.b, p.e), x, idx, 0, n), true);
        if (env.observe && act == ffn_act::RELU_BOTH) env.probe->up = ffn_keep(u);
        h = ffn_act_gated(ctx, pre, u, act);  // relu(g) = 0 on every token's inactive rows
    } else {
        h = ggml_relu(ctx, pre);
    }
    return ffn_down_local(ctx, p, h, idx);
}

}  // namespace pinfer
