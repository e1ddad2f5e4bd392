// Validation of a model file past the GGUF parser: every number that sizes a
// loop or an allocation is checked before it is used, and the loaded model is
// checked against the rules its graph relies on, so that a semantically bad
// file (well-formed GGUF, hostile values) stops with an error naming the key
// or tensor and the rule instead of crashing, hanging or computing garbage.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pinfer {

class model_loader;
struct hparams;
struct model;

// Bounds of the hyperparameters (far above any published model; low enough
// that products such as n_embd * n_vocab and per-layer loops stay cheap).
struct hparam_limits {
    static constexpr int64_t max_layers = 4096;
    static constexpr int64_t max_embd = 1 << 17;
    static constexpr int64_t max_ff = 1 << 20;
    static constexpr int64_t max_heads = 4096;
    static constexpr int64_t max_head_dim = 4096;
    static constexpr int64_t max_ctx = 1 << 24;
    static constexpr float max_eps = 1.0f;
    static constexpr float max_rope_base = 1e12f;
    static constexpr float max_rope_factor = 1e6f;
    static constexpr int64_t max_experts = 1024;
};

// After the architecture read its hyperparameters, before anything sized by
// them: the rules between them (heads divide the width, the rotated dims are
// even and fit a head) and block_count against the layers the file holds.
void validate_hparams(const model_loader &ml, const hparams &hp);

// After the tensors and the sparse metadata are loaded: the types each tensor
// may have for the ops that read it, finite values in the small tensors
// (norms, biases, activation frequencies) and the sparse thresholds, and the
// vocabulary's consistency with its tokenizer model.
void validate_model(const model &m);

// After a decode: a non-finite logit means non-finite weights (or values that
// overflow float), which load-time scans of the large matrices would cost too
// much to find; throws saying so.
void check_logits_finite(const float *logits, size_t n);

}  // namespace pinfer
