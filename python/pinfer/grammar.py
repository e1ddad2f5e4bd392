"""Structured output: ``LlamaGrammar`` (llama-cpp-python's name) over llguidance.

A grammar is kept as llguidance's grammar text (GBNF and Lark convert to it, JSON
Schemas compile to it). During generation a :class:`GrammarMask` holds one
llguidance matcher: before each pick it sets the logits of tokens the grammar
forbids to -inf (the mask joins the sampler chain ahead of penalties, top-k/p and
temperature), and after the pick it advances the matcher by the chosen token.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Union

import numpy as np

from .tokens import ExactTokenizer

__all__ = ["LlamaGrammar", "GrammarMask", "JSON_OBJECT_SCHEMA"]

#: response_format {"type": "json_object"}: any JSON object.
JSON_OBJECT_SCHEMA: Dict[str, Any] = {"type": "object"}


def _llg():
    try:
        import llguidance
    except ImportError as e:  # a dependency; only a broken install lacks it
        raise ImportError("structured output (grammar=, response_format=) needs the llguidance package: "
                          "pip install llguidance") from e
    return llguidance


class LlamaGrammar:
    """A grammar constraining generation. Build with :meth:`from_string` (GBNF, as
    llama.cpp's grammars; Lark is accepted too), :meth:`from_file` or
    :meth:`from_json_schema`."""

    def __init__(self, *, _grammar: str, _source: str) -> None:
        self._grammar = _grammar  # llguidance's serialized grammar
        self.source = _source     # what it was made from, for messages

    @classmethod
    def from_string(cls, grammar: str, verbose: bool = True) -> "LlamaGrammar":
        """A GBNF (or Lark) grammar; its ``root`` (or ``start``) rule is the whole output."""
        if not isinstance(grammar, str):
            raise TypeError(f"grammar must be a str, got {type(grammar).__name__}")
        llg = _llg()
        try:
            g = llg.grammar_from("gbnf", grammar)
        except Exception as e:
            raise ValueError(f"invalid grammar: {e}") from None
        ok, is_err, msgs = _validate(g)
        if not ok:
            raise ValueError(f"invalid grammar: {msgs}")
        return cls(_grammar=g, _source="gbnf")

    @classmethod
    def from_file(cls, file: Union[str, os.PathLike], verbose: bool = True) -> "LlamaGrammar":
        """A GBNF grammar read from a file."""
        try:
            with open(file, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ValueError(f"cannot read grammar file {os.fspath(file)!r}: {e.strerror}") from None
        return cls.from_string(text, verbose)

    @classmethod
    def from_json_schema(cls, json_schema: Union[str, Dict[str, Any]], verbose: bool = True) -> "LlamaGrammar":
        """Output that is one JSON value valid under ``json_schema`` (a dict or its JSON text)."""
        if isinstance(json_schema, str):
            try:
                json_schema = json.loads(json_schema)
            except ValueError as e:
                raise ValueError(f"json_schema is not valid JSON: {e}") from None
        if not isinstance(json_schema, (dict, bool)):
            raise TypeError(f"json_schema must be a dict (or its JSON text), got {type(json_schema).__name__}")
        llg = _llg()
        try:
            # Compact JSON: no free whitespace between items, so the output stays short.
            g = llg.LLMatcher.grammar_from_json_schema(json_schema, defaults={"whitespace_flexible": False})
        except Exception as e:
            raise ValueError(f"invalid JSON schema: {e}") from None
        ok, is_err, msgs = _validate(g)
        if not ok:
            raise ValueError(f"unsupported JSON schema: {msgs}")
        return cls(_grammar=g, _source="json_schema")


def _validate(g: str):
    llg = _llg()
    is_err, msgs = llg.LLMatcher.validate_grammar_with_warnings(g)
    return (not is_err), is_err, "; ".join(msgs)


class _TokenizerWrapperSource:
    """What llguidance's TokenizerWrapper reads: every token's bytes (control tokens
    marked with a leading 0xFF, llguidance's convention), EOS/BOS, and an encoder."""

    def __init__(self, model) -> None:
        n = model.n_vocab
        toks: List[bytes] = []
        special: List[int] = []
        for t in range(n):
            plain = model.token_to_piece(t, False)
            full = model.token_to_piece(t, True)
            if not plain and full:  # text only when specials are rendered: a control token
                toks.append(b"\xff" + full)
                special.append(t)
            else:
                toks.append(plain)
        self.tokens = toks
        self.special_token_ids = special
        self.eos_token_id = model.eos
        self.bos_token_id = model.bos if model.bos >= 0 else None
        self._exact = ExactTokenizer(model)

    def __call__(self, text: bytes) -> List[int]:
        if isinstance(text, str):
            text = text.encode("utf-8")
        return self._exact(text)


def lltokenizer(model) -> Any:
    """llguidance's tokenizer for a _core.Model (costs ~n_vocab calls: cache it)."""
    llg = _llg()
    eos = [t for t in range(model.n_vocab) if model.is_eog(t)] or [model.eos]
    return llg.LLTokenizer(llg.TokenizerWrapper(_TokenizerWrapperSource(model)), n_vocab=model.n_vocab,
                           eos_token=eos)


class GrammarMask:
    """One generation's matcher: :meth:`apply` masks logits, :meth:`accept` advances."""

    def __init__(self, grammar: LlamaGrammar, n_vocab: int, tokenizer: Any) -> None:
        if not isinstance(grammar, LlamaGrammar):
            raise TypeError(f"grammar must be a LlamaGrammar, got {type(grammar).__name__}")
        llg = _llg()
        self._n_vocab = n_vocab
        self._m = llg.LLMatcher(tokenizer, grammar._grammar, log_level=0)
        if self._m.is_error():
            raise ValueError(f"grammar: {self._m.get_error()}")
        self._words = (self._n_vocab + 31) // 32
        self._bits = np.empty(self._words, dtype=np.int32)

    def apply(self, scores: np.ndarray) -> None:
        """Set forbidden tokens' scores (float32 [n_vocab], in place) to -inf."""
        self._m.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
        if self._m.is_error():
            raise RuntimeError(f"grammar: {self._m.get_error()}")
        allowed = np.unpackbits(self._bits.view(np.uint8), bitorder="little")[: self._n_vocab]
        scores[allowed == 0] = -np.inf

    def accept(self, token: int) -> None:
        if not self._m.consume_token(int(token)):
            raise RuntimeError(f"grammar: token {token} was not allowed: {self._m.get_error()}")

    def is_stopped(self) -> bool:
        return self._m.is_stopped()

    def is_accepting(self) -> bool:
        return self._m.is_accepting()


def from_response_format(response_format: Optional[Dict[str, Any]]) -> Optional[LlamaGrammar]:
    """OpenAI's chat response_format as a grammar (None for plain text)."""
    if response_format is None:
        return None
    if not isinstance(response_format, dict) or "type" not in response_format:
        raise ValueError("response_format must be a dict with a 'type' key, e.g. {'type': 'json_object'}")
    kind = response_format["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        schema = response_format.get("schema") or JSON_OBJECT_SCHEMA
        return LlamaGrammar.from_json_schema(schema)
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        # OpenAI nests it: {"json_schema": {"name": ..., "schema": {...}}}; llama-cpp-python
        # also takes {"schema": {...}} at the top level.
        if isinstance(spec, dict) and "schema" in spec:
            schema = spec["schema"]
        elif "schema" in response_format:
            schema = response_format["schema"]
        else:
            raise ValueError("response_format type 'json_schema' needs json_schema={'schema': {...}}")
        return LlamaGrammar.from_json_schema(schema)
    raise ValueError(f"response_format type {kind!r} is not one of 'text', 'json_object', 'json_schema'")
