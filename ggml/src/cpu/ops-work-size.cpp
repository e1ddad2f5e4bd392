// Scratch each op needs from the executor's shared work buffer, by op (from
// the op table's work column); the ops without one work in place on dst.
#include "ops.h"

typedef size_t (*work_size_fn)(const ggml_tensor *node, int n_threads);

#define GGML_CPU_WORK_0(name) nullptr
#define GGML_CPU_WORK_1(name) ggml_##name##_work_size
#define GGML_CPU_WORK_ROW(NAME, name, n_src_min, n_src_max, view, prec, work) GGML_CPU_WORK_##work(name),
static const work_size_fn k_work_size[] = {GGML_OP_LIST(GGML_CPU_WORK_ROW)};
#undef GGML_CPU_WORK_ROW
static_assert(sizeof(k_work_size) / sizeof(k_work_size[0]) == GGML_OP_COUNT, "one work-size slot per op");

extern "C" size_t ggml_op_work_size(const ggml_tensor *node, int n_threads) {
    const work_size_fn f = (int)node->op >= 0 && node->op < GGML_OP_COUNT ? k_work_size[node->op] : nullptr;
    return f ? f(node, n_threads) : 0;
}
