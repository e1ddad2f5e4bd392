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
import importlib
import os
import sys
from typing import List, Optional

from ._util import UserError, find_tool

__all__ = ["main", "find_tool", "build_parser", "UserError", "COMMANDS"]

# The modules of the subcommands, in --help order: each has add_parser(subparsers),
# which registers its command with func=its main(args). Heavy imports (torch,
# transformers, highspy) wait inside each module until its command runs.
COMMANDS = ("info", "quantize", "perplexity", "convert", "solve", "profile", "predictors", "place", "calibrate",
            "server.cli")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pinfer", description="pinfer: local LLM inference tools")
    parser.add_argument("--version", action="version", version=f"pinfer {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(f".{name}", __package__).add_parser(sub)
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
    except (UserError, OSError, ValueError, RuntimeError) as e:  # user errors; others are bugs: traceback
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
