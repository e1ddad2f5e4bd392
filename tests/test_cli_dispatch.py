"""How `pinfer` registers and dispatches its subcommands (python/pinfer/cli.py)."""
import argparse
import importlib

import pytest

from pinfer import cli


def test_every_command_module_registers_its_main():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    funcs = {name: p.get_default("func") for name, p in sub.choices.items()}
    mains = {importlib.import_module(f"pinfer.{m}").main for m in cli.COMMANDS}
    assert len(funcs) == len(cli.COMMANDS)
    assert set(funcs.values()) == mains
    assert {"info", "quantize", "solve", "place", "calibrate", "train-predictors"} <= set(funcs)


def test_user_errors_exit_1_with_one_line(tmp_path, capsys):
    assert cli.main(["info", str(tmp_path / "missing.gguf")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("pinfer info: error: ") and "missing.gguf" in err and "Traceback" not in err


def test_a_bug_is_not_reported_as_a_user_error(monkeypatch, tmp_path):
    from pinfer import info

    def broken(args):
        raise TypeError("unsupported operand type(s)")

    monkeypatch.setattr(info, "main", broken)
    with pytest.raises(TypeError, match="unsupported operand"):
        cli.main(["info", str(tmp_path / "m.gguf")])
