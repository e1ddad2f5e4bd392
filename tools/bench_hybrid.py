"""Benchmarks of the hybrid engine on the simulated device (docs/hybrid.md).

Ratios measured in one run, on one model file:
  1. decode with every layer on sim vs the plain CPU (the layer's cost must not grow);
  2. concurrency: a hybrid split (hot half on sim, cold half on the CPU, one
     thread each) vs the same work on one CPU thread;
  3. host time per generated token (graph, plan, inputs, logits), per layer,
     with the graph and plan rebuilt every token and with them reused;
  4. traffic per generated token and layer vs PowerInfer's;
  5. a prompt batch: the cold rows streamed to the device vs computed on the
     CPU, with the copies charged at a PCIe rate.

    python tools/bench_hybrid.py -m MODEL.gguf [--tokens 32] [--prompt 64] [--sparse off]
"""
import argparse
import os
import re
import sys
import time

import numpy as np

from benchinfo import cpu_model
from pinfer import _core


def decode_rate(m, n_tokens, prompt_len, **kw):
    """Tokens per second of single-token decoding after a prompt, plus the context."""
    c = _core.Context(m, prompt_len + n_tokens + 8, 512, kw.pop("threads", 2), "f16", kw.pop("sparse", "off"), **kw)
    rng = np.random.default_rng(0)
    toks = rng.integers(0, m.n_vocab, size=prompt_len).tolist()
    c.decode(toks)
    c.reset_timings()
    c.reset_transfer_stats()
    t0 = time.perf_counter()
    for _ in range(n_tokens):
        c.decode([int(np.argmax(c.logits()))])
    dt = time.perf_counter() - t0
    return n_tokens / dt, c


def prompt_time(m, prompt_len, **kw):
    c = _core.Context(m, prompt_len + 8, 512, kw.pop("threads", 2), "f16", kw.pop("sparse", "off"), **kw)
    toks = np.random.default_rng(1).integers(0, m.n_vocab, size=prompt_len).tolist()
    t0 = time.perf_counter()
    c.decode(toks)
    return time.perf_counter() - t0, c


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--tokens", type=int, default=32, help="generated tokens per measurement")
    ap.add_argument("--prompt", type=int, default=64, help="prompt length")
    ap.add_argument("--sparse", default="off")
    ap.add_argument("--reps", type=int, default=3, help="best of this many runs")
    ap.add_argument("--pcie-gbs", type=float, default=25.0, help="simulated host<->device bandwidth (GB/s)")
    ap.add_argument("--latency-us", type=float, default=10.0, help="simulated latency per copy")
    a = ap.parse_args(argv)
    m = _core.Model(a.model)
    L = m.n_layer
    print(f"model {os.path.basename(a.model)}: {L} layers, n_embd {m.n_embd}; CPU: {cpu_model()}, "
          f"{os.cpu_count()} cores; load {os.getloadavg()[0]:.2f}")

    def best(f):
        return max(f() for _ in range(a.reps))

    # 1. everything on the device vs the CPU, same thread count
    cpu = best(lambda: decode_rate(m, a.tokens, a.prompt, sparse=a.sparse, threads=2)[0])
    sim = best(lambda: decode_rate(m, a.tokens, a.prompt, sparse=a.sparse, threads=2, device="sim", sim_threads=2)[0])
    print(f"1. decode, 2 threads: CPU {cpu:.2f} tok/s, all layers on sim {sim:.2f} tok/s: sim/CPU {sim / cpu:.2f}x")

    # 2. concurrency: about half of every FFN on each side, one thread each, vs one CPU thread for everything
    one = best(lambda: decode_rate(m, a.tokens, a.prompt, sparse=a.sparse, threads=1)[0])
    _, c_all = decode_rate(m, 2, a.prompt, sparse=a.sparse, threads=1, device="sim")
    fields = {k: float(v) for k, v in re.findall(r"(attention|FFN|KV|compute reserve) ([\d.]+) MiB", c_all.plan_text)}
    budget_gib = (fields["compute reserve"] + fields["attention"] + fields["KV"] + fields["FFN"] / 2 + 1) / 1024
    hybrid = dict(sparse=a.sparse, threads=1, device="sim", sim_threads=1, vram_budget=budget_gib)
    rate_h, c_h = decode_rate(m, a.tokens, a.prompt, **dict(hybrid))
    hyb = max(rate_h, best(lambda: decode_rate(m, a.tokens, a.prompt, **dict(hybrid))[0]))
    plan = c_h.plan()
    kk = [k for on, k in plan if on]
    print(f"2. concurrency, 1 CPU thread + 1 sim thread, {len(kk)} layers on sim, FFN prefixes k = "
          f"{min(kk) if kk else 0}..{max(kk) if kk else 0} of {m.n_ff}: hybrid {hyb:.2f} tok/s vs 1 CPU thread "
          f"{one:.2f} tok/s: {hyb / one:.2f}x")

    # 3. host time per generated token, the graph and plan rebuilt every token vs reused
    for dev in ("cpu", "sim"):
        us = {}
        for cache in (False, True):
            _, c = decode_rate(m, a.tokens, a.prompt, sparse=a.sparse, threads=2, device=dev, graph_cache=cache)
            t = c.timings()
            us[cache] = 1e3 * t["t_host_ms"] / max(1, t["n_host"])
        print(f"3. host time per generated token ({dev}): rebuilt {us[False]:.1f} us ({us[False] / L:.1f} per layer), "
              f"reused {us[True]:.1f} us ({us[True] / L:.1f} per layer): {us[False] / max(us[True], 1e-9):.1f}x less")

    # 4. traffic per token and hybrid layer
    st = c_h.transfer_stats(True)
    g = max(1, st["n_graphs"])
    hybrid_layers = sum(1 for on, k in plan if on and k < m.n_ff) or 1
    d = m.n_embd
    pi_bytes = 0.4e6 * (d / 5120)  # PowerInfer: ~0.4 MB per 13B layer (d = 5120), scaled by d
    print(f"4. traffic per token: {st['bytes_h2d'] / g / 1024:.1f} KiB to the device, "
          f"{st['bytes_d2h'] / g / 1024:.1f} KiB "
          f"back, {st['n_copies'] / g:.1f} copies, {st['n_waits'] / g:.1f} event waits, {st['n_syncs'] / g:.1f} syncs; "
          f"per hybrid layer {(st['bytes_h2d'] + st['bytes_d2h']) / g / hybrid_layers / 1024:.1f} KiB and "
          f"{st['n_waits'] / g / hybrid_layers:.2f} waits (PowerInfer: "
          f"~{pi_bytes / 1024:.0f} KiB and >= 4 device syncs)")

    # 5. a prompt batch: stream the cold rows or compute them on the CPU
    ns_per_byte = 1.0 / a.pcie_gbs
    for smin, what in ((0, "cold rows on the CPU"), (32, "cold rows streamed")):
        ts = [prompt_time(m, a.prompt, **dict(hybrid), prompt_stream_min=smin, sim_copy_latency_us=a.latency_us,
                          sim_copy_ns_per_byte=ns_per_byte) for _ in range(a.reps)]
        t, c = min(ts, key=lambda x: x[0])
        s = c.transfer_stats(False)
        print(f"5. prompt of {a.prompt} tokens, {what}: {1e3 * t:.1f} ms, "
              f"{s['bytes_h2d'] / 2**20:.1f} MiB to the device "
              f"(charged at {a.pcie_gbs:g} GB/s + {a.latency_us:g} us per copy)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
