"""Perplexity of a GGUF model on a text.

Which tokens are scored
-----------------------
Every window is evaluated from an empty KV cache, and a token is scored by the
model's log-probability of it given the tokens before it *in the same window*.

* Default, ``method="llama.cpp"`` (llama-perplexity's method, so that numbers
  compare with published llama.cpp figures): the text is tokenized as
  llama.cpp does, with the BOS token the model adds, into ``t[0..N)``; window
  ``w`` holds ``t[w*n_ctx : (w+1)*n_ctx]`` with its first token replaced by BOS
  (when the model adds one), and only its second half is scored: the tokens at
  positions ``n_ctx//2 + 1 .. n_ctx - 1``, i.e. ``n_ctx - 1 - n_ctx//2`` per
  window, each with at least ``n_ctx//2`` tokens of context.

For the other methods the text is tokenized as is (no BOS or other special
tokens are added):

* ``method="all"`` (non-overlapping windows): window ``w`` holds
  ``t[w*n_ctx : (w+1)*n_ctx]``; in each window every token except the first is
  scored, i.e. ``n_ctx - 1`` tokens per window. The first token of each window
  is context only.
* ``stride=S`` (``1 <= S < n_ctx``, the strided recipe of Hugging Face's
  perplexity guide): window ``w`` holds ``t[w*S : w*S + n_ctx]``. Window 0
  scores all its tokens except the first; every later window scores only its
  last ``S`` tokens, which are exactly the tokens the previous window did not
  reach. Each token from ``t[1]`` on is scored once, with at least
  ``n_ctx - S`` tokens of context (except inside window 0).

Only full windows are used (a trailing partial window is dropped), and
``max_windows`` keeps only the first windows.

The result is ``ppl = exp(mean NLL)`` over all scored tokens, with the
standard error of the mean NLL (sample standard deviation / sqrt(n))
propagated to the perplexity to first order: ``ppl * se``. Neighbouring
tokens are not independent, so this error is a rough guide.
"""
from __future__ import annotations

import math
import os
from typing import Callable, List, Optional, Sequence, Tuple, Union

import numpy as np

__all__ = ["perplexity", "perplexity_tokens", "windows", "nll_of_logits"]

# Progress callback: (window index from 1, number of windows, running ppl, scored tokens so far).
Progress = Callable[[int, int, float, int], None]


METHODS = ("llama.cpp", "all", "strided")


def _method(method: Optional[str], stride: Optional[int]) -> str:
    if method is None:
        return "llama.cpp" if stride is None else "strided"
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if (method == "strided") != (stride is not None):
        raise ValueError("stride= goes with method='strided' (or method=None) and only with it")
    return method


def windows(n_tokens: int, n_ctx: int, stride: Optional[int] = None,
            max_windows: Optional[int] = None, method: Optional[str] = None) -> List[Tuple[int, int]]:
    """The evaluation plan: a list of ``(begin, first_scored)``.

    Each window is ``tokens[begin : begin + n_ctx]``; positions ``first_scored ..
    n_ctx - 1`` of it are scored (``first_scored >= 1``)."""
    _check_ctx_stride(n_ctx, stride)
    method = _method(method, stride)
    if max_windows is not None and (not isinstance(max_windows, int) or max_windows < 1):
        raise ValueError(f"max_windows must be a positive int, got {max_windows!r}")
    if n_tokens < n_ctx:
        raise ValueError(f"the text has {n_tokens} tokens, fewer than one window of n_ctx = {n_ctx}; "
                         "give a longer text or a smaller context")
    step = n_ctx if stride is None else stride
    out: List[Tuple[int, int]] = []
    begin = 0
    while begin + n_ctx <= n_tokens and (max_windows is None or len(out) < max_windows):
        if method == "llama.cpp":
            first = n_ctx // 2 + 1
        else:
            first = 1 if (stride is None or begin == 0) else n_ctx - stride
        out.append((begin, first))
        begin += step
    return out


def _check_ctx_stride(n_ctx, stride) -> None:
    if not isinstance(n_ctx, (int, np.integer)) or isinstance(n_ctx, bool) or n_ctx < 2:
        raise ValueError(f"n_ctx must be an int >= 2, got {n_ctx!r}")
    if stride is not None:
        if not isinstance(stride, (int, np.integer)) or isinstance(stride, bool) or not 1 <= stride < n_ctx:
            raise ValueError(f"stride must be an int with 1 <= stride < n_ctx = {n_ctx}, got {stride!r}")


def nll_of_logits(logits: np.ndarray, targets: Union[Sequence[int], np.ndarray], chunk: int = 64) -> np.ndarray:
    """Negative log-likelihood (float64) of targets[i] under the softmax of logits[i]."""
    ids = np.asarray(targets, dtype=np.int64)
    out = np.empty(len(ids), dtype=np.float64)
    for a in range(0, len(ids), chunk):  # chunks bound the float64 copy of the logits
        lp = np.asarray(logits[a:a + chunk], dtype=np.float64)
        m = lp.max(axis=1)
        lse = m + np.log(np.exp(lp - m[:, None]).sum(axis=1))
        out[a:a + chunk] = lse - lp[np.arange(len(lp)), ids[a:a + chunk]]
    return out


def _summary(nll: np.ndarray) -> Tuple[float, float]:
    mean = float(nll.mean())
    ppl = math.exp(mean)
    se = float(nll.std(ddof=1) / math.sqrt(len(nll))) if len(nll) > 1 else float("nan")
    return ppl, ppl * se


def perplexity_tokens(model, tokens: Sequence[int], n_ctx: int, stride: Optional[int] = None,
                      n_batch: int = 512, n_threads: Optional[int] = None,
                      max_windows: Optional[int] = None,
                      progress: Optional[Progress] = None, sparse: str = "off",
                      stats: Optional[dict] = None, method: Optional[str] = None) -> Tuple[float, float, int]:
    """Perplexity of an already tokenized sequence; model is a ``pinfer._core.Model``.
    With method "llama.cpp" each window starts with BOS (when the model adds one);
    the tokens should then be tokenized with it, as :func:`perplexity` does.
    sparse: the FFN mode ("off", "exact", "predictor", "threshold", "auto"); when
    ``stats`` is a dict it receives the context's sparse statistics.
    Returns ``(ppl, ppl_stderr, n_scored_tokens)``."""
    from . import _core

    if not isinstance(n_batch, int) or n_batch < 1:
        raise ValueError(f"n_batch must be a positive int, got {n_batch!r}")
    if n_threads is not None and (not isinstance(n_threads, int) or n_threads < 1):
        raise ValueError(f"n_threads must be a positive int or None, got {n_threads!r}")
    ids = np.ascontiguousarray(tokens, dtype=np.int32)
    method = _method(method, stride)
    plan = windows(len(ids), n_ctx, stride, max_windows, method)
    bos = model.tokenize("", add_special=True, parse_special=False) if method == "llama.cpp" else []
    ctx = _core.Context(model, n_ctx, min(n_batch, n_ctx), n_threads or 0, "f16", sparse, stats is not None)
    try:
        if ctx.n_ctx < n_ctx:
            raise ValueError(f"the context holds only {ctx.n_ctx} tokens, asked for n_ctx = {n_ctx}")
        parts = []
        total = 0
        for w, (begin, first) in enumerate(plan):
            win = ids[begin:begin + n_ctx].copy()
            if bos:
                win[0] = bos[0]  # as llama-perplexity: every window starts with BOS
            ctx.kv_truncate(0)
            ctx.decode(win, True)
            logits = ctx.logits_all()
            # logits at position j-1 predict the token at position j
            parts.append(nll_of_logits(logits[first - 1:n_ctx - 1], win[first:]))
            total += len(parts[-1])
            if progress is not None:
                running = math.exp(float(np.concatenate(parts).mean()))
                progress(w + 1, len(plan), running, total)
        nll = np.concatenate(parts)
        if not np.isfinite(nll).all():  # a perplexity of nan or inf is no result
            raise RuntimeError("the model's logits gave a non-finite log-likelihood")
        if stats is not None:
            stats.update(ctx.sparse_stats())
    finally:
        ctx.close()
    ppl, err = _summary(nll)
    return ppl, err, len(nll)


def _tokenize_enough(model, text: str, n_needed: Optional[int], add_bos: bool = False) -> List[int]:
    """Tokenize text, or only a prefix of it when n_needed tokens suffice (long corpora)."""
    if n_needed is None:
        return model.tokenize(text, add_special=add_bos, parse_special=False)
    n_chars = max(4096, 8 * n_needed)
    while n_chars < len(text):
        toks = model.tokenize(text[:n_chars], add_special=add_bos, parse_special=False)
        # the last tokens of a cut text can differ from the full text's: keep a margin
        if len(toks) >= n_needed + 64:
            return toks[:n_needed + 64]
        n_chars *= 2
    return model.tokenize(text, add_special=add_bos, parse_special=False)


def perplexity(model_path: Union[str, os.PathLike], text: Optional[str] = None, n_ctx: int = 512,
               stride: Optional[int] = None, n_batch: int = 512, n_threads: Optional[int] = None,
               max_windows: Optional[int] = None,
               progress: Optional[Progress] = None, sparse: str = "off",
               stats: Optional[dict] = None, method: Optional[str] = None) -> Tuple[float, float, int]:
    """Perplexity of the model at model_path on text (default: Jane Austen's novels,
    :func:`pinfer.datasets.austen`). See the module docstring for which tokens are
    scored (``method``: "llama.cpp" by default, "all", or "strided" with ``stride``).
    Returns ``(ppl, ppl_stderr, n_scored_tokens)``."""
    from . import _core

    _check_ctx_stride(n_ctx, stride)
    method = _method(method, stride)
    if text is None:
        from .datasets import austen

        text = austen()
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    model = _core.Model(os.fspath(model_path))
    try:
        need = None
        if max_windows is not None and isinstance(max_windows, int) and max_windows >= 1:
            need = n_ctx + (max_windows - 1) * (n_ctx if stride is None else stride)
        tokens = _tokenize_enough(model, text, need, add_bos=method == "llama.cpp")
        return perplexity_tokens(model, tokens, n_ctx, stride=stride, n_batch=n_batch, n_threads=n_threads,
                                 max_windows=max_windows, progress=progress, sparse=sparse, stats=stats,
                                 method=method)
    finally:
        model.close()


# ---------------------------------------------------------------- CLI

def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "perplexity", help="perplexity of a model on a text",
        description="Perplexity of a GGUF model on a text file (default: Jane Austen's novels). "
                    "By default llama-perplexity's method: non-overlapping windows of --ctx tokens, each "
                    "starting with BOS, the second half of each scored; --all-tokens scores every token "
                    "but the first of each window; with --stride S, windows start every S tokens and "
                    "score their last S tokens.")
    p.add_argument("-m", "--model", required=True, help="GGUF model file")
    p.add_argument("-f", "--file", help="UTF-8 text file (default: pinfer.datasets.austen())")
    p.add_argument("-c", "--ctx", type=int, default=512, help="window length in tokens (default 512)")
    p.add_argument("--stride", type=int, default=None, help="strided windows: score the last S tokens of each")
    p.add_argument("--all-tokens", action="store_true",
                   help="score every token but the first of each window (no BOS) instead of the second half")
    p.add_argument("-b", "--batch", type=int, default=512, help="tokens per evaluation batch (default 512)")
    p.add_argument("-t", "--threads", type=int, default=None, help="threads (default: all cores)")
    p.add_argument("--max-windows", type=int, default=None, help="evaluate at most N windows")
    p.add_argument("--sparse", default="off", choices=["off", "exact", "predictor", "threshold", "auto"],
                   help="sparse FFN mode (default off)")
    p.set_defaults(func=main)


def main(args) -> int:
    import sys

    text = None
    if args.file is not None:
        try:
            with open(args.file, encoding="utf-8") as f:
                text = f.read()
        except UnicodeDecodeError as e:
            raise ValueError(f"{args.file}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if not os.path.exists(args.model):
        raise FileNotFoundError(f"model file '{args.model}' does not exist")

    def show(i, n, running, scored):
        print(f"[{i}/{n}] ppl = {running:.4f} ({scored} tokens)", flush=True)

    if args.all_tokens and args.stride is not None:
        raise ValueError("give either --all-tokens or --stride, not both")
    method = "all" if args.all_tokens else None
    ppl, err, n = perplexity(args.model, text, n_ctx=args.ctx, stride=args.stride, n_batch=args.batch,
                             n_threads=args.threads, max_windows=args.max_windows, progress=show,
                             sparse=args.sparse, method=method)
    if not math.isfinite(ppl):
        raise RuntimeError(f"the perplexity is {ppl}: not a result (non-finite log-likelihoods)")
    print(f"final: ppl = {ppl:.4f} +/- {err:.4f} over {n} tokens")
    print(f"Final estimate: PPL = {ppl:.4f} +/- {err:.5f}")
    sys.stdout.flush()
    return 0
