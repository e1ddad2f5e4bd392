"""Locally typical sampling and mirostat (v1, v2) against numpy float64 references of the
published algorithms (Meister et al. 2022; Basu et al. 2021, as llama.cpp defines them)."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tinymodel  # noqa: E402
from pinfer import Llama, _core  # noqa: E402


def softmax(x):
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max())
    return e / e.sum()


def rand_logits(n, scale, seed):
    return (np.random.default_rng(seed).standard_normal(n) * scale).astype(np.float32)


def tempered(logits, temp):
    # The chain scales float32 logits by a float32 1/temp; the reference starts from there.
    return (logits.astype(np.float32) * np.float32(1.0 / np.float32(temp))).astype(np.float64)


# ---- references ----

def ref_typical(logits, mass, top_k=0, min_keep=1):
    """Survivor ids of top-k then typical (in typicality order)."""
    l = logits.astype(np.float64)
    ids = np.lexsort((np.arange(len(l)), -l))
    if 0 < top_k < len(l):
        ids = ids[:top_k]
    p = softmax(l[ids])
    entropy = -np.sum(p * np.log(p))
    shifted = np.abs(-np.log(p) - entropy)
    order = np.lexsort((ids, -l[ids], shifted))  # distance, then logit desc, then id
    cum = np.cumsum(p[order])
    hit = np.flatnonzero((cum > mass) & (np.arange(len(order)) + 1 >= min_keep))
    k = int(hit[0]) + 1 if hit.size else len(order)
    return ids[order[:k]]


def ref_mirostat_v1(logits, temp, mu, m=100):
    l = tempered(logits, temp)
    n = len(l)
    order = np.lexsort((np.arange(n), -l))
    p = softmax(l)[order]
    top = min(m, n)
    i = np.arange(top - 1)
    t = np.log((i + 2) / (i + 1))
    b = np.log(p[:top - 1] / p[1:top])
    s = np.sum(t * b) / np.sum(t * t)
    eps = s - 1.0
    k = ((eps * 2.0 ** mu) / (1.0 - float(n) ** (-eps))) ** (1.0 / s)
    k = min(max(int(k), 1), n)
    keep = order[:k]
    return keep, softmax(l[keep])


def ref_mirostat_v2(logits, temp, mu):
    l = tempered(logits, temp)
    p = softmax(l)
    keep = np.flatnonzero(-np.log2(p) <= mu)
    if keep.size == 0:
        keep = np.array([int(np.argmax(l))])
    return keep, softmax(l[keep])


def by_id(ids, probs):
    o = np.argsort(ids)
    return np.asarray(ids)[o], np.asarray(probs)[o]


# ---- typical ----

@pytest.mark.parametrize("mass, top_k", [(0.2, 0), (0.5, 0), (0.9, 0), (0.7, 60), (0.95, 0)])
def test_typical_matches_reference(mass, top_k):
    logits = rand_logits(1500, 2.0, seed=int(mass * 100) + top_k)
    s = _core.Sampler(temperature=1.0, top_k=top_k, top_p=1.0, min_p=0.0, typical_p=mass, seed=0)
    ids, lg, pr = s.candidates(logits)
    rids = ref_typical(logits, mass, top_k)
    assert sorted(ids.tolist()) == sorted(rids.tolist())
    rid, rp = by_id(rids, softmax(logits[rids]))
    cid, cp = by_id(ids, pr)
    np.testing.assert_allclose(cp, rp, rtol=1e-5, atol=1e-9)
    # Typical sampling is not top-p: here it drops some of the most likely tokens.
    if mass <= 0.5:
        assert int(np.argmax(logits)) not in set(ids.tolist())


def test_typical_then_top_p_and_min_keep():
    logits = rand_logits(800, 1.5, seed=3)
    s = _core.Sampler(temperature=1.0, top_k=0, top_p=0.5, min_p=0.0, typical_p=0.8, seed=0)
    ids, _, _ = s.candidates(logits)
    surv = ref_typical(logits, 0.8)
    surv = surv[np.lexsort((surv, -logits[surv].astype(np.float64)))]  # top-p looks at logit order
    cum = np.cumsum(softmax(logits[surv]))
    ref = surv[:int(np.searchsorted(cum, 0.5) + 1)]
    assert sorted(ids.tolist()) == sorted(ref.tolist())
    s = _core.Sampler(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, typical_p=1e-6, min_keep=5, seed=0)
    ids, _, _ = s.candidates(logits)
    assert sorted(ids.tolist()) == sorted(ref_typical(logits, 1e-6, min_keep=5).tolist())
    assert len(ids) == 5


def test_typical_draws_follow_survivor_probabilities():
    logits = rand_logits(60, 1.5, seed=5)
    rids = ref_typical(logits, 0.6)
    rp = softmax(logits[rids].astype(np.float64) / 0.9)
    s = _core.Sampler(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0, typical_p=0.6, seed=11)
    draws = np.array([s.sample(logits) for _ in range(20_000)])
    assert set(np.unique(draws)) <= set(rids.tolist())
    counts = np.array([(draws == t).sum() for t in rids], dtype=np.float64)
    exp = rp * counts.sum()
    assert float(((counts - exp) ** 2 / exp).sum()) < 20.0 + 4.0 * len(rids)


# ---- mirostat ----

@pytest.mark.parametrize("version, ref", [(1, ref_mirostat_v1), (2, ref_mirostat_v2)])
@pytest.mark.parametrize("temp", [1.0, 0.7])
def test_mirostat_truncation_and_mu_follow_reference(version, ref, temp):
    tau, eta = 4.0, 0.15
    s = _core.Sampler(temperature=temp, mirostat=version, mirostat_tau=tau, mirostat_eta=eta, seed=42)
    mu = 2.0 * tau
    assert s.mirostat_mu == pytest.approx(mu)
    sizes = set()
    for step in range(40):
        logits = rand_logits(3000, 2.0 + 0.05 * (step % 7), seed=100 + step)
        ids, _, pr = s.candidates(logits)
        rids, rp = ref(logits, temp, mu)
        assert sorted(ids.tolist()) == sorted(rids.tolist()), f"step {step}"
        cid, cp = by_id(ids, pr)
        _, rps = by_id(rids, rp)
        np.testing.assert_allclose(cp, rps, rtol=1e-5, atol=1e-9)
        tok = s.sample(logits)
        assert tok in set(rids.tolist())
        # tau and eta are float32 parameters
        mu -= float(np.float32(eta)) * (-np.log2(rp[list(rids).index(tok)]) - tau)
        assert s.mirostat_mu == pytest.approx(mu, abs=1e-9)
        sizes.add(len(ids))
    assert len(sizes) > 3  # mu moved the cut


@pytest.mark.parametrize("version", [1, 2])
def test_mirostat_holds_surprise_near_tau(version):
    # A Zipf-like distribution whose entropy is well above tau: the controller must cut
    # it down until the average surprise of the picks is about tau.
    n = 4000
    logits = (-1.1 * np.log(np.arange(1, n + 1))).astype(np.float32)
    logits = logits[np.random.default_rng(0).permutation(n)]
    full = softmax(logits)
    entropy = -np.sum(full * np.log2(full))
    tau = 3.0
    assert entropy > tau + 2
    s = _core.Sampler(temperature=1.0, mirostat=version, mirostat_tau=tau, mirostat_eta=0.1, seed=9)
    surprise = []
    for _ in range(3000):
        ids, _, pr = s.candidates(logits)
        tok = s.sample(logits)
        surprise.append(-np.log2(pr[list(ids).index(tok)]))
    assert abs(np.mean(surprise[500:]) - tau) < 0.3
    s.reset()
    assert s.mirostat_mu == pytest.approx(2 * tau)


def test_mirostat_seeded_and_greedy():
    logits = rand_logits(2000, 2.0, seed=1)
    a = _core.Sampler(temperature=1.0, mirostat=2, seed=5)
    b = _core.Sampler(temperature=1.0, mirostat=2, seed=5)
    assert [a.sample(logits) for _ in range(50)] == [b.sample(logits) for _ in range(50)]
    g = _core.Sampler(temperature=0.0, mirostat=1, seed=5)
    assert g.sample(logits) == int(np.argmax(logits))
    assert g.mirostat_mu == pytest.approx(10.0)  # greedy picks do not move mu


def test_bad_parameters():
    for kw, msg in [(dict(mirostat=3), "mirostat"), (dict(mirostat=-1), "mirostat"),
                    (dict(mirostat_tau=float("inf")), "mirostat_tau"),
                    (dict(mirostat_eta=float("nan")), "mirostat_eta"),
                    (dict(typical_p=float("nan")), "typical_p")]:
        with pytest.raises(ValueError, match=msg):
            _core.Sampler(**kw)


# ---- through pinfer.Llama ----

@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    path, _ = tinymodel.tiny_model(str(tmp_path_factory.mktemp("typ") / "tiny.gguf"), n_embd=32, n_layer=2,
                                   n_head=4, n_head_kv=2, n_ff=64, seed=5)
    with Llama(path, n_ctx=64, seed=3) as m:
        yield m


def test_llama_passes_typical_and_mirostat(llm):
    llm.reset()
    llm.eval(llm.tokenize(b"hello there"))
    lg = np.array(llm.logits, dtype=np.float64)
    # The single most typical token (its surprise closest to the entropy) is the only survivor.
    only = int(ref_typical(lg.astype(np.float32), 1e-9)[0])
    for _ in range(5):
        assert llm.sample(temp=1.0, top_k=0, top_p=1.0, min_p=0.0, typical_p=1e-9) == only
    # mirostat v2 with a tiny tau keeps only the top token; v1 likewise cuts to k = 1.
    for mode in (1, 2):
        assert llm.sample(temp=1.0, mirostat_mode=mode, mirostat_tau=0.001) == int(np.argmax(lg))
    out = [llm("hello", max_tokens=6, temperature=1.0, mirostat_mode=2, mirostat_tau=3.0, seed=4)["choices"][0]["text"]
           for _ in range(2)]
    assert out[0] == out[1]
    toks = list(zip(range(4), llm.generate(llm.tokenize(b"hi"), temp=1.0, typical_p=0.5, seed=2)))
    assert len(toks) == 4
    msgs = [{"role": "user", "content": "hi"}]
    llm.create_chat_completion(msgs, max_tokens=3, mirostat_mode=1, mirostat_eta=0.2, seed=1,
                               chat_template="{{ messages[0]['content'] }}")
    with pytest.raises(ValueError, match="mirostat_mode"):
        llm("x", max_tokens=1, mirostat_mode=3)
    with pytest.raises(TypeError, match="typical_p"):
        llm("x", max_tokens=1, typical_p="0.5")
