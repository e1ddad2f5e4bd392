// Building blocks shared by the architectures' graph builders.
#pragma once

#include "ggml.h"
#include "llama-arch.h"
#include "llama-hparams.h"

namespace pinfer {

// norm(x) * w (+ b): RMS norm when rms, else layer norm.
ggml_tensor *build_norm(ggml_context *ctx, ggml_tensor *x, ggml_tensor *w, ggml_tensor *b, float eps, bool rms);

// w x (+ b)
ggml_tensor *build_linear(ggml_context *ctx, ggml_tensor *w, ggml_tensor *b, ggml_tensor *x);

// Causal self-attention of the batch over the cache. q [hd, n_head, n],
// k/v [hd*n_head_kv, n] (k already roped): stores k/v in the cache and
// returns the attention output [n_head*hd, n] (before the output projection).
ggml_tensor *build_attention(ggml_context *ctx, ggml_cgraph *gf, const hparams &hp, kv_cache &kv,
                             const graph_inputs &in, int il, ggml_tensor *q, ggml_tensor *k, ggml_tensor *v);

// The FFN of layer il on x [d, T]: down(act(gate x) * up x), or down(act(up x))
// for layers without a gate; dense or neuron-sparse per in.ffn (llama-sparse-ffn.h).
ggml_tensor *build_ffn(ggml_context *ctx, const graph_inputs &in, const model &m, int il, ggml_tensor *x);

// Keep only the last n_outputs columns of x [n_embd, n_tokens].
ggml_tensor *build_select_outputs(ggml_context *ctx, ggml_tensor *x, int n_outputs);

}  // namespace pinfer
