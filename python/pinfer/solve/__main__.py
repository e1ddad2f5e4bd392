"""python -m pinfer.solve --model ... (without the pinfer dispatcher)."""
import argparse
import sys

from .cli import add_parser

ap = argparse.ArgumentParser(prog="pinfer")
add_parser(ap.add_subparsers())
a = ap.parse_args(["solve"] + sys.argv[1:])
sys.exit(a.func(a))
