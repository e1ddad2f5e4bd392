"""pinfer's llama forward pass vs Hugging Face transformers on the same random weights.

Tiny random LlamaForCausalLM models (GQA and MHA, tied and untied output, odd sizes)
are written to F32 GGUF (tests/tinymodel.py); pinfer's logits must match
transformers' to 1e-4 relative (max abs difference / max abs logit) when the
prompt is processed whole, token by token through the KV cache, in n_batch chunks,
across several decode calls and after truncating the cache.

The GGUF writer itself is checked first against a float64 numpy forward pass that
reads the GGUF file with the gguf package and applies RoPE the GGUF way (adjacent
pairs), so a wrong q/k permutation cannot hide behind a matching bug in pinfer.

Needs: pip install torch==2.13.0 transformers
"""

import gguf
import numpy as np
import pytest
import transformers  # noqa: F401

import tinymodel
from conftest import chunked_logits, random_prompt, rel_err
from pinfer import _core  # noqa: E402

RTOL = 1e-4

CONFIGS = {
    # GQA (2 query heads per KV head), untied output
    "gqa_untied": dict(n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=96, seed=1),
    # plain multi-head attention, output tied to the embeddings
    "mha_tied": dict(n_embd=32, n_layer=3, n_head=2, n_ff=64, tied=True, seed=2),
    # odd sizes: 3 heads of 16, one KV head, odd FFN width, other rope base and eps
    "odd_sizes": dict(n_embd=48, n_layer=1, n_head=3, n_head_kv=1, n_ff=37, rope_theta=500000.0,
                      rms_eps=1e-6, seed=3),
}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def model_pair(request, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("hf") / f"{request.param}.gguf")
    path, hf = tinymodel.tiny_model(path, **CONFIGS[request.param])
    m = _core.Model(path)
    yield m, hf, path
    m.close()


# ---- the fixture writer against an independent numpy forward pass ----

def numpy_forward(path, tokens):
    """float64 forward of a GGUF llama file, RoPE on adjacent pairs as GGUF specifies."""
    r = gguf.GGUFReader(path)
    T = {t.name: np.array(t.data, dtype=np.float64) for t in r.tensors}

    def field(key):
        f = r.fields[key]
        return f.parts[f.data[0]][0]

    n_head = int(field("llama.attention.head_count"))
    n_head_kv = int(field("llama.attention.head_count_kv"))
    n_layer = int(field("llama.block_count"))
    eps = float(field("llama.attention.layer_norm_rms_epsilon"))
    base = float(field("llama.rope.freq_base"))
    hd = int(field("llama.rope.dimension_count"))

    def norm(x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w

    n = len(tokens)
    pos = np.arange(n)[:, None]
    inv = base ** (-np.arange(0, hd, 2) / hd)
    ang = pos * inv[None, :]
    cos, sin = np.cos(ang), np.sin(ang)

    def rope(x):  # x [n, heads, hd]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * cos[:, None, :] - x1 * sin[:, None, :]
        out[..., 1::2] = x0 * sin[:, None, :] + x1 * cos[:, None, :]
        return out

    x = T["token_embd.weight"][tokens]
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for i in range(n_layer):
        b = f"blk.{i}."
        h = norm(x, T[b + "attn_norm.weight"])
        q = rope((h @ T[b + "attn_q.weight"].T).reshape(n, n_head, hd))
        k = rope((h @ T[b + "attn_k.weight"].T).reshape(n, n_head_kv, hd))
        v = (h @ T[b + "attn_v.weight"].T).reshape(n, n_head_kv, hd)
        g = n_head // n_head_kv
        att = np.empty((n, n_head, hd))
        for hh in range(n_head):
            s = q[:, hh] @ k[:, hh // g].T / np.sqrt(hd) + mask
            p = np.exp(s - s.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            att[:, hh] = p @ v[:, hh // g]
        x = x + att.reshape(n, n_head * hd) @ T[b + "attn_output.weight"].T
        h = norm(x, T[b + "ffn_norm.weight"])
        gate = h @ T[b + "ffn_gate.weight"].T
        x = x + ((gate / (1 + np.exp(-gate))) * (h @ T[b + "ffn_up.weight"].T)) @ T[b + "ffn_down.weight"].T
    x = norm(x, T["output_norm.weight"])
    out = T.get("output.weight", T["token_embd.weight"])
    return x @ out.T


def test_gguf_writer_matches_hf(model_pair):
    _, hf, path = model_pair
    toks = random_prompt(12, hf.config.vocab_size, seed=5)
    ref = tinymodel.hf_logits(hf, toks)
    # HF computes its rotary tables in float32, hence not ~1e-15
    assert rel_err(numpy_forward(path, toks), ref) < 1e-5


# ---- pinfer vs transformers ----

def test_whole_prompt(model_pair):
    m, hf, _ = model_pair
    toks = random_prompt(40, m.n_vocab, seed=11)
    ref = tinymodel.hf_logits(hf, toks)
    ctx = _core.Context(m, 64, 64, 2, "f32")
    ctx.decode(toks, all_logits=True)
    ours = ctx.logits_all()
    assert ours.shape == ref.shape and ours.dtype == np.float32
    assert rel_err(ours, ref) < RTOL
    # the last-token view is the same row
    np.testing.assert_array_equal(ctx.logits(-1), ours[-1])
    ctx.close()


def test_token_by_token(model_pair):
    m, hf, _ = model_pair
    toks = random_prompt(30, m.n_vocab, seed=12)
    ref = tinymodel.hf_logits(hf, toks)
    ctx = _core.Context(m, 32, 8, 2, "f32")
    got = chunked_logits(ctx, toks, 0)
    assert ctx.n_past == len(toks)
    assert rel_err(got, ref) < RTOL


def test_batched_chunks_and_multiple_calls(model_pair):
    m, hf, _ = model_pair
    toks = random_prompt(45, m.n_vocab, seed=13)
    ref = tinymodel.hf_logits(hf, toks)
    # n_batch (7) smaller than the prompt: decode splits it into chunks
    ctx = _core.Context(m, 64, 7, 2, "f32")
    ctx.decode(np.array(toks[:20], dtype=np.int32), all_logits=True)
    first = np.array(ctx.logits_all())
    ctx.decode(toks[20:], all_logits=True)
    second = np.array(ctx.logits_all())
    assert rel_err(np.concatenate([first, second]), ref) < RTOL
    # only the last logits kept
    ctx2 = _core.Context(m, 64, 7, 2, "f32")
    ctx2.decode(toks)
    assert rel_err(ctx2.logits()[None], ref[-1:]) < RTOL
    with pytest.raises(IndexError):
        ctx2.logits(0)


def test_kv_truncate_then_continue(model_pair):
    m, hf, _ = model_pair
    a = random_prompt(24, m.n_vocab, seed=14)
    b = random_prompt(10, m.n_vocab, seed=15)
    ctx = _core.Context(m, 64, 16, 2, "f32")
    ctx.decode(a)
    ctx.kv_truncate(14)
    assert ctx.n_past == 14
    ctx.decode(b, all_logits=True)
    ref = tinymodel.hf_logits(hf, a[:14] + b)[14:]
    assert rel_err(ctx.logits_all(), ref) < RTOL


def test_f16_kv_cache(model_pair):
    """The default F16 KV cache rounds keys and values: close, not exact."""
    m, hf, _ = model_pair
    toks = random_prompt(30, m.n_vocab, seed=17)
    ctx = _core.Context(m, 32, 32, 2)  # type_kv="f16"
    ctx.decode(toks, all_logits=True)
    err = rel_err(ctx.logits_all(), tinymodel.hf_logits(hf, toks))
    assert err < 3e-3


def test_relu_ffn(tmp_path):
    """The ReLU FFN variant, announced by pinfer.ffn_act = "relu"."""
    path, hf = tinymodel.tiny_model(str(tmp_path / "relu.gguf"), ffn_act="relu", n_embd=32, n_layer=2,
                                    n_head=4, n_head_kv=2, n_ff=64, seed=4)
    m = _core.Model(path)
    toks = random_prompt(20, m.n_vocab, seed=16)
    ctx = _core.Context(m, 32, 32, 2, "f32")
    ctx.decode(toks, all_logits=True)
    assert rel_err(ctx.logits_all(), tinymodel.hf_logits(hf, toks)) < RTOL
