// What every CUDA source shares: the backend's context, the error check, a
// plain view of a tensor that kernels take by value, and the weight formats
// on the device (one element at a time, so a kernel dequantizes in registers
// and any type plugs into the same template).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "ggml-backend-impl.h"
#include "ggml-impl.h"
#include "ggml.h"

namespace pcuda {

// The backend's state (cuda-backend.cu owns it).
struct context {
    int device = 0;
    cudaStream_t compute = nullptr;  // kernels and the order of everything
    cudaStream_t copy = nullptr;     // transfers (ordered against compute by two events)
    cudaEvent_t joined = nullptr, copied = nullptr;
    int n_sm = 1;
    void *scratch = nullptr;  // work memory of the fused ops, from the budgeted arena
    size_t scratch_size = 0;
    ggml_backend_buffer_t scratch_buf = nullptr;
    ggml_backend_buffer_type mem, pinned;
    char name[64];
    bool fuse_attention = true;
    std::atomic<uint64_t> h2d{0}, d2h{0}, copies{0}, pageable{0}, waits{0}, syncs{0}, segments{0};
};

// A failed CUDA call: the error is recorded for ggml_backend_last_error and
// the caller returns non-zero (nothing on the decode path aborts).
bool failed(cudaError_t e, const char *what);
#define PCUDA_OK(call) (!::pcuda::failed((call), #call))

// A tensor as kernels see it.
struct view {
    char *data;
    int64_t ne[4];
    int64_t nb[4];
    int type;
};
inline view view_of(const ggml_tensor *t) {
    view v;
    v.data = (char *)t->data;
    for (int d = 0; d < 4; d++) {
        v.ne[d] = t->ne[d];
        v.nb[d] = (int64_t)t->nb[d];
    }
    v.type = t->type;
    return v;
}

// The weight formats below are host + device code: test-cuda-formats checks
// them against the CPU's dequantizers on any machine, GPU or not.
#define PCUDA_HD __host__ __device__ __forceinline__
// Products and sums rounded as written (never contracted into an FMA).
PCUDA_HD float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
PCUDA_HD float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
PCUDA_HD float sub_rn(float a, float b) { return add_rn(a, -b); }

PCUDA_HD float fp16(uint16_t h) { return __half2float(__ushort_as_half(h)); }
PCUDA_HD float bf16(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}
__device__ __forceinline__ uint16_t to_bf16(float f) {  // round to nearest even, NaN kept quiet (as the CPU)
    uint32_t x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}
PCUDA_HD uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
PCUDA_HD uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

// ---- weight formats: element e of a row (ggml-quants.h block layouts) ----
// The float operations are the CPU's dequantizers' (ggml-quants.cpp), kept
// from contracting into FMAs (__fmul_rn / __fadd_rn) so get_rows matches bit
// for bit. Each format is a struct with QK (elements per block), BYTES (per block) and
// get(block, j), the j-th element of one block. Blocks are read byte-wise:
// a row of blocks has no alignment beyond 2 bytes.
struct f32_t {
    static constexpr int QK = 1, BYTES = 4;
    PCUDA_HD static float get(const uint8_t *b, int) { return *(const float *)b; }
};
struct f16_t {
    static constexpr int QK = 1, BYTES = 2;
    PCUDA_HD static float get(const uint8_t *b, int) { return fp16(*(const uint16_t *)b); }
};
struct bf16_t {
    static constexpr int QK = 1, BYTES = 2;
    PCUDA_HD static float get(const uint8_t *b, int) { return bf16(*(const uint16_t *)b); }
};
struct q4_0_t {  // d, qs[16]: j < 16 low nibble of qs[j], else high nibble of qs[j-16]
    static constexpr int QK = 32, BYTES = 18;
    PCUDA_HD static float get(const uint8_t *b, int j) {
        const int q = (b[2 + (j & 15)] >> (4 * (j >> 4))) & 0xf;
        return fp16(le16(b)) * (float)(q - 8);
    }
};
struct q4_1_t {  // d, m, qs[16]
    static constexpr int QK = 32, BYTES = 20;
    PCUDA_HD static float get(const uint8_t *b, int j) {
        const int q = (b[4 + (j & 15)] >> (4 * (j >> 4))) & 0xf;
        return add_rn(mul_rn(fp16(le16(b)), (float)q), fp16(le16(b + 2)));
    }
};
struct q5_0_t {  // d, qh[4] (bit j: 5th bit of element j), qs[16]
    static constexpr int QK = 32, BYTES = 22;
    PCUDA_HD static float get(const uint8_t *b, int j) {
        const int q = ((b[6 + (j & 15)] >> (4 * (j >> 4))) & 0xf) | (((le32(b + 2) >> j) & 1) << 4);
        return fp16(le16(b)) * (float)(q - 16);
    }
};
struct q5_1_t {  // d, m, qh[4], qs[16]
    static constexpr int QK = 32, BYTES = 24;
    PCUDA_HD static float get(const uint8_t *b, int j) {
        const int q = ((b[8 + (j & 15)] >> (4 * (j >> 4))) & 0xf) | (((le32(b + 4) >> j) & 1) << 4);
        return add_rn(mul_rn(fp16(le16(b)), (float)q), fp16(le16(b + 2)));
    }
};
struct q8_0_t {  // d, qs[32]
    static constexpr int QK = 32, BYTES = 34;
    PCUDA_HD static float get(const uint8_t *b, int j) { return fp16(le16(b)) * (float)(int8_t)b[2 + j]; }
};
// K-quants: 256 elements per super-block.
PCUDA_HD void scale_k4(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}
// Q3_K's 6-bit signed scale of sub-block k (of 16 elements).
PCUDA_HD int scale_k3(const uint8_t *s, int k) {
    const int lo = k < 8 ? (s[k] & 0xf) : (s[k - 8] >> 4);
    const int hi = (s[8 + (k & 3)] >> (2 * (k >> 2))) & 3;
    return (lo | (hi << 4)) - 32;
}
PCUDA_HD int plane2(const uint8_t *qs, int e) { return (qs[32 * (e >> 7) + (e & 31)] >> (2 * ((e >> 5) & 3))) & 3; }
PCUDA_HD int plane1(const uint8_t *h, int e) { return (h[e & 31] >> (e >> 5)) & 1; }
PCUDA_HD int plane4(const uint8_t *qs, int e) { return (qs[32 * (e >> 6) + (e & 31)] >> (4 * ((e >> 5) & 1))) & 0xf; }
struct q2_K_t {  // scales[16], qs[64], d, dmin
    static constexpr int QK = 256, BYTES = 84;
    PCUDA_HD static float get(const uint8_t *b, int e) {
        const uint8_t s = b[e >> 4];
        return sub_rn(mul_rn(mul_rn(fp16(le16(b + 80)), (float)(s & 0xf)), (float)plane2(b + 16, e)),
                         mul_rn(fp16(le16(b + 82)), (float)(s >> 4)));
    }
};
struct q3_K_t {  // hmask[32], qs[64], scales[12], d
    static constexpr int QK = 256, BYTES = 110;
    PCUDA_HD static float get(const uint8_t *b, int e) {
        const int q = plane2(b + 32, e) - (plane1(b, e) ? 0 : 4);
        return fp16(le16(b + 108)) * (float)scale_k3(b + 96, e >> 4) * (float)q;
    }
};
struct q4_K_t {  // d, dmin, scales[12], qs[128]
    static constexpr int QK = 256, BYTES = 144;
    PCUDA_HD static float get(const uint8_t *b, int e) {
        int sc, m;
        scale_k4(b + 4, e >> 5, &sc, &m);
        return sub_rn(mul_rn(mul_rn(fp16(le16(b)), (float)sc), (float)plane4(b + 16, e)), mul_rn(fp16(le16(b + 2)), (float)m));
    }
};
struct q5_K_t {  // d, dmin, scales[12], qh[32], qs[128]
    static constexpr int QK = 256, BYTES = 176;
    PCUDA_HD static float get(const uint8_t *b, int e) {
        int sc, m;
        scale_k4(b + 4, e >> 5, &sc, &m);
        const int q = plane4(b + 48, e) | (plane1(b + 16, e) << 4);
        return sub_rn(mul_rn(mul_rn(fp16(le16(b)), (float)sc), (float)q), mul_rn(fp16(le16(b + 2)), (float)m));
    }
};
struct q6_K_t {  // ql[128], qh[64], scales[16] (int8), d
    static constexpr int QK = 256, BYTES = 210;
    PCUDA_HD static float get(const uint8_t *b, int e) {
        const int j = e >> 7, r = e & 127;
        const int lo = (b[64 * j + (r & 63)] >> (4 * (r >> 6))) & 0xf;
        const int hi = (b[128 + 32 * j + (r & 31)] >> (2 * (r >> 5))) & 3;
        return fp16(le16(b + 208)) * (float)(int8_t)b[192 + (e >> 4)] * (float)((lo | (hi << 4)) - 32);
    }
};

// Element i of a row of format W.
template <class W>
PCUDA_HD float load_w(const char *row, int64_t i) {
    return W::get((const uint8_t *)row + (i / W::QK) * W::BYTES, (int)(i % W::QK));
}

// Calls f(W{}) with the format of type t; false for a type with no device format.
template <class F>
bool with_format(int t, F &&f) {
    switch (t) {
        case GGML_TYPE_F32: f(f32_t{}); return true;
        case GGML_TYPE_F16: f(f16_t{}); return true;
        case GGML_TYPE_BF16: f(bf16_t{}); return true;
        case GGML_TYPE_Q4_0: f(q4_0_t{}); return true;
        case GGML_TYPE_Q4_1: f(q4_1_t{}); return true;
        case GGML_TYPE_Q5_0: f(q5_0_t{}); return true;
        case GGML_TYPE_Q5_1: f(q5_1_t{}); return true;
        case GGML_TYPE_Q8_0: f(q8_0_t{}); return true;
        case GGML_TYPE_Q2_K: f(q2_K_t{}); return true;
        case GGML_TYPE_Q3_K: f(q3_K_t{}); return true;
        case GGML_TYPE_Q4_K: f(q4_K_t{}); return true;
        case GGML_TYPE_Q5_K: f(q5_K_t{}); return true;
        case GGML_TYPE_Q6_K: f(q6_K_t{}); return true;
        default: return false;
    }
}
bool has_format(int t);

// Deterministic warp sum: a fixed butterfly, the same order every run.
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

inline unsigned blocks_for(int64_t n, int per) { return (unsigned)((n + per - 1) / per); }

// Checks the launch just made (a bad configuration fails here, not later).
bool launched(const char *kernel);

}  // namespace pcuda
