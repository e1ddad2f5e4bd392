// Picks the best SIMD kernels this CPU can run, once at start-up. The SIMD
// files are compiled with their own -m flags, so nothing here may touch a
// wide register: we only test CPU features and call the matching family.
#include "cpu-features.h"
#include "kernels.h"
#include "vec-dot-simd.h"

static const ggml_q8x_kernels *g_q8x = nullptr;

const ggml_q8x_kernels *ggml_cpu_q8x(void) {
    ggml_get_type_traits(GGML_TYPE_F32);  // runs the start-up dispatch once
    return g_q8x;
}

extern "C" const char *ggml_cpu_init_kernels(struct ggml_type_traits *table) {
#ifdef GGML_SIMD_X86
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                      ggml_cpu_has_f16c() && __builtin_cpu_supports("bmi2");
    const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512vnni");
    if (avx512) {
        ggml_cpu_set_kernels_avx512(table, __builtin_cpu_supports("avx512bf16"));
        g_q8x = __builtin_cpu_supports("avx512vbmi") ? ggml_cpu_q8x_avx512vbmi() : ggml_cpu_q8x_avx512();
        return "avx512";
    }
    if (avx2) {
        ggml_cpu_set_kernels_avx2(table);
        return "avx2";
    }
#endif
    return "scalar";
}
