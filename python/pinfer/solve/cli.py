"""``pinfer solve``: the command line of the placement solver."""
from __future__ import annotations

import argparse
import json
import os
import sys

from .. import keys as K
from ..extgguf import PlacementError, write_placements
from ..outfile import atomic_output
from .cost import GIB, build_instance, freqs_from_gguf, load_freqs, load_model
from .hardware import HARDWARE, hardware
from .report import plot, report, summary
from .solver import BALANCE, SOLVERS, _available, _budget_bytes, solve_greedy, solve_ilp


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("solve", help="choose the GPU share of each layer's neurons (HiGHS ILP)",
                              description="Neuron placement: for each VRAM budget, the prefix of each layer's "
                                          "hot-first FFN neurons to keep on the GPU (see pinfer.solve).")
    p.add_argument("--model", "-m", required=True, help="model description: a .gguf file or a JSON file")
    p.add_argument("--freq", help="activation frequencies (npz: freq_0..freq_{L-1} or one 2-D array); "
                                  "default: the GGUF's blk.N.ffn_freq")
    p.add_argument("--budget", "-b", type=float, nargs="+", help="VRAM budget(s) in GiB (default: the GPU's VRAM)")
    p.add_argument("--hw", default="rtx4090", help=f"hardware preset ({', '.join(HARDWARE)}) or a JSON file")
    p.add_argument("--gpu-bw", type=float, help="GPU memory bandwidth, GB/s")
    p.add_argument("--cpu-bw", type=float, help="CPU memory bandwidth, GB/s")
    p.add_argument("--pcie-bw", type=float, help="PCIe bandwidth, GB/s")
    p.add_argument("--sync-us", type=float, help="CPU-GPU synchronisation latency, microseconds")
    p.add_argument("--group", type=int, default=64, help="neurons per placement group (default 64)")
    p.add_argument("--ctx", type=int, default=4096, help="context length whose KV cache stays on the GPU")
    p.add_argument("--kv-bytes", type=float, default=2.0, help="bytes per KV element (default 2: F16)")
    p.add_argument("--reserve-gib", type=float, default=0.25, help="VRAM kept for compute buffers (default 0.25)")
    p.add_argument("--output-on-cpu", action="store_true", help="keep the output matrix on the CPU")
    p.add_argument("--embd-on-gpu", action="store_true", help="put the token embeddings on the GPU")
    p.add_argument("--min-neurons", type=int, help="fixed minimum neurons per GPU layer (default: derived)")
    p.add_argument("--solver", choices=SOLVERS, default=K.SOLVER_ILP)
    p.add_argument("--balance", choices=BALANCE, default="off", help="CPU/GPU time balance (module docs)")
    p.add_argument("--balance-tol", type=float, default=0.0, help="makespan: mass allowed to give up (fraction)")
    p.add_argument("--balance-slack-us", type=float, default=0.0, help="constraint: allowed T_cpu - T_gpu, us")
    p.add_argument("--time-limit", type=float, default=60.0, help="seconds per budget (default 60)")
    p.add_argument("--gap", type=float, default=1e-4, help="relative MIP gap at which HiGHS stops (default 1e-4)")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--json", help="write the JSON report here")
    p.add_argument("--plot", help="write a PNG of the GPU share per layer here")
    p.add_argument("--write-gguf", help="copy the model GGUF here with the placement section")
    p.set_defaults(func=main)
    return p


def main(args) -> int:
    try:
        if args.hw.endswith(".json") or os.path.isfile(args.hw):
            try:
                with open(args.hw, "r", encoding="utf-8") as fh:
                    hwd = json.load(fh)
            except (OSError, json.JSONDecodeError) as e:
                raise PlacementError(f"hardware: cannot read {args.hw} ({e})") from None
            if not isinstance(hwd, dict):
                raise PlacementError(f"hardware: {args.hw}: expected a JSON object")
            hwd.setdefault("name", os.path.basename(args.hw))
            hw = hardware(hwd, gpu_bw=args.gpu_bw, cpu_bw=args.cpu_bw, pcie_bw=args.pcie_bw, sync_us=args.sync_us)
        else:
            hw = hardware(args.hw, gpu_bw=args.gpu_bw, cpu_bw=args.cpu_bw, pcie_bw=args.pcie_bw,
                          sync_us=args.sync_us)
        model = load_model(args.model, kv_bytes=args.kv_bytes)
        if args.freq:
            freqs = load_freqs(args.freq)
        else:
            from .. import _core
            try:
                freqs = freqs_from_gguf(_core.GGUFReader(args.model))
            except (ValueError, OSError):
                raise PlacementError("no --freq given and the model is not a GGUF with blk.N.ffn_freq") from None
        if args.write_gguf:
            with open(args.model, "rb") as fh:
                if fh.read(4) != b"GGUF":
                    raise PlacementError("--write-gguf needs --model to be a GGUF file")
        budgets = args.budget if args.budget else [hw.vram_gib]
        inst = build_instance(freqs, model, hw, group=args.group, ctx=args.ctx, min_neurons=args.min_neurons,
                              output_on_gpu=not args.output_on_cpu, embd_on_gpu=args.embd_on_gpu,
                              reserve_gib=args.reserve_gib)
        bbytes = sorted(set(_budget_bytes(b) for b in budgets))
        for b in bbytes:
            _available(inst, b)
        pls, grd = [], []
        for b in bbytes:
            print(f"pinfer solve: budget {b / GIB:.4g} GiB ...", file=sys.stderr, flush=True)
            g = solve_greedy(inst, b)
            grd.append(g)
            if args.solver == K.SOLVER_GREEDY:
                pls.append(g)
            else:
                pls.append(solve_ilp(inst, b, time_limit=args.time_limit, mip_rel_gap=args.gap,
                                     threads=args.threads, balance=args.balance, balance_tol=args.balance_tol,
                                     balance_slack_us=args.balance_slack_us))
        print(summary(inst, pls, grd if args.solver != K.SOLVER_GREEDY else None))
        if args.json:
            with atomic_output(args.json, what="--json") as tmp, open(tmp, "w", encoding="utf-8") as fh:
                json.dump(report(inst, pls, grd), fh, indent=1)
        if args.plot:
            plot(inst, pls, args.plot)
        if args.write_gguf:
            write_placements(args.model, args.write_gguf, pls)
            print(f"pinfer solve: wrote {args.write_gguf} with {len(pls)} placement(s)", file=sys.stderr)
    except (PlacementError, OSError) as e:
        print(f"pinfer solve: error: {e}", file=sys.stderr)
        return 1
    return 0
