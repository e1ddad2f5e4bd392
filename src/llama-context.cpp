#include "llama-context.h"
#include "llama-model-validate.h"
#include "llama-threads.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace pinfer {

static uint32_t pick_n_ctx(const model &m, uint32_t n_ctx) {
    if (n_ctx) return n_ctx;
    return m.hp.n_ctx_train ? std::min<uint32_t>(m.hp.n_ctx_train, 4096) : 4096;
}

context::context(const model &m, context_params p)
    : model_(m), params_(p), kv_(m.hp, pick_n_ctx(m, p.n_ctx), p.type_kv) {
    ffn_.mode = resolve_sparse_mode(m, p.sparse);  // throws naming what the file lacks
    if (ffn_.mode != sparse_mode::OFF) {  // predictor mode reads gate and up by rows of the same neurons: bundled
        const bool pred = ffn_.mode == sparse_mode::PREDICTOR;
        ffn_.bundles = m.prepare_sparse_weights(!pred, pred);
    }
    ffn_.stats = p.sparse_stats || p.sparse_verify;
    ffn_.verify = p.sparse_verify;
    ffn_.observe = p.ffn_observe;
    if (p.sparse_verify) kv_dense_ = std::make_unique<kv_cache>(m.hp, kv_.n_ctx, p.type_kv);
    reset_sparse_stats();
    if (params_.n_batch == 0) params_.n_batch = 512;
    params_.n_threads = pick_n_threads(params_.n_threads, "pinfer");
    tp_ = ggml_threadpool_new(params_.n_threads);
    if (!tp_) throw std::runtime_error("cannot start " + std::to_string(params_.n_threads) + " compute threads");
    galloc_ = ggml_gallocr_new();
    // headers for every node of the largest graph: generous per layer
    const size_t max_nodes = 64 + (size_t)m.hp.n_layer * 96;
    arena_.resize(ggml_graph_overhead() + max_nodes * ggml_tensor_overhead() + (1 << 16));
}

context::~context() {
    ggml_gallocr_free(galloc_);
    ggml_threadpool_free(tp_);
}

void context::truncate(uint32_t n_keep) {
    if (n_keep < kv_.n_past) kv_.n_past = n_keep;
    if (kv_dense_ && n_keep < kv_dense_->n_past) kv_dense_->n_past = n_keep;
}

void context::reset_sparse_stats() {
    stats_.assign(model_.hp.n_layer, sparse_layer_stats());
    verify_ = verify_stats();
    if (params_.ffn_observe) observer_.reset((int)model_.hp.n_layer, (int)model_.hp.n_ff);
}

float *context::logits(int i) {
    if (i < 0) i += n_logits_;
    if (i < 0 || i >= n_logits_) return nullptr;
    return logits_.data() + (size_t)i * model_.hp.n_vocab;
}

void context::decode(const int32_t *tokens, int n, bool all_logits) {
    if (n <= 0) throw std::runtime_error("decode: no tokens");
    if ((uint64_t)kv_.n_past + n > kv_.n_ctx)
        throw std::runtime_error("context is full: " + std::to_string(kv_.n_past) + " cached + " + std::to_string(n) +
                                 " new tokens exceed n_ctx = " + std::to_string(kv_.n_ctx));
    const int32_t n_vocab = (int32_t)model_.hp.n_vocab;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            throw std::runtime_error("token id " + std::to_string(tokens[i]) + " out of range [0, " + std::to_string(n_vocab) + ")");
    const auto t0 = std::chrono::steady_clock::now();
    n_logits_ = all_logits ? n : 1;
    logits_.resize((size_t)n_logits_ * n_vocab);
    for (int done = 0; done < n;) {
        const int nb = std::min<int>((int)params_.n_batch, n - done);
        const bool last = done + nb == n;
        const int n_out = all_logits ? nb : (last ? 1 : 0);
        float *out = all_logits ? logits_.data() + (size_t)done * n_vocab : logits_.data();
        decode_batch(tokens + done, nb, n_out, out, kv_, &ffn_);
        check_logits_finite(out, (size_t)n_out * n_vocab);  // NaN/Inf weights show here, not as garbage text
        if (kv_dense_) {  // verify: the same batch through the dense graph, compared row by row
            logits_dense_.resize((size_t)std::max(n_out, 1) * n_vocab);
            decode_batch(tokens + done, nb, n_out, logits_dense_.data(), *kv_dense_, nullptr);
            for (int r = 0; r < n_out; r++) {
                const float *a = out + (size_t)r * n_vocab, *b = logits_dense_.data() + (size_t)r * n_vocab;
                int ia = 0, ib = 0;
                for (int32_t j = 0; j < n_vocab; j++) {
                    verify_.max_abs_diff = std::max(verify_.max_abs_diff, (double)fabsf(a[j] - b[j]));
                    verify_.max_abs_dense = std::max(verify_.max_abs_dense, (double)fabsf(b[j]));
                    if (a[j] > a[ia]) ia = j;
                    if (b[j] > b[ib]) ib = j;
                }
                verify_.n_logits++;
                verify_.n_argmax_agree += ia == ib;
            }
        }
        done += nb;
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (n > 1) { tm.t_prompt_ms += ms; tm.n_prompt += n; }
    else { tm.t_eval_ms += ms; tm.n_eval += n; }
}

void context::decode_batch(const int32_t *tokens, int n, int n_outputs, float *out, kv_cache &kv, ffn_build *fb) {
    ggml_init_params ip = {arena_.size(), arena_.data(), true};
    ggml_context *ctx = ggml_init(ip);
    if (!ctx) throw std::runtime_error("out of memory");
    graph_inputs in;
    in.n_tokens = n;
    in.pos0 = (int)kv.n_past;
    in.n_kv = in.pos0 + n;
    in.n_outputs = n_outputs > 0 ? n_outputs : 1;  // a prompt chunk without outputs still computes one
    in.tokens = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n);
    in.pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n);
    in.kq_mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, in.n_kv, n);
    for (ggml_tensor *t : {in.tokens, in.pos, in.kq_mask}) ggml_set_input(t);
    if (fb) fb->probes.assign(model_.hp.n_layer, ffn_probe());
    in.ffn = fb;

    ggml_cgraph *gf = ggml_new_graph_custom(ctx, 64 + (size_t)model_.hp.n_layer * 80);
    ggml_tensor *logits = model_.arch->build_graph(ctx, gf, model_, kv, in);
    ggml_set_output(logits);
    ggml_build_forward_expand(gf, logits);
    if (fb)  // probes off the logits' path (the observer's act, verify's true set) must run too
        for (const ffn_probe &pr : fb->probes)
            for (ggml_tensor *t : {pr.idx, pr.idx_true, pr.act, pr.up})
                if (t) ggml_build_forward_expand(gf, t);
    if (params_.prec_high)  // every weight product, dense or sparse (the predictor's too)
        for (int i = 0; i < ggml_graph_n_nodes(gf); i++) {
            ggml_tensor *t = ggml_graph_node(gf, i);
            if (t->op == GGML_OP_MUL_MAT || t->op == GGML_OP_MUL_MAT_SPARSE_ROWS || t->op == GGML_OP_SPARSE_DOWN)
                ggml_set_prec(t, GGML_PREC_HIGH);
        }
    if (!ggml_gallocr_alloc_graph(galloc_, gf)) {
        ggml_free(ctx);
        throw std::runtime_error("out of memory planning the compute buffer");
    }
    memcpy(in.tokens->data, tokens, sizeof(int32_t) * n);
    int32_t *pos = (int32_t *)in.pos->data;
    for (int i = 0; i < n; i++) pos[i] = in.pos0 + i;
    float *mask = (float *)in.kq_mask->data;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < in.n_kv; j++) mask[(size_t)i * in.n_kv + j] = j <= in.pos0 + i ? 0.0f : -INFINITY;

    const int rc = ggml_graph_compute(gf, tp_);
    if (rc != 0) {
        ggml_free(ctx);
        throw std::runtime_error("graph compute failed (code " + std::to_string(rc) + ")");
    }
    kv.n_past += n;
    if (fb && fb->stats) accumulate_ffn_stats(model_, *fb, stats_);
    if (fb && fb->observe) accumulate_ffn_observer(model_, *fb, observer_);
    if (n_outputs > 0) memcpy(out, logits->data, sizeof(float) * (size_t)n_outputs * model_.hp.n_vocab);
    ggml_free(ctx);
}

}  // namespace pinfer
