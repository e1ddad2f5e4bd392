"""pinfer: fast local LLM inference exploiting activation locality."""

from . import _core
from .grammar import LlamaGrammar
from .llama import Llama, LlamaState
from .llama_cache import BaseLlamaCache, LlamaCache, LlamaDiskCache, LlamaRAMCache
from .processors import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

__version__ = "0.1.0"
__all__ = ["_core", "Llama", "LlamaState", "LlamaCache", "LlamaRAMCache", "LlamaDiskCache", "BaseLlamaCache",
           "LlamaGrammar", "LogitsProcessor", "LogitsProcessorList", "StoppingCriteria",
           "StoppingCriteriaList"]
