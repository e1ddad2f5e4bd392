"""OPT (GGUF "opt") vs Hugging Face transformers.

Tiny random OPTs built with transformers' own OPTConfig / OPTForCausalLM
(eager attention, float32 weights): pre-LN (OPT-125m and the large ones) and
post-LN with project_in / project_out (OPT-350m), tied and untied output.
Each is converted by pinfer.convert at F32 and run by pinfer. Logits must
match transformers run in float64 to 1e-4 relative for a whole prompt and
token by token through the KV cache, greedy decoding must pick transformers'
tokens, exact sparse mode must be the dense function, the FFN biases must
reach every sparse mode and the simulated device, and the offline pipeline
(profile -> train-predictors -> place) must run on an OPT.
"""
import json
import os
import sys

import numpy as np
import pytest
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tinymodel  # noqa: E402
from conftest import (  # noqa: E402
    chunked_logits,
    converted_fixture,
    greedy_tokens,
    hf_cached_error,
    hf_greedy,
    hf_prompt_error,
    random_prompt,
    rel_err,
)
from pinfer import _core, cli, extgguf  # noqa: E402
from pinfer import convert as cv  # noqa: E402

torch.set_num_threads(1)
RTOL = 1e-4
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # OPT's ids 0..3: </s> (2) is BOS and EOS


def write_opt_tokenizer(d):
    """GPT-2 style vocab.json + merges.txt as OPT ships them (no tokenizer.json),
    specials first as in OPT's vocabulary. Returns the vocabulary size."""
    tokens, _, merges = tinymodel.byte_bpe_vocab()
    normal = [t for t in tokens if t not in tinymodel.SPECIAL_TOKENS]
    vocab = {t: i for i, t in enumerate(SPECIALS + normal)}
    with open(os.path.join(d, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(d, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(merges) + "\n")
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GPT2Tokenizer", "bos_token": "</s>", "eos_token": "</s>",
                   "unk_token": "</s>", "pad_token": "<pad>", "add_bos_token": True}, f)
    return len(vocab)


# name: OPTConfig kwargs beyond the shared tiny shape
CASES = {
    "pre_tied": dict(do_layer_norm_before=True, tie_word_embeddings=True),
    "pre_untied": dict(do_layer_norm_before=True, tie_word_embeddings=False),
    "post_proj": dict(do_layer_norm_before=False, word_embed_proj_dim=16, tie_word_embeddings=True),  # OPT-350m
    "post_untied": dict(do_layer_norm_before=False, tie_word_embeddings=False),
}
N_FF, N_LAYER, N_POS = 64, 2, 48


def build(kind, d, n_layer=N_LAYER, seed=None):
    os.makedirs(d, exist_ok=True)
    n_vocab = write_opt_tokenizer(d)
    cfg = transformers.OPTConfig(vocab_size=n_vocab, hidden_size=32, num_hidden_layers=n_layer, ffn_dim=N_FF,
                                 num_attention_heads=4, max_position_embeddings=N_POS, pad_token_id=1,
                                 bos_token_id=2, eos_token_id=2, **CASES[kind])
    hf = tinymodel.randomize(tinymodel._from_config(transformers.OPTForCausalLM, cfg),
                             seed=sorted(CASES).index(kind) + 60 if seed is None else seed)
    hf.save_pretrained(d)
    return hf



converted = converted_fixture(build, CASES)


def test_file_layout(converted):
    """pinfer's OPT names and keys (src/arch-opt.cpp); the position table without HF's 2 offset rows."""
    kind, hf, m, path = converted
    assert m.arch == "opt"
    r = _core.GGUFReader(path)
    names = {t.name for t in r.tensors}
    assert {"token_embd.weight", "position_embd.weight", "blk.0.ffn_up.bias", "blk.0.ffn_down.bias",
            "blk.1.attn_output.bias"} <= names
    assert ("output.weight" in names) == (not hf.config.tie_word_embeddings)
    assert ("output_norm.weight" in names) == hf.config.do_layer_norm_before  # post-LN OPT has no final norm
    assert ("proj_in.weight" in names) == (kind == "post_proj")
    assert bool(r.get("opt.layer_norm_before")) == hf.config.do_layer_norm_before
    pos = extgguf.to_f32(next(t for t in r.tensors if t.name == "position_embd.weight"))
    np.testing.assert_array_equal(pos, hf.model.decoder.embed_positions.weight.detach().numpy()[2:])


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


def test_exact_sparse_is_dense(converted):
    """Exact mode selects on fc1 x + bias: the skipped neurons are exactly the zero
    ones, so the logits are transformers' and the greedy tokens dense mode's."""
    kind, hf, m, _ = converted
    toks = random_prompt(20, m.n_vocab, seed=14)
    ex = _core.Context(m, 64, 64, 2, "f32", "exact", True)
    ex.decode(toks, all_logits=True)
    assert rel_err(ex.logits_all(), tinymodel.hf_logits(hf, toks)) < RTOL, kind
    frac = [s["active_frac"] for s in ex.sparse_stats()["layers"]]
    assert all(0.1 < f < 0.9 for f in frac), frac  # it did skip neurons
    dense = _core.Context(m, 64, 8, 2, "f32", "off")
    assert greedy_tokens(_core.Context(m, 64, 8, 2, "f32", "exact"), toks[:4], 8) == greedy_tokens(dense, toks[:4], 8)


def test_positions_past_the_table_are_refused(converted):
    kind, hf, m, _ = converted
    ctx = _core.Context(m, 64, 64, 2, type_kv=0)
    ctx.decode(random_prompt(N_POS, m.n_vocab, seed=15))
    with pytest.raises(Exception, match="learned position embeddings"):
        ctx.decode([5])


def with_placement(src, dst, k):
    return extgguf.add_sparse(src, dst, placements=[{"budget_bytes": 1, "solver": "test", "gpu_neurons": list(k)}])


def superset_predictor(path):
    """A predictor p = fc1 x with a threshold below -max(bias): it predicts every
    neuron whose fc1 x + bias > 0 (and more), so predictor mode is the dense
    function -- unless the bias leaked into the unpredicted rows, where
    relu(0 + b_i) = b_i would be added."""
    r = _core.GGUFReader(path)
    t = {x.name: x for x in r.tensors}
    preds, bmax = [], 0.0
    for il in range(N_LAYER):
        w = extgguf.to_f32(t[f"blk.{il}.ffn_up.weight"])
        bmax = max(bmax, float(extgguf.to_f32(t[f"blk.{il}.ffn_up.bias"]).max()))
        preds.append((np.concatenate([w, -w]), np.concatenate([np.eye(N_FF), -np.eye(N_FF)], axis=1)))
    return preds, -(bmax + 0.05)


@pytest.mark.parametrize("down_t", [False, True])
def test_predictor_mode_keeps_the_bias_off_unpredicted_rows(converted, tmp_path, down_t):
    kind, hf, m, path = converted
    src = extgguf.add_down_t(path, str(tmp_path / "dt.gguf")) if down_t else path
    preds, thr = superset_predictor(path)
    pred = extgguf.add_sparse(src, str(tmp_path / "pred.gguf"), predictors=preds, threshold=thr)
    mp = _core.Model(pred)
    toks = random_prompt(12, m.n_vocab, seed=16)
    c = _core.Context(mp, 64, 64, 2, "f32", "predictor", True)
    for t in toks:  # token by token: the decode kernels
        c.decode([t])
    computed = [s["computed_frac"] for s in c.sparse_stats()["layers"]]
    assert all(f < 0.95 for f in computed), computed  # some rows were not computed
    ref = tinymodel.hf_logits(hf, toks)[-1]
    assert rel_err(c.logits(), ref) < RTOL, kind
    c.decode(random_prompt(10, m.n_vocab, seed=17), all_logits=False)  # and a prompt batch
    mp.close()


@pytest.mark.parametrize("mode", ["off", "exact", "predictor"])
def test_simulated_device(converted, tmp_path, mode):
    """The hybrid plan on the simulated device, with a hot prefix split between the
    device and the CPU: the up bias follows the split, the down bias is added once."""
    kind, hf, m, path = converted
    src = path
    if mode == "predictor":
        preds, thr = superset_predictor(path)
        src = extgguf.add_sparse(extgguf.add_down_t(path, str(tmp_path / "dt.gguf")), str(tmp_path / "p.gguf"),
                                 predictors=preds, threshold=thr)
    placed = with_placement(src, str(tmp_path / "k.gguf"), [N_FF // 2, N_FF])
    toks = random_prompt(12, m.n_vocab, seed=18)
    ref = tinymodel.hf_logits(hf, toks)
    mk = _core.Model(placed)
    sim = _core.Context(mk, 64, 64, 2, "f32", mode, device="sim")
    assert sim.plan() == [(True, N_FF // 2), (True, N_FF)]
    assert rel_err(chunked_logits(sim, toks, 7), ref) < RTOL, (kind, mode)
    # a prompt batch that sends the cold rows (and their up bias) to the device
    stream = _core.Context(mk, 64, 64, 2, "f32", mode, device="sim", prompt_stream_min=4)
    stream.decode(toks, all_logits=True)
    assert rel_err(stream.logits_all(), ref) < RTOL, (kind, mode)
    assert stream.transfer_stats(False)["bytes_h2d"] > 4 * 32 * N_FF // 2  # the cold up rows went up
    mk.close()


def test_tokenizer_prepends_eos_as_bos(tmp_path):
    """vocab.json + merges.txt convert to the GPT-2 byte-level BPE with OPT's </s> (2)
    first, as transformers' tokenizer of the same directory puts it; a
    tokenizer_config.json that does not say still gets OPT's BOS."""
    d = str(tmp_path / "hf")
    build("pre_tied", d)
    m = _core.Model(cv.convert(d, str(tmp_path / "t.gguf"), type="f32", progress=False))
    ref = transformers.AutoTokenizer.from_pretrained(d)
    assert m.bos == ref.bos_token_id == 2
    for text in ["Hello world, the theory", "  two  spaces\nnewline", "caf\u00e9 \u65e5\u672c 1234"]:
        assert list(m.tokenize(text, True, False)) == ref(text)["input_ids"], text
        assert m.detokenize(m.tokenize(text, False, False)).decode() == text
    m.close()
    cfg_path = os.path.join(d, "tokenizer_config.json")
    with open(cfg_path) as f:
        tc = json.load(f)
    del tc["add_bos_token"]
    with open(cfg_path, "w") as f:
        json.dump(tc, f)
    m = _core.Model(cv.convert(d, str(tmp_path / "t2.gguf"), type="f32", progress=False))
    assert list(m.tokenize("Hello", True, False))[0] == 2
    m.close()


def test_unsupported_variants_name_themselves(tmp_path):
    d = str(tmp_path / "hf")
    build("pre_tied", d)
    cfg_path = os.path.join(d, "config.json")
    with open(cfg_path) as f:
        base = json.load(f)
    for key, value, msg in (("enable_bias", False, "enable_bias"), ("activation_function", "silu", "silu"),
                            ("layer_norm_elementwise_affine", False, "elementwise_affine")):
        with open(cfg_path, "w") as f:
            json.dump({**base, key: value}, f)
        with pytest.raises(cv.ConvertError, match=msg):
            cv.convert(d, str(tmp_path / "x.gguf"), type="f32", progress=False)
    assert not os.path.exists(str(tmp_path / "x.gguf"))


# ---------------------------------------------------------------- the offline pipeline

TEXT = ("It is a truth universally acknowledged, that a single man in possession of a good fortune, "
        "must be in want of a wife. However little known the feelings or views of such a man may be "
        "on his first entering a neighbourhood, this truth is so well fixed in the minds of the "
        "surrounding families, that he is considered the rightful property of some one or other of "
        "their daughters. ") * 6


def test_profile_predictors_place(tmp_path):
    """profile (torch hooks on fc1 / activation_fn) -> train-predictors -> place on a
    pre-LN OPT: the counts are HF's own fc1 x + bias > 0 counts, predictor mode runs
    at the trained recall, and the placed (hot-first permuted) file is the same function."""
    import contextlib
    import io

    from pinfer import profile, solve

    d = str(tmp_path / "hf")
    hf = build("pre_tied", d, seed=3)
    corpus = str(tmp_path / "corpus.txt")
    with open(corpus, "w") as f:
        f.write(TEXT)
    base, stats, dump, pred = (str(tmp_path / n) for n in ("base.gguf", "stats.npz", "dump", "pred.gguf"))
    assert cli.main(["convert", d, "-o", base, "--type", "f32", "--no-progress"]) == 0
    assert cli.main(["profile", d, "--corpus", corpus, "--tokens", "400", "--ctx", str(N_POS), "-o", stats,
                     "--dump", dump, "--dump-per-seq", "40", "--no-progress"]) == 0
    # the reference counts: fc1 x + bias > 0 from HF's own hidden states (pre-LN: final_layer_norm's output)
    st = profile.load_stats(stats)
    tok = transformers.AutoTokenizer.from_pretrained(d)
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    body = N_POS - 1
    want = [np.zeros(N_FF, np.int64) for _ in range(N_LAYER)]
    n_tok = 0
    with torch.no_grad():
        for s in range(0, len(ids), body):
            seq = [2] + ids[s:s + min(body, 400 - n_tok - 1)]
            if n_tok >= 400 or len(seq) < 2:
                break
            hs = hf(torch.tensor([seq]), output_hidden_states=True).hidden_states
            mask = torch.triu(torch.full((len(seq), len(seq)), float("-inf")), 1)[None, None]
            for il, layer in enumerate(hf.model.decoder.layers):
                h = hs[il]
                h = h + layer.self_attn(layer.self_attn_layer_norm(h), attention_mask=mask)[0]
                want[il] += (layer.fc1(layer.final_layer_norm(h))[0].numpy() > 0).sum(0)
            n_tok += len(seq)
    assert int(st["n_tokens"]) == n_tok
    for il in range(N_LAYER):
        assert np.abs(st["counts"][il] - want[il]).max() <= 1, il  # float32 sums may flip a border case
    # predictors, then predictor mode at the trained recall
    assert cli.main(["train-predictors", d, "--data", dump, "--gguf", base, "-o", pred, "--recall", "0.95",
                     "--epochs", "4", "--device", "cpu"]) == 0
    mp = _core.Model(pred)
    toks = random_prompt(24, mp.n_vocab, seed=19)
    c = _core.Context(mp, 64, 64, 2, "f32", "predictor", True, True)
    c.decode(toks, all_logits=True)
    layers = c.sparse_stats()["layers"]
    assert all(s["recall"] > 0.8 for s in layers), layers
    assert rel_err(c.logits_all(), tinymodel.hf_logits(hf, toks)) < 0.5
    # placement: the permuted file computes the same function (exact mode, on the CPU and the sim)
    desc = solve.load_model(pred)
    inst = solve.build_instance(solve.load_freqs(stats), desc, solve.hardware("rtx4090"), ctx=64, reserve_gib=0)
    ffn = sum(n * b for n, b in zip(desc.n_ff, desc.neuron_bytes))
    budget = (inst.resident_bytes + 0.5 * ffn) / 2**30
    placed = str(tmp_path / "placed.gguf")
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli.main(["place", pred, "--freq", stats, "-o", placed, "--budget", repr(budget), "--hw", "rtx4090",
                         "--ctx", "64", "--reserve-gib", "0", "--group", "16", "--min-neurons", "16"]) == 0
    mpl = _core.Model(placed)
    ref = _core.Context(mp, 64, 64, 2, "f32", "exact")
    ref.decode(toks, all_logits=True)
    for dev in ("cpu", "sim"):
        cp = _core.Context(mpl, 64, 64, 2, "f32", "exact", device=dev)
        cp.decode(toks, all_logits=True)
        assert rel_err(cp.logits_all(), ref.logits_all()) < 1e-5, dev
    mpl.close()
    mp.close()


def test_calibrate_and_threshold_mode(converted, tmp_path):
    """pinfer calibrate on an OPT file: a target above the natural ReLU sparsity gives
    thresholds on |relu(fc1 x + b)| that the runtime's threshold mode meets."""
    from pinfer import calibrate

    kind, hf, m, path = converted
    out = str(tmp_path / "cal.gguf")
    rep = calibrate.calibrate(path, 0.75, text=TEXT, out=out, n_tokens=40, n_ctx=N_POS, n_threads=2)
    assert np.all(np.asarray(rep["thresholds"]) > 0)
    mt = _core.Model(out)
    c = _core.Context(mt, N_POS, N_POS, 2, "f32", "threshold", True)
    c.decode(calibrate.calibration_tokens(mt, TEXT, 40), all_logits=True)
    for s in c.sparse_stats()["layers"]:
        assert 1 - s["active_frac"] == pytest.approx(0.75, abs=0.03), kind
    mt.close()
