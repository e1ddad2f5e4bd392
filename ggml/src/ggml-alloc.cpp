// Graph planner: places every tensor of a graph that has no memory yet into
// one buffer, reusing the space of intermediates whose last reader has run.
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <vector>

#include "ggml-backend.h"
#include "ggml-impl.h"
#include "ggml.h"

namespace {

constexpr size_t kAlign = GGML_DEFAULT_ALIGN;
size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// First-fit allocator over [0, inf) offsets with coalescing free blocks.
struct offset_allocator {
    struct block { size_t offs, size; };
    std::vector<block> free_blocks;  // sorted by offset
    size_t top = 0;                   // high-water mark

    size_t alloc(size_t size) {
        size_t best = SIZE_MAX;
        size_t best_size = SIZE_MAX;
        for (size_t i = 0; i < free_blocks.size(); i++) {
            if (free_blocks[i].size >= size && free_blocks[i].size < best_size) {
                best = i;
                best_size = free_blocks[i].size;
            }
        }
        if (best != SIZE_MAX) {
            size_t offs = free_blocks[best].offs;
            free_blocks[best].offs += size;
            free_blocks[best].size -= size;
            if (free_blocks[best].size == 0) free_blocks.erase(free_blocks.begin() + best);
            return offs;
        }
        // grow: a free block that ends at the top can be extended
        if (!free_blocks.empty() && free_blocks.back().offs + free_blocks.back().size == top) {
            size_t offs = free_blocks.back().offs;
            free_blocks.pop_back();
            top = offs + size;
            return offs;
        }
        size_t offs = top;
        top += size;
        return offs;
    }

    void release(size_t offs, size_t size) {
        size_t i = 0;
        while (i < free_blocks.size() && free_blocks[i].offs < offs) i++;
        free_blocks.insert(free_blocks.begin() + i, {offs, size});
        // merge with neighbours
        if (i + 1 < free_blocks.size() && free_blocks[i].offs + free_blocks[i].size == free_blocks[i + 1].offs) {
            free_blocks[i].size += free_blocks[i + 1].size;
            free_blocks.erase(free_blocks.begin() + i + 1);
        }
        if (i > 0 && free_blocks[i - 1].offs + free_blocks[i - 1].size == free_blocks[i].offs) {
            free_blocks[i - 1].size += free_blocks[i].size;
            free_blocks.erase(free_blocks.begin() + i);
        }
    }
};

ggml_tensor *base_of(ggml_tensor *t) { return t->view_src ? t->view_src : t; }

}  // namespace

struct ggml_gallocr {
    ggml_backend_buffer_type_t buft = nullptr;
    ggml_backend_buffer_t buffer = nullptr;
    size_t size = 0;
    // Planning scratch, kept between calls so that re-planning a graph of the
    // same size (every decoded token) allocates nothing.
    std::vector<ggml_tensor *> keys;  // open-addressing set: tensor -> slot
    std::vector<int> slot_of;
    std::vector<int> last_use;        // per slot: last node index reading it
    std::vector<size_t> offset;       // per slot: SIZE_MAX = not placed by us
    std::vector<char> shared;         // per slot: read by a node of another backend (never reused)
    offset_allocator alloc;

    // Slot of t (inserting it), or of t if present when insert is false (-1 if absent).
    int slot(ggml_tensor *t, bool insert, int *n_slots) {
        const size_t mask = keys.size() - 1;
        for (size_t h = ((uintptr_t)t >> 4) & mask;; h = (h + 1) & mask) {
            if (keys[h] == t) return slot_of[h];
            if (!keys[h]) {
                if (!insert) return -1;
                keys[h] = t;
                slot_of[h] = (*n_slots)++;
                return slot_of[h];
            }
        }
    }
};

ggml_gallocr *ggml_gallocr_new(void) { return ggml_gallocr_new_buft(ggml_backend_cpu_buffer_type()); }

ggml_gallocr *ggml_gallocr_new_buft(ggml_backend_buffer_type_t buft) {
    ggml_gallocr *a = new ggml_gallocr();
    a->buft = buft;
    return a;
}

void ggml_gallocr_free(ggml_gallocr *a) {
    if (!a) return;
    ggml_backend_buffer_free(a->buffer);
    delete a;
}

size_t ggml_gallocr_buffer_size(const ggml_gallocr *a) { return a->size; }

bool ggml_gallocr_alloc_graph(ggml_gallocr *a, ggml_cgraph *g) { return ggml_gallocr_alloc_graph_for(a, g, nullptr, nullptr); }

bool ggml_gallocr_alloc_graph_for(ggml_gallocr *a, ggml_cgraph *g, bool (*mine)(const ggml_tensor *, void *), void *ud) {
    const int n_nodes = ggml_graph_n_nodes(g);
    const int n_leafs = ggml_graph_n_leafs(g);
    const int n_total = n_nodes + n_leafs;

    // Every node and leaf gets a slot; the set is twice as large as needed.
    size_t cap = 16;
    while (cap < 2 * (size_t)n_total) cap *= 2;
    if (a->keys.size() < cap) {
        a->keys.resize(cap);
        a->slot_of.resize(cap);
    }
    std::fill(a->keys.begin(), a->keys.end(), nullptr);
    if ((int)a->last_use.size() < n_total) {
        a->last_use.resize(n_total);
        a->offset.resize(n_total);
        a->shared.resize(n_total);
    }
    int n_slots = 0;
    for (int i = 0; i < n_leafs; i++) a->slot(ggml_graph_leaf(g, i), true, &n_slots);
    for (int i = 0; i < n_nodes; i++) a->slot(ggml_graph_node(g, i), true, &n_slots);
    std::fill(a->last_use.begin(), a->last_use.begin() + n_slots, -1);
    std::fill(a->offset.begin(), a->offset.begin() + n_slots, SIZE_MAX);
    std::fill(a->shared.begin(), a->shared.begin() + n_slots, 0);
    auto slot = [&](ggml_tensor *t) { return a->slot(t, false, &n_slots); };

    // Tensors that need memory from us: bases without data (of our buffer type).
    auto needs = [&](ggml_tensor *t) { return t->view_src == nullptr && t->data == nullptr && (!mine || mine(t, ud)); };

    // Last node index that reads each base tensor (through any chain of views:
    // a view's base is always its root, so reading the view reads the base).
    for (int i = 0; i < n_nodes; i++) {
        ggml_tensor *node = ggml_graph_node(g, i);
        for (int s = 0; s < GGML_MAX_SRC; s++) {
            if (!node->src[s]) continue;
            ggml_tensor *b = base_of(node->src[s]);
            const int k = slot(b);
            if (k < 0) continue;
            a->last_use[k] = i;
            // another backend reads it, maybe while its producer's queue runs
            // on: its memory must not be handed to anything else in this graph
            if (b->backend != node->backend) a->shared[k] = 1;
        }
        if (node->view_src) {  // a view node keeps its base alive as long as the view is read
            const int k = slot(node->view_src);
            if (k >= 0) a->last_use[k] = std::max(a->last_use[k], i);
        }
    }

    offset_allocator &alloc = a->alloc;
    alloc.free_blocks.clear();
    alloc.top = 0;
    // Leafs without data (graph inputs) live for the whole graph.
    for (int i = 0; i < n_leafs; i++) {
        ggml_tensor *t = ggml_graph_leaf(g, i);
        const int k = slot(t);
        if (needs(t) && a->offset[k] == SIZE_MAX) a->offset[k] = alloc.alloc(align_up(ggml_nbytes(t)));
    }
    for (int i = 0; i < n_nodes; i++) {
        ggml_tensor *node = ggml_graph_node(g, i);
        const int kn = slot(node);
        if (needs(node) && a->offset[kn] == SIZE_MAX) a->offset[kn] = alloc.alloc(align_up(ggml_nbytes(node)));
        // free bases whose last reader is this node
        for (int s = 0; s < GGML_MAX_SRC; s++) {
            if (!node->src[s]) continue;
            ggml_tensor *b = base_of(node->src[s]);
            const int k = slot(b);
            if (k < 0 || a->offset[k] == SIZE_MAX) continue;
            if (b->flags & (GGML_TENSOR_FLAG_OUTPUT | GGML_TENSOR_FLAG_INPUT)) continue;
            if (b->op == GGML_OP_NONE) continue;  // leaf: kept
            if (a->last_use[k] != i || a->shared[k]) continue;
            alloc.release(a->offset[k], align_up(ggml_nbytes(b)));
            a->last_use[k] = -1;  // released once
        }
    }
    const size_t need = alloc.top ? alloc.top : kAlign;
    if (need > a->size || !a->buffer) {
        ggml_backend_buffer_free(a->buffer);  // first: a budget must not hold both
        a->buffer = nullptr;
        a->size = 0;
        ggml_backend_buffer_t nb = ggml_backend_buft_alloc_buffer(a->buft, align_up(need));
        if (!nb) return false;
        a->buffer = nb;
        a->size = align_up(need);
    }
    char *base = (char *)ggml_backend_buffer_base(a->buffer);
    auto place = [&](ggml_tensor *t) {
        const size_t off = a->offset[slot(t)];
        if (off != SIZE_MAX) {
            t->data = base + off;
            t->buffer = a->buffer;
        }
    };
    for (int i = 0; i < n_leafs; i++) place(ggml_graph_leaf(g, i));
    for (int i = 0; i < n_nodes; i++) place(ggml_graph_node(g, i));
    // Views get their data from their (now placed) base.
    auto place_view = [](ggml_tensor *t) {
        if (t->view_src && t->view_src->data) {
            t->data = (char *)t->view_src->data + t->view_offs;
            t->buffer = t->view_src->buffer;
        }
    };
    for (int i = 0; i < n_leafs; i++) place_view(ggml_graph_leaf(g, i));
    for (int i = 0; i < n_nodes; i++) place_view(ggml_graph_node(g, i));
    return true;
}
