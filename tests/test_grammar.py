"""Structured output through llguidance: grammar= (GBNF, JSON Schema) and chat
response_format. Every constrained output is checked by an independent judge: the
jsonschema package for JSON Schemas, Python's re for GBNF grammars."""
import json
import re

import jsonschema
import numpy as np
import pytest

from pinfer import Llama, LlamaGrammar

NAME = {"type": "string", "minLength": 1, "maxLength": 12}
SCHEMAS = [
    {"type": "boolean"},
    {"type": "integer", "minimum": 0, "maximum": 99},
    {"type": "string", "maxLength": 16},
    {"enum": ["red", "green", "blue"]},
    {"const": "Elizabeth"},
    {"type": "null"},
    {"type": "array", "items": {"type": "boolean"}, "maxItems": 4},
    {"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 5}, "minItems": 2, "maxItems": 3},
    {"type": "object", "properties": {"name": NAME}, "required": ["name"], "additionalProperties": False},
    {"type": "object", "properties": {"name": NAME, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "object", "properties": {"married": {"type": "boolean"}, "spouse": NAME},
     "required": ["married"], "additionalProperties": False},
    {"type": "object", "properties": {"tags": {"type": "array", "items": NAME, "maxItems": 3}},
     "required": ["tags"], "additionalProperties": False},
    {"type": "object", "properties": {"point": {"type": "object", "properties": {
        "x": {"type": "integer", "minimum": 0, "maximum": 9}, "y": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["x", "y"], "additionalProperties": False}}, "required": ["point"], "additionalProperties": False},
    {"type": "object", "properties": {"mood": {"enum": ["happy", "sad"]}, "level": {"enum": [1, 2, 3]}},
     "required": ["mood", "level"], "additionalProperties": False},
    {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9}, {"type": "boolean"}]},
    {"type": ["string", "null"], "maxLength": 8},
    {"type": "string", "pattern": "^[a-z]{3}-[0-9]{2}$"},
    {"type": "string", "format": "date"},
    {"type": "object", "properties": {"ok": {"const": True}, "n": {"enum": [1.5, 2.25]}}, "required": ["ok", "n"],
     "additionalProperties": False},
    {"type": "array", "prefixItems": [NAME, {"type": "integer", "minimum": 1, "maximum": 3}], "items": False},
    {"type": "object", "properties": {"people": {"type": "array", "maxItems": 2, "items": {
        "type": "object", "properties": {"name": NAME, "rich": {"type": "boolean"}},
        "required": ["name", "rich"], "additionalProperties": False}}}, "required": ["people"],
     "additionalProperties": False},
    {"$defs": {"who": {"type": "string", "enum": ["Jane", "Lizzy", "Lydia"]}}, "type": "object",
     "properties": {"sister": {"$ref": "#/$defs/who"}}, "required": ["sister"], "additionalProperties": False},
    {"type": "object", "properties": {"title": NAME, "year": {"type": "integer", "minimum": 1800,
                                                              "maximum": 1820}},
     "required": ["title", "year"], "additionalProperties": False},
    {"allOf": [{"type": "integer"}, {"minimum": 10, "maximum": 20}]},
]


@pytest.fixture(scope="module")
def llm():
    with Llama(n_ctx=512, seed=17) as m:  # the embedded default model
        yield m


@pytest.mark.parametrize("i", range(len(SCHEMAS)))
def test_json_schema_outputs_validate(llm, i):
    schema = SCHEMAS[i]
    g = LlamaGrammar.from_json_schema(schema)
    for seed, temp in ((1, 0.0), (2, 1.0)):
        out = llm("Miss Bennet said:", grammar=g, max_tokens=160, temperature=temp, seed=seed)
        c = out["choices"][0]
        assert c["finish_reason"] == "stop", c
        value = json.loads(c["text"])
        jsonschema.validate(value, schema)


def test_schema_as_text_and_chat_response_format(llm):
    schema = SCHEMAS[9]
    msgs = [{"role": "user", "content": "Who is Mr. Darcy? Answer in JSON."}]
    for rf in ({"type": "json_schema", "json_schema": {"name": "person", "schema": schema}},
               {"type": "json_object", "schema": schema}):
        out = llm.create_chat_completion(msgs, response_format=rf, max_tokens=160, temperature=0.7, seed=3)
        jsonschema.validate(json.loads(out["choices"][0]["message"]["content"]), schema)
    out = llm.create_chat_completion(msgs, response_format={"type": "json_object"}, max_tokens=200,
                                     temperature=0.0)
    text = out["choices"][0]["message"]["content"]
    if out["choices"][0]["finish_reason"] == "stop":
        assert isinstance(json.loads(text), dict)
    else:  # cut by max_tokens: still a prefix of a JSON object
        assert text.startswith("{")
    streamed = "".join(ch["choices"][0]["delta"].get("content", "") for ch in llm.create_chat_completion(
        msgs, response_format={"type": "json_schema", "json_schema": {"schema": schema}}, max_tokens=160,
        temperature=0.7, seed=3, stream=True))
    assert json.loads(streamed) == json.loads(llm.create_chat_completion(
        msgs, response_format={"type": "json_schema", "json_schema": {"schema": schema}}, max_tokens=160,
        temperature=0.7, seed=3)["choices"][0]["message"]["content"])
    g = LlamaGrammar.from_json_schema(json.dumps(schema))
    jsonschema.validate(json.loads(llm("x", grammar=g, max_tokens=160)["choices"][0]["text"]), schema)


GBNF = [
    ('root ::= "yes" | "no"', r"yes|no"),
    ('root ::= [0-9]+ ("." [0-9]+)?', r"[0-9]+(\.[0-9]+)?"),
    ('root ::= "Mr. " name\nname ::= "Darcy" | "Bingley" | "Collins"', r"Mr\. (Darcy|Bingley|Collins)"),
    ('root ::= item ("," " "? item){0,3}\nitem ::= [a-z]{1,6}', r"[a-z]{1,6}(, ?[a-z]{1,6}){0,3}"),
    ('root ::= expr\nexpr ::= term (("+" | "-") term)*\nterm ::= [1-9] | "(" expr ")"',
     None),  # checked by evaluating it
]


@pytest.mark.parametrize("i", range(len(GBNF)))
def test_gbnf_grammar(llm, i):
    gbnf, pattern = GBNF[i]
    g = LlamaGrammar.from_string(gbnf)
    for seed in (1, 2, 3):
        c = llm("She answered", grammar=g, max_tokens=40, temperature=1.0, seed=seed)["choices"][0]
        text = c["text"]
        if pattern is not None:
            assert c["finish_reason"] == "stop" or c["finish_reason"] == "length"
            if c["finish_reason"] == "stop":
                assert re.fullmatch(pattern, text), (gbnf, text)
        else:
            assert re.fullmatch(r"[0-9+\-()]+", text), text
            if c["finish_reason"] == "stop":
                eval(text, {"__builtins__": {}})  # a well-formed expression


def test_grammar_in_generate_and_the_mask(llm):
    g = LlamaGrammar.from_string('root ::= "ab" | "ac"')
    seen = []

    def record(input_ids, scores):
        seen.append(np.isfinite(scores).sum())
        return scores
    toks = [t for _, t in zip(range(4), llm.generate(llm.tokenize(b"x"), temperature=0.9, grammar=g))]
    text = llm.detokenize([t for t in toks if not llm.model.is_eog(t)]).decode()
    assert text in ("ab", "ac") or "ab".startswith(text) or "ac".startswith(text)
    out = llm("x", grammar=g, logits_processor=record, max_tokens=5)
    assert out["choices"][0]["text"] in ("ab", "ac")
    assert all(n == llm.n_vocab() for n in seen)  # processors run before the mask, on every token


def test_grammar_errors(llm):
    with pytest.raises(ValueError, match="grammar"):
        LlamaGrammar.from_string("root ::= (")
    with pytest.raises(ValueError, match="JSON"):
        LlamaGrammar.from_json_schema("{not json")
    with pytest.raises(TypeError, match="grammar"):
        llm("x", grammar='root ::= "a"')
    with pytest.raises(ValueError, match="response_format"):
        llm.create_chat_completion([{"role": "user", "content": "x"}], response_format={"type": "yaml"})
    with pytest.raises(ValueError, match="grammar"):
        llm.create_chat_completion([{"role": "user", "content": "x"}], response_format={"type": "json_object"},
                                   grammar=LlamaGrammar.from_string('root ::= "a"'))
    with pytest.raises(ValueError, match="grammar file"):
        LlamaGrammar.from_file("/nonexistent/g.gbnf")
