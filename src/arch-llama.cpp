// The llama architecture (also Mistral, SmolLM2, ReluLLaMA/ProSparse, Bamboo):
// pre-norm RMSNorm blocks, RoPE, grouped-query attention, gated FFN. qwen2
// (arch-qwen2.cpp) is the same block with q/k/v biases and NeoX RoPE.
#include <algorithm>
#include <stdexcept>

#include "llama-graph.h"
#include "llama-kv-cache.h"
#include "llama-model-loader.h"
#include "llama-model.h"
#include "llama-model-validate.h"
#include "arch-llama.h"

namespace pinfer {

void llama_like_hparams(const model_loader &ml, hparams &hp, float default_eps, int rope_mode) {
    const std::string a = hp.arch + ".";
    using L = hparam_limits;
    hp.n_ctx_train = (uint32_t)ml.get_int_in(a + "context_length", 0, L::max_ctx);
    hp.n_embd = (uint32_t)ml.get_int_in(a + "embedding_length", 1, L::max_embd);
    hp.n_layer = (uint32_t)ml.get_int_in(a + "block_count", 1, L::max_layers);
    hp.n_ff = (uint32_t)ml.get_int_in(a + "feed_forward_length", 1, L::max_ff);
    hp.n_head = (uint32_t)ml.get_int_in(a + "attention.head_count", 1, L::max_heads);
    hp.n_head_kv = (uint32_t)ml.get_int_in(a + "attention.head_count_kv", 1, L::max_heads, hp.n_head);
    hp.head_dim = (uint32_t)ml.get_int_in(a + "attention.key_length", 1, L::max_head_dim,
                                          std::max<uint32_t>(1, hp.n_embd / hp.n_head));
    hp.n_rot = (uint32_t)ml.get_int_in(a + "rope.dimension_count", 0, L::max_head_dim, hp.head_dim);
    hp.norm_eps = ml.get_float_in(a + "attention.layer_norm_rms_epsilon", 0.0f, L::max_eps, default_eps);
    hp.rope_freq_base = ml.get_float_in(a + "rope.freq_base", 0.0f, L::max_rope_base, 10000.0f);
    const std::string scaling = ml.get_str(a + "rope.scaling.type", "none");
    if (scaling == "linear") {
        hp.rope_freq_scale = 1.0f / ml.get_float_in(a + "rope.scaling.factor", 0.0f, L::max_rope_factor, 1.0f);
    } else if (scaling != "none") {
        throw std::runtime_error("unsupported rope scaling type '" + scaling + "'");
    }
    hp.rope_mode = rope_mode;
}

void llama_like_tensors(model_loader &ml, model &m, bool qkv_bias) {
    const hparams &hp = m.hp;
    const int64_t E = hp.n_embd, V = hp.n_vocab, F = hp.n_ff, Q = (int64_t)hp.head_dim * hp.n_head,
                  KV = hp.n_embd_gqa();
    m.tok_embd = ml.tensor(m.ctx, "token_embd.weight", {E, V});
    m.output_norm = ml.tensor(m.ctx, "output_norm.weight", {E});
    m.output = ml.tensor(m.ctx, "output.weight", {E, V}, false);
    if (!m.output) m.output = m.tok_embd;  // tied embeddings
    m.layers.resize(hp.n_layer);
    for (uint32_t il = 0; il < hp.n_layer; il++) {
        layer_weights &l = m.layers[il];
        const std::string p = "blk." + std::to_string(il) + ".";
        l.attn_norm = ml.tensor(m.ctx, p + "attn_norm.weight", {E});
        l.wq = ml.tensor(m.ctx, p + "attn_q.weight", {E, Q});
        l.wk = ml.tensor(m.ctx, p + "attn_k.weight", {E, KV});
        l.wv = ml.tensor(m.ctx, p + "attn_v.weight", {E, KV});
        if (qkv_bias) {
            l.bq = ml.tensor(m.ctx, p + "attn_q.bias", {Q});
            l.bk = ml.tensor(m.ctx, p + "attn_k.bias", {KV});
            l.bv = ml.tensor(m.ctx, p + "attn_v.bias", {KV});
        }
        l.wo = ml.tensor(m.ctx, p + "attn_output.weight", {Q, E});
        l.ffn_norm = ml.tensor(m.ctx, p + "ffn_norm.weight", {E});
        l.ffn_gate = ml.tensor(m.ctx, p + "ffn_gate.weight", {E, F});
        l.ffn_up = ml.tensor(m.ctx, p + "ffn_up.weight", {E, F});
        l.ffn_down = ml.tensor(m.ctx, p + "ffn_down.weight", {F, E});
    }
}

ggml_tensor *llama_like_graph(ggml_context *ctx, ggml_cgraph *gf, const model &m, kv_cache &kv,
                              const graph_inputs &in) {
    const hparams &hp = m.hp;
    const int n = in.n_tokens;
    ggml_tensor *x = ggml_get_rows(ctx, m.tok_embd, in.tokens);  // [n_embd, n]
    for (uint32_t il = 0; il < hp.n_layer; il++) {
        const layer_weights &l = build_layer_begin(ctx, in, m, (int)il, &x);
        ggml_tensor *cur = build_norm(ctx, x, l.attn_norm, nullptr, hp.norm_eps, true);
        ggml_tensor *q = ggml_reshape_3d(ctx, build_linear(ctx, l.wq, l.bq, cur), hp.head_dim, hp.n_head, n);
        ggml_tensor *k = ggml_reshape_3d(ctx, build_linear(ctx, l.wk, l.bk, cur), hp.head_dim, hp.n_head_kv, n);
        ggml_tensor *v = build_linear(ctx, l.wv, l.bv, cur);
        q = ggml_rope(ctx, q, graph_pos(ctx, in), hp.n_rot, hp.rope_mode, hp.rope_freq_base, hp.rope_freq_scale);
        k = ggml_rope(ctx, k, graph_pos(ctx, in), hp.n_rot, hp.rope_mode, hp.rope_freq_base, hp.rope_freq_scale);
        cur = build_attention(ctx, gf, hp, kv, in, (int)il, q, k, v);
        if (il == hp.n_layer - 1) {  // only the rows whose logits are wanted go on
            cur = build_select_outputs(ctx, in, cur);
            x = build_select_outputs(ctx, in, x);
        }
        x = ggml_add(ctx, x, ggml_mul_mat(ctx, l.wo, cur));
        cur = build_norm(ctx, x, l.ffn_norm, nullptr, hp.norm_eps, true);
        x = ggml_add(ctx, x, build_ffn(ctx, gf, in, m, (int)il, cur));
    }
    x = build_layers_end(ctx, in, x);
    x = build_norm(ctx, x, m.output_norm, nullptr, hp.norm_eps, true);
    return ggml_mul_mat(ctx, m.output, x);
}

static void llama_hparams(const model_loader &ml, hparams &hp) { llama_like_hparams(ml, hp, 1e-5f, GGML_ROPE_NORMAL); }
static void llama_tensors(model_loader &ml, model &m) { llama_like_tensors(ml, m, false); }

extern const arch_impl arch_llama = {"llama", llama_hparams, llama_tensors, llama_like_graph};

}  // namespace pinfer
