"""Bounded resources and argument errors: thread counts capped at the cores
with a notice (pinfer-cli, pinfer.Llama), prompt files that are directories or
endless refused, chat templates from a model file bounded in time, output and
memory, and Python argument errors raised as TypeError / ValueError naming
the argument."""
import os
import subprocess
import sys
import time

import pytest

import tinymodel
from conftest import TINY_1L
from pinfer import Llama, chat_template  # noqa: E402
from pinfer.cli import find_tool  # noqa: E402

# the conftest fixture model: a one-layer tiny llama
MODEL_SEED, MODEL_SHAPE = 0, TINY_1L


@pytest.fixture(scope="module")
def llm(model):
    return Llama(model, n_ctx=64, n_threads=1)


def cores():
    return len(os.sched_getaffinity(0))


def cli(*args, timeout=60):
    return subprocess.run([find_tool("pinfer-cli"), *map(str, args)], capture_output=True, timeout=timeout)


# ---------------------------------------------------------------- threads

def test_llama_caps_threads_with_a_notice(model, capfd):
    llm = Llama(model, n_ctx=32, n_threads=10**6)
    out = llm("ab", max_tokens=2, temperature=0)
    err = capfd.readouterr().err
    assert f"1000000 threads requested, but only {cores()}" in err, err
    assert out["usage"]["prompt_tokens"] > 0
    llm.close()
    # and the process can still make contexts (no threads were leaked)
    again = Llama(model, n_ctx=32, n_threads=1)
    assert again("ab", max_tokens=1, temperature=0)["usage"]["prompt_tokens"] > 0


def test_llama_threads_at_the_core_count_need_no_notice(model, capfd):
    Llama(model, n_ctx=32, n_threads=cores())("ab", max_tokens=1)
    assert "threads requested" not in capfd.readouterr().err


def test_cli_caps_threads_with_a_notice(model):
    r = cli("-m", model, "-p", "ab", "-n", "2", "-t", "1024", "--temp", "0")
    assert r.returncode == 0, r.stderr
    assert f"1024 threads requested, but only {cores()}" in r.stderr.decode()


def test_quantize_caps_threads_with_a_notice(model, tmp_path):
    r = subprocess.run([find_tool("pinfer-quantize"), model, str(tmp_path / "q.gguf"), "q8_0", "--threads", "4096"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"4096 threads requested, but only {cores()}" in r.stderr


def threads_of(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("Threads:")).split()[1])


def test_no_threads_left_behind(model):
    base = threads_of(os.getpid())
    for _ in range(3):
        Llama(model, n_ctx=32, n_threads=10**6).close()
    assert threads_of(os.getpid()) == base


# ---------------------------------------------------------------- prompt files

def test_cli_refuses_a_directory_as_prompt_file(model, tmp_path):
    r = cli("-m", model, "-f", tmp_path, "-n", "1")
    assert r.returncode != 0 and b"is a directory" in r.stderr, r.stderr


def test_cli_caps_endless_prompt_files(model):
    t0 = time.monotonic()
    r = cli("-m", model, "-f", "/dev/zero", "-n", "1", timeout=120)
    assert r.returncode != 0 and b"limit is 64 MiB" in r.stderr, r.stderr
    assert time.monotonic() - t0 < 60


def test_cli_caps_large_prompt_files(model, tmp_path):
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        f.truncate((64 << 20) + 1)  # sparse: costs no disk
    r = cli("-m", model, "-f", big, "-n", "1")
    assert r.returncode != 0 and b"limit is 64 MiB" in r.stderr, r.stderr


# ---------------------------------------------------------------- chat templates

MSG = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("tmpl,word", [
    ("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", "longer than"),
    ("{{ 'x' * 10**10 }}", "output limit"),
    ("{{ ['x'] * 10**10 }}", "output limit"),
    ("{{ 10 ** 100000000 }}", "exponent"),
    # `~` is not a binop the sandbox sees: the memory bound stops it, or on a loaded machine the time bound first
    ("{% set ns = namespace(s='xx') %}{% for i in range(60) %}"
     "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
     "MiB|longer than"),
    ("{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}", "exceeds"),
    ("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
     "output limit"),
])
def test_hostile_chat_templates_are_bounded(llm, tmpl, word):
    t0 = time.monotonic()
    with pytest.raises(ValueError, match=word):
        llm.apply_chat_template(MSG, chat_template=tmpl)
    assert time.monotonic() - t0 < chat_template.MAX_SECONDS + 10


def test_ordinary_templates_still_render(llm):
    out = llm.apply_chat_template(MSG, chat_template=tinymodel.CHATML_TEMPLATE)
    assert out == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_the_trace_function_is_restored(llm):
    before = sys.gettrace()
    with pytest.raises(ValueError):
        llm.apply_chat_template(MSG, chat_template="{{ 'x' * 10**10 }}")
    llm.apply_chat_template(MSG, chat_template=tinymodel.CHATML_TEMPLATE)
    assert sys.gettrace() is before


# ---------------------------------------------------------------- Python argument errors

@pytest.mark.parametrize("call,exc,word", [
    (lambda m: m("a\udc80b", max_tokens=1), ValueError, "prompt"),
    (lambda m: m.tokenize("a\udc80b"), ValueError, "text"),
    (lambda m: m.create_chat_completion([{"role": "user", "content": "x\udc80"}], max_tokens=1), ValueError,
     "surrogate"),
    (lambda m: m("ab", max_tokens=1, stop=[b"x"]), TypeError, "stop[0]"),
    (lambda m: m("ab", max_tokens=1, stop=5), TypeError, "stop"),
    (lambda m: m("ab", max_tokens=1, top_k=10**30), ValueError, "top_k"),
    (lambda m: m("ab", max_tokens=1, seed=10**30), ValueError, "seed"),
    (lambda m: m("ab", max_tokens=1, repeat_last_n=-10**30), ValueError, "repeat_last_n"),
    (lambda m: m("ab", max_tokens=10**30 * 1.5), TypeError, "max_tokens"),
    (lambda m: m("ab", max_tokens=1, temperature="hot"), TypeError, "temperature"),
    (lambda m: m("ab", max_tokens=1, temperature=float("nan")), ValueError, "temperature"),
    (lambda m: m("ab", max_tokens=1, top_p=None), TypeError, "top_p"),
    (lambda m: m.eval([10**30]), ValueError, "token id"),
    (lambda m: m.detokenize([10**30]), ValueError, "token id"),
    (lambda m: m.detokenize(["a"]), TypeError, "tokens"),
    (lambda m: m([1, 10**30], max_tokens=1), ValueError, "token id"),
])
def test_python_argument_errors_name_the_argument(llm, call, exc, word):
    with pytest.raises(exc) as e:
        call(llm)
    assert word in str(e.value), e.value


@pytest.mark.parametrize("kw,exc,word", [
    ({"n_ctx": 10**30}, ValueError, "n_ctx"),
    ({"n_batch": 10**30}, ValueError, "n_batch"),
    ({"n_threads": 10**30}, ValueError, "n_threads"),
    ({"n_threads": 0}, ValueError, "n_threads"),
    ({"n_ctx": "big"}, TypeError, "n_ctx"),
    ({"seed": 2**40}, ValueError, "seed"),
])
def test_constructor_argument_errors(model, kw, exc, word):
    with pytest.raises(exc, match=word):
        Llama(model, **kw)


@pytest.mark.parametrize("type_id", [2048, -1, 40, 2**31 - 1])
def test_gguf_writer_refuses_unknown_tensor_types(type_id):
    import numpy as np

    from pinfer import _core

    w = _core.GGUFWriter()
    with pytest.raises(ValueError, match=f"unknown tensor type {type_id}"):
        w.add_tensor("x", np.zeros(4, np.float32), type_id, [4])
