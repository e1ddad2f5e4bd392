// The llama block, shared by the architectures that reuse it (qwen2).
#pragma once

#include "llama-arch.h"

namespace pinfer {

// Hyperparameters from "<arch>.*" metadata.
void llama_like_hparams(const model_loader &ml, hparams &hp, float default_eps, int rope_mode);
// Weights; qkv_bias: the q/k/v projections carry biases (qwen2).
void llama_like_tensors(model_loader &ml, model &m, bool qkv_bias);
ggml_tensor *llama_like_graph(ggml_context *ctx, ggml_cgraph *gf, const model &m, kv_cache &kv,
                              const graph_inputs &in);

}  // namespace pinfer
