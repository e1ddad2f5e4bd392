"""The hybrid engine on the simulated device (shared/HYBRID.md): per layer the
device holds the attention and a hot FFN prefix [0, k), the CPU computes the
rest at the same time.

Reference: the same model on the CPU alone (pinfer's dense / sparse modes,
themselves checked against transformers elsewhere). The split only changes
summation order, so logits agree to float rounding and greedy tokens are
identical. Traffic is checked against the byte formula of the plan.
"""
import os
import subprocess

import numpy as np
import pytest

import tinymodel
from conftest import greedy_tokens, random_prompt
from pinfer import _core, extgguf  # noqa: E402
from pinfer.cli import find_tool  # noqa: E402

RTOL = 2e-5
N_FF = 128
N_LAYER = 3


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def gguf_tensor(path, name):
    t = next(t for t in _core.GGUFReader(path).tensors if t.name == name)
    return extgguf.to_f32(t)


def with_placement(src, dst, k):
    """src with one placement entry (budget 1 byte) giving prefix k[l] per layer:
    the plan takes the entry below any larger budget, so k is what runs."""
    return extgguf.add_sparse(src, dst, placements=[{"budget_bytes": 1, "solver": "test", "gpu_neurons": list(k)}])


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("hybrid")
    hf = tinymodel.make_hf_model(act="relu", n_ff=N_FF, n_layer=N_LAYER, seed=4)
    relu = extgguf.add_down_t(tinymodel.write_gguf(hf, str(d / "relu0.gguf"), ffn_act="relu"), str(d / "relu.gguf"))
    # an exact predictor (superset of the active set): predictor mode is then the dense function
    preds = []
    for il in range(N_LAYER):
        w = gguf_tensor(relu, f"blk.{il}.ffn_gate.weight")
        preds.append((np.concatenate([w, -w]), np.concatenate([np.eye(N_FF), -np.eye(N_FF)], axis=1)))
    pred = extgguf.add_sparse(relu, str(d / "pred.gguf"), predictors=preds, threshold=-1e-3)
    hs = tinymodel.make_hf_model(act="silu", n_ff=N_FF, n_layer=N_LAYER, seed=5)
    silu = extgguf.add_down_t(tinymodel.write_gguf(hs, str(d / "silu0.gguf"), ffn_act="silu"), str(d / "silu1.gguf"))
    thr = extgguf.add_sparse(silu, str(d / "thr.gguf"), act_thresholds=[0.02] * N_LAYER)
    return {"off": relu, "exact": relu, "predictor": pred, "threshold": thr, "dir": d}


def context(path, mode="off", device="cpu", threads=2, **kw):
    return _core.Context(_core.Model(path), 128, 64, threads, "f32", mode, device=device, **kw)


def logits_of(c, toks):
    c.decode(toks, all_logits=True)
    return c.logits_all().copy()


MIXES = {"none": [0, 0, 0], "half": [N_FF // 2] * N_LAYER, "all": [N_FF] * N_LAYER, "mixed": [0, N_FF // 2, N_FF]}


@pytest.mark.parametrize("mode", ["off", "exact", "predictor", "threshold"])
@pytest.mark.parametrize("mix", list(MIXES))
@pytest.mark.parametrize("T", [1, 5, 40])
def test_hybrid_equals_cpu(models, mode, mix, T):
    path = with_placement(models[mode], str(models["dir"] / f"{mode}_{mix}.gguf"), MIXES[mix])
    toks = random_prompt(T, seed=T)
    ref = logits_of(context(path, mode), toks)
    c = context(path, mode, device="sim")
    assert c.device == "sim"
    assert c.plan() == [(True, k) for k in MIXES[mix]]
    assert rel(logits_of(c, toks), ref) <= RTOL
    # then token by token (the T = 1 kernels and the fused bundle), with greedy tokens identical
    cc, cs = context(path, mode), context(path, mode, device="sim")
    assert greedy_tokens(cs, toks[:3], 6) == greedy_tokens(cc, toks[:3], 6)
    assert rel(cs.logits(), cc.logits()) <= RTOL


@pytest.mark.parametrize("mode", ["off", "exact", "predictor", "threshold"])
def test_prompt_batches_stream_or_compute_cold_rows(models, mode):
    """A prompt batch of >= prompt_stream_min tokens sends the cold rows up (the
    device computes them); with 0 the CPU computes them. Both are the CPU's result."""
    k = MIXES["mixed"]
    path = with_placement(models[mode], str(models["dir"] / f"{mode}_stream.gguf"), k)
    toks = random_prompt(40, seed=11)
    ref = logits_of(context(path, mode), toks)
    moved, pageable = {}, {}
    for smin in (0, 32):
        c = context(path, mode, device="sim", prompt_stream_min=smin)
        assert rel(logits_of(c, toks), ref) <= RTOL
        st = c.transfer_stats(False)
        moved[smin] = st["bytes_h2d"]
        pageable[smin] = st["bytes_pageable"]
    m = _core.Model(path)
    cold = sum(4 * 3 * m.n_embd * (N_FF - kk) for kk in k)  # F32 gate, up and down rows of the cold neurons
    assert moved[32] - moved[0] >= cold - 4 * m.n_embd * 40 * 2  # weights go up; the activations no longer do
    # activations are staged in the device's pinned memory; only the mapped weight rows are not
    assert pageable[0] == 0 and cold <= pageable[32] <= moved[32]


@pytest.mark.parametrize("mode", ["off", "predictor"])
def test_traffic_per_token_is_the_formula(models, mode):
    """Per decoded token: x up once, pos and the mask up; per hybrid layer the
    normalised state (and in predictor mode the list, n + 1 int32) down and the
    CPU's partial up; the logits down once at the end (every layer is on the
    device, so the output head is too). One event wait per hybrid layer (the
    CPU waits for nothing at the end: the logits come with the token's device
    sync), one device sync per token."""
    k = [0, N_FF // 2, N_FF]  # layer 2 keeps its whole FFN: no traffic there
    path = with_placement(models[mode], str(models["dir"] / f"{mode}_traffic.gguf"), k)
    c = context(path, mode, device="sim")
    d, n_vocab = _core.Model(path).n_embd, _core.Model(path).n_vocab
    toks = random_prompt(4, seed=1)
    c.decode(toks)
    c.reset_transfer_stats()
    n_steps = 5
    for i in range(n_steps):
        c.decode([toks[i % 4]])
    st = c.transfer_stats(True)
    assert st["n_graphs"] == n_steps and st["n_tokens"] == n_steps
    hybrid = sum(1 for kk in k if kk < N_FF)
    # mask columns over the steps: the visible positions, padded to 32 (the decode graph is reused)
    n_kv = sum(-(-(len(toks) + i + 1) // 32) * 32 for i in range(n_steps))
    idx = 4 * (N_FF + 1) if mode == "predictor" else 0
    assert st["bytes_h2d"] == n_steps * (4 * d + 4 + 4 * d * hybrid) + 4 * n_kv
    assert st["bytes_d2h"] == n_steps * (4 * d * hybrid + idx * hybrid + 4 * n_vocab)
    assert st["n_waits"] == n_steps * hybrid
    assert st["n_syncs"] == n_steps
    assert st["n_copies"] == n_steps * (3 + 2 * hybrid + (hybrid if idx else 0) + 1)
    assert st["bytes_pageable"] == 0  # every copy's host side is the device's pinned memory


def test_thread_count_does_not_change_results(models):
    path = with_placement(models["predictor"], str(models["dir"] / "threads.gguf"), MIXES["mixed"])
    toks = random_prompt(9, seed=3)
    a = logits_of(context(path, "predictor", device="sim", threads=1), toks)
    b = logits_of(context(path, "predictor", device="sim", threads=2, sim_threads=2), toks)
    assert np.array_equal(a, b)


def test_ngl_puts_a_prefix_of_layers_on_the_device(models):
    path = models["off"]
    for ngl in range(N_LAYER + 1):
        c = context(path, device="sim", n_gpu_layers=ngl)
        assert [on for on, _ in c.plan()] == [i < ngl for i in range(N_LAYER)]
        assert all(k == 0 for on, k in c.plan() if not on)
    toks = random_prompt(7, seed=2)
    ref = logits_of(context(path), toks)
    assert rel(logits_of(context(path, device="sim", n_gpu_layers=2), toks), ref) <= RTOL


def test_budgets(models):
    path = models["off"]
    # a budget larger than the device: a clear error before anything is allocated
    with pytest.raises(ValueError, match="larger than the device's memory"):
        context(path, device="sim", vram_budget=8.0, sim_memory=4.0)
    # a budget that holds nothing: a notice, then the CPU
    c = context(path, device="sim", vram_budget=1e-6)
    assert c.device == "CPU" and "holds no layer" in c.notice
    assert c.plan() == [(False, 0)] * N_LAYER
    # no device: -ngl is a notice
    c = context(path, n_gpu_layers=2)
    assert c.device == "CPU" and "no device" in c.notice
    with pytest.raises(ValueError, match="device must be"):
        context(path, device="tpu")


def test_cuda_device(models):
    """device="cuda": a build without CUDA says so; a CUDA build without a usable
    driver or device names the cause; with a device, the plan runs there and
    gives the CPU's logits (FP32 activations on the device: float rounding)."""
    path = models["off"]
    if not _core.HAS_CUDA:
        with pytest.raises(ValueError, match="no CUDA backend"):
            context(path, device="cuda")
        return
    try:
        c = context(path, device="cuda")
    except ValueError as e:
        assert "--device cuda: no CUDA" in str(e), str(e)
        return
    assert c.device == "cuda"
    toks = random_prompt(12)
    assert rel(logits_of(c, toks), logits_of(context(path), toks)) <= 1e-3


def test_device_auto(models):
    """The default device: the GPU when the build has CUDA and a device answers;
    else the CPU -- with a notice naming the cause in a CUDA build, silently in
    a CPU-only one (there is nothing to explain)."""
    path = models["off"]
    c = context(path, device="auto")
    assert _core.Context(_core.Model(path), 64, 64, 2).device == c.device  # auto is the default
    if not _core.HAS_CUDA:
        assert c.device == "CPU" and c.notice == ""
    elif c.device == "CPU":
        assert c.notice.startswith("no CUDA") and c.notice.endswith("): running on the CPU"), c.notice
    else:
        assert c.device == "cuda" and any(on for on, _ in c.plan())
    toks = random_prompt(12)
    assert rel(logits_of(c, toks), logits_of(context(path, device="cpu"), toks)) <= 1e-3


def test_statistics_need_the_cpu(models):
    with pytest.raises(ValueError, match="CPU only"):
        _core.Context(_core.Model(models["exact"]), 64, 64, 2, "f32", "exact", True, device="sim")


def test_llama_class_on_the_sim(models, capsys):
    from pinfer import Llama

    path = models["off"]
    a = Llama(path, n_ctx=64, seed=1)
    b = Llama(path, n_ctx=64, seed=1, device="sim", n_gpu_layers=2, vram_budget=1.0)
    assert b.plan == [(True, N_FF), (True, N_FF), (False, 0)]
    ta = a.create_completion(random_prompt(4), max_tokens=8, temperature=0)["choices"][0]["text"]
    tb = b.create_completion(random_prompt(4), max_tokens=8, temperature=0)["choices"][0]["text"]
    assert ta == tb
    st = b.transfer_stats()
    assert st["n_graphs"] >= 5 and st["bytes_h2d"] > 0 and st["bytes_d2h"] > 0
    capsys.readouterr()
    Llama(path, n_ctx=64, n_gpu_layers=3)
    err = capsys.readouterr().err  # said once, by the core: no device chosen, or (a CUDA build) none found
    assert err.count("notice") == 1 and ("no device chosen" in err or "running on the CPU" in err), err
    Llama(path, n_ctx=64, n_gpu_layers=-1, device="cpu")  # upstream's "all layers": said by the wrapper
    err = capsys.readouterr().err
    assert err.count("notice") == 1 and "n_gpu_layers=-1 without a device" in err


def test_cli_sim_same_text_and_verbose_plan():
    cli = find_tool("pinfer-cli")
    args = [cli, "-p", "It is a truth universally acknowledged", "-n", "24", "--temp", "0"]
    cpu = subprocess.run(args, capture_output=True, text=True, check=True)
    sim = subprocess.run(args + ["--device", "sim", "--vram-budget", "0.024", "--verbose"], capture_output=True,
                         text=True, check=True)
    assert sim.stdout == cpu.stdout
    assert "plan:" in sim.stderr and "hybrid" in sim.stderr
    assert "device traffic per generated token" in sim.stderr
    bad = subprocess.run(args + ["--device", "sim", "--vram-budget", "1000"], capture_output=True, text=True)
    assert bad.returncode != 0 and "larger than the device's memory" in bad.stderr
    ngl = subprocess.run(args + ["-ngl", "4"], capture_output=True, text=True, check=True)
    assert ngl.stdout == cpu.stdout and "notice" in ngl.stderr


def test_output_head_on_the_device_when_every_layer_is():
    """The output head joins the device when all layers are there (and -ngl,
    if given, exceeds the layer count, as in llama.cpp): the text stays the
    CPU's either way, and the plan says where the head runs."""
    cli = find_tool("pinfer-cli")
    args = [cli, "-p", "It is a truth universally acknowledged", "-n", "16", "--temp", "0"]
    cpu = subprocess.run(args, capture_output=True, text=True, check=True)
    n_layer = _core.Model(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models",
                                       "pinfer-default.gguf")).n_layer
    for name, extra in {"all": [], "ngl=L+1": ["-ngl", str(n_layer + 1)], "ngl=L": ["-ngl", str(n_layer)]}.items():
        r = subprocess.run(args + ["--device", "sim", "--verbose"] + extra, capture_output=True, text=True, check=True)
        assert r.stdout == cpu.stdout, name
        where = "CPU" if name == "ngl=L" else "device"
        assert f"output head: {where}" in r.stderr, (name, r.stderr)
    small = subprocess.run(args + ["--device", "sim", "--vram-budget", "0.024", "--verbose"], capture_output=True,
                           text=True, check=True)
    assert small.stdout == cpu.stdout and "output head: CPU" in small.stderr  # the budget holds layers, not the head


@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_plan_cache_reuses_the_decode_graph(models, device):
    """Single-token decodes reuse one graph and plan per 32 positions; the text
    and (to rounding: the padded positions are masked) the logits are those of
    a graph rebuilt every token. A truncated cache moves the store views back."""
    path = with_placement(models["predictor"], str(models["dir"] / f"cache_{device}.gguf"), MIXES["mixed"])
    toks = random_prompt(5, seed=4)
    runs = {}
    for cache in (False, True):
        c = context(path, "predictor", device=device, graph_cache=cache)
        gen = greedy_tokens(c, toks, 40)
        c.kv_truncate(12)
        gen += greedy_tokens(c, [gen[7]], 10)
        runs[cache] = (gen, c.logits().copy(), c.timings())
    assert runs[True][0] == runs[False][0]
    assert rel(runs[True][1], runs[False][1]) <= RTOL
    t_on, t_off = runs[True][2], runs[False][2]
    assert t_off["n_graphs_reused"] == 0
    assert t_on["n_graphs_reused"] >= 40 and t_on["n_graphs_built"] <= 8


@pytest.mark.parametrize("arch", ["qwen2", "falcon"])
def test_other_architectures_on_the_sim(tmp_path, arch):
    """qwen2 (q/k/v biases, NeoX rope) and falcon (fused qkv, layer norm with
    bias, ungated FFN): every layer's weights and biases reach the device."""
    from pinfer import convert as cv

    d = str(tmp_path / "hf")
    os.makedirs(d)
    if arch == "qwen2":
        tinymodel.write_bpe_tokenizer(d, "qwen2")
        hf = tinymodel.make_hf_qwen2(n_embd=64, n_layer=3, n_head=4, n_head_kv=2, n_ff=96, seed=6)
    else:
        tinymodel.write_bpe_tokenizer(d, "gpt2")
        hf = tinymodel.make_hf_falcon(n_embd=32, n_layer=3, n_head=4, new_arch=True, n_head_kv=2, n_ff=80, seed=7)
    hf.save_pretrained(d)
    path = cv.convert(d, str(tmp_path / f"{arch}.gguf"), type="f32", progress=False)
    n_ff = 96 if arch == "qwen2" else 80
    placed = with_placement(path, str(tmp_path / f"{arch}_k.gguf"), [0, n_ff // 2, n_ff])
    toks = random_prompt(6, seed=8)
    ref = logits_of(context(placed), toks)
    c = context(placed, device="sim")
    assert c.plan() == [(True, 0), (True, n_ff // 2), (True, n_ff)]
    assert rel(logits_of(c, toks), ref) <= RTOL


def test_layer_offload_mode(models):
    """offload='layers' (llama.cpp's -ngl): whole layers in order while they fit,
    no neuron split; same logits."""
    path = models["off"]
    full = context(path, device="sim", offload="layers")
    assert full.plan() == [(True, N_FF)] * N_LAYER
    two = context(path, device="sim", offload="layers", n_gpu_layers=2)
    assert two.plan() == [(True, N_FF), (True, N_FF), (False, 0)]
    toks = random_prompt(6, seed=9)
    assert rel(logits_of(two, toks), logits_of(context(path), toks)) <= RTOL
    with pytest.raises(ValueError, match="offload must be"):
        context(path, device="sim", offload="rows")
