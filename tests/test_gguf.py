"""GGUF read/write: interop with the `gguf` package both ways, the malformed
file set, truncation at every byte, and writer failure modes."""
import gc
import json
import os
import subprocess
import sys

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT  # noqa: E402
from gguf import GGUFValueType as VT  # noqa: E402

from pinfer import _core  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MALFORMED = os.path.join(HERE, "gguf_malformed")

SCALARS = [  # (key, value, type)
    ("t.u8", 200, VT.UINT8), ("t.i8", -100, VT.INT8), ("t.u16", 60000, VT.UINT16),
    ("t.i16", -30000, VT.INT16), ("t.u32", 4_000_000_000, VT.UINT32), ("t.i32", -2_000_000_000, VT.INT32),
    ("t.f32", 1.5, VT.FLOAT32), ("t.bool", True, VT.BOOL), ("t.u64", 2**63 + 5, VT.UINT64),
    ("t.i64", -(2**62), VT.INT64), ("t.f64", 2.0 / 3.0, VT.FLOAT64), ("t.str", "héllo ✓", VT.STRING),
]
NP = {VT.UINT8: np.uint8, VT.INT8: np.int8, VT.UINT16: np.uint16, VT.INT16: np.int16, VT.UINT32: np.uint32,
      VT.INT32: np.int32, VT.FLOAT32: np.float32, VT.BOOL: np.bool_, VT.UINT64: np.uint64, VT.INT64: np.int64,
      VT.FLOAT64: np.float64}


def _arrays(rng):
    out = []
    for vt, dt in NP.items():
        if vt == VT.BOOL:
            vals = rng.integers(0, 2, 7).astype(bool)
        elif vt in (VT.FLOAT32, VT.FLOAT64):
            vals = rng.standard_normal(7).astype(dt)
        else:
            info = np.iinfo(dt)
            vals = rng.integers(info.min, info.max, 7, dtype=dt, endpoint=True)
        out.append((f"arr.{vt.name.lower()}", vals, vt))
    return out


def _tensors(rng):
    """(name, numpy data as written, ggml type id, shape in numpy element order)."""
    x = rng.standard_normal((4, 256)).astype(np.float32)
    ts = [
        ("f32", rng.standard_normal((3, 5)).astype(np.float32), QT.F32, (3, 5)),
        ("f16", rng.standard_normal((2, 3, 4)).astype(np.float16), QT.F16, (2, 3, 4)),
        ("f64", rng.standard_normal(9), QT.F64, (9,)),
        ("i8", rng.integers(-128, 127, (2, 2, 2, 2), dtype=np.int8), QT.I8, (2, 2, 2, 2)),
        ("i16", rng.integers(-999, 999, 11, dtype=np.int16), QT.I16, (11,)),
        ("i32", rng.integers(-(2**31), 2**31 - 1, 6, dtype=np.int32), QT.I32, (6,)),
        ("i64", rng.integers(-(2**62), 2**62, 3, dtype=np.int64), QT.I64, (3,)),
        ("bf16", gguf.quants.quantize(x, QT.BF16), QT.BF16, (4, 256)),
        ("q4_0", gguf.quants.quantize(x, QT.Q4_0), QT.Q4_0, (4, 256)),
        ("q8_0", gguf.quants.quantize(x, QT.Q8_0), QT.Q8_0, (4, 256)),
        ("q5_1", gguf.quants.quantize(x, QT.Q5_1), QT.Q5_1, (4, 256)),
        # K-quants: the package has no quantizer; layout-wise random blocks are as good.
        ("q4_k", rng.integers(0, 256, (2, 144), dtype=np.uint8), QT.Q4_K, (2, 256)),
        ("q6_k", rng.integers(0, 256, (3, 2 * 210), dtype=np.uint8), QT.Q6_K, (3, 512)),
    ]
    return ts


def _pkg_write(path, rng, alignment=64):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_custom_alignment(alignment)
    for k, v, t in SCALARS:
        w.add_key_value(k, v, t)
    for k, v, t in _arrays(rng):
        w.add_key_value(k, v.tolist(), VT.ARRAY, t)
    w.add_key_value("arr.str", ["a", "", "ünï", "x" * 100], VT.ARRAY, VT.STRING)
    w.add_array("arr.nested", [[1, 2, 3], [4], [5, 6]])
    w.add_array("arr.nested_str", [["a", "b"], ["c"]])
    tensors = _tensors(rng)
    for name, data, qt, _ in tensors:
        w.add_tensor(name, data, raw_dtype=qt if qt in (QT.BF16, QT.Q4_0, QT.Q8_0, QT.Q5_1, QT.Q4_K, QT.Q6_K) else None)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tensors


def _assert_value_equal(ours, theirs):
    if isinstance(theirs, list) or isinstance(ours, (list, np.ndarray)):
        flat = []

        def walk(x):
            if isinstance(x, (list, np.ndarray)):
                for y in x:
                    walk(y)
            else:
                flat.append(x)

        walk(ours)
        assert len(flat) == len(theirs if isinstance(theirs, list) else [theirs])
        for a, b in zip(flat, theirs):
            assert a == b
    else:
        assert ours == theirs
        assert type(ours) is type(theirs) or isinstance(theirs, float)


def test_read_file_written_by_gguf_package(tmp_path):
    rng = np.random.default_rng(1)
    path = tmp_path / "pkg.gguf"
    tensors = _pkg_write(path, rng, alignment=64)
    ref = gguf.GGUFReader(str(path))
    r = _core.GGUFReader(str(path))
    assert r.version == 3 and r.alignment == 64
    assert r.data_offset % 64 == 0

    # Metadata: same keys in the same order, same values and types.
    ref_fields = {k: f for k, f in ref.fields.items() if not k.startswith("GGUF.")}
    assert r.keys == list(ref_fields)
    md, types = r.metadata, r.types
    for k, f in ref_fields.items():
        _assert_value_equal(md[k], f.contents())
        ours_t = types[k]
        flat_t = []
        while isinstance(ours_t, tuple):
            flat_t.append(ours_t[0])
            ours_t = ours_t[1]
        flat_t.append(ours_t)
        assert flat_t == [int(t) for t in f.types], k
    # Values against what was written, independent of the package's reader.
    for k, v, t in SCALARS:
        assert md[k] == (np.float32(v) if t == VT.FLOAT32 else v)
    for k, v, _t in _arrays(np.random.default_rng(1)):
        assert md[k].dtype == v.dtype and np.array_equal(md[k], v)
    assert md["arr.str"] == ["a", "", "ünï", "x" * 100]
    assert [a.tolist() for a in md["arr.nested"]] == [[1, 2, 3], [4], [5, 6]]
    assert md["arr.nested_str"] == [["a", "b"], ["c"]]

    # Tensors: names, types, shapes, offsets and bytes.
    ours = r.tensors
    assert [t.name for t in ours] == [t.name for t in ref.tensors] == [t[0] for t in tensors]
    for t, rt, (_name, data, qt, shape) in zip(ours, ref.tensors, tensors):
        assert t.type == int(rt.tensor_type) == int(qt)
        assert t.ne == [int(x) for x in rt.shape]
        assert tuple(t.shape) == shape
        assert t.data_offset == rt.data_offset and t.data_offset % 64 == 0
        assert t.nbytes == rt.n_bytes
        assert t.data.tobytes() == rt.data.tobytes() == np.ascontiguousarray(data).tobytes()
        if qt in (QT.F32, QT.F16, QT.F64, QT.I8, QT.I16, QT.I32, QT.I64):
            assert t.data.dtype == data.dtype and t.data.shape == shape
            np.testing.assert_array_equal(t.data, data)


def test_tensor_data_is_a_view_that_keeps_the_file_alive(tmp_path):
    path = tmp_path / "v.gguf"
    w = _core.GGUFWriter()
    x = np.arange(1000, dtype=np.float32)
    w.add_tensor("x", x, int(QT.F32))
    w.write(str(path))
    r = _core.GGUFReader(str(path))
    d = r.tensors[0].data
    assert not d.flags.writeable and not d.flags.owndata
    with pytest.raises(ValueError):
        d[0] = 1
    del r
    gc.collect()
    np.testing.assert_array_equal(d, x)


def test_write_read_by_gguf_package(tmp_path):
    rng = np.random.default_rng(2)
    path = tmp_path / "ours.gguf"
    w = _core.GGUFWriter()
    w.add("general.alignment", 16, int(VT.UINT32))
    for k, v, t in SCALARS:
        w.add(k, v, int(t))
    arrays = _arrays(rng)
    for k, v, t in arrays:
        w.add(k, v, (int(VT.ARRAY), int(t)))
    w.add("arr.str", ["a", "", "ünï"], (int(VT.ARRAY), int(VT.STRING)))
    w.add("arr.nested", [[1, 2], [3]], (int(VT.ARRAY), (int(VT.ARRAY), int(VT.INT32))))
    w.add("t.u8", 7, int(VT.UINT8))  # replaces in place, keeps position
    tensors = _tensors(rng)
    for name, data, qt, shape in tensors:
        w.add_tensor(name, data, int(qt), shape)
    w.write(str(path))
    assert [p.name for p in tmp_path.iterdir()] == ["ours.gguf"]

    ref = gguf.GGUFReader(str(path))
    fields = {k: f for k, f in ref.fields.items() if not k.startswith("GGUF.")}
    expected_keys = (["general.alignment"] + [k for k, _, _ in SCALARS] + [k for k, _, _ in arrays]
                     + ["arr.str", "arr.nested"])
    assert list(fields) == expected_keys
    assert fields["general.alignment"].contents() == 16
    for k, v, t in SCALARS:
        want = 7 if k == "t.u8" else v
        got = fields[k].contents()
        assert fields[k].types == [t]
        assert got == pytest.approx(want) if t == VT.FLOAT32 else got == want
    for k, v, t in arrays:
        assert fields[k].types == [VT.ARRAY, t]
        np.testing.assert_array_equal(np.array(fields[k].contents(), dtype=v.dtype), v)
    assert fields["arr.str"].contents() == ["a", "", "ünï"]
    assert fields["arr.nested"].types == [VT.ARRAY, VT.ARRAY, VT.INT32]
    assert fields["arr.nested"].contents() == [1, 2, 3]  # the package flattens nested arrays

    assert [t.name for t in ref.tensors] == [t[0] for t in tensors]
    for rt, (_name, data, qt, shape) in zip(ref.tensors, tensors):
        assert int(rt.tensor_type) == int(qt)
        assert [int(x) for x in rt.shape] == list(reversed(shape))
        assert rt.data_offset % 16 == 0
        assert rt.data.tobytes() == np.ascontiguousarray(data).tobytes()

    # And our own reader gives back the nested structure.
    md = _core.GGUFReader(str(path)).metadata
    assert [a.tolist() for a in md["arr.nested"]] == [[1, 2], [3]]
    assert md["t.u8"] == 7


def _expected():
    with open(os.path.join(MALFORMED, "expected.json")) as f:
        return json.load(f)


def test_malformed_set_is_reproducible(tmp_path):
    subprocess.run([sys.executable, os.path.join(MALFORMED, "make_malformed.py"), str(tmp_path)], check=True)
    exp = _expected()
    assert sorted(os.listdir(tmp_path)) == sorted(list(exp) + ["expected.json"])
    for name in list(exp) + ["expected.json"]:
        with open(tmp_path / name, "rb") as a, open(os.path.join(MALFORMED, name), "rb") as b:
            assert a.read() == b.read(), name


def test_malformed_files_rejected_with_message():
    exp = _expected()
    bad = {k: v for k, v in exp.items() if v}
    assert len(bad) >= 30
    for name, frag in exp.items():
        path = os.path.join(MALFORMED, name)
        assert os.path.getsize(path) < 1024
        if not frag:
            _core.GGUFReader(path)  # valid controls load
            continue
        with pytest.raises(ValueError) as ei:
            _core.GGUFReader(path)
        assert frag in str(ei.value), (name, str(ei.value))
        # Same verdict from memory.
        with open(path, "rb") as f:
            with pytest.raises(ValueError, match="gguf: "):
                _core.GGUFReader.from_bytes(f.read())


def test_truncation_at_every_byte(tmp_path):
    path = tmp_path / "t.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_key_value("a", [1, 2, 3], VT.ARRAY, VT.UINT16)
    w.add_key_value("b", ["xy", "z"], VT.ARRAY, VT.STRING)
    w.add_array("c", [[1], [2, 3]])
    w.add_key_value("d", 1.25, VT.FLOAT64)
    w.add_tensor("w0", np.arange(6, dtype=np.float32))
    w.add_tensor("w1", np.arange(5, dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    blob = path.read_bytes()
    ref = gguf.GGUFReader(str(path))
    data_end = max(t.data_offset + t.n_bytes for t in ref.tensors)
    for cut in range(len(blob)):
        if cut < data_end:
            with pytest.raises(ValueError, match="truncated") as ei:
                _core.GGUFReader.from_bytes(blob[:cut])
            assert "gguf: " in str(ei.value)
        else:  # only trailing padding is missing
            r = _core.GGUFReader.from_bytes(blob[:cut])
            assert [t.data.tobytes() for t in r.tensors] == [t.data.tobytes() for t in ref.tensors]


def test_open_errors(tmp_path):
    with pytest.raises(OSError, match="cannot open"):
        _core.GGUFReader(str(tmp_path / "missing.gguf"))
    with pytest.raises(OSError, match="not a regular file"):
        _core.GGUFReader(str(tmp_path))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # must not block waiting for a writer
    with pytest.raises(OSError, match="not a regular file"):
        _core.GGUFReader(str(fifo))


def test_writer_failure_leaves_nothing(tmp_path):
    w = _core.GGUFWriter()
    w.add("k", "v", int(VT.STRING))
    w.add_tensor("x", np.zeros(4, np.float32), int(QT.F32))
    with pytest.raises(OSError, match="cannot create"):
        w.write(str(tmp_path / "no" / "such" / "dir" / "f.gguf"))
    # A directory at the path is refused before any temp file exists.
    target = tmp_path / "adir"
    target.mkdir()
    (target / "keep").write_text("x")
    with pytest.raises(OSError, match="is a directory"):
        w.write(str(target))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir"]
    assert [p.name for p in target.iterdir()] == ["keep"]
    # A write that fails part way (the file size limit, in a child process) removes its temp file.
    code = ("import resource, signal, sys, numpy as np; sys.path.insert(0, %r); import conftest; "
            "from pinfer import _core; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY)); "
            "w = _core.GGUFWriter(); w.add_tensor('x', np.zeros(65536, np.float32), 0); w.write(sys.argv[1])"
            % os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "big.gguf")], capture_output=True, text=True)
    assert r.returncode != 0 and "cannot write" in r.stderr and "File too large" in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir"]
    # A good write replaces an existing file.
    f = tmp_path / "f.gguf"
    f.write_bytes(b"old")
    w.write(str(f))
    assert _core.GGUFReader(str(f)).metadata == {"k": "v"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "f.gguf"]


def test_writer_rejects_bad_input():
    w = _core.GGUFWriter()
    with pytest.raises(ValueError, match="power of two"):
        w.add("general.alignment", 24, int(VT.UINT32))
    with pytest.raises(ValueError, match="must be u32"):
        w.add("general.alignment", 32, int(VT.UINT64))
    with pytest.raises((ValueError, OverflowError)):
        w.add("k", 300, int(VT.UINT8))
    with pytest.raises(ValueError, match="UTF-8|empty"):
        w.add("", 1, int(VT.UINT8))
    with pytest.raises(ValueError, match="unknown value type"):
        w.add("k", 1, 13)
    with pytest.raises(ValueError, match="nested deeper"):
        spec = int(VT.UINT8)
        val = 1
        for _ in range(9):
            spec, val = (int(VT.ARRAY), spec), [val]
        w.add("deep", val, spec)
    with pytest.raises(ValueError, match="block size 32"):
        w.add_tensor("q", np.zeros(18, np.uint8), int(QT.Q4_0), (33,))
    with pytest.raises(ValueError, match="need 18"):
        w.add_tensor("q", np.zeros(17, np.uint8), int(QT.Q4_0), (32,))
    with pytest.raises(ValueError, match="unknown tensor type (id )?4"):
        w.add_tensor("q", np.zeros(18, np.uint8), 4, (32,))
    with pytest.raises(ValueError, match="longer than 63"):
        w.add_tensor("n" * 64, np.zeros(1, np.float32), int(QT.F32))
    w.add_tensor("a", np.zeros(1, np.float32), int(QT.F32))
    with pytest.raises(ValueError, match="duplicate tensor name 'a'"):
        w.add_tensor("a", np.zeros(1, np.float32), int(QT.F32))
