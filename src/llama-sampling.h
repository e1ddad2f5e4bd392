// Token sampling: a fixed chain of stages over a candidate array, then a pick.
//
// Chain order (each stage is skipped when its parameter disables it):
//   penalties (repeat / frequency / presence over the last repeat_last_n accepted tokens)
//   -> top-k -> typical -> top-p -> min-p -> temperature -> pick
// typical, top-p and min-p look at the softmax of the (penalized) logits before temperature,
// so the temperature only reshapes the distribution among the survivors. temp <= 0 means
// greedy: the pick is the argmax of the penalized logits (lowest id on ties) and the filters
// are moot.
//
// With mirostat (1 or 2; Basu et al. 2021, the variants llama.cpp ships) the chain is
//   penalties -> temperature -> mirostat truncation -> pick -> update mu
// and top-k / typical / top-p / min-p are not used (as in llama.cpp and llama-cpp-python).
// mu starts at 2 * tau and moves by eta * (observed surprise - tau) after every pick, so a
// mirostat sampler has state beyond its history; reset() restores mu too.
//   v1: estimate the Zipf exponent s from the best m = 100 candidates, keep the top
//       k = ((s - 1) 2^mu / (1 - n_vocab^(1 - s)))^(1 / s) of them;
//   v2: keep the candidates whose surprise -log2 p is at most mu (at least the best one).
//
// Hot-path rule: after the first call with a given vocabulary size nothing is allocated;
// all buffers are members that are reused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pinfer {

struct sampler_params {
    float    temp              = 0.80f;  // <= 0: greedy
    int32_t  top_k             = 40;     // <= 0: off
    float    top_p             = 0.95f;  // >= 1: off
    float    min_p             = 0.05f;  // <= 0: off
    float    repeat_penalty    = 1.00f;  // 1: off; > 1 discourages repeats
    float    frequency_penalty = 0.00f;  // subtracted once per occurrence in the window
    float    presence_penalty  = 0.00f;  // subtracted once if present in the window
    int32_t  repeat_last_n     = 64;     // penalty window; 0: penalties off
    uint32_t seed              = 0xFFFFFFFFu;  // 0xFFFFFFFF: pick a random seed
    size_t   min_keep          = 1;      // typical / top-p / min-p never keep fewer than this
    float    typical_p         = 1.00f;  // >= 1: off; locally typical sampling's mass
    int32_t  mirostat          = 0;      // 0: off, 1 or 2: the mirostat version
    float    mirostat_tau      = 5.00f;  // target surprise (bits)
    float    mirostat_eta      = 0.10f;  // learning rate of mu
};

constexpr uint32_t SAMPLER_RANDOM_SEED = 0xFFFFFFFFu;

struct token_candidate {
    int32_t id;
    float   logit;
    float   p;  // probability among the current candidates (valid after a softmax)
};

class sampler {
public:
    // Throws std::invalid_argument naming the bad parameter.
    explicit sampler(const sampler_params & params);

    // Runs the chain over logits[0..n_vocab) and returns the picked token id.
    // Does not record the token: call accept() with what was actually used.
    int32_t sample(const float * logits, size_t n_vocab);

    // Runs the chain without the final pick; the surviving candidates are then in
    // candidates() with p set. Their order is unspecified (top-k leaves them sorted).
    void apply(const float * logits, size_t n_vocab);
    const token_candidate * candidates() const { return cur_.data(); }
    size_t n_candidates() const { return n_cur_; }

    void accept(int32_t token);  // records history for the penalties
    void reset();                // forgets history and restarts the random stream

    const sampler_params & params() const { return params_; }
    uint32_t seed() const { return seed_; }  // the seed actually in use
    double mirostat_mu() const { return mu_; }  // mirostat's current surprise bound (bits)

private:
    void load(const float * logits, size_t n_vocab);
    void penalize();
    void sort_prefix(size_t m);  // make [0, m) the m best candidates, in order
    size_t select_mass(size_t lo, size_t hi, double need);
    void softmax();
    void top_k();
    void top_p();
    void min_p();
    void temperature();
    double log_sum_exp() const;  // of the current candidates' logits, in double
    void typical();
    void mirostat_v1(size_t n_vocab);
    void mirostat_v2();
    int32_t pick_greedy() const;
    size_t pick_dist();  // index into the candidates

    sampler_params params_;
    uint32_t seed_;
    std::mt19937 rng_;

    std::vector<token_candidate> cur_;  // capacity n_vocab, reused across tokens
    size_t n_cur_ = 0;
    size_t n_sorted_ = 0;               // [0, n_sorted_) holds the best, in order

    std::vector<int32_t> history_;      // ring buffer of the last repeat_last_n tokens
    size_t hist_head_ = 0;              // next write position once the ring is full
    std::vector<int32_t> scratch_;      // sorted copy of the window, for counting
    std::vector<std::pair<double, uint32_t>> keyed_;  // typical: (shifted surprise, index)
    std::vector<token_candidate> reorder_;            // typical: candidates in their new order
    double mu_ = 0.0;                                 // mirostat's surprise bound
};

// ---- stop strings for streaming ----
//
// Given everything generated so far and the stop strings: if a stop string occurs, the
// text before its earliest occurrence is final (stopped = true, emit = that position).
// Otherwise emit = how many leading bytes are safe to show now: a tail that could still
// grow into a stop string is held back, and so is an incomplete UTF-8 sequence at the end
// (the next token may finish the character).
struct stop_result {
    size_t emit    = 0;      // bytes of text that may be emitted (from the start)
    bool   stopped = false;  // a stop string was found
    int    which   = -1;     // index into stops of the match (first listed on equal position)
};

stop_result find_stop(std::string_view text, const std::vector<std::string> & stops);

}  // namespace pinfer
