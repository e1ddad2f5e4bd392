#include "llama-graph.h"

#include <cmath>

#include "llama-kv-cache.h"
#include "llama-sparse-ffn.h"

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

ggml_tensor *build_ffn(ggml_context *ctx, const graph_inputs &in, const model &m, int il, ggml_tensor *x) {
    return build_sparse_ffn(ctx, in.ffn, m, il, x);
}

ggml_tensor *build_select_outputs(ggml_context *ctx, ggml_tensor *x, int n_outputs) {
    if (n_outputs == x->ne[1]) return x;
    return ggml_view_2d(ctx, x, x->ne[0], n_outputs, x->nb[1], (size_t)(x->ne[1] - n_outputs) * x->nb[1]);
}

}  // namespace pinfer
