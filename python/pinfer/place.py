"""Neuron placement, end to end: permute hot-first, store the frequencies, solve, write.

    pinfer place MODEL.gguf --freq stats.npz -o placed.gguf --budget 4 8 \\
        [--hw rtx4090] [--plot placement.png] [--type q8_0 | --allow-requantize]

Steps (each layer ``l`` separately):

1. The frequencies of ``stats.npz`` (``pinfer profile``; ``freq_<l>`` in the
   model's current neuron order) give the hot-first permutation
   ``perm_l = argsort(-f_l, stable)``. extgguf.make_hot_first applies that one
   permutation to everything indexed by neuron: gate/up rows (and biases), down
   columns, ffn_down_t rows, fc2 rows (the predictor's outputs) and the
   frequencies themselves, stored as ``blk.l.ffn_freq``. The FFN is a sum over
   its neurons, so the model computes the same function in every mode (dense,
   exact, predictor): only the order of that sum changes.
2. With ``--type TYPE`` the permuted file is then quantized with pinfer-quantize
   (fc1/fc2, ffn_freq and all metadata are copied unchanged).
3. The placement solver (pinfer.solve, HiGHS ILP) runs for every budget on the
   file's own neuron sizes (after quantization: the bytes a neuron costs are those
   of the stored types) and writes the placement section.

Block-quantized down projections. ``ffn_down`` is stored ``[n_embd, n_ff]`` with
the neuron axis contiguous, so a Q8_0/Q4_K row packs 32 or 256 neurons into one
block sharing a scale. Moving neurons between blocks cannot be done without
decoding and encoding again, which changes the weights (lossy). ``place`` therefore
refuses a file whose ``ffn_down`` is block-quantized unless told how (gate/up rows,
ffn_down_t rows and fc2 rows are whole blocks: they move exactly in any type):

- the recommended way: give the F32/F16 file (``pinfer convert --type f32``) and
  ``--type q8_0`` (etc.): the permutation is exact, then quantization runs once;
- ``--allow-requantize``: decode, permute and encode the down matrices again in
  their own type (a second rounding of every down weight; gate/up stay exact).

Outputs the placed GGUF, a text summary (per layer the GPU share for every
budget) and optionally a PNG of that share.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Sequence

from . import keys as K
from .outfile import signals_held

__all__ = ["place", "format_summary", "add_parser", "main"]


class PlaceError(ValueError):
    """Bad input to ``pinfer place`` (the message names it)."""


def _down_types(path: str) -> Dict[str, str]:
    """{tensor name: type name} of the block-quantized ffn_down matrices."""
    from . import _core

    r = _core.GGUFReader(path)
    out = {}
    for t in r.tensors:
        if t.name.endswith(".ffn_down.weight"):
            info = _core.type_info(t.type)
            if info["blck_size"] > 1:
                out[t.name] = info["name"]
    return out


def _quantize(src: str, dst: str, type_name: str, threads: Optional[int]) -> None:
    from ._util import child_preexec, find_tool

    cmd = [find_tool("pinfer-quantize"), src, dst, type_name]
    if threads:
        cmd += ["--threads", str(threads)]
    r = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=child_preexec())
    if r.returncode != 0:
        msg = (r.stderr or r.stdout).strip().splitlines()
        raise PlaceError(f"pinfer-quantize {type_name} failed: {msg[-1] if msg else 'exit ' + str(r.returncode)}")


def place(model: str, freq: str, out: str, budgets: Sequence[float], hw="rtx4090", plot: Optional[str] = None,
          type_name: Optional[str] = None, allow_requantize: bool = False, group: int = 64, ctx: int = 4096,
          reserve_gib: float = 0.25, solver: str = K.SOLVER_ILP, time_limit: float = 60.0,
          threads: Optional[int] = None, min_neurons: Optional[int] = None, log=None) -> dict:
    """Permute ``model`` hot-first by the frequencies in ``freq``, optionally quantize
    to ``type_name``, solve a placement per budget (GiB) and write ``out``.

    Returns {"perms", "placements" (solve.Placement), "instance", "freqs" (hot-first),
    "out", "requantized" (names re-encoded lossily), "plot"}."""
    from . import _core, extgguf, solve

    model, out = os.fspath(model), os.fspath(out)
    if not os.path.isfile(model):
        raise PlaceError(f"model file '{model}' does not exist")
    if os.path.abspath(out) == os.path.abspath(model):
        raise PlaceError("the output must be a new file, not the model itself")
    if not budgets:
        raise PlaceError("give at least one --budget (GiB)")
    freqs = solve.load_freqs(freq)
    info = extgguf.read(model)
    if len(freqs) != info.n_layer:
        raise PlaceError(f"{freq} has {len(freqs)} layers, the model {info.n_layer}")
    for il, f in enumerate(freqs):
        if f.shape != (info.n_ff,):
            raise PlaceError(f"{freq}: layer {il} has {f.size} neurons, the model's FFN {info.n_ff}")
    if info.neuron_order:
        raise PlaceError(f"{model}: neurons are already permuted ('{info.neuron_order}'); give the un-permuted "
                         "file the frequencies were profiled on")
    hwd = solve.hardware(hw) if not isinstance(hw, solve.Hardware) else hw
    blocky = _down_types(model)
    if blocky and not allow_requantize:
        name, tn = next(iter(blocky.items()))
        raise PlaceError(f"'{name}' is {tn}: moving neurons between its blocks would quantize it again (lossy). "
                         "Place the F32/F16 file and pass --type " + tn.lower() + " (exact permutation, then one "
                         "quantization), or pass --allow-requantize")
    if type_name and blocky:
        raise PlaceError("--type needs an F32/F16/BF16 input (the input is already block-quantized)")

    out_dir = os.path.dirname(os.path.abspath(out))
    tmps: List[str] = []

    def tmp(suffix: str) -> str:
        with signals_held():  # a signal never lands between creating and listing it
            fd, p = tempfile.mkstemp(prefix=".pinfer-place-", suffix=suffix, dir=out_dir)
            tmps.append(p)
        os.close(fd)
        return p

    try:
        perm_path = tmp(".perm.gguf")
        if log:
            log(f"permuting {info.n_layer} layers hot-first")
        perms = extgguf.make_hot_first(model, perm_path, freqs=freqs, allow_requantize=allow_requantize)
        src = perm_path
        if type_name:
            if log:
                log(f"quantizing to {type_name}")
            q = tmp(".q.gguf")
            _quantize(perm_path, q, type_name, threads)
            src = q
        desc = solve.load_model(src)
        hot = solve.freqs_from_gguf(_core.GGUFReader(src))  # the stored, permuted ffn_freq
        inst = solve.build_instance(hot, desc, hwd, group=group, ctx=ctx, reserve_gib=reserve_gib,
                                    min_neurons=min_neurons)
        bb = sorted(set(solve._budget_bytes(b) for b in budgets))
        for b in bb:
            solve._available(inst, b)  # every budget must hold the dense parts: fail before solving
        pls = []
        for b in bb:
            if log:
                log(f"solving for {b / solve.GIB:.4g} GiB")
            pls.append(solve.solve_greedy(inst, b) if solver == K.SOLVER_GREEDY
                       else solve.solve_ilp(inst, b, time_limit=time_limit))
        solve.write_placements(src, out, pls)
    finally:
        for p in tmps:
            if os.path.exists(p):
                os.unlink(p)
    if plot:
        write_plot(inst, pls, plot)
    return {"perms": perms, "placements": pls, "instance": inst, "freqs": inst.freqs, "out": out,
            "requantized": sorted(blocky) if allow_requantize else [], "plot": plot}


def write_plot(inst, pls, path: str) -> None:
    """PNG: the GPU share k_l / n_l of every layer, one line per budget."""
    from . import solve

    solve.plot(inst, pls, path, title=f"hot-first neuron placement: {inst.model.name or 'model'}, {inst.hw.name}")


def format_summary(res: dict) -> str:
    """Solver summary, then per layer the GPU share (k_l / n_ff) for every budget."""
    from . import solve

    inst, pls = res["instance"], res["placements"]
    lines = [solve.summary(inst, pls), "", "GPU share per layer (neurons [0, k) of the hot-first order):"]
    head = f"{'layer':>5} {'n_ff':>6}" + "".join(f" {p.budget_bytes / solve.GIB:>9.4g}G" for p in pls)
    lines.append(head)
    for l in range(inst.model.n_layer):
        n = inst.model.n_ff[l]
        lines.append(f"{l:>5} {n:>6}" + "".join(f" {100 * p.gpu_neurons[l] / n:>9.1f}%" for p in pls))
    return "\n".join(lines)


# ---------------------------------------------------------------- CLI

def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("place", help="permute neurons hot-first, solve and store the GPU placement",
                              description="Permute each layer's FFN neurons into descending activation "
                                          "frequency (the model's function is unchanged), store the frequencies "
                                          "as blk.N.ffn_freq, solve the neuron placement for each VRAM budget "
                                          "and write it into the extended GGUF.")
    p.add_argument("model", help="GGUF model in the neuron order the frequencies were profiled in")
    p.add_argument("--freq", required=True, help="stats.npz of 'pinfer profile' (freq_0 .. freq_{L-1})")
    p.add_argument("-o", "--output", required=True, help="output GGUF")
    p.add_argument("--budget", "-b", type=float, nargs="+", required=True, help="VRAM budget(s) in GiB")
    p.add_argument("--hw", default="rtx4090", help="hardware preset of pinfer solve (default rtx4090)")
    p.add_argument("--plot", default=None, help="PNG of the GPU share per layer")
    p.add_argument("--type", default=None, help="quantize after permuting (pinfer-quantize TYPE, e.g. q8_0)")
    p.add_argument("--allow-requantize", action="store_true",
                   help="permute block-quantized down matrices by decoding and encoding them again (lossy)")
    p.add_argument("--group", type=int, default=64, help="neurons per placement group (default 64)")
    p.add_argument("--ctx", type=int, default=4096, help="context whose KV cache stays on the GPU (default 4096)")
    p.add_argument("--reserve-gib", type=float, default=0.25, help="VRAM kept for compute buffers (default 0.25)")
    p.add_argument("--min-neurons", type=int, default=None,
                   help="fixed minimum neurons per GPU layer (default: derived from the hardware's sync cost)")
    p.add_argument("--solver", choices=(K.SOLVER_ILP, K.SOLVER_GREEDY), default=K.SOLVER_ILP)
    p.add_argument("--time-limit", type=float, default=60.0, help="solver seconds per budget (default 60)")
    p.add_argument("-t", "--threads", type=int, default=None, help="pinfer-quantize threads")
    p.set_defaults(func=main)
    return p


def main(args) -> int:
    from .extgguf import PlacementError

    log = lambda s: print(f"pinfer place: {s}", file=sys.stderr, flush=True)  # noqa: E731
    try:
        res = place(args.model, args.freq, args.output, args.budget, hw=args.hw, plot=args.plot,
                    type_name=args.type, allow_requantize=args.allow_requantize, group=args.group, ctx=args.ctx,
                    reserve_gib=args.reserve_gib, solver=args.solver, time_limit=args.time_limit,
                    threads=args.threads, min_neurons=args.min_neurons, log=log)
    except (PlaceError, PlacementError) as e:
        print(f"pinfer place: error: {e}", file=sys.stderr)
        return 1
    print(format_summary(res))
    if res["requantized"]:
        print(f"note: {len(res['requantized'])} block-quantized ffn_down matrices were decoded, permuted and "
              "encoded again (--allow-requantize: lossy)")
    plotted = f", plot {res['plot']}" if res["plot"] else ""
    print(f"wrote {res['out']} ({len(res['placements'])} placement(s))" + plotted)
    return 0
