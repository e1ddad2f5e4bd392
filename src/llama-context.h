// An inference context: KV cache, planned compute buffer, thread pool, and
// the logits of the last decode.
#pragma once

#include <memory>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "llama-device-weights.h"
#include "llama-graph.h"
#include "llama-kv-cache.h"
#include "llama-model.h"
#include "llama-placement.h"
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
    // The hybrid engine (shared/HYBRID.md): a device for the hot part of the model.
    std::string device = "auto";  // "auto" (cuda when there is one, else cpu), "cpu", "cuda" (ggml-backend-cuda.h)
                                  // or "sim" (a simulated device: ggml-backend-sim.h)
    int n_gpu_layers = -1;       // layers on the device, in order (-1: as many as the budget holds)
    bool offload_layers = false; // whole layers on the device, no neuron split (llama.cpp's -ngl), for comparison
    uint64_t vram_budget = 0;    // bytes of device memory the plan may use (0: all of it)
    uint64_t sim_memory = 0;     // sim: the simulated card's memory (0: 24 GiB)
    int sim_threads = 1;         // sim: its kernel threads
    double sim_copy_latency_us = 0, sim_copy_ns_per_byte = 0;  // sim: cost charged per copy
    int prompt_stream_min = 32;  // batches this large send a hybrid layer's cold rows up (0: the CPU computes them)
    bool graph_cache = true;     // small batches reuse their graph and plan (false: rebuild every batch)
    bool embeddings = false;     // outputs are the final-norm hidden states [n_embd], not logits
};

// What moved between the host and the device (decode calls with a device plan).
struct transfer_stats {
    int64_t n_tokens = 0;     // tokens decoded
    int64_t n_graphs = 0;     // decode graphs run (one per token when decoding)
    uint64_t bytes_h2d = 0, bytes_d2h = 0, bytes_pageable = 0, n_copies = 0;
    uint64_t n_waits = 0;     // cross-backend event waits
    uint64_t n_syncs = 0;     // waits for the whole device queue
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
    // host work of single-token decodes outside the kernels: building the
    // graph, planning it, inputs in and logits out
    double t_host_ms = 0;
    int n_host = 0;
};

class context {
public:
    context(const model &m, context_params p);  // throws std::runtime_error
    ~context();
    context(const context &) = delete;
    context &operator=(const context &) = delete;

    // Evaluates tokens of sequence 0 at positions n_past..; throws on a full
    // context or a bad token.
    void decode(const int32_t *tokens, int n, bool all_logits);
    // Evaluates a batch mixing sequences: token i of sequence seq[i] at
    // position pos[i], its output (logits, or the hidden state of an embedding
    // context) kept when output[i]. Tokens of one sequence come in position
    // order. Throws on a bad token, sequence or position, or a full cache.
    void decode_seqs(const int32_t *tokens, const int32_t *pos, const int32_t *seq, const int8_t *output, int n);
    float *logits(int i);       // i-th kept row of the last decode (< 0: from the end); nullptr if none
    float *logits_ith(int i);   // row of batch token i of the last decode (< 0: from the end); nullptr if not kept
    int n_logits() const { return n_logits_; }
    int n_out_dim() const;      // floats per row: n_vocab, or n_embd for an embedding context

    uint32_t n_ctx() const { return kv_->n_ctx; }
    uint32_t n_past() const { return (uint32_t)(kv_->seq_pos_max(0) + 1); }  // sequence 0
    void truncate(uint32_t n_keep);  // sequence 0 keeps positions < n_keep
    // Sequence operations (seq < 0: every sequence; p1 < 0: no end).
    void seq_rm(int seq, int32_t p0, int32_t p1);
    void seq_cp(int src, int dst, int32_t p0, int32_t p1);
    int32_t seq_pos_max(int seq) const { return kv_->seq_pos_max(seq); }
    uint32_t n_cells_used() const { return kv_->n_used(); }
    const model &mdl() const { return model_; }

    // A snapshot of the cached keys and values of positions [0, n_past) (and of the
    // dense twin's with verify), for prompt caches (llama-context-state.cpp).
    size_t state_size(uint32_t n_past) const;
    void state_get(uint8_t *dst, size_t size) const;  // size must be state_size(n_past())
    // Restores a snapshot of n_past positions and the last token's logits (n_vocab
    // floats); throws if the size does not match this context.
    void state_set(const uint8_t *src, size_t size, uint32_t n_past, const float *last_logits);
    timings tm;

    sparse_mode mode() const { return ffn_.mode; }
    const context_params &params() const { return params_; }
    const std::vector<sparse_layer_stats> &sparse_stats() const { return stats_; }
    const verify_stats &verify() const { return verify_; }
    const act_observer &observer() const { return observer_; }
    void reset_sparse_stats();

    // The device plan (empty when everything runs on the CPU), what the plan
    // could not do as asked (a notice for the user, "" if none), and traffic.
    const hybrid_plan &plan() const { return plan_; }
    const char *device_name() const { return dev_ ? ggml_backend_name(dev_) : "CPU"; }
    const std::string &notice() const { return notice_; }
    // [0]: prompt batches (more than one token), [1]: single-token decodes
    const transfer_stats &transfers(bool decode) const { return xfer_[decode ? 1 : 0]; }
    void reset_transfers() { xfer_[0] = xfer_[1] = transfer_stats(); }

    // graphs built and reused by small batches (the plan cache)
    int64_t graphs_built() const { return graphs_built_; }
    int64_t graphs_reused() const { return graphs_reused_; }

private:
    // The last graph, its plan and its inputs; kept while reusable.
    struct graph_cache {
        ggml_context *ctx = nullptr;
        ggml_cgraph *gf = nullptr;
        ggml_tensor *logits = nullptr, *tokens = nullptr, *pos = nullptr, *kq_mask = nullptr, *kq_mask_swa = nullptr,
                    *out_ids = nullptr;
        std::vector<std::pair<ggml_tensor *, size_t>> moving;  // KV store views, bytes per position
        bool has_dev = false, reusable = false;
        int n = 0, n_outputs = 0, n_kv = 0;
        bool by_ids = false;  // outputs chosen by out_ids (else the last n_outputs rows)
        const kv_cache *kv = nullptr;
        const ffn_build *fb = nullptr;
    };
    // One batch that fits the graph: its tokens, positions and sequences, the
    // cells [cell0, cell0 + n) it is stored in, and the batch rows whose outputs go to out.
    struct ubatch {
        const int32_t *tokens, *pos, *seq;
        int n, cell0;
        std::vector<int32_t> out_rows;
    };
    void build_graph(const ubatch &ub, int n_kv, bool by_ids, kv_cache &kv, ffn_build *fb, bool keep);
    void drop_graph();
    void decode_batch(const ubatch &ub, float *out, kv_cache &kv, ffn_build *fb);
    void decode_checked(const ubatch &ub, float *out);  // + the dense twin of --sparse-verify
    void set_kq_mask(ggml_tensor *mask, const ubatch &ub, int n_kv, const kv_cache &kv, uint32_t window);

    const model &model_;
    context_params params_;
    std::string notice_;
    hybrid_plan plan_;
    ggml_backend_t cpu_ = nullptr, dev_ = nullptr;
    std::unique_ptr<device_weights> dw_;
    graph_device gdev_{};
    std::unique_ptr<kv_cache> kv_;
    ggml_backend_sched *sched_ = nullptr;
    std::vector<uint8_t> arena_;   // graph + tensor headers, reused every batch
    std::vector<int32_t> pos_buf_;
    std::vector<float> mask_buf_;
    std::vector<int32_t> out_row_;  // per token of the last decode: its row in logits_, or -1
    transfer_stats xfer_[2];
    graph_cache gc_;
    int64_t graphs_built_ = 0, graphs_reused_ = 0;
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
