// The one CPU feature detector. Compiled without -m flags: it only asks the
// CPU, it never runs a wide instruction.
#include "cpu-features.h"

// clang before 16 knows no "f16c" name for __builtin_cpu_supports (a compile
// error), so F16C is read from CPUID leaf 1 (ECX bit 29) there; AVX-VNNI
// (leaf 7 subleaf 1, EAX bit 4) from CPUID everywhere, for the same reason.
#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
static bool has_avxvnni() {
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4));
}
// AMX-TILE and AMX-INT8 (leaf 7, EDX bits 24 and 25), and the OS's XSAVE
// support for the tile configuration and data (XCR0 bits 17 and 18).
static bool has_amx_int8() {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25))) return false;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE)) return false;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & (3u << 17)) == (3u << 17);
}
// Vendor and display family (leaf 0's vendor string, leaf 1's EAX): some
// tuning (the weight prefetch distance) is measured per microarchitecture.
static void vendor_family(bool *amd, int *family) {
    unsigned a, b, c, d;
    *amd = __get_cpuid(0, &a, &b, &c, &d) && b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;  // "Auth" "enti" "cAMD"
    *family = 0;
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        const int base = (int)((a >> 8) & 0xF), ext = (int)((a >> 20) & 0xFF);
        *family = base == 0xF ? base + ext : base;
    }
}
#if defined(__clang__) && __clang_major__ < 16
static bool has_f16c() {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#else
static bool has_f16c() { return __builtin_cpu_supports("f16c"); }
#endif
#endif

static ggml_cpu_features detect() {
    ggml_cpu_features f = {};
#if defined(__x86_64__) || defined(_M_X64)
    __builtin_cpu_init();
    f.avx2 = __builtin_cpu_supports("avx2");
    f.fma = __builtin_cpu_supports("fma");
    f.f16c = has_f16c();
    f.bmi2 = __builtin_cpu_supports("bmi2");
    f.avxvnni = f.avx2 && has_avxvnni();  // VEX-encoded: needs the OS's AVX state, as AVX2 does
    f.avx512f = __builtin_cpu_supports("avx512f");
    f.avx512bw = __builtin_cpu_supports("avx512bw");
    f.avx512vl = __builtin_cpu_supports("avx512vl");
    f.avx512dq = __builtin_cpu_supports("avx512dq");
    f.avx512vnni = __builtin_cpu_supports("avx512vnni");
    f.avx512bf16 = __builtin_cpu_supports("avx512bf16");
    f.avx512vbmi = __builtin_cpu_supports("avx512vbmi");
    f.amx_int8 = has_amx_int8();
    vendor_family(&f.amd, &f.family);
#endif
    return f;
}

const ggml_cpu_features *ggml_cpu_get_features(void) {
    static const ggml_cpu_features f = detect();
    return &f;
}

bool ggml_cpu_amx_request(void) {
#if (defined(__x86_64__) || defined(_M_X64)) && defined(__linux__)
    static const bool granted = [] {
        constexpr long ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;  // <asm/prctl.h>, the XSAVE component
        return ggml_cpu_get_features()->amx_int8 && syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    }();
    return granted;
#else
    return false;
#endif
}
