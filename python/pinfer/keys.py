"""Every GGUF metadata key and value string that pinfer adds or reads beyond the GGUF spec.

One table for the Python package; src/llama-keys.h holds the same strings for the C++
runtime (tests/test_keys.py checks that the two agree). docs/extended-gguf.md says what
each key means; the placement section is ``pinfer.placement.count`` and, for each entry
``i``, ``pinfer.placement.<i>.<field>`` with the fields of :data:`PLACEMENT_FIELDS`.
"""

# namespaces
PINFER_NAMESPACE = "pinfer."
POWERINFER_NAMESPACE = "powerinfer."

# the FFN activation when it differs from the architecture's default
FFN_ACT = "pinfer.ffn_act"

# neuron order: absent, or NEURON_ORDER_HOT_FIRST
NEURON_ORDER = "pinfer.neuron_order"
NEURON_ORDER_HOT_FIRST = "hot-first"

# sparse inference
SPARSE_THRESHOLD = "pinfer.sparse.threshold"
SPARSE_ACT_THRESHOLDS = "pinfer.sparse.act_thresholds"
SPARSE_MODE_HINT = "pinfer.sparse.mode_hint"
MODE_HINT_PREDICTOR = "predictor"
MODE_HINT_THRESHOLD = "threshold"

# the placement section
PLACEMENT_PREFIX = "pinfer.placement."
PLACEMENT_COUNT = "pinfer.placement.count"
PLACEMENT_BUDGET_BYTES = "budget_bytes"
PLACEMENT_SOLVER = "solver"
PLACEMENT_OBJECTIVE = "objective"
PLACEMENT_GPU_NEURONS = "gpu_neurons"
PLACEMENT_FIELDS = (PLACEMENT_BUDGET_BYTES, PLACEMENT_SOLVER, PLACEMENT_OBJECTIVE, PLACEMENT_GPU_NEURONS)
SOLVER_ILP = "highs-ilp"
SOLVER_GREEDY = "greedy"
SOLVER_GPUIDX = "powerinfer-gpuidx"  # the runtime's entry for a .gpuidx prefix set

# PowerInfer's files: the model's threshold key, and the .gpuidx file's key and tensors
POWERINFER_THRESHOLD = "powerinfer.sparse_threshold"
GPUIDX_VRAM_CAPACITY = "split.vram_capacity"
GPUIDX_ARCH = "generic.gpu_index"
GPUIDX_TENSOR_IDX = "gpu_idx"
GPUIDX_TENSOR_BUCKET = "gpu_bucket"
POWERINFER_MAGIC = b"PWRI"


def placement_key(i: int, field_name: str) -> str:
    """``pinfer.placement.<i>.<field>``."""
    return f"{PLACEMENT_PREFIX}{i}.{field_name}"


def blk(il: int, name: str) -> str:
    """A per-layer tensor name, ``blk.<il>.<name>``."""
    return f"blk.{il}.{name}"
