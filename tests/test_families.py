"""More model families vs Hugging Face transformers: Qwen3, Llama 3.x RoPE
scaling (llama3 factors, linear, YaRN), Mistral's sliding window, Gemma,
Gemma 2, Gemma 3, Phi-3.

Each case is a tiny random model built with transformers' own config and
model classes (eager attention, float32 weights), saved with save_pretrained,
converted by pinfer.convert at F32 and run by pinfer. Logits must match
transformers run in float64 to 1e-4 relative (max abs diff / max abs logit)
for the whole prompt and token by token through the KV cache, and greedy
decoding must pick the tokens transformers' logits pick. Prompts are longer
than the sliding windows, so a window that is ignored or off by one fails.

The file's architecture name, tensor names and hyperparameter keys are
checked against the gguf package's tables (llama.cpp's gguf-py constants:
MODEL_ARCH_NAMES, MODEL_TENSORS, TENSOR_NAMES, Keys), so files of llama.cpp's
converter and ours use the same names.

Needs: pip install torch transformers tokenizers gguf
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
from conftest import (
    PRIDE_OPENING,
    chunked_logits,
    converted_fixture,
    hf_cached_error,
    hf_greedy,
    random_prompt,
    rel_err,
)
from pinfer import _core  # noqa: E402
from pinfer import convert as cv  # noqa: E402

RTOL = 1e-4


COMMON = dict(vocab_size=tinymodel.vocab_size(), max_position_embeddings=256, bos_token_id=None,
              eos_token_id=None, pad_token_id=None)

# name: (config class, model class, config kwargs, GGUF arch)
CASES = {
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM",
              dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=24, rms_norm_eps=1e-6, tie_word_embeddings=False,
                   rope_theta=1000000.0), "qwen3"),
    "qwen3_yarn": ("Qwen3Config", "Qwen3ForCausalLM",
                   dict(hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                        num_key_value_heads=1, head_dim=32, tie_word_embeddings=True,
                        rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0,
                                         "original_max_position_embeddings": 64}), "qwen3"),
    "llama3_rope": ("LlamaConfig", "LlamaForCausalLM",
                    dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, rms_norm_eps=1e-5, max_position_embeddings=1024,
                         rope_parameters={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                          "high_freq_factor": 4.0, "original_max_position_embeddings": 64,
                                          "rope_theta": 500000.0}), "llama"),
    "llama_linear": ("LlamaConfig", "LlamaForCausalLM",
                     dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2,
                          rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}), "llama"),
    "mistral_swa": ("MistralConfig", "MistralForCausalLM",
                    dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=16, sliding_window=5, rms_norm_eps=1e-5), "llama"),
    "gemma": ("GemmaConfig", "GemmaForCausalLM",
              dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=1, head_dim=16), "gemma"),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM",
               dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=24, sliding_window=4,
                    attn_logit_softcapping=5.0, final_logit_softcapping=10.0), "gemma2"),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM",
               dict(hidden_size=64, intermediate_size=96, num_hidden_layers=7, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16, sliding_window=4,
                    rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                     "full_attention": {"rope_type": "linear", "factor": 8.0,
                                                        "rope_theta": 1000000.0}}), "gemma3"),
    "phi3": ("Phi3Config", "Phi3ForCausalLM",
             dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, rms_norm_eps=1e-5, max_position_embeddings=256,
                  original_max_position_embeddings=64, sliding_window=6,
                  rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                   "short_factor": [1.0 + 0.1 * i for i in range(8)],
                                   "long_factor": [2.0 + 0.5 * i for i in range(8)]}), "phi3"),
}


def build(kind, d):
    cfg_cls, model_cls, kw, _ = CASES[kind]
    os.makedirs(d, exist_ok=True)
    tinymodel.write_bpe_tokenizer(d, "gpt2")
    cfg = getattr(transformers, cfg_cls)(**{**COMMON, **kw})
    hf = tinymodel.randomize(tinymodel._from_config(getattr(transformers, model_cls), cfg),
                             seed=sorted(CASES).index(kind) + 40)
    hf.save_pretrained(d)
    return hf


converted = converted_fixture(build, CASES)


def test_names_and_keys_are_llama_cpps(converted):
    kind, hf, m, path = converted
    arch = CASES[kind][3]
    assert m.arch == arch
    garch = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch)
    n_layer = hf.config.num_hidden_layers
    allowed = {gguf.TENSOR_NAMES[t].format(bid=i) + sfx for t in gguf.MODEL_TENSORS[garch]
               for i in range(n_layer) for sfx in (".weight", ".bias")}
    fr = gguf.GGUFReader(path)
    names = {t.name for t in fr.tensors}
    assert names <= allowed, sorted(names - allowed)
    known = set()
    for group in (gguf.Keys.General, gguf.Keys.LLM, gguf.Keys.Attention, gguf.Keys.Rope, gguf.Keys.Tokenizer):
        known |= {v.replace("{arch}", arch) for k, v in vars(group).items()
                  if isinstance(v, str) and not k.startswith("_")}
    keys = {k for k in fr.fields if not k.startswith(("GGUF.", "pinfer."))}
    assert keys <= known, sorted(keys - known)


def expected_keys(kind):
    """The family facts the file must carry (key -> value), from the HF config."""
    return {
        "qwen3": {"qwen3.attention.key_length": 24},
        "qwen3_yarn": {"qwen3.rope.scaling.type": "yarn", "qwen3.rope.scaling.factor": 4.0,
                       "qwen3.rope.scaling.original_context_length": 64},
        "llama3_rope": {},
        "llama_linear": {"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 2.0},
        "mistral_swa": {"llama.attention.sliding_window": 5},
        "gemma": {},
        "gemma2": {"gemma2.attention.sliding_window": 4, "gemma2.attn_logit_softcapping": 5.0,
                   "gemma2.final_logit_softcapping": 10.0, "gemma2.attention.scale": 24 ** -0.5},
        "gemma3": {"gemma3.attention.sliding_window": 4, "gemma3.rope.freq_base": 1e6,
                   "gemma3.rope.freq_base_swa": 1e4, "gemma3.rope.scaling.type": "linear",
                   "gemma3.rope.scaling.factor": 8.0},
        "phi3": {"phi3.attention.sliding_window": 6, "phi3.rope.scaling.original_context_length": 64,
                 "phi3.rope.scaling.attn_factor": float(np.sqrt(1 + np.log(4.0) / np.log(64.0)))},
    }[kind]


def _field(reader, key):
    f = reader.fields.get(key)
    if f is None:
        return None
    v = f.parts[f.data[0]]
    return bytes(v).decode() if f.types[0] == gguf.GGUFValueType.STRING else v[0]


def test_family_metadata(converted):
    kind, hf, m, path = converted
    fr = gguf.GGUFReader(path)
    for key, want in expected_keys(kind).items():
        got = _field(fr, key)
        if isinstance(want, float):
            assert abs(float(got) - want) < 1e-6 * max(1.0, abs(want)), (key, got)
        else:
            assert str(got) == str(want), (key, got)
    names = {t.name for t in fr.tensors}
    if kind == "llama3_rope":
        # llama.cpp's rope_freqs: the divisor of each pair's angle, from HF's own llama3 frequencies
        inv, _ = transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS["llama3"](hf.config, "cpu")
        base = hf.config.rope_parameters["rope_theta"]
        hd = hf.config.hidden_size // hf.config.num_attention_heads
        plain = base ** (-np.arange(0, hd, 2) / hd)
        t = {t.name: t for t in gguf.GGUFReader(path).tensors}["rope_freqs.weight"]
        np.testing.assert_allclose(np.array(t.data), plain / inv.double().numpy(), rtol=1e-5)
    if kind == "phi3":
        assert {"rope_factors_short.weight", "rope_factors_long.weight", "blk.0.attn_qkv.weight"} <= names
        assert "blk.0.ffn_gate.weight" not in names  # gate and up stay fused as llama.cpp writes them
    if kind.startswith("gemma"):
        assert "output.weight" not in names  # tied


def test_whole_prompt(converted):
    kind, hf, m, _ = converted
    toks = random_prompt(24, m.n_vocab, seed=11)
    ref = tinymodel.hf_logits(hf, toks)
    ctx = _core.Context(m, 64, 64, 2, type_kv=0)
    ctx.decode(toks, all_logits=True)
    assert rel_err(ctx.logits_all(), ref) < RTOL, kind
    if getattr(hf.config, "sliding_window", None):
        # the control: without its window the same model is far from pinfer's
        # output, so the match above is the window's
        w, hf.config.sliding_window = hf.config.sliding_window, 4096
        try:
            assert rel_err(ctx.logits_all(), tinymodel.hf_logits(hf, toks)) > 100 * RTOL, kind
        finally:
            hf.config.sliding_window = w


def test_token_by_token(converted):
    kind, hf, m, _ = converted
    assert hf_cached_error(hf, m) < RTOL, kind  # a prompt chunk, then cached single steps


def test_greedy_tokens_equal(converted):
    kind, hf, m, _ = converted
    ours, ref = hf_greedy(hf, m)
    assert ours == ref, kind


def test_longrope_long_factors(tmp_path):
    """Phi-3 with a context past original_max_position_embeddings: transformers
    switches to the long factors for sequences that long, pinfer for caches that long."""
    d = str(tmp_path / "hf")
    hf = build("phi3", d)
    m = _core.Model(cv.convert(d, str(tmp_path / "m.gguf"), type="f32", progress=False))
    toks = random_prompt(70, m.n_vocab, seed=14)
    ctx = _core.Context(m, 128, 128, 2, type_kv=0)
    ctx.decode(toks, all_logits=True)
    assert rel_err(ctx.logits_all(), tinymodel.hf_logits(hf, toks)) < RTOL
    m.close()


def test_unsupported_architecture_names_itself(tmp_path):
    d = str(tmp_path / "hf")
    build("qwen3", d)
    import json
    cfg_path = os.path.join(d, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["architectures"] = ["Starcoder2ForCausalLM"]
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    with pytest.raises(cv.ConvertError, match="Starcoder2ForCausalLM"):
        cv.convert(d, str(tmp_path / "x.gguf"), type="f32", progress=False)
    # and a GGUF of an architecture the runtime lacks names it too
    w = gguf.GGUFWriter(str(tmp_path / "s.gguf"), "starcoder2")
    w.add_tokenizer_model("gpt2")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    with pytest.raises(Exception, match="starcoder2"):
        _core.Model(str(tmp_path / "s.gguf"))


# ---------------------------------------------------------------- sparse

TEXT = PRIDE_OPENING * 2


def _layer0_act(hf, toks):
    """float64 |act(gate x)| of layer 0 over toks, from HF's own FFN input and weights."""
    import copy

    m = copy.deepcopy(hf).to(torch.float64)
    xs = []
    mlp = m.model.layers[0].mlp
    h = mlp.register_forward_pre_hook(lambda _m, a: xs.append(a[0][0].numpy().copy()))
    with torch.no_grad():
        m(torch.tensor([toks]))
    h.remove()
    if hasattr(mlp, "gate_up_proj"):  # phi3: rows [gate; up]
        w = mlp.gate_up_proj.weight.detach().numpy()[: mlp.gate_up_proj.weight.shape[0] // 2]
    else:
        w = mlp.gate_proj.weight.detach().numpy()
    g = xs[0] @ w.T
    act = mlp.act_fn if hasattr(mlp, "act_fn") else mlp.activation_fn
    return np.abs(act(torch.tensor(g)).numpy())


def test_calibrate_and_threshold_mode(converted, tmp_path):
    """pinfer calibrate + --sparse threshold on every family (SwiGLU and GeGLU):
    layer 0's threshold is the quantile of HF's |act(gate x)|, the measured
    sparsity is the target, and threshold 0 is the dense function."""
    from pinfer import calibrate

    kind, hf, m, path = converted
    toks = calibrate.calibration_tokens(m, TEXT, 64)
    dense = _core.Context(m, 64, 64, 2, "f32", "off", False, False, False)
    dense.decode(toks, all_logits=True)
    ref = dense.logits_all().copy()
    for target in (0.0, 0.5):
        out = str(tmp_path / f"t{int(target * 100)}.gguf")
        rep = calibrate.calibrate(path, target, text=TEXT, out=out, n_tokens=64, n_ctx=64, n_threads=2)
        thr = np.asarray(rep["thresholds"])
        mt = _core.Model(out)
        c = _core.Context(mt, 64, 64, 2, "f32", "threshold", True, False, False)
        c.decode(toks, all_logits=True)
        got = c.logits_all().copy()
        if target == 0.0:
            assert np.all(thr == 0)
            assert rel_err(got, ref) <= RTOL, kind
        else:
            assert thr[0] == pytest.approx(np.quantile(_layer0_act(hf, toks), target), rel=0.02), kind
            layers = c.sparse_stats()["layers"]
            assert 1 - layers[0]["active_frac"] == pytest.approx(target, abs=0.02), kind
            assert 0 < rel_err(got, ref) < 0.5, kind
        c.close()
        mt.close()
    dense.close()


# ---------------------------------------------------------------- Gemma's tokenizer

SAMPLE = ["def f(x):\n    return x ** 2  # square\n\tif a != b: print(f'{a}')",
          "caf\u00e9 na\u00efve \u00fcber \u0441\u043b\u043e\u0432\u043e",
          "\u4e2d\u6587\u5b57\u7b26 \u65e5\u672c\u8a9e \ud55c\uad6d\uc5b4 \u0645\u0631\u062d\u0628\u0627",
          "\U0001F600 emoji \U0001F389\U0001F389 \U0001F468\u200d\U0001F469\u200d\U0001F467",
          "  two  spaces \n\n newline",
          "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n", "x<bos>y<eos>", "\u00bd\u00b2 1234567 3.14"]


def _write_gemma_spm(d, text):
    """A SentencePiece model shaped like Gemma's: BPE with byte fallback, no dummy
    prefix, <pad>/<eos>/<bos>/<unk> at 0-3, the turn markers as user-defined pieces."""
    import json

    import sentencepiece as spm

    from test_chat import GEMMA

    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text[:150_000].split("\n")), model_prefix=os.path.join(d, "m"), vocab_size=600,
        model_type="bpe", byte_fallback=True, character_coverage=0.9995, normalization_rule_name="identity",
        remove_extra_whitespaces=False, add_dummy_prefix=False, split_by_whitespace=False, pad_id=0, eos_id=1,
        bos_id=2, unk_id=3, pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>", unk_piece="<unk>",
        user_defined_symbols=["<start_of_turn>", "<end_of_turn>"], minloglevel=2)
    os.replace(os.path.join(d, "m.model"), os.path.join(d, "tokenizer.model"))
    os.remove(os.path.join(d, "m.vocab"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GemmaTokenizer", "bos_token": "<bos>", "eos_token": "<eos>",
                   "pad_token": "<pad>", "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False,
                   "chat_template": GEMMA}, f)


def test_gemma_tokenizer_and_chat_template(tmp_path):
    from pinfer import datasets

    austen = "\n\n".join(datasets.austen_books().values())
    d = str(tmp_path / "hf")
    os.makedirs(d)
    _write_gemma_spm(d, austen)
    ref = transformers.GemmaTokenizer.from_pretrained(d)
    cfg = transformers.GemmaConfig(**{**COMMON, **CASES["gemma"][2], "vocab_size": len(ref)})
    tinymodel.randomize(tinymodel._from_config(transformers.GemmaForCausalLM, cfg), seed=5).save_pretrained(d)
    m = _core.Model(cv.convert(d, str(tmp_path / "g.gguf"), type="f32", progress=False))
    assert (m.bos, m.eos) == (ref.bos_token_id, ref.eos_token_id)
    # the first million characters of Austen (all of it agrees too, in 20 s: a manual run)
    part = austen[:1_000_000]
    ours = m.tokenize(part, add_special=True, parse_special=False)
    assert list(ours) == ref(part)["input_ids"]
    assert len(ours) > 200_000
    for text in SAMPLE:
        for ps in (True, False):
            assert list(m.tokenize(text, True, ps)) == ref(text, split_special_tokens=not ps)["input_ids"], text
        assert m.detokenize(m.tokenize(text, False, False)).decode() == text
    # the chat template travels in the file and renders as transformers renders it
    msgs = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there"},
            {"role": "user", "content": "Who are you?"}]
    want = ref.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    got = _core.apply_chat_template(m.chat_template, msgs, True, bos_token="<bos>", eos_token="<eos>")
    assert got == want
    assert list(m.tokenize(got, False, True)) == ref(want, add_special_tokens=False)["input_ids"]
    m.close()


# ---------------------------------------------------------------- other types and devices

BOUNDS = {"f16": 2e-3, "q8_0": 5e-2}  # as tests/test_convert.py: above rounding, far below a wrong model


def test_quantized_within_bounds(converted, tmp_path):
    """Q8_0 for every family; F16 too for the fused (phi3) and soft-capped (gemma2) layouts."""
    kind, hf, _, _ = converted
    d = os.path.dirname(converted[3])
    toks = random_prompt(16, hf.config.vocab_size, seed=23)
    ref = tinymodel.hf_logits(hf, toks)
    for qtype in ["q8_0"] + (["f16"] if kind in ("phi3", "gemma2") else []):
        m = _core.Model(cv.convert(os.path.join(d, "hf"), str(tmp_path / f"{qtype}.gguf"), type=qtype, progress=False))
        ctx = _core.Context(m, 32, 32, 2, type_kv=0)
        ctx.decode(toks, all_logits=True)
        # gemma2's final soft-cap bounds the logits (|x| < 10), the denominator of the
        # relative error, while the weights' rounding enters before the cap: twice the bound
        bound = BOUNDS[qtype] * (2 if getattr(hf.config, "final_logit_softcapping", None) else 1)
        assert rel_err(ctx.logits_all(), ref) < bound, (kind, qtype)
        m.close()


def test_simulated_device_runs_every_family(converted):
    """The hybrid plan on the simulated device (all layers there): same logits as
    the CPU, so the masks, QK-norms, post norms and RoPE factors reach the device."""
    kind, hf, m, _ = converted
    toks = random_prompt(20, m.n_vocab, seed=24)
    cpu = _core.Context(m, 64, 64, 2, "f32", "off")
    cpu.decode(toks, all_logits=True)
    sim = _core.Context(m, 64, 64, 2, "f32", "off", device="sim", n_gpu_layers=hf.config.num_hidden_layers)
    assert rel_err(chunked_logits(sim, toks, 12), np.asarray(cpu.logits_all(), np.float64)) < RTOL, kind


def _copy_without(src, dst, drop):
    """A copy of a GGUF file without the metadata keys in drop (a llama.cpp-made file's layout)."""
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, _field(r, "general.architecture"))
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key in drop or key == "general.architecture":
            continue
        sub = f.types[1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, f.contents(), f.types[0], sub_type=sub)
    for t in r.tensors:
        w.add_tensor(t.name, np.array(t.data), raw_shape=list(reversed(t.shape.tolist())), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_gemma2_27b_attention_scale_without_the_key(tmp_path):
    """llama.cpp writes no attention.scale: its Gemma 2 27B (46 layers) scales by
    1/sqrt(n_embd / n_head) = query_pre_attn_scalar^-0.5, the other sizes by 1/sqrt(head_dim)."""
    d = str(tmp_path / "hf")
    os.makedirs(d)
    tinymodel.write_bpe_tokenizer(d, "gpt2")
    cfg = transformers.Gemma2Config(**{**COMMON, **dict(hidden_size=32, intermediate_size=32, num_hidden_layers=46,
                                                        num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                                                        query_pre_attn_scalar=16, sliding_window=4)})
    hf = tinymodel.randomize(tinymodel._from_config(transformers.Gemma2ForCausalLM, cfg), seed=7)
    hf.save_pretrained(d)
    ours = cv.convert(d, str(tmp_path / "ours.gguf"), type="f32", progress=False)
    assert abs(_field(gguf.GGUFReader(ours), "gemma2.attention.scale") - 0.25) < 1e-7
    _copy_without(ours, str(tmp_path / "lcpp.gguf"), {"gemma2.attention.scale"})
    m = _core.Model(str(tmp_path / "lcpp.gguf"))
    toks = random_prompt(10, m.n_vocab, seed=3)
    ctx = _core.Context(m, 32, 32, 2, type_kv=0)
    ctx.decode(toks, all_logits=True)
    assert rel_err(ctx.logits_all(), tinymodel.hf_logits(hf, toks)) < RTOL
    m.close()
