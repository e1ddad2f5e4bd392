"""pinfer: fast local LLM inference exploiting activation locality."""

from . import _core

__version__ = "0.1.0"
__all__ = ["_core"]
