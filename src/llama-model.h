// A loaded model: hyperparameters, vocabulary, and weight tensors that point
// into the memory-mapped GGUF file.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ggml.h"
#include "llama-arch.h"
#include "llama-hparams.h"

namespace pinfer {

class model_loader;
class llama_vocab;

struct layer_weights {
    ggml_tensor *attn_norm = nullptr, *attn_norm_b = nullptr;
    ggml_tensor *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr;
    ggml_tensor *wqkv = nullptr;  // fused q/k/v rows [q; k; v] (falcon)
    ggml_tensor *bq = nullptr, *bk = nullptr, *bv = nullptr, *bo = nullptr;
    ggml_tensor *ffn_norm = nullptr, *ffn_norm_b = nullptr;
    ggml_tensor *ffn_gate = nullptr, *ffn_up = nullptr, *ffn_down = nullptr;
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
    std::vector<layer_weights> layers;
    std::string desc;
    std::string chat_template;
    uint64_t n_params = 0;
    uint64_t n_bytes = 0;
    double t_load_ms = 0;

    ~model();
};

// Loads a GGUF file; throws std::runtime_error naming the problem.
std::unique_ptr<model> load_model(const std::string &path);

}  // namespace pinfer
