// Picks the best SIMD kernels this CPU can run, once at start-up. The SIMD
// files are compiled with their own -m flags, so nothing here may touch a
// wide register: we only test CPU features and call the matching family.
//
// PINFER_CPU=avx2 (or scalar) caps the family below what the CPU has, e.g.
// to run and measure the path a CPU without AVX-512 takes; avx512 (or
// unset) means the best the CPU has. Any other value is an error.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "vec-dot-simd.h"

static const ggml_q8x_kernels *g_q8x = nullptr;
static ggml_vec_dot2_t g_dot2[GGML_TYPE_COUNT];
static char g_variant[96] = "scalar";
__thread int ggml_prefetch_distance = 0;

const ggml_q8x_kernels *ggml_cpu_q8x(void) {
    ggml_get_type_traits(GGML_TYPE_F32);  // runs the start-up dispatch once
    return g_q8x;
}

ggml_vec_dot2_t ggml_cpu_dot_resid(enum ggml_type t) {
    ggml_get_type_traits(GGML_TYPE_F32);
    return t >= 0 && t < GGML_TYPE_COUNT ? g_dot2[t] : nullptr;
}

const char *ggml_cpu_kernel_variant(void) {
    ggml_get_type_traits(GGML_TYPE_F32);
    return g_variant;
}

// The highest family PINFER_CPU allows: 2 avx512, 1 avx2, 0 scalar.
static int env_cap(void) {
    const char *e = getenv("PINFER_CPU");
    if (!e || !*e || strcmp(e, "avx512") == 0) return 2;
    if (strcmp(e, "avx2") == 0) return 1;
    if (strcmp(e, "scalar") == 0) return 0;
    fprintf(stderr, "pinfer: PINFER_CPU='%s' is not one of avx512, avx2, scalar\n", e);
    exit(2);
}

extern "C" const char *ggml_cpu_init_kernels(struct ggml_type_traits *table) {
    const int cap = env_cap();
    const char *capped = cap < 2 ? ", capped by PINFER_CPU" : "";
#ifdef GGML_SIMD_X86
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                      __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2");
    const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512vnni");
    if (avx512 && cap >= 2) {
        const bool vbmi = __builtin_cpu_supports("avx512vbmi");
        ggml_cpu_set_kernels_avx512(table, __builtin_cpu_supports("avx512bf16"));
        g_q8x = vbmi ? ggml_cpu_q8x_avx512vbmi() : ggml_cpu_q8x_avx512();
        ggml_cpu_set_dot_resid_avx512(g_dot2);
        snprintf(g_variant, sizeof(g_variant), "avx512 (VNNI; q8x weights unpacked %s)", vbmi ? "with VBMI" : "by inserts");
        return "avx512";
    }
    if (avx2 && cap >= 1) {
        ggml_cpu_set_kernels_avx2(table);
        g_q8x = ggml_cpu_q8x_avx2();
        ggml_cpu_set_dot_resid_avx2(g_dot2);
        snprintf(g_variant, sizeof(g_variant), "avx2 (FMA, F16C%s)", capped);
        return "avx2";
    }
#endif
    snprintf(g_variant, sizeof(g_variant), "scalar (reference kernels%s)", capped);
    return "scalar";
}
