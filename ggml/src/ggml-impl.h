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
