// The packed sub-block scales of the K-quants and their d / dmin, unpacked in
// vector registers (scalar unpacking and inserts cost more than a
// superblock's dot products).
// Shared by the AVX2 and AVX-512 kernels (both files are compiled with AVX2).
// Internal linkage: each file keeps its own copy, compiled for its own ISA (an
// inline function merged across the two could run AVX-512 code on an AVX2 CPU).
#pragma once

#include <immintrin.h>
#include <string.h>

#include <cstdint>

namespace {

// 16 6-bit scales of q3_K, minus 32, as int16. The 12 bytes are dwords a0 a1
// a2: scale byte j of dword r (r < 2) is (a_r >> 0) & 0F, of dword r + 2 is
// (a_r >> 4) & 0F, each with two high bits from a2 (bits 2r' .. 2r' + 1 of each
// byte for result dword r'). In vector registers: the scalar version's four
// dword stores and one 16-byte reload stalled store forwarding per superblock.
inline __m256i q3k_scales16(const uint8_t *p) {
    uint32_t a2;
    memcpy(&a2, p + 8, 4);  // 12 bytes only: the block may end 2 bytes later
    const __m128i v = _mm_insert_epi32(_mm_loadl_epi64((const __m128i *)p), (int)a2, 2);
    const __m128i lo = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 1, 0)), _mm_setr_epi32(0, 0, 4, 4)),
                                     _mm_set1_epi8(0x0F));
    const __m128i hi = _mm_slli_epi32(_mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 2, 2)),
                                                                   _mm_setr_epi32(0, 2, 4, 6)),
                                                    _mm_set1_epi8(0x03)),
                                      4);
    return _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_or_si128(lo, hi), _mm_set1_epi8(32)));
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

// A superblock's d and dmin (adjacent fp16) as floats 0 and 1, from one 4-byte
// load and one conversion: two word inserts and two conversions per
// superblock cost (AVX-512) as many vector uops as a row's dot products.
inline __m128 fp16_pair(const uint16_t *p) {
    int v;
    memcpy(&v, p, 4);
    return _mm_cvtph_ps(_mm_cvtsi32_si128(v));
}

}  // namespace
