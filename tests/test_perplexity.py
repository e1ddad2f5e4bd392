"""pinfer.perplexity against Hugging Face transformers computing the same windows."""
import math
import os
import subprocess

import numpy as np
import pytest

from conftest import PRIDE_OPENING
from pinfer import _core
from pinfer.cli import find_tool
from pinfer.perplexity import perplexity, windows
from tinymodel import tiny_model

TEXT = PRIDE_OPENING * 3


def hf_window_nll(model, tokens, n_ctx, stride=None, max_windows=None, dtype=None, half=False, bos=None):
    """NLLs of the scored tokens, the way the docstring of pinfer.perplexity (and HF's
    strided-perplexity guide) defines them, computed with transformers. With half:
    llama-perplexity's windows (the second half scored; the first token replaced by bos if given)."""
    import torch

    nll = []
    prev_end = 0
    begin = 0
    n_win = 0
    step = n_ctx if stride is None else stride
    while begin + n_ctx <= len(tokens) and (max_windows is None or n_win < max_windows):
        end = begin + n_ctx
        ids = torch.tensor([tokens[begin:end]], dtype=torch.long)
        # targets: all but the first token of the window (default, or the first strided
        # window); later strided windows: only the tokens past the previous window's end
        n_target = n_ctx - 1 if stride is None or begin == 0 else end - prev_end
        if half:
            if bos is not None:
                ids[0, 0] = bos
            n_target = n_ctx - 1 - n_ctx // 2
        with torch.no_grad():
            logits = model(ids).logits[0].to(torch.float64)
        lp = torch.log_softmax(logits[:-1], dim=-1)
        tgt = ids[0, 1:]
        tok_nll = -lp[torch.arange(n_ctx - 1), tgt]
        nll.append(tok_nll[-n_target:].numpy())
        prev_end = end
        begin += step
        n_win += 1
    return np.concatenate(nll)


def summary(nll):
    ppl = math.exp(nll.mean())
    return ppl, ppl * nll.std(ddof=1) / math.sqrt(len(nll))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    import copy

    import torch

    d = tmp_path_factory.mktemp("ppl")
    path, hf = tiny_model(str(d / "tiny.gguf"), n_layer=2, seed=3)
    tokens = _core.Model(path).tokenize(TEXT, add_special=False)
    with_bos = _core.Model(path).tokenize(TEXT, add_special=True)
    f16 = str(d / "tiny-f16.gguf")
    r = subprocess.run([find_tool("pinfer-quantize"), path, f16, "f16"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 0, r.stdout
    # HF twin of the F16 file: matrices rounded to float16 (1-D norms stay F32 there)
    hf16 = copy.deepcopy(hf)
    with torch.no_grad():
        for p in hf16.parameters():
            if p.ndim >= 2:
                p.copy_(p.half().float())
    return {"f32": path, "f16": f16, "hf": hf, "hf16": hf16, "tokens": tokens, "with_bos": with_bos, "dir": d}


@pytest.mark.parametrize("n_ctx,stride,max_windows,method", [(64, None, None, "all"), (48, 16, 10, None),
                                                             (40, None, 3, "all"), (32, 31, 4, None),
                                                             (64, None, None, None), (40, None, 3, "llama.cpp")])
def test_tiny_f32_vs_hf_float64(tiny, n_ctx, stride, max_windows, method):
    import copy

    import torch

    hf64 = copy.deepcopy(tiny["hf"]).to(torch.float64)
    llamacpp = stride is None and method != "all"
    if llamacpp:  # this model adds no BOS: llama-perplexity's windows are then the text's own
        assert tiny["with_bos"] == tiny["tokens"]
        ref = hf_window_nll(hf64, tiny["tokens"], n_ctx, stride, max_windows, half=True)
    else:
        ref = hf_window_nll(hf64, tiny["tokens"], n_ctx, stride, max_windows)
    seen = []
    ppl, err, n = perplexity(tiny["f32"], TEXT, n_ctx=n_ctx, stride=stride, max_windows=max_windows, n_batch=16,
                             n_threads=2, progress=lambda i, k, p, s: seen.append((i, k, p, s)), method=method)
    ref_ppl, ref_err = summary(ref)
    assert n == len(ref)
    assert abs(ppl / ref_ppl - 1) < 1e-3, (ppl, ref_ppl)   # the issue asks for 1%; float32 gives far closer
    assert abs(err / ref_err - 1) < 1e-2, (err, ref_err)
    # one progress call per window, the last one at the final value
    assert [s[0] for s in seen] == list(range(1, len(seen) + 1)) and seen[-1][3] == n
    assert len(seen) == len(windows(len(tiny["with_bos" if llamacpp else "tokens"]), n_ctx, stride, max_windows,
                                    method))
    assert abs(seen[-1][2] - ppl) < 1e-9 * ppl


def test_tiny_f16_vs_hf(tiny):
    ref = hf_window_nll(tiny["hf16"], tiny["tokens"], 64)  # float32, f16-rounded weights
    ppl, err, n = perplexity(tiny["f16"], TEXT, n_ctx=64, method="all")
    ref_ppl, _ = summary(ref)
    print(f"tiny F16: pinfer {ppl:.5f}, transformers {ref_ppl:.5f}")
    assert n == len(ref)
    assert abs(ppl / ref_ppl - 1) < 2e-3, (ppl, ref_ppl)


def test_llamacpp_method_vs_numpy_float64_of_the_logits():
    """The default method recomputed from the model's own logits in float64: windows of
    n_ctx tokens of the BOS-tokenized text, the first replaced by BOS, the second half scored.
    The embedded default model adds BOS (SentencePiece)."""
    from pinfer.llama import default_model_path

    n_ctx = 32
    path = default_model_path()
    model = _core.Model(path)
    toks = np.asarray(model.tokenize(TEXT, add_special=True), dtype=np.int32)
    assert toks[0] == model.bos and model.bos not in model.tokenize(TEXT, add_special=False)
    nll = []
    ctx = _core.Context(model, n_ctx, n_ctx, 2)
    for w in range(len(toks) // n_ctx):
        win = toks[w * n_ctx:(w + 1) * n_ctx].copy()
        win[0] = model.bos
        ctx.kv_truncate(0)
        ctx.decode(win, True)
        lg = ctx.logits_all().astype(np.float64)
        lse = lg.max(axis=1) + np.log(np.exp(lg - lg.max(axis=1, keepdims=True)).sum(axis=1))
        for j in range(n_ctx // 2, n_ctx - 1):  # logits at j predict the token at j + 1
            nll.append(lse[j] - lg[j, win[j + 1]])
    nll = np.asarray(nll)
    ref_ppl, ref_err = summary(nll)
    ppl, err, n = perplexity(path, TEXT, n_ctx=n_ctx, n_batch=n_ctx, n_threads=2)
    assert n == len(nll) == (len(toks) // n_ctx) * (n_ctx - 1 - n_ctx // 2)
    assert ppl == pytest.approx(ref_ppl, rel=1e-9) and err == pytest.approx(ref_err, rel=1e-7)
    # and it differs from scoring every token of BOS-less windows
    assert perplexity(path, TEXT, n_ctx=n_ctx, method="all")[0] != pytest.approx(ppl, rel=1e-3)


def test_window_plan():
    assert windows(10, 4, method="llama.cpp") == [(0, 3), (4, 3)] == windows(10, 4)
    assert windows(10, 4, method="all") == [(0, 1), (4, 1)]
    assert windows(10, 4, stride=2) == [(0, 1), (2, 2), (4, 2), (6, 2)]
    assert windows(10, 4, stride=3, max_windows=2) == [(0, 1), (3, 1)]
    # every token from the second to the end of the last window is scored exactly once
    plan = windows(1000, 128, stride=50)
    scored = [b + j for b, f in plan for j in range(f, 128)]
    assert scored == list(range(1, plan[-1][0] + 128))


@pytest.mark.network
def test_smollm2_q4_1_vs_transformers_gguf():
    from pinfer.datasets import austen, smollm2_path

    path = smollm2_path()
    text = austen()[:20000]
    n_ctx, n_win = 128, 3
    ppl, err, n = perplexity(path, text, n_ctx=n_ctx, max_windows=n_win, n_threads=2, method="all")

    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(2)
    hf = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                              dtype=torch.float32).eval()
    tokens = _core.Model(path).tokenize(text, add_special=False)
    ref = hf_window_nll(hf, tokens, n_ctx, max_windows=n_win)
    ref_ppl, ref_err = summary(ref)
    print(f"SmolLM2-135M Q4_1, Austen, {n_win} windows of {n_ctx}: pinfer {ppl:.4f} +/- {err:.4f}, "
          f"transformers (same GGUF, dequantized) {ref_ppl:.4f} +/- {ref_err:.4f} over {n} tokens")
    assert n == len(ref) == n_win * (n_ctx - 1)
    assert abs(ppl / ref_ppl - 1) < 0.01, (ppl, ref_ppl)
    assert 2 < ppl < 200  # a trained model on English prose, not a random one


# ---- errors ----

def test_errors(tiny, tmp_path):
    p = tiny["f32"]
    with pytest.raises(ValueError, match="n_ctx"):
        perplexity(p, TEXT, n_ctx=1)
    with pytest.raises(ValueError, match="stride"):
        perplexity(p, TEXT, n_ctx=32, stride=32)
    with pytest.raises(ValueError, match="stride"):
        perplexity(p, TEXT, n_ctx=32, stride=0)
    with pytest.raises(ValueError, match="fewer than one window"):
        perplexity(p, "short text", n_ctx=64)
    with pytest.raises(ValueError, match="method"):
        perplexity(p, TEXT, n_ctx=32, method="bogus")
    with pytest.raises(ValueError, match="stride"):
        perplexity(p, TEXT, n_ctx=32, stride=8, method="all")
    with pytest.raises(ValueError, match="max_windows"):
        perplexity(p, TEXT, n_ctx=32, max_windows=0)
    with pytest.raises(ValueError, match="n_batch"):
        perplexity(p, TEXT, n_ctx=32, n_batch=0)
    with pytest.raises(TypeError, match="text must be a str"):
        perplexity(p, b"bytes", n_ctx=32)
    with pytest.raises(OSError):
        perplexity(tmp_path / "missing.gguf", TEXT, n_ctx=32)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(ValueError, match="cannot load model"):
        perplexity(bad, TEXT, n_ctx=32)
