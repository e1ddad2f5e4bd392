"""Semantically bad model files (well-formed GGUF, hostile values): each must
stop with an error naming the key or tensor and the rule, in pinfer.Llama
(a Python exception), in the C API and in pinfer-cli (non-zero exit), never
crash, hang or compute garbage (src/llama-model-validate.cpp).

Every file is built here: a tiny random llama (numpy weights, the byte-level
BPE vocabulary of tinymodel.py) written by the `gguf` package, with one value
changed."""
import math
import subprocess
import time

import gguf
import numpy as np
import pytest

import tinymodel
from pinfer import Llama, _core  # noqa: E402
from pinfer.cli import find_tool  # noqa: E402

VT = gguf.GGUFValueType
E, L, H, HKV, F = 32, 2, 4, 2, 64
HD = E // H


def base_kv():
    """key -> (value, type) of the valid tiny llama."""
    tokens, types, merges = tinymodel.byte_bpe_vocab()
    return {
        "general.name": ("hostile", VT.STRING),
        "llama.context_length": (128, VT.UINT32),
        "llama.embedding_length": (E, VT.UINT32),
        "llama.block_count": (L, VT.UINT32),
        "llama.feed_forward_length": (F, VT.UINT32),
        "llama.attention.head_count": (H, VT.UINT32),
        "llama.attention.head_count_kv": (HKV, VT.UINT32),
        "llama.rope.dimension_count": (HD, VT.UINT32),
        "llama.rope.freq_base": (10000.0, VT.FLOAT32),
        "llama.attention.layer_norm_rms_epsilon": (1e-5, VT.FLOAT32),
        "tokenizer.ggml.model": ("gpt2", VT.STRING),
        "tokenizer.ggml.pre": ("gpt2", VT.STRING),
        "tokenizer.ggml.tokens": (tokens, VT.ARRAY),
        "tokenizer.ggml.token_type": (types, VT.ARRAY),
        "tokenizer.ggml.merges": (merges, VT.ARRAY),
        "tokenizer.ggml.eos_token_id": (tokens.index("<|im_end|>"), VT.UINT32),
    }


def base_tensors(n_layer=L, seed=0):
    """name -> float32 array [out, in] (numpy order) of the valid tiny llama."""
    rng = np.random.default_rng(seed)
    V = tinymodel.vocab_size()
    KV = HD * HKV

    def m(o, i):
        return (rng.standard_normal((o, i)) / math.sqrt(i)).astype(np.float32)

    def norm():
        return (1.0 + 0.1 * rng.standard_normal(E)).astype(np.float32)

    t = {"token_embd.weight": rng.standard_normal((V, E)).astype(np.float32), "output_norm.weight": norm(),
         "output.weight": m(V, E)}
    for i in range(n_layer):
        p = f"blk.{i}."
        t.update({p + "attn_norm.weight": norm(), p + "attn_q.weight": m(E, E), p + "attn_k.weight": m(KV, E),
                  p + "attn_v.weight": m(KV, E), p + "attn_output.weight": m(E, E), p + "ffn_norm.weight": norm(),
                  p + "ffn_gate.weight": m(F, E), p + "ffn_up.weight": m(F, E), p + "ffn_down.weight": m(E, F)})
    return t


def write(path, kv=None, drop=(), tensors=None, types=None, n_layer=L, raw=None):
    """The tiny llama with kv entries replaced/added (key -> (value, type)),
    keys dropped, tensors replaced (name -> array), tensors stored as other
    types (name -> GGMLQuantizationType) and tensors stored exactly as given
    (name -> (array, raw GGMLQuantizationType or None for the array's dtype))."""
    keys = base_kv()
    keys.update(kv or {})
    ts = base_tensors(n_layer)
    ts.update(tensors or {})
    w = gguf.GGUFWriter(str(path), "llama")
    for k, (v, vt) in keys.items():
        if k in drop:
            continue
        if vt == VT.ARRAY:
            w.add_array(k, v)
        else:
            w.add_key_value(k, v, vt)
    for name, arr in ts.items():
        qt = (types or {}).get(name)
        if name in (raw or {}):
            data, raw_dtype = raw[name]
            w.add_tensor(name, data, raw_dtype=raw_dtype)
        elif qt is None:
            w.add_tensor(name, np.ascontiguousarray(arr, dtype=np.float32))
        else:
            w.add_tensor(name, gguf.quants.quantize(arr.astype(np.float32), qt), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def load_error(path):
    """The message of the error Llama() raises for path (it must raise)."""
    with pytest.raises((ValueError, RuntimeError)) as e:
        llm = Llama(str(path), n_ctx=32, n_threads=1, verbose=False)
        llm("ab", max_tokens=2, temperature=0)
    return str(e.value)


def reference_logits(t, tokens, eps=1e-5, base=10000.0):
    """float64 numpy forward of the tiny llama (GGUF layout: RoPE on adjacent pairs)."""
    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    def rope(x, pos):  # x [n, heads, HD]
        i = np.arange(HD // 2)
        th = pos[:, None] * base ** (-2.0 * i / HD)
        c, s = np.cos(th)[:, None, :], np.sin(th)[:, None, :]
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = a * c - b * s, a * s + b * c
        return out

    g = {k: v.astype(np.float64) for k, v in t.items()}
    n = len(tokens)
    pos = np.arange(n, dtype=np.float64)
    x = g["token_embd.weight"][tokens]
    for il in range(L):
        p = f"blk.{il}."
        h = rms(x, g[p + "attn_norm.weight"])
        q = rope((h @ g[p + "attn_q.weight"].T).reshape(n, H, HD), pos)
        k = rope((h @ g[p + "attn_k.weight"].T).reshape(n, HKV, HD), pos)
        v = (h @ g[p + "attn_v.weight"].T).reshape(n, HKV, HD)
        k, v = np.repeat(k, H // HKV, axis=1), np.repeat(v, H // HKV, axis=1)
        att = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(HD)
        att = att + np.triu(np.full((n, n), -np.inf), 1)
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        x = x + np.einsum("hqk,khd->qhd", att, v).reshape(n, E) @ g[p + "attn_output.weight"].T
        h = rms(x, g[p + "ffn_norm.weight"])
        a = h @ g[p + "ffn_gate.weight"].T
        x = x + (a / (1 + np.exp(-a)) * (h @ g[p + "ffn_up.weight"].T)) @ g[p + "ffn_down.weight"].T
    return rms(x, g["output_norm.weight"]) @ g["output.weight"].T


def test_the_valid_file_runs(tmp_path):
    """The control: the builder's file with nothing changed loads, and its
    logits match an independent float64 forward of the same weights."""
    llm = Llama(write(tmp_path / "ok.gguf"), n_ctx=32, n_threads=1, verbose=False, logits_all=True)
    tokens = [5, 70, 200, 33]
    llm.eval(tokens)
    ref = reference_logits(base_tensors(), tokens)
    got = np.asarray(llm.scores[:len(tokens)], dtype=np.float64)
    assert np.abs(got - ref).max() < 1e-3 * np.abs(ref).max()


def u32(v):
    return (v, VT.UINT32)


def f32(v):
    return (v, VT.FLOAT32)


# (case id, kv changes, words the message must contain)
BAD_KV = [
    ("rope_dims_odd", {"llama.rope.dimension_count": u32(HD - 1)}, ["rope.dimension_count", "even"]),
    ("rope_dims_zero", {"llama.rope.dimension_count": u32(0)}, ["rope.dimension_count", "even"]),
    ("rope_dims_above_head", {"llama.rope.dimension_count": u32(HD + 2)}, ["rope.dimension_count", "head size"]),
    ("rope_dims_huge", {"llama.rope.dimension_count": u32(2**32 - 1)}, ["rope.dimension_count", "4294967295"]),
    ("block_count_zero", {"llama.block_count": u32(0)}, ["block_count", "is 0"]),
    ("block_count_2e31", {"llama.block_count": u32(2**31)}, ["block_count", "2147483648"]),
    ("block_count_4M", {"llama.block_count": u32(4194304)}, ["block_count", "4194304"]),
    ("block_count_u64_wraps", {"llama.block_count": (2**32 + 2, VT.UINT64)}, ["block_count", "4294967298"]),
    ("block_count_below_file", {"llama.block_count": u32(1)}, ["block_count", "2 layers"]),
    ("block_count_above_file", {"llama.block_count": u32(3)}, ["block_count", "2 layers"]),
    ("rope_base_nan", {"llama.rope.freq_base": f32(float("nan"))}, ["rope.freq_base", "nan"]),
    ("rope_base_zero", {"llama.rope.freq_base": f32(0.0)}, ["rope.freq_base", "finite"]),
    ("rope_base_negative", {"llama.rope.freq_base": f32(-10000.0)}, ["rope.freq_base", "finite"]),
    ("rope_base_inf", {"llama.rope.freq_base": f32(float("inf"))}, ["rope.freq_base", "inf"]),
    ("eps_nan", {"llama.attention.layer_norm_rms_epsilon": f32(float("nan"))}, ["layer_norm_rms_epsilon", "nan"]),
    ("eps_zero", {"llama.attention.layer_norm_rms_epsilon": f32(0.0)}, ["layer_norm_rms_epsilon", "finite"]),
    ("eps_negative", {"llama.attention.layer_norm_rms_epsilon": f32(-1e-5)}, ["layer_norm_rms_epsilon"]),
    ("eps_f64_inf", {"llama.attention.layer_norm_rms_epsilon": (1e300, VT.FLOAT64)}, ["layer_norm_rms_epsilon"]),
    ("rope_scale_zero", {"llama.rope.scaling.type": ("linear", VT.STRING), "llama.rope.scaling.factor": f32(0.0)},
     ["rope.scaling.factor"]),
    ("heads_zero", {"llama.attention.head_count": u32(0)}, ["head_count", "is 0"]),
    ("heads_not_dividing", {"llama.attention.head_count": u32(5)}, ["head_count", "multiple"]),
    ("kv_heads_not_dividing", {"llama.attention.head_count_kv": u32(3)}, ["head_count_kv", "multiple"]),
    ("embd_huge", {"llama.embedding_length": u32(2**31)}, ["embedding_length", "2147483648"]),
    ("ff_zero", {"llama.feed_forward_length": u32(0)}, ["feed_forward_length", "is 0"]),
    ("ctx_huge", {"llama.context_length": (2**40, VT.UINT64)}, ["context_length"]),
    ("eos_id_wraps", {"tokenizer.ggml.eos_token_id": (2**32, VT.UINT64)}, ["eos_token_id", "4294967296"]),
    ("eos_id_out_of_range", {"tokenizer.ggml.eos_token_id": u32(100000)}, ["eos token id", "100000"]),
    ("bpe_without_merges", {"tokenizer.ggml.merges": ([], VT.ARRAY)}, ["merges"]),
    ("sparse_threshold_nan", {"pinfer.sparse.threshold": f32(float("nan"))}, ["pinfer.sparse.threshold", "nan"]),
    ("act_thresholds_nan", {"pinfer.sparse.act_thresholds": ([0.1, float("nan")], VT.ARRAY)},
     ["act_thresholds", "layer 1"]),
    ("act_thresholds_negative", {"pinfer.sparse.act_thresholds": ([0.1, -1.0], VT.ARRAY)}, ["act_thresholds"]),
]


@pytest.mark.parametrize("case,kv,words", BAD_KV, ids=[c[0] for c in BAD_KV])
def test_bad_hyperparameters_are_named(tmp_path, case, kv, words):
    path = write(tmp_path / f"{case}.gguf", kv=kv)
    t0 = time.monotonic()
    msg = load_error(path)
    assert time.monotonic() - t0 < 10, "validation must come before work sized by the bad value"
    for w in words:
        assert w.lower() in msg.lower(), (w, msg)


def test_merges_key_missing_is_named(tmp_path):
    assert "merges" in load_error(write(tmp_path / "m.gguf", drop=("tokenizer.ggml.merges",)))


QT = gguf.GGMLQuantizationType


@pytest.mark.parametrize("qt", [QT.F16, QT.BF16, QT.Q8_0], ids=["f16", "bf16", "q8_0"])
@pytest.mark.parametrize("name", ["blk.0.attn_norm.weight", "output_norm.weight", "blk.1.ffn_norm.weight"])
def test_norm_weights_must_be_f32(tmp_path, name, qt):
    msg = load_error(write(tmp_path / "n.gguf", types={name: qt}))
    assert name in msg and "f32" in msg, msg


def test_matrix_of_an_integer_type_is_refused(tmp_path):
    up = np.zeros(base_tensors()["blk.0.ffn_up.weight"].shape, dtype=np.int32)
    msg = load_error(write(tmp_path / "i.gguf", raw={"blk.0.ffn_up.weight": (up, None)}))
    assert "blk.0.ffn_up.weight" in msg and "i32" in msg, msg


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_norm_weights_are_named(tmp_path, bad):
    v = np.ones(E, dtype=np.float32)
    v[5] = bad
    msg = load_error(write(tmp_path / "nan.gguf", tensors={"blk.1.ffn_norm.weight": v}))
    assert "blk.1.ffn_norm.weight" in msg and "element 5" in msg, msg


@pytest.mark.parametrize("bad,word", [(float("nan"), "nan at element 9"), (-0.5, "negative frequency at element 9")])
def test_bad_activation_frequencies_are_named(tmp_path, bad, word):
    freq = {f"blk.{i}.ffn_freq": np.linspace(1, 0, F).astype(np.float32) for i in range(L)}
    freq["blk.1.ffn_freq"][9] = bad
    msg = load_error(write(tmp_path / "f.gguf", tensors=freq))
    assert "blk.1.ffn_freq" in msg and word in msg, msg


def test_valid_activation_frequencies_load(tmp_path):
    freq = {f"blk.{i}.ffn_freq": np.linspace(1, 0, F).astype(np.float32) for i in range(L)}
    llm = Llama(write(tmp_path / "f.gguf", tensors=freq), n_ctx=32, n_threads=1)
    assert "freq" in llm.model.desc


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_matrix_weights_stop_the_decode(tmp_path, bad):
    """Large matrices are not scanned at load; the non-finite logits they cause are an error."""
    t = base_tensors()
    w = t["blk.0.ffn_down.weight"].copy()
    w[3, :] = bad
    msg = load_error(write(tmp_path / "w.gguf", tensors={"blk.0.ffn_down.weight": w}))
    assert "non-finite logit" in msg, msg


def test_non_finite_quantized_scales_stop_the_decode(tmp_path):
    """A Q8_0 block whose f16 scale is NaN."""
    t = base_tensors()
    q = gguf.quants.quantize(t["blk.0.attn_q.weight"], QT.Q8_0)
    q = q.copy()
    q.view(np.uint8).reshape(-1)[0:2] = np.frombuffer(np.float16(np.nan).tobytes(), np.uint8)
    path = write(tmp_path / "q.gguf", raw={"blk.0.attn_q.weight": (q, QT.Q8_0)})
    assert "non-finite logit" in load_error(path)


def test_cli_exits_non_zero_with_the_message(tmp_path):
    for kv, word in [({"llama.rope.dimension_count": u32(HD - 1)}, "rope.dimension_count"),
                     ({"llama.block_count": u32(0)}, "block_count")]:
        path = write(tmp_path / "c.gguf", kv=kv)
        r = subprocess.run([find_tool("pinfer-cli"), "-m", path, "-p", "ab", "-n", "2", "-t", "1"],
                           capture_output=True, timeout=60)
        assert r.returncode > 0, r
        assert word in r.stderr.decode(), r.stderr


def test_norm_f16_in_cli_is_an_error_not_an_abort(tmp_path):
    path = write(tmp_path / "c.gguf", types={"blk.0.attn_norm.weight": QT.F16})
    r = subprocess.run([find_tool("pinfer-cli"), "-m", path, "-p", "ab", "-n", "2", "-t", "1"],
                       capture_output=True, timeout=60)
    assert r.returncode > 0 and "blk.0.attn_norm.weight" in r.stderr.decode(), r


def test_perplexity_of_a_nan_model_fails(tmp_path, capsys):
    from pinfer import cli

    t = base_tensors()
    w = t["output.weight"].copy()
    w[7, 0] = float("nan")
    path = write(tmp_path / "p.gguf", tensors={"output.weight": w})
    text = tmp_path / "t.txt"
    text.write_text("the quick brown fox jumps over the lazy dog " * 20)
    rc = cli.main(["perplexity", "-m", path, "-f", str(text), "--ctx", "32", "-t", "1"])
    out = capsys.readouterr()
    assert rc != 0, out
    assert "ppl = nan" not in out.out and "non-finite" in out.err, out


def test_low_level_model_raises_too(tmp_path):
    path = write(tmp_path / "x.gguf", kv={"llama.rope.dimension_count": u32(3)})
    with pytest.raises((ValueError, RuntimeError), match="rope.dimension_count"):
        _core.Model(path)
