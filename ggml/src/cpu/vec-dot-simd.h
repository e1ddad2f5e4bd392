// Internal: the SIMD kernel families. Each family lives in a file compiled
// with its own -m flags (vec-dot-avx2.cpp, vec-dot-avx512.cpp) and exposes one
// entry that overwrites the vec_dot / from_float slots it implements, leaving
// every other slot (the scalar reference) as it was. Only call a family after
// checking the CPU supports it (cpu-type-traits.cpp does; tests may too).
#pragma once
#include "ggml-cpu.h"

#if defined(__x86_64__) || defined(_M_X64)
#define GGML_SIMD_X86 1
// AVX2 + FMA + F16C.
void ggml_cpu_set_kernels_avx2(struct ggml_cpu_type_traits *table);
// AVX2 + AVX-VNNI: the AVX2 family's integer kernels (K-quants) with
// vpdpbusd / vpdpwssd (int-dot-avx2.h), over the AVX2 entry's.
void ggml_cpu_set_kernels_avxvnni(struct ggml_cpu_type_traits *table);
// AVX-512 F/BW/VL/DQ/VNNI (+BF16 when has_bf16, +VBMI when has_vbmi): calls
// the AVX2 entry first, then replaces the kernels that gain from 512-bit vectors.
void ggml_cpu_set_kernels_avx512(struct ggml_cpu_type_traits *table, bool has_bf16, bool has_vbmi);
#endif

// GGML_PREC_HIGH for the types without a q8xh layout: s = dot(x, y) +
// dot(x, y + vrow), one weight row against an activation row and its
// converted residual vrow bytes after it (ops.h), the weights unpacked once
// for both. Equal to the two vec_dot calls up to float summation order. The
// q8_K ones take its residual on the grid d/128 (ggml_cpu_from_resid) and
// add 128 dot(w, q) + dot(w, q2) in integers.
typedef void (*ggml_vec_dot2_t)(int64_t n, float *s, const void *x, const void *y, size_t vrow);
// The residual row of an activation type with a grid of its own: r, what the
// converted row q left of x, into y (q8_K: quantize_row_q8_K_resid_ref).
typedef void (*ggml_from_resid_t)(const float *r, const void *q, void *y, int64_t n);
#ifdef GGML_SIMD_X86
void ggml_cpu_set_dot_resid_avx2(ggml_vec_dot2_t *table);    // indexed by ggml_type
void ggml_cpu_set_dot_resid_avxvnni(ggml_vec_dot2_t *table);
void ggml_cpu_set_dot_resid_avx512(ggml_vec_dot2_t *table, bool has_vbmi);
void ggml_quantize_resid_q8_K_avx2(const float *r, const void *q, void *y, int64_t n);
#endif
// The fused kernel dispatch picked for type t, or NULL (two vec_dot calls).
ggml_vec_dot2_t ggml_cpu_dot_resid(enum ggml_type t);
// Type t's residual converter (under ggml_cpu_force_scalar the reference), or
// NULL: the residual converted as any row (from_float).
ggml_from_resid_t ggml_cpu_from_resid(enum ggml_type t);

// Weight streams: on the VMs we run on, the hardware prefetchers alone leave
// a mat-vec that also computes well short of the read bandwidth (Intel Xeon
// VM, 2 threads: Q4_0 55% -> 91%, Q4_K 42% -> 90% of it with software
// prefetch). A caller that walks weight rows in memory order (dense MUL_MAT)
// sets ggml_prefetch_distance for its thread; the dot kernels then touch, per
// chunk of weights they consume, the lines that far ahead (past a row's end:
// the next rows, read next). 0 (the default: e.g. row-sparse products, whose
// next row is elsewhere) prefetches nothing.
// (An asm statement: with GCC 12 at -O2 no prefetch instruction was left in
// the compiled q8x kernels when this used __builtin_prefetch; the asm stays.)
// The distance for a dense stream of weight type t on this CPU (bytes), plus
// GGML_PREFETCH_L2 where the lines are better fetched into L2 only, and
// GGML_PREFETCH_NEAR where they are also better pulled into L1 shortly before
// use; q8xh: the product runs a q8xh kernel (GGML_PREC_HIGH).
int ggml_cpu_prefetch_ahead(enum ggml_type t, bool q8xh);
// Bit 0 of a distance (distances are whole lines): prefetch into L2, not L1.
// AMD Zen 4 streams weights faster so (one thread, Q4_0 mat-vec 16 -> 20
// GB/s); a prefetch into L1 presumably holds one of the core's few L1 miss
// buffers until its line arrives from DRAM, stalling the kernel's own loads.
#define GGML_PREFETCH_L2 1
// Bit 1: besides, each line goes from L2 into L1 GGML_PREFETCH_NEAR_BYTES
// ahead (a short wait, so it holds a miss buffer briefly). It pays where a
// kernel computes near its stream's speed, whose own loads would otherwise
// wait for L2 with its out-of-order window full of arithmetic; the lighter
// kernels lose a few points to the extra instructions (cpu-type-traits.cpp).
#define GGML_PREFETCH_NEAR 2
#define GGML_PREFETCH_NEAR_BYTES 2048
#define GGML_PREFETCH_FLAGS (GGML_PREFETCH_L2 | GGML_PREFETCH_NEAR)
extern __thread int ggml_prefetch_distance __attribute__((tls_model("initial-exec")));
// One line, into L1 (prefetcht0) or, l2, into L2 only (prefetcht1).
__attribute__((always_inline)) static inline void ggml_prefetch_line(const char *p, bool l2 = false) {
#if defined(__x86_64__)
    if (l2)
        __asm__ volatile("prefetcht1 %0" : : "m"(*p));
    else
        __asm__ volatile("prefetcht0 %0" : : "m"(*p));
#else
    if (l2)
        __builtin_prefetch(p, 0, 2);
    else
        __builtin_prefetch(p, 0, 3);
#endif
}
// One prefetch per 64 bytes of the chunk: the callers' chunks follow each
// other in memory, so consecutive prefetched addresses are at most 64 bytes
// apart and every line of the stream is touched (a chunk's last byte needs
// no prefetch of its own: the next chunk's first one covers its line).
// Inlined by force: with the two hints GCC called it out of line, once per
// group of the kernels' inner loops.
__attribute__((always_inline)) static inline void ggml_prefetch_chunk(const void *p, int bytes, int ahead) {
    if (!ahead) return;
    const char *q = (const char *)p + (ahead & ~GGML_PREFETCH_FLAGS);
    const bool l2 = ahead & GGML_PREFETCH_L2;
    for (int o = 0; o < bytes; o += 64) ggml_prefetch_line(q + o, l2);
    if (ahead & GGML_PREFETCH_NEAR)
        for (int o = 0; o < bytes; o += 64) ggml_prefetch_line((const char *)p + GGML_PREFETCH_NEAR_BYTES + o);
}

// ---- "q8x": MUL_MAT's internal activation layout for the 32-element block
// types (q4_0, q4_1, q5_0, q5_1, q8_0) ----
// A row of k floats is quantized exactly as quantize_row_q8_0 does (same
// int8 values, same fp16-rounded scale df per 32 elements) but stored in
// groups of four blocks (128 elements, zero-padded at the end of the row) in
// the order a packed nibble register unpacks to: one 64-byte register holds
// the low halves (elements 0..15) of the four blocks, another the high
// halves, so 32-bit lane l of either belongs to block l / 4:
//   int8  qa[64]   qa[16 b + j] = q of element j of block b       (j < 16)
//   int8  qb[64]   qb[16 b + j] = q of element 16 + j of block b
//   float dy[16]   df of block l / 4 in lane l
//   int32 ns[16]   minus the sum of the eight q lane l of qa and qb holds
//                  (the weights' offset -8, -16, -128 as one shift and add)
//   float sd[16]   df * the sum of eight q of block b by half: lanes 4 b and
//                  4 b + 2 elements 0..7 and 8..15, lanes 4 b + 1 and 4 b + 3
//                  elements 16..23 and 24..31 (the term of a stored minimum,
//                  per block, or per half of 16 for q2_K: one multiply-add)
// 320 bytes a group, 64-byte aligned, so the dot kernels stream one weight
// row against several activation rows with plain vector loads and unpack a
// weight group with one mask and one shift. Never stored or exchanged:
// results equal the reference dot (weight type x q8_0/q8_1) up to float
// summation order.
#define GGML_Q8X_GROUP 320
static inline size_t ggml_q8x_row_size(int64_t k) { return (size_t)((k + 127) / 128) * GGML_Q8X_GROUP; }
// The high-precision variant (GGML_PREC_HIGH), "q8xh": per block of 32 the
// same q (and fp16-rounded scale df) as q8x, plus the rounding residual
// x - df q quantized on the fixed finer grid df/128, q2 = round((x - df q) 128/df)
// (|q2| <= ~72), so that x ~ (df/128) (128 q + q2): 15 bits, and the kernel
// forms 128 dot(w, q) + dot(w, q2) in the integer domain (a shift and two
// more vpdpbusd per 128 weights, one scale multiply). Groups of 448 bytes,
// the q8x order:
//   int8  qa[64], qb[64]   q
//   int8  ra[64], rb[64]   q2
//   float dy[16]           df/128 of block l / 4 in lane l
//   int32 ns[16]           minus the lane's sum of 128 q + q2
//   float sd[16]           (df/128) * the sums of 128 q + q2 by half, as q8x
#define GGML_Q8XH_GROUP 448
static inline size_t ggml_q8xh_row_size(int64_t k) { return (size_t)((k + 127) / 128) * GGML_Q8XH_GROUP; }
typedef void (*ggml_q8x_quantize_t)(const float *x, void *y, int64_t k);
// s[c * s_stride bytes] = dot(weight row x, activation row y + c * y_stride) for c < nc (1..8).
typedef void (*ggml_q8x_dot_t)(int64_t k, const void *x, const void *y, size_t y_stride, float *s, size_t s_stride, int nc);
// The register-tiled form for prompt batches, on weight rows unpacked once
// by ggml_q8x_unpack_t into ggml_q8x_unpacked_size(k) bytes each (64-byte
// aligned), run over ng groups of 128 elements (a chunk of the rows, so that
// a block of rows and columns stays in L1 across the chunk): the dot of
// unpacked row u + r * u_stride and activation row y + c * y_stride for
// r < GGML_Q8X_GEMM_ROWS and c < nc (1..GGML_Q8X_GEMM_COLS), continued from
// the accumulators in acc (64-byte aligned, GEMM_ROWS x GEMM_COLS x 16
// floats) unless flags has GGML_Q8X_ACC_FIRST, and with GGML_Q8X_ACC_LAST
// written to s[r] + c * s_stride bytes, otherwise left in acc. Every element
// is computed exactly as ggml_q8x_dot_t computes it on the packed row.
#define GGML_Q8X_GEMM_ROWS 4
#define GGML_Q8X_GEMM_COLS 4
// Below this many activation rows the unpacking does not pay (2-4 streamed
// columns run faster on dot: Xeon VM, 2026-12-01); from it on, gemm.
#define GGML_Q8X_GEMM_MIN_COLS 8
// Groups of 128 elements a gemm call runs over (mul_mat's blocking of K), unless the family says otherwise.
#define GGML_Q8X_GEMM_GROUPS 8
#define GGML_Q8X_ACC_FIRST 1
#define GGML_Q8X_ACC_LAST 2
typedef void (*ggml_q8x_unpack_t)(int64_t k, const void *x, void *u);
// A family's own activation order for some of its kernels: rewrites a q8x
// (q8xh) row of k elements in place, same size; only the kernels made for it
// (gemm_pack's gemm, dot_pack's dot_own) read rows so rewritten.
typedef void (*ggml_q8x_pack_t)(void *y, int64_t k);
typedef void (*ggml_q8x_gemm_t)(int64_t ng, const void *u, size_t u_stride, const void *y, size_t y_stride, float *acc,
                                float *s, size_t s_stride, int nc, int flags);
static inline size_t ggml_q8x_unpacked_size(int64_t k) { return (size_t)((k + 127) / 128) * 256; }
struct ggml_q8x_kernels {
    ggml_q8x_quantize_t quantize;
    ggml_q8x_dot_t dot[GGML_TYPE_COUNT];  // NULL: type not covered
    ggml_q8x_unpack_t unpack[GGML_TYPE_COUNT];  // NULL: prompts use dot
    ggml_q8x_gemm_t gemm[GGML_TYPE_COUNT];
    // The fewest activation rows for which a product takes dot (0: as 2):
    // 1 for the 32-element block types, whose one-column q8x speed is above
    // the family's vec_dot since the nibble-order layout (Xeon VM,
    // 2026-12-01); GGML_Q8X_GEMM_MIN_COLS for the K-quants whose q8_K
    // kernels win on fewer columns (all of them with AVX-512, q3_K and q6_K
    // with AVX2).
    int min_cols[GGML_TYPE_COUNT];
    // The same multi-column interface for F16 weights (e.g. attention over
    // the KV cache) x activations rounded to fp16 (exactly what F16
    // activations hold) but stored as f32 rows (ggml_round_act, ops.h).
    ggml_q8x_dot_t dot_f16;
    // q8xh: the same weights x high-precision activation rows
    ggml_q8x_quantize_t quantize_hi;
    ggml_q8x_dot_t dot_hi[GGML_TYPE_COUNT];
    ggml_q8x_gemm_t gemm_hi[GGML_TYPE_COUNT];
    // the family's groups per gemm call, `fast` and `high` (0: GGML_Q8X_GEMM_GROUPS)
    int gemm_groups[2];
    // NULL: gemm (gemm_hi) reads q8x (q8xh) rows as they are
    ggml_q8x_pack_t gemm_pack[GGML_TYPE_COUNT], gemm_pack_hi[GGML_TYPE_COUNT];
    // NULL: none; else the one-row kernels (the same bits as dot, dot_hi) on
    // rows rewritten by dot_pack (dot_pack_hi), for the products no gemm reads
    ggml_q8x_dot_t dot_own[GGML_TYPE_COUNT], dot_own_hi[GGML_TYPE_COUNT];
    ggml_q8x_pack_t dot_pack[GGML_TYPE_COUNT], dot_pack_hi[GGML_TYPE_COUNT];
};
#ifdef GGML_SIMD_X86
const struct ggml_q8x_kernels *ggml_cpu_q8x_avx2(void);        // needs the AVX2 family
const struct ggml_q8x_kernels *ggml_cpu_q8x_avxvnni(void);     // ... and AVX-VNNI
const struct ggml_q8x_kernels *ggml_cpu_q8x_avx512(void);      // needs the AVX-512 family
const struct ggml_q8x_kernels *ggml_cpu_q8x_avx512vbmi(void);  // ... and AVX-512 VBMI
#endif
// The q8x kernels dispatch picked for this CPU, or NULL (scalar).
const struct ggml_q8x_kernels *ggml_cpu_q8x(void);
// The q8x kernels a weight product of type t with k x ncols activations
// takes (dot NULL: none, the type's vec_dot): the one rule of MUL_MAT and
// the sparse row products. A kernel for the type, and several activation
// rows (min_cols) ; the q8xh twins with GGML_PREC_HIGH; the prompt kernels
// (gemm, unpack) from GGML_Q8X_GEMM_MIN_COLS rows on.
struct ggml_q8x_pick {
    ggml_q8x_dot_t dot;
    ggml_q8x_gemm_t gemm;
    ggml_q8x_unpack_t unpack;
    ggml_q8x_quantize_t quantize;
    ggml_q8x_pack_t pack;  // non-NULL: the rows the kernels read (gemm's if any, else dot's) rewritten by it after quantize
    size_t vrow;      // bytes of one converted activation row
    int gemm_groups;  // groups of 128 elements per gemm call
};
struct ggml_q8x_pick ggml_cpu_q8x_pick(enum ggml_type t, int64_t k, int64_t ncols, bool high);
