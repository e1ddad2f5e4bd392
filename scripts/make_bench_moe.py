#!/usr/bin/env python3
"""Write a Mixtral-shaped benchmark GGUF: Mixtral-8x7B layer shapes (d = 4096,
n_ff = 14336, 32 query / 8 key-value heads of 128, 8 experts of which 2 run per
token), random weights, few layers (default 2: 1.7 GiB at Q4_0), in llama.cpp's
Mixtral layout (blk.N.ffn_gate_inp F32 [d, 8], ffn_{gate,up,down}_exps 3-D,
llama.expert_count / expert_used_count), so llama.cpp runs the same file.

Weights are N(0, 1/fan_in) (the router too: every expert gets tokens); norms 1.
--experts-used 8 writes the same weights (same seed) with every expert used per
token: the dense-over-all-experts baseline. The vocabulary is
make_bench_model.py's byte-level BPE. Output goes to ~/.cache/pinfer-bench by
default, never into the repository.

  PINFER_BUILD_DIR=build python scripts/make_bench_moe.py [--layers 2] [--experts-used 2]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_bench_model as mb  # noqa: E402  (also imports pinfer, PINFER_BUILD_DIR honoured)

_core = mb._core


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None,
                    help="output file (default ~/.cache/pinfer-bench/mixtral-L{layers}-{type}-top{k}.gguf)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dim", type=int, default=4096)
    ap.add_argument("--ff", type=int, default=14336)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--heads-kv", type=int, default=8)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--experts-used", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--type", default="q4_0", choices=["q4_0", "q8_0", "f16"])
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    D, F, H, HKV, X, K = a.dim, a.ff, a.heads, a.heads_kv, a.experts, a.experts_used
    hd = D // H
    if D % H or H % HKV or D % 32 or F % 32 or not 1 <= K <= X:
        raise SystemExit("shapes: --dim must split into --heads, --heads divisible by --heads-kv, "
                         "--dim/--ff multiples of 32, 1 <= --experts-used <= --experts")
    out = a.out or os.path.join(os.path.expanduser("~/.cache/pinfer-bench"),
                                f"mixtral-L{a.layers}-{a.type}-top{K}.gguf")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    rng = np.random.default_rng(a.seed)
    quant = mb.Quant(a.type)
    F32 = _core.type_from_name("f32")
    T = _core
    t0 = time.time()

    def randn(*shape, fan_in):
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(fan_in ** -0.5)

    tokens, types = mb.make_vocab(a.vocab)
    w = _core.GGUFWriter()
    w.add("general.architecture", "llama", T.GGUF_TYPE_STRING)
    w.add("general.name", f"pinfer-bench mixtral {X}x top-{K} L{a.layers} {a.type}", T.GGUF_TYPE_STRING)
    w.add("general.file_type", {"q4_0": 2, "q8_0": 7, "f16": 1}[a.type], T.GGUF_TYPE_UINT32)
    for k, v in (("context_length", 4096), ("embedding_length", D), ("block_count", a.layers),
                 ("feed_forward_length", F), ("attention.head_count", H), ("attention.head_count_kv", HKV),
                 ("rope.dimension_count", hd), ("vocab_size", len(tokens)), ("expert_count", X),
                 ("expert_used_count", K)):
        w.add(f"llama.{k}", v, T.GGUF_TYPE_UINT32)
    w.add("llama.rope.freq_base", 1e6, T.GGUF_TYPE_FLOAT32)
    w.add("llama.attention.layer_norm_rms_epsilon", 1e-5, T.GGUF_TYPE_FLOAT32)
    w.add("tokenizer.ggml.model", "gpt2", T.GGUF_TYPE_STRING)
    w.add("tokenizer.ggml.pre", "default", T.GGUF_TYPE_STRING)
    w.add("tokenizer.ggml.tokens", tokens, (T.GGUF_TYPE_ARRAY, T.GGUF_TYPE_STRING))
    w.add("tokenizer.ggml.token_type", np.asarray(types, dtype=np.int32), (T.GGUF_TYPE_ARRAY, T.GGUF_TYPE_INT32))
    w.add("tokenizer.ggml.merges", mb.MERGES, (T.GGUF_TYPE_ARRAY, T.GGUF_TYPE_STRING))
    w.add("tokenizer.ggml.bos_token_id", tokens.index("<|endoftext|>"), T.GGUF_TYPE_UINT32)
    w.add("tokenizer.ggml.eos_token_id", tokens.index("<|im_end|>"), T.GGUF_TYPE_UINT32)
    w.add("tokenizer.ggml.add_bos_token", False, T.GGUF_TYPE_BOOL)

    def put(name, x, shape):  # shape in numpy order; ggml's is reversed
        w.add_tensor(name, quant(x)[0], quant.type, list(shape))

    ones = np.ones(D, dtype=np.float32)
    put("token_embd.weight", rng.standard_normal((len(tokens), D), dtype=np.float32), (len(tokens), D))
    w.add_tensor("output_norm.weight", ones, F32, [D])
    put("output.weight", randn(len(tokens), D, fan_in=D), (len(tokens), D))
    for il in range(a.layers):
        p = f"blk.{il}."
        w.add_tensor(p + "attn_norm.weight", ones, F32, [D])
        w.add_tensor(p + "ffn_norm.weight", ones, F32, [D])
        put(p + "attn_q.weight", randn(D, D, fan_in=D), (D, D))
        put(p + "attn_k.weight", randn(HKV * hd, D, fan_in=D), (HKV * hd, D))
        put(p + "attn_v.weight", randn(HKV * hd, D, fan_in=D), (HKV * hd, D))
        put(p + "attn_output.weight", randn(D, D, fan_in=D), (D, D))
        w.add_tensor(p + "ffn_gate_inp.weight", randn(X, D, fan_in=D), F32, [X, D])
        for name, rows, cols in (("ffn_gate_exps", F, D), ("ffn_up_exps", F, D), ("ffn_down_exps", D, F)):
            q = np.concatenate([np.asarray(quant(randn(rows, cols, fan_in=cols))[0]).reshape(rows, -1)
                                for _ in range(X)])
            w.add_tensor(p + name + ".weight", q.reshape(X, rows, -1), quant.type, [X, rows, cols])
        mb.log(f"layer {il} ({time.time() - t0:.0f} s)")
    w.write(out)
    mb.log(f"wrote {out} ({os.path.getsize(out) / 2**30:.2f} GiB, {time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
