// Graph planner: places every tensor of a graph that has no memory yet into
// one buffer, reusing the space of intermediates whose last reader has run.
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <vector>

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
    void *buffer = nullptr;
    size_t size = 0;
};

ggml_gallocr *ggml_gallocr_new(void) { return new ggml_gallocr(); }

void ggml_gallocr_free(ggml_gallocr *a) {
    if (!a) return;
    free(a->buffer);
    delete a;
}

size_t ggml_gallocr_buffer_size(const ggml_gallocr *a) { return a->size; }

bool ggml_gallocr_alloc_graph(ggml_gallocr *a, ggml_cgraph *g) {
    const int n_nodes = ggml_graph_n_nodes(g);
    const int n_leafs = ggml_graph_n_leafs(g);

    // Tensors that need memory from us: bases without data.
    auto needs = [](ggml_tensor *t) { return t->view_src == nullptr && t->data == nullptr; };

    // Last node index that reads each base tensor (through any chain of views).
    std::unordered_map<ggml_tensor *, int> last_use;
    for (int i = 0; i < n_nodes; i++) {
        ggml_tensor *node = ggml_graph_node(g, i);
        for (int s = 0; s < GGML_MAX_SRC; s++) {
            ggml_tensor *src = node->src[s];
            if (!src) continue;
            last_use[base_of(src)] = i;
        }
        // a view node keeps its base alive as long as the view is read
        if (node->view_src) last_use[node->view_src] = std::max(last_use[node->view_src], i);
    }
    // Propagate: a view read at j keeps its base alive until j.
    for (int i = n_nodes - 1; i >= 0; i--) {
        ggml_tensor *node = ggml_graph_node(g, i);
        if (!node->view_src) continue;
        auto it = last_use.find(node);
        if (it != last_use.end()) {
            int &lb = last_use[node->view_src];
            if (it->second > lb) lb = it->second;
        }
    }

    offset_allocator alloc;
    std::unordered_map<ggml_tensor *, size_t> offset;
    // Leafs without data (graph inputs) live for the whole graph.
    for (int i = 0; i < n_leafs; i++) {
        ggml_tensor *t = ggml_graph_leaf(g, i);
        if (needs(t) && !offset.count(t)) offset[t] = alloc.alloc(align_up(ggml_nbytes(t)));
    }
    for (int i = 0; i < n_nodes; i++) {
        ggml_tensor *node = ggml_graph_node(g, i);
        if (needs(node) && !offset.count(node)) offset[node] = alloc.alloc(align_up(ggml_nbytes(node)));
        // free bases whose last reader is this node
        for (int s = 0; s < GGML_MAX_SRC; s++) {
            ggml_tensor *src = node->src[s];
            if (!src) continue;
            ggml_tensor *b = base_of(src);
            if (!offset.count(b) || (b->flags & (GGML_TENSOR_FLAG_OUTPUT | GGML_TENSOR_FLAG_INPUT))) continue;
            if (b->op == GGML_OP_NONE) continue;  // leaf: kept
            if (last_use[b] != i) continue;
            alloc.release(offset[b], align_up(ggml_nbytes(b)));
            last_use[b] = -1;  // released once
        }
    }
    const size_t need = alloc.top ? alloc.top : kAlign;
    if (need > a->size) {
        void *nb = aligned_alloc(kAlign, align_up(need));
        if (!nb) return false;
        free(a->buffer);
        a->buffer = nb;
        a->size = align_up(need);
    }
    char *base = (char *)a->buffer;
    for (auto &kv : offset) kv.first->data = base + kv.second;
    // Views get their data from their (now placed) base.
    auto place_view = [](ggml_tensor *t) {
        if (t->view_src && t->view_src->data) t->data = (char *)t->view_src->data + t->view_offs;
    };
    for (int i = 0; i < n_leafs; i++) place_view(ggml_graph_leaf(g, i));
    for (int i = 0; i < n_nodes; i++) place_view(ggml_graph_node(g, i));
    return true;
}
