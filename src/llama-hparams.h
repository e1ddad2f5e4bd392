// Hyperparameters shared by the architectures (read from GGUF metadata).
#pragma once

#include <cstdint>
#include <string>

namespace pinfer {

// Gated FFN activation: out = down(act(gate(x)) * up(x)); RELU_BOTH (Bamboo)
// also applies ReLU to up(x). UP_ONLY FFNs (falcon) have no gate: down(act(up(x))).
enum class ffn_act { SILU, GELU, RELU, RELU_BOTH };

const char *ffn_act_name(ffn_act a);
bool ffn_act_from_name(const std::string &name, ffn_act *out);

struct hparams {
    std::string arch;
    uint32_t n_vocab = 0;
    uint32_t n_ctx_train = 0;
    uint32_t n_embd = 0;
    uint32_t n_layer = 0;
    uint32_t n_ff = 0;
    uint32_t n_head = 0;
    uint32_t n_head_kv = 0;
    uint32_t n_rot = 0;          // rotated dims per head
    uint32_t head_dim = 0;
    float norm_eps = 1e-5f;      // RMS or layer norm epsilon
    float rope_freq_base = 10000.0f;
    float rope_freq_scale = 1.0f;
    int rope_mode = 0;           // GGML_ROPE_NORMAL / GGML_ROPE_NEOX
    float rope_attn_factor = 1.0f;  // cos/sin magnitude (YaRN, LongRoPE)
    uint32_t n_ctx_orig = 0;     // LongRoPE: contexts longer than this use the long factors
    ffn_act act = ffn_act::SILU;
    // Sliding-window attention: windowed layers see the last n_swa positions
    // (a cell is masked when token_pos - cell_pos >= n_swa). Layer il is
    // windowed when swa_pattern == 0 (all layers) or il % swa_pattern <
    // swa_pattern - 1 (Gemma 2: every other layer, Gemma 3: 5 of 6);
    // windowed layers rope with their own base and scale.
    uint32_t n_swa = 0;
    uint32_t swa_pattern = 0;
    float rope_freq_base_swa = 10000.0f;
    float rope_freq_scale_swa = 1.0f;
    float attn_scale = 0.0f;     // q.k scale; 0: 1/sqrt(head_dim)
    float attn_softcap = 0.0f;   // attention logits become c tanh(x / c); 0: off
    float final_softcap = 0.0f;  // the same for the output logits
    float embd_scale = 0.0f;     // token embeddings multiplied by it; 0: off
    // Mixture of experts (Mixtral): n_expert FFNs per layer, each token runs
    // the n_expert_used its router ranks highest (0: a dense FFN).
    uint32_t n_expert = 0;
    uint32_t n_expert_used = 0;
    bool post_norm = false;      // LayerNorm after each residual add, not before the sublayer (opt-350m)
    uint32_t n_pos_max = 0;      // learned positions: a position must be below it; 0: unbounded (RoPE)

    uint32_t n_embd_gqa() const { return head_dim * n_head_kv; }
    bool is_swa(uint32_t il) const {
        return n_swa > 0 && (swa_pattern == 0 || il % swa_pattern < swa_pattern - 1);
    }
    uint32_t n_swa_layers() const {
        uint32_t c = 0;
        for (uint32_t il = 0; il < n_layer; il++) c += is_swa(il);
        return c;
    }
};

}  // namespace pinfer
