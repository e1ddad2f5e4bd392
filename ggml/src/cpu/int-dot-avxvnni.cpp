// The AVX2 family's integer dot kernels compiled with AVX-VNNI
// (int-dot-avx2.h): dispatch installs them over the plain AVX2 ones when the
// CPU has AVX-VNNI (cpu-type-traits.cpp).
#include "int-dot-avx2.h"

#if !GGML_AVX2_VNNI
#error "int-dot-avxvnni.cpp needs -mavxvnni (CMakeLists.txt sets it for *-avxvnni.cpp)"
#endif

void ggml_cpu_set_kernels_avxvnni(struct ggml_cpu_type_traits *t) { set_int_dots(t, nullptr, nullptr); }

void ggml_cpu_set_dot_resid_avxvnni(ggml_vec_dot2_t *t) { set_int_dots(nullptr, t, nullptr); }

const ggml_q8x_kernels *ggml_cpu_q8x_avxvnni(void) {
    static const ggml_q8x_kernels q = [] {
        ggml_q8x_kernels k = *ggml_cpu_q8x_avx2();  // the AVX2 quantizers and F16 rows
        set_int_dots(nullptr, nullptr, &k);
        return k;
    }();
    return &q;
}
