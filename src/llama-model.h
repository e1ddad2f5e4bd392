// A loaded model: hyperparameters, vocabulary, and weight tensors that point
// into the memory-mapped GGUF file.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ggml.h"
#include "llama-arch.h"
#include "llama-hparams.h"

namespace pinfer {

class model_loader;
class llama_vocab;
class weight_pages;

struct layer_weights {
    ggml_tensor *attn_norm = nullptr, *attn_norm_b = nullptr;
    ggml_tensor *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr;
    ggml_tensor *wqkv = nullptr;  // fused q/k/v rows [q; k; v] (falcon)
    ggml_tensor *bq = nullptr, *bk = nullptr, *bv = nullptr, *bo = nullptr;
    ggml_tensor *attn_q_norm = nullptr, *attn_k_norm = nullptr;  // per-head RMS norms of q and k (qwen3, gemma3)
    ggml_tensor *attn_post_norm = nullptr, *ffn_post_norm = nullptr;  // norms of the attention and FFN outputs (gemma2/3)
    ggml_tensor *ffn_norm = nullptr, *ffn_norm_b = nullptr;
    ggml_tensor *ffn_gate = nullptr, *ffn_up = nullptr, *ffn_down = nullptr;
    // Mixture of experts (llama.cpp's names): the router [d, n_expert] and the
    // experts' stacked matrices, gate/up [d, n_ff, n_expert], down [n_ff, d, n_expert];
    // a layer has these instead of ffn_gate/up/down.
    ggml_tensor *ffn_gate_inp = nullptr;
    ggml_tensor *ffn_gate_exps = nullptr, *ffn_up_exps = nullptr, *ffn_down_exps = nullptr;
    // FFN biases (opt): up's per neuron F32 [n] (added before the activation,
    // so the ReLU selection sees it), down's per output F32 [d] (added once
    // after the down product); every FFN mode honours them
    ggml_tensor *ffn_up_b = nullptr, *ffn_down_b = nullptr;
    // Neuron-aware extras (extended GGUF, docs/extended-gguf.md); all optional.
    ggml_tensor *fc1 = nullptr;         // predictor A: ne [d, r_l]
    ggml_tensor *fc2 = nullptr;         // predictor B: ne [r_l, n]
    ggml_tensor *ffn_down_t = nullptr;  // ne [d, n]: one contiguous row per neuron
    ggml_tensor *ffn_freq = nullptr;    // F32 [n]: profiled activation frequency
};

// A layer's neuron bundle for predictor mode (model::prepare_sparse_weights):
// w [d, rows * n] holds per neuron its gate and up rows (rows = 2) and, where
// the file has ffn_down_t of the same type, its down_t row (rows = 3); gate,
// up and down_t are strided views of w (nb[1] = rows row sizes) for the ops
// that read them one at a time.
struct ffn_bundle {
    ggml_tensor *w = nullptr;
    int rows = 0;
    ggml_tensor *gate = nullptr, *up = nullptr, *down_t = nullptr;
};

// One entry of the placement section: per-layer GPU prefix lengths for a VRAM budget.
struct placement {
    uint64_t budget_bytes = 0;
    std::string solver;
    double objective = 0;
    std::vector<int32_t> k;  // neurons [0, k[l]) of layer l go to the GPU
};

// Model-level sparse metadata (src/llama-sparse-meta.cpp).
struct sparse_meta {
    bool powerinfer = false;      // PWRI magic or powerinfer.* keys
    bool has_predictors = false;  // fc1/fc2 in every layer
    bool has_down_t = false;
    bool has_freq = false;
    bool hot_first = false;       // pinfer.neuron_order = "hot-first"
    float threshold = 0.0f;       // predictor logit threshold
    std::vector<float> act_thresholds;  // per layer (SwiGLU magnitude mode); empty if absent
    std::string mode_hint;
    std::vector<placement> placements;
    // From a PowerInfer .gpuidx file: the GPU neuron ids of each layer
    // (ascending); gpuidx_prefix when every set is a prefix [0, k).
    std::string gpuidx_path;
    std::vector<std::vector<int32_t>> gpu_neurons;
    bool gpuidx_prefix = false;
};

// The output head: final norm, projection (opt-350m) and output matrix; a
// plan may put a copy on the device (device_weights::head).
struct model_head {
    ggml_tensor *output_norm = nullptr, *output_norm_b = nullptr, *proj_out = nullptr, *output = nullptr;
};

struct model {
    hparams hp;
    const arch_impl *arch = nullptr;
    std::unique_ptr<model_loader> loader;  // owns the mapping the weights point into
    std::unique_ptr<llama_vocab> vocab;
    ggml_context *ctx = nullptr;            // tensor headers only
    ggml_tensor *tok_embd = nullptr;
    ggml_tensor *output_norm = nullptr, *output_norm_b = nullptr;
    ggml_tensor *output = nullptr;          // == tok_embd when tied
    // learned absolute positions (opt): row p is position p's embedding
    ggml_tensor *pos_embd = nullptr;
    // projections between the embedding width and n_embd (opt-350m); nullptr when equal
    ggml_tensor *proj_in = nullptr, *proj_out = nullptr;
    // RoPE frequency factors F32 [n_rot/2] (llama3 and YaRN: rope_freqs;
    // LongRoPE: short and long); nullptr where the model has none
    ggml_tensor *rope_freqs = nullptr, *rope_short = nullptr, *rope_long = nullptr;
    std::vector<layer_weights> layers;
    sparse_meta sparse;
    model_head head() const { return {output_norm, output_norm_b, proj_out, output}; }
    std::string desc;
    std::string chat_template;
    uint64_t n_params = 0;
    uint64_t n_bytes = 0;
    double t_load_ms = 0;

    // Prepares the weights the sparse FFN operators read, each part once per
    // model (src/llama-weight-pages.h says why): ffn_down, ffn_down_t and the
    // predictors are copied into memory backed by 2 MiB pages; with
    // separate_gate_up ffn_gate and ffn_up too (exact and threshold modes read
    // up by rows and gate densely); with bundle a copy of each layer's gate, up
    // (and down_t) as one neuron bundle (predictor mode: an active neuron is
    // one contiguous read). Returns the per-layer bundles (empty without
    // bundle; w = nullptr where gate and up differ in type). The tensors'
    // bytes stay identical, so contexts already running are unaffected.
    std::vector<ffn_bundle> prepare_sparse_weights(bool separate_gate_up, bool bundle) const;
    size_t ffn_page_bytes(size_t *huge = nullptr) const;  // 0 until prepared

    model();
    ~model();

private:
    mutable std::mutex pages_mu_;
    mutable std::unique_ptr<weight_pages> pages_common_, pages_gate_up_, pages_bundle_;
    mutable ggml_context *bundle_ctx_ = nullptr;  // headers of the bundles
    mutable std::vector<ffn_bundle> bundles_;
};

// Loads a GGUF file; throws std::runtime_error naming the problem.
std::unique_ptr<model> load_model(const std::string &path);

}  // namespace pinfer
