// libFuzzer target: parse arbitrary bytes as GGUF, then walk every accessor
// (including out-of-range indices and wrong-type getters) and touch every byte
// of tensor data, so that ASan/UBSan see any read the parser let through.
#include <cstdint>
#include <cstring>

// The parser source is compiled into this target so that it carries the fuzzer's
// coverage and sanitizer instrumentation even when libggml was built without it
// (the linker then takes no gguf object from libggml).
#include "../../ggml/src/gguf.cpp"

static volatile uint64_t g_sink;

static void walk_value(const gguf_value *v, int depth) {
    uint64_t acc = 0;
    uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
    float f32; bool b; uint64_t u64; int64_t i64; double f64;
    // Every getter on every value: exactly one may succeed.
    acc += gguf_val_get_u8(v, &u8) + gguf_val_get_i8(v, &i8) + gguf_val_get_u16(v, &u16) +
           gguf_val_get_i16(v, &i16) + gguf_val_get_u32(v, &u32) + gguf_val_get_i32(v, &i32) +
           gguf_val_get_f32(v, &f32) + gguf_val_get_bool(v, &b) + gguf_val_get_u64(v, &u64) +
           gguf_val_get_i64(v, &i64) + gguf_val_get_f64(v, &f64);
    size_t len = 0;
    if (const char *s = gguf_val_get_str(v, &len)) {
        for (size_t k = 0; k < len; k++) acc += (uint8_t)s[k];
        acc += s[len] == 0;
    }
    const gguf_type et = gguf_arr_type(v);
    const int64_t n = gguf_arr_len(v);
    const uint8_t *raw = (const uint8_t *)gguf_arr_data(v);
    for (int64_t j = -1; j <= n; j++) {
        uint8_t elem[8];
        acc += gguf_arr_get_elem(v, j, elem);
        if (raw && j >= 0 && j < n) acc += raw[(size_t)j * gguf_type_size(et)];
        if (const char *s = gguf_arr_get_str(v, j, &len)) acc += len + (len ? (uint8_t)s[len - 1] : 0);
        if (const gguf_value *c = gguf_arr_get_arr(v, j)) walk_value(c, depth + 1);
    }
    acc += gguf_val_type(v) + (int)et + (uint64_t)strlen(gguf_type_name(et));
    g_sink = g_sink + acc;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256];
    gguf_context *ctx = gguf_parse_buffer(data, size, err, sizeof err);
    if (!ctx) {
        // The message must be a terminated, non-empty string.
        if (strnlen(err, sizeof err) == 0 || strnlen(err, sizeof err) == sizeof err) __builtin_trap();
        return 0;
    }
    uint64_t acc = gguf_get_version(ctx) + gguf_get_alignment(ctx) + gguf_get_data_offset(ctx);
    const int64_t n_kv = gguf_get_n_kv(ctx);
    for (int64_t i = -1; i <= n_kv; i++) {
        const char *key = gguf_get_key(ctx, i);
        if (key) {
            if (gguf_find_key(ctx, key) != i) __builtin_trap();
            acc += strlen(key);
        }
        acc += gguf_get_kv_type(ctx, i);
        walk_value(gguf_get_val(ctx, i), 0);
    }
    const int64_t n_t = gguf_get_n_tensors(ctx);
    for (int64_t i = -1; i <= n_t; i++) {
        const char *name = gguf_get_tensor_name(ctx, i);
        if (name && gguf_find_tensor(ctx, name) != i) __builtin_trap();
        int64_t ne[GGUF_MAX_DIMS];
        acc += gguf_get_tensor_ne(ctx, i, ne) + gguf_get_tensor_type(ctx, i) + gguf_get_tensor_n_dims(ctx, i) +
               gguf_get_tensor_offset(ctx, i);
        const uint8_t *p = (const uint8_t *)gguf_get_tensor_data(ctx, i);
        const size_t sz = gguf_get_tensor_size(ctx, i);
        if (p) {
            // Tensor data must lie inside the input.
            if (p < data || p + sz > data + size) __builtin_trap();
            for (size_t k = 0; k < sz; k++) acc += p[k];
        }
    }
    acc += gguf_find_key(ctx, "general.alignment") + gguf_find_tensor(ctx, "x");
    g_sink = g_sink + acc;
    gguf_free(ctx);
    return 0;
}
