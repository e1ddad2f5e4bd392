// The KV cache: per layer, K as [n_embd_gqa, n_ctx] (one row per position)
// and V transposed as [n_ctx, n_embd_gqa] (one row per channel), so that both
// attention products read contiguous rows.
#pragma once

#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "llama-hparams.h"

namespace pinfer {

struct kv_cache {
    ggml_context *ctx = nullptr;
    ggml_type type = GGML_TYPE_F16;
    uint32_t n_ctx = 0;
    uint32_t n_past = 0;  // positions [0, n_past) hold valid entries
    std::vector<ggml_tensor *> k, v;
    std::vector<ggml_backend_buffer_t> buffers;  // one per buffer type the layers use

    // layer_buft[il]: where layer il's K and V live (nullptr or empty: the CPU).
    // Zero-filled, so attention over positions not yet written reads finite
    // values. Throws naming the budget or the size on failure.
    kv_cache(const hparams &hp, uint32_t n_ctx, ggml_type type,
             const std::vector<ggml_backend_buffer_type_t> &layer_buft = {});
    ~kv_cache();
    kv_cache(const kv_cache &) = delete;
    kv_cache &operator=(const kv_cache &) = delete;

    // Graph pieces: store this batch's K/V [n_embd_gqa, n_tokens] at pos0, and
    // views of the first n_kv positions shaped for attention. moving (may be
    // null) collects the store's views with their bytes per position, so a
    // cached graph can be pointed at the next position (kv_view_move).
    void store(ggml_context *ctx, ggml_cgraph *gf, int il, ggml_tensor *k_cur, ggml_tensor *v_cur, int pos0,
               std::vector<std::pair<ggml_tensor *, size_t>> *moving = nullptr) const;
    ggml_tensor *view_k(ggml_context *ctx, int il, int n_kv, int head_dim, int n_head_kv) const;  // [hd, n_kv, n_head_kv]
    ggml_tensor *view_v(ggml_context *ctx, int il, int n_kv, int head_dim, int n_head_kv) const;  // [n_kv, hd, n_head_kv]
};

// Points the collected store views at position pos0.
void kv_view_move(const std::vector<std::pair<ggml_tensor *, size_t>> &moving, int pos0);

}  // namespace pinfer
