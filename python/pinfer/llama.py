"""``pinfer.Llama``: the high-level API, shaped like llama-cpp-python's ``Llama``.

Example::

    from pinfer import Llama
    with Llama("model.gguf", n_ctx=2048) as llm:
        out = llm("Q: Name the planets. A:", max_tokens=64, stop=["Q:"])
        print(out["choices"][0]["text"])
        for chunk in llm.create_chat_completion(
                [{"role": "user", "content": "Hi!"}], stream=True):
            print(chunk["choices"][0]["delta"].get("content", ""), end="")
"""
from __future__ import annotations

import os
import random
import sys
import time
import uuid
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union, cast

import numpy as np

from . import _core, compat
from . import args as A
from .grammar import GrammarMask, LlamaGrammar, from_response_format
from .processors import as_processors, logit_bias_processor
from .types import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionDelta,
    ChatCompletionMessage,
    Completion,
    CompletionChunk,
    CompletionUsage,
    CreateEmbeddingResponse,
)

__all__ = ["Llama", "LlamaState", "ModelNotFoundError"]

#: Seed value meaning "draw a random seed" (as llama-cpp-python's LLAMA_DEFAULT_SEED).
DEFAULT_SEED = 0xFFFFFFFF

Prompt = Union[str, bytes, Sequence[int]]


DEFAULT_MODEL_NAME = "pinfer-default.gguf"


def default_model_path() -> str:
    """The embedded default model: ``$PINFER_DEFAULT_MODEL``, else the copy pip
    installed under ``<sys.prefix>/share/pinfer/``, else the source tree's
    ``models/`` (a development checkout). Raises ValueError if none exists."""
    env = os.environ.get("PINFER_DEFAULT_MODEL")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (os.path.join(sys.prefix, "share", "pinfer", DEFAULT_MODEL_NAME),
                 os.path.join(here, "..", "..", "models", DEFAULT_MODEL_NAME)):
        if os.path.exists(cand):
            return os.path.normpath(cand)
    raise ValueError("no model given and the embedded default model is not installed: "
                     "pass model_path=... (or set PINFER_DEFAULT_MODEL)")


def _utf8_complete(buf: bytes, start: int, end: int) -> int:
    """Largest cut <= end that does not split a UTF-8 sequence (never < start)."""
    for back in range(1, 5):
        i = end - back
        if i < start:
            break
        c = buf[i]
        if c & 0xC0 == 0x80:  # continuation byte: keep looking for the lead byte
            continue
        need = 4 if 0xF0 <= c <= 0xF7 else 3 if 0xE0 <= c < 0xF0 else 2 if 0xC0 <= c < 0xE0 else 1
        return i if need > back else end
    return end


def _partial_stop_len(buf: bytes, stops: Sequence[bytes]) -> int:
    """Length of the longest suffix of buf that is a proper prefix of a stop string."""
    best = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(buf)), best, -1):
            if buf.endswith(s[:k]):
                best = k
                break
    return best


#: llama-cpp-python's chat_format names -> pinfer's chat families (which are accepted too).
CHAT_FORMATS = {"chatml": "chatml", "llama-2": "llama2", "llama-3": "llama3", "mistral-instruct": "mistral",
                "gemma": "gemma", "zephyr": "zephyr", "vicuna": "vicuna", "phi-3": "phi3",
                "vicuna-orca": "vicuna-orca", "falcon": "falcon"}


def _chat_family(chat_format: Optional[str]) -> Optional[str]:
    if chat_format is None:
        return None
    if not isinstance(chat_format, str):
        raise TypeError(f"chat_format must be a str, got {type(chat_format).__name__}")
    fam = CHAT_FORMATS.get(chat_format) or (chat_format if chat_format in CHAT_FORMATS.values() else None)
    if fam is None:
        raise ValueError(f"chat_format {chat_format!r} is not one of {', '.join(sorted(CHAT_FORMATS))}")
    return fam


def _kv_type(type_k: Optional[int], type_v: Optional[int]) -> str:
    names = {0: "f32", 1: "f16"}  # GGML type ids
    for name, v in (("type_k", type_k), ("type_v", type_v)):
        if v is not None and v not in names:
            raise NotImplementedError(f"{name}={v!r} is not supported: the KV cache is F32 (0) or F16 (1)")
    if type_k is not None and type_v is not None and type_k != type_v:
        raise NotImplementedError("type_k and type_v must be the same type")
    t = type_k if type_k is not None else type_v
    return names[t] if t is not None else "f16"


class ModelNotFoundError(FileNotFoundError, ValueError):
    """A missing model file: a ValueError as in llama-cpp-python, and a FileNotFoundError."""


def _gguf_metadata(path: str) -> Dict[str, str]:
    import json

    import gguf

    r = gguf.GGUFReader(path, "r")
    out: Dict[str, str] = {}
    for name, field in r.fields.items():
        if name.startswith("GGUF."):
            continue  # the header's own fields (version, counts), not metadata keys
        v = field.contents()
        out[name] = v if isinstance(v, str) else json.dumps(v)
    return out


def _text_content(i: int, m: Dict[str, Any]) -> Dict[str, Any]:
    """A message whose content is a list of OpenAI parts, with its text parts joined;
    other parts (images, audio) are refused by name."""
    c = m.get("content")
    if not isinstance(c, list):
        return m
    texts = []
    for j, part in enumerate(c):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind != "text" or not isinstance(part.get("text"), str):
            raise NotImplementedError(f"messages[{i}]['content'][{j}]: only text parts are supported, "
                                      f"got type {kind!r}")
        texts.append(part["text"])
    return {**m, "content": "".join(texts)}


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    m = np.max(x)
    return x - (m + np.log(np.sum(np.exp(x - m))))


class _Hooks:
    """Per-call additions to the sampler chain: logits processors (logit_bias among
    them) and a grammar mask before the pick, stopping criteria and logprobs after."""

    def __init__(self, processors: List[Any], grammar: Optional[GrammarMask], stopping: List[Any],
                 n_logprobs: Optional[int]) -> None:
        self.processors = processors
        self.grammar = grammar
        self.stopping = stopping
        self.n_logprobs = n_logprobs
        self.records: List[Tuple[int, int, float, List[Tuple[int, float]]]] = []  # tok, byte start, lp, top

    @property
    def edits_logits(self) -> bool:
        return bool(self.processors) or self.grammar is not None


def _chunk(ch: CompletionChunk, delta: ChatCompletionDelta, logprobs: Any = None,
           finish: Optional[str] = None) -> ChatCompletionChunk:
    """The chat.completion.chunk of completion chunk ch with one choice carrying delta."""
    return {"id": "chat" + ch["id"], "object": "chat.completion.chunk", "created": ch["created"], "model": ch["model"],
            "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]}


class LlamaState:
    """What :meth:`Llama.save_state` returns (picklable; :mod:`pinfer.llama_cache`
    also stores it without pickle). ``kv`` is the snapshot of the cached keys and
    values; ``history`` how they were computed (batches), for a state without one."""

    def __init__(self, history, input_ids, logits, scores, seed_state, n_ctx, model_path, kv=None) -> None:
        self.history = history
        self.input_ids = np.asarray(input_ids, dtype=np.intc)
        self.n_tokens = len(input_ids)
        self.logits = logits
        self.scores = scores
        self.seed_state = seed_state
        self.n_ctx = n_ctx
        self.model_path = model_path
        self.kv = kv

    @property
    def llama_state_size(self) -> int:
        """Bytes this state holds (what a cache's capacity_bytes counts)."""
        arrays = [self.input_ids, self.logits, self.scores, getattr(self, "kv", None)]
        arrays += [t for t, _ in self.history]
        return int(sum(a.nbytes for a in arrays if a is not None))


class Llama:
    """A loaded model with one context (KV cache), generating text like llama-cpp-python.

    Args:
        model_path: path to a GGUF file; None uses the default model
            (``$PINFER_DEFAULT_MODEL``) or raises ValueError.
        n_ctx: context size in tokens (0: the model's training context, capped at 4096).
        n_threads: worker threads (None: all cores; more than the cores are cut to them, with a notice).
        n_batch: maximum tokens per evaluation batch during prompt processing.
        seed: RNG seed; the default draws a random one. With a fixed seed, the same
            sequence of calls gives the same outputs.
        logits_all: keep the logits of every evaluated token (see :attr:`scores`).
        verbose: print load details and per-call timings to stderr.
        sparse: FFN mode: "off" (dense), "exact" (ReLU-family FFNs, same function),
            "predictor" (fc1/fc2 in the file), "threshold" (act_thresholds in the
            file) or "auto" (the best the file supports; see :attr:`sparse_mode`).
        sparse_stats: collect per-layer active fractions and FLOPs (:meth:`sparse_stats`).
        sparse_verify: also run a dense twin and measure predictor recall and the
            logit difference to dense (twice the work).
        precision: "high" (default): activations meet quantized weights at about 16
            bits, so the logits match a float32 reference of the same weights; "fast":
            8 bits as llama.cpp, faster prompt processing, top-1 differs at a few % of
            positions.
        device: where hot layers and neurons run: "auto" (default: "cuda" when
            the install has it and a device answers, else "cpu"), "cpu", "cuda" (an
            NVIDIA GPU; installs built with PINFER_CUDA, see ``_core.HAS_CUDA``)
            or "sim", a simulated GPU that runs the hybrid plan and counts its
            traffic (:attr:`plan`, :meth:`transfer_stats`).
        n_gpu_layers: layers on the device, in order (None / -1: as many as the
            budget holds). Without a device a notice is printed and the CPU runs all.
        vram_budget: GiB of device memory the plan may use (None: all of it).
        last_n_tokens_size: the default penalty window (repeat_last_n) of completions.
        chat_format: a chat format name ("chatml", "llama-2", "llama-3",
            "mistral-instruct", "gemma", "zephyr", "vicuna", "phi-3", ...) used instead
            of the model's own template.
        chat_handler: a callable that answers create_chat_completion instead
            (llama-cpp-python's protocol: called with llama=self, messages=, tools=,
            tool_choice= and the sampling arguments as keywords).
        type_k, type_v: KV cache type as a GGML type id (0: F32, 1: F16; both alike).
        embedding: also create an embedding context, for :meth:`embed` and
            :meth:`create_embedding` (generation keeps working).
        pooling_type: how :meth:`embed` pools a text's token vectors: "mean", "cls",
            "last" or "none" (one vector per token), or llama.cpp's numbers 1, 2, 3, 0;
            None: the file's ``<arch>.pooling_type``, else mean.

    Other llama-cpp-python arguments are listed in :mod:`pinfer.compat`: performance
    hints are accepted with a notice, unimplemented features raise NotImplementedError
    naming them, unknown names raise TypeError.
    """

    def __init__(
        self,
        model_path: Optional[Union[str, os.PathLike]] = None,
        *,
        n_ctx: int = 512,
        n_threads: Optional[int] = None,
        n_batch: int = 512,
        seed: int = DEFAULT_SEED,
        logits_all: bool = False,
        verbose: bool = False,
        sparse: str = "off",
        sparse_stats: bool = False,
        sparse_verify: bool = False,
        precision: str = "high",
        device: str = "auto",
        n_gpu_layers: Optional[int] = None,
        vram_budget: Optional[float] = None,
        last_n_tokens_size: int = 64,
        chat_format: Optional[str] = None,
        chat_handler: Any = None,
        type_k: Optional[int] = None,
        type_v: Optional[int] = None,
        embedding: bool = False,
        pooling_type: Optional[Union[int, str]] = None,
        **kwargs: Any,
    ) -> None:
        self._model: Optional[_core.Model] = None
        self._ctx: Optional[_core.Context] = None
        self._ectx: Optional[_core.Context] = None  # the embedding context (embedding=True)
        self._lltok: Any = None  # llguidance's view of the vocabulary, built on first use
        self._nl: Optional[int] = None
        self._exact: Any = None  # ExactTokenizer, built on first use
        self._metadata: Optional[Dict[str, str]] = None
        self._stream_owner = 0  # the completion that may use the cache (see _completion_stream)
        self.cache: Any = None  # a prompt cache (set_cache)
        self._owns = True  # False for a sequence view (_sequence_view): the parent frees model and contexts
        compat.check("Llama", kwargs, compat.INIT)
        self._last_n = A.as_int("last_n_tokens_size", last_n_tokens_size, 0)
        self._chat_format = _chat_family(chat_format)
        if chat_handler is not None and not callable(chat_handler):
            raise TypeError(f"chat_handler must be callable, got {type(chat_handler).__name__}")
        self.chat_handler = chat_handler
        kv_type = _kv_type(type_k, type_v)
        if model_path is None:
            model_path = default_model_path()
        model_path = os.fspath(model_path)
        if not os.path.exists(model_path):
            raise ModelNotFoundError(f"model file not found: {model_path}")
        n_ctx = A.as_int("n_ctx", n_ctx, 0, 1 << 24)
        n_batch = A.as_int("n_batch", n_batch, 1)
        if n_threads is not None:  # above the core count: capped by the context, with a notice
            n_threads = A.as_int("n_threads", n_threads, 1)
        if seed is not None:
            seed = A.as_int("seed", seed, -1, 2**32 - 1)
        self.model_path = model_path
        self.verbose = verbose
        self._logits_all = bool(logits_all)
        t0 = time.perf_counter()
        self._model = _core.Model(model_path)
        if not isinstance(sparse, str):
            raise TypeError(f"sparse must be a str, got {type(sparse).__name__}")
        if not isinstance(precision, str):
            raise TypeError(f"precision must be a str, got {type(precision).__name__}")
        if not isinstance(device, str):
            raise TypeError(f"device must be a str, got {type(device).__name__}")
        if n_gpu_layers is not None and (not isinstance(n_gpu_layers, int) or isinstance(n_gpu_layers, bool)
                                         or n_gpu_layers < -1):
            raise ValueError(f"n_gpu_layers must be an int >= -1 or None, got {n_gpu_layers!r}")
        if vram_budget is not None and (isinstance(vram_budget, bool) or not isinstance(vram_budget, (int, float))
                                        or not 0 <= vram_budget <= 1e6):
            raise ValueError(f"vram_budget must be a number of GiB >= 0 or None, got {vram_budget!r}")
        self._ctx = _core.Context(self._model, n_ctx, n_batch, n_threads or 0, kv_type, sparse,
                                  bool(sparse_stats), bool(sparse_verify), precision=precision, device=device,
                                  n_gpu_layers=-1 if n_gpu_layers is None else n_gpu_layers,
                                  vram_budget=float(vram_budget or 0.0))
        if self._ctx.notice:
            print(f"pinfer: notice: {self._ctx.notice}", file=sys.stderr)
        elif self._ctx.device == "CPU" and n_gpu_layers not in (None, 0):
            print(f"pinfer: notice: n_gpu_layers={n_gpu_layers} without a device (device='cuda' or 'sim'): "
                  "every layer runs on the CPU", file=sys.stderr)
        if embedding:
            from .embedding import pooling_kind
            arch = self._model.arch
            self._pooling = pooling_kind(pooling_type, self.metadata.get(f"{arch}.pooling_type"))
            self._ectx = _core.Context(self._model, self._ctx.n_ctx, n_batch, n_threads or 0, kv_type, sparse,
                                       precision=precision, embeddings=True)
        elif pooling_type is not None:
            raise ValueError("pooling_type is used only with embedding=True")
        if verbose:
            print(f"pinfer: loaded {model_path} in {1e3 * (time.perf_counter() - t0):.1f} ms: "
                  f"{self._model.desc}; n_ctx={self._ctx.n_ctx}", file=sys.stderr)
        self._seed_rng = random.Random(None if seed in (None, -1, DEFAULT_SEED) else seed)
        self._random_seed = seed in (None, -1, DEFAULT_SEED)
        self._input_ids: List[int] = []  # tokens whose keys/values are in the cache
        # How the cache was computed: (batch, tokens of it still cached) per decode call,
        # so that load_state() replays the same batches and gets the same bits.
        self._history: List[Tuple[np.ndarray, int]] = []

    def _truncate(self, keep: int) -> None:
        self.ctx.kv_truncate(keep)
        del self._input_ids[keep:]
        hist, n = [], 0
        for toks, kept in self._history:
            if n >= keep:
                break
            kept = min(kept, keep - n)
            hist.append((toks, kept))
            n += kept
        self._history = hist

    def set_seed(self, seed: int) -> None:
        """Restart the seed stream that calls without seed= draw from."""
        seed = A.as_int("seed", seed, -1, 2**32 - 1)
        self._random_seed = seed in (-1, DEFAULT_SEED)
        self._seed_rng = random.Random(None if self._random_seed else seed)

    def token_nl(self) -> int:
        """The newline token (its piece is exactly "\\n"), or -1 if the vocabulary has none."""
        if self._nl is None:
            toks = self.model.tokenize(b"\n", False, False)
            cand = [t for t in toks if self.model.token_to_piece(t, False) == b"\n"]
            self._nl = cand[-1] if cand else -1
        return self._nl

    def sample(self, top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05, temp: float = 0.80,
               repeat_penalty: float = 1.0, frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
               logits_processor: Any = None, seed: Optional[int] = None, *, typical_p: float = 1.0,
               mirostat_mode: int = 0, mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
               **kwargs: Any) -> int:
        """One token from the last evaluated logits, the cached tokens as the penalties'
        history (llama-cpp-python's sample()); the token is not evaluated."""
        if kwargs.get("grammar") is not None:
            raise NotImplementedError("sample(): grammar= is not supported here (a grammar lives for one "
                                      "generation): use generate(grammar=) or create_completion(grammar=)")
        if kwargs.get("idx") is not None:
            raise NotImplementedError("sample(): idx= is not supported: only the last position is sampled")
        compat.check("sample", {k: v for k, v in kwargs.items() if k not in ("grammar", "idx")},
                     compat.SAMPLING, compat.GENERATE)
        if not self._input_ids:
            raise ValueError("sample(): nothing evaluated yet: call eval() first")
        sampler = self._make_sampler(temp, top_k, top_p, min_p, repeat_penalty, None, frequency_penalty,
                                     presence_penalty, seed, typical_p=typical_p, mirostat_mode=mirostat_mode,
                                     mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta)
        for t in self._input_ids:
            sampler.accept(t)
        return self._pick(sampler, self._hooks(logits_processor))

    # ---- state ----

    def save_state(self) -> "LlamaState":
        """The context's state: cached tokens (and how they were batched), the last
        logits and the seed stream. :meth:`load_state` restores it bit-exactly."""
        logits = self.ctx.logits(-1).copy() if self._input_ids else None
        scores = self.scores.copy() if (self._input_ids and self._logits_all) else None
        kv = self.ctx.kv_state() if self._input_ids else None
        return LlamaState([(t.copy(), k) for t, k in self._history], list(self._input_ids), logits, scores,
                          self._seed_rng.getstate(), self.n_ctx(), self.model_path, kv)

    def load_state(self, state: "LlamaState") -> None:
        """Restore a :meth:`save_state` of this or another Llama of the same model and
        context settings: the keys and values are copied back (a state without them
        evaluates the same batches again), so the logits and every continuation are the
        same bits; the seed stream is restored too."""
        self._restore_context(state)
        self._seed_rng.setstate(state.seed_state)

    def _restore_context(self, state: "LlamaState") -> None:
        if not isinstance(state, LlamaState):
            raise TypeError(f"load_state() needs a LlamaState, got {type(state).__name__}")
        if len(state.input_ids) > self.n_ctx():
            raise ValueError(f"the state holds {len(state.input_ids)} tokens, more than n_ctx = {self.n_ctx()}")
        self._truncate(0)
        kv = getattr(state, "kv", None)
        if kv is not None and state.logits is not None and state.scores is None:
            self.ctx.set_kv_state(np.ascontiguousarray(kv, dtype=np.uint8), len(state.input_ids),
                                  np.ascontiguousarray(state.logits, dtype=np.float32))
        else:
            n = 0
            for toks, kept in state.history:
                self.ctx.decode(toks, self._logits_all)
                n += kept
                self.ctx.kv_truncate(n)
        self._input_ids = [int(t) for t in state.input_ids]
        self._history = [(t.copy(), k) for t, k in state.history]
        if state.logits is not None and not np.array_equal(self.ctx.logits(-1), state.logits):
            self.reset()
            raise RuntimeError("load_state(): the restored logits differ from the saved ones "
                               "(a different model or context settings?)")

    @staticmethod
    def longest_token_prefix(a: Sequence[int], b: Sequence[int]) -> int:
        """Length of the common prefix of two token sequences."""
        n = 0
        for x, y in zip(a, b):
            if x != y:
                break
            n += 1
        return n

    def set_cache(self, cache: Any) -> None:
        """Use a prompt cache (:class:`pinfer.LlamaRAMCache`, :class:`pinfer.LlamaDiskCache`,
        or None): a completion whose prompt shares a longer prefix with a cached state
        than with the context restores that state first, and every completion stores
        its final state."""
        from .llama_cache import BaseLlamaCache
        if cache is not None and not isinstance(cache, BaseLlamaCache):
            raise TypeError(f"set_cache() needs a LlamaRAMCache, LlamaDiskCache or None, got {type(cache).__name__}")
        self.cache = cache

    # ---- resources ----

    def _sequence_view(self, ctx: Any) -> "Llama":
        """A Llama over this one's model whose KV cache is ``ctx``: an object with the
        Context methods Llama uses (decode, logits, kv_truncate, n_ctx), e.g. one
        sequence of a context shared by several (pinfer.server). Everything else
        (templates, samplers, stop handling, logprobs, result shapes) is this class's."""
        view = object.__new__(Llama)
        view.__dict__.update(self.__dict__)
        view._ctx, view._ectx, view._owns = ctx, None, False
        view._input_ids, view._history, view._stream_owner = [], [], 0
        view._logits_all, view.verbose = False, False
        return view

    def close(self) -> None:
        """Free the context and model now (also done when the object is collected)."""
        if not getattr(self, "_owns", True):  # a sequence view: its parent owns the model
            self._ctx = self._model = None
            return
        if self._ctx is not None:
            self._ctx.close()
            self._ctx = None
        if self._ectx is not None:
            self._ectx.close()
            self._ectx = None
        if self._model is not None:
            self._model.close()
            self._model = None
        self._lltok = None
        self._input_ids = []
        self._history = []

    def __enter__(self) -> "Llama":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    @property
    def plan(self) -> List[Tuple[bool, int]]:
        """Per layer (on_device, k): whether its attention runs on the device and
        how many of its FFN neurons (the prefix [0, k)) do."""
        return self.ctx.plan()

    def transfer_stats(self, decode: bool = True) -> Dict[str, int]:
        """Host <-> device traffic summed over single-token decodes (decode=True)
        or over prompt batches: bytes each way, copies, event waits, syncs."""
        return self.ctx.transfer_stats(decode)

    @property
    def model(self) -> "_core.Model":
        """The low-level :class:`pinfer._core.Model`."""
        if self._model is None:
            raise ValueError("this Llama is closed")
        return self._model

    @property
    def ctx(self) -> "_core.Context":
        """The low-level :class:`pinfer._core.Context`."""
        if self._ctx is None:
            raise ValueError("this Llama is closed")
        return self._ctx

    # ---- sparse FFN ----

    @property
    def sparse_mode(self) -> str:
        """The FFN mode this context runs ("auto" resolved)."""
        return self.ctx.sparse_mode

    def sparse_stats(self) -> Dict[str, Any]:
        """Per-layer active fractions, FLOPs (predictor share), and with
        ``sparse_verify`` the predictor recall and the logit difference to dense."""
        return self.ctx.sparse_stats()

    # ---- model facts ----

    def n_ctx(self) -> int:
        """Context size in tokens."""
        return self.ctx.n_ctx

    def n_vocab(self) -> int:
        """Vocabulary size."""
        return self.model.n_vocab

    def n_embd(self) -> int:
        return self.model.n_embd

    def token_bos(self) -> int:
        return self.model.bos

    def token_eos(self) -> int:
        return self.model.eos

    @property
    def metadata(self) -> Dict[str, str]:
        """Every GGUF metadata key with its value as a string (arrays as JSON lists),
        read once from the file's header."""
        if self._metadata is None:
            self._metadata = _gguf_metadata(self.model_path)
        return dict(self._metadata)

    @property
    def n_tokens(self) -> int:
        """Tokens currently in the KV cache."""
        return len(self._input_ids)

    @property
    def input_ids(self) -> np.ndarray:
        """The tokens currently in the KV cache (a copy)."""
        return np.asarray(self._input_ids, dtype=np.int32)

    # ---- tokens ----

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> List[int]:
        """Token ids of ``text`` (bytes, or str as UTF-8).

        add_bos: add the model's start tokens (BOS) where its tokenizer wants them.
        special: parse special-token text such as ``<|im_start|>`` as those tokens.
        """
        return self.model.tokenize(A.as_utf8("text", text), bool(add_bos), bool(special))

    def detokenize(self, tokens: Sequence[int], prev_tokens: Optional[Sequence[int]] = None,
                   special: bool = False) -> bytes:
        """The bytes of ``tokens`` (special tokens as text only with ``special=True``)."""
        return self.model.detokenize(A.as_token_ids("tokens", tokens, self.n_vocab()), bool(special))

    # ---- evaluation ----

    def reset(self) -> None:
        """Forget the KV cache (the next prompt is evaluated from scratch)."""
        self._truncate(0)

    def eval(self, tokens: Sequence[int]) -> None:
        """Evaluate tokens after those already in the cache.

        Afterwards :attr:`logits` holds the last token's logits (and :attr:`scores`
        every token's with ``logits_all=True``).
        """
        try:
            toks64 = np.asarray(tokens, dtype=np.int64)
        except OverflowError:
            raise ValueError("eval(): a token id is out of range (too large for an int)") from None
        if toks64.ndim != 1 or toks64.size == 0:
            raise ValueError("eval() needs a non-empty 1-D sequence of token ids")
        n_vocab = self.n_vocab()
        if toks64.min() < 0 or toks64.max() >= n_vocab:
            bad = toks64[(toks64 < 0) | (toks64 >= n_vocab)][0]
            raise ValueError(f"token id {bad} is out of range [0, {n_vocab})")
        toks = toks64.astype(np.int32)
        if len(self._input_ids) + toks.size > self.ctx.n_ctx:
            raise ValueError(f"context full: {len(self._input_ids)} cached + {toks.size} new tokens "
                             f"exceed n_ctx = {self.ctx.n_ctx}")
        self.ctx.decode(toks, self._logits_all)
        self._input_ids.extend(int(t) for t in toks)
        self._history.append((toks.copy(), int(toks.size)))

    @property
    def logits(self) -> np.ndarray:
        """float32 [n_vocab] logits of the last evaluated token: a view of the
        context's buffer (no copy), overwritten by the next evaluation."""
        return self.ctx.logits(-1)

    @property
    def scores(self) -> np.ndarray:
        """float32 [n, n_vocab] logits of every token of the last :meth:`eval` call
        (needs ``logits_all=True``; otherwise [1, n_vocab] of the last token)."""
        if self._logits_all:
            return self.ctx.logits_all()
        return self.ctx.logits(-1)[None, :]

    @property
    def eval_logits(self) -> np.ndarray:
        """Alias of :attr:`scores`."""
        return self.scores

    def _prepare(self, prompt_tokens: List[int]) -> None:
        """Bring the cache to hold prompt_tokens, reusing the longest cached prefix
        (at least the last prompt token is evaluated so that its logits exist)."""
        n = len(prompt_tokens)
        if n == 0:
            raise ValueError("the prompt is empty and the model adds no BOS token")
        if n > self.ctx.n_ctx:
            raise ValueError(f"prompt is too long: {n} tokens, but the context holds {self.ctx.n_ctx} "
                             f"(raise n_ctx)")
        keep = 0
        limit = min(len(self._input_ids), n - 1)
        while keep < limit and self._input_ids[keep] == prompt_tokens[keep]:
            keep += 1
        if keep < len(self._input_ids):
            self._truncate(keep)
        self.eval(prompt_tokens[keep:])

    def _tokenize_prompt(self, prompt: Prompt, special: bool = False, add_bos: bool = True) -> List[int]:
        if isinstance(prompt, (str, bytes)):
            return self.model.tokenize(A.as_utf8("prompt", prompt), bool(add_bos), bool(special))
        return A.as_token_ids("prompt", prompt, self.n_vocab())

    def _make_sampler(self, temperature: float, top_k: int, top_p: float, min_p: float,
                      repeat_penalty: float, repeat_last_n: Optional[int], frequency_penalty: float,
                      presence_penalty: float, seed: Optional[int], typical_p: float = 1.0,
                      mirostat_mode: int = 0, mirostat_tau: float = 5.0,
                      mirostat_eta: float = 0.1) -> "_core.Sampler":
        temperature, top_p, min_p = (A.as_float(n, v) for n, v in
                                     (("temperature", temperature), ("top_p", top_p), ("min_p", min_p)))
        typical_p, mirostat_tau, mirostat_eta = (
            A.as_float(n, v) for n, v in (("typical_p", typical_p), ("mirostat_tau", mirostat_tau),
                                          ("mirostat_eta", mirostat_eta)))
        mirostat_mode = A.as_int("mirostat_mode", mirostat_mode, 0, 2)
        repeat_penalty, frequency_penalty, presence_penalty = (
            A.as_float(n, v) for n, v in (("repeat_penalty", repeat_penalty), ("frequency_penalty", frequency_penalty),
                                          ("presence_penalty", presence_penalty)))
        top_k = A.as_int("top_k", top_k, -2**31)
        if repeat_last_n is None:
            repeat_last_n = self._last_n
        repeat_last_n = A.as_int("repeat_last_n", repeat_last_n, -2**31)
        if seed is not None:
            seed = A.as_int("seed", seed, None, 2**32 - 1)
        if seed is None:
            # Each call draws the next seed from the instance's RNG, so a fixed
            # constructor seed makes a whole sequence of calls reproducible.
            seed = random.getrandbits(31) if self._random_seed else self._seed_rng.getrandbits(31)
        elif seed < 0 or seed == DEFAULT_SEED:
            seed = random.getrandbits(31)
        if repeat_last_n < 0:  # -1: the whole context, as in llama.cpp
            repeat_last_n = self.ctx.n_ctx
        return _core.Sampler(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                             repeat_penalty=repeat_penalty, repeat_last_n=repeat_last_n,
                             frequency_penalty=frequency_penalty, presence_penalty=presence_penalty, seed=seed,
                             typical_p=typical_p, mirostat=mirostat_mode, mirostat_tau=mirostat_tau,
                             mirostat_eta=mirostat_eta, n_vocab=self.n_vocab())

    def _hooks(self, logits_processor: Any = None, grammar: Optional[LlamaGrammar] = None,
               stopping_criteria: Any = None, logit_bias: Any = None,
               n_logprobs: Optional[int] = None) -> _Hooks:
        procs = as_processors("logits_processor", logits_processor)
        if logit_bias:
            procs.insert(0, logit_bias_processor(logit_bias, self.n_vocab()))
        mask = None
        if grammar is not None:
            if self._lltok is None:
                from .grammar import lltokenizer
                self._lltok = lltokenizer(self.model)
            mask = GrammarMask(grammar, self.n_vocab(), self._lltok)
        return _Hooks(procs, mask, as_processors("stopping_criteria", stopping_criteria), n_logprobs)

    def _pick(self, sampler: "_core.Sampler", hooks: _Hooks) -> int:
        """Sample the next token from the last logits through the hooks; the grammar
        advances and the token's logprobs are recorded (byte start set by the caller)."""
        if hooks.edits_logits:
            scores = np.array(self.ctx.logits(-1), dtype=np.float32)
            ids = np.asarray(self._input_ids, dtype=np.intc)
            for p in hooks.processors:
                scores = p(ids, scores)
                if not isinstance(scores, np.ndarray) or scores.shape != (self.n_vocab(),):
                    raise TypeError("logits_processor: a processor must return a [n_vocab] array, "
                                    f"got {type(scores).__name__}")
            scores = np.ascontiguousarray(scores, dtype=np.float32)
            if hooks.grammar is not None:
                hooks.grammar.apply(scores)
            tok = sampler.sample(scores)
            if hooks.grammar is not None and not self.model.is_eog(tok):
                hooks.grammar.accept(tok)
        else:
            tok = sampler.sample(self.ctx.logits(-1))
        if hooks.n_logprobs is not None:
            lp = _log_softmax(self.ctx.logits(-1))
            k = min(hooks.n_logprobs, lp.size)
            top = np.argsort(-lp, kind="stable")[:k] if k > 0 else np.empty(0, dtype=np.intp)
            hooks.records.append((tok, -1, float(lp[tok]), [(int(t), float(lp[t])) for t in top]))
        return tok

    def _stops(self, hooks: _Hooks, tok: int) -> bool:
        if not hooks.stopping:
            return False
        ids = np.asarray(self._input_ids + [tok], dtype=np.intc)
        logits = self.ctx.logits(-1)
        return any(bool(c(ids, logits)) for c in hooks.stopping)

    def generate(self, tokens: Sequence[int], temperature: float = 0.8, top_k: int = 40, top_p: float = 0.95,
                 min_p: float = 0.05, repeat_penalty: float = 1.0, repeat_last_n: Optional[int] = None,
                 frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                 seed: Optional[int] = None, reset: bool = True, *, temp: Optional[float] = None,
                 logits_processor: Any = None, stopping_criteria: Any = None,
                 grammar: Optional[LlamaGrammar] = None, typical_p: float = 1.0, mirostat_mode: int = 0,
                 mirostat_tau: float = 5.0, mirostat_eta: float = 0.1, **kwargs: Any) -> Iterator[int]:
        """Yield sampled tokens after evaluating ``tokens``; runs until the caller stops,
        a stopping criterion says so, or the context is full. End-of-generation tokens
        are yielded like any other. ``temp`` is llama-cpp-python's name of ``temperature``."""
        compat.check("generate", kwargs, compat.SAMPLING, compat.GENERATE)
        if temp is not None:
            temperature = temp
        toks = self._tokenize_prompt(tokens)
        hooks = self._hooks(logits_processor, grammar, stopping_criteria)
        if reset:
            self._prepare(toks)
        else:
            self.eval(toks)
        sampler = self._make_sampler(temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n,
                                     frequency_penalty, presence_penalty, seed, typical_p=typical_p,
                                     mirostat_mode=mirostat_mode, mirostat_tau=mirostat_tau,
                                     mirostat_eta=mirostat_eta)
        for t in toks:
            sampler.accept(t)
        while True:
            tok = self._pick(sampler, hooks)
            sampler.accept(tok)
            yield tok
            if self._stops(hooks, tok) or self.n_tokens >= self.ctx.n_ctx:
                return
            self.eval([tok])

    # ---- completion ----

    def _completion_stream(self, prompt_tokens: List[int], max_tokens: Optional[int], stop: List[bytes],
                           sampler: "_core.Sampler", hooks: _Hooks,
                           state: Dict[str, Any]) -> Iterator[Tuple[str, int]]:
        """Yield (text, end byte) of the completion as it becomes final; sets
        state['finish_reason'], state['completion_tokens'] and state['bytes'] (the
        whole completion). Text that may begin a stop string, or that ends inside a
        UTF-8 character, is held back until it is resolved."""
        if self.verbose:
            self.ctx.reset_timings()
        self._stream_owner += 1
        me = self._stream_owner
        if self.cache is not None:
            self._from_cache(prompt_tokens)
        self._prepare(prompt_tokens)
        for t in prompt_tokens:
            sampler.accept(t)
        n_ctx = self.ctx.n_ctx
        limit = max_tokens if max_tokens is not None and max_tokens > 0 else None
        buf = b""
        emitted = 0
        n_gen = 0
        finish = "length"
        while True:
            tok = self._pick(sampler, hooks)
            sampler.accept(tok)
            if self.model.is_eog(tok):
                if hooks.records:
                    hooks.records.pop()  # the end token is not part of the text
                finish = "stop"
                break
            n_gen += 1
            if hooks.records:
                t_, _, lp, top = hooks.records[-1]
                hooks.records[-1] = (t_, len(buf), lp, top)
            buf += self.model.token_to_piece(tok, False)
            if stop:
                # Held-back text is never emitted, so a stop string starts at >= emitted.
                hits = [i for i in (buf.find(s, emitted) for s in stop) if i >= 0]
                if hits:
                    buf = buf[:min(hits)]
                    finish = "stop"
                    break
            if self._stops(hooks, tok):
                finish = "stop"
                break
            if hooks.grammar is not None and hooks.grammar.is_stopped():
                finish = "stop"  # the grammar is complete and allows nothing more
                break
            end = len(buf) - (_partial_stop_len(buf, stop) if stop else 0)
            end = _utf8_complete(buf, emitted, end)
            if end > emitted:
                state["bytes"] = buf
                yield buf[emitted:end].decode("utf-8", errors="replace"), end
                emitted = end
            # the context holds prompt + completion: n_tokens + 1 with this token
            if (limit is not None and n_gen >= limit) or self.n_tokens + 1 >= n_ctx:
                break  # finish_reason "length"; the last token needs no evaluation
            if self._stream_owner != me:
                raise RuntimeError("another completion started on this Llama while this stream was open; "
                                   "finish one stream before starting the next (or use two Llama objects)")
            self.eval([tok])
        if hooks.records:  # tokens wholly cut off by a stop string have no text
            hooks.records[:] = [r for r in hooks.records if r[1] < len(buf) or r[1] == 0]
        buf = buf[:_utf8_complete(buf, emitted, len(buf))]  # a character cut off by the end is dropped
        state["bytes"] = buf
        if emitted < len(buf):
            yield buf[emitted:].decode("utf-8", errors="replace"), len(buf)
        state["finish_reason"] = finish
        state["completion_tokens"] = n_gen
        if self.cache is not None and self._input_ids:
            self.cache[self._input_ids] = self.save_state()
        if self.verbose:
            self._print_timings()

    def _from_cache(self, prompt_tokens: List[int]) -> None:
        """Restore the cached state sharing the longest prefix with the prompt, if it
        shares more than the context does (the seed stream is left alone, so a hit
        changes no output, only the work)."""
        try:
            item = self.cache[prompt_tokens]
        except KeyError:
            if self.verbose:
                print("pinfer: prompt cache miss", file=sys.stderr)
            return
        have = self.longest_token_prefix(self._input_ids, prompt_tokens)
        if self.longest_token_prefix(item.input_ids.tolist(), prompt_tokens) > have:
            self._restore_context(item)
            if self.verbose:
                print(f"pinfer: prompt cache hit: {item.n_tokens} tokens restored", file=sys.stderr)

    def _print_timings(self) -> None:
        t = self.ctx.timings()
        for what, ms, n in (("prompt eval time", t["t_prompt_ms"], t["n_prompt"]),
                            ("eval time", t["t_eval_ms"], t["n_eval"])):
            rate = f" ({ms / n:8.2f} ms per token, {1e3 * n / ms:8.2f} tokens per second)" if n and ms else ""
            print(f"pinfer: {what:>16} = {ms:10.2f} ms / {n:5d} tokens{rate}", file=sys.stderr)

    def create_completion(
        self,
        prompt: Prompt,
        suffix: Optional[str] = None,
        max_tokens: Optional[int] = 16,
        temperature: float = 0.8,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        logprobs: Optional[int] = None,
        echo: bool = False,
        stop: Optional[Union[str, List[str]]] = None,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        top_k: int = 40,
        stream: bool = False,
        seed: Optional[int] = None,
        repeat_last_n: Optional[int] = None,
        *,
        model: Optional[str] = None,
        stopping_criteria: Any = None,
        logits_processor: Any = None,
        grammar: Optional[LlamaGrammar] = None,
        logit_bias: Optional[Dict[Any, float]] = None,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        **kwargs: Any,
    ) -> Union[Completion, Iterator[CompletionChunk]]:
        """Complete ``prompt`` (text or token ids).

        Returns an OpenAI-style ``text_completion`` dict, or with ``stream=True`` an
        iterator of chunks whose texts concatenate to the same completion.
        ``max_tokens`` None or <= 0 generates until end of text or a full context.
        ``stop``: strings that end the completion (not included in the text).
        ``temperature`` 0 is greedy. ``seed`` fixes this call's sampling.
        ``logprobs=N``: each generated token's log probability and the N most likely
        alternatives (OpenAI's completion format), from the model's own distribution.
        ``grammar``: a :class:`LlamaGrammar` the output must match.
        ``logit_bias``: {token id: bias} added to the logits; ``logits_processor`` and
        ``stopping_criteria``: see :mod:`pinfer.processors`. ``model``: the name reported.
        ``typical_p`` < 1: locally typical sampling; ``mirostat_mode`` 1 or 2: mirostat with
        target surprise ``mirostat_tau`` and learning rate ``mirostat_eta`` (top_k, typical_p,
        top_p and min_p are then unused, as in llama.cpp).
        """
        compat.check("create_completion", {"suffix": suffix, **kwargs},
                     compat.COMPLETION, compat.SAMPLING)
        if logprobs is not None:
            logprobs = A.as_int("logprobs", logprobs, 0, None)
            if echo:
                raise NotImplementedError("create_completion(): logprobs with echo=True is not supported "
                                          "(the prompt's logprobs)")
        return self._completion(prompt, max_tokens=max_tokens, temperature=temperature, top_p=top_p,
                                min_p=min_p, echo=echo, stop=stop, frequency_penalty=frequency_penalty,
                                presence_penalty=presence_penalty, repeat_penalty=repeat_penalty,
                                top_k=top_k, stream=stream, seed=seed, repeat_last_n=repeat_last_n,
                                special=True, add_bos=True, model=model,
                                hooks=self._hooks(logits_processor, grammar, stopping_criteria, logit_bias,
                                                  logprobs),
                                extra=dict(typical_p=typical_p, mirostat_mode=mirostat_mode,
                                           mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta))

    def _logprobs(self, hooks: _Hooks, buf: bytes, lo: int, hi: int, text_base: int, chat: bool) -> Any:
        """Logprobs of the recorded tokens starting in bytes [lo, hi) of buf, in OpenAI's
        completion format (CompletionLogprobs: tokens, text_offset, token_logprobs,
        top_logprobs) or chat format (ChatCompletionLogprobs: content: [{token, logprob,
        bytes, top_logprobs}]); None without logprobs."""
        if hooks.n_logprobs is None:
            return None
        piece = self.model.token_to_piece
        content: List[Dict[str, Any]] = []
        out: Dict[str, Any] = {"tokens": [], "text_offset": [], "token_logprobs": [], "top_logprobs": []}
        for tok, start, lp, top in hooks.records:
            if not lo <= start < hi:
                continue
            raw = piece(tok, False)
            text = raw.decode("utf-8", errors="ignore")
            if chat:
                content.append({"token": text, "logprob": lp, "bytes": list(raw),
                                "top_logprobs": [{"token": piece(t, False).decode("utf-8", errors="ignore"),
                                                  "logprob": v, "bytes": list(piece(t, False))} for t, v in top]})
                continue
            out["tokens"].append(text)
            out["text_offset"].append(text_base + len(buf[:start].decode("utf-8", errors="ignore")))
            out["token_logprobs"].append(lp)
            alts = {piece(t, False).decode("utf-8", errors="ignore"): v for t, v in top}
            alts[text] = lp  # the chosen token is always listed, as llama-cpp-python does
            out["top_logprobs"].append(alts)
        return {"content": content, "refusal": None} if chat else out

    def _completion(self, prompt: Prompt, *, max_tokens: Optional[int], temperature: float, top_p: float,
                    min_p: float, echo: bool, stop: Optional[Union[str, List[str]]], frequency_penalty: float,
                    presence_penalty: float, repeat_penalty: float, top_k: int, stream: bool,
                    seed: Optional[int], repeat_last_n: Optional[int], special: bool, add_bos: bool,
                    model: Optional[str], hooks: _Hooks, chat_logprobs: bool = False,
                    extra: Optional[Dict[str, Any]] = None) -> Union[Completion, Iterator[CompletionChunk]]:
        """The completion, or its chunks; with chat_logprobs their logprobs are in the
        chat format, for create_chat_completion to pass on."""
        _ = self.ctx  # raise now if closed, not on the first next() of a stream
        stops = [A.as_utf8("stop", s) for s in A.as_str_list("stop", stop) if s]
        if max_tokens is not None:
            max_tokens = A.as_int("max_tokens", max_tokens, None, None)
        if model is not None and not isinstance(model, str):
            raise TypeError(f"model must be a str, got {type(model).__name__}")
        prompt_tokens = self._tokenize_prompt(prompt, special=special, add_bos=add_bos)
        if not prompt_tokens:
            raise ValueError("the prompt is empty and the model adds no BOS token")
        if len(prompt_tokens) > self.ctx.n_ctx:
            raise ValueError(f"prompt is too long: {len(prompt_tokens)} tokens, but the context holds "
                             f"{self.ctx.n_ctx} (raise n_ctx)")
        sampler = self._make_sampler(temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n,
                                     frequency_penalty, presence_penalty, seed, **(extra or {}))
        cid = f"cmpl-{uuid.uuid4()}"
        created = int(time.time())
        model_name = model if model is not None else self.model_path
        if echo:
            prompt_text = (prompt if isinstance(prompt, str) else
                           prompt.decode("utf-8", errors="replace") if isinstance(prompt, bytes) else
                           self.detokenize(prompt_tokens).decode("utf-8", errors="replace"))
        else:
            prompt_text = ""
        state: Dict[str, Any] = {}
        pieces = self._completion_stream(prompt_tokens, max_tokens, stops, sampler, hooks, state)
        base = len(prompt_text)

        def usage() -> CompletionUsage:
            n_c = state.get("completion_tokens", 0)
            return {"prompt_tokens": len(prompt_tokens), "completion_tokens": n_c,
                    "total_tokens": len(prompt_tokens) + n_c}

        if stream:
            def chunks() -> Iterator[CompletionChunk]:
                def chunk(text: str, finish: Optional[str], lps: Any) -> CompletionChunk:
                    return {"id": cid, "object": "text_completion", "created": created, "model": model_name,
                            "choices": [{"text": text, "index": 0, "logprobs": lps, "finish_reason": finish}]}
                if prompt_text:
                    yield chunk(prompt_text, None, None)
                lo = 0
                for text, end in pieces:
                    if text:
                        # The logprobs of the tokens that start in this chunk go with it.
                        lps = self._logprobs(hooks, state["bytes"], lo, end, base, chat_logprobs)
                        lo = end
                        yield chunk(text, None, lps)
                last = chunk("", state["finish_reason"], None)
                last["usage"] = usage()
                yield last
            return chunks()

        text = prompt_text + "".join(t for t, _ in pieces)
        lps = self._logprobs(hooks, state["bytes"], 0, 1 << 62, base, chat_logprobs)
        return {"id": cid, "object": "text_completion", "created": created, "model": model_name,
                "choices": [{"text": text, "index": 0, "logprobs": lps,
                             "finish_reason": state["finish_reason"]}],
                "usage": usage()}

    def __call__(self, prompt: Prompt, *args: Any, **kwargs: Any) -> Union[Completion, Iterator[CompletionChunk]]:
        """Same as :meth:`create_completion`."""
        return self.create_completion(prompt, *args, **kwargs)

    # ---- chat ----

    def apply_chat_template(self, messages: Sequence[Dict[str, Any]], add_generation_prompt: bool = True,
                            chat_template: Optional[str] = None,
                            tools: Optional[Sequence[Dict[str, Any]]] = None) -> str:
        """Render messages with the model's Jinja chat template (``tokenizer.chat_template``),
        bounded in time, output size and memory (pinfer.chat_template); ``tools`` (OpenAI
        format) go to a template that reads them, else into a system message
        (:mod:`pinfer.tool_calls`)."""
        return self._render_chat(messages, add_generation_prompt, chat_template, tools)[0]

    def _render_chat(self, messages: Sequence[Dict[str, Any]], add_generation_prompt: bool,
                     chat_template: Optional[str], tools: Optional[Sequence[Dict[str, Any]]]
                     ) -> Tuple[str, List[Dict[str, Any]]]:
        """(prompt, the messages as rendered)."""
        from . import chat_template as ct
        from .tool_calls import as_plain_history

        bos, eos = self.model.bos, self.model.eos
        bos_text = self.model.token_to_piece(bos, True).decode("utf-8", errors="replace") if bos >= 0 else ""
        eos_text = self.model.token_to_piece(eos, True).decode("utf-8", errors="replace") if eos >= 0 else ""
        if chat_template is None and self._chat_format is not None:
            msgs = as_plain_history(messages, tools)
            return _core.apply_chat_template(
                self._chat_format, [{"role": m["role"], "content": m.get("content") or ""} for m in msgs],
                add_generation_prompt, bos_text, eos_text), msgs
        template = chat_template or self.model.chat_template
        if not template:
            raise ValueError("the model has no chat template (tokenizer.chat_template); pass chat_template=...")
        return ct.render_messages(template, list(messages), add_generation_prompt, bos_text, eos_text, tools)

    def create_chat_completion(
        self,
        messages: Sequence[Dict[str, Any]],
        temperature: float = 0.2,
        top_p: float = 0.95,
        top_k: int = 40,
        min_p: float = 0.05,
        stream: bool = False,
        stop: Optional[Union[str, List[str]]] = None,
        seed: Optional[int] = None,
        max_tokens: Optional[int] = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        chat_template: Optional[str] = None,
        *,
        response_format: Optional[Dict[str, Any]] = None,
        model: Optional[str] = None,
        logits_processor: Any = None,
        stopping_criteria: Any = None,
        grammar: Optional[LlamaGrammar] = None,
        logit_bias: Optional[Dict[Any, float]] = None,
        logprobs: Optional[bool] = None,
        top_logprobs: Optional[int] = None,
        typical_p: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        tools: Optional[List[Dict[str, Any]]] = None,
        tool_choice: Any = None,
        **kwargs: Any,
    ) -> Union[ChatCompletion, Iterator[ChatCompletionChunk]]:
        """Reply to a chat (``[{"role": ..., "content": ...}, ...]``).

        Returns an OpenAI-style ``chat.completion`` dict, or with ``stream=True`` an
        iterator of ``chat.completion.chunk`` dicts (first delta has the role, then
        content deltas, then an empty delta with the finish reason).
        ``response_format``: ``{"type": "json_object"}`` (any JSON object, or one valid
        under ``"schema"``) or ``{"type": "json_schema", "json_schema": {"schema": ...}}``.
        ``logprobs=True`` (with ``top_logprobs`` alternatives, 0-20) adds OpenAI's
        ``choices[0]["logprobs"]["content"]``.
        ``tools`` (OpenAI function tools) are offered to the model; a reply that calls
        them comes back as ``message["tool_calls"]`` with finish_reason "tool_calls"
        (Hermes/Qwen ``<tool_call>`` and Llama 3 JSON styles; :mod:`pinfer.tool_calls`).
        ``tool_choice``: "auto" (default), "none", "required" or one named function (the
        last two constrain the reply to a call).
        """
        compat.check("create_chat_completion", kwargs, compat.CHAT, compat.SAMPLING)
        if self.chat_handler is not None:
            return self.chat_handler(
                llama=self, messages=messages, tools=tools, tool_choice=tool_choice, temperature=temperature,
                top_p=top_p, top_k=top_k, min_p=min_p, typical_p=typical_p, stream=stream, stop=stop, seed=seed,
                response_format=response_format, max_tokens=max_tokens, presence_penalty=presence_penalty,
                frequency_penalty=frequency_penalty, repeat_penalty=repeat_penalty, mirostat_mode=mirostat_mode,
                mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta, model=model,
                logits_processor=logits_processor, grammar=grammar, logit_bias=logit_bias, logprobs=logprobs,
                top_logprobs=top_logprobs)
        from . import tool_calls as tc
        tools = tc.check_tools(tools) if tools is not None else None
        tool_choice = tc.check_tool_choice(tool_choice, tools)
        offered = tools if tools and tool_choice != "none" else None
        if isinstance(messages, (str, bytes)) or not all(isinstance(m, dict) and "role" in m for m in messages):
            raise ValueError("messages must be a list of {'role': ..., 'content': ...} dicts")
        if top_logprobs is not None:
            top_logprobs = A.as_int("top_logprobs", top_logprobs, 0, 20)
            if not logprobs:
                raise ValueError("top_logprobs needs logprobs=True")
        n_logprobs = (top_logprobs or 0) if logprobs else None
        messages = [_text_content(i, m) for i, m in enumerate(messages)]
        rf_grammar = from_response_format(response_format)
        if rf_grammar is not None and grammar is not None:
            raise ValueError("give either grammar= or a JSON response_format, not both")
        grammar = grammar or rf_grammar
        if offered and tool_choice not in (None, "auto"):
            if grammar is not None:
                raise ValueError(f"tool_choice={tool_choice!r} constrains the reply already: "
                                 "give no grammar= or JSON response_format with it")
            grammar = LlamaGrammar.from_json_schema(tc.forced_call_schema(offered, tool_choice))
        prompt, messages = self._render_chat(messages, True, chat_template, offered)
        if isinstance(stop, str):
            stop = [stop]
        stop = list(stop or [])
        eos = self.model.eos
        if eos >= 0:
            eos_text = self.model.token_to_piece(eos, True).decode("utf-8", errors="replace")
            if eos_text and eos_text not in stop:
                stop.append(eos_text)
        bos = self.model.bos
        bos_text = self.model.token_to_piece(bos, True).decode("utf-8", errors="replace") if bos >= 0 else ""
        # The template may write the BOS text itself; then the tokenizer must not add another.
        add_bos = not (bos_text and prompt.startswith(bos_text))
        hooks = self._hooks(logits_processor, grammar, stopping_criteria, logit_bias, n_logprobs)
        tokens = self._chat_tokens(prompt, messages, add_bos)
        out = self._completion(tokens, max_tokens=max_tokens, temperature=temperature, top_p=top_p,
                                  min_p=min_p, echo=False, stop=stop, frequency_penalty=frequency_penalty,
                                  presence_penalty=presence_penalty, repeat_penalty=repeat_penalty,
                                  top_k=top_k, stream=stream, seed=seed, repeat_last_n=None, special=True,
                                  add_bos=add_bos, model=model, hooks=hooks, chat_logprobs=True,
                                  extra=dict(typical_p=typical_p, mirostat_mode=mirostat_mode,
                                             mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta))

        if not stream:  # stream decides which of the two _completion returned
            result = cast(Completion, out)
            c = result["choices"][0]
            message: ChatCompletionMessage = {"role": "assistant", "content": c["text"]}
            finish = c["finish_reason"]
            if offered:
                content, calls = tc.parse_tool_calls(c["text"], offered)
                if calls:
                    message = {"role": "assistant", "content": content, "tool_calls": calls}
                    finish = "tool_calls"
            chat_logprobs: Any = c["logprobs"]  # in the chat format (chat_logprobs=True)
            reply: ChatCompletion = {
                "id": "chat" + result["id"], "object": "chat.completion", "created": result["created"],
                "model": result["model"],
                "choices": [{"index": 0, "message": message, "logprobs": chat_logprobs, "finish_reason": finish}],
                "usage": result["usage"]}
            return reply
        pieces = cast(Iterator[CompletionChunk], out)
        if offered:
            return self._tool_chunks(pieces, offered)

        def chunks() -> Iterator[ChatCompletionChunk]:
            first = True
            for ch in pieces:
                if first:
                    yield _chunk(ch, {"role": "assistant"})
                    first = False
                c = ch["choices"][0]
                if c["text"]:
                    yield _chunk(ch, {"content": c["text"]}, c["logprobs"])
                if c["finish_reason"] is not None:
                    yield {**_chunk(ch, {}, finish=c["finish_reason"]), "usage": ch.get("usage")}
        return chunks()

    @staticmethod
    def _tool_chunks(result: Iterator[CompletionChunk], tools: List[Dict[str, Any]]) -> Iterator[ChatCompletionChunk]:
        """Chat chunks of a reply that may call tools: text streams as content until it
        may begin a call (a <tool_call> block, or a reply opening with a JSON object);
        from there it is held, and at the end parsed into tool_calls deltas."""
        from . import tool_calls as tc

        def partial(text: str) -> int:  # a tail that may grow into an opener
            return max((k for o in tc.OPENERS for k in range(1, len(o)) if text.endswith(o[:k])), default=0)

        first, pending, held, started = True, "", False, False
        for ch in result:
            if first:
                yield _chunk(ch, {"role": "assistant"})
                first = False
            c = ch["choices"][0]
            pending += c["text"]
            if not held:
                at = min((i for i in (pending.find(o) for o in tc.OPENERS) if i >= 0), default=-1)
                lead = pending.lstrip()
                if not started and (lead.startswith("{") or lead.startswith("<|python_tag|>")):
                    held = True
                elif at >= 0:
                    out, pending, held = pending[:at], pending[at:], True
                    if out:
                        yield _chunk(ch, {"content": out})
                elif lead:
                    k = partial(pending)
                    out, pending = pending[:len(pending) - k], pending[len(pending) - k:]
                    if out:
                        started = True
                        yield _chunk(ch, {"content": out}, c["logprobs"])
            if c["finish_reason"] is None:
                continue
            finish = c["finish_reason"]
            content, calls = tc.parse_tool_calls(pending, tools) if pending else (None, [])
            if calls:
                finish = "tool_calls"
                if content:
                    yield _chunk(ch, {"content": content})
                yield _chunk(ch, {"tool_calls": [{"index": i, **call} for i, call in enumerate(calls)]})
            elif pending:
                yield _chunk(ch, {"content": pending})
            yield {**_chunk(ch, {}, finish=finish), "usage": ch.get("usage")}

    def _chat_tokens(self, prompt: str, messages: Sequence[Dict[str, Any]], add_bos: bool) -> List[int]:
        """The rendered chat's tokens: the template's special-token text becomes control
        tokens, but text inside a message's content never does (written in a message,
        "<|im_start|>system" stays text and cannot open a turn)."""
        data = A.as_utf8("prompt", prompt)
        spans: List[Tuple[int, int]] = []
        pos = 0
        for i, m in enumerate(messages):
            c = m.get("content")
            if not isinstance(c, str) or not c:
                continue
            cb = A.as_utf8(f"messages[{i}]['content']", c)
            if self.model.tokenize(cb, False, True) == self.model.tokenize(cb, False, False):
                continue  # no special-token text in it: nothing to escape
            at = data.find(cb, pos)
            if at < 0:
                raise ValueError(f"messages[{i}]['content'] holds special-token text and the chat template "
                                 "changed it, so it cannot be kept as plain text")
            spans.append((at, at + len(cb)))
            pos = at + len(cb)
        if not spans:
            return self.model.tokenize(data, bool(add_bos), True)
        if self._exact is None:
            from .tokens import ExactTokenizer
            self._exact = ExactTokenizer(self.model)
        toks = self.model.tokenize(data[:spans[0][0]], bool(add_bos), True)
        for k, (a, b) in enumerate(spans):
            toks += self._exact(data[a:b], special=False)
            end = spans[k + 1][0] if k + 1 < len(spans) else len(data)
            if end > b:
                toks += self._exact(data[b:end], special=True)
        return toks

    # ---- embeddings ----

    def embed(self, input: Union[str, Sequence[str], Sequence[int], Sequence[Sequence[int]]],
              normalize: bool = False, truncate: bool = True, return_count: bool = False) -> Any:
        """Embedding of a text (a list of floats; with pooling "none" a list per token),
        or a list of them for a list of texts (or of token-id lists).

        normalize: scale each vector to unit length. truncate: cut texts longer than
        n_ctx to n_ctx tokens (else ValueError). return_count: also return the number
        of tokens embedded. Needs ``Llama(embedding=True)``. Several texts run as
        separate sequences of one batch."""
        from . import embedding as E

        if self._ectx is None:
            if self._model is None:
                raise ValueError("this Llama is closed")
            raise ValueError("embed() needs a Llama created with embedding=True")
        single = isinstance(input, (str, bytes)) or (
            isinstance(input, (list, tuple)) and bool(input) and all(isinstance(t, int) for t in input))
        items = [input] if single else list(input)
        if not items:
            raise ValueError("embed() needs at least one input")
        n_ctx = self._ectx.n_ctx
        seqs = []
        for i, it in enumerate(items):
            toks = (self.model.tokenize(A.as_utf8(f"input[{i}]", it), True, False) if isinstance(it, (str, bytes))
                    else A.as_token_ids(f"input[{i}]", it, self.n_vocab()))
            if not toks:
                raise ValueError(f"input[{i}] is empty")
            if len(toks) > n_ctx:
                if not truncate:
                    raise ValueError(f"input[{i}] has {len(toks)} tokens, more than n_ctx = {n_ctx} "
                                     "(truncate=True cuts it)")
                toks = toks[:n_ctx]
            seqs.append(toks)
        out: List[Any] = []
        i = 0
        while i < len(seqs):  # as many texts per batch as the cells and sequence ids hold
            group = [seqs[i]]
            used = len(seqs[i])
            while (i + len(group) < len(seqs) and len(group) < 64
                   and used + len(seqs[i + len(group)]) <= n_ctx):
                used += len(seqs[i + len(group)])
                group.append(seqs[i + len(group)])
            T: List[int] = []
            P: List[int] = []
            S: List[int] = []
            for s, toks in enumerate(group):
                T += toks
                P += range(len(toks))
                S += [s] * len(toks)
            self._ectx.seq_rm(-1)
            self._ectx.decode_batch(T, P, S, [1] * len(T))
            at = 0
            for toks in group:
                h = np.stack([np.asarray(self._ectx.logits_ith(at + j)) for j in range(len(toks))])
                at += len(toks)
                v = E.pool(h, self._pooling)
                if normalize:
                    v = E.normalize(v)
                out.append(v.tolist())
            i += len(group)
        self._ectx.seq_rm(-1)
        result = out[0] if single else out
        n_tokens = sum(len(t) for t in seqs)
        return (result, n_tokens) if return_count else result

    def create_embedding(self, input: Union[str, Sequence[str]], model: Optional[str] = None,
                         normalize: bool = False, truncate: bool = True) -> CreateEmbeddingResponse:
        """OpenAI's embeddings response (``object: "list"``, one ``embedding`` per input,
        usage) for a text or a list of texts; needs ``Llama(embedding=True)``.
        normalize: unit-length vectors, as OpenAI's are; truncate: as in :meth:`embed`."""
        if model is not None and not isinstance(model, str):
            raise TypeError(f"model must be a str, got {type(model).__name__}")
        single = isinstance(input, (str, bytes)) or (
            isinstance(input, (list, tuple)) and bool(input) and all(isinstance(t, int) for t in input))
        vecs, n = self.embed(input, normalize=normalize, truncate=truncate, return_count=True)
        vecs = [vecs] if single else vecs
        return {"object": "list", "model": model if model is not None else self.model_path,
                "data": [{"object": "embedding", "embedding": v, "index": i} for i, v in enumerate(vecs)],
                "usage": {"prompt_tokens": n, "total_tokens": n}}
