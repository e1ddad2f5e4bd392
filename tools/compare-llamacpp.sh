#!/usr/bin/env bash
# Compare pinfer with llama.cpp on one GGUF file, both measured in the same
# run: rounds alternate llama-bench and pinfer-bench (so both see the same
# machine load), each test keeps its best tok/s over all rounds and reps, and
# the script prints pinfer / llama.cpp ratios. It never builds or fetches
# llama.cpp: pass the path of an existing llama-bench binary.
#
#   tools/compare-llamacpp.sh LLAMA_BENCH MODEL.gguf [-t 2] [-p 64,512] [-n 64] [-r 3] [--rounds 2]
#                              [--pinfer-bench build/pinfer-bench] [--precision high|fast]
set -euo pipefail

usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 2 ] || usage
LB=$1 MODEL=$2
shift 2
THREADS=2 PROMPTS=64,512 NGEN=64 REPS=3 ROUNDS=2 PREC=high
PB="$(dirname "$0")/../build/pinfer-bench"
while [ $# -gt 0 ]; do
  case "$1" in
    -t) THREADS=$2; shift 2 ;;
    -p) PROMPTS=$2; shift 2 ;;
    -n) NGEN=$2; shift 2 ;;
    -r) REPS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --pinfer-bench) PB=$2; shift 2 ;;
    --precision) PREC=$2; shift 2 ;;
    *) echo "compare-llamacpp.sh: unknown option '$1'" >&2; usage ;;
  esac
done
[ -x "$LB" ] || { echo "compare-llamacpp.sh: llama-bench not found or not executable: $LB" >&2; exit 1; }
[ -x "$PB" ] || { echo "compare-llamacpp.sh: pinfer-bench not found: $PB (build it, or pass --pinfer-bench)" >&2; exit 1; }
[ -f "$MODEL" ] || { echo "compare-llamacpp.sh: model not found: $MODEL" >&2; exit 1; }

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo "model:   $MODEL"
echo "threads: $THREADS  prompts: $PROMPTS  gen: $NGEN  reps: $REPS  rounds: $ROUNDS  pinfer precision: $PREC"
echo "cpu:     $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') ($(nproc) cpus)"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((round = 1; round <= ROUNDS; round++)); do
  # llama-bench: one JSON object per test; keep the best sample (t/s)
  "$LB" -m "$MODEL" -t "$THREADS" -p "$PROMPTS" -n "$NGEN" -r "$REPS" -o jsonl 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    line = line.strip()
    if not line.startswith("{"): continue
    r = json.loads(line)
    name = "pp%d" % r["n_prompt"] if r["n_gen"] == 0 else "tg%d" % r["n_gen"]
    print(name, max(r["samples_ts"]))
' >> "$TMP/llama"
  "$PB" model -m "$MODEL" -t "$THREADS" -p "$PROMPTS" -n "$NGEN" -r "$REPS" --precision "$PREC" |
    awk '$1 ~ /^(pp|tg)[0-9]+$/ { print $1, $2 }' >> "$TMP/pinfer"
done
echo "load after:  $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$TMP/llama" "$TMP/pinfer" <<'PY'
import sys
def best(path):
    b = {}
    for line in open(path):
        k, v = line.split()
        b[k] = max(b.get(k, 0.0), float(v))
    return b
ll, pi = best(sys.argv[1]), best(sys.argv[2])
print("%-8s %14s %14s %8s" % ("test", "llama.cpp t/s", "pinfer t/s", "ratio"))
for k in sorted(set(ll) | set(pi), key=lambda s: (s[:2], int(s[2:]))):
    a, b = ll.get(k), pi.get(k)
    r = "%7.2fx" % (b / a) if a and b else "      -"
    print("%-8s %14s %14s %8s" % (k, "%.2f" % a if a else "-", "%.2f" % b if b else "-", r))
PY
