#include "llama-model.h"

#include <chrono>
#include <stdexcept>

#include "llama-model-loader.h"
#include "llama-sparse-meta.h"
#include "llama-vocab.h"
#include "llama-weight-pages.h"

namespace pinfer {

model::model() = default;
model::~model() {
    ffn_pages_.reset();
    ggml_free(ctx);
}

size_t model::move_ffn_to_huge_pages(size_t *huge) const {
    std::lock_guard<std::mutex> lock(pages_mu_);
    if (!ffn_pages_) {
        std::vector<ggml_tensor *> ts;
        for (const layer_weights &l : layers)
            for (ggml_tensor *t : {l.ffn_gate, l.ffn_up, l.ffn_down, l.ffn_down_t, l.fc1, l.fc2})
                if (t) ts.push_back(t);
        auto pages = std::make_unique<weight_pages>();
        pages->adopt(ts);
        ffn_pages_ = std::move(pages);
    }
    if (huge) *huge = ffn_pages_->huge_bytes();
    return ffn_pages_->bytes();
}

size_t model::ffn_page_bytes(size_t *huge) const {
    std::lock_guard<std::mutex> lock(pages_mu_);
    if (huge) *huge = ffn_pages_ ? ffn_pages_->huge_bytes() : 0;
    return ffn_pages_ ? ffn_pages_->bytes() : 0;
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
    auto id = [&](const char *key) { return (int32_t)ml.get_int(std::string("tokenizer.ggml.") + key, -1); };
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
    const std::string act = ml.get_str("pinfer.ffn_act", ffn_act_name(m->hp.act));
    if (!ffn_act_from_name(act, &m->hp.act)) throw std::runtime_error("unknown FFN activation '" + act + "' in pinfer.ffn_act");

    prepare_sparse_tensors(ml, m->hp);  // PowerInfer files: rebuild ffn_down from ffn_down_t
    m->vocab = load_vocab(ml);
    m->hp.n_vocab = (uint32_t)m->vocab->n_tokens();
    m->chat_template = ml.get_str("tokenizer.chat_template", "");

    ggml_init_params ip = {(ml.n_tensors() + 16) * ggml_tensor_overhead(), nullptr, true};
    m->ctx = ggml_init(ip);
    if (!m->ctx) throw std::runtime_error("out of memory");
    m->arch->load_tensors(ml, *m);
    for (ggml_tensor *t = ggml_get_first_tensor(m->ctx); t; t = ggml_get_next_tensor(m->ctx, t))
        m->n_params += (uint64_t)ggml_nelements(t);
    m->n_bytes = ml.bytes_used();

    const std::string name = ml.get_str("general.name", "");
    m->desc = m->hp.arch + " " + std::to_string(m->hp.n_layer) + "L " + std::to_string(m->hp.n_embd) + "d" +
              (name.empty() ? "" : " (" + name + ")") + ", " + std::to_string(m->n_params / 1000000) + "M params, " +
              std::to_string(m->n_bytes >> 20) + " MiB, ffn " + ffn_act_name(m->hp.act);
    load_sparse_meta(ml, *m);  // predictors, down_t, freqs, thresholds, placements
    m->t_load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return m;
}

}  // namespace pinfer
