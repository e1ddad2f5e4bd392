"""Tool calling for chat completions: OpenAI ``tools`` / ``tool_choice`` in, OpenAI
``tool_calls`` out.

Two output styles are recognised, whichever the model writes:

- Hermes / Qwen: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks
  (several allowed, text around them stays content; a last block cut off by the end of
  the reply counts once its JSON is complete);
- Llama 3 JSON: the whole reply is one JSON object ``{"name": ..., "parameters": {...}}``
  (``"arguments"`` accepted too), optionally after ``<|python_tag|>``.

A call is only recognised for a function named in ``tools``. A chat template that
reads ``tools`` renders them itself; for one that does not (and for the built-in
``chat_format`` families) the tools are described in a system message asking for the
Hermes style, and earlier tool calls / tool results in the history are written out
in that style. ``tool_choice`` "required" or a named function constrains the reply to
a call with a JSON-Schema grammar.
"""
from __future__ import annotations

import json
import re
import uuid
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .types import ToolCall

__all__ = ["check_tools", "check_tool_choice", "describe_tools", "as_plain_history", "forced_call_schema",
           "parse_tool_calls", "OPENERS"]

_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
#: Text that may begin a tool call (held back while streaming).
OPENERS = ("<tool_call>",)


def check_tools(tools: Any) -> List[Dict[str, Any]]:
    """Validate OpenAI tools; returns them as a list."""
    if not isinstance(tools, (list, tuple)) or not tools:
        raise ValueError("tools must be a non-empty list of {'type': 'function', 'function': {...}}")
    names = set()
    for i, t in enumerate(tools):
        f = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(f, dict):
            raise ValueError(f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ..., ...}}}}")
        name = f.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"tools[{i}]['function']['name'] must be a non-empty str")
        if name in names:
            raise ValueError(f"tools: the function name {name!r} is given twice")
        names.add(name)
        params = f.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise ValueError(f"tools[{i}]['function']['parameters'] must be a JSON Schema object")
    return list(tools)


def check_tool_choice(choice: Any, tools: Optional[List[Dict[str, Any]]]) -> Optional[Any]:
    """"none", "auto", "required" or {"type": "function", "function": {"name": ...}}."""
    if choice is None:
        return None
    if choice in ("none", "auto", "required"):
        if choice == "required" and not tools:
            raise ValueError("tool_choice='required' needs tools=")
        return choice
    name = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    if not isinstance(choice, dict) or choice.get("type") != "function" or not isinstance(name, str):
        raise ValueError("tool_choice must be 'none', 'auto', 'required' or "
                         "{'type': 'function', 'function': {'name': ...}}")
    if not tools or name not in {t["function"]["name"] for t in tools}:
        raise ValueError(f"tool_choice names the function {name!r}, which is not in tools")
    return choice


def describe_tools(tools: Sequence[Dict[str, Any]]) -> str:
    """The system text that offers the tools in the Hermes style."""
    specs = "\n".join(json.dumps(t["function"], ensure_ascii=False) for t in tools)
    return ("You may call functions to help with the request. The functions, as JSON:\n"
            f"<tools>\n{specs}\n</tools>\n"
            "To call a function, reply with one block per call:\n"
            '<tool_call>\n{"name": "<function name>", "arguments": <arguments as a JSON object>}\n</tool_call>')


def as_plain_history(messages: Sequence[Dict[str, Any]], tools: Optional[Sequence[Dict[str, Any]]]
                     ) -> List[Dict[str, Any]]:
    """Messages for a template that knows nothing of tools: the tool description joins
    the system message, assistant tool calls become <tool_call> text, tool results
    become user turns in <tool_response> blocks."""
    out: List[Dict[str, Any]] = []
    for m in messages:
        role, content = m.get("role"), m.get("content") or ""
        if role == "assistant" and m.get("tool_calls"):
            blocks = []
            for c in m["tool_calls"]:
                f = c.get("function", {}) if isinstance(c, dict) else {}
                args = f.get("arguments", "{}")
                try:
                    args = json.loads(args) if isinstance(args, str) else args
                except ValueError:
                    pass
                blocks.append("<tool_call>\n" + json.dumps({"name": f.get("name"), "arguments": args},
                                                           ensure_ascii=False) + "\n</tool_call>")
            content = (content + "\n" if content else "") + "\n".join(blocks)
            out.append({"role": "assistant", "content": content})
        elif role == "tool":
            text = f"<tool_response>\n{content}\n</tool_response>"
            if out and out[-1]["role"] == "user" and out[-1].get("_tool"):
                out[-1]["content"] += "\n" + text  # several results answer one turn
            else:
                out.append({"role": "user", "content": text, "_tool": True})
        else:
            out.append({**m, "content": content})
    for m in out:
        m.pop("_tool", None)
    if tools:
        desc = describe_tools(tools)
        if out and out[0]["role"] == "system":
            out[0] = {**out[0], "content": out[0]["content"] + "\n\n" + desc}
        else:
            out.insert(0, {"role": "system", "content": desc})
    return out


def forced_call_schema(tools: Sequence[Dict[str, Any]], choice: Any) -> Dict[str, Any]:
    """JSON Schema of a reply that is one call (Llama 3 JSON style): of the named
    function, or with "required" of any."""
    def one(f: Dict[str, Any]) -> Dict[str, Any]:
        return {"type": "object", "properties": {"name": {"const": f["name"]},
                                                  "arguments": f.get("parameters") or {"type": "object"}},
                "required": ["name", "arguments"], "additionalProperties": False}
    fs = [t["function"] for t in tools]
    if isinstance(choice, dict):
        fs = [f for f in fs if f["name"] == choice["function"]["name"]]
    return one(fs[0]) if len(fs) == 1 else {"anyOf": [one(f) for f in fs]}


def _call(obj: Any, names: set) -> Optional[ToolCall]:
    if not isinstance(obj, dict) or obj.get("name") not in names:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": obj["name"], "arguments": json.dumps(args, ensure_ascii=False)}}


def parse_tool_calls(text: str, tools: Sequence[Dict[str, Any]]) -> Tuple[Optional[str], List[ToolCall]]:
    """(content, tool_calls) of a reply: content is the text outside the calls (None if
    empty once calls were found); no call recognised leaves the text as it was."""
    names = {t["function"]["name"] for t in tools}
    if "<tool_call>" in text:
        calls: List[ToolCall] = []
        spans: List[Tuple[int, int]] = []
        for m in _BLOCK.finditer(text):
            try:
                c = _call(json.loads(m.group(1)), names)
            except ValueError:
                c = None
            if c is not None:
                calls.append(c)
                spans.append(m.span())
        if calls:
            rest, at = [], 0
            for a, b in spans:
                rest.append(text[at:a])
                at = b
            rest.append(text[at:])
            content = "".join(rest).strip()
            return (content or None), calls
    body = text.strip()
    if body.startswith("<|python_tag|>"):
        body = body[len("<|python_tag|>"):].strip()
    if body.startswith("{"):
        try:
            c = _call(json.loads(body), names)
        except ValueError:
            c = None
        if c is not None:
            return None, [c]
    return text, []
