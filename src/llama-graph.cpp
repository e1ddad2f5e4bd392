#include "llama-graph.h"

#include <cmath>

#include "ggml-backend.h"
#include "llama-device-weights.h"
#include "llama-kv-cache.h"
#include "llama-model.h"
#include "llama-placement.h"
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
    kv.store(ctx, gf, il, ggml_reshape_2d(ctx, k, hd * hp.n_head_kv, n), v, in.cell0, in.kv_moving);

    ggml_tensor *K = kv.view_k(ctx, il, in.n_kv, hd, (int)hp.n_head_kv);  // [hd, n_kv, n_head_kv]
    ggml_tensor *V = kv.view_v(ctx, il, in.n_kv, hd, (int)hp.n_head_kv);  // [n_kv, hd, n_head_kv]
    ggml_tensor *Q = ggml_permute(ctx, q, 0, 2, 1, 3);                    // [hd, n, n_head]
    ggml_tensor *kq = ggml_mul_mat(ctx, K, Q);                            // [n_kv, n, n_head]
    const float scale = hp.attn_scale > 0 ? hp.attn_scale : 1.0f / sqrtf((float)hd);
    ggml_tensor *mask = graph_kq_mask(ctx, in, hp.is_swa((uint32_t)il));
    if (hp.attn_softcap > 0) {  // capped before the mask, as Gemma 2 does
        kq = build_softcap(ctx, ggml_scale(ctx, kq, scale), hp.attn_softcap);
        kq = ggml_soft_max_ext(ctx, kq, mask, 1.0f);
    } else {
        kq = ggml_soft_max_ext(ctx, kq, mask, scale);
    }
    ggml_tensor *kqv = ggml_mul_mat(ctx, V, kq);                          // [hd, n, n_head]
    kqv = ggml_permute(ctx, kqv, 0, 2, 1, 3);                             // [hd, n_head, n]
    return ggml_reshape_2d(ctx, ggml_cont(ctx, kqv), hd * hp.n_head, n);
}

static bool on_device(const graph_inputs &in, int il) { return in.dev && in.dev->plan->layers[(size_t)il].on_device; }

ggml_tensor *build_ffn(ggml_context *ctx, ggml_cgraph *gf, const graph_inputs &in, const model &m, int il, ggml_tensor *x) {
    if (m.layers[(size_t)il].ffn_gate_inp) {
        // experts stay on the CPU (the plan gives a device layer no FFN share):
        // the state goes down, the FFN output comes back up
        const layer_weights &l = m.layers[(size_t)il];
        if (!on_device(in, il)) return build_moe_ffn(ctx, in.ffn, m, l, il, x);
        ggml_backend *be = ggml_get_backend(ctx);
        ggml_tensor *x_h = ggml_transfer(ctx, x, true);
        ggml_build_forward_expand(gf, x_h);
        ggml_set_backend(ctx, nullptr);
        ggml_tensor *y = build_moe_ffn(ctx, in.ffn, m, l, il, x_h);
        ggml_set_backend(ctx, be);
        return ggml_transfer(ctx, y, false);
    }
    if (!on_device(in, il)) return build_sparse_ffn(ctx, gf, in.ffn, m, il, x, nullptr);
    ffn_device dev{&in.dev->w->layer((uint32_t)il), in.dev->w->bundle((uint32_t)il), in.dev->plan->layers[(size_t)il].k,
                   in.dev->stream_min > 0 && x->ne[1] >= in.dev->stream_min};
    return build_sparse_ffn(ctx, gf, in.ffn, m, il, x, &dev);
}

// Moves x to the side of backend `to` (nullptr: the CPU). A copy is made by
// the device in both directions.
static ggml_tensor *move_to(ggml_context *ctx, const graph_inputs &in, ggml_tensor *x, ggml_backend *to) {
    ggml_backend *from = x->backend && !ggml_backend_is_cpu(x->backend) ? x->backend : nullptr;
    if (from == to) {
        ggml_set_backend(ctx, to);
        return x;
    }
    ggml_set_backend(ctx, in.dev->be);
    x = ggml_transfer(ctx, x, to == nullptr);
    ggml_set_backend(ctx, to);
    return x;
}

const layer_weights &build_layer_begin(ggml_context *ctx, const graph_inputs &in, const model &m, int il, ggml_tensor **x) {
    if (!in.dev) return m.layers[(size_t)il];
    const bool dev = on_device(in, il);
    *x = move_to(ctx, in, *x, dev ? in.dev->be : nullptr);
    return dev ? in.dev->w->layer((uint32_t)il) : m.layers[(size_t)il];
}

ggml_tensor *build_layers_end(ggml_context *ctx, const graph_inputs &in, ggml_tensor *x) {
    return in.dev ? move_to(ctx, in, x, nullptr) : x;
}

model_head build_head_begin(ggml_context *ctx, const graph_inputs &in, const model &m, ggml_tensor **x) {
    if (!in.dev) return m.head();
    const bool dev = in.dev->plan->head_on_device;
    *x = move_to(ctx, in, *x, dev ? in.dev->be : nullptr);
    return dev ? in.dev->w->head() : m.head();
}

static ggml_tensor *input_here(ggml_context *ctx, ggml_tensor *host, ggml_tensor **dev) {
    ggml_backend *be = ggml_get_backend(ctx);
    if (!be || ggml_backend_is_cpu(be)) return host;
    if (!*dev) *dev = ggml_transfer(ctx, host, false);
    return *dev;
}

ggml_tensor *graph_pos(ggml_context *ctx, const graph_inputs &in) { return input_here(ctx, in.pos, &in.pos_dev); }
ggml_tensor *graph_kq_mask(ggml_context *ctx, const graph_inputs &in, bool swa) {
    if (swa && in.kq_mask_swa) return input_here(ctx, in.kq_mask_swa, &in.kq_mask_swa_dev);
    return input_here(ctx, in.kq_mask, &in.kq_mask_dev);  // every layer windowed: the window is in this one
}

ggml_tensor *build_softcap(ggml_context *ctx, ggml_tensor *x, float c) {
    if (c <= 0) return x;
    return ggml_scale(ctx, ggml_tanh(ctx, ggml_scale(ctx, x, 1.0f / c)), c);
}

ggml_tensor *build_rope(ggml_context *ctx, const graph_inputs &in, const model &m, const kv_cache &kv, int il, ggml_tensor *x) {
    const hparams &hp = m.hp;
    const bool swa = hp.is_swa((uint32_t)il);
    ggml_tensor *ff = m.rope_freqs;
    if (m.rope_short) ff = hp.n_ctx_orig && kv.n_ctx > hp.n_ctx_orig ? m.rope_long : m.rope_short;
    if (ff) ff = input_here(ctx, ff, &in.rope_factors_dev);
    return ggml_rope_ext(ctx, x, graph_pos(ctx, in), ff, hp.n_rot, hp.rope_mode, swa ? hp.rope_freq_base_swa : hp.rope_freq_base,
                         swa ? hp.rope_freq_scale_swa : hp.rope_freq_scale, hp.rope_attn_factor);
}

ggml_tensor *build_select_outputs(ggml_context *ctx, const graph_inputs &in, ggml_tensor *x) {
    const int n_outputs = in.n_outputs;
    if (in.out_ids) return ggml_get_rows(ctx, x, input_here(ctx, in.out_ids, &in.out_ids_dev));
    if (n_outputs == x->ne[1]) return x;
    return ggml_view_2d(ctx, x, x->ne[0], n_outputs, x->nb[1], (size_t)(x->ne[1] - n_outputs) * x->nb[1]);
}

}  // namespace pinfer
