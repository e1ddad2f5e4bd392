// The neuron-aware parts of a model file: see llama-sparse-meta.h and
// docs/extended-gguf.md for the layout.
#include "llama-sparse-meta.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "ggml-cpu.h"
#include "gguf.h"
#include "llama-keys.h"
#include "llama-model-loader.h"
#include "llama-model.h"

namespace pinfer {

namespace K = pinfer_keys;

static std::runtime_error err(const std::string &msg) { return std::runtime_error(msg); }

static std::string blk(uint32_t il, const char *what) { return "blk." + std::to_string(il) + "." + what; }

static std::string shape_str(const int64_t *ne) {
    std::string s = "[";
    for (int i = 0; i < GGML_MAX_DIMS; i++) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

// Type and shape of a file tensor; false if absent.
static bool file_tensor(const model_loader &ml, const std::string &name, int *type, int64_t ne[GGML_MAX_DIMS]) {
    const int64_t i = gguf_find_tensor(ml.gguf(), name.c_str());
    if (i < 0) return false;
    *type = gguf_get_tensor_type(ml.gguf(), i);
    gguf_get_tensor_ne(ml.gguf(), i, ne);
    return true;
}

void prepare_sparse_tensors(model_loader &ml, const hparams &hp) {
    const int64_t d = hp.n_embd, n = hp.n_ff;
    std::vector<float> rows, cols;  // [n][d] as stored, then [d][n]
    for (uint32_t il = 0; il < hp.n_layer; il++) {
        const std::string down = blk(il, "ffn_down.weight"), down_t = blk(il, "ffn_down_t.weight");
        if (ml.has_tensor(down)) continue;
        int type;
        int64_t ne[GGML_MAX_DIMS];
        if (!file_tensor(ml, down_t, &type, ne)) continue;  // the architecture reports ffn_down missing
        const int64_t want[GGML_MAX_DIMS] = {d, n, 1, 1};
        if (memcmp(ne, want, sizeof want) != 0)
            throw err("model tensor '" + down_t + "' has shape " + shape_str(ne) + ", expected " + shape_str(want));
        const ggml_type_traits *tr = ggml_get_type_traits((ggml_type)type);
        if (!tr || !tr->to_float)
            throw err("model tensor '" + down_t + "' has a type that cannot be converted to rebuild '" + down + "'");
        const uint8_t *src = (const uint8_t *)gguf_get_tensor_data(ml.gguf(), gguf_find_tensor(ml.gguf(), down_t.c_str()));
        const size_t rb = ggml_row_size((ggml_type)type, d);
        rows.resize((size_t)(n * d));
        cols.resize((size_t)(n * d));
        for (int64_t i = 0; i < n; i++) tr->to_float(src + i * rb, rows.data() + i * d, d);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < d; j++) cols[j * n + i] = rows[i * d + j];
        // Keep the type when a row of n elements is a whole number of its blocks.
        ggml_type out = (ggml_type)type;
        if (type != GGML_TYPE_F32 && (!tr->from_float_ref || n % tr->blck_size != 0)) out = GGML_TYPE_F16;
        std::vector<uint8_t> bytes(ggml_row_size(out, n) * (size_t)d);
        ggml_quantize_chunk(out, cols.data(), bytes.data(), d, n);
        ml.add_override(down, out, {n, d}, std::move(bytes));
    }
}

static double get_double(const model_loader &ml, const std::string &key, double fallback) {
    const int64_t i = gguf_find_key(ml.gguf(), key.c_str());
    if (i < 0) return fallback;
    double v;
    if (gguf_val_get_f64(gguf_get_val(ml.gguf(), i), &v)) return v;
    return ml.get_float(key);  // f32 or an integer; throws naming the key otherwise
}

static void load_placements(const model_loader &ml, model &m) {
    const std::string ckey = K::PLACEMENT_COUNT;
    if (!ml.has_key(ckey)) return;
    const int64_t count = ml.get_int(ckey);
    if (count < 0 || count > 4096) throw err("model metadata key '" + ckey + "' is " + std::to_string(count) + " (expected 0..4096)");
    const uint32_t L = m.hp.n_layer;
    for (int64_t e = 0; e < count; e++) {
        const std::string p = K::PLACEMENT_PREFIX + std::to_string(e) + ".";
        placement pl;
        const int64_t budget = ml.get_int(p + K::PLACEMENT_BUDGET_BYTES);
        if (budget < 0) throw err("model metadata key '" + p + K::PLACEMENT_BUDGET_BYTES + "' is negative");
        pl.budget_bytes = (uint64_t)budget;
        pl.solver = ml.get_str(p + K::PLACEMENT_SOLVER, "");
        pl.objective = get_double(ml, p + K::PLACEMENT_OBJECTIVE, 0.0);
        const std::string kkey = p + K::PLACEMENT_GPU_NEURONS;
        if (!ml.has_key(kkey)) throw err("model metadata key '" + kkey + "' is missing");
        pl.k = ml.get_i32_array(kkey);
        if (pl.k.size() != L)
            throw err("model metadata key '" + kkey + "' has " + std::to_string(pl.k.size()) +
                      " entries, expected " + std::to_string(L) + " (one per layer)");
        for (uint32_t il = 0; il < L; il++)
            if (pl.k[il] < 0 || (uint32_t)pl.k[il] > m.hp.n_ff)
                throw err("model metadata key '" + kkey + "' has " + std::to_string(pl.k[il]) + " for layer " +
                          std::to_string(il) + ", outside [0, " + std::to_string(m.hp.n_ff) + "]");
        m.sparse.placements.push_back(std::move(pl));
    }
}

// All layers or none: a partial set is almost certainly a broken file.
static void check_all_layers(const model &m, ggml_tensor *layer_weights::*field, const char *what, bool *has) {
    uint32_t n = 0;
    for (uint32_t il = 0; il < m.hp.n_layer; il++) n += m.layers[il].*field != nullptr;
    if (n && n != m.hp.n_layer) {
        for (uint32_t il = 0; il < m.hp.n_layer; il++)
            if (!(m.layers[il].*field)) throw err("model tensor '" + blk(il, what) + "' is missing (other layers have it)");
    }
    *has = n > 0 && n == m.hp.n_layer;
}

void load_sparse_meta(model_loader &ml, model &m) {
    sparse_meta &s = m.sparse;
    const hparams &hp = m.hp;
    const int64_t d = hp.n_embd, n = hp.n_ff;

    s.powerinfer = gguf_is_powerinfer(ml.gguf()) || ml.has_key(K::POWERINFER_THRESHOLD);
    s.threshold = ml.has_key(K::SPARSE_THRESHOLD) ? ml.get_float(K::SPARSE_THRESHOLD)
                                                  : ml.get_float(K::POWERINFER_THRESHOLD, 0.0f);
    const std::string order = ml.get_str(K::NEURON_ORDER, "");
    if (!order.empty() && order != K::NEURON_ORDER_HOT_FIRST)
        throw err(std::string("model metadata key '") + K::NEURON_ORDER + "' is '" + order + "' (expected \"" +
                  K::NEURON_ORDER_HOT_FIRST + "\")");
    s.hot_first = order == K::NEURON_ORDER_HOT_FIRST;
    s.act_thresholds = ml.get_f32_array(K::SPARSE_ACT_THRESHOLDS);
    if (ml.has_key(K::SPARSE_ACT_THRESHOLDS) && s.act_thresholds.size() != hp.n_layer)
        throw err(std::string("model metadata key '") + K::SPARSE_ACT_THRESHOLDS + "' has " + std::to_string(s.act_thresholds.size()) +
                  " entries, expected " + std::to_string(hp.n_layer) + " (one per layer)");
    s.mode_hint = ml.get_str(K::SPARSE_MODE_HINT, "");

    for (uint32_t il = 0; il < hp.n_layer; il++) {
        layer_weights &l = m.layers[il];
        const std::string n1 = blk(il, "fc1.weight"), n2 = blk(il, "fc2.weight");
        int t1, t2;
        int64_t ne1[GGML_MAX_DIMS], ne2[GGML_MAX_DIMS];
        const bool h1 = file_tensor(ml, n1, &t1, ne1), h2 = file_tensor(ml, n2, &t2, ne2);
        if (h1 != h2) throw err("model tensor '" + (h1 ? n2 : n1) + "' is missing (the predictor needs fc1 and fc2)");
        if (h1) {
            const int64_t r = ne1[1];
            if (ne1[0] != d || r <= 0 || ne1[2] != 1 || ne1[3] != 1)
                throw err("model tensor '" + n1 + "' has shape " + shape_str(ne1) + ", expected [" + std::to_string(d) +
                          ", r, 1, 1] (n_embd, predictor rank)");
            l.fc1 = ml.tensor(m.ctx, n1, {d, r});
            l.fc2 = ml.tensor(m.ctx, n2, {r, n});  // throws naming fc2 on a wrong shape
        }
        l.ffn_down_t = ml.tensor(m.ctx, blk(il, "ffn_down_t.weight"), {d, n}, false);
        l.ffn_freq = ml.tensor(m.ctx, blk(il, "ffn_freq"), {n}, false);
        if (l.ffn_freq && l.ffn_freq->type != GGML_TYPE_F32)
            throw err("model tensor '" + blk(il, "ffn_freq") + "' has type " + ggml_type_name(l.ffn_freq->type) +
                      ", expected f32");
    }
    check_all_layers(m, &layer_weights::fc1, "fc1.weight", &s.has_predictors);
    check_all_layers(m, &layer_weights::ffn_down_t, "ffn_down_t.weight", &s.has_down_t);
    check_all_layers(m, &layer_weights::ffn_freq, "ffn_freq", &s.has_freq);
    load_placements(ml, m);

    std::string parts;
    auto add = [&](const std::string &p) { parts += (parts.empty() ? "" : ", ") + p; };
    if (s.powerinfer) add("powerinfer");
    if (s.has_predictors) add("predictors");
    if (s.has_down_t) add("down_t");
    if (s.has_freq) add("freq");
    if (s.hot_first) add(K::NEURON_ORDER_HOT_FIRST);
    if (!s.act_thresholds.empty()) add("act thresholds");
    if (!s.mode_hint.empty()) add("mode " + s.mode_hint);
    if (!s.placements.empty()) add(std::to_string(s.placements.size()) + " placement(s)");
    if (!parts.empty()) {
        char thr[32];
        snprintf(thr, sizeof thr, "%g", s.threshold);
        m.desc += "; sparse: " + parts + (s.has_predictors ? std::string(", threshold ") + thr : "");
    }
}

void load_gpuidx(model &m, const std::string &path) {
    char msg[512] = {0};
    std::unique_ptr<gguf_context, void (*)(gguf_context *)> g(gguf_open(path.c_str(), msg, sizeof msg), gguf_free);
    if (!g) throw err(std::string("cannot read gpuidx file: ") + msg);
    const std::string where = "gpuidx file '" + path + "': ";
    const uint32_t L = m.hp.n_layer, n = m.hp.n_ff;
    std::vector<std::vector<int32_t>> sets(L);
    bool prefix = true;
    auto i32_tensor = [&](const std::string &name, int64_t *len) -> const int32_t * {
        const int64_t i = gguf_find_tensor(g.get(), name.c_str());
        if (i < 0) throw err(where + "tensor '" + name + "' is missing");
        if (gguf_get_tensor_type(g.get(), i) != GGML_TYPE_I32)
            throw err(where + "tensor '" + name + "' has type " +
                      ggml_type_name((ggml_type)gguf_get_tensor_type(g.get(), i)) + ", expected i32");
        int64_t ne[GGUF_MAX_DIMS];
        gguf_get_tensor_ne(g.get(), i, ne);
        if (ne[1] != 1 || ne[2] != 1 || ne[3] != 1) throw err(where + "tensor '" + name + "' is not 1-D");
        *len = ne[0];
        return (const int32_t *)gguf_get_tensor_data(g.get(), i);
    };
    for (uint32_t il = 0; il < L; il++) {
        const std::string ni = blk(il, K::GPUIDX_TENSOR_IDX), nb = blk(il, K::GPUIDX_TENSOR_BUCKET);
        int64_t len_i, len_b;
        const int32_t *idx = i32_tensor(ni, &len_i);
        if (len_i != (int64_t)n)
            throw err(where + "tensor '" + ni + "' has " + std::to_string(len_i) + " entries, expected " +
                      std::to_string(n) + " (feed_forward_length)");
        const int32_t *bucket = i32_tensor(nb, &len_b);
        std::vector<int32_t> &ids = sets[il];
        for (uint32_t i = 0; i < n; i++) {
            if (idx[i] != 0 && idx[i] != 1)
                throw err(where + "tensor '" + ni + "' has value " + std::to_string(idx[i]) + " at " +
                          std::to_string(i) + " (expected 0 or 1)");
            if (idx[i]) ids.push_back((int32_t)i);
        }
        // gpu_bucket lists the same neurons (PowerInfer keeps it sorted); check they agree.
        std::vector<int32_t> b(bucket, bucket + len_b);
        std::sort(b.begin(), b.end());
        if (b != ids)
            throw err(where + "tensor '" + nb + "' does not list the neurons that '" + ni + "' marks as on the GPU");
        for (size_t j = 0; j < ids.size() && prefix; j++) prefix = ids[j] == (int32_t)j;
    }
    if (gguf_find_tensor(g.get(), blk(L, K::GPUIDX_TENSOR_IDX).c_str()) >= 0)
        throw err(where + "it has more layers than the model (" + std::to_string(L) + ")");

    sparse_meta &s = m.sparse;
    s.gpuidx_path = path;
    s.gpu_neurons = std::move(sets);
    s.gpuidx_prefix = prefix;
    s.placements.erase(std::remove_if(s.placements.begin(), s.placements.end(),
                                      [](const placement &p) { return p.solver == K::SOLVER_GPUIDX; }),
                       s.placements.end());
    if (!prefix) return;  // not expressible as prefixes: callers read gpu_neurons
    placement p;
    const int64_t ki = gguf_find_key(g.get(), K::GPUIDX_VRAM_CAPACITY);
    if (ki >= 0) {
        const gguf_value *v = gguf_get_val(g.get(), ki);
        uint64_t u = 0;
        int64_t x = 0;
        uint32_t u32 = 0;
        if (gguf_val_get_u64(v, &u)) p.budget_bytes = u;
        else if (gguf_val_get_i64(v, &x) && x >= 0) p.budget_bytes = (uint64_t)x;
        else if (gguf_val_get_u32(v, &u32)) p.budget_bytes = u32;
        else throw err(where + "key '" + K::GPUIDX_VRAM_CAPACITY + "' is not an unsigned integer");
    }
    p.solver = K::SOLVER_GPUIDX;
    for (uint32_t il = 0; il < L; il++) {
        p.k.push_back((int32_t)s.gpu_neurons[il].size());
        if (const ggml_tensor *f = m.layers[il].ffn_freq)
            for (int32_t i = 0; i < p.k.back(); i++) p.objective += ((const float *)f->data)[i];
    }
    s.placements.push_back(std::move(p));
}

}  // namespace pinfer
