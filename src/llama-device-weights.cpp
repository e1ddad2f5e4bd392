#include "llama-device-weights.h"

#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>

namespace pinfer {

namespace {

// How a host tensor's device copy is cut: whole, its first k rows, or the
// first k columns of every row (down [n, d]: one neuron per column).
enum class cut { WHOLE, ROWS, COLS };

struct item {
    const ggml_tensor *host;
    cut how;
    int64_t count;       // rows or columns kept
    ggml_tensor **dst;   // where the device tensor goes (nullptr while sizing)
};

// The one list of what a device layer holds; sizing and upload both walk it.
void for_each_item(const model &m, uint32_t il, int64_t k, const ffn_bundle *hb, bool attn, layer_weights *dl,
                   ffn_bundle *db, const std::function<void(const item &)> &f) {
    const layer_weights &l = m.layers[il];
    auto at = [&](ggml_tensor *layer_weights::*fld) { return dl ? &(dl->*fld) : nullptr; };
    if (attn)
        for (ggml_tensor *layer_weights::*fld :
             {&layer_weights::attn_norm, &layer_weights::attn_norm_b, &layer_weights::wq, &layer_weights::wk,
              &layer_weights::wv, &layer_weights::wqkv, &layer_weights::wo, &layer_weights::bq, &layer_weights::bk,
              &layer_weights::bv, &layer_weights::bo, &layer_weights::ffn_norm, &layer_weights::ffn_norm_b,
              &layer_weights::attn_q_norm, &layer_weights::attn_k_norm, &layer_weights::attn_post_norm,
              &layer_weights::ffn_post_norm, &layer_weights::fc1, &layer_weights::fc2, &layer_weights::ffn_down_b})
            if (l.*fld) f({l.*fld, cut::WHOLE, 0, at(fld)});
    if (k <= 0) return;
    f({l.ffn_down, cut::COLS, k, at(&layer_weights::ffn_down)});  // dense products (prompts, crossover)
    if (l.ffn_up_b) f({l.ffn_up_b, cut::COLS, k, at(&layer_weights::ffn_up_b)});  // [n] as one row of n columns
    if (hb && hb->w) {  // the bundle's views serve as gate, up and down_t: no second copy
        f({hb->w, cut::ROWS, hb->rows * k, db ? &db->w : nullptr});
        if (hb->rows == 2 && l.ffn_down_t) f({l.ffn_down_t, cut::ROWS, k, at(&layer_weights::ffn_down_t)});
        return;
    }
    if (l.ffn_gate) f({l.ffn_gate, cut::ROWS, k, at(&layer_weights::ffn_gate)});
    f({l.ffn_up, cut::ROWS, k, at(&layer_weights::ffn_up)});
    if (l.ffn_down_t) f({l.ffn_down_t, cut::ROWS, k, at(&layer_weights::ffn_down_t)});
}

// The output head's items (whole tensors; a tied output matrix is copied too).
void for_each_head_item(const model &m, model_head *dh, const std::function<void(const item &)> &f) {
    const model_head h = m.head();
    for (ggml_tensor *model_head::*fld : {&model_head::output_norm, &model_head::output_norm_b, &model_head::proj_out, &model_head::output})
        if (h.*fld) f({h.*fld, cut::WHOLE, 0, dh ? &(dh->*fld) : nullptr});
}

size_t item_bytes(const item &it) {
    const ggml_tensor *t = it.host;
    switch (it.how) {
        case cut::WHOLE: return ggml_nbytes(t);
        case cut::ROWS: return (size_t)it.count * t->nb[1];
        case cut::COLS: return ggml_row_size(t->type, it.count) * (size_t)t->ne[1];
    }
    return 0;
}

constexpr size_t ALIGN = 256;
size_t pad(size_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

}  // namespace

uint64_t device_layer_bytes(const model &m, uint32_t il, int64_t k, bool bundle, bool attn) {
    // a stand-in bundle: the bytes of 3 rows per neuron, as prepare_sparse_weights builds it
    ffn_bundle hb;
    const layer_weights &l = m.layers[il];
    ggml_tensor probe;
    if (bundle && l.ffn_gate && l.ffn_gate->type == l.ffn_up->type) {
        hb.rows = l.ffn_down_t && l.ffn_down_t->type == l.ffn_gate->type ? 3 : 2;
        probe = *l.ffn_gate;
        probe.nb[1] = l.ffn_gate->nb[1];  // item_bytes counts (rows * k) bundle rows of this size
        hb.w = &probe;
    }
    uint64_t b = 0;
    for_each_item(m, il, k, hb.w ? &hb : nullptr, attn, nullptr, nullptr, [&](const item &it) { b += pad(item_bytes(it)); });
    return b;
}

uint64_t device_head_bytes(const model &m) {
    uint64_t b = 0;
    for_each_head_item(m, nullptr, [&](const item &it) { b += pad(item_bytes(it)); });
    return b;
}

device_weights::device_weights(const model &m, const hybrid_plan &p, ggml_backend_t be,
                               const std::vector<ffn_bundle> &host_bundles) {
    const uint32_t L = m.hp.n_layer;
    layers_.assign(L, layer_weights());
    bundles_.assign(L, ffn_bundle());
    // sizes and headers first, so the one allocation is checked against the budget before any copy
    std::vector<item> items;
    for (uint32_t il = 0; il < L; il++) {
        if (!p.layers[il].on_device) continue;
        const ffn_bundle *hb = il < host_bundles.size() && host_bundles[il].w ? &host_bundles[il] : nullptr;
        for_each_item(m, il, p.layers[il].k, hb, true, &layers_[il], &bundles_[il], [&](const item &it) { items.push_back(it); });
        if (hb) bundles_[il].rows = hb->rows;
    }
    if (p.head_on_device) for_each_head_item(m, &head_, [&](const item &it) { items.push_back(it); });
    ggml_init_params ip = {(items.size() + 4 * L + 8) * ggml_tensor_overhead(), nullptr, true};
    ctx_ = ggml_init(ip);
    if (!ctx_) throw std::runtime_error("out of memory for the device weight headers");
    size_t total = 0;
    for (const item &it : items) total += pad(item_bytes(it));
    buf_ = ggml_backend_buft_alloc_buffer(ggml_backend_get_default_buffer_type(be), total);
    if (!buf_) {
        ggml_free(ctx_);
        throw std::runtime_error(std::string("cannot place the weights on the device: ") + ggml_backend_last_error());
    }
    ggml_backend_buffer_set_usage(buf_, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    size_t offs = 0;
    std::vector<uint8_t> staging;
    for (const item &it : items) {
        const ggml_tensor *h = it.host;
        int64_t ne[GGML_MAX_DIMS] = {h->ne[0], h->ne[1], h->ne[2], h->ne[3]};
        if (it.how == cut::ROWS) ne[1] = it.count;
        if (it.how == cut::COLS) ne[0] = it.count;
        ggml_tensor *t = ggml_new_tensor(ctx_, h->type, GGML_MAX_DIMS, ne);
        ggml_set_name(t, h->name);
        ggml_backend_tensor_alloc(buf_, t, offs);
        offs += pad(item_bytes(it));
        if (it.how == cut::COLS) {  // gather the first columns of every row into one compact block
            const size_t row = ggml_row_size(h->type, it.count);
            staging.resize(row * (size_t)h->ne[1]);
            for (int64_t r = 0; r < h->ne[1]; r++) memcpy(staging.data() + r * row, (const char *)h->data + r * h->nb[1], row);
            ggml_backend_tensor_set(t, staging.data(), 0, staging.size());
        } else {
            ggml_backend_tensor_set(t, h->data, 0, ggml_nbytes(t));
        }
        *it.dst = t;
    }
    // the bundle's strided views of gate, up and down_t (as model::prepare_sparse_weights makes them)
    for (uint32_t il = 0; il < L; il++) {
        ffn_bundle &bd = bundles_[il];
        if (!bd.w) continue;
        const int64_t d = bd.w->ne[0], k = bd.w->ne[1] / bd.rows;
        const size_t row = bd.w->nb[1];
        ggml_tensor **views[3] = {&bd.gate, &bd.up, &bd.down_t};
        for (int j = 0; j < bd.rows; j++) *views[j] = ggml_view_2d(ctx_, bd.w, d, k, bd.rows * row, j * row);
        layer_weights &dl = layers_[il];
        dl.ffn_gate = bd.gate;
        dl.ffn_up = bd.up;
        if (bd.rows == 3) dl.ffn_down_t = bd.down_t;
    }
}

device_weights::~device_weights() {
    ggml_backend_buffer_free(buf_);
    if (ctx_) ggml_free(ctx_);
}

uint64_t device_weights::bytes() const { return buf_ ? ggml_backend_buffer_size(buf_) : 0; }

}  // namespace pinfer
