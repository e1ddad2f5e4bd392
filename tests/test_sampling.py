"""Sampler chain and stop strings against numpy / pure-Python references."""
import numpy as np
import pytest

from pinfer import _core

OFF = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)  # every stage disabled


# ---- numpy reference of the chain (float64 softmax, float32 penalty arithmetic) ----

def softmax(x):
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max())
    return e / e.sum()


def ref_penalize(logits, history, repeat_penalty=1.0, frequency_penalty=0.0,
                 presence_penalty=0.0, repeat_last_n=64):
    l = logits.astype(np.float32).copy()
    window = history[-repeat_last_n:] if repeat_last_n > 0 else []
    toks, counts = np.unique(np.asarray(window, dtype=np.int64), return_counts=True)
    for t, c in zip(toks, counts):
        if repeat_penalty != 1.0:
            l[t] = l[t] / np.float32(repeat_penalty) if l[t] > 0 else l[t] * np.float32(repeat_penalty)
        l[t] -= np.float32(c) * np.float32(frequency_penalty) + np.float32(presence_penalty)
    return l


def ref_chain(logits, history=(), temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, min_keep=1,
              **pen):
    """Returns (ids in chain order, final logits, probs)."""
    l = ref_penalize(logits, list(history), **pen)
    n = len(l)
    ids = np.lexsort((np.arange(n), -l.astype(np.float64)))  # logit desc, id asc
    if 0 < top_k < n:
        ids = ids[:top_k]
    if top_p < 1.0:
        cum = np.cumsum(softmax(l[ids]))
        m = int(np.searchsorted(cum, top_p) + 1)  # first index with cum >= top_p
        ids = ids[:max(min(m, len(ids)), min_keep)]
    if min_p > 0.0:
        p = softmax(l[ids])
        keep = p >= min_p * p.max()
        ids = ids[keep] if keep.sum() >= min_keep else ids[:min_keep]
    final = l[ids].astype(np.float64) / temperature
    return ids, final, softmax(final)


def by_id(ids, *cols):
    o = np.argsort(ids)
    return (ids[o],) + tuple(c[o] for c in cols)


def rand_logits(n, scale=1.0, seed=0):
    return (np.random.default_rng(seed).standard_normal(n) * scale).astype(np.float32)


# ---- stages ----

def test_penalties_match_reference():
    logits = rand_logits(200, 3.0, seed=1)
    pos = [int(i) for i in np.flatnonzero(logits > 0)[:3]]
    neg = [int(i) for i in np.flatnonzero(logits < 0)[:3]]
    # First 4 tokens fall out of the window of 8 and must not be penalized.
    history = [150, 151, 152, 153] + [pos[0], neg[0], pos[0], pos[1], neg[1], pos[0], neg[0], 199]
    pen = dict(repeat_penalty=1.3, frequency_penalty=0.2, presence_penalty=0.5, repeat_last_n=8)
    s = _core.Sampler(**OFF, **pen, seed=1)
    for t in history:
        s.accept(t)
    ids, lg, pr = by_id(*s.candidates(logits))
    assert np.array_equal(ids, np.arange(200))
    ref = ref_penalize(logits, history, **pen)
    np.testing.assert_allclose(lg, ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(pr, softmax(ref), rtol=1e-5, atol=1e-9)
    # Sign rule: positive logits shrink, negative ones grow in magnitude.
    assert lg[pos[1]] < logits[pos[1]] and lg[neg[1]] < logits[neg[1]]
    assert np.array_equal(lg[[150, 151, 152, 153]], logits[[150, 151, 152, 153]])


def test_repeat_penalty_alone_divides_and_multiplies():
    logits = np.array([2.0, -2.0, 1.0, 0.0], dtype=np.float32)
    s = _core.Sampler(**OFF, repeat_penalty=2.0, seed=0)
    for t in (0, 1, 1, 3):
        s.accept(t)
    ids, lg, _ = by_id(*s.candidates(logits))
    np.testing.assert_allclose(lg, [1.0, -4.0, 1.0, 0.0])


def test_reset_forgets_history():
    logits = rand_logits(50, seed=2)
    s = _core.Sampler(**OFF, repeat_penalty=1.5, seed=0)
    s.accept(int(np.argmax(logits)))
    s.reset()
    _, lg, _ = by_id(*s.candidates(logits))
    np.testing.assert_array_equal(lg, logits)


@pytest.mark.parametrize("n,k", [(1000, 1), (1000, 10), (150_000, 40), (5, 40)])
def test_top_k(n, k):
    logits = rand_logits(n, seed=3)
    s = _core.Sampler(**{**OFF, "top_k": k}, seed=0)
    ids, lg, pr = s.candidates(logits)
    rids, rl, rp = ref_chain(logits, temperature=1.0, top_k=k, top_p=1.0, min_p=0.0)
    if k >= n:  # nothing to cut: no sort ran, order is unspecified
        ids, pr = by_id(ids, pr)
        rids, rp = by_id(rids, rp)
    assert np.array_equal(ids, rids)  # same tokens, best first
    np.testing.assert_allclose(pr, rp, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("scale,top_p", [(1.0, 0.9), (1.0, 0.5), (4.0, 0.95), (8.0, 0.3), (0.1, 0.99)])
def test_top_p(scale, top_p):
    # A flat distribution over 50k needs tens of thousands of survivors, a peaked one few.
    logits = rand_logits(50_000, scale, seed=4)
    rids, _, rp = ref_chain(logits, temperature=1.0, top_k=0, top_p=top_p, min_p=0.0)
    cum = np.cumsum(softmax(logits)[rids])
    assert abs(cum[-1] - top_p) > 1e-6 or len(rids) == 1  # the reference cut is not a rounding tie
    s = _core.Sampler(**{**OFF, "top_p": top_p}, seed=0)
    ids, pr = by_id(*s.candidates(logits)[::2])  # a flat tail is selected, not sorted
    rids, rp = by_id(rids, rp)
    assert np.array_equal(ids, rids)
    np.testing.assert_allclose(pr, rp, rtol=1e-4, atol=1e-9)


def test_top_p_min_keep():
    logits = rand_logits(1000, 10.0, seed=5)  # the best token alone holds most of the mass
    s = _core.Sampler(**{**OFF, "top_p": 0.01}, min_keep=7, seed=0)
    ids, _, _ = s.candidates(logits)
    rids, _, _ = ref_chain(logits, temperature=1.0, top_k=0, top_p=0.01, min_p=0.0, min_keep=7)
    assert len(ids) == 7 and np.array_equal(ids, rids)


@pytest.mark.parametrize("min_p", [0.05, 0.2, 0.9])
def test_min_p(min_p):
    logits = rand_logits(20_000, 2.0, seed=6)
    s = _core.Sampler(**{**OFF, "min_p": min_p}, seed=0)
    ids, _, pr = by_id(*s.candidates(logits))
    r = ref_chain(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=min_p)
    rids, rp = by_id(r[0], r[2])
    p = softmax(logits)
    assert np.array_equal(ids, rids)
    assert np.array_equal(ids, np.flatnonzero(p >= min_p * p.max()))
    np.testing.assert_allclose(pr, rp, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("temp", [0.3, 1.0, 1.7])
def test_full_chain_with_temperature(temp):
    logits = rand_logits(32_000, 2.5, seed=7)
    history = [int(i) for i in np.argsort(-logits)[:6]] * 2
    params = dict(temperature=temp, top_k=100, top_p=0.9, min_p=0.02, repeat_penalty=1.1,
                  frequency_penalty=0.05, presence_penalty=0.1, repeat_last_n=64)
    s = _core.Sampler(**params, seed=0)
    for t in history:
        s.accept(t)
    ids, lg, pr = s.candidates(logits)
    rids, rl, rp = ref_chain(logits, history, **params)
    assert np.array_equal(ids, rids)
    np.testing.assert_allclose(lg, rl, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(pr, rp, rtol=1e-4, atol=1e-9)


# ---- picks ----

def test_greedy_is_argmax():
    rng = np.random.default_rng(8)
    s = _core.Sampler(temperature=0.0, seed=0)
    for _ in range(20):
        logits = rng.standard_normal(5000).astype(np.float32)
        assert s.sample(logits) == int(np.argmax(logits))
    ties = np.zeros(100, dtype=np.float32)
    ties[[17, 42, 90]] = 3.0
    assert s.sample(ties) == 17  # first on ties
    assert _core.Sampler(temperature=-1.0, seed=0).sample(ties) == 17


def test_greedy_sees_penalties():
    logits = np.array([0.0, 5.0, 4.0, 1.0], dtype=np.float32)
    s = _core.Sampler(temperature=0.0, repeat_penalty=2.0, seed=0)
    assert s.sample(logits) == 1
    s.accept(1)  # 5 / 2 = 2.5 < 4
    assert s.sample(logits) == 2


def test_seeded_reproducibility():
    logits = rand_logits(32_000, 1.0, seed=9)

    def run(seed, n=300):
        s = _core.Sampler(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=seed)
        return [s.sample(logits) for _ in range(n)]

    a, b, c = run(1234), run(1234), run(4321)
    assert a == b
    assert a != c
    s = _core.Sampler(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=1234)
    assert s.seed == 1234
    first = [s.sample(logits) for _ in range(50)]
    s.reset()
    assert [s.sample(logits) for _ in range(50)] == first == a[:50]
    r = _core.Sampler(seed=-1)
    assert 0 <= r.seed < 2**32


def chi2(counts, probs):
    exp = probs * counts.sum()
    return float(((counts - exp) ** 2 / exp).sum())


def test_distribution_matches_probabilities():
    # 16 tokens, 40k seeded draws. For 15 degrees of freedom P(chi2 > 50) is about 1e-5,
    # so a correct sampler passes with a wide margin while a wrong temperature or an
    # off-by-one in the cumulative walk lands far above.
    logits = rand_logits(16, 1.0, seed=10)
    temp = 0.7
    s = _core.Sampler(temperature=temp, top_k=0, top_p=1.0, min_p=0.0, seed=2024)
    draws = np.array([s.sample(logits) for _ in range(40_000)])
    counts = np.bincount(draws, minlength=16).astype(np.float64)
    p = softmax(logits.astype(np.float64) / temp)
    assert chi2(counts, p) < 50.0
    # The untempered distribution must be clearly rejected: the test can tell.
    assert chi2(counts, softmax(logits)) > 200.0


def test_distribution_after_top_k_and_min_p():
    logits = rand_logits(3000, 1.5, seed=11)
    params = dict(temperature=1.3, top_k=12, top_p=1.0, min_p=0.1)
    rids, _, rp = ref_chain(logits, **params)
    s = _core.Sampler(**params, seed=7)
    draws = np.array([s.sample(logits) for _ in range(30_000)])
    assert set(np.unique(draws)) <= set(rids.tolist())  # nothing outside the survivors
    counts = np.array([(draws == t).sum() for t in rids], dtype=np.float64)
    assert chi2(counts, rp) < 20.0 + 4.0 * len(rids)


def test_bad_arguments():
    with pytest.raises(ValueError, match="repeat_penalty"):
        _core.Sampler(repeat_penalty=0.0)
    with pytest.raises(ValueError, match="repeat_last_n"):
        _core.Sampler(repeat_last_n=-1)
    with pytest.raises(ValueError, match="min_p"):
        _core.Sampler(min_p=1.5)
    with pytest.raises(ValueError, match="seed"):
        _core.Sampler(seed=2**40)
    with pytest.raises(ValueError, match="seed"):
        _core.Sampler(seed=-2)  # one rule: 0 .. 2**32 - 1, or -1 for random
    with pytest.raises(ValueError, match="n_vocab"):
        _core.Sampler(n_vocab=-1)
    with pytest.raises(ValueError, match="vocabulary 4"):
        _core.Sampler(n_vocab=4).sample(np.zeros(5, dtype=np.float32))
    with pytest.raises(ValueError, match="out of range"):
        _core.Sampler(n_vocab=4).accept(4)
    with pytest.raises(ValueError, match="out of range"):
        _core.Sampler().accept(-1)
    with pytest.raises(ValueError, match="empty vocabulary"):
        _core.Sampler().sample(np.zeros(0, dtype=np.float32))
    with pytest.raises(TypeError):
        _core.Sampler().sample(np.zeros((2, 3), dtype=np.float32))


def test_nan_and_inf_logits_are_never_picked():
    logits = np.full(10, -np.inf, dtype=np.float32)
    logits[3] = np.nan
    logits[6] = 0.5
    logits[8] = 0.25
    s = _core.Sampler(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=3)
    assert {s.sample(logits) for _ in range(200)} == {6, 8}
    assert _core.Sampler(temperature=0.0).sample(logits) == 6


# ---- stop strings ----

def ref_find_stop(text, stops):
    """Reference: (emit, stop_index) by brute force over positions and prefixes."""
    hits = [(text.find(s), i) for i, s in enumerate(stops) if s and s in text]
    if hits:
        pos, i = min(hits)
        return pos, i
    held = 0
    for s in stops:
        for k in range(1, len(s)):
            if len(text) >= k and text.endswith(s[:k]):
                held = max(held, k)
    return len(text) - held, -1


@pytest.mark.parametrize("text,stops,expected", [
    ("Hello world", [], (11, -1)),
    ("Hello, Us", ["User:"], (7, -1)),           # partial stop at the end is held back
    ("Hello, User: hi", ["User:"], (7, 0)),
    ("a</s>b<|end|>", ["<|end|>", "</s>"], (1, 1)),  # earliest match wins
    ("xaa", ["aab"], (1, -1)),                    # longest matching prefix held
    ("done.\n\n", ["\n\nUser"], (5, -1)),
    ("héllo wö", ["wörld"], (6, -1)),             # character offsets for str
    ("", ["x"], (0, -1)),
])
def test_find_stop_cases(text, stops, expected):
    assert _core.find_stop(text, stops) == expected
    assert ref_find_stop(text, stops) == expected


def test_find_stop_random_against_reference():
    rng = np.random.default_rng(12)
    alphabet = "abc"
    for _ in range(3000):
        text = "".join(rng.choice(list(alphabet), size=rng.integers(0, 12)))
        stops = ["".join(rng.choice(list(alphabet), size=rng.integers(1, 5)))
                 for _ in range(rng.integers(1, 4))]
        assert _core.find_stop(text, stops) == ref_find_stop(text, stops), (text, stops)


def test_streaming_hold_back():
    # Feed a reply chunk by chunk, emitting what is safe each time: the emitted stream
    # never shows any part of the stop string and ends exactly before it.
    reply = "The answer is 42.\nUser: what next?"
    stops = ["\nUser:", "###"]
    chunks = ["The", " answer", " is", " 42", ".", "\n", "Us", "er", ":", " what"]
    text, shown = "", ""
    for ch in chunks:
        text += ch
        emit, idx = _core.find_stop(text, stops)
        assert emit >= len(shown)
        shown = text[:emit]
        assert "\n" not in shown
        if idx >= 0:
            break
    assert idx == 0 and shown == "The answer is 42."
    assert reply.startswith(text)


def test_find_stop_bytes_holds_incomplete_utf8():
    euro = "€".encode()  # 3 bytes
    assert _core.find_stop(b"ab" + euro[:1], []) == (2, -1)
    assert _core.find_stop(b"ab" + euro[:2], []) == (2, -1)
    assert _core.find_stop(b"ab" + euro, []) == (5, -1)
    assert _core.find_stop(b"ab" + euro + b"S", ["STOP"]) == (5, -1)
    assert _core.find_stop(b"ab" + euro + b"STOP", ["STOP"]) == (5, 0)
