"""Completion logprobs=N and chat logprobs/top_logprobs in OpenAI's formats, checked
against log_softmax (numpy float64) of the logits _core computes for the same tokens."""
import math

import numpy as np
import pytest

from pinfer import _core  # noqa: E402

# the conftest fixtures: model, llm
MODEL_SEED = 41
LLM_SEED = 5


def reference(path, prompt_tokens, generated):
    """log_softmax rows (float64) of the position before each generated token."""
    m = _core.Model(path)
    ctx = _core.Context(m, 128, 512, 1)
    ctx.decode(prompt_tokens)
    rows = []
    for t in generated:
        x = np.array(ctx.logits(), dtype=np.float64)
        mx = x.max()
        rows.append(x - mx - math.log(np.exp(x - mx).sum()))
        ctx.decode([t])
    return rows


class Recorder:
    """A stopping criterion that never stops and keeps the token ids generated."""

    def __init__(self):
        self.ids = []

    def __call__(self, input_ids, logits):
        self.ids.append(int(input_ids[-1]))
        return False


def ascii_only(llm):
    """A logits processor that keeps printable-ASCII tokens, so that texts join exactly."""
    ok = np.array([all(32 <= b < 127 for b in llm.model.token_to_piece(t, False)) and
                   len(llm.model.token_to_piece(t, False)) > 0 for t in range(llm.n_vocab())])

    def apply(input_ids, scores):
        scores[~ok] = -np.inf
        return scores
    apply.ok = ok
    return apply


def piece(llm, t):
    return llm.model.token_to_piece(t, False).decode("utf-8", errors="ignore")


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_completion_logprobs(llm, model, temperature):
    toks = llm.tokenize(b"The quick brown")
    n = 4
    rec = Recorder()
    asc = ascii_only(llm)
    out = llm(toks, max_tokens=12, temperature=temperature, seed=11, logprobs=n, stopping_criteria=rec,
              logits_processor=asc)
    c = out["choices"][0]
    lp = c["logprobs"]
    assert set(lp) == {"tokens", "text_offset", "token_logprobs", "top_logprobs"}
    assert "".join(lp["tokens"]) == c["text"]
    assert len(lp["tokens"]) == out["usage"]["completion_tokens"]
    for tok_text, off in zip(lp["tokens"], lp["text_offset"]):
        assert c["text"][off:off + len(tok_text)] == tok_text
    again = llm(toks, max_tokens=12, temperature=temperature, seed=11, logits_processor=asc)
    assert again["choices"][0]["text"] == c["text"]  # logprobs do not change sampling
    gen = rec.ids
    assert len(gen) == len(lp["tokens"])
    rows = reference(model, toks, gen)
    for i, (t, row) in enumerate(zip(gen, rows)):
        assert lp["token_logprobs"][i] == pytest.approx(row[t], abs=1e-5)
        top = np.argsort(-row, kind="stable")[:n]
        want = {piece(llm, int(j)): row[j] for j in top}
        want[piece(llm, t)] = row[t]
        got = lp["top_logprobs"][i]
        assert set(got) == set(want)
        for k in want:
            assert got[k] == pytest.approx(want[k], abs=1e-5)
        if temperature == 0:  # greedy picks the most likely token the processor allows
            assert row[t] == pytest.approx(row[asc.ok].max(), abs=1e-9)


def test_completion_logprobs_stream_matches(llm):
    kw = dict(max_tokens=10, temperature=0, logprobs=2, logits_processor=ascii_only(llm))
    whole = llm("Hello", **kw)["choices"][0]["logprobs"]
    chunks = [ch["choices"][0]["logprobs"] for ch in llm("Hello", stream=True, **kw)]
    merged = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for lp in chunks:
        if lp is not None:
            for k in merged:
                merged[k] += lp[k]
    # the streamed run reuses the cached prompt and decodes its last token alone (a padded,
    # reused graph): the same tokens, logprobs to float rounding
    assert merged["tokens"] == whole["tokens"] and merged["text_offset"] == whole["text_offset"]
    assert merged["token_logprobs"] == pytest.approx(whole["token_logprobs"], abs=1e-5)
    for a, b in zip(merged["top_logprobs"], whole["top_logprobs"]):
        assert set(a) == set(b) and all(a[k] == pytest.approx(b[k], abs=1e-5) for k in a)


def test_logprobs_zero_and_errors(llm):
    lp = llm("Hi", max_tokens=3, temperature=0, logprobs=0)["choices"][0]["logprobs"]
    assert all(len(d) == 1 for d in lp["top_logprobs"])  # only the chosen token
    with pytest.raises(ValueError, match="logprobs"):
        llm("Hi", logprobs=-1)
    with pytest.raises(NotImplementedError, match="echo"):
        llm("Hi", logprobs=1, echo=True)
    assert llm("Hi", max_tokens=2)["choices"][0]["logprobs"] is None


def test_chat_logprobs(llm, model):
    msgs = [{"role": "user", "content": "Say something"}]
    rec = Recorder()
    asc = ascii_only(llm)
    out = llm.create_chat_completion(msgs, max_tokens=8, temperature=0, logprobs=True, top_logprobs=3,
                                     stopping_criteria=rec, logits_processor=asc)
    c = out["choices"][0]
    content = c["logprobs"]["content"]
    assert "".join(e["token"] for e in content) == c["message"]["content"]
    prompt = llm.apply_chat_template(msgs)
    ptoks = llm.tokenize(prompt.encode(), add_bos=not prompt.startswith("<s>"), special=True)
    gen = rec.ids
    assert len(gen) == len(content) > 0
    for e, t, row in zip(content, gen, reference(model, ptoks, gen)):
        assert e["logprob"] == pytest.approx(row[t], abs=1e-5)
        assert e["bytes"] == list(llm.model.token_to_piece(t, False))
        assert len(e["top_logprobs"]) == 3
        top = np.argsort(-row, kind="stable")[:3]
        assert [a["token"] for a in e["top_logprobs"]] == [piece(llm, int(j)) for j in top]
        assert [a["logprob"] for a in e["top_logprobs"]] == pytest.approx([row[j] for j in top], abs=1e-5)
    plain = llm.create_chat_completion(msgs, max_tokens=4, temperature=0)
    assert plain["choices"][0]["logprobs"] is None
    streamed = [ch["choices"][0]["logprobs"] for ch in
                llm.create_chat_completion(msgs, max_tokens=8, temperature=0, logprobs=True, top_logprobs=3,
                                           stream=True, logits_processor=asc)]
    flat = [e for lp in streamed if lp for e in lp["content"]]
    assert [(e["token"], e["bytes"]) for e in flat] == [(e["token"], e["bytes"]) for e in content]
    for a, b in zip(flat, content):  # the cached prompt's last token decoded alone: float rounding
        assert a["logprob"] == pytest.approx(b["logprob"], abs=1e-5)
        assert [x["token"] for x in a["top_logprobs"]] == [x["token"] for x in b["top_logprobs"]]
        want = [x["logprob"] for x in b["top_logprobs"]]
        assert [x["logprob"] for x in a["top_logprobs"]] == pytest.approx(want, abs=1e-5)
    with pytest.raises(ValueError, match="top_logprobs"):
        llm.create_chat_completion(msgs, top_logprobs=2)
    with pytest.raises(ValueError, match="top_logprobs"):
        llm.create_chat_completion(msgs, logprobs=True, top_logprobs=21)
