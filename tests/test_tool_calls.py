"""Tool calling: tools / tool_choice reach the template, replies in the Hermes/Qwen
<tool_call> and Llama 3 JSON styles become OpenAI tool_calls (streamed too), forced
calls validate against the function's schema (jsonschema as the judge), chat_handler."""
import json

import jsonschema
import pytest

from pinfer import Llama, LlamaGrammar
from pinfer.tool_calls import parse_tool_calls

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome", "Bath"]},
                                                   "unit": {"enum": ["c", "f"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"],
    "additionalProperties": False}}}
TOOLS = [WEATHER, TIME]
MSGS = [{"role": "user", "content": "What is the weather in Paris?"}]

# A template that renders tools itself (shaped like Qwen2.5's: tools as JSON lines in the system turn).
TOOL_TEMPLATE = ("{% if tools %}<|im_start|>system\n# Tools\n{% for t in tools %}{{ t['function'] | tojson }}\n"
                 "{% endfor %}<|im_end|>\n{% endif %}{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
                 "{{ m['content'] or '' }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}"
                 "<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def llm():
    with Llama(n_ctx=512, seed=5) as m:  # the embedded default model
        yield m


def literal(text):
    return LlamaGrammar.from_string("root ::= " + json.dumps(text))


# ---- parsing ----

def test_parse_styles():
    h = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome", "unit": "c"}}\n</tool_call>'
    content, calls = parse_tool_calls(h, TOOLS)
    assert content == "Let me check."
    assert calls[0]["type"] == "function" and calls[0]["id"].startswith("call_")
    assert calls[0]["function"]["name"] == "get_weather"
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Rome", "unit": "c"}
    two = ('<tool_call>{"name": "get_time", "arguments": {"zone": "UTC"}}</tool_call>\n'
           '<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Bath\\"}"}')  # last block unterminated
    content, calls = parse_tool_calls(two, TOOLS)
    assert content is None and [c["function"]["name"] for c in calls] == ["get_time", "get_weather"]
    assert json.loads(calls[1]["function"]["arguments"]) == {"city": "Bath"}
    content, calls = parse_tool_calls('<|python_tag|>{"name": "get_time", "parameters": {"zone": "CET"}}', TOOLS)
    assert content is None and json.loads(calls[0]["function"]["arguments"]) == {"zone": "CET"}
    content, calls = parse_tool_calls(' {"name": "get_time", "parameters": {"zone": "CET"}} ', TOOLS)
    assert len(calls) == 1
    for text in ['{"name": "rm_rf", "arguments": {}}', '<tool_call>{"name": "get_time", "arguments": [1]}</tool_call>',
                 '<tool_call>{not json}</tool_call>', '{"city": "Paris"}', "It is sunny."]:
        assert parse_tool_calls(text, TOOLS) == (text, [])


# ---- prompts ----

def test_tools_reach_the_template(llm):
    with_tools = llm.apply_chat_template(MSGS, True, TOOL_TEMPLATE, tools=TOOLS)
    assert with_tools.startswith("<|im_start|>system\n# Tools\n")
    assert json.dumps(WEATHER["function"], sort_keys=True) in with_tools or '"get_weather"' in with_tools
    assert "<tools>" not in with_tools  # the template's own rendering, not the fallback
    # A template that ignores tools (the default model's) and a chat_format family get them
    # in a system message, in the style the parser reads.
    plain = llm.apply_chat_template(MSGS, True, tools=TOOLS)
    assert "<tools>" in plain and '"name": "get_time"' in plain and "<tool_call>" in plain
    with Llama(n_ctx=256, chat_format="chatml") as c:
        p = c.apply_chat_template(MSGS, True, tools=TOOLS)
        assert p.startswith("<|im_start|>system\nYou may call functions") and "get_weather" in p
        # a history with a call and its result, written out for a template without tools
        hist = MSGS + [{"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                               "arguments": '{"city": "Paris", "unit": "c"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18 C, cloudy"}]
        p = c.apply_chat_template(hist, True, tools=TOOLS)
        assert ('<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", '
                '"unit": "c"}}\n</tool_call><|im_end|>') in p
        assert "<|im_start|>user\n<tool_response>\n18 C, cloudy\n</tool_response><|im_end|>" in p


# ---- replies ----

def test_hermes_reply_becomes_tool_calls(llm):
    text = 'Checking. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}\n</tool_call>'
    r = llm.create_chat_completion(MSGS, tools=TOOLS, grammar=literal(text), max_tokens=200, temperature=0)
    c = r["choices"][0]
    assert c["finish_reason"] == "tool_calls"
    assert c["message"]["content"] == "Checking."
    (call,) = c["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris", "unit": "c"}
    # streamed: the text before the call as content, then one tool_calls delta
    chunks = list(llm.create_chat_completion(MSGS, tools=TOOLS, grammar=literal(text), max_tokens=200,
                                             temperature=0, stream=True))
    content = "".join(ch["choices"][0]["delta"].get("content") or "" for ch in chunks)
    deltas = [d for ch in chunks for d in ch["choices"][0]["delta"].get("tool_calls", [])]
    assert content.strip() == "Checking."
    assert [d["function"]["name"] for d in deltas] == ["get_weather"] and deltas[0]["index"] == 0
    assert json.loads(deltas[0]["function"]["arguments"]) == {"city": "Paris", "unit": "c"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    # tool_choice="none": nothing offered, nothing parsed
    r = llm.create_chat_completion(MSGS, tools=TOOLS, tool_choice="none", grammar=literal(text), max_tokens=200,
                                   temperature=0)
    assert r["choices"][0]["message"] == {"role": "assistant", "content": text}


def test_llama3_json_reply_and_plain_text_stream(llm):
    text = '{"name": "get_time", "parameters": {"zone": "CET"}}'
    chunks = list(llm.create_chat_completion(MSGS, tools=TOOLS, grammar=literal(text), max_tokens=100,
                                             temperature=0, stream=True))
    assert not any(ch["choices"][0]["delta"].get("content") for ch in chunks)  # held, never shown as text
    (d,) = [d for ch in chunks for d in ch["choices"][0]["delta"].get("tool_calls", [])]
    assert d["function"]["name"] == "get_time" and json.loads(d["function"]["arguments"]) == {"zone": "CET"}
    # plain text with tools offered streams as content, unchanged
    plain = "It is sunny in Paris today."
    chunks = list(llm.create_chat_completion(MSGS, tools=TOOLS, grammar=literal(plain), max_tokens=100,
                                             temperature=0, stream=True))
    assert "".join(ch["choices"][0]["delta"].get("content") or "" for ch in chunks) == plain
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert sum(1 for ch in chunks if ch["choices"][0]["delta"].get("content")) > 1  # streamed, not held


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_forced_call_validates(llm, choice):
    for seed in range(3):
        r = llm.create_chat_completion(MSGS, tools=TOOLS, tool_choice=choice, max_tokens=120, temperature=1.0,
                                       seed=seed)
        c = r["choices"][0]
        assert c["finish_reason"] == "tool_calls", c
        (call,) = c["message"]["tool_calls"]
        fn = {t["function"]["name"]: t["function"] for t in TOOLS}[call["function"]["name"]]
        if isinstance(choice, dict):
            assert fn["name"] == "get_weather"
        jsonschema.validate(json.loads(call["function"]["arguments"]), fn["parameters"])


def test_chat_handler_and_errors(llm, tmp_path):
    seen = {}

    def handler(**kw):
        seen.update(kw)
        return {"object": "chat.completion", "choices": []}

    with Llama(n_ctx=128, chat_handler=handler) as h:
        out = h.create_chat_completion(MSGS, tools=TOOLS, temperature=0.3, max_tokens=5)
        assert out == {"object": "chat.completion", "choices": []}
        assert seen["llama"] is h and seen["messages"] == MSGS and seen["tools"] == TOOLS
        assert seen["temperature"] == 0.3 and seen["max_tokens"] == 5
    with pytest.raises(TypeError, match="chat_handler"):
        Llama(n_ctx=64, chat_handler="chatml")
    for tools, choice, msg in [([{"type": "function"}], None, "tools\\[0\\]"), ("x", None, "tools must"),
                               ([WEATHER, WEATHER], None, "twice"), (TOOLS, "sometimes", "tool_choice"),
                               (TOOLS, {"type": "function", "function": {"name": "nope"}}, "nope"),
                               (None, "required", "needs tools")]:
        with pytest.raises(ValueError, match=msg):
            llm.create_chat_completion(MSGS, tools=tools, tool_choice=choice, max_tokens=1)
    with pytest.raises(ValueError, match="grammar"):
        llm.create_chat_completion(MSGS, tools=TOOLS, tool_choice="required", grammar=literal("x"), max_tokens=1)
    with pytest.raises(NotImplementedError, match="functions"):
        llm.create_chat_completion(MSGS, functions=[WEATHER["function"]], max_tokens=1)
