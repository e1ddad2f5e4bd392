// libFuzzer target: hostile *model* files that the GGUF parser accepts. A tiny
// valid llama is serialized in memory; a custom mutator changes its metadata
// values (types, numbers at the edges, NaN/Inf, known keys added or dropped)
// and its tensor infos (types, shapes, names, extra and missing tensors, poked
// values) and serializes the result again, so every input stays parseable and
// the fuzzer works on the loader, the validation and the first decode rather
// than on the parser (fuzz-gguf.cpp covers that). Each input is loaded through
// the C API and, when it loads, decoded (a two-token prompt, then one token)
// and its chat template applied, under ASan + UBSan (the whole library is
// instrumented when PINFER_FUZZ is on). The seeds cover llama (ReLU: exact
// sparse mode; with predictors; SwiGLU with magnitude thresholds), qwen2 and
// falcon; the context asks for sparse mode "auto", so every mode is reached. A load or decode may fail, with a
// message; it may not crash, hang or trip a sanitizer.
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ggml.h"
#include "gguf.h"
#include "pinfer.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

namespace {

// ---------------------------------------------------------------- a GGUF file as values

struct kv {
    std::string key;
    uint32_t type;
    std::vector<uint8_t> raw;  // the serialized value after its type field
};

struct tensor {
    std::string name;
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[4];
    std::vector<uint8_t> data;
};

struct file {
    std::vector<kv> kvs;
    std::vector<tensor> tensors;
};

template <typename T> void put(std::vector<uint8_t> &o, T v) {
    const uint8_t *p = (const uint8_t *)&v;
    o.insert(o.end(), p, p + sizeof v);
}
void put_str(std::vector<uint8_t> &o, const std::string &s) {
    put<uint64_t>(o, s.size());
    o.insert(o.end(), s.begin(), s.end());
}

// Re-serializes a parsed value (type already written by the caller).
void ser_value(std::vector<uint8_t> &o, const gguf_value *v) {
    const gguf_type t = gguf_val_type(v);
    if (t == GGUF_TYPE_STRING) {
        size_t len = 0;
        const char *s = gguf_val_get_str(v, &len);
        put_str(o, std::string(s, len));
    } else if (t == GGUF_TYPE_ARRAY) {
        const gguf_type et = gguf_arr_type(v);
        const int64_t n = gguf_arr_len(v);
        put<uint32_t>(o, (uint32_t)et);
        put<uint64_t>(o, (uint64_t)n);
        for (int64_t j = 0; j < n; j++) {
            if (et == GGUF_TYPE_STRING) {
                size_t len = 0;
                const char *s = gguf_arr_get_str(v, j, &len);
                put_str(o, std::string(s, len));
            } else if (et == GGUF_TYPE_ARRAY) {
                ser_value(o, gguf_arr_get_arr(v, j));
            } else {
                uint8_t e[8];
                gguf_arr_get_elem(v, j, e);
                o.insert(o.end(), e, e + gguf_type_size(et));
            }
        }
    } else {
        uint8_t e[8] = {0};
        const size_t sz = gguf_type_size(t);
        switch (t) {
            case GGUF_TYPE_UINT8: gguf_val_get_u8(v, (uint8_t *)e); break;
            case GGUF_TYPE_INT8: gguf_val_get_i8(v, (int8_t *)e); break;
            case GGUF_TYPE_UINT16: gguf_val_get_u16(v, (uint16_t *)e); break;
            case GGUF_TYPE_INT16: gguf_val_get_i16(v, (int16_t *)e); break;
            case GGUF_TYPE_UINT32: gguf_val_get_u32(v, (uint32_t *)e); break;
            case GGUF_TYPE_INT32: gguf_val_get_i32(v, (int32_t *)e); break;
            case GGUF_TYPE_FLOAT32: gguf_val_get_f32(v, (float *)e); break;
            case GGUF_TYPE_BOOL: { bool b = false; gguf_val_get_bool(v, &b); e[0] = b; break; }
            case GGUF_TYPE_UINT64: gguf_val_get_u64(v, (uint64_t *)e); break;
            case GGUF_TYPE_INT64: gguf_val_get_i64(v, (int64_t *)e); break;
            case GGUF_TYPE_FLOAT64: gguf_val_get_f64(v, (double *)e); break;
            default: break;
        }
        o.insert(o.end(), e, e + sz);
    }
}

bool parse(const uint8_t *data, size_t size, file &f) {
    char err[128];
    gguf_context *g = gguf_parse_buffer(data, size, err, sizeof err);
    if (!g) return false;
    for (int64_t i = 0; i < gguf_get_n_kv(g); i++) {
        kv k{gguf_get_key(g, i), (uint32_t)gguf_get_kv_type(g, i), {}};
        ser_value(k.raw, gguf_get_val(g, i));
        if (k.key != "general.alignment") f.kvs.push_back(std::move(k));
    }
    for (int64_t i = 0; i < gguf_get_n_tensors(g); i++) {
        tensor t;
        t.name = gguf_get_tensor_name(g, i);
        t.type = (uint32_t)gguf_get_tensor_type(g, i);
        t.n_dims = (uint32_t)gguf_get_tensor_n_dims(g, i);
        gguf_get_tensor_ne(g, i, t.ne);
        const uint8_t *p = (const uint8_t *)gguf_get_tensor_data(g, i);
        t.data.assign(p, p + gguf_get_tensor_size(g, i));
        f.tensors.push_back(std::move(t));
    }
    gguf_free(g);
    return true;
}

std::vector<uint8_t> serialize(const file &f) {
    const size_t align = GGUF_DEFAULT_ALIGNMENT;
    std::vector<uint8_t> o;
    o.insert(o.end(), GGUF_MAGIC, GGUF_MAGIC + 4);
    put<uint32_t>(o, 3);
    put<uint64_t>(o, f.tensors.size());
    put<uint64_t>(o, f.kvs.size());
    for (const kv &k : f.kvs) {
        put_str(o, k.key);
        put<uint32_t>(o, k.type);
        o.insert(o.end(), k.raw.begin(), k.raw.end());
    }
    uint64_t off = 0;
    for (const tensor &t : f.tensors) {
        put_str(o, t.name);
        put<uint32_t>(o, t.n_dims);
        for (uint32_t d = 0; d < t.n_dims; d++) put<int64_t>(o, t.ne[d]);
        put<uint32_t>(o, t.type);
        put<uint64_t>(o, off);
        off += (t.data.size() + align - 1) / align * align;
    }
    o.resize((o.size() + align - 1) / align * align, 0);
    for (const tensor &t : f.tensors) {
        o.insert(o.end(), t.data.begin(), t.data.end());
        o.resize((o.size() + align - 1) / align * align, 0);
    }
    return o;
}

// ---------------------------------------------------------------- the seed model

constexpr int E = 8, L = 2, H = 2, HKV = 1, FF = 16, HD = E / H;

template <typename T> kv scalar(const char *key, gguf_type type, T v) {
    kv k{key, (uint32_t)type, {}};
    put<T>(k.raw, v);
    return k;
}
kv str_kv(const char *key, const std::string &s) {
    kv k{key, GGUF_TYPE_STRING, {}};
    put_str(k.raw, s);
    return k;
}
kv str_arr(const char *key, const std::vector<std::string> &v) {
    kv k{key, GGUF_TYPE_ARRAY, {}};
    put<uint32_t>(k.raw, GGUF_TYPE_STRING);
    put<uint64_t>(k.raw, v.size());
    for (const auto &s : v) put_str(k.raw, s);
    return k;
}
template <typename T> kv num_arr(const char *key, gguf_type et, const std::vector<T> &v) {
    kv k{key, GGUF_TYPE_ARRAY, {}};
    put<uint32_t>(k.raw, et);
    put<uint64_t>(k.raw, v.size());
    for (T x : v) put<T>(k.raw, x);
    return k;
}

tensor f32_tensor(const std::string &name, std::vector<int64_t> ne, std::minstd_rand &rng, float base, float scale) {
    tensor t{name, GGML_TYPE_F32, (uint32_t)ne.size(), {1, 1, 1, 1}, {}};
    int64_t n = 1;
    for (size_t d = 0; d < ne.size(); d++) n *= (t.ne[d] = ne[d]);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int64_t i = 0; i < n; i++) put<float>(t.data, base + scale * nd(rng));
    return t;
}

// The seed models: the architectures and sparse modes the loader knows, so
// that mutations start from each of them.
enum seed_kind { SEED_LLAMA_RELU, SEED_LLAMA_PREDICTOR, SEED_LLAMA_THRESHOLD, SEED_QWEN2, SEED_FALCON, SEED_COUNT };

file seed_model(int kind) {
    file f;
    const std::string arch = kind == SEED_QWEN2 ? "qwen2" : kind == SEED_FALCON ? "falcon" : "llama";
    const std::string a = arch + ".";
    // SentencePiece vocabulary: specials, byte fallback for 'A', a few pieces
    const std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "<0x41>", "\xE2\x96\x81", "a", "b",
                                             "\xE2\x96\x81" "a", "ab", "\xE2\x96\x81" "ab"};
    const int V = (int)tokens.size();
    std::vector<float> scores;
    for (int i = 0; i < V; i++) scores.push_back(-(float)i);
    const std::vector<int32_t> types = {2, 3, 3, 6, 1, 1, 1, 1, 1, 1};
    auto u32 = [&](const std::string &k, uint32_t v) { f.kvs.push_back(scalar<uint32_t>(k.c_str(), GGUF_TYPE_UINT32, v)); };
    auto f32 = [&](const std::string &k, float v) { f.kvs.push_back(scalar<float>(k.c_str(), GGUF_TYPE_FLOAT32, v)); };
    f.kvs.push_back(str_kv("general.architecture", arch));
    u32(a + "context_length", 64);
    u32(a + "embedding_length", E);
    u32(a + "block_count", L);
    u32(a + "feed_forward_length", FF);
    u32(a + "attention.head_count", H);
    u32(a + "attention.head_count_kv", HKV);
    u32(a + "rope.dimension_count", HD);
    f32(a + "rope.freq_base", 10000.0f);
    f32(a + (kind == SEED_FALCON ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon"), 1e-5f);
    if (kind == SEED_LLAMA_RELU || kind == SEED_LLAMA_PREDICTOR || kind == SEED_FALCON)
        f.kvs.push_back(str_kv("pinfer.ffn_act", "relu"));
    if (kind == SEED_LLAMA_PREDICTOR) f32("pinfer.sparse.threshold", 0.0f);
    if (kind == SEED_LLAMA_THRESHOLD)
        f.kvs.push_back(num_arr<float>("pinfer.sparse.act_thresholds", GGUF_TYPE_FLOAT32, std::vector<float>(L, 0.1f)));
    f.kvs.push_back(str_kv("tokenizer.ggml.model", "llama"));
    f.kvs.push_back(str_arr("tokenizer.ggml.tokens", tokens));
    f.kvs.push_back(num_arr<float>("tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores));
    f.kvs.push_back(num_arr<int32_t>("tokenizer.ggml.token_type", GGUF_TYPE_INT32, types));
    u32("tokenizer.ggml.bos_token_id", 1);
    u32("tokenizer.ggml.eos_token_id", 2);
    f.kvs.push_back(str_kv("tokenizer.chat_template",
                           "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"));

    std::minstd_rand rng(1 + kind);
    const float w = 0.35f;
    const int KV = HD * HKV;
    auto t = [&](const std::string &name, std::vector<int64_t> ne, float base, float scale) {
        f.tensors.push_back(f32_tensor(name, ne, rng, base, scale));
    };
    t("token_embd.weight", {E, V}, 0, 1);
    for (int il = 0; il < L; il++) {
        const std::string p = "blk." + std::to_string(il) + ".";
        t(p + "attn_norm.weight", {E}, 1, 0.1f);
        if (kind == SEED_FALCON) {
            t(p + "attn_norm.bias", {E}, 0, 0.1f);
            t(p + "attn_qkv.weight", {E, E + 2 * KV}, 0, w);
        } else {
            t(p + "attn_q.weight", {E, E}, 0, w);
            t(p + "attn_k.weight", {E, KV}, 0, w);
            t(p + "attn_v.weight", {E, KV}, 0, w);
            if (kind == SEED_QWEN2) {
                t(p + "attn_q.bias", {E}, 0, 0.1f);
                t(p + "attn_k.bias", {KV}, 0, 0.1f);
                t(p + "attn_v.bias", {KV}, 0, 0.1f);
            }
            t(p + "ffn_norm.weight", {E}, 1, 0.1f);
            t(p + "ffn_gate.weight", {E, FF}, 0, w);
        }
        t(p + "attn_output.weight", {E, E}, 0, w);
        t(p + "ffn_up.weight", {E, FF}, 0, w);
        t(p + "ffn_down.weight", {FF, E}, 0, 0.25f);
        if (kind == SEED_LLAMA_PREDICTOR) {
            t(p + "fc1.weight", {E, 4}, 0, w);
            t(p + "fc2.weight", {4, FF}, 0, w);
            t(p + "ffn_down_t.weight", {E, FF}, 0, 0.25f);
        }
    }
    t("output_norm.weight", {E}, 1, 0.1f);
    if (kind == SEED_FALCON) t("output_norm.bias", {E}, 0, 0.1f);
    t("output.weight", {E, V}, 0, w);
    return f;
}

// ---------------------------------------------------------------- the mutator

struct mutator {
    std::minstd_rand rng;
    explicit mutator(unsigned seed) : rng(seed) {}
    uint64_t u(uint64_t n) { return n ? rng() % n : 0; }
    template <typename T> const T &pick(const std::vector<T> &v) { return v[u(v.size())]; }

    int64_t interesting_int(int64_t cur) {
        static const std::vector<int64_t> vals = {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 32, 64, 255, 256, 4096,
                                                  65535, 65536, 1 << 20, 4194304, INT32_MAX, (int64_t)1 << 31,
                                                  (int64_t)UINT32_MAX, (int64_t)1 << 32, INT64_MAX, -1, -2, INT32_MIN};
        switch (u(4)) {
            case 0: return cur + 1;
            case 1: return cur - 1;
            case 2: return cur * 2;
            default: return pick(vals);
        }
    }
    double interesting_float(double cur) {
        static const std::vector<double> vals = {0.0, -0.0, 1.0, -1.0, 1e-30, 1e-5, 1e-3, 0.5, 2.0, 1e4, 1e6, 1e30,
                                                 1e300, -1e4, NAN, INFINITY, -INFINITY, 3.4e38, 1e-45};
        switch (u(3)) {
            case 0: return cur * (u(2) ? -1 : 2);
            default: return pick(vals);
        }
    }
    std::string interesting_str() {
        static const std::vector<std::string> vals = {
            "", "llama", "qwen2", "falcon", "gpt2", "bert", "relu", "relu-both", "silu", "gelu", "linear", "none",
            "yarn", "hot-first", "cold-first", "default", "llama3", "qwen2", "smollm", "exact", "predictor",
            "chatml", "llama3", "{% for m in messages %}{{ m['content'] }}{% endfor %}", "<|im_start|>",
            "\xff\xfe", std::string(1, '\0'), std::string(300, 'x')};
        return pick(vals);
    }

    // A new value of a random type for key k (usually k's own type).
    void set_value(kv &k) {
        uint32_t t = k.type;
        if (u(4) == 0) t = (uint32_t)pick(std::vector<gguf_type>{GGUF_TYPE_UINT32, GGUF_TYPE_INT32, GGUF_TYPE_UINT64,
                                                                   GGUF_TYPE_INT64, GGUF_TYPE_FLOAT32, GGUF_TYPE_FLOAT64,
                                                                   GGUF_TYPE_STRING, GGUF_TYPE_BOOL, GGUF_TYPE_UINT8,
                                                                   GGUF_TYPE_INT16});
        int64_t cur_i = 0;
        double cur_f = 0;
        if (k.type == GGUF_TYPE_UINT32 && k.raw.size() == 4) { uint32_t x; memcpy(&x, k.raw.data(), 4); cur_i = x; }
        if (k.type == GGUF_TYPE_FLOAT32 && k.raw.size() == 4) { float x; memcpy(&x, k.raw.data(), 4); cur_f = x; }
        std::vector<uint8_t> raw;
        switch (t) {
            case GGUF_TYPE_UINT8: put<uint8_t>(raw, (uint8_t)interesting_int(cur_i)); break;
            case GGUF_TYPE_INT16: put<int16_t>(raw, (int16_t)interesting_int(cur_i)); break;
            case GGUF_TYPE_UINT32: put<uint32_t>(raw, (uint32_t)interesting_int(cur_i)); break;
            case GGUF_TYPE_INT32: put<int32_t>(raw, (int32_t)interesting_int(cur_i)); break;
            case GGUF_TYPE_UINT64: put<uint64_t>(raw, (uint64_t)interesting_int(cur_i)); break;
            case GGUF_TYPE_INT64: put<int64_t>(raw, interesting_int(cur_i)); break;
            case GGUF_TYPE_FLOAT32: put<float>(raw, (float)interesting_float(cur_f)); break;
            case GGUF_TYPE_FLOAT64: put<double>(raw, interesting_float(cur_f)); break;
            case GGUF_TYPE_BOOL: put<uint8_t>(raw, (uint8_t)u(2)); break;
            case GGUF_TYPE_STRING: put_str(raw, interesting_str()); break;
            case GGUF_TYPE_ARRAY: mutate_array(k); return;
            default: return;
        }
        k.type = t;
        k.raw = std::move(raw);
    }

    // Arrays: truncate, empty, or overwrite one fixed-size element.
    void mutate_array(kv &k) {
        if (k.raw.size() < 12) return;
        uint32_t et;
        uint64_t n;
        memcpy(&et, k.raw.data(), 4);
        memcpy(&n, k.raw.data() + 4, 8);
        const size_t es = gguf_type_size((gguf_type)et);
        if (u(3) == 0 || !es || !n) {  // drop the tail (also for string arrays: keep a prefix)
            const uint64_t keep = n ? u(n) : 0;
            size_t pos = 12;
            for (uint64_t j = 0; j < keep; j++) {
                if (es) pos += es;
                else if (et == GGUF_TYPE_STRING) { uint64_t len; memcpy(&len, k.raw.data() + pos, 8); pos += 8 + len; }
                else return;  // nested arrays: leave alone
            }
            k.raw.resize(pos);
            memcpy(k.raw.data() + 4, &keep, 8);
            return;
        }
        uint8_t *e = k.raw.data() + 12 + u(n) * es;
        if (et == GGUF_TYPE_FLOAT32) { float x = (float)interesting_float(0); memcpy(e, &x, 4); }
        else if (et == GGUF_TYPE_INT32 || et == GGUF_TYPE_UINT32) { int32_t x = (int32_t)interesting_int(0); memcpy(e, &x, 4); }
        else e[u(es)] = (uint8_t)rng();
    }

    kv new_key() {
        static const std::vector<const char *> keys = {
            "llama.attention.key_length", "llama.rope.scaling.type", "llama.rope.scaling.factor",
            "llama.attention.head_count_kv", "llama.rope.dimension_count", "pinfer.ffn_act", "pinfer.sparse.threshold",
            "pinfer.neuron_order", "pinfer.sparse.mode_hint", "pinfer.placement.count", "pinfer.placement.0.budget_bytes",
            "pinfer.placement.0.solver", "powerinfer.sparse_threshold", "tokenizer.ggml.add_bos_token",
            "tokenizer.ggml.add_eos_token", "tokenizer.ggml.pre", "tokenizer.ggml.unknown_token_id",
            "tokenizer.ggml.eot_token_id", "tokenizer.ggml.padding_token_id", "general.name",
            "qwen2.context_length", "falcon.attention.layer_norm_epsilon", "tokenizer.chat_template"};
        static const std::vector<const char *> arrays = {"pinfer.sparse.act_thresholds", "pinfer.placement.0.gpu_neurons",
                                                         "tokenizer.ggml.merges"};
        if (u(4) == 0) {
            const char *key = pick(arrays);
            if (!strcmp(key, "tokenizer.ggml.merges")) return str_arr(key, {"a b", "\xE2\x96\x81 a", "x y", ""});
            if (!strcmp(key, "pinfer.sparse.act_thresholds"))
                return num_arr<float>(key, GGUF_TYPE_FLOAT32, std::vector<float>(u(4), (float)interesting_float(0.1)));
            return num_arr<int32_t>(key, GGUF_TYPE_INT32, std::vector<int32_t>(u(4), (int32_t)interesting_int(4)));
        }
        kv k{pick(keys), GGUF_TYPE_UINT32, {}};
        put<uint32_t>(k.raw, 4);
        set_value(k);
        return k;
    }

    // Bytes a tensor of this type and shape needs; false if not a valid tensor or too big.
    static bool nbytes(uint32_t type, const int64_t *ne, size_t *out) {
        if (!ggml_type_is_valid((int)type)) return false;
        const int64_t blck = ggml_blck_size((ggml_type)type);
        if (blck <= 0 || ne[0] % blck) return false;
        double n = 1;
        for (int d = 0; d < 4; d++) {
            if (ne[d] < 0) return false;
            n *= (double)ne[d];
        }
        if (n > (1 << 18)) return false;
        *out = ggml_row_size((ggml_type)type, ne[0]) * (size_t)(ne[1] * ne[2] * ne[3]);
        return true;
    }

    void refill(tensor &t, size_t size) {
        if (t.data.size() == size) return;
        const uint32_t mode = (uint32_t)u(3);
        t.data.resize(size);
        for (size_t i = 0; i < size; i++) t.data[i] = mode == 0 ? 0 : mode == 1 ? (uint8_t)rng() : (uint8_t)(i * 37);
    }

    void mutate_tensor(file &f) {
        if (f.tensors.empty()) return;
        tensor &t = f.tensors[u(f.tensors.size())];
        switch (u(8)) {
            case 0: {  // another type
                static const std::vector<uint32_t> types = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q4_0,
                                                            GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, GGML_TYPE_I32,
                                                            GGML_TYPE_I8, GGML_TYPE_F64, GGML_TYPE_Q8_K, GGML_TYPE_Q5_1};
                const uint32_t ty = pick(types);
                size_t sz;
                if (!nbytes(ty, t.ne, &sz)) return;
                t.type = ty;
                refill(t, sz);
                return;
            }
            case 1: {  // another shape
                int64_t ne[4];
                memcpy(ne, t.ne, sizeof ne);
                const uint32_t d = (uint32_t)u(4);
                static const std::vector<int64_t> dims = {0, 1, 2, 3, 4, 7, 8, 9, 10, 16, 32, 256};
                ne[d] = u(2) ? pick(dims) : ne[d] + (u(2) ? 1 : -1);
                size_t sz;
                if (!nbytes(t.type, ne, &sz)) return;
                memcpy(t.ne, ne, sizeof ne);
                t.n_dims = std::max<uint32_t>(t.n_dims, d + 1);
                refill(t, sz);
                return;
            }
            case 2:
            case 6: {  // poke a value
                if (t.data.empty()) return;
                if (t.type == GGML_TYPE_F32) {
                    const float x = (float)interesting_float(1.0);
                    memcpy(t.data.data() + 4 * u(t.data.size() / 4), &x, 4);
                } else {
                    t.data[u(t.data.size())] = (uint8_t)rng();
                }
                return;
            }
            case 3:  // drop it (also when the drop leaves a layer incomplete)
                if (u(2)) return;
                f.tensors.erase(f.tensors.begin() + (&t - f.tensors.data()));
                return;
            case 4: {  // rename to another layer / part
                static const std::vector<std::string> names = {
                    "blk.0.", "blk.1.", "blk.2.", "blk.4294967295.", "output.weight", "blk.0.ffn_down_t.weight",
                    "blk.1.ffn_down_t.weight", "blk.0.attn_norm_2.weight", "blk.0.attn_qkv.weight"};
                std::string n = pick(names);
                if (n.back() == '.') {
                    const size_t dot = t.name.find('.', 4);
                    if (t.name.compare(0, 4, "blk.") != 0 || dot == std::string::npos) return;
                    n += t.name.substr(dot + 1);
                }
                for (const tensor &o : f.tensors)
                    if (o.name == n) return;  // the parser refuses duplicates
                t.name = n;
                return;
            }
            default: {  // add one of the optional tensors
                static const std::vector<std::string> parts = {"fc1.weight", "fc2.weight", "ffn_down_t.weight",
                                                               "ffn_freq", "attn_q.bias", "attn_k.bias",
                                                               "attn_v.bias", "attn_norm.bias", "attn_norm_2.weight"};
                static const std::vector<int64_t> dims = {E, FF, 4, HD, HD * HKV, 10, 1};
                const std::string name = "blk." + std::to_string(u(L)) + "." + pick(parts);
                for (const tensor &o : f.tensors)
                    if (o.name == name) return;
                std::vector<int64_t> ne = {pick(dims)};
                if (u(3)) ne.push_back(pick(dims));
                std::minstd_rand r2((unsigned)rng());
                f.tensors.push_back(f32_tensor(name, ne, r2, u(2) ? 0.5f : 0.0f, 0.5f));
                return;
            }
        }
    }

    void mutate(file &f) {
        const int steps = u(4) ? 1 : 2 + (int)u(3);  // mostly one change: most files then still load
        for (int s = 0; s < steps; s++) {
            const uint64_t what = u(20);
            if (what < 8 && !f.kvs.empty()) {
                set_value(f.kvs[u(f.kvs.size())]);
            } else if (what == 8 && !f.kvs.empty()) {
                f.kvs.erase(f.kvs.begin() + (long)u(f.kvs.size()));
            } else if (what < 12) {
                kv k = new_key();
                bool replaced = false;
                for (kv &o : f.kvs)
                    if (o.key == k.key) { o = k; replaced = true; }
                if (!replaced) f.kvs.push_back(std::move(k));
            } else {
                mutate_tensor(f);
            }
        }
    }
};

}  // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
    file f;
    mutator m(seed);
    // anything unparseable, and now and then anything at all, restarts from the valid model
    if (m.u(4) == 0 || !parse(data, size, f)) f = seed_model((int)m.u(SEED_COUNT));
    m.mutate(f);
    const std::vector<uint8_t> out = serialize(f);
    if (out.size() > max_size) {  // too big for the fuzzer's buffer: hand back the seed
        const std::vector<uint8_t> s = serialize(seed_model(SEED_LLAMA_RELU));
        if (s.size() > max_size) return 0;
        memcpy(data, s.data(), s.size());
        return s.size();
    }
    memcpy(data, out.data(), out.size());
    return out.size();
}

// How far inputs get (FUZZ_MODEL_STATS=1 prints it at exit): a mutator that
// only produced files the loader refuses would test nothing past it.
static uint64_t g_runs, g_loaded, g_context, g_decoded;
static void print_stats() {
    fprintf(stderr, "fuzz-model: %llu inputs, %llu loaded, %llu got a context, %llu decoded\n",
            (unsigned long long)g_runs, (unsigned long long)g_loaded, (unsigned long long)g_context,
            (unsigned long long)g_decoded);
}

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    if (getenv("FUZZ_MODEL_STATS")) atexit(print_stats);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    g_runs++;
    // The loader maps a path; a memfd gives the bytes one without touching the disk.
    const int fd = memfd_create("model.gguf", MFD_CLOEXEC);
    if (fd < 0) return 0;
    if (write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    pinfer_model *model = pinfer_model_load(path);
    close(fd);  // the mapping keeps the bytes
    if (!model) {
        const char *e = pinfer_last_error();
        if (!e || !*e) __builtin_trap();  // a failure must say why
        if (getenv("FUZZ_MODEL_ERRORS")) fprintf(stderr, "load error: %s\n", e);
        return 0;
    }
    g_loaded++;
    pinfer_context_params cp = pinfer_context_default_params();
    cp.n_ctx = 16;
    cp.n_threads = 1;
    cp.sparse_mode = PINFER_SPARSE_AUTO;
    if (pinfer_context *ctx = pinfer_context_new(model, cp)) {
        g_context++;
        const int32_t n_vocab = pinfer_model_n_vocab(model);
        pinfer_token prompt[2] = {0, n_vocab > 1 ? 1 : 0};
        if (pinfer_decode(ctx, prompt, 2, false) == 0) {
            g_decoded++;
            const float *lg = pinfer_get_logits(ctx, -1);
            if (!lg) __builtin_trap();
            for (int32_t i = 0; i < n_vocab; i++)
                if (!std::isfinite(lg[i])) __builtin_trap();  // decode promises finite logits
            pinfer_token next = n_vocab - 1;
            pinfer_decode(ctx, &next, 1, false);
        }
        pinfer_context_free(ctx);
    }
    pinfer_token toks[64];
    const char *text = "a ab A\xc3\xa9 <s>";
    pinfer_tokenize(model, text, (int32_t)strlen(text), toks, 64, true, true);
    pinfer_chat_message msgs[2] = {{"system", "be brief"}, {"user", "hi"}};
    char buf[512];
    pinfer_chat_apply_template(model, nullptr, msgs, 2, true, buf, sizeof buf);
    pinfer_model_free(model);
    return 0;
}
