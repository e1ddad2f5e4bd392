// The qwen2 architecture (Qwen1.5, Qwen2, Qwen2.5): llama's block layout with
// biases on the q/k/v projections and NeoX-style RoPE (rotate halves, so the
// converter leaves q/k rows in Hugging Face order).
#include "arch-llama.h"

namespace pinfer {

static void qwen2_hparams(const model_loader &ml, hparams &hp) { llama_like_hparams(ml, hp, 1e-6f, GGML_ROPE_NEOX); }
static void qwen2_tensors(model_loader &ml, model &m) { llama_like_tensors(ml, m, true); }

extern const arch_impl arch_qwen2 = {"qwen2", qwen2_hparams, qwen2_tensors, llama_like_graph};

}  // namespace pinfer
