// Internal: the instruction-set features of this CPU, detected once. Every
// kernel choice (the type table's dot kernels, q8x, axpy) reads them here.
#pragma once

struct ggml_cpu_features {
    bool avx2, fma, f16c, bmi2, avxvnni;
    bool avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16, avx512vbmi;
    bool amx_int8;  // AMX tiles with int8 products, and the OS keeps their state (XCR0)
    bool amd;       // vendor "AuthenticAMD"
    int family;     // CPUID display family (base + extended): 0x1A for AMD Zen 5
};

// All false off x86-64.
const struct ggml_cpu_features *ggml_cpu_get_features(void);

// Asks the OS, once per process, for the AMX tile data state (Linux:
// arch_prctl(ARCH_REQ_XCOMP_PERM)); until granted, a tile instruction faults.
// False off Linux, without amx_int8, or when the kernel refuses (e.g. an
// alternate signal stack too small for the larger signal frame).
bool ggml_cpu_amx_request(void);
