// Where a context's layers run: the placement entry or greedy split for a
// budget (the FFN prefixes), and the hybrid layer plan built on it
// (shared/HYBRID.md "Layer plan").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ggml.h"
#include "llama-sparse-ffn.h"

namespace pinfer {

struct model;

// The placement for a VRAM budget: the entry whose budget equals it
// (PLACEMENT_EXACT), else the largest entry below it (PLACEMENT_BELOW), else a
// greedy split from ffn_freq (PLACEMENT_GREEDY). k gets one prefix length per layer.
enum placement_kind { PLACEMENT_EXACT = 0, PLACEMENT_BELOW = 1, PLACEMENT_GREEDY = 2 };
placement_kind select_placement(const model &m, uint64_t budget_bytes, std::vector<int32_t> &k);

// Greedy split: repeatedly gives the GPU the next neuron (in file order) of the
// layer with the highest frequency per byte, while it fits. Without ffn_freq
// every neuron counts the same.
std::vector<int32_t> greedy_placement(const model &m, uint64_t budget_bytes);

// Bytes one neuron of layer il occupies on the GPU (its gate and up rows and
// its down column / ffn_down_t row).
uint64_t neuron_bytes(const model &m, uint32_t il);

// ---- the hybrid layer plan ----

struct layer_plan {
    bool on_device = false;  // attention, norms, predictor and KV cache live on the device
    int64_t k = 0;           // FFN neurons [0, k) on the device (0 unless on_device)
};

struct plan_request {
    int n_gpu_layers = -1;       // layers to put on the device, in order (-1: as many as fit)
    uint64_t budget_bytes = 0;   // device memory the plan may use (0: all of it)
    uint64_t device_bytes = 0;   // the device's memory
    uint32_t n_ctx = 0;
    uint32_t n_batch = 512;
    ggml_type type_kv = GGML_TYPE_F16;
    sparse_mode mode = sparse_mode::OFF;  // resolved
    bool bundles = false;        // predictor mode keeps a (gate, up, down_t) bundle per layer
    bool whole_layers = false;   // llama.cpp's layer offload: whole layers in order, no neuron split
    bool head = true;            // the output head may go to the device (not for embeddings)
};

struct hybrid_plan {
    std::vector<layer_plan> layers;
    int n_device_layers = 0;
    placement_kind kind = PLACEMENT_GREEDY;  // where the prefixes came from
    uint64_t budget_bytes = 0;
    bool head_on_device = false;  // the output head (norm, output matrix) runs on the device
    uint64_t attn_bytes = 0, ffn_bytes = 0, kv_bytes = 0, head_bytes = 0;  // on the device
    uint64_t compute_reserve = 0;  // kept free for the device's compute buffer
    std::string notice;            // why the plan holds less than asked ("" when it holds all)
    bool whole_layers = false;     // made by layer offload
    bool any() const { return n_device_layers > 0; }
    uint64_t device_total() const { return attn_bytes + ffn_bytes + kv_bytes + head_bytes; }
};

// Neuron-count granularity of a layer's device prefix: its down projection is
// split between columns, which must fall on block boundaries.
int64_t prefix_granule(const model &m, uint32_t il);

// Per layer, in layer order: attention (and KV) while it fits and -ngl allows;
// the output head when every layer is there (and -ngl, if given, exceeds the
// layer count, as in llama.cpp) -- it is read in full every token, worth more
// per byte than any FFN neuron; then the FFN prefixes from the placement section (or a greedy split) in what
// is left, rounded down to prefix_granule. Throws std::runtime_error before
// any allocation when the budget is larger than the device's memory.
hybrid_plan make_hybrid_plan(const model &m, const plan_request &r);

// One line per layer range with its k, and the byte totals (for --verbose).
std::string describe_plan(const model &m, const hybrid_plan &p);

}  // namespace pinfer
