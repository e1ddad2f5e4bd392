"""The offline pipeline end to end on a tiny ReGLU llama:
HF -> convert -> profile -> train-predictors -> place -> pinfer runs it.

References: the permuted tensors are checked against the un-permuted file read by
the gguf package and permuted in numpy; the logits of the placed model against
the un-permuted model's (the FFN is a sum over neurons: same function); the
engine's GGUF profile against the torch profile of the HF model."""
import os
import re
import subprocess

import gguf  # noqa: E402
import numpy as np
import pytest
import torch  # noqa: E402  (the offline tools need torch: test extra)

import tinymodel
from conftest import PRIDE_OPENING
from pinfer import _core, cli, extgguf, solve  # noqa: E402

torch.set_num_threads(1)
N_TOKENS, CTX = 1600, 100
TEXT = PRIDE_OPENING * 6
GIB = float(1 << 30)


def make_model(d, seed=3):
    """A tiny ReGLU llama whose neurons fire with skewed frequencies."""
    return tinymodel.make_sparse_hf_llama(d, act="relu", seed=seed, shift=0.8)


def run_cli(*args):
    r = subprocess.run([cli.find_tool("pinfer-cli"), *map(str, args)], capture_output=True, timeout=60)
    r.stdout, r.stderr = r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")
    return r


@pytest.fixture(scope="module")
def pipe(tmp_path_factory):
    d = tmp_path_factory.mktemp("place")
    hf = str(d / "hf")
    make_model(hf)
    corpus = str(d / "corpus.txt")
    with open(corpus, "w") as f:
        f.write(TEXT)
    base = str(d / "base.gguf")
    assert cli.main(["convert", hf, "-o", base, "--type", "f32", "--no-progress"]) == 0
    stats, dump = str(d / "stats.npz"), str(d / "dump")
    assert cli.main(["profile", hf, "--corpus", corpus, "--tokens", str(N_TOKENS), "--ctx", str(CTX),
                     "-o", stats, "--dump", dump, "--dump-per-seq", "100", "--no-progress"]) == 0
    pred = str(d / "pred.gguf")
    assert cli.main(["train-predictors", hf, "--data", dump, "--gguf", base, "-o", pred, "--recall", "0.95",
                     "--epochs", "4", "--device", "cpu"]) == 0
    # budgets: the dense parts (ctx 64, no reserve) plus 30% / 70% of the FFN bytes
    desc = solve.load_model(pred)
    inst = solve.build_instance(solve.load_freqs(stats), desc, solve.hardware("rtx4090"), ctx=64, reserve_gib=0)
    ffn = sum(n * b for n, b in zip(desc.n_ff, desc.neuron_bytes))
    budgets = [(inst.resident_bytes + s * ffn) / GIB for s in (0.3, 0.7)]
    placed, png = str(d / "placed.gguf"), str(d / "placement.png")
    return dict(dir=d, hf=hf, corpus=corpus, base=base, stats=stats, dump=dump, pred=pred, placed=placed,
                png=png, budgets=budgets, resident=inst.resident_bytes)


@pytest.fixture(scope="module")
def placed(pipe):
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = cli.main(["place", pipe["pred"], "--freq", pipe["stats"], "-o", pipe["placed"], "--budget",
                       *map(repr, pipe["budgets"]), "--hw", "rtx4090", "--plot", pipe["png"], "--ctx", "64",
                       "--reserve-gib", "0", "--group", "16", "--min-neurons", "16"])
    assert rc == 0
    return buf.getvalue()


def gguf_arrays(path):
    r = gguf.GGUFReader(path)
    return {t.name: np.array(t.data) for t in r.tensors}


def test_permuted_tensors_match_numpy(pipe, placed):
    a, b = gguf_arrays(pipe["pred"]), gguf_arrays(pipe["placed"])
    with np.load(pipe["stats"]) as z:
        freqs = [z[f"freq_{i}"] for i in range(2)]
    for il in range(2):
        perm = np.argsort(-freqs[il], kind="stable")
        assert not np.array_equal(perm, np.arange(perm.size))  # the test permutes something
        p = f"blk.{il}."
        for nm in ("ffn_gate.weight", "ffn_up.weight", "fc2.weight"):
            np.testing.assert_array_equal(b[p + nm], a[p + nm][perm])
        np.testing.assert_array_equal(b[p + "ffn_down.weight"], a[p + "ffn_down.weight"][:, perm])
        np.testing.assert_array_equal(b[p + "fc1.weight"], a[p + "fc1.weight"])
        np.testing.assert_allclose(b[p + "ffn_freq"], freqs[il][perm].astype(np.float32), rtol=0, atol=0)
        assert np.all(np.diff(b[p + "ffn_freq"]) <= 0)  # hot-first
    info = extgguf.read(pipe["placed"])
    assert info.neuron_order == "hot-first" and len(info.placements) == 2


def _logits(path, mode, toks):
    c = _core.Context(_core.Model(path), 128, 64, 2, "f32", mode, False, False, False)
    c.decode(toks, all_logits=True)
    out = c.logits_all().copy()
    c.close()
    return out


@pytest.mark.parametrize("mode", ["off", "predictor"])
def test_permutation_keeps_the_function(pipe, placed, mode):
    toks = np.random.default_rng(0).integers(0, tinymodel.vocab_size(), size=40).tolist()
    before, after = _logits(pipe["pred"], mode, toks), _logits(pipe["placed"], mode, toks)
    rel = np.max(np.abs(after - before)) / np.max(np.abs(before))
    assert rel < 1e-5, rel
    if mode == "predictor":  # the predictor really skips neurons: differs from dense
        assert np.max(np.abs(before - _logits(pipe["pred"], "off", toks))) > 0


def test_placements_and_selection(pipe, placed):
    m = _core.Model(pipe["placed"])
    pls = m.placements
    bb = [int(round(g * GIB)) for g in pipe["budgets"]]
    assert [p["budget_bytes"] for p in pls] == bb
    desc = solve.load_model(pipe["placed"])
    ks = []
    for p in pls:
        k = np.asarray(p["gpu_neurons"])
        assert k.shape == (2,) and np.all((0 <= k) & (k <= 128))
        # the FFN share fits next to the dense parts
        assert sum(int(kl) * nb for kl, nb in zip(k, desc.neuron_bytes)) <= p["budget_bytes"] - pipe["resident"]
        ks.append(k)
    assert np.all(ks[1] >= ks[0]) and ks[1].sum() > ks[0].sum() > 0
    assert m.placement(bb[0]) == ("exact", list(ks[0]))
    assert m.placement(bb[1]) == ("exact", list(ks[1]))
    assert m.placement((bb[0] + bb[1]) // 2) == ("below", list(ks[0]))
    kind, _ = m.placement(bb[0] - 1)
    assert kind == "greedy"
    # the summary: one row per layer with the share per budget
    assert "GPU share per layer" in placed
    for il in range(2):
        row = re.search(rf"^\s+{il}\s+128\s+([\d.]+)%\s+([\d.]+)%", placed, re.M)
        assert row and [float(x) for x in row.groups()] == pytest.approx([100 * k[il] / 128 for k in ks], abs=0.06)
    with open(pipe["png"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_cli_vram_budget(pipe, placed):
    m = _core.Model(pipe["placed"])
    ks = [p["gpu_neurons"] for p in m.placements]
    base = ["-m", pipe["placed"], "-p", "the cat", "-n", "4", "--temp", "0", "-c", "64", "-t", "2",
            "--sparse", "predictor"]
    r = run_cli(*base, "--vram-budget", repr(pipe["budgets"][1]), "--verbose")
    assert r.returncode == 0, r.stderr
    assert re.search(r"placement for [\d.]+ GiB: entry 1 \(exact", r.stderr)
    assert [int(x) for x in re.findall(r"placement layer +\d+: (\d+) GPU neurons", r.stderr)] == ks[1]
    assert "without a device every layer runs on the CPU" in r.stderr
    assert "sparse FFN mode predictor" in r.stderr
    mid = (pipe["budgets"][0] + pipe["budgets"][1]) / 2
    r = run_cli(*base, "--vram-budget", repr(mid))
    assert r.returncode == 0 and "entry 0 (largest below the budget" in r.stderr
    assert "placement layer" not in r.stderr  # per-layer counts only with --verbose
    r = run_cli(*base, "--vram-budget", "0")
    assert r.returncode == 0 and "notice: no placement entry" in r.stderr
    r = run_cli(*base, "--vram-budget", "-1")
    assert r.returncode != 0 and "invalid VRAM budget" in r.stderr


def test_profile_gguf_matches_torch(pipe, tmp_path):
    out = str(tmp_path / "engine.npz")
    assert cli.main(["profile", pipe["base"], "--corpus", pipe["corpus"], "--tokens", str(N_TOKENS),
                     "--ctx", str(CTX), "-o", out, "--no-progress"]) == 0
    with np.load(pipe["stats"]) as a, np.load(out) as b:
        assert int(b["n_tokens"]) == int(a["n_tokens"]) == N_TOKENS
        for il in range(2):
            ca, cb = a[f"count_{il}"], b[f"count_{il}"]
            assert 0 < ca.sum() < N_TOKENS * 128
            # the same windows of the same tokens: only gates within rounding of 0 may flip
            assert np.abs(ca - cb).max() <= 2 and np.abs(ca - cb).sum() <= 0.001 * ca.sum() + 2
    assert cli.main(["profile", pipe["base"], "--corpus", pipe["corpus"], "-o", out, "--dump",
                     str(tmp_path / "d")]) == 1


def test_block_quantized_down(pipe, placed, tmp_path, capsys):  # placed: the reference file below
    q8 = str(tmp_path / "q8.gguf")
    assert cli.main(["quantize", pipe["pred"], q8, "q8_0", "--pure", "--threads", "2"]) == 0
    out = str(tmp_path / "out.gguf")
    args = ["--freq", pipe["stats"], "-o", out, "--budget", repr(pipe["budgets"][1]), "--ctx", "64",
            "--reserve-gib", "0", "--solver", "greedy"]
    capsys.readouterr()
    assert cli.main(["place", q8, *args]) == 1
    assert "--type q8_0" in capsys.readouterr().err
    assert cli.main(["place", q8, *args, "--allow-requantize"]) == 0
    assert "lossy" in capsys.readouterr().out
    # the exact way: permute the f32 file, then quantize once
    assert cli.main(["place", pipe["pred"], *args, "--type", "q8_0"]) == 0
    r = _core.GGUFReader(out)
    types = {t.name: _core.type_info(t.type)["name"] for t in r.tensors}
    assert types["blk.0.ffn_down.weight"].lower() == "q8_0" and types["blk.0.fc2.weight"].lower() == "f32"
    assert len(extgguf.read(out).placements) == 1
    toks = np.random.default_rng(1).integers(0, tinymodel.vocab_size(), size=24).tolist()
    dense = _logits(out, "off", toks)
    ref = _logits(pipe["placed"], "off", toks)
    assert np.max(np.abs(dense - ref)) / np.max(np.abs(ref)) < 0.05  # Q8_0 rounding only


def test_errors(pipe, tmp_path, capsys):
    out = str(tmp_path / "o.gguf")
    assert cli.main(["place", pipe["pred"], "--freq", pipe["stats"], "-o", pipe["pred"], "--budget", "1"]) == 1
    assert cli.main(["place", pipe["placed"], "--freq", pipe["stats"], "-o", out, "--budget", "1"]) == 1
    assert "already permuted" in capsys.readouterr().err
    bad = str(tmp_path / "bad.npz")
    np.savez(bad, freq_0=np.zeros(128), freq_1=np.zeros(64))
    assert cli.main(["place", pipe["pred"], "--freq", bad, "-o", out, "--budget", "1"]) == 1
    assert "layer 1 has 64 neurons" in capsys.readouterr().err
    assert cli.main(["place", pipe["pred"], "--freq", pipe["stats"], "-o", out, "--budget", "1e-9"]) == 1
    assert not os.path.exists(out)
