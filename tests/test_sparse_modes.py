"""Sparse FFN modes of the runtime (src/llama-sparse-ffn.*): off / exact /
predictor / threshold / auto, their statistics, pinfer calibrate, and the
pinfer-cli flags.

References: pinfer's own dense mode (exact mode is the same function, so its
logits must match to summation order), and numpy float64 computations from
Hugging Face's hidden states (predictor recall, calibrated thresholds).
"""
import copy
import os
import re
import subprocess

import numpy as np
import pytest
import torch
import transformers  # noqa: F401,E402

import tinymodel
from conftest import PRIDE_OPENING, random_prompt, rel_err
from pinfer import _core, calibrate, extgguf  # noqa: E402
from pinfer import convert as cv  # noqa: E402

RTOL = 1e-5
TEXT = PRIDE_OPENING * 4


def ctx(path_or_model, mode="off", stats=False, verify=False, observe=False, n_ctx=128, precision="high"):
    m = path_or_model if isinstance(path_or_model, _core.Model) else _core.Model(path_or_model)
    return _core.Context(m, n_ctx, 64, 2, "f32", mode, stats, verify, observe, precision)


def run_prompt(path, mode, toks, **kw):
    c = ctx(path, mode, **kw)
    c.decode(toks, all_logits=True)
    return c.logits_all().copy(), c


def run_steps(path, mode, toks, n_gen, precision="high"):
    """Prompt, then greedy decoding one token at a time: (logits of every step, tokens)."""
    c = ctx(path, mode, precision=precision)
    c.decode(toks, all_logits=False)
    out, gen = [c.logits().copy()], []
    for _ in range(n_gen):
        t = int(np.argmax(out[-1]))
        gen.append(t)
        c.decode([t], all_logits=False)
        out.append(c.logits().copy())
    return np.stack(out), gen


# ---------------------------------------------------------------- models

@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("sparse_modes")
    out = {}
    # ReGLU llama: relu(gate) * up
    p, hf = tinymodel.tiny_model(str(d / "relu.gguf"), ffn_act="relu", n_ff=128, seed=1)
    out["relu"] = (p, hf)
    out["relu_down_t"] = (extgguf.add_down_t(p, str(d / "relu_dt.gguf")), hf)
    # relu-both (Bamboo): relu(gate) * relu(up)
    hf2 = tinymodel.make_hf_model(act="relu", n_ff=96, seed=2)
    out["relu_both"] = (extgguf.add_down_t(tinymodel.write_gguf(hf2, str(d / "rb0.gguf"), ffn_act="relu-both"),
                                           str(d / "rb.gguf")), None)
    # ReluFalcon: down(relu(up x)), converted from a Hugging Face directory
    fd = str(d / "falcon_hf")
    os.makedirs(fd)
    tinymodel.write_bpe_tokenizer(fd, "gpt2")
    fhf = tinymodel.make_hf_falcon(n_embd=32, n_layer=2, n_head=4, new_arch=True, n_head_kv=2, act="relu",
                                   n_ff=80, seed=9)
    fhf.save_pretrained(fd)
    fp = cv.convert(fd, str(d / "falcon.gguf"), type="f32", progress=False)
    out["falcon_relu"] = (extgguf.add_down_t(fp, str(d / "falcon_dt.gguf")), fhf)
    # SwiGLU llama
    p, hf = tinymodel.tiny_model(str(d / "silu.gguf"), ffn_act="silu", n_ff=128, seed=3)
    out["silu"] = (extgguf.add_down_t(p, str(d / "silu_dt.gguf")), hf)
    out["dir"] = d
    return out


def gguf_tensor(path, name):
    r = _core.GGUFReader(path)
    t = next(t for t in r.tensors if t.name == name)
    return extgguf.to_f32(t)


def ffn_inputs(hf, toks, falcon=False):
    """float64 FFN inputs [T, d] of every layer from HF's model (the post-norm
    state the GGUF graph's FFN reads)."""
    m = copy.deepcopy(hf).to(torch.float64)
    xs = []
    layers = m.transformer.h if falcon else m.model.layers
    hooks = [(l.mlp).register_forward_pre_hook(lambda _m, a: xs.append(a[0][0].numpy().copy())) for l in layers]
    with torch.no_grad():
        m(torch.tensor([toks]))
    for h in hooks:
        h.remove()
    return xs


# ---------------------------------------------------------------- exact

@pytest.mark.parametrize("kind", ["relu", "relu_down_t", "relu_both", "falcon_relu"])
def test_exact_equals_dense(models, kind):
    path = models[kind][0]
    toks = random_prompt(24, seed=5)
    dense, _ = run_prompt(path, "off", toks)
    exact, c = run_prompt(path, "exact", toks, stats=True)
    assert c.sparse_mode == "exact"
    assert rel_err(exact, dense) <= RTOL
    layers = c.sparse_stats()["layers"]
    assert all(0.05 < l["active_frac"] < 0.95 for l in layers), layers  # it really skipped neurons
    # token by token (the T = 1 kernels), greedy tokens identical
    sd, gd = run_steps(path, "off", toks[:6], 10)
    se, ge = run_steps(path, "exact", toks[:6], 10)
    assert ge == gd
    assert rel_err(se, sd) <= RTOL


def test_exact_active_fraction_matches_numpy(models):
    """Layer 0 sees the same input in every mode: its active set is gate·x > 0."""
    path, hf = models["relu"]
    toks = random_prompt(20, seed=6)
    _, c = run_prompt(path, "exact", toks, stats=True)
    x0 = ffn_inputs(hf, toks)[0]
    g = x0 @ hf.model.layers[0].mlp.gate_proj.weight.detach().double().numpy().T
    want = float((g > 0).mean())
    assert abs(c.sparse_stats()["layers"][0]["active_frac"] - want) <= 1.0 / g.size + 1e-12


# ---------------------------------------------------------------- predictor

def exact_predictor(path, gated=True):
    """Per layer (A, B) with B·relu(A·x) = gate·x (ungated: up·x): A = [W; -W], B = [I, -I]."""
    n_layer = _core.Model(path).n_layer
    preds = []
    for il in range(n_layer):
        w = gguf_tensor(path, f"blk.{il}.ffn_gate.weight" if gated else f"blk.{il}.ffn_up.weight")  # [n, d]
        n = w.shape[0]
        preds.append((np.concatenate([w, -w]), np.concatenate([np.eye(n), -np.eye(n)], axis=1)))
    return preds


@pytest.mark.parametrize("kind", ["relu", "falcon_relu"])
def test_predictor_superset_equals_dense(models, kind):
    path = models[kind][0]
    d = models["dir"]
    preds = exact_predictor(path, gated=kind != "falcon_relu")
    pp = extgguf.add_sparse(path, str(d / f"{kind}_pred.gguf"), predictors=preds, threshold=-1e-3)
    toks = random_prompt(20, seed=7)
    dense, _ = run_prompt(path, "off", toks)
    pred, c = run_prompt(pp, "auto", toks, stats=True, verify=True)
    assert c.sparse_mode == "predictor"
    assert rel_err(pred, dense) <= RTOL
    st = c.sparse_stats()
    assert all(l["recall"] == 1.0 for l in st["layers"])
    assert st["n_verified"] == len(toks) and st["n_argmax_agree"] == len(toks)
    assert st["max_logit_diff"] == pytest.approx(float(np.max(np.abs(pred - dense))), abs=1e-6)
    assert st["flops_predictor"] > 0
    sd, gd = run_steps(path, "off", toks[:5], 8)
    sp, gp = run_steps(pp, "predictor", toks[:5], 8)
    assert gp == gd and rel_err(sp, sd) <= RTOL


def test_predictor_recall_matches_numpy(models):
    """Layers before the last predict a superset (their outputs equal dense), the
    last layer a random low-rank predictor: its recall over the batch is a numpy
    computation on HF's layer input."""
    path, hf = models["relu"]
    preds = exact_predictor(path)
    g = np.random.default_rng(11)
    L = len(preds)
    d_model, n = hf.config.hidden_size, hf.config.intermediate_size
    A = g.standard_normal((16, d_model)) / np.sqrt(d_model)
    B = g.standard_normal((n, 16))
    preds[L - 1] = (A, B)
    thr = 0.3
    # the superset layers need a threshold below 0 on their exact scores: fold it into a scale
    preds = [(a, b * (1.0 if il == L - 1 else 1e4)) for il, (a, b) in enumerate(preds)]
    pp = extgguf.add_sparse(path, str(models["dir"] / "relu_lossy.gguf"), predictors=preds, threshold=thr)
    toks = random_prompt(24, seed=8)
    logits, c = run_prompt(pp, "predictor", toks, stats=True, verify=True)
    dense, _ = run_prompt(path, "off", toks)
    st = c.sparse_stats()
    x = ffn_inputs(hf, toks)[L - 1]
    gate = x @ hf.model.layers[L - 1].mlp.gate_proj.weight.detach().double().numpy().T
    true = gate > 0
    A32, B32 = A.astype(np.float32).astype(np.float64), B.astype(np.float32).astype(np.float64)
    pred = (np.maximum(x @ A32.T, 0) @ B32.T) > thr
    want = (pred & true).sum() / true.sum()
    got = st["layers"][L - 1]["recall"]
    assert 0.2 < want < 0.99  # a lossy predictor, as intended
    assert abs(got - want) <= 2.0 / true.sum(), (got, want)
    assert st["layers"][L - 1]["true_active_frac"] == pytest.approx(true.mean(), abs=2.0 / true.size)
    for il in range(L - 1):  # superset layers (the scaled exact scores), threshold 0.3 / 1e4 on gate
        assert st["layers"][il]["recall"] >= 1.0 - 2.0 / true.sum()
    assert st["max_logit_diff"] == pytest.approx(float(np.max(np.abs(logits - dense))), rel=1e-5, abs=1e-6)
    assert st["max_logit_diff"] > 0


# ---------------------------------------------------------------- threshold

def calib_tokens(path, n=256):
    m = _core.Model(path)
    return calibrate.calibration_tokens(m, TEXT, n)


def test_calibrate_and_threshold_mode(models):
    path, hf = models["silu"]
    d = models["dir"]
    toks = calib_tokens(path, 256)
    errs = {}
    dense, _ = run_prompt(path, "off", toks[:64])
    for target in (0.0, 0.3, 0.5, 0.8):
        out = str(d / f"silu_t{int(target * 100)}.gguf")
        rep = calibrate.calibrate(path, target, text=TEXT, out=out, n_tokens=256, n_ctx=128, n_threads=2)
        thr = np.asarray(rep["thresholds"])
        assert np.array_equal(extgguf.read(out).act_thresholds, thr.astype(np.float32))
        if target == 0.0:
            assert np.all(thr == 0)
        else:
            # layer 0's threshold: the quantile of |silu(gate x)| over HF's layer-0 inputs (same windows)
            x0 = np.concatenate([ffn_inputs(hf, toks[i:i + 128])[0] for i in range(0, 256, 128)])
            gte = x0 @ hf.model.layers[0].mlp.gate_proj.weight.detach().double().numpy().T
            a = np.abs(gte / (1 + np.exp(-gte)))
            assert thr[0] == pytest.approx(np.quantile(a, target), rel=0.02)
            # the sparsity of the threshold run on the calibration text matches the target
            c = ctx(out, "threshold", stats=True, n_ctx=128)
            for i in range(0, 256, 128):
                c.kv_truncate(0)
                c.decode(toks[i:i + 128], all_logits=True)
            layers = c.sparse_stats()["layers"]
            assert 1 - layers[0]["active_frac"] == pytest.approx(target, abs=0.01)
            for l in layers:
                assert 1 - l["active_frac"] == pytest.approx(target, abs=0.06)
        got, c = run_prompt(out, "auto", toks[:64])
        assert c.sparse_mode == "threshold"
        errs[target] = rel_err(got, dense)
    assert errs[0.0] <= RTOL  # threshold 0 is the dense function
    assert errs[0.3] <= errs[0.5] <= errs[0.8]
    assert errs[0.3] < 0.25


def test_threshold_batch_equals_token_by_token(models):
    """The per-token mask: a batch computes the union of active rows, but each
    token keeps only its own neurons, like a single-token decode."""
    path = models["silu"][0]
    out = str(models["dir"] / "silu_tb.gguf")
    calibrate.calibrate(path, 0.6, text=TEXT, out=out, n_tokens=128, n_ctx=128, n_threads=2)
    toks = random_prompt(12, seed=9)
    batch, _ = run_prompt(out, "threshold", toks)
    c = ctx(out, "threshold")
    steps = []
    for t in toks:
        c.decode([t], all_logits=False)
        steps.append(c.logits().copy())
    assert rel_err(np.stack(steps), batch) <= RTOL


def test_profile_engine_counts(models):
    """Per-neuron counts from the observer: layer 0 against numpy on HF's inputs."""
    path, hf = models["relu"]
    toks = random_prompt(40, seed=12)
    res = calibrate.profile_engine(path, tokens=toks, n_ctx=64)
    x0 = ffn_inputs(hf, toks)[0]
    g = x0 @ hf.model.layers[0].mlp.gate_proj.weight.detach().double().numpy().T
    # the engine's KV cache is F16: gates within 1e-3 of 0 may flip
    assert np.all(res["count_0"] >= (g > 1e-3).sum(axis=0)) and np.all(res["count_0"] <= (g > -1e-3).sum(axis=0))
    assert np.sum(res["count_0"] != (g > 0).sum(axis=0)) <= 3
    assert res["freq_1"].shape == (hf.config.intermediate_size,)


# ---------------------------------------------------------------- auto / errors

def test_auto_picks_the_best_mode(models):
    assert ctx(models["relu"][0], "auto").sparse_mode == "exact"
    assert ctx(models["relu_both"][0], "auto").sparse_mode == "exact"
    assert ctx(models["falcon_relu"][0], "auto").sparse_mode == "exact"
    assert ctx(models["silu"][0], "auto").sparse_mode == "off"
    assert ctx(models["silu"][0]).sparse_mode == "off"


@pytest.mark.parametrize("kind,mode,msg", [
    ("silu", "exact", "ReLU-family"),
    ("silu", "predictor", "fc1/fc2"),
    ("silu", "threshold", "act_thresholds"),
    ("relu", "predictor", "fc1/fc2"),
])
def test_unsupported_mode_is_a_clear_error(models, kind, mode, msg):
    with pytest.raises(ValueError, match=msg):
        ctx(models[kind][0], mode)


def test_bad_mode_name_and_stats_without_flag(models):
    with pytest.raises(ValueError, match="sparse must be"):
        ctx(models["relu"][0], "fast")
    c = ctx(models["relu"][0], "exact")
    with pytest.raises(ValueError, match="statistics are off"):
        c.sparse_stats()
    with pytest.raises(ValueError, match="observer is off"):
        c.act_quantile(0, 0.5)


def test_llama_class_sparse(models):
    from pinfer import Llama

    path = models["relu"][0]
    with Llama(path, n_ctx=64, n_threads=2, sparse="auto", sparse_stats=True) as llm:
        assert llm.sparse_mode == "exact"
        llm.eval(random_prompt(10, seed=3))
        st = llm.sparse_stats()
        assert st["mode"] == "exact" and len(st["layers"]) == 2 and st["layers"][0]["n_tokens"] == 10
    with pytest.raises(ValueError, match="ReLU-family"):
        Llama(models["silu"][0], n_ctx=64, sparse="exact")


# ---------------------------------------------------------------- CLI

def cli(*args):
    from pinfer.cli import find_tool

    r = subprocess.run([find_tool("pinfer-cli"), *map(str, args)], capture_output=True, timeout=60)
    r.stdout, r.stderr = r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")
    return r


def test_cli_sparse_flags(models):
    path = models["relu"][0]
    base = ["-m", path, "-p", "the cat", "-n", "6", "--temp", "0", "-c", "64", "-t", "2", "-ctk", "f32"]
    dense = cli(*base)
    r = cli(*base, "--sparse", "exact", "--sparse-stats")
    assert r.returncode == 0, r.stderr
    assert r.stdout == dense.stdout  # same greedy text
    assert "sparse mode exact" in r.stderr
    lines = re.findall(r"sparse layer +(\d+): active +([\d.]+)%", r.stderr)
    assert [int(i) for i, _ in lines] == [0, 1] and all(0 < float(a) < 100 for _, a in lines)
    assert "predictor share" in r.stderr
    # verify with a predictor: recall per layer and the logit difference
    pp = extgguf.add_sparse(path, str(models["dir"] / "relu_cli_pred.gguf"), predictors=exact_predictor(path),
                            threshold=-1e-3)
    r = cli(*base[:1], pp, *base[2:], "--sparse", "auto", "--sparse-verify")
    assert r.returncode == 0, r.stderr
    assert r.stdout == dense.stdout
    assert re.findall(r"recall ([\d.]+)", r.stderr) == ["1.0000", "1.0000"]
    m = re.search(r"max \|logit - dense\| = ([\d.e+-]+) .* argmax agrees (\d+)/(\d+)", r.stderr)
    assert m and float(m.group(1)) < 1e-4 and m.group(2) == m.group(3)
    # errors
    r = cli(*base, "--sparse", "fast")
    assert r.returncode != 0 and "invalid sparse mode 'fast'" in r.stderr
    r = cli("-m", models["silu"][0], "-p", "x", "-n", "1", "--sparse", "exact")
    assert r.returncode != 0 and "ReLU-family" in r.stderr


def test_pinfer_calibrate_subcommand(models, tmp_path, capsys):
    from pinfer import cli as pcli

    path = models["silu"][0]
    corpus = tmp_path / "c.txt"
    corpus.write_text(TEXT)
    out = tmp_path / "cal.gguf"
    assert pcli.main(["calibrate", path, "--target-sparsity", "0.5", "-f", str(corpus), "-o", str(out),
                      "--tokens", "128", "-c", "64", "-t", "2"]) == 0
    assert "wrote" in capsys.readouterr().out
    t = extgguf.read(str(out)).act_thresholds
    assert t.shape == (2,) and np.all(t > 0)
    assert pcli.main(["calibrate", path, "--target-sparsity", "1.5", "-o", str(out)]) == 1
    assert "target sparsity" in capsys.readouterr().err


def test_sparse_context_moves_ffn_weights_to_huge_pages(models):
    """A sparse context copies the FFN weights it reads into memory advised for
    2 MiB pages (once per model): exact mode gate, up, down, down_t; predictor
    mode a gate/up bundle instead of gate and up. A dense context of the same
    model computes the same bits before and after."""
    path = models["relu_down_t"][0]
    toks = random_prompt(12, seed=9)
    m = _core.Model(path)
    assert m.ffn_page_bytes() == (0, 0)
    dense = _core.Context(m, 64, 512, 2)
    dense.decode(toks)
    before = np.array(dense.logits())
    _core.Context(m, 64, 512, 2, sparse="exact")
    moved, huge = m.ffn_page_bytes()
    r = _core.GGUFReader(path)
    kind = {t.name: t.name.split(".")[-2] for t in r.tensors}
    size = {k: sum(t.nbytes for t in r.tensors if kind[t.name] == k)
            for k in ("ffn_gate", "ffn_up", "ffn_down", "ffn_down_t", "fc1", "fc2")}
    ffn = sum(size.values())
    assert ffn <= moved < ffn + 2 * 4 * 2 ** 20 + 64 * len(r.tensors)  # alignment, a spare huge page per mapping
    assert 0 <= huge <= moved
    _core.Context(m, 64, 512, 2, sparse="exact")  # a second sparse context moves nothing again
    assert m.ffn_page_bytes()[0] == moved
    again = _core.Context(m, 64, 512, 2)
    again.decode(toks)
    assert np.array(again.logits()).tobytes() == before.tobytes()


def test_predictor_mode_reads_a_gate_up_bundle(models):
    path = models["relu"][0]
    pp = extgguf.add_sparse(path, str(models["dir"] / "relu_bundle.gguf"),
                            predictors=exact_predictor(path, gated=True), threshold=-1e-3)
    m = _core.Model(pp)
    c = ctx(m, "predictor")
    moved, _ = m.ffn_page_bytes()
    r = _core.GGUFReader(pp)
    def size(k):
        return sum(t.nbytes for t in r.tensors if t.name.split(".")[-2] == k)
    # down and the predictors, plus gate and up once (as the bundle)
    need = size("ffn_gate") + size("ffn_up") + size("ffn_down") + size("fc1") + size("fc2")
    assert need <= moved < need + 2 * 4 * 2 ** 20 + 64 * len(r.tensors)
    toks = random_prompt(10, seed=3)
    c.decode(toks, all_logits=True)
    dense, _ = run_prompt(path, "off", toks)
    assert rel_err(c.logits_all().copy(), dense) <= RTOL


def test_predictor_mode_fused_bundle_with_down_t(models):
    """A file with ffn_down_t: predictor mode bundles gate, up and down_t per neuron;
    decoding (<= 8 tokens) runs the fused sparse_ffn_bundle op, prompts the row-sparse
    ops on strided views of the bundle. With a superset predictor both equal dense."""
    path = models["relu_down_t"][0]
    pp = extgguf.add_sparse(path, str(models["dir"] / "relu_down_t_pred.gguf"),
                            predictors=exact_predictor(path, gated=True), threshold=-1e-3)
    m = _core.Model(pp)
    c = ctx(m, "predictor", stats=True)
    r = _core.GGUFReader(pp)
    def size(k):
        return sum(t.nbytes for t in r.tensors if t.name.split(".")[-2] == k)
    need = size("ffn_gate") + size("ffn_up") + size("ffn_down_t") + size("ffn_down") + size("fc1") + size("fc2")
    moved, _ = m.ffn_page_bytes()
    assert need <= moved < need + 2 * 4 * 2 ** 20 + 64 * len(r.tensors)  # down_t only once: in the bundle
    toks = random_prompt(20, seed=4)
    c.decode(toks, all_logits=True)  # a 20-token prompt: the strided-view path
    dense, _ = run_prompt(path, "off", toks)
    assert rel_err(c.logits_all().copy(), dense) <= RTOL
    sd, gd = run_steps(path, "off", toks[:5], 8)  # decoding: the fused op
    sp, gp = run_steps(pp, "predictor", toks[:5], 8)
    assert gp == gd and rel_err(sp, sd) <= RTOL


def test_precision_high_reaches_the_fused_ffn(models):
    """precision 'high' marks every weight product (ggml_op_takes_prec), the fused
    sparse_ffn_bundle of predictor-mode decoding too. With q8_0 FFN weights and a
    superset predictor, predictor decoding (the fused op) must equal dense decoding
    at high precision (both see the activations to ~16 bits) far more closely than
    dense at 8-bit activations comes to it: a fused op left at 8 bits fails here.
    ffn_down is +-c: q8_0 stores it exactly alike as rows of n (ffn_down) and as
    rows of d (ffn_down_t), so the sparse and the dense down projection use the
    same weights (random values would round differently in the two layouts)."""
    path = models["relu_down_t"][0]
    d = models["dir"]
    r = _core.GGUFReader(path)
    q8 = _core.type_from_name("q8_0")
    tensors = {}
    for t in r.tensors:
        kind = t.name.split(".")[-2]
        if kind in ("ffn_gate", "ffn_up"):
            tensors[t.name] = extgguf.encode(extgguf.to_f32(t), q8)
        elif kind == "ffn_down":
            w = extgguf.to_f32(t)
            rms = np.float32(np.sqrt(np.mean(w.astype(np.float64) ** 2)))
            pm = np.where(w >= 0, 1.0, -1.0).astype(np.float32) * rms
            tensors[t.name] = extgguf.encode(pm, q8)
            tensors[t.name.replace("ffn_down", "ffn_down_t")] = extgguf.encode(np.ascontiguousarray(pm.T), q8)
    qp = extgguf.rewrite(path, str(d / "relu_dt_q8.gguf"), tensors)
    pp = extgguf.add_sparse(qp, str(d / "relu_dt_q8_pred.gguf"), predictors=exact_predictor(qp, gated=True),
                            threshold=-1e-3)
    toks = random_prompt(5, seed=8)
    hi, g_hi = run_steps(qp, "off", toks, 8, "high")
    fast, _ = run_steps(qp, "off", toks, 8, "fast")
    pred, g_pred = run_steps(pp, "predictor", toks, 8, "high")
    gap_8bit = rel_err(fast, hi)
    assert gap_8bit > 1e-3  # 8-bit activations are visibly off on this model
    assert g_pred == g_hi
    assert rel_err(pred, hi) <= gap_8bit / 20, (rel_err(pred, hi), gap_8bit)
