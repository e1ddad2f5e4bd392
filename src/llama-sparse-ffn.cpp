#include "llama-sparse-ffn.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "ggml-backend.h"
#include "llama-ffn-impl.h"
#include "llama-model.h"

namespace pinfer {

const char *sparse_mode_name(sparse_mode m) {
    switch (m) {
        case sparse_mode::OFF: return "off";
        case sparse_mode::EXACT: return "exact";
        case sparse_mode::PREDICTOR: return "predictor";
        case sparse_mode::THRESHOLD: return "threshold";
        case sparse_mode::AUTO: return "auto";
    }
    return "?";
}

bool sparse_mode_from_name(const std::string &name, sparse_mode *out) {
    for (sparse_mode m : {sparse_mode::OFF, sparse_mode::EXACT, sparse_mode::PREDICTOR, sparse_mode::THRESHOLD,
                          sparse_mode::AUTO}) {
        if (name == sparse_mode_name(m)) {
            *out = m;
            return true;
        }
    }
    return false;
}

static bool relu_family(const model &m) { return m.hp.act == ffn_act::RELU || m.hp.act == ffn_act::RELU_BOTH; }

std::string sparse_mode_unsupported(const model &m, sparse_mode mode) {
    if (m.hp.n_expert > 0 && mode == sparse_mode::PREDICTOR)
        return "predictor sparse mode is not implemented for mixture-of-experts FFNs yet (this model has " +
               std::to_string(m.hp.n_expert) + " experts per layer; exact (ReLU experts) and threshold modes are)";
    switch (mode) {
        case sparse_mode::OFF:
        case sparse_mode::AUTO: return "";
        case sparse_mode::EXACT:
            if (!relu_family(m))
                return std::string("exact sparse mode needs a ReLU-family FFN (relu, relu-both); this model's FFN is ") +
                       ffn_act_name(m.hp.act) + " (use threshold mode with calibrated act_thresholds, or a predictor)";
            return "";
        case sparse_mode::PREDICTOR:
            if (!m.sparse.has_predictors)
                return "predictor sparse mode needs blk.N.fc1/fc2 in every layer; this file has none "
                       "(write them with pinfer train-predictors)";
            return "";
        case sparse_mode::THRESHOLD:
            if (m.sparse.act_thresholds.size() != m.hp.n_layer)
                return "threshold sparse mode needs pinfer.sparse.act_thresholds (one per layer); this file has none "
                       "(write them with pinfer calibrate)";
            return "";
    }
    return "unknown sparse mode";
}

sparse_mode resolve_sparse_mode(const model &m, sparse_mode requested) {
    if (requested == sparse_mode::AUTO) {
        if (m.sparse.has_predictors && m.hp.n_expert == 0) return sparse_mode::PREDICTOR;
        if (relu_family(m)) return sparse_mode::EXACT;
        if (m.sparse.act_thresholds.size() == m.hp.n_layer) return sparse_mode::THRESHOLD;
        return sparse_mode::OFF;
    }
    const std::string why = sparse_mode_unsupported(m, requested);
    if (!why.empty()) throw std::runtime_error(why);
    return requested;
}

// ---------------------------------------------------------------- helpers

ggml_tensor *ffn_act_unary(ggml_context *ctx, ggml_tensor *a, ffn_act act) {
    switch (act) {
        case ffn_act::SILU: return ggml_silu(ctx, a);
        case ffn_act::GELU: return ggml_gelu(ctx, a);
        default: return ggml_relu(ctx, a);
    }
}

ggml_tensor *ffn_act_gated(ggml_context *ctx, ggml_tensor *g, ggml_tensor *u, ffn_act act) {
    switch (act) {
        case ffn_act::SILU: return ggml_swiglu(ctx, g, u);
        case ffn_act::GELU: return ggml_geglu(ctx, g, u);
        case ffn_act::RELU: return ggml_reglu(ctx, g, u);
        case ffn_act::RELU_BOTH: return ggml_reglu(ctx, g, ggml_relu(ctx, u));
    }
    return ggml_swiglu(ctx, g, u);
}

ggml_tensor *ffn_keep(ggml_tensor *t) {
    ggml_set_output(t);
    return t;
}

ggml_tensor *ffn_rows(ggml_context *ctx, ggml_tensor *w, int64_t b, int64_t e) {
    if (b == 0 && e == w->ne[1]) return w;
    return ggml_view_2d(ctx, w, w->ne[0], e - b, w->nb[1], (size_t)b * w->nb[1]);
}

ggml_tensor *ffn_cols(ggml_context *ctx, ggml_tensor *w, int64_t b, int64_t e) {
    if (b == 0 && e == w->ne[0]) return w;
    return ggml_view_2d(ctx, w, e - b, w->ne[1], w->nb[1], ggml_row_size(w->type, b));
}

ggml_tensor *ffn_up_bias(ggml_context *ctx, const ffn_part &p, ggml_tensor *y, bool local) {
    ggml_tensor *bias = p.w->ffn_up_b;
    if (!bias) return y;
    if (local && !p.whole()) bias = ggml_view_1d(ctx, bias, p.e - p.b, (size_t)p.b * bias->nb[0]);
    return ggml_add(ctx, y, bias);
}

ggml_tensor *ffn_up_bias_active(ggml_context *ctx, const ffn_part &p, ggml_tensor *x, ggml_tensor *idx) {
    ggml_tensor *bias = p.w->ffn_up_b;
    if (!bias) return nullptr;
    // A row-sparse product of the bias as a [1, rows] matrix with a row of
    // ones: b_i where i is active, 0 elsewhere. The softmax of one element is
    // exactly 1 for any finite input, so the ones come from x's first row.
    const int64_t T = x->ne[1];
    ggml_tensor *ones = ggml_soft_max_ext(ctx, ggml_cont(ctx, ggml_view_2d(ctx, x, 1, T, x->nb[1], 0)), nullptr, 1.0f);
    return ggml_mul_mat_sparse_rows(ctx, ggml_reshape_2d(ctx, bias, 1, bias->ne[0]), ones, idx, p.b, p.e);
}

ggml_tensor *ffn_down_local(ggml_context *ctx, const ffn_part &p, ggml_tensor *h, ggml_tensor *idx) {
    const layer_weights &l = *p.w;
    ggml_tensor *down = ffn_cols(ctx, l.ffn_down, p.b, p.e);
    if (l.ffn_down_t) return ggml_sparse_down(ctx, ffn_rows(ctx, l.ffn_down_t, p.b, p.e), down, h, idx, 0, p.e - p.b);
    return ggml_mul_mat(ctx, down, h);
}

// ---------------------------------------------------------------- one part, one layer

static ggml_tensor *build_part(ggml_context *ctx, const ffn_env &env, sparse_mode mode, const ffn_part &p, ggml_tensor *x,
                               ggml_tensor *idx) {
    switch (mode) {
        case sparse_mode::EXACT: return build_ffn_exact(ctx, env, p, x);
        case sparse_mode::THRESHOLD: return build_ffn_threshold(ctx, env, p, x);
        case sparse_mode::PREDICTOR: return build_ffn_predictor(ctx, env, p, x, idx);
        default: return build_ffn_dense(ctx, env, p, x);
    }
}

static const ffn_bundle *host_bundle(const ffn_build *b, int il) {
    return b && (size_t)il < b->bundles.size() && b->bundles[(size_t)il].w ? &b->bundles[(size_t)il] : nullptr;
}

static ggml_tensor *build_layer_ffn(ggml_context *ctx, ggml_cgraph *gf, ffn_build *b, const model &m, int il, ggml_tensor *x,
                                    const ffn_device *dev) {
    const sparse_mode mode = b ? b->mode : sparse_mode::OFF;
    ffn_env env{m, il, b, b ? &b->probes[(size_t)il] : nullptr, b && b->observe};
    const int64_t n = m.hp.n_ff;
    ffn_part host{&m.layers[(size_t)il], host_bundle(b, il), 0, n};
    if (!dev) {  // the whole FFN here (on the CPU, or on the device that runs this layer)
        ggml_tensor *idx = mode == sparse_mode::PREDICTOR ? build_ffn_predict(ctx, env, *host.w, x) : nullptr;
        return build_part(ctx, env, mode, host, x, idx);
    }
    // A device layer: the device holds neurons [0, k) of the FFN.
    const ffn_part hot{dev->w, dev->bundle, 0, dev->k};
    if (dev->k == n) {
        ggml_tensor *idx = mode == sparse_mode::PREDICTOR ? build_ffn_predict(ctx, env, *dev->w, x) : nullptr;
        return build_part(ctx, env, mode, hot, x, idx);
    }
    if (dev->stream) {
        // A prompt batch: computing the cold rows on the CPU costs ~2·T FLOPs
        // per weight, sending them up costs their bytes once (docs/hybrid.md),
        // so the device gets them for this batch. Predictor mode computes them
        // densely: a batch's union is nearly dense, and dense is a superset.
        const layer_weights &l = m.layers[(size_t)il];
        layer_weights cw;
        if (l.ffn_gate) cw.ffn_gate = ggml_transfer(ctx, ffn_rows(ctx, l.ffn_gate, dev->k, n), false);
        cw.ffn_up = ggml_transfer(ctx, ffn_rows(ctx, l.ffn_up, dev->k, n), false);
        cw.ffn_down = ggml_transfer(ctx, ffn_cols(ctx, l.ffn_down, dev->k, n), false);
        if (l.ffn_up_b)
            cw.ffn_up_b = ggml_transfer(ctx, ggml_view_1d(ctx, l.ffn_up_b, n - dev->k, (size_t)dev->k * l.ffn_up_b->nb[0]), false);
        const ffn_part cold{&cw, nullptr, 0, n - dev->k};
        ffn_env quiet{m, il, nullptr, nullptr, false};
        ggml_tensor *idx = mode == sparse_mode::PREDICTOR && dev->k > 0 ? build_ffn_predict(ctx, env, *dev->w, x) : nullptr;
        ggml_tensor *y_hot = dev->k > 0 ? build_part(ctx, env, mode, hot, x, idx) : nullptr;
        ggml_tensor *y_cold = build_part(ctx, quiet, mode == sparse_mode::PREDICTOR ? sparse_mode::OFF : mode, cold, x, nullptr);
        return y_hot ? ggml_add(ctx, y_hot, y_cold) : y_cold;
    }
    // Hybrid: the device predicts and sends the normalised state and the list
    // down first, then computes the hot prefix while the CPU computes the cold
    // rest; the CPU's partial comes back and hot + cold are added in that order.
    ggml_backend *be = ggml_get_backend(ctx);
    ggml_tensor *idx = mode == sparse_mode::PREDICTOR ? build_ffn_predict(ctx, env, *dev->w, x) : nullptr;
    if (idx) ggml_build_forward_expand(gf, idx);  // the two copies then follow each other: one event for both
    ggml_tensor *x_h = ggml_transfer(ctx, x, true);
    ggml_tensor *idx_h = idx ? ggml_transfer(ctx, idx, true) : nullptr;
    ggml_build_forward_expand(gf, x_h);
    if (idx_h) ggml_build_forward_expand(gf, idx_h);
    ggml_tensor *y_hot = dev->k > 0 ? build_part(ctx, env, mode, hot, x, idx) : nullptr;
    if (y_hot) ggml_build_forward_expand(gf, y_hot);
    ggml_set_backend(ctx, nullptr);
    host.b = dev->k;
    ggml_tensor *y_cold = build_part(ctx, env, mode, host, x_h, idx_h);
    ggml_set_backend(ctx, be);
    ggml_tensor *y_up = ggml_transfer(ctx, y_cold, false);
    return y_hot ? ggml_add(ctx, y_hot, y_up) : y_up;
}

// The down bias once, on the side that holds the sum of the parts.
ggml_tensor *build_sparse_ffn(ggml_context *ctx, ggml_cgraph *gf, ffn_build *b, const model &m, int il, ggml_tensor *x,
                              const ffn_device *dev) {
    ggml_tensor *y = build_layer_ffn(ctx, gf, b, m, il, x, dev);
    ggml_tensor *bias = dev ? dev->w->ffn_down_b : m.layers[(size_t)il].ffn_down_b;
    return bias ? ggml_add(ctx, y, bias) : y;
}

}  // namespace pinfer
