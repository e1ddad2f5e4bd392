"""pinfer.Llama (the llama-cpp-python-style API) and the low-level _core classes.

Outputs are checked against references computed independently from the model's
own logits (argmax continuations via _core.Context), against the C chat formatter,
and against the rules of the API (stream == non-stream, stop strings, usage).
"""
import os
import threading

import numpy as np
import pytest
import torch  # noqa: F401
import transformers  # noqa: F401

import tinymodel
from conftest import greedy_continuation
from pinfer import Llama, _core  # noqa: E402

# the conftest fixtures: model, eos_model, llm
MODEL_SEED = 21
EOS_SEED = 22
LLM_SEED = 1234


def greedy_tokens(path, prompt_tokens, n, n_ctx=128):
    """Argmax continuation from _core directly: (tokens, bytes)."""
    m, out = greedy_continuation(path, prompt_tokens, n, n_ctx)
    return out, m.detokenize(out)


def text_of(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


# ---- completion ----

def test_greedy_completion_matches_argmax(llm, model):
    prompt = "The cat sat on"
    toks = llm.tokenize(prompt.encode())
    gen, ref = greedy_tokens(model, toks, 20)
    out = llm(prompt, max_tokens=20, temperature=0)
    assert out["object"] == "text_completion"
    assert out["id"].startswith("cmpl-") and isinstance(out["created"], int) and out["model"] == model
    c = out["choices"][0]
    assert c["index"] == 0 and c["logprobs"] is None
    assert c["text"] == text_of(ref)
    assert c["finish_reason"] == "length"
    assert out["usage"] == {"prompt_tokens": len(toks), "completion_tokens": 20, "total_tokens": len(toks) + 20}


def test_prompt_as_tokens_and_echo(llm, model):
    toks = llm.tokenize(b"abc def")
    gen, ref = greedy_tokens(model, toks, 5)
    out = llm.create_completion(toks, max_tokens=5, temperature=0, echo=True)
    assert out["choices"][0]["text"] == "abc def" + text_of(ref)


def test_streaming_equals_nonstreaming(llm):
    for stop in (None, ["zz"]):
        full = llm("Stream me", max_tokens=25, temperature=0, stop=stop)
        chunks = list(llm("Stream me", max_tokens=25, temperature=0, stop=stop, stream=True))
        assert all(ch["object"] == "text_completion" for ch in chunks)
        assert len({ch["id"] for ch in chunks}) == 1
        assert all(ch["choices"][0]["finish_reason"] is None for ch in chunks[:-1])
        assert chunks[-1]["choices"][0]["finish_reason"] == full["choices"][0]["finish_reason"]
        assert "".join(ch["choices"][0]["text"] for ch in chunks) == full["choices"][0]["text"]
        assert chunks[-1]["usage"] == full["usage"]


def ascii_stop(ref: bytes, start: int):
    """A 2-byte stop string of printable ASCII found in ref at or after start."""
    for i in range(start, len(ref) - 1):
        s = ref[i:i + 2]
        if all(0x21 <= c < 0x7F for c in s) and ref.find(s) == i:
            return s
    return None


def test_stop_strings(llm, model):
    toks = llm.tokenize(b"Stop here")
    gen, ref = greedy_tokens(model, toks, 40)
    stop = ascii_stop(ref, 3)
    assert stop is not None, "the fixture's greedy text has no ASCII pair to stop at"
    cut = ref.find(stop)
    out = llm("Stop here", max_tokens=40, temperature=0, stop=stop.decode())
    c = out["choices"][0]
    assert c["text"] == text_of(ref[:cut])
    assert c["finish_reason"] == "stop"
    # the completion stops at the token that completes the stop string
    n_used = next(i + 1 for i in range(len(gen)) if stop in llm.detokenize(gen[:i + 1]))
    assert out["usage"]["completion_tokens"] == n_used
    # streaming never shows a part of the stop string, and adds up to the same text
    chunks = [ch["choices"][0]["text"] for ch in llm("Stop here", max_tokens=40, temperature=0,
                                                       stop=[stop.decode(), "\x00never"], stream=True)]
    assert "".join(chunks) == c["text"]
    assert not any(stop.decode() in ch for ch in chunks)
    # a stop string that never occurs changes nothing
    out2 = llm("Stop here", max_tokens=40, temperature=0, stop=["\x01\x02\x03never"])
    assert out2["choices"][0]["text"] == text_of(ref) and out2["choices"][0]["finish_reason"] == "length"


def test_partial_stop_held_back():
    from pinfer.llama import _partial_stop_len, _utf8_complete

    assert _partial_stop_len(b"hello wo", [b"world"]) == 2
    assert _partial_stop_len(b"hello", [b"world"]) == 0
    assert _partial_stop_len(b"abab", [b"abc", b"bx"]) == 2
    s = "é".encode() + "€".encode()  # 2 + 3 bytes
    assert _utf8_complete(s, 0, len(s)) == len(s)
    assert _utf8_complete(s, 0, len(s) - 1) == 2  # half of the euro sign is held
    assert _utf8_complete(s, 0, 1) == 0
    assert _utf8_complete(b"ab\xf0\x9f\x98", 0, 5) == 2


def test_until_context_full(model):
    with Llama(model, n_ctx=32) as llm:
        toks = llm.tokenize(b"fill")
        gen, ref = greedy_tokens(model, toks, 10 ** 6, n_ctx=32)
        out = llm("fill", max_tokens=None, temperature=0)
        assert out["choices"][0]["finish_reason"] == "length"
        # prompt + completion fill the context exactly (usage never exceeds n_ctx)
        assert out["usage"]["completion_tokens"] == 32 - len(toks) == len(gen) - 1
        assert out["usage"]["total_tokens"] == 32
        assert out["choices"][0]["text"] == text_of(llm.detokenize(gen[:-1]))
        out0 = llm("fill", max_tokens=0, temperature=0)
        assert out0["choices"][0]["text"] == out["choices"][0]["text"]


def test_end_of_generation(eos_model):
    with Llama(eos_model, n_ctx=64) as llm:
        out = llm("anything", max_tokens=30)
        assert out["choices"][0] == {"text": "", "index": 0, "logprobs": None, "finish_reason": "stop"}
        assert out["usage"]["completion_tokens"] == 0
        chunks = list(llm("anything", max_tokens=30, stream=True))
        assert len(chunks) == 1 and chunks[0]["choices"][0]["finish_reason"] == "stop"


def test_prefix_cache_reuse_gives_same_results(model):
    with Llama(model, n_ctx=128) as a, Llama(model, n_ctx=128) as b:
        a("A shared prefix then one", max_tokens=8, temperature=0)
        r1 = a("A shared prefix then two", max_tokens=8, temperature=0)
        r2 = b("A shared prefix then two", max_tokens=8, temperature=0)
        assert r1["choices"][0]["text"] == r2["choices"][0]["text"]
        # the same prompt again (fully cached)
        r3 = a("A shared prefix then two", max_tokens=8, temperature=0)
        assert r3["choices"][0]["text"] == r1["choices"][0]["text"]


def test_seed_reproducibility(model):
    kw = dict(max_tokens=20, temperature=1.5, top_k=0, top_p=1.0, min_p=0.0)
    with Llama(model, seed=7) as a, Llama(model, seed=7) as b:
        ra = [a("seed", **kw)["choices"][0]["text"] for _ in range(2)]
        rb = [b("seed", **kw)["choices"][0]["text"] for _ in range(2)]
        assert ra == rb
        assert ra[0] != ra[1]  # the instance's RNG moves on between calls
        assert a("seed", seed=99, **kw)["choices"][0]["text"] == b("seed", seed=99, **kw)["choices"][0]["text"]
        assert a("seed", seed=99, **kw)["choices"][0]["text"] != a("seed", seed=98, **kw)["choices"][0]["text"]


def test_prompt_too_long(model):
    with Llama(model, n_ctx=16) as llm:
        with pytest.raises(ValueError, match="too long"):
            llm("x" * 50)
        with pytest.raises(ValueError, match="too long"):
            llm("x" * 50, stream=True)


# ---- chat ----

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi"}]


def test_chat_template_matches_c_formatter(llm):
    jinja = llm.apply_chat_template(MESSAGES)
    c = llm.model.apply_chat_template([(m["role"], m["content"]) for m in MESSAGES], True)
    assert jinja == c
    assert jinja.endswith("<|im_start|>assistant\n")


def test_chat_completion(llm, model):
    prompt = llm.apply_chat_template(MESSAGES)
    toks = llm.tokenize(prompt.encode(), add_bos=True, special=True)
    gen, ref = greedy_tokens(model, toks, 12)
    out = llm.create_chat_completion(MESSAGES, max_tokens=12, temperature=0)
    assert out["object"] == "chat.completion" and out["id"].startswith("chatcmpl-")
    ch = out["choices"][0]
    assert ch["message"] == {"role": "assistant", "content": text_of(ref)}
    assert ch["finish_reason"] == "length" and ch["index"] == 0
    assert out["usage"]["prompt_tokens"] == len(toks)

    chunks = list(llm.create_chat_completion(MESSAGES, max_tokens=12, temperature=0, stream=True))
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert chunks[-1]["choices"][0]["delta"] == {} and chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == text_of(ref)


def test_chat_end_of_turn(eos_model):
    with Llama(eos_model) as llm:
        out = llm.create_chat_completion(MESSAGES)
        assert out["choices"][0]["message"]["content"] == ""
        assert out["choices"][0]["finish_reason"] == "stop"


def test_chat_errors(llm, tmp_path):
    with pytest.raises(ValueError):
        llm.create_chat_completion("not a list")
    with pytest.raises(ValueError):
        llm.create_chat_completion([{"content": "no role"}])
    bad = "{{ raise_exception('roles must alternate') }}"
    with pytest.raises(ValueError, match="roles must alternate"):
        llm.create_chat_completion(MESSAGES, chat_template=bad)
    # the sandbox refuses attribute access to internals
    with pytest.raises(ValueError, match="unsafe"):
        llm.apply_chat_template(MESSAGES, chat_template="{{ messages.__class__.__mro__[1].__subclasses__() }}")
    path, _ = tinymodel.tiny_model(str(tmp_path / "notmpl.gguf"), n_embd=16, n_layer=1, n_head=2, n_ff=16,
                                   chat_template=None)
    with Llama(path) as m:
        with pytest.raises(ValueError, match="chat template"):
            m.create_chat_completion(MESSAGES)


# ---- tokens, eval, logits ----

def test_tokenize_detokenize(llm):
    text = "Hello the world, ünïcödé €"
    toks = llm.tokenize(text.encode())
    assert all(isinstance(t, int) for t in toks)
    assert llm.detokenize(toks) == text.encode()
    assert llm.tokenize(text) == toks  # str is accepted too
    # special tokens are text unless special=True
    im_start = tinymodel.token_id("<|im_start|>")
    assert llm.tokenize(b"<|im_start|>", special=True) == [im_start]
    assert im_start not in llm.tokenize(b"<|im_start|>", special=False)
    assert llm.detokenize([im_start]) == b""
    assert llm.detokenize([im_start], special=True) == b"<|im_start|>"


def test_eval_and_logits_view(llm, model):
    toks = llm.tokenize(b"logits please")
    llm.reset()
    llm.eval(toks)
    assert llm.n_tokens == len(toks)
    np.testing.assert_array_equal(llm.input_ids, toks)
    a = llm.logits
    assert a.dtype == np.float32 and a.shape == (llm.n_vocab(),)
    assert not a.flags.owndata and np.shares_memory(a, llm.logits)  # a view, not a copy
    m = _core.Model(model)
    ctx = _core.Context(m, 128, 512, 2)
    ctx.decode(toks)
    np.testing.assert_allclose(a, ctx.logits(), rtol=0, atol=1e-5)
    llm.eval([int(np.argmax(a))])
    assert llm.n_tokens == len(toks) + 1
    with pytest.raises(ValueError):
        llm.eval([llm.n_vocab()])
    with pytest.raises(ValueError):
        llm.eval([-1])
    with pytest.raises(ValueError):
        llm.eval([])
    llm.reset()
    assert llm.n_tokens == 0


def test_precision_argument(model):
    """precision='fast' (8-bit activations) gives other logits than the default 'high',
    equal to the low-level Context's with the same precision; bad values raise."""
    toks = None
    logits = {}
    for p in ("high", "fast"):
        with Llama(model, n_ctx=64, precision=p) as llm:
            toks = llm.tokenize(b"She was the youngest of the two daughters")
            llm.eval(toks)
            logits[p] = llm.logits.copy()
        ctx = _core.Context(_core.Model(model), 64, 512, 2, precision=p)
        ctx.decode(toks)
        np.testing.assert_allclose(logits[p], ctx.logits(), rtol=0, atol=1e-5)
    assert np.abs(logits["high"] - logits["fast"]).max() > 1e-4
    with pytest.raises(ValueError, match="precision"):
        Llama(model, precision="ultra")
    with pytest.raises(TypeError, match="precision"):
        Llama(model, precision=1)


def test_logits_all_scores(model):
    with Llama(model, n_ctx=64, logits_all=True) as llm:
        toks = llm.tokenize(b"every token")
        llm.eval(toks)
        s = llm.scores
        assert s.shape == (len(toks), llm.n_vocab())
        np.testing.assert_array_equal(s[-1], llm.logits)
        ctx = _core.Context(llm.model, 64, 512, 2)
        for i, t in enumerate(toks):
            ctx.decode([t])
            np.testing.assert_allclose(s[i], ctx.logits(), rtol=0, atol=1e-4)


def test_generate_tokens(llm, model):
    toks = llm.tokenize(b"gen")
    gen, _ = greedy_tokens(model, toks, 6)
    it = llm.generate(toks, temperature=0)
    got = [next(it) for _ in range(6)]
    assert got == gen


def test_facts(llm):
    assert llm.n_ctx() == 128
    assert llm.n_vocab() == tinymodel.vocab_size()
    assert llm.token_eos() == tinymodel.token_id("<|im_end|>")
    assert llm.metadata["general.architecture"] == "llama"
    assert llm.metadata["tokenizer.chat_template"] == tinymodel.CHATML_TEMPLATE


# ---- lifetime and errors ----

def test_close_and_context_manager(model):
    with Llama(model, n_ctx=32) as llm:
        llm.eval(llm.tokenize(b"x"))
        view = llm.logits
        before = view.copy()
    with pytest.raises(ValueError, match="closed"):
        llm("x")
    with pytest.raises(ValueError, match="closed"):
        llm.n_ctx()
    llm.close()  # twice is fine
    np.testing.assert_array_equal(view, before)  # the view kept its buffer alive


def test_constructor_errors(tmp_path, model, monkeypatch):
    with pytest.raises(FileNotFoundError):
        Llama(str(tmp_path / "missing.gguf"))
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)
    with pytest.raises(ValueError):
        Llama(str(bad))
    with pytest.raises(ValueError):
        Llama(model, n_ctx=-1)
    with pytest.raises(ValueError):
        Llama(model, n_batch=0)
    monkeypatch.setenv("PINFER_DEFAULT_MODEL", model)
    with Llama() as llm:
        assert llm.model_path == model


def test_penalties_over_whole_context(llm):
    toks = llm.tokenize(b"penalty")
    it = llm.generate(toks, temperature=0, repeat_penalty=1e6, repeat_last_n=-1)
    gen = [next(it) for _ in range(40)]
    # an overwhelming penalty over the whole context: no token is used twice
    assert len(set(gen)) == len(gen) and not set(gen) & set(toks)
    out = llm("penalty", max_tokens=40, temperature=0, repeat_penalty=1e6, repeat_last_n=-1)
    n = next((i for i, t in enumerate(gen) if llm.model.is_eog(t)), len(gen))
    assert out["choices"][0]["text"] == text_of(llm.detokenize(gen[:n]))
    assert out["usage"]["completion_tokens"] == n


def test_unsupported_arguments(llm):
    with pytest.raises(NotImplementedError, match="suffix"):
        llm("x", suffix="y")
    with pytest.raises(TypeError, match="no_such_argument"):
        llm("x", no_such_argument=1)


# ---- _core classes ----

def test_core_model_lifetime(model):
    m = _core.Model(model)
    ctx = _core.Context(m, 32, 32, 1)
    smp = _core.Sampler(temperature=0, n_vocab=m.n_vocab)
    m.close()
    assert m.closed
    with pytest.raises(ValueError, match="closed"):
        _ = m.n_vocab
    ctx.decode([1, 2, 3])  # the context keeps the model alive
    assert 0 <= smp.sample(ctx.logits()) < ctx.n_vocab
    ctx.close()
    with pytest.raises(ValueError, match="closed"):
        ctx.decode([1])


def test_core_context_errors(model):
    m = _core.Model(model)
    ctx = _core.Context(m, 8, 4, 1)
    with pytest.raises(ValueError, match="decode"):
        ctx.logits()
    with pytest.raises(ValueError, match="out of range"):
        ctx.decode([m.n_vocab])
    with pytest.raises(ValueError):
        ctx.decode([])
    with pytest.raises(ValueError, match="context full"):
        ctx.decode(list(range(9)))
    ctx.decode(np.arange(8, dtype=np.int64))  # other integer arrays convert
    assert ctx.n_past == 8
    with pytest.raises(ValueError, match="context full"):
        ctx.decode([1])
    ctx.kv_truncate(3)
    assert ctx.n_past == 3
    t = ctx.timings()
    assert set(t) == {"t_load_ms", "t_prompt_ms", "n_prompt", "t_eval_ms", "n_eval", "t_host_ms", "n_host",
                      "n_graphs_built", "n_graphs_reused"}
    assert t["n_prompt"] == 8
    with pytest.raises(ValueError):
        _core.Context(m, 8, 4, 1, "q8_0")
    with pytest.raises(ValueError):
        _core.Context(m, 8, 4, 1, 2)
    with pytest.raises(TypeError):
        _core.Context(m, 8, 4, 1, 1.5)
    a, b = _core.Context(m, 8, 4, 1, type_kv=0), _core.Context(m, 8, 4, 1, "f32")
    a.decode([1, 2, 3])
    b.decode([1, 2, 3])
    np.testing.assert_array_equal(a.logits(), b.logits())


def test_core_sampler(model):
    m = _core.Model(model)
    ctx = _core.Context(m, 32, 32, 1)
    ctx.decode([5, 6, 7])
    logits = np.array(ctx.logits())
    g = _core.Sampler(temperature=0, n_vocab=m.n_vocab)
    assert g.sample(ctx.logits()) == g.sample(logits) == int(np.argmax(logits))
    with pytest.raises(ValueError):
        g.sample(logits[:-1])
    draws = []
    for _ in range(2):
        s = _core.Sampler(temperature=2.0, top_k=0, top_p=1.0, min_p=0.0, seed=5, n_vocab=m.n_vocab)
        draws.append([s.sample(logits) for _ in range(30)])
    assert draws[0] == draws[1] and len(set(draws[0])) > 1
    # a repeat penalty steers away from accepted tokens
    top = int(np.argmax(logits))
    p = _core.Sampler(temperature=0, repeat_penalty=1e6, repeat_last_n=8, n_vocab=m.n_vocab)
    p.accept(top)
    assert p.sample(logits) != top
    p.reset()
    assert p.sample(logits) == top
    with pytest.raises(ValueError):
        p.accept(-3)


def test_decode_releases_gil(model):
    """Two threads decode on two contexts; results equal the sequential ones."""
    m = _core.Model(model)
    toks = list(range(3, 40))
    ref = _core.Context(m, 64, 8, 1)
    ref.decode(toks)
    expected = np.array(ref.logits())
    results = [None, None]

    def work(i):
        c = _core.Context(m, 64, 8, 1)
        for _ in range(3):
            c.kv_truncate(0)
            c.decode(toks)
        results[i] = np.array(c.logits())

    th = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    for r in results:
        np.testing.assert_array_equal(r, expected)


def test_embedded_default_model(monkeypatch):
    monkeypatch.delenv("PINFER_DEFAULT_MODEL", raising=False)
    with Llama(n_ctx=128, verbose=False) as llm:
        assert os.path.basename(llm.model_path) == "pinfer-default.gguf"
        out = llm("It is a truth", max_tokens=8, temperature=0)
        assert out["usage"]["completion_tokens"] == 8
        assert out["choices"][0]["text"].strip()
