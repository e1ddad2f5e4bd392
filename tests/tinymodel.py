"""Tiny random llama models as GGUF files, for tests.

A random Hugging Face ``LlamaForCausalLM`` is written to GGUF (F32) with the
``gguf`` package, the way llama.cpp's converter lays it out, so tests can compare
pinfer's logits with transformers' on the same weights. The vocabulary is a small
byte-level BPE ("gpt2" model): the 256 byte tokens, a few merges, and the chatml
special tokens, with a chatml chat template.

Layout facts used (from the GGUF spec / llama.cpp converter):
- q_proj and k_proj rows are permuted within each head for GGUF's RoPE pairs, and
  token text is in GPT-2's byte alphabet, as the converter does (pinfer.gguf_layout).
- numpy arrays of shape [out, in] are stored with ne = [in, out] (row-major).
"""
from __future__ import annotations

import os
from typing import List, Optional, Tuple

import numpy as np

from pinfer.gguf_layout import bytes_to_unicode, permute_rope_rows

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# A few merges of common English pairs (in GPT-2's byte-to-unicode alphabet: Ġ is a space).
MERGES = ["Ġ t", "h e", "i n", "Ġ a", "e r", "o n", "r e", "Ġt he", "a n", "Ġ s", "o u", "Ġ w", "e n", "in g"]


def byte_bpe_vocab(merges: Optional[List[str]] = None) -> Tuple[List[str], List[int], List[str]]:
    """(tokens, token_types, merges) of a byte-level BPE vocabulary.

    Ids: 0..255 the bytes (in byte order), then one token per merge, then the
    special tokens (type CONTROL)."""
    merges = list(MERGES if merges is None else merges)
    b2u = bytes_to_unicode()
    tokens = [b2u[b] for b in range(256)]
    for m in merges:
        a, b = m.split(" ")
        assert a in tokens and b in tokens, m
        tokens.append(a + b)
    types = [1] * len(tokens)  # NORMAL
    tokens += SPECIAL_TOKENS
    types += [3] * len(SPECIAL_TOKENS)  # CONTROL
    return tokens, types, merges


def vocab_size(merges: Optional[List[str]] = None) -> int:
    return len(byte_bpe_vocab(merges)[0])


def token_id(name: str, merges: Optional[List[str]] = None) -> int:
    return byte_bpe_vocab(merges)[0].index(name)


def make_hf_model(n_embd: int = 64, n_layer: int = 2, n_head: int = 4, n_head_kv: Optional[int] = None,
                  n_ff: int = 96, n_ctx: int = 256, rope_theta: float = 10000.0, rms_eps: float = 1e-5,
                  tied: bool = False, act: str = "silu", seed: int = 0, n_vocab: Optional[int] = None,
                  head_dim: Optional[int] = None):
    """A LlamaForCausalLM (float32, eval mode) with random weights of useful scale
    (unit-variance activations, so logits are far from uniform)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    n_head_kv = n_head if n_head_kv is None else n_head_kv
    head_dim = head_dim or n_embd // n_head
    cfg = LlamaConfig(
        vocab_size=n_vocab or vocab_size(), hidden_size=n_embd, intermediate_size=n_ff,
        num_hidden_layers=n_layer, num_attention_heads=n_head, num_key_value_heads=n_head_kv,
        head_dim=head_dim, max_position_embeddings=n_ctx, rms_norm_eps=rms_eps, rope_theta=rope_theta,
        tie_word_embeddings=tied, hidden_act=act, attention_bias=False, mlp_bias=False,
        bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(seed)
    model = LlamaForCausalLM._from_config(cfg, attn_implementation="eager", dtype=torch.float32) \
        if hasattr(LlamaForCausalLM, "_from_config") else LlamaForCausalLM(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:  # norm weights: around 1
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:  # [out, in]: keep the output's variance near the input's
                p.copy_(torch.randn(p.shape, generator=g) / np.sqrt(p.shape[1]))
    model = model.float().eval()
    return model


def write_gguf(model, path: str, ffn_act: str = "silu", chat_template: Optional[str] = CHATML_TEMPLATE,
               merges: Optional[List[str]] = None, pre: str = "gpt2", name: str = "tiny-llama",
               add_bos: bool = False, eos_always: float = 0.0, pooling_type: Optional[int] = None) -> str:
    """Write a LlamaForCausalLM to `path` as an F32 GGUF file; returns path.

    pooling_type: written as ``llama.pooling_type`` (llama.cpp's numbers) when given.
    ffn_act: written as ``pinfer.ffn_act`` when not "silu".
    eos_always: if > 0, rig the output so the EOS token (<|im_end|>) wins every
    step by about this margin (for end-of-generation tests); HF's model is changed too.
    """
    import gguf
    import torch

    cfg = model.config
    n_head, n_head_kv = cfg.num_attention_heads, cfg.num_key_value_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_head
    tokens, types, merges = byte_bpe_vocab(merges)
    assert cfg.vocab_size == len(tokens), "model vocab must match the tiny tokenizer"
    eos = tokens.index("<|im_end|>")
    bos = tokens.index("<|endoftext|>")

    if eos_always > 0:
        _rig_eos(model, eos, eos_always)

    rope_theta = (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta", None) \
        or getattr(cfg, "rope_theta", 10000.0)
    sd = {k: v.detach().to(torch.float32).numpy() for k, v in model.state_dict().items()}

    w = gguf.GGUFWriter(path, "llama")
    w.add_name(name)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_freq_base(float(rope_theta))
    w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    w.add_rope_dimension_count(head_dim)
    if head_dim * n_head != cfg.hidden_size:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_vocab_size(len(tokens))
    w.add_file_type(0)  # ALL_F32
    if ffn_act != "silu":
        w.add_string("pinfer.ffn_act", ffn_act)
    if pooling_type is not None:
        w.add_uint32("llama.pooling_type", pooling_type)

    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)
    w.add_add_bos_token(add_bos)
    if chat_template:
        w.add_chat_template(chat_template)

    def t(name: str, arr: np.ndarray) -> None:
        w.add_tensor(name, np.ascontiguousarray(arr, dtype=np.float32))

    t("token_embd.weight", sd["model.embed_tokens.weight"])
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        t(f"blk.{i}.attn_norm.weight", sd[p + "input_layernorm.weight"])
        t(f"blk.{i}.attn_q.weight", permute_rope_rows(sd[p + "self_attn.q_proj.weight"], n_head))
        t(f"blk.{i}.attn_k.weight", permute_rope_rows(sd[p + "self_attn.k_proj.weight"], n_head_kv))
        t(f"blk.{i}.attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        t(f"blk.{i}.attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        t(f"blk.{i}.ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])
        t(f"blk.{i}.ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
        t(f"blk.{i}.ffn_up.weight", sd[p + "mlp.up_proj.weight"])
        t(f"blk.{i}.ffn_down.weight", sd[p + "mlp.down_proj.weight"])
    t("output_norm.weight", sd["model.norm.weight"])
    if not cfg.tie_word_embeddings:
        t("output.weight", sd["lm_head.weight"])

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _rig_eos(model, eos: int, margin: float) -> None:
    """Make `eos` the argmax everywhere: residual channel 0 is held at a large
    constant (embeddings set it, no layer writes it), so after the final norm it
    is large and positive, and only the EOS output row reads it."""
    import torch

    with torch.no_grad():
        m = model.model
        m.embed_tokens.weight[:, 0] = 50.0
        for layer in m.layers:
            layer.self_attn.o_proj.weight[0, :] = 0.0
            layer.mlp.down_proj.weight[0, :] = 0.0
        m.norm.weight[0] = 1.0
        if model.config.tie_word_embeddings:
            raise ValueError("eos_always needs an untied output")
        model.lm_head.weight[:, 0] = 0.0
        model.lm_head.weight[eos, 0] = margin


def tiny_model(path: str, seed: int = 0, ffn_act: str = "silu", eos_always: float = 0.0,
               chat_template: Optional[str] = CHATML_TEMPLATE, **cfg):
    """Create a random model and write it to `path`; returns (path, hf_model)."""
    act = {"silu": "silu", "relu": "relu", "relu2": "relu2"}[ffn_act]
    model = make_hf_model(seed=seed, act=act, **cfg)
    write_gguf(model, path, ffn_act=ffn_act, eos_always=eos_always, chat_template=chat_template)
    return path, model


def hf_logits(model, tokens: List[int]) -> np.ndarray:
    """float64 [n, n_vocab] logits of HF's model (run in float64) over the whole sequence."""
    import copy

    import torch

    m64 = copy.deepcopy(model).to(torch.float64)
    with torch.no_grad():
        out = m64(torch.tensor([tokens], dtype=torch.long))
    return out.logits[0].to(torch.float64).numpy()


if __name__ == "__main__":  # write a sample model: python tests/tinymodel.py out.gguf
    import sys

    out = sys.argv[1] if len(sys.argv) > 1 else "tiny.gguf"
    tiny_model(out)
    print(out, os.path.getsize(out), "bytes")


# ---- Hugging Face model directories (for the converter tests) ----

def randomize(model, seed: int = 0):
    """Random weights of useful scale for any of the tiny HF models: norm weights
    around 1, biases small, embeddings unit variance, matrices ~1/sqrt(fan_in)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            elif p.ndim == 1:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif "embed" in name or "word_embeddings" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / np.sqrt(p.shape[1]))
    return model.float().eval()


def _from_config(cls, cfg):
    import torch

    return cls._from_config(cfg, attn_implementation="eager", dtype=torch.float32)


def make_hf_qwen2(n_embd: int = 64, n_layer: int = 2, n_head: int = 4, n_head_kv: int = 2, n_ff: int = 96,
                  tied: bool = False, rope_theta: float = 1000000.0, seed: int = 0, n_vocab: Optional[int] = None):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=n_vocab or vocab_size(), hidden_size=n_embd, intermediate_size=n_ff,
                      num_hidden_layers=n_layer, num_attention_heads=n_head, num_key_value_heads=n_head_kv,
                      max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=rope_theta,
                      tie_word_embeddings=tied, use_sliding_window=False,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return randomize(_from_config(Qwen2ForCausalLM, cfg), seed)


def make_hf_falcon(n_embd: int = 64, n_layer: int = 2, n_head: int = 4, new_arch: bool = False,
                   multi_query: bool = True, n_head_kv: Optional[int] = None, act: str = "gelu_pytorch_tanh",
                   n_ff: Optional[int] = None, seed: int = 0, n_vocab: Optional[int] = None):
    from transformers import FalconConfig, FalconForCausalLM

    cfg = FalconConfig(vocab_size=n_vocab or vocab_size(), hidden_size=n_embd, num_hidden_layers=n_layer,
                       num_attention_heads=n_head, num_kv_heads=n_head_kv, new_decoder_architecture=new_arch,
                       multi_query=multi_query, parallel_attn=True, bias=False, alibi=False,
                       activation=act, ffn_hidden_size=n_ff or 4 * n_embd, max_position_embeddings=256,
                       layer_norm_epsilon=1e-5, rope_theta=10000.0, tie_word_embeddings=True,
                       bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return randomize(_from_config(FalconForCausalLM, cfg), seed)


# The pre-tokenizer regex of Qwen2's tokenizer.json (digits one at a time).
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def falcon_pre_tokenizer():
    """The pre-tokenizer of Falcon's tokenizer.json (tiiuae/falcon-*)."""
    from tokenizers import Regex, pre_tokenizers

    return pre_tokenizers.Sequence([
        pre_tokenizers.Punctuation(behavior="contiguous"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.Split(Regex("[0-9][0-9][0-9]"), behavior="isolated", invert=False)])


def write_bpe_tokenizer(out_dir: str, style: str = "gpt2", merges: Optional[List[str]] = None) -> None:
    """tokenizer.json (built with the `tokenizers` library) + tokenizer_config.json
    for the tiny byte-level BPE vocabulary; style "gpt2" (ByteLevel regex),
    "falcon" (Falcon's sequence) or "qwen2" (Split on QWEN2_REGEX, then ByteLevel
    without its regex)."""
    import json

    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    tokens, types, merges = byte_bpe_vocab(merges)
    n_normal = len(tokens) - len(SPECIAL_TOKENS)
    bpe = models.BPE(vocab={t: i for i, t in enumerate(tokens[:n_normal])},
                     merges=[tuple(m.split(" ")) for m in merges])
    tk = Tokenizer(bpe)
    if style == "gpt2":
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    elif style == "falcon":
        tk.pre_tokenizer = falcon_pre_tokenizer()
    else:
        tk.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens(SPECIAL_TOKENS)
    assert tk.get_vocab_size() == len(tokens)
    tk.save(os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|endoftext|>",
                   "eos_token": "<|im_end|>", "add_bos_token": False, "chat_template": CHATML_TEMPLATE}, f)


SPM_CORPUS = ("The quick brown fox jumps over the lazy dog. " * 3 + "Hello world, hello there! " * 3 +
              "Numbers 12345 and symbols #$% appear too. Unicode: café, naïve, 日本語. " * 2).split(". ")


def write_spm_tokenizer(out_dir: str, n_vocab: int = 320) -> int:
    """Train a tiny SentencePiece BPE model (byte fallback, no normalization, as Llama's)
    into out_dir/tokenizer.model,
    with a llama-style tokenizer_config.json; returns its vocabulary size."""
    import json

    import sentencepiece as spm

    prefix = os.path.join(out_dir, "spm")
    spm.SentencePieceTrainer.train(sentence_iterator=iter(SPM_CORPUS * 20), model_prefix=prefix,
                                   vocab_size=n_vocab, model_type="bpe", byte_fallback=True,
                                   character_coverage=1.0, normalization_rule_name="identity",
                                   remove_extra_whitespaces=False, bos_id=1, eos_id=2, unk_id=0, pad_id=-1,
                                   hard_vocab_limit=False, minloglevel=2)
    os.replace(prefix + ".model", os.path.join(out_dir, "tokenizer.model"))
    os.remove(prefix + ".vocab")
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True}, f)
    return spm.SentencePieceProcessor(model_file=os.path.join(out_dir, "tokenizer.model")).vocab_size()


def make_sparse_hf_llama(d, act="relu", seed=1, shift=0.6):
    """A tiny llama (saved as a Hugging Face directory d) with real activation
    sparsity: residual channel 0 is held at a constant (the embeddings set it, no
    layer writes it) and every gate row reads it with its own negative weight in
    [-shift, 0), a per-neuron bias that skews the firing frequencies."""
    import torch

    os.makedirs(d, exist_ok=True)
    m = make_hf_model(n_embd=64, n_layer=2, n_ff=128, act=act, seed=seed)
    g = torch.Generator().manual_seed(seed + 10)
    with torch.no_grad():
        m.model.embed_tokens.weight[:, 0] = 4.0
        for layer in m.model.layers:
            layer.self_attn.o_proj.weight[0, :] = 0.0
            layer.mlp.down_proj.weight[0, :] = 0.0
            layer.post_attention_layernorm.weight[0] = 1.0
            n = layer.mlp.gate_proj.weight.shape[0]
            layer.mlp.gate_proj.weight[:, 0] = -shift * torch.rand(n, generator=g)
    m.config.architectures = ["LlamaForCausalLM"]
    write_bpe_tokenizer(d, "gpt2")
    m.save_pretrained(d)
    return m
