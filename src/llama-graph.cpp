#include "llama-graph.h"

#include <cmath>

#include "llama-kv-cache.h"

namespace pinfer {

ggml_tensor *build_norm(ggml_context *ctx, ggml_tensor *x, ggml_tensor *w, ggml_tensor *b, float eps, bool rms) {
    x = rms ? ggml_rms_norm(ctx, x, eps) : ggml_norm(ctx, x, eps);
    if (w) x = ggml_mul(ctx, x, w);
    if (b) x = ggml_add(ctx, x, b);
    return x;
}

ggml_tensor *build_linear(ggml_context *ctx, ggml_tensor *w, ggml_tensor *b, ggml_tensor *x) {
    ggml_tensor *y = ggml_mul_mat(ctx, w, x);
    return b ? ggml_add(ctx, y, b) : y;
}

ggml_tensor *build_attention(ggml_context *ctx, ggml_cgraph *gf, const hparams &hp, kv_cache &kv,
                             const graph_inputs &in, int il, ggml_tensor *q, ggml_tensor *k, ggml_tensor *v) {
    const int hd = (int)hp.head_dim;
    const int n = in.n_tokens;
    kv.store(ctx, gf, il, ggml_reshape_2d(ctx, k, hd * hp.n_head_kv, n), v, in.pos0);

    ggml_tensor *K = kv.view_k(ctx, il, in.n_kv, hd, (int)hp.n_head_kv);  // [hd, n_kv, n_head_kv]
    ggml_tensor *V = kv.view_v(ctx, il, in.n_kv, hd, (int)hp.n_head_kv);  // [n_kv, hd, n_head_kv]
    ggml_tensor *Q = ggml_permute(ctx, q, 0, 2, 1, 3);                    // [hd, n, n_head]
    ggml_tensor *kq = ggml_mul_mat(ctx, K, Q);                            // [n_kv, n, n_head]
    kq = ggml_soft_max_ext(ctx, kq, in.kq_mask, 1.0f / sqrtf((float)hd));
    ggml_tensor *kqv = ggml_mul_mat(ctx, V, kq);                          // [hd, n, n_head]
    kqv = ggml_permute(ctx, kqv, 0, 2, 1, 3);                             // [hd, n_head, n]
    return ggml_reshape_2d(ctx, ggml_cont(ctx, kqv), hd * hp.n_head, n);
}

ggml_tensor *build_ffn(ggml_context *ctx, ggml_tensor *x, ggml_tensor *gate, ggml_tensor *up, ggml_tensor *down,
                       ffn_act act) {
    ggml_tensor *u = ggml_mul_mat(ctx, up, x);
    ggml_tensor *h;
    if (!gate) {
        h = act == ffn_act::SILU ? ggml_silu(ctx, u) : act == ffn_act::GELU ? ggml_gelu(ctx, u) : ggml_relu(ctx, u);
    } else {
        ggml_tensor *g = ggml_mul_mat(ctx, gate, x);
        switch (act) {
            case ffn_act::SILU: h = ggml_swiglu(ctx, g, u); break;
            case ffn_act::GELU: h = ggml_geglu(ctx, g, u); break;
            case ffn_act::RELU: h = ggml_reglu(ctx, g, u); break;
            case ffn_act::RELU_BOTH: h = ggml_reglu(ctx, g, ggml_relu(ctx, u)); break;
            default: h = ggml_swiglu(ctx, g, u); break;
        }
    }
    return ggml_mul_mat(ctx, down, h);
}

ggml_tensor *build_select_outputs(ggml_context *ctx, ggml_tensor *x, int n_outputs) {
    if (n_outputs == x->ne[1]) return x;
    return ggml_view_2d(ctx, x, x->ne[0], n_outputs, x->nb[1], (size_t)(x->ne[1] - n_outputs) * x->nb[1]);
}

}  // namespace pinfer
