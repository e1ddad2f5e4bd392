// The llama block and the families that reuse it with a flag or two
// (qwen2, qwen3, gemma, gemma2, gemma3, phi3): one table, arch-llama.cpp.
#pragma once

#include "llama-arch.h"

namespace pinfer {

// What a llama-like family changes in the block; every field is a fact of
// the family (llama.cpp's loader for the same architecture name agrees).
struct llama_family {
    float default_eps;      // attention.layer_norm_rms_epsilon when absent
    int rope_mode;          // GGML_ROPE_NORMAL (llama: q/k rows permuted by the converter) or NEOX
    ffn_act act;            // gated FFN activation (pinfer.ffn_act may override)
    bool qkv_bias;          // q/k/v projections carry biases (qwen2)
    bool qk_norm;           // per-head RMS norm of q and k before RoPE (qwen3, gemma3)
    bool post_norms;        // norms of the attention and FFN outputs before the residual (gemma2, gemma3)
    bool embd_scale;        // token embeddings times sqrt(n_embd) (gemma)
    bool fused;             // attn_qkv = [q; k; v] and ffn_up = [gate; up] (phi3)
    uint32_t swa_pattern;   // windowed layers when the file has a sliding window (0: all; see hparams)
    float rope_base_swa;    // windowed layers' RoPE base when rope.freq_base_swa is absent (0: the global base)
    bool swa_rope_unscaled; // windowed layers rope without the global layers' scaling (gemma3)
    // llama.cpp's files carry no attention.scale: its 27B Gemma (this many
    // layers) scales q.k by 1/sqrt(n_embd / n_head), the others by 1/sqrt(head_dim)
    uint32_t n_layer_embd_scaled;
};

void llama_like_hparams(const model_loader &ml, hparams &hp);
void llama_like_tensors(model_loader &ml, model &m);
ggml_tensor *llama_like_graph(ggml_context *ctx, ggml_cgraph *gf, const model &m, kv_cache &kv,
                              const graph_inputs &in);

}  // namespace pinfer
