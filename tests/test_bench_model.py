"""scripts/make_bench_model.py: the constructed FFN sparsity is what the runtime sees.

A small file of the same construction (d = 256, n_ff = 1024, 2 layers) is
generated; pinfer's engine (independent of the script's numpy forward) then
decodes random tokens in exact mode with sparse statistics, and its per-layer
active fraction must match the target and the script's own held-out
measurement; the predictor's recall (engine, against the dense activation) must
match the script's. The plain file must be free of pinfer extras (llama.cpp
rejects unknown tensors) and the extended one must carry them. Both
constructions: llama (ReGLU) and opt (LayerNorm, learned positions, ungated
ReLU FFN with biases).
"""
import importlib.util
import json
import os

import numpy as np
import pytest

from pinfer import _core, extgguf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load_script():
    spec = importlib.util.spec_from_file_location("make_bench_model",
                                                  os.path.join(ROOT, "scripts", "make_bench_model.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module", params=["llama", "opt"])
def bench_model(tmp_path_factory, request):
    stem = str(tmp_path_factory.mktemp("bench") / "m")
    rc = _load_script().main(["--arch", request.param, "--dim", "256", "--ff", "1024", "--heads", "4", "--layers", "2",
                              "--vocab", "1024", "--rank", "8", "--sparsity", "0.8", "--type", "q8_0",
                              "--cal", "8", "32", "--heldout", "8", "32", "--out", stem])
    assert rc == 0
    with open(stem + ".json") as fh:
        return stem, json.load(fh)


def _run(path, mode, verify=False, n_seq=4, n_tok=24, seed=1):
    model = _core.Model(path)
    rng = np.random.default_rng(seed)
    ctx = _core.Context(model, 128, 64, 1, "f16", mode, True, verify)
    for _ in range(n_seq):
        ctx.kv_truncate(0)
        for t in rng.integers(0, 1000, n_tok):  # token by token: per-token active sets
            ctx.decode([int(t)])
    st = ctx.sparse_stats()
    ctx.close()
    model.close()
    return st


def test_files_and_metadata(bench_model):
    stem, rep = bench_model
    plain = {t.name for t in _core.GGUFReader(stem + ".gguf").tensors}
    assert not any(n.endswith(("fc1.weight", "fc2.weight", "ffn_down_t.weight", "ffn_freq")) for n in plain)
    info = extgguf.read(stem + ".ext.gguf")
    assert _core.Model(stem + ".gguf").arch == rep["args"]["arch"]
    assert ("blk.0.ffn_gate.weight" in plain) == (rep["args"]["arch"] == "llama")
    assert info.n_layer == 2 and info.n_embd == 256 and info.n_ff == 1024
    assert sorted(info.predictors) == [0, 1] and sorted(info.down_t) == [0, 1]
    assert info.neuron_order == extgguf.HOT_FIRST
    for f in info.freqs.values():  # design frequencies: descending power law with the target mean
        assert np.all(np.diff(f) <= 0)
        assert abs(float(f.mean()) - 0.2) < 1e-3
    assert abs(rep["measured"]["sparsity_mean"] - 0.8) < 0.03


def test_runtime_sparsity_matches_construction(bench_model):
    stem, rep = bench_model
    st = _run(stem + ".ext.gguf", "exact")
    for il, layer in enumerate(st["layers"]):
        active = float(layer["active_frac"])
        assert abs(active - 0.2) < 0.05, (il, active)
        assert abs(active - (1 - rep["measured"]["layers"][il]["sparsity"])) < 0.05, (il, active)


def test_predictor_recall_matches_construction(bench_model):
    stem, rep = bench_model
    st = _run(stem + ".ext.gguf", "predictor", verify=True)
    for il, layer in enumerate(st["layers"]):
        want = rep["measured"]["layers"][il]["predictor_recall"]
        assert abs(float(layer["recall"]) - want) < 0.05, (il, layer["recall"], want)
        assert float(layer["recall"]) > 0.85
