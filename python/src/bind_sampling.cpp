// The sampler chain, chat templates and stop strings for Python.
#include "bind.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <stdexcept>

#include "llama-chat.h"
#include "llama-sampling.h"

namespace {

using logits_in = nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

template <typename T>
nb::ndarray<nb::numpy, T, nb::ndim<1>> to_numpy(std::vector<T> && v) {
    auto * heap = new std::vector<T>(std::move(v));
    nb::capsule owner(heap, [](void * p) noexcept { delete static_cast<std::vector<T> *>(p); });
    return nb::ndarray<nb::numpy, T, nb::ndim<1>>(heap->data(), {heap->size()}, owner);
}

std::vector<pinfer::chat_message> to_messages(const nb::list & messages) {
    std::vector<pinfer::chat_message> out;
    out.reserve(nb::len(messages));
    size_t i = 0;
    for (nb::handle h : messages) {
        if (!nb::isinstance<nb::dict>(h)) {
            throw nb::type_error(("messages[" + std::to_string(i) + "] is not a dict").c_str());
        }
        nb::dict d = nb::borrow<nb::dict>(h);
        pinfer::chat_message m;
        for (const char * key : {"role", "content"}) {
            if (!d.contains(key)) {
                throw nb::value_error(("messages[" + std::to_string(i) + "] has no '" + key + "'").c_str());
            }
            nb::handle v = d[key];
            if (!nb::isinstance<nb::str>(v)) {
                throw nb::type_error(("messages[" + std::to_string(i) + "]['" + key + "'] is not a str").c_str());
            }
            (std::strcmp(key, "role") == 0 ? m.role : m.content) = nb::cast<std::string>(v);
        }
        out.push_back(std::move(m));
        ++i;
    }
    return out;
}

// Code points in the first n bytes of valid UTF-8.
size_t utf8_chars(const std::string & s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; ++i) c += (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80;
    return c;
}

// The one sampler class for Python: the C++ chain of llama-sampling.h. With
// n_vocab > 0 (pinfer.Llama passes its model's) logits and accepted token ids are
// checked against that vocabulary.
class Sampler {
  public:
    Sampler(const pinfer::sampler_params & p, int32_t n_vocab) : s_(p), n_vocab_(n_vocab) {}

    int32_t sample(const logits_in & logits) {
        check(logits);
        nb::gil_scoped_release nogil;
        return s_.sample(logits.data(), logits.shape(0));
    }

    nb::tuple candidates(const logits_in & logits) {
        check(logits);
        s_.apply(logits.data(), logits.shape(0));
        const size_t n = s_.n_candidates();
        std::vector<int32_t> ids(n);
        std::vector<float> lg(n), pr(n);
        for (size_t i = 0; i < n; ++i) {
            ids[i] = s_.candidates()[i].id;
            lg[i] = s_.candidates()[i].logit;
            pr[i] = s_.candidates()[i].p;
        }
        return nb::make_tuple(to_numpy(std::move(ids)), to_numpy(std::move(lg)), to_numpy(std::move(pr)));
    }

    void accept(int32_t token) {
        if (token < 0 || (n_vocab_ > 0 && token >= n_vocab_)) {
            throw nb::value_error(("token id " + std::to_string(token) + " is out of range").c_str());
        }
        s_.accept(token);
    }

    void reset() { s_.reset(); }
    uint32_t seed() const { return s_.seed(); }
    double mirostat_mu() const { return s_.mirostat_mu(); }
    int32_t n_vocab() const { return n_vocab_; }

  private:
    void check(const logits_in & logits) const {
        if (n_vocab_ > 0 && logits.shape(0) != size_t(n_vocab_)) {
            throw nb::value_error(("logits have " + std::to_string(logits.shape(0)) + " entries, the vocabulary " +
                                   std::to_string(n_vocab_)).c_str());
        }
    }

    pinfer::sampler s_;
    int32_t n_vocab_;
};

}  // namespace

void bind_sampling(nb::module_ & m) {
    const pinfer::sampler_params d;
    nb::class_<Sampler>(m, "Sampler",
        "Sampler chain: penalties -> top-k -> typical -> top-p -> min-p -> temperature -> pick,\n"
        "or with mirostat 1/2: penalties -> temperature -> mirostat -> pick (mu updated).\n"
        "temperature <= 0 is greedy. seed: 0 .. 2**32 - 1; -1 (or 2**32 - 1, the C API's\n"
        "value) draws a random one. n_vocab > 0 checks logits and tokens against it.\n"
        "sample() does not record the token: call accept().")
        .def("__init__",
             [](Sampler * self, float temperature, int32_t top_k, float top_p, float min_p,
                float repeat_penalty, int32_t repeat_last_n, float frequency_penalty,
                float presence_penalty, int64_t seed, size_t min_keep, float typical_p, int32_t mirostat,
                float mirostat_tau, float mirostat_eta, int32_t n_vocab) {
                 if (seed < -1 || seed > int64_t(pinfer::SAMPLER_RANDOM_SEED)) {
                     throw nb::value_error("Sampler: seed must be in [0, 2**32 - 1], or -1 for a random seed");
                 }
                 if (n_vocab < 0) throw nb::value_error("Sampler: n_vocab must be >= 0 (0: any size)");
                 pinfer::sampler_params p;
                 p.temp = temperature;
                 p.top_k = top_k;
                 p.top_p = top_p;
                 p.min_p = min_p;
                 p.repeat_penalty = repeat_penalty;
                 p.repeat_last_n = repeat_last_n;
                 p.frequency_penalty = frequency_penalty;
                 p.presence_penalty = presence_penalty;
                 p.seed = seed == -1 ? pinfer::SAMPLER_RANDOM_SEED : uint32_t(seed);
                 p.min_keep = min_keep;
                 p.typical_p = typical_p;
                 p.mirostat = mirostat;
                 p.mirostat_tau = mirostat_tau;
                 p.mirostat_eta = mirostat_eta;
                 new (self) Sampler(p, n_vocab);
             },
             nb::kw_only(), nb::arg("temperature") = d.temp, nb::arg("top_k") = d.top_k, nb::arg("top_p") = d.top_p,
             nb::arg("min_p") = d.min_p, nb::arg("repeat_penalty") = d.repeat_penalty,
             nb::arg("repeat_last_n") = d.repeat_last_n, nb::arg("frequency_penalty") = d.frequency_penalty,
             nb::arg("presence_penalty") = d.presence_penalty, nb::arg("seed") = -1, nb::arg("min_keep") = d.min_keep,
             nb::arg("typical_p") = d.typical_p, nb::arg("mirostat") = d.mirostat,
             nb::arg("mirostat_tau") = d.mirostat_tau, nb::arg("mirostat_eta") = d.mirostat_eta,
             nb::arg("n_vocab") = 0)
        .def("sample", &Sampler::sample, nb::arg("logits"),
             "Pick a token id from float32 logits of shape [n_vocab]; releases the GIL.")
        .def("candidates", &Sampler::candidates, nb::arg("logits"),
             "Run the chain without the pick: (ids, logits, probs) of the survivors, where\n"
             "logits are after penalties and temperature and probs their softmax.")
        .def("accept", &Sampler::accept, nb::arg("token"), "Record a token for the penalties.")
        .def("reset", &Sampler::reset, "Forget the history and restart the random stream.")
        .def_prop_ro("seed", &Sampler::seed, "The seed in use (the drawn one for a random seed).")
        .def_prop_ro("n_vocab", &Sampler::n_vocab, "The vocabulary checked against (0: none).")
        .def_prop_ro("mirostat_mu", &Sampler::mirostat_mu, "mirostat's current surprise bound (bits).");

    m.def("apply_chat_template",
          [](const std::string & tmpl, const nb::list & messages, bool add_generation_prompt,
             const std::string & bos_token, const std::string & eos_token) {
              std::string out, err;
              if (!pinfer::chat_apply_template(tmpl, to_messages(messages), add_generation_prompt, out, err,
                                               bos_token, eos_token)) {
                  throw nb::value_error(err.c_str());
              }
              return out;
          },
          nb::arg("template"), nb::arg("messages"), nb::arg("add_generation_prompt") = false,
          nb::arg("bos_token") = "", nb::arg("eos_token") = "",
          "Format [{'role', 'content'}, ...] with the family of a chat template (jinja text\n"
          "or a family name). Raises ValueError for an unrecognised template.");

    m.def("chat_template_family",
          [](const std::string & tmpl) { return std::string(pinfer::chat_family_name(pinfer::chat_detect(tmpl))); },
          nb::arg("template"), "The detected family name, or 'unknown'.");

    m.def("find_stop",
          [](const std::string & text, const std::vector<std::string> & stops) {
              const pinfer::stop_result r = pinfer::find_stop(text, stops);
              return std::make_tuple(utf8_chars(text, r.emit), r.which);
          },
          nb::arg("text"), nb::arg("stops"),
          "(emit, stop_index) for streamed text: emit characters are safe to show now;\n"
          "stop_index >= 0 means stops[stop_index] ends the text at emit.");
    m.def("find_stop",
          [](nb::bytes text, const std::vector<std::string> & stops) {
              const pinfer::stop_result r =
                  pinfer::find_stop(std::string_view(text.c_str(), text.size()), stops);
              return std::make_tuple(r.emit, r.which);
          },
          nb::arg("text"), nb::arg("stops"),
          "Bytes form: emit is a byte count and also holds back an incomplete UTF-8 tail.");
}
