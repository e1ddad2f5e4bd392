// Build and run small ggml graphs from Python: the harness of the op tests.
//
//   g = _core.Graph()
//   a = g.input(np.ndarray)              # F32 / F16 / I32 from the dtype
//   q = g.input_raw(bytes, type_id, shape)
//   v = g.permute(a, 1, 0, 2, 3)         # also transpose, view, reshape
//   y = g.op("rms_norm", [v], {"eps": 1e-6})
//   g.compute([y], n_threads=3)          # planner + thread pool
//   g.get(y) -> np.ndarray
//
// Shapes are given and returned in numpy order (outermost first), i.e. the
// reverse of ggml's ne; views take ggml-order ne/nb because they describe raw
// strides. _core.run_op(op, inputs, params, n_threads, views) wraps one op.
//
// Bad arguments raise Python exceptions: everything ggml would abort on is
// checked here first.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bind.h"
#include "ggml-cpu.h"

namespace {

constexpr int kMaxTensors = 1024;
constexpr int kMaxComputes = 16;
constexpr size_t kGraphSize = 2048;

using any_array = nb::ndarray<nb::numpy, nb::c_contig, nb::device::cpu>;

struct Allocator {
    ggml_gallocr *a = ggml_gallocr_new();
    ~Allocator() { ggml_gallocr_free(a); }
    size_t buffer_size() const { return ggml_gallocr_buffer_size(a); }
};

struct Graph {
    ggml_context *ctx = nullptr;
    std::vector<ggml_tensor *> tensors;
    std::vector<void *> buffers;    // input data we own
    Allocator own;                  // used when compute() gets no allocator
    nb::object keep;                // an external allocator our tensors live in
    ggml_cgraph *last = nullptr;
    int n_computes = 0;

    Graph() {
        ggml_init_params ip = {kMaxTensors * ggml_tensor_overhead() +
                                   kMaxComputes * ggml_graph_overhead(),
                               nullptr, true};
        ctx = ggml_init(ip);
        if (!ctx) throw std::runtime_error("ggml_init failed");
    }
    ~Graph() {
        ggml_free(ctx);
        for (void *p : buffers) free(p);
    }

    ggml_tensor *t(int id) const {
        if (id < 0 || id >= (int)tensors.size()) throw nb::index_error(("no tensor with id " + std::to_string(id)).c_str());
        return tensors[id];
    }
    int add(ggml_tensor *x) {
        tensors.push_back(x);
        return (int)tensors.size() - 1;
    }
    void check_room() const {
        if ((int)tensors.size() >= kMaxTensors - 2) throw std::runtime_error("graph: too many tensors");
    }

    // ggml ne from a numpy-order shape.
    static void ne_from_shape(const std::vector<int64_t> &shape, int64_t ne[4]) {
        if (shape.empty() || shape.size() > 4) throw nb::value_error("shape must have 1 to 4 dimensions");
        for (int i = 0; i < 4; i++) ne[i] = 1;
        for (size_t i = 0; i < shape.size(); i++) {
            if (shape[i] <= 0) throw nb::value_error("shape entries must be positive");
            ne[i] = shape[shape.size() - 1 - i];
        }
    }

    int new_input(ggml_type type, const std::vector<int64_t> &shape, const void *data, size_t nbytes) {
        check_room();
        const ggml_type_traits *tr = ggml_get_type_traits(type);
        if (!tr) throw nb::value_error(("unsupported tensor type " + std::to_string((int)type)).c_str());
        int64_t ne[4];
        ne_from_shape(shape, ne);
        if (ne[0] % tr->blck_size) {
            throw nb::value_error(("innermost dimension must be a multiple of the " + std::string(tr->name) +
                                   " block size " + std::to_string(tr->blck_size)).c_str());
        }
        const size_t need = ggml_row_size(type, ne[0]) * (size_t)(ne[1] * ne[2] * ne[3]);
        if (nbytes != need) {
            throw nb::value_error(("data has " + std::to_string(nbytes) + " bytes, shape needs " + std::to_string(need)).c_str());
        }
        void *buf = aligned_alloc(GGML_DEFAULT_ALIGN, (need + GGML_DEFAULT_ALIGN - 1) / GGML_DEFAULT_ALIGN * GGML_DEFAULT_ALIGN);
        if (!buf) throw std::bad_alloc();
        buffers.push_back(buf);
        memcpy(buf, data, need);
        ggml_tensor *x = ggml_new_tensor_4d(ctx, type, ne[0], ne[1], ne[2], ne[3]);
        x->data = buf;
        ggml_set_input(x);
        return add(x);
    }

    int input(any_array arr) {
        ggml_type type;
        if (arr.dtype() == nb::dtype<float>()) type = GGML_TYPE_F32;
        else if (arr.dtype() == nb::dtype<int32_t>()) type = GGML_TYPE_I32;
        else if (arr.dtype() == nb::dlpack::dtype{(uint8_t)nb::dlpack::dtype_code::Float, 16, 1}) type = GGML_TYPE_F16;
        else throw nb::type_error("input: dtype must be float32, float16 or int32 (use input_raw for other types)");
        std::vector<int64_t> shape;
        for (size_t i = 0; i < arr.ndim(); i++) shape.push_back((int64_t)arr.shape(i));
        if (shape.empty()) shape.push_back(1);
        return new_input(type, shape, arr.data(), arr.nbytes());
    }

    int input_raw(nb::bytes data, int type, const std::vector<int64_t> &shape) {
        if (!ggml_type_is_valid(type)) throw nb::value_error(("unknown tensor type id " + std::to_string(type)).c_str());
        return new_input((ggml_type)type, shape, data.c_str(), data.size());
    }

    // ---- views ----
    int permute(int id, int a0, int a1, int a2, int a3) {
        check_room();
        const int ax[4] = {a0, a1, a2, a3};
        int seen = 0;
        for (int i = 0; i < 4; i++) {
            if (ax[i] < 0 || ax[i] > 3 || (seen >> ax[i] & 1)) throw nb::value_error("permute: axes must be a permutation of 0..3");
            seen |= 1 << ax[i];
        }
        return add(ggml_permute(ctx, t(id), a0, a1, a2, a3));
    }
    int transpose(int id) {
        check_room();
        return add(ggml_transpose(ctx, t(id)));
    }
    int reshape(int id, const std::vector<int64_t> &shape) {
        check_room();
        ggml_tensor *x = t(id);
        int64_t ne[4];
        ne_from_shape(shape, ne);
        if (!ggml_is_contiguous(x)) throw nb::value_error("reshape: tensor is not contiguous");
        if (ne[0] * ne[1] * ne[2] * ne[3] != ggml_nelements(x)) throw nb::value_error("reshape: element count changes");
        return add(ggml_reshape_4d(ctx, x, ne[0], ne[1], ne[2], ne[3]));
    }
    // ggml-order ne (up to 4) and nb[1..] (byte strides of dims 1..), offset in bytes.
    int view(int id, const std::vector<int64_t> &ne_in, const std::vector<size_t> &nb_in, size_t offset) {
        check_room();
        ggml_tensor *x = t(id);
        if (ne_in.empty() || ne_in.size() > 4 || nb_in.size() + 1 != ne_in.size())
            throw nb::value_error("view: need 1..4 ne and len(ne)-1 strides nb[1..]");
        int64_t ne[4] = {1, 1, 1, 1};
        size_t nb[4];
        for (size_t i = 0; i < ne_in.size(); i++) {
            if (ne_in[i] <= 0) throw nb::value_error("view: ne must be positive");
            ne[i] = ne_in[i];
        }
        const ggml_type_traits *tr = ggml_get_type_traits(x->type);
        if (ne[0] % tr->blck_size) throw nb::value_error("view: ne0 not a multiple of the block size");
        nb[0] = tr->type_size;
        for (int i = 1; i < 4; i++) nb[i] = i < (int)ne_in.size() ? nb_in[i - 1] : nb[i - 1] * (size_t)ne[i - 1];
        // The last byte touched must lie inside the viewed tensor.
        size_t last = offset + ggml_row_size(x->type, ne[0]);
        for (int i = 1; i < 4; i++) last += (size_t)(ne[i] - 1) * nb[i];
        if (last > ggml_nbytes(x)) throw nb::value_error("view: out of bounds of the source tensor");
        return add(ggml_view_4d(ctx, x, ne[0], ne[1], ne[2], ne[3], nb[1], nb[2], nb[3], offset));
    }

    // ---- ops ----
    static double fparam(const nb::dict &p, const char *k, double def) {
        return p.contains(k) ? nb::cast<double>(p[k]) : def;
    }
    static int iparam(const nb::dict &p, const char *k, int def) { return p.contains(k) ? nb::cast<int>(p[k]) : def; }
    static std::string p_str(const nb::dict &p, const char *k, const char *def) {
        return p.contains(k) ? nb::cast<std::string>(p[k]) : std::string(def);
    }
    // An index list: its layout, and, when its values are known now, its
    // contents (before a kernel would abort on them). It may span more neurons
    // than the weight holds: ids outside [begin, end) are skipped (ggml.h).
    static void check_index_list(const std::string &name, const ggml_tensor *idx) {
        if (idx->type != GGML_TYPE_I32 || idx->nb[0] != sizeof(int32_t) || idx->ne[2] != 1 || idx->ne[3] != 1 || idx->ne[0] < 1)
            throw nb::value_error((name + ": idx must be int32 [C, m+1]").c_str());
        if (!idx->data) return;
        const int32_t *col = (const int32_t *)((const char *)idx->data + (idx->ne[1] - 1) * idx->nb[1]);
        if (col[0] < 0 || col[0] > idx->ne[0] - 1) throw nb::value_error((name + ": bad index list count").c_str());
        for (int32_t j = 1; j <= col[0]; j++)
            if (col[j] < 0 || (j > 1 && col[j] <= col[j - 1]))
                throw nb::value_error((name + ": index list must be strictly ascending ids >= 0").c_str());
    }
    // The neuron range [begin, end) of a sparse op over a weight of n neurons.
    static void neuron_range(const std::string &name, const nb::dict &p, int64_t n, int64_t *begin, int64_t *end) {
        *begin = p.contains("begin") ? nb::cast<int64_t>(p["begin"]) : 0;
        *end = p.contains("end") ? nb::cast<int64_t>(p["end"]) : n;
        if (*begin < 0 || *begin > *end || *end > n)
            throw nb::value_error((name + ": need 0 <= begin <= end <= n (the weight's " + std::to_string(n) + " neurons)").c_str());
    }
    // A weight type the CPU can multiply (the op kernels abort on the others).
    static bool has_dot(ggml_type t) { return ggml_get_cpu_type_traits(t)->vec_dot != nullptr; }
    // "prec": "high" | "default" (ggml_set_prec) for the weight products
    static void set_prec(ggml_tensor *r, const nb::dict &p) {
        if (!p.contains("prec")) return;
        const std::string v = nb::cast<std::string>(p["prec"]);
        if (v != "high" && v != "default") throw nb::value_error(("prec must be 'high' or 'default', got '" + v + "'").c_str());
        ggml_set_prec(r, v == "high" ? GGML_PREC_HIGH : GGML_PREC_DEFAULT);
    }

    int op(const std::string &name, const std::vector<int> &srcs, nb::dict params) {
        check_room();
        std::vector<ggml_tensor *> s;
        for (int id : srcs) s.push_back(t(id));
        // The op table's row for the name (constructor names that differ from
        // it: "cont", "sparse_ffn_bundle"); sparse_predict builds several nodes.
        const bool pred = name == "sparse_predict";
        const ggml_op op = name == "cont" ? GGML_OP_DUP
                           : name == "sparse_ffn_bundle" ? GGML_OP_SPARSE_FFN
                           : pred ? GGML_OP_SPARSE_SELECT : ggml_op_from_name(name.c_str());
        const ggml_op_traits *tr_op = ggml_get_op_traits(op);
        if (!tr_op) throw nb::value_error(("unknown op '" + name + "'").c_str());
        if (tr_op->is_view) throw nb::value_error(("op '" + name + "' is a view: use Graph.view, reshape, permute or transpose").c_str());
        const size_t lo = pred ? 3 : (size_t)tr_op->n_src_min, hi = pred ? 3 : (size_t)tr_op->n_src_max;
        if (s.size() < lo || s.size() > hi)
            throw nb::value_error((name + ": expects " + std::to_string(lo) + (lo == hi ? "" : "-" + std::to_string(hi)) +
                                   " inputs").c_str());
        if (params.contains("prec") && !tr_op->takes_prec)
            throw nb::value_error((name + ": 'prec' is for weight products only").c_str());
        auto f32 = [&](ggml_tensor *x, const char *what) {
            if (x->type != GGML_TYPE_F32) throw nb::type_error((name + ": " + what + " must be F32").c_str());
        };
        ggml_tensor *r = nullptr;
        if (op == GGML_OP_ADD || op == GGML_OP_MUL) {
            f32(s[0], "a");
            f32(s[1], "b");
            if (!ggml_can_repeat(s[1], s[0])) throw nb::value_error((name + ": b cannot be broadcast to a").c_str());
            r = op == GGML_OP_ADD ? ggml_add(ctx, s[0], s[1]) : ggml_mul(ctx, s[0], s[1]);
        } else if (op == GGML_OP_SCALE) {
            f32(s[0], "a");
            r = ggml_scale(ctx, s[0], (float)fparam(params, "scale", 1.0));
        } else if (op == GGML_OP_RMS_NORM || op == GGML_OP_NORM) {
            f32(s[0], "a");
            const float eps = (float)fparam(params, "eps", op == GGML_OP_NORM ? 1e-5 : 1e-6);
            r = op == GGML_OP_NORM ? ggml_norm(ctx, s[0], eps) : ggml_rms_norm(ctx, s[0], eps);
        } else if (op == GGML_OP_RELU || op == GGML_OP_SILU || op == GGML_OP_GELU || op == GGML_OP_TANH) {
            f32(s[0], "a");
            r = op == GGML_OP_RELU ? ggml_relu(ctx, s[0]) : op == GGML_OP_SILU ? ggml_silu(ctx, s[0])
                : op == GGML_OP_GELU ? ggml_gelu(ctx, s[0]) : ggml_tanh(ctx, s[0]);
        } else if (op == GGML_OP_SWIGLU || op == GGML_OP_REGLU || op == GGML_OP_GEGLU) {
            f32(s[0], "a");
            f32(s[1], "b");
            if (!ggml_are_same_shape(s[0], s[1])) throw nb::value_error((name + ": a and b differ in shape").c_str());
            r = op == GGML_OP_SWIGLU ? ggml_swiglu(ctx, s[0], s[1])
                : op == GGML_OP_REGLU ? ggml_reglu(ctx, s[0], s[1]) : ggml_geglu(ctx, s[0], s[1]);
        } else if (op == GGML_OP_MUL_MAT) {
            f32(s[1], "b");
            if (s[0]->ne[0] != s[1]->ne[0]) throw nb::value_error("mul_mat: a and b differ in K (ne0)");
            if (s[1]->ne[2] % s[0]->ne[2] || s[1]->ne[3] % s[0]->ne[3]) throw nb::value_error("mul_mat: cannot broadcast a over b");
            if (!ggml_is_contiguous_rows(s[0])) throw nb::value_error("mul_mat: rows of a must be contiguous");
            r = ggml_mul_mat(ctx, s[0], s[1]);
        } else if (op == GGML_OP_GET_ROWS) {
            ggml_tensor *idx = s[1];
            if (idx->type != GGML_TYPE_I32 || ggml_n_dims(idx) != 1) throw nb::type_error("get_rows: indices must be 1-D int32");
            if (!ggml_is_contiguous_rows(s[0])) throw nb::value_error("get_rows: rows of a must be contiguous");
            const ggml_type_traits *tr = ggml_get_type_traits(s[0]->type);
            if (s[0]->type != GGML_TYPE_F32 && !tr->to_float) throw nb::type_error("get_rows: type has no to_float");
            if (idx->data) {  // indices are known now: check them before a kernel aborts
                for (int64_t i = 0; i < idx->ne[0]; i++) {
                    const int32_t v = *(const int32_t *)((const char *)idx->data + i * idx->nb[0]);
                    if (v < 0 || v >= s[0]->ne[1]) throw nb::index_error(("get_rows: index " + std::to_string(v) + " out of range").c_str());
                }
            }
            r = ggml_get_rows(ctx, s[0], idx);
        } else if (op == GGML_OP_ROPE) {
            f32(s[0], "a");
            const int n_dims = iparam(params, "n_dims", (int)s[0]->ne[0]);
            const int mode = iparam(params, "mode", 0);
            if (s[1]->type != GGML_TYPE_I32 || s[1]->ne[0] != s[0]->ne[2] || ggml_n_dims(s[1]) != 1)
                throw nb::value_error("rope: pos must be int32 [n_tokens] with n_tokens = ne2 of a");
            if (n_dims <= 0 || n_dims > s[0]->ne[0] || n_dims % 2) throw nb::value_error("rope: n_dims must be even, in (0, head_dim]");
            if (mode != 0 && mode != 2) throw nb::value_error("rope: mode must be 0 (normal) or 2 (neox)");
            ggml_tensor *ff = s.size() > 2 ? s[2] : nullptr;
            if (ff && (ff->type != GGML_TYPE_F32 || !ggml_is_contiguous(ff) || ggml_nelements(ff) < n_dims / 2))
                throw nb::value_error("rope: freq_factors must be contiguous float32 with n_dims/2 elements");
            r = ggml_rope_ext(ctx, s[0], s[1], ff, n_dims, mode, (float)fparam(params, "freq_base", 10000.0),
                              (float)fparam(params, "freq_scale", 1.0), (float)fparam(params, "attn_factor", 1.0));
        } else if (op == GGML_OP_SOFT_MAX) {
            f32(s[0], "a");
            ggml_tensor *mask = s.size() > 1 ? s[1] : nullptr;
            if (mask) {
                f32(mask, "mask");
                if (mask->ne[0] != s[0]->ne[0] || mask->ne[1] < s[0]->ne[1]) throw nb::value_error("soft_max: mask must be [ne0, >= ne1]");
            }
            r = ggml_soft_max_ext(ctx, s[0], mask, (float)fparam(params, "scale", 1.0));
        } else if (op == GGML_OP_ARGMAX) {
            f32(s[0], "a");
            if (s[0]->ne[2] != 1 || s[0]->ne[3] != 1) throw nb::value_error("argmax: a must be 2-D");
            r = ggml_argmax(ctx, s[0]);
        } else if (op == GGML_OP_TOP_K) {
            f32(s[0], "a");
            if (s[0]->ne[2] != 1 || s[0]->ne[3] != 1) throw nb::value_error("top_k: a must be 2-D");
            const int k = iparam(params, "k", 1);
            if (k < 1 || k > s[0]->ne[0]) throw nb::value_error("top_k: k must be in [1, n]");
            r = ggml_top_k(ctx, s[0], k);
        } else if (op == GGML_OP_MUL_MAT_ID) {
            ggml_tensor *as = s[0], *b = s[1], *ids = s[2];
            f32(b, "b");
            if (as->ne[3] != 1 || !ggml_is_contiguous_rows(as) || !has_dot(as->type))
                throw nb::value_error("mul_mat_id: as must be [n_expert, M, K] with contiguous rows of a multipliable type");
            if (b->ne[0] != as->ne[0] || b->ne[3] != 1) throw nb::value_error("mul_mat_id: b must be [T, 1 or n_used, K]");
            if (ids->type != GGML_TYPE_I32 || ids->ne[2] != 1 || ids->ne[3] != 1 || ids->ne[1] != b->ne[2] ||
                (b->ne[1] != 1 && b->ne[1] != ids->ne[0]))
                throw nb::value_error("mul_mat_id: ids must be int32 [T, n_used] with b [T, 1 or n_used, K]");
            if (ids->data)
                for (int64_t i = 0; i < ggml_nelements(ids); i++) {
                    const int32_t v = ((const int32_t *)ids->data)[i];
                    if (v < 0 || v >= as->ne[2]) throw nb::index_error(("mul_mat_id: expert id " + std::to_string(v) + " out of range").c_str());
                }
            if (s.size() > 3) {
                f32(s[3], "mask");
                if (s[3]->ne[0] != as->ne[1] || s[3]->ne[1] != ids->ne[0] || s[3]->ne[2] != ids->ne[1] || s[3]->ne[3] != 1)
                    throw nb::value_error("mul_mat_id: mask must be [T, n_used, M]");
                r = ggml_mul_mat_id_masked(ctx, as, b, ids, s[3]);
            } else {
                r = ggml_mul_mat_id(ctx, as, b, ids);
            }
        } else if (op == GGML_OP_CPY) {
            if (ggml_nelements(s[0]) != ggml_nelements(s[1])) throw nb::value_error("cpy: element counts differ");
            auto ok = [](ggml_type x) { return x == GGML_TYPE_F32 || x == GGML_TYPE_F16 || x == GGML_TYPE_BF16; };
            if (!ok(s[0]->type) || !ok(s[1]->type)) throw nb::type_error("cpy: types must be F32, F16 or BF16");
            r = ggml_cpy(ctx, s[0], s[1]);
        } else if (op == GGML_OP_DUP) {
            if (ggml_get_type_traits(s[0]->type)->is_quantized && !ggml_is_contiguous_rows(s[0]))
                throw nb::value_error("cont: quantized tensors need contiguous rows");
            r = ggml_cont(ctx, s[0]);
        } else if (op == GGML_OP_SPARSE_SELECT || pred) {
            ggml_tensor *x = s[pred ? 2 : 0];
            f32(x, pred ? "x" : "p");
            if (x->ne[2] != 1 || x->ne[3] != 1) throw nb::value_error((name + ": input must be 2-D [T, n]").c_str());
            const float thr = (float)fparam(params, "threshold", 0.0);
            if (pred) {
                if (!ggml_is_contiguous_rows(s[0]) || !ggml_is_contiguous_rows(s[1]))
                    throw nb::value_error("sparse_predict: fc1 and fc2 need contiguous rows");
                if (s[0]->ne[0] != x->ne[0]) throw nb::value_error("sparse_predict: fc1 [r, d] and x [T, d] differ in d");
                if (s[1]->ne[0] != s[0]->ne[1]) throw nb::value_error("sparse_predict: fc2 [n, r] and fc1 [r, d] differ in r");
                r = ggml_sparse_predict(ctx, s[0], s[1], x, thr);
            } else {
                r = iparam(params, "abs", 0) ? ggml_sparse_select_abs(ctx, x, thr) : ggml_sparse_select(ctx, x, thr);
            }
        } else if (op == GGML_OP_SPARSE_MASK) {
            f32(s[0], "a");
            if (s[0]->ne[2] != 1 || s[0]->ne[3] != 1) throw nb::value_error("sparse_mask: input must be 2-D [T, n]");
            r = ggml_sparse_mask(ctx, s[0], (float)fparam(params, "threshold", 0.0));
        } else if (op == GGML_OP_SPARSE_FFN) {
            ggml_tensor *w = s[0], *x = s[1], *idx = s[2], *wd = s.size() > 3 ? s[3] : nullptr;
            ggml_tensor *wg = s.size() > 4 ? s[4] : nullptr, *wu = s.size() > 5 ? s[5] : nullptr;  // plain gate, up
            if ((wg || wu) && !(wg && wu && wd)) throw nb::value_error("sparse_ffn_bundle: give w_down, w_gate and w_up together");
            for (ggml_tensor *q : {wg, wu})
                if (q && (q->type != w->type || q->ne[0] != w->ne[0] || q->ne[1] != w->ne[1] / 3 || q->ne[2] != 1 || q->ne[3] != 1))
                    throw nb::value_error("sparse_ffn_bundle: w_gate and w_up must be [n, d] of the bundle's type");
            const ggml_type_traits *tr = ggml_get_type_traits(w->type);
            if (!has_dot(w->type) || !tr->to_float) throw nb::type_error(("sparse_ffn_bundle: unsupported weight type " + std::string(tr->name)).c_str());
            if (wd && (wd->ne[0] != w->ne[1] / 3 || wd->ne[1] != w->ne[0] || wd->ne[2] != 1 || wd->ne[3] != 1 ||
                       !ggml_is_contiguous_rows(wd) || !has_dot(wd->type)))
                throw nb::value_error("sparse_ffn_bundle: w_down must be [d, n] (numpy order) for a bundle of [3n, d]");
            if (!ggml_is_contiguous_rows(w) || w->ne[2] != 1 || w->ne[3] != 1 || w->ne[1] % 3)
                throw nb::value_error("sparse_ffn_bundle: weight must be 2-D [3n, d] with contiguous rows");
            f32(x, "x");
            if (x->nb[0] != sizeof(float) || x->ne[0] != w->ne[0] || x->ne[2] != 1 || x->ne[3] != 1)
                throw nb::value_error("sparse_ffn_bundle: x must be [T, d]");
            if (x->ne[1] > GGML_SPARSE_FFN_MAX_T) throw nb::value_error("sparse_ffn_bundle: too many tokens");
            const int64_t n = w->ne[1] / 3;
            check_index_list(name, idx);
            int64_t begin, end;
            neuron_range(name, params, n, &begin, &end);
            const std::string act = p_str(params, "act", "swiglu");
            const ggml_op a = act == "swiglu" ? GGML_OP_SWIGLU : act == "reglu" ? GGML_OP_REGLU : act == "geglu" ? GGML_OP_GEGLU : GGML_OP_NONE;
            if (a == GGML_OP_NONE) throw nb::value_error("sparse_ffn_bundle: act must be 'swiglu', 'reglu' or 'geglu'");
            r = ggml_sparse_ffn_bundle(ctx, w, wg, wu, wd, x, idx, begin, end, a, iparam(params, "relu_up", 0) != 0);
        } else if (op == GGML_OP_MUL_MAT_SPARSE_ROWS || op == GGML_OP_SPARSE_DOWN) {
            const bool down = op == GGML_OP_SPARSE_DOWN;
            ggml_tensor *w = s[0], *x = s[1], *idx = s[2];
            const ggml_type_traits *tr = ggml_get_type_traits(w->type);
            if (down ? !tr->to_float : !has_dot(w->type)) throw nb::type_error((name + ": unsupported weight type " + tr->name).c_str());
            if (!ggml_is_contiguous_rows(w) || w->ne[2] != 1 || w->ne[3] != 1)
                throw nb::value_error((name + ": weight must be 2-D with contiguous rows").c_str());
            f32(x, down ? "h" : "x");
            if (x->nb[0] != sizeof(float) || x->ne[2] != 1 || x->ne[3] != 1) throw nb::value_error((name + ": activations must be 2-D").c_str());
            const int g = down ? 1 : iparam(params, "g", 1);  // mul_mat_sparse_rows: rows per neuron (bundle)
            if (g < 1 || w->ne[1] % g) throw nb::value_error((name + ": g must divide the weight's row count").c_str());
            const int64_t n = w->ne[1] / g;
            if (x->ne[0] != (down ? n : w->ne[0]))
                throw nb::value_error((name + (down ? ": h [T, n] and wt [n, d] differ in n" : ": x [T, d] and w [n, d] differ in d")).c_str());
            check_index_list(name, idx);
            int64_t begin, end;
            neuron_range(name, params, n, &begin, &end);
            ggml_tensor *wd = down && s.size() > 3 ? s[3] : nullptr;  // optional dense ffn_down [d, n] (numpy)
            const int mode = iparam(params, "mode", 0);  // sparse_down: 0 policy, 1 sparse, 2 dense
            if (wd) {
                if (!has_dot(wd->type)) throw nb::type_error(("sparse_down: unsupported w_down type " + std::string(ggml_type_name(wd->type))).c_str());
                if (wd->ne[0] != n || wd->ne[1] != w->ne[0] || wd->ne[2] != 1 || wd->ne[3] != 1 || !ggml_is_contiguous_rows(wd))
                    throw nb::value_error("sparse_down: w_down must be [d, n] (numpy order) for wt [n, d]");
            }
            if (mode < 0 || mode > 2) throw nb::value_error("sparse_down: mode must be 0 (policy), 1 (sparse) or 2 (dense)");
            r = down ? ggml_sparse_down(ctx, w, wd, x, idx, begin, end)
                     : ggml_mul_mat_sparse_rows_bundle(ctx, w, x, idx, begin, end, g);
            if (down) r->op_params[2] = mode;
        } else {
            throw nb::value_error(("op '" + name + "' has no graph binding").c_str());
        }
        if (tr_op->takes_prec && !pred) set_prec(r, params);
        return add(r);
    }

    void compute(const std::vector<int> &outputs, int n_threads, nb::object allocator) {
        if (outputs.empty()) throw nb::value_error("compute: no outputs");
        if (n_threads < 1 || n_threads > 256) throw nb::value_error("compute: n_threads must be in [1, 256]");
        if (n_computes >= kMaxComputes) throw std::runtime_error("compute: too many computes on one Graph");
        Allocator *al = &own;
        if (!allocator.is_none()) {
            al = nb::cast<Allocator *>(allocator);
            keep = allocator;  // our tensors now point into its buffer
        }
        ggml_cgraph *g = ggml_new_graph_custom(ctx, kGraphSize);
        n_computes++;
        for (int id : outputs) {
            ggml_set_output(t(id));
            ggml_build_forward_expand(g, t(id));
        }
        if (!ggml_gallocr_alloc_graph(al->a, g)) throw std::runtime_error("compute: graph allocation failed");
        int rc;
        {
            nb::gil_scoped_release nogil;
            rc = ggml_graph_compute_with_threads(g, n_threads);
        }
        if (rc != 0) throw std::runtime_error(("ggml_graph_compute failed with code " + std::to_string(rc)).c_str());
        last = g;
    }

    int n_nodes() const { return last ? ggml_graph_n_nodes(last) : 0; }

    // numpy-order shape of a tensor.
    std::vector<int64_t> shape(int id) const {
        ggml_tensor *x = t(id);
        int nd = ggml_n_dims(x);
        std::vector<int64_t> s;
        for (int i = nd - 1; i >= 0; i--) s.push_back(x->ne[i]);
        return s;
    }
    size_t nbytes(int id) const { return ggml_nbytes(t(id)); }

    // Copies a tensor (any strides) out as a contiguous numpy array: F32 ->
    // float32, I32 -> int32, F16/BF16 -> uint16 bits, quantized -> uint8 rows.
    nb::object get(int id) const {
        ggml_tensor *x = t(id);
        if (!x->data) throw std::runtime_error("get: tensor has no data (not computed yet?)");
        const ggml_type_traits *tr = ggml_get_type_traits(x->type);
        const int nd = ggml_n_dims(x);
        const size_t row = ggml_row_size(x->type, x->ne[0]);
        const int64_t nrows = ggml_nrows(x);
        char *out = (char *)malloc(row * (size_t)nrows + 1);
        if (!out) throw std::bad_alloc();
        const int64_t n_units = x->ne[0] / tr->blck_size;  // blocks (or elements) per row
        for (int64_t r = 0; r < nrows; r++) {
            const int64_t i1 = r % x->ne[1], i2 = (r / x->ne[1]) % x->ne[2], i3 = r / (x->ne[1] * x->ne[2]);
            const char *src = (const char *)x->data + i1 * x->nb[1] + i2 * x->nb[2] + i3 * x->nb[3];
            if (x->nb[0] == tr->type_size) {
                memcpy(out + r * row, src, row);
            } else {
                for (int64_t i = 0; i < n_units; i++) memcpy(out + r * row + i * tr->type_size, src + i * x->nb[0], tr->type_size);
            }
        }
        nb::capsule owner(out, [](void *p) noexcept { free(p); });
        size_t shp[5];
        size_t ndim = 0;
        for (int i = nd - 1; i >= 0; i--) shp[ndim++] = (size_t)x->ne[i];
        switch (x->type) {
            case GGML_TYPE_F32: return nb::cast(nb::ndarray<nb::numpy, float>(out, ndim, shp, owner));
            case GGML_TYPE_I32: return nb::cast(nb::ndarray<nb::numpy, int32_t>(out, ndim, shp, owner));
            case GGML_TYPE_F16:
            case GGML_TYPE_BF16: return nb::cast(nb::ndarray<nb::numpy, uint16_t>(out, ndim, shp, owner));
            default:
                shp[ndim - 1] = row;  // rows of raw bytes
                return nb::cast(nb::ndarray<nb::numpy, uint8_t>(out, ndim, shp, owner));
        }
    }
};

// A view spec for run_op: ("permute", a0, a1, a2, a3) | ("transpose",) |
// ("reshape", shape) | ("view", ne, nb, offset).
int apply_view(Graph &g, int id, nb::handle spec) {
    if (spec.is_none()) return id;
    nb::tuple tp = nb::cast<nb::tuple>(spec);
    if (tp.size() == 0) throw nb::value_error("view spec is empty");
    const std::string kind = nb::cast<std::string>(tp[0]);
    if (kind == "permute" && tp.size() == 5)
        return g.permute(id, nb::cast<int>(tp[1]), nb::cast<int>(tp[2]), nb::cast<int>(tp[3]), nb::cast<int>(tp[4]));
    if (kind == "transpose" && tp.size() == 1) return g.transpose(id);
    if (kind == "reshape" && tp.size() == 2) return g.reshape(id, nb::cast<std::vector<int64_t>>(tp[1]));
    if (kind == "view" && tp.size() == 4)
        return g.view(id, nb::cast<std::vector<int64_t>>(tp[1]), nb::cast<std::vector<size_t>>(tp[2]), nb::cast<size_t>(tp[3]));
    throw nb::value_error(("bad view spec '" + kind + "'").c_str());
}

nb::object run_op(const std::string &op, nb::list inputs, nb::dict params, int n_threads, nb::object views) {
    Graph g;
    std::vector<int> ids;
    for (size_t i = 0; i < inputs.size(); i++) {
        nb::handle h = inputs[i];
        int id;
        if (nb::isinstance<nb::tuple>(h)) {
            nb::tuple tp = nb::cast<nb::tuple>(h);
            if (tp.size() != 3) throw nb::value_error("raw input must be (bytes, type_id, shape)");
            id = g.input_raw(nb::cast<nb::bytes>(tp[0]), nb::cast<int>(tp[1]), nb::cast<std::vector<int64_t>>(tp[2]));
        } else {
            id = g.input(nb::cast<any_array>(h));
        }
        if (!views.is_none()) {
            nb::sequence vs = nb::cast<nb::sequence>(views);
            if (i < nb::len(vs)) id = apply_view(g, id, vs[i]);
        }
        ids.push_back(id);
    }
    const int out = g.op(op, ids, params);
    g.compute({out}, n_threads, nb::none());
    return g.get(out);
}

}  // namespace

void bind_graph(nb::module_ &m) {
    nb::class_<Allocator>(m, "GraphAllocator", "The liveness planner's buffer (ggml_gallocr), shareable between graphs.")
        .def(nb::init<>())
        .def("buffer_size", &Allocator::buffer_size);

    nb::class_<Graph>(m, "Graph", "A small ggml graph built op by op, for tests.")
        .def(nb::init<>())
        .def("input", &Graph::input, nb::arg("array"), "Input tensor from a float32/float16/int32 array; returns its id.")
        .def("input_raw", &Graph::input_raw, nb::arg("data"), nb::arg("type"), nb::arg("shape"),
             "Input tensor of any type from raw bytes; shape in numpy order, innermost in elements.")
        .def("permute", &Graph::permute)
        .def("transpose", &Graph::transpose)
        .def("reshape", &Graph::reshape, nb::arg("id"), nb::arg("shape"))
        .def("view", &Graph::view, nb::arg("id"), nb::arg("ne"), nb::arg("nb"), nb::arg("offset"),
             "View with ggml-order ne, byte strides nb[1..], byte offset.")
        .def("op", &Graph::op, nb::arg("name"), nb::arg("srcs"), nb::arg("params") = nb::dict())
        .def("compute", &Graph::compute, nb::arg("outputs"), nb::arg("n_threads") = 1, nb::arg("allocator") = nb::none())
        .def("get", &Graph::get)
        .def("shape", &Graph::shape)
        .def("nbytes", &Graph::nbytes)
        .def("n_nodes", &Graph::n_nodes)
        .def("buffer_size", [](const Graph &g) { return g.own.buffer_size(); });

    m.def("run_op", &run_op, nb::arg("op"), nb::arg("inputs"), nb::arg("params") = nb::dict(), nb::arg("n_threads") = 1,
          nb::arg("views") = nb::none(),
          "Run one op on inputs (numpy arrays or (bytes, type_id, shape) tuples, each optionally viewed "
          "per `views`) and return the result as a numpy array.");
}
