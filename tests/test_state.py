"""save_state()/load_state(): the restored context gives the same logits bit for bit
and the same continuations; set_seed(), sample(), token_nl()."""
import pickle

import numpy as np
import pytest

from pinfer import Llama, _core  # noqa: E402

# the conftest fixtures: model
MODEL_SEED = 51


def test_state_reload_is_bit_exact(model):
    with Llama(model, n_ctx=128, seed=3) as a, Llama(model, n_ctx=128, seed=99) as b:
        # a history with prefix reuse: two completions sharing a prompt prefix, then tokens
        a("The cat sat on the mat", max_tokens=6, temperature=0)
        a("The cat sat on a chair", max_tokens=5, temperature=0)
        a.eval([7, 8])
        st = pickle.loads(pickle.dumps(a.save_state()))
        saved = a.logits.copy()
        a.eval([9, 10, 11])
        after = a.logits.copy()
        cont_a = a("The cat sat on a chair", max_tokens=4, temperature=0.8)  # draws from the seed stream
        b.load_state(st)
        assert b.n_tokens == st.n_tokens and list(b.input_ids) == list(st.input_ids)
        assert np.array_equal(b.logits, saved)
        b.eval([9, 10, 11])
        assert np.array_equal(b.logits, after)
        cont_b = b("The cat sat on a chair", max_tokens=4, temperature=0.8)
        assert cont_a["choices"][0]["text"] == cont_b["choices"][0]["text"]  # same seed stream


def test_state_logits_match_a_fresh_evaluation(model):
    toks = [1, 20, 30, 40, 50]
    with Llama(model, n_ctx=64) as a:
        a.eval(toks[:3])
        a.eval(toks[3:])
        st = a.save_state()
    ref = _core.Context(_core.Model(model), 64, 512, 0)
    ref.decode(toks[:3])
    ref.decode(toks[3:])
    assert np.array_equal(st.logits, ref.logits())
    with Llama(model, n_ctx=64) as c:
        c.load_state(st)
        assert np.array_equal(c.logits, ref.logits())
    with Llama(model, n_ctx=4) as small, pytest.raises(ValueError, match="n_ctx"):
        small.load_state(st)
    with Llama(model, n_ctx=64) as c, pytest.raises(TypeError, match="LlamaState"):
        c.load_state({"tokens": toks})


def test_seed_sample_and_nl(model):
    with Llama(model, n_ctx=64) as a:
        a.set_seed(5)
        x = a("Hi", max_tokens=6, temperature=1.0)["choices"][0]["text"]
        a.set_seed(5)
        assert a("Hi", max_tokens=6, temperature=1.0)["choices"][0]["text"] == x
        with pytest.raises(ValueError, match="eval"):
            a.reset() or a.sample()
        a.eval(a.tokenize(b"Hi there"))
        assert a.sample(temp=0) == int(np.argmax(a.logits))
        banned = int(np.argmax(a.logits))

        def ban(ids, scores):
            scores[banned] = -np.inf
            return scores
        lg = a.logits.astype(np.float64)
        lg[banned] = -np.inf
        assert a.sample(temp=0, logits_processor=ban) == int(np.argmax(lg))
        with pytest.raises(NotImplementedError, match="tfs_z"):
            a.sample(tfs_z=0.5)
        nl = a.token_nl()
        assert a.model.token_to_piece(nl, False) == b"\n"
