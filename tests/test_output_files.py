"""Output files of the tools (pinfer-quantize, pinfer convert, the Python
writers): a target that is not a regular file is refused and left as it was,
an output that is one of the inputs is refused, new files get the umask's
permissions, and a killed or failed run leaves no temporary file (and no
orphaned child process). See python/pinfer/outfile.py and gguf_writer_write."""
import glob
import os
import signal
import stat
import subprocess
import sys
import time

import numpy as np
import pytest

import tinymodel
from conftest import TINY_1L
from pinfer import _core, outfile  # noqa: E402
from pinfer.cli import find_tool  # noqa: E402
from pinfer.cli import main as cli_main

TESTS = os.path.dirname(os.path.abspath(__file__))
# the conftest fixture model: a one-layer tiny llama
MODEL_SEED, MODEL_SHAPE = 0, TINY_1L


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("hf") / "model")
    os.makedirs(d)
    tinymodel.write_bpe_tokenizer(d, "gpt2")
    hf = tinymodel.make_hf_model(n_embd=32, n_layer=1, n_head=2, n_ff=64, seed=2)
    hf.config.architectures = ["LlamaForCausalLM"]
    hf.save_pretrained(d)
    return d


def quantize(model, out, typ="q8_0"):
    return subprocess.run([find_tool("pinfer-quantize"), model, str(out), typ], capture_output=True, text=True,
                          timeout=120)


def leftovers(d):
    return [p for p in os.listdir(d) if ".tmp" in p]


def special_targets(tmp_path):
    """name -> (path, kind word in the message) of non-regular targets."""
    t = {}
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    t["fifo"] = (fifo, "FIFO")
    target = tmp_path / "victim.gguf"
    target.write_bytes(b"keep me")
    link = tmp_path / "link.gguf"
    os.symlink(target, link)
    t["symlink"] = (link, "symbolic link")
    d = tmp_path / "adir"
    d.mkdir()
    t["directory"] = (d, "directory")
    if os.geteuid() == 0:  # a device node of our own (never /dev/null: a regression would replace it)
        dev = tmp_path / "null"
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        t["device"] = (dev, "device")
    return t


def assert_untouched(path, before):
    st = os.lstat(path)
    assert (st.st_mode, st.st_ino) == before, f"{path} was replaced"


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory", "device"])
def test_quantize_refuses_special_targets(model, tmp_path, kind):
    t = special_targets(tmp_path)
    if kind not in t:
        pytest.skip("creating a device node needs root")
    path, word = t[kind]
    st = os.lstat(path)
    r = quantize(model, path)
    assert r.returncode != 0 and word in r.stderr and "refusing" in r.stderr, r.stderr
    assert_untouched(path, (st.st_mode, st.st_ino))
    assert (tmp_path / "victim.gguf").read_bytes() == b"keep me"
    assert not leftovers(tmp_path)


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory", "device"])
def test_convert_refuses_special_targets(hf_dir, tmp_path, kind, capsys):
    t = special_targets(tmp_path)
    if kind not in t:
        pytest.skip("creating a device node needs root")
    path, word = t[kind]
    st = os.lstat(path)
    rc = cli_main(["convert", hf_dir, "-o", str(path), "--type", "f32", "--no-progress"])
    err = capsys.readouterr().err
    assert rc != 0 and word in err, err
    assert_untouched(path, (st.st_mode, st.st_ino))
    assert not leftovers(tmp_path)


def test_gguf_writer_refuses_special_targets(tmp_path):
    """The C writer itself (every GGUF writer in the package goes through it)."""
    for path, word in special_targets(tmp_path).values():
        st = os.lstat(path)
        w = _core.GGUFWriter()
        w.add("general.architecture", "llama", _core.GGUF_TYPE_STRING)
        with pytest.raises((OSError, RuntimeError, ValueError), match=word):
            w.write(str(path))
        assert_untouched(path, (st.st_mode, st.st_ino))
    assert not leftovers(tmp_path)


def test_convert_refuses_its_own_input(hf_dir, capsys):
    weights = glob.glob(os.path.join(hf_dir, "*.safetensors"))[0]
    before = open(weights, "rb").read()
    rc = cli_main(["convert", hf_dir, "-o", weights, "--type", "f32", "--no-progress"])
    err = capsys.readouterr().err
    assert rc != 0 and "input" in err, err
    assert open(weights, "rb").read() == before
    assert not leftovers(hf_dir)


def test_quantize_refuses_its_own_input(model, tmp_path):
    link = tmp_path / "same.gguf"
    os.link(model, link)  # another name for the same file
    r = quantize(model, link)
    assert r.returncode != 0 and "input" in r.stderr, r.stderr


@pytest.mark.parametrize("cmd", [
    ["place", "{m}", "--freq", "{m}", "-o", "{m}", "--budget", "1"],
    ["calibrate", "{m}", "--target-sparsity", "0.5", "-o", "{m}"],
    ["solve", "-m", "{m}", "--json", "{m}"],
])
def test_other_tools_refuse_their_input_as_output(model, cmd, capsys):
    before = open(model, "rb").read()
    rc = cli_main([a.format(m=model) for a in cmd])
    err = capsys.readouterr().err
    assert rc != 0 and "is the input file" in err, err
    assert open(model, "rb").read() == before


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o027])
def test_new_files_follow_the_umask(model, hf_dir, tmp_path, mask):
    old = os.umask(mask)
    try:
        q = tmp_path / "q.gguf"
        assert quantize(model, q).returncode == 0
        c = tmp_path / "c.gguf"
        assert cli_main(["convert", hf_dir, "-o", str(c), "--type", "f32", "--no-progress"]) == 0
        n = tmp_path / "x.npz"
        with outfile.atomic_output(str(n)) as tmp, open(tmp, "wb") as f:
            np.savez(f, a=np.arange(3))
    finally:
        os.umask(old)
    for p in (q, c, n):
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o666 & ~mask, (p, oct(os.stat(p).st_mode))
    assert np.load(n)["a"].tolist() == [0, 1, 2]


def test_failed_write_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError):
        with outfile.atomic_output(str(tmp_path / "o.bin")) as tmp:
            open(tmp, "wb").write(b"partial")
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []
    assert not outfile.pending()


def wrapper_cmd(*args):
    """`pinfer ...` in a child Python that loads this build (as conftest does)."""
    code = (f"import sys; sys.path.insert(0, {TESTS!r}); import conftest; from pinfer.cli import main; "
            f"sys.exit(main({list(args)!r}))")
    return [sys.executable, "-c", code]


def wait_for_temp(d, proc, timeout=60):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if leftovers(d):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.0005)
    return False


def children_of(pid):
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    out.append(int(p))
            except OSError:
                pass
    return out


def pid_alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A model whose q8_0 output takes long enough to write that a signal lands mid-write:
    many layers of wide matrices (the write of each tensor is a separate system call)."""
    p = str(tmp_path_factory.mktemp("big") / "big.gguf")
    hf = tinymodel.make_hf_model(n_embd=256, n_layer=12, n_head=4, n_ff=1024, seed=3)
    tinymodel.write_gguf(hf, p)
    return p


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_quantize_killed_mid_write_leaves_nothing(big, tmp_path, sig):
    out = tmp_path / "o.gguf"
    p = subprocess.Popen([find_tool("pinfer-quantize"), big, str(out), "f32"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    assert wait_for_temp(tmp_path, p), "the write finished before the signal could land"
    p.send_signal(sig)
    p.wait(timeout=60)
    assert p.returncode == -sig
    assert not leftovers(tmp_path) and not out.exists(), os.listdir(tmp_path)


def test_killed_wrapper_takes_its_child_along(big, tmp_path):
    """SIGKILL of the `pinfer quantize` wrapper: the pinfer-quantize child gets
    SIGTERM (parent-death signal), stops, and removes its temporary file."""
    out = tmp_path / "o.gguf"
    p = subprocess.Popen(wrapper_cmd("quantize", big, str(out), "f32"), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=dict(os.environ))
    t0 = time.monotonic()
    kids = []
    while not kids and time.monotonic() - t0 < 60:
        kids = children_of(p.pid)
        time.sleep(0.001)
    assert kids, "the wrapper never started pinfer-quantize"
    p.kill()
    p.wait(timeout=30)
    t0 = time.monotonic()
    while any(pid_alive(k) for k in kids) and time.monotonic() - t0 < 30:
        time.sleep(0.01)
    assert not any(pid_alive(k) for k in kids), "pinfer-quantize outlived its wrapper"
    time.sleep(0.1)
    assert not out.exists() and not leftovers(tmp_path), os.listdir(tmp_path)


def test_terminated_wrapper_stops_its_child(big, tmp_path):
    out = tmp_path / "o.gguf"
    p = subprocess.Popen(wrapper_cmd("quantize", big, str(out), "f32"), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, env=dict(os.environ))
    assert wait_for_temp(tmp_path, p) or children_of(p.pid), "nothing started"
    kids = children_of(p.pid)
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)
    assert p.returncode == 128 + signal.SIGTERM, p.stderr.read()
    assert not any(pid_alive(k) for k in kids)
    assert not out.exists() and not leftovers(tmp_path), os.listdir(tmp_path)


def test_convert_terminated_leaves_nothing(hf_dir, tmp_path):
    """SIGTERM while `pinfer convert` writes: the temporary file is removed."""
    out = tmp_path / "c.gguf"
    p = subprocess.Popen(wrapper_cmd("convert", hf_dir, "-o", str(out), "--type", "f32", "--no-progress"),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert wait_for_temp(tmp_path, p), "convert finished before the signal could land"
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)
    assert p.returncode == 128 + signal.SIGTERM, p.stderr.read()
    assert not out.exists() and not leftovers(tmp_path), os.listdir(tmp_path)


def test_signal_as_the_temporary_file_appears(tmp_path, monkeypatch):
    """A SIGTERM that lands the moment mkstemp has created the file (where the
    race-y tests above send it) is held until the file is registered, then
    raised: the cleanup removes the file."""
    real = outfile.tempfile.mkstemp

    def mkstemp_then_signal(*a, **k):
        r = real(*a, **k)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)  # Python code runs here: an unheld handler would raise now
        return r

    monkeypatch.setattr(outfile.tempfile, "mkstemp", mkstemp_then_signal)
    old = outfile.install_signal_handlers()
    try:
        with pytest.raises(outfile.Terminated):
            with outfile.atomic_output(str(tmp_path / "o.bin")) as tmp:
                open(tmp, "wb").write(b"never finished")
                pytest.fail("the held signal should have been raised before the body")
    finally:
        outfile.restore_signal_handlers(old)
    assert os.listdir(tmp_path) == [] and not outfile.pending()
