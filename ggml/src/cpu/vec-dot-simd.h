// Internal: the SIMD kernel families. Each family lives in a file compiled
// with its own -m flags (vec-dot-avx2.cpp, vec-dot-avx512.cpp) and exposes one
// entry that overwrites the vec_dot / from_float slots it implements, leaving
// every other slot (the scalar reference) as it was. Only call a family after
// checking the CPU supports it (dispatch.cpp does; tests may too).
#pragma once
#include "ggml.h"

#if defined(__x86_64__) || defined(_M_X64)
#define GGML_SIMD_X86 1
// AVX2 + FMA + F16C.
void ggml_cpu_set_kernels_avx2(struct ggml_type_traits *table);
// AVX-512 F/BW/VL/DQ/VNNI (+BF16 when has_bf16): calls the AVX2 entry first,
// then replaces the kernels that gain from 512-bit vectors.
void ggml_cpu_set_kernels_avx512(struct ggml_type_traits *table, bool has_bf16);
#endif
