// An inference context: KV cache, planned compute buffer, thread pool, and
// the logits of the last decode.
#pragma once

#include <memory>
#include <vector>

#include "ggml.h"
#include "llama-kv-cache.h"
#include "llama-model.h"

namespace pinfer {

struct context_params {
    uint32_t n_ctx = 0;
    uint32_t n_batch = 512;
    int n_threads = 0;
    ggml_type type_kv = GGML_TYPE_F16;
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
    void truncate(uint32_t n_keep) { if (n_keep < kv_.n_past) kv_.n_past = n_keep; }
    const model &mdl() const { return model_; }
    timings tm;

private:
    void decode_batch(const int32_t *tokens, int n, int n_outputs, float *out);

    const model &model_;
    context_params params_;
    kv_cache kv_;
    ggml_threadpool *tp_ = nullptr;
    ggml_gallocr *galloc_ = nullptr;
    std::vector<uint8_t> arena_;   // graph + tensor headers, reused every batch
    std::vector<float> logits_;
    int n_logits_ = 0;
};

}  // namespace pinfer
