// The device's copies of the weights a hybrid plan puts there: per device
// layer its attention, norms and predictor whole, and its FFN's hot prefix
// [0, k) as compact matrices (gate/up/down_t rows, down columns, the
// predictor bundle's first 3k rows) -- one contiguous range per tensor
// thanks to the hot-first neuron order, except down's columns.
#pragma once

#include <cstdint>
#include <vector>

#include "ggml-backend.h"
#include "llama-model.h"
#include "llama-placement.h"

namespace pinfer {

// Bytes of the device copies of layer il: its attention part (attn) and an
// FFN prefix of k neurons (with the bundle when bundle is set).
uint64_t device_layer_bytes(const model &m, uint32_t il, int64_t k, bool bundle, bool attn);
// Bytes of the device copy of the output head.
uint64_t device_head_bytes(const model &m);

class device_weights {
public:
    // Allocates one device buffer (its error names the budget) and uploads;
    // throws std::runtime_error.
    device_weights(const model &m, const hybrid_plan &p, ggml_backend_t be, const std::vector<ffn_bundle> &host_bundles);
    ~device_weights();
    device_weights(const device_weights &) = delete;
    device_weights &operator=(const device_weights &) = delete;

    // Device copies of layer il (fields of layers off the device stay null);
    // FFN tensors hold the neurons [0, k).
    const layer_weights &layer(uint32_t il) const { return layers_[il]; }
    const ffn_bundle *bundle(uint32_t il) const { return bundles_[il].w ? &bundles_[il] : nullptr; }
    // The device copy of the output head (fields null unless the plan puts it there).
    const model_head &head() const { return head_; }
    uint64_t bytes() const;

private:
    ggml_context *ctx_ = nullptr;
    ggml_backend_buffer_t buf_ = nullptr;
    std::vector<layer_weights> layers_;
    std::vector<ffn_bundle> bundles_;
    model_head head_;
};

}  // namespace pinfer
