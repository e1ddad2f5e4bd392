"""Cost of the structured-output mask (llguidance) per generated token, against the
decode time per token, measured in one run on one model.

Each repetition generates the same number of tokens twice with the same seed: once
free, once under a JSON-Schema grammar. The mask work (computing llguidance's bitmask,
applying it to the logits, advancing the matcher) is timed around GrammarMask's
calls, so its share of the constrained run's time per token is printed directly.

    python tools/bench_grammar.py -m SmolLM2-135M-Instruct.Q4_1.gguf [--tokens 64] [--reps 3]
"""
import argparse
import time

from benchinfo import cpu_model
from pinfer import Llama, LlamaGrammar
from pinfer import grammar as G

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 40},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "friends": {"type": "array", "maxItems": 8, "items": {"type": "string", "maxLength": 30}},
    "city": {"type": "string", "maxLength": 40}}, "required": ["name", "age", "friends", "city"],
    "additionalProperties": False}


class Timed:
    """Wraps GrammarMask.apply/accept to add their wall time up."""

    def __init__(self):
        self.s = 0.0
        self.calls = 0
        self._apply, self._accept = G.GrammarMask.apply, G.GrammarMask.accept
        timed = self

        def apply(mask, scores):
            t = time.perf_counter()
            timed._apply(mask, scores)
            timed.s += time.perf_counter() - t
            timed.calls += 1

        def accept(mask, token):
            t = time.perf_counter()
            timed._accept(mask, token)
            timed.s += time.perf_counter() - t
        G.GrammarMask.apply, G.GrammarMask.accept = apply, accept


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("-t", "--threads", type=int, default=2)
    a = ap.parse_args()
    llm = Llama(a.model, n_ctx=512, n_threads=a.threads, seed=1)
    msgs = [{"role": "user", "content": "Describe a person as JSON with name, age, friends and city."}]
    g = LlamaGrammar.from_json_schema(SCHEMA)
    t0 = time.perf_counter()
    llm.create_chat_completion(msgs, response_format={"type": "json_object"}, max_tokens=1)  # builds the tokenizer
    print(f"llguidance tokenizer build (once per model): {1e3 * (time.perf_counter() - t0):.0f} ms")
    timed = Timed()
    print(f"{cpu_model()}, {a.threads} threads, {a.tokens} tokens per run, n_vocab {llm.n_vocab()}")
    print("rep | free ms/token | constrained ms/token | mask ms/token | mask share of constrained")
    for r in range(a.reps):
        t = time.perf_counter()
        out = llm.create_chat_completion(msgs, max_tokens=a.tokens, temperature=0.8, seed=r)
        free = (time.perf_counter() - t) / max(1, out["usage"]["completion_tokens"])
        timed.s, timed.calls = 0.0, 0
        t = time.perf_counter()
        out = llm.create_chat_completion(msgs, max_tokens=a.tokens, temperature=0.8, seed=r,
                                         response_format={"type": "json_schema", "json_schema": {"schema": SCHEMA}})
        n = max(1, out["usage"]["completion_tokens"])
        cons = (time.perf_counter() - t) / n
        mask = timed.s / max(1, timed.calls)
        print(f"{r:3d} | {1e3 * free:13.2f} | {1e3 * cons:20.2f} | {1e3 * mask:13.3f} | "
              f"{100 * timed.s / n / cons:5.1f}%  ({n} tokens)")
    del g


if __name__ == "__main__":
    main()
