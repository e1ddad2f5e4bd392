// Unicode support for the tokenizers: UTF-8 coding, category flags from the
// generated table (unicode-data.cpp), GPT-2's byte<->unicode mapping, and the
// pre-tokenizer splitters, written by hand because std::regex has neither
// Unicode classes nor the speed needed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace pinfer {

// category flags; must match scripts/gen_unicode_data.py
enum : uint8_t {
    UFLAG_NUMBER = 1,      // \p{N}
    UFLAG_LETTER = 2,      // \p{L}
    UFLAG_SEPARATOR = 4,   // \p{Z}
    UFLAG_MARK = 8,        // \p{M}
    UFLAG_PUNCT = 16,      // \p{P}
    UFLAG_SYMBOL = 32,     // \p{S}
    UFLAG_CONTROL = 64,    // \p{C}
    UFLAG_WHITESPACE = 128 // White_Space property (regex \s)
};

struct unicode_run { uint32_t first; uint8_t flags; };
extern const unicode_run unicode_runs[];
extern const size_t unicode_runs_count;
extern const char *const unicode_data_version;

uint8_t unicode_flags(uint32_t cp);

// Decode one UTF-8 sequence at s[i]; sets len to its byte length. Malformed
// or truncated input decodes as U+FFFD of length 1 so that no byte is lost.
uint32_t utf8_decode(const char *s, size_t n, size_t i, size_t &len);
void utf8_append(std::string &out, uint32_t cp);
std::vector<uint32_t> utf8_to_cpts(const std::string &s);

// GPT-2 byte-level mapping: every byte to a printable code point (as UTF-8).
const std::string &byte_to_unicode(uint8_t b);
// Inverse; returns -1 for a code point outside the 256 mapped ones.
int unicode_to_byte(uint32_t cp);

// The regex families the supported pre-tokenizers use.
enum class pretok_kind {
    gpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
    smollm,  // \p{N} isolated one by one, then the gpt2 pattern on the rest
    llama3,  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
             // | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
    qwen2,   // as llama3 with \p{N} (single digits) instead of \p{N}{1,3}
    falcon,  // Falcon's tokenizer.json sequence: punctuation runs isolated, the gpt2
             // pattern, then (on the byte-level form) numeric runs split from the
             // rest and [0-9]{3} isolated
};

// Split text into pre-tokens; appends [begin, end) byte ranges of text to out.
void pretokenize(pretok_kind kind, const std::string &text, std::vector<std::pair<size_t, size_t>> &out);

}  // namespace pinfer
