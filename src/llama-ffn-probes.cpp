// The probes the FFN builders leave in a graph, read after compute: sparse
// statistics (active fractions, FLOPs, predictor recall) and the activation
// observer (|act| histograms, per-neuron activity). Nothing here runs on the
// decode path unless a context asks for statistics.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ggml-cpu.h"
#include "llama-model.h"
#include "llama-sparse-ffn.h"

namespace pinfer {

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
        if (p.experts) {
            sparse_layer_stats &s = st[il];
            const int32_t *ids = (const int32_t *)p.experts->data;  // the expert FFNs run on the CPU
            s.experts_last.assign(ids, ids + ggml_nelements(p.experts));
            s.expert_tokens.resize(m.hp.n_expert, 0);
            for (int32_t e : s.experts_last)
                if (e >= 0 && (uint32_t)e < m.hp.n_expert) s.expert_tokens[(size_t)e]++;
            s.n_tokens += p.experts->ne[1];
            if (p.expert_act) {  // active neurons of the routed experts, per expert (sum_active / k per token)
                const ggml_tensor *a = p.expert_act;
                int64_t nz = 0;
                for (int64_t c = 0; c < a->ne[1] * a->ne[2]; c++) {
                    const float *col = (const float *)((const char *)a->data + (c % a->ne[1]) * a->nb[1] + (c / a->ne[1]) * a->nb[2]);
                    for (int64_t i = 0; i < a->ne[0]; i++) nz += col[i] != 0.0f;
                }
                s.sum_active += nz / a->ne[1];
                s.sum_union += nz / a->ne[1];
            } else {  // dense experts: every neuron of each routed expert
                s.sum_active += p.experts->ne[1] * (int64_t)m.hp.n_ff;
                s.sum_union += p.experts->ne[1] * (int64_t)m.hp.n_ff;
            }
        }
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
