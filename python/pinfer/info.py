"""``pinfer info``: summarise a GGUF model file (architecture, hyperparameters,
tensor types, pinfer's sparse and placement metadata)."""
from __future__ import annotations

import argparse
import os
from typing import Any, Dict, List

from . import keys as K
from ._util import UserError

__all__ = ["FILE_TYPES", "add_parser", "main"]


# llama.cpp's general.file_type ids (facts of the GGUF ecosystem).
FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
              11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
              17: "Q5_K_M", 18: "Q6_K", 32: "BF16"}


def _fmt_value(v, limit: int = 8) -> str:
    if isinstance(v, (bytes, bytearray)):
        v = v.decode("utf-8", errors="replace")
    if isinstance(v, str):
        return repr(v if len(v) <= 80 else v[:77] + "...")
    if isinstance(v, float):
        return f"{v:.7g}"  # metadata floats are mostly float32
    try:
        n = len(v)
    except TypeError:
        return str(v)
    items = list(v[:limit]) if n > limit else list(v)
    body = ", ".join(_fmt_value(x) for x in items)
    return f"[{body}{', ...' if n > limit else ''}] ({n} items)" if n > limit else f"[{body}]"


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("info", help="summarise a GGUF model file",
                              description="Print a GGUF model's architecture, hyperparameters, tensor types "
                                          "and pinfer's sparse/placement metadata.")
    p.add_argument("model", help="GGUF file")
    p.set_defaults(func=main)
    return p


def main(args) -> int:
    from . import _core

    if not os.path.exists(args.model):
        raise UserError(f"model file '{args.model}' does not exist")
    r = _core.GGUFReader(args.model)
    types = r.types
    keys = r.keys

    def scalar(k: str, d: Any = None) -> Any:
        is_scalar = k in types and types[k] != _core.GGUF_TYPE_ARRAY and not isinstance(types[k], tuple)
        return r.get(k, d) if is_scalar else d

    arch = scalar("general.architecture", "?")
    if isinstance(arch, bytes):
        arch = arch.decode("utf-8", "replace")
    print(f"file:         {args.model} ({r.file_size / 2**20:.2f} MiB, GGUF v{r.version})")
    name = scalar("general.name")
    if name is not None:
        print(f"name:         {name.decode('utf-8', 'replace') if isinstance(name, bytes) else name}")
    print(f"architecture: {arch}")
    ft = scalar("general.file_type")
    if ft is not None:
        print(f"file type:    {FILE_TYPES.get(int(ft), 'unknown')} ({int(ft)})")

    hp = [k for k in keys if k.startswith(f"{arch}.")]
    if hp:
        print("hyperparameters:")
        for k in hp:
            print(f"  {k[len(arch) + 1:]:<34} {_fmt_value(r.get(k))}")
    tok_model = scalar("tokenizer.ggml.model")
    if tok_model is not None or "tokenizer.ggml.tokens" in types:
        n_tok = None
        if "tokenizer.ggml.tokens" in types:
            tokens: Any = r.get("tokenizer.ggml.tokens")  # an array
            n_tok = len(tokens)
        tm = tok_model.decode() if isinstance(tok_model, bytes) else tok_model
        print(f"tokenizer:    {tm or '?'}" + (f", {n_tok} tokens" if n_tok is not None else "")
              + (", chat template" if "tokenizer.chat_template" in types else ""))

    tensors = r.tensors
    by_type: Dict[str, List[int]] = {}
    n_params = 0
    for t in tensors:
        n = 1
        for d in t.ne:
            n *= d
        n_params += n
        name_t = _core.type_info(t.type)["name"] if _type_known(_core, t.type) else f"type {t.type}"
        c = by_type.setdefault(name_t, [0, 0, 0])
        c[0] += 1
        c[1] += n
        c[2] += t.nbytes
    total = sum(c[2] for c in by_type.values())
    print(f"tensors:      {len(tensors)}, {n_params / 1e6:.2f} M parameters, {total / 2**20:.2f} MiB")
    print(f"  {'type':<6} {'count':>6} {'params':>12} {'MiB':>10} {'share':>6}")
    for tn, (cnt, n, b) in sorted(by_type.items(), key=lambda kv: -kv[1][2]):
        print(f"  {tn:<6} {cnt:>6} {n:>12} {b / 2**20:>10.2f} {100 * b / max(total, 1):>5.1f}%")

    sparse_keys = [k for k in keys if k.startswith((K.PINFER_NAMESPACE, K.POWERINFER_NAMESPACE))]
    gpuidx = f"{K.GPUIDX_TENSOR_IDX}/{K.GPUIDX_TENSOR_BUCKET}"
    groups = {"ffn_freq": 0, "fc1/fc2 (predictor)": 0, "ffn_down_t": 0, gpuidx: 0}
    for t in tensors:
        part = t.name.split(".")
        kind = part[2] if len(part) > 2 and part[0] == "blk" else ""
        if kind == "ffn_freq":
            groups["ffn_freq"] += 1
        elif kind in ("fc1", "fc2"):
            groups["fc1/fc2 (predictor)"] += 1
        elif kind == "ffn_down_t":
            groups["ffn_down_t"] += 1
        elif kind in (K.GPUIDX_TENSOR_IDX, K.GPUIDX_TENSOR_BUCKET):
            groups[gpuidx] += 1
    if sparse_keys or any(groups.values()):
        print("sparse / placement:")
        for k in sparse_keys:
            print(f"  {k:<36} {_fmt_value(r.get(k))}")
        for g, n in groups.items():
            if n:
                print(f"  {n} {g} tensor(s)")
    else:
        print("sparse / placement: none")
    return 0


def _type_known(core, t: int) -> bool:
    try:
        core.type_info(t)
        return True
    except Exception:
        return False
