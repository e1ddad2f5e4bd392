// GGUF read/write for Python.
//
// GGUFReader(path) maps the file; .metadata is a dict of Python values (numpy
// arrays for arrays of numbers, lists for arrays of strings or arrays);
// .tensors lists GGUFTensor records whose .data is a read-only numpy view into
// the mapping (no copy) that keeps the reader alive.
// GGUFWriter takes each key with an explicit value type: an int (gguf value
// type id) or, for arrays, a tuple (ARRAY, element spec), nested as deep as needed.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <string>
#include <vector>

#include "bind.h"
#include "gguf.h"

namespace {

nb::object numpy() { return nb::module_::import_("numpy"); }

const char *np_dtype(gguf_type t) {
    switch (t) {
        case GGUF_TYPE_UINT8: return "uint8";
        case GGUF_TYPE_INT8: return "int8";
        case GGUF_TYPE_UINT16: return "uint16";
        case GGUF_TYPE_INT16: return "int16";
        case GGUF_TYPE_UINT32: return "uint32";
        case GGUF_TYPE_INT32: return "int32";
        case GGUF_TYPE_FLOAT32: return "float32";
        case GGUF_TYPE_BOOL: return "bool";
        case GGUF_TYPE_UINT64: return "uint64";
        case GGUF_TYPE_INT64: return "int64";
        case GGUF_TYPE_FLOAT64: return "float64";
        default: return nullptr;
    }
}

// Tensor types with a numpy dtype get a typed view; the rest are bytes per row.
const char *np_tensor_dtype(int t) {
    switch (t) {
        case GGML_TYPE_F32: return "float32";
        case GGML_TYPE_F16: return "float16";
        case GGML_TYPE_F64: return "float64";
        case GGML_TYPE_I8: return "int8";
        case GGML_TYPE_I16: return "int16";
        case GGML_TYPE_I32: return "int32";
        case GGML_TYPE_I64: return "int64";
        default: return nullptr;
    }
}

nb::object py_str(const char *s, size_t n) {
    // Keys are validated UTF-8; string values need not be: those come back as bytes.
    PyObject *o = PyUnicode_DecodeUTF8(s, (Py_ssize_t)n, "strict");
    if (o) return nb::steal(o);
    PyErr_Clear();
    return nb::bytes(s, n);
}

nb::object to_py(const gguf_value *v) {
    const gguf_type t = gguf_val_type(v);
    switch (t) {
        case GGUF_TYPE_UINT8: { uint8_t x; gguf_val_get_u8(v, &x); return nb::int_(x); }
        case GGUF_TYPE_INT8: { int8_t x; gguf_val_get_i8(v, &x); return nb::int_(x); }
        case GGUF_TYPE_UINT16: { uint16_t x; gguf_val_get_u16(v, &x); return nb::int_(x); }
        case GGUF_TYPE_INT16: { int16_t x; gguf_val_get_i16(v, &x); return nb::int_(x); }
        case GGUF_TYPE_UINT32: { uint32_t x; gguf_val_get_u32(v, &x); return nb::int_(x); }
        case GGUF_TYPE_INT32: { int32_t x; gguf_val_get_i32(v, &x); return nb::int_(x); }
        case GGUF_TYPE_UINT64: { uint64_t x; gguf_val_get_u64(v, &x); return nb::int_(x); }
        case GGUF_TYPE_INT64: { int64_t x; gguf_val_get_i64(v, &x); return nb::int_(x); }
        case GGUF_TYPE_FLOAT32: { float x; gguf_val_get_f32(v, &x); return nb::float_((double)x); }
        case GGUF_TYPE_FLOAT64: { double x; gguf_val_get_f64(v, &x); return nb::float_(x); }
        case GGUF_TYPE_BOOL: { bool x; gguf_val_get_bool(v, &x); return nb::bool_(x); }
        case GGUF_TYPE_STRING: { size_t n; const char *s = gguf_val_get_str(v, &n); return py_str(s, n); }
        case GGUF_TYPE_ARRAY: break;
        default: throw std::runtime_error("gguf: invalid value");
    }
    const gguf_type et = gguf_arr_type(v);
    const int64_t n = gguf_arr_len(v);
    if (et == GGUF_TYPE_STRING || et == GGUF_TYPE_ARRAY) {
        nb::list out;
        for (int64_t j = 0; j < n; j++) {
            if (et == GGUF_TYPE_STRING) {
                size_t len;
                const char *s = gguf_arr_get_str(v, j, &len);
                out.append(py_str(s, len));
            } else {
                out.append(to_py(gguf_arr_get_arr(v, j)));
            }
        }
        return out;
    }
    // Copy: metadata arrays are small and the raw bytes may be unaligned.
    nb::bytes raw((const char *)gguf_arr_data(v), (size_t)n * gguf_type_size(et));
    return numpy().attr("frombuffer")(raw, np_dtype(et)).attr("copy")();
}

// Type spec of a value: an int, or (ARRAY, element spec) where a nested array's
// element spec is taken from its first element (ARRAY alone if it is empty).
nb::object type_spec(const gguf_value *v) {
    const gguf_type t = gguf_val_type(v);
    if (t != GGUF_TYPE_ARRAY) return nb::int_((int)t);
    const gguf_type et = gguf_arr_type(v);
    if (et == GGUF_TYPE_ARRAY && gguf_arr_len(v) > 0)
        return nb::make_tuple((int)GGUF_TYPE_ARRAY, type_spec(gguf_arr_get_arr(v, 0)));
    return nb::make_tuple((int)GGUF_TYPE_ARRAY, (int)et);
}

struct Reader {
    gguf_context *ctx = nullptr;
    std::string buffer;  // backing bytes for from_bytes()

    ~Reader() { gguf_free(ctx); }
};

struct TensorInfo {
    std::string name;
    int type;
    std::vector<int64_t> ne;  // gguf order (ne[0] fastest)
    uint64_t offset;          // relative to the data section
    uint64_t data_offset;     // absolute file offset
    size_t nbytes;
    nb::object data;
};

nb::object tensor_view(nb::handle self, const Reader &r, int64_t i) {
    const size_t nbytes = gguf_get_tensor_size(r.ctx, i);
    const int type = gguf_get_tensor_type(r.ctx, i);
    const int nd = gguf_get_tensor_n_dims(r.ctx, i);
    int64_t ne[GGUF_MAX_DIMS];
    gguf_get_tensor_ne(r.ctx, i, ne);
    size_t shape1[1] = {nbytes};
    // Owner = the reader object: the view keeps the mapping alive.
    nb::ndarray<nb::numpy, const uint8_t, nb::ndim<1>> raw((const uint8_t *)gguf_get_tensor_data(r.ctx, i), 1,
                                                            shape1, self);
    nb::object arr = raw.cast();
    nb::list shape;
    for (int d = nd - 1; d >= 0; d--) shape.append(ne[d]);
    if (const char *dt = np_tensor_dtype(type)) return arr.attr("view")(dt).attr("reshape")(nb::tuple(shape));
    // Quantized and other types: bytes, one row per ne[0] elements (as gguf.GGUFReader).
    if (nd > 0) shape[nd - 1] = nb::int_(ggml_row_size((ggml_type)type, ne[0]));
    else shape.append(nbytes);
    return arr.attr("reshape")(nb::tuple(shape));
}

// ---- writer

gguf_wval *build(nb::handle value, nb::handle spec);

gguf_type spec_type(nb::handle spec, nb::handle *elem) {
    if (nb::isinstance<nb::tuple>(spec) || nb::isinstance<nb::list>(spec)) {
        nb::sequence s = nb::borrow<nb::sequence>(spec);
        if (nb::len(s) != 2 || nb::cast<int>(s[0]) != GGUF_TYPE_ARRAY)
            throw nb::value_error("gguf: a tuple type spec must be (ARRAY, element spec)");
        *elem = s[1];
        return GGUF_TYPE_ARRAY;
    }
    int t = nb::cast<int>(spec);
    if (t < 0 || t >= GGUF_TYPE_COUNT) throw nb::value_error(("gguf: unknown value type " + std::to_string(t)).c_str());
    if (t == GGUF_TYPE_ARRAY) throw nb::value_error("gguf: give arrays as (ARRAY, element type)");
    return (gguf_type)t;
}

std::string as_bytes(nb::handle v) {
    if (nb::isinstance<nb::str>(v)) return nb::cast<std::string>(v);
    if (nb::isinstance<nb::bytes>(v)) {
        nb::bytes b = nb::borrow<nb::bytes>(v);
        return std::string(b.c_str(), b.size());
    }
    throw nb::type_error("gguf: string values must be str or bytes");
}

gguf_wval *build(nb::handle value, nb::handle spec) {
    nb::handle elem;
    const gguf_type t = spec_type(spec, &elem);
    if (t == GGUF_TYPE_STRING) {
        std::string s = as_bytes(value);
        return gguf_wval_str(s.data(), s.size());
    }
    if (t != GGUF_TYPE_ARRAY) {
        // Through numpy so that range errors are reported rather than wrapped.
        nb::object a = numpy().attr("array")(value, np_dtype(t));
        if (nb::cast<int>(a.attr("ndim")) != 0) throw nb::value_error("gguf: expected a scalar");
        nb::bytes raw = nb::borrow<nb::bytes>(a.attr("tobytes")());
        return gguf_wval_scalar(t, raw.c_str());
    }
    nb::handle sub;
    const gguf_type et = nb::isinstance<nb::tuple>(elem) || nb::isinstance<nb::list>(elem) ? GGUF_TYPE_ARRAY
                                                                                          : spec_type(elem, &sub);
    gguf_wval *a = gguf_wval_arr(et);
    try {
        if (et == GGUF_TYPE_STRING) {
            for (nb::handle x : nb::iter(value)) {
                std::string s = as_bytes(x);
                gguf_wval_arr_push_str(a, s.data(), s.size());
            }
        } else if (et == GGUF_TYPE_ARRAY) {
            for (nb::handle x : nb::iter(value))
                if (gguf_wval_arr_push_arr(a, build(x, elem)) != 0) throw nb::value_error("gguf: bad nested array");
        } else {
            nb::object arr = numpy().attr("asarray")(value, np_dtype(et));
            if (nb::cast<int>(arr.attr("ndim")) != 1) throw nb::value_error("gguf: array values must be 1-D");
            nb::bytes raw = nb::borrow<nb::bytes>(arr.attr("tobytes")());
            if (gguf_wval_arr_push_data(a, raw.c_str(), nb::len(arr)) != 0)
                throw nb::value_error("gguf: invalid array elements");
        }
    } catch (...) {
        gguf_wval_free(a);
        throw;
    }
    return a;
}

struct Writer {
    gguf_writer *w = gguf_writer_new();
    std::vector<nb::bytes> keep;  // tensor data stays alive until write()
    ~Writer() { gguf_writer_free(w); }
};

}  // namespace

void bind_gguf(nb::module_ &m) {
    m.attr("GGUF_TYPE_UINT8") = (int)GGUF_TYPE_UINT8;
    m.attr("GGUF_TYPE_INT8") = (int)GGUF_TYPE_INT8;
    m.attr("GGUF_TYPE_UINT16") = (int)GGUF_TYPE_UINT16;
    m.attr("GGUF_TYPE_INT16") = (int)GGUF_TYPE_INT16;
    m.attr("GGUF_TYPE_UINT32") = (int)GGUF_TYPE_UINT32;
    m.attr("GGUF_TYPE_INT32") = (int)GGUF_TYPE_INT32;
    m.attr("GGUF_TYPE_FLOAT32") = (int)GGUF_TYPE_FLOAT32;
    m.attr("GGUF_TYPE_BOOL") = (int)GGUF_TYPE_BOOL;
    m.attr("GGUF_TYPE_STRING") = (int)GGUF_TYPE_STRING;
    m.attr("GGUF_TYPE_ARRAY") = (int)GGUF_TYPE_ARRAY;
    m.attr("GGUF_TYPE_UINT64") = (int)GGUF_TYPE_UINT64;
    m.attr("GGUF_TYPE_INT64") = (int)GGUF_TYPE_INT64;
    m.attr("GGUF_TYPE_FLOAT64") = (int)GGUF_TYPE_FLOAT64;

    nb::class_<TensorInfo>(m, "GGUFTensor")
        .def_ro("name", &TensorInfo::name)
        .def_ro("type", &TensorInfo::type)
        .def_prop_ro("ne", [](const TensorInfo &t) { return t.ne; })
        .def_prop_ro("shape", [](const TensorInfo &t) {  // numpy order
            std::vector<int64_t> s(t.ne.rbegin(), t.ne.rend());
            return s;
        })
        .def_ro("offset", &TensorInfo::offset)
        .def_ro("data_offset", &TensorInfo::data_offset)
        .def_ro("nbytes", &TensorInfo::nbytes)
        .def_ro("data", &TensorInfo::data)
        .def("__repr__", [](const TensorInfo &t) {
            return "GGUFTensor(" + t.name + ", " + ggml_type_name((ggml_type)t.type) + ")";
        });

    nb::class_<Reader>(m, "GGUFReader")
        .def("__init__",
             [](Reader *r, const std::string &path) {
                 char err[512];
                 gguf_context *ctx = gguf_open(path.c_str(), err, sizeof err);
                 if (!ctx) {
                     if (strstr(err, "cannot open") || strstr(err, "not a regular file") || strstr(err, "cannot mmap")) {
                         PyErr_SetString(PyExc_OSError, err);
                         throw nb::python_error();
                     }
                     throw nb::value_error(err);
                 }
                 new (r) Reader();
                 r->ctx = ctx;
             },
             nb::arg("path"))
        .def_static(
            "from_bytes",
            [](nb::bytes data) {
                auto *r = new Reader();
                r->buffer.assign(data.c_str(), data.size());
                char err[512];
                r->ctx = gguf_parse_buffer(r->buffer.data(), r->buffer.size(), err, sizeof err);
                if (!r->ctx) {
                    delete r;
                    throw nb::value_error(err);
                }
                return r;
            },
            nb::rv_policy::take_ownership)
        .def_prop_ro("version", [](const Reader &r) { return gguf_get_version(r.ctx); })
        .def_prop_ro("is_powerinfer", [](const Reader &r) { return gguf_is_powerinfer(r.ctx); },
                     "True if the file's magic is PowerInfer's \"PWRI\" (same layout as GGUF).")
        .def_prop_ro("alignment", [](const Reader &r) { return gguf_get_alignment(r.ctx); })
        .def_prop_ro("data_offset", [](const Reader &r) { return gguf_get_data_offset(r.ctx); })
        .def_prop_ro("file_size", [](const Reader &r) { return gguf_get_file_size(r.ctx); })
        .def_prop_ro("keys", [](const Reader &r) {
            std::vector<std::string> k;
            for (int64_t i = 0; i < gguf_get_n_kv(r.ctx); i++) k.emplace_back(gguf_get_key(r.ctx, i));
            return k;
        })
        .def_prop_ro("metadata", [](const Reader &r) {
            nb::dict d;  // insertion order = file order
            for (int64_t i = 0; i < gguf_get_n_kv(r.ctx); i++) d[gguf_get_key(r.ctx, i)] = to_py(gguf_get_val(r.ctx, i));
            return d;
        })
        .def_prop_ro("types", [](const Reader &r) {
            nb::dict d;
            for (int64_t i = 0; i < gguf_get_n_kv(r.ctx); i++) d[gguf_get_key(r.ctx, i)] = type_spec(gguf_get_val(r.ctx, i));
            return d;
        }, "key -> value type id, or (ARRAY, element spec)")
        .def("get", [](const Reader &r, const std::string &key, nb::object dflt) -> nb::object {
            int64_t i = gguf_find_key(r.ctx, key.c_str());
            return i < 0 ? dflt : to_py(gguf_get_val(r.ctx, i));
        }, nb::arg("key"), nb::arg("default") = nb::none())
        .def_prop_ro("tensors", [](nb::handle self) {
            const Reader &r = nb::cast<const Reader &>(self);
            std::vector<TensorInfo> out;
            for (int64_t i = 0; i < gguf_get_n_tensors(r.ctx); i++) {
                TensorInfo t;
                t.name = gguf_get_tensor_name(r.ctx, i);
                t.type = gguf_get_tensor_type(r.ctx, i);
                int64_t ne[GGUF_MAX_DIMS];
                gguf_get_tensor_ne(r.ctx, i, ne);
                t.ne.assign(ne, ne + gguf_get_tensor_n_dims(r.ctx, i));
                t.offset = gguf_get_tensor_offset(r.ctx, i);
                t.data_offset = gguf_get_data_offset(r.ctx) + t.offset;
                t.nbytes = gguf_get_tensor_size(r.ctx, i);
                t.data = tensor_view(self, r, i);
                out.push_back(std::move(t));
            }
            return out;
        });

    nb::class_<Writer>(m, "GGUFWriter")
        .def(nb::init<>())
        .def("add", [](Writer &w, const std::string &key, nb::handle value, nb::handle type) {
            gguf_wval *v = build(value, type);
            if (gguf_writer_set_val(w.w, key.c_str(), v) != 0) throw nb::value_error(("gguf: " + std::string(gguf_writer_error(w.w))).c_str());
        }, nb::arg("key"), nb::arg("value"), nb::arg("type"),
           "type: a value type id, or (GGUF_TYPE_ARRAY, element spec) for arrays")
        .def("add_tensor", [](Writer &w, const std::string &name, nb::handle data, int type, nb::object shape) {
            if (!ggml_type_is_valid(type)) throw nb::value_error(("gguf: unknown tensor type " + std::to_string(type)).c_str());
            nb::object np = numpy();
            nb::object arr = np.attr("ascontiguousarray")(data);
            if (shape.is_none()) {
                if (np_tensor_dtype(type) == nullptr)
                    throw nb::value_error("gguf: give the shape (numpy order, in elements) for this tensor type");
                shape = arr.attr("shape");
            }
            std::vector<int64_t> shp = nb::cast<std::vector<int64_t>>(shape);
            if (shp.size() > GGUF_MAX_DIMS) throw nb::value_error("gguf: more than 4 dimensions");
            std::vector<int64_t> ne(shp.rbegin(), shp.rend());
            nb::bytes raw = nb::borrow<nb::bytes>(arr.attr("tobytes")());
            if (gguf_writer_add_tensor(w.w, name.c_str(), (ggml_type)type, (int)ne.size(), ne.data(), raw.c_str(),
                                       raw.size()) != 0)
                throw nb::value_error(("gguf: " + std::string(gguf_writer_error(w.w))).c_str());
            w.keep.push_back(raw);
        }, nb::arg("name"), nb::arg("data"), nb::arg("type"), nb::arg("shape") = nb::none())
        .def("write", [](Writer &w, const std::string &path) {
            int rc;
            {
                nb::gil_scoped_release nogil;
                rc = gguf_writer_write(w.w, path.c_str());
            }
            if (rc != 0) {
                std::string msg = "gguf: " + std::string(gguf_writer_error(w.w));
                PyErr_SetString(PyExc_OSError, msg.c_str());
                throw nb::python_error();
            }
        }, nb::arg("path"));
}
