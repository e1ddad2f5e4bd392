// pinfer-quantize: rewrite a GGUF model with its weight matrices in another type.
//
//   pinfer-quantize in.gguf out.gguf TYPE [--threads N] [--pure]
//
// TYPE is a plain tensor type (f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_K q3_K
// q4_K q5_K q6_K) or a mixed preset (Q3_K_M Q4_K_S Q4_K_M Q5_K_S Q5_K_M);
// case does not matter. Which tensor gets which type:
//
// * Weight matrices: token_embd, output and blk.N.{attn_q, attn_k, attn_v,
//   attn_output, attn_qkv, ffn_gate, ffn_up, ffn_down, ffn_down_t}.weight.
//   Only these are converted; every other tensor (norms, biases, pinfer's
//   predictor fc1/fc2 and ffn_freq, anything unknown) is copied unchanged,
//   except that a quantized 1-D tensor (or any 1-D one under TYPE f32)
//   becomes F32, which is lossless and what the kernels expect.
// * The matrix that produces the logits (output.weight, or token_embd.weight
//   when the model ties them) is the most sensitive to rounding: every
//   quantized TYPE below 6 bits stores it as q6_K.
// * q2_K is itself a mix (all-q2_K models are barely usable): attn_v and
//   ffn_down at q3_K.
// * Presets: let "more-bits layers" be the first and last eighth of the
//   layers plus every third layer in between (i < n/8, i >= 7n/8, or
//   (i - n/8) % 3 == 2; integer division).
//     Q3_K_M  q3_K; attn_v q5_K in layers 0-1, else q4_K; attn_output q4_K;
//             ffn_down q4_K in more-bits layers
//     Q4_K_S  q4_K; attn_v and ffn_down q5_K in the first eighth (at least layer 0)
//     Q4_K_M  q4_K; attn_v and ffn_down q6_K in more-bits layers
//     Q5_K_S  = q5_K
//     Q5_K_M  q5_K; attn_v and ffn_down q6_K in more-bits layers
// * --pure: every weight matrix gets exactly TYPE, no upgrades.
// * A row whose length is not a multiple of the type's block size cannot be
//   stored in it: q2_K/q3_K fall back to q4_0, q4_K to q5_0, q5_K to q5_1,
//   q6_K to q8_0, and 32-element types to f16. Each fallback is reported.
// * A tensor already in its target type is copied byte for byte; any other
//   input type is first decoded to float with the type's to_float.
//
// Metadata (tokenizer included) is carried over in order; general.file_type
// is set to the llama.cpp file-type id of TYPE, general.quantization_version
// to 2 when the output holds quantized tensors. The output is written to a
// temporary file and renamed into place, so a failure leaves no file behind;
// SIGINT, SIGTERM and SIGHUP remove it too. The output must be absent or a
// regular file (never a device, FIFO, directory or symbolic link) and not the
// input. All converted tensors are held in memory until the file is written.
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <strings.h>

#include "ggml-cpu.h"
#include "gguf.h"
#include "llama-threads.h"

namespace {

// ---------------------------------------------------------------- recipes

enum role {
    ROLE_OTHER,  // not a weight matrix we convert
    ROLE_TOKEN_EMBD,
    ROLE_OUTPUT,
    ROLE_ATTN_Q,
    ROLE_ATTN_K,
    ROLE_ATTN_V,
    ROLE_ATTN_OUTPUT,
    ROLE_ATTN_QKV,
    ROLE_FFN_GATE,
    ROLE_FFN_UP,
    ROLE_FFN_DOWN,  // ffn_down and its transposed copy ffn_down_t
};

struct recipe {
    const char *name;
    ggml_type base;
    int32_t file_type;  // llama.cpp's general.file_type id
    const char *summary;
};

const recipe RECIPES[] = {
    {"f32", GGML_TYPE_F32, 0, "32-bit float"},
    {"f16", GGML_TYPE_F16, 1, "16-bit float"},
    {"bf16", GGML_TYPE_BF16, 32, "bfloat16"},
    {"q4_0", GGML_TYPE_Q4_0, 2, "4.5 bpw, output q6_K"},
    {"q4_1", GGML_TYPE_Q4_1, 3, "5.0 bpw, output q6_K"},
    {"q5_0", GGML_TYPE_Q5_0, 8, "5.5 bpw, output q6_K"},
    {"q5_1", GGML_TYPE_Q5_1, 9, "6.0 bpw, output q6_K"},
    {"q8_0", GGML_TYPE_Q8_0, 7, "8.5 bpw"},
    {"q2_K", GGML_TYPE_Q2_K, 10, "2.6 bpw; attn_v, ffn_down q3_K; output q6_K"},
    {"q3_K", GGML_TYPE_Q3_K, 11, "3.4 bpw, output q6_K"},
    {"Q3_K_M", GGML_TYPE_Q3_K, 12, "q3_K; attn_v q4_K/q5_K, attn_output q4_K, some ffn_down q4_K"},
    {"q4_K", GGML_TYPE_Q4_K, 14, "4.5 bpw, output q6_K"},
    {"Q4_K_S", GGML_TYPE_Q4_K, 14, "q4_K; first-eighth attn_v, ffn_down q5_K"},
    {"Q4_K_M", GGML_TYPE_Q4_K, 15, "q4_K; more-bits attn_v, ffn_down q6_K"},
    {"q5_K", GGML_TYPE_Q5_K, 16, "5.5 bpw, output q6_K"},
    {"Q5_K_S", GGML_TYPE_Q5_K, 16, "same as q5_K"},
    {"Q5_K_M", GGML_TYPE_Q5_K, 17, "q5_K; more-bits attn_v, ffn_down q6_K"},
    {"q6_K", GGML_TYPE_Q6_K, 18, "6.6 bpw"},
};

const recipe *find_recipe(const char *name) {
    for (const recipe &r : RECIPES)
        if (strcasecmp(r.name, name) == 0) return &r;
    return nullptr;
}

std::string recipe_list() {
    std::string s;
    for (const recipe &r : RECIPES) s += std::string("  ") + r.name + std::string(8 - strlen(r.name), ' ') + r.summary + "\n";
    return s;
}

// Role and layer (-1 if none) of a tensor name.
role classify(const std::string &name, int *layer) {
    *layer = -1;
    if (name == "token_embd.weight") return ROLE_TOKEN_EMBD;
    if (name == "output.weight") return ROLE_OUTPUT;
    int il = -1, pos = 0;
    if (sscanf(name.c_str(), "blk.%d.%n", &il, &pos) != 1 || pos == 0 || il < 0) return ROLE_OTHER;
    const std::string rest = name.substr((size_t)pos);
    static const struct {
        const char *suffix;
        role r;
    } kinds[] = {
        {"attn_q.weight", ROLE_ATTN_Q},         {"attn_k.weight", ROLE_ATTN_K},
        {"attn_v.weight", ROLE_ATTN_V},         {"attn_output.weight", ROLE_ATTN_OUTPUT},
        {"attn_qkv.weight", ROLE_ATTN_QKV},     {"ffn_gate.weight", ROLE_FFN_GATE},
        {"ffn_up.weight", ROLE_FFN_UP},         {"ffn_down.weight", ROLE_FFN_DOWN},
        {"ffn_down_t.weight", ROLE_FFN_DOWN},
    };
    for (const auto &k : kinds) {
        if (rest == k.suffix) {
            *layer = il;
            return k.r;
        }
    }
    return ROLE_OTHER;
}

bool more_bits_layer(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// Target type of a weight matrix under a recipe (before the block-size check).
ggml_type pick_type(const recipe &rc, bool pure, role r, int il, int n_layer, bool tied) {
    const ggml_type base = rc.base;
    if (pure) return base;
    const bool logits = r == ROLE_OUTPUT || (r == ROLE_TOKEN_EMBD && tied);
    const bool below6 = base == GGML_TYPE_Q4_0 || base == GGML_TYPE_Q4_1 || base == GGML_TYPE_Q5_0 ||
                        base == GGML_TYPE_Q5_1 || base == GGML_TYPE_Q2_K || base == GGML_TYPE_Q3_K ||
                        base == GGML_TYPE_Q4_K || base == GGML_TYPE_Q5_K;
    if (logits) return below6 ? GGML_TYPE_Q6_K : base;
    const std::string n = rc.name;
    const bool v = r == ROLE_ATTN_V, down = r == ROLE_FFN_DOWN;
    if (n == "q2_K" && (v || down)) return GGML_TYPE_Q3_K;
    if (n == "Q3_K_M") {
        if (v) return il < 2 ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K;
        if (r == ROLE_ATTN_OUTPUT) return GGML_TYPE_Q4_K;
        if (down && more_bits_layer(il, n_layer)) return GGML_TYPE_Q4_K;
    }
    if (n == "Q4_K_S" && (v || down) && il < std::max(1, n_layer / 8)) return GGML_TYPE_Q5_K;
    if ((n == "Q4_K_M" || n == "Q5_K_M") && (v || down) && more_bits_layer(il, n_layer)) return GGML_TYPE_Q6_K;
    return base;
}

// A type whose blocks fit rows of n elements: t itself or its fallback chain.
ggml_type fit_type(ggml_type t, int64_t n) {
    while (n % ggml_blck_size(t) != 0) {
        switch (t) {
            case GGML_TYPE_Q2_K:
            case GGML_TYPE_Q3_K: t = GGML_TYPE_Q4_0; break;
            case GGML_TYPE_Q4_K: t = GGML_TYPE_Q5_0; break;
            case GGML_TYPE_Q5_K: t = GGML_TYPE_Q5_1; break;
            case GGML_TYPE_Q6_K: t = GGML_TYPE_Q8_0; break;
            default: t = GGML_TYPE_F16; break;
        }
    }
    return t;
}

// ---------------------------------------------------------------- metadata copy

gguf_wval *copy_value(const gguf_value *v);

gguf_wval *copy_array(const gguf_value *v) {
    const gguf_type et = gguf_arr_type(v);
    const int64_t n = gguf_arr_len(v);
    gguf_wval *a = gguf_wval_arr(et);
    if (!a) return nullptr;
    int rc = 0;
    if (et == GGUF_TYPE_STRING) {
        for (int64_t j = 0; j < n && rc == 0; j++) {
            size_t len = 0;
            const char *s = gguf_arr_get_str(v, j, &len);
            rc = s ? gguf_wval_arr_push_str(a, s, len) : -1;
        }
    } else if (et == GGUF_TYPE_ARRAY) {
        for (int64_t j = 0; j < n && rc == 0; j++) {
            gguf_wval *c = copy_array(gguf_arr_get_arr(v, j));
            rc = c ? gguf_wval_arr_push_arr(a, c) : -1;
        }
    } else if (n > 0) {
        const void *d = gguf_arr_data(v);
        rc = d ? gguf_wval_arr_push_data(a, d, (size_t)n) : -1;
    }
    if (rc != 0) {
        gguf_wval_free(a);
        return nullptr;
    }
    return a;
}

gguf_wval *copy_value(const gguf_value *v) {
    const gguf_type t = gguf_val_type(v);
    if (t == GGUF_TYPE_ARRAY) return copy_array(v);
    if (t == GGUF_TYPE_STRING) {
        size_t len = 0;
        const char *s = gguf_val_get_str(v, &len);
        return s ? gguf_wval_str(s, len) : nullptr;
    }
    // Scalars: read through the typed getter into a buffer of the right width.
    unsigned char buf[8] = {0};
    bool ok = false;
    switch (t) {
        case GGUF_TYPE_UINT8: ok = gguf_val_get_u8(v, (uint8_t *)buf); break;
        case GGUF_TYPE_INT8: ok = gguf_val_get_i8(v, (int8_t *)buf); break;
        case GGUF_TYPE_UINT16: ok = gguf_val_get_u16(v, (uint16_t *)buf); break;
        case GGUF_TYPE_INT16: ok = gguf_val_get_i16(v, (int16_t *)buf); break;
        case GGUF_TYPE_UINT32: ok = gguf_val_get_u32(v, (uint32_t *)buf); break;
        case GGUF_TYPE_INT32: ok = gguf_val_get_i32(v, (int32_t *)buf); break;
        case GGUF_TYPE_FLOAT32: ok = gguf_val_get_f32(v, (float *)buf); break;
        case GGUF_TYPE_BOOL: {
            bool b = false;
            ok = gguf_val_get_bool(v, &b);
            buf[0] = b ? 1 : 0;
            break;
        }
        case GGUF_TYPE_UINT64: ok = gguf_val_get_u64(v, (uint64_t *)buf); break;
        case GGUF_TYPE_INT64: ok = gguf_val_get_i64(v, (int64_t *)buf); break;
        case GGUF_TYPE_FLOAT64: ok = gguf_val_get_f64(v, (double *)buf); break;
        default: break;
    }
    return ok ? gguf_wval_scalar(t, buf) : nullptr;
}

// ---------------------------------------------------------------- conversion

// Runs fn(r0, r1) over [0, nrows) in chunks on up to n_threads threads.
template <class F>
void parallel_rows(int64_t nrows, int64_t row_elems, int n_threads, F fn) {
    // Small tensors are not worth a thread start.
    const int64_t min_elems = 1 << 16;
    int nt = (int)std::min<int64_t>(n_threads, std::max<int64_t>(1, nrows * row_elems / min_elems));
    nt = std::max(1, std::min<int>(nt, (int)std::min<int64_t>(nrows, 1 << 20)));
    const int64_t chunk = std::max<int64_t>(1, nrows / ((int64_t)nt * 8));
    std::atomic<int64_t> next{0};
    auto work = [&](int) {
        for (;;) {
            const int64_t r0 = next.fetch_add(chunk);
            if (r0 >= nrows) break;
            fn(r0, std::min(nrows, r0 + chunk));
        }
    };
    std::vector<std::thread> th;
    try {
        for (int i = 1; i < nt; i++) th.emplace_back(work, i);
    } catch (const std::system_error &) {  // a thread did not start: those that did share the work
    }
    work(0);
    for (auto &t : th) t.join();
}

// Converts nrows rows of n elements from src (type st) into dst (type dt).
void convert_rows(const void *src, ggml_type st, void *dst, ggml_type dt, int64_t nrows, int64_t n, int n_threads) {
    const ggml_type_traits *ts = ggml_get_type_traits(st);
    const size_t src_row = ggml_row_size(st, n), dst_row = ggml_row_size(dt, n);
    parallel_rows(nrows, n, n_threads, [&](int64_t r0, int64_t r1) {
        std::vector<float> tmp;  // one buffer per chunk, not per row
        const float *f;
        if (st == GGML_TYPE_F32) {
            f = (const float *)((const char *)src + r0 * src_row);
        } else {
            tmp.resize((size_t)((r1 - r0) * n));
            for (int64_t r = r0; r < r1; r++)
                ts->to_float((const char *)src + r * src_row, tmp.data() + (r - r0) * n, n);
            f = tmp.data();
        }
        char *out = (char *)dst + r0 * dst_row;
        if (dt == GGML_TYPE_F32)
            memcpy(out, f, sizeof(float) * (size_t)((r1 - r0) * n));
        else
            ggml_quantize_chunk(dt, f, out, r1 - r0, n);
    });
}

struct options {
    std::string in, out, type;
    int n_threads = 0;
    bool pure = false;
};

void usage(FILE *f, const char *argv0) {
    fprintf(f,
            "usage: %s IN.gguf OUT.gguf TYPE [--threads N] [--pure]\n"
            "\n"
            "Rewrite a GGUF model with its weight matrices in TYPE (metadata, tokenizer and\n"
            "other tensors are carried over). TYPE (case-insensitive):\n%s"
            "\n"
            "options:\n"
            "  -t, --threads N  worker threads (default: number of cores)\n"
            "      --pure       every weight matrix in TYPE exactly (no q6_K output, no mixes)\n"
            "  -h, --help       show this help\n",
            argv0, recipe_list().c_str());
}

struct fail {
    std::string msg;
    int code;
};

options parse_args(int argc, char **argv) {
    options o;
    std::vector<std::string> pos;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            usage(stdout, argv[0]);
            exit(0);
        } else if (a == "-t" || a == "--threads" || a.rfind("--threads=", 0) == 0) {
            std::string v;
            if (a.rfind("--threads=", 0) == 0) {
                v = a.substr(10);
            } else {
                if (i + 1 >= argc) throw fail{a + " needs a value", 2};
                v = argv[++i];
            }
            char *end = nullptr;
            errno = 0;
            const long n = strtol(v.c_str(), &end, 10);
            if (v.empty() || *end || errno || n < 1 || n > 4096)
                throw fail{"--threads: expected a positive integer, got '" + v + "'", 2};
            o.n_threads = (int)n;
        } else if (a == "--pure") {
            o.pure = true;
        } else if (a.size() > 1 && a[0] == '-') {
            throw fail{"unknown option '" + a + "'", 2};
        } else {
            pos.push_back(a);
        }
    }
    if (pos.size() != 3)
        throw fail{"expected IN.gguf OUT.gguf TYPE, got " + std::to_string(pos.size()) + " positional argument(s)", 2};
    o.in = pos[0];
    o.out = pos[1];
    o.type = pos[2];
    o.n_threads = pinfer::pick_n_threads(o.n_threads, "pinfer-quantize");
    return o;
}

std::string shape_str(const int64_t *ne, int n_dims) {
    std::string s = "[";
    for (int d = 0; d < n_dims; d++) s += (d ? ", " : "") + std::to_string(ne[d]);
    return s + "]";
}

struct gguf_deleter {
    void operator()(gguf_context *c) const { gguf_free(c); }
};
struct writer_deleter {
    void operator()(gguf_writer *w) const { gguf_writer_free(w); }
};

int run(const options &o) {
    const recipe *rc = find_recipe(o.type.c_str());
    if (!rc) throw fail{"unknown type '" + o.type + "'; valid types:\n" + recipe_list(), 2};

    // Refuse to overwrite the input (also through another name or a link),
    // and anything at the output path that is not a regular file: before the work.
    struct stat si, so;
    if (stat(o.in.c_str(), &si) != 0) throw fail{"cannot read '" + o.in + "': " + strerror(errno), 1};
    if (stat(o.out.c_str(), &so) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino)
        throw fail{"the output '" + o.out + "' is the input file; choose another output path", 1};
    char perr[512];
    if (gguf_check_output_path(o.out.c_str(), perr, sizeof perr) != 0) throw fail{perr, 1};

    char err[512] = {0};
    std::unique_ptr<gguf_context, gguf_deleter> in(gguf_open(o.in.c_str(), err, sizeof err));
    if (!in) throw fail{"cannot read '" + o.in + "': " + err, 1};
    gguf_context *g = in.get();

    const int64_t n_tensors = gguf_get_n_tensors(g);
    int n_layer = 0;
    bool has_output = false, has_token_embd = false;
    bool any_quantized_input = false;
    for (int64_t i = 0; i < n_tensors; i++) {
        int il;
        const role r = classify(gguf_get_tensor_name(g, i), &il);
        n_layer = std::max(n_layer, il + 1);
        has_output |= r == ROLE_OUTPUT;
        has_token_embd |= r == ROLE_TOKEN_EMBD;
        const ggml_type_traits *tr = ggml_get_type_traits((ggml_type)gguf_get_tensor_type(g, i));
        any_quantized_input |= tr && tr->is_quantized;
    }
    const bool tied = has_token_embd && !has_output;

    std::unique_ptr<gguf_writer, writer_deleter> w(gguf_writer_new());
    if (!w) throw fail{"out of memory", 1};
    for (int64_t i = 0; i < gguf_get_n_kv(g); i++) {
        const char *key = gguf_get_key(g, i);
        gguf_wval *v = copy_value(gguf_get_val(g, i));
        if (!v) throw fail{std::string("cannot copy metadata key '") + key + "'", 1};
        if (gguf_writer_set_val(w.get(), key, v) != 0)
            throw fail{std::string("metadata key '") + key + "': " + gguf_writer_error(w.get()), 1};
    }

    printf("pinfer-quantize: %s -> %s as %s%s, %d thread(s), %lld tensors, %d layers\n", o.in.c_str(),
           o.out.c_str(), rc->name, o.pure ? " (pure)" : "", o.n_threads, (long long)n_tensors, n_layer);
    if (any_quantized_input && rc->base != GGML_TYPE_F32)
        printf("note: the input holds quantized tensors; converting them again adds rounding error\n");

    std::vector<std::unique_ptr<uint8_t[]>> buffers;  // converted data, alive until written
    size_t bytes_in = 0, bytes_out = 0;
    int n_converted = 0, n_copied = 0, n_fallback = 0;
    bool any_quantized_output = false;
    const auto t0 = std::chrono::steady_clock::now();

    for (int64_t i = 0; i < n_tensors; i++) {
        const std::string name = gguf_get_tensor_name(g, i);
        const ggml_type st = (ggml_type)gguf_get_tensor_type(g, i);
        const int n_dims = gguf_get_tensor_n_dims(g, i);
        int64_t ne[GGUF_MAX_DIMS];
        gguf_get_tensor_ne(g, i, ne);
        const ggml_type_traits *ts = ggml_get_type_traits(st);
        const size_t src_bytes = gguf_get_tensor_size(g, i);
        const void *src = gguf_get_tensor_data(g, i);
        bytes_in += src_bytes;

        int il;
        const role r = classify(name, &il);
        ggml_type dt = st;
        std::string note;
        const bool floatable = ts && ts->to_float;
        if (r != ROLE_OTHER && n_dims >= 2 && floatable) {
            const ggml_type want = pick_type(*rc, o.pure, r, il, n_layer, tied);
            dt = fit_type(want, ne[0]);
            if (dt != want) {
                n_fallback++;
                note = "  (fallback: row length " + std::to_string(ne[0]) + " is not a multiple of " +
                       std::to_string(ggml_blck_size(want)) + " for " + ggml_type_name(want) + ")";
            }
        } else if (n_dims == 1 && floatable && st != GGML_TYPE_F32 &&
                   (ts->is_quantized || rc->base == GGML_TYPE_F32)) {
            dt = GGML_TYPE_F32;
        }
        if (dt == st && note.empty()) note = "  (copied)";

        const void *data = src;
        size_t nbytes = src_bytes;
        if (dt != st) {
            nbytes = ggml_row_size(dt, ne[0]) * (size_t)(ne[1] * ne[2] * ne[3]);
            uint8_t *buf = new (std::nothrow) uint8_t[nbytes ? nbytes : 1];
            if (!buf) throw fail{"out of memory converting '" + name + "'", 1};
            buffers.emplace_back(buf);
            convert_rows(src, st, buf, dt, ne[1] * ne[2] * ne[3], ne[0], o.n_threads);
            data = buf;
            n_converted++;
        } else {
            n_copied++;
        }
        any_quantized_output |= ggml_get_type_traits(dt) && ggml_get_type_traits(dt)->is_quantized;
        bytes_out += nbytes;
        if (gguf_writer_add_tensor(w.get(), name.c_str(), dt, n_dims, ne, data, nbytes) != 0)
            throw fail{"tensor '" + name + "': " + gguf_writer_error(w.get()), 1};
        printf("[%4lld/%4lld] %-34s %-22s %5s -> %-5s %9.3f MiB -> %9.3f MiB%s\n", (long long)(i + 1),
               (long long)n_tensors, name.c_str(), shape_str(ne, n_dims).c_str(), ts ? ts->name : "?",
               ggml_type_name(dt), src_bytes / 1048576.0, nbytes / 1048576.0, note.c_str());
        fflush(stdout);
    }

    // A pure file is labelled with its single type, a mix with its preset.
    const recipe *label = o.pure ? find_recipe(ggml_type_name(rc->base)) : rc;
    gguf_writer_set_u32(w.get(), "general.file_type", (uint32_t)label->file_type);
    if (any_quantized_output) gguf_writer_set_u32(w.get(), "general.quantization_version", 2);

    if (gguf_writer_write(w.get(), o.out.c_str()) != 0)
        throw fail{"cannot write '" + o.out + "': " + gguf_writer_error(w.get()), 1};
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("converted %d tensor(s), kept %d, %d fell back to another type\n", n_converted, n_copied, n_fallback);
    printf("tensor data: %.2f MiB -> %.2f MiB (%.2fx) in %.2f s; wrote %s\n", bytes_in / 1048576.0,
           bytes_out / 1048576.0, bytes_out ? (double)bytes_in / bytes_out : 0.0, secs, o.out.c_str());
    return 0;
}

}  // namespace

// A killed run leaves no temporary file. The signals are blocked in every
// thread (workers inherit the mask) and one thread waits for them: it removes
// the file under the writer's lock (a handler could not take it, and would
// miss a file created a moment before it was registered), then dies of the
// signal as the default action would.
static void die_cleanly_on_signals() {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::thread([set] {
        int sig = 0;
        if (sigwait(&set, &sig) != 0) return;
        gguf_writer_remove_partial();
        signal(sig, SIG_DFL);
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, sig);
        pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
        raise(sig);
    }).detach();
}

int main(int argc, char **argv) {
    die_cleanly_on_signals();
    try {
        return run(parse_args(argc, argv));
    } catch (const fail &f) {
        fprintf(stderr, "pinfer-quantize: error: %s\n", f.msg.c_str());
        if (f.code == 2 && f.msg.find("valid types") == std::string::npos)
            fprintf(stderr, "usage: %s IN.gguf OUT.gguf TYPE [--threads N] [--pure] (--help for more)\n", argv[0]);
        return f.code;
    } catch (const std::exception &e) {
        fprintf(stderr, "pinfer-quantize: error: %s\n", e.what());
        return 1;
    }
}
