#include "llama-kv-cache.h"

#include <stdexcept>

namespace pinfer {

kv_cache::kv_cache(const hparams &hp, uint32_t n_ctx_, ggml_type type_) : type(type_), n_ctx(n_ctx_) {
    const size_t per_layer = 2 * ggml_row_size(type, (int64_t)hp.n_embd_gqa() * n_ctx);
    ggml_init_params ip = {hp.n_layer * (2 * ggml_tensor_overhead() + per_layer + 2 * GGML_DEFAULT_ALIGN) + 4096,
                           nullptr, false};
    ctx = ggml_init(ip);
    if (!ctx) throw std::runtime_error("out of memory allocating the KV cache (" + std::to_string(ip.mem_size >> 20) + " MiB)");
    for (uint32_t il = 0; il < hp.n_layer; il++) {
        k.push_back(ggml_new_tensor_2d(ctx, type, hp.n_embd_gqa(), n_ctx));
        v.push_back(ggml_new_tensor_2d(ctx, type, n_ctx, hp.n_embd_gqa()));
    }
}

kv_cache::~kv_cache() { ggml_free(ctx); }

void kv_cache::store(ggml_context *g, ggml_cgraph *gf, int il, ggml_tensor *k_cur, ggml_tensor *v_cur, int pos0) const {
    const int64_t n_embd_gqa = k[il]->ne[0];
    const int64_t n_tokens = k_cur->ne[1];
    ggml_tensor *k_dst = ggml_view_2d(g, k[il], n_embd_gqa, n_tokens, k[il]->nb[1], (size_t)pos0 * k[il]->nb[1]);
    ggml_build_forward_expand(gf, ggml_cpy(g, k_cur, k_dst));
    // V is stored transposed: element (channel c, position p) at row c, column p
    ggml_tensor *v_dst = ggml_view_2d(g, v[il], n_tokens, n_embd_gqa, v[il]->nb[1], (size_t)pos0 * v[il]->nb[0]);
    ggml_build_forward_expand(gf, ggml_cpy(g, ggml_transpose(g, v_cur), v_dst));
}

ggml_tensor *kv_cache::view_k(ggml_context *g, int il, int n_kv, int head_dim, int n_head_kv) const {
    const size_t es = ggml_type_size(type);
    return ggml_view_3d(g, k[il], head_dim, n_kv, n_head_kv, k[il]->nb[1], es * head_dim, 0);
}

ggml_tensor *kv_cache::view_v(ggml_context *g, int il, int n_kv, int head_dim, int n_head_kv) const {
    return ggml_view_3d(g, v[il], n_kv, head_dim, n_head_kv, v[il]->nb[1], v[il]->nb[1] * head_dim, 0);
}

}  // namespace pinfer
