#include "unicode.h"

#include <algorithm>
#include <array>
#include <unordered_map>

namespace pinfer {

namespace {

// A flat table (1.1 MB) makes the per-code-point lookup one load; it is built
// once from the run-length data on first use.
const std::vector<uint8_t> &flag_table() {
    static const std::vector<uint8_t> table = [] {
        std::vector<uint8_t> t(0x110000, 0);
        for (size_t r = 0; r < unicode_runs_count; ++r) {
            uint32_t end = r + 1 < unicode_runs_count ? unicode_runs[r + 1].first : 0x110000;
            std::fill(t.begin() + unicode_runs[r].first, t.begin() + end, unicode_runs[r].flags);
        }
        return t;
    }();
    return table;
}

struct byte_map {
    std::array<std::string, 256> to_unicode;
    std::unordered_map<uint32_t, uint8_t> to_byte;
    byte_map() {
        // Printable Latin-1 bytes map to themselves; the rest are moved, in
        // byte order, to U+0100 and up (GPT-2's bytes_to_unicode).
        int next = 256;
        for (int b = 0; b < 256; ++b) {
            bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            uint32_t cp = keep ? uint32_t(b) : uint32_t(next++);
            utf8_append(to_unicode[b], cp);
            to_byte[cp] = uint8_t(b);
        }
    }
};

const byte_map &bytes_map() {
    static const byte_map m;
    return m;
}

}  // namespace

uint8_t unicode_flags(uint32_t cp) {
    return cp < 0x110000 ? flag_table()[cp] : 0;
}

uint32_t utf8_decode(const char *s, size_t n, size_t i, size_t &len) {
    const auto *u = reinterpret_cast<const unsigned char *>(s);
    unsigned char c = u[i];
    len = 1;
    if (c < 0x80) return c;
    size_t need;
    uint32_t cp, min;
    if ((c & 0xE0) == 0xC0) { need = 1; cp = c & 0x1F; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { need = 2; cp = c & 0x0F; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { need = 3; cp = c & 0x07; min = 0x10000; }
    else return 0xFFFD;
    if (i + need >= n) return 0xFFFD;  // truncated at the end
    for (size_t k = 1; k <= need; ++k) {
        if ((u[i + k] & 0xC0) != 0x80) return 0xFFFD;
        cp = (cp << 6) | (u[i + k] & 0x3F);
    }
    // overlong forms, surrogates and values past U+10FFFF are malformed
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0xFFFD;
    len = need + 1;
    return cp;
}

void utf8_append(std::string &out, uint32_t cp) {
    if (cp < 0x80) {
        out += char(cp);
    } else if (cp < 0x800) {
        out += char(0xC0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += char(0xE0 | (cp >> 12));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    } else {
        out += char(0xF0 | (cp >> 18));
        out += char(0x80 | ((cp >> 12) & 0x3F));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    }
}

std::vector<uint32_t> utf8_to_cpts(const std::string &s) {
    std::vector<uint32_t> out;
    out.reserve(s.size());
    for (size_t i = 0, len = 0; i < s.size(); i += len) out.push_back(utf8_decode(s.data(), s.size(), i, len));
    return out;
}

const std::string &byte_to_unicode(uint8_t b) { return bytes_map().to_unicode[b]; }

int unicode_to_byte(uint32_t cp) {
    const auto &m = bytes_map().to_byte;
    auto it = m.find(cp);
    return it == m.end() ? -1 : it->second;
}

namespace {

// The text as code points with their flags and byte offsets; the splitters
// work on code point indices and report byte ranges.
struct cpt_text {
    std::vector<uint32_t> cp;
    std::vector<uint8_t> fl;
    std::vector<size_t> off;  // off[k] = byte offset of code point k; off[size] = text size

    explicit cpt_text(const std::string &s) {
        const auto &table = flag_table();
        cp.reserve(s.size());
        fl.reserve(s.size());
        off.reserve(s.size() + 1);
        for (size_t i = 0, len = 0; i < s.size(); i += len) {
            uint32_t c = utf8_decode(s.data(), s.size(), i, len);
            cp.push_back(c);
            fl.push_back(table[c]);
            off.push_back(i);
        }
        off.push_back(s.size());
    }
};

inline bool is_crlf(uint32_t c) { return c == '\r' || c == '\n'; }
inline uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// Length (in code points) of a contraction 's 't 're 've 'm 'll 'd at i, or 0.
// Case-insensitive matching also lets U+017F (long s) match 's', as Unicode
// simple case folding does in the reference regex engines.
size_t match_contraction(const cpt_text &t, size_t i, size_t hi, bool icase) {
    if (t.cp[i] != '\'' || i + 1 >= hi) return 0;
    auto at = [&](size_t k) -> uint32_t {
        if (k >= hi) return 0;
        uint32_t c = t.cp[k];
        if (!icase) return c;
        if (c == 0x17F) return 's';
        return ascii_lower(c);
    };
    uint32_t a = at(i + 1);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    uint32_t b = at(i + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

// \s+(?!\S) falling back to \s+, for a whitespace run starting at i.
size_t match_ws_tail(const cpt_text &t, size_t i, size_t hi) {
    size_t j = i;
    while (j < hi && (t.fl[j] & UFLAG_WHITESPACE)) ++j;
    if (j == hi) return j - i;      // run reaches the end: lookahead holds
    if (j - i >= 2) return j - i - 1;  // leave the last space to the next token
    return 1;                        // a single space before non-space: plain \s+
}

void split_gpt2(const cpt_text &t, size_t lo, size_t hi, std::vector<std::pair<size_t, size_t>> &out) {
    const uint8_t LN = UFLAG_LETTER | UFLAG_NUMBER;
    for (size_t i = lo; i < hi;) {
        size_t n = match_contraction(t, i, hi, false);
        if (!n) {
            size_t j = i + (t.cp[i] == ' ' ? 1 : 0);
            if (j < hi && (t.fl[j] & UFLAG_LETTER)) {
                while (j < hi && (t.fl[j] & UFLAG_LETTER)) ++j;
                n = j - i;
            } else if (j < hi && (t.fl[j] & UFLAG_NUMBER)) {
                while (j < hi && (t.fl[j] & UFLAG_NUMBER)) ++j;
                n = j - i;
            } else if (j < hi && !(t.fl[j] & (LN | UFLAG_WHITESPACE))) {
                while (j < hi && !(t.fl[j] & (LN | UFLAG_WHITESPACE))) ++j;
                n = j - i;
            } else {
                n = match_ws_tail(t, i, hi);
            }
        }
        out.emplace_back(t.off[i], t.off[i + n]);
        i += n;
    }
}

void split_llama3(const cpt_text &t, size_t lo, size_t hi, size_t max_digits,
                  std::vector<std::pair<size_t, size_t>> &out) {
    const uint8_t LN = UFLAG_LETTER | UFLAG_NUMBER;
    for (size_t i = lo; i < hi;) {
        size_t n = match_contraction(t, i, hi, true);
        const uint8_t f = t.fl[i];
        if (n) {
        } else if ((!is_crlf(t.cp[i]) && !(f & LN) && i + 1 < hi && (t.fl[i + 1] & UFLAG_LETTER)) ||
                   (f & UFLAG_LETTER)) {
            // [^\r\n\p{L}\p{N}]?\p{L}+
            size_t j = i + 1;
            while (j < hi && (t.fl[j] & UFLAG_LETTER)) ++j;
            n = j - i;
        } else if (f & UFLAG_NUMBER) {
            size_t j = i + 1;
            while (j < hi && j - i < max_digits && (t.fl[j] & UFLAG_NUMBER)) ++j;
            n = j - i;
        } else {
            size_t j = i + (t.cp[i] == ' ' ? 1 : 0);
            if (j < hi && !(t.fl[j] & (LN | UFLAG_WHITESPACE))) {
                // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
                while (j < hi && !(t.fl[j] & (LN | UFLAG_WHITESPACE))) ++j;
                while (j < hi && is_crlf(t.cp[j])) ++j;
                n = j - i;
            } else {
                // \s*[\r\n]+ : the whitespace run up to its last newline
                size_t j2 = i, last_nl = hi;
                while (j2 < hi && (t.fl[j2] & UFLAG_WHITESPACE)) {
                    if (is_crlf(t.cp[j2])) last_nl = j2;
                    ++j2;
                }
                n = last_nl != hi ? last_nl + 1 - i : match_ws_tail(t, i, hi);
            }
        }
        out.emplace_back(t.off[i], t.off[i + n]);
        i += n;
    }
}

// Rust's char::is_ascii_punctuation || is_punctuation (\p{P}), the test of
// the tokenizers library's Punctuation pre-tokenizer.
inline bool is_punct_hf(uint32_t c, uint8_t fl) {
    const bool ascii = (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
                       (c >= 0x7B && c <= 0x7E);
    return ascii || (fl & UFLAG_PUNCT);
}

// A byte whose byte-level character is numeric (\p{N}): the ASCII digits and
// the Latin-1 bytes that map to themselves as superscripts and fractions.
inline bool byte_is_numeric(uint8_t b) {
    return (b >= '0' && b <= '9') || b == 0xB2 || b == 0xB3 || b == 0xB9 || b == 0xBC || b == 0xBD || b == 0xBE;
}

void split_falcon(const cpt_text &t, const std::string &text, std::vector<std::pair<size_t, size_t>> &out) {
    // 1. runs of punctuation apart from the text around them; 2. gpt2 within each
    std::vector<std::pair<size_t, size_t>> words;
    for (size_t i = 0, n = t.cp.size(); i < n;) {
        const bool p = is_punct_hf(t.cp[i], t.fl[i]);
        size_t j = i + 1;
        while (j < n && is_punct_hf(t.cp[j], t.fl[j]) == p) ++j;
        if (p) words.emplace_back(t.off[i], t.off[j]);
        else split_gpt2(t, i, j, words);
        i = j;
    }
    // 3. numeric runs apart from the rest (on bytes: the byte-level form has one
    // character per byte); 4. three ASCII digits in a row isolated
    const unsigned char *u = (const unsigned char *)text.data();
    auto digit = [&](size_t k) { return u[k] >= '0' && u[k] <= '9'; };
    for (const auto &w : words) {
        for (size_t i = w.first; i < w.second;) {
            const bool num = byte_is_numeric(u[i]);
            size_t j = i + 1;
            while (j < w.second && byte_is_numeric(u[j]) == num) ++j;
            size_t seg = i;
            for (size_t k = i; num && k + 3 <= j;) {
                if (digit(k) && digit(k + 1) && digit(k + 2)) {
                    if (seg < k) out.emplace_back(seg, k);
                    out.emplace_back(k, k + 3);
                    k += 3;
                    seg = k;
                } else {
                    ++k;
                }
            }
            if (seg < j) out.emplace_back(seg, j);
            i = j;
        }
    }
}

}  // namespace

void pretokenize(pretok_kind kind, const std::string &text, std::vector<std::pair<size_t, size_t>> &out) {
    if (text.empty()) return;
    cpt_text t(text);
    const size_t n = t.cp.size();
    switch (kind) {
        case pretok_kind::gpt2: split_gpt2(t, 0, n, out); break;
        case pretok_kind::llama3: split_llama3(t, 0, n, 3, out); break;
        case pretok_kind::qwen2: split_llama3(t, 0, n, 1, out); break;
        case pretok_kind::falcon: split_falcon(t, text, out); break;
        case pretok_kind::smollm: {
            size_t seg = 0;
            for (size_t i = 0; i < n; ++i) {
                if (t.fl[i] & UFLAG_NUMBER) {
                    split_gpt2(t, seg, i, out);
                    out.emplace_back(t.off[i], t.off[i + 1]);
                    seg = i + 1;
                }
            }
            split_gpt2(t, seg, n, out);
            break;
        }
    }
}

}  // namespace pinfer
