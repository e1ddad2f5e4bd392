"""The OpenAI-shaped dicts that :class:`pinfer.Llama` returns and ``pinfer serve`` sends.

Field names are OpenAI's (and llama-cpp-python's ``llama_types``), so code written
against either reads pinfer's results unchanged. These are plain ``TypedDict`` s: at
run time every result is an ordinary ``dict``. The server declares its embeddings
response with them, so /openapi.json describes it.

- :meth:`Llama.create_completion`: :class:`Completion`, or with ``stream=True`` an
  iterator of :class:`CompletionChunk` (the last one carries ``usage``);
- :meth:`Llama.create_chat_completion`: :class:`ChatCompletion`, or an iterator of
  :class:`ChatCompletionChunk`;
- :meth:`Llama.create_embedding`: :class:`CreateEmbeddingResponse`.
"""
import sys
from typing import Dict, List, Literal, Optional, Union

if sys.version_info >= (3, 12):
    from typing import TypedDict
else:  # pydantic (the server's response models) reads only typing_extensions' TypedDict before 3.12
    try:
        from typing_extensions import TypedDict
    except ImportError:  # no pydantic either: the standard one serves the type checker and readers
        from typing import TypedDict

__all__ = [
    "CompletionUsage", "CompletionLogprobs", "CompletionChoice", "Completion", "CompletionChunk",
    "ToolCallFunction", "ToolCall", "ToolCallDelta", "TopLogprob", "TokenLogprob", "ChatCompletionLogprobs",
    "ChatCompletionMessage", "ChatCompletionChoice", "ChatCompletion", "ChatCompletionDelta",
    "ChatCompletionChunkChoice", "ChatCompletionChunk", "Embedding", "EmbeddingUsage", "CreateEmbeddingResponse",
]


class CompletionUsage(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


# ---------------------------------------------------------------- completions

class CompletionLogprobs(TypedDict):
    """Per generated token: its text, its character offset in the choice's text, its
    log probability and {text: log probability} of the most likely alternatives."""
    tokens: List[str]
    text_offset: List[int]
    token_logprobs: List[Optional[float]]
    top_logprobs: List[Optional[Dict[str, float]]]


class CompletionChoice(TypedDict):
    text: str
    index: int
    logprobs: Optional[CompletionLogprobs]
    finish_reason: Optional[str]  # "stop", "length"; None until a stream's last chunk


class _CompletionBase(TypedDict):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: List[CompletionChoice]


class Completion(_CompletionBase):
    usage: CompletionUsage


class CompletionChunk(_CompletionBase, total=False):
    usage: CompletionUsage  # the last chunk only


# ---------------------------------------------------------------- chat

class ToolCallFunction(TypedDict):
    name: str
    arguments: str  # JSON text


class ToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: ToolCallFunction


class ToolCallDelta(ToolCall):
    """A tool call in a stream's delta: ``index`` orders the calls of one reply."""
    index: int


class TopLogprob(TypedDict):
    token: str
    logprob: float
    bytes: Optional[List[int]]


class TokenLogprob(TopLogprob):
    top_logprobs: List[TopLogprob]


class ChatCompletionLogprobs(TypedDict):
    content: Optional[List[TokenLogprob]]
    refusal: Optional[List[TokenLogprob]]


class _MessageBase(TypedDict):
    role: Literal["assistant"]
    content: Optional[str]


class ChatCompletionMessage(_MessageBase, total=False):
    tool_calls: List[ToolCall]  # present when the reply calls tools


class ChatCompletionChoice(TypedDict):
    index: int
    message: ChatCompletionMessage
    logprobs: Optional[ChatCompletionLogprobs]
    finish_reason: Optional[str]  # "stop", "length", "tool_calls"


class ChatCompletion(TypedDict):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: List[ChatCompletionChoice]
    usage: CompletionUsage


class ChatCompletionDelta(TypedDict, total=False):
    """What a chunk adds: the role first, then content, or tool calls at the end."""
    role: Literal["assistant"]
    content: Optional[str]
    tool_calls: List[ToolCallDelta]


class ChatCompletionChunkChoice(TypedDict):
    index: int
    delta: ChatCompletionDelta
    logprobs: Optional[ChatCompletionLogprobs]
    finish_reason: Optional[str]


class _ChatChunkBase(TypedDict):
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: List[ChatCompletionChunkChoice]


class ChatCompletionChunk(_ChatChunkBase, total=False):
    usage: Optional[CompletionUsage]  # the last chunk only


# ---------------------------------------------------------------- embeddings

class Embedding(TypedDict):
    object: Literal["embedding"]
    # one vector; a vector per token with pooling "none"; base64 float32 from the server on request
    embedding: Union[List[float], List[List[float]], str]
    index: int


class EmbeddingUsage(TypedDict):
    prompt_tokens: int
    total_tokens: int


class CreateEmbeddingResponse(TypedDict):
    object: Literal["list"]
    model: str
    data: List[Embedding]
    usage: EmbeddingUsage
