"""Calibrate per-layer activation thresholds for the threshold sparse mode.

    pinfer calibrate model.gguf --target-sparsity 0.5 [-f corpus.txt] [-o out.gguf]

Runs pinfer's own engine (dense) over a corpus (Jane Austen's novels by
default; a few thousand tokens), with the FFN observer on: per layer, a
histogram of |act(gate x)| (ungated FFNs: |act(up x)|) over every token and
neuron. The threshold of layer l is the ``target_sparsity`` quantile of that
distribution, so that a fraction ``target_sparsity`` of the (token, neuron)
pairs of the calibration text falls at or below it (CATS/TEAL-style). The
thresholds go into ``pinfer.sparse.act_thresholds`` of a copy of the file
(extended GGUF, docs/extended-gguf.md); ``--sparse threshold`` then runs it.

:func:`profile_engine` uses the same observer for per-neuron activation counts
of a GGUF file (what ``pinfer profile`` computes with torch from the Hugging
Face model): a neuron is active at a token when |act| exceeds the file's
threshold for the layer (0 without one; relu-both also needs up > 0).
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Dict, List, Optional, Sequence

import numpy as np

from . import keys as K

__all__ = ["calibrate", "calibration_tokens", "observe", "profile_engine", "add_parser", "main"]


def calibration_tokens(model, text: str, n_tokens: int, skip_tokens: int = 0) -> List[int]:
    """Tokens [skip_tokens, skip_tokens + n_tokens) of text (tokenizing only a long enough prefix)."""
    need = skip_tokens + n_tokens
    n_chars = max(4096, 8 * need)
    while True:
        toks = model.tokenize(text[:n_chars], add_special=False, parse_special=False)
        if len(toks) >= need + 16 or n_chars >= len(text):
            break
        n_chars *= 2
    toks = toks[skip_tokens:need]
    if len(toks) < 2:
        raise ValueError(f"the calibration text has too few tokens ({len(toks)}) after skipping {skip_tokens}")
    return list(toks)


def observe(model, tokens: Sequence[int], n_ctx: int = 256, n_threads: Optional[int] = None,
            progress: bool = False):
    """A dense context with the FFN observer, run over tokens in windows of
    n_ctx (every token reaches every layer). Returns the context (close it)."""
    from . import _core

    ctx = _core.Context(model, n_ctx, n_ctx, n_threads or 0, "f16", "off", False, False, True)
    toks = np.ascontiguousarray(tokens, dtype=np.int32)
    n_win = (len(toks) + n_ctx - 1) // n_ctx
    for w in range(n_win):
        win = toks[w * n_ctx:(w + 1) * n_ctx]
        ctx.kv_truncate(0)
        ctx.decode(win, True)
        if progress:
            print(f"\r[calibrate] window {w + 1}/{n_win}", end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    return ctx


def _load_text(corpus: Optional[str]) -> str:
    if corpus is None or corpus == "austen":
        from .datasets import austen

        return austen()
    if not os.path.isfile(corpus):
        raise FileNotFoundError(f"corpus '{corpus}' does not exist (give a UTF-8 text file, or 'austen')")
    try:
        with open(corpus, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise ValueError(f"{corpus}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if not text.strip():
        raise ValueError(f"corpus '{corpus}' is empty")
    return text


def calibrate(model_path: str, target_sparsity: float, corpus: Optional[str] = None, out: Optional[str] = None,
              n_tokens: int = 4096, skip_tokens: int = 0, n_ctx: int = 256, n_threads: Optional[int] = None,
              text: Optional[str] = None, progress: bool = False) -> Dict:
    """Per-layer thresholds of |act| for a target sparsity, written to ``out``
    (default: ``<model>.thr<percent>.gguf`` next to it). ``text`` overrides
    ``corpus`` (a file path or "austen"). Returns a report dict."""
    from . import _core, extgguf

    if not isinstance(target_sparsity, (int, float)) or not 0.0 <= target_sparsity < 1.0:
        raise ValueError(f"target sparsity must be in [0, 1), got {target_sparsity!r}")
    if n_tokens < 2 or n_ctx < 2:
        raise ValueError("n_tokens and n_ctx must be at least 2")
    model_path = os.fspath(model_path)
    if not os.path.isfile(model_path):
        raise FileNotFoundError(f"model file '{model_path}' does not exist")
    if out is None:
        stem = model_path[:-5] if model_path.endswith(".gguf") else model_path
        out = f"{stem}.thr{int(round(100 * target_sparsity)):02d}.gguf"
    if os.path.abspath(out) == os.path.abspath(model_path):
        raise ValueError("the output must be a new file, not the model itself")
    if text is None:
        text = _load_text(corpus)
    model = _core.Model(model_path)
    try:
        tokens = calibration_tokens(model, text, n_tokens, skip_tokens)
        ctx = observe(model, tokens, n_ctx=n_ctx, n_threads=n_threads, progress=progress)
        try:
            n_layer = model.n_layer
            thr = np.array([ctx.act_quantile(il, float(target_sparsity)) for il in range(n_layer)], np.float32)
        finally:
            ctx.close()
    finally:
        model.close()
    extgguf.add_sparse(model_path, out, act_thresholds=thr, mode_hint=K.MODE_HINT_THRESHOLD)
    return {"model": model_path, "out": out, "target_sparsity": float(target_sparsity),
            "n_tokens": len(tokens), "thresholds": thr.tolist()}


def profile_engine(model_path: str, tokens: Optional[Sequence[int]] = None, text: Optional[str] = None,
                   n_tokens: int = 4096, n_ctx: int = 256, n_threads: Optional[int] = None) -> Dict[str, np.ndarray]:
    """Per-neuron activation counts of a GGUF file from pinfer's engine:
    ``{"count_<l>": int64 [n], "freq_<l>": float64 [n], "n_tokens": int}``
    (the keys of ``pinfer profile``'s stats.npz)."""
    from . import _core

    model = _core.Model(os.fspath(model_path))
    try:
        if tokens is None:
            tokens = calibration_tokens(model, text if text is not None else _load_text(None), n_tokens)
        ctx = observe(model, tokens, n_ctx=n_ctx, n_threads=n_threads)
        try:
            res: Dict = {}
            for il in range(model.n_layer):
                c = np.asarray(ctx.neuron_counts(il), dtype=np.int64)
                n = ctx.observed_tokens(il)
                res[f"count_{il}"] = c
                res[f"freq_{il}"] = c / max(n, 1)
            res["n_tokens"] = len(tokens)
        finally:
            ctx.close()
    finally:
        model.close()
    return res


# ---------------------------------------------------------------- CLI

def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "calibrate", help="per-layer activation thresholds for the threshold sparse mode",
        description="Run the model (dense) over a corpus, collect per-layer |act(gate)| distributions and "
                    "write thresholds for a target sparsity as pinfer.sparse.act_thresholds.")
    p.add_argument("model", help="GGUF model file")
    p.add_argument("--target-sparsity", type=float, required=True,
                   help="fraction of (token, neuron) activations to skip, in [0, 1)")
    p.add_argument("-f", "--file", default=None, help="UTF-8 calibration text (default: Jane Austen's novels)")
    p.add_argument("-o", "--out", default=None, help="output GGUF (default: MODEL.thrNN.gguf)")
    p.add_argument("--tokens", type=int, default=4096, help="calibration tokens (default 4096)")
    p.add_argument("--skip-tokens", type=int, default=0, help="start this many tokens into the text")
    p.add_argument("-c", "--ctx", type=int, default=256, help="window length (default 256)")
    p.add_argument("-t", "--threads", type=int, default=None, help="threads (default: all cores)")
    p.set_defaults(func=main)
    return p


def main(args) -> int:
    rep = calibrate(args.model, args.target_sparsity, corpus=args.file, out=args.out, n_tokens=args.tokens,
                    skip_tokens=args.skip_tokens, n_ctx=args.ctx, n_threads=args.threads,
                    progress=sys.stderr.isatty())
    t = np.asarray(rep["thresholds"])
    print(f"calibrated {len(t)} layers on {rep['n_tokens']} tokens for sparsity {rep['target_sparsity']:.2f}: "
          f"thresholds min {t.min():.4g} median {np.median(t):.4g} max {t.max():.4g}")
    print(f"wrote {rep['out']}")
    return 0
