"""Per-token hooks of llama-cpp-python: logits processors, stopping criteria, logit_bias.

A logits processor is ``f(input_ids, scores) -> scores`` with ``input_ids`` the
int32 tokens so far (prompt and generated) and ``scores`` a float32 copy of the next
token's logits; processors run before the sampler chain. A stopping criterion is
``f(input_ids, logits) -> bool``, checked after each generated token (which
``input_ids`` then ends with); True ends the completion with finish_reason "stop".
"""
from __future__ import annotations

import numbers
from typing import Callable, List, Mapping

import numpy as np
import numpy.typing as npt

__all__ = ["LogitsProcessor", "LogitsProcessorList", "StoppingCriteria", "StoppingCriteriaList",
           "logit_bias_processor"]

LogitsProcessor = Callable[[npt.NDArray[np.intc], npt.NDArray[np.single]], npt.NDArray[np.single]]
StoppingCriteria = Callable[[npt.NDArray[np.intc], npt.NDArray[np.single]], bool]


class LogitsProcessorList(List[LogitsProcessor]):
    """Processors applied in order, each to the previous one's result."""

    def __call__(self, input_ids: npt.NDArray[np.intc], scores: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        for p in self:
            scores = p(input_ids, scores)
        return scores


class StoppingCriteriaList(List[StoppingCriteria]):
    """Stops when any criterion says so."""

    def __call__(self, input_ids: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> bool:
        return any(c(input_ids, logits) for c in self)


def logit_bias_processor(logit_bias: Mapping, n_vocab: int) -> LogitsProcessor:
    """``{token_id: bias}`` added to the logits (keys may be ints or their strings, as
    OpenAI's JSON sends them; a bias of -100 or less bans the token, +100 forces it)."""
    if not isinstance(logit_bias, Mapping):
        raise TypeError(f"logit_bias must be a dict of token id -> bias, got {type(logit_bias).__name__}")
    ids: List[int] = []
    vals: List[float] = []
    for k, v in logit_bias.items():
        try:
            t = int(k)
        except (TypeError, ValueError):
            raise ValueError(f"logit_bias: key {k!r} is not a token id") from None
        if not 0 <= t < n_vocab:
            raise ValueError(f"logit_bias: token id {t} is out of range [0, {n_vocab})")
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or v != v:
            raise ValueError(f"logit_bias[{k!r}] must be a number, got {v!r}")
        ids.append(t)
        vals.append(float(v))
    idx = np.asarray(ids, dtype=np.int64)
    add = np.asarray(vals, dtype=np.float32)

    def apply(input_ids: npt.NDArray[np.intc], scores: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        scores[idx] += add
        return scores

    return apply


def as_processors(name: str, v) -> List[Callable]:
    """None, one callable, or a list of callables."""
    if v is None:
        return []
    if callable(v) and not isinstance(v, list):
        return [v]
    if isinstance(v, (list, tuple)) and all(callable(p) for p in v):
        return list(v)
    raise TypeError(f"{name} must be a callable or a list of callables, got {type(v).__name__}")

