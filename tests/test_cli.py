"""pinfer-cli: flags, error paths, greedy output against the model's own logits,
context limits, timings, chat mode.

The binary is $PINFER_BUILD_DIR/pinfer-cli when PINFER_BUILD_DIR is set, else
pinfer-cli on PATH (installed by pip).
"""
import os
import re

import pytest
import torch  # noqa: F401
import transformers  # noqa: F401

from conftest import greedy_continuation
from conftest import run_pinfer_cli as run  # noqa: F401  (test_cli_flags imports it from here)
from pinfer import _core  # noqa: E402

# the conftest fixtures: model, eos_model
MODEL_SEED = 7
EOS_SEED = 8


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def greedy_reference(path, prompt, n, n_ctx=256, precision="high"):
    """The argmax continuation computed from pinfer's logits through the Python API."""
    toks = _core.Model(path).tokenize(prompt, True, True)
    m, out = greedy_continuation(path, toks, n, n_ctx, precision)
    return toks, out, m.detokenize(out)


def timings(stderr):
    s = stderr.decode()
    assert "load time" in s
    p = re.search(r"prompt eval time\s*=\s*[\d.]+ ms /\s*(\d+) tokens", s)
    e = re.search(r"\n\S*\s+eval time\s*=\s*[\d.]+ ms /\s*(\d+) tokens", s)
    assert p and e, s
    return int(p.group(1)), int(e.group(1))


# ---- usage and errors ----

def test_help():
    r = run("--help")
    assert r.returncode == 0
    out = r.stdout.decode()
    for flag in ("--model", "--prompt", "--n-predict", "--ctx-size", "--threads", "--temp", "--top-k",
                 "--top-p", "--min-p", "--repeat-penalty", "--conversation", "--system-prompt", "--escape",
                 "--no-display-prompt", "--seed", "--batch-size", "--file", "--precision"):
        assert flag in out


@pytest.mark.parametrize("args, message", [
    (["--bogus"], "unknown option: --bogus"),
    (["-m"], "missing value for -m"),
    (["-p"], "missing value for -p"),
    (["-n", "abc"], "invalid integer for -n"),
    (["-n", "12x"], "invalid integer for -n"),
    (["-n", "-5"], "out of range"),
    (["-c", "99999999999"], "-c"),
    (["--temp", "hot"], "invalid number for --temp"),
    (["--top-p", ""], "invalid number for --top-p"),
    (["-s", "4294967296"], "out of range"),
    (["-t", "1.5"], "invalid integer for -t"),
    (["stray"], "unexpected argument"),
    (["-sys", "x", "-no-cnv"], "needs -cnv"),
    (["-p", "a", "-f", "b"], "either -p or -f"),
    (["-ctk", "q4_0"], "cache type"),
    (["--precision", "ultra"], "invalid precision 'ultra'"),
])
def test_flag_errors(model, args, message):
    r = run("-m", model, *args)
    assert r.returncode != 0
    err = r.stderr.decode()
    assert message in err
    assert "usage:" in err
    assert r.stdout == b""


def test_embedded_default_model():
    # no -m: the embedded default model (ReGLU, trained on Austen) answers greedily
    r = run("-p", "It is a truth", "-n", "8", "--temp", "0", "--no-display-prompt")
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert len(out.split()) >= 3
    ref = os.path.join(ROOT, "models", "pinfer-default.gguf")
    assert r.stdout[:-1] == greedy_reference(ref, "It is a truth", 8)[2]


def test_default_model_env_must_exist(tmp_path):
    r = run("-p", "hi", env={"PINFER_DEFAULT_MODEL": str(tmp_path / "missing.gguf")})
    assert r.returncode != 0
    assert "missing.gguf" in r.stderr.decode()


def test_default_model_from_env(model):
    r = run("-p", "hi", "-n", "3", "--temp", "0", "--no-display-prompt", env={"PINFER_DEFAULT_MODEL": model})
    assert r.returncode == 0, r.stderr
    assert r.stdout[:-1] == greedy_reference(model, "hi", 3)[2]


def test_missing_model_file(tmp_path):
    r = run("-m", tmp_path / "nope.gguf", "-p", "hi")
    assert r.returncode != 0
    err = r.stderr.decode()
    assert "nope.gguf" in err and "usage:" not in err


@pytest.mark.parametrize("kind", ["empty", "text", "truncated", "bad_version"])
def test_invalid_model_file(model, tmp_path, kind):
    data = open(model, "rb").read()
    bad = tmp_path / f"{kind}.gguf"
    if kind == "empty":
        bad.write_bytes(b"")
    elif kind == "text":
        bad.write_bytes(b"this is not a model\n" * 10)
    elif kind == "truncated":
        bad.write_bytes(data[: len(data) // 2])
    else:
        bad.write_bytes(data[:4] + (999).to_bytes(4, "little") + data[8:])
    r = run("-m", bad, "-p", "hi", "-n", "2")
    assert r.returncode != 0
    assert "error" in r.stderr.decode().lower()
    assert r.stdout == b""


def test_unreadable_prompt_file(model, tmp_path):
    r = run("-m", model, "-f", tmp_path / "missing.txt")
    assert r.returncode != 0
    assert "missing.txt" in r.stderr.decode()


def test_prompt_too_long(model):
    r = run("-m", model, "-c", "16", "-p", "x" * 100)
    assert r.returncode != 0
    err = r.stderr.decode()
    assert "too long" in err and "16" in err


# ---- generation ----

@pytest.mark.parametrize("batch", [512, 3])
def test_greedy_matches_argmax(model, batch):
    prompt = "The quick brown fox"
    toks, gen, ref = greedy_reference(model, prompt, 12)
    r = run("-m", model, "-p", prompt, "-n", 12, "--temp", 0, "-b", batch, "-t", 2)
    assert r.returncode == 0, r.stderr
    assert r.stdout == prompt.encode() + ref + b"\n"
    n_prompt, n_eval = timings(r.stderr)
    assert n_prompt == len(toks)
    assert n_eval == len(gen) - 1  # the last sampled token is never evaluated


@pytest.mark.parametrize("precision", ["high", "fast"])
def test_precision_flag(model, precision):
    prompt = "It is a truth universally acknowledged"
    ref = greedy_reference(model, prompt, 10, precision=precision)[2]
    r = run("-m", model, "-p", prompt, "-n", 10, "--temp", 0, "-t", 2, "--precision", precision)
    assert r.returncode == 0, r.stderr
    assert r.stdout == prompt.encode() + ref + b"\n"


def test_no_display_prompt_and_file(model, tmp_path):
    prompt = "Once upon a time"
    ref = greedy_reference(model, prompt, 6)[2]
    f = tmp_path / "prompt.txt"
    f.write_text(prompt + "\n")  # one trailing newline is dropped, as editors add it
    r = run("-m", model, "-f", f, "-n", 6, "--temp", 0, "--no-display-prompt")
    assert r.returncode == 0, r.stderr
    assert r.stdout == ref + b"\n"


def test_escapes(model):
    ref = greedy_reference(model, "a\nb\tcA", 4)[2]
    r = run("-m", model, "-e", "-p", r"a\nb\tc\x41", "-n", 4, "--temp", 0)
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"a\nb\tcA" + ref + b"\n"
    # without -e the backslashes stay
    r = run("-m", model, "-p", r"a\nb", "-n", 1, "--temp", 0)
    assert r.stdout.startswith(rb"a\nb")


def test_until_context_full(model):
    prompt = "hello"
    toks, gen, ref = greedy_reference(model, prompt, 10 ** 6, n_ctx=24)
    assert len(toks) + len(gen) == 24 + 1  # the last token fills no cache slot
    r = run("-m", model, "-p", prompt, "-n", -2, "-c", 24, "--temp", 0, "--no-display-prompt")
    assert r.returncode == 0, r.stderr
    assert r.stdout == ref + b"\n"


def test_end_of_generation(eos_model):
    r = run("-m", eos_model, "-p", "hi", "-n", 50, "--temp", 0.7, "--no-display-prompt")
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"\n"
    assert timings(r.stderr)[1] == 0


def test_seed_reproducible(model):
    args = ["-m", model, "-p", "seed test", "-n", 24, "--temp", 1.5, "--top-k", 0, "--top-p", 1.0,
            "--min-p", 0, "--no-display-prompt"]
    a = run(*args, "-s", 42)
    b = run(*args, "-s", 42)
    c = run(*args, "-s", 43)
    assert a.returncode == b.returncode == c.returncode == 0
    assert a.stdout == b.stdout
    assert a.stdout != c.stdout


def test_sampling_flags_accepted(model):
    r = run("-m", model, "-p", "x", "-n", 5, "--temp", 0.9, "--top-k", 5, "--top-p", 0.8, "--min-p", 0.1,
            "--repeat-penalty", 1.3, "--repeat-last-n", 16, "--presence-penalty", 0.5,
            "--frequency-penalty", 0.5, "-s", 1, "-t", 1, "-c", 64, "-ctk", "f32", "--verbose")
    assert r.returncode == 0, r.stderr
    assert "temp 0.90" in r.stderr.decode()
    r = run("-m", model, "-p", "x", "-n", 3, "--repeat-last-n", -1, "--repeat-penalty", 1.5)  # -1: whole context
    assert r.returncode == 0, r.stderr


# ---- chat ----

def test_conversation_first_reply(model):
    m = _core.Model(model)
    prompt = m.apply_chat_template([("system", "be brief"), ("user", "hello there")], True)
    assert prompt.endswith("<|im_start|>assistant\n")
    ref = greedy_reference(model, prompt, 5)[2]
    r = run("-m", model, "-cnv", "-sys", "be brief", "-n", 5, "--temp", 0, stdin=b"hello there\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout == ref + b"\n"


def test_conversation_turns_and_exit(eos_model):
    # every reply is empty (the model ends its turn at once): one "\n" per turn
    r = run("-m", eos_model, "-cnv", "-n", 10, stdin=b"one\n\ntwo\nthree\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"\n\n\n"
    r = run("-m", eos_model, "-cnv", stdin=b"one\n/exit\ntwo\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"\n"
    n_prompt, n_eval = timings(r.stderr)
    # the end-of-turn token is evaluated so the cache matches the template
    assert n_eval == 1


def test_conversation_incremental_prefix(eos_model):
    """Turn 2 evaluates only the text after turn 1 (the chat so far stays cached)."""
    m = _core.Model(eos_model)
    t1 = m.apply_chat_template([("user", "one")], True)
    t2 = m.apply_chat_template([("user", "one"), ("assistant", ""), ("user", "two")], True)
    n1 = len(m.tokenize(t1, True, True))
    suffix = t2[len(t1) + len("<|im_end|>"):]
    n2 = len(m.tokenize(suffix, False, True))
    r = run("-m", eos_model, "-cnv", "--verbose", stdin=b"one\ntwo\n")
    assert r.returncode == 0, r.stderr
    n_prompt, n_eval = timings(r.stderr)
    assert (n_prompt, n_eval) == (n1 + n2, 2)


def test_conversation_prompt_is_first_turn(eos_model):
    r = run("-m", eos_model, "-cnv", "-p", "first", stdin=b"")
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"\n"
