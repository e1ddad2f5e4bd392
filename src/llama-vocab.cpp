#include "llama-vocab.h"

#include <algorithm>
#include <cstdio>
#include <queue>
#include <stdexcept>

namespace pinfer {

namespace {

const char *const SPM_SPACE = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space

[[noreturn]] void fail(const std::string &msg) { throw std::runtime_error("vocab: " + msg); }

bool parse_pre(const std::string &pre, pretok_kind &kind, bool &ignore_merges) {
    ignore_merges = false;
    if (pre.empty() || pre == "default" || pre == "gpt2" || pre == "gpt-2") {
        kind = pretok_kind::gpt2;
    } else if (pre == "smollm" || pre == "starcoder" || pre == "refact") {
        kind = pretok_kind::smollm;
    } else if (pre == "llama3" || pre == "llama-bpe" || pre == "llama-v3") {
        kind = pretok_kind::llama3;
        ignore_merges = true;  // Llama 3's tokenizer.json sets ignore_merges
    } else if (pre == "qwen2") {
        kind = pretok_kind::qwen2;
    } else if (pre == "falcon") {
        kind = pretok_kind::falcon;
    } else {
        return false;
    }
    return true;
}

// Control tokens that end a turn in common chat formats, for is_eog.
bool is_eog_text(const std::string &t) {
    static const char *const names[] = {"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|endoftext|>",
                                        "<|end|>", "<end_of_turn>", "<|end_of_text|>"};
    for (const char *n : names)
        if (t == n) return true;
    return false;
}

// "<0xAB>" -> 0xAB, or -1
int parse_byte_token(const std::string &t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
    int v = 0;
    for (int k = 3; k < 5; ++k) {
        char c = t[k];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10
              : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

}  // namespace

llama_vocab::llama_vocab(vocab_params p) : params_(std::move(p)) {
    const size_t n = params_.tokens.size();
    if (n == 0) fail("no tokens");
    if (n > size_t(INT32_MAX)) fail("too many tokens");
    if (!params_.scores.empty() && params_.scores.size() != n)
        fail("scores has " + std::to_string(params_.scores.size()) + " entries for " + std::to_string(n) + " tokens");
    if (!params_.types.empty() && params_.types.size() != n)
        fail("token types has " + std::to_string(params_.types.size()) + " entries for " + std::to_string(n) + " tokens");
    if (params_.scores.empty()) params_.scores.assign(n, 0.0f);
    if (params_.types.empty()) params_.types.assign(n, LLAMA_TOKEN_TYPE_NORMAL);
    for (size_t i = 0; i < n; ++i)
        if (params_.types[i] < 0 || params_.types[i] > LLAMA_TOKEN_TYPE_BYTE)
            fail("token " + std::to_string(i) + " has invalid type " + std::to_string(params_.types[i]));
    const std::pair<const char *, int32_t> ids[] = {{"bos", params_.bos}, {"eos", params_.eos},
        {"unk", params_.unk}, {"pad", params_.pad}, {"sep", params_.sep}, {"eot", params_.eot}, {"eom", params_.eom}};
    for (const auto &[name, id] : ids)
        if (id < -1 || id >= int32_t(n))
            fail(std::string(name) + " token id " + std::to_string(id) + " is out of range [0, " + std::to_string(n) + ")");
    if (params_.add_bos && params_.bos < 0) fail("add_bos is set but there is no bos token");
    if (params_.add_eos && params_.eos < 0) fail("add_eos is set but there is no eos token");

    text_to_id_.reserve(n);
    for (size_t i = 0; i < n; ++i) text_to_id_.emplace(params_.tokens[i], int32_t(i));  // first wins

    if (params_.model == "gpt2") {
        kind_ = kind::bpe;
        if (!parse_pre(params_.pre, pretok_, ignore_merges_)) fail("unknown pre-tokenizer '" + params_.pre + "'");
        for (int b = 0; b < 256; ++b) byte_token_[b] = text_to_token(byte_to_unicode(uint8_t(b)));
        merges_.reserve(params_.merges.size());
        for (size_t r = 0; r < params_.merges.size(); ++r) {
            const std::string &m = params_.merges[r];
            size_t sp = m.find(' ', 1);
            if (sp == std::string::npos || sp + 1 >= m.size())
                fail("merge " + std::to_string(r) + " '" + m + "' is not of the form 'left right'");
            std::string a = m.substr(0, sp), b = m.substr(sp + 1);
            int32_t ia = text_to_token(a), ib = text_to_token(b), ic = text_to_token(a + b);
            if (ia < 0 || ib < 0 || ic < 0)
                fail("merge " + std::to_string(r) + " '" + m + "' uses a token not in the vocabulary");
            merges_.emplace((uint64_t(uint32_t(ia)) << 32) | uint32_t(ib), merge_rule{int32_t(r), ic});  // first wins
        }
    } else if (params_.model == "llama") {
        kind_ = kind::spm;
        std::fill(std::begin(byte_token_), std::end(byte_token_), -1);
        for (size_t i = 0; i < n; ++i) {
            if (params_.types[i] != LLAMA_TOKEN_TYPE_BYTE) continue;
            int b = parse_byte_token(params_.tokens[i]);
            if (b < 0) fail("byte token " + std::to_string(i) + " '" + params_.tokens[i] + "' is not of the form <0xXX>");
            if (byte_token_[b] < 0) byte_token_[b] = int32_t(i);
        }
    } else {
        fail("unknown tokenizer model '" + params_.model + "' (supported: gpt2, llama)");
    }

    // Decoded bytes of every token, so that token_to_piece is a lookup.
    pieces_.resize(n);
    for (size_t i = 0; i < n; ++i) {
        const std::string &t = params_.tokens[i];
        const int32_t type = params_.types[i];
        std::string &out = pieces_[i];
        if (type == LLAMA_TOKEN_TYPE_CONTROL || type == LLAMA_TOKEN_TYPE_UNKNOWN ||
            type == LLAMA_TOKEN_TYPE_USER_DEFINED) {
            out = t;  // written as is (control ones only on request, see token_to_piece)
        } else if (kind_ == kind::bpe) {
            // Undo the byte-level mapping; a code point outside it is kept as UTF-8.
            for (size_t k = 0, len = 0; k < t.size(); k += len) {
                uint32_t cp = utf8_decode(t.data(), t.size(), k, len);
                int b = unicode_to_byte(cp);
                if (b >= 0) out += char(b);
                else out.append(t, k, len);
            }
        } else if (type == LLAMA_TOKEN_TYPE_BYTE) {
            out = std::string(1, char(parse_byte_token(t)));
        } else {
            for (size_t k = 0; k < t.size();) {
                if (t.compare(k, 3, SPM_SPACE) == 0) { out += ' '; k += 3; }
                else out += t[k++];
            }
        }
    }

    // Tokens recognised in text: control/unknown (with parse_special) and
    // user-defined (always); longest first so the longest match wins.
    for (size_t i = 0; i < n; ++i) {
        int32_t type = params_.types[i];
        if ((type == LLAMA_TOKEN_TYPE_CONTROL || type == LLAMA_TOKEN_TYPE_UNKNOWN ||
             type == LLAMA_TOKEN_TYPE_USER_DEFINED) && !params_.tokens[i].empty())
            specials_.push_back(int32_t(i));
    }
    std::stable_sort(specials_.begin(), specials_.end(), [&](int32_t a, int32_t b) {
        return params_.tokens[a].size() > params_.tokens[b].size();
    });
    for (int32_t id : specials_) specials_by_byte_[uint8_t(params_.tokens[id][0])].push_back(id);

    eog_.assign(n, false);
    for (int32_t id : {params_.eos, params_.eot, params_.eom})
        if (id >= 0) eog_[id] = true;
    for (size_t i = 0; i < n; ++i)
        if (params_.types[i] == LLAMA_TOKEN_TYPE_CONTROL && is_eog_text(params_.tokens[i])) eog_[i] = true;
}

void llama_vocab::check_id(int32_t id) const {
    if (id < 0 || id >= n_tokens())
        fail("token id " + std::to_string(id) + " is out of range [0, " + std::to_string(n_tokens()) + ")");
}

const std::string &llama_vocab::token_text(int32_t id) const { check_id(id); return params_.tokens[id]; }
float llama_vocab::token_score(int32_t id) const { check_id(id); return params_.scores[id]; }
int32_t llama_vocab::token_type(int32_t id) const { check_id(id); return params_.types[id]; }
bool llama_vocab::is_eog(int32_t id) const { return id >= 0 && id < n_tokens() && eog_[id]; }

int32_t llama_vocab::text_to_token(const std::string &text) const {
    auto it = text_to_id_.find(text);
    return it == text_to_id_.end() ? -1 : it->second;
}

std::vector<std::pair<size_t, size_t>> llama_vocab::pretokenize(const std::string &text) const {
    std::vector<std::pair<size_t, size_t>> out;
    if (kind_ == kind::bpe) pinfer::pretokenize(pretok_, text, out);
    else if (!text.empty()) out.emplace_back(0, text.size());
    return out;
}

std::vector<int32_t> llama_vocab::tokenize(const std::string &text, bool add_special, bool parse_special) const {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 4);
    if (add_special && params_.add_bos) out.push_back(params_.bos);

    // Split out special tokens (leftmost, then longest), tokenize the text between.
    size_t start = 0;
    bool first = true;
    for (size_t i = 0; i < text.size();) {
        int32_t hit = -1;
        for (int32_t id : specials_by_byte_[uint8_t(text[i])]) {
            const std::string &t = params_.tokens[id];
            if (!parse_special && params_.types[id] != LLAMA_TOKEN_TYPE_USER_DEFINED) continue;
            if (text.compare(i, t.size(), t) == 0) { hit = id; break; }
        }
        if (hit < 0) { ++i; continue; }
        if (i > start) { tokenize_text(text.substr(start, i - start), first, out); first = false; }
        out.push_back(hit);
        first = false;
        i += params_.tokens[hit].size();
        start = i;
    }
    if (start < text.size()) tokenize_text(text.substr(start), first, out);

    if (add_special && params_.add_eos) out.push_back(params_.eos);
    return out;
}

void llama_vocab::tokenize_text(const std::string &text, bool first_fragment, std::vector<int32_t> &out) const {
    if (kind_ == kind::bpe) {
        std::vector<std::pair<size_t, size_t>> words;
        pinfer::pretokenize(pretok_, text, words);
        for (const auto &[a, b] : words) bpe_word(text.data() + a, b - a, out);
    } else {
        // The space is prefixed only at the start of the text and only when the
        // text does not already start with one, as Hugging Face's
        // Metaspace(prepend_scheme="first") does. (sentencepiece itself would
        // prefix " x" too, giving two U+2581.)
        std::string s;
        s.reserve(text.size() * 3 + 3);
        if (params_.add_space_prefix && first_fragment && text[0] != ' ') s += SPM_SPACE;
        for (char c : text) {
            if (c == ' ') s += SPM_SPACE;
            else s += c;
        }
        spm_text(s, out);
    }
}

// Byte-level BPE of one pre-token: start from one symbol per byte and apply
// the lowest-ranked merge (leftmost on ties) until none applies.
void llama_vocab::bpe_word(const char *s, size_t n, std::vector<int32_t> &out) const {
    if (n == 0) return;
    if (ignore_merges_) {
        std::string mapped;
        for (size_t k = 0; k < n; ++k) mapped += byte_to_unicode(uint8_t(s[k]));
        int32_t id = text_to_token(mapped);
        if (id >= 0) { out.push_back(id); return; }
    }
    struct sym { int32_t id; int32_t prev, next; };
    struct cand {
        int32_t rank, pos, left, right;
        bool operator>(const cand &o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    thread_local std::vector<sym> syms;
    thread_local std::vector<cand> heap_store;
    syms.clear();
    for (size_t k = 0; k < n; ++k) {
        int32_t id = byte_token_[uint8_t(s[k])];
        // A vocabulary lacking a byte's token (SmolLM2 has no U+011D, byte 0x1D)
        // drops it, as Hugging Face's BPE does without an unk token.
        if (id < 0) continue;
        int32_t idx = int32_t(syms.size());
        syms.push_back({id, idx - 1, idx + 1});
    }
    if (syms.empty()) return;
    syms.back().next = -1;

    heap_store.clear();
    auto &heap = heap_store;  // min-heap on (rank, position)
    const std::greater<cand> later;
    auto push = [&](int32_t left) {
        if (left < 0) return;
        int32_t right = syms[left].next;
        if (right < 0) return;
        auto it = merges_.find((uint64_t(uint32_t(syms[left].id)) << 32) | uint32_t(syms[right].id));
        if (it == merges_.end()) return;
        heap.push_back({it->second.rank, left, syms[left].id, syms[right].id});
        std::push_heap(heap.begin(), heap.end(), later);
    };
    for (int32_t k = 0; k + 1 < int32_t(syms.size()); ++k) push(k);
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), later);
        cand c = heap.back();
        heap.pop_back();
        sym &l = syms[c.pos];
        if (l.id != c.left || l.next < 0 || syms[l.next].id != c.right) continue;  // stale
        sym &r = syms[l.next];
        l.id = merges_.find((uint64_t(uint32_t(c.left)) << 32) | uint32_t(c.right))->second.result;
        l.next = r.next;
        if (r.next >= 0) syms[r.next].prev = c.pos;
        r.id = -1;
        push(l.prev);
        push(c.pos);
    }
    for (int32_t k = 0; k >= 0; k = syms[k].next) out.push_back(syms[k].id);
}

// SentencePiece BPE: symbols start as UTF-8 characters; the adjacent pair
// whose concatenation is the highest-scoring vocabulary piece merges first
// (leftmost on ties). Pieces left outside the vocabulary become byte tokens.
void llama_vocab::spm_text(const std::string &text, std::vector<int32_t> &out) const {
    if (text.empty()) return;
    struct sym { size_t begin, len; int32_t prev, next; };
    struct cand {
        float score;
        int32_t pos;
        size_t len;  // combined byte length when queued, to detect stale entries
        bool operator<(const cand &o) const { return score != o.score ? score < o.score : pos > o.pos; }
    };
    std::vector<sym> syms;
    for (size_t i = 0, len = 0; i < text.size(); i += len) {
        utf8_decode(text.data(), text.size(), i, len);
        int32_t idx = int32_t(syms.size());
        syms.push_back({i, len, idx - 1, idx + 1});
    }
    syms.back().next = -1;

    std::string key;
    auto lookup = [&](size_t begin, size_t len) {
        key.assign(text, begin, len);
        return text_to_token(key);
    };
    std::priority_queue<cand> pq;
    auto push = [&](int32_t left) {
        if (left < 0 || syms[left].next < 0) return;
        const sym &l = syms[left], &r = syms[l.next];
        int32_t id = lookup(l.begin, l.len + r.len);
        if (id < 0) return;
        int32_t type = params_.types[id];
        if (type != LLAMA_TOKEN_TYPE_NORMAL && type != LLAMA_TOKEN_TYPE_USER_DEFINED) return;
        pq.push({params_.scores[id], left, l.len + r.len});
    };
    for (int32_t k = 0; k + 1 < int32_t(syms.size()); ++k) push(k);
    while (!pq.empty()) {
        cand c = pq.top();
        pq.pop();
        sym &l = syms[c.pos];
        if (l.len == 0 || l.next < 0 || l.len + syms[l.next].len != c.len) continue;  // stale
        sym &r = syms[l.next];
        l.len += r.len;
        l.next = r.next;
        if (r.next >= 0) syms[r.next].prev = c.pos;
        r.len = 0;
        push(l.prev);
        push(c.pos);
    }
    for (int32_t k = 0; k >= 0; k = syms[k].next) {
        int32_t id = lookup(syms[k].begin, syms[k].len);
        if (id >= 0) { out.push_back(id); continue; }
        for (size_t b = 0; b < syms[k].len; ++b) {
            int32_t bt = byte_token_[uint8_t(text[syms[k].begin + b])];
            if (bt >= 0) out.push_back(bt);
            else if (params_.unk >= 0) out.push_back(params_.unk);
        }
    }
}

const std::string &llama_vocab::token_to_piece(int32_t id, bool special) const {
    static const std::string empty;
    check_id(id);
    int32_t type = params_.types[id];
    if (!special && (type == LLAMA_TOKEN_TYPE_CONTROL || type == LLAMA_TOKEN_TYPE_UNKNOWN)) return empty;
    return pieces_[id];
}

std::string llama_vocab::detokenize(const std::vector<int32_t> &ids, bool remove_special, bool unparse_special) const {
    size_t begin = 0, end = ids.size();
    if (remove_special && params_.add_bos && end > begin && ids[begin] == params_.bos) ++begin;
    if (remove_special && params_.add_eos && end > begin && ids[end - 1] == params_.eos) --end;
    std::string out;
    // SentencePiece: the space that tokenize prefixed belongs to no word
    // (HF's decoder likewise strips one leading space.)
    bool strip_space = kind_ == kind::spm && params_.add_space_prefix && remove_special;
    for (size_t k = begin; k < end; ++k) {
        const std::string &p = token_to_piece(ids[k], unparse_special);
        if (strip_space && !p.empty()) {
            strip_space = false;
            if (p[0] == ' ' && params_.types[ids[k]] != LLAMA_TOKEN_TYPE_BYTE) {
                out.append(p, 1, std::string::npos);
                continue;
            }
        }
        out += p;
    }
    return out;
}

}  // namespace pinfer
