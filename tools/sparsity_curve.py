"""Perplexity against FFN sparsity in threshold mode (CATS/TEAL-style) for SmolLM2 (or --model).

    PINFER_BUILD_DIR=build python tools/sparsity_curve.py [--model M.gguf] [--windows 4]

Calibrates per-layer |act(gate)| thresholds once on one slice of Jane Austen's
novels (tokens [0, --calib-tokens)) with the engine's FFN observer, writes one
extended GGUF per target sparsity, and measures perplexity in threshold mode on
a different slice (starting at --eval-skip tokens; --windows windows of --ctx
tokens). Target 0 has all thresholds 0, i.e. the dense function. Writes the
table to docs/smollm2-sparsity.md and the plot to docs/smollm2-sparsity.png.
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.environ.get("PINFER_BUILD_DIR"):
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import conftest  # noqa: F401,E402  (imports pinfer from the build dir)

from benchinfo import table_head  # noqa: E402
from pinfer import _core, calibrate, datasets, extgguf, perplexity  # noqa: E402

TARGETS = [0.0, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="GGUF (default: pinfer.datasets.smollm2_path())")
    ap.add_argument("--calib-tokens", type=int, default=2048)
    ap.add_argument("--eval-skip", type=int, default=50000, help="first evaluated token of the text")
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("-t", "--threads", type=int, default=None)
    ap.add_argument("--out-md", default=os.path.join(ROOT, "docs", "smollm2-sparsity.md"))
    ap.add_argument("--out-png", default=os.path.join(ROOT, "docs", "smollm2-sparsity.png"))
    args = ap.parse_args(argv)

    model_path = args.model or datasets.smollm2_path()
    text = datasets.austen()
    t0 = time.time()
    model = _core.Model(model_path)
    calib = calibrate.calibration_tokens(model, text, args.calib_tokens)
    evals = calibrate.calibration_tokens(model, text, args.windows * args.ctx, skip_tokens=args.eval_skip)
    obs = calibrate.observe(model, calib, n_ctx=args.ctx, n_threads=args.threads)
    thr = {t: np.array([obs.act_quantile(il, t) for il in range(model.n_layer)], np.float32) for t in TARGETS}
    obs.close()
    print(f"calibrated on {len(calib)} tokens in {time.time() - t0:.1f} s", flush=True)

    rows = []
    ppl_dense, err_dense, _ = perplexity.perplexity_tokens(model, evals, args.ctx, n_threads=args.threads,
                                                           max_windows=args.windows, method="all")
    rows.append(("dense (off)", None, 0.0, ppl_dense, err_dense, 1.0))
    print(f"dense: ppl {ppl_dense:.3f}", flush=True)
    model.close()
    with tempfile.TemporaryDirectory() as d:
        for t in TARGETS:
            path = extgguf.add_sparse(model_path, os.path.join(d, f"t{int(100 * t)}.gguf"), act_thresholds=thr[t])
            m = _core.Model(path)
            st = {}
            ppl, err, n = perplexity.perplexity_tokens(m, evals, args.ctx, n_threads=args.threads,
                                                       max_windows=args.windows, sparse="threshold", stats=st,
                                                       method="all")
            m.close()
            active = float(np.mean([l["active_frac"] for l in st["layers"]]))
            flops = (st["flops_ffn"] + st["flops_predictor"]) / st["flops_dense"]
            rows.append((f"threshold {t:.1f}", t, 1.0 - active, ppl, err, flops))
            print(f"target {t:.1f}: measured sparsity {1 - active:.3f}, ppl {ppl:.3f} +/- {err:.3f}", flush=True)

    name = os.path.basename(model_path)
    cmd = "PINFER_BUILD_DIR=build python tools/sparsity_curve.py"
    if args.model:
        cmd += (f" --model {name} --out-md docs/{os.path.basename(args.out_md)}"
                f" --out-png docs/{os.path.basename(args.out_png)}")
    lines = [
        f"# {'SmolLM2' if not args.model else name}: perplexity against FFN sparsity (threshold mode)",
        "",
        f"Model `{name}`; per-layer |act(gate)| thresholds calibrated with the engine's FFN observer "
        f"on Austen tokens [0, {len(calib)}), perplexity on {args.windows} windows of {args.ctx} tokens "
        f"starting at token {args.eval_skip} (a different slice). Sparsity is measured on the evaluated "
        "tokens (mean over layers of the skipped share of neurons per token). FFN FLOPs: of what the "
        "threshold graph ran, relative to dense (the gate stays dense; a batch computes the union of its "
        "tokens' active rows, so prompt batches save little) and per token, as a single-token decode "
        "runs it (gate dense, up and down over the token's own active set: (1 + 2 (1 - sparsity)) / 3).",
        "",
        f"Produced by `{cmd}`.",
        "",
        *table_head(["mode", "target sparsity", "measured sparsity", "perplexity", "±",
                     "FFN FLOPs vs dense (batch of 256)", "FFN FLOPs vs dense (decode)"]),
    ]
    for label, t, s, ppl, err, fl in rows:
        dec = (1 + 2 * (1 - s)) / 3
        lines.append(f"| {label} | {'-' if t is None else f'{t:.1f}'} | {s:.3f} | {ppl:.3f} | {err:.3f} | {fl:.3f} "
                     f"| {dec:.3f} |")
    lines += ["", f"![perplexity vs sparsity]({os.path.basename(args.out_png)})", ""]
    with open(args.out_md, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [r[2] for r in rows[1:]]
    ys = [r[3] for r in rows[1:]]
    es = [r[4] for r in rows[1:]]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label="threshold mode")
    ax.axhline(ppl_dense, color="gray", ls="--", label=f"dense ({ppl_dense:.2f})")
    ax.set_xlabel("measured FFN sparsity (skipped neurons per token)")
    ax.set_ylabel("perplexity (Austen, held-out slice)")
    ax.set_yscale("log")
    ax.set_title(f"{name}: perplexity vs sparsity")
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out_png, dpi=120)
    print(f"wrote {args.out_md} and {args.out_png}; {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
