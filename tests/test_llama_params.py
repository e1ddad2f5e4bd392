"""The parameter rule: every llama-cpp-python parameter that pinfer.Llama accepts either
works or is refused with an error naming it; nothing is silently ignored.

UPSTREAM_* below are llama-cpp-python's documented parameter names (its API reference),
the independent list this file checks pinfer against. Parameters that work are tested
for their effect here (logit_bias, logits_processor, stopping_criteria, chat_format,
type_k, model, temp, last_n_tokens_size) or in their own files (grammar, logprobs).
"""
import inspect

import numpy as np
import pytest

from pinfer import Llama, LogitsProcessorList, StoppingCriteriaList, _core, compat  # noqa: E402

# the conftest fixtures: model, llm
MODEL_SEED = 31
LLM_SEED = 7

UPSTREAM_INIT = """model_path n_gpu_layers split_mode main_gpu tensor_split rpc_servers vocab_only use_mmap
use_mlock kv_overrides seed n_ctx n_batch n_ubatch n_threads n_threads_batch rope_scaling_type pooling_type
rope_freq_base rope_freq_scale yarn_ext_factor yarn_attn_factor yarn_beta_fast yarn_beta_slow yarn_orig_ctx
logits_all embedding offload_kqv flash_attn op_offload swa_full no_perf last_n_tokens_size lora_base
lora_scale lora_path numa chat_format chat_handler draft_model tokenizer type_k type_v spm_infill
verbose""".split()
UPSTREAM_COMPLETION = """prompt suffix max_tokens temperature top_p min_p typical_p logprobs echo stop
frequency_penalty presence_penalty repeat_penalty top_k stream seed tfs_z mirostat_mode mirostat_tau
mirostat_eta model stopping_criteria logits_processor grammar logit_bias""".split()
UPSTREAM_CHAT = """messages functions function_call tools tool_choice temperature top_p top_k min_p typical_p
stream stop seed response_format max_tokens presence_penalty frequency_penalty repeat_penalty tfs_z
mirostat_mode mirostat_tau mirostat_eta model logits_processor grammar logit_bias logprobs
top_logprobs""".split()
UPSTREAM_GENERATE = """tokens top_k top_p min_p typical_p temp repeat_penalty reset frequency_penalty
presence_penalty tfs_z mirostat_mode mirostat_tau mirostat_eta penalize_nl logits_processor
stopping_criteria grammar""".split()


def other_value(default):
    """A value unlike the do-nothing default, of a plausible type."""
    if isinstance(default, bool):
        return not default
    if isinstance(default, (int, float)):
        return default + 3
    return "x" if default is None else None


def accepted(fn):
    """Names fn accepts: its named parameters plus the compat tables it checks."""
    return {p for p in inspect.signature(fn).parameters if p not in ("self", "args", "kwargs")}


@pytest.mark.parametrize("upstream, fn, tables", [
    (UPSTREAM_INIT, Llama.__init__, [compat.INIT]),
    (UPSTREAM_COMPLETION, Llama.create_completion, [compat.COMPLETION, compat.SAMPLING]),
    (UPSTREAM_CHAT, Llama.create_chat_completion, [compat.CHAT, compat.SAMPLING]),
    (UPSTREAM_GENERATE, Llama.generate, [compat.SAMPLING, compat.GENERATE]),
])
def test_every_upstream_parameter_is_named_or_listed(upstream, fn, tables):
    names = accepted(fn) | {k for t in tables for k in t}
    missing = [n for n in upstream if n not in names]
    assert not missing, f"{fn.__qualname__} neither implements nor lists {missing}"


@pytest.mark.parametrize("name", sorted(compat.INIT))
def test_init_table(model, name, capsys):
    default, action, _ = compat.INIT[name]
    with Llama(model, n_ctx=32, **{name: default}):  # the do-nothing value is accepted quietly
        pass
    assert "notice" not in capsys.readouterr().err
    if action == compat.REFUSE:
        with pytest.raises(NotImplementedError, match=name):
            Llama(model, n_ctx=32, **{name: other_value(default)})
    elif action == compat.NOTICE:
        with Llama(model, n_ctx=32, **{name: other_value(default)}):
            pass
        assert f"{name}=" in capsys.readouterr().err
    else:  # read only with another parameter that is refused
        assert compat.INIT[name][2] in compat.INIT
        with Llama(model, n_ctx=32, **{name: other_value(default)}):
            pass


@pytest.mark.parametrize("where, name", [("completion", n) for n in sorted({**compat.COMPLETION, **compat.SAMPLING})]
                         + [("chat", n) for n in sorted({**compat.CHAT, **compat.SAMPLING})]
                         + [("generate", n) for n in sorted({**compat.GENERATE, **compat.SAMPLING})])
def test_call_tables(llm, where, name):
    table = {**compat.COMPLETION, **compat.CHAT, **compat.SAMPLING, **compat.GENERATE}
    default, action, _ = table[name]
    msgs = [{"role": "user", "content": "hi"}]
    call = {"completion": lambda **kw: llm("hello", max_tokens=2, temperature=0, **kw),
            "chat": lambda **kw: llm.create_chat_completion(msgs, max_tokens=2, temperature=0, **kw),
            "generate": lambda **kw: next(llm.generate(llm.tokenize(b"hello"), temperature=0, **kw))}[where]
    call(**{name: default})
    if action == compat.REFUSE:
        with pytest.raises(NotImplementedError, match=name):
            call(**{name: other_value(default)})
    else:
        assert action == compat.WITH
        call(**{name: other_value(default)})


def test_unknown_names_are_type_errors(model, llm):
    with pytest.raises(TypeError, match="bogus"):
        Llama(model, bogus=1)
    with pytest.raises(TypeError, match="bogus"):
        llm("x", bogus=1)
    with pytest.raises(TypeError, match="bogus"):
        llm.create_chat_completion([{"role": "user", "content": "x"}], bogus=1)
    with pytest.raises(TypeError, match="bogus"):
        next(llm.generate([1], bogus=1))


def test_embedding_methods_need_embedding_true(llm):
    with pytest.raises(ValueError, match="embedding=True"):
        llm.embed("x")
    with pytest.raises(ValueError, match="embedding=True"):
        llm.create_embedding("x")


# ---- parameters that work ----

def argmax_continuation(path, toks, n, banned=()):
    """Reference: greedy tokens from _core, with banned ids removed from each argmax."""
    m = _core.Model(path)
    ctx = _core.Context(m, 128, 512, 1)
    ctx.decode(toks)
    out = []
    for _ in range(n):
        lg = np.array(ctx.logits(), dtype=np.float64)
        lg[list(banned)] = -np.inf
        t = int(np.argmax(lg))
        if m.is_eog(t):
            break
        out.append(t)
        ctx.decode([t])
    return out


def test_logit_bias_bans_and_forces(llm, model):
    toks = llm.tokenize(b"The cat")
    free = argmax_continuation(model, toks, 6)
    ban = set(free[:2])
    out = llm(toks, max_tokens=6, temperature=0, logit_bias={t: -1e9 for t in ban})
    ref = argmax_continuation(model, toks, 6, banned=ban)
    assert out["choices"][0]["text"] == llm.detokenize(ref).decode("utf-8", errors="replace")
    # +100 on one token outweighs every other logit; OpenAI's JSON spells keys as strings
    forced = free[0] + 1 if not llm.model.is_eog(free[0] + 1) else free[0] + 2
    out = llm(toks, max_tokens=4, temperature=0.9, seed=3, logit_bias={str(forced): 1000.0})
    assert llm.tokenize(out["choices"][0]["text"].encode(), add_bos=False) == [forced] * 4 or \
        out["choices"][0]["text"] == llm.detokenize([forced] * 4).decode("utf-8", errors="replace")
    with pytest.raises(ValueError, match="logit_bias"):
        llm("x", logit_bias={llm.n_vocab(): 1.0})
    with pytest.raises(ValueError, match="logit_bias"):
        llm("x", logit_bias={"a": 1.0})


def test_logits_processor_sees_tokens_and_steers(llm, model):
    toks = llm.tokenize(b"Hello there")
    seen = []
    target = 40

    def only_target(input_ids, scores):
        assert input_ids.dtype == np.intc and scores.dtype == np.float32 and scores.shape == (llm.n_vocab(),)
        seen.append(list(input_ids))
        s = np.full_like(scores, -np.inf)
        s[target] = 0.0
        return s

    out = llm(toks, max_tokens=3, temperature=0.7, seed=1, logits_processor=LogitsProcessorList([only_target]))
    assert out["choices"][0]["text"] == llm.detokenize([target] * 3).decode("utf-8", errors="replace")
    assert seen == [toks, toks + [target], toks + [target, target]]
    with pytest.raises(TypeError, match="logits_processor"):
        llm("x", logits_processor=[lambda i, s: "not an array"])
    with pytest.raises(TypeError, match="logits_processor"):
        llm("x", logits_processor=3)


def test_stopping_criteria(llm):
    toks = llm.tokenize(b"Once upon")
    calls = []

    def after_three(input_ids, logits):
        calls.append(len(input_ids))
        return len(input_ids) >= len(toks) + 3

    out = llm(toks, max_tokens=20, temperature=0, stopping_criteria=StoppingCriteriaList([after_three]))
    c = out["choices"][0]
    if out["usage"]["completion_tokens"] == 3:  # no end token came first
        assert c["finish_reason"] == "stop"
        assert calls == [len(toks) + 1, len(toks) + 2, len(toks) + 3]
    gen = list(llm.generate(toks, temperature=0, stopping_criteria=after_three))
    assert len(gen) <= 3


def test_generate_temp_alias_and_last_n(llm, model):
    toks = llm.tokenize(b"abc")
    a = [t for _, t in zip(range(5), llm.generate(toks, temp=0))]
    b = [t for _, t in zip(range(5), llm.generate(toks, temperature=0))]
    assert a == b == argmax_continuation(model, toks, 5)[:len(a)]


def test_chat_format_uses_the_named_family(model):
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    with Llama(model, n_ctx=64, chat_format="llama-2") as m:
        bos = m.model.token_to_piece(m.token_bos(), True).decode() if m.token_bos() >= 0 else ""
        eos = m.model.token_to_piece(m.token_eos(), True).decode() if m.token_eos() >= 0 else ""
        text = m.apply_chat_template(msgs)
        assert text == _core.apply_chat_template("llama2", msgs, True, bos, eos)
        assert "[INST]" in text and "<<SYS>>" in text and "<|im_start|>" not in text
    with Llama(model, n_ctx=64, chat_format="chatml") as m:
        assert m.apply_chat_template(msgs).startswith("<|im_start|>system\nS<|im_end|>")
    with pytest.raises(ValueError, match="chat_format"):
        Llama(model, chat_format="no-such-format")


def test_kv_type(model):
    toks = [1, 5, 9, 13, 17]
    with Llama(model, n_ctx=64, type_k=0, type_v=0) as a:
        a.eval(toks)
        m = _core.Model(model)
        ref = _core.Context(m, 64, 512, 1, "f32")
        ref.decode(toks)
        assert np.array_equal(a.logits, ref.logits())
    with pytest.raises(NotImplementedError, match="type_k"):
        Llama(model, type_k=8)
    with pytest.raises(NotImplementedError, match="type_v"):
        Llama(model, type_k=0, type_v=1)


def test_model_name_reported(llm):
    assert llm("x", max_tokens=1, model="my-model")["model"] == "my-model"
    out = llm.create_chat_completion([{"role": "user", "content": "x"}], max_tokens=1, model="m2")
    assert out["model"] == "m2"
