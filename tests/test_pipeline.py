"""pinfer profile and pinfer train-predictors on tiny random Hugging Face llamas.

References: the activation counts are checked against the model's own modules
run directly (hidden states from output_hidden_states, then each layer's
attention and norms called by hand, the gate projection in numpy float64), not
through profile's hooks; predictors are re-evaluated in numpy from the GGUF."""
import json
import os

import numpy as np
import pytest
import torch  # noqa: E402  (the offline tools need torch: test extra)
from transformers import AutoTokenizer  # noqa: E402

import tinymodel
from conftest import PRIDE_OPENING
from pinfer import _core, cli, extgguf, predictors, profile  # noqa: E402

torch.set_num_threads(1)  # tiny matrices: threads only add contention on a shared CI machine
N_TOKENS, CTX = 1600, 100
TEXT = PRIDE_OPENING * 6
BORDER = 1e-5  # |gate| below this may round either way between float32 and float64


def make_model(d, act, seed=1):
    return tinymodel.make_sparse_hf_llama(d, act=act, seed=seed, shift=0.6)


def reference(model, d):
    """Per layer: FFN input x [T, d] and gate pre-activation g [T, n] (float64) over the
    sequences profile sees (consecutive CTX-token chunks; this tokenizer adds no BOS)."""
    tok = AutoTokenizer.from_pretrained(d)
    ids = tok(TEXT, add_special_tokens=False)["input_ids"][:N_TOKENS]
    assert len(ids) == N_TOKENS
    L = len(model.model.layers)
    xs, gs = [[] for _ in range(L)], [[] for _ in range(L)]
    with torch.no_grad():
        for s in range(0, N_TOKENS, CTX):
            seq = torch.tensor([ids[s:s + CTX]])
            T = seq.shape[1]
            hs = model(seq, output_hidden_states=True).hidden_states
            pos = torch.arange(T)[None]
            cos_sin = model.model.rotary_emb(hs[0], pos)
            mask = torch.triu(torch.full((T, T), float("-inf")), 1)[None, None]
            for il, layer in enumerate(model.model.layers):
                h = hs[il]
                a = layer.self_attn(layer.input_layernorm(h), position_embeddings=cos_sin, attention_mask=mask)[0]
                x = layer.post_attention_layernorm(h + a)
                # the reconstruction is right: it gives the next layer's input
                nxt = h + a + layer.mlp(x)
                if il == L - 1:  # HF's last hidden state is after the final norm
                    nxt = model.model.norm(nxt)
                np.testing.assert_allclose(nxt.numpy(), hs[il + 1].numpy(), atol=2e-5, rtol=1e-5)
                xs[il].append(x[0].double().numpy())
                gs[il].append(x[0].double().numpy() @ layer.mlp.gate_proj.weight.double().numpy().T)
    return [np.concatenate(v) for v in xs], [np.concatenate(v) for v in gs]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    root = tmp_path_factory.mktemp("pipeline")
    corpus = root / "corpus.txt"
    corpus.write_text(TEXT)
    relu_dir, silu_dir = str(root / "relu"), str(root / "silu")
    relu, silu = make_model(relu_dir, "relu"), make_model(silu_dir, "silu", seed=2)
    return {"root": root, "corpus": str(corpus), "relu_dir": relu_dir, "silu_dir": silu_dir,
            "relu": relu, "silu": silu, "ref_relu": reference(relu, relu_dir), "ref_silu": reference(silu, silu_dir)}


@pytest.fixture(scope="module")
def relu_profile(work):
    root = work["root"]
    out, plots, dump = str(root / "relu.npz"), str(root / "plots"), str(root / "dump")
    rc = cli.main(["profile", work["relu_dir"], "--corpus", work["corpus"], "--tokens", str(N_TOKENS),
                   "--ctx", str(CTX), "-o", out, "--plots", plots, "--dump", dump, "--dump-per-seq", str(CTX),
                   "--no-progress", "--device", "cpu"])
    assert rc == 0
    return {"npz": out, "plots": plots, "dump": dump}


def test_relu_counts_match_reference(work, relu_profile):
    _, gs = work["ref_relu"]
    z = np.load(relu_profile["npz"], allow_pickle=False)
    assert int(z["n_tokens"]) == N_TOKENS
    assert str(z["act"]) == "relu"
    np.testing.assert_array_equal(z["thresholds"], np.zeros(2, np.float32))
    for il, g in enumerate(gs):
        lo, hi = (g > BORDER).sum(0), (g > -BORDER).sum(0)
        c = z[f"count_{il}"]
        assert np.all(lo <= c) and np.all(c <= hi), f"layer {il}"
        assert (hi - lo).sum() <= 1e-4 * g.size  # essentially exact: few signs are that close to 0
        np.testing.assert_array_equal(z[f"freq_{il}"], c / N_TOKENS)
        sp = 1 - z[f"freq_{il}"].mean()
        assert 0.4 < sp < 0.97  # the sparsity is real, and not total
        assert z[f"freq_{il}"].std() > 0.05  # skewed: neurons differ


def test_dump_matches_reference(work, relu_profile):
    xs, gs = work["ref_relu"]
    meta = predictors.load_dump(relu_profile["dump"])
    assert meta["rows"] == N_TOKENS and (meta["n_embd"], meta["n_ff"]) == (64, 128)
    for il in range(2):
        x, m = predictors.layer_data(meta, il)
        np.testing.assert_allclose(x, xs[il], atol=1e-5, rtol=1e-5)  # the post-ffn_norm state
        mask = np.unpackbits(m, axis=1, count=128).astype(bool)
        diff = mask != (gs[il] > 0)
        assert np.all(np.abs(gs[il][diff]) < BORDER)


def test_outputs_and_plots(work, relu_profile):
    from pinfer import solve

    plots = relu_profile["plots"]
    for f in ("freq_loglog.png", "coverage80.png"):
        with open(os.path.join(plots, f), "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    s = json.load(open(os.path.join(plots, "summary.json")))
    z = np.load(relu_profile["npz"], allow_pickle=False)
    assert s["n_tokens"] == N_TOKENS and len(s["layers"]) == 2
    for l in s["layers"]:
        f = np.sort(z[f"freq_{l['layer']}"])[::-1]
        k = int(round(l["coverage80"] * f.size))
        assert f[:k].sum() >= 0.8 * f.sum() > f[:k - 1].sum()  # the smallest such prefix
    freqs = solve.load_freqs(relu_profile["npz"])  # the solver reads the npz as it is
    np.testing.assert_array_equal(freqs[1], z["freq_1"])


def test_swiglu_thresholds_reach_target(work):
    root = work["root"]
    _, gs = work["ref_silu"]
    for target, calib in ((0.7, N_TOKENS), (0.5, 800)):
        out = str(root / f"silu_{target}.npz")
        res = profile.profile(work["silu_dir"], work["corpus"], N_TOKENS, out, target_sparsity=target,
                              calib_tokens=calib, ctx=CTX, device="cpu", progress=False)
        z = np.load(out, allow_pickle=False)
        assert str(z["act"]) == "silu" and float(z["target_sparsity"]) == target
        for il, g in enumerate(gs):
            a = np.abs(g / (1 + np.exp(-g)))  # |silu(gate)|, float64
            t = float(z["thresholds"][il])
            assert t > 0
            # on the calibration tokens (the first `calib`), the threshold gives the target
            assert abs(np.mean(a[:calib] <= t) - target) < 0.01
            assert abs(res.calib_sparsity[il] - target) < 0.01
            if calib == N_TOKENS:
                assert abs((1 - z[f"freq_{il}"].mean()) - target) < 0.01
            lo, hi = (a > t * (1 + 1e-5)).sum(0), (a > t * (1 - 1e-5)).sum(0)
            assert np.all(lo <= z[f"count_{il}"]) and np.all(z[f"count_{il}"] <= hi)


@pytest.fixture(scope="module")
def trained(work, relu_profile):
    root = work["root"]
    base = str(root / "relu.gguf")
    assert cli.main(["convert", work["relu_dir"], "-o", base, "--type", "f32", "--no-progress"]) == 0
    out = str(root / "relu_pred.gguf")
    rep = predictors.train_predictors(work["relu_dir"], relu_profile["dump"], out, base, recall=0.95,
                                      max_rank=128, epochs=8, device="cpu", verbose=False)
    return {"base": base, "out": out, "rep": rep}


def _numpy_active(A, B, x, thr):
    p = np.maximum(x.astype(np.float32) @ A.T, 0) @ B.T
    return p > np.float32(thr), p


def test_predictors_reach_recall_and_load(trained):
    rep, out = trained["rep"], trained["out"]
    info = extgguf.read(out)
    assert info.threshold == pytest.approx(rep["threshold"], rel=1e-6)
    assert sorted(info.predictors) == [0, 1]
    ranks = []
    for il, lr in enumerate(rep["layers"]):
        A, B = info.predictors[il]
        r = lr["rank"]
        ranks.append(r)
        assert A.shape == (r, 64) and B.shape == (128, r)  # GGUF ne: fc1 [d, r], fc2 [r, n]
        assert lr["params"] == r * (64 + 128)
        assert [t[0] for t in lr["tried"]][-1] == r
        # the held-out recall, recomputed in numpy from the file
        x, ym = rep["_heldout"][il]
        y = np.unpackbits(ym, axis=1, count=128).astype(bool)
        act, p = _numpy_active(A, B, x, info.threshold)
        recall = (act & y).sum() / y.sum()
        assert recall >= 0.95
        assert recall == pytest.approx(lr["recall"], abs=2e-3)
        assert 1 - act.mean() == pytest.approx(lr["predicted_sparsity"], abs=2e-3)
        assert 1 - act.mean() > 0.3  # it predicts real sparsity
        # torch (the trained weights) and numpy (the GGUF) give the same active set
        At, Bt = rep["_weights"][il]
        tact = predictors.predict(At, Bt, torch.from_numpy(x), rep["threshold"]).numpy()
        diff = tact != act
        assert np.all(np.abs(p[diff] - info.threshold) < 1e-4)
    rp = json.load(open(rep["report"]))
    assert [l["rank"] for l in rp["layers"]] == ranks
    m = _core.Model(out)
    si = m.sparse_info
    assert si["has_predictors"] and si["max_rank"] == max(ranks)
    assert si["threshold"] == pytest.approx(rep["threshold"], rel=1e-6)


def test_rank_grows_until_recall(work, relu_profile):
    meta = predictors.load_dump(relu_profile["dump"])
    x, ym = predictors.layer_data(meta, 0)
    _, _, inf = predictors.train_layer(x, ym, 128, 0.999, min_rank=4, max_rank=32, epochs=2)
    tried = [r for r, _ in inf["tried"]]
    assert tried[-1] == 32 and all(b == 2 * a for a, b in zip(tried, tried[1:]))  # x2 up to the cap
    assert not inf["met_at_0"]
    _, _, inf = predictors.train_layer(x, ym, 128, 0.05, min_rank=4, max_rank=32, epochs=2)
    assert len(inf["tried"]) == 1 and inf["met_at_0"]  # an easy target stops at the first rank


def test_fold_thresholds():
    tau, c, ex = predictors.fold_thresholds([-0.5, -0.25, 0.3])
    assert tau == -0.5 and c[:2] == [1.0, 2.0] and ex == [True, True, False]
    assert c[2] == predictors.C_MAX and tau / c[2] < 0.3  # a lower effective threshold: more recall
    tau, c, ex = predictors.fold_thresholds([0.2, 0.8])
    assert tau == 0.2 and c == [1.0, 0.25] and all(ex)


def test_f16_predictors(work, relu_profile, trained, tmp_path):
    out = str(tmp_path / "f16.gguf")
    rep = predictors.train_predictors(work["relu_dir"], relu_profile["dump"], out, trained["base"], recall=0.9,
                                      type_name="f16", max_rank=16, epochs=2, device="cpu", verbose=False)
    r = _core.GGUFReader(out)
    types = {t.name: t.type for t in r.tensors}
    assert types["blk.0.fc1.weight"] == extgguf.F16 and types["blk.1.fc2.weight"] == extgguf.F16
    info = extgguf.read(out)
    for il in range(2):
        A, B = info.predictors[il]
        x, ym = rep["_heldout"][il]
        y = np.unpackbits(ym, axis=1, count=128).astype(bool)
        act, p = _numpy_active(A, B, x, info.threshold)
        assert (act & y).sum() / y.sum() >= 0.9
        tact = predictors.predict(*rep["_weights"][il], torch.from_numpy(x), rep["threshold"]).numpy()
        assert np.all(np.abs(p[tact != act] - info.threshold) < 1e-4)


def test_errors(work, relu_profile, trained, tmp_path, capsys):
    corpus = work["corpus"]
    out = str(tmp_path / "x.npz")
    # not a model directory
    assert cli.main(["profile", str(tmp_path / "nope"), "--corpus", corpus, "-o", out]) == 1
    assert "no such model directory" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["profile", str(empty), "--corpus", corpus, "-o", out]) == 1
    assert "no config.json" in capsys.readouterr().err
    # unknown architecture
    gpt = tmp_path / "gpt"
    gpt.mkdir()
    (gpt / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}))
    assert cli.main(["profile", str(gpt), "--corpus", corpus, "-o", out]) == 1
    assert "unsupported architecture" in capsys.readouterr().err
    # a GGUF profiles through the engine, but cannot dump predictor data
    assert cli.main(["profile", trained["base"], "--corpus", corpus, "-o", out, "--dump", str(tmp_path / "d")]) == 1
    assert "--dump needs the Hugging Face model" in capsys.readouterr().err and not os.path.exists(out)
    # missing corpus
    assert cli.main(["profile", work["relu_dir"], "--corpus", str(tmp_path / "none.txt"), "-o", out]) == 1
    assert "corpus" in capsys.readouterr().err and not os.path.exists(out)
    # bad values
    assert cli.main(["profile", work["relu_dir"], "--corpus", corpus, "-o", out, "--target-sparsity", "1.5"]) == 1
    assert "target-sparsity" in capsys.readouterr().err
    # train-predictors: no dump, a base GGUF of another shape
    g = str(tmp_path / "p.gguf")
    assert cli.main(["train-predictors", work["relu_dir"], "--data", str(tmp_path), "--gguf", trained["base"],
                     "-o", g]) == 1
    assert "meta.json" in capsys.readouterr().err
    other = str(tmp_path / "other.gguf")
    tinymodel.tiny_model(other, n_ff=96)
    assert cli.main(["train-predictors", work["relu_dir"], "--data", relu_profile["dump"], "--gguf", other,
                     "-o", g]) == 1
    assert "n_ff" in capsys.readouterr().err and not os.path.exists(g)
    assert cli.main(["train-predictors", work["relu_dir"], "--data", relu_profile["dump"], "--gguf",
                     trained["base"], "-o", g, "--recall", "1.5"]) == 1
    assert "--recall" in capsys.readouterr().err
