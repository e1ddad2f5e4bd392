// The KV cache: per layer, K as [n_embd_gqa, n_cells] (one row per cell)
// and V transposed as [n_cells, n_embd_gqa] (one row per channel), so that both
// attention products read contiguous rows.
//
// Cells are shared by up to 64 sequences: each holds a position and the set of
// sequences that see it (a cell copied into another sequence is shared, not
// duplicated). A batch is stored in one run of free cells; the attention mask
// (kq_mask_value) lets a token see only the cells of its own sequences.
#pragma once

#include <cstdint>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "llama-hparams.h"

namespace pinfer {

constexpr int KV_MAX_SEQ = 64;  // sequence ids 0..63 (one bit each per cell)

struct kv_cell {
    int32_t pos = -1;   // position in its sequences; -1: free
    uint64_t seqs = 0;  // bit s: sequence s sees this cell
    bool free() const { return seqs == 0; }
};

// Mask value of cell (pos, seqs) for a token of sequence seq at position pos:
// 0 when the token may attend to it (its own sequence, not in its future and,
// with a sliding window, tok_pos - cell pos < window; 0: no window), else
// -inf. The one place that decides visibility, for every batch.
float kq_mask_value(const kv_cell &cell, int32_t tok_pos, int tok_seq, uint32_t window = 0);

struct kv_cache {
    ggml_context *ctx = nullptr;
    ggml_type type = GGML_TYPE_F16;
    uint32_t n_ctx = 0;  // cells
    std::vector<kv_cell> cells;
    std::vector<ggml_tensor *> k, v;
    std::vector<ggml_backend_buffer_t> buffers;  // one per buffer type the layers use

    // layer_buft[il]: where layer il's K and V live (nullptr or empty: the CPU).
    // Zero-filled, so attention over cells not yet written reads finite
    // values. Throws naming the budget or the size on failure.
    kv_cache(const hparams &hp, uint32_t n_ctx, ggml_type type,
             const std::vector<ggml_backend_buffer_type_t> &layer_buft = {});
    ~kv_cache();
    kv_cache(const kv_cache &) = delete;
    kv_cache &operator=(const kv_cache &) = delete;

    // ---- cells ----
    // First cell of the lowest run of n free cells, or -1 when there is none.
    int find_run(int n) const;
    // One past the highest cell in use (0 when empty): attention reads [0, used_end).
    uint32_t used_end() const;
    uint32_t n_used() const;
    int32_t seq_pos_max(int seq) const;  // -1 when the sequence has no cell
    // Drops sequence seq (< 0: every sequence) from the cells with p0 <= pos < p1 (p1 < 0: no end).
    void seq_rm(int seq, int32_t p0, int32_t p1);
    // Sequence dst also sees src's cells with p0 <= pos < p1 (shared cells: no copy).
    void seq_cp(int src, int dst, int32_t p0, int32_t p1);
    void clear();

    // Graph pieces: store this batch's K/V [n_embd_gqa, n_tokens] at cell
    // cell0, and views of the first n_kv cells shaped for attention. moving (may
    // be null) collects the store's views with their bytes per cell, so a
    // cached graph can be pointed at the next cell (kv_view_move).
    void store(ggml_context *ctx, ggml_cgraph *gf, int il, ggml_tensor *k_cur, ggml_tensor *v_cur, int cell0,
               std::vector<std::pair<ggml_tensor *, size_t>> *moving = nullptr) const;
    ggml_tensor *view_k(ggml_context *ctx, int il, int n_kv, int head_dim, int n_head_kv) const;  // [hd, n_kv, n_head_kv]
    ggml_tensor *view_v(ggml_context *ctx, int il, int n_kv, int head_dim, int n_head_kv) const;  // [n_kv, hd, n_head_kv]
};

// Points the collected store views at cell cell0.
void kv_view_move(const std::vector<std::pair<ggml_tensor *, size_t>> &moving, int cell0);

}  // namespace pinfer
