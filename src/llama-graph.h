// Building blocks shared by the architectures' graph builders.
#pragma once

#include "ggml.h"
#include "llama-arch.h"
#include "llama-hparams.h"

namespace pinfer {

struct hybrid_plan;
class device_weights;
struct layer_weights;
struct model_head;

// The device a context's plan puts layers on (shared/HYBRID.md).
struct graph_device {
    struct ggml_backend *be;
    const hybrid_plan *plan;
    const device_weights *w;
    int stream_min = 0;  // batches of at least this many tokens stream the cold rows to the device (0: never)
};

// Starts layer il: the context builds for the backend that runs the layer
// from here on, *x moves there if it lives on the other side, and the
// returned weights are that side's copies. Every architecture's layer loop
// begins with it; build_layers_end moves the hidden state back for the output.
const layer_weights &build_layer_begin(ggml_context *ctx, const graph_inputs &in, const model &m, int il, ggml_tensor **x);
ggml_tensor *build_layers_end(ggml_context *ctx, const graph_inputs &in, ggml_tensor *x);
// Starts the output head: *x moves to the side the plan runs the head on, and
// the returned weights are that side's; the logits come back to the host
// through build_layers_end.
model_head build_head_begin(ggml_context *ctx, const graph_inputs &in, const model &m, ggml_tensor **x);
// in.pos / in.kq_mask (swa: a windowed layer's) on the side the context builds for.
ggml_tensor *graph_pos(ggml_context *ctx, const graph_inputs &in);
ggml_tensor *graph_kq_mask(ggml_context *ctx, const graph_inputs &in, bool swa = false);

// RoPE of x [head_dim, n_heads, n] for layer il: the layer's base and scale
// (windowed layers have their own), the model's frequency factors (LongRoPE:
// the long ones when the cache is longer than the original context).
ggml_tensor *build_rope(ggml_context *ctx, const graph_inputs &in, const model &m, const kv_cache &kv, int il, ggml_tensor *x);

// c * tanh(x / c): the soft-capping of Gemma 2 (c = 0: x).
ggml_tensor *build_softcap(ggml_context *ctx, ggml_tensor *x, float c);

// norm(x) * w (+ b): RMS norm when rms, else layer norm.
ggml_tensor *build_norm(ggml_context *ctx, ggml_tensor *x, ggml_tensor *w, ggml_tensor *b, float eps, bool rms);

// w x (+ b)
ggml_tensor *build_linear(ggml_context *ctx, ggml_tensor *w, ggml_tensor *b, ggml_tensor *x);

// Causal self-attention of the batch over the cache. q [hd, n_head, n],
// k/v [hd*n_head_kv, n] (k already roped): stores k/v in the cache and
// returns the attention output [n_head*hd, n] (before the output projection).
// Layer il's scale, logit soft-capping and sliding window come from hp.
ggml_tensor *build_attention(ggml_context *ctx, ggml_cgraph *gf, const hparams &hp, kv_cache &kv,
                             const graph_inputs &in, int il, ggml_tensor *q, ggml_tensor *k, ggml_tensor *v);

// The FFN of layer il on x [d, T]: down(act(gate x) * up x), or down(act(up x))
// for layers without a gate; dense or neuron-sparse per in.ffn (llama-sparse-ffn.h).
ggml_tensor *build_ffn(ggml_context *ctx, ggml_cgraph *gf, const graph_inputs &in, const model &m, int il, ggml_tensor *x);

// Keep only the columns of x [n_embd, n_tokens] whose logits are wanted:
// the last in.n_outputs (a view), or the rows in.out_ids lists.
ggml_tensor *build_select_outputs(ggml_context *ctx, const graph_inputs &in, ggml_tensor *x);

}  // namespace pinfer
