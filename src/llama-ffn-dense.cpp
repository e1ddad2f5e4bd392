// The dense FFN: down(act(gate x) * up x), or down(act(up x)) without a gate.
#include "llama-ffn-impl.h"

namespace pinfer {

ggml_tensor *build_ffn_dense(ggml_context *ctx, const ffn_env &env, const ffn_part &p, ggml_tensor *x) {
    const layer_weights &l = *p.w;
    const ffn_act act = env.m.hp.act;
    const bool gated = l.ffn_gate != nullptr;
    ggml_tensor *gate = gated ? ffn_rows(ctx, l.ffn_gate, p.b, p.e) : nullptr;
    ggml_tensor *down = ffn_cols(ctx, l.ffn_down, p.b, p.e);
    ggml_tensor *u = ffn_up_bias(ctx, p, ggml_mul_mat(ctx, ffn_rows(ctx, l.ffn_up, p.b, p.e), x), true);
    if (!env.observe) {  // the plain dense graph
        ggml_tensor *h = gated ? ffn_act_gated(ctx, ggml_mul_mat(ctx, gate, x), u, act) : ffn_act_unary(ctx, u, act);
        return ggml_mul_mat(ctx, down, h);
    }
    ggml_tensor *a = ffn_keep(ffn_act_unary(ctx, gated ? ggml_mul_mat(ctx, gate, x) : u, act));
    env.probe->act = a;
    ggml_tensor *h = a;
    if (gated) {
        if (act == ffn_act::RELU_BOTH) env.probe->up = ffn_keep(u);
        h = ggml_mul(ctx, a, act == ffn_act::RELU_BOTH ? ggml_relu(ctx, u) : u);
    }
    return ggml_mul_mat(ctx, down, h);
}

}  // namespace pinfer
