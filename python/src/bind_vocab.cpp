// Python access to the tokenizers (src/llama-vocab.h).
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <stdexcept>

#include "bind.h"
#include "llama-vocab.h"

using pinfer::llama_vocab;
using pinfer::vocab_params;

namespace {

// str -> UTF-8; bytes as they are
std::string text_bytes(nb::handle h) {
    if (nb::isinstance<nb::str>(h)) {
        Py_ssize_t n = 0;
        const char *s = PyUnicode_AsUTF8AndSize(h.ptr(), &n);
        if (!s) throw nb::python_error();
        return std::string(s, size_t(n));
    }
    if (nb::isinstance<nb::bytes>(h)) {
        nb::bytes b = nb::borrow<nb::bytes>(h);
        return std::string(b.c_str(), b.size());
    }
    throw nb::type_error("text must be str or bytes");
}

int32_t special_id(const nb::dict &d, const char *name) {
    if (!d.contains(name)) return -1;
    nb::object v = d[name];
    return v.is_none() ? -1 : nb::cast<int32_t>(v);
}

}  // namespace

void bind_vocab(nb::module_ &m) {
    nb::class_<llama_vocab>(m, "Vocab",
        "Tokenizer built from GGUF tokenizer metadata (model 'gpt2' byte-level BPE or 'llama' SentencePiece BPE).")
        .def("__init__",
             [](llama_vocab *self, std::string model, std::string pre, std::vector<std::string> tokens,
                std::vector<float> scores, std::vector<int32_t> types, std::vector<std::string> merges,
                nb::dict special, bool add_bos, bool add_eos, bool add_space_prefix) {
                 static const char *const known[] = {"bos", "eos", "unk", "pad", "sep", "eot", "eom"};
                 for (auto [k, v] : special) {
                     std::string key = nb::cast<std::string>(k);
                     bool ok = false;
                     for (const char *n : known) ok |= key == n;
                     if (!ok) throw std::runtime_error("vocab: unknown special token kind '" + key + "'");
                 }
                 vocab_params p;
                 p.model = std::move(model);
                 p.pre = std::move(pre);
                 p.tokens = std::move(tokens);
                 p.scores = std::move(scores);
                 p.types = std::move(types);
                 p.merges = std::move(merges);
                 p.bos = special_id(special, "bos");
                 p.eos = special_id(special, "eos");
                 p.unk = special_id(special, "unk");
                 p.pad = special_id(special, "pad");
                 p.sep = special_id(special, "sep");
                 p.eot = special_id(special, "eot");
                 p.eom = special_id(special, "eom");
                 p.add_bos = add_bos;
                 p.add_eos = add_eos;
                 p.add_space_prefix = add_space_prefix;
                 new (self) llama_vocab(std::move(p));
             },
             nb::arg("model"), nb::arg("pre"), nb::arg("tokens"), nb::arg("scores"), nb::arg("types"),
             nb::arg("merges"), nb::arg("special") = nb::dict(), nb::arg("add_bos") = false,
             nb::arg("add_eos") = false, nb::arg("add_space_prefix") = false)
        .def("tokenize",
             [](const llama_vocab &v, nb::handle text, bool add_special, bool parse_special) {
                 std::string s = text_bytes(text);
                 nb::gil_scoped_release release;
                 return v.tokenize(s, add_special, parse_special);
             },
             nb::arg("text"), nb::arg("add_special") = true, nb::arg("parse_special") = false)
        .def("detokenize",
             [](const llama_vocab &v, const std::vector<int32_t> &ids, bool remove_special, bool unparse_special,
                bool as_bytes) -> nb::object {
                 std::string s;
                 {
                     nb::gil_scoped_release release;
                     s = v.detokenize(ids, remove_special, unparse_special);
                 }
                 if (as_bytes) return nb::bytes(s.data(), s.size());
                 // token boundaries may split a UTF-8 sequence: replace, never fail
                 PyObject *o = PyUnicode_DecodeUTF8(s.data(), Py_ssize_t(s.size()), "replace");
                 if (!o) throw nb::python_error();
                 return nb::steal(o);
             },
             nb::arg("ids"), nb::arg("remove_special") = false, nb::arg("unparse_special") = false,
             nb::arg("as_bytes") = false,
             "Text of the ids: str (invalid UTF-8 replaced), or the exact bytes with as_bytes=True.")
        .def("token_to_piece",
             [](const llama_vocab &v, int32_t id, bool special) {
                 const std::string &p = v.token_to_piece(id, special);
                 return nb::bytes(p.data(), p.size());
             },
             nb::arg("id"), nb::arg("special") = false)
        .def("pretokenize",
             [](const llama_vocab &v, nb::handle text) {
                 std::string s = text_bytes(text);
                 std::vector<std::pair<size_t, size_t>> r;
                 {
                     nb::gil_scoped_release release;
                     r = v.pretokenize(s);
                 }
                 nb::list out;
                 for (auto [a, b] : r) out.append(nb::bytes(s.data() + a, b - a));
                 return out;
             },
             nb::arg("text"), "The pre-tokenizer's split of the text, as bytes pieces.")
        .def_prop_ro("n_vocab", &llama_vocab::n_tokens)
        .def("__len__", &llama_vocab::n_tokens)
        .def_prop_ro("bos", &llama_vocab::bos)
        .def_prop_ro("eos", &llama_vocab::eos)
        .def_prop_ro("eot", &llama_vocab::eot)
        .def_prop_ro("unk", &llama_vocab::unk)
        .def_prop_ro("pad", &llama_vocab::pad)
        .def_prop_ro("add_bos", &llama_vocab::add_bos)
        .def_prop_ro("add_eos", &llama_vocab::add_eos)
        .def_prop_ro("model", &llama_vocab::model)
        .def_prop_ro("pre", &llama_vocab::pre)
        .def("is_eog", &llama_vocab::is_eog, nb::arg("id"))
        .def("token_text", [](const llama_vocab &v, int32_t id) {
                 const std::string &t = v.token_text(id);
                 return nb::bytes(t.data(), t.size());
             }, nb::arg("id"))
        .def("token_score", &llama_vocab::token_score, nb::arg("id"))
        .def("token_type", &llama_vocab::token_type, nb::arg("id"))
        .def("text_to_token", &llama_vocab::text_to_token, nb::arg("text"));
}
