// Type traits and the row kernels of every tensor type, for tests and tools:
// quantize / dequantize rows and run single dot products from Python.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstring>
#include <string>

#include "bind.h"
#include "ggml-cpu.h"

namespace {

using u8_array = nb::ndarray<const uint8_t, nb::c_contig, nb::device::cpu>;
using f32_array = nb::ndarray<const float, nb::c_contig, nb::device::cpu>;

const ggml_type_traits &traits_of(int type_id) {
    const ggml_type_traits *tr =
        (type_id >= 0 && type_id < GGML_TYPE_COUNT) ? ggml_get_type_traits((ggml_type)type_id) : nullptr;
    if (!tr) throw nb::value_error(("unknown tensor type id " + std::to_string(type_id)).c_str());
    return *tr;
}

// A read-only byte range from a bytes object or a contiguous uint8 array. The
// Python object is an argument of the running call, so it outlives the view.
struct byte_view {
    const uint8_t *data;
    size_t size;
};

byte_view as_bytes(nb::handle h, const char *what) {
    if (nb::isinstance<nb::bytes>(h)) {
        nb::bytes b = nb::borrow<nb::bytes>(h);
        return {(const uint8_t *)b.c_str(), b.size()};
    }
    u8_array a;
    if (nb::try_cast(h, a, false)) return {a.data(), a.size()};
    throw nb::value_error((std::string(what) + " must be bytes or a C-contiguous uint8 numpy array").c_str());
}

void check_multiple(const ggml_type_traits &tr, int64_t n) {
    if (n < 0) throw nb::value_error(("n must be >= 0, got " + std::to_string(n)).c_str());
    if (n % tr.blck_size != 0) {
        throw nb::value_error(("n = " + std::to_string(n) + " is not a multiple of the " + tr.name +
                               " block size " + std::to_string(tr.blck_size))
                                  .c_str());
    }
}

size_t row_bytes(const ggml_type_traits &tr, int64_t n) { return tr.type_size * (size_t)(n / tr.blck_size); }

nb::dict type_info(int type_id) {
    const ggml_type_traits &tr = traits_of(type_id);
    nb::dict d;
    d["name"] = tr.name;
    d["blck_size"] = tr.blck_size;
    d["type_size"] = tr.type_size;
    d["is_quantized"] = tr.is_quantized;
    const ggml_cpu_type_traits &ct = *ggml_get_cpu_type_traits((ggml_type)type_id);  // the CPU's kernels
    d["vec_dot_type"] = (int)ct.vec_dot_type;
    d["has_to_float"] = tr.to_float != nullptr;
    d["has_from_float"] = tr.from_float_ref != nullptr;
    d["has_vec_dot"] = ct.vec_dot_ref != nullptr;
    return d;
}

nb::ndarray<nb::numpy, float, nb::ndim<1>> dequantize(int type_id, nb::handle data, int64_t n) {
    const ggml_type_traits &tr = traits_of(type_id);
    if (!tr.to_float) throw nb::value_error((std::string("type ") + tr.name + " cannot be converted to float").c_str());
    const byte_view src = as_bytes(data, "data");
    if (n < 0) {  // infer the element count from the byte length
        if (src.size % tr.type_size != 0) {
            throw nb::value_error((std::to_string(src.size) + " bytes is not a whole number of " + tr.name +
                                   " blocks of " + std::to_string(tr.type_size) + " bytes")
                                      .c_str());
        }
        n = (int64_t)(src.size / tr.type_size) * tr.blck_size;
    }
    check_multiple(tr, n);
    if (src.size != row_bytes(tr, n)) {
        throw nb::value_error((std::to_string(n) + " " + tr.name + " elements take " +
                               std::to_string(row_bytes(tr, n)) + " bytes, got " + std::to_string(src.size))
                                  .c_str());
    }
    float *out = new float[n > 0 ? n : 1];
    nb::capsule owner(out, [](void *p) noexcept { delete[] (float *)p; });
    {
        nb::gil_scoped_release nogil;
        tr.to_float(src.data, out, n);
    }
    return nb::ndarray<nb::numpy, float, nb::ndim<1>>(out, {(size_t)n}, owner);
}

nb::ndarray<nb::numpy, uint8_t> quantize(int type_id, f32_array x, bool ref) {
    const ggml_type_traits &tr = traits_of(type_id);
    if (!tr.from_float_ref) throw nb::value_error((std::string("type ") + tr.name + " has no quantizer").c_str());
    if (x.ndim() != 1 && x.ndim() != 2) {
        throw nb::value_error(("x must be 1-D or 2-D (rows x cols), got " + std::to_string(x.ndim()) + " dims").c_str());
    }
    const int64_t rows = x.ndim() == 2 ? (int64_t)x.shape(0) : 1;
    const int64_t cols = (int64_t)x.shape(x.ndim() - 1);
    check_multiple(tr, cols);
    const size_t rb = row_bytes(tr, cols);
    uint8_t *out = new uint8_t[rows * rb > 0 ? rows * rb : 1];
    nb::capsule owner(out, [](void *p) noexcept { delete[] (uint8_t *)p; });
    {
        nb::gil_scoped_release nogil;
        if (ref) {
            for (int64_t r = 0; r < rows; r++) tr.from_float_ref(x.data() + r * cols, out + r * rb, cols);
        } else {
            ggml_quantize_chunk((ggml_type)type_id, x.data(), out, rows, cols);
        }
    }
    if (x.ndim() == 1) return nb::ndarray<nb::numpy, uint8_t>(out, {rb}, owner);
    return nb::ndarray<nb::numpy, uint8_t>(out, {(size_t)rows, rb}, owner);
}

float vec_dot(int type_id, nb::handle weight, nb::handle act, int64_t n, bool ref) {
    const ggml_type_traits &tr = traits_of(type_id);
    const ggml_cpu_type_traits &ct = *ggml_get_cpu_type_traits((ggml_type)type_id);
    ggml_vec_dot_t fn = ref ? ct.vec_dot_ref : ct.vec_dot;
    if (!fn) throw nb::value_error((std::string("type ") + tr.name + " has no dot kernel").c_str());
    const ggml_type_traits &ta = traits_of(ct.vec_dot_type);
    check_multiple(tr, n);
    check_multiple(ta, n);
    const byte_view w = as_bytes(weight, "weight"), a = as_bytes(act, "act");
    if (w.size != row_bytes(tr, n)) {
        throw nb::value_error(("weight: " + std::to_string(n) + " " + tr.name + " elements take " +
                               std::to_string(row_bytes(tr, n)) + " bytes, got " + std::to_string(w.size))
                                  .c_str());
    }
    if (a.size != row_bytes(ta, n)) {
        throw nb::value_error(("act: " + std::to_string(n) + " " + ta.name + " elements take " +
                               std::to_string(row_bytes(ta, n)) + " bytes, got " + std::to_string(a.size))
                                  .c_str());
    }
    float s = 0;
    fn(n, &s, w.data, a.data);
    return s;
}

int type_from_name(const std::string &name) {
    const int t = ggml_type_from_name(name.c_str());
    if (t < 0) throw nb::value_error(("unknown tensor type name '" + name + "'").c_str());
    return t;
}

}  // namespace

void bind_types(nb::module_ &m) {
    m.def("type_info", &type_info, nb::arg("type_id"),
          "Traits of a tensor type: name, blck_size, type_size, is_quantized, vec_dot_type.");
    m.def("dequantize", &dequantize, nb::arg("type_id"), nb::arg("data"), nb::arg("n") = -1,
          "Decode n elements (default: all the data holds) of a type to a float32 array.");
    m.def("quantize", &quantize, nb::arg("type_id"), nb::arg("x"), nb::arg("ref") = false,
          "Encode float32 rows (1-D or rows x cols) into a uint8 array of rows x row_bytes;\n"
          "ref=True uses the portable reference quantizer.");
    m.def("vec_dot", &vec_dot, nb::arg("type_id"), nb::arg("weight"), nb::arg("act"), nb::arg("n"),
          nb::arg("ref") = false,
          "Dot product of n elements: weight of type_id, act of its vec_dot_type (both raw bytes).");
    m.def("cpu_backend_name", []() { return std::string(ggml_cpu_backend_name()); },
          "Kernel family in use: 'avx512', 'avx2' or 'scalar'.");
    m.def("act_format",
          [](int type_id, int64_t k, int64_t ncols, bool high) {
              if (type_id < 0 || type_id >= GGML_TYPE_COUNT || !ggml_get_type_traits((ggml_type)type_id))
                  throw nb::value_error("act_format: unknown type id");
              const char *f = ggml_cpu_act_format((ggml_type)type_id, k, ncols, high);
              if (!f) throw nb::value_error("act_format: no CPU kernel for this type");
              return std::string(f);
          },
          nb::arg("type_id"), nb::arg("k"), nb::arg("ncols"), nb::arg("high") = false,
          "What a weight product of this type converts its k x ncols activations to: 'q8x'\n"
          "(the q8_0 values), 'q8xh' (q8_0 plus the residual on the grid d/128), or the\n"
          "name of the row type (with high: a row then its converted residual; 'f32': as is).");
    m.def("force_scalar", [](bool on) { ggml_cpu_force_scalar(on ? 1 : 0); }, nb::arg("on"),
          "Use only the portable scalar kernels (True) or the best available (False).");
    m.def("type_from_name", &type_from_name, nb::arg("name"), "Type id of a name such as 'q4_K' (case-insensitive).");
}
