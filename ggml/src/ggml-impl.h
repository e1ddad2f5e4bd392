// Internal helpers shared by the runtime's modules.
#pragma once

#include "ggml.h"

#ifdef __cplusplus
extern "C" {
#endif

// Print a message and abort: for programming errors in graph construction.
[[noreturn]] void ggml_abort(const char *fmt, ...);

int ggml_graph_n_leafs(const struct ggml_cgraph *g);
struct ggml_tensor *ggml_graph_leaf(const struct ggml_cgraph *g, int i);
struct ggml_tensor **ggml_graph_nodes(const struct ggml_cgraph *g);  // the n_nodes array, in order

// A planner that allocates its buffer from buft, and planning restricted to
// the tensors mine(t, ud) accepts (NULL: all): one planner per buffer type.
struct ggml_backend_buffer_type;
struct ggml_gallocr *ggml_gallocr_new_buft(struct ggml_backend_buffer_type *buft);
bool ggml_gallocr_alloc_graph_for(struct ggml_gallocr *a, struct ggml_cgraph *g,
                                  bool (*mine)(const struct ggml_tensor *t, void *ud), void *ud);

// The CPU executor over a run of nodes (views skipped). check_host: refuse a
// node that touches non-host memory (the CPU backend); a device simulated on
// the CPU passes false. Returns 0, 1 op without a CPU kernel, 2 not planned,
// 3 out of memory, 4 non-host memory.
int ggml_cpu_compute_nodes(struct ggml_threadpool *tp, struct ggml_tensor **nodes, int n, bool check_host);

// The op_params slot of a weight product's enum ggml_prec (ggml_set_prec).
#define GGML_PREC_PARAM (GGML_MAX_OP_PARAMS - 1)

// Ops that only reinterpret memory: nothing to compute (the table's view column).
static inline bool ggml_op_is_view(enum ggml_op op) {
    switch (op) {
#define GGML_OP_VIEW_ROW(NAME, name, n_src_min, n_src_max, view, prec, work) \
    case GGML_OP_##NAME: return view != 0;
        GGML_OP_LIST(GGML_OP_VIEW_ROW)
#undef GGML_OP_VIEW_ROW
        default: return false;
    }
}

#ifdef __cplusplus
}
#endif
