// Hooks that fill the kernel slots of the type traits table at start-up.
#pragma once
#include "ggml.h"

#ifdef __cplusplus
extern "C" {
#endif

// Portable reference kernels (ggml-quants.cpp): to_float, from_float_ref,
// vec_dot_ref, vec_dot_type; also sets from_float/vec_dot to the references.
void ggml_types_init_ref_kernels(struct ggml_type_traits *table);
// Best kernels for this CPU (cpu/dispatch.cpp): overrides from_float and
// vec_dot where a SIMD kernel exists; returns the family name.
const char *ggml_cpu_init_kernels(struct ggml_type_traits *table);

#ifdef __cplusplus
}
#endif

// The kernel family dispatch picked, in words (e.g. which q8x weight loader,
// or that PINFER_CPU capped it), for benchmark reports.
const char *ggml_cpu_kernel_variant(void);
