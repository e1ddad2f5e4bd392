"""Checks of Python arguments before they reach the extension: a wrong type is
a TypeError and a bad value a ValueError, each naming the argument, instead of
nanobind's "incompatible function arguments", an OverflowError or a C++
std::bad_cast from deep inside."""
from __future__ import annotations

import math
import numbers
from typing import List, Optional, Sequence, Union

INT32_MAX = 2**31 - 1


def as_int(name: str, v, lo: Optional[int] = None, hi: Optional[int] = INT32_MAX) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    v = int(v)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        rng = f"[{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}]"
        raise ValueError(f"{name} must be in {rng}, got {v}")
    return v


def as_float(name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(v).__name__}")
    f = float(v)
    if math.isnan(f):
        raise ValueError(f"{name} is NaN")
    return f


def as_utf8(name: str, text: Union[str, bytes]) -> bytes:
    """str as UTF-8 (a lone surrogate cannot be encoded: a ValueError saying where), or bytes."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        return bytes(text)
    if not isinstance(text, str):
        raise TypeError(f"{name} must be str or bytes, got {type(text).__name__}")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{name} is not valid Unicode: {text[e.start]!r} at position {e.start} "
                         f"(a lone surrogate) cannot be encoded as UTF-8") from None


def as_str_list(name: str, v) -> List[str]:
    """None, a str, or a sequence of str."""
    if v is None:
        return []
    if isinstance(v, str):
        return [v]
    if isinstance(v, (bytes, bytearray)) or not isinstance(v, Sequence):
        raise TypeError(f"{name} must be a str or a list of str, got {type(v).__name__}")
    for i, s in enumerate(v):
        if not isinstance(s, str):
            raise TypeError(f"{name}[{i}] must be a str, got {type(s).__name__}")
    return list(v)


def as_token_ids(name: str, tokens, n_vocab: int) -> List[int]:
    """A sequence of token ids, each in [0, n_vocab)."""
    if isinstance(tokens, (str, bytes)) or not hasattr(tokens, "__iter__"):
        raise TypeError(f"{name} must be a sequence of token ids, got {type(tokens).__name__}")
    out = []
    for t in tokens:
        if isinstance(t, bool) or not isinstance(t, numbers.Integral):
            raise TypeError(f"{name} must hold ints, got {type(t).__name__}")
        t = int(t)
        if not 0 <= t < n_vocab:
            raise ValueError(f"token id {t} is out of range [0, {n_vocab})")
        out.append(t)
    return out
