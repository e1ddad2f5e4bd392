#include "llama-sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace pinfer {

namespace {

// Strict weak order: higher logit first, lower id first on ties, so every sort and
// partial sort gives the same order on every platform.
// A function object, not a function pointer, so the std algorithms inline it.
struct better_t {
    bool operator()(const token_candidate & a, const token_candidate & b) const {
        return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
    }
};
constexpr better_t better{};

void check(bool ok, const char * msg) {
    if (!ok) throw std::invalid_argument(msg);
}

}  // namespace

sampler::sampler(const sampler_params & params) : params_(params) {
    check(!std::isnan(params.temp), "sampler: temp is NaN");
    check(!std::isnan(params.top_p), "sampler: top_p is NaN");
    check(!std::isnan(params.min_p) && params.min_p <= 1.0f, "sampler: min_p must be <= 1");
    check(params.repeat_penalty > 0.0f, "sampler: repeat_penalty must be > 0 (1 disables it)");
    check(std::isfinite(params.frequency_penalty), "sampler: frequency_penalty must be finite");
    check(std::isfinite(params.presence_penalty), "sampler: presence_penalty must be finite");
    check(params.repeat_last_n >= 0, "sampler: repeat_last_n must be >= 0 (0 disables penalties)");
    check(!std::isnan(params.typical_p), "sampler: typical_p is NaN");
    check(params.mirostat >= 0 && params.mirostat <= 2, "sampler: mirostat must be 0 (off), 1 or 2");
    check(std::isfinite(params.mirostat_tau), "sampler: mirostat_tau must be finite");
    check(std::isfinite(params.mirostat_eta), "sampler: mirostat_eta must be finite");
    mu_ = 2.0 * double(params.mirostat_tau);
    // The pick needs one candidate, so min_keep 0 behaves as 1.
    if (params_.min_keep == 0) params_.min_keep = 1;

    seed_ = params.seed;
    if (seed_ == SAMPLER_RANDOM_SEED) {
        std::random_device rd;
        seed_ = rd();
    }
    rng_.seed(seed_);
    history_.reserve(size_t(params.repeat_last_n));
    scratch_.reserve(size_t(params.repeat_last_n));
}

void sampler::reset() {
    history_.clear();
    hist_head_ = 0;
    rng_.seed(seed_);
    mu_ = 2.0 * double(params_.mirostat_tau);
}

void sampler::accept(int32_t token) {
    const size_t n = size_t(params_.repeat_last_n);
    if (n == 0) return;
    if (history_.size() < n) {
        history_.push_back(token);  // within the reserved capacity: no allocation
    } else {
        history_[hist_head_] = token;
        hist_head_ = (hist_head_ + 1) % n;
    }
}

void sampler::load(const float * logits, size_t n_vocab) {
    check(logits != nullptr, "sampler: logits is null");
    check(n_vocab > 0, "sampler: empty vocabulary");
    check(n_vocab <= size_t(std::numeric_limits<int32_t>::max()), "sampler: vocabulary too large");
    if (cur_.size() < n_vocab) cur_.resize(n_vocab);  // grows once, then reused
    for (size_t i = 0; i < n_vocab; ++i) {
        float l = logits[i];
        // NaN would break the sort order; treat it as "never pick".
        if (std::isnan(l)) l = -std::numeric_limits<float>::infinity();
        cur_[i] = {int32_t(i), l, 0.0f};
    }
    n_cur_ = n_vocab;
    n_sorted_ = 0;
}

void sampler::penalize() {
    const float rp = params_.repeat_penalty, fp = params_.frequency_penalty,
                pp = params_.presence_penalty;
    if (history_.empty() || (rp == 1.0f && fp == 0.0f && pp == 0.0f)) return;

    // Count occurrences by sorting a copy of the window (at most repeat_last_n entries,
    // within reserved capacity). The candidates are still in id order here.
    scratch_.assign(history_.begin(), history_.end());
    std::sort(scratch_.begin(), scratch_.end());
    for (size_t i = 0; i < scratch_.size();) {
        const int32_t tok = scratch_[i];
        size_t j = i;
        while (j < scratch_.size() && scratch_[j] == tok) ++j;
        const float count = float(j - i);
        i = j;
        if (tok < 0 || size_t(tok) >= n_cur_) continue;  // not in this vocabulary
        float & l = cur_[size_t(tok)].logit;
        // Dividing a negative logit would raise it, so negatives are multiplied instead.
        if (rp != 1.0f) l = l > 0.0f ? l / rp : l * rp;
        l -= count * fp + pp;
    }
}

void sampler::sort_prefix(size_t m) {
    m = std::min(m, n_cur_);
    if (m <= n_sorted_) return;
    // Everything past the sorted prefix ranks below it, so extending the prefix only
    // needs work on the unsorted rest, which top-p reuses when it grows the prefix.
    auto base = cur_.begin() + std::ptrdiff_t(n_sorted_);
    auto mid = cur_.begin() + std::ptrdiff_t(m), last = cur_.begin() + std::ptrdiff_t(n_cur_);
    if (size_t(mid - base) * 32 < size_t(last - base)) {
        // A short prefix (top-k 40 of 150k): a heap that most elements never enter.
        std::partial_sort(base, mid, last, better);
    } else {
        if (mid != last) std::nth_element(base, mid, last, better);
        std::sort(base, mid, better);
    }
    n_sorted_ = m;
}

void sampler::softmax() {
    float mx;
    if (n_sorted_ > 0) {
        mx = cur_[0].logit;
    } else {
        mx = -std::numeric_limits<float>::infinity();
        for (size_t i = 0; i < n_cur_; ++i) mx = std::max(mx, cur_[i].logit);
    }
    if (!(mx > -std::numeric_limits<float>::infinity())) {
        // Every logit is -inf: nothing is preferred, so spread evenly.
        for (size_t i = 0; i < n_cur_; ++i) cur_[i].p = 1.0f / float(n_cur_);
        return;
    }
    double sum = 0.0;
    for (size_t i = 0; i < n_cur_; ++i) {
        const float e = std::exp(cur_[i].logit - mx);
        cur_[i].p = e;
        sum += e;
    }
    const float inv = float(1.0 / sum);
    for (size_t i = 0; i < n_cur_; ++i) cur_[i].p *= inv;
}

void sampler::top_k() {
    const int32_t k = params_.top_k;
    if (k <= 0 || size_t(k) >= n_cur_) return;
    sort_prefix(size_t(k));  // O(n log k), not a full sort
    n_cur_ = size_t(k);
}

size_t sampler::select_mass(size_t lo, size_t hi, double need) {
    // Quickselect by probability mass: keeps the invariant that the answer e (smallest
    // end with mass(best of [lo, e)) >= need) lies in (lo, hi]. Expected O(n), no sort;
    // [lo, e) ends up holding exactly the best candidates, in no particular order.
    while (hi - lo > 1) {
        // Median of three as pivot, moved to hi - 1.
        const size_t mid = lo + (hi - lo) / 2;
        token_candidate * c = cur_.data();
        if (better(c[mid], c[lo])) std::swap(c[mid], c[lo]);
        if (better(c[hi - 1], c[lo])) std::swap(c[hi - 1], c[lo]);
        if (better(c[mid], c[hi - 1])) std::swap(c[mid], c[hi - 1]);
        const token_candidate pv = c[hi - 1];
        size_t st = lo;
        double mass = 0.0;
        for (size_t i = lo; i + 1 < hi; ++i) {
            if (better(c[i], pv)) {
                mass += c[i].p;
                std::swap(c[i], c[st++]);
            }
        }
        std::swap(c[st], c[hi - 1]);  // pivot now at st, better ones before it
        if (mass >= need) {
            hi = st;
        } else if (mass + pv.p >= need) {
            return st + 1;
        } else {
            need -= mass + pv.p;
            lo = st + 1;
        }
    }
    return hi;
}

void sampler::top_p() {
    const float top_p = params_.top_p;
    if (top_p >= 1.0f) return;
    softmax();
    // Peaked distributions (the usual case) are settled by a short sorted prefix; a
    // flat tail is finished by a mass quickselect instead of sorting most of the
    // vocabulary.
    size_t m = std::max<size_t>(64, params_.min_keep);
    double cum = 0.0;
    size_t i = 0;
    for (;;) {
        sort_prefix(m);
        for (; i < n_sorted_; ++i) {
            cum += cur_[i].p;
            if (cum >= top_p && i + 1 >= params_.min_keep) {
                n_cur_ = i + 1;
                return;
            }
        }
        if (n_sorted_ >= n_cur_) return;  // rounding kept the mass just under top_p: keep all
        if (m >= 1024) break;
        m = std::min(n_cur_, m * 2);
    }
    n_cur_ = select_mass(n_sorted_, n_cur_, double(top_p) - cum);
}

void sampler::min_p() {
    const float min_p = params_.min_p;
    if (min_p <= 0.0f) return;
    softmax();
    float pmax = 0.0f;
    if (n_sorted_ > 0) {
        pmax = cur_[0].p;
    } else {
        for (size_t i = 0; i < n_cur_; ++i) pmax = std::max(pmax, cur_[i].p);
    }
    const float thr = min_p * pmax;
    size_t count = 0;
    for (size_t i = 0; i < n_cur_; ++i) count += cur_[i].p >= thr;
    if (count < params_.min_keep) {
        sort_prefix(params_.min_keep);
        n_cur_ = std::min(n_cur_, params_.min_keep);
        return;
    }
    // Stable in-place filter. Survivors of a sorted prefix stay a sorted prefix: the
    // threshold is monotone in the logit, so anything dropped from the prefix drops
    // everything after it too.
    size_t w = 0;
    for (size_t i = 0; i < n_cur_; ++i) {
        if (cur_[i].p >= thr) cur_[w++] = cur_[i];
    }
    n_cur_ = w;
    n_sorted_ = std::min(n_sorted_, w);
}

void sampler::temperature() {
    const float t = params_.temp;
    if (t != 1.0f) {
        const float inv = 1.0f / t;
        for (size_t i = 0; i < n_cur_; ++i) cur_[i].logit *= inv;
    }
    softmax();
}

double sampler::log_sum_exp() const {
    double mx = -std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < n_cur_; ++i) mx = std::max(mx, double(cur_[i].logit));
    if (!(mx > -std::numeric_limits<double>::infinity())) return mx;
    double sum = 0.0;
    for (size_t i = 0; i < n_cur_; ++i) sum += std::exp(double(cur_[i].logit) - mx);
    return mx + std::log(sum);
}

void sampler::typical() {
    const float mass = params_.typical_p;
    if (mass >= 1.0f) return;
    // Log-probabilities in double straight from the logits: the order by distance to the
    // entropy must not hinge on float rounding of p.
    const double lse = log_sum_exp();
    if (!(lse > -std::numeric_limits<double>::infinity())) return;  // all -inf: nothing to rank
    const size_t n = n_cur_;
    double entropy = 0.0;
    for (size_t i = 0; i < n; ++i) {
        const double lp = double(cur_[i].logit) - lse;
        if (std::isfinite(lp)) entropy -= std::exp(lp) * lp;
    }
    keyed_.resize(n);  // grows once, then reused
    for (size_t i = 0; i < n; ++i) {
        const double lp = double(cur_[i].logit) - lse;
        keyed_[i] = {std::isfinite(lp) ? std::fabs(-lp - entropy) : std::numeric_limits<double>::infinity(),
                     uint32_t(i)};
    }
    const token_candidate * c = cur_.data();
    std::sort(keyed_.begin(), keyed_.end(), [c](const auto & a, const auto & b) {
        return a.first < b.first || (a.first == b.first && better(c[a.second], c[b.second]));
    });
    size_t keep = n;
    double cum = 0.0;
    for (size_t i = 0; i < n; ++i) {
        cum += std::exp(double(c[keyed_[i].second].logit) - lse);
        if (cum > double(mass) && i + 1 >= params_.min_keep) {
            keep = i + 1;
            break;
        }
    }
    reorder_.resize(keep);
    for (size_t i = 0; i < keep; ++i) reorder_[i] = c[keyed_[i].second];
    std::copy(reorder_.begin(), reorder_.begin() + std::ptrdiff_t(keep), cur_.begin());
    n_cur_ = keep;
    n_sorted_ = 0;  // now ordered by typicality, not by logit
}

void sampler::mirostat_v1(size_t n_vocab) {
    // Zipf exponent by least squares over the best m candidates: log(p_i / p_i+1) against
    // log((i + 2) / (i + 1)); the ratio of probabilities is the difference of logits.
    constexpr size_t m = 100;
    const size_t top = std::min(m, n_cur_);
    sort_prefix(top);
    double sum_tb = 0.0, sum_tt = 0.0;
    for (size_t i = 0; i + 1 < top; ++i) {
        const double a = cur_[i].logit, b = cur_[i + 1].logit;
        if (!(b > -std::numeric_limits<double>::infinity())) break;
        const double t = std::log(double(i + 2) / double(i + 1));
        sum_tb += t * (a - b);
        sum_tt += t * t;
    }
    size_t k = 1;
    if (sum_tt > 0.0) {
        const double s = sum_tb / sum_tt, eps = s - 1.0;
        const double kk = std::pow(eps * std::pow(2.0, mu_) / (1.0 - std::pow(double(n_vocab), -eps)), 1.0 / s);
        k = n_cur_;  // NaN (s = 1): no truncation
        if (kk < 1.0) k = 1;
        else if (kk < double(n_cur_)) k = size_t(kk);
    }
    sort_prefix(k);
    n_cur_ = k;
    softmax();
}

void sampler::mirostat_v2() {
    // Keep the candidates whose surprise -log2 p is at most mu; the filter is monotone in
    // the logit, so a sorted prefix stays one.
    const double lse = log_sum_exp(), ln2 = std::log(2.0);
    size_t w = 0;
    for (size_t i = 0; i < n_cur_; ++i) {
        if ((lse - double(cur_[i].logit)) / ln2 <= mu_) cur_[w++] = cur_[i];
    }
    if (w == 0) {
        sort_prefix(1);
        w = 1;
    }
    n_cur_ = w;
    n_sorted_ = std::min(n_sorted_, w);
    softmax();
}

int32_t sampler::pick_greedy() const {
    size_t best = 0;
    for (size_t i = 1; i < n_cur_; ++i) {
        if (better(cur_[i], cur_[best])) best = i;
    }
    return cur_[best].id;
}

size_t sampler::pick_dist() {
    // 53 random bits -> uniform double in [0, 1); mt19937 output is fully specified,
    // so a seed gives the same tokens with every standard library.
    const uint64_t hi = rng_() >> 5, lo = rng_() >> 6;  // 27 + 26 bits
    const double u = double((hi << 26) | lo) * (1.0 / 9007199254740992.0);
    double total = 0.0;
    for (size_t i = 0; i < n_cur_; ++i) total += cur_[i].p;
    const double target = u * total;
    double cum = 0.0;
    for (size_t i = 0; i < n_cur_; ++i) {
        cum += cur_[i].p;
        if (target < cum) return i;
    }
    // Rounding left target at the very top: take the last candidate with mass.
    for (size_t i = n_cur_; i-- > 0;) {
        if (cur_[i].p > 0.0f) return i;
    }
    return 0;
}

void sampler::apply(const float * logits, size_t n_vocab) {
    load(logits, n_vocab);
    penalize();
    if (params_.temp <= 0.0f) {
        // Greedy: the filters cannot change the argmax, so the chain collapses to it.
        const int32_t id = pick_greedy();
        cur_[0] = {id, cur_[size_t(id)].logit, 1.0f};
        n_cur_ = 1;
        n_sorted_ = 1;
        return;
    }
    if (params_.mirostat != 0) {
        temperature();
        if (params_.mirostat == 1) mirostat_v1(n_vocab);
        else mirostat_v2();
        return;
    }
    top_k();
    typical();
    top_p();
    min_p();
    temperature();
}

int32_t sampler::sample(const float * logits, size_t n_vocab) {
    apply(logits, n_vocab);
    if (params_.temp <= 0.0f) return cur_[0].id;
    const size_t i = pick_dist();
    if (params_.mirostat != 0) {
        // The pick's surprise among the survivors steers mu towards tau.
        const double surprise = (log_sum_exp() - double(cur_[i].logit)) / std::log(2.0);
        mu_ -= double(params_.mirostat_eta) * (surprise - double(params_.mirostat_tau));
    }
    return cur_[i].id;
}

// ---- stop strings ----

stop_result find_stop(std::string_view text, const std::vector<std::string> & stops) {
    stop_result r;
    size_t best = std::string_view::npos;
    for (size_t i = 0; i < stops.size(); ++i) {
        if (stops[i].empty()) continue;
        const size_t pos = text.find(stops[i]);
        if (pos < best) {
            best = pos;
            r.which = int(i);
        }
    }
    if (best != std::string_view::npos) {
        r.emit = best;
        r.stopped = true;
        return r;
    }

    // Hold back the longest tail that is a proper prefix of some stop string.
    size_t held = 0;
    for (const std::string & s : stops) {
        const size_t kmax = std::min(s.size() ? s.size() - 1 : 0, text.size());
        for (size_t k = kmax; k > held; --k) {
            if (text.compare(text.size() - k, k, s, 0, k) == 0) {
                held = k;
                break;
            }
        }
    }
    size_t emit = text.size() - held;

    // Do not cut a UTF-8 character in half: find the last lead byte among the final
    // (up to 4) bytes and hold it back if its sequence is not complete yet.
    const size_t n = emit;
    for (size_t back = 1; back <= 4 && back <= n; ++back) {
        const unsigned char c = static_cast<unsigned char>(text[n - back]);
        if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking
        size_t len = 1;
        if ((c & 0xE0) == 0xC0) len = 2;
        else if ((c & 0xF0) == 0xE0) len = 3;
        else if ((c & 0xF8) == 0xF0) len = 4;
        if (len > back) emit = n - back;
        break;
    }
    r.emit = emit;
    return r;
}

}  // namespace pinfer
