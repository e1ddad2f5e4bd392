// Internal: the instruction-set features of this CPU, detected once. Every
// kernel choice (the type table's dot kernels, q8x, axpy) reads them here.
#pragma once

struct ggml_cpu_features {
    bool avx2, fma, f16c, bmi2, avxvnni;
    bool avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16, avx512vbmi;
};

// All false off x86-64.
const struct ggml_cpu_features *ggml_cpu_get_features(void);
