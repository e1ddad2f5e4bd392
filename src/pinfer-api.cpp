// The C API (pinfer.h) over the C++ runtime: exceptions become error returns
// with a message readable through pinfer_last_error().
#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "llama-chat.h"
#include "llama-context.h"
#include "llama-model-loader.h"
#include "llama-model.h"
#include "llama-sampling.h"
#include "llama-sparse-ffn.h"
#include "llama-sparse-meta.h"
#include "llama-placement.h"
#include "llama-vocab.h"
#include "pinfer.h"

struct pinfer_model {
    std::unique_ptr<pinfer::model> m;
};
struct pinfer_context {
    std::unique_ptr<pinfer::context> c;
    std::string plan_text;
};
struct pinfer_sampler {
    std::unique_ptr<pinfer::sampler> s;
};

static thread_local std::string g_error;

template <typename F, typename R>
static R guarded(R on_error, F &&f) {
    try {
        return f();
    } catch (const std::bad_alloc &) {
        g_error = "out of memory";
    } catch (const std::exception &e) {
        g_error = e.what();
    }
    return on_error;
}

extern "C" {

const char *pinfer_last_error(void) { return g_error.c_str(); }

pinfer_model *pinfer_model_load(const char *path) {
    return guarded<>((pinfer_model *)nullptr, [&] {
        if (!path) throw std::invalid_argument("no model path given");
        auto *pm = new pinfer_model();
        try {
            pm->m = pinfer::load_model(path);
        } catch (...) {
            delete pm;
            throw;
        }
        return pm;
    });
}

void pinfer_model_free(pinfer_model *model) { delete model; }

const char *pinfer_model_arch(const pinfer_model *model) { return model->m->hp.arch.c_str(); }
const char *pinfer_model_desc(const pinfer_model *model) { return model->m->desc.c_str(); }
int32_t pinfer_model_n_vocab(const pinfer_model *model) { return (int32_t)model->m->hp.n_vocab; }
int32_t pinfer_model_n_ctx_train(const pinfer_model *model) { return (int32_t)model->m->hp.n_ctx_train; }
int32_t pinfer_model_n_embd(const pinfer_model *model) { return (int32_t)model->m->hp.n_embd; }
int32_t pinfer_model_n_layer(const pinfer_model *model) { return (int32_t)model->m->hp.n_layer; }
int32_t pinfer_model_n_ff(const pinfer_model *model) { return (int32_t)model->m->hp.n_ff; }
uint64_t pinfer_model_n_params(const pinfer_model *model) { return model->m->n_params; }
uint64_t pinfer_model_size(const pinfer_model *model) { return model->m->n_bytes; }

uint64_t pinfer_model_ffn_page_bytes(const pinfer_model *model, uint64_t *huge) {
    size_t h = 0;
    const size_t n = model->m->ffn_page_bytes(huge ? &h : nullptr);
    if (huge) *huge = h;
    return n;
}

const char *pinfer_model_meta_str(const pinfer_model *model, const char *key) {
    gguf_context *g = model->m->loader->gguf();
    const int64_t i = gguf_find_key(g, key);
    if (i < 0) return nullptr;
    return gguf_val_get_str(gguf_get_val(g, i), nullptr);
}

int32_t pinfer_model_sparse_info(const pinfer_model *model, pinfer_sparse_info *info) {
    return guarded<>(-1, [&] {
        if (!model || !info) throw std::invalid_argument("pinfer_model_sparse_info: NULL argument");
        const pinfer::model &m = *model->m;
        const pinfer::sparse_meta &s = m.sparse;
        *info = pinfer_sparse_info{};
        info->has_predictors = s.has_predictors;
        info->has_down_t = s.has_down_t;
        info->has_freq = s.has_freq;
        info->hot_first = s.hot_first;
        info->powerinfer = s.powerinfer;
        info->has_gpuidx = !s.gpuidx_path.empty();
        info->gpuidx_prefix = s.gpuidx_prefix;
        info->threshold = s.threshold;
        info->n_act_thresholds = (int32_t)s.act_thresholds.size();
        info->n_placements = (int32_t)s.placements.size();
        for (const auto &l : m.layers)
            if (l.fc1) info->max_rank = std::max(info->max_rank, (int32_t)l.fc1->ne[1]);
        return 0;
    });
}

int32_t pinfer_model_act_thresholds(const pinfer_model *model, float *out, int32_t n_max) {
    return guarded<>(-1, [&] {
        if (!model) throw std::invalid_argument("pinfer_model_act_thresholds: NULL model");
        const auto &a = model->m->sparse.act_thresholds;
        if (!a.empty() && (!out || n_max < (int32_t)a.size()))
            throw std::invalid_argument("pinfer_model_act_thresholds: room for " + std::to_string(a.size()) + " values needed");
        std::copy(a.begin(), a.end(), out);
        return (int32_t)a.size();
    });
}

static void check_k_out(const pinfer::model &m, const int32_t *k_out, int32_t n_layer, const char *fn) {
    if (!k_out) throw std::invalid_argument(std::string(fn) + ": NULL k_out");
    if (n_layer != (int32_t)m.hp.n_layer)
        throw std::invalid_argument(std::string(fn) + ": n_layer is " + std::to_string(n_layer) + ", the model has " +
                                    std::to_string(m.hp.n_layer));
}

int32_t pinfer_model_placement(const pinfer_model *model, uint64_t budget_bytes, int32_t *k_out, int32_t n_layer) {
    return guarded<>(-1, [&] {
        if (!model) throw std::invalid_argument("pinfer_model_placement: NULL model");
        check_k_out(*model->m, k_out, n_layer, "pinfer_model_placement");
        std::vector<int32_t> k;
        const int32_t kind = (int32_t)pinfer::select_placement(*model->m, budget_bytes, k);
        std::copy(k.begin(), k.end(), k_out);
        return kind;
    });
}

int32_t pinfer_model_placement_entry(const pinfer_model *model, int32_t i, uint64_t *budget_bytes, double *objective,
                                     char *solver, size_t solver_len, int32_t *k_out, int32_t n_layer) {
    return guarded<>(-1, [&] {
        if (!model) throw std::invalid_argument("pinfer_model_placement_entry: NULL model");
        const auto &ps = model->m->sparse.placements;
        if (i < 0 || i >= (int32_t)ps.size())
            throw std::invalid_argument("placement entry " + std::to_string(i) + " out of range [0, " +
                                        std::to_string(ps.size()) + ")");
        const pinfer::placement &p = ps[(size_t)i];
        if (budget_bytes) *budget_bytes = p.budget_bytes;
        if (objective) *objective = p.objective;
        if (solver && solver_len) {
            const size_t n = std::min(solver_len - 1, p.solver.size());
            memcpy(solver, p.solver.data(), n);
            solver[n] = 0;
        }
        if (k_out) {
            check_k_out(*model->m, k_out, n_layer, "pinfer_model_placement_entry");
            std::copy(p.k.begin(), p.k.end(), k_out);
        }
        return 0;
    });
}

int32_t pinfer_model_load_gpuidx(pinfer_model *model, const char *path) {
    return guarded<>(-1, [&] {
        if (!model || !path) throw std::invalid_argument("pinfer_model_load_gpuidx: NULL argument");
        pinfer::load_gpuidx(*model->m, path);
        return 0;
    });
}

int32_t pinfer_model_gpu_neurons(const pinfer_model *model, int32_t il, int32_t *ids, int32_t n_max) {
    return guarded<>(INT32_MIN, [&] {
        if (!model) throw std::invalid_argument("pinfer_model_gpu_neurons: NULL model");
        const auto &g = model->m->sparse.gpu_neurons;
        if (g.empty()) throw std::invalid_argument("no .gpuidx file is loaded for this model");
        if (il < 0 || il >= (int32_t)g.size())
            throw std::invalid_argument("layer " + std::to_string(il) + " out of range [0, " + std::to_string(g.size()) + ")");
        const auto &v = g[(size_t)il];
        if (n_max < (int32_t)v.size() || (!ids && !v.empty())) return -(int32_t)v.size();
        std::copy(v.begin(), v.end(), ids);
        return (int32_t)v.size();
    });
}

int32_t pinfer_tokenize(const pinfer_model *model, const char *text, int32_t text_len, pinfer_token *tokens,
                        int32_t n_max, bool add_special, bool parse_special) {
    return guarded<>(INT32_MIN, [&] {
        if (!model || (!text && text_len != 0) || (n_max > 0 && !tokens))
            throw std::invalid_argument("pinfer_tokenize: NULL argument");
        const std::string s(text ? text : "", text_len < 0 ? strlen(text) : (size_t)text_len);
        const std::vector<int32_t> ids = model->m->vocab->tokenize(s, add_special, parse_special);
        if ((int64_t)ids.size() > INT32_MAX) throw std::runtime_error("text too long");
        const int32_t n = (int32_t)ids.size();
        if (n > n_max) return -n;
        if (n) memcpy(tokens, ids.data(), sizeof(int32_t) * n);
        return n;
    });
}

int32_t pinfer_token_to_piece(const pinfer_model *model, pinfer_token token, char *buf, int32_t len, bool special) {
    return guarded<>(INT32_MIN, [&] {
        if (!model || (len > 0 && !buf)) throw std::invalid_argument("pinfer_token_to_piece: NULL argument");
        if (token < 0 || token >= (pinfer_token)model->m->hp.n_vocab)
            throw std::invalid_argument("token id " + std::to_string(token) + " out of range [0, " +
                                        std::to_string(model->m->hp.n_vocab) + ")");
        const std::string &p = model->m->vocab->token_to_piece(token, special);
        const int32_t n = (int32_t)p.size();
        if (n > len) return -n;
        memcpy(buf, p.data(), p.size());
        return n;
    });
}

pinfer_token pinfer_token_bos(const pinfer_model *model) { return model->m->vocab->bos(); }
pinfer_token pinfer_token_eos(const pinfer_model *model) { return model->m->vocab->eos(); }
bool pinfer_token_is_eog(const pinfer_model *model, pinfer_token token) { return model->m->vocab->is_eog(token); }

int32_t pinfer_chat_apply_template(const pinfer_model *model, const char *tmpl, const pinfer_chat_message *msgs,
                                   size_t n_msgs, bool add_generation_prompt, char *buf, int32_t len) {
    return guarded<>(INT32_MIN, [&] {
        if (!model || (n_msgs && !msgs) || (len > 0 && !buf))
            throw std::invalid_argument("pinfer_chat_apply_template: NULL argument");
        std::vector<pinfer::chat_message> chat;
        for (size_t i = 0; i < n_msgs; i++) {
            if (!msgs[i].role || !msgs[i].content)
                throw std::invalid_argument("pinfer_chat_apply_template: message " + std::to_string(i) + " has a NULL role or content");
            chat.push_back({msgs[i].role, msgs[i].content});
        }
        const std::string t = tmpl ? std::string(tmpl) : model->m->chat_template;
        const pinfer::llama_vocab &v = *model->m->vocab;
        const std::string bos = v.bos() >= 0 ? v.token_text(v.bos()) : "";
        const std::string eos = v.eos() >= 0 ? v.token_text(v.eos()) : "";
        std::string out, error;
        if (!pinfer::chat_apply_template(t, chat, add_generation_prompt, out, error, bos, eos)) {
            g_error = error;
            return INT32_MIN;
        }
        const int32_t n = (int32_t)out.size();
        if (n > len) return -n;
        memcpy(buf, out.data(), out.size());
        return n;
    });
}

pinfer_context_params pinfer_context_default_params(void) {
    pinfer_context_params p;
    p.n_ctx = 0;
    p.n_batch = 512;
    p.n_threads = 0;
    p.type_kv = GGML_TYPE_F16;
    p.sparse_mode = PINFER_SPARSE_OFF;
    p.sparse_flags = 0;
    p.precision = PINFER_PREC_HIGH;
    p.device = nullptr;
    p.n_gpu_layers = -1;
    p.vram_budget = 0;
    p.sim_memory = 0;
    p.sim_copy_latency_us = 0;
    p.sim_copy_ns_per_byte = 0;
    p.sim_threads = 1;
    p.prompt_stream_min = 32;
    p.graph_cache = true;
    p.offload_layers = false;
    p.embeddings = false;
    return p;
}

const char *pinfer_precision_name(int32_t precision) {
    return precision == PINFER_PREC_HIGH ? "high" : precision == PINFER_PREC_FAST ? "fast" : nullptr;
}

int32_t pinfer_precision_from_name(const char *name) {
    if (!name) return -1;
    if (!strcmp(name, "high")) return PINFER_PREC_HIGH;
    if (!strcmp(name, "fast")) return PINFER_PREC_FAST;
    return -1;
}

pinfer_context *pinfer_context_new(pinfer_model *model, pinfer_context_params params) {
    return guarded<>((pinfer_context *)nullptr, [&] {
        if (!model) throw std::invalid_argument("pinfer_context_new: NULL model");
        if (params.type_kv != GGML_TYPE_F16 && params.type_kv != GGML_TYPE_F32)
            throw std::invalid_argument("KV cache type must be F16 (1) or F32 (0)");
        pinfer::context_params p;
        p.n_ctx = params.n_ctx;
        p.n_batch = params.n_batch;
        p.n_threads = params.n_threads;
        p.type_kv = (ggml_type)params.type_kv;
        if (!pinfer_precision_name(params.precision))
            throw std::invalid_argument("unknown precision " + std::to_string(params.precision) + " (high=0, fast=1)");
        p.prec_high = params.precision == PINFER_PREC_HIGH;
        if (params.sparse_mode < PINFER_SPARSE_OFF || params.sparse_mode > PINFER_SPARSE_AUTO)
            throw std::invalid_argument("unknown sparse mode " + std::to_string(params.sparse_mode) +
                                        " (off=0, exact=1, predictor=2, threshold=3, auto=4)");
        if (params.sparse_flags & ~(PINFER_SPARSE_FLAG_STATS | PINFER_SPARSE_FLAG_VERIFY | PINFER_SPARSE_FLAG_OBSERVE))
            throw std::invalid_argument("unknown bits in sparse_flags");
        p.sparse = (pinfer::sparse_mode)params.sparse_mode;
        p.sparse_stats = params.sparse_flags & PINFER_SPARSE_FLAG_STATS;
        p.sparse_verify = params.sparse_flags & PINFER_SPARSE_FLAG_VERIFY;
        p.ffn_observe = params.sparse_flags & PINFER_SPARSE_FLAG_OBSERVE;
        p.device = params.device ? params.device : "auto";
        if (params.n_gpu_layers < -1) throw std::invalid_argument("n_gpu_layers must be >= -1 (-1: all that fit)");
        p.n_gpu_layers = params.n_gpu_layers;
        p.vram_budget = params.vram_budget;
        p.sim_memory = params.sim_memory;
        if (!(params.sim_copy_latency_us >= 0) || !(params.sim_copy_ns_per_byte >= 0))
            throw std::invalid_argument("sim copy costs must be finite and >= 0");
        p.sim_copy_latency_us = params.sim_copy_latency_us;
        p.sim_copy_ns_per_byte = params.sim_copy_ns_per_byte;
        if (params.sim_threads < 1 || params.sim_threads > 256) throw std::invalid_argument("sim_threads must be in [1, 256]");
        p.sim_threads = params.sim_threads;
        if (params.prompt_stream_min < 0) throw std::invalid_argument("prompt_stream_min must be >= 0 (0: never)");
        p.prompt_stream_min = params.prompt_stream_min;
        p.graph_cache = params.graph_cache;
        p.offload_layers = params.offload_layers;
        p.embeddings = params.embeddings;
        auto *pc = new pinfer_context();
        try {
            pc->c = std::make_unique<pinfer::context>(*model->m, p);
        } catch (...) {
            delete pc;
            throw;
        }
        return pc;
    });
}

void pinfer_context_free(pinfer_context *ctx) { delete ctx; }
uint32_t pinfer_n_ctx(const pinfer_context *ctx) { return ctx->c->n_ctx(); }
int32_t pinfer_n_past(const pinfer_context *ctx) { return (int32_t)ctx->c->n_past(); }
void pinfer_kv_truncate(pinfer_context *ctx, int32_t n_keep) { ctx->c->truncate(n_keep < 0 ? 0 : (uint32_t)n_keep); }

int64_t pinfer_state_size(const pinfer_context *ctx, int32_t n_past) {
    return guarded<>((int64_t)-1, [&] {
        if (!ctx) throw std::invalid_argument("no context");
        if (n_past < 0 || (uint32_t)n_past > ctx->c->n_ctx()) throw std::invalid_argument("n_past out of range");
        return (int64_t)ctx->c->state_size((uint32_t)n_past);
    });
}

int32_t pinfer_state_get(const pinfer_context *ctx, uint8_t *dst, size_t size) {
    return guarded<>(-1, [&] {
        if (!ctx || (!dst && size)) throw std::invalid_argument("no context or buffer");
        ctx->c->state_get(dst, size);
        return 0;
    });
}

int32_t pinfer_state_set(pinfer_context *ctx, const uint8_t *src, size_t size, int32_t n_past, const float *last_logits) {
    return guarded<>(-1, [&] {
        if (!ctx || !src || !last_logits) throw std::invalid_argument("no context, state or logits");
        if (n_past <= 0) throw std::invalid_argument("state_set: n_past must be > 0");
        ctx->c->state_set(src, size, (uint32_t)n_past, last_logits);
        return 0;
    });
}

const char *pinfer_context_device(const pinfer_context *ctx) { return ctx ? ctx->c->device_name() : ""; }
const char *pinfer_context_notice(const pinfer_context *ctx) { return ctx ? ctx->c->notice().c_str() : ""; }

int32_t pinfer_context_plan(const pinfer_context *ctx, int32_t *on_device, int64_t *k, int32_t n_layer) {
    return guarded<>(-1, [&] {
        if (!ctx) throw std::invalid_argument("no context");
        const pinfer::context &c = *ctx->c;
        if (n_layer != (int32_t)c.mdl().hp.n_layer)
            throw std::invalid_argument("n_layer " + std::to_string(n_layer) + " is not the model's " + std::to_string(c.mdl().hp.n_layer));
        const pinfer::hybrid_plan &p = c.plan();
        for (int32_t il = 0; il < n_layer; il++) {
            const bool dev = (size_t)il < p.layers.size() && p.layers[(size_t)il].on_device;
            if (on_device) on_device[il] = dev;
            if (k) k[il] = dev ? p.layers[(size_t)il].k : 0;
        }
        return (int32_t)p.n_device_layers;
    });
}

const char *pinfer_context_plan_text(const pinfer_context *ctx) {
    if (!ctx) return "";
    pinfer_context *c = const_cast<pinfer_context *>(ctx);
    c->plan_text = c->c->plan().any() ? pinfer::describe_plan(c->c->mdl(), c->c->plan()) : "";
    return c->plan_text.c_str();
}

int32_t pinfer_get_transfer_stats(const pinfer_context *ctx, bool decode, pinfer_transfer_stats *st) {
    return guarded<>(-1, [&] {
        if (!ctx || !st) throw std::invalid_argument("no context or stats");
        const pinfer::transfer_stats &t = ctx->c->transfers(decode);
        st->n_tokens = t.n_tokens;
        st->n_graphs = t.n_graphs;
        st->bytes_h2d = t.bytes_h2d;
        st->bytes_d2h = t.bytes_d2h;
        st->bytes_pageable = t.bytes_pageable;
        st->n_copies = t.n_copies;
        st->n_waits = t.n_waits;
        st->n_syncs = t.n_syncs;
        st->device_bytes = ctx->c->plan().device_total();
        return 0;
    });
}

void pinfer_reset_transfer_stats(pinfer_context *ctx) {
    if (ctx) ctx->c->reset_transfers();
}

int32_t pinfer_decode(pinfer_context *ctx, const pinfer_token *tokens, int32_t n, bool all_logits) {
    return guarded<>(-1, [&] {
        if (!ctx || (n > 0 && !tokens)) throw std::invalid_argument("pinfer_decode: NULL argument");
        ctx->c->decode(tokens, n, all_logits);
        return 0;
    });
}

float *pinfer_get_logits(pinfer_context *ctx, int32_t i) { return ctx->c->logits(i); }

int32_t pinfer_decode_batch(pinfer_context *ctx, const pinfer_token *tokens, const int32_t *pos, const int32_t *seq_id,
                            const int8_t *output, int32_t n) {
    return guarded<>(-1, [&] {
        if (!ctx || n <= 0 || !tokens || !pos || !seq_id || !output)
            throw std::invalid_argument("pinfer_decode_batch: NULL argument or no tokens");
        ctx->c->decode_seqs(tokens, pos, seq_id, output, n);
        return 0;
    });
}

float *pinfer_get_logits_ith(pinfer_context *ctx, int32_t i) { return ctx ? ctx->c->logits_ith(i) : nullptr; }
int32_t pinfer_n_outputs_dim(const pinfer_context *ctx) { return ctx ? ctx->c->n_out_dim() : -1; }

int32_t pinfer_kv_seq_rm(pinfer_context *ctx, int32_t seq_id, int32_t p0, int32_t p1) {
    return guarded<>(-1, [&] {
        if (!ctx) throw std::invalid_argument("no context");
        ctx->c->seq_rm(seq_id, p0 < 0 ? 0 : p0, p1);
        return 0;
    });
}

int32_t pinfer_kv_seq_cp(pinfer_context *ctx, int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    return guarded<>(-1, [&] {
        if (!ctx) throw std::invalid_argument("no context");
        ctx->c->seq_cp(src, dst, p0 < 0 ? 0 : p0, p1);
        return 0;
    });
}

void pinfer_kv_clear(pinfer_context *ctx) {
    if (ctx) ctx->c->seq_rm(-1, 0, -1);
}

int32_t pinfer_kv_seq_pos_max(const pinfer_context *ctx, int32_t seq_id) {
    if (!ctx || seq_id < 0 || seq_id >= pinfer::KV_MAX_SEQ) return -1;
    return ctx->c->seq_pos_max(seq_id);
}

int32_t pinfer_kv_cells_used(const pinfer_context *ctx) { return ctx ? (int32_t)ctx->c->n_cells_used() : 0; }

const char *pinfer_sparse_mode_name(int32_t mode) {
    if (mode < PINFER_SPARSE_OFF || mode > PINFER_SPARSE_AUTO) return nullptr;
    return pinfer::sparse_mode_name((pinfer::sparse_mode)mode);
}

int32_t pinfer_sparse_mode_from_name(const char *name) {
    pinfer::sparse_mode m;
    if (!name || !pinfer::sparse_mode_from_name(name, &m)) return -1;
    return (int32_t)m;
}

int32_t pinfer_model_sparse_mode_check(const pinfer_model *model, int32_t mode) {
    return guarded<>(-1, [&] {
        if (!model) throw std::invalid_argument("pinfer_model_sparse_mode_check: NULL model");
        if (mode < PINFER_SPARSE_OFF || mode > PINFER_SPARSE_AUTO)
            throw std::invalid_argument("unknown sparse mode " + std::to_string(mode));
        const std::string why = pinfer::sparse_mode_unsupported(*model->m, (pinfer::sparse_mode)mode);
        if (!why.empty()) throw std::runtime_error(why);
        return 0;
    });
}

int32_t pinfer_context_sparse_mode(const pinfer_context *ctx) { return (int32_t)ctx->c->mode(); }

int32_t pinfer_get_expert_ids(const pinfer_context *ctx, int32_t il, int32_t *ids, int32_t n) {
    return guarded<>(-1, [&] {
        if (!ctx || (n > 0 && !ids) || n < 0) throw std::invalid_argument("pinfer_get_expert_ids: bad argument");
        const pinfer::context &c = *ctx->c;
        if (!c.params().sparse_stats && !c.params().sparse_verify)
            throw std::invalid_argument("expert ids are recorded with the sparse statistics: create the context with "
                                        "PINFER_SPARSE_FLAG_STATS");
        if (c.mdl().hp.n_expert == 0) throw std::invalid_argument("the model has no mixture-of-experts layers");
        const auto &st = c.sparse_stats();
        if (il < 0 || (size_t)il >= st.size())
            throw std::invalid_argument("pinfer_get_expert_ids: layer " + std::to_string(il) + " outside [0, " +
                                        std::to_string(st.size()) + ")");
        const std::vector<int32_t> &e = st[(size_t)il].experts_last;
        std::copy(e.begin(), e.begin() + std::min<size_t>(e.size(), (size_t)n), ids);
        return (int32_t)e.size();
    });
}

int32_t pinfer_get_sparse_stats(const pinfer_context *ctx, pinfer_sparse_stats *stats, pinfer_sparse_layer_stats *layers,
                                int32_t n_layer) {
    return guarded<>(-1, [&] {
        if (!ctx || !stats) throw std::invalid_argument("pinfer_get_sparse_stats: NULL argument");
        const pinfer::context &c = *ctx->c;
        if (!c.params().sparse_stats && !c.params().sparse_verify)
            throw std::invalid_argument("sparse statistics are off: create the context with PINFER_SPARSE_FLAG_STATS");
        const auto &st = c.sparse_stats();
        if (layers && n_layer != (int32_t)st.size())
            throw std::invalid_argument("pinfer_get_sparse_stats: n_layer is " + std::to_string(n_layer) +
                                        ", the model has " + std::to_string(st.size()));
        *stats = pinfer_sparse_stats{};
        stats->mode = (int32_t)c.mode();
        stats->n_layer = (int32_t)st.size();
        const double n_ff = (double)c.mdl().hp.n_ff;
        const bool recall = c.params().sparse_verify && c.mode() == pinfer::sparse_mode::PREDICTOR;
        for (size_t il = 0; il < st.size(); il++) {
            const pinfer::sparse_layer_stats &s = st[il];
            stats->flops_predictor += s.flops_predictor;
            stats->flops_ffn += s.flops_ffn;
            stats->flops_dense += s.flops_dense;
            if (!layers) continue;
            pinfer_sparse_layer_stats &o = layers[il];
            const double tok = (double)std::max<int64_t>(s.n_tokens, 1);
            o.n_tokens = s.n_tokens;
            o.active_frac = (double)s.sum_active / (tok * n_ff);
            o.computed_frac = (double)s.sum_union / (tok * n_ff);
            o.recall = !recall ? -1.0 : s.sum_true ? (double)s.sum_hit / (double)s.sum_true : 1.0;
            o.true_active_frac = recall ? (double)s.sum_true / (tok * n_ff) : -1.0;
            o.flops_predictor = s.flops_predictor;
            o.flops_ffn = s.flops_ffn;
            o.flops_dense = s.flops_dense;
        }
        const pinfer::verify_stats &v = c.verify();
        stats->n_verified = v.n_logits;
        stats->n_argmax_agree = v.n_argmax_agree;
        stats->max_logit_diff = v.max_abs_diff;
        stats->max_logit_abs = v.max_abs_dense;
        return 0;
    });
}

void pinfer_reset_sparse_stats(pinfer_context *ctx) { ctx->c->reset_sparse_stats(); }

static const pinfer::act_observer &observer_of(const pinfer_context *ctx, int32_t il, const char *fn) {
    if (!ctx) throw std::invalid_argument(std::string(fn) + ": NULL context");
    if (!ctx->c->params().ffn_observe)
        throw std::invalid_argument("the FFN observer is off: create the context with PINFER_SPARSE_FLAG_OBSERVE");
    const int32_t L = (int32_t)ctx->c->mdl().hp.n_layer;
    if (il < 0 || il >= L)
        throw std::invalid_argument(std::string(fn) + ": layer " + std::to_string(il) + " out of range [0, " +
                                    std::to_string(L) + ")");
    return ctx->c->observer();
}

int32_t pinfer_ffn_act_quantile(const pinfer_context *ctx, int32_t il, double q, float *t_out) {
    return guarded<>(-1, [&] {
        const pinfer::act_observer &o = observer_of(ctx, il, "pinfer_ffn_act_quantile");
        if (!t_out) throw std::invalid_argument("pinfer_ffn_act_quantile: NULL t_out");
        if (!(q <= 1.0)) throw std::invalid_argument("pinfer_ffn_act_quantile: q must be <= 1");
        if (o.n_tokens[(size_t)il] == 0) throw std::runtime_error("no activations observed yet: decode some tokens first");
        *t_out = o.quantile(il, q);
        return 0;
    });
}

int64_t pinfer_ffn_observed_tokens(const pinfer_context *ctx, int32_t il) {
    return guarded<>((int64_t)-1, [&] { return observer_of(ctx, il, "pinfer_ffn_observed_tokens").n_tokens[(size_t)il]; });
}

int32_t pinfer_ffn_neuron_counts(const pinfer_context *ctx, int32_t il, int64_t *counts, int32_t n_max) {
    return guarded<>(INT32_MIN, [&] {
        const pinfer::act_observer &o = observer_of(ctx, il, "pinfer_ffn_neuron_counts");
        const auto &c = o.counts[(size_t)il];
        if (!counts || n_max < (int32_t)c.size()) return -(int32_t)c.size();
        std::copy(c.begin(), c.end(), counts);
        return (int32_t)c.size();
    });
}

pinfer_timings pinfer_get_timings(const pinfer_context *ctx) {
    pinfer_timings t;
    t.t_load_ms = ctx->c->mdl().t_load_ms;
    t.t_prompt_ms = ctx->c->tm.t_prompt_ms;
    t.n_prompt = ctx->c->tm.n_prompt;
    t.t_eval_ms = ctx->c->tm.t_eval_ms;
    t.n_eval = ctx->c->tm.n_eval;
    t.t_host_ms = ctx->c->tm.t_host_ms;
    t.n_host = ctx->c->tm.n_host;
    t.n_graphs_built = ctx->c->graphs_built();
    t.n_graphs_reused = ctx->c->graphs_reused();
    return t;
}

void pinfer_reset_timings(pinfer_context *ctx) { ctx->c->tm = pinfer::timings(); }

pinfer_sampler_params pinfer_sampler_default_params(void) {
    const pinfer::sampler_params d;
    pinfer_sampler_params p;
    p.temperature = d.temp;
    p.top_k = d.top_k;
    p.top_p = d.top_p;
    p.min_p = d.min_p;
    p.repeat_penalty = d.repeat_penalty;
    p.repeat_last_n = d.repeat_last_n;
    p.frequency_penalty = d.frequency_penalty;
    p.presence_penalty = d.presence_penalty;
    p.seed = d.seed;
    p.typical_p = d.typical_p;
    p.mirostat = d.mirostat;
    p.mirostat_tau = d.mirostat_tau;
    p.mirostat_eta = d.mirostat_eta;
    return p;
}

pinfer_sampler *pinfer_sampler_new(const pinfer_model *model, pinfer_sampler_params params) {
    return guarded<>((pinfer_sampler *)nullptr, [&] {
        pinfer::sampler_params p;
        p.temp = params.temperature;
        p.top_k = params.top_k;
        p.top_p = params.top_p;
        p.min_p = params.min_p;
        p.repeat_penalty = params.repeat_penalty;
        p.repeat_last_n = params.repeat_last_n;
        p.frequency_penalty = params.frequency_penalty;
        p.presence_penalty = params.presence_penalty;
        p.seed = params.seed;
        p.typical_p = params.typical_p;
        p.mirostat = params.mirostat;
        p.mirostat_tau = params.mirostat_tau;
        p.mirostat_eta = params.mirostat_eta;
        auto *ps = new pinfer_sampler();
        ps->s = std::make_unique<pinfer::sampler>(p);
        return ps;
    });
}

void pinfer_sampler_free(pinfer_sampler *s) { delete s; }

pinfer_token pinfer_sampler_sample(pinfer_sampler *s, const float *logits, int32_t n_vocab) {
    return guarded<>(-1, [&] { return s->s->sample(logits, (size_t)n_vocab); });
}

void pinfer_sampler_accept(pinfer_sampler *s, pinfer_token token) { s->s->accept(token); }
void pinfer_sampler_reset(pinfer_sampler *s) { s->s->reset(); }

}  // extern "C"
