"""pinfer: fast local LLM inference exploiting activation locality."""

from . import _core
from .llama import Llama

__version__ = "0.1.0"
__all__ = ["_core", "Llama"]
