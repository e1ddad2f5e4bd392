// GGUF v3 reader and writer. See gguf.h for the contract.
//
// Layout (little-endian): magic "GGUF", u32 version, u64 n_tensors, u64 n_kv,
// n_kv x {string key, u32 type, value}, n_tensors x {string name, u32 n_dims,
// n_dims x i64 ne, u32 ggml type, u64 offset}, padding to the alignment, then
// the data section. A string is u64 length + bytes (no NUL); an array is
// u32 element type + u64 count + elements.
#include "gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

constexpr uint32_t kMaxTensorName = GGML_MAX_NAME - 1;  // names must fit ggml_tensor::name
// Smallest encodings, used to bound counts by the bytes left before allocating.
constexpr size_t kMinKvBytes = 8 + 4 + 1;          // key length, type, 1-byte value
constexpr size_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // name length, n_dims, type, offset
constexpr size_t kMinArrayBytes = 4 + 8;           // element type, count

const char *const kTypeNames[GGUF_TYPE_COUNT] = {"u8",   "i8",  "u16",    "i16",   "u32", "i32", "f32",
                                                 "bool", "string", "array", "u64", "i64", "f64"};
const size_t kTypeSizes[GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

bool type_ok(int t) { return t >= 0 && t < GGUF_TYPE_COUNT; }

std::string fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char *f, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    return buf;
}

void set_err(char *err, size_t errlen, const std::string &msg) {
    if (!err || errlen == 0) return;
    snprintf(err, errlen, "%s", msg.c_str());
}

// Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF.
bool utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t len;
        uint32_t cp;
        if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
        else return false;
        if (n - i < len) return false;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)) return false;
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += len;
    }
    return true;
}

// Checks shared by reader and writer for keys and tensor names.
const char *name_problem(const uint8_t *s, size_t n) {
    if (n == 0) return "is empty";
    if (memchr(s, 0, n)) return "contains a NUL byte";
    if (!utf8_valid(s, n)) return "is not valid UTF-8";
    return nullptr;
}

// Bytes of a tensor of this type and shape; false (with a reason) if invalid.
bool tensor_nbytes(int type, int n_dims, const int64_t *ne, size_t *out, std::string *why) {
    if (!ggml_type_is_valid(type)) {
        *why = fmt("unknown tensor type %d", type);
        return false;
    }
    if (n_dims < 0 || n_dims > GGUF_MAX_DIMS) {
        *why = fmt("n_dims %d outside [0, %d]", n_dims, GGUF_MAX_DIMS);
        return false;
    }
    const ggml_type_traits *tr = ggml_get_type_traits((ggml_type)type);
    int64_t nel = 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] < 0) {
            *why = fmt("negative dimension ne[%d] = %lld", d, (long long)ne[d]);
            return false;
        }
        if (__builtin_mul_overflow(nel, ne[d], &nel)) {
            *why = "element count overflows int64";
            return false;
        }
    }
    const int64_t ne0 = n_dims > 0 ? ne[0] : 1;
    if (ne0 % tr->blck_size != 0) {
        *why = fmt("ne[0] = %lld is not a multiple of the %s block size %lld", (long long)ne0, tr->name,
                   (long long)tr->blck_size);
        return false;
    }
    // nel is a multiple of the block size because ne0 is.
    size_t bytes;
    if (__builtin_mul_overflow((size_t)(nel / tr->blck_size), tr->type_size, &bytes)) {
        *why = "byte size overflows";
        return false;
    }
    *out = bytes;
    return true;
}

}  // namespace

// ================================================================ reader

struct gguf_value {
    gguf_type type = GGUF_TYPE_INVALID;
    uint8_t raw[8] = {};  // scalar, little-endian
    std::string str;
    // arrays
    gguf_type elem = GGUF_TYPE_INVALID;
    uint64_t n = 0;
    const uint8_t *data = nullptr;  // fixed-size elements, points into the file
    std::vector<std::string> strs;
    std::vector<gguf_value> arrs;
};

struct gguf_tensor_info {
    std::string name;
    int type = 0;
    int n_dims = 0;
    int64_t ne[GGUF_MAX_DIMS] = {1, 1, 1, 1};
    uint64_t offset = 0;
    size_t size = 0;
};

struct gguf_context {
    // Source bytes: either an mmap we own or a borrowed buffer.
    const uint8_t *base = nullptr;
    size_t size = 0;
    void *map = nullptr;
    size_t map_len = 0;

    uint32_t version = 0;
    bool powerinfer = false;  // magic "PWRI": PowerInfer's marker, same layout as GGUF
    size_t alignment = GGUF_DEFAULT_ALIGNMENT;
    size_t data_offset = 0;
    std::vector<std::string> keys;
    std::vector<gguf_value> vals;
    std::unordered_map<std::string, int64_t> key_index;
    std::vector<gguf_tensor_info> tensors;
    std::unordered_map<std::string, int64_t> tensor_index;

    ~gguf_context() {
        if (map) munmap(map, map_len);
    }
};

namespace {

struct parser {
    const uint8_t *p;
    size_t size;
    size_t pos = 0;
    std::string err;

    parser(const uint8_t *p_, size_t size_) : p(p_), size(size_) {}

    size_t left() const { return size - pos; }

    bool fail(std::string msg) {
        if (err.empty()) err = std::move(msg);
        return false;
    }
    bool need(size_t n, const char *what) {
        if (left() < n)
            return fail(fmt("truncated: %s needs %zu bytes at offset %zu, only %zu left", what, n, pos, left()));
        return true;
    }
    template <typename T>
    bool rd(T *out, const char *what) {
        if (!need(sizeof(T), what)) return false;
        memcpy(out, p + pos, sizeof(T));
        pos += sizeof(T);
        return true;
    }
    // u64 length + bytes; the length is checked against what remains first.
    bool rd_str(std::string *out, const char *what) {
        uint64_t len;
        size_t at = pos;
        if (!rd(&len, what)) return false;
        if (len > left())
            return fail(fmt("truncated: %s at offset %zu has length %llu but only %zu bytes left", what, at,
                            (unsigned long long)len, left()));
        out->assign((const char *)p + pos, (size_t)len);
        pos += (size_t)len;
        return true;
    }

    bool value(gguf_value *v, gguf_type type, int depth, const std::string &key) {
        v->type = type;
        if (type == GGUF_TYPE_STRING) return rd_str(&v->str, "string value");
        if (type != GGUF_TYPE_ARRAY) {
            size_t sz = kTypeSizes[type];
            if (!need(sz, "scalar value")) return false;
            memcpy(v->raw, p + pos, sz);
            if (type == GGUF_TYPE_BOOL && v->raw[0] > 1)
                return fail(fmt("invalid bool value %u for key '%s' at offset %zu", v->raw[0], key.c_str(), pos));
            pos += sz;
            return true;
        }
        if (depth >= GGUF_MAX_ARRAY_DEPTH)
            return fail(fmt("arrays nested deeper than %d in key '%s'", GGUF_MAX_ARRAY_DEPTH, key.c_str()));
        uint32_t et;
        if (!rd(&et, "array element type")) return false;
        if (!type_ok((int)et))
            return fail(fmt("unknown array element type %u in key '%s'", et, key.c_str()));
        v->elem = (gguf_type)et;
        uint64_t n;
        if (!rd(&n, "array length")) return false;
        size_t min_elem = et == GGUF_TYPE_STRING ? 8 : et == GGUF_TYPE_ARRAY ? kMinArrayBytes : kTypeSizes[et];
        if (n > left() / min_elem)
            return fail(fmt("truncated: array of %llu %s in key '%s' needs at least %llu bytes, only %zu left",
                            (unsigned long long)n, kTypeNames[et], key.c_str(),
                            (unsigned long long)(n > UINT64_MAX / min_elem ? UINT64_MAX : n * min_elem), left()));
        v->n = n;
        if (et == GGUF_TYPE_STRING) {
            v->strs.resize((size_t)n);
            for (uint64_t j = 0; j < n; j++)
                if (!rd_str(&v->strs[j], "string array element")) return false;
        } else if (et == GGUF_TYPE_ARRAY) {
            v->arrs.resize((size_t)n);
            for (uint64_t j = 0; j < n; j++)
                if (!value(&v->arrs[j], GGUF_TYPE_ARRAY, depth + 1, key)) return false;
        } else {
            v->data = p + pos;
            if (et == GGUF_TYPE_BOOL)
                for (uint64_t j = 0; j < n; j++)
                    if (v->data[j] > 1)
                        return fail(fmt("invalid bool value %u in array '%s' at offset %zu", v->data[j],
                                        key.c_str(), pos + (size_t)j));
            pos += (size_t)(n * min_elem);
        }
        return true;
    }

    bool parse(gguf_context *ctx) {
        char magic[4];
        if (!rd(&magic, "magic")) return false;
        ctx->powerinfer = memcmp(magic, GGUF_POWERINFER_MAGIC, 4) == 0;
        if (memcmp(magic, GGUF_MAGIC, 4) != 0 && !ctx->powerinfer) return fail("bad magic: not a GGUF file");
        uint32_t ver;
        if (!rd(&ver, "version")) return false;
        if (ver != 2 && ver != 3) {
            if (__builtin_bswap32(ver) >= 1 && __builtin_bswap32(ver) <= 3)
                return fail("unsupported version: big-endian GGUF files are not supported");
            if (ver == 1) return fail("unsupported version 1 (32-bit counts); re-convert the model");
            return fail(fmt("unsupported version %u (supported: 2, 3)", ver));
        }
        ctx->version = ver;
        uint64_t n_tensors, n_kv;
        if (!rd(&n_tensors, "tensor count") || !rd(&n_kv, "kv count")) return false;
        if (n_kv > left() / kMinKvBytes)
            return fail(fmt("truncated: kv count %llu cannot fit in the %zu bytes left", (unsigned long long)n_kv,
                            left()));
        if (n_tensors > left() / kMinTensorInfoBytes)
            return fail(fmt("truncated: tensor count %llu cannot fit in the %zu bytes left",
                            (unsigned long long)n_tensors, left()));

        ctx->keys.reserve((size_t)n_kv);
        ctx->vals.reserve((size_t)n_kv);
        for (uint64_t i = 0; i < n_kv; i++) {
            std::string key;
            size_t at = pos;
            if (!rd_str(&key, "key")) return false;
            if (const char *why = name_problem((const uint8_t *)key.data(), key.size()))
                return fail(fmt("key %llu at offset %zu %s", (unsigned long long)i, at, why));
            if (!ctx->key_index.emplace(key, (int64_t)i).second)
                return fail(fmt("duplicate key '%s'", key.c_str()));
            uint32_t t;
            if (!rd(&t, "value type")) return false;
            if (!type_ok((int)t)) return fail(fmt("unknown value type %u for key '%s'", t, key.c_str()));
            ctx->vals.emplace_back();
            if (!value(&ctx->vals.back(), (gguf_type)t, 0, key)) return false;
            ctx->keys.push_back(std::move(key));
        }

        auto ai = ctx->key_index.find(GGUF_KEY_GENERAL_ALIGNMENT);
        if (ai != ctx->key_index.end()) {
            const gguf_value &v = ctx->vals[ai->second];
            if (v.type != GGUF_TYPE_UINT32)
                return fail(fmt("general.alignment must be u32, got %s", kTypeNames[v.type]));
            uint32_t a;
            memcpy(&a, v.raw, 4);
            if (a == 0 || (a & (a - 1)) != 0)
                return fail(fmt("general.alignment %u is not a nonzero power of two", a));
            ctx->alignment = a;
        }
        const size_t align = ctx->alignment;

        ctx->tensors.reserve((size_t)n_tensors);
        for (uint64_t i = 0; i < n_tensors; i++) {
            gguf_tensor_info ti;
            size_t at = pos;
            if (!rd_str(&ti.name, "tensor name")) return false;
            if (const char *why = name_problem((const uint8_t *)ti.name.data(), ti.name.size()))
                return fail(fmt("tensor name %llu at offset %zu %s", (unsigned long long)i, at, why));
            if (ti.name.size() > kMaxTensorName)
                return fail(fmt("tensor name at offset %zu is %zu bytes, longer than %u", at, ti.name.size(),
                                kMaxTensorName));
            if (!ctx->tensor_index.emplace(ti.name, (int64_t)i).second)
                return fail(fmt("duplicate tensor name '%s'", ti.name.c_str()));
            uint32_t nd;
            if (!rd(&nd, "tensor n_dims")) return false;
            if (nd > GGUF_MAX_DIMS)
                return fail(fmt("tensor '%s' has n_dims %u > %d", ti.name.c_str(), nd, GGUF_MAX_DIMS));
            ti.n_dims = (int)nd;
            for (uint32_t d = 0; d < nd; d++)
                if (!rd(&ti.ne[d], "tensor dimension")) return false;
            uint32_t t;
            if (!rd(&t, "tensor type") || !rd(&ti.offset, "tensor offset")) return false;
            ti.type = (int)t;
            std::string why;
            if (t > INT32_MAX || !tensor_nbytes((int)t, ti.n_dims, ti.ne, &ti.size, &why))
                return fail(fmt("tensor '%s': %s", ti.name.c_str(),
                                t > INT32_MAX ? fmt("unknown tensor type %u", t).c_str() : why.c_str()));
            if (ti.offset % align != 0)
                return fail(fmt("tensor '%s' offset %llu is not a multiple of the alignment %zu", ti.name.c_str(),
                                (unsigned long long)ti.offset, align));
            ctx->tensors.push_back(std::move(ti));
        }

        // Data section: the next aligned offset after the tensor infos.
        size_t data_off;
        if (__builtin_add_overflow(pos, align - 1, &data_off)) return fail("data offset overflows");
        data_off &= ~(align - 1);
        ctx->data_offset = data_off;
        if (!ctx->tensors.empty() && data_off > size)
            return fail(fmt("truncated: data section starts at %zu beyond the end of the file (%zu bytes)",
                            data_off, size));
        const size_t data_len = data_off > size ? 0 : size - data_off;
        for (const gguf_tensor_info &ti : ctx->tensors) {
            if (ti.offset > data_len || ti.size > data_len - ti.offset)
                return fail(fmt("truncated: tensor '%s' data [%llu, +%zu) lies outside the data section (%zu bytes)",
                                ti.name.c_str(), (unsigned long long)ti.offset, ti.size, data_len));
        }
        // Overlap: sort by offset and compare neighbours (all ends are in bounds now).
        std::vector<size_t> order(ctx->tensors.size());
        for (size_t i = 0; i < order.size(); i++) order[i] = i;
        std::sort(order.begin(), order.end(),
                  [&](size_t a, size_t b) { return ctx->tensors[a].offset < ctx->tensors[b].offset; });
        for (size_t k = 1; k < order.size(); k++) {
            const gguf_tensor_info &a = ctx->tensors[order[k - 1]], &b = ctx->tensors[order[k]];
            if (a.size > 0 && b.size > 0 && a.offset + a.size > b.offset)
                return fail(fmt("tensors '%s' and '%s' overlap", a.name.c_str(), b.name.c_str()));
        }
        return true;
    }
};

gguf_context *parse_into(gguf_context *ctx, char *err, size_t errlen) {
    parser ps(ctx->base, ctx->size);
    bool ok;
    try {
        ok = ps.parse(ctx);
    } catch (const std::bad_alloc &) {
        ok = ps.fail("out of memory while parsing");
    }
    if (!ok) {
        set_err(err, errlen, "gguf: " + ps.err);
        delete ctx;
        return nullptr;
    }
    return ctx;
}

const gguf_value *arr(const gguf_value *v) { return v && v->type == GGUF_TYPE_ARRAY ? v : nullptr; }

template <typename T>
bool get_scalar(const gguf_value *v, gguf_type t, T *out) {
    if (!v || v->type != t || !out) return false;
    memcpy(out, v->raw, sizeof(T));
    return true;
}

}  // namespace

extern "C" {

const char *gguf_type_name(gguf_type type) { return type_ok(type) ? kTypeNames[type] : "invalid"; }
size_t gguf_type_size(gguf_type type) { return type_ok(type) ? kTypeSizes[type] : 0; }

gguf_context *gguf_parse_buffer(const void *data, size_t size, char *err, size_t errlen) {
    if (!data && size > 0) {
        set_err(err, errlen, "gguf: NULL buffer");
        return nullptr;
    }
    gguf_context *ctx = new (std::nothrow) gguf_context;
    if (!ctx) {
        set_err(err, errlen, "gguf: out of memory");
        return nullptr;
    }
    ctx->base = (const uint8_t *)data;
    ctx->size = size;
    return parse_into(ctx, err, errlen);
}

gguf_context *gguf_open(const char *path, char *err, size_t errlen) {
    if (!path) {
        set_err(err, errlen, "gguf: NULL path");
        return nullptr;
    }
    // O_NONBLOCK: opening a FIFO must not hang; fstat then rejects it.
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        set_err(err, errlen, fmt("gguf: cannot open %s: %s", path, strerror(errno)));
        return nullptr;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        set_err(err, errlen, fmt("gguf: %s is not a regular file", path));
        close(fd);
        return nullptr;
    }
    const size_t size = (size_t)st.st_size;
    void *map = nullptr;
    if (size > 0) {
        map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            set_err(err, errlen, fmt("gguf: cannot mmap %s: %s", path, strerror(errno)));
            close(fd);
            return nullptr;
        }
    }
    close(fd);  // the mapping stays valid
    gguf_context *ctx = new (std::nothrow) gguf_context;
    if (!ctx) {
        if (map) munmap(map, size);
        set_err(err, errlen, "gguf: out of memory");
        return nullptr;
    }
    ctx->map = map;
    ctx->map_len = size;
    ctx->base = (const uint8_t *)map;
    ctx->size = size;
    gguf_context *r = parse_into(ctx, err, errlen);
    if (!r && err && errlen > 0) {
        std::string m = std::string(err) + " (" + path + ")";
        set_err(err, errlen, m);
    }
    return r;
}

void gguf_free(gguf_context *ctx) { delete ctx; }

uint32_t gguf_get_version(const gguf_context *ctx) { return ctx ? ctx->version : 0; }
bool gguf_is_powerinfer(const gguf_context *ctx) { return ctx && ctx->powerinfer; }
size_t gguf_get_alignment(const gguf_context *ctx) { return ctx ? ctx->alignment : 0; }
size_t gguf_get_data_offset(const gguf_context *ctx) { return ctx ? ctx->data_offset : 0; }
size_t gguf_get_file_size(const gguf_context *ctx) { return ctx ? ctx->size : 0; }
const void *gguf_get_file_data(const gguf_context *ctx) { return ctx ? ctx->base : nullptr; }

int64_t gguf_get_n_kv(const gguf_context *ctx) { return ctx ? (int64_t)ctx->keys.size() : 0; }

int64_t gguf_find_key(const gguf_context *ctx, const char *key) {
    if (!ctx || !key) return -1;
    auto it = ctx->key_index.find(key);
    return it == ctx->key_index.end() ? -1 : it->second;
}

static bool kv_ok(const gguf_context *ctx, int64_t i) { return ctx && i >= 0 && (size_t)i < ctx->keys.size(); }

const char *gguf_get_key(const gguf_context *ctx, int64_t i) { return kv_ok(ctx, i) ? ctx->keys[i].c_str() : nullptr; }
gguf_type gguf_get_kv_type(const gguf_context *ctx, int64_t i) {
    return kv_ok(ctx, i) ? ctx->vals[i].type : GGUF_TYPE_INVALID;
}
const gguf_value *gguf_get_val(const gguf_context *ctx, int64_t i) { return kv_ok(ctx, i) ? &ctx->vals[i] : nullptr; }

gguf_type gguf_val_type(const gguf_value *v) { return v ? v->type : GGUF_TYPE_INVALID; }
bool gguf_val_get_u8(const gguf_value *v, uint8_t *o) { return get_scalar(v, GGUF_TYPE_UINT8, o); }
bool gguf_val_get_i8(const gguf_value *v, int8_t *o) { return get_scalar(v, GGUF_TYPE_INT8, o); }
bool gguf_val_get_u16(const gguf_value *v, uint16_t *o) { return get_scalar(v, GGUF_TYPE_UINT16, o); }
bool gguf_val_get_i16(const gguf_value *v, int16_t *o) { return get_scalar(v, GGUF_TYPE_INT16, o); }
bool gguf_val_get_u32(const gguf_value *v, uint32_t *o) { return get_scalar(v, GGUF_TYPE_UINT32, o); }
bool gguf_val_get_i32(const gguf_value *v, int32_t *o) { return get_scalar(v, GGUF_TYPE_INT32, o); }
bool gguf_val_get_f32(const gguf_value *v, float *o) { return get_scalar(v, GGUF_TYPE_FLOAT32, o); }
bool gguf_val_get_u64(const gguf_value *v, uint64_t *o) { return get_scalar(v, GGUF_TYPE_UINT64, o); }
bool gguf_val_get_i64(const gguf_value *v, int64_t *o) { return get_scalar(v, GGUF_TYPE_INT64, o); }
bool gguf_val_get_f64(const gguf_value *v, double *o) { return get_scalar(v, GGUF_TYPE_FLOAT64, o); }
bool gguf_val_get_bool(const gguf_value *v, bool *o) {
    if (!v || v->type != GGUF_TYPE_BOOL || !o) return false;
    *o = v->raw[0] != 0;
    return true;
}
const char *gguf_val_get_str(const gguf_value *v, size_t *len) {
    if (!v || v->type != GGUF_TYPE_STRING) return nullptr;
    if (len) *len = v->str.size();
    return v->str.c_str();
}

gguf_type gguf_arr_type(const gguf_value *v) { return arr(v) ? v->elem : GGUF_TYPE_INVALID; }
int64_t gguf_arr_len(const gguf_value *v) { return arr(v) ? (int64_t)v->n : -1; }
const void *gguf_arr_data(const gguf_value *v) { return arr(v) ? v->data : nullptr; }

static bool elem_ok(const gguf_value *v, int64_t j) { return arr(v) && j >= 0 && (uint64_t)j < v->n; }

bool gguf_arr_get_elem(const gguf_value *v, int64_t j, void *out) {
    if (!elem_ok(v, j) || !v->data || !out) return false;
    size_t sz = kTypeSizes[v->elem];
    memcpy(out, v->data + (size_t)j * sz, sz);
    return true;
}
const char *gguf_arr_get_str(const gguf_value *v, int64_t j, size_t *len) {
    if (!elem_ok(v, j) || v->elem != GGUF_TYPE_STRING) return nullptr;
    if (len) *len = v->strs[j].size();
    return v->strs[j].c_str();
}
const gguf_value *gguf_arr_get_arr(const gguf_value *v, int64_t j) {
    if (!elem_ok(v, j) || v->elem != GGUF_TYPE_ARRAY) return nullptr;
    return &v->arrs[j];
}

static const gguf_tensor_info *tinfo(const gguf_context *ctx, int64_t i) {
    return ctx && i >= 0 && (size_t)i < ctx->tensors.size() ? &ctx->tensors[i] : nullptr;
}

int64_t gguf_get_n_tensors(const gguf_context *ctx) { return ctx ? (int64_t)ctx->tensors.size() : 0; }
int64_t gguf_find_tensor(const gguf_context *ctx, const char *name) {
    if (!ctx || !name) return -1;
    auto it = ctx->tensor_index.find(name);
    return it == ctx->tensor_index.end() ? -1 : it->second;
}
const char *gguf_get_tensor_name(const gguf_context *ctx, int64_t i) {
    const gguf_tensor_info *t = tinfo(ctx, i);
    return t ? t->name.c_str() : nullptr;
}
int gguf_get_tensor_type(const gguf_context *ctx, int64_t i) {
    const gguf_tensor_info *t = tinfo(ctx, i);
    return t ? t->type : -1;
}
int gguf_get_tensor_n_dims(const gguf_context *ctx, int64_t i) {
    const gguf_tensor_info *t = tinfo(ctx, i);
    return t ? t->n_dims : -1;
}
bool gguf_get_tensor_ne(const gguf_context *ctx, int64_t i, int64_t ne[GGUF_MAX_DIMS]) {
    const gguf_tensor_info *t = tinfo(ctx, i);
    if (!t || !ne) return false;
    memcpy(ne, t->ne, sizeof t->ne);
    return true;
}
uint64_t gguf_get_tensor_offset(const gguf_context *ctx, int64_t i) {
    const gguf_tensor_info *t = tinfo(ctx, i);
    return t ? t->offset : 0;
}
size_t gguf_get_tensor_size(const gguf_context *ctx, int64_t i) {
    const gguf_tensor_info *t = tinfo(ctx, i);
    return t ? t->size : 0;
}
const void *gguf_get_tensor_data(const gguf_context *ctx, int64_t i) {
    const gguf_tensor_info *t = tinfo(ctx, i);
    // Bounds were checked at parse time; a zero-size tensor may sit at the very end.
    return t ? ctx->base + ctx->data_offset + t->offset : nullptr;
}

}  // extern "C"

// ================================================================ writer

struct gguf_wval {
    gguf_type type = GGUF_TYPE_INVALID;
    uint8_t raw[8] = {};
    std::string str;
    gguf_type elem = GGUF_TYPE_INVALID;
    std::vector<uint8_t> data;  // fixed-size array elements
    std::vector<std::string> strs;
    std::vector<std::unique_ptr<gguf_wval>> arrs;

    size_t count() const {
        if (elem == GGUF_TYPE_STRING) return strs.size();
        if (elem == GGUF_TYPE_ARRAY) return arrs.size();
        return type_ok(elem) && kTypeSizes[elem] ? data.size() / kTypeSizes[elem] : 0;
    }
    int depth() const {
        if (type != GGUF_TYPE_ARRAY) return 0;
        int d = 0;
        for (const auto &a : arrs) d = std::max(d, a->depth());
        return d + 1;
    }
};

struct gguf_wtensor {
    std::string name;
    ggml_type type;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    const void *data;
    size_t size;
    uint64_t offset;
};

struct gguf_writer {
    std::vector<std::string> keys;
    std::vector<std::unique_ptr<gguf_wval>> vals;
    std::unordered_map<std::string, size_t> key_index;
    std::vector<gguf_wtensor> tensors;
    std::unordered_map<std::string, size_t> tensor_index;
    size_t alignment = GGUF_DEFAULT_ALIGNMENT;
    std::string err;

    int fail(std::string m) {
        err = std::move(m);
        return -1;
    }
};

namespace {

// Buffered sequential writer to an fd that remembers the first error.
struct out_file {
    int fd;
    std::vector<uint8_t> buf;
    uint64_t written = 0;
    int errnum = 0;

    explicit out_file(int fd_) : fd(fd_) {}

    void flush() {
        size_t off = 0;
        while (off < buf.size() && !errnum) {
            ssize_t r = ::write(fd, buf.data() + off, buf.size() - off);
            if (r < 0) {
                if (errno == EINTR) continue;
                errnum = errno;
            } else {
                off += (size_t)r;
            }
        }
        buf.clear();
    }
    void put(const void *p, size_t n) {
        written += n;
        if (errnum) return;
        if (n >= (1u << 20)) {  // large tensors bypass the buffer
            flush();
            const uint8_t *q = (const uint8_t *)p;
            while (n > 0 && !errnum) {
                ssize_t r = ::write(fd, q, n);
                if (r < 0) {
                    if (errno == EINTR) continue;
                    errnum = errno;
                } else {
                    q += r;
                    n -= (size_t)r;
                }
            }
            return;
        }
        buf.insert(buf.end(), (const uint8_t *)p, (const uint8_t *)p + n);
        if (buf.size() >= (1u << 20)) flush();
    }
    template <typename T>
    void put(T v) { put(&v, sizeof v); }
    void put_str(const std::string &s) {
        put((uint64_t)s.size());
        put(s.data(), s.size());
    }
    void pad_to(size_t align) {
        static const uint8_t zeros[64] = {};
        while (written % align) put(zeros, std::min<size_t>(sizeof zeros, align - written % align));
    }
};

void write_val(out_file &o, const gguf_wval &v) {
    if (v.type == GGUF_TYPE_STRING) {
        o.put_str(v.str);
    } else if (v.type == GGUF_TYPE_ARRAY) {
        o.put((uint32_t)v.elem);
        o.put((uint64_t)v.count());
        if (v.elem == GGUF_TYPE_STRING) for (const auto &s : v.strs) o.put_str(s);
        else if (v.elem == GGUF_TYPE_ARRAY) for (const auto &a : v.arrs) write_val(o, *a);
        else o.put(v.data.data(), v.data.size());
    } else {
        o.put(v.raw, kTypeSizes[v.type]);
    }
}

}  // namespace

extern "C" {

gguf_writer *gguf_writer_new(void) { return new (std::nothrow) gguf_writer; }
void gguf_writer_free(gguf_writer *w) { delete w; }
const char *gguf_writer_error(const gguf_writer *w) { return w ? w->err.c_str() : "NULL writer"; }

gguf_wval *gguf_wval_scalar(gguf_type type, const void *data) {
    if (!type_ok(type) || type == GGUF_TYPE_STRING || type == GGUF_TYPE_ARRAY || !data) return nullptr;
    if (type == GGUF_TYPE_BOOL && *(const uint8_t *)data > 1) return nullptr;
    gguf_wval *v = new (std::nothrow) gguf_wval;
    if (!v) return nullptr;
    v->type = type;
    memcpy(v->raw, data, kTypeSizes[type]);
    return v;
}

gguf_wval *gguf_wval_str(const char *s, size_t len) {
    if (!s && len) return nullptr;
    gguf_wval *v = new (std::nothrow) gguf_wval;
    if (!v) return nullptr;
    v->type = GGUF_TYPE_STRING;
    v->str.assign(s ? s : "", len);
    return v;
}

gguf_wval *gguf_wval_arr(gguf_type elem_type) {
    if (!type_ok(elem_type)) return nullptr;
    gguf_wval *v = new (std::nothrow) gguf_wval;
    if (!v) return nullptr;
    v->type = GGUF_TYPE_ARRAY;
    v->elem = elem_type;
    return v;
}

int gguf_wval_arr_push_data(gguf_wval *a, const void *data, size_t n) {
    if (!a || a->type != GGUF_TYPE_ARRAY || !kTypeSizes[a->elem] || (!data && n)) return -1;
    size_t bytes = n * kTypeSizes[a->elem];
    if (a->elem == GGUF_TYPE_BOOL)
        for (size_t j = 0; j < n; j++)
            if (((const uint8_t *)data)[j] > 1) return -1;
    a->data.insert(a->data.end(), (const uint8_t *)data, (const uint8_t *)data + bytes);
    return 0;
}

int gguf_wval_arr_push_str(gguf_wval *a, const char *s, size_t len) {
    if (!a || a->type != GGUF_TYPE_ARRAY || a->elem != GGUF_TYPE_STRING || (!s && len)) return -1;
    a->strs.emplace_back(s ? s : "", len);
    return 0;
}

int gguf_wval_arr_push_arr(gguf_wval *a, gguf_wval *child) {
    std::unique_ptr<gguf_wval> c(child);
    if (!a || !c || a->type != GGUF_TYPE_ARRAY || a->elem != GGUF_TYPE_ARRAY || c->type != GGUF_TYPE_ARRAY)
        return -1;
    a->arrs.push_back(std::move(c));
    return 0;
}

void gguf_wval_free(gguf_wval *v) { delete v; }

int gguf_writer_set_val(gguf_writer *w, const char *key, gguf_wval *val) {
    std::unique_ptr<gguf_wval> v(val);
    if (!w) return -1;
    if (!key) return w->fail("NULL key");
    if (!v) return w->fail(fmt("invalid value for key '%s'", key));
    if (const char *why = name_problem((const uint8_t *)key, strlen(key)))
        return w->fail(fmt("key '%s' %s", key, why));
    if (v->depth() > GGUF_MAX_ARRAY_DEPTH)
        return w->fail(fmt("key '%s': arrays nested deeper than %d", key, GGUF_MAX_ARRAY_DEPTH));
    if (strcmp(key, GGUF_KEY_GENERAL_ALIGNMENT) == 0) {
        if (v->type != GGUF_TYPE_UINT32) return w->fail("general.alignment must be u32");
        uint32_t a;
        memcpy(&a, v->raw, 4);
        if (a == 0 || (a & (a - 1)) != 0)
            return w->fail(fmt("general.alignment %u is not a nonzero power of two", a));
        w->alignment = a;
    }
    auto it = w->key_index.find(key);
    if (it != w->key_index.end()) {
        w->vals[it->second] = std::move(v);
    } else {
        w->key_index.emplace(key, w->keys.size());
        w->keys.emplace_back(key);
        w->vals.push_back(std::move(v));
    }
    return 0;
}

#define GGUF_SETTER(suffix, ctype, gtype)                                          \
    int gguf_writer_set_##suffix(gguf_writer *w, const char *key, ctype v) {       \
        return gguf_writer_set_val(w, key, gguf_wval_scalar(gtype, &v));           \
    }
GGUF_SETTER(u8, uint8_t, GGUF_TYPE_UINT8)
GGUF_SETTER(i8, int8_t, GGUF_TYPE_INT8)
GGUF_SETTER(u16, uint16_t, GGUF_TYPE_UINT16)
GGUF_SETTER(i16, int16_t, GGUF_TYPE_INT16)
GGUF_SETTER(u32, uint32_t, GGUF_TYPE_UINT32)
GGUF_SETTER(i32, int32_t, GGUF_TYPE_INT32)
GGUF_SETTER(f32, float, GGUF_TYPE_FLOAT32)
GGUF_SETTER(u64, uint64_t, GGUF_TYPE_UINT64)
GGUF_SETTER(i64, int64_t, GGUF_TYPE_INT64)
GGUF_SETTER(f64, double, GGUF_TYPE_FLOAT64)
#undef GGUF_SETTER

int gguf_writer_set_bool(gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    return gguf_writer_set_val(w, key, gguf_wval_scalar(GGUF_TYPE_BOOL, &b));
}

int gguf_writer_set_str(gguf_writer *w, const char *key, const char *s) {
    return gguf_writer_set_val(w, key, s ? gguf_wval_str(s, strlen(s)) : nullptr);
}

int gguf_writer_set_arr_data(gguf_writer *w, const char *key, gguf_type elem_type, const void *data, size_t n) {
    gguf_wval *a = gguf_wval_arr(elem_type);
    if (a && gguf_wval_arr_push_data(a, data, n) != 0) {
        gguf_wval_free(a);
        a = nullptr;
    }
    return gguf_writer_set_val(w, key, a);
}

int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs, size_t n) {
    gguf_wval *a = gguf_wval_arr(GGUF_TYPE_STRING);
    for (size_t j = 0; a && j < n; j++) {
        if (!strs || !strs[j] || gguf_wval_arr_push_str(a, strs[j], strlen(strs[j])) != 0) {
            gguf_wval_free(a);
            a = nullptr;
        }
    }
    return gguf_writer_set_val(w, key, a);
}

int gguf_writer_add_tensor(gguf_writer *w, const char *name, ggml_type type, int n_dims, const int64_t *ne,
                           const void *data, size_t nbytes) {
    if (!w) return -1;
    if (!name) return w->fail("NULL tensor name");
    size_t nl = strlen(name);
    if (const char *why = name_problem((const uint8_t *)name, nl)) return w->fail(fmt("tensor name %s", why));
    if (nl > kMaxTensorName) return w->fail(fmt("tensor name '%s' longer than %u bytes", name, kMaxTensorName));
    if (w->tensor_index.count(name)) return w->fail(fmt("duplicate tensor name '%s'", name));
    if (n_dims > 0 && !ne) return w->fail("NULL shape");
    gguf_wtensor t{name, type, n_dims, {1, 1, 1, 1}, data, 0, 0};
    if (n_dims >= 0 && n_dims <= GGUF_MAX_DIMS)
        for (int d = 0; d < n_dims; d++) t.ne[d] = ne[d];
    std::string why;
    if (!tensor_nbytes((int)type, n_dims, t.ne, &t.size, &why)) return w->fail(fmt("tensor '%s': %s", name, why.c_str()));
    if (nbytes != t.size)
        return w->fail(fmt("tensor '%s': got %zu bytes of data, type and shape need %zu", name, nbytes, t.size));
    if (!data && nbytes) return w->fail(fmt("tensor '%s': NULL data", name));
    w->tensor_index.emplace(name, w->tensors.size());
    w->tensors.push_back(t);
    return 0;
}

// ---- output paths and the partial file ----

int gguf_check_output_path(const char *path, char *err, size_t errlen) {
    auto fail = [&](const std::string &msg) {
        if (err && errlen) snprintf(err, errlen, "%s", msg.c_str());
        return -1;
    };
    if (!path || !*path) return fail("empty output path");
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return 0;
        return fail(fmt("cannot inspect %s: %s", path, strerror(errno)));
    }
    if (S_ISREG(st.st_mode)) return 0;
    const char *kind = S_ISDIR(st.st_mode) ? "a directory" : S_ISLNK(st.st_mode) ? "a symbolic link"
                       : S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISSOCK(st.st_mode) ? "a socket"
                       : (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) ? "a device" : "not a regular file";
    return fail(fmt("'%s' is %s; refusing to replace it (the output must be a regular file or absent)", path, kind));
}

// The temporary file being written, for gguf_writer_remove_partial. The lock
// makes "the file exists" and "it is registered" one step: a remover running
// while a write creates or renames its file waits for it instead of missing it.
static char g_partial[4096];
static bool g_partial_set = false;
static std::mutex g_partial_mu;

void gguf_writer_remove_partial(void) {
    std::lock_guard<std::mutex> lk(g_partial_mu);
    if (g_partial_set) {
        unlink(g_partial);
        g_partial_set = false;
    }
}

// The permissions of any new file: 0666 less the umask. Read from
// /proc/self/status where it can be (umask() itself would change it for
// every thread for a moment).
static mode_t new_file_mode() {
    mode_t um = 022;
    bool found = false;
    if (FILE *f = fopen("/proc/self/status", "re")) {
        char line[256];
        unsigned v;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "Umask: %o", &v) == 1) {
                um = (mode_t)v;
                found = true;
                break;
            }
        fclose(f);
    }
    if (!found) {
        um = umask(022);
        umask(um);
    }
    return 0666 & ~um;
}

int gguf_writer_write(gguf_writer *w, const char *path) {
    if (!w) return -1;
    if (!path) return w->fail("NULL path");
    char perr[512];
    if (gguf_check_output_path(path, perr, sizeof perr) != 0) return w->fail(perr);
    const size_t align = w->alignment;
    // Offsets: each tensor starts aligned, in insertion order.
    uint64_t off = 0;
    for (gguf_wtensor &t : w->tensors) {
        t.offset = off;
        off += (t.size + align - 1) / align * align;
    }

    std::string tmp = std::string(path) + ".tmp.XXXXXX";
    if (tmp.size() >= sizeof g_partial) return w->fail(fmt("output path too long: %s", path));
    int fd;
    {
        std::lock_guard<std::mutex> lk(g_partial_mu);
        fd = mkstemp(&tmp[0]);
        if (fd < 0) return w->fail(fmt("cannot create %s: %s", tmp.c_str(), strerror(errno)));
        memcpy(g_partial, tmp.c_str(), tmp.size() + 1);
        g_partial_set = true;
    }
    fchmod(fd, new_file_mode());

    out_file o(fd);
    o.put(GGUF_MAGIC, 4);
    o.put((uint32_t)GGUF_VERSION);
    o.put((uint64_t)w->tensors.size());
    o.put((uint64_t)w->keys.size());
    for (size_t i = 0; i < w->keys.size(); i++) {
        o.put_str(w->keys[i]);
        o.put((uint32_t)w->vals[i]->type);
        write_val(o, *w->vals[i]);
    }
    for (const gguf_wtensor &t : w->tensors) {
        o.put_str(t.name);
        o.put((uint32_t)t.n_dims);
        for (int d = 0; d < t.n_dims; d++) o.put(t.ne[d]);
        o.put((uint32_t)t.type);
        o.put(t.offset);
    }
    o.pad_to(align);
    for (const gguf_wtensor &t : w->tensors) {
        o.put(t.data, t.size);
        o.pad_to(align);
    }
    o.flush();
    int e = o.errnum;
    if (!e && fsync(fd) != 0) e = errno;
    if (close(fd) != 0 && !e) e = errno;
    bool replaced = false;
    {
        std::lock_guard<std::mutex> lk(g_partial_mu);
        replaced = !e && gguf_check_output_path(path, perr, sizeof perr) != 0;  // by a device, meanwhile
        if (!e && !replaced && rename(tmp.c_str(), path) != 0) e = errno;
        if (e || replaced) unlink(tmp.c_str());
        g_partial_set = false;
    }
    if (replaced) return w->fail(perr);
    if (e) return w->fail(fmt("cannot write %s: %s", path, strerror(e)));
    // Make the rename durable too (best effort).
    std::string dir = path;
    size_t slash = dir.rfind('/');
    dir = slash == std::string::npos ? "." : slash == 0 ? "/" : dir.substr(0, slash);
    int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    w->err.clear();
    return 0;
}

}  // extern "C"
