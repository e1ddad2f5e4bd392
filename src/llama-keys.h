#pragma once
// Every GGUF metadata key and value string pinfer adds or reads beyond the GGUF spec.
// python/pinfer/keys.py holds the same table (tests/test_keys.py checks they agree);
// docs/extended-gguf.md says what each means.

namespace pinfer_keys {

// namespaces
constexpr const char *PINFER_NAMESPACE = "pinfer.";
constexpr const char *POWERINFER_NAMESPACE = "powerinfer.";

// the FFN activation when it differs from the architecture's default
constexpr const char *FFN_ACT = "pinfer.ffn_act";

// neuron order: absent, or NEURON_ORDER_HOT_FIRST
constexpr const char *NEURON_ORDER = "pinfer.neuron_order";
constexpr const char *NEURON_ORDER_HOT_FIRST = "hot-first";

// sparse inference
constexpr const char *SPARSE_THRESHOLD = "pinfer.sparse.threshold";
constexpr const char *SPARSE_ACT_THRESHOLDS = "pinfer.sparse.act_thresholds";
constexpr const char *SPARSE_MODE_HINT = "pinfer.sparse.mode_hint";
constexpr const char *MODE_HINT_PREDICTOR = "predictor";
constexpr const char *MODE_HINT_THRESHOLD = "threshold";

// the placement section: PLACEMENT_COUNT, then PLACEMENT_PREFIX "<i>." field per entry
constexpr const char *PLACEMENT_PREFIX = "pinfer.placement.";
constexpr const char *PLACEMENT_COUNT = "pinfer.placement.count";
constexpr const char *PLACEMENT_BUDGET_BYTES = "budget_bytes";
constexpr const char *PLACEMENT_SOLVER = "solver";
constexpr const char *PLACEMENT_OBJECTIVE = "objective";
constexpr const char *PLACEMENT_GPU_NEURONS = "gpu_neurons";
constexpr const char *SOLVER_ILP = "highs-ilp";
constexpr const char *SOLVER_GREEDY = "greedy";
constexpr const char *SOLVER_GPUIDX = "powerinfer-gpuidx";

// PowerInfer's files: the model's threshold key, and the .gpuidx file's key and tensors
constexpr const char *POWERINFER_THRESHOLD = "powerinfer.sparse_threshold";
constexpr const char *GPUIDX_VRAM_CAPACITY = "split.vram_capacity";
constexpr const char *GPUIDX_ARCH = "generic.gpu_index";
constexpr const char *GPUIDX_TENSOR_IDX = "gpu_idx";
constexpr const char *GPUIDX_TENSOR_BUCKET = "gpu_bucket";

}  // namespace pinfer_keys
