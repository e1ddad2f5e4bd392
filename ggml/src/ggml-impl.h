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

// Ops that only reinterpret memory: nothing to compute.
static inline bool ggml_op_is_view(enum ggml_op op) {
    return op == GGML_OP_VIEW || op == GGML_OP_RESHAPE || op == GGML_OP_PERMUTE || op == GGML_OP_TRANSPOSE ||
           op == GGML_OP_NONE;
}

#ifdef __cplusplus
}
#endif
