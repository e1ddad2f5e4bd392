// The architecture interface: everything model-specific sits behind it
// (hyperparameters, tensor names and shapes, the graph builder), so the
// loader, KV cache and sampler never change when an architecture is added.
#pragma once

#include <string>
#include <vector>

#include "ggml.h"
#include "llama-hparams.h"

namespace pinfer {

class model_loader;
struct model;
struct kv_cache;
struct ffn_build;
struct graph_device;

// Inputs of one forward pass over a batch of n_tokens stored in the KV cells
// [cell0, cell0 + n_tokens), with the first n_kv cells visible through kq_mask.
// Each token carries its own position (pos) and sequence (in the mask).
struct graph_inputs {
    ggml_tensor *tokens;   // I32 [n_tokens]
    ggml_tensor *pos;      // I32 [n_tokens]
    ggml_tensor *kq_mask;  // F32 [n_kv, n_tokens], 0 or -inf (kq_mask_value)
    ggml_tensor *kq_mask_swa = nullptr;  // the same within the sliding window (models with windowed layers)
    ggml_tensor *out_ids = nullptr;  // I32 [n_outputs]: the rows whose logits are wanted (nullptr: the last n_outputs)
    int n_tokens;
    int cell0;
    int n_kv;
    int n_outputs;
    ffn_build *ffn = nullptr;  // sparse FFN mode and probes (llama-sparse-ffn.h); nullptr: dense
    const graph_device *dev = nullptr;  // the hybrid plan's device (llama-graph.h); nullptr: CPU only
    // pos and kq_mask copied to the device, made by the first device layer that reads them
    mutable ggml_tensor *pos_dev = nullptr, *kq_mask_dev = nullptr, *kq_mask_swa_dev = nullptr, *rope_factors_dev = nullptr,
                        *out_ids_dev = nullptr;
    // the KV store views and their bytes per position (a cached graph moves them)
    std::vector<std::pair<ggml_tensor *, size_t>> *kv_moving = nullptr;
};

struct arch_impl {
    const char *name;
    // Fills hp from metadata "<arch>.*" (n_vocab is set by the caller).
    void (*load_hparams)(const model_loader &ml, hparams &hp);
    // Creates the weight tensors in m.ctx from the file (names and shapes).
    void (*load_tensors)(model_loader &ml, model &m);
    // Returns the logits tensor F32 [n_vocab, n_outputs].
    ggml_tensor *(*build_graph)(ggml_context *ctx, ggml_cgraph *gf, const model &m, kv_cache &kv,
                                const graph_inputs &in);
};

const arch_impl *find_arch(const std::string &name);  // nullptr if unsupported
std::vector<std::string> supported_archs();

}  // namespace pinfer
