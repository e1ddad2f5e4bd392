"""The cost model: a model's bytes from a GGUF or JSON, activation frequencies, and
the instance (groups, masses, minimum neurons, resident bytes) with its exact checks."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from typing import Dict, List, Optional, Sequence

import numpy as np

from ..extgguf import PlacementError
from .hardware import Hardware

GIB = float(1 << 30)


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
        from .. import _core
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


# ---------------------------------------------------------------- evaluation

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
