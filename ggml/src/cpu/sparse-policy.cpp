// The CPU's dense-vs-sparse crossover (ggml_sparse_dense_policy, ggml.h).
#include "ggml-cpu.h"

extern "C" bool ggml_cpu_sparse_should_use_dense(int64_t n_active, int64_t n, int64_t T) {
    if (n <= 0) return true;
    const double density = (double)n_active / (double)n;
    // Crossover densities measured with pinfer-bench-sparse (docs/sparse-bench.md):
    // decode (T = 1): the column-sparse down kernel loses to the dense matvec
    // from about half density on; batches gain more from sparsity (the weight
    // rows are reused across tokens), dense won only near full density.
    return density >= (T <= 1 ? 0.5 : 0.85);
}
