"""Prompt caches (LlamaRAMCache, LlamaDiskCache, Llama.set_cache): longest-prefix lookup,
capacity in bytes with least-recently-used eviction, KV snapshots restored without
re-evaluation, and continuations bit-identical to a context that never left the state."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tinymodel  # noqa: E402
from pinfer import Llama, LlamaCache, LlamaDiskCache, LlamaRAMCache, LlamaState, _core  # noqa: E402

P1 = "The cat sat on the mat and looked at the"
P2 = "A completely different story begins here"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path, _ = tinymodel.tiny_model(str(tmp_path_factory.mktemp("pcache") / "tiny.gguf"), n_embd=32, n_layer=2,
                                   n_head=4, n_head_kv=2, n_ff=64, seed=61)
    return path


def n_evaluated(llm):
    t = llm.ctx.timings()
    return t["n_prompt"] + t["n_eval"]


def run(llm, prompt, seed=5):
    out = llm(prompt, max_tokens=6, temperature=0.9, seed=seed, logprobs=3)["choices"][0]
    return out["text"], out["logprobs"]["token_logprobs"], out["logprobs"]["top_logprobs"]


def test_kv_snapshot_restores_without_evaluating(model):
    with Llama(model, n_ctx=96, seed=1) as a, Llama(model, n_ctx=96, seed=1) as b:
        a(P1, max_tokens=5, temperature=0)
        st = a.save_state()
        assert st.kv is not None and st.llama_state_size >= st.kv.nbytes > 0
        a.eval([3, 4, 5])
        after = a.logits.copy()
        before = n_evaluated(b)
        b.load_state(st)
        assert n_evaluated(b) == before  # copied back, not recomputed
        assert np.array_equal(b.logits, st.logits) and list(b.input_ids) == list(st.input_ids)
        b.eval([3, 4, 5])
        assert np.array_equal(b.logits, after)
    with Llama(model, n_ctx=96, type_k=0, type_v=0) as f32, pytest.raises(ValueError, match="KV type"):
        f32.load_state(st)  # an F16 snapshot does not fit an F32 cache


def test_ram_cache_longest_prefix_and_lru(model):
    with Llama(model, n_ctx=64) as llm:
        states = {}
        for toks in ([1, 2, 3, 4], [1, 2, 9], [7, 8]):
            llm.reset()
            llm.eval(toks)
            states[tuple(toks)] = llm.save_state()
    size = max(s.llama_state_size for s in states.values())
    cache = LlamaRAMCache(capacity_bytes=10 * size)
    assert LlamaCache is LlamaRAMCache
    for k, s in states.items():
        cache[k] = s
    assert cache[[1, 2, 3, 4, 5]] is states[(1, 2, 3, 4)]
    assert cache[[1, 2, 9, 9]] is states[(1, 2, 9)]
    assert cache[[1, 5]] in (states[(1, 2, 3, 4)], states[(1, 2, 9)])  # a tie: either shares one token
    assert cache[[7]] is states[(7, 8)]
    assert [9] not in cache and [1] in cache
    with pytest.raises(KeyError):
        cache[[9, 9]]
    assert cache.cache_size == sum(s.llama_state_size for s in states.values())
    # Room for two: storing a third evicts the least recently used one.
    small = LlamaRAMCache(capacity_bytes=states[(1, 2, 3, 4)].llama_state_size + states[(1, 2, 9)].llama_state_size)
    small[(1, 2, 3, 4)] = states[(1, 2, 3, 4)]
    small[(1, 2, 9)] = states[(1, 2, 9)]
    small[[1, 2, 3]]  # touches (1, 2, 3, 4)
    small[(7, 8)] = states[(7, 8)]
    assert set(small.cache_state) == {(1, 2, 3, 4), (7, 8)}
    assert small.cache_size <= small.capacity_bytes
    with pytest.raises(TypeError, match="LlamaState"):
        small[(1,)] = "state"
    with pytest.raises(ValueError, match="capacity_bytes"):
        LlamaRAMCache(capacity_bytes=-1)


@pytest.mark.parametrize("kind", ["ram", "disk"])
def test_cache_hit_gives_the_continuation_of_the_kept_state(model, kind, tmp_path):
    cache = LlamaRAMCache() if kind == "ram" else LlamaDiskCache(str(tmp_path / "c"))
    with Llama(model, n_ctx=96, seed=2) as a, Llama(model, n_ctx=96, seed=2) as ref:
        a.set_cache(cache)
        first = run(a, P1)
        run(a, P2)                 # the context now holds another prompt
        toks = a.tokenize((P1 + " dog").encode())
        shared = a.longest_token_prefix(cache[toks].input_ids.tolist(), toks)
        assert shared >= len(a.tokenize(P1.encode()))  # the first run's state
        n0 = n_evaluated(a)
        again = run(a, P1 + " dog")
        # restored from the cache: only the new prompt tokens and the generated ones were evaluated
        assert n_evaluated(a) - n0 == max(len(toks) - shared, 1) + 5
        # the reference never left P1's state: ordinary prefix reuse
        assert run(ref, P1) == first
        assert run(ref, P1 + " dog") == again  # text and logprobs, bit for bit
    with pytest.raises(TypeError, match="set_cache"):
        a.set_cache({})


def test_disk_cache_persists_evicts_and_leaves_no_temp_files(model, tmp_path, capsys):
    d = tmp_path / "cache"
    with Llama(model, n_ctx=96, seed=3) as a:
        c = LlamaDiskCache(str(d))
        a.set_cache(c)
        run(a, P1)
        run(a, P2)
        assert len(c._keys()) == 2 and sorted(os.listdir(d)) == sorted(os.path.basename(p) for p in c._index.values())
        one = max(os.path.getsize(p) for p in c._index.values())
        saved = {k: c[k] for k in c._keys()}
    (d / "junk.npz").write_bytes(b"not a state")
    c2 = LlamaDiskCache(str(d), capacity_bytes=one + 1)  # a new process would see the same
    assert "skipping" in capsys.readouterr().err
    assert set(c2._keys()) == set(saved)
    for k, s in saved.items():
        got = c2[k]
        assert isinstance(got, LlamaState)
        assert np.array_equal(got.kv, s.kv) and np.array_equal(got.logits, s.logits)
        assert list(got.input_ids) == list(s.input_ids) and got.seed_state == s.seed_state
        assert [(list(t), n) for t, n in got.history] == [(list(t), n) for t, n in s.history]
    with Llama(model, n_ctx=96) as b:
        k = next(iter(saved))
        b.load_state(c2[k])
        assert np.array_equal(b.logits, saved[k].logits)
        c2[list(k) + [1]] = b.save_state()  # over capacity: the older files go
    assert len(c2._keys()) == 1 and c2.cache_size <= one + 1
    left = sorted(os.listdir(d))
    assert left == sorted(["junk.npz", os.path.basename(next(iter(c2._index.values())))])  # no temporary files
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="not a directory"):
        LlamaDiskCache(str(tmp_path / "file"))


def test_state_size_counts_the_kv_bytes(model):
    with Llama(model, n_ctx=64) as llm:
        llm.eval([1, 2, 3])
        s3 = llm.save_state()
        llm.eval([4, 5, 6])
        s6 = llm.save_state()
    # 2 layers x (K + V) x n_embd_gqa (16) x F16 bytes per position
    per_pos = 2 * 2 * 16 * 2
    assert s3.kv.nbytes == 3 * per_pos and s6.kv.nbytes == 6 * per_pos
    ctx = _core.Context(_core.Model(os.fspath(s3.model_path)), 64, 512, 0)
    with pytest.raises(ValueError, match="positions"):
        ctx.set_kv_state(s3.kv, 65, s3.logits)
