// The packed sub-block scales of the K-quants, unpacked in vector registers
// (scalar unpacking and inserts cost more than a superblock's dot products).
// Shared by the AVX2 and AVX-512 kernels (both files are compiled with AVX2).
// Internal linkage: each file keeps its own copy, compiled for its own ISA (an
// inline function merged across the two could run AVX-512 code on an AVX2 CPU).
#pragma once

#include <immintrin.h>
#include <string.h>

#include <cstdint>

namespace {

// 16 6-bit scales of q3_K, minus 32, as int16.
inline __m256i q3k_scales16(const uint8_t *p) {
    uint32_t a[4];
    memcpy(a, p, 12);
    const uint32_t k1 = 0x03030303, k2 = 0x0f0f0f0f, t = a[2];
    a[2] = ((a[0] >> 4) & k2) | (((t >> 4) & k1) << 4);
    a[3] = ((a[1] >> 4) & k2) | (((t >> 6) & k1) << 4);
    a[0] = (a[0] & k2) | (((t >> 0) & k1) << 4);
    a[1] = (a[1] & k2) | (((t >> 2) & k1) << 4);
    __m128i v;
    memcpy(&v, a, 16);
    return _mm256_cvtepi8_epi16(_mm_sub_epi8(v, _mm_set1_epi8(32)));
}

// The 12 bytes of 6-bit scales and mins of q4_K / q5_K (the 4 bytes after
// them are read too: the quants follow) -> bytes 0..7 scales of the 8
// sub-blocks, bytes 8..15 their mins.
inline __m128i scales_q45(const uint8_t *p) {
    const __m128i v = _mm_loadu_si128((const __m128i *)p);  // dwords a0 a1 a2
    // [a0 & 3F, a2 & 0F, a1 & 3F, (a2 >> 4) & 0F] | [0, (a0 >> 2) & 30, 0, (a1 >> 2) & 30]
    const __m128i lo = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0)), _mm_setr_epi32(0, 0, 0, 4)),
                                     _mm_setr_epi32(0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F, 0x0F0F0F0F));
    const __m128i hi = _mm_and_si128(_mm_srli_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0)), 2),
                                     _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    return _mm_or_si128(lo, hi);
}

}  // namespace
