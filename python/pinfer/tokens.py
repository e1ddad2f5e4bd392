"""Tokens of exactly the given bytes, for text that continues other text.

SentencePiece tokenizers prepend a space to the text they are given (the "dummy
prefix"), so tokenizing a piece of a longer text on its own adds a space that is not
there. :class:`ExactTokenizer` tokenizes such pieces after a newline and drops the
newline's tokens; for tokenizers without a dummy prefix it is plain tokenization.
"""
from __future__ import annotations

from typing import List


class ExactTokenizer:
    def __init__(self, model) -> None:
        self._model = model
        self._prefix: List[int] = []
        if self.pieces(model.tokenize(b"x", False, False)) != b"x":
            self._prefix = list(model.tokenize(b"\n", False, False))

    def pieces(self, toks: List[int]) -> bytes:
        return b"".join(self._model.token_to_piece(t, False) for t in toks)

    def __call__(self, text: bytes, special: bool = False) -> List[int]:
        if self._prefix:
            full = list(self._model.tokenize(b"\n" + text, False, special))
            n = len(self._prefix)
            if full[:n] == self._prefix and (special or self.pieces(full[n:]) == text):
                return full[n:]
        return list(self._model.tokenize(text, False, special))
