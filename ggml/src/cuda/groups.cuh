// The weight formats in groups of 8 elements: the fast path of the row dots
// and the down projection. cuda-common.cuh's formats give one element at a
// time (every type, any shape); here a format decodes 8 elements at once from
// a few 16-bit loads, with one scale (and one minimum) per group:
//   w[i] = d * q[i] + mn      for the 8 elements of group s of a block,
// q[i] exact small integers as floats (made without int->float conversions:
// a byte b placed under the exponent of 2^23 is the float 2^23 + b). Element i
// of a group lies at block position pos(s) + i (i < 4) and pos(s) + HALF + i - 4:
// HALF is 16 for the 32-element formats that pair the low and high nibbles of
// one byte (Q4_0, Q4_1, Q5_0, Q5_1), else 4 (consecutive elements).
// F32, F16 and BF16 rows count as blocks of 8 (one group, no scale).
#pragma once

#include "cuda-common.cuh"

namespace pcuda {
namespace g8 {

constexpr float MAGIC = 8388608.0f;  // 2^23

// Loads and bit moves, host code too (test-cuda-formats checks every group
// against the element path on the CPU).
PCUDA_HD uint32_t ld8(const uint8_t *p) {
#ifdef __CUDA_ARCH__
    return __ldg(p);
#else
    return *p;
#endif
}
PCUDA_HD uint32_t ld16(const uint8_t *p) {
#ifdef __CUDA_ARCH__
    return __ldg((const unsigned short *)p);
#else
    return le16(p);
#endif
}
PCUDA_HD uint32_t ld32(const uint8_t *p) { return ld16(p) | (ld16(p + 2) << 16); }  // 2-byte aligned
PCUDA_HD float half_at(const uint8_t *p) { return fp16((uint16_t)ld16(p)); }
PCUDA_HD float bits_f(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
#endif
}
// byte k of v as the float 2^23 + byte
template <int k>
PCUDA_HD float byte_f(uint32_t v) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(__byte_perm(v, 0x4B000000u, 0x7440u | k));
#else
    return bits_f(((v >> (8 * k)) & 0xffu) | 0x4B000000u);
#endif
}
// q[o + k] = byte k of v - off (off folds 2^23 and the format's zero point)
template <int o>
PCUDA_HD void bytes4(uint32_t v, float off, float *q) {
    q[o + 0] = byte_f<0>(v) - off;
    q[o + 1] = byte_f<1>(v) - off;
    q[o + 2] = byte_f<2>(v) - off;
    q[o + 3] = byte_f<3>(v) - off;
}
// bit k of the low 4 bits of x to bit 4 of byte k
PCUDA_HD uint32_t spread4(uint32_t x) { return ((x & 0xfu) * 0x00204081u & 0x01010101u) << 4; }

}  // namespace g8

// Per format: QKG elements and GB bytes per block, G groups per block, HALF,
// MIN (mn is used), SCALE (d is used), ALIGN (the row alignment the loads need)
// and group(block, s, q, d, mn). A format without a group struct keeps the
// element path (has_g8 false).
template <class W>
struct g8_of {
    static constexpr bool ok = false;
};

template <>
struct g8_of<f32_t> {
    static constexpr bool ok = true, MIN = false, SCALE = false;
    static constexpr int QKG = 8, GB = 32, G = 1, HALF = 4, ALIGN = 16;
    PCUDA_HD static void group(const uint8_t *b, int, float *q, float &, float &) {
#ifdef __CUDA_ARCH__
        const float4 u = __ldg((const float4 *)b), v = __ldg((const float4 *)b + 1);
        q[0] = u.x, q[1] = u.y, q[2] = u.z, q[3] = u.w, q[4] = v.x, q[5] = v.y, q[6] = v.z, q[7] = v.w;
#else
        memcpy(q, b, 8 * sizeof(float));
#endif
    }
};
// 16 bytes of 16-bit values, one load
PCUDA_HD void ld128(const uint8_t *b, uint32_t *w) {
#ifdef __CUDA_ARCH__
    const uint4 u = __ldg((const uint4 *)b);
    w[0] = u.x, w[1] = u.y, w[2] = u.z, w[3] = u.w;
#else
    memcpy(w, b, 16);
#endif
}
// F16 and BF16: a group is one 16-byte load of 8 values.
template <bool BF>
struct g8_16bit {
    static constexpr bool ok = true, MIN = false, SCALE = false;
    static constexpr int QKG = 8, GB = 16, G = 1, HALF = 4, ALIGN = 16;
    PCUDA_HD static void group(const uint8_t *b, int, float *q, float &, float &) {
        uint32_t w[4];
        ld128(b, w);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const uint16_t h = (uint16_t)(w[k / 2] >> (16 * (k % 2)));
            q[k] = BF ? bf16(h) : fp16(h);
        }
    }
};
template <>
struct g8_of<f16_t> : g8_16bit<false> {};
template <>
struct g8_of<bf16_t> : g8_16bit<true> {};
// The 32-element nibble formats: d at 0, a stored minimum at M (-1: none),
// the fifth bits at QH (-1: none), the nibbles at QS; u - ZERO is the value
// (the fifth bit adds 16).
template <int GB_, int M, int QH, int QS, int ZERO>
struct g8_nibbles {
    static constexpr bool ok = true, MIN = M >= 0, SCALE = true;
    static constexpr int QKG = 32, GB = GB_, G = 4, HALF = 16, ALIGN = 2;
    PCUDA_HD static void group(const uint8_t *b, int s, float *q, float &d, float &mn) {
        const uint32_t v = g8::ld32(b + QS + 4 * s);
        uint32_t lo = v & 0x0f0f0f0fu, hi = (v >> 4) & 0x0f0f0f0fu;
        if constexpr (QH >= 0) {
            const uint32_t h = g8::ld32(b + QH);
            lo |= g8::spread4(h >> (4 * s));
            hi |= g8::spread4(h >> (16 + 4 * s));
        }
        g8::bytes4<0>(lo, g8::MAGIC + ZERO, q);
        g8::bytes4<4>(hi, g8::MAGIC + ZERO, q);
        d = g8::half_at(b);
        if constexpr (M >= 0) mn = g8::half_at(b + M);
    }
};
template <>
struct g8_of<q4_0_t> : g8_nibbles<18, -1, -1, 2, 8> {};  // d, qs[16]
template <>
struct g8_of<q4_1_t> : g8_nibbles<20, 2, -1, 4, 0> {};  // d, m, qs[16]
template <>
struct g8_of<q5_0_t> : g8_nibbles<22, -1, 2, 6, 16> {};  // d, qh[4], qs[16]
template <>
struct g8_of<q5_1_t> : g8_nibbles<24, 2, 4, 8, 0> {};  // d, m, qh[4], qs[16]
template <>
struct g8_of<q8_0_t> {  // d, qs[32] (int8: the sign bit flipped makes b + 128)
    static constexpr bool ok = true, MIN = false, SCALE = true;
    static constexpr int QKG = 32, GB = 34, G = 4, HALF = 4, ALIGN = 2;
    PCUDA_HD static void group(const uint8_t *b, int s, float *q, float &d, float &) {
        g8::bytes4<0>(g8::ld32(b + 2 + 8 * s) ^ 0x80808080u, g8::MAGIC + 128, q);
        g8::bytes4<4>(g8::ld32(b + 6 + 8 * s) ^ 0x80808080u, g8::MAGIC + 128, q);
        d = g8::half_at(b);
    }
};
// K-quants: 256 elements, 32 groups of 8 consecutive elements; a group never
// straddles a sub-block, so it has one scale and one minimum.
template <>
struct g8_of<q2_K_t> {  // scales[16], qs[64], d, dmin
    static constexpr bool ok = true, MIN = true, SCALE = true;
    static constexpr int QKG = 256, GB = 84, G = 32, HALF = 4, ALIGN = 2;
    PCUDA_HD static void group(const uint8_t *b, int s, float *q, float &d, float &mn) {
        const uint8_t *qs = b + 16 + 32 * (s >> 4) + 8 * (s & 3);
        const int sh = 2 * ((s >> 2) & 3);
        g8::bytes4<0>((g8::ld32(qs) >> sh) & 0x03030303u, g8::MAGIC, q);
        g8::bytes4<4>((g8::ld32(qs + 4) >> sh) & 0x03030303u, g8::MAGIC, q);
        const uint32_t sc = g8::ld8(b + (s >> 1));
        d = g8::half_at(b + 80) * (float)(sc & 0xf);
        mn = -(g8::half_at(b + 82) * (float)(sc >> 4));
    }
};
template <>
struct g8_of<q3_K_t> {  // hmask[32], qs[64], scales[12], d
    static constexpr bool ok = true, MIN = false, SCALE = true;
    static constexpr int QKG = 256, GB = 110, G = 32, HALF = 4, ALIGN = 2;
    PCUDA_HD static void group(const uint8_t *b, int s, float *q, float &d, float &) {
        const uint8_t *qs = b + 32 + 32 * (s >> 4) + 8 * (s & 3), *hm = b + 8 * (s & 3);
        const int sh = 2 * ((s >> 2) & 3), hb = s >> 2;
        // q + 4 = low 2 bits | (hmask bit << 2): 0..7, then 4 taken off
        const uint32_t v0 = ((g8::ld32(qs) >> sh) & 0x03030303u) | (((g8::ld32(hm) >> hb) & 0x01010101u) << 2);
        const uint32_t v1 = ((g8::ld32(qs + 4) >> sh) & 0x03030303u) | (((g8::ld32(hm + 4) >> hb) & 0x01010101u) << 2);
        g8::bytes4<0>(v0, g8::MAGIC + 4, q);
        g8::bytes4<4>(v1, g8::MAGIC + 4, q);
        d = g8::half_at(b + 108) * (float)scale_k3(b + 96, s >> 1);
    }
};
// q4_K (d, dmin, scales[12], qs[128]) and q5_K (the same with qh[32] before
// qs: a fifth bit per element, bit s / 4 of its qh byte).
template <bool Q5>
struct g8_k45 {
    static constexpr bool ok = true, MIN = true, SCALE = true;
    static constexpr int QKG = 256, GB = Q5 ? 176 : 144, G = 32, HALF = 4, ALIGN = 2;
    PCUDA_HD static void group(const uint8_t *b, int s, float *q, float &d, float &mn) {
        const uint8_t *qs = b + (Q5 ? 48 : 16) + 32 * (s >> 3) + 8 * (s & 3);
        const int sh = 4 * ((s >> 2) & 1);
        uint32_t v0 = (g8::ld32(qs) >> sh) & 0x0f0f0f0fu, v1 = (g8::ld32(qs + 4) >> sh) & 0x0f0f0f0fu;
        if constexpr (Q5) {
            const uint8_t *qh = b + 16 + 8 * (s & 3);
            const int hb = s >> 2;
            v0 |= ((g8::ld32(qh) >> hb) & 0x01010101u) << 4;
            v1 |= ((g8::ld32(qh + 4) >> hb) & 0x01010101u) << 4;
        }
        g8::bytes4<0>(v0, g8::MAGIC, q);
        g8::bytes4<4>(v1, g8::MAGIC, q);
        int sc, m;
        scale_k4(b + 4, s >> 2, &sc, &m);
        d = g8::half_at(b) * (float)sc;
        mn = -(g8::half_at(b + 2) * (float)m);
    }
};
template <>
struct g8_of<q4_K_t> : g8_k45<false> {};
template <>
struct g8_of<q5_K_t> : g8_k45<true> {};
template <>
struct g8_of<q6_K_t> {  // ql[128], qh[64], scales[16] (int8), d
    static constexpr bool ok = true, MIN = false, SCALE = true;
    static constexpr int QKG = 256, GB = 210, G = 32, HALF = 4, ALIGN = 2;
    PCUDA_HD static void group(const uint8_t *b, int s, float *q, float &d, float &) {
        const uint8_t *ql = b + 64 * (s >> 4) + 8 * (s & 7), *qh = b + 128 + 32 * (s >> 4) + 8 * (s & 3);
        const int sl = 4 * ((s >> 3) & 1), sh = 2 * ((s >> 2) & 3);
        g8::bytes4<0>(((g8::ld32(ql) >> sl) & 0x0f0f0f0fu) | (((g8::ld32(qh) >> sh) & 0x03030303u) << 4), g8::MAGIC + 32, q);
        g8::bytes4<4>(((g8::ld32(ql + 4) >> sl) & 0x0f0f0f0fu) | (((g8::ld32(qh + 4) >> sh) & 0x03030303u) << 4), g8::MAGIC + 32,
                      q);
        d = g8::half_at(b + 208) * (float)(int8_t)g8::ld8(b + 192 + (s >> 1));
    }
};

// Whether a row of K elements at `row` (rows `nb1` bytes apart) can take the group path.
template <class W>
PCUDA_HD bool g8_fits(const void *row, int64_t K, int64_t nb1) {
    if constexpr (!g8_of<W>::ok) {
        return false;
    } else {
        using G = g8_of<W>;
        return K % G::QKG == 0 && (uintptr_t)row % G::ALIGN == 0 && nb1 % G::ALIGN == 0;
    }
}

}  // namespace pcuda
