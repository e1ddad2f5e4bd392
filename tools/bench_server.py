"""Aggregate decode throughput and time to first token of `pinfer serve` under 1, 2,
4, 8 concurrent greedy streams, beside llama.cpp's llama-server when given one.

    python tools/bench_server.py -m model.gguf [--streams 1 2 4 8] [-n 64] [-t 2]
        [--llama-server /path/to/llama-server] [--rounds 2]

Each server runs alone (first pinfer, then llama-server) with as many slots as the
largest stream count; every round sends N streaming /v1/completions requests at once
(temperature 0, max_tokens n) and waits for all. Printed per N: aggregate tok/s
(completion tokens of all streams / wall time of the round, prefill included), the
ratio to N = 1 of the same server, aggregate decode tok/s (the sum over streams of
(tokens - 1) / (last token - first token): the rate once prefill is done), and p50 /
p99 time to first token. With
PINFER_BUILD_DIR set, pinfer is imported from python/ and that build dir (as the tests do).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Dict, List

import httpx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchinfo import cpu_model, loadavg, percentile, print_table, write_json  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPTS = ["It is a truth universally acknowledged that", "The history of the Roman empire begins",
           "def fibonacci(n):", "Write a short story about a lighthouse keeper.", "The three primary colors are",
           "Once upon a time, in a small village,", "The best way to learn a language is",
           "In the year 2050, cities will"]
BOOT = ("import glob,importlib.util,os,sys;r,b=sys.argv[1],sys.argv[2];sys.path.insert(0,os.path.join(r,'python'));"
        "s=importlib.util.spec_from_file_location('pinfer._core',glob.glob(os.path.join(b,'_core*.so'))[0]);"
        "m=importlib.util.module_from_spec(s);s.loader.exec_module(m);sys.modules['pinfer._core']=m;"
        "from pinfer.server.cli import standalone;sys.exit(standalone(sys.argv[3:]))")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd: List[str], url: str, what: str) -> subprocess.Popen:
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if p.poll() is not None:
            raise SystemExit(f"{what} exited with {p.returncode}: {p.stderr.read()[-2000:]}")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return p
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    p.kill()
    raise SystemExit(f"{what} did not become healthy")


def one(url: str, prompt: str, n: int, out: List[Dict[str, float]]) -> None:
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0, "stream": True}
    t0 = time.perf_counter()
    first = None
    chunks = 0
    tokens = None
    with httpx.Client(timeout=600) as c, c.stream("POST", url + "/v1/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data:") or line.strip() == "data: [DONE]":
                continue
            d = json.loads(line[5:])
            if d.get("usage"):
                tokens = d["usage"].get("completion_tokens")
            ch = d.get("choices") or [{}]
            if ch[0].get("text"):
                chunks += 1
                if first is None:
                    first = time.perf_counter()
    end = time.perf_counter()
    n_tok = tokens if tokens is not None else chunks
    rate = (n_tok - 1) / (end - first) if first is not None and n_tok > 1 and end > first else 0.0
    out.append({"ttft": (first or end) - t0, "tokens": n_tok, "decode_rate": rate})


def measure(url: str, streams: List[int], n: int, rounds: int) -> Dict[int, Dict[str, float]]:
    one(url, PROMPTS[0], 8, [])  # warm-up
    res = {}
    for k in streams:
        ttft: List[float] = []
        tps: List[float] = []
        dec: List[float] = []
        for r in range(rounds):
            out: List[Dict[str, float]] = []
            th = [threading.Thread(target=one, args=(url, PROMPTS[(i + r) % len(PROMPTS)], n, out))
                  for i in range(k)]
            t0 = time.perf_counter()
            for t in th:
                t.start()
            for t in th:
                t.join()
            wall = time.perf_counter() - t0
            tps.append(sum(o["tokens"] for o in out) / wall)
            dec.append(sum(o["decode_rate"] for o in out))
            ttft += [o["ttft"] for o in out]
        ttft.sort()
        res[k] = {"tok_s": max(tps), "decode_tok_s": max(dec), "ttft_p50_ms": 1e3 * percentile(ttft, 0.5),
                  "ttft_p99_ms": 1e3 * percentile(ttft, 0.99)}
        print(f"  {k} streams: {res[k]['tok_s']:7.1f} tok/s wall, "
              f"{res[k]['decode_tok_s']:7.1f} decode  TTFT p50 {res[k]['ttft_p50_ms']:7.1f} ms  "
              f"p99 {res[k]['ttft_p99_ms']:7.1f} ms", file=sys.stderr, flush=True)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("-n", "--tokens", type=int, default=64, help="max_tokens per stream")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-c", "--ctx", type=int, default=256, help="context per slot")
    ap.add_argument("--rounds", type=int, default=2, help="rounds per stream count (best tok/s, all TTFTs)")
    ap.add_argument("--sparse", default="off")
    ap.add_argument("--precision", default="high", choices=["high", "fast"], help="pinfer's activation precision")
    ap.add_argument("--llama-server", default=None, help="path to llama.cpp's llama-server (the baseline)")
    ap.add_argument("--json", default=None, help="write the results here too")
    a = ap.parse_args()
    np_ = max(a.streams)
    results = {"cpu": cpu_model(), "load_before": loadavg(), "model": os.path.basename(a.model),
               "tokens": a.tokens, "threads": a.threads}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = ["-m", a.model, "--port", str(port), "-np", str(np_), "-c", str(a.ctx), "-t", str(a.threads),
            "--queue", "0", "--no-embeddings", "--sparse", a.sparse, "--precision", a.precision]
    build = os.environ.get("PINFER_BUILD_DIR")
    cmd = ([sys.executable, "-c", BOOT, ROOT, build if os.path.isabs(build) else os.path.join(ROOT, build)] if build
           else [sys.executable, "-m", "pinfer.server"]) + args
    print(f"pinfer serve ({a.model}, {np_} slots, -t {a.threads}, --precision {a.precision}):", file=sys.stderr)
    p = start(cmd, url, "pinfer serve")
    try:
        results["pinfer"] = measure(url, a.streams, a.tokens, a.rounds)
    finally:
        p.terminate()
        p.wait(30)
    if a.llama_server:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        print(f"llama-server ({np_} slots, -t {a.threads}):", file=sys.stderr)
        p = start([a.llama_server, "-m", a.model, "--port", str(port), "-np", str(np_), "-c", str(a.ctx * np_),
                   "-t", str(a.threads), "-tb", str(a.threads), "--no-warmup"], url, "llama-server")
        try:
            results["llama-server"] = measure(url, a.streams, a.tokens, a.rounds)
        finally:
            p.terminate()
            p.wait(30)
    results["load_after"] = loadavg()
    print(f"\nCPU: {results['cpu']}; load average {results['load_before']:.1f} before, "
          f"{results['load_after']:.1f} after; {a.tokens} tokens per stream, -t {a.threads}, "
          f"pinfer --precision {a.precision}")
    names = [k for k in ("pinfer", "llama-server") if k in results]
    head = ["streams"]
    for n in names:
        head += [f"{n} decode tok/s", "x1", "wall tok/s", "TTFT p50 / p99 ms"]
    if len(names) == 2:
        head.append("decode pinfer / llama-server")
    rows = []
    for k in a.streams:
        row = [str(k)]
        for n in names:
            r, base = results[n][k], results[n][a.streams[0]]
            row += [f"{r['decode_tok_s']:.1f}", f"{r['decode_tok_s'] / base['decode_tok_s']:.2f}",
                    f"{r['tok_s']:.1f}", f"{r['ttft_p50_ms']:.0f} / {r['ttft_p99_ms']:.0f}"]
        if len(names) == 2:
            row.append(f"{results['pinfer'][k]['decode_tok_s'] / results['llama-server'][k]['decode_tok_s']:.2f}")
        rows.append(row)
    print_table(head, rows)
    write_json(a.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
