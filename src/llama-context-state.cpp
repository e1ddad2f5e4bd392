// KV snapshots: the cached keys and values of the first n_past positions, copied
// out of (and back into) the cache's buffers, wherever they live (CPU or device).
// A snapshot is of sequence 0 alone, held in cells [0, n_past) in position order
// (what a single-sequence context has); restoring gives the cells that layout.
//
// K is stored [n_embd_gqa, n_ctx] (one row per position), so its first n_past rows
// are one contiguous block; V is transposed [n_ctx, n_embd_gqa], so each channel
// contributes its first n_past elements. The snapshot is these blocks, layer by
// layer, K then V, for the cache and then the dense twin (verify mode).
#include <cstring>
#include <stdexcept>
#include <string>

#include "ggml-backend.h"
#include "llama-context.h"

namespace pinfer {

namespace {

template <typename F>
void each_block(const kv_cache &kv, uint32_t n, F &&f) {
    for (size_t il = 0; il < kv.k.size(); il++) {
        const ggml_tensor *k = kv.k[il], *v = kv.v[il];
        f(k, size_t(0), size_t(n) * k->nb[1]);
        const size_t row = size_t(n) * v->nb[0];
        for (int64_t c = 0; c < v->ne[1]; c++) f(v, size_t(c) * v->nb[1], row);
    }
}

// Sequence 0 alone in cells [0, n), cell i holding position i.
void check_snapshot_layout(const kv_cache &kv, uint32_t n) {
    for (uint32_t i = 0; i < kv.n_ctx; i++) {
        const kv_cell &c = kv.cells[i];
        const bool ok = i < n ? c.seqs == 1 && c.pos == (int32_t)i : c.free();
        if (!ok)
            throw std::invalid_argument("state_get: a snapshot holds one sequence in position order; this cache "
                                        "has other sequences or gaps (cell " + std::to_string(i) + ")");
    }
}

void set_snapshot_layout(kv_cache &kv, uint32_t n) {
    kv.clear();
    for (uint32_t i = 0; i < n; i++) {
        kv.cells[i].pos = (int32_t)i;
        kv.cells[i].seqs = 1;
    }
}

size_t kv_bytes(const kv_cache &kv, uint32_t n) {
    size_t total = 0;
    each_block(kv, n, [&](const ggml_tensor *, size_t, size_t size) { total += size; });
    return total;
}

}  // namespace

size_t context::state_size(uint32_t n_past) const {
    return kv_bytes(*kv_, n_past) + (kv_dense_ ? kv_bytes(*kv_dense_, n_past) : 0);
}

void context::state_get(uint8_t *dst, size_t size) const {
    const uint32_t n = n_past();
    check_snapshot_layout(*kv_, n);
    if (size != state_size(n))
        throw std::invalid_argument("state_get: buffer of " + std::to_string(size) + " bytes, the state needs " +
                                    std::to_string(state_size(n)));
    size_t at = 0;
    auto out = [&](const ggml_tensor *t, size_t offset, size_t bytes) {
        ggml_backend_tensor_get(t, dst + at, offset, bytes);
        at += bytes;
    };
    each_block(*kv_, n, out);
    if (kv_dense_) each_block(*kv_dense_, n, out);
}

void context::state_set(const uint8_t *src, size_t size, uint32_t n_past, const float *last_logits) {
    if (n_past == 0 || n_past > kv_->n_ctx)
        throw std::invalid_argument("state_set: " + std::to_string(n_past) + " positions, the context holds " +
                                    std::to_string(kv_->n_ctx));
    if (size != state_size(n_past))
        throw std::invalid_argument("state_set: the state has " + std::to_string(size) + " bytes, this context needs " +
                                    std::to_string(state_size(n_past)) + " for " + std::to_string(n_past) +
                                    " positions (another model, KV type or sparse_verify setting?)");
    size_t at = 0;
    auto in = [&](const ggml_tensor *t, size_t offset, size_t bytes) {
        ggml_backend_tensor_set(const_cast<ggml_tensor *>(t), src + at, offset, bytes);
        at += bytes;
    };
    each_block(*kv_, n_past, in);
    set_snapshot_layout(*kv_, n_past);
    if (kv_dense_) {
        each_block(*kv_dense_, n_past, in);
        set_snapshot_layout(*kv_dense_, n_past);
    }
    const size_t n_vocab = model_.hp.n_vocab;
    if (logits_.size() < n_vocab) logits_.resize(n_vocab);
    std::memcpy(logits_.data(), last_logits, n_vocab * sizeof(float));
    n_logits_ = 1;
}

}  // namespace pinfer
