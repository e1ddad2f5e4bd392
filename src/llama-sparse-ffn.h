// The neuron-aware FFN: one builder per sparse mode (llama-ffn-*.cpp),
// selected per context (DESIGN.md "Neuron-aware operators").
//
//   off        dense: down(act(gate x) * up x)
//   exact      ReLU-family FFNs: gate (ungated: up) dense, then up and down only
//              for the neurons whose ReLU is positive. The same function as
//              dense; results differ only by summation order.
//   predictor  idx = fc2 · relu(fc1 · x) > threshold; gate, up and down only
//              for the predicted neurons (approximate where the predictor misses).
//   threshold  gate dense, active = |act(gate x)| > t_l (pinfer.sparse.act_thresholds);
//              up and down only for active neurons (CATS/TEAL-style, approximate).
//
// Batches compute the union of their tokens' active sets (the sparse ops'
// contract); every token still sees only its own active set: ReLU zeros in
// exact mode, a per-element mask in threshold mode. Predictor mode keeps the
// union (extra neurons only make the result more exact).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ggml.h"
#include "llama-model.h"

namespace pinfer {

struct model;
struct layer_weights;

enum class sparse_mode : int { OFF = 0, EXACT = 1, PREDICTOR = 2, THRESHOLD = 3, AUTO = 4 };

const char *sparse_mode_name(sparse_mode m);
bool sparse_mode_from_name(const std::string &name, sparse_mode *out);

// Why the model cannot run mode m ("" when it can; AUTO always can).
std::string sparse_mode_unsupported(const model &mdl, sparse_mode m);
// AUTO -> the best mode the file supports: predictor when every layer has
// fc1/fc2, exact for ReLU-family FFNs, threshold with act_thresholds, else off.
// Any other mode is checked and returned; throws std::runtime_error naming the
// reason when the file cannot support it.
sparse_mode resolve_sparse_mode(const model &mdl, sparse_mode requested);

// What one layer's FFN leaves in the graph for the context to read after
// compute (all marked as outputs so the planner keeps them).
struct ffn_probe {
    ggml_tensor *idx = nullptr;       // stats: the index list the sparse ops used
    ggml_tensor *idx_true = nullptr;  // verify (predictor): the true active set
    ggml_tensor *act = nullptr;       // observe: act(gate x) [n, T] (ungated: act(up x))
    ggml_tensor *up = nullptr;        // observe, relu-both: up x (activity needs up > 0 too)
    ggml_tensor *experts = nullptr;   // stats, mixture of experts: the routed expert ids I32 [k, T]
    ggml_tensor *expert_act = nullptr;  // stats, sparse experts: the routed experts' activations, 0 where inactive [n_ff, k, T]
};

// Per-graph settings and probes of the FFN builder (owned by the context).
struct ffn_build {
    sparse_mode mode = sparse_mode::OFF;  // resolved (never AUTO)
    bool stats = false;    // keep the index lists
    bool verify = false;   // also build the true active set (predictor mode)
    bool observe = false;  // keep act(gate x) for the activation statistics
    std::vector<ffn_probe> probes;  // one per layer, reset before every graph
    std::vector<ffn_bundle> bundles;  // predictor mode: per-layer neuron bundles (model::prepare_sparse_weights)
};

// A device layer's share of its FFN: the device copies (w, bundle) of the
// neurons [0, k) (k = n: the whole FFN; 0: none of it).
struct ffn_device {
    const layer_weights *w = nullptr;
    const ffn_bundle *bundle = nullptr;
    int64_t k = 0;
    bool stream = false;  // a prompt batch: the cold rows go up and the device computes them
};

// The FFN of layer il on x [d, T] (post-norm hidden state). b may be nullptr
// (dense, nothing recorded). dev: the layer runs on the device the context
// builds for (x lives there); when its prefix is shorter than the FFN, the
// CPU computes the rest at the same time (shared/HYBRID.md).
ggml_tensor *build_sparse_ffn(ggml_context *ctx, ggml_cgraph *gf, ffn_build *b, const model &mdl, int il, ggml_tensor *x,
                              const ffn_device *dev);

// The FFN of a mixture-of-experts layer (l.ffn_gate_inp set; llama-ffn-moe.cpp)
// on x [d, T], dense inside the routed experts, on the side the context builds for.
ggml_tensor *build_moe_ffn(ggml_context *ctx, ffn_build *b, const model &m, const layer_weights &l, int il, ggml_tensor *x);

// ---- statistics the context accumulates from the probes ----

struct sparse_layer_stats {
    int64_t n_tokens = 0;      // tokens this layer's FFN saw
    int64_t sum_active = 0;    // Σ_t |active set of token t|
    int64_t sum_union = 0;     // Σ_batches T * |union| (rows actually computed)
    int64_t sum_true = 0;      // verify: Σ_t |true active set|
    int64_t sum_hit = 0;       // verify: Σ_t |predicted ∩ true|
    double flops_predictor = 0, flops_ffn = 0, flops_dense = 0;
    // mixture of experts: the routed experts of the last batch (k per token,
    // token after token) and the tokens each expert got since the reset
    std::vector<int32_t> experts_last;
    std::vector<int64_t> expert_tokens;
};

// |act| histogram (bins = the top 15 bits of the float, i.e. 128 bins per
// octave: quantiles to within 0.8%) and per-neuron activity counts.
struct act_observer {
    static constexpr int N_BINS = 1 << 15;
    std::vector<std::vector<uint64_t>> hist;   // [layer][bin]
    std::vector<std::vector<int64_t>> counts;  // [layer][neuron]: tokens where the neuron was active
    std::vector<int64_t> n_tokens;             // [layer]
    void reset(int n_layer, int n_ff);
    // threshold t with a fraction q of the observed |act| values <= t
    float quantile(int il, double q) const;
};

// Reads the probes of a computed graph into the statistics.
void accumulate_ffn_stats(const model &mdl, const ffn_build &b, std::vector<sparse_layer_stats> &st);
void accumulate_ffn_observer(const model &mdl, const ffn_build &b, act_observer &obs);

}  // namespace pinfer
