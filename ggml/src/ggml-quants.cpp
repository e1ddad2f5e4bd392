// Reference kernels of every type (placeholder until the quants module lands).
#include "cpu/kernels.h"
#include "ggml-quants.h"

extern "C" void ggml_types_init_ref_kernels(struct ggml_type_traits *table) {}
extern "C" float ggml_fp16_to_fp32(ggml_fp16_t h) { return 0; }
extern "C" ggml_fp16_t ggml_fp32_to_fp16(float f) { return 0; }
extern "C" float ggml_bf16_to_fp32(ggml_bf16_t h) { return 0; }
extern "C" ggml_bf16_t ggml_fp32_to_bf16(float f) { return 0; }
