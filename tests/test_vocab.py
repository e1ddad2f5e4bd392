"""Tokenizers (src/llama-vocab.cpp) against Hugging Face.

References:
- byte-level BPE: SmolLM2-135M-Instruct's GGUF, loaded by transformers
  (AutoTokenizer gguf_file=...), whole Austen corpus + edge cases;
- pre-tokenizer splits: the `tokenizers` library's Oniguruma regexes with the
  patterns each pre-tokenizer name stands for;
- SentencePiece BPE: a small model trained here with `sentencepiece`, loaded by
  transformers' LlamaTokenizerFast, and sentencepiece itself.

Needs: transformers, tokenizers, sentencepiece, protobuf, torch (transformers'
GGUF reader imports it), gguf; apt-get + network or a cached download for the
data (see pinfer.datasets).
"""
import os
import shutil
import subprocess
import sys
import unicodedata

import gguf
import pytest
import tokenizers
import transformers
from tokenizers import Regex, pre_tokenizers  # noqa: E402

from pinfer import _core, datasets
from pinfer.gguf_layout import bytes_to_unicode

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

GPT2_PAT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
              r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PAT = LLAMA3_PAT.replace(r"\p{N}{1,3}", r"\p{N}")

EDGE = [
    "", " ", "  ", "\t", "\n", "\n\n\n", " \n ", "a  b", "a   b  ", "a\t\tb", "x \t\n y", "\r\n\r\n",
    "tab\there", " " * 50 + "x", "x" + " " * 7,
    "1234567", "a 1234567 b", "a  1", "  12  ", "3.14159", "1,000,000", "x1y22z333w4444",
    "Hello, world!", "don't I'LL we've they'RE 's 'S 'Ve", "\u017f'\u017f '\u017f", "Mr.Darcy's", "'''",
    "\U0001F600 emoji \U0001F389\U0001F389 \U0001F468\u200d\U0001F469\u200d\U0001F467",
    "\u4e2d\u6587\u5b57\u7b26 \u65e5\u672c\u8a9e \ud55c\uad6d\uc5b4", "caf\u00e9 na\u00efve r\u00e9sum\u00e9",
    "e\u0301 a\u0308 n\u0303 \u0915\u093f",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd \u0645\u0631\u062d\u0628\u0627",
    "<|im_start|>user\nHi<|im_end|>\n", "<|im_start|><|im_end|>", "x<|endoftext|>y", "<|im_start", "<s>x</s>",
    "\u00a0nbsp\u00a0 \u3000ideo\u2003em", "\u200bzw\u200b", "\x85 \x0b\x0c\r\n", "\u2028\u2029", "\ufeffbom",
    "\u00bd \u00b2 \u00b3 \u216b \u2460", "...!!??", " ... ", "$100 @user #tag", "A" * 300, "\x00\x01\x7f",
]


def _books():
    return datasets.austen_books()


@pytest.fixture(scope="module")
def austen(austen_text):
    return austen_text


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def vocab_from_gguf(reader, pre=None):
    """Our Vocab from a gguf.GGUFReader's tokenizer.ggml.* metadata."""
    special = {}
    for kind, key in [("bos", "bos"), ("eos", "eos"), ("unk", "unknown"), ("pad", "padding"),
                      ("sep", "seperator"), ("eot", "eot"), ("eom", "eom")]:
        v = _field(reader, f"tokenizer.ggml.{key}_token_id")
        if v is not None:
            special[kind] = int(v)
    return _core.Vocab(
        _field(reader, "tokenizer.ggml.model"),
        pre if pre is not None else _field(reader, "tokenizer.ggml.pre", "default"),
        _field(reader, "tokenizer.ggml.tokens"),
        _field(reader, "tokenizer.ggml.scores", []),
        _field(reader, "tokenizer.ggml.token_type", []),
        _field(reader, "tokenizer.ggml.merges", []),
        special,
        bool(_field(reader, "tokenizer.ggml.add_bos_token", False)),
        bool(_field(reader, "tokenizer.ggml.add_eos_token", False)),
        bool(_field(reader, "tokenizer.ggml.add_space_prefix", False)),
    )


@pytest.fixture(scope="module")
def smol(smollm2_gguf):
    path = smollm2_gguf
    reader = gguf.GGUFReader(path)
    assert _field(reader, "tokenizer.ggml.pre") == "smollm"
    hf_gguf = transformers.AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    # transformers' GGUF loader gives every gpt2-model GGUF a plain ByteLevel
    # pre-tokenizer; SmolLM2's own tokenizer.json (what "smollm" names) first
    # isolates every digit. Rebuild that on the same vocabulary and merges.
    hf = tokenizers.Tokenizer.from_str(hf_gguf.backend_tokenizer.to_str())
    hf.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    return {"reader": reader, "vocab": vocab_from_gguf(reader), "hf": hf, "hf_gguf": hf_gguf,
            "gpt2": vocab_from_gguf(reader, pre="gpt2")}


def _hf_ids(tok, text, parse_special):
    if isinstance(tok, tokenizers.Tokenizer):
        tok.encode_special_tokens = not parse_special
        return tok.encode(text, add_special_tokens=False).ids
    return tok(text, add_special_tokens=False, split_special_tokens=not parse_special)["input_ids"]


def _first_diff(a, b):
    k = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"first difference at {k}: ours {a[k - 3:k + 5]} vs reference {b[k - 3:k + 5]} (lengths {len(a)}, {len(b)})"


# ---------------------------------------------------------------- unicode ---

def test_unicode_table_is_generated_output():
    with open(os.path.join(ROOT, "src", "unicode-data.cpp"), encoding="utf-8") as f:
        committed = f.read()
    if f"(Unicode {unicodedata.unidata_version})" not in committed.splitlines()[0]:
        pytest.skip(f"this Python has Unicode {unicodedata.unidata_version}; the table was generated from another")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen_unicode_data.py")],
                         capture_output=True, text=True, check=True).stdout
    assert out == committed


# ----------------------------------------------------------- pre-tokenizer ---

def _byte_vocab(pre):
    tokens = [chr(c) for c in range(33, 127)] + ["x" * 2]  # any small consistent vocab
    return _core.Vocab("gpt2", pre, tokens, [], [], [], {}, False, False, False)


def _reference_splitter(pre):
    split = lambda pat: pre_tokenizers.Split(Regex(pat), behavior="isolated")  # noqa: E731
    if pre == "smollm":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), split(GPT2_PAT)])
    return split({"gpt2": GPT2_PAT, "llama3": LLAMA3_PAT, "qwen2": QWEN2_PAT}[pre])


@pytest.mark.parametrize("pre", ["gpt2", "smollm", "llama3", "qwen2"])
def test_pretokenizer_matches_regex(pre, austen):
    ours = _byte_vocab(pre)
    ref = _reference_splitter(pre)
    for text in EDGE + [austen[:1_000_000]]:
        got = [p.decode("utf-8") for p in ours.pretokenize(text)]
        want = [p for p, _ in ref.pre_tokenize_str(text)]
        assert got == want, f"{pre} on {text[:60]!r}: " + _first_diff(got, want)


def _byte_level_table():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:] + [256 + k for k in range(256 - len(bs))]
    bs = bs + [x for x in range(256) if x not in bs]
    return {x: chr(c) for x, c in zip(bs, cs)}


_BYTE_LEVEL = _byte_level_table()


def _byte_level(b):
    """A byte string in GPT-2's byte-level alphabet (what the tokenizers library's ByteLevel shows)."""
    return "".join(_BYTE_LEVEL[x] for x in b)


FALCON_EDGE = ["1234567", "12 345 6789", "x²³ 1½2 ¼123", "a-b--c...d", "$100+200=300",
               "can't 'quoted' \"dq\"", "«» — 、。 ¿?", "a  .  b", "(x)  [y]  {z}",
               "١٢٣٤ १२३", "é!   x"]


def test_falcon_pretokenizer_matches_tokenizers(austen):
    """Falcon's sequence (punctuation, ByteLevel, digits, [0-9]{3}) as the tokenizers library runs it."""
    import tinymodel  # noqa: F401  (tests/ is on sys.path under pytest)

    ours = _byte_vocab("falcon")
    ref = tinymodel.falcon_pre_tokenizer()
    for text in EDGE + FALCON_EDGE + [austen[:1_000_000]]:
        got = [_byte_level(p) for p in ours.pretokenize(text)]
        want = [p for p, _ in ref.pre_tokenize_str(text)]
        assert got == want, f"falcon on {text[:60]!r}: " + _first_diff(got, want)


def test_falcon_bpe_austen_ids_match_hf(austen):
    """A byte-level BPE trained here with Falcon's pre-tokenizer: every id of all of
    Austen, the edge cases and a multilingual / code / emoji sample equal the
    tokenizers library's."""
    import json

    from tokenizers import Tokenizer, decoders, models, trainers

    import tinymodel

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = tinymodel.falcon_pre_tokenizer()
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator([austen[:300_000], " ".join(EDGE + FALCON_EDGE) * 3],
                           trainers.BpeTrainer(vocab_size=1200, show_progress=False,
                                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tj = json.loads(tk.to_str())
    vocab = tj["model"]["vocab"]
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    ours = _core.Vocab("gpt2", "falcon", tokens, [], [], merges, {}, False, False, False)
    for text in [austen] + EDGE + FALCON_EDGE:
        got = ours.tokenize(text, add_special=False, parse_special=False)
        want = tk.encode(text, add_special_tokens=False).ids
        assert got == want, f"{text[:60]!r}: " + _first_diff(got, want)
    assert ours.detokenize(ours.tokenize(austen, False, False), remove_special=True, as_bytes=True) == \
        austen.encode("utf-8")


def test_pretokenizer_aliases():
    text = "I'LL pay 1234567 \t\n ok"
    assert _byte_vocab("llama-bpe").pretokenize(text) == _byte_vocab("llama3").pretokenize(text)
    assert _byte_vocab("default").pretokenize(text) == _byte_vocab("gpt2").pretokenize(text)
    assert _byte_vocab("llama3").pretokenize(text) != _byte_vocab("gpt2").pretokenize(text)


# ------------------------------------------------------- byte-level BPE ----

def test_smollm2_austen_ids_match_hf(smol, austen):
    ours = smol["vocab"].tokenize(austen, add_special=True, parse_special=True)
    ref = _hf_ids(smol["hf"], austen, True)
    assert ours == ref, _first_diff(ours, ref)
    assert len(ours) > 900_000
    # and decoding gives the corpus back byte for byte
    assert smol["vocab"].detokenize(ours, remove_special=True, as_bytes=True) == austen.encode("utf-8")


@pytest.mark.parametrize("parse_special", [True, False])
def test_smollm2_edge_cases_match_hf(smol, parse_special):
    v = smol["vocab"]
    for text in EDGE:
        ours = v.tokenize(text, True, parse_special)
        assert ours == _hf_ids(smol["hf"], text, parse_special), repr(text)
        assert v.tokenize(text.encode("utf-8"), True, parse_special) == ours  # bytes input too


def test_gpt2_pretokenizer_matches_hf_gguf_loader(smol, austen):
    # The same vocabulary with pre "gpt2" is what transformers' GGUF loader builds.
    v, hf = smol["gpt2"], smol["hf_gguf"]
    for text in EDGE + [austen[:300_000]]:
        for ps in (True, False):
            ours, ref = v.tokenize(text, True, ps), _hf_ids(hf, text, ps)
            assert ours == ref, f"{text[:60]!r}: " + _first_diff(ours, ref)
    # the two pre-tokenizers do differ where a digit follows spaces
    assert smol["vocab"].tokenize("a  1") != v.tokenize("a  1")


def test_smollm2_roundtrip_and_pieces(smol):
    v, reader = smol["vocab"], smol["reader"]
    tokens = _field(reader, "tokenizer.ggml.tokens")
    char = bytes_to_unicode()  # to list the bytes the vocabulary has no token for
    missing = [b for b in range(256) if char[b] not in tokens]
    assert 0x1D in missing and ord("a") not in missing
    for text in EDGE:
        ids = v.tokenize(text, True, True)
        back = v.detokenize(ids, remove_special=False, unparse_special=True, as_bytes=True)
        # bytes without a token are dropped, as HF drops them
        want = bytes(b for b in text.encode("utf-8") if b not in missing)
        assert back == want, repr(text)
        assert smol["hf_gguf"].decode(ids) == back.decode("utf-8", errors="replace")
    # control tokens print only on request; text pieces decode the byte mapping
    im_start = tokens.index("<|im_start|>")
    assert v.token_to_piece(im_start) == b"" and v.token_to_piece(im_start, True) == b"<|im_start|>"
    assert v.token_to_piece(tokens.index("\u0120the")) == b" the"
    assert v.detokenize(v.tokenize("<|im_start|>hi", True, True)) == "hi"
    assert v.n_vocab == len(tokens) == 49152
    assert (v.bos, v.eos, v.unk) == (1, 2, 0)
    assert v.is_eog(2) and v.is_eog(tokens.index("<|endoftext|>")) and not v.is_eog(im_start)
    assert v.token_type(0) == 3 and v.token_type(100) == 1


# --------------------------------------------------------- SentencePiece ----

@pytest.fixture(scope="module")
def spm(tmp_path_factory, austen):
    import sentencepiece
    from sentencepiece import sentencepiece_model_pb2 as pb

    d = str(tmp_path_factory.mktemp("spm"))
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(austen[:150_000].split("\n")), model_prefix=os.path.join(d, "m"),
        vocab_size=600, model_type="bpe", byte_fallback=True, character_coverage=0.9995,
        normalization_rule_name="identity", remove_extra_whitespaces=False, add_dummy_prefix=True,
        minloglevel=2)
    shutil.copy(os.path.join(d, "m.model"), os.path.join(d, "tokenizer.model"))
    model = pb.ModelProto()
    with open(os.path.join(d, "m.model"), "rb") as f:
        model.ParseFromString(f.read())
    tokens = [p.piece for p in model.pieces]
    scores = [p.score for p in model.pieces]
    types = [int(p.type) for p in model.pieces]  # sentencepiece's enum is GGUF's
    assert types.count(6) == 256
    sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(d, "m.model"))
    vocab = _core.Vocab("llama", "default", tokens, scores, types, [],
                        {"bos": sp.bos_id(), "eos": sp.eos_id(), "unk": sp.unk_id()}, True, False, True)
    hf = transformers.LlamaTokenizerFast.from_pretrained(d, add_bos_token=True)
    return {"vocab": vocab, "hf": hf, "sp": sp, "tokens": tokens}


def _chunks(text, size=2000):
    return [text[i:i + size] for i in range(0, len(text), size)]


SPM_EDGE = EDGE + ["\u00ff\u00fe", "\U0001F600", "\u4e2d", "~`^|{}", "<unk>", "x <s> y"]


def test_spm_matches_hf(spm, austen):
    v, hf = spm["vocab"], spm["hf"]
    for text in SPM_EDGE + _chunks(austen[:1_500_000]):
        for ps in (True, False):
            ours = v.tokenize(text, True, ps)
            ref = hf(text, split_special_tokens=not ps)["input_ids"]
            assert ours == ref, f"{text[:60]!r}: " + _first_diff(ours, ref)


def test_spm_matches_sentencepiece(spm, austen):
    # sentencepiece also prefixes text that already starts with a space; HF does
    # not (and we follow HF), so compare where the two agree by construction.
    v, sp = spm["vocab"], spm["sp"]
    for text in SPM_EDGE + _chunks(austen[:300_000]):
        if text.startswith(" ") or "<" in text:
            continue
        assert v.tokenize(text, False) == sp.encode(text), repr(text[:60])


def test_spm_byte_fallback_and_roundtrip(spm, austen):
    v, tokens = spm["vocab"], spm["tokens"]
    ids = v.tokenize("\u4e2d\U0001F600", add_special=False)
    assert [tokens[i] for i in ids[1:]] == ["<0xE4>", "<0xB8>", "<0xAD>", "<0xF0>", "<0x9F>", "<0x98>", "<0x80>"]
    for text in SPM_EDGE + _chunks(austen[:200_000]):
        if text.startswith(" "):  # its space is indistinguishable from the prefixed one
            continue
        ids = v.tokenize(text, True)
        assert ids[0] == v.bos
        assert v.detokenize(ids, remove_special=True) == text, repr(text[:60])
        assert v.detokenize(ids, remove_special=True) == spm["hf"].decode(ids, skip_special_tokens=True)


# ------------------------------------------------------------------ errors ---

def test_errors_name_the_problem():
    toks = ["a", "b", "ab"]
    with pytest.raises(RuntimeError, match="unknown tokenizer model 'bert'"):
        _core.Vocab("bert", "default", toks, [], [], [], {}, False, False, False)
    with pytest.raises(RuntimeError, match="unknown pre-tokenizer 'nope'"):
        _core.Vocab("gpt2", "nope", toks, [], [], [], {}, False, False, False)
    with pytest.raises(RuntimeError, match="scores has 2 entries for 3 tokens"):
        _core.Vocab("llama", "default", toks, [0.0, 1.0], [], [], {}, False, False, False)
    with pytest.raises(RuntimeError, match="token types has 1 entries"):
        _core.Vocab("gpt2", "gpt2", toks, [], [1], [], {}, False, False, False)
    with pytest.raises(RuntimeError, match="not in the vocabulary"):
        _core.Vocab("gpt2", "gpt2", toks, [], [], ["a c"], {}, False, False, False)
    with pytest.raises(RuntimeError, match="eos token id 7 is out of range"):
        _core.Vocab("gpt2", "gpt2", toks, [], [], [], {"eos": 7}, False, False, False)
    with pytest.raises(RuntimeError, match="add_bos is set but there is no bos"):
        _core.Vocab("gpt2", "gpt2", toks, [], [], [], {}, True, False, False)
    v = _core.Vocab("gpt2", "gpt2", toks, [], [], ["a b"], {}, False, False, False)
    assert v.tokenize("abab") == [2, 2]
    with pytest.raises(RuntimeError, match="out of range"):
        v.token_to_piece(3)


# ---------------------------------------------------------------- datasets ---

@pytest.mark.network
def test_austen_books():
    books = _books()
    assert list(books) == [t for t, _ in datasets.AUSTEN_BOOKS]
    assert books["Pride & Prejudice"].startswith("PRIDE AND PREJUDICE\n")
    assert "It is a truth universally acknowledged" in books["Pride & Prejudice"]
    assert books["Emma"].startswith("EMMA\n")
    assert sum(len(t) for t in books.values()) > 4_000_000
    # the same text straight from the .deb, bypassing the cache
    deb = datasets.janeaustenr_deb()
    assert datasets.austen_books(deb) == books
