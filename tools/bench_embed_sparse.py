#!/usr/bin/env python3
"""Dense vs exact-sparse decode on a real ReLU model: same greedy tokens? how fast?

For each GGUF given (a ReGLU / ReLU-family model, e.g. the embedded default model
converted with `pinfer convert --type f32|f16|q8_0`), the script adds
ffn_down_t (extgguf.add_down_t, into a temporary copy) so exact mode uses the
column-sparse down projection, then:

- greedy-decodes --n tokens after a fixed prompt twice, in a dense context and
  in an exact-sparse one (separate contexts, separate KV caches), argmax of the
  logits at every step, and compares the token ids;
- times decoding (the context's own eval timing, tokens decoded one at a time)
  for both modes, --rounds times interleaved, and reports medians;
- with sparse_stats, reports the measured FFN activation sparsity per layer.

  PINFER_BUILD_DIR=build python tools/bench_embed_sparse.py model-f32.gguf model-f16.gguf
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import make_bench_model  # noqa: E402,F401  (imports pinfer; PINFER_BUILD_DIR support)
from benchinfo import table_head  # noqa: E402
from pinfer import _core, extgguf  # noqa: E402

PROMPT = "It is a truth universally acknowledged, that a single man in possession of a good fortune"


def greedy(model, mode: str, prompt, n: int, threads: int, stats: bool = False):
    """(token ids, decode tok/s, sparse stats or None)."""
    ctx = _core.Context(model, 512, 512, threads, "f16", mode, stats)
    ctx.decode(list(prompt))
    ctx.reset_timings()
    out = []
    for _ in range(n):
        tok = int(np.argmax(ctx.logits()))
        out.append(tok)
        ctx.decode([tok])
    t = ctx.timings()
    st = ctx.sparse_stats() if stats else None
    ctx.close()
    return out, 1e3 * t["n_eval"] / t["t_eval_ms"], st


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", help="GGUF files of a ReLU-family model")
    ap.add_argument("-n", type=int, default=64, help="tokens to decode")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)

    print("\n".join(table_head(["file", "type", "greedy tokens exact = dense", "first difference", "dense tok/s",
                                "exact tok/s", "exact/dense", "measured FFN sparsity (per layer)"],
                               ["---"] * 4 + ["---:"] * 3 + ["---"])))
    with tempfile.TemporaryDirectory() as tmp:
        for path in args.models:
            ext = os.path.join(tmp, os.path.basename(path) + ".down_t.gguf")
            extgguf.add_down_t(path, ext)
            model = _core.Model(ext)
            prompt = model.tokenize(PROMPT)
            dense_ids, _, _ = greedy(model, "off", prompt, args.n, args.threads)
            exact_ids, _, st = greedy(model, "exact", prompt, args.n, args.threads, stats=True)
            same = dense_ids == exact_ids
            first = next((i for i, (a, b) in enumerate(zip(dense_ids, exact_ids)) if a != b), None)
            times = {"off": [], "exact": []}
            for _ in range(args.rounds):
                for mode in times:
                    times[mode].append(greedy(model, mode, prompt, args.n, args.threads)[1])
            d, e = statistics.median(times["off"]), statistics.median(times["exact"])
            layers = st["layers"] if st and "layers" in st else []
            sp = ", ".join(f"{1 - float(ly['active_frac']):.3f}" for ly in layers) if layers else str(st)
            ty = _core.GGUFReader(path)
            wtype = next(t.type for t in ty.tensors if t.name.endswith("ffn_gate.weight"))
            tname = _core.type_info(wtype)["name"]
            del ty
            print(f"| {os.path.basename(path)} | {tname} | {'yes' if same else 'no'} ({args.n} tokens) | "
                  f"{'-' if first is None else first} | {d:.1f} | {e:.1f} | {e / d:.2f}x | {sp} |", flush=True)
            model.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
