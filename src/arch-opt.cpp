// The opt architecture (Meta's OPT 125M..175B): learned absolute position
// embeddings, LayerNorm with bias before each sublayer (or after each
// residual add: OPT-350m, opt.layer_norm_before = false), biases on the q/k/v
// and output projections and on the FFN, an ungated ReLU FFN (fc1 -> ffn_up,
// fc2 -> ffn_down), no RoPE, attention scaled by 1/sqrt(head_dim), output
// tied to the token embeddings unless the file has output.weight.
//
// llama.cpp has no OPT, so these are pinfer's names (python/pinfer/convert.py
// writes them; docs/opt.md lists them): llama.cpp's names where the
// concept exists (token_embd, position_embd, attn_q/k/v/output, attn_norm,
// ffn_norm, ffn_up/down, output_norm, output; biases as .bias), plus
// proj_in / proj_out for the projections between the embedding width
// (opt.embedding_projection_length, when not n_embd) and n_embd. The
// converter drops the first 2 rows of HF's position table (OPT reads row
// p + 2 for position p), so row p of position_embd is position p.
#include "llama-graph.h"
#include "llama-kv-cache.h"
#include "llama-model-loader.h"
#include "llama-model.h"
#include "llama-model-validate.h"

namespace pinfer {

static void opt_hparams(const model_loader &ml, hparams &hp) {
    const std::string a = hp.arch + ".";
    using L = hparam_limits;
    hp.n_ctx_train = (uint32_t)ml.get_int_in(a + "context_length", 1, L::max_ctx);
    hp.n_pos_max = hp.n_ctx_train;  // the rows of position_embd
    hp.n_embd = (uint32_t)ml.get_int_in(a + "embedding_length", 1, L::max_embd);
    hp.n_layer = (uint32_t)ml.get_int_in(a + "block_count", 1, L::max_layers);
    hp.n_ff = (uint32_t)ml.get_int_in(a + "feed_forward_length", 1, L::max_ff);
    hp.n_head = (uint32_t)ml.get_int_in(a + "attention.head_count", 1, L::max_heads);
    hp.n_head_kv = hp.n_head;
    hp.head_dim = hp.n_embd / hp.n_head;  // validate_hparams checks the division
    hp.n_rot = 0;
    hp.norm_eps = ml.get_float_in(a + "attention.layer_norm_epsilon", 0.0f, L::max_eps, 1e-5f);
    hp.post_norm = !ml.get_bool(a + "layer_norm_before", true);
    hp.act = ffn_act::RELU;  // pinfer.ffn_act may override
}

static void opt_tensors(model_loader &ml, model &m) {
    const hparams &hp = m.hp;
    const int64_t E = hp.n_embd, V = hp.n_vocab, F = hp.n_ff;
    using L = hparam_limits;
    const int64_t P = ml.get_int_in(hp.arch + ".embedding_projection_length", 1, L::max_embd, E);
    m.tok_embd = ml.tensor(m.ctx, "token_embd.weight", {P, V});
    m.pos_embd = ml.tensor(m.ctx, "position_embd.weight", {E, (int64_t)hp.n_ctx_train});
    if (P != E) {
        m.proj_in = ml.tensor(m.ctx, "proj_in.weight", {P, E});
        m.proj_out = ml.tensor(m.ctx, "proj_out.weight", {E, P});
    }
    // post-LN OPT (and checkpoints with _remove_final_layer_norm) has no final norm
    m.output_norm = ml.tensor(m.ctx, "output_norm.weight", {E}, false);
    if (m.output_norm) m.output_norm_b = ml.tensor(m.ctx, "output_norm.bias", {E});
    m.output = ml.tensor(m.ctx, "output.weight", {P, V}, false);
    if (!m.output) m.output = m.tok_embd;
    m.layers.resize(hp.n_layer);
    for (uint32_t il = 0; il < hp.n_layer; il++) {
        layer_weights &l = m.layers[il];
        const std::string p = "blk." + std::to_string(il) + ".";
        l.attn_norm = ml.tensor(m.ctx, p + "attn_norm.weight", {E});
        l.attn_norm_b = ml.tensor(m.ctx, p + "attn_norm.bias", {E});
        l.wq = ml.tensor(m.ctx, p + "attn_q.weight", {E, E});
        l.wk = ml.tensor(m.ctx, p + "attn_k.weight", {E, E});
        l.wv = ml.tensor(m.ctx, p + "attn_v.weight", {E, E});
        l.wo = ml.tensor(m.ctx, p + "attn_output.weight", {E, E});
        l.bq = ml.tensor(m.ctx, p + "attn_q.bias", {E});
        l.bk = ml.tensor(m.ctx, p + "attn_k.bias", {E});
        l.bv = ml.tensor(m.ctx, p + "attn_v.bias", {E});
        l.bo = ml.tensor(m.ctx, p + "attn_output.bias", {E});
        l.ffn_norm = ml.tensor(m.ctx, p + "ffn_norm.weight", {E});
        l.ffn_norm_b = ml.tensor(m.ctx, p + "ffn_norm.bias", {E});
        l.ffn_up = ml.tensor(m.ctx, p + "ffn_up.weight", {E, F});
        l.ffn_up_b = ml.tensor(m.ctx, p + "ffn_up.bias", {F});
        l.ffn_down = ml.tensor(m.ctx, p + "ffn_down.weight", {F, E});
        l.ffn_down_b = ml.tensor(m.ctx, p + "ffn_down.bias", {E});
    }
}

static ggml_tensor *opt_graph(ggml_context *ctx, ggml_cgraph *gf, const model &m, kv_cache &kv, const graph_inputs &in) {
    const hparams &hp = m.hp;
    const int n = in.n_tokens;
    const bool pre = !hp.post_norm;
    auto norm = [&](ggml_tensor *x, ggml_tensor *w, ggml_tensor *b) { return build_norm(ctx, x, w, b, hp.norm_eps, false); };
    ggml_tensor *x = ggml_get_rows(ctx, m.tok_embd, in.tokens);  // [P, n]
    if (m.proj_in) x = ggml_mul_mat(ctx, m.proj_in, x);
    x = ggml_add(ctx, x, ggml_get_rows(ctx, m.pos_embd, in.pos));
    for (uint32_t il = 0; il < hp.n_layer; il++) {
        const layer_weights &l = build_layer_begin(ctx, in, m, (int)il, &x);
        ggml_tensor *cur = pre ? norm(x, l.attn_norm, l.attn_norm_b) : x;
        ggml_tensor *q = ggml_reshape_3d(ctx, build_linear(ctx, l.wq, l.bq, cur), hp.head_dim, hp.n_head, n);
        ggml_tensor *k = build_linear(ctx, l.wk, l.bk, cur);
        ggml_tensor *v = build_linear(ctx, l.wv, l.bv, cur);
        cur = build_attention(ctx, gf, hp, kv, in, (int)il, q, k, v);
        if (il == hp.n_layer - 1) {  // only the rows whose logits are wanted go on
            cur = build_select_outputs(ctx, in, cur);
            x = build_select_outputs(ctx, in, x);
        }
        x = ggml_add(ctx, x, build_linear(ctx, l.wo, l.bo, cur));
        if (!pre) x = norm(x, l.attn_norm, l.attn_norm_b);
        cur = build_ffn(ctx, gf, in, m, (int)il, pre ? norm(x, l.ffn_norm, l.ffn_norm_b) : x);
        x = ggml_add(ctx, x, cur);
        if (!pre) x = norm(x, l.ffn_norm, l.ffn_norm_b);
    }
    const model_head h = build_head_begin(ctx, in, m, &x);
    if (h.output_norm) x = norm(x, h.output_norm, h.output_norm_b);
    if (h.proj_out) x = ggml_mul_mat(ctx, h.proj_out, x);
    return build_layers_end(ctx, in, ggml_mul_mat(ctx, h.output, x));
}

extern const arch_impl arch_opt = {"opt", opt_hparams, opt_tensors, opt_graph};

}  // namespace pinfer
