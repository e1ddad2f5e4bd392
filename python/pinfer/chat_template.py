"""Rendering a model file's Jinja chat template with bounds.

A template comes from the model file, so it is untrusted: it runs in Jinja's
immutable sandbox (no attribute tricks, range() capped), and on top of that
rendering is bounded in time, in output size and in the memory it may grow,
so that a nested loop or ``{{ 'x' * 10**10 }}`` is a clear error instead of a
hang or a 10 GB allocation:

- ``*``, ``**`` and ``+`` on strings, lists and integers are checked before
  they run (the result would exceed the output cap);
- a trace function on the template's own frames checks the deadline on every
  line and the growth of the process's peak memory
  (this also stops a string doubled with ``~`` in a loop);
- the output is produced in chunks and stops at the cap.
"""
from __future__ import annotations

import resource
import sys
import time
from typing import Any

MAX_OUTPUT_CHARS = 16 << 20   # far above any chat prompt a context can hold
MAX_SECONDS = 5.0
MAX_MEMORY_GROWTH = 256 << 20  # bytes of peak RSS a render may add (a doubling overshoots it 2x at most)
_MAX_EXPONENT = 4096


class ChatTemplateError(ValueError):
    """The template failed or exceeded a bound; the message says which."""


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _environment():
    from jinja2.exceptions import SecurityError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class BoundedEnvironment(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["*", "**", "+"])

        def call_binop(self, context, operator, left, right):
            sized = (str, bytes, list, tuple)
            if operator == "*":
                for a, b in ((left, right), (right, left)):
                    if isinstance(a, sized) and isinstance(b, int) and len(a) * b > MAX_OUTPUT_CHARS:
                        raise SecurityError(f"a sequence of {len(a)} repeated {b} times exceeds the output limit "
                                            f"({MAX_OUTPUT_CHARS} characters)")
            elif operator == "**":
                if isinstance(left, int) and isinstance(right, int) and abs(right) > _MAX_EXPONENT and abs(left) > 1:
                    raise SecurityError(f"{left} ** {right}: exponent too large")
            elif operator == "+":
                if isinstance(left, sized) and isinstance(right, sized) and len(left) + len(right) > MAX_OUTPUT_CHARS:
                    raise SecurityError("a concatenation exceeds the output limit "
                                        f"({MAX_OUTPUT_CHARS} characters)")
            return super().call_binop(context, operator, left, right)

    return BoundedEnvironment(trim_blocks=True, lstrip_blocks=True)


def uses_variable(template: str, name: str) -> bool:
    """Whether the template reads the variable ``name`` (e.g. ``tools``)."""
    from jinja2 import meta
    from jinja2.exceptions import TemplateError

    try:
        return name in meta.find_undeclared_variables(_environment().parse(template))
    except TemplateError as e:
        raise ChatTemplateError(f"chat template error: {e}") from e


def render(template: str, globals_: dict, **variables: Any) -> str:
    """Render ``template`` with ``variables``; ``globals_`` are extra functions
    (raise_exception, strftime_now). Raises ChatTemplateError."""
    from jinja2.exceptions import TemplateError

    env = _environment()
    env.globals.update(globals_)
    try:
        tmpl = env.from_string(template)
    except TemplateError as e:
        raise ChatTemplateError(f"chat template error: {e}") from e

    deadline = time.monotonic() + MAX_SECONDS
    rss0 = _peak_rss()

    def local(frame, event, arg):
        if event == "line":
            if time.monotonic() > deadline:
                raise ChatTemplateError(f"chat template took longer than {MAX_SECONDS:g} s to render")
            if _peak_rss() - rss0 > MAX_MEMORY_GROWTH:
                raise ChatTemplateError(f"chat template used more than {MAX_MEMORY_GROWTH >> 20} MiB to render")
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code.co_filename == "<template>" else None

    old = sys.gettrace()
    sys.settrace(tracer)
    try:
        out, n = [], 0
        for chunk in tmpl.generate(**variables):
            n += len(chunk)
            if n > MAX_OUTPUT_CHARS:
                raise ChatTemplateError(f"chat template output exceeds {MAX_OUTPUT_CHARS} characters")
            out.append(chunk)
        return "".join(out)
    except TemplateError as e:
        raise ChatTemplateError(f"chat template error: {e}") from e
    except (OverflowError, MemoryError, RecursionError) as e:
        raise ChatTemplateError(f"chat template error: {type(e).__name__}: {e}") from e
    finally:
        sys.settrace(old)


def render_messages(template: str, messages: list, add_generation_prompt: bool, bos_token: str, eos_token: str,
                    tools: Any = None) -> "tuple[str, list]":
    """A chat rendered as pinfer.Llama and pinfer-cli render it (one formatter):
    the Jinja template with raise_exception and strftime_now; ``tools`` go to a
    template that reads them, else into a system message (pinfer.tool_calls).
    Returns (prompt, the messages as rendered)."""
    from jinja2.exceptions import TemplateError

    from .tool_calls import as_plain_history

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    def strftime_now(fmt: str) -> str:
        return time.strftime(fmt)

    extra = {}
    if uses_variable(template, "tools"):
        msgs = list(messages)
        if tools:
            extra["tools"] = list(tools)
    else:
        msgs = as_plain_history(messages, tools)
    return render(template, {"raise_exception": raise_exception, "strftime_now": strftime_now},
                  messages=msgs, bos_token=bos_token, eos_token=eos_token,
                  add_generation_prompt=add_generation_prompt, **extra), msgs
