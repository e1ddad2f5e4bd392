#include "llama-model-validate.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "ggml-cpu.h"
#include "gguf.h"
#include "llama-keys.h"
#include "llama-model-loader.h"
#include "llama-model.h"

namespace pinfer {

namespace K = pinfer_keys;

static std::runtime_error err(const std::string &msg) { return std::runtime_error(msg); }

// The layer of a per-layer tensor name "blk.N.<...>"; -1 for other names.
static int64_t layer_of(const char *name) {
    if (strncmp(name, "blk.", 4) != 0) return -1;
    const char *p = name + 4;
    if (*p < '0' || *p > '9') return -1;
    int64_t n = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        n = n * 10 + (*p - '0');
        if (n > INT32_MAX) return INT32_MAX;  // far past any limit; keeps the arithmetic bounded
    }
    return *p == '.' ? n : -1;
}

void validate_hparams(const model_loader &ml, const hparams &hp) {
    const std::string a = hp.arch + ".";
    // The counts themselves were range-checked as they were read (get_int_in).
    if (hp.n_embd % hp.n_head)
        throw err("model metadata: " + a + "embedding_length (" + std::to_string(hp.n_embd) +
                  ") is not a multiple of " + a + "attention.head_count (" + std::to_string(hp.n_head) + ")");
    if (hp.n_head % hp.n_head_kv)
        throw err("model metadata: " + a + "attention.head_count (" + std::to_string(hp.n_head) +
                  ") is not a multiple of " + a + "attention.head_count_kv (" + std::to_string(hp.n_head_kv) + ")");
    if (hp.n_pos_max == 0 && (hp.n_rot == 0 || hp.n_rot % 2 || hp.n_rot > hp.head_dim))  // learned positions: no RoPE
        throw err("model metadata key '" + a + "rope.dimension_count' is " + std::to_string(hp.n_rot) +
                  " (RoPE rotates pairs: expected an even number in 2.." + std::to_string(hp.head_dim) +
                  ", the head size)");

    // block_count against the per-layer tensors the file holds, before any
    // loop or allocation runs over block_count layers.
    gguf_context *g = ml.gguf();
    int64_t max_layer = -1;
    for (int64_t i = 0; i < gguf_get_n_tensors(g); i++) {
        const int64_t il = layer_of(gguf_get_tensor_name(g, i));
        if (il > max_layer) max_layer = il;
    }
    if (max_layer + 1 != (int64_t)hp.n_layer)
        throw err("model metadata key '" + a + "block_count' is " + std::to_string(hp.n_layer) + " but the file holds " +
                  (max_layer < 0 ? std::string("no per-layer tensors (blk.N.*)")
                                 : "tensors for " + std::to_string(max_layer + 1) + " layers (blk.0 .. blk." +
                                       std::to_string(max_layer) + ")"));
}

// One list of the model's per-layer tensors and what reads them.
enum class role { vector, matrix };
struct layer_tensor {
    ggml_tensor *layer_weights::*field;
    role r;
};
static const layer_tensor k_layer_tensors[] = {
    {&layer_weights::attn_norm, role::vector}, {&layer_weights::attn_norm_b, role::vector},
    {&layer_weights::wq, role::matrix},        {&layer_weights::wk, role::matrix},
    {&layer_weights::wv, role::matrix},        {&layer_weights::wo, role::matrix},
    {&layer_weights::wqkv, role::matrix},      {&layer_weights::bq, role::vector},
    {&layer_weights::bk, role::vector},        {&layer_weights::bv, role::vector},
    {&layer_weights::bo, role::vector},        {&layer_weights::ffn_norm, role::vector},
    {&layer_weights::ffn_norm_b, role::vector}, {&layer_weights::ffn_gate, role::matrix},
    {&layer_weights::attn_q_norm, role::vector}, {&layer_weights::attn_k_norm, role::vector},
    {&layer_weights::attn_post_norm, role::vector}, {&layer_weights::ffn_post_norm, role::vector},
    {&layer_weights::ffn_up, role::matrix},    {&layer_weights::ffn_down, role::matrix},
    {&layer_weights::fc1, role::matrix},       {&layer_weights::fc2, role::matrix},
    {&layer_weights::ffn_down_t, role::matrix}, {&layer_weights::ffn_freq, role::vector},
    {&layer_weights::ffn_gate_inp, role::matrix}, {&layer_weights::ffn_gate_exps, role::matrix},
    {&layer_weights::ffn_up_exps, role::matrix}, {&layer_weights::ffn_down_exps, role::matrix},
    {&layer_weights::ffn_up_b, role::vector},   {&layer_weights::ffn_down_b, role::vector},
};

static std::string finite_problem(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!std::isfinite(x[i])) {
            char msg[64];
            snprintf(msg, sizeof msg, "holds %g at element %lld", x[i], (long long)i);
            return msg;
        }
    return "";
}

// Vectors (norm weights, biases, frequencies) enter elementwise ops, which
// take F32 only; they are small, so every value is checked to be finite.
// Matrices enter matrix products and row lookups: their type needs both kernels.
static void check_tensor(const ggml_tensor *t, role r) {
    if (!t) return;
    const std::string name = "model tensor '" + std::string(t->name) + "' ";
    if (r == role::vector) {
        if (t->type != GGML_TYPE_F32)
            throw err(name + "has type " + ggml_type_name(t->type) + "; a norm weight, bias or frequency vector must be f32");
        const std::string bad = finite_problem((const float *)t->data, ggml_nelements(t));
        if (!bad.empty()) throw err(name + bad + " (every value must be finite)");
        return;
    }
    const ggml_type_traits *tr = ggml_get_type_traits(t->type);
    const ggml_cpu_type_traits *ct = ggml_get_cpu_type_traits(t->type);
    if (!tr || !tr->to_float || !ct || !ct->vec_dot)
        throw err(name + "has type " + ggml_type_name(t->type) + ", which no matrix product supports");
}

static void check_finite_value(const char *key, float v) {
    if (!std::isfinite(v)) {
        char msg[64];
        snprintf(msg, sizeof msg, "' is %g (expected a finite number)", v);
        throw err(std::string("model metadata key '") + key + msg);
    }
}

void validate_model(const model &m) {
    check_tensor(m.tok_embd, role::matrix);
    check_tensor(m.output, role::matrix);
    check_tensor(m.output_norm, role::vector);
    check_tensor(m.output_norm_b, role::vector);
    for (const ggml_tensor *t : {m.pos_embd, m.proj_in, m.proj_out}) check_tensor(t, role::matrix);
    for (const ggml_tensor *t : {m.rope_freqs, m.rope_short, m.rope_long}) {
        check_tensor(t, role::vector);
        if (t)
            for (int64_t i = 0; i < ggml_nelements(t); i++)
                if (!(((const float *)t->data)[i] > 0))
                    throw err("model tensor '" + std::string(t->name) + "' holds a frequency factor <= 0 at element " +
                              std::to_string(i));
    }
    for (const layer_weights &l : m.layers)
        for (const layer_tensor &lt : k_layer_tensors) check_tensor(l.*lt.field, lt.r);
    for (const layer_weights &l : m.layers)
        if (l.ffn_freq)
            for (int64_t i = 0; i < ggml_nelements(l.ffn_freq); i++)
                if (((const float *)l.ffn_freq->data)[i] < 0)
                    throw err("model tensor '" + std::string(l.ffn_freq->name) + "' holds a negative frequency at element " +
                              std::to_string(i));

    const sparse_meta &s = m.sparse;
    check_finite_value(m.loader->has_key(K::SPARSE_THRESHOLD) ? K::SPARSE_THRESHOLD : K::POWERINFER_THRESHOLD,
                       s.threshold);
    for (size_t il = 0; il < s.act_thresholds.size(); il++)
        if (!(std::isfinite(s.act_thresholds[il]) && s.act_thresholds[il] >= 0)) {
            char msg[128];
            snprintf(msg, sizeof msg, "' holds %g for layer %zu (expected a finite magnitude >= 0)",
                     s.act_thresholds[il], il);
            throw err(std::string("model metadata key '") + K::SPARSE_ACT_THRESHOLDS + msg);
        }
}

void check_logits_finite(const float *logits, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!std::isfinite(logits[i])) {
            char msg[160];
            snprintf(msg, sizeof msg, "the model computed a non-finite logit (%g at output %zu): its weights hold NaN or Inf "
                     "values, or values so large that they overflow", logits[i], i);
            throw err(msg);
        }
}

}  // namespace pinfer
