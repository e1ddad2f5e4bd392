"""Neuron placement: which prefix of each layer's hot-first FFN lives on the GPU.

    pinfer solve --model model.gguf --freq profile.npz --budget 8 12 24 --hw rtx4090 \\
        --json placement.json --plot placement.png [--write-gguf out.gguf]

Inputs
------
- Activation frequencies f_{l,i} in [0, 1] per layer l and neuron i: an npz from
  profiling (``freq_0 .. freq_{L-1}`` arrays, or one 2-D ``[L, n]`` array; loaded with
  ``allow_pickle=False``), or the ``blk.N.ffn_freq`` tensors of an extended GGUF.
  The solver works in HOT-FIRST order: each layer is sorted by descending frequency
  with a stable sort (``np.argsort(-f, kind="stable")``, the order the extended GGUF
  uses); k_l always counts neurons of that order, so "layer l's GPU share" is the
  prefix ``[0, k_l)``.
- A model description (:class:`ModelDesc`, from a GGUF file or a JSON file): per
  layer the FFN size n_l, the bytes of one neuron b_l (its gate row + up row + down
  column in the file's weight types; ``ffn_down_t`` counts instead of ``ffn_down``
  when present), the bytes of attention (+ norms, biases), of the predictor
  (fc1/fc2), and of the KV cache per token; globally the token-embedding, output and
  output-norm bytes.
- A hardware description (:class:`Hardware`): GPU and CPU memory bandwidth, PCIe
  bandwidth, synchronisation latency, VRAM; presets ``rtx4090 rtx3090 rtx4070 a100
  h100 cpu`` (rough public figures, override with JSON or flags).
- One or more VRAM budgets (GiB); each gives its own placement.

Formulation (one MILP per budget, solved with HiGHS)
----------------------------------------------------
Neurons are grouped into G_l = ceil(n_l / g) groups of g consecutive hot-first
neurons (the last group may be short: size s_{l,j}); group mass
M_{l,j} = sum of f over the group.

Variables
  x_{l,j} in {0,1}   group j of layer l is on the GPU
  z_l     in {0,1}   layer l uses the GPU at all
  t_l     >= 0       (only with balance="makespan") the layer's time estimate, in us

Objective (primary)
  maximise  sum_l w_l sum_j M_{l,j} x_{l,j}
  = the expected number of activated neurons per token that the GPU serves
  (w_l = 1 unless per-layer weights are given).  k_l = sum_j s_{l,j} x_{l,j}.

Constraints
  prefix     x_{l,j+1} <= x_{l,j}                     (the GPU share is a prefix)
  link       x_{l,0} <= z_l
  minimum    sum_j s_{l,j} x_{l,j} >= m_l z_l          (big-M form: nothing, or >= m_l)
             x_{l,q_l-1} >= z_l, q_l = ceil(m_l/g)     (the same, tightened for the LP)
             z_l = 0 when m_l > n_l (the layer can never pay for its sync)
  budget     sum_{l,j} b_l s_{l,j} x_{l,j} <= B - R
             R = resident dense parts: attention + norms + predictors of every layer,
             the KV cache for ``ctx`` tokens, the output matrix and output norm (unless
             output_on_gpu=False), the token embeddings (only if embd_on_gpu=True), and
             a fixed reserve for compute buffers.  B < R is an error.

Two equivalent forms are built (``formulation=``):
  "groups"   exactly the model above (sum G_l binaries; slow to prove optimal at scale).
  "prefix"   (default) one integer k_l in [0, G_l] (GPU groups) per layer instead of
             the x_{l,j}; the mass becomes a continuous phi_l bounded by the tangents
             of the concave cumulative mass C_l(j) = sum_{i<j} M_{l,i}:
                 phi_l <= C_l(j) + M_{l,j} (k_l - j),   j = 0..G_l-1
             (exact at integer k_l because M_{l,j} is non-increasing in hot-first
             order); objective sum_l w_l phi_l; minimum q_l z_l <= k_l <= G_l z_l
             (big-M); budget sum_l b_l (g k_l - (g G_l - n_l) y_l) <= B - R with a
             binary y_l <= k_l / G_l crediting a short last group.  Branching on
             80 integers instead of 36k binaries is what makes LLaMA-70B sizes fast.
  The makespan stage always uses "groups" (its GPU time needs the exact mass).
HiGHS stops at ``mip_rel_gap`` (default 1e-4; its status then reads "Optimal");
the reported gap is HiGHS's.  Every returned placement is re-checked exactly
against the constraints in float64 (:func:`check_placement`).

The communication minimum m_l.  Per token, a layer that uses the GPU pays a fixed
  c = sync_latency + 2 * n_embd * act_bytes / pcie_bw
(the activation goes to the GPU and its partial result comes back).  Moving the
hot-first prefix [0, k) saves b_l F_l(k) (1/cpu_bw - 1/gpu_bw) seconds, where
F_l(k) = sum_{i<k} f_{l,i} (both sides read only the rows of active neurons).
m_l is the smallest k whose saving covers c; if none does (or gpu_bw <= cpu_bw),
m_l = n_l + 1.  ``min_neurons=`` overrides it with a fixed count.

Time model (for the report and the optional balance terms), per layer and token:
  T_cpu_l = b_l (F_l - sum_j M_{l,j} x_{l,j}) / cpu_bw      (cold active rows)
  T_gpu_l = b_l  sum_j M_{l,j} x_{l,j} / gpu_bw + c z_l
The CPU and GPU parts of a layer run concurrently, so the layer takes
max(T_cpu_l, T_gpu_l); the report gives sum_l of that as ``est_token_ms``.

Optional balance (``balance=``):
  "off"        (default) the primary objective only.
  "makespan"   lexicographic second stage: with t_l >= T_cpu_l, t_l >= T_gpu_l and
               the primary objective held at >= (1 - balance_tol) * optimum,
               minimise sum_l t_l.  balance_tol = 0 only breaks ties; a larger
               tolerance lets it give up mass for estimated time.
  "constraint" a layer that uses the GPU must be balanced:
               T_cpu_l <= T_gpu_l + slack + U_l (1 - z_l), U_l = b_l F_l / cpu_bw
               (big-M: inactive when z_l = 0), slack = ``balance_slack_us``.

The greedy baseline (:func:`solve_greedy`) repeatedly takes the move with the
highest weighted mass per byte that still fits: for an unused layer the move is
its whole minimum block (ceil(m_l/g) groups), afterwards one group at a time.

Extended-GGUF metadata layout (written by :func:`add_placements` /
:func:`write_placements`, read by :func:`read_placements`)
-----------------------------------------------------------------------------
  pinfer.placement.count                u32    number of entries P (>= 1)
  pinfer.placement.N.budget_bytes       u64    the VRAM budget B of entry N, bytes
  pinfer.placement.N.solver             str    "highs-ilp" or "greedy"
  pinfer.placement.N.objective          f64    the primary objective (above)
  pinfer.placement.N.gpu_neurons        [i32]  k_l for l = 0..n_layer-1: layer l's
                                               neurons [0, k_l) of the hot-first
                                               order are on the GPU (0 <= k_l <= n_l)
for N = 0 .. P-1, ordered by strictly increasing budget_bytes.  A runtime given a
budget uses the entry with the largest budget_bytes <= its budget.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import heapq
import json
import math
import os
import re
import sys
import time
from typing import Dict, List, Optional, Sequence, Union

import numpy as np

from .outfile import atomic_output

GIB = float(1 << 30)
KEY_PREFIX = "pinfer.placement"
SOLVERS = ("highs-ilp", "greedy")
BALANCE = ("off", "makespan", "constraint")


class PlacementError(ValueError):
    """Bad input to the placement solver (clear message, no traceback in the CLI)."""


# ---------------------------------------------------------------- hardware

@dataclasses.dataclass
class Hardware:
    name: str
    vram_gib: float     # device memory (the default budget)
    gpu_bw: float       # GPU memory bandwidth, GB/s
    cpu_bw: float       # CPU memory bandwidth, GB/s
    pcie_bw: float      # host<->device, GB/s
    sync_us: float      # one CPU<->GPU synchronisation, microseconds
    act_bytes: int = 4  # bytes per activation element sent over PCIe

    @property
    def has_gpu(self) -> bool:
        return self.vram_gib > 0 and self.gpu_bw > 0 and self.pcie_bw > 0


# Public spec-sheet bandwidths; CPU figures are typical dual-channel DDR5 desktops
# (consumer cards) or server sockets (A100/H100). Rough by design: override them.
HARDWARE: Dict[str, Hardware] = {
    "rtx4090": Hardware("rtx4090", 24, 1008, 60, 25, 10),
    "rtx3090": Hardware("rtx3090", 24, 936, 50, 25, 10),
    "rtx4070": Hardware("rtx4070", 12, 504, 50, 25, 10),
    "a100": Hardware("a100", 80, 2039, 150, 25, 10),
    "h100": Hardware("h100", 80, 3350, 200, 50, 8),
    "cpu": Hardware("cpu", 0, 0, 50, 0, 0),
}


def hardware(preset: Union[str, Hardware, dict] = "rtx4090", **overrides) -> Hardware:
    """A preset by name (or a dict/JSON-like mapping with a ``preset`` base), with overrides."""
    if isinstance(preset, Hardware):
        hw = dataclasses.replace(preset)
    elif isinstance(preset, dict):
        d = dict(preset)
        base = hardware(d.pop("preset", "rtx4090"))
        unknown = set(d) - {f.name for f in dataclasses.fields(Hardware)}
        if unknown:
            raise PlacementError(f"hardware: unknown field(s) {sorted(unknown)}")
        hw = dataclasses.replace(base, **d)
    else:
        key = str(preset).lower().replace("-", "").replace(" ", "")
        if key not in HARDWARE:
            raise PlacementError(f"hardware: unknown preset '{preset}' (known: {', '.join(HARDWARE)})")
        hw = dataclasses.replace(HARDWARE[key])
    hw = dataclasses.replace(hw, **{k: v for k, v in overrides.items() if v is not None})
    for f in ("vram_gib", "gpu_bw", "cpu_bw", "pcie_bw", "sync_us"):
        v = getattr(hw, f)
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise PlacementError(f"hardware: {f} must be a finite number >= 0, got {v!r}")
    if hw.cpu_bw <= 0:
        raise PlacementError("hardware: cpu_bw must be > 0")
    return hw


# ---------------------------------------------------------------- model description

@dataclasses.dataclass
class ModelDesc:
    n_layer: int
    n_embd: int
    n_ff: List[int]                 # FFN neurons per layer
    neuron_bytes: List[float]       # bytes of one neuron (gate row + up row + down column)
    attn_bytes: List[float]         # attention weights + norms + biases per layer (resident)
    pred_bytes: List[float]         # predictor fc1+fc2 per layer (resident)
    kv_bytes_per_token: List[float]  # K+V cache per token per layer
    embd_bytes: float = 0.0
    output_bytes: float = 0.0       # output matrix (tied embeddings: the embedding's bytes)
    output_norm_bytes: float = 0.0
    name: str = ""

    def __post_init__(self):
        L = int(self.n_layer)
        if L <= 0:
            raise PlacementError(f"model: n_layer must be > 0, got {self.n_layer}")
        self.n_layer = L
        for f in ("n_ff", "neuron_bytes", "attn_bytes", "pred_bytes", "kv_bytes_per_token"):
            v = getattr(self, f)
            if np.isscalar(v):
                v = [v] * L
            v = [float(x) for x in v]
            if len(v) != L:
                raise PlacementError(f"model: {f} has {len(v)} entries for {L} layers")
            if any(not math.isfinite(x) or x < 0 for x in v):
                raise PlacementError(f"model: {f} must be finite and >= 0")
            setattr(self, f, v)
        self.n_ff = [int(x) for x in self.n_ff]
        if any(n <= 0 for n in self.n_ff):
            raise PlacementError("model: n_ff must be > 0 in every layer")
        if any(b <= 0 for b in self.neuron_bytes):
            raise PlacementError("model: neuron_bytes must be > 0 in every layer")
        for f in ("embd_bytes", "output_bytes", "output_norm_bytes"):
            v = float(getattr(self, f))
            if not math.isfinite(v) or v < 0:
                raise PlacementError(f"model: {f} must be finite and >= 0")
            setattr(self, f, v)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelDesc":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise PlacementError(f"model: unknown field(s) {sorted(unknown)}")
        missing = {"n_layer", "n_embd", "n_ff", "neuron_bytes"} - set(d)
        if missing:
            raise PlacementError(f"model: missing field(s) {sorted(missing)}")
        d = dict(d)
        for f in ("attn_bytes", "pred_bytes", "kv_bytes_per_token"):
            d.setdefault(f, 0.0)
        return cls(**d)


_BLK = re.compile(r"^blk\.(\d+)\.([^.]+)(?:\.(.+))?$")


def model_from_gguf(reader, kv_bytes: float = 2.0) -> ModelDesc:
    """Describe a model from a ``pinfer._core.GGUFReader`` (or a path to a GGUF file).

    kv_bytes: bytes per cached K/V element (2 for an F16 cache)."""
    if isinstance(reader, (str, os.PathLike)):
        from . import _core
        reader = _core.GGUFReader(os.fspath(reader))
    arch = reader.get("general.architecture")
    if not isinstance(arch, str):
        raise PlacementError("model: the GGUF has no general.architecture")
    layers: Dict[int, Dict[str, float]] = {}
    n_ff: Dict[int, int] = {}
    glob = {"embd": 0.0, "output": 0.0, "output_norm": 0.0}
    for t in reader.tensors:
        m = _BLK.match(t.name)
        if not m:
            if t.name.startswith("token_embd."):
                glob["embd"] += t.nbytes
            elif t.name.startswith("output_norm."):
                glob["output_norm"] += t.nbytes
            elif t.name.startswith("output."):
                glob["output"] += t.nbytes
            else:
                glob["output_norm"] += t.nbytes  # other small globals (position embeddings, ...)
            continue
        l, kind, rest = int(m.group(1)), m.group(2), m.group(3)
        d = layers.setdefault(l, {"ffn": 0.0, "down": 0.0, "down_t": 0.0, "attn": 0.0, "pred": 0.0})
        if kind in ("ffn_gate", "ffn_up"):
            d["ffn"] += t.nbytes
            if kind == "ffn_up" and rest == "weight":
                n_ff[l] = int(t.ne[1])
        elif kind == "ffn_down" and rest == "weight":
            d["down"] += t.nbytes
        elif kind == "ffn_down_t":
            d["down_t"] += t.nbytes
        elif kind in ("fc1", "fc2"):
            d["pred"] += t.nbytes
        elif kind in ("ffn_freq", "gpu_idx", "gpu_bucket"):
            pass  # statistics and index tensors: never on the GPU
        else:
            d["attn"] += t.nbytes  # attention, norms, ffn_down bias
    L = reader.get(f"{arch}.block_count")
    if L is None:
        L = (max(layers) + 1) if layers else 0
    L = int(L)
    if L <= 0 or any(l not in layers or l not in n_ff for l in range(L)):
        raise PlacementError(f"model: the GGUF lacks blk.N.ffn_up.weight for some of its {L} layers")
    n_embd = int(reader.get(f"{arch}.embedding_length", 0) or 0)
    n_head = reader.get(f"{arch}.attention.head_count")
    n_head_kv = reader.get(f"{arch}.attention.head_count_kv", n_head)
    kv = []
    for l in range(L):
        hk = n_head_kv[l] if isinstance(n_head_kv, (list, np.ndarray)) else n_head_kv
        h = n_head[l] if isinstance(n_head, (list, np.ndarray)) else n_head
        if not h or not n_embd:
            kv.append(0.0)
            continue
        head_dim = n_embd // int(h)
        kl = int(reader.get(f"{arch}.attention.key_length", head_dim))
        vl = int(reader.get(f"{arch}.attention.value_length", head_dim))
        kv.append(float((kl + vl) * int(hk) * kv_bytes))
    neuron = []
    for l in range(L):
        d = layers[l]
        down = d["down_t"] if d["down_t"] else d["down"]  # one copy of the down matrix moves
        neuron.append((d["ffn"] + down) / n_ff[l])
    out = glob["output"] if glob["output"] else glob["embd"]  # tied embeddings
    return ModelDesc(n_layer=L, n_embd=n_embd, n_ff=[n_ff[l] for l in range(L)], neuron_bytes=neuron,
                     attn_bytes=[layers[l]["attn"] for l in range(L)],
                     pred_bytes=[layers[l]["pred"] for l in range(L)], kv_bytes_per_token=kv,
                     embd_bytes=glob["embd"], output_bytes=out, output_norm_bytes=glob["output_norm"],
                     name=str(reader.get("general.name", "") or ""))


def load_model(path: str, kv_bytes: float = 2.0) -> ModelDesc:
    """A model description from a .gguf or .json file."""
    if not os.path.isfile(path):
        raise PlacementError(f"model: no such file: {path}")
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic == b"GGUF":
        return model_from_gguf(path, kv_bytes=kv_bytes)
    try:
        with open(path, "r", encoding="utf-8") as fh:
            d = json.load(fh)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PlacementError(f"model: {path} is neither a GGUF file nor JSON ({e})") from None
    if not isinstance(d, dict):
        raise PlacementError(f"model: {path}: expected a JSON object")
    return ModelDesc.from_dict(d)


# ---------------------------------------------------------------- frequencies

def load_freqs(path: str) -> List[np.ndarray]:
    """Per-layer activation frequencies from an npz: ``freq_0..freq_{L-1}`` or one 2-D array."""
    try:
        z = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise PlacementError(f"freq: no such file: {path}") from None
    except (ValueError, OSError) as e:
        raise PlacementError(f"freq: cannot read {path} as npz without pickle ({e})") from None
    if not isinstance(z, np.lib.npyio.NpzFile):
        arr = np.asarray(z)
        return _check_freqs([arr[l] for l in range(arr.shape[0])] if arr.ndim == 2 else [arr], path)
    with z:
        keys = list(z.keys())
        per = {int(k[5:]): k for k in keys if re.fullmatch(r"freq_\d+", k)}
        if per:
            L = max(per) + 1
            miss = [l for l in range(L) if l not in per]
            if miss:
                raise PlacementError(f"freq: {path} lacks freq_{miss[0]} (has freq_0..freq_{L - 1} partly)")
            try:
                return _check_freqs([z[per[l]] for l in range(L)], path)
            except ValueError as e:  # object arrays refuse to load without pickle
                if isinstance(e, PlacementError):
                    raise
                raise PlacementError(f"freq: cannot read {path} without pickle ({e})") from None
        try:
            arrays = {k: z[k] for k in keys}
        except ValueError as e:
            raise PlacementError(f"freq: cannot read {path} without pickle ({e})") from None
        two = [k for k, a in arrays.items() if a.ndim == 2]
        if len(two) == 1:
            a = arrays[two[0]]
            return _check_freqs([a[l] for l in range(a.shape[0])], path)
        raise PlacementError(f"freq: {path} needs arrays freq_0..freq_{{L-1}} or exactly one 2-D array "
                             f"(found: {', '.join(keys) or 'nothing'})")


def freqs_from_gguf(reader) -> List[np.ndarray]:
    """The ``blk.N.ffn_freq`` tensors of an extended GGUF, per layer."""
    out: Dict[int, np.ndarray] = {}
    for t in reader.tensors:
        m = _BLK.match(t.name)
        if m and m.group(2) == "ffn_freq":
            out[int(m.group(1))] = np.asarray(t.data, dtype=np.float64).reshape(-1)
    if not out:
        raise PlacementError("freq: the GGUF has no blk.N.ffn_freq tensors; pass --freq profile.npz")
    L = max(out) + 1
    if len(out) != L:
        raise PlacementError("freq: the GGUF has blk.N.ffn_freq for only some layers")
    return _check_freqs([out[l] for l in range(L)], "GGUF")


def _check_freqs(freqs: Sequence, where: str = "input") -> List[np.ndarray]:
    out = []
    if len(freqs) == 0:
        raise PlacementError(f"freq: {where}: no layers")
    for l, f in enumerate(freqs):
        a = np.asarray(f)
        if a.dtype.kind not in "fiu":
            raise PlacementError(f"freq: {where}: layer {l} is not numeric ({a.dtype})")
        a = a.astype(np.float64).reshape(-1)
        if a.size == 0:
            raise PlacementError(f"freq: {where}: layer {l} is empty")
        if not np.all(np.isfinite(a)) or a.min() < 0 or a.max() > 1:
            raise PlacementError(f"freq: {where}: layer {l} has values outside [0, 1] (activation "
                                 "frequencies; divide counts by the number of profiled tokens)")
        out.append(a)
    return out


def hot_first(freqs: Sequence[np.ndarray]) -> List[np.ndarray]:
    """Each layer's frequencies in hot-first order (stable sort by descending frequency)."""
    return [f[np.argsort(-f, kind="stable")] for f in freqs]


# ---------------------------------------------------------------- the instance

@dataclasses.dataclass
class Instance:
    """Everything the solvers need, in hot-first order and bytes / microseconds."""
    model: ModelDesc
    hw: Hardware
    group: int
    freqs: List[np.ndarray]          # hot-first, per layer
    weights: np.ndarray              # w_l
    sizes: List[np.ndarray]          # s_{l,j}
    mass: List[np.ndarray]           # M_{l,j}
    min_neurons: List[int]           # m_l (n_l + 1: never on the GPU)
    min_groups: List[int]            # q_l
    overhead_us: float               # c
    resident: Dict[str, float]       # breakdown of R

    @property
    def resident_bytes(self) -> float:
        return float(sum(self.resident.values()))


def min_neurons_for(f: np.ndarray, neuron_bytes: float, hw: Hardware, n_embd: int) -> int:
    """m_l: the smallest hot-first prefix whose GPU saving covers the per-token overhead."""
    n = f.size
    if not hw.has_gpu or hw.gpu_bw <= hw.cpu_bw:
        return n + 1
    c = _overhead_us(hw, n_embd)
    per_mass_us = neuron_bytes * (1.0 / hw.cpu_bw - 1.0 / hw.gpu_bw) / 1e3  # bytes/(GB/s) -> us
    saving = np.cumsum(f) * per_mass_us
    idx = int(np.searchsorted(saving, c * (1 - 1e-12), side="left"))
    return idx + 1 if idx < n else n + 1


def _overhead_us(hw: Hardware, n_embd: int) -> float:
    if not hw.has_gpu:
        return 0.0
    return hw.sync_us + 2.0 * n_embd * hw.act_bytes / hw.pcie_bw / 1e3


def resident_breakdown(model: ModelDesc, ctx: int, output_on_gpu: bool = True, embd_on_gpu: bool = False,
                       reserve_gib: float = 0.0) -> Dict[str, float]:
    return {
        "attention": float(sum(model.attn_bytes)),
        "predictors": float(sum(model.pred_bytes)),
        "kv_cache": float(sum(model.kv_bytes_per_token)) * int(ctx),
        "output": (model.output_bytes + model.output_norm_bytes) if output_on_gpu else 0.0,
        "embeddings": model.embd_bytes if embd_on_gpu else 0.0,
        "reserve": float(reserve_gib) * GIB,
    }


def build_instance(freqs: Sequence, model: ModelDesc, hw: Hardware, group: int = 64, ctx: int = 4096,
                   weights: Optional[Sequence[float]] = None, min_neurons: Optional[int] = None,
                   output_on_gpu: bool = True, embd_on_gpu: bool = False, reserve_gib: float = 0.0,
                   sort: bool = True) -> Instance:
    freqs = _check_freqs(freqs)
    if len(freqs) != model.n_layer:
        raise PlacementError(f"freq has {len(freqs)} layers, the model {model.n_layer}")
    for l, f in enumerate(freqs):
        if f.size != model.n_ff[l]:
            raise PlacementError(f"freq: layer {l} has {f.size} neurons, the model's FFN {model.n_ff[l]}")
    if not isinstance(group, (int, np.integer)) or group < 1:
        raise PlacementError(f"group size must be an integer >= 1, got {group!r}")
    if ctx < 0:
        raise PlacementError(f"ctx must be >= 0, got {ctx}")
    if reserve_gib < 0:
        raise PlacementError(f"reserve must be >= 0 GiB, got {reserve_gib}")
    if sort:
        freqs = hot_first(freqs)
    elif any(np.any(np.diff(f) > 0) for f in freqs):
        raise PlacementError("freq: not in hot-first (descending) order; pass sort=True")
    L = model.n_layer
    w = np.ones(L) if weights is None else np.asarray(weights, dtype=np.float64).reshape(-1)
    if w.size != L or not np.all(np.isfinite(w)) or np.any(w < 0):
        raise PlacementError(f"weights: need {L} finite values >= 0")
    sizes, mass, mins, qs = [], [], [], []
    for l, f in enumerate(freqs):
        n = f.size
        G = -(-n // group)
        s = np.full(G, group, dtype=np.int64)
        s[-1] = n - group * (G - 1)
        starts = np.arange(G) * group
        sizes.append(s)
        mass.append(np.add.reduceat(f, starts))
        if min_neurons is not None:
            if min_neurons < 0:
                raise PlacementError(f"min_neurons must be >= 0, got {min_neurons}")
            m = int(min_neurons) if hw.has_gpu else n + 1
        else:
            m = min_neurons_for(f, model.neuron_bytes[l], hw, model.n_embd)
        m = max(m, 1)
        mins.append(m)
        qs.append(-(-m // group))
    return Instance(model=model, hw=hw, group=int(group), freqs=freqs, weights=w, sizes=sizes, mass=mass,
                    min_neurons=mins, min_groups=qs, overhead_us=_overhead_us(hw, model.n_embd),
                    resident=resident_breakdown(model, ctx, output_on_gpu, embd_on_gpu, reserve_gib))


# ---------------------------------------------------------------- results

@dataclasses.dataclass
class Placement:
    budget_bytes: int
    solver: str
    status: str
    objective: float                 # sum_l w_l F_l(k_l)
    gpu_neurons: List[int]           # k_l
    mip_gap: float = 0.0
    time_s: float = 0.0
    resident_bytes: float = 0.0
    ffn_gpu_bytes: float = 0.0
    mass_fraction: float = 0.0       # unweighted GPU mass / total mass
    layers_on_gpu: int = 0
    est_token_ms: float = 0.0        # sum_l max(T_cpu_l, T_gpu_l)
    est_cpu_only_ms: float = 0.0
    balance: str = "off"
    note: str = ""

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["budget_gib"] = self.budget_bytes / GIB
        return d


def evaluate(inst: Instance, k: Sequence[int]) -> Dict[str, float]:
    """Objective, bytes and time estimates of a prefix vector k (neurons per layer)."""
    obj = mass = total = fbytes = tok = cpu_only = 0.0
    used = 0
    hw = inst.hw
    for l, f in enumerate(inst.freqs):
        kl = int(k[l])
        F = float(f.sum())
        Fk = float(f[:kl].sum())
        b = inst.model.neuron_bytes[l]
        obj += inst.weights[l] * Fk
        mass += Fk
        total += F
        fbytes += b * kl
        t_cpu = b * (F - Fk) / hw.cpu_bw / 1e3
        t_gpu = (b * Fk / hw.gpu_bw / 1e3 + inst.overhead_us) if kl > 0 else 0.0
        tok += max(t_cpu, t_gpu)
        cpu_only += b * F / hw.cpu_bw / 1e3
        used += kl > 0
    return {"objective": obj, "mass_fraction": mass / total if total > 0 else 0.0, "ffn_gpu_bytes": fbytes,
            "layers_on_gpu": used, "est_token_ms": tok / 1e3, "est_cpu_only_ms": cpu_only / 1e3}


def check_placement(inst: Instance, k: Sequence[int], budget_bytes: float, balance: str = "off",
                    balance_slack_us: float = 0.0) -> List[str]:
    """Every constraint the ILP enforces, checked exactly; returns the violations (empty = ok)."""
    bad = []
    if len(k) != inst.model.n_layer:
        return [f"{len(k)} entries for {inst.model.n_layer} layers"]
    ffn = 0.0
    for l, kl in enumerate(k):
        n = inst.freqs[l].size
        if kl < 0 or kl > n:
            bad.append(f"layer {l}: k={kl} outside [0, {n}]")
        if kl % inst.group and kl != n:
            bad.append(f"layer {l}: k={kl} is not a whole number of groups")
        if 0 < kl < inst.min_neurons[l]:
            bad.append(f"layer {l}: k={kl} below the minimum {inst.min_neurons[l]}")
        ffn += inst.model.neuron_bytes[l] * kl
        if balance == "constraint" and kl > 0:
            b, f = inst.model.neuron_bytes[l], inst.freqs[l]
            Fk = float(f[:kl].sum())
            t_cpu = b * (float(f.sum()) - Fk) / inst.hw.cpu_bw / 1e3
            t_gpu = b * Fk / inst.hw.gpu_bw / 1e3 + inst.overhead_us
            if t_cpu > t_gpu + balance_slack_us + 1e-6 * max(1.0, t_cpu):
                bad.append(f"layer {l}: unbalanced (T_cpu {t_cpu:.3f} us > T_gpu {t_gpu:.3f} + slack)")
    if inst.resident_bytes + ffn > budget_bytes * (1 + 1e-12):
        bad.append(f"bytes {inst.resident_bytes + ffn:.0f} exceed the budget {budget_bytes:.0f}")
    return bad


def _finish(inst: Instance, budget: int, solver: str, status: str, k: List[int], gap: float, t: float,
            balance: str, note: str = "") -> Placement:
    e = evaluate(inst, k)
    return Placement(budget_bytes=int(budget), solver=solver, status=status, objective=e["objective"],
                     gpu_neurons=[int(x) for x in k], mip_gap=float(gap), time_s=float(t),
                     resident_bytes=inst.resident_bytes, ffn_gpu_bytes=e["ffn_gpu_bytes"],
                     mass_fraction=e["mass_fraction"], layers_on_gpu=int(e["layers_on_gpu"]),
                     est_token_ms=e["est_token_ms"], est_cpu_only_ms=e["est_cpu_only_ms"], balance=balance,
                     note=note)


def _available(inst: Instance, budget_bytes: float) -> float:
    if not math.isfinite(budget_bytes) or budget_bytes < 0:
        raise PlacementError(f"budget must be a finite number of bytes >= 0, got {budget_bytes}")
    avail = budget_bytes - inst.resident_bytes
    if avail < 0 and inst.hw.has_gpu:
        parts = ", ".join(f"{k} {v / GIB:.2f}" for k, v in inst.resident.items() if v)
        raise PlacementError(f"budget {budget_bytes / GIB:.2f} GiB is below the resident dense parts "
                             f"{inst.resident_bytes / GIB:.2f} GiB ({parts}); lower --ctx or raise the budget")
    return avail


# ---------------------------------------------------------------- greedy baseline

def solve_greedy(inst: Instance, budget_bytes: float) -> Placement:
    """Highest weighted mass per byte first; a layer's first move is its whole minimum block."""
    t0 = time.perf_counter()
    avail = _available(inst, budget_bytes)
    L = inst.model.n_layer
    kg = [0] * L  # groups taken
    heap = []

    def push(l):
        q = inst.min_groups[l]
        G = inst.sizes[l].size
        lo = kg[l]
        hi = q if lo == 0 else lo + 1
        if hi > G or inst.min_neurons[l] > inst.freqs[l].size:
            return
        nb = float(inst.sizes[l][lo:hi].sum()) * inst.model.neuron_bytes[l]
        gain = inst.weights[l] * float(inst.mass[l][lo:hi].sum())
        heapq.heappush(heap, (-gain / nb, l, hi, nb))

    if inst.hw.has_gpu:
        for l in range(L):
            push(l)
    while heap:
        _, l, hi, nb = heapq.heappop(heap)
        if nb <= avail:
            avail -= nb
            kg[l] = hi
            push(l)
    k = [int(inst.sizes[l][:kg[l]].sum()) for l in range(L)]
    return _finish(inst, budget_bytes, "greedy", "heuristic", k, float("nan"), time.perf_counter() - t0, "off")


# ---------------------------------------------------------------- ILP

@contextlib.contextmanager
def _quiet_stdout():
    """HiGHS prints a banner on stdout from C++ at first use; keep CLI output clean."""
    try:
        sys.stdout.flush()
        fd = os.dup(1)
    except (OSError, ValueError):
        yield
        return
    try:
        with open(os.devnull, "w") as dn:
            os.dup2(dn.fileno(), 1)
            try:
                yield
            finally:
                os.dup2(fd, 1)
    finally:
        os.close(fd)


def _highs():
    try:
        import highspy
    except ImportError:
        raise PlacementError("the ILP needs HiGHS: pip install highspy (or use --solver greedy)") from None
    with _quiet_stdout():
        h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    return highspy, h


class _Model:
    """A HiGHS model under construction: columns by name range, rows in CSR."""

    def __init__(self, highspy):
        self.hs = highspy
        self.inf = highspy.kHighsInf
        self.lo, self.hi, self.cost, self.integer = [], [], [], []
        self.rlo, self.rhi, self.starts, self.idx, self.val = [], [], [0], [], []

    def cols(self, n, lo, hi, integer, cost=0.0):
        first = len(self.lo)
        self.lo += list(np.broadcast_to(np.asarray(lo, float), (n,)))
        self.hi += list(np.broadcast_to(np.asarray(hi, float), (n,)))
        self.cost += list(np.broadcast_to(np.asarray(cost, float), (n,)))
        self.integer += [integer] * n
        return first

    def row(self, cols, coefs, lo, hi):
        self.idx.extend(int(c) for c in cols)
        self.val.extend(float(v) for v in coefs)
        self.starts.append(len(self.idx))
        self.rlo.append(lo)
        self.rhi.append(hi)

    def highs(self, h, maximize=True):
        hs = self.hs
        lp = hs.HighsLp()
        lp.num_col_ = len(self.lo)
        lp.num_row_ = len(self.rlo)
        lp.col_cost_ = np.array(self.cost)
        lp.col_lower_ = np.array(self.lo)
        lp.col_upper_ = np.array(self.hi)
        lp.row_lower_ = np.array(self.rlo)
        lp.row_upper_ = np.array(self.rhi)
        lp.sense_ = hs.ObjSense.kMaximize if maximize else hs.ObjSense.kMinimize
        lp.a_matrix_.format_ = hs.MatrixFormat.kRowwise
        lp.a_matrix_.start_ = np.array(self.starts, dtype=np.int32)
        lp.a_matrix_.index_ = np.array(self.idx, dtype=np.int32)
        lp.a_matrix_.value_ = np.array(self.val)
        lp.integrality_ = [hs.HighsVarType.kInteger if i else hs.HighsVarType.kContinuous for i in self.integer]
        h.passModel(lp)


def _time_coefs(inst: Instance, l: int):
    b = inst.model.neuron_bytes[l]
    return b / inst.hw.cpu_bw / 1e3, b / inst.hw.gpu_bw / 1e3  # us per unit of activation mass


def _model_prefix(inst: Instance, highspy, avail: float, balance: str, slack: float):
    """Compact form: integer k_l (groups), binary z_l, concave mass phi_l by tangents."""
    L = inst.model.n_layer
    md = _Model(highspy)
    G = [s.size for s in inst.sizes]
    scale = max(avail, 1.0)
    k0 = md.cols(L, 0.0, [float(g) for g in G], True)
    z0 = md.cols(L, 0.0, [0.0 if inst.min_neurons[l] > inst.freqs[l].size else 1.0 for l in range(L)], True)
    short = [int(inst.group * G[l] - inst.freqs[l].size) for l in range(L)]  # neurons missing in the last group
    y0 = md.cols(L, 0.0, [1.0 if short[l] else 0.0 for l in range(L)], True)
    p0 = md.cols(L, 0.0, [float(inst.mass[l].sum()) for l in range(L)], False, inst.weights)
    cols, coefs = [], []
    for l in range(L):
        b = inst.model.neuron_bytes[l]
        cols += [k0 + l, y0 + l]
        coefs += [b * inst.group / scale, -b * short[l] / scale]
    md.row(cols, coefs, -md.inf, avail / scale)  # budget
    for l in range(L):
        M = inst.mass[l]
        C = np.concatenate([[0.0], np.cumsum(M)])
        prev = None
        for j in range(G[l]):  # phi_l <= C(j) + M_j (k_l - j): exact at integer k for non-increasing M
            if prev is not None and M[j] == prev:
                continue  # same line as the previous piece
            prev = M[j]
            md.row((p0 + l, k0 + l), (1.0, -M[j]), -md.inf, C[j] - M[j] * j)
        md.row((k0 + l, z0 + l), (1.0, -float(inst.min_groups[l])), 0.0, md.inf)  # k >= q z
        md.row((k0 + l, z0 + l), (1.0, -float(G[l])), -md.inf, 0.0)  # k <= G z (big-M)
        if short[l]:
            md.row((k0 + l, y0 + l), (1.0, -float(G[l])), 0.0, md.inf)  # y = 1 only for the full layer
        if balance == "constraint":
            a_cpu, a_gpu = _time_coefs(inst, l)
            U = a_cpu * float(inst.mass[l].sum())
            md.row((p0 + l, z0 + l), (-(a_cpu + a_gpu), U - inst.overhead_us), -md.inf, float(slack))

    def kvec(sol):
        out = []
        for l in range(L):
            kg = int(round(sol[k0 + l]))
            out.append(min(kg * inst.group, inst.freqs[l].size))
        return out

    def start(k):
        v = np.zeros(len(md.lo))
        for l in range(L):
            kg = -(-k[l] // inst.group)
            v[k0 + l] = kg
            v[z0 + l] = 1.0 if k[l] else 0.0
            v[y0 + l] = 1.0 if (short[l] and kg == G[l]) else 0.0
            v[p0 + l] = float(inst.freqs[l][:k[l]].sum())
        return v

    return md, kvec, start


def _model_groups(inst: Instance, highspy, avail: float, balance: str, slack: float, makespan: bool):
    """Group form: binary x_{l,j} with prefix rows, binary z_l; optional t_l for the makespan."""
    L = inst.model.n_layer
    md = _Model(highspy)
    G = [s.size for s in inst.sizes]
    scale = max(avail, 1.0)
    x0 = md.cols(int(sum(G)), 0.0, 1.0, True, np.concatenate([inst.weights[l] * inst.mass[l] for l in range(L)]))
    xoff = x0 + np.concatenate([[0], np.cumsum(G)]).astype(np.int64)
    z0 = md.cols(L, 0.0, [0.0 if inst.min_neurons[l] > inst.freqs[l].size else 1.0 for l in range(L)], True)
    t0 = md.cols(L, 0.0, md.inf, False) if makespan else None
    md.row(range(x0, x0 + int(sum(G))),
           np.concatenate([inst.sizes[l] * inst.model.neuron_bytes[l] for l in range(L)]) / scale,
           -md.inf, avail / scale)
    for l in range(L):
        xs = list(range(int(xoff[l]), int(xoff[l + 1])))
        for j in range(G[l] - 1):
            md.row((xs[j + 1], xs[j]), (1.0, -1.0), -md.inf, 0.0)  # prefix
        md.row((xs[0], z0 + l), (1.0, -1.0), -md.inf, 0.0)  # link
        if inst.min_neurons[l] <= inst.freqs[l].size:
            md.row(xs + [z0 + l], list(inst.sizes[l].astype(float)) + [-float(inst.min_neurons[l])], 0.0, md.inf)
            md.row((xs[inst.min_groups[l] - 1], z0 + l), (1.0, -1.0), 0.0, md.inf)
        a_cpu, a_gpu = _time_coefs(inst, l)
        F = float(inst.mass[l].sum())
        if balance == "constraint":
            md.row(xs + [z0 + l], list(-(a_cpu + a_gpu) * inst.mass[l]) + [a_cpu * F - inst.overhead_us],
                   -md.inf, float(slack))
        if makespan:
            md.row(xs + [t0 + l], list(a_cpu * inst.mass[l]) + [1.0], a_cpu * F, md.inf)  # t >= T_cpu
            md.row(xs + [z0 + l, t0 + l], list(-a_gpu * inst.mass[l]) + [-inst.overhead_us, 1.0], 0.0, md.inf)

    def kvec(sol):
        x = np.asarray(sol) > 0.5
        return [int(inst.sizes[l][x[xoff[l]:xoff[l + 1]]].sum()) for l in range(L)]

    def start(k):
        v = np.zeros(len(md.lo))
        for l in range(L):
            g = -(-k[l] // inst.group)
            v[xoff[l]:xoff[l] + g] = 1.0
            v[z0 + l] = 1.0 if k[l] else 0.0
            if makespan:
                a_cpu, a_gpu = _time_coefs(inst, l)
                F, Fk = float(inst.freqs[l].sum()), float(inst.freqs[l][:k[l]].sum())
                v[t0 + l] = max(a_cpu * (F - Fk), (a_gpu * Fk + inst.overhead_us) if k[l] else 0.0)
        return v

    return md, kvec, start, xoff, t0


FORMULATIONS = ("prefix", "groups")


def solve_ilp(inst: Instance, budget_bytes: float, time_limit: float = 60.0, mip_rel_gap: float = 1e-4,
              threads: int = 0, balance: str = "off", balance_tol: float = 0.0, balance_slack_us: float = 0.0,
              formulation: str = "prefix", warm_start: bool = True) -> Placement:
    """Solve the placement MILP (module docstring) for one budget with HiGHS.

    formulation: "prefix" (integer k_l, the fast default) or "groups" (binary per
    group); both have the same optimum. The makespan stage always uses "groups",
    where the per-layer mass is linear and exact."""
    if balance not in BALANCE:
        raise PlacementError(f"balance must be one of {BALANCE}, got {balance!r}")
    if formulation not in FORMULATIONS:
        raise PlacementError(f"formulation must be one of {FORMULATIONS}, got {formulation!r}")
    if not (0 <= balance_tol < 1):
        raise PlacementError(f"balance_tol must be in [0, 1), got {balance_tol}")
    if not (balance_slack_us >= 0):
        raise PlacementError(f"balance slack must be >= 0, got {balance_slack_us}")
    if not (time_limit > 0):
        raise PlacementError(f"time limit must be > 0, got {time_limit}")
    if not (0 <= mip_rel_gap < 1):
        raise PlacementError(f"MIP gap must be in [0, 1), got {mip_rel_gap}")
    t0 = time.perf_counter()
    avail = _available(inst, budget_bytes)
    L = inst.model.n_layer
    if not inst.hw.has_gpu:
        return _finish(inst, budget_bytes, "highs-ilp", "cpu-only", [0] * L, 0.0, time.perf_counter() - t0, balance,
                       "no GPU: everything stays on the CPU")
    highspy, h = _highs()
    h.setOptionValue("time_limit", float(time_limit))
    h.setOptionValue("mip_rel_gap", float(mip_rel_gap))
    h.setOptionValue("mip_abs_gap", 1e-9)
    h.setOptionValue("primal_feasibility_tolerance", 1e-9)
    h.setOptionValue("mip_feasibility_tolerance", 1e-9)
    if threads:
        h.setOptionValue("threads", int(threads))

    if formulation == "prefix":
        md, kvec, start = _model_prefix(inst, highspy, avail, balance, balance_slack_us)
    else:
        md, kvec, start, _, _ = _model_groups(inst, highspy, avail, balance, balance_slack_us, False)
    md.highs(h, maximize=True)
    greedy = None
    if warm_start and balance != "constraint":  # the greedy placement ignores the balance rows
        greedy = solve_greedy(inst, budget_bytes)
        sol = highspy.HighsSolution()
        sol.col_value = start(greedy.gpu_neurons)
        h.setSolution(sol)
    h.run()
    status = h.modelStatusToString(h.getModelStatus())
    info = h.getInfo()
    if info.primal_solution_status != 2:  # 2: a feasible solution exists
        raise PlacementError(f"HiGHS found no feasible placement (status: {status})")
    k = kvec(list(h.getSolution().col_value))
    gap = float(info.mip_gap)
    note = ""

    if balance == "makespan":
        best = evaluate(inst, k)["objective"]
        t_left = time_limit - (time.perf_counter() - t0)
        if t_left > 0:
            highspy, h = _highs()
            h.setOptionValue("time_limit", float(t_left))
            h.setOptionValue("mip_rel_gap", float(mip_rel_gap))
            h.setOptionValue("primal_feasibility_tolerance", 1e-9)
            h.setOptionValue("mip_feasibility_tolerance", 1e-9)
            if threads:
                h.setOptionValue("threads", int(threads))
            md2, kvec2, start2, xoff, tcol = _model_groups(inst, highspy, avail, balance, balance_slack_us, True)
            nx = int(xoff[-1] - xoff[0])
            obj = np.array(md2.cost[:nx])
            md2.row(range(nx), obj, best * (1 - balance_tol) - 1e-9 * abs(best), md2.inf)  # keep the mass
            md2.cost = [0.0] * len(md2.cost)
            for l in range(L):
                md2.cost[tcol + l] = 1.0
            md2.highs(h, maximize=False)
            s2 = highspy.HighsSolution()
            s2.col_value = start2(k)
            h.setSolution(s2)
            h.run()
            info2 = h.getInfo()
            if info2.primal_solution_status == 2:
                k2 = kvec2(list(h.getSolution().col_value))
                if evaluate(inst, k2)["est_token_ms"] <= evaluate(inst, k)["est_token_ms"]:
                    k = k2
                note = (f"makespan stage: {h.modelStatusToString(h.getModelStatus())}, "
                        f"gap {float(info2.mip_gap):.1e}")
        if not note:
            note = "makespan stage skipped or found nothing: the stage-1 placement is kept"

    # HiGHS works to tolerances: verify exactly, and repair a hair-width budget overshoot should one occur.
    viol = check_placement(inst, k, budget_bytes, balance, balance_slack_us)
    while viol and any("exceed the budget" in v for v in viol):
        cand = [l for l in range(L) if k[l] > 0]
        l = min(cand, key=lambda i: inst.weights[i] * float(inst.freqs[i][(k[i] - 1) // inst.group * inst.group:k[i]].sum()))
        k[l] = (k[l] - 1) // inst.group * inst.group
        if k[l] < inst.min_neurons[l]:
            k[l] = 0
        viol = check_placement(inst, k, budget_bytes, balance, balance_slack_us)
        note = (note + "; " if note else "") + "repaired a tolerance-level budget overshoot"
    if viol:
        raise PlacementError("internal: the ILP placement violates " + "; ".join(viol[:3]))
    pl = _finish(inst, budget_bytes, "highs-ilp", status, k, gap, time.perf_counter() - t0, balance, note)
    if greedy is not None and balance == "off" and greedy.objective > pl.objective * (1 + 1e-12):
        # only possible when stopped early (time limit): never return worse than the baseline
        pl = dataclasses.replace(greedy, status=status, time_s=pl.time_s,
                                 note="ILP stopped early with a worse incumbent; greedy kept")
    return pl


def solve(freqs: Sequence, model: ModelDesc, budgets_gib: Sequence[float], hw: Union[str, Hardware] = "rtx4090",
          group: int = 64, ctx: int = 4096, solver: str = "highs-ilp", **kw) -> List[Placement]:
    """One placement per budget (GiB), sorted by budget. ``kw`` goes to build_instance / solve_ilp."""
    if solver not in SOLVERS:
        raise PlacementError(f"solver must be one of {SOLVERS}, got {solver!r}")
    hw = hardware(hw) if not isinstance(hw, Hardware) else hw
    inst_kw = {k: kw.pop(k) for k in ("weights", "min_neurons", "output_on_gpu", "embd_on_gpu", "reserve_gib", "sort")
               if k in kw}
    inst = build_instance(freqs, model, hw, group=group, ctx=ctx, **inst_kw)
    budgets = sorted(set(_budget_bytes(b) for b in budgets_gib))
    if not budgets:
        raise PlacementError("give at least one budget")
    for b in budgets:
        _available(inst, b)  # fail before solving anything
    out = []
    for b in budgets:
        out.append(solve_ilp(inst, b, **kw) if solver == "highs-ilp" else solve_greedy(inst, b))
    return out


def _budget_bytes(gib) -> int:
    try:
        g = float(gib)
    except (TypeError, ValueError):
        raise PlacementError(f"budget must be a number of GiB, got {gib!r}") from None
    if not math.isfinite(g) or g < 0:
        raise PlacementError(f"budget must be a finite number of GiB >= 0, got {gib!r}")
    return int(round(g * GIB))


# ---------------------------------------------------------------- GGUF metadata

def placement_kv(placements: Sequence[Placement]) -> List[tuple]:
    """The metadata entries as (key, value, kind), kind one of u32 u64 str f64 i32[]."""
    pls = sorted(placements, key=lambda p: p.budget_bytes)
    if not pls:
        raise PlacementError("no placements to write")
    for a, b in zip(pls, pls[1:]):
        if a.budget_bytes == b.budget_bytes:
            raise PlacementError(f"two placements for the same budget ({a.budget_bytes} bytes)")
    L = len(pls[0].gpu_neurons)
    out = [(f"{KEY_PREFIX}.count", len(pls), "u32")]
    for i, p in enumerate(pls):
        k = np.asarray(p.gpu_neurons, dtype=np.int64)
        if k.size != L or np.any(k < 0) or np.any(k > np.iinfo(np.int32).max):
            raise PlacementError(f"placement {i}: gpu_neurons must be {L} values in [0, 2^31)")
        if p.budget_bytes < 0 or p.budget_bytes >= 1 << 64:
            raise PlacementError(f"placement {i}: budget_bytes out of range")
        out += [(f"{KEY_PREFIX}.{i}.budget_bytes", int(p.budget_bytes), "u64"),
                (f"{KEY_PREFIX}.{i}.solver", str(p.solver), "str"),
                (f"{KEY_PREFIX}.{i}.objective", float(p.objective), "f64"),
                (f"{KEY_PREFIX}.{i}.gpu_neurons", k.astype(np.int32), "i32[]")]
    return out


def add_placements(writer, placements: Sequence[Placement]) -> None:
    """Add the placement section to a ``pinfer._core.GGUFWriter`` or a ``gguf.GGUFWriter``."""
    kv = placement_kv(placements)
    if hasattr(writer, "add_uint64"):  # the gguf package
        import gguf
        for key, v, kind in kv:
            if kind == "u32":
                writer.add_uint32(key, v)
            elif kind == "u64":
                writer.add_uint64(key, v)
            elif kind == "str":
                writer.add_string(key, v)
            elif kind == "f64":
                writer.add_float64(key, v)
            else:
                writer.add_key_value(key, [int(x) for x in v], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT32)
        return
    from . import _core
    T = {"u32": _core.GGUF_TYPE_UINT32, "u64": _core.GGUF_TYPE_UINT64, "str": _core.GGUF_TYPE_STRING,
         "f64": _core.GGUF_TYPE_FLOAT64, "i32[]": (_core.GGUF_TYPE_ARRAY, _core.GGUF_TYPE_INT32)}
    for key, v, kind in kv:
        writer.add(key, v, T[kind])


def read_placements(reader, n_layer: Optional[int] = None) -> List[Placement]:
    """The placement section of a GGUF (a ``pinfer._core.GGUFReader``, or a metadata dict).

    Returns [] when the file has none; raises PlacementError when it is malformed."""
    get = reader.get if hasattr(reader, "get") else (lambda k, d=None: reader.get(k, d))
    count = get(f"{KEY_PREFIX}.count")
    if count is None:
        return []
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1 or count > 1 << 16:
        raise PlacementError(f"{KEY_PREFIX}.count: expected a positive integer, got {count!r}")
    out = []
    for i in range(int(count)):
        p = f"{KEY_PREFIX}.{i}."
        b, s, o, k = get(p + "budget_bytes"), get(p + "solver"), get(p + "objective"), get(p + "gpu_neurons")
        if b is None or s is None or o is None or k is None:
            raise PlacementError(f"placement {i}: missing {p}budget_bytes/solver/objective/gpu_neurons")
        if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 0:
            raise PlacementError(f"{p}budget_bytes: expected an unsigned integer, got {b!r}")
        if not isinstance(s, str):
            raise PlacementError(f"{p}solver: expected a string")
        if isinstance(o, bool) or not isinstance(o, (int, float)):
            raise PlacementError(f"{p}objective: expected a number")
        k = np.asarray(k)
        if k.ndim != 1 or k.dtype.kind not in "iu" or np.any(k < 0):
            raise PlacementError(f"{p}gpu_neurons: expected an array of integers >= 0")
        if n_layer is not None and k.size != n_layer:
            raise PlacementError(f"{p}gpu_neurons: {k.size} entries for {n_layer} layers")
        if out and int(b) <= out[-1].budget_bytes:
            raise PlacementError(f"{p}budget_bytes: entries must have increasing budgets")
        out.append(Placement(budget_bytes=int(b), solver=s, status="stored", objective=float(o),
                             gpu_neurons=[int(x) for x in k]))
    return out


def write_placements(src: str, dst: str, placements: Sequence[Placement]) -> None:
    """Copy the GGUF ``src`` to ``dst`` with its placement section replaced.

    Written to a temporary file beside dst and renamed into place when complete.
    (Loads the tensors into memory: meant for the offline pipeline.)"""
    from . import _core
    r = _core.GGUFReader(src)
    L = None
    arch = r.get("general.architecture")
    if arch is not None:
        L = r.get(f"{arch}.block_count")
    for p in placements:
        if L is not None and len(p.gpu_neurons) != int(L):
            raise PlacementError(f"placement has {len(p.gpu_neurons)} layers, {src} has {L}")
    placement_kv(placements)  # validate before reading tensors
    w = _core.GGUFWriter()
    types = r.types
    for key, val in r.metadata.items():
        if key.startswith(KEY_PREFIX + "."):
            continue
        w.add(key, val, types[key])
    add_placements(w, placements)
    for t in r.tensors:
        w.add_tensor(t.name, t.data, t.type, t.shape)
    with atomic_output(dst, what="placed model") as tmp:  # src is read into memory: dst may be src
        w.write(tmp)


# ---------------------------------------------------------------- report, summary, plot

def report(inst: Instance, placements: Sequence[Placement], greedy: Optional[Sequence[Placement]] = None) -> dict:
    d = {
        "model": {"name": inst.model.name, "n_layer": inst.model.n_layer, "n_ff": inst.model.n_ff,
                  "neuron_bytes": inst.model.neuron_bytes},
        "hardware": dataclasses.asdict(inst.hw),
        "group": inst.group,
        "resident": inst.resident,
        "min_neurons": inst.min_neurons,
        "overhead_us": inst.overhead_us,
        "order": "hot-first (stable descending sort of the frequencies)",
        "placements": [p.to_dict() for p in placements],
    }
    if greedy:
        for p, g in zip(d["placements"], greedy):
            p["greedy"] = {"objective": g.objective, "gpu_neurons": g.gpu_neurons, "time_s": g.time_s,
                           "mass_fraction": g.mass_fraction}
    return json.loads(json.dumps(d, default=float).replace("NaN", "null"))


def summary(inst: Instance, placements: Sequence[Placement], greedy: Optional[Sequence[Placement]] = None) -> str:
    lines = [f"model: {inst.model.name or '?'}  {inst.model.n_layer} layers  group {inst.group}  "
             f"hardware {inst.hw.name}",
             f"resident dense parts: {inst.resident_bytes / GIB:.2f} GiB ("
             + ", ".join(f"{k} {v / GIB:.2f}" for k, v in inst.resident.items() if v) + ")",
             f"minimum neurons per GPU layer: {min(inst.min_neurons)}..{max(inst.min_neurons)}",
             f"{'budget GiB':>10} {'solver':>9} {'status':>10} {'objective':>12} {'GPU mass':>9} {'layers':>6} "
             f"{'FFN GiB':>8} {'gap':>8} {'time s':>7} {'est ms/tok':>10}"
             + (f" {'greedy obj':>11}" if greedy else "")]
    for i, p in enumerate(placements):
        gap = "-" if p.mip_gap != p.mip_gap else f"{p.mip_gap:.1e}"
        s = (f"{p.budget_bytes / GIB:>10.4g} {p.solver:>9} {p.status[:10]:>10} {p.objective:>12.2f} "
             f"{100 * p.mass_fraction:>8.1f}% {p.layers_on_gpu:>6} {p.ffn_gpu_bytes / GIB:>8.2f} {gap:>8} "
             f"{p.time_s:>7.2f} {p.est_token_ms:>10.2f}")
        if greedy:
            s += f" {greedy[i].objective:>11.2f}"
        lines.append(s)
    if placements:
        lines.append(f"(CPU-only estimate {placements[0].est_cpu_only_ms:.2f} ms/token; "
                     "objective = expected active neurons per token served by the GPU)")
    return "\n".join(lines)


def plot(inst: Instance, placements: Sequence[Placement], path: str) -> None:
    """PNG: GPU share of each layer's FFN, one line per budget."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlacementError("the plot needs matplotlib: pip install matplotlib") from None
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    layers = np.arange(inst.model.n_layer)
    n = np.asarray(inst.model.n_ff, dtype=float)
    for p in placements:
        ax.plot(layers, np.asarray(p.gpu_neurons) / n, marker=".",
                label=f"{p.budget_bytes / GIB:.1f} GiB ({100 * p.mass_fraction:.0f}% mass)")
    ax.set_xlabel("layer")
    ax.set_ylabel("GPU share of FFN neurons")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"neuron placement ({inst.model.name or 'model'}, {inst.hw.name})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_output(path, what="plot") as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)


# ---------------------------------------------------------------- CLI

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
    p.add_argument("--solver", choices=SOLVERS, default="highs-ilp")
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
            from . import _core
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
            if args.solver == "greedy":
                pls.append(g)
            else:
                pls.append(solve_ilp(inst, b, time_limit=args.time_limit, mip_rel_gap=args.gap,
                                     threads=args.threads, balance=args.balance, balance_tol=args.balance_tol,
                                     balance_slack_us=args.balance_slack_us))
        print(summary(inst, pls, grd if args.solver != "greedy" else None))
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


if __name__ == "__main__":  # python -m pinfer.solve --model ... (without the pinfer dispatcher)
    ap = argparse.ArgumentParser(prog="pinfer")
    sub = ap.add_subparsers()
    add_parser(sub)
    a = ap.parse_args(["solve"] + sys.argv[1:])
    sys.exit(a.func(a))
