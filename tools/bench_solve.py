#!/usr/bin/env python3
"""Scale check for the placement ILP: a LLaMA-70B-sized instance with synthetic power-law
activation frequencies (80 layers x 28672 neurons, Q4_0 weights, groups of 64).

    PINFER_BUILD_DIR=build python tools/bench_solve.py [--budgets 16 24 40] [--hw rtx4090]

Prints, per budget, the ILP's time, status, MIP gap and objective next to the greedy
baseline's. Works with an installed pinfer or with PINFER_BUILD_DIR (as the tests).
The solver module itself is pure Python; only pinfer/__init__ needs the extension.
"""
import argparse
import glob
import importlib.util
import os
import sys
import time

import numpy as np

_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.environ.get("PINFER_BUILD_DIR"):
    b = os.environ["PINFER_BUILD_DIR"]
    b = b if os.path.isabs(b) else os.path.join(_root, b)
    so = glob.glob(os.path.join(b, "_core*.so"))
    if not so:
        sys.exit(f"no _core extension in {b}")
    sys.path.insert(0, os.path.join(_root, "python"))
    spec = importlib.util.spec_from_file_location("pinfer._core", so[0])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules["pinfer._core"] = mod

from pinfer import solve as S  # noqa: E402


def power_law_freqs(rng, n_layer, n_ff):
    """Per layer: f_i = min(1, A (i+1)^-a), a in [0.6, 1.1], A set so the mean density
    (fraction of neurons active per token) is in [0.05, 0.25]; then shuffled."""
    out = []
    ranks = np.arange(1, n_ff + 1, dtype=np.float64)
    for _ in range(n_layer):
        a = rng.uniform(0.6, 1.1)
        dens = rng.uniform(0.05, 0.25)
        lo, hi = 1e-6, 1e6
        for _ in range(100):  # bisection on A for the mean
            A = np.sqrt(lo * hi)
            if np.minimum(1.0, A * ranks ** -a).mean() < dens:
                lo = A
            else:
                hi = A
        f = np.minimum(1.0, A * ranks ** -a) * rng.uniform(0.9, 1.0, n_ff)
        out.append(rng.permutation(f))
    return out


def llama70b_q4_0(n_layer=80, n_embd=8192, n_ff=28672, n_kv=1024, rank=256, n_vocab=32000):
    q4 = 18 / 32  # Q4_0 bytes per weight
    row = n_embd * q4
    return S.ModelDesc(
        n_layer=n_layer, n_embd=n_embd, n_ff=n_ff, neuron_bytes=3 * row,
        attn_bytes=(2 * n_embd * n_embd + 2 * n_embd * n_kv) * q4 + 2 * n_embd * 4,
        pred_bytes=(n_embd + n_ff) * rank * 2, kv_bytes_per_token=2 * n_kv * 2,
        embd_bytes=n_vocab * row, output_bytes=n_vocab * row, output_norm_bytes=n_embd * 4,
        name="llama-70b-shape-q4_0-synthetic")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--budgets", type=float, nargs="+", default=[16, 24, 40])
    ap.add_argument("--hw", default="rtx4090")
    ap.add_argument("--group", type=int, default=64)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--gap", type=float, default=1e-4)
    ap.add_argument("--formulation", default="prefix", choices=S.FORMULATIONS)
    ap.add_argument("--balance", default="off", choices=S.BALANCE)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sync-us", type=float, help="override the preset's sync latency (raises the minimum m_l)")
    ap.add_argument("--mixed", action="store_true", help="every 4th layer's FFN in Q8_0 instead of Q4_0")
    ap.add_argument("--time-limit", type=float, default=60.0)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    model = llama70b_q4_0()
    if a.mixed:
        model.neuron_bytes = [b * (34 / 18 if l % 4 == 0 else 1) for l, b in enumerate(model.neuron_bytes)]
    freqs = power_law_freqs(rng, model.n_layer, model.n_ff[0])
    hw = S.hardware(a.hw, sync_us=a.sync_us)
    t = time.perf_counter()
    inst = S.build_instance(freqs, model, hw, group=a.group, ctx=a.ctx, reserve_gib=0.25)
    t_build = time.perf_counter() - t
    ffn = sum(b * n for b, n in zip(model.neuron_bytes, model.n_ff))
    print(f"instance: {model.n_layer} layers x {model.n_ff[0]} neurons, group {a.group}, "
          f"{sum(s.size for s in inst.sizes)} groups; FFN {ffn / S.GIB:.1f} GiB, resident "
          f"{inst.resident_bytes / S.GIB:.2f} GiB; m_l {min(inst.min_neurons)}..{max(inst.min_neurons)}; "
          f"build {t_build:.2f} s; hw {hw.name} (sync {hw.sync_us} us); mixed {a.mixed}; "
          f"formulation {a.formulation}; balance {a.balance}")
    print(f"{'budget GiB':>10} {'ILP s':>7} {'status':>10} {'MIP gap':>9} {'ILP objective':>14} "
          f"{'greedy obj':>12} {'ILP/greedy':>11} {'greedy s':>9} {'GPU mass':>9} {'layers':>6}")
    for B in a.budgets:
        g = S.solve_greedy(inst, B * S.GIB)
        p = S.solve_ilp(inst, B * S.GIB, mip_rel_gap=a.gap, formulation=a.formulation, balance=a.balance,
                        time_limit=a.time_limit)
        print(f"{B:>10.1f} {p.time_s:>7.2f} {p.status[:10]:>10} {p.mip_gap:>9.1e} {p.objective:>14.3f} "
              f"{g.objective:>12.3f} {p.objective / g.objective:>11.6f} {g.time_s:>9.3f} "
              f"{100 * p.mass_fraction:>8.2f}% {p.layers_on_gpu:>6}")


if __name__ == "__main__":
    main()
