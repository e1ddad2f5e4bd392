"""Profile FFN activation frequencies: how often each neuron of each layer fires.

    pinfer profile HF_DIR --corpus austen --tokens 200000 -o stats.npz --plots plots/ \\
        [--target-sparsity 0.5] [--dump dump/]

MODEL is a Hugging Face model directory (llama/mistral, qwen2, falcon, opt), run with
torch, or a GGUF file, run by pinfer's own engine with its FFN observer
(calibrate.profile_engine: windows of ``--ctx`` tokens, counts only). For a GGUF
the active set is |act| > t_l with t_l from ``pinfer.sparse.act_thresholds`` (0
without; ReLU models need none, SwiGLU/GELU files must be calibrated first with
``pinfer calibrate``); ``--dump`` and ``--plots``' HF-only parts are not
available (predictor training needs the Hugging Face model).

What counts as "active" (neuron i of layer l, at one token):

- ReLU FFNs (llama/qwen2 hidden_act "relu" = ReGLU, falcon activation "relu",
  opt): ``act(g_i) > 0`` where g = gate_proj x (falcon: dense_h_to_4h x; opt:
  fc1 x + its bias). Exactly the set
  pinfer's exact sparse mode computes, and what a predictor must find.
- relu-both (Bamboo, ``pinfer_ffn_act`` / ``--ffn-act relu-both``): relu(gate)*relu(up)
  is nonzero, i.e. gate > 0 and up > 0.
- SwiGLU / GeGLU / GELU: ``|act(g_i)| > t_l``, with one magnitude threshold per layer
  calibrated (CATS/TEAL-style) so that a fraction ``target_sparsity`` of all
  (token, neuron) pairs of the calibration tokens falls at or below it:
  t_l = the target_sparsity quantile of |act| over the first ``calib_tokens`` tokens.

Hooks: a forward pre-hook on each layer's MLP module records its input (the
post-norm hidden state the FFN sees: ``post_attention_layernorm`` output for
llama/qwen2 = the GGUF graph's ``ffn_norm`` output; for falcon the
``input_layernorm``/``ln_mlp`` output = ``attn_norm``; for opt, which has no MLP
module, a pre-hook on fc1: the ``final_layer_norm`` output = ``ffn_norm``, or the
residual stream itself when post-LN), and a forward hook on the
MLP's activation module sees act(gate) (and one on up_proj for relu-both).

Outputs
-------
- ``-o stats.npz`` (plain arrays, loads with ``allow_pickle=False``): ``freq_<l>``
  float64 [n] fractions, ``count_<l>`` int64 [n], ``n_tokens``, ``thresholds``
  float32 [L] (0 for ReLU modes), ``target_sparsity``, ``act`` (string), ``arch``.
  ``pinfer solve --freq stats.npz`` reads it as it is.
- ``--plots DIR``: ``freq_loglog.png`` (per layer, frequency against rank on log-log
  axes: the power law), ``coverage80.png`` (per layer, the share of neurons that
  covers 80% of all activations), and ``summary.json``.
- ``--dump DIR``: training pairs for ``pinfer train-predictors``: ``meta.json`` and
  ``shard_<k>.npz`` holding per layer ``x_<l>`` (FFN input, float32 or float16
  [m, d]) and ``mask_<l>`` (the active set, uint8 [m, ceil(n/8)] from
  ``np.packbits(..., axis=1)``) for ``dump_per_seq`` random positions of each
  sequence, at most ``dump_max`` rows in all.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

from . import keys as K
from .outfile import atomic_output

__all__ = ["ProfileError", "ProfileResult", "profile", "load_stats", "coverage_share", "load_corpus",
           "add_parser", "main", "SUPPORTED"]

SUPPORTED = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "FalconForCausalLM": "falcon",
    "RWForCausalLM": "falcon",
    "OPTForCausalLM": "opt",
}
UNGATED = ("falcon", "opt")  # down(act(up x)): no gate
_ACTS = {"silu": "silu", "swish": "silu", "relu": "relu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu",
         "gelu_new": "gelu"}


class ProfileError(ValueError):
    """Bad input to profiling (the message names it)."""


@dataclass
class ProfileResult:
    arch: str
    act: str                      # relu, relu-both, silu, gelu
    gated: bool                   # gate/up FFN (llama, qwen2) or plain (falcon, opt)
    n_tokens: int
    counts: List[np.ndarray]      # int64 [n] per layer
    thresholds: np.ndarray        # float32 [L]; 0 in the ReLU modes
    target_sparsity: Optional[float]
    calib_sparsity: Optional[np.ndarray] = None  # achieved per layer on the calibration tokens
    n_dumped: int = 0
    files: Dict[str, str] = field(default_factory=dict)

    @property
    def freqs(self) -> List[np.ndarray]:
        return [c.astype(np.float64) / max(self.n_tokens, 1) for c in self.counts]


# ---------------------------------------------------------------- inputs

def _is_gguf(path: str) -> bool:
    if not os.path.isfile(path):
        return False
    with open(path, "rb") as f:
        return f.read(4) in (b"GGUF", b"PWRI")


def read_config(model_dir: str) -> dict:
    """config.json of a Hugging Face directory, checked for a supported architecture."""
    if _is_gguf(model_dir):
        raise ProfileError(f"{model_dir}: is a GGUF file, not a Hugging Face model directory")
    if not os.path.isdir(model_dir):
        raise ProfileError(f"{model_dir}: no such model directory")
    cfg_path = os.path.join(model_dir, "config.json")
    if not os.path.isfile(cfg_path):
        raise ProfileError(f"{model_dir}: no config.json (is this a Hugging Face model directory?)")
    try:
        with open(cfg_path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise ProfileError(f"{cfg_path}: cannot read ({e})") from None
    archs = cfg.get("architectures") or []
    if not any(a in SUPPORTED for a in archs):
        raise ProfileError(f"{model_dir}: unsupported architecture {archs or cfg.get('model_type')!r} "
                           f"(supported: {', '.join(SUPPORTED)})")
    return cfg


def model_act(cfg: dict, ffn_act: Optional[str] = None):
    """(arch, act, gated) of a config: act in relu, relu-both, silu, gelu."""
    hf = next(a for a in cfg.get("architectures") or [] if a in SUPPORTED)
    arch = SUPPORTED[hf]
    if arch == "falcon":
        raw = cfg.get("activation", "gelu")
    elif arch == "opt":
        raw = cfg.get("activation_function", "relu")
    else:
        raw = cfg.get("hidden_act", "silu")
    if raw not in _ACTS:
        raise ProfileError(f"unsupported activation '{raw}' (supported: {', '.join(_ACTS)})")
    act = _ACTS[raw]
    want = ffn_act or cfg.get("pinfer_ffn_act")
    if want and want != act:
        if not (want == "relu-both" and act == "relu" and arch not in UNGATED):
            raise ProfileError(f"FFN activation '{want}' contradicts the model's '{raw}'")
        act = want
    return arch, act, arch not in UNGATED


def load_corpus(corpus: str) -> str:
    """Text of a corpus: a file path, or the name 'austen' (pinfer.datasets.austen())."""
    if corpus == "austen":
        from .datasets import austen

        return austen()
    if not os.path.isfile(corpus):
        raise ProfileError(f"corpus '{corpus}' does not exist (give a text file, or 'austen')")
    with open(corpus, encoding="utf-8", errors="replace") as f:
        text = f.read()
    if not text.strip():
        raise ProfileError(f"corpus '{corpus}' is empty")
    return text


def _tokenize(tok, text: str, n_tokens: int) -> List[int]:
    """At least n_tokens ids (or all of the text), tokenizing a growing prefix."""
    n_chars = max(4096, 8 * n_tokens)
    while True:
        ids = tok(text[:n_chars], add_special_tokens=False)["input_ids"]
        if len(ids) >= n_tokens or n_chars >= len(text):
            return list(ids)
        n_chars *= 2


def _sequences(ids: List[int], bos: Optional[int], ctx: int, n_tokens: int) -> List[List[int]]:
    """Split ids into sequences of ctx tokens (BOS first when the model uses one),
    n_tokens positions in all (the last sequence may be short)."""
    out, pos, left = [], 0, n_tokens
    body = ctx - (1 if bos is not None else 0)
    while left > 0 and pos < len(ids):
        take = min(body, left - (1 if bos is not None else 0), len(ids) - pos)
        if take <= 0:
            break
        seq = ([bos] if bos is not None else []) + ids[pos:pos + take]
        out.append(seq)
        pos += take
        left -= len(seq)
    return out


# ---------------------------------------------------------------- hooks

class _Hooks:
    """Per-layer FFN input and activation capture for one forward pass."""

    def __init__(self, model, arch: str, act: str):
        if arch == "falcon":
            layers = model.transformer.h
        elif arch == "opt":
            layers = model.model.decoder.layers
        else:
            layers = model.model.layers
        self.n_layer = len(layers)
        self.x: List = [None] * self.n_layer      # FFN input [B, T, d]
        self.a: List = [None] * self.n_layer      # act(gate) [B, T, n]
        self.up: List = [None] * self.n_layer     # up_proj x (relu-both)
        self.current = -1
        self.handles = []
        seen = set()
        for il, layer in enumerate(layers):
            if arch == "opt":  # no MLP module: fc1's input is the FFN input
                mlp, act_mod = layer.fc1, layer.activation_fn
            else:
                mlp = layer.mlp
                act_mod = mlp.act if arch == "falcon" else mlp.act_fn
            if not hasattr(act_mod, "register_forward_hook"):
                raise ProfileError(f"layer {il}: the MLP activation is not a module; cannot hook it")
            self.handles.append(mlp.register_forward_pre_hook(self._pre(il)))
            if id(act_mod) not in seen:  # an activation module may be shared between layers
                seen.add(id(act_mod))
                self.handles.append(act_mod.register_forward_hook(self._on_act))
            if act == "relu-both":
                self.handles.append(mlp.up_proj.register_forward_hook(self._on_up))

    def _pre(self, il: int):
        def hook(_mod, args):
            self.current = il
            self.x[il] = args[0].detach()
        return hook

    def _on_act(self, _mod, _args, out):
        self.a[self.current] = out.detach()

    def _on_up(self, _mod, _args, out):
        self.up[self.current] = out.detach()

    def close(self):
        for h in self.handles:
            h.remove()


def _active(hooks: _Hooks, il: int, act: str, thr: float):
    a = hooks.a[il]
    if act == "relu":
        return a > 0
    if act == "relu-both":
        return (a > 0) & (hooks.up[il] > 0)
    return a.abs() > thr


# ---------------------------------------------------------------- profiling

def _load_model(model_dir: str, device: str, dtype: str):
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise ProfileError(f"profiling needs torch and transformers ({e})") from None
    if dtype == "auto":
        dtype = "float32" if device == "cpu" else "bfloat16"
    tdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    try:
        tok = AutoTokenizer.from_pretrained(model_dir)
    except Exception as e:
        raise ProfileError(f"{model_dir}: cannot load the tokenizer ({e})") from None
    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=tdtype, attn_implementation="eager")
    except Exception as e:
        raise ProfileError(f"{model_dir}: cannot load the model ({e})") from None
    return tok, model.to(device).eval()


def _bos_of(tok) -> Optional[int]:
    bos = tok.bos_token_id
    if bos is None:
        return None
    ids = tok("a", add_special_tokens=True)["input_ids"]
    return bos if ids and ids[0] == bos else None


def profile(model_dir: str, corpus: str, n_tokens: int, out: str, plots: Optional[str] = None,
            target_sparsity: float = 0.5, calib_tokens: int = 8192, ctx: int = 512, batch: int = 4,
            dump: Optional[str] = None, dump_per_seq: int = 32, dump_max: int = 65536,
            dump_dtype: str = "float32", shard_rows: int = 8192, ffn_act: Optional[str] = None,
            device: Optional[str] = None, dtype: str = "auto", seed: int = 0,
            progress: bool = True) -> ProfileResult:
    """Count FFN neuron activations of the HF model in model_dir (or of a GGUF
    file, with pinfer's engine) over n_tokens tokens of corpus (a path or
    'austen'); writes out (npz), and plots / dump when given."""
    if _is_gguf(model_dir):
        if dump:
            raise ProfileError(f"{model_dir}: --dump needs the Hugging Face model (the FFN inputs for predictor "
                               "training come from torch); a GGUF gives activation counts only")
        if n_tokens < 2 or ctx < 2:
            raise ProfileError("--tokens and --ctx must be at least 2")
        return _profile_gguf(model_dir, load_corpus(corpus), n_tokens, out, plots, ctx)
    cfg = read_config(model_dir)
    arch, act, gated = model_act(cfg, ffn_act)
    if n_tokens < 1:
        raise ProfileError("--tokens must be at least 1")
    if ctx < 2:
        raise ProfileError("--ctx must be at least 2")
    if batch < 1:
        raise ProfileError("--batch must be at least 1")
    if not 0.0 < target_sparsity < 1.0:
        raise ProfileError("--target-sparsity must lie in (0, 1)")
    if dump_dtype not in ("float32", "float16"):
        raise ProfileError("--dump-dtype must be float32 or float16")
    text = load_corpus(corpus)

    import torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    tok, model = _load_model(model_dir, device, dtype)
    ids = _tokenize(tok, text, n_tokens)
    seqs = _sequences(ids, _bos_of(tok), ctx, n_tokens)
    if not seqs:
        raise ProfileError(f"corpus '{corpus}' gives no tokens")
    n_total = sum(len(s) for s in seqs)
    if n_total < n_tokens:
        print(f"pinfer profile: the corpus has only {n_total} tokens (asked for {n_tokens})", file=sys.stderr)

    hooks = _Hooks(model, arch, act)
    L = hooks.n_layer
    thresholds = np.zeros(L, dtype=np.float32)
    calib_sparsity = None
    try:
        def run(batch_seqs):
            # one padded batch; positions past a sequence's end are masked out by `valid`
            T = max(len(s) for s in batch_seqs)
            inp = torch.zeros((len(batch_seqs), T), dtype=torch.long)
            valid = torch.zeros((len(batch_seqs), T), dtype=torch.bool)
            for b, s in enumerate(batch_seqs):
                inp[b, :len(s)] = torch.tensor(s)
                valid[b, :len(s)] = True
            with torch.no_grad():
                model(input_ids=inp.to(device), attention_mask=valid.to(device).long(), use_cache=False)
            return valid.to(device)

        batches = [seqs[i:i + batch] for i in range(0, len(seqs), batch)]
        if act in ("silu", "gelu"):
            thresholds, calib_sparsity = _calibrate(run, hooks, batches, min(calib_tokens, n_total),
                                                    target_sparsity, seed, progress)

        counts = [torch.zeros(0)] * L
        n_counted = 0
        rng = np.random.default_rng(seed)
        writer = _DumpWriter(dump, L, dump_dtype, shard_rows) if dump else None
        bar = _bar(progress, n_total, "profile")
        try:
            for bs in batches:
                valid = run(bs)
                vflat = valid.reshape(-1)
                pick = None
                if writer is not None and writer.rows < dump_max:
                    pick = _sample_positions(bs, valid.shape[1], dump_per_seq, dump_max - writer.rows, rng)
                masks_np, xs_np = [], []
                for il in range(L):
                    m = _active(hooks, il, act, float(thresholds[il]))
                    m = m.reshape(-1, m.shape[-1])
                    c = m[vflat].sum(0, dtype=torch.int64)
                    counts[il] = c if counts[il].numel() == 0 else counts[il] + c
                    if pick is not None:
                        pk = pick.to(m.device)
                        xx = hooks.x[il].reshape(-1, hooks.x[il].shape[-1])[pk]
                        masks_np.append(m[pk].cpu().numpy())
                        xs_np.append(xx.float().cpu().numpy())
                if pick is not None and writer is not None:
                    writer.add(xs_np, masks_np)
                n_here = int(vflat.sum())
                n_counted += n_here
                bar.update(n_here)
        finally:
            bar.close()
    finally:
        hooks.close()

    counts_np = [c.cpu().numpy().astype(np.int64) for c in counts]
    res = ProfileResult(arch, act, gated, n_counted, counts_np, thresholds,
                        target_sparsity if act in ("silu", "gelu") else None, calib_sparsity)
    save_stats(out, res)
    res.files["npz"] = out
    if writer is not None:
        res.n_dumped = writer.rows
        d, n = _dims(cfg, arch)
        writer.close(dict(model=os.path.abspath(model_dir), arch=arch, act=act, n_layer=L, n_embd=d, n_ff=n,
                          thresholds=[float(t) for t in thresholds], n_tokens_profiled=n_counted,
                          ffn_input="the MLP module's input: post-norm hidden state (llama/qwen2: "
                                    "post_attention_layernorm = GGUF ffn_norm; falcon: attn_norm; opt: fc1's input)"))
        res.files["dump"] = str(dump)
    if plots:
        res.files.update(write_plots(res, plots))
    return res


def _profile_gguf(path: str, text: str, n_tokens: int, out: str, plots: Optional[str], ctx: int) -> ProfileResult:
    """The GGUF branch of profile(): counts from pinfer's engine (calibrate.profile_engine)."""
    from . import _core
    from .calibrate import calibration_tokens, profile_engine

    r = _core.GGUFReader(path)
    arch = r.get("general.architecture")
    arch = arch.decode() if isinstance(arch, bytes) else str(arch)
    act = r.get(K.FFN_ACT) or ("gelu" if arch == "falcon" else "silu")
    act = act.decode() if isinstance(act, bytes) else str(act)
    thr = r.get(K.SPARSE_ACT_THRESHOLDS)
    del r
    if act in ("silu", "gelu") and thr is None:
        raise ProfileError(f"{path}: a {act} FFN has no natural zero; calibrate per-layer thresholds first "
                           "('pinfer calibrate MODEL --target-sparsity S'), then profile that file")
    model = _core.Model(path)
    try:
        try:
            toks = calibration_tokens(model, text, n_tokens)
        except ValueError as e:
            raise ProfileError(str(e)) from None
    finally:
        model.close()
    if len(toks) < n_tokens:
        print(f"pinfer profile: the corpus has only {len(toks)} tokens (asked for {n_tokens})", file=sys.stderr)
    st = profile_engine(path, tokens=toks, n_ctx=ctx)
    L = sum(1 for k in st if k.startswith("count_"))
    thresholds = np.zeros(L, np.float32) if thr is None else np.asarray(thr, np.float32)
    # profile_engine's freq_l divides by the tokens layer l observed: every layer sees every token here
    res = ProfileResult(arch, act, arch not in UNGATED, int(st["n_tokens"]), [st[f"count_{i}"] for i in range(L)],
                        thresholds, None)
    save_stats(out, res)
    res.files["npz"] = out
    if plots:
        res.files.update(write_plots(res, plots))
    return res


def _dims(cfg: dict, arch: str):
    if arch == "falcon":
        d = cfg.get("hidden_size") or cfg.get("d_model")
        if d is None:
            raise ProfileError("config.json has neither hidden_size nor d_model")
        return int(d), int(cfg.get("ffn_hidden_size") or 4 * int(d))
    if arch == "opt":
        return int(cfg["hidden_size"]), int(cfg["ffn_dim"])
    return int(cfg["hidden_size"]), int(cfg["intermediate_size"])


def _bar(progress: bool, total: int, desc: str):
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency of the tools
        progress = False
    if not progress:
        class _Null:
            def update(self, n):
                pass

            def close(self):
                pass
        return _Null()
    return tqdm(total=total, unit="tok", unit_scale=True, desc=desc, file=sys.stderr, dynamic_ncols=True)


def _sample_positions(batch_seqs, T: int, per_seq: int, left: int, rng):
    """Flat indices (into [B*T]) of up to per_seq random positions per sequence."""
    out: List[int] = []
    for b, s in enumerate(batch_seqs):
        k = min(per_seq, len(s), left - len(out))
        if k <= 0:
            break
        out.extend(int(b * T + p) for p in np.sort(rng.choice(len(s), size=k, replace=False)))
    import torch

    return torch.tensor(out, dtype=torch.long) if out else None


def _calibrate(run, hooks: _Hooks, batches, n_calib: int, target: float, seed: int, progress: bool,
               max_values: int = 4_000_000):
    """Per-layer |act| thresholds at the target quantile over the first n_calib tokens."""
    import torch

    L = hooks.n_layer
    vals: List[List[np.ndarray]] = [[] for _ in range(L)]
    taken = 0
    bar = _bar(progress, n_calib, "calibrate")
    g = torch.Generator().manual_seed(seed)
    try:
        for bs in batches:
            if taken >= n_calib:
                break
            valid = run(bs).reshape(-1)
            idx = torch.nonzero(valid).reshape(-1)[:n_calib - taken]
            for il in range(L):
                a = hooks.a[il]
                v = a.reshape(-1, a.shape[-1])[idx].abs().float().reshape(-1)
                keep = max_values * len(idx) // max(n_calib, 1)  # bounded memory: a uniform subsample
                if v.numel() > keep > 0:
                    v = v[torch.randperm(v.numel(), generator=g)[:keep].to(v.device)]
                vals[il].append(v.cpu().numpy())
            taken += len(idx)
            bar.update(len(idx))
    finally:
        bar.close()
    thr = np.zeros(L, dtype=np.float32)
    got = np.zeros(L, dtype=np.float64)
    for il in range(L):
        v = np.concatenate(vals[il])
        t = np.float32(np.quantile(v, target, method="lower"))  # a value present in the data
        thr[il] = t
        got[il] = float(np.mean(v <= t))
    return thr, got


class _DumpWriter:
    def __init__(self, d: str, n_layer: int, dtype: str, shard_rows: int):
        if os.path.exists(d) and not os.path.isdir(d):
            raise ProfileError(f"--dump {d}: exists and is not a directory")
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(d):
            if f.startswith("shard_") and f.endswith(".npz") or f == "meta.json":
                os.unlink(os.path.join(d, f))  # a fresh dump; stale shards would mix models
        self.dir, self.L, self.dtype, self.shard_rows = d, n_layer, np.dtype(dtype), shard_rows
        self.buf_x: List[List[np.ndarray]] = [[] for _ in range(n_layer)]
        self.buf_m: List[List[np.ndarray]] = [[] for _ in range(n_layer)]
        self.buffered = 0
        self.rows = 0
        self.shards: List[str] = []

    def add(self, xs, masks):
        for il in range(self.L):
            self.buf_x[il].append(xs[il].astype(self.dtype))
            self.buf_m[il].append(np.packbits(masks[il].astype(bool), axis=1))
        self.buffered += xs[0].shape[0]
        self.rows += xs[0].shape[0]
        if self.buffered >= self.shard_rows:
            self._flush()

    def _flush(self):
        if not self.buffered:
            return
        arrays = {}
        for il in range(self.L):
            arrays[f"x_{il}"] = np.concatenate(self.buf_x[il])
            arrays[f"mask_{il}"] = np.concatenate(self.buf_m[il])
            self.buf_x[il], self.buf_m[il] = [], []
        name = os.path.join(self.dir, f"shard_{len(self.shards):05d}.npz")
        _save_npz(name, arrays)
        self.shards.append(os.path.basename(name))
        self.buffered = 0

    def close(self, meta: dict):
        self._flush()
        meta = dict(meta, rows=self.rows, shards=self.shards, dtype=self.dtype.name, mask="packbits axis=1")
        with atomic_output(os.path.join(self.dir, "meta.json")) as tmp:
            with open(tmp, "w") as f:
                json.dump(meta, f, indent=1)


def _save_npz(path: str, arrays: dict) -> None:
    """np.savez to a temp file, then rename (through a file object: np.savez
    would add .npz to a name without it)."""
    with atomic_output(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)


def save_stats(path: str, res: ProfileResult) -> None:
    arrays = {"n_tokens": np.int64(res.n_tokens), "thresholds": res.thresholds.astype(np.float32),
              "target_sparsity": np.float64(res.target_sparsity if res.target_sparsity is not None else np.nan),
              "act": np.array(res.act), "arch": np.array(res.arch)}
    for il, c in enumerate(res.counts):
        arrays[f"count_{il}"] = c
        arrays[f"freq_{il}"] = c.astype(np.float64) / max(res.n_tokens, 1)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    _save_npz(path, arrays)


def load_stats(path: str) -> dict:
    """A stats npz as a dict (freqs: list of arrays), read without pickle."""
    with np.load(path, allow_pickle=False) as z:
        L = sum(1 for k in z.files if k.startswith("freq_"))
        return {"freqs": [z[f"freq_{i}"] for i in range(L)], "counts": [z[f"count_{i}"] for i in range(L)],
                "n_tokens": int(z["n_tokens"]), "thresholds": z["thresholds"], "act": str(z["act"]),
                "arch": str(z["arch"]), "target_sparsity": float(z["target_sparsity"])}


# ---------------------------------------------------------------- plots

def coverage_share(freq: np.ndarray, share: float = 0.8) -> float:
    """Smallest fraction of neurons (hottest first) that covers `share` of all activations."""
    f = np.sort(np.asarray(freq, dtype=np.float64))[::-1]
    tot = f.sum()
    if tot <= 0:
        return 0.0
    k = int(np.searchsorted(np.cumsum(f), share * tot - 1e-12 * tot)) + 1
    return min(k, f.size) / f.size


def summary(res: ProfileResult) -> dict:
    layers = []
    for il, f in enumerate(res.freqs):
        layers.append({"layer": il, "mean_freq": float(f.mean()), "sparsity": float(1 - f.mean()),
                       "coverage80": coverage_share(f), "never_active": int((res.counts[il] == 0).sum()),
                       "threshold": float(res.thresholds[il]),
                       **({"calib_sparsity": float(res.calib_sparsity[il])} if res.calib_sparsity is not None else {})})
    return {"arch": res.arch, "act": res.act, "n_tokens": res.n_tokens, "n_layer": len(res.counts),
            "n_ff": int(res.counts[0].size) if res.counts else 0, "target_sparsity": res.target_sparsity,
            "layers": layers}


def write_plots(res: ProfileResult, d: str) -> Dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(d, exist_ok=True)
    freqs = res.freqs
    L = len(freqs)
    cmap = plt.get_cmap("viridis")
    fig, ax = plt.subplots(figsize=(7, 5))
    for il, f in enumerate(freqs):
        s = np.sort(f)[::-1]
        s = s[s > 0]
        if s.size:
            ax.loglog(np.arange(1, s.size + 1), s, color=cmap(il / max(L - 1, 1)), lw=1,
                      label=f"layer {il}" if L <= 12 or il in (0, L // 2, L - 1) else None)
    ax.set_xlabel("neuron rank (hottest first)")
    ax.set_ylabel("activation frequency")
    ax.set_title(f"FFN activation frequency, {res.arch} ({res.act}), {res.n_tokens} tokens")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    p1 = os.path.join(d, "freq_loglog.png")
    fig.tight_layout()
    with atomic_output(p1) as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)

    cov = [coverage_share(f) for f in freqs]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar(np.arange(L), [100 * c for c in cov], color="tab:orange")
    ax.set_xlabel("layer")
    ax.set_ylabel("% of neurons")
    ax.set_title("share of neurons covering 80% of activations")
    ax.grid(True, axis="y", alpha=0.3)
    p2 = os.path.join(d, "coverage80.png")
    fig.tight_layout()
    with atomic_output(p2) as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)

    p3 = os.path.join(d, "summary.json")
    with atomic_output(p3) as tmp, open(tmp, "w") as fh:
        json.dump(summary(res), fh, indent=1)
    return {"plot_loglog": p1, "plot_coverage": p2, "summary": p3}


# ---------------------------------------------------------------- CLI

def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("profile", help="count FFN neuron activations over a corpus (torch)",
                              description="Run a Hugging Face model over a corpus and count, per layer and "
                                          "neuron, how often each FFN neuron is active; optionally plot the "
                                          "power law and dump predictor training data.")
    p.add_argument("model", help="Hugging Face model directory, or a GGUF file (pinfer's engine; no --dump)")
    p.add_argument("--corpus", required=True, help="text file, or 'austen'")
    p.add_argument("--tokens", type=int, default=100000, help="tokens to profile (default 100000)")
    p.add_argument("-o", "--output", required=True, help="output stats .npz")
    p.add_argument("--plots", default=None, help="directory for PNG plots and summary.json")
    p.add_argument("--target-sparsity", type=float, default=0.5,
                   help="SwiGLU/GeGLU/GELU: calibrate |act| thresholds for this sparsity (default 0.5)")
    p.add_argument("--calib-tokens", type=int, default=8192, help="tokens used to calibrate thresholds")
    p.add_argument("--ctx", type=int, default=512, help="sequence length (default 512)")
    p.add_argument("--batch", type=int, default=4, help="sequences per forward pass (default 4)")
    p.add_argument("--dump", default=None, help="directory for (FFN input, active mask) shards")
    p.add_argument("--dump-per-seq", type=int, default=32, help="positions sampled per sequence (default 32)")
    p.add_argument("--dump-max", type=int, default=65536, help="at most this many dumped rows (default 65536)")
    p.add_argument("--dump-dtype", default="float32", choices=("float32", "float16"))
    p.add_argument("--ffn-act", default=None, choices=("relu-both",), help="override the FFN activation")
    p.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu)")
    p.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=main)
    return p


def main(args) -> int:
    try:
        res = profile(args.model, args.corpus, args.tokens, args.output, plots=args.plots,
                      target_sparsity=args.target_sparsity, calib_tokens=args.calib_tokens, ctx=args.ctx,
                      batch=args.batch, dump=args.dump, dump_per_seq=args.dump_per_seq, dump_max=args.dump_max,
                      dump_dtype=args.dump_dtype, ffn_act=args.ffn_act, device=args.device, dtype=args.dtype,
                      seed=args.seed, progress=not args.no_progress)
    except ProfileError as e:
        print(f"pinfer profile: error: {e}", file=sys.stderr)
        return 1
    s = summary(res)
    print(f"{res.arch} ({res.act}), {res.n_tokens} tokens profiled")
    print(f"{'layer':>5} {'sparsity':>9} {'cover80':>8} {'never':>6} {'threshold':>10}")
    for l in s["layers"]:
        print(f"{l['layer']:>5} {l['sparsity']:>9.4f} {l['coverage80']:>8.3f} {l['never_active']:>6} "
              f"{l['threshold']:>10.4g}")
    for k, v in res.files.items():
        print(f"{k}: {v}")
    return 0
