// Tokenizers built from GGUF tokenizer metadata, without depending on GGUF
// parsing: the loader reads tokenizer.ggml.* into vocab_params and builds a
// llama_vocab from it.
//
// Two models are supported:
//   "gpt2"  byte-level BPE: bytes map to printable code points, a regex-style
//           pre-tokenizer (named by tokenizer.ggml.pre) splits the text, and
//           merges apply by rank;
//   "llama" SentencePiece BPE: spaces become U+2581, an optional space is
//           prefixed, adjacent pieces merge highest-score first, and pieces
//           not in the vocabulary fall back to <0xXX> byte tokens.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "unicode.h"

namespace pinfer {

// tokenizer.ggml.token_type values
enum llama_token_type : int32_t {
    LLAMA_TOKEN_TYPE_UNDEFINED = 0,
    LLAMA_TOKEN_TYPE_NORMAL = 1,
    LLAMA_TOKEN_TYPE_UNKNOWN = 2,
    LLAMA_TOKEN_TYPE_CONTROL = 3,
    LLAMA_TOKEN_TYPE_USER_DEFINED = 4,
    LLAMA_TOKEN_TYPE_UNUSED = 5,
    LLAMA_TOKEN_TYPE_BYTE = 6,
};

struct vocab_params {
    std::string model;                // tokenizer.ggml.model: "gpt2" or "llama"
    std::string pre;                  // tokenizer.ggml.pre (gpt2 only; "default" if absent)
    std::vector<std::string> tokens;  // token texts, index = id
    std::vector<float> scores;        // per token, or empty (all 0)
    std::vector<int32_t> types;       // per token (llama_token_type), or empty (all normal)
    std::vector<std::string> merges;  // "left right", highest priority first (gpt2)
    // special token ids, -1 when absent
    int32_t bos = -1, eos = -1, unk = -1, pad = -1, sep = -1, eot = -1, eom = -1;
    bool add_bos = false;
    bool add_eos = false;
    bool add_space_prefix = false;    // SentencePiece: prefix the text with a space
};

class llama_vocab {
public:
    // Throws std::runtime_error naming the problem on an unknown model or
    // pre-tokenizer, or arrays that do not fit together.
    explicit llama_vocab(vocab_params p);

    // Text (UTF-8 bytes) to token ids. add_special adds BOS/EOS as the flags
    // say; parse_special recognises control tokens written in the text.
    // User-defined tokens are always recognised.
    std::vector<int32_t> tokenize(const std::string &text, bool add_special = true,
                                  bool parse_special = false) const;

    // The bytes a token stands for; control tokens give their text only when
    // special is set, and nothing otherwise.
    const std::string &token_to_piece(int32_t id, bool special = false) const;

    // Concatenated pieces. remove_special drops the BOS/EOS that tokenize adds
    // (and, for SentencePiece, the prefixed space); unparse_special renders
    // control tokens as their text.
    std::string detokenize(const std::vector<int32_t> &ids, bool remove_special = false,
                           bool unparse_special = false) const;

    int32_t n_tokens() const { return int32_t(params_.tokens.size()); }
    const std::string &model() const { return params_.model; }
    const std::string &pre() const { return params_.pre; }
    int32_t bos() const { return params_.bos; }
    int32_t eos() const { return params_.eos; }
    int32_t eot() const { return params_.eot; }
    int32_t eom() const { return params_.eom; }
    int32_t unk() const { return params_.unk; }
    int32_t pad() const { return params_.pad; }
    int32_t sep() const { return params_.sep; }
    bool add_bos() const { return params_.add_bos; }
    bool add_eos() const { return params_.add_eos; }
    // end of generation: EOS, EOT, EOM and the well-known end-of-turn control tokens
    bool is_eog(int32_t id) const;

    const std::string &token_text(int32_t id) const;
    float token_score(int32_t id) const;
    int32_t token_type(int32_t id) const;
    // id of a token text, or -1
    int32_t text_to_token(const std::string &text) const;

    // Pre-tokenizer split alone (byte ranges), for tests of the splitter.
    std::vector<std::pair<size_t, size_t>> pretokenize(const std::string &text) const;

private:
    enum class kind { bpe, spm };
    struct merge_rule { int32_t rank; int32_t result; };

    void check_id(int32_t id) const;
    void tokenize_text(const std::string &text, bool first_fragment, std::vector<int32_t> &out) const;
    void bpe_word(const char *s, size_t n, std::vector<int32_t> &out) const;
    void spm_text(const std::string &text, std::vector<int32_t> &out) const;

    vocab_params params_;
    kind kind_ = kind::bpe;
    pretok_kind pretok_ = pretok_kind::gpt2;
    bool ignore_merges_ = false;  // look whole pre-tokens up before merging (llama3)

    std::unordered_map<std::string, int32_t> text_to_id_;
    std::unordered_map<uint64_t, merge_rule> merges_;  // (left id << 32 | right id)
    int32_t byte_token_[256];  // gpt2: id of each byte's mapped char; spm: <0xXX> ids
    std::vector<std::string> pieces_;   // decoded bytes of each token
    std::vector<int32_t> specials_;     // matchable tokens, longest text first
    std::vector<int32_t> specials_by_byte_[256];  // the same, by first byte
    std::vector<bool> eog_;
};

}  // namespace pinfer
