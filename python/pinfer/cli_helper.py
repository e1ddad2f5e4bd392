"""pinfer-cli's Python side: the chat formatter and the grammar engine the C++ CLI
shares with pinfer.Llama (one implementation of each), served over a pipe.

The CLI starts ``python -c BOOT`` once and exchanges requests on stdin/stdout. A
message is a count line ``N\\n`` followed by N fields, each ``<bytes>\\n`` and the
bytes. Requests (first field the verb):

- ``render TEMPLATE BOS EOS ADD_GEN ROLE1 CONTENT1 ...`` -> the prompt;
- ``grammar MODEL_PATH KIND TEXT`` (KIND gbnf or json_schema) -> "ok";
- ``mask`` -> the allowed tokens as a little-endian bitmask of n_vocab bits;
- ``accept TOKEN`` -> "1" once the grammar is complete, else "0".

A reply is ``OK`` and its fields, or ``ER`` and the error message.
"""
from __future__ import annotations

import sys
from typing import Any, BinaryIO, List, Optional


def read_message(f: BinaryIO) -> Optional[List[bytes]]:
    line = f.readline()
    if not line:
        return None
    fields = []
    for _ in range(int(line)):
        n = int(f.readline())
        fields.append(f.read(n))
        if len(fields[-1]) != n:
            return None
    return fields


def write_message(f: BinaryIO, tag: bytes, fields: List[bytes]) -> None:
    f.write(tag + b"\n" + str(len(fields)).encode() + b"\n")
    for x in fields:
        f.write(str(len(x)).encode() + b"\n" + x)
    f.flush()


class Helper:
    def __init__(self) -> None:
        self.mask: Any = None   # grammar.GrammarMask, once a grammar request came
        self.model: Any = None  # _core.Model of the grammar's vocabulary

    def handle(self, req: List[bytes]) -> List[bytes]:
        verb = req[0].decode()
        if verb == "render":
            from .chat_template import render_messages

            template, bos, eos = (x.decode("utf-8") for x in req[1:4])
            add_gen = req[4] == b"1"
            it = [x.decode("utf-8") for x in req[5:]]
            msgs = [{"role": r, "content": c} for r, c in zip(it[0::2], it[1::2])]
            return [render_messages(template, msgs, add_gen, bos, eos)[0].encode("utf-8")]
        if verb == "grammar":
            from . import _core
            from .grammar import GrammarMask, LlamaGrammar, lltokenizer

            path, kind, text = req[1].decode(), req[2].decode(), req[3].decode("utf-8")
            g = LlamaGrammar.from_json_schema(text) if kind == "json_schema" else LlamaGrammar.from_string(text)
            if self.model is None:
                self.model = _core.Model(path)
                self.tok = lltokenizer(self.model)
            self.mask = GrammarMask(g, self.model.n_vocab, self.tok)
            return [b"ok"]
        if verb == "mask":
            import numpy as np

            scores = np.zeros(self.model.n_vocab, dtype=np.float32)
            self.mask.apply(scores)
            return [np.packbits(np.isfinite(scores), bitorder="little").tobytes()]
        if verb == "accept":
            self.mask.accept(int(req[1]))
            return [b"1" if self.mask.is_stopped() else b"0"]
        raise ValueError(f"unknown request {verb!r}")


def main() -> int:
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    h = Helper()
    while True:
        req = read_message(inp)
        if req is None:
            return 0
        try:
            write_message(out, b"OK", h.handle(req))
        except Exception as e:  # the CLI prints it and stops
            write_message(out, b"ER", [f"{e}".encode("utf-8", errors="replace")])


if __name__ == "__main__":
    sys.exit(main())
