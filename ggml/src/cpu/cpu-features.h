// CPU feature tests the compilers disagree on. clang before 16 knows no
// "f16c" name for __builtin_cpu_supports (a compile error), so F16C is read
// from CPUID leaf 1 (ECX bit 29) there.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#if defined(__clang__) && __clang_major__ < 16
#include <cpuid.h>
static inline bool ggml_cpu_has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#else
static inline bool ggml_cpu_has_f16c(void) { return __builtin_cpu_supports("f16c"); }
#endif
#endif
