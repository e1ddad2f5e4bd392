"""Llama(embedding=True): embed() / create_embedding() against transformers'
last_hidden_state (after the final norm) of the same random weights, in float64."""
import numpy as np
import pytest

from pinfer import Llama
from tinymodel import make_hf_model, tiny_model, write_gguf


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_model(str(tmp_path_factory.mktemp("emb") / "tiny.gguf"), seed=5)


_F64 = {}


def hf_hidden(hf, tokens):
    """float64 last_hidden_state [n, d] of HF's model (a float64 copy, made once)."""
    import copy

    import torch
    if id(hf) not in _F64:
        _F64[id(hf)] = (hf, copy.deepcopy(hf).to(torch.float64))
    m = _F64[id(hf)][1]
    with torch.no_grad():
        out = m.model(torch.tensor([tokens], dtype=torch.long))
    return out.last_hidden_state[0].numpy()


@pytest.mark.parametrize("pooling", ["mean", "cls", "last", "none", 1, 2, 3])
def test_pooling_matches_transformers(tiny, pooling):
    path, hf = tiny
    with Llama(path, n_ctx=64, n_threads=1, embedding=True, pooling_type=pooling, type_k=0, type_v=0) as llm:
        texts = ["the tin man", "a rather longer text to embed, in one batch with the others", "x"]
        got = llm.embed(texts)
        for text, v in zip(texts, got):
            h = hf_hidden(hf, llm.tokenize(text.encode()))
            kind = {1: "mean", 2: "cls", 3: "last"}.get(pooling, pooling)
            ref = {"mean": h.mean(0), "cls": h[0], "last": h[-1], "none": h}[kind]
            np.testing.assert_allclose(np.array(v), ref, atol=1e-4 * np.abs(ref).max(), rtol=0)


def test_normalize_truncate_count_and_openai_shape(tiny):
    path, hf = tiny
    with Llama(path, n_ctx=16, n_threads=1, embedding=True, type_k=0, type_v=0) as llm:
        text = "the words of this text are more than sixteen tokens long, surely"
        toks = llm.tokenize(text.encode())
        assert len(toks) > 16
        v, n = llm.embed(text, normalize=True, return_count=True)
        assert n == 16
        ref = hf_hidden(hf, toks[:16]).mean(0)
        np.testing.assert_allclose(v, ref / np.linalg.norm(ref), atol=1e-5)
        with pytest.raises(ValueError, match="more than n_ctx"):
            llm.embed(text, truncate=False)
        r = llm.create_embedding(["a", "bc"], model="m")
        assert r["object"] == "list" and r["model"] == "m"
        assert [d["index"] for d in r["data"]] == [0, 1] and all(d["object"] == "embedding" for d in r["data"])
        assert r["usage"]["prompt_tokens"] == len(llm.tokenize(b"a")) + len(llm.tokenize(b"bc"))
        assert len(r["data"][0]["embedding"]) == llm.n_embd()
        # generation still works beside the embedding context
        assert llm("the", max_tokens=2, temperature=0)["choices"][0]["finish_reason"] in ("length", "stop")


def test_bad_pooling_is_an_error(tiny):
    path, _ = tiny
    with pytest.raises(ValueError, match="pooling_type 'max'"):
        Llama(path, n_ctx=16, embedding=True, pooling_type="max")
    with pytest.raises(ValueError, match="rank"):
        Llama(path, n_ctx=16, embedding=True, pooling_type=4)
    with pytest.raises(ValueError, match="only with embedding=True"):
        Llama(path, n_ctx=16, pooling_type="mean")


def test_pooling_from_the_file(tmp_path):
    """llama.pooling_type = 2 (cls) in the GGUF is used when no pooling_type is given."""
    hf = make_hf_model(seed=6)
    path = write_gguf(hf, str(tmp_path / "cls.gguf"), pooling_type=2)
    with Llama(path, n_ctx=32, n_threads=1, embedding=True, type_k=0, type_v=0) as llm:
        toks = llm.tokenize(b"the tin man")
        ref = hf_hidden(hf, toks)[0]
        np.testing.assert_allclose(llm.embed("the tin man"), ref, atol=1e-4 * np.abs(ref).max(), rtol=0)
    with Llama(path, n_ctx=32, n_threads=1, embedding=True, pooling_type="last", type_k=0, type_v=0) as llm:
        ref = hf_hidden(hf, toks)[-1]
        np.testing.assert_allclose(llm.embed("the tin man"), ref, atol=1e-4 * np.abs(ref).max(), rtol=0)
