#!/usr/bin/env python3
"""Mixture-of-experts decode benchmark: pinfer's routed experts (dense inside,
exact and threshold sparse) vs every expert computed vs llama.cpp, one run.

Files (scripts/make_bench_moe.py, Mixtral-8x7B layer shapes, random Q4_0
weights): TOP2 (8 experts, 2 per token), ALL (the same weights, all 8 per
token: the dense-over-all-experts baseline), and TOP2's weights with ReLU
experts (pinfer.ffn_act = relu; llama.cpp ignores the key and computes SiLU
on the same bytes), plain for exact mode and with pinfer.sparse.act_thresholds
for threshold mode.

Measurement: R rounds; each round runs every configuration once in the same
order, so slow phases of the shared machine hit all alike. pinfer: the Python
API, a fixed prompt, then N single-token decodes timed -> tok/s; llama.cpp:
`llama-bench -p 0 -n N -r 1 -o json` -> tg tok/s. Reported: best and median
per configuration, ratios of the bests, the load average before each run, and
the measured active fraction of the routed experts' neurons in sparse modes.

  python tools/bench_moe.py --llama-bench .../llama-bench --top2 A.gguf --all B.gguf \\
      --relu C.gguf --relu-thr D.gguf --threads 2 --rounds 3 -n 16
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from benchinfo import cpu_model, loadavg


def pinfer_tps(path: str, mode: str, n: int, threads: int, stats: bool = False):
    from pinfer import _core

    m = _core.Model(path)
    ctx = _core.Context(m, 256, 64, threads, "f16", mode, stats, False, False)
    toks = [(17 * i + 5) % 200 + 10 for i in range(16)]
    ctx.decode(toks)
    t = int(max(range(len(ctx.logits())), key=ctx.logits().__getitem__))
    ctx.decode([t])  # warm-up step
    t0 = time.perf_counter()
    for i in range(n):
        ctx.decode([(t + 31 * i) % 200 + 10])
    tps = n / (time.perf_counter() - t0)
    frac = None
    if stats:
        layers = ctx.sparse_stats()["layers"]
        frac = sum(x["active_frac"] for x in layers) / len(layers)
    ctx.close()
    m.close()
    return tps, frac


def llama_tps(lb: str, path: str, n: int, threads: int) -> float:
    out = subprocess.run([lb, "-m", path, "-p", "0", "-n", str(n), "-r", "1", "-t", str(threads), "-o", "json"],
                         capture_output=True, text=True, check=True).stdout
    return float(json.loads(out)[0]["avg_ts"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("--top2", required=True)
    ap.add_argument("--all", required=True)
    ap.add_argument("--relu", required=True)
    ap.add_argument("--relu-thr", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-n", type=int, default=16)
    a = ap.parse_args()
    configs = [
        ("llama.cpp top-2", lambda: (llama_tps(a.llama_bench, a.top2, a.n, a.threads), None)),
        ("llama.cpp all 8", lambda: (llama_tps(a.llama_bench, a.all, a.n, a.threads), None)),
        ("pinfer all 8", lambda: pinfer_tps(a.all, "off", a.n, a.threads)),
        ("pinfer top-2", lambda: pinfer_tps(a.top2, "off", a.n, a.threads)),
        ("pinfer top-2 relu dense", lambda: pinfer_tps(a.relu, "off", a.n, a.threads)),
        ("pinfer top-2 relu exact", lambda: pinfer_tps(a.relu, "exact", a.n, a.threads, True)),
        ("pinfer top-2 relu threshold", lambda: pinfer_tps(a.relu_thr, "threshold", a.n, a.threads, True)),
    ]
    print(f"cpu: {cpu_model()}, {a.threads} threads, {a.rounds} rounds, n = {a.n}")
    res = {name: [] for name, _ in configs}
    fracs, loads = {}, []
    for r in range(a.rounds):
        for name, fn in configs:
            loads.append(loadavg())
            tps, frac = fn()
            res[name].append(tps)
            if frac is not None:
                fracs[name] = frac
            print(f"round {r + 1} {name:30s} {tps:8.2f} tok/s (load {loads[-1]:.1f})", file=sys.stderr, flush=True)
    best = {k: max(v) for k, v in res.items()}
    print(f"load average before the runs: {min(loads):.1f} .. {max(loads):.1f}")
    print(f"{'configuration':32s} {'best tok/s':>10s} {'median':>8s} "
          f"{'vs llama.cpp top-2':>19s} {'vs pinfer top-2':>16s}  active")
    for name, _ in configs:
        f = f"{100 * fracs[name]:.1f}%" if name in fracs else ""
        print(f"{name:32s} {best[name]:10.2f} {statistics.median(res[name]):8.2f} "
              f"{best[name] / best['llama.cpp top-2']:18.2f}x {best[name] / best['pinfer top-2']:15.2f}x  {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
