"""Where llama.cpp's GGUF layout differs from Hugging Face's: the converter and the
test and benchmark model writers share these, so every GGUF pinfer writes agrees.

- RoPE: GGUF's llama rotates adjacent pairs (2i, 2i+1) of each head, HF's Llama the
  halves (i, i + d/2), so q_proj and k_proj rows are permuted within each head.
- Byte-level BPE: token text spells bytes in GPT-2's printable alphabet.
"""
from typing import Dict

import numpy as np

__all__ = ["permute_rope_rows", "bytes_to_unicode"]


def permute_rope_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF (rotate halves) -> GGUF llama (rotate adjacent pairs) row order per head:
    HF row h*d + j*d/2 + i becomes GGUF row h*d + 2i + j."""
    d = w.shape[0] // n_head
    return w.reshape(n_head, 2, d // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def bytes_to_unicode() -> Dict[int, str]:
    """GPT-2's reversible byte -> printable character map (the byte-level BPE alphabet):
    printable Latin-1 bytes stand for themselves, the others for 256, 257, ... in order."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    moved = [b for b in range(256) if b not in keep]
    return {**{b: chr(b) for b in keep}, **{b: chr(256 + k) for k, b in enumerate(moved)}}
