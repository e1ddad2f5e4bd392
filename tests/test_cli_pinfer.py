"""The `pinfer` command line (python/pinfer/cli.py): dispatch, output, errors."""
import os
import re
import subprocess
import sys

import gguf
import numpy as np
import pytest

from pinfer import _core, cli
from pinfer.perplexity import perplexity
from tinymodel import tiny_model

TESTS = os.path.dirname(os.path.abspath(__file__))
TEXT = "Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition. " * 12


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    path, _ = tiny_model(str(d / "tiny.gguf"), n_layer=2, seed=4)
    return path


def run_cli(*args):
    """`pinfer ARGS` in a fresh interpreter (the installed package, or the build tree
    through tests/conftest.py when PINFER_BUILD_DIR is set)."""
    code = ("import sys; sys.path.insert(0, %r); import conftest; from pinfer.cli import main; "
            "sys.exit(main(sys.argv[1:]))" % TESTS)
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=300)


def test_info(model, capsys):
    assert cli.main(["info", model]) == 0
    out = capsys.readouterr().out
    assert "architecture: llama" in out
    assert re.search(r"block_count\s+2\b", out) and re.search(r"embedding_length\s+64\b", out)
    assert "file type:    F32 (0)" in out
    r = gguf.GGUFReader(model)
    n_params = sum(int(np.prod(t.shape)) for t in r.tensors)
    assert re.search(rf"f32\s+{len(r.tensors)}\s+{n_params}\s", out)
    assert "tokenizer:    gpt2, 273 tokens, chat template" in out
    assert "sparse / placement: none" in out


def test_info_sparse_keys(model, tmp_path, capsys):
    r = _core.GGUFReader(model)
    w = _core.GGUFWriter()
    for k in r.keys:
        w.add(k, r.get(k), r.types[k])
    w.add("pinfer.neuron_order", "hot-first", _core.GGUF_TYPE_STRING)
    w.add("pinfer.placement.budgets", [1024, 2048], (_core.GGUF_TYPE_ARRAY, _core.GGUF_TYPE_UINT64))
    for t in r.tensors:
        w.add_tensor(t.name, np.asarray(t.data), t.type, t.shape)
    for i in range(2):
        w.add_tensor(f"blk.{i}.ffn_freq", np.zeros(96, np.float32), 0)
    w.add_tensor("blk.0.fc1.weight", np.zeros((8, 64), np.float32), 0)
    out_path = tmp_path / "sparse.gguf"
    w.write(str(out_path))
    assert cli.main(["info", str(out_path)]) == 0
    out = capsys.readouterr().out
    assert "sparse / placement:" in out and "none" not in out.split("sparse / placement:")[1]
    assert "pinfer.neuron_order" in out and "'hot-first'" in out
    assert "pinfer.placement.budgets" in out and "[1024, 2048]" in out
    assert "2 ffn_freq tensor(s)" in out and "1 fc1/fc2 (predictor) tensor(s)" in out


def test_quantize_subcommand(model, tmp_path, capfd):
    out = tmp_path / "q.gguf"
    assert cli.main(["quantize", model, str(out), "q8_0", "--threads", "2"]) == 0
    text = capfd.readouterr().out
    assert "blk.0.attn_q.weight" in text and "q8_0" in text
    r = gguf.GGUFReader(str(out))
    assert {t.name: t.tensor_type.name for t in r.tensors}["blk.1.ffn_up.weight"] == "Q8_0"
    # the tool's exit status and message come through
    assert cli.main(["quantize", model, str(tmp_path / "x.gguf"), "q9_9"]) == 2
    err = capfd.readouterr().err
    assert "unknown type 'q9_9'" in err and "Q4_K_M" in err
    assert not (tmp_path / "x.gguf").exists()


def test_quantize_tool_missing(model, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PINFER_BUILD_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("sysconfig.get_path", lambda name: str(tmp_path))
    monkeypatch.setattr("sys.executable", str(tmp_path / "python"))
    assert cli.main(["quantize", model, str(tmp_path / "o.gguf"), "q8_0"]) == 1
    err = capsys.readouterr().err
    assert "cannot find the 'pinfer-quantize' executable" in err and "PINFER_BUILD_DIR" in err


def test_perplexity_subcommand(model, tmp_path, capsys):
    f = tmp_path / "text.txt"
    f.write_text(TEXT, encoding="utf-8")
    assert cli.main(["perplexity", "-m", model, "-f", str(f), "--ctx", "48", "--max-windows", "3",
                     "--threads", "2", "--batch", "16"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [l.split("]")[0] for l in out[:3]] == ["[1/3", "[2/3", "[3/3"]
    m = re.match(r"final: ppl = ([\d.]+) \+/- ([\d.]+) over (\d+) tokens", out[-2])
    assert m, out
    ppl, err, n = perplexity(model, TEXT, n_ctx=48, max_windows=3)  # llama-perplexity's method
    assert float(m.group(1)) == pytest.approx(ppl, rel=1e-4) and int(m.group(3)) == n == 3 * (47 - 24)
    assert float(m.group(2)) == pytest.approx(err, rel=1e-3)
    assert out[-1] == f"Final estimate: PPL = {ppl:.4f} +/- {err:.5f}"
    assert cli.main(["perplexity", "-m", model, "-f", str(f), "--ctx", "48", "--max-windows", "3",
                     "--all-tokens"]) == 0
    assert capsys.readouterr().out.splitlines()[-2].endswith(f"over {3 * 47} tokens")
    # strided
    assert cli.main(["perplexity", "-m", model, "-f", str(f), "--ctx", "48", "--stride", "16",
                     "--max-windows", "2"]) == 0
    last = capsys.readouterr().out.splitlines()[-2]
    assert last.endswith(f"over {47 + 16} tokens")


@pytest.mark.parametrize("args,msg", [
    (["perplexity", "-m", "{model}", "-f", "{text}", "--ctx", "1"], "n_ctx must be an int >= 2"),
    (["perplexity", "-m", "{model}", "-f", "{text}", "--ctx", "32", "--stride", "40"], "stride"),
    (["perplexity", "-m", "{model}", "-f", "{text}", "--ctx", "4096"], "fewer than one window"),
    (["perplexity", "-m", "{tmp}/missing.gguf", "-f", "{text}"], "missing.gguf' does not exist"),
    (["perplexity", "-m", "{model}", "-f", "{tmp}/missing.txt"], "missing.txt: No such file"),
    (["perplexity", "-m", "{model}", "-f", "{binary}"], "not UTF-8"),
    (["perplexity", "-m", "{text}", "-f", "{text}"], "cannot load model"),
    (["info", "{tmp}/missing.gguf"], "does not exist"),
    (["info", "{text}"], "magic"),
])
def test_user_errors_are_one_line(model, tmp_path, capsys, args, msg):
    text = tmp_path / "t.txt"
    text.write_text(TEXT, encoding="utf-8")
    binary = tmp_path / "b.txt"
    binary.write_bytes(b"\xff\xfe\x00bad")
    argv = [a.format(model=model, text=text, tmp=tmp_path, binary=binary) for a in args]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"pinfer {argv[0]}: error: ") and msg in err, err
    assert "Traceback" not in err and err.count("\n") == 1


def test_bad_command_lines_exit_2(capsys):
    for argv in ([], ["frobnicate"], ["perplexity"], ["perplexity", "-m", "x", "--ctx", "many"]):
        with pytest.raises(SystemExit) as e:
            cli.main(argv)
        assert e.value.code == 2
    assert "usage: pinfer" in capsys.readouterr().err


def test_help_lists_subcommands(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for c in ("info", "quantize", "perplexity", "convert"):
        assert c in out


def test_convert_is_wired(tmp_path, capsys):
    # the real module: a directory without config.json is refused with a clear message
    assert cli.main(["convert", str(tmp_path), "-o", str(tmp_path / "x.gguf")]) == 1
    assert "config.json" in capsys.readouterr().err
    assert not (tmp_path / "x.gguf").exists()


def test_subprocess_entry_point(model, tmp_path):
    r = run_cli("info", model)
    assert r.returncode == 0 and "architecture: llama" in r.stdout
    r = run_cli("info", tmp_path / "nope.gguf")
    assert r.returncode == 1 and "Traceback" not in r.stderr and "does not exist" in r.stderr
    r = run_cli("bogus")
    assert r.returncode == 2 and "invalid choice" in r.stderr


def test_pyproject_declares_the_script():
    root = os.path.dirname(TESTS)
    with open(os.path.join(root, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    assert re.search(r'^\[project\.scripts\]\s*\npinfer = "pinfer\.cli:main"', text, re.M)


@pytest.mark.network
def test_perplexity_defaults_to_austen(model, capsys):
    from pinfer.datasets import austen

    assert cli.main(["perplexity", "-m", model, "--ctx", "32", "--max-windows", "2"]) == 0
    last = capsys.readouterr().out.splitlines()[-2]
    ppl, _, n = perplexity(model, austen()[:5000], n_ctx=32, max_windows=2)
    assert last.startswith(f"final: ppl = {ppl:.4f} ") and last.endswith(f"over {n} tokens")
