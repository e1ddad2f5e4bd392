// An inference context: KV cache, planned compute buffer, thread pool, and
// the logits of the last decode.
#pragma once

#include <memory>
#include <vector>

#include "ggml.h"
#include "llama-kv-cache.h"
#include "llama-model.h"
#include "llama-sparse-ffn.h"

namespace pinfer {

struct context_params {
    uint32_t n_ctx = 0;
    uint32_t n_batch = 512;
    int n_threads = 0;
    ggml_type type_kv = GGML_TYPE_F16;
    bool prec_high = true;  // MUL_MAT activations to ~16 bits (GGML_PREC_HIGH), else 8 bits as llama.cpp
    sparse_mode sparse = sparse_mode::OFF;  // AUTO resolves at construction
    bool sparse_stats = false;   // per-layer active fractions and FLOPs
    bool sparse_verify = false;  // + predictor recall, and a dense twin for the logit difference
    bool ffn_observe = false;    // |act(gate)| histograms and per-neuron activity counts
};

// What --sparse-verify measures against the dense model (same tokens, own KV cache).
struct verify_stats {
    int64_t n_logits = 0;        // logit rows compared
    int64_t n_argmax_agree = 0;  // rows whose argmax equals the dense one
    double max_abs_diff = 0;     // max |sparse - dense| over all compared logits
    double max_abs_dense = 0;    // max |dense logit| (scale for a relative difference)
};

struct timings {
    double t_prompt_ms = 0, t_eval_ms = 0;
    int n_prompt = 0, n_eval = 0;
};

class context {
public:
    context(const model &m, context_params p);  // throws std::runtime_error
    ~context();
    context(const context &) = delete;
    context &operator=(const context &) = delete;

    // Evaluates tokens at positions n_past..; throws on a full context or a bad token.
    void decode(const int32_t *tokens, int n, bool all_logits);
    float *logits(int i);  // i < 0: from the end; nullptr if not kept
    int n_logits() const { return n_logits_; }

    uint32_t n_ctx() const { return kv_.n_ctx; }
    uint32_t n_past() const { return kv_.n_past; }
    void truncate(uint32_t n_keep);
    const model &mdl() const { return model_; }
    timings tm;

    sparse_mode mode() const { return ffn_.mode; }
    const context_params &params() const { return params_; }
    const std::vector<sparse_layer_stats> &sparse_stats() const { return stats_; }
    const verify_stats &verify() const { return verify_; }
    const act_observer &observer() const { return observer_; }
    void reset_sparse_stats();

private:
    void decode_batch(const int32_t *tokens, int n, int n_outputs, float *out, kv_cache &kv, ffn_build *fb);

    const model &model_;
    context_params params_;
    kv_cache kv_;
    ggml_threadpool *tp_ = nullptr;
    ggml_gallocr *galloc_ = nullptr;
    std::vector<uint8_t> arena_;   // graph + tensor headers, reused every batch
    std::vector<float> logits_;
    int n_logits_ = 0;

    ffn_build ffn_;                         // mode + probes of the graph being built
    std::unique_ptr<kv_cache> kv_dense_;    // verify: the dense twin's cache
    std::vector<float> logits_dense_;
    std::vector<sparse_layer_stats> stats_;
    verify_stats verify_;
    act_observer observer_;
};

}  // namespace pinfer
