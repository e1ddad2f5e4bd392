"""The extended GGUF layout: neuron-aware tensors and metadata in a plain GGUF v3 file.

An extended file is a valid GGUF v3 file (magic ``GGUF``); every GGUF reader can
list it. Shapes below are GGUF ``ne`` order (``ne[0]`` is the contiguous axis),
for layer ``N`` with hidden size ``d``, FFN size ``n`` and predictor rank ``r_l``:

Tensors (all optional; when present, present in every layer)

- ``blk.N.fc1.weight``     ``[d, r_l]``  predictor A (PowerInfer's name and shape)
- ``blk.N.fc2.weight``     ``[r_l, n]``  predictor B; neuron ``i`` is predicted
  active when ``(B · relu(A · x))_i > pinfer.sparse.threshold``
- ``blk.N.ffn_down_t.weight`` ``[d, n]`` the down projection transposed: one
  contiguous row of ``d`` per neuron (any weight type; F16 when the type's block
  does not divide ``d``)
- ``blk.N.ffn_freq``       F32 ``[n]``   profiled activation frequency per neuron

Metadata

- ``pinfer.neuron_order``  string ``"hot-first"`` (or absent): each layer's neurons
  are permuted into descending frequency, so a GPU share is a prefix ``[0, k_l)``
- ``pinfer.sparse.threshold``      f32, predictor logit threshold (default 0)
- ``pinfer.sparse.act_thresholds`` f32 array ``[n_layer]``: SwiGLU magnitude
  thresholds on the gate activation (CATS/TEAL-style mode)
- ``pinfer.sparse.mode_hint``      string, optional (e.g. "predictor", "relu-exact",
  "act-threshold")
- placement section, one entry per VRAM budget:
  ``pinfer.placement.count`` u32; for ``i`` in ``[0, count)``:
  ``pinfer.placement.i.budget_bytes`` u64, ``.solver`` string, ``.objective`` f64,
  ``.gpu_neurons`` i32 array ``[n_layer]`` (``k_l``: neurons ``[0, k_l)`` of layer
  ``l`` go to the GPU)

PowerInfer's files differ only in details that pinfer reads too: the magic
``PWRI`` instead of ``GGUF``, ``powerinfer.sparse_threshold`` (f32), and no
``ffn_down`` next to ``ffn_down_t`` (pinfer rebuilds it at load). Its ``.gpuidx``
files (also ``PWRI``) hold per layer ``blk.N.gpu_idx`` (I32 ``[n]``, 1 = on the
GPU) and ``blk.N.gpu_bucket`` (I32, the GPU neuron ids, ascending).

Functions here rewrite a file (everything not touched is copied byte for byte;
the write is atomic: temp file, fsync, rename), add ``ffn_down_t``, permute the
FFN neurons, and read it all back. docs/extended-gguf.md has the full story.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _core
from . import keys as K
from .outfile import atomic_output

HOT_FIRST = K.NEURON_ORDER_HOT_FIRST
POWERINFER_MAGIC = K.POWERINFER_MAGIC
placement_key = K.placement_key

_T = _core  # value type ids: _core.GGUF_TYPE_*


def _type_id(name: str) -> int:
    return _core.type_from_name(name)


# Tensor type ids (ggml).
F32, F16, BF16, I32 = (_type_id(n) for n in ("f32", "f16", "bf16", "i32"))


@dataclass
class Tensor:
    """Tensor data to write: ``data`` is a numpy array (typed for F32/F16/I32,
    uint8 rows of encoded blocks otherwise), ``shape`` numpy order in elements."""
    data: np.ndarray
    type: int
    shape: Tuple[int, ...]


class PlacementError(ValueError):
    """A malformed placement section, bad placements to write, or bad input to the
    placement solver (a clear message, no traceback in the CLI)."""


@dataclass
class Placement:
    """One entry of the placement section: for a VRAM budget, k_l per layer (neurons
    ``[0, k_l)`` of layer l's hot-first order on the GPU). The file stores the first
    four fields; the solver fills the rest for its report."""
    budget_bytes: int
    solver: str
    objective: float                 # the solver's primary objective, sum_l w_l F_l(k_l)
    gpu_neurons: List[int]           # k_l
    status: str = "stored"
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
        d = asdict(self)
        d["budget_gib"] = self.budget_bytes / float(1 << 30)
        return d


@dataclass
class ExtendedInfo:
    arch: str
    n_layer: int
    n_embd: int
    n_ff: int
    powerinfer: bool = False
    neuron_order: Optional[str] = None
    threshold: float = 0.0
    act_thresholds: Optional[np.ndarray] = None
    mode_hint: Optional[str] = None
    placements: List[Placement] = field(default_factory=list)
    predictors: Dict[int, Tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # fc1 [r, d], fc2 [n, r]
    down_t: Dict[int, np.ndarray] = field(default_factory=dict)  # float32 [n, d]
    freqs: Dict[int, np.ndarray] = field(default_factory=dict)   # float32 [n]


# ---------------------------------------------------------------- encoding


def to_f32(t) -> np.ndarray:
    """A reader tensor (or Tensor) as float32 in numpy shape (dequantized)."""
    shape = tuple(t.shape)
    if t.type == F32:
        return np.array(t.data, dtype=np.float32).reshape(shape)
    if t.type == F16:
        return np.asarray(t.data).view(np.float16).astype(np.float32).reshape(shape)
    return np.asarray(_core.dequantize(t.type, np.ascontiguousarray(t.data).tobytes())).reshape(shape)


def encode(x: np.ndarray, type_id: int) -> Tensor:
    """Encode a float 2-D (or 1-D) array as type_id rows."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if type_id == F32:
        return Tensor(x, F32, x.shape)
    if type_id == F16:
        return Tensor(x.astype(np.float16), F16, x.shape)
    info = _core.type_info(type_id)
    if x.shape[-1] % info["blck_size"]:
        raise ValueError(f"rows of {x.shape[-1]} elements are not a whole number of {info['name']} blocks")
    return Tensor(np.asarray(_core.quantize(type_id, x.reshape(-1, x.shape[-1]))), type_id, x.shape)


def _fits(type_id: int, row_len: int) -> bool:
    info = _core.type_info(type_id)
    return row_len % info["blck_size"] == 0 and (info["has_from_float"] or type_id in (F32, F16))


# ---------------------------------------------------------------- rewrite

TensorLike = Union[Tensor, np.ndarray]


def _as_tensor(v: TensorLike) -> Tensor:
    if isinstance(v, Tensor):
        return v
    a = np.asarray(v)
    if a.dtype == np.int32:
        return Tensor(a, I32, a.shape)
    if a.dtype == np.float16:
        return Tensor(a, F16, a.shape)
    a = np.ascontiguousarray(a, dtype=np.float32)
    return Tensor(a, F32, a.shape)


def rewrite(src: str, dst: str, tensors: Optional[Mapping[str, Optional[TensorLike]]] = None,
            kv: Optional[Mapping[str, Optional[Tuple[object, object]]]] = None,
            drop_keys: Iterable[str] = (), drop_key_prefixes: Iterable[str] = ()) -> str:
    """Write ``dst``: ``src`` with tensors and keys added, replaced or removed.

    tensors: name -> Tensor / numpy array (F32, F16 or I32 by dtype), or None to
    remove. kv: key -> (value, type spec as for _core.GGUFWriter.add), or None to
    remove. Replaced entries keep their position, new ones go last. Everything
    else is copied unchanged (same value types, same tensor bytes and types).
    ``dst`` may equal ``src``. The output always has the GGUF magic."""
    tensors = dict(tensors or {})
    kv = dict(kv or {})
    drop = set(drop_keys)
    prefixes = tuple(drop_key_prefixes)
    r = _core.GGUFReader(src)
    meta, types = r.metadata, r.types
    w = _core.GGUFWriter()
    for key in r.keys:
        if key in kv:
            entry = kv[key]
            if entry is not None:
                w.add(key, entry[0], entry[1])
            continue
        if key in drop or (prefixes and key.startswith(prefixes)):
            continue
        w.add(key, meta[key], types[key])
    for key, entry in kv.items():
        if key not in meta and entry is not None:
            w.add(key, entry[0], entry[1])
    for t in r.tensors:
        if t.name in tensors:
            given = tensors.pop(t.name)
            if given is not None:
                x = _as_tensor(given)
                w.add_tensor(t.name, x.data, x.type, list(x.shape))
            continue
        w.add_tensor(t.name, t.data, t.type, list(t.shape))
    for name, given in tensors.items():
        if given is not None:
            x = _as_tensor(given)
            w.add_tensor(name, x.data, x.type, list(x.shape))
    w.write(dst)  # atomic: temp file, fsync, rename
    del r
    return dst


def _dims(r) -> Tuple[str, int, int, int]:
    arch = r.get("general.architecture")
    if arch is None:
        raise ValueError("not a model file: 'general.architecture' is missing")
    get = lambda k: r.get(f"{arch}.{k}")  # noqa: E731
    n_layer, n_embd, n_ff = get("block_count"), get("embedding_length"), get("feed_forward_length")
    if n_layer is None or n_embd is None or n_ff is None:
        raise ValueError(f"'{arch}.block_count', 'embedding_length' or 'feed_forward_length' is missing")
    return arch, int(n_layer), int(n_embd), int(n_ff)


def _layer_list(values, n_layer: int, what: str) -> List:
    """A per-layer sequence or {layer: value} mapping -> list (None where absent)."""
    if values is None:
        return [None] * n_layer
    if isinstance(values, Mapping):
        bad = [k for k in values if not 0 <= int(k) < n_layer]
        if bad:
            raise ValueError(f"{what}: layer {bad[0]} out of range [0, {n_layer})")
        return [values.get(i) for i in range(n_layer)]
    values = list(values)
    if len(values) != n_layer:
        raise ValueError(f"{what}: {len(values)} entries, expected {n_layer} (one per layer)")
    return values


def _as_placement(p: Union[Placement, Mapping]) -> Placement:
    if isinstance(p, Mapping):
        return Placement(int(p["budget_bytes"]), str(p.get("solver", "")), float(p.get("objective", 0.0)),
                         list(p["gpu_neurons"]))
    return p


def placement_kv(placements: Sequence[Union[Placement, Mapping]], n_layer: Optional[int] = None,
                 n_ff: Optional[int] = None) -> Dict[str, Tuple]:
    """The keys of a placement section (for rewrite's kv), entries sorted by budget.

    Checks what every reader requires: at least one entry, no two for the same
    budget, budgets in [0, 2^64), n_layer values of k per entry (the first entry's
    count when n_layer is None), each in [0, n_ff] (or [0, 2^31) without n_ff)."""
    pls = sorted((_as_placement(p) for p in placements), key=lambda p: p.budget_bytes)
    if not pls:
        raise PlacementError("no placements to write")
    for a, b in zip(pls, pls[1:]):
        if a.budget_bytes == b.budget_bytes:
            raise PlacementError(f"two placements for the same budget ({a.budget_bytes} bytes)")
    L = len(pls[0].gpu_neurons) if n_layer is None else int(n_layer)
    hi = int(n_ff) if n_ff is not None else int(np.iinfo(np.int32).max)
    out: Dict[str, Tuple] = {K.PLACEMENT_COUNT: (len(pls), _T.GGUF_TYPE_UINT32)}
    for i, p in enumerate(pls):
        key = f"{K.PLACEMENT_PREFIX}{i}.".__add__  # pinfer.placement.<i>.<field>
        k = np.asarray(p.gpu_neurons, dtype=np.int64)
        if k.shape != (L,):
            raise PlacementError(f"{key(K.PLACEMENT_GPU_NEURONS)}: {k.size} entries, expected {L} (one per layer)")
        if (k < 0).any() or (k > hi).any():
            raise PlacementError(f"{key(K.PLACEMENT_GPU_NEURONS)}: values must lie in [0, {hi}]")
        if not 0 <= p.budget_bytes < 1 << 64:
            raise PlacementError(f"{key(K.PLACEMENT_BUDGET_BYTES)}: {p.budget_bytes} is outside [0, 2^64)")
        out[key(K.PLACEMENT_BUDGET_BYTES)] = (int(p.budget_bytes), _T.GGUF_TYPE_UINT64)
        out[key(K.PLACEMENT_SOLVER)] = (str(p.solver), _T.GGUF_TYPE_STRING)
        out[key(K.PLACEMENT_OBJECTIVE)] = (float(p.objective), _T.GGUF_TYPE_FLOAT64)
        out[key(K.PLACEMENT_GPU_NEURONS)] = (k.astype(np.int32), (_T.GGUF_TYPE_ARRAY, _T.GGUF_TYPE_INT32))
    return out


def add_placements(writer, placements: Sequence[Union[Placement, Mapping]], n_layer: Optional[int] = None,
                   n_ff: Optional[int] = None) -> None:
    """Add the placement section to a ``pinfer._core.GGUFWriter`` or a ``gguf.GGUFWriter``."""
    kv = placement_kv(placements, n_layer, n_ff)
    if not hasattr(writer, "add_uint64"):  # pinfer's own writer takes the type spec
        for key, (v, t) in kv.items():
            writer.add(key, v, t)
        return
    import gguf  # the gguf package's writer: one method per type
    for key, (v, t) in kv.items():
        if t == _T.GGUF_TYPE_UINT32:
            writer.add_uint32(key, v)
        elif t == _T.GGUF_TYPE_UINT64:
            writer.add_uint64(key, v)
        elif t == _T.GGUF_TYPE_STRING:
            writer.add_string(key, v)
        elif t == _T.GGUF_TYPE_FLOAT64:
            writer.add_float64(key, v)
        else:
            writer.add_key_value(key, [int(x) for x in v], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT32)


def _placement_dims(r) -> Tuple[Optional[int], Optional[int]]:
    """(n_layer, n_ff) of a reader's model when its keys give them, else None."""
    arch = r.get("general.architecture")
    if arch is None:
        return None, None
    n_layer, n_ff = r.get(f"{arch}.block_count"), r.get(f"{arch}.feed_forward_length")
    if n_ff is not None and not isinstance(n_ff, (int, np.integer)):
        n_ff = max(int(x) for x in n_ff)  # per-layer sizes: the largest bounds every k
    return (None if n_layer is None else int(n_layer)), (None if n_ff is None else int(n_ff))


def write_placements(src: str, dst: str, placements: Sequence[Union[Placement, Mapping]]) -> str:
    """``src`` with its placement section replaced by ``placements`` (dst may be src)."""
    r = _core.GGUFReader(src)
    n_layer, n_ff = _placement_dims(r)
    del r
    kv = placement_kv(placements, n_layer, n_ff)  # validated before any tensor is read
    return rewrite(src, dst, kv=kv, drop_key_prefixes=(K.PLACEMENT_PREFIX,))


def read_placements(reader, n_layer: Optional[int] = None, n_ff: Optional[int] = None) -> List[Placement]:
    """The placement section of a GGUF (a ``pinfer._core.GGUFReader``, or a metadata dict).

    Returns [] when the file has none; raises PlacementError when it is malformed."""
    get = reader.get
    count = get(K.PLACEMENT_COUNT)
    if count is None:
        return []
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1 or count > 1 << 16:
        raise PlacementError(f"{K.PLACEMENT_COUNT}: expected a positive integer, got {count!r}")
    out: List[Placement] = []
    for i in range(int(count)):
        key = f"{K.PLACEMENT_PREFIX}{i}.".__add__  # pinfer.placement.<i>.<field>
        b, k = get(key(K.PLACEMENT_BUDGET_BYTES)), get(key(K.PLACEMENT_GPU_NEURONS))
        s, o = get(key(K.PLACEMENT_SOLVER), ""), get(key(K.PLACEMENT_OBJECTIVE), 0.0)
        if b is None or k is None:
            raise PlacementError(f"placement {i}: '{key(K.PLACEMENT_BUDGET_BYTES)}' or "
                                 f"'{K.PLACEMENT_GPU_NEURONS}' is missing")
        if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 0:
            raise PlacementError(f"{key(K.PLACEMENT_BUDGET_BYTES)}: expected an unsigned integer, got {b!r}")
        if not isinstance(s, str):
            raise PlacementError(f"{key(K.PLACEMENT_SOLVER)}: expected a string")
        if isinstance(o, bool) or not isinstance(o, (int, float, np.integer, np.floating)):
            raise PlacementError(f"{key(K.PLACEMENT_OBJECTIVE)}: expected a number")
        k = np.asarray(k)
        if k.ndim != 1 or k.dtype.kind not in "iu" or np.any(k < 0):
            raise PlacementError(f"{key(K.PLACEMENT_GPU_NEURONS)}: expected an array of integers >= 0")
        if n_layer is not None and k.size != n_layer:
            raise PlacementError(f"{key(K.PLACEMENT_GPU_NEURONS)}: {k.size} entries for {n_layer} layers")
        if n_ff is not None and np.any(k > n_ff):
            raise PlacementError(f"{key(K.PLACEMENT_GPU_NEURONS)}: values must lie in [0, {n_ff}]")
        if out and int(b) <= out[-1].budget_bytes:
            raise PlacementError(f"{key(K.PLACEMENT_BUDGET_BYTES)}: entries must have increasing budgets")
        out.append(Placement(int(b), s, float(o), [int(x) for x in k]))
    return out


def add_sparse(src: str, dst: str, predictors=None, freqs=None, threshold: Optional[float] = None,
               act_thresholds=None, mode_hint: Optional[str] = None,
               placements: Optional[Sequence[Union[Placement, Mapping]]] = None,
               predictor_type: int = F32) -> str:
    """Add or replace pinfer tensors and keys.

    predictors: per layer (list or {layer: ...}) a pair (A [r, d], B [n, r]) as
    float arrays, stored as fc1 / fc2 of predictor_type (F32 default).
    freqs: per layer float [n] -> ffn_freq. placements: replaces the whole
    placement section. Only the arguments given are touched."""
    r = _core.GGUFReader(src)
    _, n_layer, d, n = _dims(r)
    del r
    tensors: Dict[str, TensorLike] = {}
    kv: Dict[str, Optional[Tuple]] = {}
    for il, p in enumerate(_layer_list(predictors, n_layer, "predictors")):
        if p is None:
            continue
        a, b = (np.asarray(x, dtype=np.float32) for x in p)
        if a.ndim != 2 or a.shape[1] != d:
            raise ValueError(f"blk.{il}.fc1.weight: shape {a.shape}, expected (r, {d})")
        if b.shape != (n, a.shape[0]):
            raise ValueError(f"blk.{il}.fc2.weight: shape {b.shape}, expected ({n}, {a.shape[0]})")
        tensors[f"blk.{il}.fc1.weight"] = encode(a, predictor_type)
        tensors[f"blk.{il}.fc2.weight"] = encode(b, predictor_type)
    for il, f in enumerate(_layer_list(freqs, n_layer, "freqs")):
        if f is None:
            continue
        f = np.asarray(f, dtype=np.float32)
        if f.shape != (n,):
            raise ValueError(f"blk.{il}.ffn_freq: shape {f.shape}, expected ({n},)")
        tensors[f"blk.{il}.ffn_freq"] = f
    if threshold is not None:
        kv[K.SPARSE_THRESHOLD] = (float(threshold), _T.GGUF_TYPE_FLOAT32)
    if act_thresholds is not None:
        a = np.asarray(act_thresholds, dtype=np.float32)
        if a.shape != (n_layer,):
            raise ValueError(f"{K.SPARSE_ACT_THRESHOLDS}: {a.size} entries, expected {n_layer} (one per layer)")
        kv[K.SPARSE_ACT_THRESHOLDS] = (a, (_T.GGUF_TYPE_ARRAY, _T.GGUF_TYPE_FLOAT32))
    if mode_hint is not None:
        kv[K.SPARSE_MODE_HINT] = (mode_hint, _T.GGUF_TYPE_STRING)
    drop_prefixes: Tuple[str, ...] = ()
    if placements is not None:
        kv.update(placement_kv(placements, n_layer, n))
        drop_prefixes = (K.PLACEMENT_PREFIX,)  # old entries not rewritten go
    return rewrite(src, dst, tensors, kv, drop_key_prefixes=drop_prefixes)


def add_down_t(src: str, dst: str, type_id: Optional[int] = None) -> str:
    """Add blk.N.ffn_down_t.weight = ffn_down transposed (one row of d per neuron).

    ffn_down is dequantized, transposed and encoded again in its own type (or
    type_id) when a row of d elements is a whole number of its blocks, else F16."""
    r = _core.GGUFReader(src)
    _, n_layer, d, n = _dims(r)
    by_name = {t.name: t for t in r.tensors}
    tensors = {}
    for il in range(n_layer):
        name = f"blk.{il}.ffn_down.weight"
        if name not in by_name:
            raise ValueError(f"model tensor '{name}' is missing")
        t = by_name[name]
        if tuple(t.shape) != (d, n):
            raise ValueError(f"model tensor '{name}' has shape {tuple(t.shape)}, expected ({d}, {n})")
        want = t.type if type_id is None else type_id
        out = want if _fits(want, d) else F16
        tensors[f"blk.{il}.ffn_down_t.weight"] = encode(np.ascontiguousarray(to_f32(t).T), out)
    return rewrite(src, dst, tensors)


# ---------------------------------------------------------------- permutation


def _permute_rows(t, perm: np.ndarray) -> Tensor:
    """Rows (the outer numpy axis) reordered: exact for every type (rows are whole blocks)."""
    data = np.asarray(t.data)
    return Tensor(np.ascontiguousarray(data[perm]), t.type, tuple(t.shape))


def _permute_cols(t, perm: np.ndarray, allow_requantize: bool, name: str) -> Tensor:
    """Columns (the contiguous axis) reordered: exact for plain types; block
    types must be decoded and encoded again (lossy)."""
    info = _core.type_info(t.type)
    shape = tuple(t.shape)
    if info["blck_size"] == 1:
        raw = np.ascontiguousarray(t.data).view(np.uint8).reshape(shape[0], shape[1], info["type_size"])
        return Tensor(np.ascontiguousarray(raw[:, perm, :]).reshape(shape[0], -1), t.type, shape)
    if not allow_requantize:
        raise ValueError(f"'{name}' is {info['name']}: permuting its columns would re-quantize it (lossy); "
                         "permute before quantizing, or pass allow_requantize=True")
    x = to_f32(t)[:, perm]
    return encode(x, t.type)


def hot_first_permutation(freq: np.ndarray) -> np.ndarray:
    """Neuron order by descending frequency (ties keep their order)."""
    return np.argsort(-np.asarray(freq, dtype=np.float64), kind="stable")


def permutation_from_gpu_sets(gpu_sets: Sequence[Sequence[int]], n_ff: int, freqs=None) -> List[np.ndarray]:
    """Per layer: the GPU neurons first, then the rest (each group by descending
    frequency when freqs are given, else by id). After permute_neurons with it,
    a .gpuidx set of size k_l is the prefix [0, k_l)."""
    out = []
    for il, s in enumerate(gpu_sets):
        on = np.zeros(n_ff, dtype=bool)
        on[np.asarray(s, dtype=np.int64)] = True
        key = np.zeros(n_ff) if freqs is None else -np.asarray(freqs[il], dtype=np.float64)
        order = np.lexsort((np.arange(n_ff), key, ~on))  # GPU first, then by key, then id
        out.append(order)
    return out


def permute_neurons(src: str, dst: str, perms, neuron_order: Optional[str] = HOT_FIRST,
                    allow_requantize: bool = False) -> str:
    """Reorder each layer's FFN neurons: new neuron j is old neuron perm[j].

    One permutation per layer is applied to everything indexed by neuron (gate
    and up rows and biases, down columns, ffn_down_t rows, fc2 rows, ffn_freq),
    so the model computes the same function. Sets pinfer.neuron_order to
    neuron_order (None removes it). The placement section refers to the old
    order and is removed unless every permutation is the identity."""
    r = _core.GGUFReader(src)
    _, n_layer, d, n = _dims(r)
    by_name = {t.name: t for t in r.tensors}
    perms = _layer_list(perms, n_layer, "perms")
    tensors: Dict[str, Tensor] = {}
    identity = True
    for il, perm in enumerate(perms):
        if perm is None:
            continue
        perm = np.asarray(perm, dtype=np.int64)
        if perm.shape != (n,) or not np.array_equal(np.sort(perm), np.arange(n)):
            raise ValueError(f"perms[{il}] is not a permutation of range({n})")
        identity &= bool(np.array_equal(perm, np.arange(n)))
        p = f"blk.{il}."
        for nm in ("ffn_gate.weight", "ffn_up.weight", "ffn_gate.bias", "ffn_up.bias", "ffn_down_t.weight",
                   "fc2.weight", "ffn_freq"):
            t = by_name.get(p + nm)
            if t is not None:
                if t.shape[0] != n:
                    raise ValueError(f"model tensor '{p + nm}' has {t.shape[0]} rows, expected {n}")
                tensors[p + nm] = _permute_rows(t, perm)
        t = by_name.get(p + "ffn_down.weight")
        if t is not None:
            if tuple(t.shape) != (d, n):
                raise ValueError(f"model tensor '{p}ffn_down.weight' has shape {tuple(t.shape)}, expected ({d}, {n})")
            tensors[p + "ffn_down.weight"] = _permute_cols(t, perm, allow_requantize, p + "ffn_down.weight")
    has_placements = r.get(K.PLACEMENT_COUNT) is not None
    del r, by_name
    kv = {K.NEURON_ORDER: (neuron_order, _T.GGUF_TYPE_STRING) if neuron_order else None}
    prefixes: Tuple[str, ...] = ()
    if has_placements and not identity:
        warnings.warn("permute_neurons: the placement section referred to the old neuron order and was removed",
                      stacklevel=2)
        prefixes = (K.PLACEMENT_PREFIX,)
    return rewrite(src, dst, tensors, kv, drop_key_prefixes=prefixes)


def make_hot_first(src: str, dst: str, freqs=None, allow_requantize: bool = False) -> List[np.ndarray]:
    """Permute every layer into descending frequency (the file's ffn_freq unless
    freqs is given, which is then stored too); returns the permutations."""
    info = read(src)
    if freqs is None:
        if len(info.freqs) != info.n_layer:
            raise ValueError("no blk.N.ffn_freq in the file: give freqs")
        freqs = [info.freqs[i] for i in range(info.n_layer)]
    else:
        freqs = _layer_list(freqs, info.n_layer, "freqs")
        add_sparse(src, dst, freqs=freqs)
        src = dst
    perms = [hot_first_permutation(f) for f in freqs]
    permute_neurons(src, dst, perms, HOT_FIRST, allow_requantize)
    return perms


# ---------------------------------------------------------------- reading


def read(path: str) -> ExtendedInfo:
    """Everything neuron-aware in a file (float32 arrays, dequantized)."""
    r: Any = _core.GGUFReader(path)  # metadata values are typed by the file
    arch, n_layer, d, n = _dims(r)
    info = ExtendedInfo(arch, n_layer, d, n, powerinfer=bool(r.is_powerinfer))
    info.neuron_order = r.get(K.NEURON_ORDER)
    thr = r.get(K.SPARSE_THRESHOLD)
    if thr is None:
        thr = r.get(K.POWERINFER_THRESHOLD)
        info.powerinfer |= thr is not None
    info.threshold = float(thr) if thr is not None else 0.0
    a = r.get(K.SPARSE_ACT_THRESHOLDS)
    info.act_thresholds = None if a is None else np.asarray(a, dtype=np.float32)
    info.mode_hint = r.get(K.SPARSE_MODE_HINT)
    info.placements = read_placements(r, n_layer, n)
    by_name = {t.name: t for t in r.tensors}
    for il in range(n_layer):
        p = f"blk.{il}."
        if p + "fc1.weight" in by_name and p + "fc2.weight" in by_name:
            info.predictors[il] = (to_f32(by_name[p + "fc1.weight"]), to_f32(by_name[p + "fc2.weight"]))
        if p + "ffn_down_t.weight" in by_name:
            info.down_t[il] = to_f32(by_name[p + "ffn_down_t.weight"])
        if p + "ffn_freq" in by_name:
            info.freqs[il] = to_f32(by_name[p + "ffn_freq"])
    return info


# ---------------------------------------------------------------- PowerInfer .gpuidx

@dataclass
class GpuIdx:
    vram_capacity: int
    gpu_idx: List[np.ndarray]     # int32 [n] per layer, 1 = on the GPU
    gpu_bucket: List[np.ndarray]  # int32 GPU neuron ids per layer


def read_gpuidx(path: str) -> GpuIdx:
    """A PowerInfer .gpuidx file (magic PWRI or GGUF)."""
    r: Any = _core.GGUFReader(path)
    by_name = {t.name: t for t in r.tensors}
    idx, bucket = [], []
    il = 0
    while K.blk(il, K.GPUIDX_TENSOR_IDX) in by_name:
        idx.append(np.array(by_name[K.blk(il, K.GPUIDX_TENSOR_IDX)].data, dtype=np.int32))
        b = by_name.get(K.blk(il, K.GPUIDX_TENSOR_BUCKET))
        if b is None:
            raise ValueError(f"gpuidx file '{path}': tensor '{K.blk(il, K.GPUIDX_TENSOR_BUCKET)}' is missing")
        bucket.append(np.array(b.data, dtype=np.int32))
        il += 1
    return GpuIdx(int(r.get(K.GPUIDX_VRAM_CAPACITY, 0)), idx, bucket)


def set_magic(path: str, magic: bytes) -> None:
    """Overwrite the 4-byte magic (PowerInfer marks its files with b"PWRI")."""
    if len(magic) != 4:
        raise ValueError("a magic is 4 bytes")
    with open(path, "r+b") as f:
        f.write(magic)
        f.flush()
        os.fsync(f.fileno())


def write_gpuidx(path: str, gpu_sets: Sequence[Sequence[int]], n_ff: int, vram_capacity: int = 0,
                 magic: bytes = POWERINFER_MAGIC) -> str:
    """Write a .gpuidx file in PowerInfer's layout: per layer blk.N.gpu_idx
    (I32 [n_ff], 1 = GPU) and blk.N.gpu_bucket (I32, GPU ids ascending),
    split.vram_capacity, magic PWRI (pass b"GGUF" for a plain GGUF)."""
    w = _core.GGUFWriter()
    w.add("general.architecture", K.GPUIDX_ARCH, _T.GGUF_TYPE_STRING)
    w.add(f"{K.GPUIDX_ARCH}.block_count", len(gpu_sets), _T.GGUF_TYPE_UINT32)
    w.add(K.GPUIDX_VRAM_CAPACITY, int(vram_capacity), _T.GGUF_TYPE_UINT64)
    for il, s in enumerate(gpu_sets):
        ids = np.unique(np.asarray(s, dtype=np.int64))
        if ids.size and (ids[0] < 0 or ids[-1] >= n_ff):
            raise ValueError(f"gpu_sets[{il}]: neuron ids must lie in [0, {n_ff})")
        g = np.zeros(n_ff, dtype=np.int32)
        g[ids] = 1
        w.add_tensor(K.blk(il, K.GPUIDX_TENSOR_IDX), g, I32, [n_ff])
        w.add_tensor(K.blk(il, K.GPUIDX_TENSOR_BUCKET), ids.astype(np.int32), I32, [int(ids.size)])
    with atomic_output(path) as tmp:
        w.write(tmp)
        if magic != b"GGUF":
            set_magic(tmp, magic)
    return path
