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
    ffn_act act = ffn_act::SILU;

    uint32_t n_embd_gqa() const { return head_dim * n_head_kv; }
};

}  // namespace pinfer
