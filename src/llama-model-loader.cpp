#include "llama-model-loader.h"

#include "ggml-backend.h"

#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace pinfer {

static std::runtime_error err(const std::string &msg) { return std::runtime_error(msg); }

model_loader::model_loader(const std::string &path) : path_(path) {
    char buf[512] = {0};
    gguf_ = gguf_open(path.c_str(), buf, sizeof(buf));
    if (!gguf_) throw err(buf);  // gguf's message names the file
    // the mapping, seen by the backend layer as one host buffer it never frees
    weights_ = ggml_backend_cpu_buffer_from_ptr(const_cast<void *>(gguf_get_file_data(gguf_)), gguf_get_file_size(gguf_));
}

model_loader::~model_loader() {
    ggml_backend_buffer_free(weights_);
    gguf_free(gguf_);
}

int64_t model_loader::key_index(const std::string &key, bool required) const {
    int64_t i = gguf_find_key(gguf_, key.c_str());
    if (i < 0 && required) throw err("model metadata key '" + key + "' is missing");
    return i;
}

bool model_loader::has_key(const std::string &key) const { return key_index(key, false) >= 0; }

static bool value_as_int(const gguf_value *v, int64_t *out) {
    switch (gguf_val_type(v)) {
        case GGUF_TYPE_UINT8: { uint8_t x; gguf_val_get_u8(v, &x); *out = x; return true; }
        case GGUF_TYPE_INT8: { int8_t x; gguf_val_get_i8(v, &x); *out = x; return true; }
        case GGUF_TYPE_UINT16: { uint16_t x; gguf_val_get_u16(v, &x); *out = x; return true; }
        case GGUF_TYPE_INT16: { int16_t x; gguf_val_get_i16(v, &x); *out = x; return true; }
        case GGUF_TYPE_UINT32: { uint32_t x; gguf_val_get_u32(v, &x); *out = x; return true; }
        case GGUF_TYPE_INT32: { int32_t x; gguf_val_get_i32(v, &x); *out = x; return true; }
        case GGUF_TYPE_UINT64: { uint64_t x; gguf_val_get_u64(v, &x); if (x > INT64_MAX) return false; *out = (int64_t)x; return true; }
        case GGUF_TYPE_INT64: { int64_t x; gguf_val_get_i64(v, &x); *out = x; return true; }
        default: return false;
    }
}

int64_t model_loader::get_int(const std::string &key) const {
    int64_t v;
    if (!value_as_int(gguf_get_val(gguf_, key_index(key, true)), &v))
        throw err("model metadata key '" + key + "' is not an integer");
    return v;
}

int64_t model_loader::get_int(const std::string &key, int64_t fallback) const {
    return has_key(key) ? get_int(key) : fallback;
}

int64_t model_loader::get_int_in(const std::string &key, int64_t lo, int64_t hi) const {
    const int64_t v = get_int(key);
    if (v < lo || v > hi)
        throw err("model metadata key '" + key + "' is " + std::to_string(v) + " (expected " + std::to_string(lo) +
                  ".." + std::to_string(hi) + ")");
    return v;
}

int64_t model_loader::get_int_in(const std::string &key, int64_t lo, int64_t hi, int64_t fallback) const {
    return has_key(key) ? get_int_in(key, lo, hi) : fallback;
}

float model_loader::get_float_in(const std::string &key, float lo, float hi, float fallback) const {
    if (!has_key(key)) return fallback;
    const float v = get_float(key);
    if (!(v > lo && v <= hi)) {  // also false for NaN
        char msg[96];
        snprintf(msg, sizeof msg, "' is %g (expected a finite number in (%g, %g])", v, lo, hi);
        throw err("model metadata key '" + key + msg);
    }
    return v;
}

float model_loader::get_float(const std::string &key) const {
    const gguf_value *v = gguf_get_val(gguf_, key_index(key, true));
    float f;
    double d;
    int64_t i;
    if (gguf_val_get_f32(v, &f)) return f;
    if (gguf_val_get_f64(v, &d)) return (float)d;
    if (value_as_int(v, &i)) return (float)i;
    throw err("model metadata key '" + key + "' is not a number");
}

float model_loader::get_float(const std::string &key, float fallback) const {
    return has_key(key) ? get_float(key) : fallback;
}

bool model_loader::get_bool(const std::string &key, bool fallback) const {
    if (!has_key(key)) return fallback;
    bool b;
    if (!gguf_val_get_bool(gguf_get_val(gguf_, key_index(key, true)), &b))
        throw err("model metadata key '" + key + "' is not a bool");
    return b;
}

std::string model_loader::get_str(const std::string &key) const {
    size_t len = 0;
    const char *s = gguf_val_get_str(gguf_get_val(gguf_, key_index(key, true)), &len);
    if (!s) throw err("model metadata key '" + key + "' is not a string");
    return std::string(s, len);
}

std::string model_loader::get_str(const std::string &key, const std::string &fallback) const {
    return has_key(key) ? get_str(key) : fallback;
}

std::vector<std::string> model_loader::get_str_array(const std::string &key) const {
    std::vector<std::string> out;
    int64_t i = key_index(key, false);
    if (i < 0) return out;
    const gguf_value *v = gguf_get_val(gguf_, i);
    if (gguf_arr_type(v) != GGUF_TYPE_STRING) throw err("model metadata key '" + key + "' is not a string array");
    const int64_t n = gguf_arr_len(v);
    out.reserve((size_t)n);
    for (int64_t j = 0; j < n; j++) {
        size_t len = 0;
        const char *s = gguf_arr_get_str(v, j, &len);
        out.emplace_back(s, len);
    }
    return out;
}

std::vector<float> model_loader::get_f32_array(const std::string &key) const {
    std::vector<float> out;
    int64_t i = key_index(key, false);
    if (i < 0) return out;
    const gguf_value *v = gguf_get_val(gguf_, i);
    if (gguf_arr_type(v) != GGUF_TYPE_FLOAT32) throw err("model metadata key '" + key + "' is not an f32 array");
    out.resize((size_t)gguf_arr_len(v));
    if (!out.empty()) memcpy(out.data(), gguf_arr_data(v), out.size() * sizeof(float));
    return out;
}

std::vector<int32_t> model_loader::get_i32_array(const std::string &key) const {
    std::vector<int32_t> out;
    int64_t i = key_index(key, false);
    if (i < 0) return out;
    const gguf_value *v = gguf_get_val(gguf_, i);
    const gguf_type t = gguf_arr_type(v);
    if (t != GGUF_TYPE_INT32 && t != GGUF_TYPE_UINT32) throw err("model metadata key '" + key + "' is not an i32 array");
    out.resize((size_t)gguf_arr_len(v));
    if (!out.empty()) memcpy(out.data(), gguf_arr_data(v), out.size() * sizeof(int32_t));
    return out;
}

size_t model_loader::n_tensors() const {
    size_t n = (size_t)gguf_get_n_tensors(gguf_);
    for (const auto &o : overrides_)
        if (gguf_find_tensor(gguf_, o.first.c_str()) < 0) n++;
    return n;
}

bool model_loader::has_tensor(const std::string &name) const {
    return overrides_.count(name) || gguf_find_tensor(gguf_, name.c_str()) >= 0;
}

void model_loader::add_override(const std::string &name, ggml_type type, std::vector<int64_t> ne,
                                std::vector<uint8_t> data) {
    override_tensor o;
    o.type = type;
    for (int d = 0; d < GGML_MAX_DIMS; d++) o.ne[d] = d < (int)ne.size() ? ne[d] : 1;
    o.data = std::move(data);
    overrides_[name] = std::move(o);
}

static std::string shape_str(const int64_t *ne, int n) {
    std::string s = "[";
    for (int i = 0; i < n; i++) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

ggml_tensor *model_loader::tensor(ggml_context *ctx, const std::string &name, std::vector<int64_t> ne, bool required) {
    int64_t want[GGML_MAX_DIMS] = {1, 1, 1, 1};
    for (size_t d = 0; d < ne.size() && d < GGML_MAX_DIMS; d++) want[d] = ne[d];
    auto ov = overrides_.find(name);
    if (ov != overrides_.end()) {
        override_tensor &o = ov->second;
        for (int d = 0; d < GGML_MAX_DIMS; d++)
            if (o.ne[d] != want[d])
                throw err("model tensor '" + name + "' (rebuilt at load) has shape " + shape_str(o.ne, GGML_MAX_DIMS) +
                          ", expected " + shape_str(want, GGML_MAX_DIMS));
        ggml_tensor *t = ggml_new_tensor(ctx, o.type, GGML_MAX_DIMS, o.ne);
        t->data = o.data.data();
        ggml_set_name(t, name.c_str());
        n_used_++;
        bytes_used_ += o.data.size();
        params_used_ += (uint64_t)ggml_nelements(t);
        return t;
    }
    const int64_t i = gguf_find_tensor(gguf_, name.c_str());
    if (i < 0) {
        if (required) throw err("model tensor '" + name + "' is missing");
        return nullptr;
    }
    const int type = gguf_get_tensor_type(gguf_, i);
    const ggml_type_traits *tr = ggml_get_type_traits((ggml_type)type);
    if (!tr) throw err("model tensor '" + name + "' has unsupported type " + std::to_string(type));
    int64_t have[GGUF_MAX_DIMS];
    gguf_get_tensor_ne(gguf_, i, have);
    for (int d = 0; d < GGML_MAX_DIMS; d++) {
        if (have[d] != want[d])
            throw err("model tensor '" + name + "' has shape " + shape_str(have, GGML_MAX_DIMS) + ", expected " +
                      shape_str(want, GGML_MAX_DIMS));
    }
    ggml_tensor *t = ggml_new_tensor(ctx, (ggml_type)type, GGML_MAX_DIMS, have);
    t->data = const_cast<void *>(gguf_get_tensor_data(gguf_, i));
    t->buffer = weights_;
    ggml_set_name(t, name.c_str());
    n_used_++;
    bytes_used_ += gguf_get_tensor_size(gguf_, i);
    params_used_ += (uint64_t)ggml_nelements(t);
    return t;
}

ggml_tensor *model_loader::rows(ggml_context *ctx, ggml_tensor *t, int64_t row0, int64_t n, int part) {
    if (ggml_n_dims(t) > 2 || row0 < 0 || n < 1 || row0 + n > t->ne[1])
        throw err("model tensor '" + std::string(t->name) + "' cannot be split at rows [" + std::to_string(row0) + ", " +
                  std::to_string(row0 + n) + ")");
    ggml_tensor *r = ggml_new_tensor_2d(ctx, t->type, t->ne[0], n);
    r->data = (char *)t->data + row0 * t->nb[1];
    r->buffer = t->buffer;
    ggml_set_name(r, (std::string(t->name) + "[" + std::to_string(part) + "]").c_str());
    return r;
}

}  // namespace pinfer
