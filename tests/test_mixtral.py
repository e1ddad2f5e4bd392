"""Mixtral-style mixture of experts vs Hugging Face transformers.

Tiny random MixtralForCausalLM models (transformers' own config and model
classes, float32 weights, saved with save_pretrained in the per-expert
layout of the Hub's checkpoints) are converted by pinfer.convert into
llama.cpp's Mixtral layout and run by pinfer. Logits must match
transformers run in float64 to 1e-4 relative for a prompt and token by
token through the KV cache, greedy decoding must pick transformers' tokens,
and every token's routed experts in every layer must be the ones
transformers' router picks (its router logits, float64).
"""
import os
import sys

import gguf
import numpy as np
import pytest
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tinymodel  # noqa: E402
from conftest import (  # noqa: E402
    chunked_logits,
    converted_fixture,
    hf_cached_error,
    hf_greedy,
    hf_prompt_error,
    random_prompt,
    rel_err,
)
from pinfer import _core  # noqa: E402
from pinfer import convert as cv  # noqa: E402

RTOL = 1e-4
COMMON = dict(vocab_size=tinymodel.vocab_size(), max_position_embeddings=256, bos_token_id=None,
              eos_token_id=None, pad_token_id=None)


# name: (n_expert, n_expert_used)
CASES = {"e4_top2": (4, 2), "e3_top1": (3, 1), "e8_top2": (8, 2)}


def build(kind, d):
    n_expert, k = CASES[kind]
    os.makedirs(d, exist_ok=True)
    tinymodel.write_bpe_tokenizer(d, "gpt2")
    cfg = transformers.MixtralConfig(**{**COMMON, **dict(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        num_local_experts=n_expert, num_experts_per_tok=k, rms_norm_eps=1e-5, sliding_window=None,
        tie_word_embeddings=False)})
    # eager experts: a loop over the experts in float64 (the grouped kernels take no doubles)
    hf = transformers.MixtralForCausalLM._from_config(cfg, attn_implementation="eager", experts_implementation="eager",
                                                      dtype=torch.float32)
    hf = tinymodel.randomize(hf, seed=sorted(CASES).index(kind) + 70)
    hf.save_pretrained(d)
    return hf


converted = converted_fixture(build, CASES)


def _field(reader, key):
    f = reader.fields.get(key)
    return None if f is None else f.parts[f.data[0]][0]


def test_names_keys_and_shapes_are_llama_cpps(converted):
    kind, hf, m, path = converted
    n_expert, k = CASES[kind]
    assert m.arch == "llama"
    fr = gguf.GGUFReader(path)
    n_layer = hf.config.num_hidden_layers
    allowed = {gguf.TENSOR_NAMES[t].format(bid=i) + ".weight" for t in gguf.MODEL_TENSORS[gguf.MODEL_ARCH.LLAMA]
               for i in range(n_layer)}
    tensors = {t.name: t for t in fr.tensors}
    assert set(tensors) <= allowed, sorted(set(tensors) - allowed)
    exp = gguf.TENSOR_NAMES
    d, n = hf.config.hidden_size, hf.config.intermediate_size
    # numpy order (ggml's reversed): gate/up [n_expert, n_ff, d], down [n_expert, d, n_ff], router [n_expert, d]
    want = {exp[gguf.MODEL_TENSOR.FFN_GATE_INP]: (n_expert, d), exp[gguf.MODEL_TENSOR.FFN_GATE_EXP]: (n_expert, n, d),
            exp[gguf.MODEL_TENSOR.FFN_UP_EXP]: (n_expert, n, d), exp[gguf.MODEL_TENSOR.FFN_DOWN_EXP]: (n_expert, d, n)}
    for name, shape in want.items():
        assert tuple(reversed(tensors[name.format(bid=1) + ".weight"].shape.tolist())) == shape, name
    assert "blk.0.ffn_up.weight" not in tensors
    assert _field(fr, gguf.Keys.LLM.EXPERT_COUNT.format(arch="llama")) == n_expert
    assert _field(fr, gguf.Keys.LLM.EXPERT_USED_COUNT.format(arch="llama")) == k
    # the experts' matrices are HF's, stacked in expert order (HF holds [gate; up] fused in memory)
    experts = hf.model.layers[1].mlp.experts
    down = np.array(tensors["blk.1.ffn_down_exps.weight"].data).reshape(n_expert, d, n)
    up = np.array(tensors["blk.1.ffn_up_exps.weight"].data).reshape(n_expert, n, d)
    assert np.array_equal(down, experts.down_proj.detach().numpy())
    assert np.array_equal(up, experts.gate_up_proj.detach().numpy()[:, n:])


def test_whole_prompt(converted):
    kind, hf, m, _ = converted
    assert hf_prompt_error(hf, m) < RTOL, kind


def test_token_by_token(converted):
    kind, hf, m, _ = converted
    assert hf_cached_error(hf, m) < RTOL, kind  # a prompt chunk, then cached single steps


def test_greedy_tokens_equal(converted):
    kind, hf, m, _ = converted
    ours, ref = hf_greedy(hf, m)
    assert ours == ref, kind


def _hf_router_logits(hf, toks):
    """float64 router logits [n_layer][T, n_expert] of HF's model: each layer's router on its own input."""
    import copy

    m64 = copy.deepcopy(hf).to(torch.float64)
    got = []
    hooks = [layer.mlp.gate.register_forward_hook(lambda _m, _a, out: got.append(out[0].numpy().copy()))
             for layer in m64.model.layers]
    with torch.no_grad():
        m64(torch.tensor([toks]))
    for h in hooks:
        h.remove()
    return got


def test_routing_equals_transformers(converted):
    """Every token's chosen experts in every layer, for a prompt batch (tokens of
    one batch route to different experts) and for cached single-token steps."""
    kind, hf, m, _ = converted
    n_expert, k = CASES[kind]
    toks = random_prompt(40, m.n_vocab, seed=15)
    ref = _hf_router_logits(hf, toks)
    assert len(ref) == hf.config.num_hidden_layers
    ctx = _core.Context(m, 64, 64, 2, "f32", "off", True, False, False)  # sparse_stats: expert ids recorded
    ctx.decode(toks[:32], all_logits=True)
    ours = [np.array(ctx.expert_ids(il)).reshape(32, k) for il in range(len(ref))]
    assert ctx.sparse_stats()["layers"][0]["active_frac"] == 1.0  # dense experts: every routed neuron
    steps = [[] for _ in ref]
    for t in toks[32:]:
        ctx.decode([t])
        for il in range(len(ref)):
            steps[il].append(ctx.expert_ids(il))
    checked = 0
    for il, lg in enumerate(ref):
        chosen = np.concatenate([ours[il], np.array(steps[il]).reshape(-1, k)])
        order = np.argsort(-lg, axis=1, kind="stable")
        for t in range(len(toks)):
            srt = np.sort(lg[t])[::-1]
            if k < n_expert and srt[k - 1] - srt[k] < 1e-5:
                continue  # a near-tie at the cut: float32 may pick either
            assert list(chosen[t]) == list(order[t, :k]), (kind, il, t)
            checked += 1
        # a batch routes its tokens to several experts: the op's batched path is exercised
        assert len(set(ours[il].ravel().tolist())) > k
    assert checked >= 0.95 * len(toks) * len(ref)


def test_quantized_within_bounds(converted, tmp_path):
    """Q8_0 experts (3-D quantized tensors; the router stays F32 as llama.cpp writes it)."""
    kind, hf, _, path = converted
    d = os.path.dirname(path)
    q = cv.convert(os.path.join(d, "hf"), str(tmp_path / "q8.gguf"), type="q8_0", progress=False)
    types = {t.name: t.tensor_type for t in gguf.GGUFReader(q).tensors}
    assert types["blk.0.ffn_up_exps.weight"] == gguf.GGMLQuantizationType.Q8_0
    assert types["blk.0.ffn_gate_inp.weight"] == gguf.GGMLQuantizationType.F32
    m = _core.Model(q)
    toks = random_prompt(16, m.n_vocab, seed=23)
    ctx = _core.Context(m, 32, 32, 2, type_kv=0)
    ctx.decode(toks, all_logits=True)
    assert rel_err(ctx.logits_all(), tinymodel.hf_logits(hf, toks)) < 5e-2
    m.close()


def test_simulated_device(converted):
    """All layers on the simulated device: attention there, the experts on the
    CPU (the plan says so), the same logits as the CPU alone."""
    kind, hf, m, _ = converted
    toks = random_prompt(20, m.n_vocab, seed=24)
    cpu = _core.Context(m, 64, 64, 2, "f32", "off")
    cpu.decode(toks, all_logits=True)
    sim = _core.Context(m, 64, 64, 2, "f32", "off", device="sim", n_gpu_layers=hf.config.num_hidden_layers)
    assert "mixture-of-experts" in sim.notice
    assert rel_err(chunked_logits(sim, toks, 12), np.asarray(cpu.logits_all(), np.float64)) < RTOL, kind


def test_predictor_mode_is_refused_and_auto_is_dense(converted):
    kind, hf, m, _ = converted
    with pytest.raises(Exception, match="mixture-of-experts"):
        _core.Context(m, 32, 8, 2, "f32", "predictor")
    with pytest.raises(Exception, match="ReLU"):  # SwiGLU experts: exact mode would change the function
        _core.Context(m, 32, 8, 2, "f32", "exact")
    assert _core.Context(m, 32, 8, 2, "f32", "auto").sparse_mode == "off"


@pytest.fixture(scope="module")
def relu_experts(tmp_path_factory):
    """Mixtral with ReLU experts (hidden_act relu: ReGLU experts, relu(gate x) * up x)."""
    d = str(tmp_path_factory.mktemp("relu") / "hf")
    os.makedirs(d)
    tinymodel.write_bpe_tokenizer(d, "gpt2")
    cfg = transformers.MixtralConfig(**{**COMMON, **dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        num_local_experts=4, num_experts_per_tok=2, hidden_act="relu", sliding_window=None)})
    hf = transformers.MixtralForCausalLM._from_config(cfg, attn_implementation="eager", experts_implementation="eager",
                                                      dtype=torch.float32)
    hf = tinymodel.randomize(hf, seed=77)
    hf.save_pretrained(d)
    m = _core.Model(cv.convert(d, os.path.join(os.path.dirname(d), "relu.gguf"), type="f32", progress=False))
    yield hf, m
    m.close()


def test_exact_sparse_experts_equal_dense(relu_experts):
    """Exact mode skips the up rows of the routed experts' inactive neurons: the
    function is dense's (and transformers'), for a prompt batch and cached steps."""
    hf, m = relu_experts
    toks = random_prompt(24, m.n_vocab, seed=31)
    ref = tinymodel.hf_logits(hf, toks)
    dense = _core.Context(m, 64, 64, 2, "f32", "off")
    dense.decode(toks, all_logits=True)
    assert rel_err(dense.logits_all(), ref) < RTOL
    ex = _core.Context(m, 64, 64, 2, "f32", "exact")
    assert ex.sparse_mode == "exact"
    assert _core.Context(m, 32, 8, 2, "f32", "auto").sparse_mode == "exact"
    got = chunked_logits(ex, toks, 16)
    assert rel_err(got, np.asarray(dense.logits_all(), np.float64)) < 1e-5
    assert rel_err(got, ref) < RTOL
    # the statistics count the routed experts' active neurons: HF's own relu(gate x) > 0 rate
    st = _core.Context(m, 64, 64, 2, "f32", "exact", True, False, False)
    st.decode(toks, all_logits=True)
    frac = st.sparse_stats()["layers"][0]["active_frac"]
    import copy
    m64 = copy.deepcopy(hf).to(torch.float64)
    xs = []
    hk = m64.model.layers[0].mlp.register_forward_pre_hook(lambda _m, a: xs.append(a[0][0]))
    with torch.no_grad():
        m64(torch.tensor([toks]))
    hk.remove()
    gate = m64.model.layers[0].mlp.gate
    with torch.no_grad():
        ids = torch.topk(gate(xs[0])[0], 2, dim=-1).indices
        n = hf.config.intermediate_size
        gu = m64.model.layers[0].mlp.experts.gate_up_proj
        want = np.mean([float((xs[0][t] @ gu[e, :n].T > 0).double().mean()) for t in range(len(toks)) for e in ids[t]])
    assert frac == pytest.approx(want, abs=1e-3)


def _thresholded_hf(hf, t):
    """HF's model with every expert activation a replaced by a * (|a| > t): threshold mode's function."""
    import copy

    class Thresholded(torch.nn.Module):
        def __init__(self, act, t):
            super().__init__()
            self.act, self.t = act, t

        def forward(self, x):
            a = self.act(x)
            return a * (a.abs() > self.t)

    m = copy.deepcopy(hf)
    for layer, tl in zip(m.model.layers, t):
        layer.mlp.experts.act_fn = Thresholded(layer.mlp.experts.act_fn, tl)
    return m


def test_threshold_sparse_experts_match_thresholded_transformers(converted, tmp_path):
    """SwiGLU experts in threshold mode: pinfer.sparse.act_thresholds per layer
    drop the routed experts' small activations; transformers with the same
    thresholded activation gives the same logits, the dense model others."""
    from pinfer import extgguf

    kind, hf, m, path = converted
    toks = random_prompt(20, m.n_vocab, seed=32)
    thr = [0.05, 0.08]
    out = extgguf.add_sparse(path, str(tmp_path / "thr.gguf"), act_thresholds=thr)
    mt = _core.Model(out)
    ctx = _core.Context(mt, 64, 64, 2, "f32", "threshold")
    got = chunked_logits(ctx, toks, 12)
    assert rel_err(got, tinymodel.hf_logits(_thresholded_hf(hf, thr), toks)) < RTOL, kind
    assert rel_err(got, tinymodel.hf_logits(hf, toks)) > 10 * RTOL, kind  # the thresholds do change the function
    mt.close()


def test_corrupt_expert_count_is_named(converted, tmp_path):
    """expert_used_count above expert_count: the loader names the key."""
    kind, hf, m, path = converted
    r = gguf.GGUFReader(path)
    out = str(tmp_path / "bad.gguf")
    w = gguf.GGUFWriter(out, "llama")
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        sub = f.types[1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        val = f.contents()
        if key == "llama.expert_used_count":
            val = CASES[kind][0] + 1
        w.add_key_value(key, val, f.types[0], sub_type=sub)
    for t in r.tensors:
        w.add_tensor(t.name, np.array(t.data), raw_shape=list(reversed(t.shape.tolist())), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(Exception, match="expert_used_count"):
        _core.Model(out)


def test_expert_ids_errors_name_the_problem(converted):
    kind, hf, m, _ = converted
    plain = _core.Context(m, 32, 8, 2, "f32", "off")
    plain.decode([1, 2, 3])
    with pytest.raises(ValueError, match="PINFER_SPARSE_FLAG_STATS"):
        plain.expert_ids(0)
    st = _core.Context(m, 32, 8, 2, "f32", "off", True, False, False)
    st.decode([1, 2, 3])
    assert len(st.expert_ids(0)) == 3 * CASES[kind][1]
    assert len(st.expert_ids(1)) == CASES[kind][1]  # the last layer runs only the rows whose logits are kept
    with pytest.raises(ValueError, match="layer 2 outside"):
        st.expert_ids(2)
