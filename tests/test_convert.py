"""pinfer convert (Hugging Face dir -> GGUF) and the qwen2/falcon runtimes vs transformers.

Tiny random models (llama silu/relu/relu-both, qwen2, falcon in its three
attention layouts and ReLU variant) are saved with save_pretrained (safetensors)
plus a tokenizer, converted with pinfer.convert, and run by pinfer: logits must
match transformers (float64) to 1e-4 relative (max abs diff / max abs logit),
whole-prompt and token by token through an F32 KV cache. Also: F16/BF16/Q8_0/Q4_0
output, bf16 and .bin inputs, tokenizer ids vs the reference tokenizers, and
clear errors for unsupported input.

Needs: pip install torch==2.13.0 transformers tokenizers sentencepiece safetensors gguf tqdm
"""
import json
import os

import gguf
import numpy as np
import pytest
import sentencepiece  # noqa: F401
import tokenizers  # noqa: F401
import torch
import transformers  # noqa: F401

import tinymodel
from conftest import chunked_logits, random_prompt, rel_err
from pinfer import _core  # noqa: E402
from pinfer import convert as cv  # noqa: E402

RTOL = 1e-4


class ReluBothMLP(torch.nn.Module):
    """Bamboo's FFN, relu(gate) * relu(up), swapped into HF's LlamaMLP as the reference."""

    def forward(self, x):
        return self.down_proj(torch.relu(self.gate_proj(x)) * torch.relu(self.up_proj(x)))


def build(kind, d):
    """(hf_model, expected pinfer.ffn_act) for one case, saved to directory d."""
    os.makedirs(d, exist_ok=True)
    if kind == "llama_silu_spm":
        n_vocab = tinymodel.write_spm_tokenizer(d)
        hf = tinymodel.make_hf_model(n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=96, n_vocab=n_vocab, seed=1)
        ffn = "silu"
    elif kind == "llama_relu":
        tinymodel.write_bpe_tokenizer(d, "gpt2")
        hf = tinymodel.make_hf_model(n_embd=32, n_layer=2, n_head=2, n_ff=64, act="relu", tied=True, seed=2)
        ffn = "relu"
    elif kind == "llama_relu_both":
        tinymodel.write_bpe_tokenizer(d, "gpt2")
        hf = tinymodel.make_hf_model(n_embd=32, n_layer=2, n_head=4, n_head_kv=1, n_ff=48, act="relu", seed=3)
        for layer in hf.model.layers:
            layer.mlp.__class__ = type("M", (ReluBothMLP, type(layer.mlp)), {})
        hf.config.pinfer_ffn_act = "relu-both"  # the explicit signal in config.json
        ffn = "relu-both"
    elif kind == "qwen2":
        tinymodel.write_bpe_tokenizer(d, "qwen2")
        hf = tinymodel.make_hf_qwen2(n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=96, seed=4)
        ffn = "silu"
    elif kind == "qwen2_tied":
        tinymodel.write_bpe_tokenizer(d, "qwen2")
        hf = tinymodel.make_hf_qwen2(n_embd=48, n_layer=1, n_head=3, n_head_kv=1, n_ff=40, tied=True, seed=5)
        ffn = "silu"
    elif kind == "falcon_mq":  # Falcon-7B layout: one KV head, shared input norm
        tinymodel.write_bpe_tokenizer(d, "gpt2")
        hf = tinymodel.make_hf_falcon(n_embd=64, n_layer=2, n_head=4, new_arch=False, multi_query=True, seed=6)
        ffn = "gelu"
    elif kind == "falcon_mha":  # per-head interleaved q/k/v
        tinymodel.write_bpe_tokenizer(d, "gpt2")
        hf = tinymodel.make_hf_falcon(n_embd=32, n_layer=2, n_head=2, new_arch=False, multi_query=False, seed=7)
        ffn = "gelu"
    elif kind == "falcon_new":  # Falcon-40B layout: KV groups, ln_attn + ln_mlp
        tinymodel.write_bpe_tokenizer(d, "gpt2")
        hf = tinymodel.make_hf_falcon(n_embd=64, n_layer=2, n_head=4, new_arch=True, n_head_kv=2, seed=8)
        ffn = "gelu"
    elif kind == "falcon_relu":  # ReluFalcon: down(relu(up x))
        tinymodel.write_bpe_tokenizer(d, "gpt2")
        hf = tinymodel.make_hf_falcon(n_embd=32, n_layer=2, n_head=4, new_arch=True, n_head_kv=2, act="relu",
                                      n_ff=80, seed=9)
        ffn = "relu"
    else:
        raise KeyError(kind)
    hf.save_pretrained(d)
    return hf, ffn


KINDS = ["llama_silu_spm", "llama_relu", "llama_relu_both", "qwen2", "qwen2_tied", "falcon_mq", "falcon_mha",
         "falcon_new", "falcon_relu"]


@pytest.fixture(scope="module", params=KINDS)
def converted(request, tmp_path_factory):
    d = str(tmp_path_factory.mktemp(request.param))
    hf, ffn = build(request.param, os.path.join(d, "hf"))
    out = cv.convert(os.path.join(d, "hf"), os.path.join(d, "f32.gguf"), type="f32", progress=False)
    m = _core.Model(out)
    yield request.param, hf, ffn, m, d
    m.close()


def test_metadata(converted):
    kind, hf, ffn, m, d = converted
    r = _core.GGUFReader(os.path.join(d, "f32.gguf")) if hasattr(_core, "GGUFReader") else None
    arch = kind.split("_")[0]
    assert m.arch == arch
    assert m.meta("pinfer.ffn_act") == ffn
    assert m.n_vocab == hf.config.vocab_size
    if r is not None:
        assert r.get("general.file_type") == 0
    # tensor names and hyperparameter keys are the ones the gguf package (llama.cpp's
    # Python side) declares for this architecture, so llama.cpp-made files line up
    garch = {"llama": gguf.MODEL_ARCH.LLAMA, "qwen2": gguf.MODEL_ARCH.QWEN2, "falcon": gguf.MODEL_ARCH.FALCON}[arch]
    n_layer = hf.config.num_hidden_layers
    allowed = {gguf.TENSOR_NAMES[t].format(bid=i) + sfx for t in gguf.MODEL_TENSORS[garch]
               for i in range(n_layer) for sfx in (".weight", ".bias")}
    fr = gguf.GGUFReader(os.path.join(d, "f32.gguf"))
    names = [t.name for t in fr.tensors]
    assert set(names) <= allowed, sorted(set(names) - allowed)
    keys = {k.format(arch=arch) for k in (gguf.Keys.LLM.CONTEXT_LENGTH, gguf.Keys.LLM.EMBEDDING_LENGTH,
                                          gguf.Keys.LLM.BLOCK_COUNT, gguf.Keys.LLM.FEED_FORWARD_LENGTH,
                                          gguf.Keys.Attention.HEAD_COUNT, gguf.Keys.Attention.HEAD_COUNT_KV)}
    keys.add((gguf.Keys.Attention.LAYERNORM_EPS if arch == "falcon" else gguf.Keys.Attention.LAYERNORM_RMS_EPS)
             .format(arch=arch))
    assert keys <= set(fr.fields), sorted(keys - set(fr.fields))
    if arch == "falcon":
        assert "blk.0.attn_qkv.weight" in names
        assert ("blk.0.attn_norm_2.weight" in names) == hf.config.new_decoder_architecture
    if arch == "qwen2":
        assert "blk.0.attn_q.bias" in names
    # no temp file left next to the output
    assert not [f for f in os.listdir(d) if f.startswith(".pinfer-convert-")]


def test_whole_prompt(converted):
    kind, hf, _, m, _ = converted
    toks = random_prompt(24, m.n_vocab, seed=11)
    ref = tinymodel.hf_logits(hf, toks)
    ctx = _core.Context(m, 64, 64, 2, type_kv=0)
    ctx.decode(toks, all_logits=True)
    assert rel_err(ctx.logits_all(), ref) < RTOL, kind


def test_token_by_token(converted):
    kind, hf, _, m, _ = converted
    toks = random_prompt(16, m.n_vocab, seed=12)
    ref = tinymodel.hf_logits(hf, toks)
    ctx = _core.Context(m, 32, 8, 2, type_kv=0)
    assert rel_err(chunked_logits(ctx, toks, 0), ref) < RTOL, kind


def test_falcon_exact_gelu_is_approximated(tmp_path):
    """Falcon checkpoints use exact (erf) GELU; pinfer runs the tanh form, as llama.cpp does."""
    d = str(tmp_path / "hf")
    os.makedirs(d)
    tinymodel.write_bpe_tokenizer(d, "gpt2")
    hf = tinymodel.make_hf_falcon(n_embd=64, n_layer=2, n_head=4, act="gelu", seed=61)
    hf.save_pretrained(d)
    m = _core.Model(cv.convert(d, str(tmp_path / "m.gguf"), type="f32", progress=False))
    assert m.meta("pinfer.ffn_act") == "gelu"
    toks = random_prompt(16, m.n_vocab, seed=62)
    ctx = _core.Context(m, 32, 32, 2, type_kv=0)
    ctx.decode(toks, all_logits=True)
    assert rel_err(ctx.logits_all(), tinymodel.hf_logits(hf, toks)) < 3e-3


# ---- other output types ----

@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory):
    """Two models with all matrix rows a multiple of 32 (quantizable everywhere)."""
    d = tmp_path_factory.mktemp("types")
    out = {}
    ld = str(d / "llama")
    os.makedirs(ld)
    tinymodel.write_bpe_tokenizer(ld, "gpt2")
    hf = tinymodel.make_hf_model(n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=128, seed=21)
    hf.save_pretrained(ld)
    out["llama"] = (ld, hf)
    fd = str(d / "falcon")
    os.makedirs(fd)
    tinymodel.write_bpe_tokenizer(fd, "gpt2")
    hf = tinymodel.make_hf_falcon(n_embd=64, n_layer=2, n_head=4, new_arch=True, n_head_kv=2, seed=22)
    hf.save_pretrained(fd)
    out["falcon"] = (fd, hf)
    return out


# bounds well above each type's rounding error, far below a wrong model (~1)
BOUNDS = {"f16": 2e-3, "bf16": 2e-2, "q8_0": 5e-2, "q4_0": 0.25}


@pytest.mark.parametrize("arch", ["llama", "falcon"])
@pytest.mark.parametrize("qtype", sorted(BOUNDS))
def test_types_load_and_match(hf_dirs, tmp_path, arch, qtype):
    hf_dir, hf = hf_dirs[arch]
    out = cv.convert(hf_dir, str(tmp_path / f"{qtype}.gguf"), type=qtype, progress=False)
    want = {"f16": gguf.GGMLQuantizationType.F16, "bf16": gguf.GGMLQuantizationType.BF16,
            "q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0}[qtype]
    for t in gguf.GGUFReader(out).tensors:
        expect = gguf.GGMLQuantizationType.F32 if len(t.shape) == 1 else want
        assert t.tensor_type == expect, t.name
    m = _core.Model(out)
    toks = random_prompt(16, m.n_vocab, seed=23)
    ctx = _core.Context(m, 32, 32, 2, type_kv=0)
    ctx.decode(toks, all_logits=True)
    err = rel_err(ctx.logits_all(), tinymodel.hf_logits(hf, toks))
    assert err < BOUNDS[qtype], err


def test_quantized_data_matches_reference_quantizer(hf_dirs, tmp_path):
    """Q8_0 blocks in the file are the gguf package's quantization of the HF weight."""
    hf_dir, hf = hf_dirs["llama"]
    out = cv.convert(hf_dir, str(tmp_path / "q8.gguf"), type="q8_0", progress=False)
    t = {t.name: t for t in gguf.GGUFReader(out).tensors}["blk.0.ffn_down.weight"]
    w = hf.model.layers[0].mlp.down_proj.weight.detach().numpy()
    np.testing.assert_allclose(gguf.dequantize(t.data, t.tensor_type).reshape(w.shape),
                               gguf.dequantize(gguf.quantize(w, gguf.GGMLQuantizationType.Q8_0),
                                               gguf.GGMLQuantizationType.Q8_0).reshape(w.shape), atol=1e-6)


def test_odd_rows_fall_back_to_f16(tmp_path):
    hf, _ = build("falcon_relu", str(tmp_path / "hf"))  # n_embd 32, n_ff 80: ffn_down rows are 80 long
    out = cv.convert(str(tmp_path / "hf"), str(tmp_path / "q.gguf"), type="q8_0", progress=False)
    types = {t.name: t.tensor_type for t in gguf.GGUFReader(out).tensors}
    assert types["blk.0.ffn_down.weight"] == gguf.GGMLQuantizationType.F16
    assert types["blk.0.ffn_up.weight"] == gguf.GGMLQuantizationType.Q8_0
    m = _core.Model(out)
    toks = random_prompt(8, m.n_vocab, seed=3)
    ctx = _core.Context(m, 16, 16, 1, type_kv=0)
    ctx.decode(toks, all_logits=True)
    assert rel_err(ctx.logits_all(), tinymodel.hf_logits(hf, toks)) < BOUNDS["q8_0"]


# ---- other inputs ----

def test_bf16_and_bin_inputs(tmp_path):
    hf = tinymodel.make_hf_model(n_embd=32, n_layer=1, n_head=2, n_ff=64, seed=31)
    sd = {k: v.contiguous() for k, v in hf.state_dict().items()}
    a, b = str(tmp_path / "bf16"), str(tmp_path / "bin")
    hf.config.architectures = ["LlamaForCausalLM"]
    for dd in (a, b):
        os.makedirs(dd)
        tinymodel.write_bpe_tokenizer(dd, "gpt2")
        hf.config.to_json_file(os.path.join(dd, "config.json"))
    from safetensors.torch import save_file

    save_file({k: v.to(torch.bfloat16) for k, v in sd.items()}, os.path.join(a, "model.safetensors"))
    torch.save(sd, os.path.join(b, "pytorch_model.bin"))
    ga = cv.convert(a, str(tmp_path / "a.gguf"), type="f32", progress=False)
    gb16 = cv.convert(a, str(tmp_path / "a16.gguf"), type="bf16", progress=False)
    gb = cv.convert(b, str(tmp_path / "b.gguf"), type="f32", progress=False)
    ta = {t.name: np.array(t.data) for t in gguf.GGUFReader(ga).tensors}
    t16 = {t.name: t for t in gguf.GGUFReader(gb16).tensors}
    tb = {t.name: np.array(t.data) for t in gguf.GGUFReader(gb).tensors}
    for hf_name, name in (("model.embed_tokens.weight", "token_embd.weight"),
                          ("model.layers.0.mlp.up_proj.weight", "blk.0.ffn_up.weight")):
        exact_bf16 = sd[hf_name].to(torch.bfloat16).to(torch.float32).numpy()
        np.testing.assert_array_equal(ta[name], exact_bf16)  # bf16 read exactly
        np.testing.assert_array_equal(gguf.dequantize(t16[name].data, t16[name].tensor_type).reshape(exact_bf16.shape),
                                      exact_bf16)  # and written back bit for bit
        np.testing.assert_array_equal(tb[name], sd[hf_name].numpy())  # .bin: float32 as is


# ---- tokenizers ----

TEXTS = ["Hello world", " the other thing, in 2024: 12345 tokens!", "café naïve 日本語 🙂",
         "line one\n\nline two\t tab", "<|im_start|>user\nhi<|im_end|>"]


@pytest.mark.parametrize("kind", ["gpt2", "qwen2", "falcon"])
def test_bpe_tokenizer_ids_match_hf(tmp_path, kind):
    from transformers import PreTrainedTokenizerFast

    d = str(tmp_path / "hf")
    os.makedirs(d)
    tinymodel.write_bpe_tokenizer(d, kind)
    hf = tinymodel.make_hf_model(n_embd=32, n_layer=1, n_head=2, n_ff=32, seed=41)
    hf.save_pretrained(d)
    out = str(tmp_path / "m.gguf")
    # through the CLI entry, with the progress bar
    assert _cli(["convert", d, "-o", out, "--type", "f32"]) == 0
    meta = gguf.GGUFReader(out).fields
    pre = bytes(meta["tokenizer.ggml.pre"].parts[-1]).decode()
    assert pre == kind
    ref = PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"))
    m = _core.Model(out)
    assert m.chat_template == tinymodel.CHATML_TEMPLATE
    assert m.eos == ref.convert_tokens_to_ids("<|im_end|>")
    for text in TEXTS:
        ids = m.tokenize(text, add_special=False, parse_special=True)
        assert list(ids) == ref.encode(text, add_special_tokens=False), text
        assert m.detokenize(ids, special=True).decode() == text


def _spm_model(tmp_path):
    d = str(tmp_path / "hf")
    os.makedirs(d)
    n_vocab = tinymodel.write_spm_tokenizer(d)
    hf = tinymodel.make_hf_model(n_embd=32, n_layer=1, n_head=2, n_ff=32, n_vocab=n_vocab, seed=42)
    hf.save_pretrained(d)
    out = cv.convert(d, str(tmp_path / "m.gguf"), type="f32", progress=False)
    import sentencepiece as spm

    return _core.Model(out), spm.SentencePieceProcessor(model_file=os.path.join(d, "tokenizer.model"))


SPM_TEXTS = ["Hello world", "the other thing, in 2024: 12345 tokens!", "café naïve 日本語 🙂",
             "line one\n\nline two\t tab"]


def test_spm_tokenizer_ids_match_sentencepiece(tmp_path):
    m, sp = _spm_model(tmp_path)
    assert m.bos == sp.bos_id() and m.eos == sp.eos_id()
    for text in SPM_TEXTS:
        ids = list(m.tokenize(text, add_special=True))
        assert ids == [sp.bos_id()] + sp.encode(text), text
        # pinfer keeps the dummy-prefix space SentencePiece adds; sentencepiece drops it
        assert m.detokenize(ids[1:]).decode()[1:] == sp.decode(ids[1:])


# ---- errors ----

def _cli(argv):
    import argparse

    ap = argparse.ArgumentParser(prog="pinfer")
    cv.add_parser(ap.add_subparsers())
    args = ap.parse_args(argv)
    return args.func(args)


def test_errors(tmp_path, capsys):
    d = str(tmp_path / "m")
    os.makedirs(d)
    out = str(tmp_path / "out.gguf")
    with pytest.raises(cv.ConvertError, match="no config.json"):
        cv.convert(d, out, progress=False)
    assert _cli(["convert", d, "-o", out, "--no-progress"]) == 1
    assert "no config.json" in capsys.readouterr().err

    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox"}, f)
    with pytest.raises(cv.ConvertError, match="unsupported architecture.*GPTNeoXForCausalLM"):
        cv.convert(d, out, progress=False)

    with pytest.raises(cv.ConvertError, match="unknown --type 'q3_x'"):
        cv.convert(d, out, type="q3_x", progress=False)
    with pytest.raises(SystemExit):
        _cli(["convert", d, "-o", out, "--type", "q3_x"])
    assert "invalid choice: 'q3_x'" in capsys.readouterr().err
    assert not os.path.exists(out)


def test_refuses_unsupported_options(tmp_path):
    d = str(tmp_path / "hf")
    os.makedirs(d)
    tinymodel.write_bpe_tokenizer(d, "gpt2")
    hf = tinymodel.make_hf_model(n_embd=32, n_layer=1, n_head=2, n_ff=32, seed=51)
    hf.save_pretrained(d)
    out = str(tmp_path / "o.gguf")
    # relu-both needs hidden_act relu
    with pytest.raises(cv.ConvertError, match="relu-both.*contradicts hidden_act 'silu'"):
        cv.convert(d, out, ffn_act="relu-both", progress=False)
    cfg = json.load(open(os.path.join(d, "config.json")))
    cfg["rope_scaling"] = {"rope_type": "dynamic", "factor": 4.0}
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    with pytest.raises(cv.ConvertError, match="unsupported RoPE scaling 'dynamic'"):
        cv.convert(d, out, progress=False)
    cfg["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0}  # YaRN needs its original context
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    with pytest.raises(cv.ConvertError, match="original_max_position_embeddings"):
        cv.convert(d, out, progress=False)
    # a failed conversion leaves neither the output nor a temp file
    assert sorted(os.listdir(tmp_path)) == ["hf"]
