// pinfer-cli: generate text from a prompt, or chat, with a GGUF model.
//
//   pinfer-cli -m model.gguf -p "Once upon a time" -n 128
//   pinfer-cli -m model.gguf -cnv -sys "You are terse."
//
// Generated text goes to stdout as it is produced; logs, errors and the timing
// summary go to stderr. Only the public C API (pinfer.h) is used.
#include <cerrno>
#include <chrono>
#include <csignal>
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

#include "cli-python.h"
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
    std::string device = "auto";  // --device: auto, cpu, sim (cuda when built with it); the core checks it
    int32_t n_gpu_layers = -1;    // -ngl: -1 = not given (all that fit on a device)
    std::string offload = "neurons";  // --offload: neurons (hybrid) or layers (whole layers, as llama.cpp)
    bool ignore_eos = false;          // --ignore-eos: end-of-generation tokens are never sampled
    bool log_disable = false;         // --log-disable: no notices or timings on stderr
    std::vector<std::string> reverse_prompts;  // -r: generation stops once the text ends with one
    std::vector<std::string> no_effect;        // flags accepted for llama-cli's sake (-fa, --mlock, --no-mmap)
    bool conversation_given = false;  // -cnv or -no-cnv: otherwise a chat template and no -p/-f mean -cnv
    bool color = false;               // --color: the prompt and user input in colour
    bool interactive = false;         // -i: after the reply (or a reverse prompt) read more input
    bool interactive_first = false;   // --interactive-first: read input before generating
    std::string in_prefix, in_suffix; // text around each interactive input
    std::string prompt_cache;         // --prompt-cache FILE: the prompt's KV state
    std::string grammar;              // --grammar / --grammar-file / -j
    std::string grammar_kind;         // "gbnf" or "json_schema"
    int32_t n_keep = 0;               // --keep: tokens kept by a context shift (-1: the whole prompt)
    std::string chat_template;        // --chat-template: a family name or Jinja text ("" = the model's)
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
            "  -n,   --n-predict N         tokens to generate (default: -1 = until end of text, shifting the\n"
            "                              context when it fills; -2 = until end of text or a full context)\n"
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
            "        --device DEV          where hot layers and neurons run: auto (default: cuda if there is\n"
            "                              a device, else cpu), cpu, cuda (an NVIDIA GPU, builds with\n"
            "                              PINFER_CUDA) or sim, a simulated GPU that shows the plan and\n"
            "                              its traffic\n"
            "  -ngl, --n-gpu-layers N      layers on the device, in order (default: all that fit)\n"
            "        --offload MODE        neurons (default: attention, then hot FFN prefixes per layer, the\n"
            "                              cold neurons on the CPU) or layers (whole layers, as llama.cpp)\n"
            "        --vram-budget GIB     device memory to use (default: all of it); running on the CPU:\n"
            "                              the model's neuron placement for this budget\n"
            "                              (--verbose: the plan, GPU neurons per layer, traffic per token)\n"
            "        --verbose             print model and run details to stderr\n"
            "  -no-cnv, --no-conversation  plain completion of -p (the default)\n"
            "        --ignore-eos          never sample an end-of-generation token (run to -n or a full context)\n"
            "  -r,   --reverse-prompt TEXT stop once the generated text ends with TEXT (repeatable; in -cnv\n"
            "                              it ends the reply)\n"
            "        --log-disable         print no notices or timings to stderr\n"
            "        --color               show the prompt and user input in colour\n"
            "  -i,   --interactive         after each reply (or -r text) read more input from stdin\n"
            "        --interactive-first   like -i, but read input before generating\n"
            "        --in-prefix TEXT      text before each interactive input\n"
            "        --in-suffix TEXT      text after each interactive input\n"
            "        --prompt-cache FILE   save the prompt's KV state to FILE, restore it when a prompt starts\n"
            "                              with the same tokens\n"
            "        --grammar GBNF        constrain the output with a grammar (llguidance, as pinfer.Llama)\n"
            "        --grammar-file FILE   the same, read from a file\n"
            "  -j,   --json-schema SCHEMA  constrain the output to JSON valid under SCHEMA\n"
            "        --keep N              when the context fills, keep the first N tokens (-1: the prompt),\n"
            "                              drop half of the rest and go on (default: 0, BOS kept)\n"
            "        --chat-template T     a chat family name (chatml, llama2, llama3, mistral, gemma, ...) or\n"
            "                              Jinja text instead of the model's template\n"
            "        --jinja               accepted: templates are always rendered with Jinja (as pinfer.Llama)\n"
            "  Conversation (-cnv) is the default when the model has a chat template and no -p/-f is given.\n"
            "  In -cnv and -i, Ctrl-C stops a reply and returns to the prompt; Ctrl-C there exits.\n"
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
            p.n_predict = (int32_t)parse_int(a, value(), -2, INT32_MAX);
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
            p.conversation_given = true;
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
            if (p.device != "auto" && p.device != "cpu" && p.device != "sim" && p.device != "cuda")
                throw usage_error{"unknown device '" + p.device + "' (auto, cpu, sim, cuda)"};
#else
            if (p.device == "cuda")
                throw usage_error{"this build has no CUDA backend (install with -C cmake.define.PINFER_CUDA=ON); devices: auto, cpu, sim"};
            if (p.device != "auto" && p.device != "cpu" && p.device != "sim")
                throw usage_error{"unknown device '" + p.device + "' (auto, cpu, sim)"};
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
            p.conversation_given = true;
        } else if (a == "--color") {
            p.color = true;
        } else if (a == "-i" || a == "--interactive") {
            p.interactive = true;
        } else if (a == "--interactive-first") {
            p.interactive = p.interactive_first = true;
        } else if (a == "--in-prefix") {
            p.in_prefix = value();
        } else if (a == "--in-suffix") {
            p.in_suffix = value();
        } else if (a == "--prompt-cache") {
            p.prompt_cache = value();
            if (p.prompt_cache.empty()) throw usage_error{"--prompt-cache needs a file name"};
        } else if (a == "--grammar" || a == "--grammar-file" || a == "-j" || a == "--json-schema") {
            if (!p.grammar_kind.empty()) throw usage_error{"give one of --grammar, --grammar-file, -j/--json-schema"};
            p.grammar = value();
            p.grammar_kind = (a == "-j" || a == "--json-schema") ? "json_schema" : "gbnf";
            if (a == "--grammar-file") {
                std::ifstream f(p.grammar, std::ios::binary);
                if (!f) throw usage_error{"cannot read grammar file '" + p.grammar + "': " + strerror(errno)};
                std::stringstream ss;
                ss << f.rdbuf();
                p.grammar = ss.str();
            }
        } else if (a == "--keep") {
            p.n_keep = (int32_t)parse_int(a, value(), -1, INT32_MAX);
        } else if (a == "--chat-template") {
            p.chat_template = value();
            if (p.chat_template.empty()) throw usage_error{"--chat-template needs a name or a template"};
        } else if (a == "--jinja") {
            // rendering is always Jinja already (pinfer.cli_helper, the code pinfer.Llama uses)
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
    if (p.have_system && p.conversation_given && !p.conversation)
        throw usage_error{"-sys/--system-prompt needs -cnv/--conversation"};
    if (p.interactive && p.conversation) throw usage_error{"give either -i/--interactive-first or -cnv, not both"};
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
    std::vector<float> masked;  // the logits with end tokens (--ignore-eos) or grammar-forbidden ones at -inf
    std::vector<pinfer_token> tokens;  // what the KV cache holds, for a context shift
    int32_t n_keep = 0;                // tokens a context shift keeps
    int32_t n_batch = 512;
    bool shifted = false;              // a context shift happened (said once)
    bool log = true;                   // notices on stderr (not --log-disable)
    python_helper py;                  // chat templates and grammars (pinfer.cli_helper)
    bool grammar = false;              // a grammar constrains generation
    bool grammar_done = false;         // it is complete
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
    s.tokens.insert(s.tokens.end(), toks.begin(), toks.end());
}

// Ctrl-C in conversation and interactive modes: the first stops the reply, the next one
// (at the prompt, or before the reply noticed) exits.
volatile sig_atomic_t g_interrupts = 0;

void on_sigint(int) {
    if (g_interrupts > 0) {
        const char nl = '\n';
        ssize_t w = write(2, &nl, 1);
        (void)w;
        _exit(130);
    }
    g_interrupts = 1;
}

void catch_sigint() {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: a read at the prompt returns, and the CLI exits
    sigaction(SIGINT, &sa, nullptr);
}

// The context is full: keep the first n_keep tokens, drop half of the rest, and evaluate
// the kept tail again at its new positions (recomputed, so the cache stays exact).
// False if nothing can be dropped.
bool context_shift(session &s) {
    const int32_t n_past = (int32_t)s.tokens.size();
    const int32_t keep = std::min(s.n_keep, n_past - 1);
    const int32_t n_discard = (n_past - keep) / 2;
    if (n_discard <= 0) return false;
    if (!s.shifted && s.log)
        fprintf(stderr, "\npinfer: the context is full (%d tokens): keeping the first %d, dropping the next %d and "
                        "going on (--keep)\n", n_past, keep, n_discard);
    s.shifted = true;
    std::vector<pinfer_token> tail(s.tokens.begin() + keep + n_discard, s.tokens.end());
    s.tokens.resize((size_t)keep);
    pinfer_kv_truncate(s.ctx, keep);
    if (!tail.empty()) eval_tokens(s, tail);
    return true;
}

// --grammar / -j: the grammar's mask on the logits, from pinfer.cli_helper.
void grammar_mask(session &s, std::vector<float> &logits) {
    std::vector<std::string> r;
    if (!s.py.call({"mask"}, r) || r.empty()) throw run_error{"grammar: " + s.py.why()};
    const std::string &bits = r[0];
    for (size_t t = 0; t < logits.size(); t++)
        if (t / 8 >= bits.size() || !((unsigned char)bits[t / 8] >> (t % 8) & 1)) logits[t] = -INFINITY;
}

void grammar_accept(session &s, pinfer_token tok) {
    std::vector<std::string> r;
    if (!s.py.call({"accept", std::to_string(tok)}, r) || r.empty()) throw run_error{"grammar: " + s.py.why()};
    s.grammar_done = r[0] == "1";
}

enum class stop_reason { eog, n_predict, ctx_full, reverse_prompt, interrupted, grammar };

// Samples and prints tokens until end of generation, n_predict or a full
// context. The final token (EOG) is decoded too when keep_eog is set and there
// is room, so a chat's KV cache holds the turn exactly as the template ends it.
stop_reason generate(session &s, int32_t n_predict, bool keep_eog, std::string *out_text, std::string *eog_text,
                     int32_t *n_generated, bool decode_last = false) {
    const int32_t n_vocab = pinfer_model_n_vocab(s.model);
    const int32_t n_ctx = (int32_t)pinfer_n_ctx(s.ctx);
    utf8_printer printer;
    *n_generated = 0;
    stop_reason why = stop_reason::n_predict;
    std::string tail;  // generated text, for -r
    while (n_predict < 0 || *n_generated < n_predict) {
        if (g_interrupts) {
            why = stop_reason::interrupted;
            break;
        }
        const float *logits = pinfer_get_logits(s.ctx, -1);
        if (!logits) throw run_error{api_error("no logits after evaluation")};
        if (s.ignore_eos || s.grammar) {
            s.masked.assign(logits, logits + n_vocab);
            if (s.ignore_eos)
                for (int32_t t = 0; t < n_vocab; t++)
                    if (pinfer_token_is_eog(s.model, t)) s.masked[t] = -INFINITY;
            if (s.grammar) grammar_mask(s, s.masked);
            logits = s.masked.data();
        }
        pinfer_token tok = pinfer_sampler_sample(s.smpl, logits, n_vocab);
        if (tok < 0 || tok >= n_vocab) throw run_error{api_error("sampling failed")};
        pinfer_sampler_accept(s.smpl, tok);
        if (pinfer_token_is_eog(s.model, tok)) {
            if (keep_eog && pinfer_n_past(s.ctx) < n_ctx) {
                if (pinfer_decode(s.ctx, &tok, 1, false) < 0) throw run_error{api_error("evaluation failed")};
                s.tokens.push_back(tok);
                if (eog_text) *eog_text = token_piece(s.model, tok, true);
            }
            why = stop_reason::eog;
            break;
        }
        if (s.grammar) grammar_accept(s, tok);
        std::string piece = token_piece(s.model, tok, false);
        printer.write(piece);
        if (out_text) *out_text += piece;
        ++*n_generated;
        // A chat or interactive session goes on from this token: the cache must hold it.
        auto keep_last = [&] {
            if ((keep_eog || decode_last) && pinfer_n_past(s.ctx) < n_ctx) {
                if (pinfer_decode(s.ctx, &tok, 1, false) < 0) throw run_error{api_error("evaluation failed")};
                s.tokens.push_back(tok);
            }
        };
        if (!s.reverse_prompts.empty()) {
            tail += piece;
            bool hit = false;
            for (const std::string &r : s.reverse_prompts)
                hit = hit || (tail.size() >= r.size() && tail.compare(tail.size() - r.size(), r.size(), r) == 0);
            if (hit) {
                keep_last();
                why = stop_reason::reverse_prompt;
                break;
            }
        }
        if (s.grammar && s.grammar_done) {
            keep_last();
            why = stop_reason::grammar;
            break;
        }
        if (pinfer_n_past(s.ctx) >= n_ctx && (n_predict == -2 || !context_shift(s))) {
            why = stop_reason::ctx_full;
            break;
        }
        // The last token needs no evaluation, except in a chat or interactive session,
        // whose cache must hold the whole reply for the next turn.
        if (!keep_eog && !decode_last && n_predict >= 0 && *n_generated >= n_predict) break;
        if (pinfer_decode(s.ctx, &tok, 1, false) < 0) throw run_error{api_error("evaluation failed")};
        s.tokens.push_back(tok);
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
    fprintf(stderr, "pinfer: placement selected; without a device every layer runs on the CPU (--device sim runs the plan)\n");
}

// --sparse-stats / --sparse-verify: one line per layer, then the totals.
// --verbose with a device: what moved between host and device, per generated
// token (single-token decodes) and for the prompt.
void print_transfers(const session &s) {
    for (bool decode : {false, true}) {
        pinfer_transfer_stats t;
        if (pinfer_get_transfer_stats(s.ctx, decode, &t) != 0 || t.n_graphs == 0) continue;
        const double g = decode ? (double)t.n_graphs : 1.0;
        fprintf(stderr,
                "pinfer: device traffic %s: %.1f KiB to the device, %.1f KiB back (%.1f KiB not from pinned memory), %.1f copies, "
                "%.1f event waits, %.1f device syncs\n",
                decode ? "per generated token" : "for the prompt", t.bytes_h2d / 1024.0 / g, t.bytes_d2h / 1024.0 / g,
                t.bytes_pageable / 1024.0 / g, t.n_copies / g, t.n_waits / g, t.n_syncs / g);
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

// The chat formatted by a template family (a name, or nullptr: the model template's family).
std::string format_by_family(const session &s, const char *tmpl,
                             const std::vector<std::pair<std::string, std::string>> &history, bool add_generation_prompt,
                             const std::string &what) {
    std::vector<pinfer_chat_message> msgs;
    for (auto &m : history) msgs.push_back({m.first.c_str(), m.second.c_str()});
    std::string buf(1024, '\0');
    int32_t n = pinfer_chat_apply_template(s.model, tmpl, msgs.data(), msgs.size(), add_generation_prompt, &buf[0],
                                           (int32_t)buf.size());
    if (n < 0 && n != INT32_MIN) {
        buf.assign((size_t)-n, '\0');
        n = pinfer_chat_apply_template(s.model, tmpl, msgs.data(), msgs.size(), add_generation_prompt, &buf[0],
                                       (int32_t)buf.size());
    }
    if (n < 0) throw run_error{api_error(what)};
    buf.resize((size_t)n);
    return buf;
}

// Formats the chat: a family name given with --chat-template is formatted here (as
// pinfer.Llama's chat_format=); a Jinja template (the model's, or one given) is rendered by
// pinfer.cli_helper, the code pinfer.Llama renders with.
std::string apply_template(session &s, const cli_params &p,
                           const std::vector<std::pair<std::string, std::string>> &history, bool add_generation_prompt) {
    const bool jinja_given = p.chat_template.find("{%") != std::string::npos || p.chat_template.find("{{") != std::string::npos;
    if (!p.chat_template.empty() && !jinja_given)
        return format_by_family(s, p.chat_template.c_str(), history, add_generation_prompt,
                                "cannot apply the chat template '" + p.chat_template + "'");
    const char *model_tmpl = pinfer_model_meta_str(s.model, "tokenizer.chat_template");
    const std::string tmpl = jinja_given ? p.chat_template : (model_tmpl ? model_tmpl : "");
    if (tmpl.empty())
        throw run_error{"the model has no chat template (tokenizer.chat_template): give --chat-template NAME|JINJA, "
                        "or -no-cnv"};
    auto special = [&](pinfer_token t) { return t >= 0 ? token_piece(s.model, t, true) : std::string(); };
    std::vector<std::string> req = {"render", tmpl, special(pinfer_token_bos(s.model)), special(pinfer_token_eos(s.model)),
                                    add_generation_prompt ? "1" : "0"};
    for (auto &m : history) {
        req.push_back(m.first);
        req.push_back(m.second);
    }
    std::vector<std::string> r;
    if (s.py.call(req, r) && !r.empty()) return r[0];
    if (!s.py.unavailable() || jinja_given) throw run_error{"cannot apply the chat template: " + s.py.why()};
    // No Python to render with: the template's family, formatted here, if it has one.
    static bool said = false;
    if (!said && s.log) fprintf(stderr, "pinfer: notice: %s; formatting the chat by the template's family\n", s.py.why().c_str());
    said = true;
    return format_by_family(s, nullptr, history, add_generation_prompt,
                            "cannot apply the chat template (" + s.py.why() + ")");
}

// Reads one line of user input; false at the end of input or on Ctrl-C (g_interrupts set).
bool read_line(const cli_params &p, std::string &line) {
    const bool tty = isatty(fileno(stdin));
    if (tty) {
        fputs(p.color ? "\n\033[32m> " : "\n> ", stdout);
        fflush(stdout);
    }
    const bool ok = (bool)std::getline(std::cin, line);
    if (tty && p.color) {
        fputs("\033[0m", stdout);
        fflush(stdout);
    }
    if (!ok || g_interrupts) return false;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return true;
}

// --grammar / -j: a fresh matcher for the next reply.
void grammar_start(session &s, const cli_params &p, const std::string &model_path) {
    if (p.grammar_kind.empty()) return;
    std::vector<std::string> r;
    if (!s.py.call({"grammar", model_path, p.grammar_kind, p.grammar}, r)) {
        if (s.py.unavailable()) throw run_error{"grammars need pinfer's Python helper: " + s.py.why()};
        throw run_error{(p.grammar_kind == "gbnf" ? "invalid grammar: " : "invalid JSON schema: ") + s.py.why()};
    }
    s.grammar = true;
    s.grammar_done = false;
}

// After an interrupted reply: back to the prompt.
void note_interrupt(const session &s) {
    if (s.log) fprintf(stderr, "\npinfer: reply stopped (Ctrl-C); Ctrl-C again exits\n");
    g_interrupts = 0;
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
    std::string pending_user = first_user;
    bool have_pending = !first_user.empty();
    catch_sigint();

    for (;;) {
        std::string user;
        if (have_pending) {
            user = pending_user;
            have_pending = false;
        } else {
            if (!read_line(p, user)) break;  // end of input, or Ctrl-C at the prompt
            if (user == "/exit") break;
            if (user.empty()) continue;
        }
        if (p.escape) user = process_escapes(user);
        history.emplace_back("user", user);
        const std::string full = apply_template(s, p, history, true);

        size_t keep_chars;
        if (full.compare(0, fed.size(), fed) == 0) {
            keep_chars = fed.size();
        } else if (s.shifted) {
            // The cache no longer holds `fed` from its start: go on from where it agrees.
            keep_chars = 0;
            while (keep_chars < fed.size() && keep_chars < full.size() && fed[keep_chars] == full[keep_chars]) keep_chars++;
        } else if (!fed_before_reply.empty() && full.compare(0, fed_before_reply.size(), fed_before_reply) == 0) {
            pinfer_kv_truncate(s.ctx, n_past_before_reply);
            s.tokens.resize((size_t)n_past_before_reply);
            keep_chars = fed_before_reply.size();
        } else {
            pinfer_kv_truncate(s.ctx, 0);
            s.tokens.clear();
            keep_chars = 0;
        }
        const std::string suffix = full.substr(keep_chars);
        if (p.verbose) fprintf(stderr, "[evaluating %zu new characters of the chat]\n", suffix.size());
        // A template that writes the BOS text itself gets no second BOS (as pinfer.Llama).
        const pinfer_token bos = pinfer_token_bos(s.model);
        const std::string bos_text = bos >= 0 ? token_piece(s.model, bos, true) : std::string();
        const bool add_bos = keep_chars == 0 && !(bos_text.size() && full.compare(0, bos_text.size(), bos_text) == 0);
        std::vector<pinfer_token> toks = tokenize(s.model, suffix, add_bos, true);
        while (!toks.empty() && (int64_t)s.tokens.size() + (int64_t)toks.size() > (int64_t)pinfer_n_ctx(s.ctx) &&
               context_shift(s)) {
        }
        eval_tokens(s, toks);
        fed = full;
        fed_before_reply = full;
        n_past_before_reply = pinfer_n_past(s.ctx);

        std::string reply, eog_text;  // the reply as generated; the end-of-turn token's text
        int32_t n_gen = 0;
        grammar_start(s, p, p.model);
        stop_reason why = generate(s, p.n_predict, true, &reply, &eog_text, &n_gen);
        fputs("\n", stdout);
        fflush(stdout);
        fed += reply + eog_text;
        history.emplace_back("assistant", reply);
        if (why == stop_reason::interrupted) note_interrupt(s);
        if (why == stop_reason::ctx_full) {
            fprintf(stderr, "\npinfer: the context is full (%u tokens); ending the conversation\n",
                    pinfer_n_ctx(s.ctx));
            break;
        }
    }
    return g_interrupts ? 130 : 0;
}

// -i / --interactive-first: plain text, no template. After each reply (end of text, -n
// tokens or a reverse prompt) a line from stdin, between --in-prefix and --in-suffix,
// continues the text.
int run_interactive(session &s, const cli_params &p) {
    catch_sigint();
    bool ask = p.interactive_first;
    for (;;) {
        if (ask) {
            std::string line;
            if (!read_line(p, line)) break;
            if (p.escape) line = process_escapes(line);
            const std::string text = p.in_prefix + line + "\n" + p.in_suffix;
            std::vector<pinfer_token> toks = tokenize(s.model, text, s.tokens.empty(), false);
            while (!toks.empty() && (int64_t)s.tokens.size() + (int64_t)toks.size() > (int64_t)pinfer_n_ctx(s.ctx) &&
                   context_shift(s)) {
            }
            eval_tokens(s, toks);
            for (pinfer_token t : toks) pinfer_sampler_accept(s.smpl, t);
            if (!p.in_suffix.empty()) {
                fwrite(p.in_suffix.data(), 1, p.in_suffix.size(), stdout);
                fflush(stdout);
            }
        }
        ask = true;
        if (s.tokens.empty()) continue;  // nothing to continue from yet
        int32_t n_gen = 0;
        grammar_start(s, p, p.model);
        stop_reason why = generate(s, p.n_predict, true, nullptr, nullptr, &n_gen, true);
        if (why == stop_reason::interrupted) note_interrupt(s);
        if (why == stop_reason::ctx_full) {
            fprintf(stderr, "\npinfer: the context is full (%u tokens)\n", pinfer_n_ctx(s.ctx));
            break;
        }
        if (!p.in_prefix.empty()) {
            fwrite(p.in_prefix.data(), 1, p.in_prefix.size(), stdout);
            fflush(stdout);
        }
    }
    fputs("\n", stdout);
    return g_interrupts ? 130 : 0;
}

// ---- --prompt-cache FILE: the prompt's tokens, last logits and KV snapshot ----

constexpr char k_cache_magic[8] = {'P', 'I', 'N', 'F', 'P', 'C', '0', '1'};

// Restores the longest cached prefix of toks (at least one token is left to evaluate so
// that fresh logits exist, unless all of toks were cached); returns the tokens restored.
size_t prompt_cache_load(session &s, const std::string &path, const std::vector<pinfer_token> &toks) {
    FILE *f = fopen(path.c_str(), "rb");
    if (!f) return 0;
    auto ignore = [&](const char *why) -> size_t {
        fclose(f);
        if (s.log) fprintf(stderr, "pinfer: notice: prompt cache '%s' not used: %s\n", path.c_str(), why);
        return 0;
    };
    char magic[8];
    int32_t n = 0, n_vocab = 0;
    uint64_t kv_size = 0;
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, k_cache_magic, 8) != 0) return ignore("not a pinfer prompt cache");
    if (fread(&n, sizeof n, 1, f) != 1 || n <= 0 || n > (int32_t)pinfer_n_ctx(s.ctx))
        return ignore("its token count does not fit this context");
    std::vector<pinfer_token> cached((size_t)n);
    if (fread(cached.data(), sizeof(pinfer_token), cached.size(), f) != cached.size()) return ignore("it is truncated");
    if (fread(&n_vocab, sizeof n_vocab, 1, f) != 1 || n_vocab != pinfer_model_n_vocab(s.model))
        return ignore("another model's vocabulary");
    std::vector<float> logits((size_t)n_vocab);
    if (fread(logits.data(), sizeof(float), logits.size(), f) != logits.size()) return ignore("it is truncated");
    if (fread(&kv_size, sizeof kv_size, 1, f) != 1 || (int64_t)kv_size != pinfer_state_size(s.ctx, n))
        return ignore("made with another model or context settings");
    std::vector<uint8_t> kv((size_t)kv_size);
    if (fread(kv.data(), 1, kv.size(), f) != kv.size()) return ignore("it is truncated");
    fclose(f);
    size_t common = 0;
    while (common < cached.size() && common < toks.size() && cached[common] == toks[common]) common++;
    if (common == 0) return 0;
    if (pinfer_state_set(s.ctx, kv.data(), kv.size(), n, logits.data()) != 0) {
        if (s.log) fprintf(stderr, "pinfer: notice: prompt cache '%s' not used: %s\n", path.c_str(), pinfer_last_error());
        return 0;
    }
    size_t keep = common;
    if (!(common == cached.size() && common == toks.size())) keep = std::min(common, toks.size() - 1);
    pinfer_kv_truncate(s.ctx, (int32_t)keep);
    s.tokens.assign(toks.begin(), toks.begin() + (std::ptrdiff_t)keep);
    if (s.log)
        fprintf(stderr, "pinfer: prompt cache '%s': %zu of %zu prompt tokens restored\n", path.c_str(), keep, toks.size());
    return keep;
}

void prompt_cache_save(session &s, const std::string &path) {
    const int32_t n = (int32_t)s.tokens.size();
    const int64_t kv_size = pinfer_state_size(s.ctx, n);
    const float *logits = pinfer_get_logits(s.ctx, -1);
    if (n <= 0 || kv_size < 0 || !logits) return;
    std::vector<uint8_t> kv((size_t)kv_size);
    if (pinfer_state_get(s.ctx, kv.data(), kv.size()) != 0) throw run_error{api_error("cannot save the prompt cache")};
    const int32_t n_vocab = pinfer_model_n_vocab(s.model);
    // Written beside the target and renamed into place, so a reader never sees half a file.
    std::string tmp = path + ".XXXXXX";
    const int fd = mkstemp(&tmp[0]);
    if (fd < 0) throw run_error{"cannot write the prompt cache '" + path + "': " + strerror(errno)};
    const mode_t um = umask(0);
    umask(um);
    if (fchmod(fd, 0666 & ~um) != 0) { /* keeps mkstemp's 0600 */ }
    FILE *f = fdopen(fd, "wb");
    const uint64_t kv64 = (uint64_t)kv_size;
    bool ok = f && fwrite(k_cache_magic, 1, 8, f) == 8 && fwrite(&n, sizeof n, 1, f) == 1 &&
              fwrite(s.tokens.data(), sizeof(pinfer_token), s.tokens.size(), f) == s.tokens.size() &&
              fwrite(&n_vocab, sizeof n_vocab, 1, f) == 1 &&
              fwrite(logits, sizeof(float), (size_t)n_vocab, f) == (size_t)n_vocab &&
              fwrite(&kv64, sizeof kv64, 1, f) == 1 && fwrite(kv.data(), 1, kv.size(), f) == kv.size();
    ok = (f ? fclose(f) == 0 : (close(fd), false)) && ok;
    if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
        const std::string err = strerror(errno);
        unlink(tmp.c_str());
        throw run_error{"cannot write the prompt cache '" + path + "': " + err};
    }
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
        s.n_batch = p.n_batch;
        s.log = !p.log_disable;
        const char *tmpl = pinfer_model_meta_str(s.model, "tokenizer.chat_template");
        if (!p.conversation_given && !p.have_prompt && p.prompt_file.empty() && !p.interactive &&
            ((tmpl && *tmpl) || !p.chat_template.empty()))
            p.conversation = true;  // llama-cli's default: a chat template and no prompt
        if (p.have_system && !p.conversation) throw run_error{"-sys/--system-prompt needs -cnv/--conversation"};
        if (p.conversation && !p.prompt_cache.empty())
            throw run_error{"--prompt-cache works with a prompt (-p/-f), not in conversation mode"};
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

        const bool on_cpu = p.device == "cpu" || (p.device == "auto" && strcmp(pinfer_context_device(s.ctx), "CPU") == 0);
        if (on_cpu && p.vram_budget_gib >= 0) report_placement(s.model, p);
        if (p.verbose && *pinfer_context_plan_text(s.ctx)) fprintf(stderr, "pinfer: device %s\n%s", pinfer_context_device(s.ctx), pinfer_context_plan_text(s.ctx));

        if (p.conversation) {
            if (p.n_keep < 0) p.n_keep = 0;
            s.n_keep = p.n_keep;
            int rc = run_conversation(s, p, prompt);
            if (!p.log_disable) print_timings(s, t_load_ms);
            if (p.sparse_stats || p.sparse_verify) print_sparse_stats(s);
            return rc;
        }

        std::vector<pinfer_token> toks = tokenize(s.model, prompt, true, true);
        if (p.interactive && prompt.empty()) toks.clear();  // the first input starts the text
        if (toks.empty() && !p.interactive)
            throw run_error{"the prompt is empty and the model has no BOS token to start from"};
        // --keep counts the prompt's tokens after BOS, as llama-cli
        const bool bos_first = !toks.empty() && toks[0] == pinfer_token_bos(s.model);
        s.n_keep = p.n_keep < 0 || (size_t)p.n_keep + bos_first > toks.size() ? (int32_t)toks.size()
                                                                            : p.n_keep + (int32_t)bos_first;
        if (p.verbose) fprintf(stderr, "pinfer: prompt: %zu tokens\n", toks.size());
        const int32_t n_ctx = (int32_t)pinfer_n_ctx(s.ctx);
        if ((int32_t)toks.size() > n_ctx)
            throw run_error{"prompt is too long: " + std::to_string(toks.size()) + " tokens, but the context holds " +
                            std::to_string(n_ctx) + " (raise -c/--ctx-size)"};
        if (p.display_prompt) {
            if (p.color) fputs("\033[33m", stdout);
            fwrite(prompt.data(), 1, prompt.size(), stdout);
            if (p.color) fputs("\033[0m", stdout);
            fflush(stdout);
        }
        size_t restored = 0;
        if (!p.prompt_cache.empty() && !toks.empty()) restored = prompt_cache_load(s, p.prompt_cache, toks);
        if (restored < toks.size())
            eval_tokens(s, std::vector<pinfer_token>(toks.begin() + (std::ptrdiff_t)restored, toks.end()));
        if (!p.prompt_cache.empty() && !toks.empty()) prompt_cache_save(s, p.prompt_cache);
        // Penalties look at the prompt too.
        for (pinfer_token t : toks) pinfer_sampler_accept(s.smpl, t);

        if (p.interactive) {
            int rc = run_interactive(s, p);
            if (!p.log_disable) print_timings(s, t_load_ms);
            return rc;
        }
        int32_t n_gen = 0;
        grammar_start(s, p, p.model);
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

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);  // a helper that died is an error message, not a silent exit
    return run(argc, argv);
}
