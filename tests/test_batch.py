"""Several sequences in one KV cache, decoded together in mixed batches.

Reference: each sequence decoded alone in a context of its own (whose logits are
checked against transformers in test_llama_hf.py). A mixed batch must give every
token the logits it gets alone, also after a sequence is removed and its cells are
reused, after a partial removal, and for a prefix shared with seq_cp."""
import numpy as np
import pytest

from pinfer import _core
from tinymodel import tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path, _ = tiny_model(str(tmp_path_factory.mktemp("batch") / "tiny.gguf"), seed=3)
    return _core.Model(path)


def alone(model, tokens, **kw):
    """float64 [n, n_vocab] logits of tokens decoded as the only sequence."""
    ctx = _core.Context(model, 128, 512, 1, "f32", kw.get("sparse", "off"))
    ctx.decode(np.asarray(tokens, dtype=np.int32), True)
    return np.array(ctx.logits_all(), dtype=np.float64)


class Mixed:
    """A context with several sequences; remembers each sequence's tokens."""

    def __init__(self, model, n_ctx=128, n_batch=512, sparse="off"):
        self.ctx = _core.Context(model, n_ctx, n_batch, 1, "f32", sparse)
        self.toks = {}

    def step(self, parts):
        """parts: [(seq, new tokens)], decoded in one batch with every output kept;
        returns {seq: float64 [len(new), n_vocab]}."""
        T, P, S, O, where = [], [], [], [], []
        for seq, new in parts:
            have = self.toks.setdefault(seq, [])
            for t in new:
                where.append((seq, len(T)))
                T.append(t)
                P.append(len(have))
                S.append(seq)
                O.append(1)
                have.append(t)
        self.ctx.decode_batch(T, P, S, O)
        out = {}
        for seq, i in where:
            out.setdefault(seq, []).append(np.array(self.ctx.logits_ith(i), dtype=np.float64))
        return {s: np.stack(v) for s, v in out.items()}

    def check(self, model, got, **kw):
        for seq, rows in got.items():
            ref = alone(model, self.toks[seq], **kw)[-len(rows):]
            scale = np.abs(ref).max()
            np.testing.assert_allclose(rows, ref, atol=2e-5 * scale, rtol=0, err_msg=f"sequence {seq}")


def test_mixed_batches_match_each_sequence_alone(tiny):
    rng = np.random.default_rng(0)
    def r(n):
        return [int(t) for t in rng.integers(0, tiny.n_vocab - 3, n)]
    m = Mixed(tiny)
    # prompts of different lengths in one batch, interleaved with nothing else
    m.check(tiny, m.step([(0, r(5)), (1, r(3)), (2, r(7))]))
    for _ in range(4):  # decode steps: one token per sequence
        m.check(tiny, m.step([(0, r(1)), (1, r(1)), (2, r(1))]))
    # a prompt joins while the others decode (continuous batching)
    m.check(tiny, m.step([(0, r(1)), (5, r(6)), (2, r(1))]))
    # sequence 1 leaves; a new sequence 1 reuses its cells
    used = m.ctx.cells_used
    m.ctx.seq_rm(1)
    assert m.ctx.cells_used == used - 7 and m.ctx.seq_pos_max(1) == -1
    m.toks[1] = []
    m.check(tiny, m.step([(1, r(4)), (0, r(1))]))
    # partial removal: sequence 2 forgets positions >= 4 and continues differently
    m.ctx.seq_rm(2, 4, -1)
    del m.toks[2][4:]
    assert m.ctx.seq_pos_max(2) == 3
    m.check(tiny, m.step([(2, r(3)), (5, r(1))]))
    # a shared prefix: sequence 7 sees sequence 0's first 6 positions, then goes its own way
    m.ctx.seq_cp(0, 7, 0, 6)
    m.toks[7] = m.toks[0][:6]
    m.check(tiny, m.step([(7, r(2)), (0, r(1))]))


def test_outputs_by_index_and_chunking(tiny):
    """Only flagged tokens keep outputs; a batch larger than n_batch is split."""
    rng = np.random.default_rng(1)
    a = [int(t) for t in rng.integers(0, tiny.n_vocab, 9)]
    b = [int(t) for t in rng.integers(0, tiny.n_vocab, 6)]
    ctx = _core.Context(tiny, 64, 4, 1, "f32")  # n_batch 4: the batch runs in 4 pieces
    T = a + b
    P = list(range(9)) + list(range(6))
    S = [3] * 9 + [4] * 6
    O = [0] * 15
    O[4] = O[8] = O[14] = 1
    ctx.decode_batch(T, P, S, O)
    ra, rb = alone(tiny, a), alone(tiny, b)
    for i, ref in ((4, ra[4]), (8, ra[8]), (14, rb[5])):
        np.testing.assert_allclose(np.array(ctx.logits_ith(i)), ref, atol=2e-5 * np.abs(ref).max(), rtol=0)
    with pytest.raises(IndexError, match="no output"):
        ctx.logits_ith(0)


def test_sparse_exact_batch_matches_alone():
    """The embedded ReGLU model in exact sparse mode: the batch computes the union
    of the sequences' active neurons, which changes nothing."""
    from pinfer.llama import default_model_path
    model = _core.Model(default_model_path())
    rng = np.random.default_rng(2)
    def r(n):
        return [int(t) for t in rng.integers(0, model.n_vocab, n)]
    m = Mixed(model, sparse="exact")
    m.check(model, m.step([(0, r(6)), (1, r(4))]), sparse="exact")
    m.check(model, m.step([(0, r(1)), (1, r(1))]), sparse="exact")


def test_bad_batches_are_errors(tiny):
    ctx = _core.Context(tiny, 8, 512, 1, "f32")
    with pytest.raises(ValueError, match="same length"):
        ctx.decode_batch([1, 2], [0], [0, 0], [1, 1])
    with pytest.raises(ValueError, match="sequence id 64"):
        ctx.decode_batch([1], [0], [64], [1])
    with pytest.raises(ValueError, match="negative"):
        ctx.decode_batch([1], [-1], [0], [1])
    ctx.decode_batch(list(range(8)), list(range(8)), [0] * 8, [1] * 8)
    with pytest.raises(ValueError, match="KV cache is full"):
        ctx.decode_batch([1], [0], [1], [1])
    assert ctx.cells_used == 8  # the failed batch left no cell behind
    ctx.seq_rm(0, 6, -1)
    ctx.decode_batch([1, 2], [0, 1], [1, 1], [0, 1])
    assert ctx.seq_pos_max(1) == 1 and ctx.seq_pos_max(0) == 5
