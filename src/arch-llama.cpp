// The llama architecture (also Mistral, SmolLM2, ReluLLaMA/ProSparse, Bamboo,
// Llama 3.x with its RoPE frequency factors) and the families that are the
// same pre-norm block with a few flags (the table below): qwen2 (q/k/v
// biases), qwen3 (QK-norm), gemma (GeGLU, embeddings scaled by sqrt(d); the
// converter folds Gemma's (1 + w) norm weights into w), gemma2 (soft-capped
// attention and output logits, post-attention/FFN norms, sliding window on
// every other layer), gemma3 (QK-norm, 5 windowed layers of 6 with their own
// RoPE base), phi3 (fused q/k/v and gate/up matrices, LongRoPE factors).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "llama-graph.h"
#include "llama-kv-cache.h"
#include "llama-model-loader.h"
#include "llama-model.h"
#include "llama-model-validate.h"
#include "arch-llama.h"

namespace pinfer {

namespace {

struct family_row {
    const char *name;
    llama_family f;
};

//  name      eps    rope             act             bias   qknorm post   embd   fused  swa base_swa unscaled 27B
const family_row k_families[] = {
    {"llama",  {1e-5f, GGML_ROPE_NORMAL, ffn_act::SILU, false, false, false, false, false, 0, 0.0f, false, 0}},
    {"qwen2",  {1e-6f, GGML_ROPE_NEOX,   ffn_act::SILU, true,  false, false, false, false, 0, 0.0f, false, 0}},
    {"qwen3",  {1e-6f, GGML_ROPE_NEOX,   ffn_act::SILU, false, true,  false, false, false, 0, 0.0f, false, 0}},
    {"gemma",  {1e-6f, GGML_ROPE_NEOX,   ffn_act::GELU, false, false, false, true,  false, 0, 0.0f, false, 0}},
    {"gemma2", {1e-6f, GGML_ROPE_NEOX,   ffn_act::GELU, false, false, true,  true,  false, 2, 0.0f, false, 46}},
    {"gemma3", {1e-6f, GGML_ROPE_NEOX,   ffn_act::GELU, false, true,  true,  true,  false, 6, 1e4f, true,  62}},
    {"phi3",   {1e-5f, GGML_ROPE_NEOX,   ffn_act::SILU, false, false, false, false, true,  0, 0.0f, false, 0}},
};

const llama_family &family_of(const std::string &arch) {
    for (const family_row &r : k_families)
        if (arch == r.name) return r.f;
    throw std::runtime_error("'" + arch + "' is not a llama-like architecture");
}

// YaRN as frequency factors: pair i's angle is divided by
// 1 / ((1 - m_i) / factor + m_i), m_i the extrapolation weight, 1 below the
// correction range (fast-rotating pairs keep their frequency) and 0 above it
// (slow ones are interpolated by the factor); the range comes from the pairs
// that turn beta_fast / beta_slow times over the original context.
std::vector<float> yarn_factors(int n_rot, float base, float factor, float n_orig, float beta_fast, float beta_slow) {
    auto corr_dim = [&](double rotations) {
        return n_rot * std::log(n_orig / (rotations * 2 * M_PI)) / (2 * std::log((double)base));
    };
    const double lo = std::max(0.0, std::floor(corr_dim(beta_fast)));
    double hi = std::min((double)n_rot - 1, std::ceil(corr_dim(beta_slow)));
    if (hi == lo) hi += 0.001;
    std::vector<float> f((size_t)n_rot / 2);
    for (int i = 0; i < n_rot / 2; i++) {
        const double ramp = std::clamp((i - lo) / (hi - lo), 0.0, 1.0);
        const double m = 1.0 - ramp;
        f[(size_t)i] = (float)(1.0 / ((1.0 - m) / factor + m));
    }
    return f;
}

}  // namespace

void llama_like_hparams(const model_loader &ml, hparams &hp) {
    const llama_family &fam = family_of(hp.arch);
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
    hp.norm_eps = ml.get_float_in(a + "attention.layer_norm_rms_epsilon", 0.0f, L::max_eps, fam.default_eps);
    hp.rope_freq_base = ml.get_float_in(a + "rope.freq_base", 0.0f, L::max_rope_base, 10000.0f);
    hp.rope_mode = fam.rope_mode;
    hp.act = fam.act;

    const std::string scaling = ml.get_str(a + "rope.scaling.type", "none");
    const float factor = ml.get_float_in(a + "rope.scaling.factor", 0.0f, L::max_rope_factor, 1.0f);
    hp.n_ctx_orig = (uint32_t)ml.get_int_in(a + "rope.scaling.original_context_length", 0, L::max_ctx, hp.n_ctx_train);
    hp.rope_attn_factor = ml.get_float_in(a + "rope.scaling.attn_factor", 0.0f, L::max_rope_factor, 1.0f);
    if (scaling == "linear") {
        hp.rope_freq_scale = 1.0f / factor;
    } else if (scaling == "yarn") {
        // the factors themselves are made with the tensors (llama_like_tensors)
        const float mscale = factor > 1.0f ? 1.0f + 0.1f * std::log(factor) : 1.0f;
        hp.rope_attn_factor *= mscale * ml.get_float_in(a + "rope.scaling.yarn_attn_factor", 0.0f, L::max_rope_factor, 1.0f);
    } else if (scaling != "none" && scaling != "longrope") {  // llama3 and LongRoPE: factors in the file
        throw std::runtime_error("unsupported rope scaling type '" + scaling + "' in " + a + "rope.scaling.type "
                                 "(supported: none, linear, yarn, and frequency-factor tensors)");
    }

    hp.n_swa = (uint32_t)ml.get_int_in(a + "attention.sliding_window", 0, L::max_ctx, 0);
    hp.swa_pattern = (uint32_t)ml.get_int_in(a + "attention.sliding_window_pattern", 0, L::max_layers, fam.swa_pattern);
    hp.rope_freq_base_swa = ml.get_float_in(a + "rope.freq_base_swa", 0.0f, L::max_rope_base,
                                            fam.rope_base_swa > 0 ? fam.rope_base_swa : hp.rope_freq_base);
    hp.rope_freq_scale_swa = fam.swa_rope_unscaled ? 1.0f : hp.rope_freq_scale;
    const bool big = fam.n_layer_embd_scaled && hp.n_layer == fam.n_layer_embd_scaled;
    hp.attn_scale = ml.get_float_in(a + "attention.scale", 0.0f, 1e6f,
                                    big ? 1.0f / std::sqrt((float)hp.n_embd / (float)hp.n_head) : 0.0f);
    hp.attn_softcap = ml.get_float_in(a + "attn_logit_softcapping", 0.0f, 1e6f, 0.0f);
    hp.final_softcap = ml.get_float_in(a + "final_logit_softcapping", 0.0f, 1e6f, 0.0f);
    hp.embd_scale = fam.embd_scale ? std::sqrt((float)hp.n_embd) : 0.0f;
    hp.n_expert = (uint32_t)ml.get_int_in(a + "expert_count", 0, L::max_experts, 0);
    if (hp.n_expert > 0)
        hp.n_expert_used = (uint32_t)ml.get_int_in(a + "expert_used_count", 1, hp.n_expert);
}

void llama_like_tensors(model_loader &ml, model &m) {
    const hparams &hp = m.hp;
    const llama_family &fam = family_of(hp.arch);
    const int64_t E = hp.n_embd, V = hp.n_vocab, F = hp.n_ff, Q = (int64_t)hp.head_dim * hp.n_head,
                  KV = hp.n_embd_gqa(), HD = hp.head_dim, R = hp.n_rot / 2;
    m.tok_embd = ml.tensor(m.ctx, "token_embd.weight", {E, V});
    m.output_norm = ml.tensor(m.ctx, "output_norm.weight", {E});
    m.output = ml.tensor(m.ctx, "output.weight", {E, V}, false);
    if (!m.output) m.output = m.tok_embd;  // tied embeddings
    const std::string scaling = ml.get_str(hp.arch + ".rope.scaling.type", "none");
    if (scaling == "yarn" && !ml.has_tensor("rope_freqs.weight")) {
        const std::string a = hp.arch + ".rope.scaling.";
        using L = hparam_limits;
        const float factor = ml.get_float_in(a + "factor", 0.0f, L::max_rope_factor, 1.0f);
        const float fast = ml.get_float_in(a + "yarn_beta_fast", 0.0f, 1e6f, 32.0f);
        const float slow = ml.get_float_in(a + "yarn_beta_slow", 0.0f, 1e6f, 1.0f);
        if (hp.n_ctx_orig == 0) throw std::runtime_error("YaRN needs " + a + "original_context_length");
        std::vector<float> f = yarn_factors((int)hp.n_rot, hp.rope_freq_base, factor, (float)hp.n_ctx_orig, fast, slow);
        std::vector<uint8_t> bytes(f.size() * sizeof(float));
        memcpy(bytes.data(), f.data(), bytes.size());
        ml.add_override("rope_freqs.weight", GGML_TYPE_F32, {R}, std::move(bytes));
    }
    m.rope_freqs = ml.tensor(m.ctx, "rope_freqs.weight", {R}, false);
    m.rope_short = ml.tensor(m.ctx, "rope_factors_short.weight", {R}, false);
    if (m.rope_short) m.rope_long = ml.tensor(m.ctx, "rope_factors_long.weight", {R});
    m.layers.resize(hp.n_layer);
    for (uint32_t il = 0; il < hp.n_layer; il++) {
        layer_weights &l = m.layers[il];
        const std::string p = "blk." + std::to_string(il) + ".";
        l.attn_norm = ml.tensor(m.ctx, p + "attn_norm.weight", {E});
        if (fam.fused) {  // row ranges of the fused matrices, so the graph stays the llama one
            ggml_tensor *qkv = ml.tensor(m.ctx, p + "attn_qkv.weight", {E, Q + 2 * KV});
            l.wq = model_loader::rows(m.ctx, qkv, 0, Q, 0);
            l.wk = model_loader::rows(m.ctx, qkv, Q, KV, 1);
            l.wv = model_loader::rows(m.ctx, qkv, Q + KV, KV, 2);
        } else {
            l.wq = ml.tensor(m.ctx, p + "attn_q.weight", {E, Q});
            l.wk = ml.tensor(m.ctx, p + "attn_k.weight", {E, KV});
            l.wv = ml.tensor(m.ctx, p + "attn_v.weight", {E, KV});
        }
        if (fam.qkv_bias) {
            l.bq = ml.tensor(m.ctx, p + "attn_q.bias", {Q});
            l.bk = ml.tensor(m.ctx, p + "attn_k.bias", {KV});
            l.bv = ml.tensor(m.ctx, p + "attn_v.bias", {KV});
        }
        if (fam.qk_norm) {
            l.attn_q_norm = ml.tensor(m.ctx, p + "attn_q_norm.weight", {HD});
            l.attn_k_norm = ml.tensor(m.ctx, p + "attn_k_norm.weight", {HD});
        }
        l.wo = ml.tensor(m.ctx, p + "attn_output.weight", {Q, E});
        if (fam.post_norms) {
            l.attn_post_norm = ml.tensor(m.ctx, p + "post_attention_norm.weight", {E});
            l.ffn_post_norm = ml.tensor(m.ctx, p + "post_ffw_norm.weight", {E});
        }
        l.ffn_norm = ml.tensor(m.ctx, p + "ffn_norm.weight", {E});
        if (hp.n_expert > 0) {  // a mixture of experts (Mixtral)
            const int64_t X = hp.n_expert;
            l.ffn_gate_inp = ml.tensor(m.ctx, p + "ffn_gate_inp.weight", {E, X});
            l.ffn_gate_exps = ml.tensor(m.ctx, p + "ffn_gate_exps.weight", {E, F, X});
            l.ffn_up_exps = ml.tensor(m.ctx, p + "ffn_up_exps.weight", {E, F, X});
            l.ffn_down_exps = ml.tensor(m.ctx, p + "ffn_down_exps.weight", {F, E, X});
        } else if (fam.fused) {
            ggml_tensor *gate_up = ml.tensor(m.ctx, p + "ffn_up.weight", {E, 2 * F});
            l.ffn_gate = model_loader::rows(m.ctx, gate_up, 0, F, 0);
            l.ffn_up = model_loader::rows(m.ctx, gate_up, F, F, 1);
        } else {
            l.ffn_gate = ml.tensor(m.ctx, p + "ffn_gate.weight", {E, F});
            l.ffn_up = ml.tensor(m.ctx, p + "ffn_up.weight", {E, F});
        }
        if (hp.n_expert == 0) l.ffn_down = ml.tensor(m.ctx, p + "ffn_down.weight", {F, E});
    }
}

ggml_tensor *llama_like_graph(ggml_context *ctx, ggml_cgraph *gf, const model &m, kv_cache &kv,
                              const graph_inputs &in) {
    const hparams &hp = m.hp;
    const int n = in.n_tokens;
    ggml_tensor *x = ggml_get_rows(ctx, m.tok_embd, in.tokens);  // [n_embd, n]
    if (hp.embd_scale > 0) x = ggml_scale(ctx, x, hp.embd_scale);
    for (uint32_t il = 0; il < hp.n_layer; il++) {
        const layer_weights &l = build_layer_begin(ctx, in, m, (int)il, &x);
        ggml_tensor *cur = build_norm(ctx, x, l.attn_norm, nullptr, hp.norm_eps, true);
        ggml_tensor *q = ggml_reshape_3d(ctx, build_linear(ctx, l.wq, l.bq, cur), hp.head_dim, hp.n_head, n);
        ggml_tensor *k = ggml_reshape_3d(ctx, build_linear(ctx, l.wk, l.bk, cur), hp.head_dim, hp.n_head_kv, n);
        ggml_tensor *v = build_linear(ctx, l.wv, l.bv, cur);
        if (l.attn_q_norm) q = build_norm(ctx, q, l.attn_q_norm, nullptr, hp.norm_eps, true);
        if (l.attn_k_norm) k = build_norm(ctx, k, l.attn_k_norm, nullptr, hp.norm_eps, true);
        q = build_rope(ctx, in, m, kv, (int)il, q);
        k = build_rope(ctx, in, m, kv, (int)il, k);
        cur = build_attention(ctx, gf, hp, kv, in, (int)il, q, k, v);
        if (il == hp.n_layer - 1) {  // only the rows whose logits are wanted go on
            cur = build_select_outputs(ctx, in, cur);
            x = build_select_outputs(ctx, in, x);
        }
        cur = ggml_mul_mat(ctx, l.wo, cur);
        if (l.attn_post_norm) cur = build_norm(ctx, cur, l.attn_post_norm, nullptr, hp.norm_eps, true);
        x = ggml_add(ctx, x, cur);
        cur = build_norm(ctx, x, l.ffn_norm, nullptr, hp.norm_eps, true);
        cur = build_ffn(ctx, gf, in, m, (int)il, cur);
        if (l.ffn_post_norm) cur = build_norm(ctx, cur, l.ffn_post_norm, nullptr, hp.norm_eps, true);
        x = ggml_add(ctx, x, cur);
    }
    const model_head h = build_head_begin(ctx, in, m, &x);
    x = build_norm(ctx, x, h.output_norm, nullptr, hp.norm_eps, true);
    return build_layers_end(ctx, in, build_softcap(ctx, ggml_mul_mat(ctx, h.output, x), hp.final_softcap));
}

namespace {

// One arch_impl per family row: the functions are shared, the flags differ.
struct llama_archs {
    std::vector<arch_impl> impls;
    llama_archs() {
        for (const family_row &r : k_families)
            impls.push_back({r.name, llama_like_hparams, llama_like_tensors, llama_like_graph});
    }
};

const llama_archs &archs() {
    static const llama_archs a;
    return a;
}

}  // namespace

const arch_impl *find_llama_like(const std::string &name) {
    for (const arch_impl &a : archs().impls)
        if (name == a.name) return &a;
    return nullptr;
}

std::vector<std::string> llama_like_names() {
    std::vector<std::string> out;
    for (const family_row &r : k_families) out.push_back(r.name);
    return out;
}

}  // namespace pinfer
