"""Extended GGUF (python/pinfer/extgguf.py, src/llama-sparse-meta.cpp) and PowerInfer files.

A tiny random llama (tests/tinymodel.py) gets predictors, ffn_down_t, frequencies,
thresholds and placements; the result must stay a valid GGUF for the `gguf`
package, load in pinfer with the C API reporting what is there, and compute the
same logits. Placement selection is checked against its definition (exact entry,
largest entry below, else a greedy split that equals the global top-K by
frequency when every neuron costs the same). PowerInfer-layout files (PWRI magic,
powerinfer.sparse_threshold, ffn_down_t without ffn_down, .gpuidx) are built here
byte by byte and must load. Malformed files must fail naming the tensor or key.

Needs: pip install torch==2.13.0 transformers gguf
"""
import os

import gguf
import numpy as np
import pytest

import tinymodel
from pinfer import _core  # noqa: E402
from pinfer import extgguf as eg  # noqa: E402

N_EMBD, N_FF, N_LAYER = 64, 96, 2
RANKS = [8, 12]  # predictor rank per layer (differs per layer on purpose)
TOKENS = [5, 77, 200, 12, 9, 150, 42, 260]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("ext") / "base.gguf")
    tinymodel.tiny_model(path, n_embd=N_EMBD, n_layer=N_LAYER, n_head=4, n_ff=N_FF, seed=7)
    return path


def logits(path, tokens=TOKENS):
    m = _core.Model(path)
    ctx = _core.Context(m, 64, 64, 1, type_kv=0)
    ctx.decode(tokens, all_logits=True)
    out = np.array(ctx.logits_all(), dtype=np.float64)
    ctx.close()
    m.close()
    return out


def rel(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def rand_sparse(seed=0):
    rng = np.random.default_rng(seed)
    preds = [(rng.standard_normal((r, N_EMBD)).astype(np.float32),
              rng.standard_normal((N_FF, r)).astype(np.float32)) for r in RANKS]
    freqs = [rng.random(N_FF).astype(np.float32) for _ in range(N_LAYER)]
    return preds, freqs


def gguf_tensors(path):
    r = gguf.GGUFReader(path)
    return r, {t.name: t for t in r.tensors}


# ---------------------------------------------------------------- writing and loading


@pytest.fixture(scope="module")
def extended(base, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("ext") / "ext.gguf")
    preds, freqs = rand_sparse(1)
    placements = [eg.Placement(4000, "test-a", 1.5, [3, 5]), eg.Placement(20000, "test-b", 7.25, [40, 17])]
    eg.add_sparse(base, path, predictors=preds, freqs=freqs, threshold=-0.5, act_thresholds=[0.1, 0.2],
                  mode_hint="predictor", placements=placements)
    eg.add_down_t(path, path)
    return path, preds, freqs, placements


def test_valid_gguf_for_the_gguf_package(base, extended):
    path, preds, freqs, placements = extended
    r, ts = gguf_tensors(path)
    rb, tb = gguf_tensors(base)
    # Everything of the base file is still there, bytes unchanged.
    for name, t in tb.items():
        assert name in ts and ts[name].tensor_type == t.tensor_type
        assert np.array_equal(np.asarray(ts[name].data), np.asarray(t.data))
    for key, f in rb.fields.items():
        if key.startswith("GGUF."):
            continue
        g = r.fields[key]
        assert g.types == f.types
        assert all(np.array_equal(g.parts[i], f.parts[i]) for i in g.data) and len(g.data) == len(f.data)
    # The new tensors, with PowerInfer's names and shapes (gguf reports numpy order).
    for il, (a, b) in enumerate(preds):
        assert ts[f"blk.{il}.fc1.weight"].shape.tolist() == [N_EMBD, RANKS[il]]  # ne = [d, r]
        assert ts[f"blk.{il}.fc2.weight"].shape.tolist() == [RANKS[il], N_FF]    # ne = [r, n]
        np.testing.assert_array_equal(np.asarray(ts[f"blk.{il}.fc1.weight"].data), a)
        np.testing.assert_array_equal(np.asarray(ts[f"blk.{il}.fc2.weight"].data), b)
        np.testing.assert_array_equal(np.asarray(ts[f"blk.{il}.ffn_freq"].data), freqs[il])
        assert ts[f"blk.{il}.ffn_down_t.weight"].shape.tolist() == [N_EMBD, N_FF]
    f = r.fields
    assert f["pinfer.placement.count"].types == [gguf.GGUFValueType.UINT32]
    assert int(f["pinfer.placement.1.budget_bytes"].parts[-1][0]) == 20000
    assert f["pinfer.placement.1.budget_bytes"].types == [gguf.GGUFValueType.UINT64]
    assert f["pinfer.placement.1.objective"].types == [gguf.GGUFValueType.FLOAT64]
    assert f["pinfer.placement.0.gpu_neurons"].types == [gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT32]
    assert f["pinfer.sparse.threshold"].types == [gguf.GGUFValueType.FLOAT32]


def test_read_back(extended):
    path, preds, freqs, placements = extended
    info = eg.read(path)
    assert (info.n_layer, info.n_embd, info.n_ff) == (N_LAYER, N_EMBD, N_FF)
    assert info.threshold == -0.5 and info.mode_hint == "predictor" and info.neuron_order is None
    np.testing.assert_array_equal(info.act_thresholds, np.float32([0.1, 0.2]))
    assert info.placements == placements
    for il in range(N_LAYER):
        np.testing.assert_array_equal(info.predictors[il][0], preds[il][0])
        np.testing.assert_array_equal(info.predictors[il][1], preds[il][1])
        np.testing.assert_array_equal(info.freqs[il], freqs[il])


def test_down_t_is_down_transposed(extended):
    path = extended[0]
    _, ts = gguf_tensors(path)
    for il in range(N_LAYER):
        down = np.asarray(ts[f"blk.{il}.ffn_down.weight"].data, dtype=np.float64)      # [d, n]
        down_t = np.asarray(ts[f"blk.{il}.ffn_down_t.weight"].data, dtype=np.float64)  # [n, d]
        np.testing.assert_array_equal(down_t, down.T)


@pytest.mark.parametrize("qname,expect", [("q8_0", "q8_0"), ("q4_K", "f16")])
def test_down_t_quantized(base, tmp_path, qname, expect):
    """Q8_0 rows of d=64 fit its blocks (same type); Q4_K (256) do not (F16).
    Reference: the gguf package's dequantizer."""
    n_ff = 256 if qname == "q4_K" else N_FF
    src = str(tmp_path / "m.gguf")
    tinymodel.tiny_model(src, n_embd=N_EMBD, n_layer=1, n_head=4, n_ff=n_ff, seed=3)
    qt = _core.type_from_name(qname)
    r = _core.GGUFReader(src)
    down = {t.name: t for t in r.tensors}["blk.0.ffn_down.weight"]
    q = eg.encode(eg.to_f32(down), qt)
    del r, down
    eg.rewrite(src, src, {"blk.0.ffn_down.weight": q})
    eg.add_down_t(src, src)
    _, ts = gguf_tensors(src)
    t, tt = ts["blk.0.ffn_down.weight"], ts["blk.0.ffn_down_t.weight"]
    ref = gguf.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float64)  # [d, n]
    got = gguf.dequantize(np.asarray(tt.data), tt.tensor_type).astype(np.float64)  # [n, d]
    assert tt.tensor_type.name.lower() == expect.lower()
    assert got.shape == ref.T.shape
    if expect == "f16":
        np.testing.assert_allclose(got, ref.T, rtol=1e-3, atol=1e-3)
    else:  # re-quantizing the transposed rows: error within the format's step
        step = np.abs(ref).max() / 127
        assert np.max(np.abs(got - ref.T)) <= 2 * step
    _core.Model(src).close()  # loads: down_t of any type is accepted


def test_pinfer_loads_and_reports(extended):
    path, preds, freqs, placements = extended
    m = _core.Model(path)
    info = m.sparse_info
    assert info["has_predictors"] and info["has_down_t"] and info["has_freq"]
    assert not info["hot_first"] and not info["powerinfer"] and not info["has_gpuidx"]
    assert info["threshold"] == -0.5 and info["n_placements"] == 2 and info["max_rank"] == max(RANKS)
    assert info["n_act_thresholds"] == N_LAYER
    np.testing.assert_array_equal(np.float32(m.act_thresholds), np.float32([0.1, 0.2]))
    got = m.placements
    assert [(p["budget_bytes"], p["solver"], p["objective"], list(p["gpu_neurons"])) for p in got] == \
        [(p.budget_bytes, p.solver, p.objective, p.gpu_neurons) for p in placements]
    assert "sparse: predictors, down_t, freq" in m.desc and "2 placement(s)" in m.desc
    m.close()


def test_plain_model_has_no_sparse_info(base):
    m = _core.Model(base)
    info = m.sparse_info
    assert not any(info[k] for k in ("has_predictors", "has_down_t", "has_freq", "hot_first", "powerinfer"))
    assert info["n_placements"] == 0 and "sparse" not in m.desc and m.act_thresholds == []
    m.close()


def test_extended_logits_unchanged(base, extended):
    np.testing.assert_array_equal(logits(extended[0]), logits(base))


# ---------------------------------------------------------------- placement selection


def neuron_bytes_ref(path):
    """Bytes per GPU neuron per layer: gate + up rows + down_t row (down column without it)."""
    r = gguf.GGUFReader(path)
    ts = {t.name: t for t in r.tensors}
    out = []
    for il in range(N_LAYER):
        p = f"blk.{il}."
        b = sum(int(ts[p + x].n_bytes) for x in ("ffn_gate.weight", "ffn_up.weight"))
        b += int(ts[p + ("ffn_down_t.weight" if p + "ffn_down_t.weight" in ts else "ffn_down.weight")].n_bytes)
        out.append(-(-b // N_FF))
    return out


def test_placement_selection(extended):
    path, _, freqs, placements = extended
    m = _core.Model(path)
    assert m.placement(4000) == ("exact", [3, 5])
    assert m.placement(20000) == ("exact", [40, 17])
    assert m.placement(19999) == ("below", [3, 5])
    assert m.placement(10 ** 12) == ("below", [40, 17])
    kind, k = m.placement(3999)
    assert kind == "greedy"
    # Greedy with every neuron costing the same bytes (F32 model: equal per layer)
    # takes the prefix k_l of each layer; its mass must be the best prefix split.
    nb = neuron_bytes_ref(path)
    assert nb[0] == nb[1]
    assert sum(ki * b for ki, b in zip(k, nb)) <= 3999
    assert sum(k) == 3999 // nb[0]
    m.close()


def test_greedy_is_global_top_k_when_hot_first(extended, tmp_path):
    """After hot-first permutation, prefixes hold the most frequent neurons, and a
    greedy split of K equal-cost neurons is exactly the global top-K by frequency."""
    path, _, freqs, _ = extended
    hot = str(tmp_path / "hot.gguf")
    with pytest.warns(UserWarning, match="placement"):
        eg.make_hot_first(path, hot)
    m = _core.Model(hot)
    assert m.sparse_info["hot_first"] and m.sparse_info["n_placements"] == 0
    nb = neuron_bytes_ref(hot)[0]
    for K in (1, 10, 57, 150):
        kind, k = m.placement(K * nb + nb // 2)
        assert kind == "greedy" and sum(k) == K
        allf = np.concatenate(freqs)
        chosen = np.concatenate([np.sort(freqs[il])[::-1][:k[il]] for il in range(N_LAYER)])
        np.testing.assert_array_equal(np.sort(chosen), np.sort(allf)[::-1][:K][::-1])
    assert m.placement(10 ** 12) == ("greedy", [N_FF] * N_LAYER)  # everything fits
    m.close()


# ---------------------------------------------------------------- permutation


def test_permutation_keeps_logits(extended, tmp_path):
    path, preds, freqs, _ = extended
    out = str(tmp_path / "perm.gguf")
    rng = np.random.default_rng(5)
    perms = [rng.permutation(N_FF) for _ in range(N_LAYER)]
    with pytest.warns(UserWarning):
        eg.permute_neurons(path, out, perms, neuron_order=None)
    assert rel(logits(out), logits(path)) < 1e-5
    info = eg.read(out)
    assert info.neuron_order is None and info.placements == []
    _, ts = gguf_tensors(path)
    _, tp = gguf_tensors(out)
    for il, p in enumerate(perms):
        b = f"blk.{il}."
        np.testing.assert_array_equal(info.freqs[il], freqs[il][p])
        np.testing.assert_array_equal(info.predictors[il][1], preds[il][1][p])
        np.testing.assert_array_equal(info.predictors[il][0], preds[il][0])  # fc1 is not per neuron
        for nm in ("ffn_gate.weight", "ffn_up.weight", "ffn_down_t.weight"):
            np.testing.assert_array_equal(np.asarray(tp[b + nm].data), np.asarray(ts[b + nm].data)[p])
        np.testing.assert_array_equal(np.asarray(tp[b + "ffn_down.weight"].data),
                                      np.asarray(ts[b + "ffn_down.weight"].data)[:, p])


def test_hot_first_order(extended, tmp_path):
    path, _, freqs, _ = extended
    hot = str(tmp_path / "hot.gguf")
    with pytest.warns(UserWarning):
        perms = eg.make_hot_first(path, hot)
    info = eg.read(hot)
    assert info.neuron_order == "hot-first"
    for il in range(N_LAYER):
        assert np.all(np.diff(info.freqs[il]) <= 0)
        np.testing.assert_array_equal(info.freqs[il], np.sort(freqs[il])[::-1])
        np.testing.assert_array_equal(perms[il], np.argsort(-freqs[il].astype(np.float64), kind="stable"))
    assert rel(logits(hot), logits(path)) < 1e-5


def test_permute_quantized_down_needs_consent(base, tmp_path):
    src = str(tmp_path / "q.gguf")
    r = _core.GGUFReader(base)
    ts = {t.name: t for t in r.tensors}
    q = {f"blk.{il}.ffn_down.weight": eg.encode(eg.to_f32(ts[f"blk.{il}.ffn_down.weight"]),
                                                _core.type_from_name("q8_0"))
         for il in range(N_LAYER)}
    del r, ts
    eg.rewrite(base, src, q)
    perms = [np.arange(N_FF)[::-1].copy()] * N_LAYER
    with pytest.raises(ValueError, match="ffn_down.weight.*re-quantize"):
        eg.permute_neurons(src, str(tmp_path / "o.gguf"), perms)
    eg.permute_neurons(src, str(tmp_path / "o.gguf"), perms, allow_requantize=True)
    # Re-quantized: close to the original function, not exact.
    assert rel(logits(str(tmp_path / "o.gguf")), logits(src)) < 0.05


def test_bad_permutation_rejected(extended, tmp_path):
    with pytest.raises(ValueError, match=r"perms\[1\] is not a permutation"):
        eg.permute_neurons(extended[0], str(tmp_path / "x.gguf"), [np.arange(N_FF), np.zeros(N_FF, int)])
    assert not os.path.exists(tmp_path / "x.gguf")


# ---------------------------------------------------------------- PowerInfer files


@pytest.fixture(scope="module")
def powerinfer_file(base, tmp_path_factory):
    """PowerInfer's layout: ffn_down_t in place of ffn_down, fc1/fc2, powerinfer.sparse_threshold, magic PWRI."""
    path = str(tmp_path_factory.mktemp("pwri") / "model.powerinfer.gguf")
    preds, _ = rand_sparse(2)
    r = _core.GGUFReader(base)
    ts = {t.name: t for t in r.tensors}
    tensors = {}
    for il in range(N_LAYER):
        down = np.asarray(ts[f"blk.{il}.ffn_down.weight"].data)  # [d, n]
        tensors[f"blk.{il}.ffn_down.weight"] = None
        tensors[f"blk.{il}.ffn_down_t.weight"] = np.ascontiguousarray(down.T)
        tensors[f"blk.{il}.fc1.weight"] = preds[il][0]
        tensors[f"blk.{il}.fc2.weight"] = preds[il][1]
    del r, ts
    eg.rewrite(base, path, tensors, {"powerinfer.sparse_threshold": (0.25, _core.GGUF_TYPE_FLOAT32)})
    eg.set_magic(path, b"PWRI")
    return path


def test_powerinfer_model_loads(base, powerinfer_file):
    with open(powerinfer_file, "rb") as f:
        assert f.read(4) == b"PWRI"
    r = _core.GGUFReader(powerinfer_file)
    assert r.is_powerinfer and "blk.0.ffn_down.weight" not in [t.name for t in r.tensors]
    assert not _core.GGUFReader(base).is_powerinfer
    del r
    m = _core.Model(powerinfer_file)
    info = m.sparse_info
    assert info["powerinfer"] and info["has_predictors"] and info["has_down_t"] and info["threshold"] == 0.25
    assert "powerinfer" in m.desc
    m.close()
    # ffn_down rebuilt from ffn_down_t (F32: exactly): same function as the original.
    np.testing.assert_array_equal(logits(powerinfer_file), logits(base))
    info = eg.read(powerinfer_file)
    assert info.powerinfer and info.threshold == 0.25 and len(info.predictors) == N_LAYER


def test_pinfer_threshold_wins_over_powerinfer(powerinfer_file, tmp_path):
    out = str(tmp_path / "both.gguf")
    eg.add_sparse(powerinfer_file, out, threshold=1.5)
    m = _core.Model(out)
    assert m.sparse_info["threshold"] == 1.5 and m.sparse_info["powerinfer"]  # key still there
    m.close()


def test_gpuidx_prefix_becomes_placement(extended, tmp_path):
    path, _, freqs, _ = extended
    gi = str(tmp_path / "m.gpuidx")
    eg.write_gpuidx(gi, [range(10), range(25)], N_FF, vram_capacity=123456)
    with open(gi, "rb") as f:
        assert f.read(4) == b"PWRI"
    g = eg.read_gpuidx(gi)
    assert g.vram_capacity == 123456 and g.gpu_idx[0].sum() == 10 and list(g.gpu_bucket[1]) == list(range(25))
    m = _core.Model(path)
    m.load_gpuidx(gi)
    info = m.sparse_info
    assert info["has_gpuidx"] and info["gpuidx_prefix"] and info["n_placements"] == 3
    p = m.placements[-1]
    assert p["solver"] == "powerinfer-gpuidx" and p["budget_bytes"] == 123456 and list(p["gpu_neurons"]) == [10, 25]
    assert p["objective"] == pytest.approx(float(freqs[0][:10].sum() + freqs[1][:25].sum()), rel=1e-6)
    assert m.placement(123456) == ("exact", [10, 25])
    assert m.gpu_neurons(1) == list(range(25))
    m.load_gpuidx(gi)  # reloading replaces, not duplicates
    assert m.sparse_info["n_placements"] == 3
    m.close()


def test_gpuidx_non_prefix_and_offline_fix(extended, tmp_path):
    """A set that is not a prefix stays a per-layer list (no weights move at load);
    permuting the file with permutation_from_gpu_sets turns it into prefixes."""
    path, _, freqs, _ = extended
    rng = np.random.default_rng(9)
    sets = [np.sort(rng.choice(N_FF, 20, replace=False)), np.sort(rng.choice(N_FF, 33, replace=False))]
    gi = str(tmp_path / "np.gpuidx")
    eg.write_gpuidx(gi, sets, N_FF, vram_capacity=999)
    m = _core.Model(path)
    m.load_gpuidx(gi)
    info = m.sparse_info
    assert info["has_gpuidx"] and not info["gpuidx_prefix"] and info["n_placements"] == 2
    assert m.gpu_neurons(0) == sets[0].tolist() and m.gpu_neurons(1) == sets[1].tolist()
    with pytest.raises(ValueError, match="out of range"):
        m.gpu_neurons(2)
    m.close()

    perms = eg.permutation_from_gpu_sets(sets, N_FF, freqs=freqs)
    out = str(tmp_path / "fixed.gguf")
    with pytest.warns(UserWarning):
        eg.permute_neurons(path, out, perms, neuron_order=None)
    inv = [np.argsort(p) for p in perms]  # old id -> new position
    gi2 = str(tmp_path / "fixed.gpuidx")
    eg.write_gpuidx(gi2, [inv[il][s] for il, s in enumerate(sets)], N_FF, vram_capacity=999)
    m = _core.Model(out)
    m.load_gpuidx(gi2)
    assert m.sparse_info["gpuidx_prefix"] and m.placement(999) == ("exact", [20, 33])
    m.close()
    assert rel(logits(out), logits(path)) < 1e-5


def test_gpuidx_errors(extended, tmp_path):
    path = extended[0]
    m = _core.Model(path)
    short = str(tmp_path / "short.gpuidx")
    eg.write_gpuidx(short, [range(3)], N_FF)  # one layer for a two-layer model
    with pytest.raises(ValueError, match="blk.1.gpu_idx' is missing"):
        m.load_gpuidx(short)
    wrong_n = str(tmp_path / "n.gpuidx")
    eg.write_gpuidx(wrong_n, [range(3), range(3)], N_FF + 1)
    with pytest.raises(ValueError, match="blk.0.gpu_idx' has 97 entries, expected 96"):
        m.load_gpuidx(wrong_n)
    # gpu_bucket disagreeing with gpu_idx
    bad = str(tmp_path / "bad.gpuidx")
    w = _core.GGUFWriter()
    w.add("general.architecture", "generic.gpu_index", _core.GGUF_TYPE_STRING)
    for il in range(N_LAYER):
        g = np.zeros(N_FF, np.int32)
        g[:4] = 1
        w.add_tensor(f"blk.{il}.gpu_idx", g, eg.I32, [N_FF])
        w.add_tensor(f"blk.{il}.gpu_bucket", np.int32([0, 1, 2, 5]), eg.I32, [4])
    w.write(bad)
    with pytest.raises(ValueError, match="blk.0.gpu_bucket' does not list"):
        m.load_gpuidx(bad)
    with pytest.raises(ValueError, match="no .gpuidx"):
        m.gpu_neurons(0)  # failed loads leave nothing behind
    m.close()


# ---------------------------------------------------------------- malformed extended files


def _bad(base, tmp_path, tensors=None, kv=None):
    out = str(tmp_path / "bad.gguf")
    eg.rewrite(base, out, tensors or {}, kv or {})
    return out


def test_wrong_fc2_shape(base, tmp_path):
    preds, _ = rand_sparse(3)
    t = {}
    for il, (a, b) in enumerate(preds):
        t[f"blk.{il}.fc1.weight"] = a
        t[f"blk.{il}.fc2.weight"] = b if il == 0 else b[:, :-1]  # rank 11 vs fc1's 12
    with pytest.raises(ValueError, match=r"'blk\.1\.fc2\.weight' has shape"):
        _core.Model(_bad(base, tmp_path, t))


def test_fc1_without_fc2(base, tmp_path):
    preds, _ = rand_sparse(3)
    t = {f"blk.{il}.fc1.weight": a for il, (a, b) in enumerate(preds)}
    with pytest.raises(ValueError, match=r"'blk\.0\.fc2\.weight' is missing"):
        _core.Model(_bad(base, tmp_path, t))


def test_predictor_in_some_layers_only(base, tmp_path):
    preds, _ = rand_sparse(3)
    t = {"blk.0.fc1.weight": preds[0][0], "blk.0.fc2.weight": preds[0][1]}
    with pytest.raises(ValueError, match=r"'blk\.1\.fc1\.weight' is missing \(other layers have it\)"):
        _core.Model(_bad(base, tmp_path, t))


def test_freq_length_mismatch(base, tmp_path):
    t = {"blk.0.ffn_freq": np.ones(N_FF, np.float32), "blk.1.ffn_freq": np.ones(N_FF - 1, np.float32)}
    with pytest.raises(ValueError, match=r"'blk\.1\.ffn_freq' has shape"):
        _core.Model(_bad(base, tmp_path, t))
    t = {f"blk.{il}.ffn_freq": np.ones(N_FF, np.float16) for il in range(N_LAYER)}
    with pytest.raises(ValueError, match=r"'blk\.0\.ffn_freq' has type f16, expected f32"):
        _core.Model(_bad(base, tmp_path, t))


def test_down_t_wrong_shape(base, tmp_path):
    t = {f"blk.{il}.ffn_down_t.weight": np.zeros((N_EMBD, N_FF), np.float32) for il in range(N_LAYER)}
    with pytest.raises(ValueError, match=r"'blk\.0\.ffn_down_t\.weight' has shape"):
        _core.Model(_bad(base, tmp_path, t))


def test_placement_length_mismatch(base, tmp_path):
    A = (_core.GGUF_TYPE_ARRAY, _core.GGUF_TYPE_INT32)
    kv = {"pinfer.placement.count": (1, _core.GGUF_TYPE_UINT32),
          "pinfer.placement.0.budget_bytes": (100, _core.GGUF_TYPE_UINT64),
          "pinfer.placement.0.solver": ("x", _core.GGUF_TYPE_STRING),
          "pinfer.placement.0.objective": (1.0, _core.GGUF_TYPE_FLOAT64),
          "pinfer.placement.0.gpu_neurons": (np.int32([1, 2, 3]), A)}
    with pytest.raises(ValueError, match=r"'pinfer\.placement\.0\.gpu_neurons' has 3 entries, expected 2"):
        _core.Model(_bad(base, tmp_path, kv=kv))
    kv["pinfer.placement.0.gpu_neurons"] = (np.int32([1, N_FF + 1]), A)
    with pytest.raises(ValueError, match=r"'pinfer\.placement\.0\.gpu_neurons' has 97 for layer 1"):
        _core.Model(_bad(base, tmp_path, kv=kv))
    kv["pinfer.placement.count"] = (2, _core.GGUF_TYPE_UINT32)
    kv["pinfer.placement.0.gpu_neurons"] = (np.int32([1, 2]), A)
    with pytest.raises(ValueError, match=r"'pinfer\.placement\.1\.budget_bytes' is missing"):
        _core.Model(_bad(base, tmp_path, kv=kv))


def test_bad_sparse_keys(base, tmp_path):
    with pytest.raises(ValueError, match=r"'pinfer\.neuron_order' is 'cold-first'"):
        _core.Model(_bad(base, tmp_path, kv={"pinfer.neuron_order": ("cold-first", _core.GGUF_TYPE_STRING)}))
    kv = {"pinfer.sparse.act_thresholds": (np.float32([1, 2, 3]), (_core.GGUF_TYPE_ARRAY, _core.GGUF_TYPE_FLOAT32))}
    with pytest.raises(ValueError, match=r"'pinfer\.sparse\.act_thresholds' has 3 entries, expected 2"):
        _core.Model(_bad(base, tmp_path, kv=kv))


def test_python_writer_validates(base, tmp_path):
    out = str(tmp_path / "x.gguf")
    preds, _ = rand_sparse(4)
    with pytest.raises(ValueError, match=r"blk\.0\.fc2\.weight"):
        eg.add_sparse(base, out, predictors={0: (preds[0][0], preds[0][1][:, :-1])})
    with pytest.raises(ValueError, match="gpu_neurons: 1 entries, expected 2"):
        eg.add_sparse(base, out, placements=[{"budget_bytes": 1, "gpu_neurons": [1]}])
    with pytest.raises(ValueError, match="freqs: 3 entries"):
        eg.add_sparse(base, out, freqs=[np.ones(N_FF)] * 3)
    assert not os.path.exists(out)


def test_replacing_placements_drops_stale_entries(extended, tmp_path):
    out = str(tmp_path / "p.gguf")
    eg.add_sparse(extended[0], out, placements=[eg.Placement(77, "solo", 0.0, [1, 2])])
    keys = _core.GGUFReader(out).keys
    assert not any(k.startswith("pinfer.placement.1.") for k in keys)
    assert eg.read(out).placements == [eg.Placement(77, "solo", 0.0, [1, 2])]
