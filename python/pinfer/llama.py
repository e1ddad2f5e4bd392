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
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _core
from . import args as A

__all__ = ["Llama"]

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
        device: where hot layers and neurons run: "cpu" (default), "cuda" (an
            NVIDIA GPU; installs built with PINFER_CUDA, see ``_core.HAS_CUDA``)
            or "sim", a simulated GPU that runs the hybrid plan and counts its
            traffic (:attr:`plan`, :meth:`transfer_stats`).
        n_gpu_layers: layers on the device, in order (None / -1: as many as the
            budget holds). Without a device a notice is printed and the CPU runs all.
        vram_budget: GiB of device memory the plan may use (None: all of it).
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
        device: str = "cpu",
        n_gpu_layers: Optional[int] = None,
        vram_budget: Optional[float] = None,
        **kwargs: Any,
    ) -> None:
        self._model: Optional[_core.Model] = None
        self._ctx: Optional[_core.Context] = None
        # Arguments of llama-cpp-python that have no meaning here are accepted and ignored
        # (main_gpu etc.), so existing code runs unchanged.
        if model_path is None:
            model_path = default_model_path()
        model_path = os.fspath(model_path)
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
        if device == "cpu" and n_gpu_layers not in (None, 0):
            print(f"pinfer: notice: n_gpu_layers={n_gpu_layers} without a device (device='cuda' or 'sim'): "
                  "every layer runs on the CPU", file=sys.stderr)
        self._ctx = _core.Context(self._model, n_ctx, n_batch, n_threads or 0, "f16", sparse,
                                  bool(sparse_stats), bool(sparse_verify), precision=precision, device=device,
                                  n_gpu_layers=-1 if n_gpu_layers is None else n_gpu_layers,
                                  vram_budget=float(vram_budget or 0.0))
        if self._ctx.notice:
            print(f"pinfer: notice: {self._ctx.notice}", file=sys.stderr)
        if verbose:
            print(f"pinfer: loaded {model_path} in {1e3 * (time.perf_counter() - t0):.1f} ms: "
                  f"{self._model.desc}; n_ctx={self._ctx.n_ctx}", file=sys.stderr)
        self._seed_rng = random.Random(None if seed in (None, -1, DEFAULT_SEED) else seed)
        self._random_seed = seed in (None, -1, DEFAULT_SEED)
        self._input_ids: List[int] = []  # tokens whose keys/values are in the cache

    # ---- resources ----

    def close(self) -> None:
        """Free the context and model now (also done when the object is collected)."""
        if self._ctx is not None:
            self._ctx.close()
            self._ctx = None
        if self._model is not None:
            self._model.close()
            self._model = None
        self._input_ids = []

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
        """A few string metadata values of the GGUF file (architecture, name, chat template)."""
        out = {}
        for key in ("general.architecture", "general.name", "tokenizer.chat_template", "tokenizer.ggml.model"):
            v = self.model.meta(key)
            if v is not None:
                out[key] = v
        return out

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
        self.ctx.kv_truncate(0)
        self._input_ids = []

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
            self.ctx.kv_truncate(keep)
            del self._input_ids[keep:]
        self.eval(prompt_tokens[keep:])

    def _tokenize_prompt(self, prompt: Prompt, special: bool = False, add_bos: bool = True) -> List[int]:
        if isinstance(prompt, (str, bytes)):
            return self.model.tokenize(A.as_utf8("prompt", prompt), bool(add_bos), bool(special))
        return A.as_token_ids("prompt", prompt, self.n_vocab())

    def _make_sampler(self, temperature: float, top_k: int, top_p: float, min_p: float,
                      repeat_penalty: float, repeat_last_n: int, frequency_penalty: float,
                      presence_penalty: float, seed: Optional[int]) -> "_core.LlamaSampler":
        temperature, top_p, min_p = (A.as_float(n, v) for n, v in
                                     (("temperature", temperature), ("top_p", top_p), ("min_p", min_p)))
        repeat_penalty, frequency_penalty, presence_penalty = (
            A.as_float(n, v) for n, v in (("repeat_penalty", repeat_penalty), ("frequency_penalty", frequency_penalty),
                                          ("presence_penalty", presence_penalty)))
        top_k = A.as_int("top_k", top_k, -2**31)
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
        return _core.LlamaSampler(self.model, float(temperature), int(top_k), float(top_p), float(min_p),
                                  float(repeat_penalty), int(repeat_last_n), float(frequency_penalty),
                                  float(presence_penalty), int(seed))

    def generate(self, tokens: Sequence[int], temperature: float = 0.8, top_k: int = 40, top_p: float = 0.95,
                 min_p: float = 0.05, repeat_penalty: float = 1.0, repeat_last_n: int = 64,
                 frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                 seed: Optional[int] = None, reset: bool = True) -> Iterator[int]:
        """Yield sampled tokens after evaluating ``tokens``; runs until the caller stops
        (or the context is full). End-of-generation tokens are yielded like any other."""
        toks = self._tokenize_prompt(tokens)
        if reset:
            self._prepare(toks)
        else:
            self.eval(toks)
        sampler = self._make_sampler(temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n,
                                     frequency_penalty, presence_penalty, seed)
        for t in toks:
            sampler.accept(t)
        while True:
            tok = sampler.sample(self.ctx)
            sampler.accept(tok)
            yield tok
            if self.n_tokens >= self.ctx.n_ctx:
                return
            self.eval([tok])

    # ---- completion ----

    def _completion_stream(self, prompt_tokens: List[int], max_tokens: Optional[int], stop: List[bytes],
                           sampler: "_core.LlamaSampler", state: Dict[str, Any]) -> Iterator[str]:
        """Yield the completion's text as it becomes final; sets state['finish_reason']
        and state['completion_tokens']. Text that may begin a stop string, or that ends
        inside a UTF-8 character, is held back until it is resolved."""
        if self.verbose:
            self.ctx.reset_timings()
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
            tok = sampler.sample(self.ctx)
            sampler.accept(tok)
            if self.model.is_eog(tok):
                finish = "stop"
                break
            n_gen += 1
            buf += self.model.token_to_piece(tok, False)
            if stop:
                # Held-back text is never emitted, so a stop string starts at >= emitted.
                hits = [i for i in (buf.find(s, emitted) for s in stop) if i >= 0]
                if hits:
                    buf = buf[:min(hits)]
                    finish = "stop"
                    break
            end = len(buf) - (_partial_stop_len(buf, stop) if stop else 0)
            end = _utf8_complete(buf, emitted, end)
            if end > emitted:
                yield buf[emitted:end].decode("utf-8", errors="replace")
                emitted = end
            if (limit is not None and n_gen >= limit) or self.n_tokens >= n_ctx:
                break  # finish_reason "length"; the last token needs no evaluation
            self.eval([tok])
        if emitted < len(buf):
            yield buf[emitted:].decode("utf-8", errors="replace")
        state["finish_reason"] = finish
        state["completion_tokens"] = n_gen
        if self.verbose:
            self._print_timings()

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
        repeat_last_n: int = 64,
        **kwargs: Any,
    ) -> Union[Dict[str, Any], Iterator[Dict[str, Any]]]:
        """Complete ``prompt`` (text or token ids).

        Returns an OpenAI-style ``text_completion`` dict, or with ``stream=True`` an
        iterator of chunks whose texts concatenate to the same completion.
        ``max_tokens`` None or <= 0 generates until end of text or a full context.
        ``stop``: strings that end the completion (not included in the text).
        ``temperature`` 0 is greedy. ``seed`` fixes this call's sampling.
        """
        if suffix is not None:
            raise ValueError("suffix (fill-in-the-middle) is not supported")
        if logprobs is not None:
            raise ValueError("logprobs are not supported")
        return self._completion(prompt, max_tokens=max_tokens, temperature=temperature, top_p=top_p,
                                min_p=min_p, echo=echo, stop=stop, frequency_penalty=frequency_penalty,
                                presence_penalty=presence_penalty, repeat_penalty=repeat_penalty,
                                top_k=top_k, stream=stream, seed=seed, repeat_last_n=repeat_last_n,
                                special=False, add_bos=True)

    def _completion(self, prompt: Prompt, *, max_tokens: Optional[int], temperature: float, top_p: float,
                    min_p: float, echo: bool, stop: Optional[Union[str, List[str]]], frequency_penalty: float,
                    presence_penalty: float, repeat_penalty: float, top_k: int, stream: bool,
                    seed: Optional[int], repeat_last_n: int, special: bool, add_bos: bool):
        self.ctx  # raise now if closed, not on the first next() of a stream
        stops = [A.as_utf8("stop", s) for s in A.as_str_list("stop", stop) if s]
        if max_tokens is not None:
            max_tokens = A.as_int("max_tokens", max_tokens, None, None)
        prompt_tokens = self._tokenize_prompt(prompt, special=special, add_bos=add_bos)
        if not prompt_tokens:
            raise ValueError("the prompt is empty and the model adds no BOS token")
        if len(prompt_tokens) > self.ctx.n_ctx:
            raise ValueError(f"prompt is too long: {len(prompt_tokens)} tokens, but the context holds "
                             f"{self.ctx.n_ctx} (raise n_ctx)")
        sampler = self._make_sampler(temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n,
                                     frequency_penalty, presence_penalty, seed)
        cid = f"cmpl-{uuid.uuid4()}"
        created = int(time.time())
        model_name = self.model_path
        if echo:
            prompt_text = (prompt if isinstance(prompt, str) else
                           prompt.decode("utf-8", errors="replace") if isinstance(prompt, bytes) else
                           self.detokenize(prompt_tokens).decode("utf-8", errors="replace"))
        else:
            prompt_text = ""
        state: Dict[str, Any] = {}
        pieces = self._completion_stream(prompt_tokens, max_tokens, stops, sampler, state)

        def usage() -> Dict[str, int]:
            n_c = state.get("completion_tokens", 0)
            return {"prompt_tokens": len(prompt_tokens), "completion_tokens": n_c,
                    "total_tokens": len(prompt_tokens) + n_c}

        if stream:
            def chunks() -> Iterator[Dict[str, Any]]:
                def chunk(text: str, finish: Optional[str]) -> Dict[str, Any]:
                    return {"id": cid, "object": "text_completion", "created": created, "model": model_name,
                            "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish}]}
                if prompt_text:
                    yield chunk(prompt_text, None)
                for text in pieces:
                    if text:
                        yield chunk(text, None)
                last = chunk("", state["finish_reason"])
                last["usage"] = usage()
                yield last
            return chunks()

        text = prompt_text + "".join(pieces)
        return {"id": cid, "object": "text_completion", "created": created, "model": model_name,
                "choices": [{"text": text, "index": 0, "logprobs": None,
                             "finish_reason": state["finish_reason"]}],
                "usage": usage()}

    def __call__(self, prompt: Prompt, *args: Any, **kwargs: Any):
        """Same as :meth:`create_completion`."""
        return self.create_completion(prompt, *args, **kwargs)

    # ---- chat ----

    def apply_chat_template(self, messages: Sequence[Dict[str, Any]], add_generation_prompt: bool = True,
                            chat_template: Optional[str] = None) -> str:
        """Render messages with the model's Jinja chat template (``tokenizer.chat_template``),
        bounded in time, output size and memory (pinfer.chat_template)."""
        from jinja2.exceptions import TemplateError

        from . import chat_template as ct

        template = chat_template or self.model.chat_template
        if not template:
            raise ValueError("the model has no chat template (tokenizer.chat_template); pass chat_template=...")

        def raise_exception(message: str) -> None:
            raise TemplateError(message)

        def strftime_now(fmt: str) -> str:
            return time.strftime(fmt)

        bos, eos = self.model.bos, self.model.eos
        bos_text = self.model.token_to_piece(bos, True).decode("utf-8", errors="replace") if bos >= 0 else ""
        eos_text = self.model.token_to_piece(eos, True).decode("utf-8", errors="replace") if eos >= 0 else ""
        return ct.render(template, {"raise_exception": raise_exception, "strftime_now": strftime_now},
                         messages=list(messages), bos_token=bos_text, eos_token=eos_text,
                         add_generation_prompt=add_generation_prompt)

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
        **kwargs: Any,
    ) -> Union[Dict[str, Any], Iterator[Dict[str, Any]]]:
        """Reply to a chat (``[{"role": ..., "content": ...}, ...]``).

        Returns an OpenAI-style ``chat.completion`` dict, or with ``stream=True`` an
        iterator of ``chat.completion.chunk`` dicts (first delta has the role, then
        content deltas, then an empty delta with the finish reason).
        """
        if isinstance(messages, (str, bytes)) or not all(isinstance(m, dict) and "role" in m for m in messages):
            raise ValueError("messages must be a list of {'role': ..., 'content': ...} dicts")
        prompt = self.apply_chat_template(messages, True, chat_template)
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
        result = self._completion(prompt, max_tokens=max_tokens, temperature=temperature, top_p=top_p,
                                  min_p=min_p, echo=False, stop=stop, frequency_penalty=frequency_penalty,
                                  presence_penalty=presence_penalty, repeat_penalty=repeat_penalty,
                                  top_k=top_k, stream=stream, seed=seed, repeat_last_n=64, special=True,
                                  add_bos=add_bos)
        if not stream:
            c = result["choices"][0]
            return {"id": "chat" + result["id"], "object": "chat.completion", "created": result["created"],
                    "model": result["model"],
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": c["text"]},
                                 "logprobs": None, "finish_reason": c["finish_reason"]}],
                    "usage": result["usage"]}

        def chunks() -> Iterator[Dict[str, Any]]:
            first = True
            for ch in result:
                base = {"id": "chat" + ch["id"], "object": "chat.completion.chunk", "created": ch["created"],
                        "model": ch["model"]}
                if first:
                    yield {**base, "choices": [{"index": 0, "delta": {"role": "assistant"}, "logprobs": None,
                                                "finish_reason": None}]}
                    first = False
                c = ch["choices"][0]
                if c["finish_reason"] is None:
                    yield {**base, "choices": [{"index": 0, "delta": {"content": c["text"]}, "logprobs": None,
                                                "finish_reason": None}]}
                else:
                    if c["text"]:
                        yield {**base, "choices": [{"index": 0, "delta": {"content": c["text"]},
                                                    "logprobs": None, "finish_reason": None}]}
                    yield {**base, "choices": [{"index": 0, "delta": {}, "logprobs": None,
                                                "finish_reason": c["finish_reason"]}],
                           "usage": ch.get("usage")}
        return chunks()
