#!/usr/bin/env python3
"""End-to-end decode benchmark: pinfer dense vs pinfer sparse vs llama.cpp, one run.

Files: scripts/make_bench_model.py writes, per target FFN sparsity, a plain GGUF
(LLaMA-7B layer shapes, random Q4_0 weights, ReGLU) and an extended one with the
same weight bytes plus ffn_down_t, predictors and ffn_freq. pinfer runs the
extended file (dense and every sparse mode, so the ratio is on one file);
llama.cpp rejects the extra tensors ("wrong number of tensors"), so it runs the
plain file: the same tensors with the same bytes, minus the pinfer extras.
llama.cpp does not read pinfer.ffn_act and computes SiLU instead of ReLU there;
the weights it streams, and so its decode time, are the same.

Measurement: R rounds; in each round every configuration runs once, in the same
order (llama.cpp, then per file dense and the sparse modes), so slow phases of
the shared machine hit all of them alike. pinfer: `pinfer-cli -n N` after a fixed
prompt, greedy, its "eval time" line (tokens decoded one at a time) -> tok/s.
llama.cpp: `llama-bench -p 0 -n N -r 1 -o json` -> tg tok/s (plus one pp run).
Reported: medians over rounds (and best), ratios of medians, the 1-minute load
average read before each run.

  python tools/bench_e2e.py --llama-bench /tmp/llama.cpp/build/bin/llama-bench \
      --sparsity 0.9,0.5,0.8,0.95 --rounds 5

--arch opt times an OPT-style file (make_bench_model.py --arch opt: OPT-6.7B
shapes, ungated ReLU FFN with biases) the same way; llama.cpp has no OPT, so
that run has no llama.cpp baseline (--llama-bench is refused with it).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

from benchinfo import cpu_model, loadavg, print_table, write_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT = "The quick brown fox jumps over the lazy dog"  # 38 tokens of the byte-level vocab
EVAL_RE = re.compile(r"eval time =\s*([\d.]+) ms /\s*(\d+) tokens")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


ACTIVE_RE = re.compile(r"sparse layer\s+\d+: active\s+([\d.]+)%")


def runtime_sparsity(stats_stderr: str) -> float:
    """1 - the mean per-layer active fraction that pinfer-cli --sparse-stats printed."""
    v = [float(x) for x in ACTIVE_RE.findall(stats_stderr)]
    return 1.0 - sum(v) / len(v) / 100.0 if v else float("nan")


class Pinfer:
    def __init__(self, cli: str, n: int, precision=None):
        self.cli, self.n, self.precision = cli, n, precision
        help_text = subprocess.run([cli, "--help"], capture_output=True, text=True, errors="replace").stdout
        self.has_sparse = "--sparse " in help_text or "--sparse MODE" in help_text
        self.has_stats = "--sparse-stats" in help_text

    def cmd(self, model: str, mode: str, n: int, threads: int, extra=()):
        c = [self.cli, "-m", model, "-p", PROMPT, "-n", str(n), "-t", str(threads), "-c", "512",
             "--temp", "0", "--no-display-prompt"]
        if mode != "dense":
            c += ["--sparse", mode]
        if self.precision:
            c += ["--precision", self.precision]
        return c + list(extra)

    def run(self, model: str, mode: str, threads: int, n=None, extra=()):
        """(decode tok/s, generated text, stderr)."""
        c = self.cmd(model, mode, n or self.n, threads, extra)
        p = subprocess.run(c, capture_output=True, text=True, errors="replace")
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(c)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
        m = EVAL_RE.findall(p.stderr)
        if not m:
            raise RuntimeError(f"no 'eval time' line in pinfer-cli output:\n{p.stderr[-2000:]}")
        ms, ntok = float(m[-1][0]), int(m[-1][1])
        return 1e3 * ntok / ms, p.stdout, p.stderr


def llama_bench(path: str, model: str, threads: int, n_prompt: int, n_gen: int, extra=()) -> float:
    c = [path, "-m", model, "-p", str(n_prompt), "-n", str(n_gen), "-t", str(threads), "-r", "1", "-o", "json",
         *extra]
    p = subprocess.run(c, capture_output=True, text=True, errors="replace")
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(c)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    rows = json.loads(p.stdout)
    return float(rows[0]["avg_ts"])


def ensure_model(args, sparsity: float):
    shape = "opt6.7b" if args.arch == "opt" else "llama7b"
    stem = os.path.join(args.models_dir, f"{shape}-L{args.layers}-{args.type}-s{round(sparsity * 100)}")
    if not (os.path.exists(stem + ".ext.gguf") and os.path.exists(stem + ".json")) or args.regen:
        log(f"generating {stem} (scripts/make_bench_model.py) ...")
        cal = ["--cal", *args.cal.split(",")] if args.cal else []
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_bench_model.py"), "--out", stem,
                        "--arch", args.arch,
                        "--layers", str(args.layers), "--type", args.type, "--sparsity", str(sparsity), *cal],
                       check=True)
    with open(stem + ".json") as fh:
        rep = json.load(fh)
    return stem + ".gguf", stem + ".ext.gguf", rep


def med(v):
    return statistics.median(v) if v else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-bench", default=None, help="path of llama.cpp's llama-bench (omit: no baseline)")
    ap.add_argument("--arch", default="llama", choices=["llama", "opt"], help="the bench file's architecture")
    ap.add_argument("--pinfer-cli", default=os.path.join(ROOT, "build", "pinfer-cli"))
    ap.add_argument("--sparsity", default="0.9", help="comma-separated target FFN sparsities (one file each)")
    ap.add_argument("--modes", default="exact,predictor", help="pinfer sparse modes to time besides dense")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--type", default="q4_0")
    ap.add_argument("--threads", default="2", help="comma-separated thread counts (every configuration runs with each)")
    ap.add_argument("-n", type=int, default=32, help="tokens to decode per run")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--llama-poll", default=None, help="also pass --poll X to llama-bench (its default is 50)")
    ap.add_argument("--models-dir", default=os.path.expanduser("~/.cache/pinfer-bench"))
    ap.add_argument("--regen", action="store_true", help="regenerate the model files")
    ap.add_argument("--json", default=None, help="also write the raw results here")
    ap.add_argument("--precision", default=None, help="pinfer-cli --precision (default: pinfer's own, high)")
    ap.add_argument("--cal", default=None, help="make_bench_model.py --cal SEQS,LEN when generating")
    args = ap.parse_args(argv)
    if args.arch == "opt" and args.llama_bench:
        ap.error("--llama-bench with --arch opt: llama.cpp cannot run OPT (it has no such architecture)")

    pin = Pinfer(args.pinfer_cli, args.n, args.precision)
    modes = [m for m in args.modes.split(",") if m]
    if modes and not pin.has_sparse:
        log("pinfer-cli has no --sparse flag: timing dense only")
        modes = []
    threads = [int(t) for t in args.threads.split(",")]
    sparsities = [float(s) for s in args.sparsity.split(",")]
    files = {s: ensure_model(args, s) for s in sparsities}
    plain0 = files[sparsities[0]][0]
    lb_extra = ["--poll", args.llama_poll] if args.llama_poll is not None else []

    # Warm the page cache, check every configuration runs, and compare the greedy
    # text of each sparse mode with dense (exact mode must match it).
    log("warm-up ...")
    checks = {}
    for s, (_plain, ext, _) in files.items():
        _, dense_text, _ = pin.run(ext, "dense", threads[0])
        for mode in modes:
            _, text, _ = pin.run(ext, mode, threads[0])
            checks[(s, mode)] = text == dense_text
    if args.llama_bench:
        llama_bench(args.llama_bench, plain0, threads[0], 0, 4, lb_extra)

    stats, runtime = {}, {}
    if pin.has_stats:
        for s, (_, ext, _) in files.items():
            for mode in modes:
                _, _, err = pin.run(ext, mode, threads[0], extra=["--sparse-stats", "--sparse-verify"])
                stats[(s, mode)] = [ln for ln in err.splitlines() if "sparse" in ln.lower()]
            # the FFN sparsity the runtime sees on this prompt and its greedy tokens (exact: relu(gate) = 0)
            _, _, err = pin.run(ext, "exact", threads[0], extra=["--sparse-stats"])
            runtime[s] = runtime_sparsity(err)

    configs = []
    for t in threads:
        if args.llama_bench:
            configs.append(("llama.cpp", None, "tg", t))
        for s in sparsities:
            configs.append(("pinfer", s, "dense", t))
            configs += [("pinfer", s, m, t) for m in modes]
    results = {c: [] for c in configs}
    loads = []
    pp = {}
    for r in range(args.rounds):
        for c in configs:
            la = loadavg()
            loads.append(la)
            if c[0] == "llama.cpp":
                results[c].append(llama_bench(args.llama_bench, plain0, c[3], 0, args.n, lb_extra))
            else:
                results[c].append(pin.run(files[c[1]][1], c[2], c[3])[0])
            log(f"round {r + 1}/{args.rounds} t={c[3]} {c[0]} {'' if c[1] is None else f's={c[1]:.2f} '}{c[2]}: "
                f"{results[c][-1]:.2f} tok/s (load {la:.2f})")
    if args.llama_bench:
        for t in threads:
            pp[t] = llama_bench(args.llama_bench, plain0, t, 32, 0, lb_extra)

    # ---- report
    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs; decode {args.n} tokens; {args.rounds} rounds; "
          f"1-min load average before each run: median {med(loads):.2f}, min {min(loads):.2f}, max {max(loads):.2f}")
    first = files[sparsities[0]]
    shape = "OPT-6.7B" if args.arch == "opt" else "LLaMA-7B"
    print(f"model: {args.layers} layers of {shape} shape, {args.type}, "
          f"plain {os.path.getsize(first[0]) / 2**30:.2f} GiB, "
          f"extended {os.path.getsize(first[1]) / 2**30:.2f} GiB")
    out = {"machine": cpu_model(), "threads": threads, "n": args.n, "rounds": args.rounds, "loads": loads,
           "llama_cpp_pp32": pp, "llama_cpp_tg": {}, "rows": []}
    for t in threads:
        ll = med(results.get(("llama.cpp", None, "tg", t), []))
        print(f"\n### {t} thread{'s' if t > 1 else ''}\n")
        if args.llama_bench:
            v = results[("llama.cpp", None, "tg", t)]
            out["llama_cpp_tg"][t] = v
            print(f"llama.cpp tg{args.n} (plain file{', --poll ' + args.llama_poll if lb_extra else ''}): "
                  f"median {ll:.2f} tok/s, best {max(v):.2f}; pp32 {pp[t]:.1f} tok/s\n")
        table = []
        for s in sparsities:
            meas = files[s][2]["measured"]["sparsity_mean"]
            rt = runtime.get(s, float("nan"))
            dense = med(results[("pinfer", s, "dense", t)])
            for mode in ["dense"] + modes:
                v = results[("pinfer", s, mode, t)]
                same = "" if mode == "dense" else ("yes" if checks[(s, mode)] else "no")
                dv = results[("pinfer", s, "dense", t)]
                paired = med([a / b for a, b in zip(v, dv)])
                if args.llama_bench:
                    lv = results[("llama.cpp", None, "tg", t)]
                    vsl = [f"{med(v) / ll:.2f}x", f"{max(v) / max(lv):.2f}x"]
                else:
                    vsl = ["-", "-"]
                table.append([f"{s:.2f}", f"{meas:.3f}", f"{rt:.3f}", mode, f"{med(v):.2f}", f"{max(v):.2f}",
                              f"{med(v) / dense:.2f}x", f"{max(v) / max(dv):.2f}x", f"{paired:.2f}x", *vsl, same])
                out["rows"].append({"threads": t, "sparsity": s, "measured_sparsity": meas, "runtime_sparsity": rt,
                                    "mode": mode, "tok_s": v,
                                    "same_text_as_dense": checks.get((s, mode))})
        print_table(["target sparsity", "measured sparsity", "runtime sparsity", "pinfer mode", "tok/s median", "best",
                     "vs pinfer dense (medians)", "(best)", "(paired per round, median)", "vs llama.cpp (medians)",
                     "(best)", "greedy text = dense"], table)
    for (s, mode), lines in stats.items():
        print(f"\n--sparse-stats s={s:.2f} {mode}:")
        for ln in lines:
            print("   " + ln)
    write_json(args.json, out)
    return 0

if __name__ == "__main__":
    sys.exit(main())
