"""pinfer.types describes what Llama returns: every result (plain and streamed
completions and chats, logprobs, tool calls, embeddings) has exactly the keys and
value types its TypedDict declares, and the openai package's own response models
(the independent reference for the OpenAI shape) accept it."""
import json
import typing

import openai.types as oa
import openai.types.chat as oac
import pytest
from typing_extensions import is_typeddict  # knows both kinds of TypedDict pinfer.types may use

from pinfer import Llama, LlamaGrammar
from pinfer import types as T

MODEL_SEED = 7  # as test_cli: the session makes that tiny model once
LLM_SEED = 5
MSGS = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}]


def conforms(value, tp, where="result"):
    """Raise AssertionError naming the first place where value is not a tp."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if is_typeddict(tp):
        assert isinstance(value, dict), f"{where}: {value!r} is not a dict"
        hints = typing.get_type_hints(tp)
        missing = tp.__required_keys__ - set(value)
        extra = set(value) - set(hints)
        assert not missing and not extra, f"{where}: missing {sorted(missing)}, undeclared {sorted(extra)}"
        for k, v in value.items():
            conforms(v, hints[k], f"{where}[{k!r}]")
    elif origin is typing.Union:
        errors = []
        for a in args:
            try:
                return conforms(value, a, where)
            except AssertionError as e:
                errors.append(str(e))
        raise AssertionError(" / ".join(errors))
    elif origin is typing.Literal:
        assert value in args, f"{where}: {value!r} is not one of {args}"
    elif origin is list:
        assert isinstance(value, list), f"{where}: {value!r} is not a list"
        for i, v in enumerate(value):
            conforms(v, args[0], f"{where}[{i}]")
    elif origin is dict:
        assert isinstance(value, dict), f"{where}: {value!r} is not a dict"
        for k, v in value.items():
            conforms(k, args[0], f"{where} key")
            conforms(v, args[1], f"{where}[{k!r}]")
    elif tp is type(None):
        assert value is None, f"{where}: {value!r} is not None"
    elif tp is float:
        assert isinstance(value, (int, float)) and not isinstance(value, bool), f"{where}: {value!r} is not a float"
    else:
        assert isinstance(value, tp) and not (tp is int and isinstance(value, bool)), f"{where}: {value!r} is not {tp}"


def literal(text):
    return LlamaGrammar.from_string("root ::= " + json.dumps(text))


def test_the_checker_can_fail():
    good = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    conforms(good, T.CompletionUsage)
    for bad in ({**good, "extra": 1}, {"prompt_tokens": 1, "total_tokens": 3}, {**good, "total_tokens": "3"}):
        with pytest.raises(AssertionError):
            conforms(bad, T.CompletionUsage)


def test_completion_and_chunks(llm):
    r = llm.create_completion("Hello", max_tokens=4, logprobs=2, temperature=0)
    conforms(r, T.Completion)
    oa.Completion.model_validate(r)
    assert r["choices"][0]["logprobs"] is not None
    chunks = list(llm.create_completion("Hello", max_tokens=4, logprobs=2, stream=True, temperature=0))
    for ch in chunks:
        conforms(ch, T.CompletionChunk)
    oa.Completion.model_validate(chunks[-1])  # openai's model (for chunks too) wants a finish_reason
    assert "usage" in chunks[-1]


def test_chat_and_chunks(llm):
    r = llm.create_chat_completion(MSGS, max_tokens=4, logprobs=True, top_logprobs=2, temperature=0)
    conforms(r, T.ChatCompletion)
    oac.ChatCompletion.model_validate(r)
    assert r["choices"][0]["logprobs"]["content"]
    for ch in llm.create_chat_completion(MSGS, max_tokens=4, logprobs=True, top_logprobs=2, stream=True):
        conforms(ch, T.ChatCompletionChunk)
        oac.ChatCompletionChunk.model_validate(ch)


def test_tool_calls(model):
    text = '<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET"}}\n</tool_call>'
    with Llama(model, n_ctx=512, n_threads=1) as llm:  # the tools' description makes a long prompt
        r = llm.create_chat_completion(MSGS, tools=TOOLS, grammar=literal(text), max_tokens=60, temperature=0)
        chunks = list(llm.create_chat_completion(MSGS, tools=TOOLS, grammar=literal(text), max_tokens=60,
                                                 temperature=0, stream=True))
    conforms(r, T.ChatCompletion)
    oac.ChatCompletion.model_validate(r)
    assert r["choices"][0]["message"]["tool_calls"]
    for ch in chunks:
        conforms(ch, T.ChatCompletionChunk)
        oac.ChatCompletionChunk.model_validate(ch)
    assert any(ch["choices"][0]["delta"].get("tool_calls") for ch in chunks)


@pytest.mark.parametrize("pooling", ["mean", "none"])
def test_embedding(model, pooling):
    with Llama(model, n_ctx=32, n_threads=1, embedding=True, pooling_type=pooling) as emb:
        r = emb.create_embedding(["a b", "c"])
    conforms(r, T.CreateEmbeddingResponse)
    if pooling == "mean":  # the openai model knows one vector per input only
        oa.CreateEmbeddingResponse.model_validate(r)
