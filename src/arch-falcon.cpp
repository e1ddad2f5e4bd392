// The falcon architecture (Falcon 7B/40B/180B, ReluFalcon): parallel attention
// and MLP read the same residual, LayerNorm with bias, a fused query_key_value
// projection, NeoX-style RoPE, multi-query or grouped-query attention, and an
// ungated FFN down(act(up x)) (GELU, or ReLU for ReluFalcon via pinfer.ffn_act).
//
// GGUF layout (as llama.cpp's converter writes it): attn_qkv rows are
// [all q heads; all k heads; all v heads]; the 40B/180B "new decoder
// architecture" has a second norm (attn_norm_2) in front of the MLP.
#include <algorithm>
#include <stdexcept>

#include "llama-graph.h"
#include "llama-kv-cache.h"
#include "llama-model-loader.h"
#include "llama-model.h"
#include "llama-model-validate.h"

namespace pinfer {

static void falcon_hparams(const model_loader &ml, hparams &hp) {
    const std::string a = hp.arch + ".";
    using L = hparam_limits;
    hp.n_ctx_train = (uint32_t)ml.get_int_in(a + "context_length", 0, L::max_ctx);
    hp.n_embd = (uint32_t)ml.get_int_in(a + "embedding_length", 1, L::max_embd);
    hp.n_layer = (uint32_t)ml.get_int_in(a + "block_count", 1, L::max_layers);
    hp.n_ff = (uint32_t)ml.get_int_in(a + "feed_forward_length", 1, L::max_ff, std::min<int64_t>(4 * (int64_t)hp.n_embd, L::max_ff));
    hp.n_head = (uint32_t)ml.get_int_in(a + "attention.head_count", 1, L::max_heads);
    hp.n_head_kv = (uint32_t)ml.get_int_in(a + "attention.head_count_kv", 1, L::max_heads, 1);
    hp.head_dim = std::max<uint32_t>(1, hp.n_embd / hp.n_head);
    hp.n_rot = (uint32_t)ml.get_int_in(a + "rope.dimension_count", 0, L::max_head_dim, hp.head_dim);
    hp.norm_eps = ml.get_float_in(a + "attention.layer_norm_epsilon", 0.0f, L::max_eps, 1e-5f);
    hp.rope_freq_base = ml.get_float_in(a + "rope.freq_base", 0.0f, L::max_rope_base, 10000.0f);
    hp.rope_mode = GGML_ROPE_NEOX;
    hp.act = ffn_act::GELU;  // pinfer.ffn_act may override (ReluFalcon: relu)
}

static void falcon_tensors(model_loader &ml, model &m) {
    const hparams &hp = m.hp;
    const int64_t E = hp.n_embd, V = hp.n_vocab, F = hp.n_ff, Q = (int64_t)hp.head_dim * hp.n_head,
                  KV = hp.n_embd_gqa();
    m.tok_embd = ml.tensor(m.ctx, "token_embd.weight", {E, V});
    m.output_norm = ml.tensor(m.ctx, "output_norm.weight", {E});
    m.output_norm_b = ml.tensor(m.ctx, "output_norm.bias", {E});
    m.output = ml.tensor(m.ctx, "output.weight", {E, V}, false);
    if (!m.output) m.output = m.tok_embd;  // Falcon ties lm_head to the embeddings
    m.layers.resize(hp.n_layer);
    for (uint32_t il = 0; il < hp.n_layer; il++) {
        layer_weights &l = m.layers[il];
        const std::string p = "blk." + std::to_string(il) + ".";
        l.attn_norm = ml.tensor(m.ctx, p + "attn_norm.weight", {E});
        l.attn_norm_b = ml.tensor(m.ctx, p + "attn_norm.bias", {E});
        // the MLP's own norm (new decoder architecture); else the MLP reads attn_norm's output
        l.ffn_norm = ml.tensor(m.ctx, p + "attn_norm_2.weight", {E}, false);
        if (l.ffn_norm) l.ffn_norm_b = ml.tensor(m.ctx, p + "attn_norm_2.bias", {E});
        l.wqkv = ml.tensor(m.ctx, p + "attn_qkv.weight", {E, Q + 2 * KV}, false);
        if (!l.wqkv) {  // files with separate projections
            l.wq = ml.tensor(m.ctx, p + "attn_q.weight", {E, Q});
            l.wk = ml.tensor(m.ctx, p + "attn_k.weight", {E, KV});
            l.wv = ml.tensor(m.ctx, p + "attn_v.weight", {E, KV});
        }
        l.wo = ml.tensor(m.ctx, p + "attn_output.weight", {Q, E});
        l.ffn_up = ml.tensor(m.ctx, p + "ffn_up.weight", {E, F});
        l.ffn_down = ml.tensor(m.ctx, p + "ffn_down.weight", {F, E});
    }
}

static ggml_tensor *falcon_graph(ggml_context *ctx, ggml_cgraph *gf, const model &m, kv_cache &kv,
                                 const graph_inputs &in) {
    const hparams &hp = m.hp;
    const int n = in.n_tokens;
    const int64_t Q = (int64_t)hp.head_dim * hp.n_head, KV = hp.n_embd_gqa();
    ggml_tensor *x = ggml_get_rows(ctx, m.tok_embd, in.tokens);  // [n_embd, n]
    for (uint32_t il = 0; il < hp.n_layer; il++) {
        const layer_weights &l = build_layer_begin(ctx, in, m, (int)il, &x);
        ggml_tensor *cur = build_norm(ctx, x, l.attn_norm, l.attn_norm_b, hp.norm_eps, false);
        ggml_tensor *mlp_in = l.ffn_norm ? build_norm(ctx, x, l.ffn_norm, l.ffn_norm_b, hp.norm_eps, false) : cur;
        ggml_tensor *q, *k, *v;
        if (l.wqkv) {
            ggml_tensor *qkv = ggml_mul_mat(ctx, l.wqkv, cur);  // [Q + 2 KV, n], F32
            const size_t es = sizeof(float);
            q = ggml_cont(ctx, ggml_view_2d(ctx, qkv, Q, n, qkv->nb[1], 0));
            k = ggml_cont(ctx, ggml_view_2d(ctx, qkv, KV, n, qkv->nb[1], Q * es));
            v = ggml_cont(ctx, ggml_view_2d(ctx, qkv, KV, n, qkv->nb[1], (Q + KV) * es));
        } else {
            q = ggml_mul_mat(ctx, l.wq, cur);
            k = ggml_mul_mat(ctx, l.wk, cur);
            v = ggml_mul_mat(ctx, l.wv, cur);
        }
        q = ggml_rope(ctx, ggml_reshape_3d(ctx, q, hp.head_dim, hp.n_head, n), graph_pos(ctx, in), hp.n_rot, hp.rope_mode,
                      hp.rope_freq_base, hp.rope_freq_scale);
        k = ggml_rope(ctx, ggml_reshape_3d(ctx, k, hp.head_dim, hp.n_head_kv, n), graph_pos(ctx, in), hp.n_rot, hp.rope_mode,
                      hp.rope_freq_base, hp.rope_freq_scale);
        cur = build_attention(ctx, gf, hp, kv, in, (int)il, q, k, v);
        if (il == hp.n_layer - 1) {  // only the rows whose logits are wanted go on
            cur = build_select_outputs(ctx, in, cur);
            mlp_in = build_select_outputs(ctx, in, mlp_in);
            x = build_select_outputs(ctx, in, x);
        }
        ggml_tensor *ffn = build_ffn(ctx, gf, in, m, (int)il, mlp_in);
        x = ggml_add(ctx, x, ggml_add(ctx, ggml_mul_mat(ctx, l.wo, cur), ffn));
    }
    const model_head h = build_head_begin(ctx, in, m, &x);
    x = build_norm(ctx, x, h.output_norm, h.output_norm_b, hp.norm_eps, false);
    return build_layers_end(ctx, in, ggml_mul_mat(ctx, h.output, x));
}

extern const arch_impl arch_falcon = {"falcon", falcon_hparams, falcon_tensors, falcon_graph};

}  // namespace pinfer
