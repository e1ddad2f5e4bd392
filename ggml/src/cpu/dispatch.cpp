// Picks SIMD kernels for this CPU (placeholder until the SIMD module lands).
#include "kernels.h"

extern "C" const char *ggml_cpu_init_kernels(struct ggml_type_traits *table) { return "scalar"; }
