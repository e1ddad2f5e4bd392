// Reads a GGUF model file: typed metadata access with errors that name the
// key, and tensors that point into the memory-mapped file (zero copy).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "ggml.h"
#include "gguf.h"

namespace pinfer {

class model_loader {
public:
    explicit model_loader(const std::string &path);  // throws std::runtime_error
    ~model_loader();
    model_loader(const model_loader &) = delete;
    model_loader &operator=(const model_loader &) = delete;

    const std::string &path() const { return path_; }
    gguf_context *gguf() const { return gguf_; }
    ggml_backend_buffer *weights_buffer() const { return weights_; }  // the mapping, as a host buffer

    bool has_key(const std::string &key) const;
    // Integer metadata of any integer type; throws if missing (required) or not an integer.
    int64_t get_int(const std::string &key) const;
    int64_t get_int(const std::string &key, int64_t fallback) const;
    float get_float(const std::string &key, float fallback) const;  // f32/f64/int accepted
    float get_float(const std::string &key) const;
    // Checked forms for values that size allocations or loops: an integer in
    // [lo, hi], a float that is finite and in (lo, hi]; otherwise an error
    // naming the key, its value and the range (before anything is allocated).
    int64_t get_int_in(const std::string &key, int64_t lo, int64_t hi) const;
    int64_t get_int_in(const std::string &key, int64_t lo, int64_t hi, int64_t fallback) const;
    float get_float_in(const std::string &key, float lo, float hi, float fallback) const;
    bool get_bool(const std::string &key, bool fallback) const;
    std::string get_str(const std::string &key) const;
    std::string get_str(const std::string &key, const std::string &fallback) const;
    std::vector<std::string> get_str_array(const std::string &key) const;  // empty if missing
    std::vector<float> get_f32_array(const std::string &key) const;
    std::vector<int32_t> get_i32_array(const std::string &key) const;

    // A tensor header in ctx whose data is the mapped file. ne lists the
    // expected shape (trailing dims omitted = 1); a mismatch or a missing
    // required tensor throws naming the tensor. Returns nullptr if optional
    // and absent.
    ggml_tensor *tensor(ggml_context *ctx, const std::string &name, std::vector<int64_t> ne, bool required = true);
    size_t n_tensors_used() const { return n_used_; }
    size_t n_tensors() const;  // the file's, plus overrides the file lacks
    bool has_tensor(const std::string &name) const;  // in the file or overridden

    // A tensor built in memory at load time (e.g. ffn_down rebuilt from a
    // PowerInfer file's ffn_down_t); tensor() serves it in place of the
    // file's. The loader owns the bytes for the model's lifetime.
    void add_override(const std::string &name, ggml_type type, std::vector<int64_t> ne, std::vector<uint8_t> data);
    uint64_t bytes_used() const { return bytes_used_; }
    uint64_t params_used() const { return params_used_; }  // elements of the tensors served
    // Headers for row ranges of a tensor served by tensor(): parts[i] gets
    // rows [row0_i, row0_i + n_i) (fused q/k/v or gate/up matrices), named
    // "<name>[<i>]"; the bytes stay the file's.
    static ggml_tensor *rows(ggml_context *ctx, ggml_tensor *t, int64_t row0, int64_t n, int part);

private:
    int64_t key_index(const std::string &key, bool required) const;
    struct override_tensor {
        ggml_type type;
        int64_t ne[GGML_MAX_DIMS];
        std::vector<uint8_t> data;
    };
    std::unordered_map<std::string, override_tensor> overrides_;
    std::string path_;
    gguf_context *gguf_ = nullptr;
    ggml_backend_buffer *weights_ = nullptr;
    size_t n_used_ = 0;
    uint64_t bytes_used_ = 0;
    uint64_t params_used_ = 0;
};

}  // namespace pinfer
