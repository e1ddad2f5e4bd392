"""pinfer-quantize: types chosen per tensor, values against the gguf package's
dequantizer, metadata carried over, logits, errors (tools/pinfer-quantize.cpp)."""
import os
import subprocess

import gguf
import numpy as np
import pytest

from pinfer import _core
from pinfer.cli import find_tool
from tinymodel import tiny_model

PLAIN = ["f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K"]
PRESETS = ["Q3_K_M", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M"]
FILE_TYPE = {"f32": 0, "f16": 1, "bf16": 32, "q4_0": 2, "q4_1": 3, "q5_0": 8, "q5_1": 9, "q8_0": 7, "q2_K": 10,
             "q3_K": 11, "Q3_K_M": 12, "q4_K": 14, "Q4_K_S": 14, "Q4_K_M": 15, "q5_K": 16, "Q5_K_S": 16,
             "Q5_K_M": 17, "q6_K": 18}
BLOCK = {"f32": 1, "f16": 1, "bf16": 1, "q4_0": 32, "q4_1": 32, "q5_0": 32, "q5_1": 32, "q8_0": 32,
         "q2_K": 256, "q3_K": 256, "q4_K": 256, "q5_K": 256, "q6_K": 256}
# Relative RMS error (|deq - x| / |x|) allowed for the k-quants, which the gguf
# package cannot quantize: about 1.25x what each gives on Gaussian weights. The
# other types are held to the gguf package's own quantizer on the same rows.
REL_RMS_K = {"q6_K": 0.022, "q5_K": 0.045, "q4_K": 0.09, "q3_K": 0.18, "q2_K": 0.34}
MATRICES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down", "ffn_down_t")


# ---- the documented rules, restated independently of the tool ----

def more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def fallback(t, ne0):
    chain = {"q2_K": "q4_0", "q3_K": "q4_0", "q4_K": "q5_0", "q5_K": "q5_1", "q6_K": "q8_0"}
    while ne0 % BLOCK[t]:
        t = chain.get(t, "f16")
    return t


def expected_type(name, ne, recipe, n_layer, tied, src="f32", pure=False):
    """Type the README rules give tensor `name` (shape ne) under `recipe`."""
    parts = name.split(".")
    kind = parts[2] if parts[0] == "blk" and len(parts) == 4 else None
    is_matrix = len(ne) >= 2 and (name in ("token_embd.weight", "output.weight")
                                  or (kind in MATRICES and parts[3] == "weight"))
    if not is_matrix:
        if len(ne) == 1 and (src not in ("f32", "i32") and (src.startswith("q") or recipe == "f32")):
            return "f32"
        return src
    base = {"Q3_K_M": "q3_K", "Q4_K_S": "q4_K", "Q4_K_M": "q4_K",
            "Q5_K_S": "q5_K", "Q5_K_M": "q5_K"}.get(recipe, recipe)
    t = base
    if not pure:
        il = int(parts[1]) if kind else -1
        logits = name == "output.weight" or (name == "token_embd.weight" and tied)
        v, down = kind == "attn_v", kind in ("ffn_down", "ffn_down_t")
        if logits:
            t = "q6_K" if base in ("q4_0", "q4_1", "q5_0", "q5_1", "q2_K", "q3_K", "q4_K", "q5_K") else base
        elif recipe == "q2_K" and (v or down):
            t = "q3_K"
        elif recipe == "Q3_K_M" and v:
            t = "q5_K" if il < 2 else "q4_K"
        elif recipe == "Q3_K_M" and kind == "attn_output":
            t = "q4_K"
        elif recipe == "Q3_K_M" and down and more_bits(il, n_layer):
            t = "q4_K"
        elif recipe == "Q4_K_S" and (v or down) and il < max(1, n_layer // 8):
            t = "q5_K"
        elif recipe in ("Q4_K_M", "Q5_K_M") and (v or down) and more_bits(il, n_layer):
            t = "q6_K"
    return fallback(t, ne[0])


# ---- helpers ----

@pytest.fixture(scope="module")
def tool():
    return find_tool("pinfer-quantize")


def quantize(tool, src, dst, typ, *extra, check=True):
    r = subprocess.run([tool, str(src), str(dst), typ, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=300)
    if check:
        assert r.returncode == 0, r.stderr + r.stdout
    return r


def rel_rms(y, x):
    x = np.asarray(x, dtype=np.float64)
    return float(np.sqrt(np.mean((np.asarray(y, dtype=np.float64) - x) ** 2) / np.mean(x ** 2)))


def type_name(t):
    return _core.type_info(int(t))["name"]


def read(path):
    r = gguf.GGUFReader(str(path))
    tensors = {t.name: t for t in r.tensors}
    return r, tensors


def as_f32(t):
    """Decode a gguf-package tensor to float32 [rows, ne0] with the gguf package."""
    ne = [int(x) for x in t.shape]
    data = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
    return np.asarray(data, dtype=np.float32).reshape(-1, ne[0])


def field(r, key):
    f = r.fields[key]
    if f.types and f.types[0] == gguf.GGUFValueType.STRING and len(f.types) == 1:
        return bytes(f.parts[-1]).decode()
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        return [bytes(f.parts[i]) if f.types[-1] == gguf.GGUFValueType.STRING else f.parts[i].tolist()
                for i in f.data]
    return f.parts[-1].tolist()[0]


def add_extras(src, dst, n_ff, n_embd):
    """Copy a GGUF adding pinfer tensors/keys and unknown tensors, with our writer."""
    r = _core.GGUFReader(str(src))
    w = _core.GGUFWriter()
    for k in r.keys:
        w.add(k, r.get(k), r.types[k])
    w.add("pinfer.neuron_order", "hot-first", _core.GGUF_TYPE_STRING)
    rng = np.random.default_rng(5)
    extras = {
        "blk.0.ffn_freq": rng.random(n_ff).astype(np.float32),
        "blk.0.fc1.weight": rng.standard_normal((16, n_embd)).astype(np.float32),
        "blk.0.fc2.weight": rng.standard_normal((n_ff, 16)).astype(np.float32),
        "blk.0.ffn_down_t.weight": rng.standard_normal((n_ff, n_embd)).astype(np.float32),
        "blk.1.ffn_down_t.weight": rng.standard_normal((n_ff, n_embd)).astype(np.float32),
        "mystery.matrix": rng.standard_normal((8, 64)).astype(np.float32),
        "mystery.ids": np.arange(10, dtype=np.int32),
        "mystery.bias16": rng.standard_normal(32).astype(np.float16),
    }
    for t in r.tensors:
        w.add_tensor(t.name, np.asarray(t.data), t.type, t.shape)
    type_of = {np.float32: 0, np.float16: 1, np.int32: 26}
    for name, a in extras.items():
        w.add_tensor(name, a, type_of[a.dtype.type])
    w.write(str(dst))
    return extras


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("quant")
    # rows of 256: every type fits; 8 layers: the more-bits rule picks layers 0, 3, 6, 7
    big, _ = tiny_model(str(d / "big.gguf"), n_embd=256, n_head=4, n_ff=256, n_layer=8, seed=1)
    # rows of 64 / 80: k-quants fall back, and ffn_down (80) fits no 32-block type
    small, small_hf = tiny_model(str(d / "small.gguf"), n_embd=64, n_head=4, n_ff=80, n_layer=2, seed=2)
    extra = str(d / "extra.gguf")
    extras = add_extras(big, extra, 256, 256)
    return {"dir": d, "big": big, "small": small, "small_hf": small_hf, "extra": extra, "extras": extras}


def check_file(src, out, recipe, pure=False, value_layers=(0, 3, 7)):
    """Types of every tensor per the rules, metadata carried over, and values of
    the non-layer tensors and of value_layers (layers 0, 3, 7 cover every rule)."""
    rs, ts = read(src)
    ro, to = read(out)
    n_layer = 1 + max(int(n.split(".")[1]) for n in ts if n.startswith("blk."))
    tied = "output.weight" not in ts
    assert list(ts) == list(to), "tensor order and names are kept"
    for name, t in ts.items():
        o = to[name]
        ne = [int(x) for x in t.shape]
        assert [int(x) for x in o.shape] == ne, name
        src_type = t.tensor_type.name.lower().replace("_k", "_K")
        want = expected_type(name, ne, recipe, n_layer, tied, src=src_type, pure=pure)
        got = type_name(o.tensor_type)
        assert got == want, f"{name}: {got}, expected {want} under {recipe}"
        if name.startswith("blk.") and int(name.split(".")[1]) not in value_layers:
            continue
        if t.tensor_type == gguf.GGMLQuantizationType.I32:
            assert np.array_equal(np.asarray(o.data), np.asarray(t.data))
            continue
        x = as_f32(t)
        y = as_f32(o)
        if got == src_type:
            assert bytes(np.asarray(o.data).tobytes()) == bytes(np.asarray(t.data).tobytes()), name
            continue
        rel = rel_rms(y, x)
        if got in REL_RMS_K:
            bound = REL_RMS_K[got]
        else:  # the gguf package's quantizer (numpy) on the same rows
            gt = gguf.GGMLQuantizationType[got.upper()]
            bound = 1.01 * rel_rms(gguf.quants.dequantize(gguf.quants.quantize(x, gt), gt), x) + 1e-7
        assert rel <= bound, f"{name} as {got}: relative RMS error {rel:.4g} > {bound:.4g}"
        if got not in ("f32", "f16", "bf16"):
            # the rows are where they belong: same bytes as quantizing those rows directly
            direct = _core.quantize(_core.type_from_name(got), np.ascontiguousarray(x))
            assert np.array_equal(direct.reshape(-1), np.asarray(o.data).reshape(-1).view(np.uint8)), name
    # metadata: same keys in the same order, same values, except the two the tool sets
    ks, ko = list(rs.fields), list(ro.fields)
    assert [k for k in ko if k in ks] == ks
    assert set(ko) - set(ks) <= {"general.file_type", "general.quantization_version"}
    skip = {"general.file_type", "general.quantization_version"}
    for k in ks:
        if k.startswith("GGUF.") or k in skip:
            continue
        assert field(ro, k) == field(rs, k), k
    assert field(ro, "general.file_type") == FILE_TYPE[recipe if not pure else
                                                       {"Q4_K_M": "q4_K"}.get(recipe, recipe)]
    any_q = any(t.tensor_type not in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16,
                                      gguf.GGMLQuantizationType.BF16, gguf.GGMLQuantizationType.I32)
                for t in to.values())
    # set when quantized tensors are written; otherwise only carried over from the input
    assert ("general.quantization_version" in ro.fields) == (any_q or "general.quantization_version" in ks)
    if any_q:
        assert field(ro, "general.quantization_version") == 2


@pytest.mark.parametrize("typ", PLAIN)
def test_plain_types(models, tool, typ):
    out = models["dir"] / f"big-{typ}.gguf"
    r = quantize(tool, models["big"], out, typ, "--threads", "3")
    progress = [l for l in r.stdout.splitlines() if l.startswith("[")]
    assert f"as {typ}" in r.stdout and len(progress) == 8 * 9 + 3  # one line per tensor
    check_file(models["big"], out, typ)
    m = _core.Model(str(out))  # loads and runs in pinfer
    c = _core.Context(m, 32, 32, 1)
    c.decode([1, 2, 3], True)
    assert np.all(np.isfinite(c.logits_all()))


@pytest.mark.parametrize("preset", PRESETS)
def test_presets(models, tool, preset):
    out = models["dir"] / f"big-{preset}.gguf"
    quantize(tool, models["big"], out, preset.lower() if preset == "Q4_K_S" else preset)  # case-insensitive
    check_file(models["big"], out, preset)
    _, to = read(out)
    kinds = {}
    for n, t in to.items():
        kinds.setdefault(type_name(t.tensor_type), []).append(n)
    if preset == "Q4_K_M":  # concretely: attn_v/ffn_down of layers 0, 3, 6, 7 in q6_K, plus output
        assert sorted(kinds["q6_K"]) == sorted(["output.weight"] + [f"blk.{i}.{k}.weight" for i in (0, 3, 6, 7)
                                                                    for k in ("attn_v", "ffn_down")])


def test_pure(models, tool):
    out = models["dir"] / "big-pure.gguf"
    quantize(tool, models["big"], out, "Q4_K_M", "--pure")
    check_file(models["big"], out, "Q4_K_M", pure=True)
    _, to = read(out)
    assert type_name(to["output.weight"].tensor_type) == "q4_K"


def test_fallbacks_are_reported(models, tool):
    out = models["dir"] / "small-q4_K.gguf"
    r = quantize(tool, models["small"], out, "q4_K")
    check_file(models["small"], out, "q4_K")
    _, to = read(out)
    assert type_name(to["blk.0.ffn_down.weight"].tensor_type) == "f16"  # 80: no 32-block type fits
    assert type_name(to["blk.0.attn_q.weight"].tensor_type) == "q5_0"
    assert type_name(to["output.weight"].tensor_type) == "q8_0"
    line = next(l for l in r.stdout.splitlines() if "blk.0.ffn_down.weight" in l)
    assert "fallback" in line and "80" in line
    assert "fell back" in r.stdout


def test_pinfer_tensors_and_unknown_tensors(models, tool):
    out = models["dir"] / "extra-q4_0.gguf"
    quantize(tool, models["extra"], out, "q4_0")
    check_file(models["extra"], out, "q4_0")
    ro, to = read(out)
    assert field(ro, "pinfer.neuron_order") == "hot-first"
    ex = models["extras"]
    for name in ("blk.0.ffn_freq", "blk.0.fc1.weight", "blk.0.fc2.weight", "mystery.matrix"):
        np.testing.assert_array_equal(np.asarray(to[name].data).reshape(ex[name].shape), ex[name])
    assert type_name(to["blk.0.ffn_down_t.weight"].tensor_type) == "q4_0"
    assert type_name(to["mystery.bias16"].tensor_type) == "f16"  # 1-D float: kept
    # under f32 every float tensor becomes f32, 1-D ones included
    out32 = models["dir"] / "extra-f32.gguf"
    quantize(tool, out, out32, "f32")
    check_file(out, out32, "f32")


def test_any_input_type(models, tool):
    d = models["dir"]
    q8 = d / "small-q8_0.gguf"
    quantize(tool, models["small"], q8, "q8_0")
    # q8_0 -> f32 decodes exactly what the gguf package decodes
    back = d / "small-q8-f32.gguf"
    r = quantize(tool, q8, back, "f32")
    assert "quantized" not in r.stdout  # decoding to f32 adds no error: no warning
    check_file(q8, back, "f32")
    # q8_0 -> q8_0 copies the bytes; q8_0 -> q4_0 re-quantizes with a warning
    quantize(tool, q8, d / "small-q8-q8.gguf", "q8_0")
    check_file(q8, d / "small-q8-q8.gguf", "q8_0")
    r = quantize(tool, q8, d / "small-q8-q4.gguf", "q4_0")
    assert "rounding error" in r.stdout
    check_file(q8, d / "small-q8-q4.gguf", "q4_0")
    # f16 input
    f16 = d / "small-f16.gguf"
    quantize(tool, models["small"], f16, "f16")
    quantize(tool, f16, d / "small-f16-q5_1.gguf", "q5_1")
    check_file(f16, d / "small-f16-q5_1.gguf", "q5_1")


def test_threads_give_identical_files(models, tool):
    a, b = models["dir"] / "t1.gguf", models["dir"] / "t4.gguf"
    quantize(tool, models["big"], a, "Q4_K_M", "--threads", "1")
    quantize(tool, models["big"], b, "Q4_K_M", "-t", "4")
    assert a.read_bytes() == b.read_bytes()


def logits_of(path, tokens):
    m = _core.Model(str(path))
    c = _core.Context(m, 64, 64, 1)
    c.decode(tokens, True)
    return np.array(c.logits_all(), dtype=np.float64)


def test_q8_0_logits_close_to_f32(models, tool):
    d = models["dir"]
    # the 2-layer model: an 8-layer random model amplifies any perturbation
    toks = list(np.random.default_rng(0).integers(0, 270, 24))
    ref = logits_of(models["small"], toks)
    errs = {}
    for t in ("q8_0", "q4_0"):
        quantize(tool, models["small"], d / f"lg-{t}.gguf", t, "--pure")
        got = logits_of(d / f"lg-{t}.gguf", toks)
        errs[t] = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    print("relative logits error vs F32:", errs)
    # q8_0 weights (0.5% relative error) plus q8_0 activations in every matmul: ~1.6% here
    assert errs["q8_0"] < 0.03, errs
    assert errs["q8_0"] < errs["q4_0"] / 5, errs  # more bits, closer logits
    got = logits_of(d / "lg-q8_0.gguf", toks)
    assert np.mean(got.argmax(1) == ref.argmax(1)) >= 0.9


# ---- errors ----

def test_bad_type_lists_valid_ones(models, tool, tmp_path):
    out = tmp_path / "o.gguf"
    r = quantize(tool, models["small"], out, "q4_9", check=False)
    assert r.returncode == 2
    assert "unknown type 'q4_9'" in r.stderr
    for t in PLAIN + PRESETS:
        assert t in r.stderr
    assert not out.exists() and os.listdir(tmp_path) == []


@pytest.mark.parametrize("argv,msg", [
    ([], "expected IN.gguf OUT.gguf TYPE"),
    (["a", "b"], "expected IN.gguf OUT.gguf TYPE"),
    (["a", "b", "q8_0", "--threads", "0"], "--threads"),
    (["a", "b", "q8_0", "--threads"], "needs a value"),
    (["a", "b", "q8_0", "--fast"], "unknown option '--fast'"),
])
def test_bad_command_lines(tool, argv, msg):
    r = subprocess.run([tool, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 2 and msg in r.stderr, r.stderr


def test_help(tool):
    r = subprocess.run([tool, "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 0 and "Q4_K_M" in r.stdout and "--pure" in r.stdout


def test_unreadable_or_corrupt_input(tool, tmp_path):
    out = tmp_path / "o.gguf"
    r = quantize(tool, tmp_path / "missing.gguf", out, "q8_0", check=False)
    assert r.returncode == 1 and "cannot read" in r.stderr and "missing.gguf" in r.stderr
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 40)
    r = quantize(tool, bad, out, "q8_0", check=False)
    assert r.returncode == 1 and "cannot read" in r.stderr
    assert sorted(os.listdir(tmp_path)) == ["bad.gguf"]  # nothing left behind


def test_output_is_input_refused(models, tool, tmp_path):
    src = tmp_path / "m.gguf"
    src.write_bytes(open(models["small"], "rb").read())
    before = src.read_bytes()
    os.symlink(src, tmp_path / "sym.gguf")
    os.link(src, tmp_path / "hard.gguf")
    for out in (str(src), os.path.join(str(tmp_path), ".", "m.gguf"), tmp_path / "sym.gguf", tmp_path / "hard.gguf"):
        r = quantize(tool, src, out, "q8_0", check=False)
        assert r.returncode == 1 and "is the input file" in r.stderr, (out, r.stderr)
    assert src.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["hard.gguf", "m.gguf", "sym.gguf"]


def test_failed_write_leaves_nothing(models, tool, tmp_path):
    target = tmp_path / "is_a_dir"
    target.mkdir()
    r = quantize(tool, models["small"], target, "q8_0", check=False)
    assert r.returncode == 1 and "is a directory" in r.stderr  # refused before the work
    assert sorted(os.listdir(tmp_path)) == ["is_a_dir"] and os.listdir(target) == []
    r = quantize(tool, models["small"], tmp_path / "no" / "such" / "dir.gguf", "q8_0", check=False)
    assert r.returncode == 1 and "cannot write" in r.stderr
