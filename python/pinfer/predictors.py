"""Train per-layer activation predictors and store them in an extended GGUF.

    pinfer train-predictors HF_DIR --data dump/ --gguf base.gguf -o model_pred.gguf \\
        [--recall 0.95] [--type f32|f16] [--report report.json]

Input: the ``--dump`` directory of ``pinfer profile`` (meta.json + shards of
``x_<l>`` FFN inputs and ``mask_<l>`` packed active sets).

What the predictor sees. ``x`` is the input of layer l's MLP module: the post-norm
hidden state (llama/qwen2: the output of ``post_attention_layernorm``, which is
the GGUF graph's ``ffn_norm`` output; falcon: the ``attn_norm`` output that its
parallel MLP reads; opt: fc1's input, the ``ffn_norm`` output, or for post-LN
OPT the residual stream that its FFN reads). That is exactly the vector pinfer's runtime feeds the
predictor before the FFN of that layer, so no scaling or re-normalising happens
in between; a predictor trained on anything else (e.g. the residual stream
before the norm) would be wrong at run time.

Model (per layer, the runtime's form, no biases): ``p = B · relu(A · x)`` with
A ``[r, d]`` and B ``[n, r]`` (GGUF ``fc1`` ``[d, r]`` and ``fc2`` ``[r, n]`` in
``ne`` order); neuron i is predicted active when ``p_i > pinfer.sparse.threshold``.

Training: BCE on the logits p with a per-neuron ``pos_weight = #inactive/#active``
(clipped to [1, 100]) against the class imbalance, Adam, ``epochs`` passes, on
1 - ``heldout`` of the rows; the rest is held out (seeded split).

Rank, per layer: start from ``r0 = clip(pow2ceil(n · a · c80 / 0.8), min_rank,
max_rank)`` with a = the layer's mean activation frequency and c80 = the share of
neurons covering 80% of its activations: the rank follows the number of neurons
active per token, scaled down for skewed layers, whose hot neurons are easy
(PowerInfer sizes its predictors by sparsity and skew the same way). The rank
doubles while the held-out recall at logit 0 (the BCE decision boundary) is below
the target, up to ``max_rank``.

Threshold: per layer, the largest logit t_l whose held-out recall reaches the
target. The file has one threshold (``pinfer.sparse.threshold``), so the layers
are reconciled exactly where possible: the global threshold is
``tau = min_l t_l``, and fc2 of layer l is scaled by ``c_l = tau / t_l`` (> 0 when
t_l has tau's sign), which turns ``c_l p > tau`` into ``p > t_l``. A layer whose
t_l has the other sign gets ``c_l = c_max`` (64): effective threshold ``tau/64``,
just below 0 <= t_l, so its recall only rises. The report's recall, precision and
predicted sparsity are measured on the held-out rows with the final (scaled,
typed) weights and tau, exactly as the runtime decides.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

from . import keys as K
from .outfile import atomic_output

__all__ = ["PredictorError", "LayerReport", "load_dump", "initial_rank", "train_layer", "pick_threshold",
           "fold_thresholds", "train_predictors", "predict", "add_parser", "main"]

C_MAX = 64.0


class PredictorError(ValueError):
    """Bad input to predictor training (the message names it)."""


@dataclass
class LayerReport:
    layer: int
    rank: int
    params: int
    recall: float                # held-out, final weights and global threshold
    precision: float
    predicted_sparsity: float    # held-out share of (token, neuron) predicted inactive
    actual_sparsity: float       # held-out share actually inactive
    layer_threshold: float       # t_l before folding
    scale: float                 # c_l applied to fc2
    exact_fold: bool             # c_l p > tau is exactly p > t_l
    recall_at_0: float           # of the chosen rank, before thresholding
    tried: List[Tuple[int, float]] = field(default_factory=list)  # (rank, held-out recall at 0)
    met_at_0: bool = False
    n_train: int = 0
    n_heldout: int = 0


# ---------------------------------------------------------------- data

def load_dump(d: str) -> dict:
    """meta.json of a profile dump, checked."""
    if not os.path.isdir(d):
        raise PredictorError(f"--data {d}: no such directory (write one with 'pinfer profile --dump')")
    mp = os.path.join(d, "meta.json")
    if not os.path.isfile(mp):
        raise PredictorError(f"--data {d}: no meta.json (write it with 'pinfer profile --dump')")
    with open(mp, encoding="utf-8") as f:
        meta = json.load(f)
    for k in ("n_layer", "n_embd", "n_ff", "shards", "rows"):
        if k not in meta:
            raise PredictorError(f"{mp}: '{k}' is missing")
    if not meta["shards"] or meta["rows"] < 2:
        raise PredictorError(f"--data {d}: the dump has {meta['rows']} rows; profile more tokens")
    for s in meta["shards"]:
        if not os.path.isfile(os.path.join(d, s)):
            raise PredictorError(f"--data {d}: shard '{s}' is missing")
    meta["dir"] = d
    return meta


def layer_data(meta: dict, il: int) -> Tuple[np.ndarray, np.ndarray]:
    """(x float32 [N, d], packed mask uint8 [N, ceil(n/8)]) of layer il from all shards."""
    xs, ms = [], []
    d, n = int(meta["n_embd"]), int(meta["n_ff"])
    for s in meta["shards"]:
        with np.load(os.path.join(meta["dir"], s), allow_pickle=False) as z:
            x, m = z[f"x_{il}"], z[f"mask_{il}"]
        if x.ndim != 2 or x.shape[1] != d or m.shape != (x.shape[0], (n + 7) // 8):
            raise PredictorError(f"{s}: layer {il} arrays have shapes {x.shape} / {m.shape}, "
                                 f"expected (m, {d}) / (m, {(n + 7) // 8})")
        xs.append(x.astype(np.float32))
        ms.append(m)
    return np.concatenate(xs), np.concatenate(ms)


def _unpack(m: np.ndarray, n: int) -> np.ndarray:
    return np.unpackbits(m, axis=1, count=n).astype(bool)


# ---------------------------------------------------------------- model

def initial_rank(mean_freq: float, c80: float, n: int, min_rank: int, max_rank: int) -> int:
    want = n * mean_freq * min(1.0, c80 / 0.8)
    r = 1 << max(0, math.ceil(math.log2(max(want, 1.0))))
    return int(min(max(r, min_rank), max_rank))


def _coverage80(counts: np.ndarray) -> float:
    f = np.sort(counts.astype(np.float64))[::-1]
    tot = f.sum()
    if tot <= 0:
        return 0.0
    return (int(np.searchsorted(np.cumsum(f), 0.8 * tot - 1e-12 * tot)) + 1) / f.size


def predict(A, B, x, threshold: float):
    """Active set of torch predictor weights A [r, d], B [n, r] on x [m, d] (torch tensors)."""
    import torch

    with torch.no_grad():
        return (torch.relu(x @ A.T) @ B.T) > threshold


def _logits(A, B, x, device, bs: int = 4096):
    import torch

    with torch.no_grad():
        for i in range(0, x.shape[0], bs):
            xb = torch.from_numpy(x[i:i + bs]).to(device)
            yield i, torch.relu(xb @ A.T) @ B.T


def pick_threshold(pos_logits: np.ndarray, recall: float, margin: float = 0.0) -> float:
    """Largest float32 t with #(pos_logits > t) >= ceil(recall * P) (minus a relative margin)."""
    v = np.sort(np.asarray(pos_logits, dtype=np.float32))
    P = v.size
    if P == 0:
        return float("inf")
    need = min(P, math.ceil(recall * P - 1e-9))
    t = v[P - need]
    t = np.nextafter(np.float32(t), np.float32(-np.inf)) if margin == 0 else np.float32(t - margin * (1 + abs(t)))
    return float(t)


def _pos_logits(A, B, x, ym, n, device) -> Tuple[np.ndarray, int, int]:
    """Logits of the positives, and counts (positives, positives with logit > 0)."""
    out, P, hit0 = [], 0, 0
    for i, p in _logits(A, B, x, device):
        y = _unpack(ym[i:i + p.shape[0]], n)
        pv = p.cpu().numpy()[y]
        out.append(pv)
        P += pv.size
        hit0 += int((pv > 0).sum())
    return (np.concatenate(out) if out else np.zeros(0, np.float32)), P, hit0


def evaluate(A, B, x, ym, n, threshold: float, device="cpu") -> Dict[str, float]:
    """Held-out recall, precision, predicted and actual sparsity of p > threshold."""
    tp = fp = fn = total = 0
    for i, p in _logits(A, B, x, device):
        y = _unpack(ym[i:i + p.shape[0]], n)
        pr = (p > threshold).cpu().numpy()
        tp += int((pr & y).sum())
        fp += int((pr & ~y).sum())
        fn += int((~pr & y).sum())
        total += y.size
    return {"recall": tp / (tp + fn) if tp + fn else 1.0, "precision": tp / (tp + fp) if tp + fp else 1.0,
            "predicted_sparsity": 1 - (tp + fp) / max(total, 1), "actual_sparsity": 1 - (tp + fn) / max(total, 1)}


def _train(x, ym, n, rank, epochs, lr, batch, seed, device, pos_weight):
    import torch

    torch.manual_seed(seed)
    d = x.shape[1]
    fc1 = torch.nn.Linear(d, rank, bias=False).to(device)
    fc2 = torch.nn.Linear(rank, n, bias=False).to(device)
    opt = torch.optim.Adam(list(fc1.parameters()) + list(fc2.parameters()), lr=lr)
    lossf = torch.nn.BCEWithLogitsLoss(pos_weight=torch.from_numpy(pos_weight).to(device))
    g = np.random.default_rng(seed)
    N = x.shape[0]
    for _ in range(epochs):
        order = g.permutation(N)
        for i in range(0, N, batch):
            idx = order[i:i + batch]
            xb = torch.from_numpy(x[idx]).to(device)
            yb = torch.from_numpy(_unpack(ym[idx], n).astype(np.float32)).to(device)
            loss = lossf(fc2(torch.relu(fc1(xb))), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return fc1.weight.detach(), fc2.weight.detach()


def train_layer(x, ym, n, recall, min_rank=8, max_rank=1024, epochs=8, lr=2e-3, batch=256, heldout=0.2,
                seed=0, device="cpu", growth=2, log=None):
    """Train one layer's predictor with adaptive rank. Returns (A, B, info dict)
    with torch weights and the held-out split used."""
    N = x.shape[0]
    rng = np.random.default_rng(seed)
    perm = rng.permutation(N)
    n_ho = max(1, int(round(heldout * N)))
    ho, tr = np.sort(perm[:n_ho]), np.sort(perm[n_ho:])
    if tr.size == 0:
        raise PredictorError(f"{N} rows cannot be split into training and held-out data")
    xtr, ytr, xho, yho = x[tr], ym[tr], x[ho], ym[ho]
    counts = _unpack(ytr, n).sum(0).astype(np.int64)
    pos_weight = np.clip((tr.size - counts) / np.maximum(counts, 1), 1.0, 100.0).astype(np.float32)
    max_rank = max(1, min(max_rank, n))
    r = initial_rank(float(counts.sum()) / (tr.size * n), _coverage80(counts), n, min(min_rank, max_rank), max_rank)
    tried = []
    while True:
        A, B = _train(xtr, ytr, n, r, epochs, lr, batch, seed, device, pos_weight)
        pos, P, hit0 = _pos_logits(A, B, xho, yho, n, device)
        rec0 = hit0 / P if P else 1.0
        tried.append((r, rec0))
        if log:
            log(f"  rank {r:>5}: held-out recall at logit 0 = {rec0:.4f}")
        if rec0 >= recall or r >= max_rank:
            break
        r = min(max_rank, r * growth)
    return A, B, {"tried": tried, "pos_logits": pos, "recall_at_0": rec0, "met_at_0": rec0 >= recall,
                  "xho": xho, "yho": yho, "n_train": int(tr.size), "n_heldout": int(ho.size)}


def fold_thresholds(t: List[float], c_max: float = C_MAX) -> Tuple[float, List[float], List[bool]]:
    """One global threshold tau and per-layer fc2 scales c_l (see the module doc)."""
    finite = [v for v in t if math.isfinite(v)]
    tau = min(finite) if finite else 0.0
    scales, exact = [], []
    for v in t:
        if not math.isfinite(v):  # a layer with no positives: predict as little as the scale allows
            scales.append(1.0 / c_max if tau > 0 else c_max if tau < 0 else 1.0)
            exact.append(False)
        elif tau != 0 and v != 0 and (tau > 0) == (v > 0):
            scales.append(min(tau / v, c_max))
            exact.append(tau / v <= c_max)
        elif tau == 0 and v == 0:
            scales.append(1.0)
            exact.append(True)
        else:  # other sign (or a zero): the nearest effective threshold below t_l
            scales.append(c_max)
            exact.append(False)
    return float(tau), scales, exact


def _round(w, type_name: str):
    import torch

    return w.to(torch.float16).to(torch.float32) if type_name == "f16" else w


# ---------------------------------------------------------------- pipeline

def _model_dims(model: str) -> Optional[Tuple[int, int, int]]:
    from .profile import ProfileError, _dims, model_act, read_config

    try:
        cfg = read_config(model)
        arch, _, _ = model_act(cfg)
    except ProfileError as e:
        raise PredictorError(str(e)) from None
    d, n = _dims(cfg, arch)
    L = cfg.get("num_hidden_layers") or cfg.get("n_layer")
    if L is None:
        raise PredictorError(f"{model}: config.json has neither num_hidden_layers nor n_layer")
    return int(L), d, n


def train_predictors(model: Optional[str], data: str, out: str, base_gguf: str, recall: float = 0.95,
                     type_name: str = "f32", min_rank: int = 8, max_rank: int = 1024, epochs: int = 8,
                     lr: float = 2e-3, batch: int = 256, heldout: float = 0.2, seed: int = 0,
                     device: Optional[str] = None, report: Optional[str] = None, layers=None,
                     verbose: bool = True) -> dict:
    """Train every layer's predictor on the dump in `data`, write base_gguf + fc1/fc2 +
    threshold to out, and return the report (also written as JSON to `report`)."""
    import torch

    from . import extgguf

    if not 0.0 < recall < 1.0:
        raise PredictorError("--recall must lie in (0, 1)")
    if not 0.0 < heldout < 1.0:
        raise PredictorError("--heldout must lie in (0, 1)")
    if type_name not in ("f32", "f16"):
        raise PredictorError("--type must be f32 or f16")
    if min_rank < 1 or max_rank < min_rank:
        raise PredictorError("need 1 <= --min-rank <= --max-rank")
    if epochs < 1:
        raise PredictorError("--epochs must be at least 1")
    meta = load_dump(data)
    L, d, n = int(meta["n_layer"]), int(meta["n_embd"]), int(meta["n_ff"])
    if model is not None:
        dims = _model_dims(model)
        if dims != (L, d, n):
            raise PredictorError(f"{model}: (n_layer, n_embd, n_ff) = {dims}, but the dump in {data} has {(L, d, n)}")
    if not os.path.isfile(base_gguf):
        raise PredictorError(f"--gguf {base_gguf}: no such file")
    try:
        info = extgguf.read(base_gguf)
    except Exception as e:
        raise PredictorError(f"--gguf {base_gguf}: cannot read ({e})") from None
    if (info.n_layer, info.n_embd, info.n_ff) != (L, d, n):
        raise PredictorError(f"--gguf {base_gguf}: (n_layer, n_embd, n_ff) = {(info.n_layer, info.n_embd, info.n_ff)}, "
                             f"but the dump has {(L, d, n)}")
    if info.neuron_order:
        raise PredictorError(f"--gguf {base_gguf}: neurons are permuted ('{info.neuron_order}'); the dump is in "
                             "the model's original order. Train on the un-permuted GGUF, then permute "
                             "(extgguf.make_hot_first moves fc2 rows along)")
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    log = (lambda s: print(s, file=sys.stderr)) if verbose else None
    # t_l sits just below a positive's logit: keep a relative margin so that float
    # differences between this evaluation and the runtime's (summation order, the
    # fc2 scale, f16 rounding) cannot push that positive under the threshold
    margin = 4e-3 if type_name == "f16" else 1e-4

    weights, t_l, infos = [], [], []
    layer_ids = list(range(L)) if layers is None else list(layers)
    if sorted(layer_ids) != list(range(L)):
        raise PredictorError("every layer needs a predictor (the format is all-or-nothing)")
    for il in layer_ids:
        x, ym = layer_data(meta, il)
        if log:
            log(f"layer {il}: {x.shape[0]} rows")
        A, B, inf = train_layer(x, ym, n, recall, min_rank, max_rank, epochs, lr, batch, heldout,
                                seed + il, device, log=log)
        A, B = _round(A, type_name), _round(B, type_name)
        pos, _, _ = _pos_logits(A, B, inf["xho"], inf["yho"], n, device)
        t_l.append(pick_threshold(pos, recall, margin))
        weights.append((A, B))
        infos.append(inf)

    tau, scales, exact = fold_thresholds(t_l)
    reports, preds = [], {}
    for il, ((A, B), inf) in enumerate(zip(weights, infos)):
        B = _round(B * scales[il], type_name)
        weights[il] = (A, B)
        ev = evaluate(A, B, inf["xho"], inf["yho"], n, tau, device)
        r = A.shape[0]
        reports.append(LayerReport(il, r, r * (d + n), ev["recall"], ev["precision"], ev["predicted_sparsity"],
                                   ev["actual_sparsity"], t_l[il], scales[il], exact[il], inf["recall_at_0"],
                                   inf["tried"], inf["met_at_0"], inf["n_train"], inf["n_heldout"]))
        preds[il] = (A.cpu().numpy(), B.cpu().numpy())

    type_id = extgguf.F16 if type_name == "f16" else extgguf.F32
    act_thr = None
    if meta.get("act") in ("silu", "gelu") and meta.get("thresholds"):
        act_thr = np.asarray(meta["thresholds"], dtype=np.float32)
    extgguf.add_sparse(base_gguf, out, predictors=preds, threshold=tau, act_thresholds=act_thr,
                       mode_hint=K.MODE_HINT_PREDICTOR, predictor_type=type_id)
    rep = {"recall_target": recall, "threshold": tau, "type": type_name, "gguf": out, "base": base_gguf,
           "data": data, "rows": int(meta["rows"]), "act": meta.get("act"),
           "layers": [asdict(x) for x in reports]}
    if report is None:
        report = (out[:-5] if out.endswith(".gguf") else out) + ".predictors.json"
    with atomic_output(report, what="report") as tmp:
        with open(tmp, "w") as f:
            json.dump(rep, f, indent=1)
    rep["report"] = report
    rep["_weights"] = weights  # torch weights as written (not in the JSON)
    rep["_heldout"] = [(inf["xho"], inf["yho"]) for inf in infos]
    return rep


def format_table(rep: dict) -> str:
    lines = [f"{'layer':>5} {'rank':>5} {'params':>9} {'recall':>7} {'precis':>7} {'pred.sp':>7} "
             f"{'act.sp':>7} {'t_l':>9} {'scale':>7}"]
    for l in rep["layers"]:
        lines.append(f"{l['layer']:>5} {l['rank']:>5} {l['params']:>9} {l['recall']:>7.4f} {l['precision']:>7.4f} "
                     f"{l['predicted_sparsity']:>7.4f} {l['actual_sparsity']:>7.4f} {l['layer_threshold']:>9.4g} "
                     f"{l['scale']:>7.3g}{'' if l['exact_fold'] else ' *'}")
    lines.append(f"threshold {rep['threshold']:.6g} (pinfer.sparse.threshold); recall target {rep['recall_target']}"
                 + ("; * = threshold lowered to fit the global one" if any(not l["exact_fold"] for l in rep["layers"])
                    else ""))
    return "\n".join(lines)


# ---------------------------------------------------------------- CLI

def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("train-predictors", help="train per-layer activation predictors (torch)",
                              description="Train a low-rank predictor per layer on the (FFN input, active set) "
                                          "pairs of 'pinfer profile --dump', with the rank adapted to reach the "
                                          "recall target, and write fc1/fc2 + threshold into an extended GGUF.")
    p.add_argument("model", help="the Hugging Face model directory that was profiled (checked against the dump)")
    p.add_argument("--data", required=True, help="dump directory of 'pinfer profile --dump'")
    p.add_argument("--gguf", required=True, help="the converted (un-permuted) GGUF to extend")
    p.add_argument("-o", "--output", required=True, help="output extended GGUF")
    p.add_argument("--recall", type=float, default=0.95, help="held-out recall target (default 0.95)")
    p.add_argument("--type", default="f32", choices=("f32", "f16"), help="fc1/fc2 weight type (default f32)")
    p.add_argument("--min-rank", type=int, default=8)
    p.add_argument("--max-rank", type=int, default=1024)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--heldout", type=float, default=0.2, help="held-out share of the rows (default 0.2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None)
    p.add_argument("--report", default=None, help="JSON report (default: OUTPUT without .gguf + .predictors.json)")
    p.set_defaults(func=main)
    return p


def main(args) -> int:
    try:
        rep = train_predictors(args.model, args.data, args.output, args.gguf, recall=args.recall,
                               type_name=args.type, min_rank=args.min_rank, max_rank=args.max_rank,
                               epochs=args.epochs, lr=args.lr, batch=args.batch, heldout=args.heldout,
                               seed=args.seed, device=args.device, report=args.report)
    except PredictorError as e:
        print(f"pinfer train-predictors: error: {e}", file=sys.stderr)
        return 1
    print(format_table(rep))
    print(f"wrote {rep['gguf']}, report {rep['report']}")
    return 0
