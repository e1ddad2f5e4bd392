"""Prompt caches for :meth:`pinfer.Llama.set_cache`, as llama-cpp-python names them.

A cache maps token sequences to :class:`~pinfer.llama.LlamaState` snapshots (the KV
cache of those tokens and the last logits). Looking a prompt up returns the state
whose tokens share the longest prefix with it (``KeyError`` if none shares one);
storing past ``capacity_bytes`` evicts the least recently used states.

:class:`LlamaRAMCache` keeps states in memory. :class:`LlamaDiskCache` keeps one
``.npz`` file per state in a directory (no pickle: a cache directory is data, and
loading it runs no code); files are written atomically, survive the process, and a
file that is not a readable state is skipped with a notice.
"""
from __future__ import annotations

import hashlib
import os
import sys
from collections import OrderedDict
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from .llama import Llama, LlamaState

__all__ = ["BaseLlamaCache", "LlamaCache", "LlamaRAMCache", "LlamaDiskCache"]

Key = Tuple[int, ...]


def _key(tokens: Sequence[int]) -> Key:
    return tuple(int(t) for t in tokens)


def _capacity(capacity_bytes: int) -> int:
    if isinstance(capacity_bytes, bool) or not isinstance(capacity_bytes, int) or capacity_bytes < 0:
        raise ValueError(f"capacity_bytes must be an int >= 0, got {capacity_bytes!r}")
    return capacity_bytes


class BaseLlamaCache:
    """The lookup rule shared by both caches; subclasses store the states."""

    def __init__(self, capacity_bytes: int = 2 << 30) -> None:
        self.capacity_bytes = _capacity(capacity_bytes)

    @property
    def cache_size(self) -> int:
        """Bytes held now."""
        raise NotImplementedError

    def _keys(self):
        raise NotImplementedError

    def _find_longest_prefix_key(self, key: Sequence[int]) -> Optional[Key]:
        key = _key(key)
        best, best_len = None, 0
        for k in self._keys():
            n = Llama.longest_token_prefix(k, key)
            if n > best_len:
                best, best_len = k, n
        return best

    def __contains__(self, key: Sequence[int]) -> bool:
        return self._find_longest_prefix_key(key) is not None

    def __getitem__(self, key: Sequence[int]) -> LlamaState:
        raise NotImplementedError

    def __setitem__(self, key: Sequence[int], value: LlamaState) -> None:
        raise NotImplementedError


class LlamaRAMCache(BaseLlamaCache):
    """States in memory, least recently used evicted past ``capacity_bytes``."""

    def __init__(self, capacity_bytes: int = 2 << 30) -> None:
        super().__init__(capacity_bytes)
        self.cache_state: "OrderedDict[Key, LlamaState]" = OrderedDict()

    @property
    def cache_size(self) -> int:
        return sum(s.llama_state_size for s in self.cache_state.values())

    def _keys(self):
        return self.cache_state.keys()

    def __getitem__(self, key: Sequence[int]) -> LlamaState:
        k = self._find_longest_prefix_key(key)
        if k is None:
            raise KeyError("no cached state shares a prefix with these tokens")
        self.cache_state.move_to_end(k)
        return self.cache_state[k]

    def __setitem__(self, key: Sequence[int], value: LlamaState) -> None:
        if not isinstance(value, LlamaState):
            raise TypeError(f"a cache stores LlamaState values, got {type(value).__name__}")
        k = _key(key)
        self.cache_state.pop(k, None)
        self.cache_state[k] = value
        while self.cache_state and self.cache_size > self.capacity_bytes:
            self.cache_state.popitem(last=False)


#: llama-cpp-python's name of the RAM cache.
LlamaCache = LlamaRAMCache


# ---- a state as plain arrays (the disk format) ----

def _to_arrays(key: Key, s: LlamaState) -> Dict[str, np.ndarray]:
    version, internal, gauss = s.seed_state
    out: Dict[str, np.ndarray] = {
        "key": np.asarray(key, dtype=np.int64),
        "input_ids": np.asarray(s.input_ids, dtype=np.int32),
        "hist_tokens": np.concatenate([t for t, _ in s.history]).astype(np.int32) if s.history
        else np.zeros(0, np.int32),
        "hist_sizes": np.asarray([len(t) for t, _ in s.history], dtype=np.int64),
        "hist_kept": np.asarray([k for _, k in s.history], dtype=np.int64),
        "seed_version": np.asarray(version, dtype=np.int64),
        "seed_internal": np.asarray(internal, dtype=np.int64),
        "seed_gauss": np.asarray(np.nan if gauss is None else gauss, dtype=np.float64),
        "n_ctx": np.asarray(s.n_ctx, dtype=np.int64),
        "model_path": np.asarray(str(s.model_path)),
    }
    for name in ("logits", "scores", "kv"):
        v = getattr(s, name, None)
        if v is not None:
            out[name] = np.asarray(v)
    return out


def _from_arrays(z) -> Tuple[Key, LlamaState]:
    sizes = z["hist_sizes"].tolist()
    toks, kept = z["hist_tokens"], z["hist_kept"].tolist()
    bounds = np.cumsum([0] + sizes)
    history = [(toks[a:b].astype(np.int32), int(k)) for a, b, k in zip(bounds[:-1], bounds[1:], kept)]
    gauss = float(z["seed_gauss"])
    seed_state = (int(z["seed_version"]), tuple(int(x) for x in z["seed_internal"]),
                  None if np.isnan(gauss) else gauss)
    def get(n):
        return z[n] if n in z.files else None

    state = LlamaState(history, z["input_ids"], get("logits"), get("scores"), seed_state, int(z["n_ctx"]),
                       str(z["model_path"]), get("kv"))
    return tuple(int(t) for t in z["key"]), state


class LlamaDiskCache(BaseLlamaCache):
    """States as files in ``cache_dir`` (created if missing), least recently used
    evicted past ``capacity_bytes`` (files found at start are ordered by their time)."""

    def __init__(self, cache_dir: str = ".cache/llama_cache", capacity_bytes: int = 2 << 30) -> None:
        super().__init__(capacity_bytes)
        self.cache_dir = os.fspath(cache_dir)
        if os.path.exists(self.cache_dir) and not os.path.isdir(self.cache_dir):
            raise ValueError(f"cache_dir {self.cache_dir!r} exists and is not a directory")
        os.makedirs(self.cache_dir, exist_ok=True)
        self._index: "OrderedDict[Key, str]" = OrderedDict()  # key -> file, least recently used first
        names = [n for n in os.listdir(self.cache_dir) if n.endswith(".npz")]
        names.sort(key=lambda n: os.path.getmtime(os.path.join(self.cache_dir, n)))
        for name in names:
            path = os.path.join(self.cache_dir, name)
            try:
                with np.load(path, allow_pickle=False) as z:
                    self._index[tuple(int(t) for t in z["key"])] = path
            except Exception as e:  # a foreign or damaged file: not ours to delete
                print(f"pinfer: notice: prompt cache: skipping {path}: {type(e).__name__}: {e}", file=sys.stderr)

    def _path(self, key: Key) -> str:
        return os.path.join(self.cache_dir, hashlib.sha256(np.asarray(key, np.int64).tobytes()).hexdigest()[:32]
                            + ".npz")

    @property
    def cache_size(self) -> int:
        return sum(os.path.getsize(p) for p in self._index.values() if os.path.exists(p))

    def _keys(self):
        return list(self._index)

    def __getitem__(self, key: Sequence[int]) -> LlamaState:
        k = self._find_longest_prefix_key(key)
        if k is None:
            raise KeyError("no cached state shares a prefix with these tokens")
        path = self._index[k]
        try:
            with np.load(path, allow_pickle=False) as z:
                _, state = _from_arrays(z)
        except FileNotFoundError:
            del self._index[k]
            raise KeyError("the cached state's file was removed") from None
        os.utime(path)  # most recently used, for the next process too
        self._index.move_to_end(k)
        return state

    def __setitem__(self, key: Sequence[int], value: LlamaState) -> None:
        from .outfile import atomic_output

        if not isinstance(value, LlamaState):
            raise TypeError(f"a cache stores LlamaState values, got {type(value).__name__}")
        k = _key(key)
        path = self._path(k)
        with atomic_output(path, what="prompt cache entry") as tmp:
            with open(tmp, "wb") as f:
                np.savez(f, **_to_arrays(k, value))  # type: ignore[arg-type]  # numpy's stub types the kwargs as allow_pickle
        self._index.pop(k, None)
        self._index[k] = path
        while self._index and self.cache_size > self.capacity_bytes:
            _, p = self._index.popitem(last=False)
            if os.path.exists(p):
                os.remove(p)
