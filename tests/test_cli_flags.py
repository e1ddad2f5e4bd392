"""pinfer-cli flags that llama-cli users type: --version, --ignore-eos, -r, -no-cnv,
--log-disable, and -fa / --mlock / --no-mmap accepted with a notice. Outputs are
checked against argmax continuations from the model's own logits (_core)."""
import os
import re

import numpy as np

from pinfer import _core  # noqa: E402
from test_cli import ROOT, run  # noqa: E402

# the conftest fixtures: model, eos_model
MODEL_SEED = 9
EOS_SEED = 8


def argmax_bytes(path, prompt, n, ban_eog=False):
    m = _core.Model(path)
    ctx = _core.Context(m, 256, 512, 2)
    ctx.decode(m.tokenize(prompt.encode(), True, True))
    eog = [t for t in range(m.n_vocab) if m.is_eog(t)]
    out = []
    for _ in range(n):
        lg = np.array(ctx.logits(), dtype=np.float64)
        if ban_eog:
            lg[eog] = -np.inf
        t = int(np.argmax(lg))
        if m.is_eog(t):
            break
        out.append(t)
        ctx.decode([t])
    return m.detokenize(out)


def test_version():
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        want = re.search(r'^version = "([^"]+)"', f.read(), re.M).group(1)
    r = run("--version")
    assert r.returncode == 0 and r.stdout.decode().strip() == f"pinfer-cli {want}"


def test_ignore_eos(eos_model):
    r = run("-m", eos_model, "-p", "hi", "-n", 5, "--temp", 0, "--no-display-prompt")
    assert r.returncode == 0 and r.stdout == b"\n"  # the end token comes first
    r = run("-m", eos_model, "-p", "hi", "-n", 5, "--temp", 0, "--no-display-prompt", "--ignore-eos")
    assert r.returncode == 0, r.stderr
    assert r.stdout == argmax_bytes(eos_model, "hi", 5, ban_eog=True) + b"\n"
    assert len(r.stdout) > 1


def test_reverse_prompt(model):
    full = argmax_bytes(model, "The quick", 30)
    text = full.decode("utf-8", errors="ignore")
    stop = next((c for c in text[1:] if c.isprintable() and c != " "), None)
    assert stop is not None
    cut = full[:full.index(stop.encode(), 1) + len(stop.encode())]
    r = run("-m", model, "-p", "The quick", "-n", 30, "--temp", 0, "--no-display-prompt", "-r", stop)
    assert r.returncode == 0, r.stderr
    assert r.stdout == cut + b"\n"  # stops right after the reverse prompt, which is printed
    r = run("-m", model, "-p", "x", "-r", "")
    assert r.returncode != 0 and b"-r" in r.stderr


def test_accepted_no_effect_flags_and_log_disable(model):
    base = ("-m", model, "-p", "The", "-n", 4, "--temp", 0, "--no-display-prompt")
    ref = run(*base)
    for flags in (["-fa"], ["-fa", "on"], ["--flash-attn", "off"], ["--mlock"], ["--no-mmap"], ["-no-cnv"]):
        r = run(*base, *flags)
        assert r.returncode == 0, (flags, r.stderr)
        assert r.stdout == ref.stdout
        if flags[0] != "-no-cnv":
            assert f"{flags[0]} has no effect".encode() in r.stderr
    r = run(*base, "--log-disable", "--mlock")
    assert r.returncode == 0 and r.stdout == ref.stdout
    assert b"eval time" in ref.stderr and r.stderr == b""
