// pinfer's C API: load a GGUF model, tokenize, evaluate, sample.
// Used by tools/ (pinfer-cli, pinfer-bench) and the Python extension.
//
// Errors: functions that can fail return NULL or a negative number and leave
// a message naming the problem, readable with pinfer_last_error() (per thread).
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t pinfer_token;

struct pinfer_model;
struct pinfer_context;
struct pinfer_sampler;

const char *pinfer_last_error(void);

// ---- model ----
struct pinfer_model *pinfer_model_load(const char *path);
void pinfer_model_free(struct pinfer_model *model);

const char *pinfer_model_arch(const struct pinfer_model *model);  // "llama", ...
const char *pinfer_model_desc(const struct pinfer_model *model);  // one-line summary
int32_t pinfer_model_n_vocab(const struct pinfer_model *model);
int32_t pinfer_model_n_ctx_train(const struct pinfer_model *model);
int32_t pinfer_model_n_embd(const struct pinfer_model *model);
int32_t pinfer_model_n_layer(const struct pinfer_model *model);
int32_t pinfer_model_n_ff(const struct pinfer_model *model);  // FFN neurons per layer
uint64_t pinfer_model_n_params(const struct pinfer_model *model);
uint64_t pinfer_model_size(const struct pinfer_model *model);  // bytes of weights
// Bytes of FFN weights a sparse context moved into anonymous memory advised
// for 2 MiB pages (0 before any), and in *huge how many the kernel backs with
// huge pages now (NULL: not asked).
uint64_t pinfer_model_ffn_page_bytes(const struct pinfer_model *model, uint64_t *huge);
// A string metadata value (e.g. "tokenizer.chat_template"), or NULL.
const char *pinfer_model_meta_str(const struct pinfer_model *model, const char *key);

// ---- neuron-aware sparse metadata (extended GGUF, docs/extended-gguf.md) ----
struct pinfer_sparse_info {
    bool has_predictors;    // blk.N.fc1/fc2 in every layer
    bool has_down_t;        // blk.N.ffn_down_t in every layer
    bool has_freq;          // blk.N.ffn_freq in every layer
    bool hot_first;         // pinfer.neuron_order = "hot-first"
    bool powerinfer;        // a PowerInfer file (PWRI magic or powerinfer.* keys)
    bool has_gpuidx;        // a .gpuidx file was loaded
    bool gpuidx_prefix;     // ... and every layer's GPU set is a prefix [0, k)
    float threshold;        // predictor logit threshold (pinfer.sparse.threshold / powerinfer.sparse_threshold)
    int32_t n_act_thresholds;  // entries of pinfer.sparse.act_thresholds (0 or n_layer)
    int32_t n_placements;   // entries in the placement section (incl. one from a prefix .gpuidx)
    int32_t max_rank;       // largest predictor rank r_l (0 without predictors)
};
// Returns 0, or -1 (with an error) on a NULL argument.
int32_t pinfer_model_sparse_info(const struct pinfer_model *model, struct pinfer_sparse_info *info);
// Copies pinfer.sparse.act_thresholds (n_layer floats); returns the count, 0 if absent, < 0 on error.
int32_t pinfer_model_act_thresholds(const struct pinfer_model *model, float *out, int32_t n_max);

// Per-layer GPU prefix lengths k_out[n_layer] for a VRAM budget. Returns
// PINFER_PLACEMENT_EXACT (an entry with this budget), _BELOW (the largest entry
// under it) or _GREEDY (none fits: a greedy split by ffn_freq per byte, every
// neuron counting the same without ffn_freq); < 0 on error (n_layer must be the model's).
#define PINFER_PLACEMENT_EXACT 0
#define PINFER_PLACEMENT_BELOW 1
#define PINFER_PLACEMENT_GREEDY 2
int32_t pinfer_model_placement(const struct pinfer_model *model, uint64_t budget_bytes, int32_t *k_out, int32_t n_layer);
// Placement entry i: budget, objective, solver name (NUL-terminated, truncated to
// solver_len) and k_out[n_layer] (each may be NULL). Returns 0, < 0 on a bad index.
int32_t pinfer_model_placement_entry(const struct pinfer_model *model, int32_t i, uint64_t *budget_bytes,
                                     double *objective, char *solver, size_t solver_len, int32_t *k_out,
                                     int32_t n_layer);

// Load a PowerInfer .gpuidx file (blk.N.gpu_idx / blk.N.gpu_bucket) for this
// model. Its GPU neuron sets become per-layer lists; when every set is a prefix
// [0, k) it is also added as a placement entry (solver "powerinfer-gpuidx",
// budget split.vram_capacity). Returns 0, < 0 on error (the message names the problem).
int32_t pinfer_model_load_gpuidx(struct pinfer_model *model, const char *path);
// GPU neuron ids of layer il from the loaded .gpuidx (ascending). Returns the
// count, or -(count) without writing if n_max is too small; INT32_MIN on error
// (no .gpuidx loaded, bad layer).
int32_t pinfer_model_gpu_neurons(const struct pinfer_model *model, int32_t il, int32_t *ids, int32_t n_max);

// ---- vocabulary ----
// Writes up to n_max tokens; returns the count, or -(count needed) if n_max
// is too small.
int32_t pinfer_tokenize(const struct pinfer_model *model, const char *text, int32_t text_len, pinfer_token *tokens,
                        int32_t n_max, bool add_special, bool parse_special);
// The bytes of one token (no NUL); returns the length or -(length needed).
int32_t pinfer_token_to_piece(const struct pinfer_model *model, pinfer_token token, char *buf, int32_t len,
                              bool special);
pinfer_token pinfer_token_bos(const struct pinfer_model *model);  // -1 if none
pinfer_token pinfer_token_eos(const struct pinfer_model *model);
bool pinfer_token_is_eog(const struct pinfer_model *model, pinfer_token token);  // EOS, EOT, ...

// Format a chat with the model's template. Returns the length of the prompt
// written to buf (or -(length needed)); < -1e9 never. On an unknown template
// returns INT32_MIN and sets the error.
struct pinfer_chat_message {
    const char *role;
    const char *content;
};
int32_t pinfer_chat_apply_template(const struct pinfer_model *model, const char *tmpl,  // NULL: the model's
                                   const struct pinfer_chat_message *msgs, size_t n_msgs, bool add_generation_prompt,
                                   char *buf, int32_t len);

// ---- context (KV cache, compute buffers, thread pool) ----
struct pinfer_context_params {
    uint32_t n_ctx;      // 0: the model's training context (capped at 4096)
    uint32_t n_batch;    // max tokens per decode call for prompt processing
    int32_t n_threads;   // <= 0: number of cores; more is cut to the cores (a notice on stderr)
    int32_t type_kv;     // KV cache element type: 1 = F16 (default), 0 = F32
    int32_t sparse_mode; // PINFER_SPARSE_*: off (default), exact, predictor, threshold, auto
    uint32_t sparse_flags;  // PINFER_SPARSE_FLAG_* (statistics; they cost time)
    int32_t precision;   // PINFER_PREC_HIGH (default) or PINFER_PREC_FAST
    // The hybrid engine: hot layers and neurons on a device (shared/HYBRID.md).
    const char *device;     // "auto" (NULL, the default: cuda if built in and a device answers, else cpu),
                            // "cpu", "cuda" (builds with PINFER_CUDA) or "sim" (a simulated GPU)
    int32_t n_gpu_layers;   // layers on the device, in order; -1 (default): as many as the budget holds
    uint64_t vram_budget;   // bytes of device memory to use; 0: all of it
    uint64_t sim_memory;    // sim: the simulated card's memory in bytes; 0: 24 GiB
    double sim_copy_latency_us;   // sim: charged per host <-> device copy
    double sim_copy_ns_per_byte;  // sim: ... plus per byte
    int32_t sim_threads;          // sim: its kernel threads (default 1)
    // Prompt batches of at least this many tokens send a hybrid layer's cold
    // FFN rows to the device instead of computing them on the CPU (default 32;
    // 0: never). docs/hybrid.md has the cost model.
    int32_t prompt_stream_min;
    // Single-token decodes reuse their graph and its plan while the (padded)
    // number of visible positions holds (default true; false: rebuild every token).
    bool graph_cache;
    // Layer offload as llama.cpp does it: whole layers on the device in order,
    // no neuron split (default false: attention first, then hot FFN prefixes).
    bool offload_layers;
    // An embedding context: each kept output row is the final-norm hidden
    // state [n_embd] instead of logits [n_vocab] (default false).
    bool embeddings;
};

// Precision of the activations that meet quantized weights. HIGH: about 15
// bits (Q8_0's 8-bit values plus the rounding residual on a 128x finer grid,
// combined inside the integer dot product; a second converted row for types
// without that kernel; F16 / BF16 weights meet the f32 activations): the logits match a float32 reference of the same
// weights (SmolLM2 Q4_1: top-1 100% vs transformers). FAST: 8 bits, as
// llama.cpp (top-1 96%), up to ~1.5x faster prompt processing. BENCHMARKS.md.
#define PINFER_PREC_HIGH 0
#define PINFER_PREC_FAST 1
const char *pinfer_precision_name(int32_t precision);       // "high", "fast"; NULL if unknown
int32_t pinfer_precision_from_name(const char *name);        // -1 if unknown

// Sparse FFN modes (DESIGN.md "Neuron-aware operators"). pinfer_context_new
// fails, naming what the file lacks, when the model cannot run the mode;
// auto picks the best one it can (pinfer_context_sparse_mode tells which).
#define PINFER_SPARSE_OFF 0        // dense
#define PINFER_SPARSE_EXACT 1      // ReLU-family FFNs: only neurons with a positive ReLU (same function)
#define PINFER_SPARSE_PREDICTOR 2  // blk.N.fc1/fc2 predict the active neurons
#define PINFER_SPARSE_THRESHOLD 3  // |act(gate)| > pinfer.sparse.act_thresholds[l]
#define PINFER_SPARSE_AUTO 4       // predictor > exact > threshold > off, as the file allows
#define PINFER_SPARSE_FLAG_STATS 1u    // per-layer active fractions and FLOPs (pinfer_get_sparse_stats)
#define PINFER_SPARSE_FLAG_VERIFY 2u   // + predictor recall and the logit difference to a dense twin
#define PINFER_SPARSE_FLAG_OBSERVE 4u  // |act(gate)| histograms and per-neuron activity counts
struct pinfer_context_params pinfer_context_default_params(void);
struct pinfer_context *pinfer_context_new(struct pinfer_model *model, struct pinfer_context_params params);
void pinfer_context_free(struct pinfer_context *ctx);
uint32_t pinfer_n_ctx(const struct pinfer_context *ctx);
int32_t pinfer_n_past(const struct pinfer_context *ctx);  // tokens of sequence 0 in the KV cache
// Forget sequence 0's cached tokens at positions >= n_keep.
void pinfer_kv_truncate(struct pinfer_context *ctx, int32_t n_keep);

// KV snapshots (prompt caches): the cached keys and values of positions [0, n_past).
// Bytes of a snapshot of n_past positions (-1 on error).
int64_t pinfer_state_size(const struct pinfer_context *ctx, int32_t n_past);
// Copies the snapshot of the current pinfer_n_past positions into dst (size bytes): 0, or -1.
int32_t pinfer_state_get(const struct pinfer_context *ctx, uint8_t *dst, size_t size);
// Restores a snapshot of n_past positions and the last token's logits (n_vocab floats),
// as if those tokens had just been evaluated: 0, or -1 (pinfer_last_error names the mismatch).
int32_t pinfer_state_set(struct pinfer_context *ctx, const uint8_t *src, size_t size, int32_t n_past,
                         const float *last_logits);

// ---- several sequences in one KV cache (ids 0..PINFER_MAX_SEQ-1) ----
// The n_ctx cells are shared: each holds one position of the sequences that
// see it, and a token attends only to cells of its own sequence (causally).
#define PINFER_MAX_SEQ 64
// Drop seq_id's cells at positions [p0, p1) (p1 < 0: to the end; seq_id < 0: every sequence).
int32_t pinfer_kv_seq_rm(struct pinfer_context *ctx, int32_t seq_id, int32_t p0, int32_t p1);
// dst also sees src's cells at positions [p0, p1) (shared, no copy; p1 < 0: to the end).
int32_t pinfer_kv_seq_cp(struct pinfer_context *ctx, int32_t src, int32_t dst, int32_t p0, int32_t p1);
void pinfer_kv_clear(struct pinfer_context *ctx);
int32_t pinfer_kv_seq_pos_max(const struct pinfer_context *ctx, int32_t seq_id);  // -1: no cell
int32_t pinfer_kv_cells_used(const struct pinfer_context *ctx);

// ---- the device plan and its traffic ----
const char *pinfer_context_device(const struct pinfer_context *ctx);  // "CPU", "sim"
// What the plan could not do as asked ("-ngl without a device", "the budget
// holds no layer", ...), for the caller to show; "" when nothing.
const char *pinfer_context_notice(const struct pinfer_context *ctx);
// Per layer: on_device[il] (attention, norms, predictor, KV cache) and k[il],
// its FFN neurons [0, k) on the device (either array may be NULL). Returns
// the number of layers on the device, < 0 on error (n_layer must be the model's).
int32_t pinfer_context_plan(const struct pinfer_context *ctx, int32_t *on_device, int64_t *k, int32_t n_layer);
// The plan in words, one line per run of layers (empty without a device).
const char *pinfer_context_plan_text(const struct pinfer_context *ctx);
struct pinfer_transfer_stats {
    int64_t n_tokens;       // tokens decoded with the device
    int64_t n_graphs;       // graphs run
    uint64_t bytes_h2d, bytes_d2h;  // host <-> device bytes
    uint64_t bytes_pageable;        // ... of them copied from or to pageable host memory (a staging miss)
    uint64_t n_copies;
    uint64_t n_waits;       // cross-backend event waits
    uint64_t n_syncs;       // waits for the whole device
    uint64_t device_bytes;  // weights and KV cache on the device
};
// decode: the single-token decodes (one graph per generated token), else the prompt batches.
int32_t pinfer_get_transfer_stats(const struct pinfer_context *ctx, bool decode, struct pinfer_transfer_stats *st);
void pinfer_reset_transfer_stats(struct pinfer_context *ctx);

// Evaluate n tokens at positions n_past.. (split into n_batch chunks).
// all_logits: keep logits for every token, else only the last one.
// Returns 0 on success, < 0 on error (e.g. context full).
int32_t pinfer_decode(struct pinfer_context *ctx, const pinfer_token *tokens, int32_t n, bool all_logits);
// Logits [n_vocab] of token i of the last decode (-1: the last one); NULL if not kept.
float *pinfer_get_logits(struct pinfer_context *ctx, int32_t i);

// Evaluate a batch that mixes sequences: token i belongs to seq_id[i] at
// position pos[i] (a sequence's tokens in position order); output[i] != 0 keeps
// its logits. Split into n_batch pieces, each stored in one run of free cells.
// Returns 0, < 0 on error (bad token / sequence / position, no free cell).
int32_t pinfer_decode_batch(struct pinfer_context *ctx, const pinfer_token *tokens, const int32_t *pos,
                            const int32_t *seq_id, const int8_t *output, int32_t n);
// Output row of batch token i of the last decode (< 0: from the end); NULL if not kept.
float *pinfer_get_logits_ith(struct pinfer_context *ctx, int32_t i);
// Floats per output row: n_vocab, or n_embd in an embedding context.
int32_t pinfer_n_outputs_dim(const struct pinfer_context *ctx);

// ---- sparse FFN: modes and statistics ----
const char *pinfer_sparse_mode_name(int32_t mode);       // "off", ...; NULL if unknown
int32_t pinfer_sparse_mode_from_name(const char *name);  // -1 if unknown
// 0 when the model can run the mode, else -1 with the reason as the error.
int32_t pinfer_model_sparse_mode_check(const struct pinfer_model *model, int32_t mode);
// The mode the context runs (auto resolved).
int32_t pinfer_context_sparse_mode(const struct pinfer_context *ctx);

struct pinfer_sparse_layer_stats {
    int64_t n_tokens;          // tokens this layer's FFN saw since the last reset
    double active_frac;        // mean over tokens of |active set| / n_ff
    double computed_frac;      // rows computed / (n_ff * tokens): a batch computes its union
    double recall;             // verify, predictor mode: Σ|pred ∩ true| / Σ|true| (-1 otherwise)
    double true_active_frac;   // verify, predictor mode: mean |true set| / n_ff (-1 otherwise)
    double flops_predictor;    // FLOPs of the predictor
    double flops_ffn;          // FLOPs of the (sparse) FFN as run
    double flops_dense;        // FLOPs the dense FFN would have taken
};
struct pinfer_sparse_stats {
    int32_t mode;
    int32_t n_layer;
    double flops_predictor, flops_ffn, flops_dense;  // sums over layers
    int64_t n_verified;        // verify: logit rows compared with the dense twin
    int64_t n_argmax_agree;    // ... whose argmax equals the dense one
    double max_logit_diff;     // ... max |sparse - dense| logit
    double max_logit_abs;      // ... max |dense logit|
};
// Needs PINFER_SPARSE_FLAG_STATS or _VERIFY. layers may be NULL, else room for
// n_layer entries. Returns 0, < 0 on error.
int32_t pinfer_get_sparse_stats(const struct pinfer_context *ctx, struct pinfer_sparse_stats *stats,
                                struct pinfer_sparse_layer_stats *layers, int32_t n_layer);
void pinfer_reset_sparse_stats(struct pinfer_context *ctx);  // also clears the observer
// Mixture of experts (needs PINFER_SPARSE_FLAG_STATS): the experts layer il's
// router chose for the tokens of the last computed batch, n_expert_used per
// token, token after token, into ids (room for n; may be NULL with n = 0).
// The last layer routes only the tokens whose logits the batch keeps.
// Returns how many there are (more than n: only n written), < 0 on error.
int32_t pinfer_get_expert_ids(const struct pinfer_context *ctx, int32_t il, int32_t *ids, int32_t n);

// FFN activation observer (PINFER_SPARSE_FLAG_OBSERVE). For layer il: the
// threshold t such that a fraction q of the observed |act(gate)| values (ungated
// FFNs: |act(up)|) are <= t (within 0.8%); q <= 0 gives 0. Returns 0, < 0 on error.
int32_t pinfer_ffn_act_quantile(const struct pinfer_context *ctx, int32_t il, double q, float *t_out);
// Tokens observed in layer il (the last layer sees only tokens whose logits are kept); < 0 on error.
int64_t pinfer_ffn_observed_tokens(const struct pinfer_context *ctx, int32_t il);
// Per-neuron activity counts of layer il: tokens where |act| > t_l (t_l from
// pinfer.sparse.act_thresholds, else 0; relu-both also needs up > 0). Writes
// n_ff values; returns n_ff, -n_ff without writing when n_max is too small or
// counts is NULL, and INT32_MIN with an error (no observer, bad layer).
int32_t pinfer_ffn_neuron_counts(const struct pinfer_context *ctx, int32_t il, int64_t *counts, int32_t n_max);

struct pinfer_timings {
    double t_load_ms;
    double t_prompt_ms;
    int32_t n_prompt;   // tokens evaluated in calls with n > 1
    double t_eval_ms;
    int32_t n_eval;     // tokens evaluated one at a time
    double t_host_ms;   // of those: host work outside the kernels (graph, plan, inputs, logits)
    int32_t n_host;
    int64_t n_graphs_built;   // graphs built and planned (all decodes)
    int64_t n_graphs_reused;  // single-token decodes that reused the last graph and plan
};
struct pinfer_timings pinfer_get_timings(const struct pinfer_context *ctx);
void pinfer_reset_timings(struct pinfer_context *ctx);

// ---- sampling ----
struct pinfer_sampler_params {
    float temperature;      // <= 0: greedy
    int32_t top_k;          // <= 0: off
    float top_p;            // >= 1: off
    float min_p;            // <= 0: off
    float repeat_penalty;   // 1: off
    int32_t repeat_last_n;
    float frequency_penalty;
    float presence_penalty;
    uint32_t seed;          // UINT32_MAX: random
    float typical_p;        // >= 1: off
    int32_t mirostat;       // 0: off, 1 or 2 (then top_k, typical_p, top_p, min_p are unused)
    float mirostat_tau;     // target surprise in bits
    float mirostat_eta;     // learning rate
};
struct pinfer_sampler_params pinfer_sampler_default_params(void);
struct pinfer_sampler *pinfer_sampler_new(const struct pinfer_model *model, struct pinfer_sampler_params params);
void pinfer_sampler_free(struct pinfer_sampler *s);
pinfer_token pinfer_sampler_sample(struct pinfer_sampler *s, const float *logits, int32_t n_vocab);
void pinfer_sampler_accept(struct pinfer_sampler *s, pinfer_token token);
void pinfer_sampler_reset(struct pinfer_sampler *s);

#ifdef __cplusplus
}
#endif
