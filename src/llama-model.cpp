#include "llama-model.h"

#include <chrono>
#include <climits>
#include <cstring>
#include <stdexcept>

#include "llama-keys.h"
#include "llama-model-loader.h"
#include "llama-model-validate.h"
#include "llama-sparse-meta.h"
#include "llama-vocab.h"
#include "llama-weight-pages.h"

namespace pinfer {

model::model() = default;
model::~model() {
    pages_common_.reset();
    pages_gate_up_.reset();
    pages_bundle_.reset();
    if (bundle_ctx_) ggml_free(bundle_ctx_);
    ggml_free(ctx);
}

std::vector<ffn_bundle> model::prepare_sparse_weights(bool separate_gate_up, bool bundle) const {
    std::lock_guard<std::mutex> lock(pages_mu_);
    auto move = [&](std::unique_ptr<weight_pages> &pages, std::initializer_list<ggml_tensor *layer_weights::*> which) {
        if (pages) return;
        std::vector<ggml_tensor *> ts;
        for (const layer_weights &l : layers)
            for (ggml_tensor *layer_weights::*w : which)
                if (l.*w) ts.push_back(l.*w);
        auto p = std::make_unique<weight_pages>();
        p->adopt(ts);
        pages = std::move(p);
    };
    // the bundle carries down_t where it matches gate: then only ffn_down (the
    // dense fallback of prompts) and the predictors move on their own
    auto same = [](const ggml_tensor *a, const ggml_tensor *b) {
        return a && b && a->type == b->type && ggml_are_same_shape(a, b) && ggml_n_dims(a) <= 2 &&
               a->nb[1] == ggml_row_size(a->type, a->ne[0]) && b->nb[1] == a->nb[1];
    };
    auto rows_of = [&](const layer_weights &l) { return !same(l.ffn_gate, l.ffn_up) ? 0 : same(l.ffn_gate, l.ffn_down_t) ? 3 : 2; };
    if (bundle) {
        move(pages_common_, {&layer_weights::ffn_down, &layer_weights::fc1, &layer_weights::fc2});
    } else {
        move(pages_common_, {&layer_weights::ffn_down, &layer_weights::ffn_down_t, &layer_weights::fc1, &layer_weights::fc2});
    }
    if (separate_gate_up) move(pages_gate_up_, {&layer_weights::ffn_gate, &layer_weights::ffn_up});
    if (!bundle) return {};
    if (!pages_bundle_) {
        bundles_.assign(layers.size(), ffn_bundle());
        size_t total = 0;
        for (const layer_weights &l : layers) total += (size_t)rows_of(l) * ggml_nbytes(l.ffn_up ? l.ffn_up : l.ffn_down);
        auto p = std::make_unique<weight_pages>();
        if (total) {
            ggml_init_params ip = {(4 * layers.size() + 1) * ggml_tensor_overhead(), nullptr, true};
            bundle_ctx_ = ggml_init(ip);
            if (!bundle_ctx_) throw std::runtime_error("out of memory for the FFN bundle headers");
            char *dst = p->reserve(total);
            for (size_t il = 0; il < layers.size(); il++) {
                const layer_weights &l = layers[il];
                const int rows = rows_of(l);
                if (!rows) continue;
                const ggml_tensor *parts[3] = {l.ffn_gate, l.ffn_up, l.ffn_down_t};
                const int64_t d = l.ffn_gate->ne[0], n = l.ffn_gate->ne[1];
                const size_t row = l.ffn_gate->nb[1];
                for (int64_t i = 0; i < n; i++)
                    for (int j = 0; j < rows; j++) memcpy(dst + (rows * i + j) * row, (const char *)parts[j]->data + i * row, row);
                ffn_bundle &bd = bundles_[il];
                bd.rows = rows;
                bd.w = ggml_new_tensor_2d(bundle_ctx_, l.ffn_gate->type, d, rows * n);
                bd.w->data = dst;
                bd.w->buffer = p->buffer();
                ggml_tensor **views[3] = {&bd.gate, &bd.up, &bd.down_t};
                for (int j = 0; j < rows; j++) {  // every rows-th row from row j: one of the three matrices
                    ggml_tensor *v = ggml_new_tensor_2d(bundle_ctx_, l.ffn_gate->type, d, n);
                    v->data = dst + j * row;
                    v->buffer = p->buffer();
                    v->nb[1] = rows * row;
                    v->nb[2] = v->nb[3] = v->nb[1] * (size_t)n;
                    *views[j] = v;
                }
                dst += ggml_nbytes(bd.w);
            }
            p->seal();
        }
        pages_bundle_ = std::move(p);
    }
    return bundles_;
}

size_t model::ffn_page_bytes(size_t *huge) const {
    std::lock_guard<std::mutex> lock(pages_mu_);
    size_t bytes = 0, h = 0;
    for (const auto *p : {&pages_common_, &pages_gate_up_, &pages_bundle_})
        if (*p) {
            bytes += (*p)->bytes();
            if (huge) h += (*p)->huge_bytes();
        }
    if (huge) *huge = h;
    return bytes;
}

static std::unique_ptr<llama_vocab> load_vocab(const model_loader &ml) {
    vocab_params p;
    p.model = ml.get_str("tokenizer.ggml.model");
    p.pre = ml.get_str("tokenizer.ggml.pre", "default");
    p.tokens = ml.get_str_array("tokenizer.ggml.tokens");
    if (p.tokens.empty()) throw std::runtime_error("model metadata key 'tokenizer.ggml.tokens' is missing or empty");
    p.scores = ml.get_f32_array("tokenizer.ggml.scores");
    p.types = ml.get_i32_array("tokenizer.ggml.token_type");
    p.merges = ml.get_str_array("tokenizer.ggml.merges");
    // without merges a byte-level BPE splits every word into single bytes: a broken file
    if (p.model == "gpt2" && p.merges.empty())
        throw std::runtime_error("model metadata key 'tokenizer.ggml.merges' is missing or empty: a byte-level BPE "
                                 "(gpt2) vocabulary needs its merges");
    auto id = [&](const char *key) { return (int32_t)ml.get_int_in(std::string("tokenizer.ggml.") + key, -1, INT32_MAX, -1); };
    p.bos = id("bos_token_id");
    p.eos = id("eos_token_id");
    p.unk = id("unknown_token_id");
    p.pad = id("padding_token_id");
    p.sep = id("seperator_token_id");
    p.eot = id("eot_token_id");
    p.eom = id("eom_token_id");
    const bool spm = p.model == "llama";
    p.add_bos = ml.get_bool("tokenizer.ggml.add_bos_token", spm);
    p.add_eos = ml.get_bool("tokenizer.ggml.add_eos_token", false);
    p.add_space_prefix = ml.get_bool("tokenizer.ggml.add_space_prefix", spm);
    return std::make_unique<llama_vocab>(std::move(p));
}

std::unique_ptr<model> load_model(const std::string &path) {
    const auto t0 = std::chrono::steady_clock::now();
    auto m = std::make_unique<model>();
    m->loader = std::make_unique<model_loader>(path);
    model_loader &ml = *m->loader;

    m->hp.arch = ml.get_str("general.architecture");
    m->arch = find_arch(m->hp.arch);
    if (!m->arch) {
        std::string list;
        for (const auto &a : supported_archs()) list += (list.empty() ? "" : ", ") + a;
        throw std::runtime_error("unknown model architecture '" + m->hp.arch + "' (supported: " + list + ")");
    }
    m->arch->load_hparams(ml, m->hp);
    const std::string act = ml.get_str(pinfer_keys::FFN_ACT, ffn_act_name(m->hp.act));
    if (!ffn_act_from_name(act, &m->hp.act)) throw std::runtime_error("unknown FFN activation '" + act + "' in " + pinfer_keys::FFN_ACT);
    validate_hparams(ml, m->hp);  // before anything is sized by them

    prepare_sparse_tensors(ml, m->hp);  // PowerInfer files: rebuild ffn_down from ffn_down_t
    m->vocab = load_vocab(ml);
    m->hp.n_vocab = (uint32_t)m->vocab->n_tokens();
    m->chat_template = ml.get_str("tokenizer.chat_template", "");

    ggml_init_params ip = {(2 * ml.n_tensors() + 16) * ggml_tensor_overhead(), nullptr, true};  // room for split parts
    m->ctx = ggml_init(ip);
    if (!m->ctx) throw std::runtime_error("out of memory");
    m->arch->load_tensors(ml, *m);
    m->n_params = ml.params_used();  // fused tensors split into row ranges count once
    m->n_bytes = ml.bytes_used();

    const std::string name = ml.get_str("general.name", "");
    m->desc = m->hp.arch + " " + std::to_string(m->hp.n_layer) + "L " + std::to_string(m->hp.n_embd) + "d" +
              (name.empty() ? "" : " (" + name + ")") + ", " + std::to_string(m->n_params / 1000000) + "M params, " +
              std::to_string(m->n_bytes >> 20) + " MiB, ffn " + ffn_act_name(m->hp.act);
    load_sparse_meta(ml, *m);  // predictors, down_t, freqs, thresholds, placements
    validate_model(*m);
    m->t_load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return m;
}

}  // namespace pinfer
