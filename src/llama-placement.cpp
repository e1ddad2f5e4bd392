#include "llama-placement.h"

#include <algorithm>
#include <queue>
#include <stdexcept>
#include <tuple>

#include "llama-device-weights.h"
#include "llama-model.h"

namespace pinfer {

uint64_t neuron_bytes(const model &m, uint32_t il) {
    const layer_weights &l = m.layers[il];
    uint64_t b = 0;
    if (l.ffn_gate) b += ggml_nbytes(l.ffn_gate);
    if (l.ffn_up) b += ggml_nbytes(l.ffn_up);
    if (l.ffn_up_b) b += ggml_nbytes(l.ffn_up_b);
    if (l.ffn_down_t) b += ggml_nbytes(l.ffn_down_t);
    else if (l.ffn_down) b += ggml_nbytes(l.ffn_down);
    const uint64_t n = m.hp.n_ff ? m.hp.n_ff : 1;
    return std::max<uint64_t>(1, (b + n - 1) / n);
}

std::vector<int32_t> greedy_placement(const model &m, uint64_t budget_bytes) {
    const uint32_t L = m.hp.n_layer, n = m.hp.n_ff;
    std::vector<int32_t> k(L, 0);
    std::vector<uint64_t> cost(L);
    auto freq = [&](uint32_t il, uint32_t i) -> double {
        const ggml_tensor *f = m.layers[il].ffn_freq;
        return f ? (double)((const float *)f->data)[i] : 1.0;
    };
    using item = std::pair<double, uint32_t>;  // (frequency per byte of the next neuron, layer)
    std::priority_queue<item> q;
    for (uint32_t il = 0; il < L; il++) {
        cost[il] = neuron_bytes(m, il);
        if (n) q.push({freq(il, 0) / (double)cost[il], il});
    }
    uint64_t left = budget_bytes;
    while (!q.empty()) {
        const uint32_t il = q.top().second;
        q.pop();
        if (cost[il] > left) continue;  // every neuron of this layer costs the same: the layer is done
        left -= cost[il];
        if ((uint32_t)++k[il] < n) q.push({freq(il, (uint32_t)k[il]) / (double)cost[il], il});
    }
    return k;
}

placement_kind select_placement(const model &m, uint64_t budget_bytes, std::vector<int32_t> &k) {
    const placement *below = nullptr;
    for (const placement &p : m.sparse.placements) {
        if (p.budget_bytes == budget_bytes) {
            k = p.k;
            return PLACEMENT_EXACT;
        }
        if (p.budget_bytes < budget_bytes && (!below || p.budget_bytes > below->budget_bytes)) below = &p;
    }
    if (below) {
        k = below->k;
        return PLACEMENT_BELOW;
    }
    k = greedy_placement(m, budget_bytes);
    return PLACEMENT_GREEDY;
}

int64_t prefix_granule(const model &m, uint32_t il) {
    const layer_weights &l = m.layers[il];
    return std::max<int64_t>(1, ggml_blck_size(l.ffn_down->type));
}

static uint64_t kv_layer_bytes(const model &m, const plan_request &r) {
    return 2 * ggml_row_size(r.type_kv, (int64_t)m.hp.n_embd_gqa() * r.n_ctx);
}

// What the device's compute buffer may need for one batch: the FFN and
// hidden-state intermediates and the attention scores at full context.
static uint64_t compute_estimate(const model &m, const plan_request &r) {
    const uint64_t T = std::max<uint32_t>(1, r.n_batch), d = m.hp.n_embd, n = m.hp.n_ff;
    return 4 * T * (3 * n + 8 * d) + 4 * T * (uint64_t)r.n_ctx * m.hp.n_head;
}

static double gib(uint64_t b) { return (double)b / (1ull << 30); }

hybrid_plan make_hybrid_plan(const model &m, const plan_request &r) {
    const uint32_t L = m.hp.n_layer;
    const int64_t n = m.hp.n_ff;
    hybrid_plan p;
    p.layers.assign(L, layer_plan());
    if (r.budget_bytes > r.device_bytes) {
        char msg[256];
        snprintf(msg, sizeof msg, "the device budget of %.2f GiB is larger than the device's memory (%.2f GiB)",
                 gib(r.budget_bytes), gib(r.device_bytes));
        throw std::runtime_error(msg);
    }
    p.budget_bytes = r.budget_bytes ? r.budget_bytes : r.device_bytes;
    p.compute_reserve = std::min<uint64_t>(compute_estimate(m, r), p.budget_bytes);
    uint64_t left = p.budget_bytes - p.compute_reserve;
    const bool bundle = r.bundles;

    // attention (with norms, predictor and KV cache) layer by layer, as -ngl fills;
    // whole_layers: each layer with its whole FFN, the llama.cpp way
    const uint32_t want = r.n_gpu_layers < 0 ? L : std::min<uint32_t>(L, (uint32_t)r.n_gpu_layers);
    // a mixture of experts keeps its experts on the CPU (per-expert placement is future work)
    const bool moe = m.hp.n_expert > 0;
    for (uint32_t il = 0; il < want; il++) {
        const uint64_t a = device_layer_bytes(m, il, 0, bundle, true), kv = kv_layer_bytes(m, r);
        const uint64_t f = r.whole_layers && !moe ? device_layer_bytes(m, il, n, bundle, false) : 0;
        if (a + kv + f > left) break;
        left -= a + kv + f;
        p.layers[il].on_device = true;
        p.layers[il].k = r.whole_layers && !moe ? n : 0;
        p.attn_bytes += a;
        p.kv_bytes += kv;
        p.ffn_bytes += f;
        p.n_device_layers++;
    }
    char msg[256];
    if (p.n_device_layers == 0) {
        if (want > 0) {
            snprintf(msg, sizeof msg, "the device budget of %.1f MiB holds no layer (the compute reserve needs %.1f MiB and "
                     "layer 0 %.1f MiB more): running on the CPU",
                     p.budget_bytes / 1048576.0, compute_estimate(m, r) / 1048576.0,
                     (device_layer_bytes(m, 0, 0, bundle, true) + kv_layer_bytes(m, r)) / 1048576.0);
            p.notice = msg;
        }
        return p;
    }
    if ((uint32_t)p.n_device_layers < want) {
        snprintf(msg, sizeof msg, "the device budget holds %d of the %u layers asked for", p.n_device_layers, want);
        p.notice = msg;
    }

    // the output head, with its logits in the compute reserve (a batch's worth)
    if (r.head && p.n_device_layers == (int)L && (r.n_gpu_layers < 0 || r.n_gpu_layers > (int)L)) {
        const uint64_t hb = device_head_bytes(m), logits = 4ull * std::max<uint32_t>(1, r.n_batch) * m.hp.n_vocab;
        if (hb + logits <= left) {
            left -= hb + logits;
            p.head_on_device = true;
            p.head_bytes = hb;
            p.compute_reserve += logits;
        }
    }
    if (moe) {
        if (!p.notice.empty()) p.notice += "; ";
        p.notice += "the mixture-of-experts FFNs stay on the CPU (the device runs attention)";
        p.kind = PLACEMENT_EXACT;
        return p;
    }
    if (r.whole_layers) {
        p.kind = PLACEMENT_EXACT;  // nothing chosen: every device layer holds its whole FFN
        p.whole_layers = true;
        return p;
    }
    // FFN prefixes in what is left: the placement section's entry for it, kept
    // where it fits; else a greedy split by activation frequency per byte
    auto ffn_bytes = [&](const std::vector<int64_t> &k) {
        uint64_t b = 0;
        for (uint32_t il = 0; il < L; il++)
            if (p.layers[il].on_device && k[il] > 0) b += device_layer_bytes(m, il, k[il], bundle, false);
        return b;
    };
    std::vector<int32_t> sel;
    p.kind = select_placement(m, left, sel);
    std::vector<int64_t> k(L, 0);
    for (uint32_t il = 0; il < L; il++) {
        if (!p.layers[il].on_device || il >= sel.size()) continue;
        const int64_t g = prefix_granule(m, il);
        k[il] = sel[il] >= n ? n : std::max<int64_t>(0, sel[il]) / g * g;
    }
    if (p.kind == PLACEMENT_GREEDY || ffn_bytes(k) > left) {
        p.kind = PLACEMENT_GREEDY;
        std::fill(k.begin(), k.end(), 0);
        auto freq = [&](uint32_t il, int64_t i0, int64_t i1) {
            const ggml_tensor *f = m.layers[il].ffn_freq;
            double s = 0;
            for (int64_t i = i0; i < i1; i++) s += f ? (double)((const float *)f->data)[i] : 1.0;
            return s;
        };
        // (frequency per byte of the layer's next granule, -its prefix so far, layer): equal
        // scores (a file without ffn_freq) spread the budget evenly over the layers
        using step = std::tuple<double, int64_t, uint32_t>;
        std::priority_queue<step> q;
        auto push = [&](uint32_t il) {
            const int64_t g = prefix_granule(m, il), e = std::min(n, k[il] + g);
            if (k[il] >= n) return;
            const uint64_t b = device_layer_bytes(m, il, e, bundle, false) - (k[il] ? device_layer_bytes(m, il, k[il], bundle, false) : 0);
            q.push(step{freq(il, k[il], e) / (double)std::max<uint64_t>(1, b), -k[il], il});
        };
        for (uint32_t il = 0; il < L; il++)
            if (p.layers[il].on_device) push(il);
        uint64_t used = 0;
        while (!q.empty()) {
            const uint32_t il = std::get<2>(q.top());
            q.pop();
            const int64_t e = std::min(n, k[il] + prefix_granule(m, il));
            const uint64_t b = device_layer_bytes(m, il, e, bundle, false) - (k[il] ? device_layer_bytes(m, il, k[il], bundle, false) : 0);
            if (used + b > left) continue;  // this layer's next step does not fit: it is done
            used += b;
            k[il] = e;
            push(il);
        }
    }
    for (uint32_t il = 0; il < L; il++) p.layers[il].k = p.layers[il].on_device ? k[il] : 0;
    p.ffn_bytes = ffn_bytes(k);
    return p;
}

std::string describe_plan(const model &m, const hybrid_plan &p) {
    const uint32_t L = m.hp.n_layer;
    const char *kinds[] = {"the placement entry for this budget", "the placement entry below this budget", "a greedy split"};
    char line[256];
    std::string s;
    if (p.whole_layers)
        snprintf(line, sizeof line, "plan: %d of %u layers on the device, each whole (layer offload, no neuron split)\n",
                 p.n_device_layers, L);
    else
        snprintf(line, sizeof line, "plan: %d of %u layers on the device (attention, norms, predictor, KV cache); FFN prefixes from %s\n",
                 p.n_device_layers, L, kinds[p.kind]);
    s += line;
    for (uint32_t i = 0; i < L;) {  // runs of layers with the same placement
        uint32_t j = i;
        while (j + 1 < L && p.layers[j + 1].on_device == p.layers[i].on_device && p.layers[j + 1].k == p.layers[i].k) j++;
        if (p.layers[i].on_device)
            snprintf(line, sizeof line, "plan:   layers %u-%u: device, FFN k = %lld of %u neurons on the device%s\n", i, j,
                     (long long)p.layers[i].k, m.hp.n_ff,
                     p.layers[i].k == (int64_t)m.hp.n_ff ? " (no traffic)" : p.layers[i].k ? " (hybrid)" : " (FFN on the CPU)");
        else
            snprintf(line, sizeof line, "plan:   layers %u-%u: CPU\n", i, j);
        s += line;
        i = j + 1;
    }
    snprintf(line, sizeof line, "plan:   output head: %s\n", p.head_on_device ? "device" : "CPU");
    s += line;
    snprintf(line, sizeof line,
             "plan: device bytes: attention %.1f MiB, FFN %.1f MiB, KV %.1f MiB, output head %.1f MiB, compute reserve %.1f MiB; "
             "budget %.1f MiB\n",
             p.attn_bytes / 1048576.0, p.ffn_bytes / 1048576.0, p.kv_bytes / 1048576.0, p.head_bytes / 1048576.0,
             p.compute_reserve / 1048576.0, p.budget_bytes / 1048576.0);
    s += line;
    return s;
}

}  // namespace pinfer
