// The CPU's kernel tables, chosen once from the one feature detector
// (cpu-features.h): per type the dot kernel, the fast activation converter
// and the activation type (ggml-cpu.h), the q8x multi-column kernels
// (vec-dot-simd.h) and the axpy kernels of the sparse down projection
// (sparse-axpy.h). The SIMD files are compiled with their own -m flags, so
// nothing here touches a wide register: it only calls the matching family.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu-features.h"
#include "ggml-cpu.h"
#include "gemm-amx.h"
#include "ggml-quants.h"
#include "sparse-axpy.h"
#include "vec-exp.h"
#include "vec-dot-simd.h"

__thread int ggml_prefetch_distance = 0;

namespace {

// PINFER_CPU caps the kernels below what the CPU has, e.g. to run and measure
// the path of a CPU without AVX-512: avxvnni (AVX2 with AVX-VNNI, as consumer
// Intel CPUs from Alder Lake on), avx2 (plain AVX2, as Haswell .. Zen 3), or
// scalar; avx512 leaves out the AMX tiles of the prompt batches, amx (or
// unset) means the best the CPU has. The highest level allowed, in this
// order: 4 amx, 3 avx512, 2 avxvnni, 1 avx2, 0 scalar.
int env_cap() {
    static const char *const levels[] = {"scalar", "avx2", "avxvnni", "avx512", "amx"};
    const char *e = getenv("PINFER_CPU");
    if (!e || !*e) return 4;
    for (int i = 0; i < 5; i++)
        if (strcmp(e, levels[i]) == 0) return i;
    fprintf(stderr, "pinfer: PINFER_CPU='%s' is not one of amx, avx512, avxvnni, avx2, scalar\n", e);
    exit(2);
}

struct cpu_tables {
    ggml_cpu_type_traits ref[GGML_TYPE_COUNT] = {};   // portable kernels only
    ggml_cpu_type_traits best[GGML_TYPE_COUNT] = {};  // the fastest this CPU runs
    const char *name = "scalar";
    const ggml_q8x_kernels *q8x = nullptr;
    const ggml_amx_kernels *amx = nullptr;  // prompt batches on AMX tiles
    ggml_vec_dot2_t dot2[GGML_TYPE_COUNT] = {};  // a row and its residual in one pass (GGML_PREC_HIGH)
    ggml_from_resid_t resid_ref[GGML_TYPE_COUNT] = {}, resid_best[GGML_TYPE_COUNT] = {};  // the residual rows
    char variant[96] = "scalar";
    ggml_axpy_kernels axpy_ref = {}, axpy_best = {};
    ggml_exp_sum_t exp_sum = ggml_exp_sum_ref;

    cpu_tables() {
        // The scalar dots live beside the formats they read (ggml-quants.cpp).
        struct entry {
            ggml_type type;
            ggml_vec_dot_t vec_dot;
            ggml_type vec_dot_type;
        };
        static const entry entries[] = {
            {GGML_TYPE_F32, ggml_vec_dot_f32_f32_ref, GGML_TYPE_F32},
            {GGML_TYPE_F16, ggml_vec_dot_f16_f16_ref, GGML_TYPE_F16},
            {GGML_TYPE_BF16, ggml_vec_dot_bf16_bf16_ref, GGML_TYPE_BF16},
            {GGML_TYPE_Q4_0, ggml_vec_dot_q4_0_q8_0_ref, GGML_TYPE_Q8_0},
            {GGML_TYPE_Q4_1, ggml_vec_dot_q4_1_q8_1_ref, GGML_TYPE_Q8_1},
            {GGML_TYPE_Q5_0, ggml_vec_dot_q5_0_q8_0_ref, GGML_TYPE_Q8_0},
            {GGML_TYPE_Q5_1, ggml_vec_dot_q5_1_q8_1_ref, GGML_TYPE_Q8_1},
            {GGML_TYPE_Q8_0, ggml_vec_dot_q8_0_q8_0_ref, GGML_TYPE_Q8_0},
            {GGML_TYPE_Q2_K, ggml_vec_dot_q2_K_q8_K_ref, GGML_TYPE_Q8_K},
            {GGML_TYPE_Q3_K, ggml_vec_dot_q3_K_q8_K_ref, GGML_TYPE_Q8_K},
            {GGML_TYPE_Q4_K, ggml_vec_dot_q4_K_q8_K_ref, GGML_TYPE_Q8_K},
            {GGML_TYPE_Q5_K, ggml_vec_dot_q5_K_q8_K_ref, GGML_TYPE_Q8_K},
            {GGML_TYPE_Q6_K, ggml_vec_dot_q6_K_q8_K_ref, GGML_TYPE_Q8_K},
        };
        // Q8_1 and Q8_K are activation formats (no dot kernel as weights);
        // types without kernels (integers, f64) convert to themselves.
        for (int i = 0; i < GGML_TYPE_COUNT; i++) {
            ref[i].vec_dot_type = (ggml_type)i;
            const ggml_type_traits *tr = ggml_get_type_traits((ggml_type)i);
            if (tr) ref[i].from_float = tr->from_float_ref;
        }
        for (const entry &e : entries) {
            ref[e.type].vec_dot = ref[e.type].vec_dot_ref = e.vec_dot;
            ref[e.type].vec_dot_type = e.vec_dot_type;
        }
        ref[GGML_TYPE_F16].vec_dot_f32 = ggml_vec_dot_f16_f32_ref;
        ref[GGML_TYPE_BF16].vec_dot_f32 = ggml_vec_dot_bf16_f32_ref;
        ref[GGML_TYPE_F16].round_act_f32 = ref[GGML_TYPE_BF16].round_act_f32 = true;
        resid_ref[GGML_TYPE_Q8_K] = resid_best[GGML_TYPE_Q8_K] = quantize_row_q8_K_resid_ref;
        for (int i = 0; i < GGML_TYPE_COUNT; i++) best[i] = ref[i];
        ggml_axpy_kernels_ref(&axpy_ref);
        axpy_best = axpy_ref;
        const int cap = env_cap();
        const char *capped = cap < 3 ? ", capped by PINFER_CPU" : "";
        snprintf(variant, sizeof variant, "scalar (reference kernels%s)", capped);
#ifdef GGML_SIMD_X86
        const ggml_cpu_features &f = *ggml_cpu_get_features();
        const bool avx2 = f.avx2 && f.fma && f.f16c && f.bmi2;
        const bool avx512 = avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni;
        if (avx512 && cap >= 3) {
            ggml_cpu_set_kernels_avx512(best, f.avx512bf16, f.avx512vbmi);
            q8x = f.avx512vbmi ? ggml_cpu_q8x_avx512vbmi() : ggml_cpu_q8x_avx512();
            ggml_cpu_set_dot_resid_avx512(dot2, f.avx512vbmi);
            resid_best[GGML_TYPE_Q8_K] = ggml_quantize_resid_q8_K_avx2;
            // the tile state is asked for only when it would be used
            const bool tiles = f.amx_int8 && cap >= 4 && ggml_cpu_amx_request();
            if (tiles) amx = ggml_cpu_amx_kernels();
            snprintf(variant, sizeof variant, "avx512 (VNNI; q8x weights unpacked %s%s)", f.avx512vbmi ? "with VBMI" : "by inserts",
                     tiles ? "; AMX-INT8 tiles for prompts"
                     : f.amx_int8 && cap >= 4 ? "; AMX refused by the OS"
                     : f.amx_int8 ? "; AMX capped by PINFER_CPU" : "");
            name = "avx512";
        } else if (avx2 && cap >= 1) {
            ggml_cpu_set_kernels_avx2(best);
            q8x = ggml_cpu_q8x_avx2();
            ggml_cpu_set_dot_resid_avx2(dot2);
            resid_best[GGML_TYPE_Q8_K] = ggml_quantize_resid_q8_K_avx2;
            const bool vnni = f.avxvnni && cap >= 2;
            if (vnni) {
                ggml_cpu_set_kernels_avxvnni(best);
                q8x = ggml_cpu_q8x_avxvnni();
                ggml_cpu_set_dot_resid_avxvnni(dot2);
            }
            snprintf(variant, sizeof variant, "avx2 (FMA, F16C%s%s)", vnni ? ", AVX-VNNI" : "", capped);
            name = "avx2";
        }
        // the axpy families ask for less than the dot families
        const bool axpy2 = f.avx2 && f.fma && f.f16c;
        if (axpy2 && f.avx512f && f.avx512bw && f.avx512vl) ggml_axpy_kernels_avx512(&axpy_best);
        else if (axpy2) ggml_axpy_kernels_avx2(&axpy_best);
        // the softmax exponentials follow the dot families' choice (PINFER_CPU caps them too)
        if (avx512 && cap >= 3) exp_sum = ggml_exp_sum_avx512;
        else if (avx2 && cap >= 1) exp_sum = ggml_exp_sum_avx2;
#endif
    }
};

const cpu_tables &tables() {
    static const cpu_tables t;
    return t;
}

bool g_force_scalar = false;

}  // namespace

extern "C" {

const ggml_cpu_type_traits *ggml_get_cpu_type_traits(ggml_type type) {
    if (!ggml_get_type_traits(type)) return nullptr;
    const cpu_tables &t = tables();
    return g_force_scalar ? &t.ref[type] : &t.best[type];
}

const char *ggml_cpu_backend_name(void) { return g_force_scalar ? "scalar" : tables().name; }

void ggml_cpu_force_scalar(int on) { g_force_scalar = on != 0; }

size_t ggml_quantize_chunk(ggml_type type, const float *src, void *dst, int64_t nrows, int64_t n_per_row) {
    const ggml_cpu_type_traits *tr = ggml_get_cpu_type_traits(type);
    const size_t row = ggml_row_size(type, n_per_row);
    for (int64_t r = 0; r < nrows; r++) tr->from_float(src + r * n_per_row, (char *)dst + r * row, n_per_row);
    return row * (size_t)nrows;
}

}  // extern "C"

// Not under ggml_cpu_force_scalar: callers pair q8x with the SIMD dot kernels
// only (they check vec_dot != vec_dot_ref).
const ggml_q8x_kernels *ggml_cpu_q8x(void) { return tables().q8x; }
const ggml_amx_kernels *ggml_cpu_amx(void) { return tables().amx; }

ggml_q8x_pick ggml_cpu_q8x_pick(enum ggml_type t, int64_t k, int64_t ncols, bool high) {
    ggml_q8x_pick p = {};
    const ggml_cpu_type_traits *tr = ggml_get_cpu_type_traits(t);
    const ggml_q8x_kernels *q = tr && tr->vec_dot != tr->vec_dot_ref ? ggml_cpu_q8x() : nullptr;
    if (!q || k % 32 || ncols < (q->min_cols[t] ? q->min_cols[t] : 2)) return p;
    p.dot = high ? q->dot_hi[t] : q->dot[t];
    if (!p.dot) return p;
    p.unpack = ncols >= GGML_Q8X_GEMM_MIN_COLS ? q->unpack[t] : nullptr;
    p.gemm = p.unpack ? (high ? q->gemm_hi[t] : q->gemm[t]) : nullptr;
    p.pack = p.gemm ? (high ? q->gemm_pack_hi[t] : q->gemm_pack[t]) : nullptr;
    if (!p.gemm && (high ? q->dot_own_hi[t] : q->dot_own[t])) {  // the family's own rows for its one-row kernel
        p.dot = high ? q->dot_own_hi[t] : q->dot_own[t];
        p.pack = high ? q->dot_pack_hi[t] : q->dot_pack[t];
    }
    p.quantize = high ? q->quantize_hi : q->quantize;
    p.gemm_groups = q->gemm_groups[high] ? q->gemm_groups[high] : GGML_Q8X_GEMM_GROUPS;
    p.vrow = high ? ggml_q8xh_row_size(k) : ggml_q8x_row_size(k);
    return p;
}

extern "C" const char *ggml_cpu_act_format(enum ggml_type t, int64_t k, int64_t ncols, bool high) {
    if (ggml_cpu_q8x_pick(t, k, ncols, high).dot) return high ? "q8xh" : "q8x";
    const ggml_cpu_type_traits *tr = ggml_get_cpu_type_traits(t);
    if (!tr) return nullptr;
    return ggml_type_name(high && tr->vec_dot_f32 ? GGML_TYPE_F32 : tr->vec_dot_type);
}

ggml_vec_dot2_t ggml_cpu_dot_resid(enum ggml_type t) { return t >= 0 && t < GGML_TYPE_COUNT ? tables().dot2[t] : nullptr; }

ggml_from_resid_t ggml_cpu_from_resid(enum ggml_type t) {
    if (t < 0 || t >= GGML_TYPE_COUNT) return nullptr;
    return g_force_scalar ? tables().resid_ref[t] : tables().resid_best[t];
}

const char *ggml_cpu_kernel_variant(void) { return tables().variant; }

const ggml_axpy_kernels *ggml_cpu_axpy(void) { return g_force_scalar ? &tables().axpy_ref : &tables().axpy_best; }

// 4 KiB ahead by default (Intel Xeon VM, 2026-12-01: 1, 2, 8 and 16 KiB
// measured worse). AMD Zen 5 (family 1Ah) streams the types of fewer than 8
// bits a weight faster from 6 KiB ahead, the wider ones slower (2 threads,
// fast read phase, 2026-12-04: Q4_0 `high` 73-74% -> 79-80% of the read,
// Q5_1 +6-7 points at both precisions, Q6_K `high` +5; Q8_0 `high` -10, F16
// and BF16 -3 to -4). AMD Zen 3 (family 19h without AVX-512) streams the
// 16-bit float weights faster from 1 KiB ahead (2 threads, 2026-12-06, eight
// alternating rounds: F16 and BF16 medians 83-89% of the read against 77-82%
// at 4 KiB, 2 KiB as 4; the integer types within that VM's noise). AMD Zen
// 4 (family 19h with AVX-512) streams every type faster with the lines
// prefetched into L2 (GGML_PREFETCH_L2; 2026-12-07, one thread: Q4_0 `fast`
// 15-16 -> 19 GB/s, Q6_K `high` 13-14 -> 18-19; 2 threads: Q4_0 `fast` 23 ->
// 29, `high` 20 -> 23; 2 KiB ahead slower, 8 KiB as 4), and its q8xh kernels
// (the 32-element types at `high`, the heaviest per byte) with the lines
// also pulled into L1 (GGML_PREFETCH_NEAR; 2 threads, alternating rounds:
// Q4_0 69-73% -> 83-86% of the read, Q4_1 76-81% -> 87%, Q5_0 75-81% ->
// 84-89%, Q8_0 79-82% -> 77-91%; 1 KiB about as 2; the K-quants and every
// type at `fast` were level or a few points slower with it).
int ggml_cpu_prefetch_ahead(enum ggml_type t, bool q8xh) {
    const ggml_cpu_features &f = *ggml_cpu_get_features();
    const bool narrow = ggml_type_size(t) * 8 < 8 * (size_t)ggml_blck_size(t);
    const bool half = t == GGML_TYPE_F16 || t == GGML_TYPE_BF16;
    if (f.amd && f.family == 0x1A && narrow) return 6144;
    if (f.amd && f.family == 0x19 && !f.avx512f && half) return 1024;
    if (f.amd && f.family == 0x19 && f.avx512f) return 4096 | GGML_PREFETCH_L2 | (q8xh ? GGML_PREFETCH_NEAR : 0);
    return 4096;
}

ggml_exp_sum_t ggml_cpu_exp_sum(void) { return g_force_scalar ? ggml_exp_sum_ref : tables().exp_sum; }
