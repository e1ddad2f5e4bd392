#include "llama-kv-cache.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace pinfer {

float kq_mask_value(const kv_cell &cell, int32_t tok_pos, int tok_seq, uint32_t window) {
    const bool visible = (cell.seqs >> tok_seq & 1) && cell.pos <= tok_pos &&
                         (window == 0 || (int64_t)tok_pos - cell.pos < (int64_t)window);
    return visible ? 0.0f : -INFINITY;
}

kv_cache::kv_cache(const hparams &hp, uint32_t n_ctx_, ggml_type type_, const std::vector<ggml_backend_buffer_type_t> &layer_buft)
    : type(type_), n_ctx(n_ctx_), cells(n_ctx_) {
    ggml_init_params ip = {(size_t)hp.n_layer * 2 * ggml_tensor_overhead() + 4096, nullptr, true};
    ctx = ggml_init(ip);
    if (!ctx) throw std::runtime_error("out of memory allocating the KV cache headers");
    for (uint32_t il = 0; il < hp.n_layer; il++) {
        k.push_back(ggml_new_tensor_2d(ctx, type, hp.n_embd_gqa(), n_ctx));
        v.push_back(ggml_new_tensor_2d(ctx, type, n_ctx, hp.n_embd_gqa()));
    }
    auto buft_of = [&](uint32_t il) {
        return il < layer_buft.size() && layer_buft[il] ? layer_buft[il] : ggml_backend_cpu_buffer_type();
    };
    const size_t align = GGML_DEFAULT_ALIGN;
    auto pad = [&](size_t x) { return (x + align - 1) / align * align; };
    std::vector<ggml_backend_buffer_type_t> done;
    for (uint32_t il0 = 0; il0 < hp.n_layer; il0++) {
        ggml_backend_buffer_type_t bt = buft_of(il0);
        bool seen = false;
        for (auto d : done) seen |= d == bt;
        if (seen) continue;
        done.push_back(bt);
        size_t total = 0;
        for (uint32_t il = 0; il < hp.n_layer; il++)
            if (buft_of(il) == bt) total += pad(ggml_nbytes(k[il])) + pad(ggml_nbytes(v[il]));
        ggml_backend_buffer_t buf = ggml_backend_buft_alloc_buffer(bt, total);
        if (!buf) {
            for (auto b : buffers) ggml_backend_buffer_free(b);
            ggml_free(ctx);
            throw std::runtime_error("out of memory allocating the KV cache (" + std::to_string(total >> 20) + " MiB): " +
                                     ggml_backend_last_error());
        }
        buffers.push_back(buf);
        size_t offs = 0;
        for (uint32_t il = 0; il < hp.n_layer; il++) {
            if (buft_of(il) != bt) continue;
            for (ggml_tensor *t : {k[il], v[il]}) {
                ggml_backend_tensor_alloc(buf, t, offs);
                // CPU buffers start zeroed (and stay uncommitted until used)
                if (!ggml_backend_buft_is_host(bt)) ggml_backend_tensor_memset(t, 0, 0, ggml_nbytes(t));
                offs += pad(ggml_nbytes(t));
            }
        }
    }
}

kv_cache::~kv_cache() {
    for (auto b : buffers) ggml_backend_buffer_free(b);
    ggml_free(ctx);
}

int kv_cache::find_run(int n) const {
    int run = 0;
    for (uint32_t i = 0; i < n_ctx; i++) {
        run = cells[i].free() ? run + 1 : 0;
        if (run == n) return (int)i - n + 1;
    }
    return -1;
}

uint32_t kv_cache::used_end() const {
    for (uint32_t i = n_ctx; i > 0; i--)
        if (!cells[i - 1].free()) return i;
    return 0;
}

uint32_t kv_cache::n_used() const {
    uint32_t n = 0;
    for (const kv_cell &c : cells) n += !c.free();
    return n;
}

int32_t kv_cache::seq_pos_max(int seq) const {
    int32_t p = -1;
    for (const kv_cell &c : cells)
        if (c.seqs >> seq & 1) p = std::max(p, c.pos);
    return p;
}

void kv_cache::seq_rm(int seq, int32_t p0, int32_t p1) {
    const uint64_t bits = seq < 0 ? ~0ull : 1ull << seq;
    for (kv_cell &c : cells) {
        if (c.free() || c.pos < p0 || (p1 >= 0 && c.pos >= p1)) continue;
        c.seqs &= ~bits;
        if (c.free()) c.pos = -1;
    }
}

void kv_cache::seq_cp(int src, int dst, int32_t p0, int32_t p1) {
    for (kv_cell &c : cells)
        if ((c.seqs >> src & 1) && c.pos >= p0 && (p1 < 0 || c.pos < p1)) c.seqs |= 1ull << dst;
}

void kv_cache::clear() {
    for (kv_cell &c : cells) c = kv_cell();
}

void kv_cache::store(ggml_context *g, ggml_cgraph *gf, int il, ggml_tensor *k_cur, ggml_tensor *v_cur, int cell0,
                     std::vector<std::pair<ggml_tensor *, size_t>> *moving) const {
    const int64_t n_embd_gqa = k[il]->ne[0];
    const int64_t n_tokens = k_cur->ne[1];
    ggml_tensor *k_dst = ggml_view_2d(g, k[il], n_embd_gqa, n_tokens, k[il]->nb[1], (size_t)cell0 * k[il]->nb[1]);
    ggml_tensor *k_cpy = ggml_cpy(g, k_cur, k_dst);
    ggml_build_forward_expand(gf, k_cpy);
    // V is stored transposed: element (channel c, position p) at row c, column p
    ggml_tensor *v_dst = ggml_view_2d(g, v[il], n_tokens, n_embd_gqa, v[il]->nb[1], (size_t)cell0 * v[il]->nb[0]);
    ggml_tensor *v_cpy = ggml_cpy(g, ggml_transpose(g, v_cur), v_dst);
    ggml_build_forward_expand(gf, v_cpy);
    if (moving)
        for (auto tv : {std::make_pair(k_dst, k[il]->nb[1]), std::make_pair(k_cpy, k[il]->nb[1]),
                        std::make_pair(v_dst, v[il]->nb[0]), std::make_pair(v_cpy, v[il]->nb[0])})
            moving->push_back(tv);
}

void kv_view_move(const std::vector<std::pair<ggml_tensor *, size_t>> &moving, int cell0) {
    for (const auto &tv : moving) {
        ggml_tensor *t = tv.first;  // a view of a cache tensor (views of views are flattened)
        t->view_offs = (size_t)cell0 * tv.second;
        t->data = (char *)t->view_src->data + t->view_offs;
    }
}

ggml_tensor *kv_cache::view_k(ggml_context *g, int il, int n_kv, int head_dim, int n_head_kv) const {
    const size_t es = ggml_type_size(type);
    return ggml_view_3d(g, k[il], head_dim, n_kv, n_head_kv, k[il]->nb[1], es * head_dim, 0);
}

ggml_tensor *kv_cache::view_v(ggml_context *g, int il, int n_kv, int head_dim, int n_head_kv) const {
    return ggml_view_3d(g, v[il], n_kv, head_dim, n_head_kv, v[il]->nb[1], v[il]->nb[1] * head_dim, 0);
}

}  // namespace pinfer
