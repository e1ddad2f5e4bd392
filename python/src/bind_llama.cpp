// Low-level Python classes over the C API in pinfer.h: Model and Context.
// pinfer.Llama (python/pinfer/llama.py) builds on them and on bind_sampling's
// Sampler.
//
// Ownership: the C handles live in shared_ptr holders. A Context shares the
// model's holder, and every logits view shares its context's holder, so
// close() on any Python object only drops that object's reference: nothing is
// freed while something that points into it is still reachable.
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nanobind/ndarray.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bind.h"
#include "pinfer.h"

namespace {

std::string last_error(const char *what) {
    const char *e = pinfer_last_error();
    return std::string(what) + (e && *e ? std::string(": ") + e : std::string());
}

struct model_holder {
    pinfer_model *p = nullptr;
    ~model_holder() {
        if (p) pinfer_model_free(p);
    }
};

struct context_holder {
    std::shared_ptr<model_holder> model;  // the context reads the model's weights
    pinfer_context *p = nullptr;
    std::mutex busy;       // one decode at a time; others get an error, not a wait
    int32_t n_last = 0;    // tokens in the last decode
    bool last_all = false; // whether it kept logits for all of them
    bool last_batch = false;  // the last decode was decode_batch (outputs by batch index)
    ~context_holder() {
        if (p) pinfer_context_free(p);
    }
};

class Model {
  public:
    explicit Model(const std::filesystem::path &path) {
        const std::string s = path.string();
        // Tell "cannot open" (OSError, with errno) apart from "not a valid model" (ValueError).
        FILE *f = fopen(s.c_str(), "rb");
        if (!f) {
            PyErr_SetFromErrnoWithFilename(PyExc_OSError, s.c_str());
            throw nb::python_error();
        }
        fclose(f);
        pinfer_model *m;
        {
            nb::gil_scoped_release nogil;
            m = pinfer_model_load(s.c_str());
        }
        if (!m) throw nb::value_error(last_error(("cannot load model '" + s + "'").c_str()).c_str());
        h_ = std::make_shared<model_holder>();
        h_->p = m;
        path_ = s;
    }

    const std::shared_ptr<model_holder> &holder() const {
        if (!h_) throw nb::value_error("the model is closed");
        return h_;
    }
    const pinfer_model *get() const { return holder()->p; }
    void close() { h_.reset(); }
    bool closed() const { return !h_; }
    const std::string &path() const { return path_; }

    void check_token(int64_t t) const {
        const int32_t n = pinfer_model_n_vocab(get());
        if (t < 0 || t >= n)
            throw nb::value_error(("token id " + std::to_string(t) + " is out of range [0, " + std::to_string(n) + ")")
                                      .c_str());
    }

    std::vector<int32_t> tokenize(nb::handle text, bool add_special, bool parse_special) const {
        std::string s;
        if (nb::isinstance<nb::bytes>(text)) {
            nb::bytes b = nb::borrow<nb::bytes>(text);
            s.assign(b.c_str(), b.size());
        } else if (nb::isinstance<nb::str>(text)) {
            s = nb::cast<std::string>(text);
        } else {
            throw nb::type_error("text must be str or bytes");
        }
        if (s.size() > (size_t)INT32_MAX - 16) throw nb::value_error("text is too long to tokenize");
        const pinfer_model *m = get();
        std::vector<int32_t> out(s.size() + 16);
        int32_t n;
        {
            nb::gil_scoped_release nogil;
            n = pinfer_tokenize(m, s.data(), (int32_t)s.size(), out.data(), (int32_t)out.size(), add_special,
                                parse_special);
            if (n < 0 && n != INT32_MIN) {
                out.resize((size_t)-n);
                n = pinfer_tokenize(m, s.data(), (int32_t)s.size(), out.data(), (int32_t)out.size(), add_special,
                                    parse_special);
            }
        }
        if (n < 0) throw nb::value_error(last_error("tokenization failed").c_str());
        out.resize((size_t)n);
        return out;
    }

    std::string piece(int32_t t, bool special) const {
        check_token(t);
        char buf[256];
        int32_t n = pinfer_token_to_piece(get(), t, buf, (int32_t)sizeof buf, special);
        if (n >= 0) return std::string(buf, (size_t)n);
        std::string s((size_t)-n, '\0');
        n = pinfer_token_to_piece(get(), t, &s[0], (int32_t)s.size(), special);
        if (n < 0) throw nb::value_error(last_error("token_to_piece failed").c_str());
        s.resize((size_t)n);
        return s;
    }

    nb::bytes token_to_piece(int32_t t, bool special) const {
        std::string s = piece(t, special);
        return nb::bytes(s.data(), s.size());
    }

    nb::bytes detokenize(const std::vector<int32_t> &toks, bool special) const {
        std::string s;
        for (int32_t t : toks) s += piece(t, special);
        return nb::bytes(s.data(), s.size());
    }

    std::optional<std::string> meta(const std::string &key) const {
        const char *v = pinfer_model_meta_str(get(), key.c_str());
        if (!v) return std::nullopt;
        return std::string(v);
    }

    std::string apply_chat_template(const std::vector<std::pair<std::string, std::string>> &msgs,
                                    bool add_generation_prompt, std::optional<std::string> tmpl) const {
        std::vector<pinfer_chat_message> cm;
        for (auto &m : msgs) cm.push_back({m.first.c_str(), m.second.c_str()});
        const char *t = tmpl ? tmpl->c_str() : nullptr;
        std::string buf(4096, '\0');
        int32_t n = pinfer_chat_apply_template(get(), t, cm.data(), cm.size(), add_generation_prompt, &buf[0],
                                               (int32_t)buf.size());
        if (n < 0 && n != INT32_MIN) {
            buf.assign((size_t)-n, '\0');
            n = pinfer_chat_apply_template(get(), t, cm.data(), cm.size(), add_generation_prompt, &buf[0],
                                           (int32_t)buf.size());
        }
        if (n < 0) throw nb::value_error(last_error("cannot apply the chat template").c_str());
        buf.resize((size_t)n);
        return buf;
    }

  private:
    std::shared_ptr<model_holder> h_;
    std::string path_;
};

using tokens_array = nb::ndarray<const int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using logits_view = nb::ndarray<nb::numpy, float>;
using logits_in_arr = nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// Owner object for numpy views: a capsule holding a reference to the context.
nb::capsule context_capsule(const std::shared_ptr<context_holder> &h) {
    auto *ref = new std::shared_ptr<context_holder>(h);
    return nb::capsule(ref, [](void *p) noexcept { delete static_cast<std::shared_ptr<context_holder> *>(p); });
}

class Context {
  public:
    Context(Model &model, uint32_t n_ctx, uint32_t n_batch, int32_t n_threads, nb::handle type_kv,
            const std::string &sparse, bool sparse_stats, bool sparse_verify, bool ffn_observe,
            const std::string &precision, const std::string &device, int32_t n_gpu_layers, double vram_budget,
            double sim_memory, double sim_copy_latency_us, double sim_copy_ns_per_byte, int32_t sim_threads,
            int32_t prompt_stream_min, bool graph_cache, const std::string &offload, bool embeddings) {
        auto mh = model.holder();
        pinfer_context_params cp = pinfer_context_default_params();
#ifdef PINFER_CUDA
        if (device != "auto" && device != "cpu" && device != "sim" && device != "cuda")
            throw nb::value_error(("device must be 'auto', 'cpu', 'sim' or 'cuda', got '" + device + "'").c_str());
#else
        if (device != "auto" && device != "cpu" && device != "sim")
            throw nb::value_error(("device must be 'auto', 'cpu' or 'sim', got '" + device + "'" +
                                   (device == "cuda" ? " (this build has no CUDA backend)" : "")).c_str());
#endif
        device_ = device;
        cp.device = device_.c_str();
        if (n_gpu_layers < -1) throw nb::value_error("n_gpu_layers must be >= -1 (-1: all that fit)");
        cp.n_gpu_layers = n_gpu_layers;
        auto gib = [](double g, const char *what) {
            if (!(g >= 0) || g > 1e6) throw nb::value_error((std::string(what) + " must be a number of GiB >= 0").c_str());
            return (uint64_t)(g * 1073741824.0 + 0.5);
        };
        cp.vram_budget = gib(vram_budget, "vram_budget");
        cp.sim_memory = gib(sim_memory, "sim_memory");
        if (!(sim_copy_latency_us >= 0) || !(sim_copy_ns_per_byte >= 0))
            throw nb::value_error("sim_copy_latency_us and sim_copy_ns_per_byte must be >= 0");
        cp.sim_copy_latency_us = sim_copy_latency_us;
        cp.sim_copy_ns_per_byte = sim_copy_ns_per_byte;
        cp.sim_threads = sim_threads;
        cp.prompt_stream_min = prompt_stream_min;
        cp.graph_cache = graph_cache;
        if (offload != "neurons" && offload != "layers")
            throw nb::value_error(("offload must be 'neurons' or 'layers', got '" + offload + "'").c_str());
        cp.offload_layers = offload == "layers";
        cp.embeddings = embeddings;
        cp.precision = pinfer_precision_from_name(precision.c_str());
        if (cp.precision < 0) throw nb::value_error(("precision must be 'high' or 'fast', got '" + precision + "'").c_str());
        cp.sparse_mode = pinfer_sparse_mode_from_name(sparse.c_str());
        if (cp.sparse_mode < 0)
            throw nb::value_error(("sparse must be 'off', 'exact', 'predictor', 'threshold' or 'auto', got '" + sparse + "'").c_str());
        cp.sparse_flags = (sparse_stats ? PINFER_SPARSE_FLAG_STATS : 0u) | (sparse_verify ? PINFER_SPARSE_FLAG_VERIFY : 0u) |
                          (ffn_observe ? PINFER_SPARSE_FLAG_OBSERVE : 0u);
        cp.n_ctx = n_ctx;
        if (n_batch == 0) throw nb::value_error("n_batch must be positive");
        cp.n_batch = n_batch;
        cp.n_threads = n_threads;
        // 'f16' / 'f32', or the C API's codes 1 (F16) / 0 (F32).
        if (nb::isinstance<nb::str>(type_kv)) {
            const std::string t = nb::cast<std::string>(type_kv);
            if (t == "f16") cp.type_kv = 1;
            else if (t == "f32") cp.type_kv = 0;
            else throw nb::value_error(("type_kv must be 'f16' or 'f32', got '" + t + "'").c_str());
        } else if (nb::isinstance<nb::int_>(type_kv) && !nb::isinstance<nb::bool_>(type_kv)) {
            const long t = nb::cast<long>(type_kv);
            if (t != 0 && t != 1) throw nb::value_error("type_kv must be 1 (F16) or 0 (F32)");
            cp.type_kv = (int32_t)t;
        } else {
            throw nb::type_error("type_kv must be 'f16', 'f32', 1 (F16) or 0 (F32)");
        }
        pinfer_context *c = pinfer_context_new(mh->p, cp);
        if (!c) throw nb::value_error(last_error("cannot create a context").c_str());
        h_ = std::make_shared<context_holder>();
        h_->model = mh;
        h_->p = c;
        n_vocab_ = pinfer_model_n_vocab(mh->p);
        n_out_ = pinfer_n_outputs_dim(c);
    }

    const std::shared_ptr<context_holder> &holder() const {
        if (!h_) throw nb::value_error("the context is closed");
        return h_;
    }
    void close() { h_.reset(); }
    bool closed() const { return !h_; }

    void decode_raw(const int32_t *toks, size_t n, bool all_logits) {
        std::shared_ptr<context_holder> h = holder();  // stays alive even if closed meanwhile
        if (n == 0) throw nb::value_error("decode() needs at least one token");
        for (size_t i = 0; i < n; i++)
            if (toks[i] < 0 || toks[i] >= n_vocab_)
                throw nb::value_error(("token id " + std::to_string(toks[i]) + " at index " + std::to_string(i) +
                                       " is out of range [0, " + std::to_string(n_vocab_) + ")")
                                          .c_str());
        const uint32_t n_ctx = pinfer_n_ctx(h->p);
        const int32_t n_past = pinfer_n_past(h->p);
        if ((uint64_t)n_past + n > n_ctx)
            throw nb::value_error(("context full: " + std::to_string(n_past) + " cached + " + std::to_string(n) +
                                   " new tokens exceed n_ctx = " + std::to_string(n_ctx))
                                      .c_str());
        std::unique_lock<std::mutex> lock(h->busy, std::try_to_lock);
        if (!lock.owns_lock()) throw nb::value_error("the context is busy in another thread");
        int32_t rc;
        std::string err;
        {
            nb::gil_scoped_release nogil;
            rc = pinfer_decode(h->p, toks, (int32_t)n, all_logits);
            if (rc < 0) err = last_error("decode failed");
        }
        if (rc < 0) {
            h->n_last = 0;
            throw std::runtime_error(err);
        }
        h->n_last = (int32_t)n;
        h->last_all = all_logits;
        h->last_batch = false;
    }

    // A batch mixing sequences (pinfer_decode_batch); outputs by batch index (logits_ith).
    void decode_batch(const std::vector<int32_t> &toks, const std::vector<int32_t> &pos, const std::vector<int32_t> &seq,
                      const std::vector<int32_t> &output) {
        std::shared_ptr<context_holder> h = holder();
        const size_t n = toks.size();
        if (n == 0) throw nb::value_error("decode_batch() needs at least one token");
        if (pos.size() != n || seq.size() != n || output.size() != n)
            throw nb::value_error("decode_batch(): tokens, pos, seq_id and output must have the same length");
        std::vector<int8_t> out(n);
        for (size_t i = 0; i < n; i++) out[i] = output[i] != 0;
        std::unique_lock<std::mutex> lock(h->busy, std::try_to_lock);
        if (!lock.owns_lock()) throw nb::value_error("the context is busy in another thread");
        int32_t rc;
        std::string err;
        {
            nb::gil_scoped_release nogil;
            rc = pinfer_decode_batch(h->p, toks.data(), pos.data(), seq.data(), out.data(), (int32_t)n);
            if (rc < 0) err = last_error("decode failed");
        }
        h->n_last = rc < 0 ? 0 : (int32_t)n;
        h->last_batch = true;
        if (rc < 0) throw nb::value_error(err.c_str());
    }

    // Output row of batch token i of the last decode_batch: a view, valid until the next decode.
    logits_view logits_ith(int32_t i) {
        const auto &h = holder();
        std::unique_lock<std::mutex> lock(h->busy, std::try_to_lock);
        if (!lock.owns_lock()) throw nb::value_error("the context is busy in another thread");
        if (h->n_last == 0 || !h->last_batch) throw nb::value_error("no batch outputs: call decode_batch() first");
        float *p = pinfer_get_logits_ith(h->p, i);
        if (!p) throw nb::index_error(("batch token " + std::to_string(i) + " has no output (output=0 or out of range)").c_str());
        size_t shape[1] = {(size_t)n_out_};
        return logits_view(p, 1, shape, context_capsule(h));
    }

    void seq_rm(int32_t seq, int32_t p0, int32_t p1) {
        const auto &h = holder();
        std::unique_lock<std::mutex> lock(h->busy, std::try_to_lock);
        if (!lock.owns_lock()) throw nb::value_error("the context is busy in another thread");
        if (pinfer_kv_seq_rm(h->p, seq, p0, p1) < 0) throw nb::value_error(last_error("seq_rm").c_str());
    }
    void seq_cp(int32_t src, int32_t dst, int32_t p0, int32_t p1) {
        const auto &h = holder();
        std::unique_lock<std::mutex> lock(h->busy, std::try_to_lock);
        if (!lock.owns_lock()) throw nb::value_error("the context is busy in another thread");
        if (pinfer_kv_seq_cp(h->p, src, dst, p0, p1) < 0) throw nb::value_error(last_error("seq_cp").c_str());
    }
    int32_t seq_pos_max(int32_t seq) const { return pinfer_kv_seq_pos_max(holder()->p, seq); }
    int32_t cells_used() const { return pinfer_kv_cells_used(holder()->p); }
    int32_t n_out() const { return n_out_; }

    void decode_list(const std::vector<int32_t> &toks, bool all_logits) {
        decode_raw(toks.data(), toks.size(), all_logits);
    }
    void decode_array(const tokens_array &toks, bool all_logits) {
        decode_raw(toks.data(), toks.shape(0), all_logits);
    }

    // Logits of token i of the last decode, as a numpy view of the context's buffer.
    logits_view logits(int32_t i) {
        const auto &h = holder();
        std::unique_lock<std::mutex> lock(h->busy, std::try_to_lock);
        if (!lock.owns_lock()) throw nb::value_error("the context is busy in another thread");
        if (h->n_last == 0) throw nb::value_error("no logits: call decode() first");
        const int32_t n = h->n_last;
        int32_t j = i < 0 ? i + n : i;
        if (j < 0 || j >= n) throw nb::index_error(("logits index " + std::to_string(i) + " out of range").c_str());
        if (h->last_batch) throw nb::value_error("the last decode was a batch: use logits_ith()");
        if (!h->last_all && j != n - 1)
            throw nb::index_error("logits were kept only for the last token (decode with all_logits=True)");
        float *p = pinfer_get_logits(h->p, h->last_all ? j : -1);
        if (!p) throw nb::index_error(last_error("no logits for this token").c_str());
        size_t shape[1] = {(size_t)n_out_};
        return logits_view(p, 1, shape, context_capsule(h));
    }

    // Logits of every token of the last decode (all_logits=True) as [n, n_vocab]:
    // a view when the rows are contiguous, else a copy.
    logits_view logits_all() {
        const auto &h = holder();
        std::unique_lock<std::mutex> lock(h->busy, std::try_to_lock);
        if (!lock.owns_lock()) throw nb::value_error("the context is busy in another thread");
        if (h->n_last == 0) throw nb::value_error("no logits: call decode() first");
        if (!h->last_all || h->last_batch) throw nb::value_error("the last decode kept only the last logits (use all_logits=True)");
        const int32_t n = h->n_last;
        float *p0 = pinfer_get_logits(h->p, 0);
        if (!p0) throw nb::value_error(last_error("no logits").c_str());
        bool contiguous = true;
        for (int32_t i = 1; i < n && contiguous; i++) contiguous = pinfer_get_logits(h->p, i) == p0 + (size_t)i * n_out_;
        size_t shape[2] = {(size_t)n, (size_t)n_out_};
        if (contiguous) return logits_view(p0, 2, shape, context_capsule(h));
        float *copy = new float[(size_t)n * n_out_];
        for (int32_t i = 0; i < n; i++)
            memcpy(copy + (size_t)i * n_out_, pinfer_get_logits(h->p, i), sizeof(float) * n_out_);
        nb::capsule owner(copy, [](void *p) noexcept { delete[] static_cast<float *>(p); });
        return logits_view(copy, 2, shape, owner);
    }

    int32_t n_past() const { return pinfer_n_past(holder()->p); }
    uint32_t n_ctx() const { return pinfer_n_ctx(holder()->p); }

    void kv_truncate(int32_t n_keep) {
        const auto &h = holder();
        if (n_keep < 0) throw nb::value_error("n_keep must be >= 0");
        std::unique_lock<std::mutex> lock(h->busy, std::try_to_lock);
        if (!lock.owns_lock()) throw nb::value_error("the context is busy in another thread");
        pinfer_kv_truncate(h->p, n_keep);
    }

    // The KV snapshot of the cached positions, as a uint8 array.
    nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>> kv_state() {
        const auto &h = holder();
        std::unique_lock<std::mutex> lock(h->busy, std::try_to_lock);
        if (!lock.owns_lock()) throw nb::value_error("the context is busy in another thread");
        const int64_t n = pinfer_state_size(h->p, pinfer_n_past(h->p));
        if (n < 0) throw nb::value_error(last_error("kv_state").c_str());
        uint8_t *buf = new uint8_t[(size_t)std::max<int64_t>(n, 1)];
        nb::capsule owner(buf, [](void *p) noexcept { delete[] static_cast<uint8_t *>(p); });
        if (pinfer_state_get(h->p, buf, (size_t)n) != 0) throw nb::value_error(last_error("kv_state").c_str());
        return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(buf, {(size_t)n}, owner);
    }
    void set_kv_state(const nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> &state,
                      int32_t n_past, const logits_in_arr &last_logits) {
        const auto &h = holder();
        if ((int64_t)last_logits.shape(0) != n_vocab_) throw nb::value_error("set_kv_state: logits must be [n_vocab]");
        std::unique_lock<std::mutex> lock(h->busy, std::try_to_lock);
        if (!lock.owns_lock()) throw nb::value_error("the context is busy in another thread");
        if (pinfer_state_set(h->p, state.data(), state.shape(0), n_past, last_logits.data()) != 0) {
            h->n_last = 0;
            throw nb::value_error(last_error("set_kv_state").c_str());
        }
        h->n_last = 1;
        h->last_all = false;
    }

    nb::dict timings() const {
        pinfer_timings t = pinfer_get_timings(holder()->p);
        nb::dict d;
        d["t_load_ms"] = t.t_load_ms;
        d["t_prompt_ms"] = t.t_prompt_ms;
        d["n_prompt"] = t.n_prompt;
        d["t_eval_ms"] = t.t_eval_ms;
        d["n_eval"] = t.n_eval;
        d["t_host_ms"] = t.t_host_ms;
        d["n_host"] = t.n_host;
        d["n_graphs_built"] = t.n_graphs_built;
        d["n_graphs_reused"] = t.n_graphs_reused;
        return d;
    }
    void reset_timings() { pinfer_reset_timings(holder()->p); }

    std::string sparse_mode() const { return pinfer_sparse_mode_name(pinfer_context_sparse_mode(holder()->p)); }

    // ---- the device plan and its traffic ----
    std::string device() const { return pinfer_context_device(holder()->p); }
    std::string notice() const { return pinfer_context_notice(holder()->p); }
    std::string plan_text() const { return pinfer_context_plan_text(holder()->p); }
    nb::list plan() const {
        const int32_t L = pinfer_model_n_layer(holder()->model->p);
        std::vector<int32_t> on((size_t)L);
        std::vector<int64_t> k((size_t)L);
        if (pinfer_context_plan(holder()->p, on.data(), k.data(), L) < 0) throw nb::value_error(last_error("plan").c_str());
        nb::list out;
        for (int32_t il = 0; il < L; il++) out.append(nb::make_tuple((bool)on[(size_t)il], k[(size_t)il]));
        return out;
    }
    nb::dict transfer_stats(bool decode) const {
        pinfer_transfer_stats t;
        if (pinfer_get_transfer_stats(holder()->p, decode, &t) < 0) throw nb::value_error(last_error("transfer stats").c_str());
        nb::dict d;
        d["n_tokens"] = t.n_tokens;
        d["n_graphs"] = t.n_graphs;
        d["bytes_h2d"] = t.bytes_h2d;
        d["bytes_d2h"] = t.bytes_d2h;
        d["bytes_pageable"] = t.bytes_pageable;
        d["n_copies"] = t.n_copies;
        d["n_waits"] = t.n_waits;
        d["n_syncs"] = t.n_syncs;
        d["device_bytes"] = t.device_bytes;
        return d;
    }
    void reset_transfer_stats() { pinfer_reset_transfer_stats(holder()->p); }

    // Per-layer sparse statistics and the verify summary as plain Python values.
    nb::dict sparse_stats() const {
        const auto &h = holder();
        const int32_t L = pinfer_model_n_layer(h->model->p);
        pinfer_sparse_stats s;
        std::vector<pinfer_sparse_layer_stats> ls((size_t)L);
        if (pinfer_get_sparse_stats(h->p, &s, ls.data(), L) != 0) throw nb::value_error(last_error("sparse_stats").c_str());
        nb::dict d;
        d["mode"] = std::string(pinfer_sparse_mode_name(s.mode));
        d["flops_predictor"] = s.flops_predictor;
        d["flops_ffn"] = s.flops_ffn;
        d["flops_dense"] = s.flops_dense;
        d["n_verified"] = s.n_verified;
        d["n_argmax_agree"] = s.n_argmax_agree;
        d["max_logit_diff"] = s.max_logit_diff;
        d["max_logit_abs"] = s.max_logit_abs;
        nb::list layers;
        for (const auto &l : ls) {
            nb::dict e;
            e["n_tokens"] = l.n_tokens;
            e["active_frac"] = l.active_frac;
            e["computed_frac"] = l.computed_frac;
            e["recall"] = l.recall;
            e["true_active_frac"] = l.true_active_frac;
            e["flops_predictor"] = l.flops_predictor;
            e["flops_ffn"] = l.flops_ffn;
            e["flops_dense"] = l.flops_dense;
            layers.append(e);
        }
        d["layers"] = layers;
        return d;
    }
    void reset_sparse_stats() { pinfer_reset_sparse_stats(holder()->p); }

    // Mixture of experts: layer il's routed experts for the last batch, k per token.
    std::vector<int32_t> expert_ids(int32_t il) const {
        const int32_t n = pinfer_get_expert_ids(holder()->p, il, nullptr, 0);
        if (n < 0) throw nb::value_error(last_error("expert_ids").c_str());
        std::vector<int32_t> out((size_t)n);
        if (n && pinfer_get_expert_ids(holder()->p, il, out.data(), n) != n) throw nb::value_error(last_error("expert_ids").c_str());
        return out;
    }

    float act_quantile(int32_t il, double q) const {
        float t;
        if (pinfer_ffn_act_quantile(holder()->p, il, q, &t) != 0) throw nb::value_error(last_error("act_quantile").c_str());
        return t;
    }
    int64_t observed_tokens(int32_t il) const {
        const int64_t n = pinfer_ffn_observed_tokens(holder()->p, il);
        if (n < 0) throw nb::value_error(last_error("observed_tokens").c_str());
        return n;
    }
    nb::ndarray<nb::numpy, int64_t> neuron_counts(int32_t il) const {
        const auto &h = holder();
        const int32_t need = pinfer_ffn_neuron_counts(h->p, il, nullptr, 0);
        if (need == INT32_MIN) throw nb::value_error(last_error("neuron_counts").c_str());
        const size_t k = (size_t)-need;
        int64_t *buf = new int64_t[k];
        pinfer_ffn_neuron_counts(h->p, il, buf, (int32_t)k);
        nb::capsule owner(buf, [](void *p) noexcept { delete[] (int64_t *)p; });
        return nb::ndarray<nb::numpy, int64_t>(buf, {k}, owner);
    }

    int32_t n_vocab() const { return n_vocab_; }

  private:
    std::shared_ptr<context_holder> h_;
    int32_t n_vocab_ = 0;
    int32_t n_out_ = 0;   // floats per output row (n_embd in an embedding context)
    std::string device_;  // kept alive for the C API
};

// Neuron-aware metadata (pinfer_model_sparse_info and friends) as Python values.
nb::dict sparse_info(const Model &s) {
    pinfer_sparse_info i;
    if (pinfer_model_sparse_info(s.get(), &i) != 0) throw nb::value_error(last_error("sparse_info").c_str());
    nb::dict d;
    d["has_predictors"] = i.has_predictors;
    d["has_down_t"] = i.has_down_t;
    d["has_freq"] = i.has_freq;
    d["hot_first"] = i.hot_first;
    d["powerinfer"] = i.powerinfer;
    d["has_gpuidx"] = i.has_gpuidx;
    d["gpuidx_prefix"] = i.gpuidx_prefix;
    d["threshold"] = i.threshold;
    d["n_act_thresholds"] = i.n_act_thresholds;
    d["n_placements"] = i.n_placements;
    d["max_rank"] = i.max_rank;
    return d;
}

std::vector<float> act_thresholds(const Model &s) {
    std::vector<float> out((size_t)pinfer_model_n_layer(s.get()));
    const int32_t n = pinfer_model_act_thresholds(s.get(), out.data(), (int32_t)out.size());
    if (n < 0) throw nb::value_error(last_error("act_thresholds").c_str());
    out.resize((size_t)n);
    return out;
}

std::pair<std::string, std::vector<int32_t>> placement_for(const Model &s, uint64_t budget) {
    std::vector<int32_t> k((size_t)pinfer_model_n_layer(s.get()));
    const int32_t rc = pinfer_model_placement(s.get(), budget, k.data(), (int32_t)k.size());
    if (rc < 0) throw nb::value_error(last_error("placement").c_str());
    const char *kind = rc == PINFER_PLACEMENT_EXACT ? "exact" : rc == PINFER_PLACEMENT_BELOW ? "below" : "greedy";
    return {kind, k};
}

nb::list placements(const Model &s) {
    pinfer_sparse_info info;
    if (pinfer_model_sparse_info(s.get(), &info) != 0) throw nb::value_error(last_error("placements").c_str());
    nb::list out;
    std::vector<int32_t> k((size_t)pinfer_model_n_layer(s.get()));
    for (int32_t i = 0; i < info.n_placements; i++) {
        uint64_t budget = 0;
        double obj = 0;
        char solver[256];
        if (pinfer_model_placement_entry(s.get(), i, &budget, &obj, solver, sizeof solver, k.data(), (int32_t)k.size()) != 0)
            throw nb::value_error(last_error("placements").c_str());
        nb::dict d;
        d["budget_bytes"] = budget;
        d["solver"] = std::string(solver);
        d["objective"] = obj;
        d["gpu_neurons"] = k;
        out.append(d);
    }
    return out;
}

std::vector<int32_t> gpu_neurons(const Model &s, int32_t il) {
    int32_t n = pinfer_model_gpu_neurons(s.get(), il, nullptr, 0);
    if (n == INT32_MIN) throw nb::value_error(last_error("gpu_neurons").c_str());
    std::vector<int32_t> ids((size_t)(n < 0 ? -n : n));
    n = pinfer_model_gpu_neurons(s.get(), il, ids.data(), (int32_t)ids.size());
    if (n < 0) throw nb::value_error(last_error("gpu_neurons").c_str());
    return ids;
}

void load_gpuidx(Model &s, const std::filesystem::path &path) {
    int32_t rc;
    {
        nb::gil_scoped_release nogil;
        rc = pinfer_model_load_gpuidx(const_cast<pinfer_model *>(s.get()), path.string().c_str());
    }
    if (rc != 0) throw nb::value_error(last_error("cannot load gpuidx").c_str());
}

}  // namespace

void bind_llama(nb::module_ &m) {
#ifdef PINFER_CUDA
    m.attr("HAS_CUDA") = true;  // built with the CUDA backend (device="cuda")
#else
    m.attr("HAS_CUDA") = false;
#endif
    nb::class_<Model>(m, "Model", "A GGUF model loaded with pinfer_model_load (weights are memory-mapped).")
        .def(nb::init<const std::filesystem::path &>(), nb::arg("path"),
             "Load a model; OSError if the file cannot be opened, ValueError if it is not a valid model.")
        .def("close", &Model::close, "Release this reference to the model (contexts using it keep it alive).")
        .def_prop_ro("closed", &Model::closed)
        .def_prop_ro("path", &Model::path)
        .def("tokenize", &Model::tokenize, nb::arg("text"), nb::arg("add_special") = true,
             nb::arg("parse_special") = false, "Tokenize str (as UTF-8) or bytes; returns a list of token ids.")
        .def("detokenize", &Model::detokenize, nb::arg("tokens"), nb::arg("special") = false,
             "The bytes of a token sequence.")
        .def("token_to_piece", &Model::token_to_piece, nb::arg("token"), nb::arg("special") = false)
        .def_prop_ro("n_vocab", [](const Model &s) { return pinfer_model_n_vocab(s.get()); })
        .def_prop_ro("n_ctx_train", [](const Model &s) { return pinfer_model_n_ctx_train(s.get()); })
        .def_prop_ro("n_embd", [](const Model &s) { return pinfer_model_n_embd(s.get()); })
        .def_prop_ro("n_layer", [](const Model &s) { return pinfer_model_n_layer(s.get()); })
        .def_prop_ro("n_ff", [](const Model &s) { return pinfer_model_n_ff(s.get()); })
        .def_prop_ro("n_params", [](const Model &s) { return pinfer_model_n_params(s.get()); })
        .def_prop_ro("size", [](const Model &s) { return pinfer_model_size(s.get()); }, "Bytes of weights.")
        .def_prop_ro("arch", [](const Model &s) { return std::string(pinfer_model_arch(s.get())); })
        .def_prop_ro("desc", [](const Model &s) { return std::string(pinfer_model_desc(s.get())); })
        .def("ffn_page_bytes", [](const Model &s) {
                uint64_t huge = 0;
                const uint64_t moved = pinfer_model_ffn_page_bytes(s.get(), &huge);
                return nb::make_tuple(moved, huge);
            },
            "(bytes of FFN weights a sparse context moved to memory advised for 2 MiB pages, bytes the kernel backs with huge pages)")
        .def("meta", &Model::meta, nb::arg("key"), "A string metadata value, or None.")
        .def_prop_ro("sparse_info", &sparse_info, "Neuron-aware metadata flags (pinfer_model_sparse_info) as a dict.")
        .def_prop_ro("act_thresholds", &act_thresholds, "pinfer.sparse.act_thresholds (empty if absent).")
        .def_prop_ro("placements", &placements, "The placement section: dicts of budget_bytes, solver, objective, gpu_neurons.")
        .def("placement", &placement_for, nb::arg("budget_bytes"),
             "(kind, k): per-layer GPU prefix lengths for a VRAM budget; kind is 'exact', 'below' or 'greedy'.")
        .def("load_gpuidx", &load_gpuidx, nb::arg("path"), "Load a PowerInfer .gpuidx file for this model.")
        .def("gpu_neurons", &gpu_neurons, nb::arg("layer"), "GPU neuron ids of a layer from the loaded .gpuidx.")
        .def_prop_ro("bos", [](const Model &s) { return pinfer_token_bos(s.get()); }, "BOS token id, -1 if none.")
        .def_prop_ro("eos", [](const Model &s) { return pinfer_token_eos(s.get()); }, "EOS token id, -1 if none.")
        .def("is_eog", [](const Model &s, int32_t t) { return pinfer_token_is_eog(s.get(), t); }, nb::arg("token"))
        .def_prop_ro("chat_template", [](const Model &s) { return s.meta("tokenizer.chat_template"); })
        .def("apply_chat_template", &Model::apply_chat_template, nb::arg("messages"),
             nb::arg("add_generation_prompt") = true, nb::arg("template") = nb::none(),
             "Format [(role, content), ...] with the built-in template formatter (not Jinja).");

    nb::class_<Context>(m, "Context", "KV cache, compute buffers and threads for one model.")
        .def(nb::init<Model &, uint32_t, uint32_t, int32_t, nb::handle, const std::string &, bool, bool, bool,
                      const std::string &, const std::string &, int32_t, double, double, double, double, int32_t,
                      int32_t, bool, const std::string &, bool>(),
             nb::arg("model"), nb::arg("n_ctx") = 0, nb::arg("n_batch") = 512, nb::arg("n_threads") = 0,
             nb::arg("type_kv") = "f16", nb::arg("sparse") = "off", nb::arg("sparse_stats") = false,
             nb::arg("sparse_verify") = false, nb::arg("ffn_observe") = false, nb::arg("precision") = "high",
             nb::kw_only(), nb::arg("device") = "auto", nb::arg("n_gpu_layers") = -1, nb::arg("vram_budget") = 0.0,
             nb::arg("sim_memory") = 0.0, nb::arg("sim_copy_latency_us") = 0.0, nb::arg("sim_copy_ns_per_byte") = 0.0,
             nb::arg("sim_threads") = 1, nb::arg("prompt_stream_min") = 32, nb::arg("graph_cache") = true,
             nb::arg("offload") = "neurons", nb::arg("embeddings") = false,
             "n_ctx 0: the model's training context (at most 4096); n_threads <= 0: all cores; "
             "type_kv: KV cache element type, 'f16' (or 1) or 'f32' (or 0, for exact comparisons); "
             "sparse: FFN mode 'off', 'exact', 'predictor', 'threshold' or 'auto'; sparse_stats / sparse_verify: "
             "collect per-layer statistics (verify also runs a dense twin); ffn_observe: |act| histograms; "
             "precision: activations meeting quantized weights, 'high' (~16 bits) or 'fast' (8 bits, as llama.cpp); "
             "device: 'cpu' or 'sim' (a simulated GPU), n_gpu_layers (-1: all that fit), vram_budget in GiB (0: all "
             "of the device), sim_memory in GiB (0: 24), sim copy costs.")
        .def_prop_ro("device", &Context::device, "'CPU', or the device the plan puts layers on.")
        .def_prop_ro("notice", &Context::notice, "What the device plan could not do as asked ('' if nothing).")
        .def_prop_ro("plan_text", &Context::plan_text, "The device plan in words ('' without a device).")
        .def("plan", &Context::plan, "Per layer (on_device, k): k FFN neurons [0, k) on the device.")
        .def("transfer_stats", &Context::transfer_stats, nb::arg("decode") = true,
             "Host <-> device traffic of single-token decodes (decode=True) or of prompt batches.")
        .def("reset_transfer_stats", &Context::reset_transfer_stats)
        .def_prop_ro("sparse_mode", &Context::sparse_mode, "The sparse FFN mode this context runs (auto resolved).")
        .def("sparse_stats", &Context::sparse_stats, "Per-layer active fractions, FLOPs, recall, logit difference.")
        .def("expert_ids", &Context::expert_ids, nb::arg("layer"),
             "Mixture of experts (sparse_stats=True): layer's routed experts for the last batch, n_expert_used per token.")
        .def("reset_sparse_stats", &Context::reset_sparse_stats)
        .def("act_quantile", &Context::act_quantile, nb::arg("layer"), nb::arg("q"),
             "Observer: threshold t with a fraction q of the observed |act(gate)| values <= t.")
        .def("observed_tokens", &Context::observed_tokens, nb::arg("layer"))
        .def("neuron_counts", &Context::neuron_counts, nb::arg("layer"),
             "Observer: int64 [n_ff] tokens where each neuron was active.")
        .def("close", &Context::close)
        .def_prop_ro("closed", &Context::closed)
        .def("decode", &Context::decode_array, nb::arg("tokens"), nb::arg("all_logits") = false,
             "Evaluate tokens at positions n_past..; releases the GIL.")
        .def("decode", &Context::decode_list, nb::arg("tokens"), nb::arg("all_logits") = false)
        .def("logits", &Context::logits, nb::arg("i") = -1,
             "float32 [n_vocab] view (no copy) of token i's logits; valid until the next decode.")
        .def("decode_batch", &Context::decode_batch, nb::arg("tokens"), nb::arg("pos"), nb::arg("seq_id"),
             nb::arg("output"),
             "Evaluate a batch mixing sequences: token i of sequence seq_id[i] at position pos[i], its output kept "
             "when output[i]; releases the GIL.")
        .def("logits_ith", &Context::logits_ith, nb::arg("i"),
             "float32 view of batch token i's output row (logits, or the hidden state with embeddings=True).")
        .def("seq_rm", &Context::seq_rm, nb::arg("seq_id"), nb::arg("p0") = 0, nb::arg("p1") = -1,
             "Forget seq_id's cells at positions [p0, p1) (p1 < 0: to the end; seq_id < 0: every sequence).")
        .def("seq_cp", &Context::seq_cp, nb::arg("src"), nb::arg("dst"), nb::arg("p0") = 0, nb::arg("p1") = -1,
             "dst also sees src's cells at positions [p0, p1) (shared cells, no copy).")
        .def("seq_pos_max", &Context::seq_pos_max, nb::arg("seq_id"), "Highest cached position of seq_id (-1: none).")
        .def_prop_ro("cells_used", &Context::cells_used, "KV cells in use by any sequence.")
        .def_prop_ro("n_out", &Context::n_out, "Floats per output row: n_vocab, or n_embd with embeddings=True.")
        .def("logits_all", &Context::logits_all, "float32 [n, n_vocab] logits of every token of the last decode.")
        .def_prop_ro("n_past", &Context::n_past)
        .def_prop_ro("n_ctx", &Context::n_ctx)
        .def_prop_ro("n_vocab", &Context::n_vocab)
        .def("kv_truncate", &Context::kv_truncate, nb::arg("n_keep"), "Forget cached tokens at positions >= n_keep.")
        .def("kv_state", &Context::kv_state, "uint8 snapshot of the cached keys and values (positions [0, n_past)).")
        .def("set_kv_state", &Context::set_kv_state, nb::arg("state"), nb::arg("n_past"), nb::arg("last_logits"),
             "Restore a kv_state() snapshot of n_past positions and the last token's float32 logits.")
        .def("timings", &Context::timings)
        .def("reset_timings", &Context::reset_timings);
}
