"""The ``pinfer`` command line: one entry point, one subcommand per tool.

    pinfer info model.gguf
    pinfer quantize in.gguf out.gguf Q4_K_M [--threads N] [--pure]
    pinfer perplexity -m model.gguf [-f text.txt] [--ctx 512] [--stride S] ...
    pinfer convert HF_DIR -o model.gguf [--type f16|q8_0|...]
    pinfer solve -m model.gguf --freq freq.npz --budget 8 [--gpu rtx4090] ...
    pinfer profile HF_DIR --corpus PATH|austen --tokens N -o stats.npz [--plots DIR] [--dump DIR]
    pinfer train-predictors HF_DIR --data DIR --gguf base.gguf -o out.gguf [--recall 0.95]
    pinfer place model.gguf --freq stats.npz -o placed.gguf --budget 4 8 [--hw rtx4090] [--plot P.png]

User errors (missing files, bad values) print one line ``pinfer <cmd>: error: ...``
and exit with status 1; bad command lines exit with status 2 (argparse).
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
from typing import List, Optional

__all__ = ["main", "find_tool", "build_parser"]


class UserError(Exception):
    """An error caused by the user's input: printed without a traceback."""


# ---------------------------------------------------------------- executables

def find_tool(name: str) -> str:
    """Path of a pinfer executable (e.g. ``pinfer-quantize``).

    Looks in $PINFER_BUILD_DIR (a CMake build directory) when set, then next to
    this Python's scripts (where pip installs them), then on PATH."""
    build = os.environ.get("PINFER_BUILD_DIR")
    if build:
        p = os.path.join(os.path.abspath(build), name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    for scheme_dir in {sysconfig.get_path("scripts"), os.path.dirname(sys.executable)}:
        if scheme_dir:
            p = os.path.join(scheme_dir, name)
            if os.path.isfile(p) and os.access(p, os.X_OK):
                return p
    p = shutil.which(name)
    if p:
        return p
    where = f" (not in PINFER_BUILD_DIR={build})" if build else ""
    raise UserError(f"cannot find the '{name}' executable{where}: install pinfer with pip, "
                    "or set PINFER_BUILD_DIR to a CMake build directory")


# ---------------------------------------------------------------- quantize

def _add_quantize(sub) -> None:
    p = sub.add_parser("quantize", help="re-type a GGUF model's weights (runs pinfer-quantize)",
                       description="Rewrite a GGUF model with its weight matrices in TYPE; "
                                   "'pinfer-quantize --help' lists the types and presets.")
    p.add_argument("input", help="input GGUF file")
    p.add_argument("output", help="output GGUF file (written atomically)")
    p.add_argument("type", help="f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_K q3_K q4_K q5_K q6_K, "
                                "or a preset: Q3_K_M Q4_K_S Q4_K_M Q5_K_S Q5_K_M")
    p.add_argument("-t", "--threads", type=int, default=None, help="worker threads (default: all cores)")
    p.add_argument("--pure", action="store_true", help="every weight matrix in TYPE exactly")
    p.set_defaults(func=_quantize)


def _quantize(args) -> int:
    exe = find_tool("pinfer-quantize")
    cmd = [exe, args.input, args.output, args.type]
    if args.threads is not None:
        cmd += ["--threads", str(args.threads)]
    if args.pure:
        cmd.append("--pure")
    sys.stdout.flush()
    sys.stderr.flush()
    return run_child(cmd)  # the tool prints its own progress and errors


def _die_with_parent(parent: int) -> None:
    """In the child before exec: SIGTERM when the parent dies, even by SIGKILL
    (Linux PR_SET_PDEATHSIG), so no orphan keeps writing the output."""
    try:
        import ctypes

        # The wrapper's Python handlers are inherited until exec: one of them would
        # swallow a SIGTERM that lands before exec. The default action kills the child.
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, 15, 0, 0, 0)  # PR_SET_PDEATHSIG = 1, SIGTERM = 15
        if os.getppid() != parent:  # the parent died before prctl took effect (reparented)
            os._exit(143)
    except Exception:
        pass


def child_preexec():
    if not sys.platform.startswith("linux"):
        return None
    parent = os.getpid()
    return lambda: _die_with_parent(parent)


def run_child(cmd: List[str]) -> int:
    """Run a tool; an interrupted or terminated wrapper stops it (it removes
    its own temporary file on SIGTERM) and waits for it before returning."""
    p = subprocess.Popen(cmd, preexec_fn=child_preexec())
    try:
        return p.wait()
    except BaseException:
        p.terminate()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        raise


# ---------------------------------------------------------------- info

# llama.cpp's general.file_type ids (facts of the GGUF ecosystem).
FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
              11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
              17: "Q5_K_M", 18: "Q6_K", 32: "BF16"}


def _fmt_value(v, limit: int = 8) -> str:
    if isinstance(v, (bytes, bytearray)):
        v = v.decode("utf-8", errors="replace")
    if isinstance(v, str):
        return repr(v if len(v) <= 80 else v[:77] + "...")
    if isinstance(v, float):
        return f"{v:.7g}"  # metadata floats are mostly float32
    try:
        n = len(v)
    except TypeError:
        return str(v)
    items = list(v[:limit]) if n > limit else list(v)
    body = ", ".join(_fmt_value(x) for x in items)
    return f"[{body}{', ...' if n > limit else ''}] ({n} items)" if n > limit else f"[{body}]"


def _add_info(sub) -> None:
    p = sub.add_parser("info", help="summarise a GGUF model file",
                       description="Print a GGUF model's architecture, hyperparameters, tensor types "
                                   "and pinfer's sparse/placement metadata.")
    p.add_argument("model", help="GGUF file")
    p.set_defaults(func=_info)


def _info(args) -> int:
    from . import _core

    if not os.path.exists(args.model):
        raise UserError(f"model file '{args.model}' does not exist")
    r = _core.GGUFReader(args.model)
    types = r.types
    keys = r.keys
    scalar = lambda k, d=None: r.get(k, d) if k in types and types[k] != _core.GGUF_TYPE_ARRAY \
        and not isinstance(types[k], tuple) else d
    arch = scalar("general.architecture", "?")
    if isinstance(arch, bytes):
        arch = arch.decode("utf-8", "replace")
    print(f"file:         {args.model} ({r.file_size / 2**20:.2f} MiB, GGUF v{r.version})")
    name = scalar("general.name")
    if name is not None:
        print(f"name:         {name.decode('utf-8', 'replace') if isinstance(name, bytes) else name}")
    print(f"architecture: {arch}")
    ft = scalar("general.file_type")
    if ft is not None:
        print(f"file type:    {FILE_TYPES.get(int(ft), 'unknown')} ({int(ft)})")

    hp = [k for k in keys if k.startswith(f"{arch}.")]
    if hp:
        print("hyperparameters:")
        for k in hp:
            print(f"  {k[len(arch) + 1:]:<34} {_fmt_value(r.get(k))}")
    tok_model = scalar("tokenizer.ggml.model")
    if tok_model is not None or "tokenizer.ggml.tokens" in types:
        n_tok = None
        if "tokenizer.ggml.tokens" in types:
            n_tok = len(r.get("tokenizer.ggml.tokens"))
        tm = tok_model.decode() if isinstance(tok_model, bytes) else tok_model
        print(f"tokenizer:    {tm or '?'}" + (f", {n_tok} tokens" if n_tok is not None else "")
              + (", chat template" if "tokenizer.chat_template" in types else ""))

    tensors = r.tensors
    by_type = {}
    n_params = 0
    for t in tensors:
        n = 1
        for d in t.ne:
            n *= d
        n_params += n
        name_t = _core.type_info(t.type)["name"] if _type_known(_core, t.type) else f"type {t.type}"
        c = by_type.setdefault(name_t, [0, 0, 0])
        c[0] += 1
        c[1] += n
        c[2] += t.nbytes
    total = sum(c[2] for c in by_type.values())
    print(f"tensors:      {len(tensors)}, {n_params / 1e6:.2f} M parameters, {total / 2**20:.2f} MiB")
    print(f"  {'type':<6} {'count':>6} {'params':>12} {'MiB':>10} {'share':>6}")
    for tn, (cnt, n, b) in sorted(by_type.items(), key=lambda kv: -kv[1][2]):
        print(f"  {tn:<6} {cnt:>6} {n:>12} {b / 2**20:>10.2f} {100 * b / max(total, 1):>5.1f}%")

    sparse_keys = [k for k in keys if k.startswith("pinfer.") or k.startswith("powerinfer.")]
    groups = {"ffn_freq": 0, "fc1/fc2 (predictor)": 0, "ffn_down_t": 0, "gpu_idx/gpu_bucket": 0}
    for t in tensors:
        part = t.name.split(".")
        kind = part[2] if len(part) > 2 and part[0] == "blk" else ""
        if kind == "ffn_freq":
            groups["ffn_freq"] += 1
        elif kind in ("fc1", "fc2"):
            groups["fc1/fc2 (predictor)"] += 1
        elif kind == "ffn_down_t":
            groups["ffn_down_t"] += 1
        elif kind in ("gpu_idx", "gpu_bucket"):
            groups["gpu_idx/gpu_bucket"] += 1
    if sparse_keys or any(groups.values()):
        print("sparse / placement:")
        for k in sparse_keys:
            print(f"  {k:<36} {_fmt_value(r.get(k))}")
        for g, n in groups.items():
            if n:
                print(f"  {n} {g} tensor(s)")
    else:
        print("sparse / placement: none")
    return 0


def _type_known(core, t: int) -> bool:
    try:
        core.type_info(t)
        return True
    except Exception:
        return False


# ---------------------------------------------------------------- convert

def _add_convert(sub) -> None:
    from . import convert  # imports only numpy/gguf at module level

    convert.add_parser(sub)


def _add_solve(sub) -> None:
    from . import solve  # highspy is imported when a solve runs

    solve.add_parser(sub)


def _add_profile(sub) -> None:
    from . import profile  # torch/transformers are imported when a profile runs

    profile.add_parser(sub)


def _add_train(sub) -> None:
    from . import predictors  # torch is imported when training runs

    predictors.add_parser(sub)


def _add_place(sub) -> None:
    from . import place  # highspy is imported when a solve runs

    place.add_parser(sub)


def _add_calibrate(sub) -> None:
    from . import calibrate  # numpy + the extension only

    calibrate.add_parser(sub)


def _add_serve(sub) -> None:
    from .server import cli as server_cli  # fastapi/uvicorn are imported when the server starts

    server_cli.add_parser(sub)


# ---------------------------------------------------------------- main

def build_parser() -> argparse.ArgumentParser:
    from . import perplexity

    parser = argparse.ArgumentParser(prog="pinfer", description="pinfer: local LLM inference tools")
    parser.add_argument("--version", action="version", version=f"pinfer {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    _add_info(sub)
    _add_quantize(sub)
    perplexity.add_parser(sub)
    _add_convert(sub)
    _add_solve(sub)
    _add_profile(sub)
    _add_train(sub)
    _add_place(sub)
    _add_calibrate(sub)
    _add_serve(sub)
    return parser


def _version() -> str:
    try:
        from . import __version__

        return __version__
    except Exception:
        return "?"


# Per command, the arguments that name files it writes and those it reads: an
# output must be a regular file (or absent) and none of the inputs (outfile.py).
FILE_ARGS = {
    "convert": (("output",), ("hf_dir",)),
    "quantize": (("output",), ("input",)),
    "place": (("output", "plot"), ("model", "freq")),
    "train-predictors": (("output", "report"), ("model", "gguf", "data")),
    "calibrate": (("out",), ("model", "file")),
    "solve": (("json", "plot", "write_gguf"), ("model", "freq", "hw")),
    "profile": (("output",), ("model", "corpus")),
}


def _inputs_of(paths: List[str]) -> List[str]:
    """Input paths, with the files of input directories (a model directory, a dump)."""
    out = []
    for p in paths:
        if os.path.isdir(p):
            out += [os.path.join(p, n) for n in os.listdir(p) if os.path.isfile(os.path.join(p, n))]
        else:
            out.append(p)
    return out


def check_file_args(args) -> None:
    from .outfile import check_output

    outs, ins = FILE_ARGS.get(args.command, ((), ()))
    inputs = _inputs_of([getattr(args, a) for a in ins if isinstance(getattr(args, a, None), str)])
    for a in outs:
        v = getattr(args, a, None)
        if isinstance(v, str):
            check_output(v, inputs, what="--" + a.replace("_", "-") if a not in ("output",) else "output")


def main(argv: Optional[List[str]] = None) -> int:
    from .outfile import Terminated, install_signal_handlers, restore_signal_handlers

    parser = build_parser()
    args = parser.parse_args(argv)
    old_handlers = install_signal_handlers()  # SIGTERM/SIGHUP clean up as Ctrl-C does
    try:
        check_file_args(args)
        rc = args.func(args)
    except KeyboardInterrupt:
        print(f"pinfer {args.command}: interrupted", file=sys.stderr)
        return 130
    except Terminated as e:
        print(f"pinfer {args.command}: terminated ({e})", file=sys.stderr)
        return 128 + e.signum
    except (UserError, OSError, ValueError, RuntimeError, TypeError) as e:
        msg = str(e) or type(e).__name__
        if isinstance(e, OSError) and e.filename and e.strerror:
            msg = f"{e.filename}: {e.strerror}"
        print(f"pinfer {args.command}: error: {msg}", file=sys.stderr)
        return 1
    finally:
        restore_signal_handlers(old_handlers)
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
