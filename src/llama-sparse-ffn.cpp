#include "llama-sparse-ffn.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "ggml-cpu.h"
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
        if (m.sparse.has_predictors) return sparse_mode::PREDICTOR;
        if (relu_family(m)) return sparse_mode::EXACT;
        if (m.sparse.act_thresholds.size() == m.hp.n_layer) return sparse_mode::THRESHOLD;
        return sparse_mode::OFF;
    }
    const std::string why = sparse_mode_unsupported(m, requested);
    if (!why.empty()) throw std::runtime_error(why);
    return requested;
}

// ---------------------------------------------------------------- graph

static ggml_tensor *act_unary(ggml_context *ctx, ggml_tensor *a, ffn_act act) {
    switch (act) {
        case ffn_act::SILU: return ggml_silu(ctx, a);
        case ffn_act::GELU: return ggml_gelu(ctx, a);
        default: return ggml_relu(ctx, a);
    }
}

static ggml_tensor *act_gated(ggml_context *ctx, ggml_tensor *g, ggml_tensor *u, ffn_act act) {
    switch (act) {
        case ffn_act::SILU: return ggml_swiglu(ctx, g, u);
        case ffn_act::GELU: return ggml_geglu(ctx, g, u);
        case ffn_act::RELU: return ggml_reglu(ctx, g, u);
        case ffn_act::RELU_BOTH: return ggml_reglu(ctx, g, ggml_relu(ctx, u));
    }
    return ggml_swiglu(ctx, g, u);
}

static ggml_tensor *keep(ggml_tensor *t) {
    ggml_set_output(t);
    return t;
}

ggml_tensor *build_sparse_ffn(ggml_context *ctx, ffn_build *b, const model &m, int il, ggml_tensor *x) {
    const layer_weights &l = m.layers[(size_t)il];
    const ffn_act act = m.hp.act;
    const int64_t n = m.hp.n_ff;
    const bool gated = l.ffn_gate != nullptr;
    const sparse_mode mode = b ? b->mode : sparse_mode::OFF;
    ffn_probe *probe = b ? &b->probes[(size_t)il] : nullptr;
    const bool observe = b && b->observe;

    // The down projection over the active neurons: column-sparse on ffn_down_t
    // (the op switches to the dense ffn_down itself past the crossover), else dense.
    auto down = [&](ggml_tensor *h, ggml_tensor *idx) {
        if (l.ffn_down_t) return ggml_sparse_down(ctx, l.ffn_down_t, l.ffn_down, h, idx, 0, n);
        return ggml_mul_mat(ctx, l.ffn_down, h);
    };

    if (mode == sparse_mode::OFF) {
        ggml_tensor *u = ggml_mul_mat(ctx, l.ffn_up, x);
        if (!observe) {  // the plain dense graph
            ggml_tensor *h = gated ? act_gated(ctx, ggml_mul_mat(ctx, l.ffn_gate, x), u, act) : act_unary(ctx, u, act);
            return ggml_mul_mat(ctx, l.ffn_down, h);
        }
        ggml_tensor *a = keep(act_unary(ctx, gated ? ggml_mul_mat(ctx, l.ffn_gate, x) : u, act));
        probe->act = a;
        ggml_tensor *h = a;
        if (gated) {
            if (act == ffn_act::RELU_BOTH) probe->up = keep(u);
            h = ggml_mul(ctx, a, act == ffn_act::RELU_BOTH ? ggml_relu(ctx, u) : u);
        }
        return ggml_mul_mat(ctx, l.ffn_down, h);
    }

    if (mode == sparse_mode::EXACT) {
        // ReLU is positive exactly where its input is: select on the raw gate (up).
        ggml_tensor *pre = ggml_mul_mat(ctx, gated ? l.ffn_gate : l.ffn_up, x);
        ggml_tensor *idx = ggml_sparse_select(ctx, pre, 0.0f);
        if (b->stats) probe->idx = keep(idx);
        if (observe) probe->act = keep(ggml_relu(ctx, pre));
        ggml_tensor *h;
        if (gated) {
            ggml_tensor *u = ggml_mul_mat_sparse_rows(ctx, l.ffn_up, x, idx, 0, n);
            if (observe && act == ffn_act::RELU_BOTH) probe->up = keep(u);
            h = act_gated(ctx, pre, u, act);  // relu(g) = 0 on every token's inactive rows
        } else {
            h = ggml_relu(ctx, pre);
        }
        return down(h, idx);
    }

    if (mode == sparse_mode::PREDICTOR) {
        ggml_tensor *idx = ggml_sparse_predict(ctx, l.fc1, l.fc2, x, m.sparse.threshold);
        if (b->stats || b->verify) probe->idx = keep(idx);
        if (b->verify || observe) {  // the dense activation defines the true active set
            ggml_tensor *pre = ggml_mul_mat(ctx, gated ? l.ffn_gate : l.ffn_up, x);
            ggml_tensor *a = act_unary(ctx, pre, act);
            ggml_tensor *ref = a;
            if (gated && act == ffn_act::RELU_BOTH) {
                ggml_tensor *ud = ggml_mul_mat(ctx, l.ffn_up, x);
                ref = ggml_reglu(ctx, pre, ggml_relu(ctx, ud));
                if (observe) probe->up = keep(ud);
            }
            const float t = m.sparse.act_thresholds.size() == m.hp.n_layer ? m.sparse.act_thresholds[(size_t)il] : 0.0f;
            if (b->verify) probe->idx_true = keep(ggml_sparse_select_abs(ctx, ref, t));
            if (observe) probe->act = keep(a);
        }
        ggml_tensor *h;
        const ffn_bundle *bd = (size_t)il < b->bundles.size() && b->bundles[(size_t)il].w ? &b->bundles[(size_t)il] : nullptr;
        if (gated && bd && bd->rows == 3) {
            // decoding: the whole FFN in one op, one contiguous read per neuron
            if (x->ne[1] <= GGML_SPARSE_FFN_MAX_T) {
                const ggml_op op = act == ffn_act::SILU ? GGML_OP_SWIGLU : act == ffn_act::GELU ? GGML_OP_GEGLU : GGML_OP_REGLU;
                return ggml_sparse_ffn_bundle(ctx, bd->w, l.ffn_gate, l.ffn_up, l.ffn_down, x, idx, 0, n, op,
                                              act == ffn_act::RELU_BOTH);
            }
            ggml_tensor *g = ggml_mul_mat_sparse_rows(ctx, bd->gate, x, idx, 0, n);  // prompts: row by row
            ggml_tensor *u = ggml_mul_mat_sparse_rows(ctx, bd->up, x, idx, 0, n);
            return ggml_sparse_down(ctx, bd->down_t, l.ffn_down, act_gated(ctx, g, u, act), idx, 0, n);
        } else if (gated && bd) {  // one read per active neuron: its gate and up rows are adjacent
            ggml_tensor *gu = ggml_mul_mat_sparse_rows_bundle(ctx, bd->w, x, idx, 0, n, 2);  // [n, T, 2]
            ggml_tensor *g = ggml_view_2d(ctx, gu, n, gu->ne[1], gu->nb[1], 0);
            ggml_tensor *u = ggml_view_2d(ctx, gu, n, gu->ne[1], gu->nb[1], gu->nb[2]);
            h = act_gated(ctx, g, u, act);
        } else if (gated) {
            ggml_tensor *g = ggml_mul_mat_sparse_rows(ctx, l.ffn_gate, x, idx, 0, n);
            ggml_tensor *u = ggml_mul_mat_sparse_rows(ctx, l.ffn_up, x, idx, 0, n);
            h = act_gated(ctx, g, u, act);  // act(0) = 0 for every activation: inactive rows stay 0
        } else {
            h = act_unary(ctx, ggml_mul_mat_sparse_rows(ctx, l.ffn_up, x, idx, 0, n), act);
        }
        return down(h, idx);
    }

    // THRESHOLD
    const float t = m.sparse.act_thresholds[(size_t)il];
    ggml_tensor *pre = ggml_mul_mat(ctx, gated ? l.ffn_gate : l.ffn_up, x);
    ggml_tensor *a = act_unary(ctx, pre, act);
    if (observe) probe->act = keep(a);
    ggml_tensor *idx = ggml_sparse_select_abs(ctx, a, t);
    if (b->stats) probe->idx = keep(idx);
    ggml_tensor *am = ggml_sparse_mask(ctx, a, t);  // per token: a batch computes the union
    ggml_tensor *h = am;
    if (gated) {
        ggml_tensor *u = ggml_mul_mat_sparse_rows(ctx, l.ffn_up, x, idx, 0, n);
        if (observe && act == ffn_act::RELU_BOTH) probe->up = keep(u);
        h = ggml_mul(ctx, am, act == ffn_act::RELU_BOTH ? ggml_relu(ctx, u) : u);
    }
    return down(h, idx);
}

// ---------------------------------------------------------------- statistics

namespace {

// Column c of an index list: (count, ids).
inline const int32_t *list_col(const ggml_tensor *idx, int64_t c) {
    return (const int32_t *)((const char *)idx->data + c * idx->nb[1]);
}

int64_t intersect(const int32_t *a, int64_t na, const int32_t *b, int64_t nb) {
    int64_t i = 0, j = 0, k = 0;
    while (i < na && j < nb) {
        if (a[i] < b[j]) i++;
        else if (a[i] > b[j]) j++;
        else { k++; i++; j++; }
    }
    return k;
}

}  // namespace

void accumulate_ffn_stats(const model &m, const ffn_build &b, std::vector<sparse_layer_stats> &st) {
    const int64_t d = m.hp.n_embd, n = m.hp.n_ff;
    st.resize(m.hp.n_layer);
    for (uint32_t il = 0; il < m.hp.n_layer; il++) {
        const ffn_probe &p = b.probes[il];
        if (!p.idx) continue;
        const layer_weights &l = m.layers[il];
        const bool gated = l.ffn_gate != nullptr;
        const int64_t C = p.idx->ne[1], T = C == 1 ? 1 : C - 1;
        const int64_t m_union = list_col(p.idx, C - 1)[0];
        sparse_layer_stats &s = st[il];
        s.n_tokens += T;
        for (int64_t t = 0; t < T; t++) s.sum_active += list_col(p.idx, t)[0];
        s.sum_union += m_union * T;
        if (p.idx_true) {
            for (int64_t t = 0; t < T; t++) {
                const int32_t *pc = list_col(p.idx, t), *tc = list_col(p.idx_true, t);
                s.sum_true += tc[0];
                s.sum_hit += intersect(pc + 1, pc[0], tc + 1, tc[0]);
            }
        }
        // FLOPs of what the graph ran (2 per multiply-add).
        const double mv = 2.0 * (double)d * (double)T;  // one row of one matrix for the batch
        const bool down_dense = !l.ffn_down_t || ggml_cpu_sparse_should_use_dense(m_union, n, T);
        double f = (down_dense ? n : m_union) * mv;     // down
        switch (b.mode) {
            case sparse_mode::PREDICTOR:
                f += (gated ? 2.0 : 1.0) * m_union * mv;
                s.flops_predictor += 2.0 * (double)T * (double)l.fc1->ne[1] * (double)(d + n);
                break;
            default:  // exact, threshold: gate (ungated: up) dense, up sparse
                f += n * mv + (gated ? m_union * mv : 0.0);
                break;
        }
        s.flops_ffn += f;
        s.flops_dense += (gated ? 3.0 : 2.0) * n * mv;
    }
}

void act_observer::reset(int n_layer, int n_ff) {
    hist.assign((size_t)n_layer, std::vector<uint64_t>(N_BINS, 0));
    counts.assign((size_t)n_layer, std::vector<int64_t>((size_t)n_ff, 0));
    n_tokens.assign((size_t)n_layer, 0);
}

float act_observer::quantile(int il, double q) const {
    const std::vector<uint64_t> &h = hist[(size_t)il];
    uint64_t total = 0;
    for (uint64_t c : h) total += c;
    if (total == 0 || q <= 0) return 0.0f;
    const double target = std::min(q, 1.0) * (double)total;
    double cum = 0;
    for (int bin = 0; bin < N_BINS; bin++) {
        if (h[bin] == 0) continue;
        if (cum + (double)h[bin] >= target) {
            // interpolate inside the bin, linearly in the float's bit pattern
            const double frac = (target - cum) / (double)h[bin];
            const uint32_t bits = ((uint32_t)bin << 16) + (uint32_t)std::min(65535.0, frac * 65536.0);
            float v;
            memcpy(&v, &bits, sizeof(v));
            return v;
        }
        cum += (double)h[bin];
    }
    return INFINITY;
}

void accumulate_ffn_observer(const model &m, const ffn_build &b, act_observer &obs) {
    const int64_t n = m.hp.n_ff;
    const bool both = m.hp.act == ffn_act::RELU_BOTH;
    const bool have_t = m.sparse.act_thresholds.size() == m.hp.n_layer;
    for (uint32_t il = 0; il < m.hp.n_layer; il++) {
        const ffn_probe &p = b.probes[il];
        if (!p.act) continue;
        const float t = have_t ? m.sparse.act_thresholds[il] : 0.0f;
        const int64_t T = p.act->ne[1];
        uint64_t *h = obs.hist[il].data();
        int64_t *cnt = obs.counts[il].data();
        for (int64_t tok = 0; tok < T; tok++) {
            const float *a = (const float *)((const char *)p.act->data + tok * p.act->nb[1]);
            const float *u = p.up ? (const float *)((const char *)p.up->data + tok * p.up->nb[1]) : nullptr;
            for (int64_t i = 0; i < n; i++) {
                const float v = fabsf(a[i]);
                uint32_t bits;
                memcpy(&bits, &v, sizeof(bits));
                h[bits >> 16]++;
                cnt[i] += v > t && (!both || !u || u[i] > 0.0f);
            }
        }
        obs.n_tokens[il] += T;
    }
}

}  // namespace pinfer
