// pinfer-cli: generate text from a prompt, or chat, with a GGUF model.
//
//   pinfer-cli -m model.gguf -p "Once upon a time" -n 128
//   pinfer-cli -m model.gguf -cnv -sys "You are terse."
//
// Generated text goes to stdout as it is produced; logs, errors and the timing
// summary go to stderr. Only the public C API (pinfer.h) is used.
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "pinfer.h"

#ifndef PINFER_CLI_VERSION
#define PINFER_CLI_VERSION "unknown"  // CMake passes pyproject.toml's version
#endif

namespace {

// The embedded default model: $PINFER_DEFAULT_MODEL, else the copy installed
// beside this executable (<prefix>/share/pinfer/, where pip puts it), else the
// source tree's (a development build). Empty if none exists.
std::string default_model_path() {
    const char *env = getenv("PINFER_DEFAULT_MODEL");
    if (env && *env) return env;
    std::vector<std::string> candidates;
    char exe[4096];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        std::string dir(exe, (size_t)n);
        dir = dir.substr(0, dir.find_last_of('/'));
        candidates.push_back(dir + "/../share/pinfer/" PINFER_DEFAULT_MODEL_NAME);
    }
#ifdef PINFER_SOURCE_DIR
    candidates.push_back(PINFER_SOURCE_DIR "/models/" PINFER_DEFAULT_MODEL_NAME);
#endif
    for (const std::string &c : candidates)
        if (access(c.c_str(), R_OK) == 0) return c;
    return "";
}

struct cli_params {
    std::string model;
    std::string prompt;
    std::string prompt_file;
    std::string system_prompt;
    bool have_prompt = false;
    bool have_system = false;
    int32_t n_predict = -1;
    int32_t n_ctx = 0;
    int32_t n_threads = 0;
    int32_t n_batch = 512;
    int64_t seed = -1;
    bool escape = false;
    bool display_prompt = true;
    bool conversation = false;
    bool verbose = false;
    std::string cache_type;  // "" (the library's default), "f16" or "f32"
    std::string precision = "high";
    std::string sparse = "off";  // FFN mode: off, exact, predictor, threshold, auto
    bool sparse_stats = false;
    bool sparse_verify = false;
    double vram_budget_gib = -1;  // --vram-budget: < 0 = not given
    std::string device = "cpu";   // --device: cpu, sim (cuda when built with it)
    int32_t n_gpu_layers = -1;    // -ngl: -1 = not given (all that fit on a device)
    std::string offload = "neurons";  // --offload: neurons (hybrid) or layers (whole layers, as llama.cpp)
    bool ignore_eos = false;          // --ignore-eos: end-of-generation tokens are never sampled
    bool log_disable = false;         // --log-disable: no notices or timings on stderr
    std::vector<std::string> reverse_prompts;  // -r: generation stops once the text ends with one
    std::vector<std::string> no_effect;        // flags accepted for llama-cli's sake (-fa, --mlock, --no-mmap)
    pinfer_sampler_params sampling = pinfer_sampler_default_params();
};

// Raised for command-line mistakes: the message is printed with the usage.
struct usage_error {
    std::string msg;
};

void print_usage(FILE *out, const char *argv0) {
    const pinfer_sampler_params d = pinfer_sampler_default_params();
    fprintf(out,
            "usage: %s -m MODEL.gguf [-p PROMPT | -f FILE] [options]\n"
            "\n"
            "Generate text from a prompt, or chat (-cnv), with a GGUF model.\n"
            "\n"
            "options:\n"
            "  -h,   --help                show this help and exit\n"
            "  -m,   --model FNAME         model file (default: $PINFER_DEFAULT_MODEL, else the embedded model)\n"
            "  -p,   --prompt TEXT         prompt to start generation with\n"
            "  -f,   --file FNAME          read the prompt from a file\n"
            "  -e,   --escape              process escapes (\\n, \\t, \\\\, \\\", \\xNN ...) in the prompt\n"
            "        --no-display-prompt   don't echo the prompt before the generated text\n"
            "  -n,   --n-predict N         tokens to generate (default: -1 = until end of text or context full)\n"
            "  -c,   --ctx-size N          context size (default: 0 = the model's, at most 4096)\n"
            "  -b,   --batch-size N        max tokens per evaluation batch (default: 512)\n"
            "  -t,   --threads N           threads (default: number of cores)\n"
            "  -s,   --seed N              RNG seed (default: -1 = random)\n"
            "        --temp X              temperature, 0 = greedy (default: %.2f)\n"
            "        --top-k N             top-k sampling, 0 = off (default: %d)\n"
            "        --top-p X             top-p sampling, 1.0 = off (default: %.2f)\n"
            "        --min-p X             min-p sampling, 0.0 = off (default: %.2f)\n"
            "        --repeat-penalty X    penalize repeated tokens, 1.0 = off (default: %.2f)\n"
            "        --repeat-last-n N     tokens considered for penalties, -1 = context size (default: %d)\n"
            "        --presence-penalty X  presence penalty, 0.0 = off (default: %.2f)\n"
            "        --frequency-penalty X frequency penalty, 0.0 = off (default: %.2f)\n"
            "        --typical X           locally typical sampling, 1.0 = off (default: %.2f)\n"
            "        --mirostat N          mirostat 1 or 2, 0 = off (default: %d); replaces top-k/p, min-p, typical\n"
            "        --mirostat-lr X       mirostat learning rate eta (default: %.2f)\n"
            "        --mirostat-ent X      mirostat target entropy tau (default: %.2f)\n"
            "  -cnv, --conversation        chat: read user turns from stdin, apply the model's chat\n"
            "                              template; '/exit' or end of input ends (-p is the first turn)\n"
            "  -sys, --system-prompt TEXT  system message for --conversation\n"
            "  -ctk, --cache-type-k TYPE   KV cache type, f16 or f32 (default: f16); -ctv the same\n"
            "        --precision P         activations meeting quantized weights: high (~16 bits, matches\n"
            "                              a float reference; default) or fast (8 bits as llama.cpp)\n"
            "        --sparse MODE         FFN mode: off (default), exact, predictor, threshold, auto\n"
            "        --sparse-stats        print per-layer active fraction and predictor cost at the end\n"
            "        --sparse-verify       also run the dense model: predictor recall, logit difference\n"
            "        --device DEV          where hot layers and neurons run: cpu (default), cuda (an NVIDIA\n"
            "                              GPU, builds with PINFER_CUDA) or sim, a simulated GPU that\n"
            "                              shows the plan and its traffic\n"
            "  -ngl, --n-gpu-layers N      layers on the device, in order (default: all that fit)\n"
            "        --offload MODE        neurons (default: attention, then hot FFN prefixes per layer, the\n"
            "                              cold neurons on the CPU) or layers (whole layers, as llama.cpp)\n"
            "        --vram-budget GIB     device memory to use (default: all of it); with --device cpu:\n"
            "                              the model's neuron placement for this budget\n"
            "                              (--verbose: the plan, GPU neurons per layer, traffic per token)\n"
            "        --verbose             print model and run details to stderr\n"
            "  -no-cnv, --no-conversation  plain completion of -p (the default)\n"
            "        --ignore-eos          never sample an end-of-generation token (run to -n or a full context)\n"
            "  -r,   --reverse-prompt TEXT stop once the generated text ends with TEXT (repeatable; in -cnv\n"
            "                              it ends the reply)\n"
            "        --log-disable         print no notices or timings to stderr\n"
            "        --version             print the version and exit\n"
            "  -fa,  --flash-attn [on|off|auto], --mlock, --no-mmap: accepted, no effect (one attention\n"
            "                              kernel; weights are always memory-mapped, never locked)\n",
            argv0, d.temperature, d.top_k, d.top_p, d.min_p, d.repeat_penalty, d.repeat_last_n,
            d.presence_penalty, d.frequency_penalty, d.typical_p, d.mirostat, d.mirostat_eta, d.mirostat_tau);
}

// ---- strict number parsing: the whole argument must be a number in range ----

long long parse_int(const std::string &flag, const char *s, long long lo, long long hi) {
    errno = 0;
    char *end = nullptr;
    long long v = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0' || errno == ERANGE)
        throw usage_error{"invalid integer for " + flag + ": '" + s + "'"};
    if (v < lo || v > hi)
        throw usage_error{"value for " + flag + " out of range [" + std::to_string(lo) + ", " + std::to_string(hi) +
                          "]: " + s};
    return v;
}

float parse_float(const std::string &flag, const char *s, float lo, float hi) {
    errno = 0;
    char *end = nullptr;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || errno == ERANGE || !std::isfinite(v))
        throw usage_error{"invalid number for " + flag + ": '" + s + "'"};
    if (v < lo || v > hi) {
        char buf[160];
        snprintf(buf, sizeof buf, "value for %s out of range [%g, %g]: %s", flag.c_str(), lo, hi, s);
        throw usage_error{buf};
    }
    return (float)v;
}

// Replaces backslash escapes as C does: \n \t \r \a \b \f \v \\ \' \" \? \0 \xNN.
std::string process_escapes(const std::string &in) {
    std::string out;
    out.reserve(in.size());
    for (size_t i = 0; i < in.size(); i++) {
        if (in[i] != '\\' || i + 1 == in.size()) {
            out += in[i];
            continue;
        }
        char c = in[++i];
        switch (c) {
            case 'n': out += '\n'; break;
            case 't': out += '\t'; break;
            case 'r': out += '\r'; break;
            case 'a': out += '\a'; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'v': out += '\v'; break;
            case '\\': out += '\\'; break;
            case '\'': out += '\''; break;
            case '"': out += '"'; break;
            case '?': out += '?'; break;
            case '0': out += '\0'; break;
            case 'x': {
                int v = 0, nd = 0;
                while (nd < 2 && i + 1 < in.size() && isxdigit((unsigned char)in[i + 1])) {
                    char h = in[++i];
                    v = v * 16 + (isdigit((unsigned char)h) ? h - '0' : (tolower((unsigned char)h) - 'a' + 10));
                    nd++;
                }
                if (nd == 0) out += "\\x";  // not an escape: keep as written
                else out += (char)v;
                break;
            }
            default:  // unknown escape: keep both characters
                out += '\\';
                out += c;
        }
    }
    return out;
}

cli_params parse_args(int argc, char **argv) {
    cli_params p;
    std::string seen_prompt_flag;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        // Fetches the value of a flag that takes one.
        auto value = [&]() -> const char * {
            if (i + 1 >= argc) throw usage_error{"missing value for " + a};
            return argv[++i];
        };
        if (a == "-h" || a == "--help") {
            print_usage(stdout, argv[0]);
            exit(0);
        } else if (a == "-m" || a == "--model") {
            p.model = value();
        } else if (a == "-p" || a == "--prompt") {
            p.prompt = value();
            p.have_prompt = true;
            if (!p.prompt_file.empty()) throw usage_error{"give either -p or -f, not both"};
        } else if (a == "-f" || a == "--file") {
            p.prompt_file = value();
            if (p.have_prompt) throw usage_error{"give either -p or -f, not both"};
        } else if (a == "-n" || a == "--n-predict") {
            p.n_predict = (int32_t)parse_int(a, value(), -1, INT32_MAX);
        } else if (a == "-c" || a == "--ctx-size") {
            p.n_ctx = (int32_t)parse_int(a, value(), 0, 1 << 24);
        } else if (a == "-t" || a == "--threads") {
            p.n_threads = (int32_t)parse_int(a, value(), -1, 1024);
        } else if (a == "-b" || a == "--batch-size") {
            p.n_batch = (int32_t)parse_int(a, value(), 1, 1 << 20);
        } else if (a == "-s" || a == "--seed") {
            p.seed = parse_int(a, value(), -1, (long long)UINT32_MAX - 1);
        } else if (a == "--temp") {
            p.sampling.temperature = parse_float(a, value(), -1e9f, 1e9f);
        } else if (a == "--top-k") {
            p.sampling.top_k = (int32_t)parse_int(a, value(), INT32_MIN, INT32_MAX);
        } else if (a == "--top-p") {
            p.sampling.top_p = parse_float(a, value(), 0.0f, 1e9f);
        } else if (a == "--min-p") {
            p.sampling.min_p = parse_float(a, value(), -1e9f, 1.0f);
        } else if (a == "--repeat-penalty") {
            p.sampling.repeat_penalty = parse_float(a, value(), 0.0f, 1e9f);
        } else if (a == "--repeat-last-n") {
            p.sampling.repeat_last_n = (int32_t)parse_int(a, value(), -1, INT32_MAX);
        } else if (a == "--presence-penalty") {
            p.sampling.presence_penalty = parse_float(a, value(), -1e9f, 1e9f);
        } else if (a == "--frequency-penalty") {
            p.sampling.frequency_penalty = parse_float(a, value(), -1e9f, 1e9f);
        } else if (a == "--typical") {
            p.sampling.typical_p = parse_float(a, value(), 0.0f, 1e9f);
        } else if (a == "--mirostat") {
            p.sampling.mirostat = (int32_t)parse_int(a, value(), 0, 2);
        } else if (a == "--mirostat-lr") {
            p.sampling.mirostat_eta = parse_float(a, value(), -1e9f, 1e9f);
        } else if (a == "--mirostat-ent") {
            p.sampling.mirostat_tau = parse_float(a, value(), -1e9f, 1e9f);
        } else if (a == "-e" || a == "--escape") {
            p.escape = true;
        } else if (a == "--no-display-prompt") {
            p.display_prompt = false;
        } else if (a == "-cnv" || a == "--conversation") {
            p.conversation = true;
        } else if (a == "-sys" || a == "--system-prompt") {
            p.system_prompt = value();
            p.have_system = true;
        } else if (a == "-ctk" || a == "--cache-type-k" || a == "-ctv" || a == "--cache-type-v") {
            // One type serves keys and values.
            std::string t = value();
            if (t != "f16" && t != "f32") throw usage_error{"invalid cache type for " + a + ": '" + t + "' (f16 or f32)"};
            if (!p.cache_type.empty() && p.cache_type != t)
                throw usage_error{"the K and V caches must have the same type (got " + p.cache_type + " and " + t + ")"};
            p.cache_type = t;
        } else if (a == "--precision") {
            p.precision = value();
            if (pinfer_precision_from_name(p.precision.c_str()) < 0)
                throw usage_error{"invalid precision '" + p.precision + "' (high or fast)"};
        } else if (a == "--sparse") {
            p.sparse = value();
            if (pinfer_sparse_mode_from_name(p.sparse.c_str()) < 0)
                throw usage_error{"invalid sparse mode '" + p.sparse + "' (off, exact, predictor, threshold, auto)"};
        } else if (a == "--sparse-stats") {
            p.sparse_stats = true;
        } else if (a == "--sparse-verify") {
            p.sparse_verify = true;
        } else if (a == "--vram-budget") {
            const std::string v = value();
            errno = 0;
            char *end = nullptr;
            const double g = strtod(v.c_str(), &end);  // double: the solver rounds GiB * 2^30 the same way
            if (v.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(g) || g < 0 || g > 1e6)
                throw usage_error{"invalid VRAM budget for " + a + ": '" + v + "' (GiB, >= 0)"};
            p.vram_budget_gib = g;
        } else if (a == "--device") {
            p.device = value();
#ifdef PINFER_CUDA
            if (p.device != "cpu" && p.device != "sim" && p.device != "cuda")
                throw usage_error{"unknown device '" + p.device + "' (cpu, sim, cuda)"};
#else
            if (p.device == "cuda")
                throw usage_error{"this build has no CUDA backend (install with -C cmake.define.PINFER_CUDA=ON); devices: cpu, sim"};
            if (p.device != "cpu" && p.device != "sim")
                throw usage_error{"unknown device '" + p.device + "' (cpu, sim)"};
#endif
        } else if (a == "--offload") {
            p.offload = value();
            if (p.offload != "neurons" && p.offload != "layers")
                throw usage_error{"invalid --offload '" + p.offload + "' (neurons, layers)"};
        } else if (a == "-ngl" || a == "--n-gpu-layers" || a == "--gpu-layers") {
            p.n_gpu_layers = parse_int(a, value(), 0, 1 << 20);
        } else if (a == "--verbose") {
            p.verbose = true;
        } else if (a == "-no-cnv" || a == "--no-conversation") {
            p.conversation = false;
        } else if (a == "--ignore-eos") {
            p.ignore_eos = true;
        } else if (a == "-r" || a == "--reverse-prompt") {
            std::string r = value();
            if (r.empty()) throw usage_error{a + " needs a non-empty text"};
            p.reverse_prompts.push_back(r);
        } else if (a == "--log-disable") {
            p.log_disable = true;
        } else if (a == "--version") {
            printf("pinfer-cli %s\n", PINFER_CLI_VERSION);
            exit(0);
        } else if (a == "-fa" || a == "--flash-attn" || a == "--mlock" || a == "--no-mmap") {
            // llama-cli's newer -fa takes on/off/auto; the older one is a bare flag.
            if ((a == "-fa" || a == "--flash-attn") && i + 1 < argc &&
                (!strcmp(argv[i + 1], "on") || !strcmp(argv[i + 1], "off") || !strcmp(argv[i + 1], "auto")))
                ++i;
            p.no_effect.push_back(a);
        } else if (a == "-" || a.empty() || a[0] != '-') {
            throw usage_error{"unexpected argument: '" + a + "'"};
        } else {
            throw usage_error{"unknown option: " + a};
        }
    }
    if (p.have_system && !p.conversation) throw usage_error{"-sys/--system-prompt needs -cnv/--conversation"};
    p.sampling.seed = p.seed < 0 ? UINT32_MAX : (uint32_t)p.seed;
    return p;
}

// Raised for run-time failures (bad model, context full ...): message only.
struct run_error {
    std::string msg;
};

std::string api_error(const std::string &what) {
    const char *e = pinfer_last_error();
    return what + (e && *e ? std::string(": ") + e : std::string());
}

// A prompt file: a regular file (or a pipe/device, read up to the cap), never
// a directory, and at most 64 MiB (far beyond any context: -f /dev/zero must
// not read until memory runs out).
constexpr size_t k_max_prompt_bytes = 64u << 20;

std::string read_file(const std::string &path) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) throw run_error{"cannot read prompt file '" + path + "': " + strerror(errno)};
    if (S_ISDIR(st.st_mode)) throw run_error{"prompt file '" + path + "' is a directory"};
    if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > k_max_prompt_bytes)
        throw run_error{"prompt file '" + path + "' is " + std::to_string(st.st_size >> 20) + " MiB; the limit is " +
                        std::to_string(k_max_prompt_bytes >> 20) + " MiB"};
    std::ifstream f(path, std::ios::binary);
    if (!f) throw run_error{"cannot read prompt file '" + path + "': " + strerror(errno)};
    std::string out;
    char buf[1 << 16];
    while (f) {
        f.read(buf, sizeof buf);
        out.append(buf, (size_t)f.gcount());
        if (out.size() > k_max_prompt_bytes)
            throw run_error{"prompt file '" + path + "' holds more than " + std::to_string(k_max_prompt_bytes >> 20) +
                            " MiB; the limit is " + std::to_string(k_max_prompt_bytes >> 20) + " MiB"};
    }
    if (f.bad()) throw run_error{"error reading prompt file '" + path + "'"};
    return out;
}

double now_ms() {
    using namespace std::chrono;
    return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

std::vector<pinfer_token> tokenize(const pinfer_model *model, const std::string &text, bool add_special,
                                   bool parse_special) {
    std::vector<pinfer_token> toks(text.size() + 8);
    int32_t n = pinfer_tokenize(model, text.data(), (int32_t)text.size(), toks.data(), (int32_t)toks.size(),
                                add_special, parse_special);
    if (n < 0 && n != INT32_MIN) {
        toks.resize((size_t)-n);
        n = pinfer_tokenize(model, text.data(), (int32_t)text.size(), toks.data(), (int32_t)toks.size(),
                            add_special, parse_special);
    }
    if (n < 0) throw run_error{api_error("tokenization failed")};
    toks.resize((size_t)n);
    return toks;
}

std::string token_piece(const pinfer_model *model, pinfer_token tok, bool special) {
    char buf[128];
    int32_t n = pinfer_token_to_piece(model, tok, buf, (int32_t)sizeof buf, special);
    if (n >= 0) return std::string(buf, (size_t)n);
    std::string s((size_t)-n, '\0');
    n = pinfer_token_to_piece(model, tok, &s[0], (int32_t)s.size(), special);
    if (n < 0) return std::string();
    s.resize((size_t)n);
    return s;
}

// Prints bytes as they come but never half a UTF-8 character: an incomplete
// multi-byte sequence at the end is held back until its remaining bytes arrive.
class utf8_printer {
  public:
    void write(const std::string &bytes) {
        pending_ += bytes;
        size_t n = complete_prefix(pending_);
        if (n > 0) {
            fwrite(pending_.data(), 1, n, stdout);
            fflush(stdout);
            pending_.erase(0, n);
        }
    }
    void flush() {
        if (!pending_.empty()) fwrite(pending_.data(), 1, pending_.size(), stdout);
        pending_.clear();
        fflush(stdout);
    }

  private:
    // Length of s without a trailing incomplete sequence (invalid bytes pass).
    static size_t complete_prefix(const std::string &s) {
        size_t n = s.size();
        for (size_t back = 1; back <= 4 && back <= n; back++) {
            unsigned char c = (unsigned char)s[n - back];
            if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
            size_t need = c >= 0xF0 && c <= 0xF7 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
            if (c >= 0xF8) need = 1;
            return need > back ? n - back : n;
        }
        return n;
    }
    std::string pending_;
};

// Owns the handles so every exit path frees them.
struct session {
    pinfer_model *model = nullptr;
    pinfer_context *ctx = nullptr;
    pinfer_sampler *smpl = nullptr;
    bool ignore_eos = false;
    std::vector<std::string> reverse_prompts;
    std::vector<float> masked;  // the logits with end tokens at -inf (--ignore-eos)
    ~session() {
        if (smpl) pinfer_sampler_free(smpl);
        if (ctx) pinfer_context_free(ctx);
        if (model) pinfer_model_free(model);
    }
};

// Feeds tokens to the context in the order they appear in the text.
void eval_tokens(session &s, const std::vector<pinfer_token> &toks) {
    if (toks.empty()) return;
    const int32_t n_ctx = (int32_t)pinfer_n_ctx(s.ctx);
    const int32_t n_past = pinfer_n_past(s.ctx);
    if ((int64_t)n_past + (int64_t)toks.size() > n_ctx) {
        throw run_error{"prompt is too long: " + std::to_string(toks.size()) + " tokens" +
                        (n_past ? " after " + std::to_string(n_past) + " cached" : std::string()) +
                        ", but the context holds " + std::to_string(n_ctx) + " (raise -c/--ctx-size)"};
    }
    if (pinfer_decode(s.ctx, toks.data(), (int32_t)toks.size(), false) < 0)
        throw run_error{api_error("evaluation failed")};
}

enum class stop_reason { eog, n_predict, ctx_full, reverse_prompt };

// Samples and prints tokens until end of generation, n_predict or a full
// context. The final token (EOG) is decoded too when keep_eog is set and there
// is room, so a chat's KV cache holds the turn exactly as the template ends it.
stop_reason generate(session &s, int32_t n_predict, bool keep_eog, std::string *out_text, std::string *eog_text,
                     int32_t *n_generated) {
    const int32_t n_vocab = pinfer_model_n_vocab(s.model);
    const int32_t n_ctx = (int32_t)pinfer_n_ctx(s.ctx);
    utf8_printer printer;
    *n_generated = 0;
    stop_reason why = stop_reason::n_predict;
    std::string tail;  // generated text, for -r
    while (n_predict < 0 || *n_generated < n_predict) {
        const float *logits = pinfer_get_logits(s.ctx, -1);
        if (!logits) throw run_error{api_error("no logits after evaluation")};
        if (s.ignore_eos) {
            s.masked.assign(logits, logits + n_vocab);
            for (int32_t t = 0; t < n_vocab; t++)
                if (pinfer_token_is_eog(s.model, t)) s.masked[t] = -INFINITY;
            logits = s.masked.data();
        }
        pinfer_token tok = pinfer_sampler_sample(s.smpl, logits, n_vocab);
        if (tok < 0 || tok >= n_vocab) throw run_error{api_error("sampling failed")};
        pinfer_sampler_accept(s.smpl, tok);
        if (pinfer_token_is_eog(s.model, tok)) {
            if (keep_eog && pinfer_n_past(s.ctx) < n_ctx) {
                if (pinfer_decode(s.ctx, &tok, 1, false) < 0) throw run_error{api_error("evaluation failed")};
                if (eog_text) *eog_text = token_piece(s.model, tok, true);
            }
            why = stop_reason::eog;
            break;
        }
        std::string piece = token_piece(s.model, tok, false);
        printer.write(piece);
        if (out_text) *out_text += piece;
        ++*n_generated;
        if (!s.reverse_prompts.empty()) {
            tail += piece;
            bool hit = false;
            for (const std::string &r : s.reverse_prompts)
                hit = hit || (tail.size() >= r.size() && tail.compare(tail.size() - r.size(), r.size(), r) == 0);
            if (hit) {
                why = stop_reason::reverse_prompt;
                break;
            }
        }
        if (pinfer_n_past(s.ctx) >= n_ctx) {
            why = stop_reason::ctx_full;
            break;
        }
        // The last token needs no evaluation, except in a chat, whose cache must
        // hold the whole reply for the next turn.
        if (!keep_eog && n_predict >= 0 && *n_generated >= n_predict) break;
        if (pinfer_decode(s.ctx, &tok, 1, false) < 0) throw run_error{api_error("evaluation failed")};
    }
    printer.flush();
    return why;
}

void print_timings(const session &s, double t_load_ms) {
    const pinfer_timings t = pinfer_get_timings(s.ctx);
    auto line = [](const char *what, double ms, int32_t n) {
        if (n > 0)
            fprintf(stderr, "pinfer: %16s = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens per second)\n",
                    what, ms, n, ms / n, 1e3 * n / ms);
        else
            fprintf(stderr, "pinfer: %16s = %10.2f ms / %5d tokens\n", what, ms, n);
    };
    fprintf(stderr, "\n");
    fprintf(stderr, "pinfer: %16s = %10.2f ms\n", "load time", t_load_ms);
    line("prompt eval time", t.t_prompt_ms, t.n_prompt);
    line("eval time", t.t_eval_ms, t.n_eval);
    fprintf(stderr, "pinfer: %16s = %10.2f ms / %5d tokens\n", "total time", t.t_prompt_ms + t.t_eval_ms,
            t.n_prompt + t.n_eval);
    if (t.n_host > 0) {
        const double us = 1e3 * t.t_host_ms / t.n_host;
        fprintf(stderr, "pinfer: %16s = %10.1f us per generated token (%.1f us per layer; graph, plan, inputs, logits)\n",
                "host time", us, us / std::max(1, pinfer_model_n_layer(s.model)));
    }
}

// --vram-budget: which placement entry the runtime selects for the budget.
// Only the selection exists so far; there is no GPU backend to move neurons to.
void report_placement(const pinfer_model *model, const cli_params &p) {
    const int32_t L = pinfer_model_n_layer(model);
    const uint64_t budget = (uint64_t)std::llround(p.vram_budget_gib * 1073741824.0);
    std::vector<int32_t> k((size_t)L);
    const int32_t kind = pinfer_model_placement(model, budget, k.data(), L);
    if (kind < 0) throw run_error{api_error("cannot select a placement")};
    pinfer_sparse_info si;
    pinfer_model_sparse_info(model, &si);
    if (kind == PINFER_PLACEMENT_GREEDY) {
        fprintf(stderr, "pinfer: notice: no placement entry at or below %.4g GiB (%d in the file): greedy split by %s\n",
                p.vram_budget_gib, si.n_placements, si.has_freq ? "ffn_freq per byte" : "bytes (no ffn_freq)");
    } else {
        // the runtime picked the entry with this budget, or the largest below it: find its index
        int32_t best = -1;
        uint64_t best_b = 0;
        for (int32_t i = 0; i < si.n_placements; i++) {
            uint64_t b = 0;
            if (pinfer_model_placement_entry(model, i, &b, nullptr, nullptr, 0, nullptr, 0) == 0 && b <= budget &&
                (best < 0 || b > best_b)) {
                best = i;
                best_b = b;
            }
        }
        char solver[64] = "?";
        double obj = 0;
        if (best >= 0) pinfer_model_placement_entry(model, best, nullptr, &obj, solver, sizeof solver, nullptr, 0);
        fprintf(stderr, "pinfer: placement for %.4g GiB: entry %d (%s: budget %.4g GiB, solver %s, objective %.4g)\n",
                p.vram_budget_gib, best, kind == PINFER_PLACEMENT_EXACT ? "exact" : "largest below the budget",
                best_b / 1073741824.0, solver, obj);
    }
    int64_t total = 0;
    for (int32_t v : k) total += v;
    fprintf(stderr, "pinfer: placement: %lld FFN neurons on the GPU in all\n", (long long)total);
    if (p.verbose)
        for (int32_t il = 0; il < L; il++) fprintf(stderr, "pinfer: placement layer %3d: %d GPU neurons\n", il, k[(size_t)il]);
    fprintf(stderr, "pinfer: placement selected; with --device cpu all layers run on the CPU (--device sim runs the plan)\n");
}

// --sparse-stats / --sparse-verify: one line per layer, then the totals.
// --verbose with a device: what moved between host and device, per generated
// token (single-token decodes) and for the prompt.
void print_transfers(const session &s) {
    for (bool decode : {false, true}) {
        pinfer_transfer_stats t;
        if (pinfer_get_transfer_stats(s.ctx, decode, &t) != 0 || t.n_graphs == 0) continue;
        const double g = decode ? (double)t.n_graphs : 1.0;
        fprintf(stderr, "pinfer: device traffic %s: %.1f KiB to the device, %.1f KiB back, %.1f copies, %.1f event waits, %.1f device syncs\n",
                decode ? "per generated token" : "for the prompt", t.bytes_h2d / 1024.0 / g, t.bytes_d2h / 1024.0 / g,
                t.n_copies / g, t.n_waits / g, t.n_syncs / g);
    }
}

void print_sparse_stats(const session &s) {
    const int32_t L = pinfer_model_n_layer(s.model);
    std::vector<pinfer_sparse_layer_stats> ls((size_t)L);
    pinfer_sparse_stats st;
    if (pinfer_get_sparse_stats(s.ctx, &st, ls.data(), L) != 0) {
        fprintf(stderr, "pinfer: sparse stats unavailable: %s\n", pinfer_last_error());
        return;
    }
    fprintf(stderr, "pinfer: sparse mode %s\n", pinfer_sparse_mode_name(st.mode));
    auto pct = [](double a, double b) { return b > 0 ? 100.0 * a / b : 0.0; };
    for (int32_t il = 0; il < L; il++) {
        const pinfer_sparse_layer_stats &l = ls[(size_t)il];
        char recall[32] = "-";
        if (l.recall >= 0) snprintf(recall, sizeof(recall), "%.4f", l.recall);
        fprintf(stderr,
                "pinfer: sparse layer %3d: active %6.2f%% computed %6.2f%% recall %s ffn flops %6.2f%% of dense, "
                "predictor %5.2f%%\n",
                il, 100.0 * l.active_frac, 100.0 * l.computed_frac, recall, pct(l.flops_ffn, l.flops_dense),
                pct(l.flops_predictor, l.flops_predictor + l.flops_ffn));
    }
    fprintf(stderr, "pinfer: sparse total: ffn flops %.2f%% of dense, predictor share %.2f%% of the sparse ffn\n",
            pct(st.flops_ffn + st.flops_predictor, st.flops_dense), pct(st.flops_predictor, st.flops_predictor + st.flops_ffn));
    if (st.n_verified > 0)
        fprintf(stderr, "pinfer: sparse verify: max |logit - dense| = %.6g (max |dense logit| %.6g), argmax agrees %lld/%lld\n",
                st.max_logit_diff, st.max_logit_abs, (long long)st.n_argmax_agree, (long long)st.n_verified);
}

// Formats the chat with the model's template.
std::string apply_template(const session &s, const std::vector<std::pair<std::string, std::string>> &history,
                           bool add_generation_prompt) {
    std::vector<pinfer_chat_message> msgs;
    for (auto &m : history) msgs.push_back({m.first.c_str(), m.second.c_str()});
    std::string buf(1024, '\0');
    int32_t n = pinfer_chat_apply_template(s.model, nullptr, msgs.data(), msgs.size(), add_generation_prompt, &buf[0],
                                           (int32_t)buf.size());
    if (n == INT32_MIN) throw run_error{api_error("cannot apply the chat template")};
    if (n < 0) {
        buf.assign((size_t)-n, '\0');
        n = pinfer_chat_apply_template(s.model, nullptr, msgs.data(), msgs.size(), add_generation_prompt, &buf[0],
                                       (int32_t)buf.size());
        if (n < 0) throw run_error{api_error("cannot apply the chat template")};
    }
    buf.resize((size_t)n);
    return buf;
}

// Interactive chat. The KV cache always holds the tokens of `fed` (the text
// evaluated so far); each turn formats the whole history with the template and
// evaluates only what extends `fed`. If the template renders the model's reply
// differently from how it was generated, the cache is cut back to the last
// point where both agree and the rest is re-evaluated.
int run_conversation(session &s, const cli_params &p, const std::string &first_user) {
    std::vector<std::pair<std::string, std::string>> history;
    if (p.have_system) history.emplace_back("system", p.system_prompt);
    std::string fed;                 // text whose tokens are in the KV cache
    std::string fed_before_reply;    // fed up to the generation prompt of the last turn
    int32_t n_past_before_reply = 0;
    const bool tty = isatty(fileno(stdin));
    std::string pending_user = first_user;
    bool have_pending = !first_user.empty();

    for (;;) {
        std::string user;
        if (have_pending) {
            user = pending_user;
            have_pending = false;
        } else {
            if (tty) {
                fputs("\n> ", stdout);
                fflush(stdout);
            }
            if (!std::getline(std::cin, user)) break;  // end of input
            if (!user.empty() && user.back() == '\r') user.pop_back();
            if (user == "/exit") break;
            if (user.empty()) continue;
        }
        if (p.escape) user = process_escapes(user);
        history.emplace_back("user", user);
        const std::string full = apply_template(s, history, true);

        size_t keep_chars;
        if (full.compare(0, fed.size(), fed) == 0) {
            keep_chars = fed.size();
        } else if (!fed_before_reply.empty() && full.compare(0, fed_before_reply.size(), fed_before_reply) == 0) {
            pinfer_kv_truncate(s.ctx, n_past_before_reply);
            keep_chars = fed_before_reply.size();
        } else {
            pinfer_kv_truncate(s.ctx, 0);
            keep_chars = 0;
        }
        const std::string suffix = full.substr(keep_chars);
        if (p.verbose) fprintf(stderr, "[evaluating %zu new characters of the chat]\n", suffix.size());
        eval_tokens(s, tokenize(s.model, suffix, keep_chars == 0, true));
        fed = full;
        fed_before_reply = full;
        n_past_before_reply = pinfer_n_past(s.ctx);

        std::string reply, eog_text;  // the reply as generated; the end-of-turn token's text
        int32_t n_gen = 0;
        stop_reason why = generate(s, p.n_predict, true, &reply, &eog_text, &n_gen);
        fputs("\n", stdout);
        fflush(stdout);
        fed += reply + eog_text;
        history.emplace_back("assistant", reply);
        if (why == stop_reason::ctx_full) {
            fprintf(stderr, "\npinfer: the context is full (%u tokens); ending the conversation\n",
                    pinfer_n_ctx(s.ctx));
            break;
        }
    }
    return 0;
}

int run(int argc, char **argv) {
    cli_params p;
    try {
        p = parse_args(argc, argv);
    } catch (const usage_error &e) {
        fprintf(stderr, "error: %s\n\n", e.msg.c_str());
        print_usage(stderr, argv[0]);
        return 2;
    }
    if (p.model.empty()) {
        p.model = default_model_path();
        if (p.model.empty()) {
            fprintf(stderr, "error: no model given and the embedded default model is not installed: "
                            "pass -m/--model FILE (or set PINFER_DEFAULT_MODEL)\n\n");
            print_usage(stderr, argv[0]);
            return 2;
        }
    }

    try {
        std::string prompt = p.prompt;
        if (!p.prompt_file.empty()) {
            prompt = read_file(p.prompt_file);
            if (!prompt.empty() && prompt.back() == '\n') prompt.pop_back();  // files end with one
        }
        if (p.escape) prompt = process_escapes(prompt);

        session s;
        const double t0 = now_ms();
        s.model = pinfer_model_load(p.model.c_str());
        if (!s.model) {
            // The loader's message names the file and the problem.
            const char *e = pinfer_last_error();
            throw run_error{e && *e ? std::string(e) : "cannot load model '" + p.model + "'"};
        }
        pinfer_context_params cp = pinfer_context_default_params();
        cp.n_ctx = (uint32_t)p.n_ctx;
        cp.n_batch = (uint32_t)p.n_batch;
        cp.n_threads = p.n_threads;
        if (!p.cache_type.empty()) cp.type_kv = p.cache_type == "f32" ? 0 : 1;
        cp.sparse_mode = pinfer_sparse_mode_from_name(p.sparse.c_str());
        cp.precision = pinfer_precision_from_name(p.precision.c_str());
        cp.sparse_flags = (p.sparse_stats ? PINFER_SPARSE_FLAG_STATS : 0u) | (p.sparse_verify ? PINFER_SPARSE_FLAG_VERIFY : 0u);
        cp.device = p.device.c_str();
        cp.n_gpu_layers = p.n_gpu_layers;
        cp.offload_layers = p.offload == "layers";
        if (p.device != "cpu" && p.vram_budget_gib >= 0) cp.vram_budget = (uint64_t)std::llround(p.vram_budget_gib * 1073741824.0);
        s.ctx = pinfer_context_new(s.model, cp);
        if (!s.ctx) throw run_error{api_error("cannot create a context")};
        if (*pinfer_context_notice(s.ctx)) fprintf(stderr, "pinfer: notice: %s\n", pinfer_context_notice(s.ctx));
        if (p.sampling.repeat_last_n < 0) p.sampling.repeat_last_n = (int32_t)pinfer_n_ctx(s.ctx);  // -1: whole context
        s.smpl = pinfer_sampler_new(s.model, p.sampling);
        if (!s.smpl) throw run_error{api_error("cannot create the sampler")};
        const double t_load_ms = now_ms() - t0;
        s.ignore_eos = p.ignore_eos;
        s.reverse_prompts = p.reverse_prompts;
        if (!p.log_disable)
            for (const std::string &f : p.no_effect)
                fprintf(stderr, "pinfer: notice: %s has no effect (one attention kernel; weights are memory-mapped, "
                                "not locked)\n", f.c_str());

        if (p.verbose) {
            fprintf(stderr, "pinfer: model %s: %s\n", p.model.c_str(), pinfer_model_desc(s.model));
            fprintf(stderr, "pinfer: arch %s, %d layers, n_embd %d, n_vocab %d, %.2fM params, %.2f MiB\n",
                    pinfer_model_arch(s.model), pinfer_model_n_layer(s.model), pinfer_model_n_embd(s.model),
                    pinfer_model_n_vocab(s.model), pinfer_model_n_params(s.model) / 1e6,
                    pinfer_model_size(s.model) / (1024.0 * 1024.0));
            fprintf(stderr,
                    "pinfer: n_ctx %u, n_batch %d, n_predict %d; sampling: temp %.2f top_k %d top_p %.2f min_p %.2f "
                    "repeat_penalty %.2f (last %d) presence %.2f frequency %.2f seed %u\n",
                    pinfer_n_ctx(s.ctx), p.n_batch, p.n_predict, p.sampling.temperature, p.sampling.top_k,
                    p.sampling.top_p, p.sampling.min_p, p.sampling.repeat_penalty, p.sampling.repeat_last_n,
                    p.sampling.presence_penalty, p.sampling.frequency_penalty, p.sampling.seed);
            fprintf(stderr, "pinfer: sparse FFN mode %s\n", pinfer_sparse_mode_name(pinfer_context_sparse_mode(s.ctx)));
            uint64_t huge = 0;
            const uint64_t moved = pinfer_model_ffn_page_bytes(s.model, &huge);
            if (moved)
                fprintf(stderr, "pinfer: FFN weights copied to anonymous memory for 2 MiB pages: %.1f MiB, %.1f MiB in huge pages\n",
                        moved / 1048576.0, huge / 1048576.0);
        }

        if (p.device == "cpu" && p.vram_budget_gib >= 0) report_placement(s.model, p);
        if (p.verbose && *pinfer_context_plan_text(s.ctx)) fprintf(stderr, "pinfer: device %s\n%s", pinfer_context_device(s.ctx), pinfer_context_plan_text(s.ctx));

        if (p.conversation) {
            int rc = run_conversation(s, p, prompt);
            if (!p.log_disable) print_timings(s, t_load_ms);
            if (p.sparse_stats || p.sparse_verify) print_sparse_stats(s);
            return rc;
        }

        std::vector<pinfer_token> toks = tokenize(s.model, prompt, true, true);
        if (toks.empty()) throw run_error{"the prompt is empty and the model has no BOS token to start from"};
        if (p.verbose) fprintf(stderr, "pinfer: prompt: %zu tokens\n", toks.size());
        const int32_t n_ctx = (int32_t)pinfer_n_ctx(s.ctx);
        if ((int32_t)toks.size() > n_ctx)
            throw run_error{"prompt is too long: " + std::to_string(toks.size()) + " tokens, but the context holds " +
                            std::to_string(n_ctx) + " (raise -c/--ctx-size)"};
        if (p.display_prompt) {
            fwrite(prompt.data(), 1, prompt.size(), stdout);
            fflush(stdout);
        }
        eval_tokens(s, toks);
        // Penalties look at the prompt too.
        for (pinfer_token t : toks) pinfer_sampler_accept(s.smpl, t);

        int32_t n_gen = 0;
        stop_reason why = generate(s, p.n_predict, false, nullptr, nullptr, &n_gen);
        fputs("\n", stdout);
        fflush(stdout);
        if (why == stop_reason::ctx_full && p.verbose) fprintf(stderr, "pinfer: the context is full\n");
        if (!p.log_disable) print_timings(s, t_load_ms);
        if (p.verbose) print_transfers(s);
        if (p.sparse_stats || p.sparse_verify) print_sparse_stats(s);
        return 0;
    } catch (const run_error &e) {
        fflush(stdout);
        fprintf(stderr, "error: %s\n", e.msg.c_str());
        return 1;
    } catch (const std::bad_alloc &) {
        fflush(stdout);
        fprintf(stderr, "error: out of memory\n");
        return 1;
    }
}

}  // namespace

int main(int argc, char **argv) { return run(argc, argv); }
