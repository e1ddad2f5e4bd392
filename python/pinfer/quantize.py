"""``pinfer quantize``: re-type a GGUF model's weights (runs the pinfer-quantize tool)."""
from __future__ import annotations

import argparse
import sys

from ._util import find_tool, run_child

__all__ = ["add_parser", "main"]


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("quantize", help="re-type a GGUF model's weights (runs pinfer-quantize)",
                              description="Rewrite a GGUF model with its weight matrices in TYPE; "
                                          "'pinfer-quantize --help' lists the types and presets.")
    p.add_argument("input", help="input GGUF file")
    p.add_argument("output", help="output GGUF file (written atomically)")
    p.add_argument("type", help="f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_K q3_K q4_K q5_K q6_K, "
                                "or a preset: Q3_K_M Q4_K_S Q4_K_M Q5_K_S Q5_K_M")
    p.add_argument("-t", "--threads", type=int, default=None, help="worker threads (default: all cores)")
    p.add_argument("--pure", action="store_true", help="every weight matrix in TYPE exactly")
    p.set_defaults(func=main)
    return p


def main(args) -> int:
    exe = find_tool("pinfer-quantize")
    cmd = [exe, args.input, args.output, args.type]
    if args.threads is not None:
        cmd += ["--threads", str(args.threads)]
    if args.pure:
        cmd.append("--pure")
    sys.stdout.flush()
    sys.stderr.flush()
    return run_child(cmd)  # the tool prints its own progress and errors
