"""pinfer-cli's llama-cli behaviours: conversation by default with the model's template
(rendered by the same Python code as pinfer.Llama), -i / --interactive-first with
--in-prefix / --in-suffix, grammars, --prompt-cache, --keep and the context shift,
--color, --chat-template, and Ctrl-C (stop the reply, then exit). References are
pinfer.Llama on the same model (same engine, same batches: greedy tokens agree)."""
import json
import os
import select
import signal
import subprocess
import sys
import time

import jsonschema
import numpy as np
import pytest

import tinymodel
from conftest import pinfer_cli_path as cli_path
from pinfer import Llama


def env():
    e = dict(os.environ)
    e.pop("PINFER_DEFAULT_MODEL", None)
    e["PINFER_PYTHON"] = sys.executable  # the helper runs in this interpreter
    return e


def cli(*args, stdin=None, timeout=120):
    r = subprocess.run([cli_path(), "-t", "2", *map(str, args)], input=stdin, capture_output=True, timeout=timeout,
                       env=env())
    return r.returncode, r.stdout.decode("utf-8", errors="replace"), r.stderr.decode("utf-8", errors="replace")


@pytest.fixture(scope="module")
def default():
    with Llama(n_ctx=512, n_threads=2) as m:
        yield m


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path, _ = tinymodel.tiny_model(str(tmp_path_factory.mktemp("cli_i") / "tiny.gguf"), n_embd=32, n_layer=2,
                                   n_head=4, n_head_kv=2, n_ff=64, seed=7)
    return path


def greedy(llm, n):
    """n greedy tokens after what llm has evaluated, each evaluated (as the CLI does)."""
    out = []
    for _ in range(n):
        t = int(np.argmax(llm.logits))
        out.append(t)
        llm.eval([t])
    return out


def test_conversation_is_the_default_and_uses_the_python_formatter(default):
    msgs = [{"role": "user", "content": "Hello there"}]
    ref = default.create_chat_completion(msgs, max_tokens=8, temperature=0)["choices"][0]["message"]["content"]
    rc, out, err = cli("-n", 8, "--temp", 0, stdin=b"Hello there\n")
    assert rc == 0, err
    assert out == ref + "\n"
    rc, out, err = cli("-n", 8, "--temp", 0, stdin=b"Hello there\n/exit\nnot read\n")
    assert rc == 0 and out == ref + "\n"
    # --chat-template: a family name is formatted as chat_format=, Jinja text is rendered
    with Llama(n_ctx=256, n_threads=2, chat_format="chatml") as c:
        ref_c = c.create_chat_completion(msgs, max_tokens=6, temperature=0)["choices"][0]["message"]["content"]
    rc, out, err = cli("-n", 6, "--temp", 0, "--chat-template", "chatml", stdin=b"Hello there\n")
    assert rc == 0 and out == ref_c + "\n", err
    jinja = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}[assistant] "
    ref_j = default.create_chat_completion(msgs, max_tokens=6, temperature=0, chat_template=jinja)
    rc, out, err = cli("-n", 6, "--temp", 0, "--chat-template", jinja, "--jinja", stdin=b"Hello there\n")
    assert rc == 0 and out == ref_j["choices"][0]["message"]["content"] + "\n", err
    # -no-cnv: plain generation, stdin unread
    rc, out, _ = cli("-no-cnv", "-n", 4, "--temp", 0, "-p", "Hello", stdin=b"ignored\n")
    assert rc == 0 and out.startswith("Hello")


def test_interactive_with_prefix_and_suffix(tiny):
    with Llama(tiny, n_ctx=128, n_threads=2) as llm:
        llm.eval(llm.tokenize(b"Once upon", True, True))
        first = greedy(llm, 4)
        user = llm.tokenize(b"Q: more\nA:", False, False)
        llm.eval(user)
        second = greedy(llm, 4)
        text = lambda ts: llm.detokenize(ts).decode("utf-8", errors="replace")  # noqa: E731
        expect = "Once upon" + text(first) + "Q: " + "A:" + text(second) + "Q: " + "\n"
    rc, out, err = cli("-m", tiny, "-p", "Once upon", "-i", "-n", 4, "--temp", 0, "--in-prefix", "Q: ",
                       "--in-suffix", "A:", stdin=b"more\n")
    assert rc == 0, err
    assert out == expect
    # --interactive-first: input before anything is generated
    rc, out, err = cli("-m", tiny, "--interactive-first", "-n", 3, "--temp", 0, stdin=b"Once upon\n")
    assert rc == 0, err
    with Llama(tiny, n_ctx=128, n_threads=2) as llm:
        llm.eval(llm.tokenize(b"Once upon\n", True, False))
        assert out == llm.detokenize(greedy(llm, 3)).decode("utf-8", errors="replace") + "\n"


def test_grammar_flags(default, tmp_path):
    rc, out, err = cli("-p", "Is it true?", "-n", 10, "--grammar", 'root ::= " yes" | " no"', "-s", 1)
    assert rc == 0, err
    assert out in ("Is it true? yes\n", "Is it true? no\n")
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "age": {"type": "integer", "minimum": 0, "maximum": 99}},
              "required": ["name", "age"], "additionalProperties": False}
    for seed in (1, 2):
        rc, out, err = cli("-p", "Mr. Darcy:", "--no-display-prompt", "-n", 80, "-s", seed, "-j", json.dumps(schema))
        assert rc == 0, err
        jsonschema.validate(json.loads(out), schema)
    g = tmp_path / "g.gbnf"
    g.write_text('root ::= "A" [0-9] [0-9]\n')
    rc, out, err = cli("-p", "x", "--no-display-prompt", "-n", 10, "--grammar-file", g)
    assert rc == 0 and len(out.strip()) == 3 and out[0] == "A" and out[1:3].isdigit(), (out, err)
    rc, out, err = cli("-p", "x", "-n", 3, "--grammar", "root ::= (")
    assert rc == 1 and "invalid grammar" in err
    rc, _, err = cli("-p", "x", "--grammar-file", tmp_path / "missing.gbnf")
    assert rc == 2 and "cannot read grammar file" in err
    rc, _, err = cli("-p", "x", "--grammar", "root ::= \"a\"", "-j", "{}")
    assert rc == 2 and "one of --grammar" in err


def test_prompt_cache(tiny, tmp_path):
    cache = tmp_path / "p.cache"
    base = ("-m", tiny, "-n", 6, "--temp", 0, "-c", 128)
    rc, plain, _ = cli(*base, "-p", "The cat sat on the mat")
    rc, out1, err1 = cli(*base, "-p", "The cat sat on the mat", "--prompt-cache", cache)
    assert rc == 0 and os.path.getsize(cache) > 0 and out1 == plain, err1
    rc, out2, err2 = cli(*base, "-p", "The cat sat on the mat", "--prompt-cache", cache)
    n = len(Llama(tiny, n_ctx=32).tokenize(b"The cat sat on the mat", True, True))
    assert rc == 0 and f"{n} of {n} prompt tokens restored" in err2 and out2 == plain
    # a longer prompt restores the shared prefix and evaluates the rest
    rc, longer, _ = cli(*base, "-p", "The cat sat on the mat and slept")
    rc, out3, err3 = cli(*base, "-p", "The cat sat on the mat and slept", "--prompt-cache", cache)
    assert rc == 0 and out3 == longer and f"{n} of" in err3, err3
    assert sorted(os.listdir(tmp_path)) == ["p.cache"]  # no temporary file left
    cache.write_bytes(b"garbage")
    rc, out4, err4 = cli(*base, "-p", "The cat sat on the mat", "--prompt-cache", cache)
    assert rc == 0 and out4 == plain and "not a pinfer prompt cache" in err4
    rc, _, err = cli("-m", tiny, "-cnv", "--prompt-cache", cache, stdin=b"")
    assert rc == 1 and "--prompt-cache" in err


def test_context_shift_keeps_going(tiny):
    rc, out, err = cli("-m", tiny, "-c", 48, "-n", 120, "--temp", 0, "--ignore-eos", "-p", "The cat sat",
                       "--keep", 2)
    assert rc == 0, err
    assert err.count("the context is full") == 1 and "keeping the first 2" in err
    rc, big, _ = cli("-m", tiny, "-c", 256, "-n", 120, "--temp", 0, "--ignore-eos", "-p", "The cat sat")
    # identical until the context filled, and 120 tokens in both
    with Llama(tiny, n_ctx=32) as llm:
        n_prompt = len(llm.tokenize(b"The cat sat", True, True))
        toks_big = llm.tokenize(big.rstrip("\n").encode(), True, False)
    assert len(toks_big) >= n_prompt + 100
    common = 0
    while common < min(len(out), len(big)) and out[common] == big[common]:
        common += 1
    assert common >= len("The cat sat") + 20 and len(out) > common
    rc, out, err = cli("-m", tiny, "-c", 48, "-n", 120, "--temp", 0, "--ignore-eos", "-p", "The cat sat")
    assert rc == 0 and "keeping the first 0" in err  # tiny has no BOS: --keep 0 keeps nothing


def test_color(tiny):
    rc, out, _ = cli("-m", tiny, "-p", "Hello", "-n", 2, "--temp", 0, "--color")
    assert rc == 0 and out.startswith("\033[33mHello\033[0m")


def read_some(stream, timeout):
    ready, _, _ = select.select([stream], [], [], timeout)
    return os.read(stream.fileno(), 4096) if ready else b""


def read_until(stream, done, timeout, got=b""):
    """got plus what stream gives until done(all of it) or timeout seconds pass."""
    deadline = time.time() + timeout
    while not done(got) and time.time() < deadline:
        got += read_some(stream, 1)
    return got


def test_ctrl_c_stops_the_reply_then_exits(default):
    p = subprocess.Popen([cli_path(), "-t", "2", "-c", "2048", "--ignore-eos", "--temp", "0"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env())
    try:
        p.stdin.write(b"Tell me a long story\n")
        p.stdin.flush()
        got = read_until(p.stdout, lambda b: len(b) >= 20, 60)
        assert len(got) >= 20  # the reply is streaming
        p.send_signal(signal.SIGINT)
        err = read_until(p.stderr, lambda b: b"reply stopped" in b, 30)
        assert b"reply stopped" in err and p.poll() is None  # back at the prompt, still running
        time.sleep(0.3)
        while read_some(p.stdout, 0.2):
            pass
        p.stdin.write(b"Hi\n")
        p.stdin.flush()
        more = read_until(p.stdout, lambda b: len(b) >= 10, 60)
        assert len(more) >= 10  # the next turn is answered
        p.send_signal(signal.SIGINT)  # stops that reply
        err = read_until(p.stderr, lambda b: b.count(b"reply stopped") >= 2, 30, err)
        time.sleep(0.3)
        p.send_signal(signal.SIGINT)  # at the prompt: exits
        assert p.wait(timeout=30) == 130
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_without_python_the_template_family_serves(tiny, tmp_path):
    e = env()
    e["PINFER_PYTHON"] = str(tmp_path / "no-python")
    run = lambda *a: subprocess.run([cli_path(), "-t", "2", *map(str, a)], input=b"Hello\n",  # noqa: E731
                                    capture_output=True, timeout=60, env=e)
    r = run("-m", tiny, "-n", 4, "--temp", 0)  # tiny's template is ChatML: formatted in C++
    assert r.returncode == 0 and b"formatting the chat by the template's family" in r.stderr, r.stderr
    with Llama(tiny, n_ctx=128, n_threads=2) as llm:
        ref = llm.create_chat_completion([{"role": "user", "content": "Hello"}], max_tokens=4, temperature=0)
    assert r.stdout.decode("utf-8", errors="replace") == ref["choices"][0]["message"]["content"] + "\n"
    r = run("-n", 4)  # the embedded model's template has no family
    assert r.returncode == 1 and b"cannot apply the chat template" in r.stderr and b"no-python" in r.stderr
    r = run("-m", tiny, "-p", "x", "-n", 2, "--grammar", 'root ::= "a"')
    assert r.returncode == 1 and b"grammar" in r.stderr and b"no-python" in r.stderr


def test_reverse_prompt_hands_control_back_with_the_cache_intact(tiny):
    with Llama(tiny, n_ctx=128, n_threads=2) as llm:
        piece = lambda t: llm.model.token_to_piece(t, False)  # noqa: E731
        llm.eval(llm.tokenize(b"Once upon", True, True))
        probe = greedy(llm, 3)
        rev = piece(probe[2])
        assert rev.strip() and b"\n" not in rev

        def reply(n):  # greedy until n tokens or the text ends with the reverse prompt; each evaluated
            out = b""
            for _ in range(n):
                t = int(np.argmax(llm.logits))
                out += piece(t)
                llm.eval([t])
                if out.endswith(rev):
                    break
            return out

        llm.reset()
        llm.eval(llm.tokenize(b"Once upon", True, True))
        expect = b"Once upon" + reply(12)
        llm.eval(llm.tokenize(b"more\n", False, False))
        expect += reply(12) + b"\n"
    rc, out, err = cli("-m", tiny, "-p", "Once upon", "-i", "-n", 12, "--temp", 0, "-r", rev.decode(),
                       stdin=b"more\n")
    assert rc == 0, err
    assert out == expect.decode("utf-8", errors="replace")
