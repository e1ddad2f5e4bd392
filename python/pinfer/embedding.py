"""Sentence embeddings from an embedding context's per-token hidden states.

An embedding context (``_core.Context(..., embeddings=True)``) outputs the final-norm
hidden state of each token, the same vector transformers' ``last_hidden_state`` holds.
Pooling turns a sequence of them into one vector. The pooling kinds and their numbers
are llama.cpp's (``enum llama_pooling_type``, GGUF key ``<arch>.pooling_type``).
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

#: llama.cpp's pooling ids (LLAMA_POOLING_TYPE_*) by name; -1 is "unspecified".
POOLING = {"none": 0, "mean": 1, "cls": 2, "last": 3}
POOLING_NAMES = {v: k for k, v in POOLING.items()}


def pooling_kind(value: Any, from_file: Optional[str]) -> str:
    """The pooling to use: the argument (a name, or llama.cpp's number; None or -1:
    unspecified), else the file's ``<arch>.pooling_type``, else mean."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value == -1):
        if from_file is not None:
            try:
                value = int(from_file)
            except ValueError:
                raise ValueError(f"the model's pooling_type {from_file!r} is not a number") from None
            if value == -1:
                return "mean"
        else:
            return "mean"
    if isinstance(value, str):
        if value not in POOLING:
            raise ValueError(f"pooling_type {value!r} is not one of {', '.join(POOLING)}")
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"pooling_type must be a name or llama.cpp's number, got {type(value).__name__}")
    if value not in POOLING_NAMES:
        raise ValueError(f"pooling_type {value} is not supported (none 0, mean 1, cls 2, last 3; rank 4 needs "
                         "a reranker head)")
    return POOLING_NAMES[value]


def pool(hidden: np.ndarray, kind: str) -> np.ndarray:
    """[n, d] per-token hidden states -> [d] (mean / cls: the first token / last),
    or [n, d] unchanged for "none"; computed in float64."""
    h = np.asarray(hidden, dtype=np.float64)
    if kind == "mean":
        return h.mean(axis=0)
    if kind == "cls":
        return h[0]
    if kind == "last":
        return h[-1]
    return h


def normalize(v: np.ndarray) -> np.ndarray:
    """Unit Euclidean norm along the last axis (a zero vector stays zero)."""
    n = np.linalg.norm(v, axis=-1, keepdims=True)
    return np.where(n > 0, v / np.where(n > 0, n, 1.0), v)
