// GGUF C API: writer -> reader round trip of every value type, nested arrays
// and tensors; wrong-type and out-of-range accessors fail softly.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

#include "gguf.h"

static int g_fail = 0;
#define CHECK(c)                                                        \
    do {                                                                \
        if (!(c)) {                                                     \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); \
            g_fail++;                                                   \
        }                                                               \
    } while (0)

int main() {
    char dir[] = "/tmp/test-gguf-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    const std::string path = std::string(dir) + "/a.gguf";

    gguf_writer *w = gguf_writer_new();
    CHECK(gguf_writer_set_u32(w, "general.alignment", 64) == 0);
    CHECK(gguf_writer_set_u8(w, "u8", 250) == 0);
    CHECK(gguf_writer_set_i8(w, "i8", -5) == 0);
    CHECK(gguf_writer_set_u16(w, "u16", 65000) == 0);
    CHECK(gguf_writer_set_i16(w, "i16", -32000) == 0);
    CHECK(gguf_writer_set_i32(w, "i32", -7) == 0);
    CHECK(gguf_writer_set_f32(w, "f32", 0.25f) == 0);
    CHECK(gguf_writer_set_bool(w, "bool", true) == 0);
    CHECK(gguf_writer_set_u64(w, "u64", 1ull << 63) == 0);
    CHECK(gguf_writer_set_i64(w, "i64", -(1ll << 40)) == 0);
    CHECK(gguf_writer_set_f64(w, "f64", 1e300) == 0);
    CHECK(gguf_writer_set_str(w, "str", "hello") == 0);
    const float fa[3] = {1, 2, 3};
    CHECK(gguf_writer_set_arr_data(w, "fa", GGUF_TYPE_FLOAT32, fa, 3) == 0);
    const char *strs[2] = {"x", "yz"};
    CHECK(gguf_writer_set_arr_str(w, "sa", strs, 2) == 0);
    gguf_wval *outer = gguf_wval_arr(GGUF_TYPE_ARRAY);
    gguf_wval *inner = gguf_wval_arr(GGUF_TYPE_INT16);
    const int16_t iv[2] = {-1, 9};
    CHECK(gguf_wval_arr_push_data(inner, iv, 2) == 0);
    CHECK(gguf_wval_arr_push_arr(outer, inner) == 0);
    CHECK(gguf_writer_set_val(w, "nested", outer) == 0);
    CHECK(gguf_writer_set_u32(w, "general.alignment", 3) != 0);  // rejected, 64 kept
    CHECK(strstr(gguf_writer_error(w), "power of two") != nullptr);

    std::vector<float> t0(10);
    for (int i = 0; i < 10; i++) t0[i] = (float)i;
    const int64_t ne0[2] = {5, 2}, neq[1] = {64};
    std::vector<uint8_t> q(2 * 34, 7);
    CHECK(gguf_writer_add_tensor(w, "t0", GGML_TYPE_F32, 2, ne0, t0.data(), 40) == 0);
    CHECK(gguf_writer_add_tensor(w, "q", GGML_TYPE_Q8_0, 1, neq, q.data(), q.size()) == 0);
    CHECK(gguf_writer_add_tensor(w, "bad", GGML_TYPE_Q8_0, 1, neq, q.data(), 10) != 0);
    CHECK(gguf_writer_write(w, path.c_str()) == 0);
    gguf_writer_free(w);

    char err[256] = "";
    gguf_context *c = gguf_open(path.c_str(), err, sizeof err);
    CHECK(c != nullptr);
    if (!c) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    CHECK(gguf_get_alignment(c) == 64 && gguf_get_data_offset(c) % 64 == 0);
    CHECK(gguf_get_n_kv(c) == 15);
    CHECK(strcmp(gguf_get_key(c, 1), "u8") == 0);
    uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; int32_t i32; float f32; bool b; uint64_t u64;
    int64_t i64; double f64;
    CHECK(gguf_val_get_u8(gguf_get_val(c, gguf_find_key(c, "u8")), &u8) && u8 == 250);
    CHECK(gguf_val_get_i8(gguf_get_val(c, gguf_find_key(c, "i8")), &i8) && i8 == -5);
    CHECK(gguf_val_get_u16(gguf_get_val(c, gguf_find_key(c, "u16")), &u16) && u16 == 65000);
    CHECK(gguf_val_get_i16(gguf_get_val(c, gguf_find_key(c, "i16")), &i16) && i16 == -32000);
    CHECK(gguf_val_get_i32(gguf_get_val(c, gguf_find_key(c, "i32")), &i32) && i32 == -7);
    CHECK(gguf_val_get_f32(gguf_get_val(c, gguf_find_key(c, "f32")), &f32) && f32 == 0.25f);
    CHECK(gguf_val_get_bool(gguf_get_val(c, gguf_find_key(c, "bool")), &b) && b);
    CHECK(gguf_val_get_u64(gguf_get_val(c, gguf_find_key(c, "u64")), &u64) && u64 == 1ull << 63);
    CHECK(gguf_val_get_i64(gguf_get_val(c, gguf_find_key(c, "i64")), &i64) && i64 == -(1ll << 40));
    CHECK(gguf_val_get_f64(gguf_get_val(c, gguf_find_key(c, "f64")), &f64) && f64 == 1e300);
    size_t len = 0;
    CHECK(strcmp(gguf_val_get_str(gguf_get_val(c, gguf_find_key(c, "str")), &len), "hello") == 0 && len == 5);
    // Wrong type / bad index: soft failures.
    CHECK(!gguf_val_get_u32(gguf_get_val(c, gguf_find_key(c, "u8")), nullptr));
    CHECK(!gguf_val_get_f32(gguf_get_val(c, gguf_find_key(c, "str")), &f32));
    CHECK(gguf_val_get_str(gguf_get_val(c, gguf_find_key(c, "u8")), &len) == nullptr);
    CHECK(gguf_get_val(c, 99) == nullptr && gguf_get_key(c, -1) == nullptr && gguf_find_key(c, "nope") == -1);
    CHECK(gguf_arr_len(gguf_get_val(c, 1)) == -1 && gguf_arr_get_arr(nullptr, 0) == nullptr);

    const gguf_value *fav = gguf_get_val(c, gguf_find_key(c, "fa"));
    float e;
    CHECK(gguf_arr_type(fav) == GGUF_TYPE_FLOAT32 && gguf_arr_len(fav) == 3);
    CHECK(gguf_arr_get_elem(fav, 2, &e) && e == 3.0f && !gguf_arr_get_elem(fav, 3, &e));
    const gguf_value *sav = gguf_get_val(c, gguf_find_key(c, "sa"));
    CHECK(strcmp(gguf_arr_get_str(sav, 1, &len), "yz") == 0 && gguf_arr_get_str(sav, 2, &len) == nullptr);
    const gguf_value *nv = gguf_get_val(c, gguf_find_key(c, "nested"));
    const gguf_value *in = gguf_arr_get_arr(nv, 0);
    int16_t iv2;
    CHECK(gguf_arr_type(nv) == GGUF_TYPE_ARRAY && gguf_arr_len(nv) == 1 && gguf_arr_type(in) == GGUF_TYPE_INT16);
    CHECK(gguf_arr_get_elem(in, 0, &iv2) && iv2 == -1 && gguf_arr_get_elem(in, 1, &iv2) && iv2 == 9);

    CHECK(gguf_get_n_tensors(c) == 2);
    const int64_t ti = gguf_find_tensor(c, "t0");
    int64_t ne[4];
    CHECK(ti == 0 && gguf_get_tensor_ne(c, ti, ne) && ne[0] == 5 && ne[1] == 2 && ne[2] == 1);
    CHECK(gguf_get_tensor_type(c, ti) == GGML_TYPE_F32 && gguf_get_tensor_size(c, ti) == 40);
    CHECK(memcmp(gguf_get_tensor_data(c, ti), t0.data(), 40) == 0);
    const int64_t qi = gguf_find_tensor(c, "q");
    CHECK(gguf_get_tensor_offset(c, qi) == 64 && gguf_get_tensor_size(c, qi) == 68);
    CHECK(memcmp(gguf_get_tensor_data(c, qi), q.data(), 68) == 0);
    CHECK(gguf_get_tensor_data(c, 2) == nullptr && gguf_get_tensor_type(c, -1) == -1);
    gguf_free(c);

    // Parsing from memory: a bad magic is reported, not crashed on.
    const char junk[8] = "GGUX\3\0\0";
    CHECK(gguf_parse_buffer(junk, sizeof junk, err, sizeof err) == nullptr && strstr(err, "bad magic"));

    // PowerInfer's magic "PWRI" (same layout) parses and is reported; "GGUF" is not.
    unsigned char pw[24] = {'P', 'W', 'R', 'I', 3};  // v3, 0 tensors, 0 keys
    gguf_context *pc = gguf_parse_buffer(pw, sizeof pw, err, sizeof err);
    CHECK(pc && gguf_is_powerinfer(pc) && gguf_get_version(pc) == 3 && gguf_get_n_kv(pc) == 0);
    gguf_free(pc);
    memcpy(pw, "GGUF", 4);
    pc = gguf_parse_buffer(pw, sizeof pw, err, sizeof err);
    CHECK(pc && !gguf_is_powerinfer(pc));
    gguf_free(pc);
    CHECK(!gguf_is_powerinfer(nullptr));

    remove(path.c_str());
    rmdir(dir);
    if (g_fail) fprintf(stderr, "%d checks failed\n", g_fail);
    else printf("test-gguf: ok\n");
    return g_fail ? 1 : 0;
}
