// The single table of tensor types: names, block geometry and the reference
// converters (ggml-quants.cpp). Kernels are a backend's (cpu/cpu-type-traits.cpp).
#include <strings.h>

#include "ggml-quants.h"
#include "ggml.h"

namespace {

struct type_table {
    ggml_type_traits t[GGML_TYPE_COUNT] = {};

    void set(ggml_type type, const char *name, int64_t blck, size_t size, bool quantized) {
        t[type].name = name;
        t[type].blck_size = blck;
        t[type].type_size = size;
        t[type].is_quantized = quantized;
        t[type].supported = true;
    }

    type_table() {
        set(GGML_TYPE_F32, "f32", 1, 4, false);
        set(GGML_TYPE_F16, "f16", 1, 2, false);
        set(GGML_TYPE_BF16, "bf16", 1, 2, false);
        set(GGML_TYPE_Q4_0, "q4_0", 32, 18, true);
        set(GGML_TYPE_Q4_1, "q4_1", 32, 20, true);
        set(GGML_TYPE_Q5_0, "q5_0", 32, 22, true);
        set(GGML_TYPE_Q5_1, "q5_1", 32, 24, true);
        set(GGML_TYPE_Q8_0, "q8_0", 32, 34, true);
        set(GGML_TYPE_Q8_1, "q8_1", 32, 36, true);
        set(GGML_TYPE_Q2_K, "q2_K", 256, 84, true);
        set(GGML_TYPE_Q3_K, "q3_K", 256, 110, true);
        set(GGML_TYPE_Q4_K, "q4_K", 256, 144, true);
        set(GGML_TYPE_Q5_K, "q5_K", 256, 176, true);
        set(GGML_TYPE_Q6_K, "q6_K", 256, 210, true);
        set(GGML_TYPE_Q8_K, "q8_K", 256, 292, true);
        set(GGML_TYPE_I8, "i8", 1, 1, false);
        set(GGML_TYPE_I16, "i16", 1, 2, false);
        set(GGML_TYPE_I32, "i32", 1, 4, false);
        set(GGML_TYPE_I64, "i64", 1, 8, false);
        set(GGML_TYPE_F64, "f64", 1, 8, false);
        ggml_types_init_ref_kernels(t);
    }
};

const type_table &table() {
    static type_table tt;
    return tt;
}

}  // namespace

extern "C" {

const ggml_type_traits *ggml_get_type_traits(ggml_type type) {
    if ((int)type < 0 || (int)type >= GGML_TYPE_COUNT) return nullptr;
    const type_table &tt = table();
    const ggml_type_traits *tr = &tt.t[type];
    return tr->supported ? tr : nullptr;
}

// range first: an int outside the enum's values may not even be cast to it (UBSan: invalid enum load)
bool ggml_type_is_valid(int type) {
    return type >= 0 && type < GGML_TYPE_COUNT && ggml_get_type_traits((ggml_type)type) != nullptr;
}

const char *ggml_type_name(ggml_type type) {
    const ggml_type_traits *tr = ggml_get_type_traits(type);
    return tr ? tr->name : "unknown";
}

int64_t ggml_blck_size(ggml_type type) { return ggml_get_type_traits(type)->blck_size; }
size_t ggml_type_size(ggml_type type) { return ggml_get_type_traits(type)->type_size; }

size_t ggml_row_size(ggml_type type, int64_t ne) {
    const ggml_type_traits *tr = ggml_get_type_traits(type);
    return tr->type_size * (size_t)(ne / tr->blck_size);
}

int ggml_type_from_name(const char *name) {
    for (int i = 0; i < GGML_TYPE_COUNT; i++) {
        const ggml_type_traits *tr = ggml_get_type_traits((ggml_type)i);
        if (tr && strcasecmp(tr->name, name) == 0) return i;
    }
    return -1;
}

}  // extern "C"
