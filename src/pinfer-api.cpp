// The C API (pinfer.h) over the C++ runtime: exceptions become error returns
// with a message readable through pinfer_last_error().
#include <climits>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include "llama-chat.h"
#include "llama-context.h"
#include "llama-model-loader.h"
#include "llama-model.h"
#include "llama-sampling.h"
#include "llama-vocab.h"
#include "pinfer.h"

struct pinfer_model {
    std::unique_ptr<pinfer::model> m;
};
struct pinfer_context {
    std::unique_ptr<pinfer::context> c;
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
uint64_t pinfer_model_n_params(const pinfer_model *model) { return model->m->n_params; }
uint64_t pinfer_model_size(const pinfer_model *model) { return model->m->n_bytes; }

const char *pinfer_model_meta_str(const pinfer_model *model, const char *key) {
    gguf_context *g = model->m->loader->gguf();
    const int64_t i = gguf_find_key(g, key);
    if (i < 0) return nullptr;
    return gguf_val_get_str(gguf_get_val(g, i), nullptr);
}

int32_t pinfer_tokenize(const pinfer_model *model, const char *text, int32_t text_len, pinfer_token *tokens,
                        int32_t n_max, bool add_special, bool parse_special) {
    return guarded<>(INT32_MIN, [&] {
        const std::string s(text, text_len < 0 ? strlen(text) : (size_t)text_len);
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
        std::vector<pinfer::chat_message> chat;
        for (size_t i = 0; i < n_msgs; i++) chat.push_back({msgs[i].role, msgs[i].content});
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
    return p;
}

pinfer_context *pinfer_context_new(pinfer_model *model, pinfer_context_params params) {
    return guarded<>((pinfer_context *)nullptr, [&] {
        if (params.type_kv != GGML_TYPE_F16 && params.type_kv != GGML_TYPE_F32)
            throw std::invalid_argument("KV cache type must be F16 (1) or F32 (0)");
        pinfer::context_params p;
        p.n_ctx = params.n_ctx;
        p.n_batch = params.n_batch;
        p.n_threads = params.n_threads;
        p.type_kv = (ggml_type)params.type_kv;
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

int32_t pinfer_decode(pinfer_context *ctx, const pinfer_token *tokens, int32_t n, bool all_logits) {
    return guarded<>(-1, [&] {
        ctx->c->decode(tokens, n, all_logits);
        return 0;
    });
}

float *pinfer_get_logits(pinfer_context *ctx, int32_t i) { return ctx->c->logits(i); }

pinfer_timings pinfer_get_timings(const pinfer_context *ctx) {
    pinfer_timings t;
    t.t_load_ms = ctx->c->mdl().t_load_ms;
    t.t_prompt_ms = ctx->c->tm.t_prompt_ms;
    t.n_prompt = ctx->c->tm.n_prompt;
    t.t_eval_ms = ctx->c->tm.t_eval_ms;
    t.n_eval = ctx->c->tm.n_eval;
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
