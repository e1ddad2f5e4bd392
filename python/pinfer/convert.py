"""Convert a Hugging Face model directory to a GGUF file pinfer (and llama.cpp) can load.

    pinfer convert HF_DIR -o model.gguf --type f16

Supported architectures (config.json "architectures"; the table FAMILIES):

- LlamaForCausalLM, MistralForCausalLM -> GGUF "llama". q_proj/k_proj rows are
  permuted within each head because GGUF's llama RoPE rotates adjacent pairs
  (2i, 2i+1) where Hugging Face rotates halves (i, i + d/2).
  FFN activation (written as ``pinfer.ffn_act``): hidden_act "silu" -> SwiGLU;
  "relu" -> ReGLU, relu(gate) * up (ReluLLaMA, ProSparse).
  Bamboo-style relu(gate) * relu(up) ("relu-both") is never guessed: it needs
  hidden_act "relu" AND an explicit signal, either ``"pinfer_ffn_act": "relu-both"``
  in config.json or ``--ffn-act relu-both`` (``convert(..., ffn_act="relu-both")``).
  Mistral's sliding_window -> llama.attention.sliding_window (every layer).
- Qwen2ForCausalLM -> "qwen2": q/k/v biases, NeoX RoPE (rows unpermuted).
- Qwen3ForCausalLM -> "qwen3": per-head q/k RMS norms (attn_q_norm, attn_k_norm).
- GemmaForCausalLM / Gemma2ForCausalLM / Gemma3ForCausalLM -> "gemma" / "gemma2" /
  "gemma3": GeGLU (tanh GELU), tied output; Gemma's RMSNorm scales by (1 + w), so
  every norm weight is written as w + 1 (as llama.cpp's converter does). Gemma 2/3:
  post_attention_norm, ffn_norm (the pre-FFN norm), post_ffw_norm; soft-capping
  (attn_logit_softcapping, final_logit_softcapping); sliding window on llama.cpp's
  fixed layer pattern (Gemma 2: every other layer, Gemma 3: 5 of 6; other
  layer_types are refused); attention.scale from query_pre_attn_scalar where it is
  not head_dim. Gemma 3: rope.freq_base_swa for the windowed layers.
- MixtralForCausalLM -> "llama" with llama.expert_count / expert_used_count, as
  llama.cpp writes Mixtral: block_sparse_moe.gate -> blk.N.ffn_gate_inp, and the
  experts' w1 / w3 / w2 stacked into the 3-D blk.N.ffn_gate_exps / ffn_up_exps /
  ffn_down_exps (numpy [n_expert, n_ff, d] and [n_expert, d, n_ff]).
- Phi3ForCausalLM -> "phi3": qkv_proj -> attn_qkv and gate_up_proj -> ffn_up stay
  fused, as llama.cpp writes them; sliding_window on every layer.
- FalconForCausalLM (also the older RWForCausalLM) -> "falcon": fused
  query_key_value rewritten as [all q heads; all k heads; all v heads], parallel
  attention + MLP, LayerNorm with bias, NeoX RoPE, ungated GELU MLP; with
  activation "relu" (ReluFalcon) pinfer.ffn_act = "relu". pinfer's GELU is the
  tanh approximation (as in llama.cpp), so a model trained with exact GELU is
  approximated (|error| < 4e-4 per activation).
- OPTForCausalLM -> "opt" (llama.cpp has no OPT: the names are pinfer's, see
  src/arch-opt.cpp): learned positions as position_embd, stored without HF's
  2 offset rows (row p is position p), LayerNorm with bias before each
  sublayer, or after each residual add when do_layer_norm_before is false
  (written as opt.layer_norm_before), biases on q/k/v/out and on the FFN
  (fc1 -> ffn_up, fc2 -> ffn_down), ReLU, tied or separate output;
  project_in / project_out (word_embed_proj_dim != hidden_size, OPT-350m) as
  proj_in / proj_out with opt.embedding_projection_length. GPT-2 byte-level
  BPE from tokenizer.json or from vocab.json + merges.txt; OPT prepends
  ``</s>`` as BOS, so add_bos defaults to true.

RoPE scaling (rope_parameters / rope_scaling), written as llama.cpp does: linear
and YaRN as rope.scaling.* keys (YaRN's frequency factors are computed at load);
llama3 as the rope_freqs tensor (each pair's angle divisor); LongRoPE (Phi-3) as
rope_factors_short / rope_factors_long with rope.scaling.attn_factor and
rope.scaling.original_context_length.

Weights come from *.safetensors (read here from the file header + a memory map,
which also covers bf16, which numpy cannot hold) or from PyTorch *.bin files
loaded with ``torch.load(weights_only=True)`` (never arbitrary unpickling).

Types: 1-D tensors (norms, biases) stay F32; 2-D weights get --type. A quantized
type needs rows whose length is a multiple of 32; other matrices fall back to F16
(and the converter says so). Quantization uses pinfer's own kernels.

The output is written to a temporary file next to the target and renamed into
place only when complete, so a failed conversion never leaves a partial file.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple, Union

import numpy as np

from .gguf_layout import permute_rope_rows
from .outfile import atomic_output, check_output

TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1")
# general.file_type values (llama.cpp's LLAMA_FTYPE_* numbering)
FILE_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q5_1": 9, "bf16": 32}
FFN_ACTS = ("silu", "gelu", "relu", "relu-both")

# GGUF token types
T_NORMAL, T_UNKNOWN, T_CONTROL, T_USER_DEFINED, T_UNUSED, T_BYTE = 1, 2, 3, 4, 5, 6


class ConvertError(ValueError):
    """A model or option the converter does not support (the message names it)."""


# ---------------------------------------------------------------- weights

_ST_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64}


class _SafetensorsFile:
    """One .safetensors file: an 8-byte little-endian header length, a JSON
    header {name: {dtype, shape, data_offsets}}, then the raw data. Tensors are
    views of a read-only memory map, converted on demand."""

    def __init__(self, path: str):
        self.path = path
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            if n <= 0 or n > 100 << 20:
                raise ConvertError(f"{path}: not a safetensors file (header length {n})")
            header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        self.base = 8 + n
        self.header = header
        self.map = np.memmap(path, dtype=np.uint8, mode="r")

    def names(self) -> List[str]:
        return list(self.header)

    def shape(self, name: str) -> Tuple[int, ...]:
        return tuple(self.header[name]["shape"])

    def get(self, name: str) -> np.ndarray:
        h = self.header[name]
        dt = _ST_DTYPES.get(h["dtype"])
        if dt is None:
            raise ConvertError(f"{self.path}: tensor {name} has unsupported dtype {h['dtype']}")
        a, b = h["data_offsets"]
        raw = self.map[self.base + a:self.base + b].view(dt).reshape(h["shape"])
        if h["dtype"] == "BF16":  # bf16 is the top half of a float32
            return (raw.astype(np.uint32) << 16).view(np.float32)
        return raw.astype(np.float32)


class _TorchFile:
    """A PyTorch .bin state dict, loaded with weights_only=True (tensors only)."""

    def __init__(self, path: str):
        try:
            import torch
        except ImportError as e:  # pragma: no cover - torch is optional
            raise ConvertError(f"{path}: reading PyTorch .bin weights needs torch (pip install torch)") from e
        self.path = path
        try:
            try:
                sd = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError:  # the legacy (pre-zip) format cannot be memory-mapped
                sd = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:
            raise ConvertError(f"{path}: cannot load as a plain tensor state dict ({e})") from e
        if not isinstance(sd, dict):
            raise ConvertError(f"{path}: expected a state dict, got {type(sd).__name__}")
        self.sd = {k: v for k, v in sd.items() if hasattr(v, "shape")}

    def names(self) -> List[str]:
        return list(self.sd)

    def shape(self, name: str) -> Tuple[int, ...]:
        return tuple(self.sd[name].shape)

    def get(self, name: str) -> np.ndarray:
        import torch

        return self.sd[name].to(torch.float32).numpy()


class _Weights:
    """All tensors of a model directory, by Hugging Face name."""

    def __init__(self, hf_dir: str):
        files = sorted(f for f in os.listdir(hf_dir) if f.endswith(".safetensors"))
        readers: List[Union[_SafetensorsFile, _TorchFile]]
        if files:
            readers = [_SafetensorsFile(os.path.join(hf_dir, f)) for f in files]
        else:
            files = sorted(f for f in os.listdir(hf_dir) if f.endswith(".bin") and "training_args" not in f)
            if not files:
                raise ConvertError(f"{hf_dir}: no *.safetensors or *.bin weight files")
            readers = [_TorchFile(os.path.join(hf_dir, f)) for f in files]
        self.where: Dict[str, object] = {}
        for r in readers:
            for n in r.names():
                self.where[n] = r

    def __contains__(self, name: str) -> bool:
        return name in self.where

    def names(self) -> List[str]:
        return list(self.where)

    def shape(self, name: str) -> Tuple[int, ...]:
        return self._r(name).shape(name)

    def get(self, name: str) -> np.ndarray:
        return self._r(name).get(name)

    def _r(self, name: str):
        if name not in self.where:
            raise ConvertError(f"tensor '{name}' is missing from the weight files")
        return self.where[name]


# ---------------------------------------------------------------- tokenizer

# Split regexes of known byte-level BPE pre-tokenizers -> tokenizer.ggml.pre
_LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def _bpe_pre(tj: dict) -> str:
    """tokenizer.ggml.pre of a byte-level BPE tokenizer.json, from its pre-tokenizer."""
    pt = tj.get("pre_tokenizer") or {}
    items = pt.get("pretokenizers", []) if pt.get("type") == "Sequence" else [pt]
    kinds = [p.get("type") for p in items]
    if kinds == ["ByteLevel"] and items[0].get("use_regex", True):
        return "gpt2"
    if kinds == ["Split", "ByteLevel"] and not items[1].get("use_regex", True):
        pat = items[0].get("pattern", {})
        regex = pat.get("Regex", pat.get("String"))
        if regex == _LLAMA3_RE:
            return "llama-bpe"
        if regex == _QWEN2_RE:
            return "qwen2"
    if kinds == ["Digits", "ByteLevel"] and items[0].get("individual_digits") and items[1].get("use_regex", True):
        return "smollm"
    if (kinds == ["Punctuation", "ByteLevel", "Digits", "Split"] and items[0].get("behavior") == "Contiguous"
            and items[1].get("use_regex", True) and not items[2].get("individual_digits")
            and items[3].get("pattern") == {"Regex": "[0-9][0-9][0-9]"} and items[3].get("behavior") == "Isolated"
            and not items[3].get("invert")):
        return "falcon"
    raise ConvertError(f"unsupported byte-level BPE pre-tokenizer {json.dumps(pt)[:300]} "
                       "(supported: gpt2, llama3, qwen2, smollm/starcoder, falcon styles)")


def _special_id(value, token_ids: Dict[str, int]) -> Optional[int]:
    if isinstance(value, dict):
        value = value.get("content")
    if isinstance(value, str):
        return token_ids.get(value)
    return None


def _read_json(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _slow_bpe_json(hf_dir: str) -> Optional[dict]:
    """A GPT-2 style vocab.json + merges.txt pair as the tokenizer.json it stands for."""
    vj, mt = os.path.join(hf_dir, "vocab.json"), os.path.join(hf_dir, "merges.txt")
    if not (os.path.exists(vj) and os.path.exists(mt)):
        return None
    with open(mt, encoding="utf-8") as f:
        merges = [ln.rstrip("\n") for ln in f if ln.strip() and not ln.startswith("#version")]
    return {"model": {"type": "BPE", "vocab": _read_json(vj), "merges": merges},
            "decoder": {"type": "ByteLevel"}, "pre_tokenizer": {"type": "ByteLevel", "use_regex": True}}


def _tokenizer_meta(hf_dir: str, cfg: dict, n_vocab: int, add_bos: Optional[bool] = None) -> dict:
    """tokenizer.ggml.* values (and the chat template) from the directory.
    add_bos: the family's default when tokenizer_config.json does not say."""
    tc_path = os.path.join(hf_dir, "tokenizer_config.json")
    tc = _read_json(tc_path) if os.path.exists(tc_path) else {}
    spm_path = os.path.join(hf_dir, "tokenizer.model")
    tj_path = os.path.join(hf_dir, "tokenizer.json")
    out: dict = {}
    if os.path.exists(spm_path):
        tokens, scores, types, add_prefix = _spm_vocab(spm_path)
        out.update(model="llama", scores=scores, add_space_prefix=add_prefix)
        add_bos_default = True
        tj = _read_json(tj_path) if os.path.exists(tj_path) else {}
    elif (bpe := _read_json(tj_path) if os.path.exists(tj_path) else _slow_bpe_json(hf_dir)) is not None:
        tj = bpe  # tokenizer.json, or the one a vocab.json + merges.txt pair stands for
        model = tj.get("model", {})
        if model.get("type") != "BPE":
            raise ConvertError(f"tokenizer.json model type '{model.get('type')}' is not supported "
                               "(supported: byte-level BPE, or SentencePiece via tokenizer.model)")
        dec = tj.get("decoder") or {}
        if dec.get("type") != "ByteLevel":
            raise ConvertError("tokenizer.json is a BPE tokenizer without a ByteLevel decoder; "
                               "SentencePiece-style models need their tokenizer.model")
        vocab = model["vocab"]
        tokens = [""] * len(vocab)
        for t, i in vocab.items():
            if i >= len(tokens):
                tokens.extend([""] * (i + 1 - len(tokens)))
            tokens[i] = t
        types = [T_NORMAL] * len(tokens)
        merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
        out.update(model="gpt2", pre=_bpe_pre(tj), merges=merges)
        add_bos_default = False
        post = tj.get("post_processor") or {}
        if post.get("type") == "TemplateProcessing":  # e.g. Llama 3 prepends <|begin_of_text|>
            single = post.get("single", [])
            add_bos_default = bool(single) and "SpecialToken" in single[0]
    else:
        raise ConvertError(f"{hf_dir}: no tokenizer (tokenizer.json, vocab.json + merges.txt, or tokenizer.model)")
    if add_bos is not None:
        add_bos_default = add_bos

    for at in tj.get("added_tokens", []):  # special / user tokens beyond the base vocabulary
        i, content = at["id"], at["content"]
        while i >= len(tokens):
            tokens.append(f"[PAD{len(tokens)}]")
            types.append(T_UNUSED)
            if "scores" in out:
                out["scores"].append(-1000.0)
        tokens[i] = content
        types[i] = T_CONTROL if at.get("special") else T_USER_DEFINED
    if len(tokens) > n_vocab:
        raise ConvertError(f"the tokenizer has {len(tokens)} tokens but the model's vocab_size is {n_vocab}")
    while len(tokens) < n_vocab:  # embedding rows past the tokenizer (padding)
        tokens.append(f"[PAD{len(tokens)}]")
        types.append(T_UNUSED)
        if "scores" in out:
            out["scores"].append(-1000.0)
    seen = set()
    for i, t in enumerate(tokens):  # GGUF readers map text -> id, so names must be unique
        if t in seen or t == "":
            tokens[i] = f"[PAD{i}]"
            types[i] = T_UNUSED
        seen.add(tokens[i])
    out["tokens"], out["types"] = tokens, types

    ids = {t: i for i, t in enumerate(tokens)}
    for key, name in (("bos", "bos_token"), ("eos", "eos_token"), ("unk", "unk_token"), ("pad", "pad_token")):
        i = _special_id(tc.get(name), ids)
        if i is None and isinstance(cfg.get(f"{key}_token_id"), int) and cfg[f"{key}_token_id"] < len(tokens):
            i = cfg[f"{key}_token_id"]
        if i is not None:
            out[key] = i
    out["add_bos"] = bool(tc.get("add_bos_token", add_bos_default)) and "bos" in out
    out["add_eos"] = bool(tc.get("add_eos_token", False)) and "eos" in out

    tmpl = tc.get("chat_template")
    jinja = os.path.join(hf_dir, "chat_template.jinja")
    if tmpl is None and os.path.exists(jinja):
        with open(jinja, encoding="utf-8") as f:
            tmpl = f.read()
    if isinstance(tmpl, list):  # [{"name": ..., "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in tmpl}
        tmpl = named.get("default") or next(iter(named.values()), None)
    if isinstance(tmpl, str) and tmpl:
        out["chat_template"] = tmpl
    return out


def _spm_vocab(path: str):
    """(tokens, scores, types, add_dummy_prefix) of a SentencePiece model."""
    try:
        from sentencepiece import sentencepiece_model_pb2 as pb
    except ImportError as e:
        raise ConvertError("reading tokenizer.model needs the sentencepiece package (pip install sentencepiece)") from e
    mp = pb.ModelProto()
    with open(path, "rb") as f:
        mp.ParseFromString(f.read())
    if mp.trainer_spec.model_type != 2:  # 1 unigram, 2 BPE
        print(f"pinfer convert: note: SentencePiece model type {mp.trainer_spec.model_type} is tokenized "
              "with score-ordered BPE merges", file=sys.stderr)
    tokens = [p.piece for p in mp.pieces]
    scores = [float(p.score) for p in mp.pieces]
    types = [int(p.type) for p in mp.pieces]  # same numbering as GGUF's token types
    return tokens, scores, types, bool(mp.normalizer_spec.add_dummy_prefix)


# ---------------------------------------------------------------- architectures

def _get(cfg: dict, *names, default=None):
    for n in names:
        if cfg.get(n) is not None:
            return cfg[n]
    return default


def _rope_params(cfg: dict, layer_type: Optional[str] = None) -> dict:
    """The RoPE parameters of a config (transformers 5 rope_parameters, per layer
    type where the model has several, or the older rope_theta + rope_scaling)."""
    params = dict(cfg.get("rope_parameters") or {})
    if layer_type is not None and isinstance(params.get(layer_type), dict):
        params = dict(params[layer_type])
    elif any(isinstance(v, dict) for v in params.values()):
        raise ConvertError("per-layer-type rope_parameters are not supported for this architecture")
    params.update({k: v for k, v in (cfg.get("rope_scaling") or {}).items() if v is not None})
    if "rope_theta" not in params:
        params["rope_theta"] = float(_get(cfg, "rope_theta", default=10000.0))
    kind = params.get("rope_type", params.get("type")) or "default"
    params["rope_type"] = {"su": "longrope"}.get(kind, kind)  # Phi-3's first name for LongRoPE
    return params


def _rope(cfg: dict) -> Tuple[float, Optional[float]]:
    """(rope_theta, linear scaling factor or None) for architectures without frequency factors."""
    p = _rope_params(cfg)
    if p["rope_type"] == "default":
        return float(p["rope_theta"]), None
    if p["rope_type"] == "linear":
        return float(p["rope_theta"]), float(p["factor"])
    raise ConvertError(f"unsupported RoPE scaling '{p['rope_type']}' (supported: none, linear)")


def _rope_meta(cfg: dict, n_rot: int, layer_type: Optional[str] = None) -> Tuple[dict, Dict[str, np.ndarray]]:
    """GGUF rope.* keys and frequency-factor tensors, as llama.cpp writes them:
    linear and YaRN as rope.scaling.* keys; llama3 as rope_freqs (the divisor of
    each pair's angle); LongRoPE as rope_factors_short/long plus attn_factor."""
    p = _rope_params(cfg, layer_type)
    kind, theta = p["rope_type"], float(p["rope_theta"])
    meta: dict = {"rope.freq_base": theta}
    tensors: Dict[str, np.ndarray] = {}
    max_pos = int(_get(cfg, "max_position_embeddings", default=2048))
    orig = p.get("original_max_position_embeddings") or cfg.get("original_max_position_embeddings")
    inv = theta ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)
    if kind == "default":
        pass
    elif kind == "linear":
        meta.update({"rope.scaling.type": "linear", "rope.scaling.factor": float(p["factor"])})
    elif kind == "llama3":
        factor, lo, hi = float(p["factor"]), float(p["low_freq_factor"]), float(p["high_freq_factor"])
        if orig is None:
            raise ConvertError("llama3 rope_parameters need original_max_position_embeddings")
        old = float(orig)
        wavelen = 2 * np.pi / inv
        smooth = np.clip((old / wavelen - lo) / (hi - lo), 0.0, 1.0)  # 0: interpolate by factor, 1: keep
        tensors["rope_freqs.weight"] = (1.0 / ((1 - smooth) / factor + smooth)).astype(np.float32)
    elif kind == "yarn":
        if orig is None:
            raise ConvertError("YaRN rope_parameters need original_max_position_embeddings")
        factor = float(p.get("factor") or max_pos / float(orig))
        if p.get("mscale") or p.get("mscale_all_dim"):
            raise ConvertError("YaRN with mscale/mscale_all_dim is not supported")
        if not p.get("truncate", True):
            raise ConvertError("YaRN with truncate=false is not supported")
        meta.update({"rope.scaling.type": "yarn", "rope.scaling.factor": factor,
                     "rope.scaling.original_context_length": int(orig)})
        for key, default in (("beta_fast", 32.0), ("beta_slow", 1.0)):
            if p.get(key) and float(p[key]) != default:
                meta[f"rope.scaling.yarn_{key}"] = float(p[key])
        if p.get("attention_factor") is not None:  # stored relative to YaRN's own 1 + 0.1 ln(factor)
            meta["rope.scaling.yarn_attn_factor"] = float(p["attention_factor"]) / (
                1.0 + 0.1 * np.log(factor) if factor > 1 else 1.0)
    elif kind == "longrope":
        if orig is None:
            raise ConvertError("LongRoPE needs original_max_position_embeddings")
        scale = float(p.get("factor") or max_pos / float(orig))
        att = p.get("attention_factor")
        if att is None:
            att = np.sqrt(1 + np.log(scale) / np.log(float(orig))) if scale > 1 else 1.0
        for which in ("short", "long"):
            f = np.asarray(p[f"{which}_factor"], dtype=np.float32)
            if f.shape != (n_rot // 2,):
                raise ConvertError(f"LongRoPE {which}_factor has {f.size} values, expected {n_rot // 2}")
            tensors[f"rope_factors_{which}.weight"] = f
        meta.update({"rope.scaling.attn_factor": float(att), "rope.scaling.original_context_length": int(orig)})
    else:
        raise ConvertError(f"unsupported RoPE scaling '{kind}' (supported: none, linear, llama3, yarn, longrope)")
    return meta, tensors


# (gguf name, hf name -- a tuple of names: stacked along a new first axis --
# or None for a tensor made here, producer)
Plan = List[Tuple[str, Union[None, str, Tuple[str, ...]], Callable[[], np.ndarray]]]


def _constant(a: np.ndarray) -> Callable[[], np.ndarray]:
    """The producer of a tensor the converter made itself."""
    return lambda: a


def _stacked(w: _Weights, names: Tuple[str, ...]) -> Callable[[], np.ndarray]:
    """The producer of several checkpoint tensors stacked along a new first axis
    (a mixture of experts' per-expert matrices, as llama.cpp stores them)."""
    return lambda: np.stack([w.get(x) for x in names])


class _Family(NamedTuple):
    """What a llama-like Hugging Face family changes in the conversion."""
    arch: str                 # GGUF general.architecture (llama.cpp's name)
    permute_qk: bool = False  # GGUF llama ropes adjacent pairs: q/k rows reordered per head
    qkv_bias: bool = False    # q/k/v biases (qwen2)
    qk_norm: bool = False     # self_attn.q_norm / k_norm -> attn_q_norm / attn_k_norm
    plus_one: bool = False    # Gemma's RMSNorm scales by (1 + w): every norm weight is stored as w + 1
    post_norms: bool = False  # Gemma 2/3: post_attention_norm, ffn_norm (pre-FFN), post_ffw_norm
    fused: bool = False       # Phi-3: qkv_proj -> attn_qkv, gate_up_proj -> ffn_up
    window: str = "none"      # sliding window: "none" (refused), "all" layers, or "pattern" (every swa_pattern)
    swa_pattern: int = 0      # windowed unless i % p == p - 1 (llama.cpp's fixed pattern for the arch)
    moe: bool = False         # Mixtral: block_sparse_moe (router + experts) in place of mlp


FAMILIES = {
    "LlamaForCausalLM": _Family("llama", permute_qk=True),
    "MistralForCausalLM": _Family("llama", permute_qk=True, window="all"),
    "Qwen2ForCausalLM": _Family("qwen2", qkv_bias=True),
    "Qwen3ForCausalLM": _Family("qwen3", qk_norm=True),
    "GemmaForCausalLM": _Family("gemma", plus_one=True),
    "Gemma2ForCausalLM": _Family("gemma2", plus_one=True, post_norms=True, window="pattern", swa_pattern=2),
    "Gemma3ForCausalLM": _Family("gemma3", plus_one=True, post_norms=True, qk_norm=True, window="pattern",
                                 swa_pattern=6),
    "Phi3ForCausalLM": _Family("phi3", fused=True, window="all"),
    "MixtralForCausalLM": _Family("llama", permute_qk=True, window="all", moe=True),
}


def _llama_like(cfg: dict, fam: _Family, w: _Weights, ffn_act: Optional[str]) -> Tuple[dict, Plan]:
    arch = fam.arch
    n_embd, n_head = cfg["hidden_size"], cfg["num_attention_heads"]
    n_head_kv = _get(cfg, "num_key_value_heads", default=n_head)
    head_dim = _get(cfg, "head_dim", default=n_embd // n_head)
    n_layer = cfg["num_hidden_layers"]
    act = _get(cfg, "hidden_activation", "hidden_act", default="silu")
    for flag in ("attention_bias", "mlp_bias"):
        if cfg.get(flag) and not (flag == "attention_bias" and fam.qkv_bias):
            raise ConvertError(f"{arch} with {flag}=true is not supported")
    acts = {"silu": "silu", "swish": "silu", "relu": "relu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu",
            "gelu_new": "gelu"}
    if act not in acts:
        raise ConvertError(f"unsupported hidden_act '{act}' (supported: {', '.join(acts)})")
    ffn = acts[act]
    want = ffn_act or cfg.get("pinfer_ffn_act")
    if want:
        if want not in FFN_ACTS:
            raise ConvertError(f"unknown FFN activation '{want}' (supported: {', '.join(FFN_ACTS)})")
        if want != ffn and not (want == "relu-both" and ffn == "relu"):
            raise ConvertError(f"FFN activation '{want}' contradicts hidden_act '{act}' "
                               "(relu-both needs hidden_act relu)")
        ffn = want
    n_rot = int(head_dim * float(_rope_params(cfg, "full_attention" if fam.window == "pattern" else None)
                                 .get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))))
    tied = bool(cfg.get("tie_word_embeddings", False)) or "lm_head.weight" not in w
    meta = {
        "context_length": int(_get(cfg, "max_position_embeddings", default=2048)),
        "embedding_length": n_embd,
        "block_count": n_layer,
        "feed_forward_length": cfg["intermediate_size"],
        "attention.head_count": n_head,
        "attention.head_count_kv": n_head_kv,
        "attention.layer_norm_rms_epsilon": float(_get(cfg, "rms_norm_eps", default=1e-6)),
        "rope.dimension_count": n_rot,
        "ffn_act": ffn,
    }
    if fam.moe:
        n_expert, n_used = int(cfg["num_local_experts"]), int(cfg["num_experts_per_tok"])
        if not 1 <= n_used <= n_expert:
            raise ConvertError(f"num_experts_per_tok {n_used} outside [1, num_local_experts = {n_expert}]")
        meta["expert_count"] = n_expert
        meta["expert_used_count"] = n_used
    if head_dim * n_head != n_embd or fam.qk_norm:
        meta["attention.key_length"] = head_dim
        meta["attention.value_length"] = head_dim

    # RoPE, and the sliding window with the layers it applies to
    layer_types = cfg.get("layer_types")
    window = cfg.get("sliding_window")
    if cfg.get("use_sliding_window") is False or fam.window == "none":
        if fam.window == "none" and (cfg.get("use_sliding_window") or
                                     (layer_types and "sliding_attention" in layer_types and window)):
            raise ConvertError(f"{arch} with a sliding window is not supported")
        window = None
    extra: Dict[str, np.ndarray] = {}
    if fam.window == "pattern":
        period = fam.swa_pattern
        expect = ["sliding_attention" if i % period < period - 1 else "full_attention" for i in range(n_layer)]
        if layer_types is not None and list(layer_types) != expect:
            raise ConvertError(f"{arch} layer_types {layer_types} differ from the {period - 1}:1 local/global pattern "
                               "llama.cpp assumes for this architecture")
        rope, extra = _rope_meta(cfg, n_rot, "full_attention")
        if "sliding_attention" in (cfg.get("rope_parameters") or {}):
            local, local_t = _rope_meta(cfg, n_rot, "sliding_attention")
            if len(local) != 1 or local_t:
                raise ConvertError(f"{arch}: RoPE scaling on the sliding-window layers is not supported")
            if local["rope.freq_base"] != rope["rope.freq_base"]:
                meta["rope.freq_base_swa"] = local["rope.freq_base"]
    else:
        if layer_types and "sliding_attention" in layer_types and layer_types.count("sliding_attention") != n_layer:
            raise ConvertError(f"{arch} with sliding-window attention on some layers only is not supported")
        rope, extra = _rope_meta(cfg, n_rot)
    meta.update(rope)
    if window:
        meta["attention.sliding_window"] = int(window)
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        if cfg.get(key):
            meta[key] = float(cfg[key])
    qpas = cfg.get("query_pre_attn_scalar")
    if qpas is not None and float(qpas) != float(head_dim):
        meta["attention.scale"] = float(qpas) ** -0.5

    plan: Plan = []

    def add(dst: str, src: str, fn: Optional[Callable[[np.ndarray], np.ndarray]] = None):
        if fam.plus_one and dst.endswith("norm.weight"):
            inner = fn

            def fn(a, f=inner):
                return (f(a) if f else a) + 1.0
        plan.append((dst, src, (lambda: fn(w.get(src))) if fn else (lambda: w.get(src))))

    for dst, made in extra.items():
        plan.append((dst, None, _constant(made)))
    add("token_embd.weight", "model.embed_tokens.weight")
    for i in range(n_layer):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        add(b + "attn_norm.weight", p + "input_layernorm.weight")
        if fam.fused:
            add(b + "attn_qkv.weight", p + "self_attn.qkv_proj.weight")
        elif fam.permute_qk:
            add(b + "attn_q.weight", p + "self_attn.q_proj.weight", lambda a: permute_rope_rows(a, n_head))
            add(b + "attn_k.weight", p + "self_attn.k_proj.weight", lambda a: permute_rope_rows(a, n_head_kv))
        else:
            add(b + "attn_q.weight", p + "self_attn.q_proj.weight")
            add(b + "attn_k.weight", p + "self_attn.k_proj.weight")
        if not fam.fused:
            add(b + "attn_v.weight", p + "self_attn.v_proj.weight")
        if fam.qkv_bias:
            for x in "qkv":
                add(b + f"attn_{x}.bias", p + f"self_attn.{x}_proj.bias")
        if fam.qk_norm:
            add(b + "attn_q_norm.weight", p + "self_attn.q_norm.weight")
            add(b + "attn_k_norm.weight", p + "self_attn.k_norm.weight")
        add(b + "attn_output.weight", p + "self_attn.o_proj.weight")
        if fam.post_norms:
            add(b + "post_attention_norm.weight", p + "post_attention_layernorm.weight")
            add(b + "ffn_norm.weight", p + "pre_feedforward_layernorm.weight")
            add(b + "post_ffw_norm.weight", p + "post_feedforward_layernorm.weight")
        else:
            add(b + "ffn_norm.weight", p + "post_attention_layernorm.weight")
        if fam.moe:
            moe = p + "block_sparse_moe."
            add(b + "ffn_gate_inp.weight", moe + "gate.weight")
            for dst, hf in (("ffn_gate_exps", "w1"), ("ffn_up_exps", "w3"), ("ffn_down_exps", "w2")):
                srcs = tuple(f"{moe}experts.{e}.{hf}.weight" for e in range(meta["expert_count"]))
                plan.append((b + dst + ".weight", srcs, _stacked(w, srcs)))
            continue
        if fam.fused:
            add(b + "ffn_up.weight", p + "mlp.gate_up_proj.weight")  # rows [gate; up]
        else:
            add(b + "ffn_gate.weight", p + "mlp.gate_proj.weight")
            add(b + "ffn_up.weight", p + "mlp.up_proj.weight")
        add(b + "ffn_down.weight", p + "mlp.down_proj.weight")
    add("output_norm.weight", "model.norm.weight")
    if not tied:
        add("output.weight", "lm_head.weight")
    return meta, plan


def _falcon(cfg: dict, w: _Weights, ffn_act: Optional[str]) -> Tuple[dict, Plan]:
    n_embd = _get(cfg, "hidden_size", "d_model")
    n_head = _get(cfg, "num_attention_heads", "n_head")
    n_layer = _get(cfg, "num_hidden_layers", "n_layer")
    new_arch = bool(cfg.get("new_decoder_architecture", False))
    if cfg.get("alibi"):
        raise ConvertError("falcon with alibi=true is not supported (only rotary position embeddings)")
    if cfg.get("bias"):
        raise ConvertError("falcon with bias=true (biases on the linear layers) is not supported")
    if not new_arch and not cfg.get("parallel_attn", True):
        raise ConvertError("falcon with parallel_attn=false is not supported")
    if new_arch:
        n_head_kv = _get(cfg, "num_kv_heads", "n_head_kv", default=n_head)
    elif cfg.get("multi_query", True):
        n_head_kv = 1
    else:
        n_head_kv = n_head
        if _get(cfg, "num_kv_heads", default=n_head) != n_head:
            raise ConvertError("falcon without multi_query and new_decoder_architecture needs num_kv_heads == n_head")
    head_dim = n_embd // n_head
    act = cfg.get("activation", "gelu")
    acts = {"gelu": "gelu", "gelu_pytorch_tanh": "gelu", "gelu_new": "gelu", "relu": "relu"}
    if act not in acts:
        raise ConvertError(f"unsupported falcon activation '{act}' (supported: {', '.join(acts)})")
    ffn = acts[act]
    want = ffn_act or cfg.get("pinfer_ffn_act")
    if want and want != ffn:
        raise ConvertError(f"FFN activation '{want}' contradicts falcon activation '{act}' (falcon's FFN has no gate)")
    n_ff = int(_get(cfg, "ffn_hidden_size", default=4 * n_embd))
    theta, scale = _rope(cfg)
    if scale is not None:
        raise ConvertError("falcon with RoPE scaling is not supported")
    meta = {
        "context_length": int(_get(cfg, "max_position_embeddings", default=2048)),
        "embedding_length": n_embd,
        "feed_forward_length": n_ff,
        "block_count": n_layer,
        "attention.head_count": n_head,
        "attention.head_count_kv": n_head_kv,
        "attention.layer_norm_epsilon": float(_get(cfg, "layer_norm_epsilon", default=1e-5)),
        "rope.freq_base": theta,
        "ffn_act": ffn,
    }
    g = n_head // n_head_kv

    def qkv(a: np.ndarray) -> np.ndarray:
        # HF groups rows per kv head: [g queries, 1 key, 1 value] x n_head_kv (the
        # old layouts, MQA [q..., k, v] and MHA [q_h, k_h, v_h] per head, are the
        # g = n_head and g = 1 cases). GGUF wants [all q; all k; all v].
        t = a.reshape(n_head_kv, g + 2, head_dim, n_embd)
        q = t[:, :g].reshape(n_head * head_dim, n_embd)
        k = t[:, g].reshape(n_head_kv * head_dim, n_embd)
        v = t[:, g + 1].reshape(n_head_kv * head_dim, n_embd)
        return np.concatenate([q, k, v])

    plan: Plan = []

    def add(dst: str, src: str, fn=None):
        plan.append((dst, src, (lambda: fn(w.get(src))) if fn else (lambda: w.get(src))))

    add("token_embd.weight", "transformer.word_embeddings.weight")
    for i in range(n_layer):
        p, b = f"transformer.h.{i}.", f"blk.{i}."
        if p + "ln_attn.weight" in w:
            for s in ("weight", "bias"):
                add(b + f"attn_norm.{s}", p + f"ln_attn.{s}")
                add(b + f"attn_norm_2.{s}", p + f"ln_mlp.{s}")
        else:
            for s in ("weight", "bias"):
                add(b + f"attn_norm.{s}", p + f"input_layernorm.{s}")
        add(b + "attn_qkv.weight", p + "self_attention.query_key_value.weight", qkv)
        add(b + "attn_output.weight", p + "self_attention.dense.weight")
        add(b + "ffn_up.weight", p + "mlp.dense_h_to_4h.weight")
        add(b + "ffn_down.weight", p + "mlp.dense_4h_to_h.weight")
    add("output_norm.weight", "transformer.ln_f.weight")
    add("output_norm.bias", "transformer.ln_f.bias")
    if not cfg.get("tie_word_embeddings", True) and "lm_head.weight" in w:
        add("output.weight", "lm_head.weight")
    return meta, plan


def _opt(cfg: dict, w: _Weights, ffn_act: Optional[str]) -> Tuple[dict, Plan]:
    n_embd, n_head, n_layer = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    if n_embd % n_head:
        raise ConvertError(f"opt hidden_size {n_embd} is not a multiple of num_attention_heads {n_head}")
    if not cfg.get("enable_bias", True):
        raise ConvertError("opt with enable_bias=false (no biases on the linear layers) is not supported")
    if not cfg.get("layer_norm_elementwise_affine", True):
        raise ConvertError("opt with layer_norm_elementwise_affine=false is not supported")
    act = cfg.get("activation_function", "relu")
    acts = {"relu": "relu", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu"}
    if act not in acts:
        raise ConvertError(f"unsupported opt activation_function '{act}' (supported: {', '.join(acts)})")
    ffn = acts[act]
    want = ffn_act or cfg.get("pinfer_ffn_act")
    if want and want != ffn:
        raise ConvertError(f"FFN activation '{want}' contradicts opt activation_function '{act}' "
                           "(OPT's FFN has no gate)")
    pre_ln = bool(cfg.get("do_layer_norm_before", True))
    final_norm = pre_ln and not cfg.get("_remove_final_layer_norm", False)
    proj = int(cfg.get("word_embed_proj_dim") or n_embd)
    n_pos = int(_get(cfg, "max_position_embeddings", default=2048))
    meta = {
        "context_length": n_pos,
        "embedding_length": n_embd,
        "block_count": n_layer,
        "feed_forward_length": cfg["ffn_dim"],
        "attention.head_count": n_head,
        "attention.layer_norm_epsilon": 1e-5,  # torch.nn.LayerNorm's default, which OPT keeps
        "layer_norm_before": pre_ln,
        "ffn_act": ffn,
    }
    if proj != n_embd:
        meta["embedding_projection_length"] = proj
    plan: Plan = []

    def add(dst: str, src: str, fn=None):
        plan.append((dst, src, (lambda: fn(w.get(src))) if fn else (lambda: w.get(src))))

    d = "model.decoder."
    add("token_embd.weight", d + "embed_tokens.weight")
    # HF reads row p + 2 for position p (OPT's offset): the file holds rows 2.. only. The
    # shape changes, so it is a tensor made here (convert() counts its source as used)
    plan.append(("position_embd.weight", None, lambda: w.get(d + "embed_positions.weight")[2:2 + n_pos]))
    if proj != n_embd:
        add("proj_in.weight", d + "project_in.weight")
        add("proj_out.weight", d + "project_out.weight")
    for i in range(n_layer):
        p, b = f"{d}layers.{i}.", f"blk.{i}."
        for s in ("weight", "bias"):
            add(b + f"attn_norm.{s}", p + f"self_attn_layer_norm.{s}")
            for x in "qkv":
                add(b + f"attn_{x}.{s}", p + f"self_attn.{x}_proj.{s}")
            add(b + f"attn_output.{s}", p + f"self_attn.out_proj.{s}")
            add(b + f"ffn_norm.{s}", p + f"final_layer_norm.{s}")
            add(b + f"ffn_up.{s}", p + f"fc1.{s}")
            add(b + f"ffn_down.{s}", p + f"fc2.{s}")
    if final_norm:
        add("output_norm.weight", d + "final_layer_norm.weight")
        add("output_norm.bias", d + "final_layer_norm.bias")
    if not cfg.get("tie_word_embeddings", True) and "lm_head.weight" in w:
        add("output.weight", "lm_head.weight")
    return meta, plan


FALCON = ("FalconForCausalLM", "RWForCausalLM")
OPT = ("OPTForCausalLM",)
ARCHS = list(FAMILIES) + list(FALCON) + list(OPT)  # the Hugging Face classes convert() takes


# ---------------------------------------------------------------- output

def _to_bf16_bits(a: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bit patterns, round to nearest even (NaN kept quiet)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(a)
    if nan.any():
        r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def convert(hf_dir: str, out_path: str, type: str = "f16", ffn_act: Optional[str] = None,
            name: Optional[str] = None, progress: bool = True) -> str:
    """Convert the Hugging Face model in hf_dir to a GGUF file at out_path.

    type: one of TYPES for the 2-D weights. ffn_act: override the FFN activation
    written as pinfer.ffn_act (needed for "relu-both"; see the module doc).
    Returns out_path. Raises ConvertError naming an unsupported input."""
    import gguf

    if type not in TYPES:
        raise ConvertError(f"unknown --type '{type}' (supported: {', '.join(TYPES)})")
    check_output(out_path, _input_files(hf_dir))  # before the work, not after it
    cfg_path = os.path.join(hf_dir, "config.json")
    if not os.path.isfile(cfg_path):
        raise ConvertError(f"{hf_dir}: no config.json (is this a Hugging Face model directory?)")
    cfg = _read_json(cfg_path)
    archs = cfg.get("architectures") or []
    hf_arch = next((a for a in archs if a in ARCHS), None)
    if hf_arch is None:
        raise ConvertError(f"unsupported architecture {archs or cfg.get('model_type')!r} "
                           f"(supported: {', '.join(ARCHS)})")
    w = _Weights(hf_dir)
    add_bos = None
    made_from: List[str] = []  # HF tensors read by the producers of tensors made here
    if hf_arch in FALCON:
        arch = "falcon"
        meta, plan = _falcon(cfg, w, ffn_act)
        embd_name = "transformer.word_embeddings.weight"
    elif hf_arch in OPT:
        arch = "opt"
        meta, plan = _opt(cfg, w, ffn_act)
        embd_name = "model.decoder.embed_tokens.weight"
        add_bos = True  # OPT prepends </s> to every prompt
        made_from = ["model.decoder.embed_positions.weight"]
    else:
        arch = FAMILIES[hf_arch].arch
        meta, plan = _llama_like(cfg, FAMILIES[hf_arch], w, ffn_act)
        embd_name = "model.embed_tokens.weight"
    n_vocab = w.shape(embd_name)[0]
    tok = _tokenizer_meta(hf_dir, cfg, n_vocab, add_bos)

    used = {s for _, src, _ in plan for s in (src if isinstance(src, tuple) else (src,))} | set(made_from)
    extra = [n for n in w.names() if n not in used and not n.endswith("rotary_emb.inv_freq")
             and n != "lm_head.weight"]
    if extra:
        raise ConvertError(f"unexpected tensors (an unsupported variant of {hf_arch}?): {', '.join(extra[:5])}")

    from . import _core

    with atomic_output(out_path, inputs=_input_files(hf_dir)) as tmp:
        wr = gguf.GGUFWriter(tmp, arch)
        wr.add_name(name or os.path.basename(os.path.normpath(hf_dir)))
        wr.add_file_type(FILE_TYPES[type])
        if type.startswith("q"):
            wr.add_quantization_version(2)
        for k, v in meta.items():
            if k == "ffn_act":
                wr.add_string("pinfer.ffn_act", v)
            elif isinstance(v, bool):
                wr.add_bool(f"{arch}.{k}", v)
            elif isinstance(v, str):
                wr.add_string(f"{arch}.{k}", v)
            elif isinstance(v, (float, np.floating)):
                wr.add_float32(f"{arch}.{k}", v)
            else:
                wr.add_uint32(f"{arch}.{k}", int(v))
        wr.add_uint32(f"{arch}.vocab_size", n_vocab)
        wr.add_tokenizer_model(tok["model"])
        if "pre" in tok:
            wr.add_tokenizer_pre(tok["pre"])
        wr.add_token_list(tok["tokens"])
        wr.add_token_types(tok["types"])
        if "scores" in tok:
            wr.add_token_scores(tok["scores"])
        if "merges" in tok:
            wr.add_token_merges(tok["merges"])
        for key, fn in (("bos", wr.add_bos_token_id), ("eos", wr.add_eos_token_id), ("unk", wr.add_unk_token_id),
                        ("pad", wr.add_pad_token_id)):
            if key in tok:
                fn(tok[key])
        wr.add_add_bos_token(tok["add_bos"])
        wr.add_add_eos_token(tok["add_eos"])
        if "add_space_prefix" in tok:
            wr.add_add_space_prefix(tok["add_space_prefix"])
        if "chat_template" in tok:
            wr.add_chat_template(tok["chat_template"])

        # Tensor infos first (shapes and types are known from the headers), then
        # the data one tensor at a time, so memory stays at one tensor.
        qtype = _core.type_from_name(type)
        info = _core.type_info(qtype)
        jobs = []
        fallback = []
        for dst, src, fn in plan:
            shape = ((len(src),) + w.shape(src[0]) if isinstance(src, tuple) else w.shape(src) if src is not None
                     else fn().shape)
            # routers stay F32 (as llama.cpp's)
            if len(shape) == 1 or type == "f32" or dst.endswith("ffn_gate_inp.weight"):
                t = "f32"
            elif info["is_quantized"] and shape[-1] % info["blck_size"]:
                t = "f16"
                fallback.append(dst)
            else:
                t = type
            n = int(np.prod(shape))
            if t == "f32":
                wr.add_tensor_info(dst, shape, np.dtype(np.float32), 4 * n)
            elif t == "f16":
                wr.add_tensor_info(dst, shape, np.dtype(np.float16), 2 * n)
            elif t == "bf16":
                wr.add_tensor_info(dst, shape, np.dtype(np.uint16), 2 * n, raw_dtype=gguf.GGMLQuantizationType.BF16)
            else:
                rb = shape[-1] // info["blck_size"] * info["type_size"]
                wr.add_tensor_info(dst, (*shape[:-1], rb), np.dtype(np.uint8), int(np.prod(shape[:-1])) * rb,
                                   raw_dtype=gguf.GGMLQuantizationType(qtype))
            jobs.append((dst, t, fn, n))
        if fallback:
            print(f"pinfer convert: {len(fallback)} matrices have rows not a multiple of {info['blck_size']}; "
                  f"written as f16 ({', '.join(fallback[:3])}{', ...' if len(fallback) > 3 else ''})",
                  file=sys.stderr)
        wr.write_header_to_file()
        wr.write_kv_data_to_file()
        wr.write_ti_data_to_file()

        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=sum(j[3] for j in jobs), unit="param", unit_scale=True, desc="convert",
                       file=sys.stderr)
        for dst, t, fn, n in jobs:
            a = np.ascontiguousarray(fn(), dtype=np.float32)
            if not np.all(np.isfinite(a)):
                raise ConvertError(f"tensor {dst} holds NaN or infinite values")
            out: np.ndarray
            if t == "f32":
                out = a
            elif t == "f16":
                out = a.astype(np.float16)
            elif t == "bf16":
                out = _to_bf16_bits(a)
            else:
                out = _core.quantize(qtype, a.reshape(-1, a.shape[-1])).reshape(*a.shape[:-1], -1)
            wr.write_tensor_data(out)
            if bar is not None:
                bar.set_postfix_str(dst, refresh=False)
                bar.update(n)
        if bar is not None:
            bar.close()
        wr.close()
    return out_path


def _input_files(hf_dir: str) -> List[str]:
    """The files of the model directory (config, weights, tokenizer): never an output."""
    try:
        names = os.listdir(hf_dir)
    except OSError:
        return []
    return [os.path.join(hf_dir, n) for n in names if os.path.isfile(os.path.join(hf_dir, n))]


# ---------------------------------------------------------------- CLI

def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("convert", help="convert a Hugging Face model directory to GGUF",
                              description="Convert a Hugging Face model directory (config.json, *.safetensors "
                                          "or *.bin, tokenizer) to a GGUF file. Supported: "
                                          + ", ".join(ARCHS) + ".")
    p.add_argument("hf_dir", help="Hugging Face model directory")
    p.add_argument("-o", "--output", required=True, help="output .gguf path")
    p.add_argument("--type", default="f16", choices=TYPES, help="type of the 2-D weights (default f16)")
    p.add_argument("--ffn-act", choices=FFN_ACTS, default=None,
                   help="override the FFN activation (relu-both: Bamboo-style relu(gate)*relu(up))")
    p.add_argument("--name", default=None, help="general.name (default: the directory name)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=main)
    return p


def main(args) -> int:
    try:
        convert(args.hf_dir, args.output, type=args.type, ffn_act=args.ffn_act, name=args.name,
                progress=not args.no_progress)
    except (ConvertError, OSError) as e:
        print(f"pinfer convert: error: {e}", file=sys.stderr)
        return 1
    print(f"pinfer convert: wrote {args.output} ({os.path.getsize(args.output) / 2**20:.1f} MiB)", file=sys.stderr)
    return 0


if __name__ == "__main__":  # python -m pinfer.convert HF_DIR -o out.gguf
    ap = argparse.ArgumentParser(prog="pinfer")
    sub = ap.add_subparsers()
    add_parser(sub)
    sys.exit(main(ap.parse_args(["convert"] + sys.argv[1:])))
