// Plain memory reads for the benchmarks' bandwidth ceilings: sum the bytes,
// no other arithmetic. Shared by pinfer-bench and pinfer-bench-sparse.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

// Four chains of 256-bit loads (n: whole 128-byte steps are summed).
__attribute__((target("avx2"))) static inline uint64_t bench_sum_avx2(const uint8_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_loadu_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_loadu_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_loadu_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_loadu_si256((const __m256i *)(p + i + 96)));
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t r[4];
    _mm256_storeu_si256((__m256i *)r, a0);
    return r[0] + r[1] + r[2] + r[3];
}
#endif

static inline uint64_t bench_sum_plain(const uint8_t *p, size_t n) {
    uint64_t a = 0, b = 0;
    for (size_t i = 0; i + 16 <= n; i += 16) {
        uint64_t x, y;
        memcpy(&x, p + i, 8);
        memcpy(&y, p + i + 8, 8);
        a += x;
        b += y;
    }
    return a + b;
}

// The sum of n bytes at p, with the widest loads this CPU has.
static inline uint64_t bench_sum_bytes(const uint8_t *p, size_t n) {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) return bench_sum_avx2(p, n);
#endif
    return bench_sum_plain(p, n);
}
