#include "llama-context.h"
#include "llama-model-validate.h"
#include "llama-threads.h"

#include "ggml-backend-sim.h"
#ifdef PINFER_CUDA
#include "ggml-backend-cuda.h"
#endif

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

// The device a context runs on. "auto" is the GPU when this build has CUDA and
// a device answers, else the CPU -- saying so once when CUDA is built in but
// unusable (a CPU-only build has nothing to explain).
static std::string resolve_device(const std::string &d, std::string &notice) {
#ifdef PINFER_CUDA
    static const char *known = "auto, cpu, sim, cuda";
#else
    static const char *known = "auto, cpu, sim";
    if (d == "cuda") throw std::runtime_error("this build has no CUDA backend (install with -C cmake.define.PINFER_CUDA=ON)");
#endif
    if (d != "auto" && d != "cpu" && d != "sim" && d != "cuda")
        throw std::runtime_error("unknown device '" + d + "' (this build has: " + known + ")");
    if (d != "auto") return d;
#ifdef PINFER_CUDA
    if (ggml_backend_cuda_device_count() > 0) return "cuda";
    notice = std::string(ggml_backend_cuda_unavailable_reason()) + ": running on the CPU";  // "no CUDA driver or device (...)"
#else
    (void)notice;
#endif
    return "cpu";
}

static constexpr uint64_t SIM_DEFAULT_MEMORY = 24ull << 30;  // an RTX 4090's

// What the device moved (both device backends count the same things).
static void device_counters(ggml_backend_t dev, ggml_backend_sim_counters *c) {
#ifdef PINFER_CUDA
    if (ggml_backend_is_cuda(dev)) {
        ggml_backend_cuda_get_counters(dev, c);
        return;
    }
#endif
    ggml_backend_sim_get_counters(dev, c);
}

context::context(const model &m, context_params p) : model_(m), params_(p) {
    const uint32_t n_ctx = pick_n_ctx(m, p.n_ctx);
    ffn_.mode = resolve_sparse_mode(m, p.sparse);  // throws naming what the file lacks
    const bool pred = ffn_.mode == sparse_mode::PREDICTOR;
    if (ffn_.mode != sparse_mode::OFF)  // predictor mode reads gate and up by rows of the same neurons: bundled
        ffn_.bundles = m.prepare_sparse_weights(!pred, pred);
    ffn_.stats = p.sparse_stats || p.sparse_verify;
    ffn_.verify = p.sparse_verify;
    ffn_.observe = p.ffn_observe;
    if (params_.n_batch == 0) params_.n_batch = 512;
    params_.n_threads = pick_n_threads(params_.n_threads, "pinfer");

    // The device and its layer plan, decided before anything is allocated for it.
    std::string auto_notice;
    const std::string device = resolve_device(p.device, auto_notice);
#ifdef PINFER_CUDA
    uint64_t cuda_memory = 0;  // the card's free memory: what the plan may fill
    if (device == "cuda") {
        if (ggml_backend_cuda_device_count() == 0)
            throw std::runtime_error(std::string("--device cuda: ") + ggml_backend_cuda_unavailable_reason());
        ggml_backend_cuda_device_info info;
        if (!ggml_backend_cuda_get_device_info(0, &info)) throw std::runtime_error("--device cuda: cannot query device 0");
        cuda_memory = info.free_bytes;
    }
#else
    const uint64_t cuda_memory = 0;
#endif
    if (device == "cpu" && p.n_gpu_layers > 0 && auto_notice.empty())
        notice_ = "no device chosen (--device sim|cuda): the " + std::to_string(p.n_gpu_layers) +
                  " layers asked for run on the CPU";
    if ((device == "sim" || device == "cuda") && p.n_gpu_layers != 0) {
        if (ffn_.stats || ffn_.observe)
            throw std::runtime_error("sparse statistics, verification and the activation observer run on the CPU only: "
                                     "drop them or use --device cpu");
        const uint64_t mem = device == "cuda" ? cuda_memory : p.sim_memory ? p.sim_memory : SIM_DEFAULT_MEMORY;
        plan_request r;
        r.n_gpu_layers = p.n_gpu_layers;
        r.budget_bytes = p.vram_budget;
        r.device_bytes = mem;
        r.n_ctx = n_ctx;
        r.n_batch = params_.n_batch;
        r.type_kv = p.type_kv;
        r.mode = ffn_.mode;
        r.bundles = pred && !ffn_.bundles.empty();
        r.whole_layers = p.offload_layers;
        r.head = !params_.embeddings;  // embeddings end before the output matrix
        plan_ = make_hybrid_plan(m, r);  // throws when the budget exceeds the device
        notice_ = plan_.notice;
        if (plan_.any() && device == "cuda") {
#ifdef PINFER_CUDA
            dev_ = ggml_backend_cuda_init(0, (size_t)std::min<uint64_t>(mem, plan_.budget_bytes));
            if (!dev_) throw std::runtime_error(std::string("--device cuda: ") + ggml_backend_last_error());
#endif
        } else if (plan_.any()) {
            ggml_backend_sim_params sp = ggml_backend_sim_default_params();
            sp.memory_bytes = (size_t)std::min<uint64_t>(mem, plan_.budget_bytes);
            sp.n_threads = std::max(1, p.sim_threads);
            sp.copy_latency_us = p.sim_copy_latency_us;
            sp.copy_ns_per_byte = p.sim_copy_ns_per_byte;
            dev_ = ggml_backend_sim_init(sp);
            if (!dev_) throw std::runtime_error(ggml_backend_last_error());
        }
    }
    if (!auto_notice.empty()) notice_ = auto_notice;
    cpu_ = ggml_backend_cpu_init(params_.n_threads);
    if (!cpu_) {
        ggml_backend_free(dev_);
        throw std::runtime_error(ggml_backend_last_error());
    }
    try {
        std::vector<ggml_backend_buffer_type_t> kv_buft;
        if (dev_) {
            dw_ = std::make_unique<device_weights>(m, plan_, dev_, ffn_.bundles);
            gdev_ = graph_device{dev_, &plan_, dw_.get(), std::max(0, p.prompt_stream_min)};
            for (const layer_plan &lp : plan_.layers)
                kv_buft.push_back(lp.on_device ? ggml_backend_get_default_buffer_type(dev_) : nullptr);
        }
        kv_ = std::make_unique<kv_cache>(m.hp, n_ctx, p.type_kv, kv_buft);
        if (p.sparse_verify) kv_dense_ = std::make_unique<kv_cache>(m.hp, n_ctx, p.type_kv);
        ggml_backend_t bes[2] = {dev_, cpu_};
        sched_ = dev_ ? ggml_backend_sched_new(bes, 2) : ggml_backend_sched_new(&cpu_, 1);
        if (!sched_) throw std::runtime_error(ggml_backend_last_error());
    } catch (...) {
        kv_.reset();
        kv_dense_.reset();
        dw_.reset();
        ggml_backend_free(dev_);
        ggml_backend_free(cpu_);
        throw;
    }
    reset_sparse_stats();
    // headers for every node of the largest graph: generous per layer
    const size_t max_nodes = 64 + (size_t)m.hp.n_layer * 112;
    arena_.resize(ggml_graph_overhead() + max_nodes * ggml_tensor_overhead() + (1 << 16));
}

context::~context() {
    drop_graph();
    ggml_backend_sched_free(sched_);
    kv_.reset();
    kv_dense_.reset();
    dw_.reset();
    ggml_backend_free(dev_);
    ggml_backend_free(cpu_);
}

void context::truncate(uint32_t n_keep) { seq_rm(0, (int32_t)std::min<uint32_t>(n_keep, INT32_MAX), -1); }

void context::seq_rm(int seq, int32_t p0, int32_t p1) {
    if (seq >= KV_MAX_SEQ) throw std::runtime_error("sequence id " + std::to_string(seq) + " out of range");
    kv_->seq_rm(seq, p0, p1);
    if (kv_dense_) kv_dense_->seq_rm(seq, p0, p1);
}

void context::seq_cp(int src, int dst, int32_t p0, int32_t p1) {
    if (src < 0 || src >= KV_MAX_SEQ || dst < 0 || dst >= KV_MAX_SEQ)
        throw std::runtime_error("sequence ids must be in [0, " + std::to_string(KV_MAX_SEQ) + ")");
    kv_->seq_cp(src, dst, p0, p1);
    if (kv_dense_) kv_dense_->seq_cp(src, dst, p0, p1);
}

void context::reset_sparse_stats() {
    stats_.assign(model_.hp.n_layer, sparse_layer_stats());
    verify_ = verify_stats();
    if (params_.ffn_observe) observer_.reset((int)model_.hp.n_layer, (int)model_.hp.n_ff);
}

int context::n_out_dim() const { return (int)(params_.embeddings ? model_.hp.n_embd : model_.hp.n_vocab); }

float *context::logits(int i) {
    if (i < 0) i += n_logits_;
    if (i < 0 || i >= n_logits_) return nullptr;
    return logits_.data() + (size_t)i * n_out_dim();
}

float *context::logits_ith(int i) {
    if (i < 0) i += (int)out_row_.size();
    if (i < 0 || i >= (int)out_row_.size() || out_row_[(size_t)i] < 0) return nullptr;
    return logits(out_row_[(size_t)i]);
}

void context::decode(const int32_t *tokens, int n, bool all_logits) {
    if (n <= 0) throw std::runtime_error("decode: no tokens");
    const uint32_t n_past = this->n_past();
    if ((uint64_t)n_past + n > kv_->n_ctx)
        throw std::runtime_error("context is full: " + std::to_string(n_past) + " cached + " + std::to_string(n) +
                                 " new tokens exceed n_ctx = " + std::to_string(kv_->n_ctx));
    std::vector<int32_t> pos((size_t)n), seq((size_t)n, 0);
    std::vector<int8_t> out((size_t)n, all_logits ? 1 : 0);
    for (int i = 0; i < n; i++) pos[(size_t)i] = (int32_t)n_past + i;
    out[(size_t)n - 1] = 1;
    decode_seqs(tokens, pos.data(), seq.data(), out.data(), n);
}

void context::decode_seqs(const int32_t *tokens, const int32_t *pos, const int32_t *seq, const int8_t *output, int n) {
    if (n <= 0) throw std::runtime_error("decode: no tokens");
    const int32_t n_vocab = (int32_t)model_.hp.n_vocab;
    for (int i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            throw std::runtime_error("token id " + std::to_string(tokens[i]) + " out of range [0, " + std::to_string(n_vocab) + ")");
        if (seq[i] < 0 || seq[i] >= KV_MAX_SEQ)
            throw std::runtime_error("sequence id " + std::to_string(seq[i]) + " out of range [0, " + std::to_string(KV_MAX_SEQ) + ")");
        if (pos[i] < 0) throw std::runtime_error("position " + std::to_string(pos[i]) + " is negative");
        if (model_.hp.n_pos_max && (uint32_t)pos[i] >= model_.hp.n_pos_max)
            throw std::runtime_error("position " + std::to_string(pos[i]) + " is past the model's " +
                                     std::to_string(model_.hp.n_pos_max) + " learned position embeddings");
    }
    const auto t0 = std::chrono::steady_clock::now();
    const size_t dim = (size_t)n_out_dim();
    out_row_.assign((size_t)n, -1);
    n_logits_ = 0;
    for (int i = 0; i < n; i++)
        if (output[i]) out_row_[(size_t)i] = n_logits_++;
    logits_.resize((size_t)std::max(n_logits_, 1) * dim);
    for (int done = 0; done < n;) {
        // the largest piece of the rest (up to n_batch) that fits one run of free cells
        int nb = std::min<int>((int)params_.n_batch, n - done);
        int cell0 = kv_->find_run(nb);
        while (cell0 < 0 && nb > 1) cell0 = kv_->find_run(nb = (nb + 1) / 2);
        if (cell0 < 0)
            throw std::runtime_error("the KV cache is full: all " + std::to_string(kv_->n_ctx) +
                                     " cells are in use (free a sequence or raise n_ctx)");
        ubatch ub{tokens + done, pos + done, seq + done, nb, cell0, {}};
        for (int i = 0; i < nb; i++)
            if (output[done + i]) ub.out_rows.push_back(i);
        float *out = logits_.data() + (ub.out_rows.empty() ? 0 : (size_t)out_row_[(size_t)(done + ub.out_rows[0])] * dim);
        for (kv_cache *kv : {kv_.get(), kv_dense_.get()}) {
            if (!kv) continue;
            for (int i = 0; i < nb; i++) {
                kv_cell &c = kv->cells[(size_t)(cell0 + i)];
                c.pos = ub.pos[i];
                c.seqs = 1ull << ub.seq[i];
            }
        }
        try {
            decode_checked(ub, out);
        } catch (...) {
            for (kv_cache *kv : {kv_.get(), kv_dense_.get()})
                if (kv)
                    for (int i = 0; i < nb; i++) kv->cells[(size_t)(cell0 + i)] = kv_cell();
            throw;
        }
        done += nb;
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (n > 1) { tm.t_prompt_ms += ms; tm.n_prompt += n; }
    else { tm.t_eval_ms += ms; tm.n_eval += n; }
}

void context::decode_checked(const ubatch &ub, float *out) {
    const int32_t n_vocab = (int32_t)model_.hp.n_vocab;
    const int n_out = (int)ub.out_rows.size();
    decode_batch(ub, out, *kv_, &ffn_);
    check_logits_finite(out, (size_t)n_out * n_out_dim());  // NaN/Inf weights show here, not as garbage text
    if (!kv_dense_) return;
    // verify: the same batch through the dense graph, compared row by row
    logits_dense_.resize((size_t)std::max(n_out, 1) * n_out_dim());
    decode_batch(ub, logits_dense_.data(), *kv_dense_, nullptr);
    if (params_.embeddings) return;
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

// Small batches (single-token decodes above all) reuse their graph and its
// plan while their shape and the padded number of visible cells stay the same:
// only the KV store views move. The padding is masked (-inf) and reads
// zero-filled or stale, finite cache rows.
static constexpr int KV_PAD = 32;
static constexpr int GRAPH_CACHE_MAX_TOKENS = 16;

void context::drop_graph() {
    if (gc_.ctx) ggml_free(gc_.ctx);
    gc_ = graph_cache();
}

void context::build_graph(const ubatch &ub, int n_kv, bool by_ids, kv_cache &kv, ffn_build *fb, bool keep) {
    drop_graph();
    const int n = ub.n, n_outputs = (int)ub.out_rows.size();
    ggml_init_params ip = {arena_.size(), arena_.data(), true};
    ggml_context *ctx = ggml_init(ip);
    if (!ctx) throw std::runtime_error("out of memory");
    graph_inputs in;
    in.n_tokens = n;
    in.cell0 = ub.cell0;
    in.n_kv = n_kv;
    in.n_outputs = n_outputs > 0 ? n_outputs : 1;  // a prompt chunk without outputs still computes one
    in.tokens = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n);
    in.pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n);
    in.kq_mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, in.n_kv, n);
    for (ggml_tensor *t : {in.tokens, in.pos, in.kq_mask}) ggml_set_input(t);
    // a second mask only where windowed and full layers mix (else the one mask has the window)
    const uint32_t n_swa = model_.hp.n_swa_layers();
    if (n_swa > 0 && n_swa < model_.hp.n_layer) {
        in.kq_mask_swa = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, in.n_kv, n);
        ggml_set_input(in.kq_mask_swa);
    }
    if (by_ids) {
        in.out_ids = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n_outputs);
        ggml_set_input(in.out_ids);
    }
    if (fb) fb->probes.assign(model_.hp.n_layer, ffn_probe());
    in.ffn = fb;
    in.dev = dev_ && &kv == kv_.get() ? &gdev_ : nullptr;  // the dense twin of --sparse-verify stays on the CPU
    in.kv_moving = &gc_.moving;

    ggml_cgraph *gf = ggml_new_graph_custom(ctx, 64 + (size_t)model_.hp.n_layer * 96);
    ggml_tensor *logits = model_.arch->build_graph(ctx, gf, model_, kv, in);
    if (params_.embeddings) {
        // every architecture ends with output x final-norm(x): keep the hidden state
        if (logits->op != GGML_OP_MUL_MAT || !logits->src[1])
            throw std::runtime_error(std::string("embeddings: the ") + model_.arch->name + " graph does not end in the output projection");
        logits = logits->src[1];
    }
    ggml_set_output(logits);
    ggml_build_forward_expand(gf, logits);
    if (fb)  // probes off the logits' path (the observer's act, verify's true set) must run too
        for (const ffn_probe &pr : fb->probes)
            for (ggml_tensor *t : {pr.idx, pr.idx_true, pr.act, pr.up, pr.experts, pr.expert_act})
                if (t) ggml_build_forward_expand(gf, t);
    if (params_.prec_high)  // every weight product, dense or sparse (the predictor's too)
        for (int i = 0; i < ggml_graph_n_nodes(gf); i++) {
            ggml_tensor *t = ggml_graph_node(gf, i);
            if (ggml_op_takes_prec(t->op)) ggml_set_prec(t, GGML_PREC_HIGH);
        }
    gc_.ctx = ctx;
    if (!ggml_backend_sched_alloc_graph(sched_, gf)) {
        drop_graph();
        throw std::runtime_error(std::string("out of memory planning the compute buffer: ") + ggml_backend_last_error());
    }
    gc_.gf = gf;
    gc_.logits = logits;
    gc_.tokens = in.tokens;
    gc_.pos = in.pos;
    gc_.kq_mask = in.kq_mask;
    gc_.kq_mask_swa = in.kq_mask_swa;
    gc_.out_ids = in.out_ids;
    gc_.has_dev = in.dev != nullptr;
    gc_.n = n;
    gc_.n_outputs = n_outputs;
    gc_.by_ids = by_ids;
    gc_.n_kv = n_kv;
    gc_.kv = &kv;
    gc_.fb = fb;
    gc_.reusable = keep;
}

// The KQ mask of a batch over n_kv cache cells, one kq_mask_value per (cell,
// token); window: the sliding window of the layers that read it (0: none).
void context::set_kq_mask(ggml_tensor *mask, const ubatch &ub, int n_kv, const kv_cache &kv, uint32_t window) {
    mask_buf_.resize((size_t)ub.n * n_kv);
    for (int i = 0; i < ub.n; i++)
        for (int j = 0; j < n_kv; j++)
            mask_buf_[(size_t)i * n_kv + j] = kq_mask_value(kv.cells[(size_t)j], ub.pos[i], ub.seq[i], window);
    ggml_backend_tensor_set(mask, mask_buf_.data(), 0, sizeof(float) * mask_buf_.size());
}

void context::decode_batch(const ubatch &ub, float *out, kv_cache &kv, ffn_build *fb) {
    using clock = std::chrono::steady_clock;
    const auto t_begin = clock::now();
    const int n = ub.n, n_outputs = (int)ub.out_rows.size();
    // outputs that are the batch's last rows are a view; any others are gathered by id
    bool by_ids = false;
    for (int r = 0; r < n_outputs; r++) by_ids |= ub.out_rows[(size_t)r] != n - n_outputs + r;
    // one shape repeats step after step; verify alternates two graphs, so it rebuilds
    const bool cacheable = n <= GRAPH_CACHE_MAX_TOKENS && !kv_dense_ && params_.graph_cache;
    const uint32_t end = std::max<uint32_t>(kv.used_end(), (uint32_t)(ub.cell0 + n));
    const int n_kv = cacheable ? (int)std::min<uint32_t>(kv.n_ctx, (end + KV_PAD - 1) / KV_PAD * KV_PAD) : (int)end;
    if (gc_.reusable && cacheable && gc_.n == n && gc_.n_outputs == n_outputs && gc_.by_ids == by_ids &&
        gc_.n_kv == n_kv && gc_.kv == &kv && gc_.fb == fb) {
        kv_view_move(gc_.moving, ub.cell0);
        graphs_reused_++;
    } else {
        build_graph(ub, n_kv, by_ids, kv, fb, cacheable);
        graphs_built_++;
    }
    // inputs through the buffer API: the same code whatever memory they are in
    ggml_backend_tensor_set(gc_.tokens, ub.tokens, 0, sizeof(int32_t) * n);
    ggml_backend_tensor_set(gc_.pos, ub.pos, 0, sizeof(int32_t) * n);
    if (by_ids) ggml_backend_tensor_set(gc_.out_ids, ub.out_rows.data(), 0, sizeof(int32_t) * n_outputs);
    set_kq_mask(gc_.kq_mask, ub, n_kv, kv, model_.hp.n_swa_layers() == model_.hp.n_layer ? model_.hp.n_swa : 0);
    if (gc_.kq_mask_swa) set_kq_mask(gc_.kq_mask_swa, ub, n_kv, kv, model_.hp.n_swa);

    ggml_backend_sim_counters c0{}, c1{};
    if (gc_.has_dev) device_counters(dev_, &c0);
    const auto t_compute = clock::now();
    const int rc = ggml_backend_sched_graph_compute(sched_, gc_.gf);
    const auto t_computed = clock::now();
    if (rc != 0) {
        drop_graph();
        throw std::runtime_error(std::string("graph compute failed: ") + ggml_backend_last_error());
    }
    if (gc_.has_dev) {
        device_counters(dev_, &c1);
        ggml_backend_sched_stats st;
        ggml_backend_sched_get_stats(sched_, &st);
        transfer_stats &x = xfer_[n == 1 ? 1 : 0];
        x.n_tokens += n;
        x.n_graphs++;
        x.bytes_h2d += c1.bytes_h2d - c0.bytes_h2d;
        x.bytes_d2h += c1.bytes_d2h - c0.bytes_d2h;
        x.bytes_pageable += c1.bytes_pageable - c0.bytes_pageable;
        x.n_copies += c1.n_copies - c0.n_copies;
        x.n_syncs += c1.n_synchronize - c0.n_synchronize;
        x.n_waits += (uint64_t)st.n_event_waits;
    }
    if (fb && fb->stats) accumulate_ffn_stats(model_, *fb, stats_);
    if (fb && fb->observe) accumulate_ffn_observer(model_, *fb, observer_);
    if (n_outputs > 0) ggml_backend_tensor_get(gc_.logits, out, 0, sizeof(float) * (size_t)n_outputs * n_out_dim());
    if (!gc_.reusable) drop_graph();
    if (n == 1) {
        const auto t_end = clock::now();
        tm.t_host_ms += std::chrono::duration<double, std::milli>((t_compute - t_begin) + (t_end - t_computed)).count();
        tm.n_host++;
    }
}

}  // namespace pinfer
