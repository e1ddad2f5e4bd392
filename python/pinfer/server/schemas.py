"""Request bodies of the OpenAI-compatible API (pydantic), as OpenAI documents them.

Every field either reaches pinfer.Llama, which gives it its meaning (and refuses
what it does not implement), or is refused here; an unknown field is a 400.
Responses are the OpenAI-shaped dicts pinfer.Llama returns.
"""
from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

Stop = Optional[Union[str, List[str]]]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StreamOptions(_Strict):
    include_usage: Optional[bool] = Field(None, description="usage is always sent with the last chunk")


class _Sampling(_Strict):
    model: Optional[str] = Field(None, description="the served model's id (GET /v1/models); other ids are a 404")
    max_tokens: Optional[int] = Field(None, ge=0, description="tokens to generate (capped by --max-tokens)")
    temperature: float = Field(0.8, ge=0, le=100)
    top_p: float = Field(0.95, ge=0, le=1)
    top_k: int = Field(40, ge=-1, le=1 << 20)
    min_p: float = Field(0.05, ge=0, le=1)
    stop: Stop = None
    seed: Optional[int] = Field(None, ge=-1, le=2**32 - 1)
    frequency_penalty: float = Field(0.0, ge=-2, le=2)
    presence_penalty: float = Field(0.0, ge=-2, le=2)
    repeat_penalty: float = Field(1.0, ge=0, le=100)
    logit_bias: Optional[Dict[str, float]] = None
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    n: int = Field(1, ge=1, le=1, description="one choice per request")
    user: Optional[str] = Field(None, max_length=256, description="an end-user id; it does not change the output")
    cache_prompt: bool = Field(True, description="reuse the slot's cached prefix of this prompt")


class CompletionRequest(_Sampling):
    prompt: Union[str, List[int], List[str]] = Field(..., description="a text, a list of token ids, or a list "
                                                                      "of one text")
    max_tokens: Optional[int] = Field(16, ge=0)
    echo: bool = False
    logprobs: Optional[int] = Field(None, ge=0, le=20)
    suffix: Optional[str] = None
    best_of: int = Field(1, ge=1, le=1)


class ContentPart(_Strict):
    type: str
    text: Optional[str] = None


class Message(_Strict):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: Optional[Union[str, List[ContentPart]]] = None
    name: Optional[str] = Field(None, max_length=256)
    tool_calls: Optional[List[Dict[str, Any]]] = Field(None, description="an assistant turn's tool calls")
    tool_call_id: Optional[str] = Field(None, max_length=256, description="the call a tool message answers")


class ChatRequest(_Sampling):
    messages: List[Message] = Field(..., min_length=1)
    temperature: float = Field(0.2, ge=0, le=100)
    max_completion_tokens: Optional[int] = Field(None, ge=0, description="OpenAI's newer name of max_tokens")
    logprobs: Optional[bool] = None
    top_logprobs: Optional[int] = Field(None, ge=0, le=20)
    response_format: Optional[Dict[str, Any]] = None
    tools: Optional[List[Dict[str, Any]]] = None
    tool_choice: Optional[Union[str, Dict[str, Any]]] = None


class EmbeddingRequest(_Strict):
    input: Union[str, List[str], List[int], List[List[int]]]
    model: Optional[str] = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Optional[int] = Field(None, ge=1)
    user: Optional[str] = Field(None, max_length=256)


class TokenizeRequest(_Strict):
    content: str
    add_special: bool = False
    with_pieces: bool = False


class DetokenizeRequest(_Strict):
    tokens: List[int]
